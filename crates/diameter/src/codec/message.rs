//! A received message: the original bytes and accessors that read from
//! them. Nothing is decoded until asked; nothing is copied.

use super::avp::{Avp, AvpCode, AvpIter, AVP_FLAG_P};
use super::error::DiameterError;
use super::header::{Header, FLAG_E, FLAG_R, HEADER_LEN, VERSION};
use crate::dict::{self, AvpType};
use crate::result_code;
use bytes::Bytes;

/// One whole Diameter message, as received.
#[derive(Clone)]
pub struct Message {
    buf: Bytes,
}

impl Message {
    /// Wraps one framed message. Checks the header only (version, length,
    /// flag combinations); AVPs are checked as they are read.
    ///
    /// Errors carry the Result-Code to answer with: 5011 for a version other
    /// than 1, 5015 for a length that disagrees with the bytes, 3008 for an
    /// E bit on a request.
    pub fn parse(buf: Bytes) -> Result<Message, DiameterError> {
        let Some(h) = Header::decode(&buf) else {
            return Err(DiameterError::new(
                result_code::DIAMETER_INVALID_MESSAGE_LENGTH,
                "message shorter than the Diameter header",
            ));
        };
        if h.version != VERSION {
            return Err(DiameterError::new(
                result_code::DIAMETER_UNSUPPORTED_VERSION,
                "unsupported Diameter version",
            ));
        }
        if h.length as usize != buf.len() || h.length % 4 != 0 {
            return Err(DiameterError::new(
                result_code::DIAMETER_INVALID_MESSAGE_LENGTH,
                "message length field disagrees with the message",
            ));
        }
        if h.flags & FLAG_R != 0 && h.flags & FLAG_E != 0 {
            return Err(DiameterError::new(
                result_code::DIAMETER_INVALID_HDR_BITS,
                "E bit set on a request",
            ));
        }
        Ok(Message { buf })
    }

    /// The header fields.
    #[inline]
    pub fn header(&self) -> Header {
        // parse() guaranteed at least HEADER_LEN bytes.
        Header::decode(&self.buf).unwrap_or(Header {
            version: 0,
            length: 0,
            flags: 0,
            command_code: 0,
            application_id: 0,
            hop_by_hop: 0,
            end_to_end: 0,
        })
    }
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buf[4]
    }
    #[inline]
    pub fn is_request(&self) -> bool {
        self.flags() & FLAG_R != 0
    }
    #[inline]
    pub fn command_code(&self) -> u32 {
        u32::from_be_bytes([0, self.buf[5], self.buf[6], self.buf[7]])
    }
    #[inline]
    pub fn application_id(&self) -> u32 {
        u32::from_be_bytes([self.buf[8], self.buf[9], self.buf[10], self.buf[11]])
    }
    #[inline]
    pub fn hop_by_hop(&self) -> u32 {
        u32::from_be_bytes([self.buf[12], self.buf[13], self.buf[14], self.buf[15]])
    }
    #[inline]
    pub fn end_to_end(&self) -> u32 {
        u32::from_be_bytes([self.buf[16], self.buf[17], self.buf[18], self.buf[19]])
    }
    /// The message as received.
    #[inline]
    pub fn bytes(&self) -> &Bytes {
        &self.buf
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.len() == HEADER_LEN
    }

    /// Top-level AVPs in order.
    #[inline]
    pub fn avps(&self) -> AvpIter<'_> {
        AvpIter::new(&self.buf[HEADER_LEN..])
    }

    /// The first top-level AVP with this code and vendor.
    pub fn find(&self, code: AvpCode) -> Result<Option<Avp<'_>>, DiameterError> {
        self.avps().find(code)
    }

    /// One-pass selective extraction: the first occurrence of each of the
    /// given codes (the mask). Stops reading as soon as all are found, so
    /// AVPs near the front cost only the bytes up to them. No allocation.
    pub fn pick<const N: usize>(
        &self,
        codes: &[AvpCode; N],
    ) -> Result<[Option<Avp<'_>>; N], DiameterError> {
        let mut out: [Option<Avp<'_>>; N] = [None; N];
        let mut missing = N;
        let mut iter = self.avps();
        loop {
            let avp = match iter.next_avp() {
                Ok(Some(avp)) => avp,
                Ok(None) => break,
                Err(m) => return Err(iter.malformed(m)),
            };
            for (slot, code) in out.iter_mut().zip(codes) {
                if slot.is_none() && code.matches(&avp) {
                    *slot = Some(avp);
                    missing -= 1;
                    break;
                }
            }
            if missing == 0 {
                break;
            }
        }
        Ok(out)
    }

    /// Session-Id, if present (it should be the first AVP, so this is cheap).
    pub fn session_id(&self) -> Result<Option<&str>, DiameterError> {
        match self.find(dict::avp::SESSION_ID)? {
            Some(a) => a.as_str().map(Some),
            None => Ok(None),
        }
    }

    /// Full validation against the dictionary, descending into every
    /// Grouped AVP: framing, fixed lengths, UTF-8 and identities, addresses,
    /// and 5001 DIAMETER_AVP_UNSUPPORTED for an unknown AVP with the M bit.
    /// Returns the number of AVPs visited.
    pub fn validate(&self) -> Result<usize, DiameterError> {
        validate_run(self.avps(), 0)
    }
}

