//! Encoding: a builder that appends one message to an output buffer (for
//! instance a connection's write buffer, so several answers leave in one
//! write), writing each AVP in place and back-filling lengths.

use super::avp::AvpCode;
use super::error::DiameterError;
use super::header::{Header, FLAG_E, FLAG_P, FLAG_R, FLAG_T, HEADER_LEN, VERSION};
use super::message::Message;
use super::value::unix_to_ntp;
use crate::dict::avp;
use bytes::{BufMut, BytesMut};
use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

/// Writes one message at the end of `buf`. Call [`MessageBuilder::finish`]
/// to back-fill the length; dropping the builder without it leaves the
/// partial message in the buffer, so always finish (or truncate).
pub struct MessageBuilder<'b> {
    buf: &'b mut BytesMut,
    start: usize,
}

/// Where a Grouped AVP began, to back-fill its length.
#[must_use = "pass the mark to end_group"]
pub struct GroupMark(usize);

impl<'b> MessageBuilder<'b> {
    /// Starts a message with the given header fields (length filled in by `finish`).
    pub fn new(
        buf: &'b mut BytesMut,
        flags: u8,
        command_code: u32,
        application_id: u32,
        hop_by_hop: u32,
        end_to_end: u32,
    ) -> MessageBuilder<'b> {
        let start = buf.len();
        let h = Header {
            version: VERSION,
            length: 0,
            flags,
            command_code,
            application_id,
            hop_by_hop,
            end_to_end,
        };
        buf.reserve(512);
        buf.put_slice(&h.encode());
        MessageBuilder { buf, start }
    }

    /// Starts a proxiable request.
    pub fn request(
        buf: &'b mut BytesMut,
        command_code: u32,
        application_id: u32,
        hop_by_hop: u32,
        end_to_end: u32,
    ) -> MessageBuilder<'b> {
        Self::new(
            buf,
            FLAG_R | FLAG_P,
            command_code,
            application_id,
            hop_by_hop,
            end_to_end,
        )
    }

    /// Starts the answer to `req`: same command, application and ids, R and T
    /// cleared, P kept; Session-Id copied first when the request has one
    /// (RFC 6733 §6.2). Add Result-Code and Origin-Host/Realm next.
    pub fn answer(buf: &'b mut BytesMut, req: &Message) -> MessageBuilder<'b> {
        let flags = req.flags() & FLAG_P;
        let mut b = Self::new(
            buf,
            flags,
            req.command_code(),
            req.application_id(),
            req.hop_by_hop(),
            req.end_to_end(),
        );
        if let Ok(Some(sid)) = req.find(avp::SESSION_ID) {
            b.raw_avp(sid.raw());
        }
        b
    }

    /// The complete error answer to `req` (RFC 6733 §7.2): E bit for
    /// protocol errors, Result-Code, Origin-Host/Realm, Error-Message and
    /// Failed-AVP when known, Proxy-Info copied.
    pub fn error_answer(
        buf: &'b mut BytesMut,
        req: &Message,
        origin_host: &str,
        origin_realm: &str,
        err: &DiameterError,
    ) -> usize {
        let mut b = Self::answer(buf, req);
        if err.is_protocol_error() {
            b.set_flags(b.flags() | FLAG_E);
        }
        b.u32(avp::RESULT_CODE, err.result_code)
            .str(avp::ORIGIN_HOST, origin_host)
            .str(avp::ORIGIN_REALM, origin_realm);
        if !err.message.is_empty() {
            b.str(avp::ERROR_MESSAGE, &err.message);
        }
        if let Some(f) = &err.failed_avp {
            b.failed_avp(f);
        }
        b.proxy_info_from(req);
        b.finish()
    }

    /// Current header flags.
    pub fn flags(&self) -> u8 {
        self.buf[self.start + 4]
    }
    /// Replaces the header flags.
    pub fn set_flags(&mut self, flags: u8) -> &mut Self {
        self.buf[self.start + 4] = flags;
        self
    }
    /// Sets the T flag (a retransmission).
    pub fn set_retransmit(&mut self) -> &mut Self {
        self.set_flags(self.flags() | FLAG_T)
    }

    /// The header's End-to-End Identifier.
    pub fn end_to_end(&self) -> u32 {
        let at = self.start + 16;
        u32::from_be_bytes([
            self.buf[at],
            self.buf[at + 1],
            self.buf[at + 2],
            self.buf[at + 3],
        ])
    }

    /// Replaces the End-to-End Identifier: a retransmission keeps the
    /// original request's (RFC 6733 §3), which is how the server and the
    /// agents between recognise it as a duplicate.
    pub fn set_end_to_end(&mut self, end_to_end: u32) -> &mut Self {
        let at = self.start + 16;
        self.buf[at..at + 4].copy_from_slice(&end_to_end.to_be_bytes());
        self
    }

    /// The AVP header for `data_len` bytes of data, and its length (8, or
    /// 12 with a Vendor-ID).
    #[inline]
    fn header(code: AvpCode, data_len: usize) -> ([u8; 12], usize) {
        let hl = if code.vendor != 0 { 12 } else { 8 };
        let mut h = [0u8; 12];
        h[..4].copy_from_slice(&code.code.to_be_bytes());
        let len = (hl + data_len) as u32;
        h[4..8].copy_from_slice(&len.to_be_bytes());
        h[4] = code.flags();
        h[8..].copy_from_slice(&code.vendor.to_be_bytes());
        (h, hl)
    }

    #[inline]
    fn avp_header(&mut self, code: AvpCode, data_len: usize) {
        let (h, hl) = Self::header(code, data_len);
        // Constant-length copies compile to a couple of moves.
        if hl == 12 {
            self.buf.extend_from_slice(&h);
        } else {
            self.buf.extend_from_slice(&h[..8]);
        }
    }

    #[inline]
    fn pad(&mut self) {
        let n = (4 - (self.buf.len() - self.start) % 4) % 4;
        self.buf.extend_from_slice(&[0u8; 3][..n]);
    }

    /// A fixed-size value (4 or 8 bytes, so no padding): the whole AVP is
    /// assembled on the stack and appended with one copy.
    #[inline]
    fn fixed<const N: usize>(&mut self, code: AvpCode, v: [u8; N]) -> &mut Self {
        debug_assert!(N % 4 == 0 && (self.buf.len() - self.start) % 4 == 0);
        let (h, hl) = Self::header(code, N);
        let mut a = [0u8; 20];
        a[..12].copy_from_slice(&h);
        if hl == 12 {
            a[12..12 + N].copy_from_slice(&v);
            self.buf.extend_from_slice(&a[..12 + N]);
        } else {
            a[8..8 + N].copy_from_slice(&v);
            self.buf.extend_from_slice(&a[..8 + N]);
        }
        self
    }

    /// An AVP with raw data (OctetString and anything pre-encoded).
    #[inline]
    pub fn bytes(&mut self, code: AvpCode, data: &[u8]) -> &mut Self {
        let hl = if code.vendor != 0 { 12 } else { 8 };
        // One capacity check for header, data and padding.
        self.buf.reserve(hl + data.len() + 3);
        self.avp_header(code, data.len());
        self.buf.extend_from_slice(data);
        self.pad();
        self
    }
    /// UTF8String, DiameterIdentity, DiameterURI, IPFilterRule.
    #[inline]
    pub fn str(&mut self, code: AvpCode, s: &str) -> &mut Self {
        self.bytes(code, s.as_bytes())
    }
    /// Unsigned32 (and Time as raw NTP seconds).
    #[inline]
    pub fn u32(&mut self, code: AvpCode, v: u32) -> &mut Self {
        self.fixed(code, v.to_be_bytes())
    }
    #[inline]
    pub fn u64(&mut self, code: AvpCode, v: u64) -> &mut Self {
        self.fixed(code, v.to_be_bytes())
    }
    /// Integer32 and Enumerated.
    #[inline]
    pub fn i32(&mut self, code: AvpCode, v: i32) -> &mut Self {
        self.fixed(code, v.to_be_bytes())
    }
    #[inline]
    pub fn i64(&mut self, code: AvpCode, v: i64) -> &mut Self {
        self.fixed(code, v.to_be_bytes())
    }
    #[inline]
    pub fn f32(&mut self, code: AvpCode, v: f32) -> &mut Self {
        self.fixed(code, v.to_be_bytes())
    }
    #[inline]
    pub fn f64(&mut self, code: AvpCode, v: f64) -> &mut Self {
        self.fixed(code, v.to_be_bytes())
    }
    /// Address (family 1 for IPv4, 2 for IPv6).
    pub fn address(&mut self, code: AvpCode, ip: IpAddr) -> &mut Self {
        match ip {
            IpAddr::V4(a) => {
                let mut d = [0u8; 6];
                d[1] = 1;
                d[2..].copy_from_slice(&a.octets());
                self.bytes(code, &d)
            }
            IpAddr::V6(a) => {
                let mut d = [0u8; 18];
                d[1] = 2;
                d[2..].copy_from_slice(&a.octets());
                self.bytes(code, &d)
            }
        }
    }
    /// Time.
    pub fn time(&mut self, code: AvpCode, t: SystemTime) -> &mut Self {
        let unix = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        self.u32(code, unix_to_ntp(unix))
    }

    /// Opens a Grouped AVP; AVPs added until [`end_group`](Self::end_group) go inside it.
    pub fn begin_group(&mut self, code: AvpCode) -> GroupMark {
        let at = self.buf.len();
        self.avp_header(code, 0);
        GroupMark(at)
    }
    /// Closes a Grouped AVP, back-filling its length.
    pub fn end_group(&mut self, mark: GroupMark) -> &mut Self {
        let len = (self.buf.len() - mark.0) as u32;
        self.buf[mark.0 + 5..mark.0 + 8].copy_from_slice(&len.to_be_bytes()[1..]);
        self
    }
    /// A Grouped AVP whose members `f` adds.
    pub fn group(&mut self, code: AvpCode, f: impl FnOnce(&mut Self)) -> &mut Self {
        let m = self.begin_group(code);
        f(self);
        self.end_group(m)
    }

    /// Copies an already encoded AVP (header and data), padding it.
    pub fn raw_avp(&mut self, raw: &[u8]) -> &mut Self {
        self.buf.put_slice(raw);
        self.pad();
        self
    }

    /// Failed-AVP holding the encoded AVP `raw`, shortened when long
    /// ([`shorten_failed_avp`](super::failed_avp::shorten_failed_avp)) so
    /// that an error answer stays small whatever the request carried.
    pub fn failed_avp(&mut self, raw: &[u8]) -> &mut Self {
        let m = self.begin_group(avp::FAILED_AVP);
        self.raw_avp(&super::failed_avp::shorten_failed_avp(raw));
        self.end_group(m)
    }

    /// Result-Code.
    pub fn result_code(&mut self, code: u32) -> &mut Self {
        self.u32(avp::RESULT_CODE, code)
    }
    /// Experimental-Result { Vendor-Id, Experimental-Result-Code }.
    pub fn experimental_result(&mut self, vendor: u32, code: u32) -> &mut Self {
        self.group(avp::EXPERIMENTAL_RESULT, |g| {
            g.u32(avp::VENDOR_ID, vendor)
                .u32(avp::EXPERIMENTAL_RESULT_CODE, code);
        })
    }
    /// Origin-Host and Origin-Realm.
    pub fn origin(&mut self, host: &str, realm: &str) -> &mut Self {
        self.str(avp::ORIGIN_HOST, host)
            .str(avp::ORIGIN_REALM, realm)
    }
    /// Copies every Proxy-Info of `req`, in order (RFC 6733 §6.7.2).
    pub fn proxy_info_from(&mut self, req: &Message) -> &mut Self {
        for a in req.avps().flatten() {
            if a.is(avp::PROXY_INFO) {
                self.raw_avp(a.raw());
            }
        }
        self
    }

    /// Back-fills the message length; returns it. A message longer than
    /// the 24-bit Message-Length can say is refused: it is removed from the
    /// buffer (whatever was there before it stays) and never sent with a
    /// cut length. Any AVP over 24 bits lies inside such a message, so this
    /// one comparison per message also refuses every oversized AVP (and
    /// Grouped AVP) without a check per AVP on the normal path.
    pub fn try_finish(self) -> Result<usize, TooLong> {
        let len = self.buf.len() - self.start;
        if len > MAX_MESSAGE_LEN {
            self.buf.truncate(self.start);
            return Err(TooLong { len });
        }
        let l = (len as u32).to_be_bytes();
        self.buf[self.start + 1..self.start + 4].copy_from_slice(&l[1..]);
        Ok(len)
    }

    /// [`try_finish`](Self::try_finish) for messages bounded by
    /// construction (base protocol, fixed answers): an oversized one is
    /// removed from the buffer and 0 returned. Messages that carry content
    /// from outside (policy decisions, copied AVPs) use `try_finish` and
    /// answer the refusal.
    pub fn finish(self) -> usize {
        self.try_finish().unwrap_or(0)
    }
}

