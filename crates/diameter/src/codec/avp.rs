//! A borrowed view of one AVP (RFC 6733 §4.1) and an iterator over a run
//! of AVPs (a message body or a grouped AVP's data).

use super::error::DiameterError;
use crate::result_code;

/// Vendor-specific: a Vendor-ID field follows the length.
pub const AVP_FLAG_V: u8 = 0x80;
/// Mandatory: a receiver that does not understand it must reject the message.
pub const AVP_FLAG_M: u8 = 0x40;
/// Historic end-to-end security bit; must be 0 on send.
pub const AVP_FLAG_P: u8 = 0x20;

/// What names an AVP: its code and vendor id, plus whether we set the M flag
/// when we send it. Matching a received AVP looks at code and vendor only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AvpCode {
    pub code: u32,
    pub vendor: u32,
    pub mandatory: bool,
}

impl AvpCode {
    pub const fn new(code: u32, vendor: u32, mandatory: bool) -> AvpCode {
        AvpCode {
            code,
            vendor,
            mandatory,
        }
    }

    /// The flag byte we send: V when vendor-specific, M when mandatory.
    pub const fn flags(&self) -> u8 {
        let mut f = 0;
        if self.vendor != 0 {
            f |= AVP_FLAG_V;
        }
        if self.mandatory {
            f |= AVP_FLAG_M;
        }
        f
    }

    /// Whether `avp` has this code and vendor.
    #[inline]
    pub fn matches(&self, avp: &Avp<'_>) -> bool {
        avp.code == self.code && avp.vendor == self.vendor
    }
}

/// One AVP, borrowed from the message bytes.
#[derive(Clone, Copy)]
pub struct Avp<'a> {
    /// Header and data, without the trailing padding.
    raw: &'a [u8],
    header_len: u8,
    code: u32,
    flags: u8,
    vendor: u32,
}

impl<'a> Avp<'a> {
    #[inline]
    pub fn code(&self) -> u32 {
        self.code
    }
    #[inline]
    pub fn vendor(&self) -> u32 {
        self.vendor
    }
    #[inline]
    pub fn flags(&self) -> u8 {
        self.flags
    }
    #[inline]
    pub fn is_mandatory(&self) -> bool {
        self.flags & AVP_FLAG_M != 0
    }
    /// The AVP's data, without header or padding.
    #[inline]
    pub fn data(&self) -> &'a [u8] {
        &self.raw[self.header_len as usize..]
    }
    /// The whole encoded AVP (header and data, no padding), e.g. to copy it
    /// into a Failed-AVP or an answer unchanged.
    #[inline]
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }
    /// The AVPs inside a Grouped AVP; decoded only as the iterator advances.
    #[inline]
    pub fn grouped(&self) -> AvpIter<'a> {
        AvpIter::new(self.data())
    }
    /// Whether this is the AVP `code` names.
    #[inline]
    pub fn is(&self, code: AvpCode) -> bool {
        code.matches(self)
    }

    /// This AVP's header followed by `payload_len` zero bytes: what RFC 6733
    /// §7.1.5 asks to put in a Failed-AVP when the length is wrong.
    pub(crate) fn header_with_zero_payload(&self, payload_len: usize) -> Vec<u8> {
        let hl = self.header_len as usize;
        let mut v = Vec::with_capacity(hl + payload_len);
        v.extend_from_slice(&self.raw[..hl]);
        let len = (hl + payload_len) as u32;
        v[5..8].copy_from_slice(&len.to_be_bytes()[1..]);
        v.resize(hl + payload_len, 0);
        v
    }
}

impl std::fmt::Debug for Avp<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Avp")
            .field("code", &self.code)
            .field("vendor", &self.vendor)
            .field("flags", &format_args!("{:#04x}", self.flags))
            .field("len", &self.data().len())
            .finish()
    }
}

