//! The decode path as one function over arbitrary bytes, shared by the
//! cargo-fuzz target (`crates/diameter/fuzz/fuzz_targets/decode.rs`) and
//! the corpus replay test (`crates/diameter/tests/suite/fuzz_corpus.rs`), so that
//! what the fuzzer explores is what CI re-checks on every input the fuzzer
//! ever kept.
//!
//! Besides "does not panic", it checks the invariants a server relies on
//! when the peer is hostile: a parsed message agrees with its length field,
//! every Failed-AVP is itself a well-formed AVP, and the error answer to any
//! request is a message that parses back.

use crate::dump::dump;
use bytes::{Bytes, BytesMut};
use diameter::codec::{frame_len, AvpIter, DiameterError, Message, MessageBuilder, FLAG_E};
use diameter::dict::avp;
use diameter::result_code;

/// The largest message the fuzzer frames; bigger than any input it makes.
const MAX_LEN: u32 = 1 << 20;

/// Frames, parses, validates, picks from and dumps `data`; answers it with
/// an error answer when it is a request and re-parses that answer. Panics
/// (a fuzzer finding) when an invariant breaks.
#[doc(hidden)]
pub fn decode_one(data: &[u8]) {
    // Framing decides which bytes form the message; when it refuses (or the
    // buffer holds less than one message) parse the whole input anyway, as
    // a datagram transport or a test would.
    let bytes = match frame_len(data, MAX_LEN) {
        Ok(Some(n)) if n <= data.len() => &data[..n],
        _ => data,
    };
    let Ok(msg) = Message::parse(Bytes::copy_from_slice(bytes)) else {
        return;
    };
    let h = msg.header();
    assert_eq!(h.length as usize, bytes.len(), "parsed length disagrees");
    assert_eq!(msg.len(), bytes.len());

    let validated = msg.validate();
    if let Err(e) = &validated {
        check_failed_avp(e);
    }

    // Selective extraction must agree with a full scan.
    match msg.pick(&[avp::SESSION_ID, avp::ORIGIN_HOST, avp::RESULT_CODE]) {
        Ok(picked) => {
            for (p, code) in
                picked
                    .iter()
                    .zip([avp::SESSION_ID, avp::ORIGIN_HOST, avp::RESULT_CODE])
            {
                let found = msg.find(code).ok().flatten();
                assert_eq!(p.map(|a| a.raw()), found.map(|a| a.raw()), "pick != find");
            }
        }
        Err(e) => check_failed_avp(&e),
    }
    let _ = msg.session_id();

    let text = dump(&msg);
    assert!(text.lines().count() >= 1, "empty dump");

    if msg.is_request() {
        let err = validated.err().unwrap_or_else(|| {
            DiameterError::new(result_code::DIAMETER_UNABLE_TO_COMPLY, "fuzz answer")
        });
        let mut out = BytesMut::new();
        let n = MessageBuilder::error_answer(&mut out, &msg, "pcrf.test", "test", &err);
        assert_eq!(n, out.len());
        let ans = match Message::parse(out.freeze()) {
            Ok(a) => a,
            Err(e) => panic!("error answer does not parse: {e}"),
        };
        assert!(!ans.is_request());
        assert_eq!(
            (ans.command_code(), ans.hop_by_hop(), ans.end_to_end()),
            (msg.command_code(), msg.hop_by_hop(), msg.end_to_end())
        );
        assert_eq!(ans.flags() & FLAG_E != 0, err.is_protocol_error());
        for a in ans.avps() {
            let a = match a {
                Ok(a) => a,
                Err(e) => panic!("error answer has a malformed AVP: {e}"),
            };
            if a.is(avp::FAILED_AVP) {
                for inner in a.grouped() {
                    if let Err(e) = inner {
                        panic!("Failed-AVP content is malformed: {e}");
                    }
                }
            }
        }
        match ans.find(avp::RESULT_CODE) {
            Ok(Some(rc)) => assert_eq!(rc.as_u32().ok(), Some(err.result_code)),
            other => panic!("error answer without a readable Result-Code: {other:?}"),
        }
        let _ = dump(&ans);
    }
}

/// RFC 6733 §7.5: a Failed-AVP holds one whole AVP; ours must frame as
/// exactly one AVP.
fn check_failed_avp(e: &DiameterError) {
    let Some(f) = &e.failed_avp else {
        return;
    };
    let mut it = AvpIter::new(f);
    match it.next() {
        Some(Ok(a)) => assert_eq!(a.raw().len(), f.len(), "Failed-AVP has trailing bytes"),
        other => panic!("Failed-AVP is not an AVP: {other:?} for {e}"),
    }
}