const MAX_GROUP_DEPTH: u32 = 16;

/// Top-level AVPs every base command allows once at most (RFC 6733 §3.2
/// ABNF: `< Session-Id >`, `{ Origin-Host }`, `{ Origin-Realm }`). A second
/// one is refused: readers that take the first and readers that take the
/// last would otherwise act on different sessions (found by fuzzing).
const ONCE_AT_TOP: [AvpCode; 3] = [
    dict::avp::SESSION_ID,
    dict::avp::ORIGIN_HOST,
    dict::avp::ORIGIN_REALM,
];

fn validate_run(mut iter: AvpIter<'_>, depth: u32) -> Result<usize, DiameterError> {
    let mut n = 0;
    let mut seen = [false; ONCE_AT_TOP.len()];
    loop {
        let avp = match iter.next_avp() {
            Ok(Some(avp)) => avp,
            Ok(None) => break,
            Err(m) => return Err(iter.malformed(m)),
        };
        n += 1;
        if depth == 0 {
            if let Some(i) = ONCE_AT_TOP.iter().position(|c| avp.is(*c)) {
                if seen[i] {
                    // §7.5: Failed-AVP holds the first instance that exceeded.
                    return Err(DiameterError::with_failed_avp(
                        result_code::DIAMETER_AVP_OCCURS_TOO_MANY_TIMES,
                        avp.failed_copy(),
                        "Session-Id, Origin-Host and Origin-Realm may appear only once",
                    ));
                }
                seen[i] = true;
            }
        }
        if avp.flags() & AVP_FLAG_P != 0 {
            // RFC 6733 §4.1: P is reserved and MUST be zero; a set P bit is
            // a flag value this protocol version does not define (§7.1.3).
            return Err(DiameterError::with_failed_avp(
                result_code::DIAMETER_INVALID_AVP_BITS,
                avp.failed_copy(),
                "AVP with the reserved P bit set",
            ));
        }
        let Some(def) = dict::avp(avp.code(), avp.vendor()) else {
            if avp.is_mandatory() {
                return Err(DiameterError::with_failed_avp(
                    result_code::DIAMETER_AVP_UNSUPPORTED,
                    avp.failed_copy(),
                    "unknown AVP with the M bit set",
                ));
            }
            continue;
        };
        match def.ty {
            AvpType::Grouped => {
                if depth >= MAX_GROUP_DEPTH {
                    return Err(avp.invalid_value("Grouped AVPs nested too deep"));
                }
                n += validate_run(avp.grouped(), depth + 1)?;
            }
            AvpType::UTF8String
            | AvpType::DiameterURI
            | AvpType::IPFilterRule
            | AvpType::QoSFilterRule => {
                avp.as_str()?;
            }
            AvpType::DiameterIdentity => {
                avp.as_identity()?;
            }
            AvpType::Address => {
                avp.as_address()?;
            }
            AvpType::Integer32
            | AvpType::Unsigned32
            | AvpType::Float32
            | AvpType::Enumerated
            | AvpType::Time => {
                avp.as_u32()?;
            }
            AvpType::Integer64 | AvpType::Unsigned64 | AvpType::Float64 => {
                avp.as_u64()?;
            }
            AvpType::OctetString => {}
        }
    }
    Ok(n)
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("header", &self.header())
            .field("len", &self.buf.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::MessageBuilder;
    use crate::dict::{app, avp, cmd};
    use bytes::BytesMut;

    fn sample() -> Message {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::CAPABILITIES_EXCHANGE, 0, 1, 2);
        b.str(avp::SESSION_ID, "s;1")
            .str(avp::ORIGIN_HOST, "a.example")
            .str(avp::ORIGIN_REALM, "example")
            .u32(avp::VENDOR_ID, 10415)
            .group(avp::VENDOR_SPECIFIC_APPLICATION_ID, |g| {
                g.u32(avp::VENDOR_ID, 10415)
                    .u32(avp::AUTH_APPLICATION_ID, 16_777_238);
            });
        b.finish();
        Message::parse(buf.freeze()).expect("valid")
    }

    #[test]
    fn header_accessors() {
        let m = sample();
        assert!(m.is_request());
        assert_eq!(m.command_code(), 257);
        assert_eq!(m.application_id(), app::DIAMETER_COMMON_MESSAGES);
        assert_eq!((m.hop_by_hop(), m.end_to_end()), (1, 2));
        assert_eq!(m.header().length as usize, m.len());
    }

    #[test]
    fn pick_finds_first_of_each_and_grouped_on_demand() {
        let m = sample();
        let [sid, host, vsa, missing] = m
            .pick(&[
                avp::SESSION_ID,
                avp::ORIGIN_HOST,
                avp::VENDOR_SPECIFIC_APPLICATION_ID,
                avp::RESULT_CODE,
            ])
            .expect("ok");
        assert_eq!(sid.map(|a| a.as_str()), Some(Ok("s;1")));
        assert_eq!(host.map(|a| a.as_identity()), Some(Ok("a.example")));
        assert!(missing.is_none());
        let inner = vsa
            .expect("vsa")
            .grouped()
            .find(avp::AUTH_APPLICATION_ID)
            .expect("ok");
        assert_eq!(inner.map(|a| a.as_u32()), Some(Ok(16_777_238)));
        assert_eq!(m.session_id(), Ok(Some("s;1")));
        assert_eq!(m.validate(), Ok(7));
    }

    #[test]
    fn header_errors() {
        let good = sample().bytes().clone();
        let mut v = good.to_vec();
        v[0] = 2;
        assert_eq!(
            Message::parse(v.into()).map_err(|e| e.result_code).err(),
            Some(5011)
        );
        let mut v = good.to_vec();
        v[3] = v[3].wrapping_add(4);
        assert_eq!(
            Message::parse(v.into()).map_err(|e| e.result_code).err(),
            Some(5015)
        );
        let mut v = good.to_vec();
        v[4] |= FLAG_E;
        assert_eq!(
            Message::parse(v.into()).map_err(|e| e.result_code).err(),
            Some(3008)
        );
        assert!(Message::parse(Bytes::from_static(&[1, 0, 0])).is_err());
    }

    #[test]
    fn validate_rejects_unknown_mandatory_avp() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, 272, 4, 1, 1);
        b.bytes(crate::codec::AvpCode::new(999_999, 0, false), b"ok");
        b.bytes(crate::codec::AvpCode::new(999_998, 0, true), b"no");
        b.finish();
        let m = Message::parse(buf.freeze()).expect("valid header");
        let e = m.validate().expect_err("unknown M avp");
        assert_eq!(e.result_code, 5001);
        assert_eq!(
            &e.failed_avp.expect("failed")[..4],
            &999_998u32.to_be_bytes()
        );
    }

    #[test]
    fn a_second_session_id_or_origin_is_5009_naming_it() {
        for (dup, value) in [
            (avp::SESSION_ID, "other;2"),
            (avp::ORIGIN_HOST, "b.example"),
            (avp::ORIGIN_REALM, "other.example"),
        ] {
            let mut buf = BytesMut::new();
            let mut b = MessageBuilder::request(&mut buf, 272, 4, 1, 1);
            b.str(avp::SESSION_ID, "s;1")
                .str(avp::ORIGIN_HOST, "a.example")
                .str(avp::ORIGIN_REALM, "example")
                .str(dup, value);
            b.finish();
            let m = Message::parse(buf.freeze()).expect("valid header");
            let e = m.validate().expect_err("duplicate");
            assert_eq!(e.result_code, 5009);
            let failed = e.failed_avp.expect("Failed-AVP");
            assert!(
                failed[8..].starts_with(value.as_bytes()),
                "Failed-AVP is the duplicate"
            );
        }
        // Inside a Grouped AVP the rule does not apply (Proxy-Info has its own).
        assert!(sample().validate().is_ok());
    }

    #[test]
    fn validate_checks_the_v_bit_against_the_dictionary() {
        // Session-Id sent with the V bit and Vendor-ID 0: 3009, not read as
        // the IETF Session-Id four bytes off.
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, 272, 4, 1, 1);
        b.bytes(
            crate::codec::AvpCode::new(263, 0, true),
            &[0, 0, 0, 0, b's', b';', b'1', 0],
        );
        b.finish();
        let mut v = buf.to_vec();
        v[HEADER_LEN + 4] |= crate::codec::AVP_FLAG_V;
        let m = Message::parse(v.into()).expect("header fine");
        let e = m.validate().expect_err("V bit with Vendor-ID 0");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_BITS);
        assert!(e.is_protocol_error(), "answered with the E bit");
        assert_eq!(m.session_id().map_err(|e| e.result_code), Err(3009));

        // A base AVP's code with a vendor's V bit, and a vendor AVP's code
        // without it, are other AVPs that the dictionary does not know:
        // 5001 with the M bit, ignored without it.
        for code in [
            crate::codec::AvpCode::new(263, 10415, true),
            crate::codec::AvpCode::new(1005, 0, true),
        ] {
            let mut buf = BytesMut::new();
            let mut b = MessageBuilder::request(&mut buf, 272, 4, 1, 1);
            b.str(avp::SESSION_ID, "s;1").bytes(code, b"abcd");
            b.finish();
            let m = Message::parse(buf.freeze()).expect("valid header");
            let e = m.validate().expect_err("unknown M avp");
            assert_eq!(e.result_code, result_code::DIAMETER_AVP_UNSUPPORTED);
            let mut buf = BytesMut::new();
            let mut b = MessageBuilder::request(&mut buf, 272, 4, 1, 1);
            b.str(avp::SESSION_ID, "s;1").bytes(
                crate::codec::AvpCode {
                    mandatory: false,
                    ..code
                },
                b"abcd",
            );
            b.finish();
            let m = Message::parse(buf.freeze()).expect("valid header");
            assert_eq!(m.validate(), Ok(2));
        }
    }

    #[test]
    fn a_huge_offending_avp_is_shortened_in_failed_avp() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, 272, 4, 1, 1);
        b.str(avp::SESSION_ID, "s;1").bytes(
            crate::codec::AvpCode::new(999_998, 0, true),
            &[7u8; 1 << 20],
        );
        b.finish();
        let m = Message::parse(buf.freeze()).expect("valid header");
        let e = m.validate().expect_err("unknown M avp");
        assert_eq!(e.result_code, 5001);
        let failed = e.failed_avp.expect("Failed-AVP");
        assert!(failed.len() <= 1024, "Failed-AVP of {} bytes", failed.len());
        assert_eq!(&failed[..4], &999_998u32.to_be_bytes());
    }

    #[test]
    fn validate_rejects_the_reserved_p_bit_with_3009() {
        let m = sample();
        let mut v = m.bytes().to_vec();
        // The first AVP (Session-Id) starts right after the header; flags at +4.
        v[HEADER_LEN + 4] |= crate::codec::AVP_FLAG_P;
        let m = Message::parse(v.into()).expect("header fine");
        let e = m.validate().expect_err("P bit");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_BITS);
        assert!(e.is_protocol_error(), "answered with the E bit");
        assert_eq!(
            &e.failed_avp.expect("Failed-AVP")[..4],
            &263u32.to_be_bytes()
        );
    }
}