/// Iterates over consecutive AVPs in a byte slice. After the first framing
/// error it yields that error once and then stops.
#[derive(Clone)]
pub struct AvpIter<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> AvpIter<'a> {
    pub fn new(buf: &'a [u8]) -> AvpIter<'a> {
        AvpIter { buf, pos: 0 }
    }

    /// Finds the first AVP with this code and vendor.
    pub fn find(mut self, code: AvpCode) -> Result<Option<Avp<'a>>, DiameterError> {
        loop {
            match self.next_avp() {
                Ok(Some(avp)) if code.matches(&avp) => return Ok(Some(avp)),
                Ok(Some(_)) => {}
                Ok(None) => return Ok(None),
                Err(m) => return Err(self.malformed(m)),
            }
        }
    }

    /// The AVPs with this code and vendor, in order.
    pub fn filter_code(
        self,
        code: AvpCode,
    ) -> impl Iterator<Item = Result<Avp<'a>, DiameterError>> {
        self.filter(move |a| a.as_ref().map_or(true, |a| code.matches(a)))
    }

    /// The next AVP, or why the data cannot be read further: the fast form
    /// of [`Iterator::next`] for the codec's own loops. On an error the
    /// position stays on the bad AVP; [`malformed`](Self::malformed) turns
    /// it into the error to answer with.
    #[inline]
    pub(crate) fn next_avp(&mut self) -> Result<Option<Avp<'a>>, Malformed> {
        let Some(rest) = self.buf.get(self.pos..) else {
            return Ok(None);
        };
        let Some(h) = rest.first_chunk::<8>() else {
            if rest.is_empty() {
                return Ok(None);
            }
            return Err(Malformed::TruncatedHeader);
        };
        let code = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let flags = h[4];
        let len = u32::from_be_bytes([0, h[5], h[6], h[7]]) as usize;
        let (header_len, vendor) = if flags & AVP_FLAG_V != 0 {
            match rest.get(8..12) {
                Some(v) => (12usize, u32::from_be_bytes([v[0], v[1], v[2], v[3]])),
                None => (12, 0),
            }
        } else {
            (8, 0)
        };
        if len < header_len || len > rest.len() {
            return Err(Malformed::BadLength);
        }
        if vendor == 0 && flags & AVP_FLAG_V != 0 {
            return Err(Malformed::VendorIdZero);
        }
        let avp = Avp {
            raw: &rest[..len],
            header_len: header_len as u8,
            code,
            flags,
            vendor,
        };
        // Padding is part of the enclosing length; a missing final pad is tolerated.
        self.pos = (self.pos + ((len + 3) & !3)).min(self.buf.len());
        Ok(Some(avp))
    }

    /// The error (5014 with Failed-AVP) for what [`next_avp`](Self::next_avp)
    /// reported; the iterator yields nothing more.
    #[cold]
    #[inline(never)]
    pub(crate) fn malformed(&mut self, m: Malformed) -> DiameterError {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let err = match m {
            Malformed::TruncatedHeader => truncated_header(rest),
            Malformed::BadLength => bad_length(rest),
            Malformed::VendorIdZero => vendor_id_zero(rest),
        };
        self.pos = self.buf.len();
        err
    }
}

impl<'a> Iterator for AvpIter<'a> {
    type Item = Result<Avp<'a>, DiameterError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self.next_avp() {
            Ok(Some(avp)) => Some(Ok(avp)),
            Ok(None) => None,
            Err(m) => Some(Err(self.malformed(m))),
        }
    }
}

/// Why a run of AVPs cannot be read further. Small on purpose: the codec's
/// own loops move it around instead of a whole [`DiameterError`], which is
/// built (out of line) only when one is needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Malformed {
    /// Fewer than 8 bytes left.
    TruncatedHeader,
    /// The length is shorter than the header or runs past the data.
    BadLength,
    /// The V bit is set and the Vendor-ID is 0.
    VendorIdZero,
}

/// The V bit with a Vendor-ID of 0. RFC 6733 §4.1: a Vendor-ID of 0 would
/// name the IETF's AVPs, which are sent without the V bit and without the
/// field, so implementations MUST NOT send it. Read as the IETF AVP of the
/// same code, its data would start four bytes late; read as a vendor AVP,
/// it names no vendor. Either way the flag bits contradict the AVP's
/// definition: 3009 DIAMETER_INVALID_AVP_BITS (§7.1.3, a protocol error,
/// answered with the E bit), as for the reserved P bit. The AVP itself
/// cannot go into Failed-AVP (no reader, ourselves included, accepts it):
/// its header does, without the V bit (see [`header_alone`]), and
/// Error-Message says what was wrong.
#[cold]
#[inline(never)]
fn vendor_id_zero(raw: &[u8]) -> DiameterError {
    let code = raw.first_chunk::<4>().map_or(0, |c| u32::from_be_bytes(*c));
    DiameterError::with_failed_avp(
        result_code::DIAMETER_INVALID_AVP_BITS,
        header_alone(raw),
        format!("AVP {code} has the V bit set and Vendor-ID 0"),
    )
}