/// The largest Message-Length (and AVP Length) the 24-bit field holds.
pub const MAX_MESSAGE_LEN: usize = (1 << 24) - 1;

/// A message longer than [`MAX_MESSAGE_LEN`]: refused by
/// [`MessageBuilder::try_finish`], which removed it from the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TooLong {
    /// The length the message would have had.
    pub len: usize,
}

impl std::fmt::Display for TooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "message of {} bytes exceeds the 24-bit Diameter length ({MAX_MESSAGE_LEN})",
            self.len
        )
    }
}

impl std::error::Error for TooLong {}

const _: () = assert!(HEADER_LEN == 20);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::AvpCode;
    use crate::dict::{app, cmd};

    #[test]
    fn builds_padded_grouped_and_appends() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(b"prefix..");
        let mut b = MessageBuilder::request(
            &mut buf,
            cmd::DEVICE_WATCHDOG,
            app::DIAMETER_COMMON_MESSAGES,
            9,
            10,
        );
        b.origin("h", "r").group(avp::PROXY_INFO, |g| {
            g.str(avp::PROXY_HOST, "p").bytes(avp::PROXY_STATE, b"xyz");
        });
        let n = b.finish();
        assert_eq!(&buf[..8], b"prefix..");
        let m = Message::parse(buf.split_off(8).freeze()).expect("valid");
        assert_eq!(m.len(), n);
        assert_eq!(m.validate(), Ok(5));
        let pi = m.find(avp::PROXY_INFO).expect("ok").expect("present");
        assert_eq!(pi.data().len(), 12 + 12); // two AVPs each padded to 12
    }

    #[test]
    fn a_retransmission_keeps_the_end_to_end_id() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(b"prefix..");
        let mut b = MessageBuilder::request(&mut buf, 272, 16_777_238, 1, 2);
        assert_eq!(b.end_to_end(), 2);
        b.set_end_to_end(0xdead_beef).set_retransmit();
        assert_eq!(b.end_to_end(), 0xdead_beef);
        b.finish();
        let m = Message::parse(buf.split_off(8).freeze()).expect("valid");
        assert_eq!((m.hop_by_hop(), m.end_to_end()), (1, 0xdead_beef));
        assert!(m.header().is_retransmit());
    }

    #[test]
    fn fixed_and_variable_avps_are_byte_exact() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, 272, 16_777_238, 1, 2);
        b.u32(AvpCode::new(1041, 10415, false), 0x0102_0304)
            .i64(AvpCode::new(7, 0, true), -2)
            .bytes(AvpCode::new(1005, 10415, true), b"abcde");
        b.finish();
        let body = &buf[HEADER_LEN..];
        assert_eq!(
            &body[..16],
            &[0, 0, 4, 17, 0x80, 0, 0, 16, 0, 0, 0x28, 0xaf, 1, 2, 3, 4]
        );
        assert_eq!(
            &body[16..32],
            &[0, 0, 0, 7, 0x40, 0, 0, 16, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]
        );
        // 12 + 5 = 17 bytes, padded to 20.
        assert_eq!(
            &body[32..],
            &[
                0, 0, 3, 0xed, 0xc0, 0, 0, 17, 0, 0, 0x28, 0xaf, b'a', b'b', b'c', b'd', b'e', 0,
                0, 0
            ]
        );
        let m = Message::parse(buf.freeze()).expect("valid");
        assert_eq!(m.len(), HEADER_LEN + 52);
    }

    #[test]
    fn a_message_over_24_bits_is_refused_not_cut() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(b"earlier answer..");
        let mut b = MessageBuilder::request(&mut buf, 272, 16_777_238, 1, 2);
        // One AVP longer than its 24-bit Length field.
        let big = vec![7u8; MAX_MESSAGE_LEN];
        b.bytes(AvpCode::new(1005, 10415, true), &big);
        let err = b.try_finish().expect_err("over 24 bits");
        assert!(err.len > MAX_MESSAGE_LEN, "{err}");
        assert!(err.to_string().contains("24-bit"), "{err}");
        // Nothing of it is left to be sent; what was there before stays.
        assert_eq!(&buf[..], b"earlier answer..");

        // Many AVPs each under the limit, inside a Grouped one, adding up
        // to more than 24 bits: refused the same way.
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, 272, 16_777_238, 1, 2);
        let chunk = vec![1u8; 1 << 20];
        b.group(avp::PROXY_INFO, |g| {
            for _ in 0..17 {
                g.bytes(avp::PROXY_STATE, &chunk);
            }
        });
        assert!(b.try_finish().is_err());
        assert!(buf.is_empty());
        // `finish` refuses too: nothing written, 0 returned.
        let mut b = MessageBuilder::request(&mut buf, 272, 16_777_238, 1, 2);
        for _ in 0..17 {
            b.bytes(avp::PROXY_STATE, &chunk);
        }
        assert_eq!(b.finish(), 0);
        assert!(buf.is_empty());

        // Exactly at the limit is fine and parses back.
        let mut b = MessageBuilder::request(&mut buf, 272, 16_777_238, 1, 2);
        let fill = MAX_MESSAGE_LEN - HEADER_LEN - 8;
        b.bytes(AvpCode::new(1005, 0, false), &vec![0u8; fill & !3]);
        let n = b.try_finish().expect("fits");
        assert!(n <= MAX_MESSAGE_LEN);
        let m = Message::parse(buf.freeze()).expect("valid");
        assert_eq!(m.len(), n);
    }

    #[test]
    fn an_error_answer_stays_small_whatever_the_failed_avp() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, 272, 16_777_238, 1, 2);
        b.str(avp::SESSION_ID, "pcef;1;2").origin("pcef", "realm");
        b.finish();
        let req = Message::parse(buf.freeze()).expect("req");
        // A handler's error naming a 1 MiB AVP, copied whole.
        let mut huge = BytesMut::new();
        let mut h = MessageBuilder::request(&mut huge, 272, 16_777_238, 1, 2);
        h.bytes(AvpCode::new(1005, 10415, true), &vec![9u8; 1 << 20]);
        h.finish();
        let raw = huge.split_off(HEADER_LEN).freeze();
        let err = DiameterError::with_failed_avp(5004, raw.clone(), "bad value");
        let mut out = BytesMut::new();
        let n = MessageBuilder::error_answer(&mut out, &req, "pcrf", "realm", &err);
        assert!(n <= 2048, "error answer of {n} bytes");
        let ans = Message::parse(out.freeze()).expect("answer");
        assert_eq!(ans.len(), n);
        let failed = ans.find(avp::FAILED_AVP).expect("ok").expect("Failed-AVP");
        let inner: Vec<_> = failed
            .grouped()
            .collect::<Result<_, _>>()
            .expect("one whole AVP");
        assert_eq!(inner.len(), 1);
        assert_eq!((inner[0].code(), inner[0].vendor()), (1005, 10415));
        assert_eq!(inner[0].flags(), raw[4]);
        assert_eq!(inner[0].data(), &raw[12..12 + inner[0].data().len()]);
    }

    #[test]
    fn answer_copies_ids_session_and_proxy_info() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, 272, 16_777_238, 77, 88);
        b.str(avp::SESSION_ID, "pcef;1;2").origin("pcef", "realm");
        b.group(avp::PROXY_INFO, |g| {
            g.str(avp::PROXY_HOST, "dra").bytes(avp::PROXY_STATE, b"s");
        });
        b.set_retransmit();
        b.finish();
        let req = Message::parse(buf.freeze()).expect("req");

        let mut out = BytesMut::new();
        let err = DiameterError::with_failed_avp(5004, vec![0, 0, 1, 8, 0x40, 0, 0, 8], "bad");
        MessageBuilder::error_answer(&mut out, &req, "pcrf", "realm", &err);
        let ans = Message::parse(out.freeze()).expect("answer");
        assert!(!ans.is_request());
        assert_eq!(ans.flags() & (FLAG_T | FLAG_E), 0);
        assert_eq!(ans.flags() & FLAG_P, FLAG_P);
        assert_eq!((ans.hop_by_hop(), ans.end_to_end()), (77, 88));
        let first = ans.avps().next().expect("first").expect("ok");
        assert!(first.is(avp::SESSION_ID));
        let [rc, failed, pi] = ans
            .pick(&[avp::RESULT_CODE, avp::FAILED_AVP, avp::PROXY_INFO])
            .expect("ok");
        assert_eq!(rc.map(|a| a.as_u32()), Some(Ok(5004)));
        let inner = failed
            .expect("failed")
            .grouped()
            .next()
            .expect("inner")
            .expect("ok");
        assert_eq!(inner.code(), 264);
        assert!(pi.is_some());

        let mut out = BytesMut::new();
        MessageBuilder::error_answer(
            &mut out,
            &req,
            "pcrf",
            "realm",
            &DiameterError::new(3001, "x"),
        );
        let ans = Message::parse(out.freeze()).expect("answer");
        assert_eq!(ans.flags() & FLAG_E, FLAG_E);
    }
}