/// Fewer than 8 bytes left: not even a header. Pad it with zeros to the
/// minimum (RFC 6733 §7.1.5) so that the Failed-AVP is itself a
/// well-formed AVP; see [`header_alone`] for the V flag.
#[cold]
#[inline(never)]
fn truncated_header(rest: &[u8]) -> DiameterError {
    DiameterError::with_failed_avp(
        result_code::DIAMETER_INVALID_AVP_LENGTH,
        header_alone(rest),
        "truncated AVP header",
    )
}

/// The AVP length is shorter than its header or runs past the enclosing
/// data: its header, with the length set to the header alone.
#[cold]
#[inline(never)]
fn bad_length(rest: &[u8]) -> DiameterError {
    DiameterError::with_failed_avp(
        result_code::DIAMETER_INVALID_AVP_LENGTH,
        header_alone(rest),
        "AVP length does not fit its header or the message",
    )
}

/// The header at the start of `rest` (zero-filled where bytes are
/// missing) as a whole AVP without data. A V flag whose Vendor-ID did not
/// arrive, or is 0, is cleared: the copy would otherwise be an AVP that
/// names no vendor, which no receiver (ourselves included) can read.
fn header_alone(rest: &[u8]) -> Vec<u8> {
    let mut hdr = [0u8; 12];
    let n = rest.len().min(12);
    hdr[..n].copy_from_slice(&rest[..n]);
    let vendor = u32::from_be_bytes([hdr[8], hdr[9], hdr[10], hdr[11]]);
    let hl = if hdr[4] & AVP_FLAG_V != 0 && vendor != 0 {
        12
    } else {
        hdr[4] &= !AVP_FLAG_V;
        8
    };
    hdr[5..8].copy_from_slice(&[0, 0, hl as u8]);
    hdr[..hl].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn avp_bytes(code: u32, flags: u8, vendor: Option<u32>, data: &[u8]) -> Vec<u8> {
        let hl = if vendor.is_some() { 12 } else { 8 };
        let mut v = code.to_be_bytes().to_vec();
        v.push(flags);
        v.extend_from_slice(&((hl + data.len()) as u32).to_be_bytes()[1..]);
        if let Some(id) = vendor {
            v.extend_from_slice(&id.to_be_bytes());
        }
        v.extend_from_slice(data);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn iterates_with_padding_and_vendor() {
        let mut buf = avp_bytes(263, AVP_FLAG_M, None, b"abc");
        buf.extend(avp_bytes(
            1001,
            AVP_FLAG_M | AVP_FLAG_V,
            Some(10415),
            &[1, 2, 3, 4, 5],
        ));
        let avps: Vec<_> = AvpIter::new(&buf).collect::<Result<_, _>>().expect("valid");
        assert_eq!(avps.len(), 2);
        assert_eq!(avps[0].code(), 263);
        assert_eq!(avps[0].data(), b"abc");
        assert!(avps[0].is_mandatory());
        assert_eq!(avps[1].vendor(), 10415);
        assert_eq!(avps[1].data(), &[1, 2, 3, 4, 5]);
        assert!(avps[1].is(AvpCode::new(1001, 10415, true)));
        assert!(!avps[1].is(AvpCode::new(1001, 0, true)));
    }

    #[test]
    fn bad_lengths_are_5014_with_failed_avp() {
        let mut buf = avp_bytes(263, AVP_FLAG_M, None, b"abcd");
        buf[7] = 200; // longer than the buffer
        let mut it = AvpIter::new(&buf);
        let err = it.next().expect("one item").expect_err("bad length");
        assert_eq!(err.result_code, result_code::DIAMETER_INVALID_AVP_LENGTH);
        let failed = err.failed_avp.expect("failed avp");
        assert_eq!(&failed[..4], &263u32.to_be_bytes());
        assert_eq!(failed.len(), 8);
        assert_eq!(failed[7], 8);
        assert!(it.next().is_none());

        let short = [0u8, 0, 1, 7, 0x40, 0];
        let err = AvpIter::new(&short)
            .next()
            .expect("item")
            .expect_err("short");
        assert_eq!(err.result_code, result_code::DIAMETER_INVALID_AVP_LENGTH);

        // V flag set but no room for the vendor id: the copy, which has
        // no Vendor-ID to give, drops the V flag.
        let v = avp_bytes(1, AVP_FLAG_V, None, &[]);
        let err = AvpIter::new(&v)
            .next()
            .expect("item")
            .expect_err("short vendor");
        let failed = err.failed_avp.expect("failed avp");
        assert_eq!((failed.len(), failed[4] & AVP_FLAG_V), (8, 0));

        // A bad length with a Vendor-ID keeps it.
        let mut v = avp_bytes(1, AVP_FLAG_V, Some(10415), &[1, 2, 3, 4]);
        v[7] = 200;
        let err = AvpIter::new(&v).next().expect("item").expect_err("long");
        let failed = err.failed_avp.expect("failed avp");
        assert_eq!(
            &failed[..],
            &[0, 0, 0, 1, AVP_FLAG_V, 0, 0, 12, 0, 0, 0x28, 0xaf]
        );

        // A truncated header with the V flag: the Failed-AVP must still be a
        // whole AVP, not a V-flagged stub without a Vendor-ID (found by
        // the decode fuzz target).
        let short_v = [0u8, 0, 2, 0x74, AVP_FLAG_V, 0];
        let err = AvpIter::new(&short_v)
            .next()
            .expect("item")
            .expect_err("short");
        let failed = err.failed_avp.expect("failed avp");
        assert_eq!(failed.len(), 8);
        assert_eq!(&failed[4..8], &[0, 0, 0, 8]);
        let inner = AvpIter::new(&failed)
            .next()
            .expect("item")
            .expect("whole AVP");
        assert_eq!((inner.code(), inner.data().len()), (0x274, 0));
    }

    #[test]
    fn the_v_bit_with_vendor_id_zero_is_3009_with_failed_avp() {
        // Session-Id (263) with the V bit and a Vendor-ID field of 0.
        let mut buf = avp_bytes(263, AVP_FLAG_M | AVP_FLAG_V, Some(0), b"pgw;1;1");
        buf.extend(avp_bytes(264, AVP_FLAG_M, None, b"pgw"));
        let mut it = AvpIter::new(&buf);
        let err = it
            .next()
            .expect("one item")
            .expect_err("V bit, Vendor-ID 0");
        assert_eq!(err.result_code, result_code::DIAMETER_INVALID_AVP_BITS);
        assert!(err.is_protocol_error());
        assert!(err.message.contains("263"), "{}", err.message);
        // Failed-AVP: its header without the V bit, a whole AVP.
        let failed = err.failed_avp.expect("failed avp");
        assert_eq!(&failed[..], &[0, 0, 1, 7, AVP_FLAG_M, 0, 0, 8]);
        assert!(AvpIter::new(&failed).next().expect("item").is_ok());
        assert!(it.next().is_none(), "nothing read after it");
        // Nor is it found as the IETF Session-Id.
        let sid = crate::codec::AvpCode::new(263, 0, true);
        assert!(AvpIter::new(&buf).find(sid).is_err());
        // The same AVP with a real Vendor-ID is simply another AVP.
        let vendor = avp_bytes(263, AVP_FLAG_M | AVP_FLAG_V, Some(10415), b"x");
        let a = AvpIter::new(&vendor).next().expect("item").expect("ok");
        assert_eq!((a.code(), a.vendor()), (263, 10415));
        assert!(!a.is(sid));
    }

    #[test]
    fn header_with_zero_payload_fixes_length() {
        let buf = avp_bytes(268, AVP_FLAG_M, None, &[1, 2]);
        let avp = AvpIter::new(&buf).next().expect("item").expect("ok");
        let f = avp.header_with_zero_payload(4);
        assert_eq!(f.len(), 12);
        assert_eq!(f[7], 12);
        assert_eq!(&f[8..], &[0, 0, 0, 0]);
    }
}
