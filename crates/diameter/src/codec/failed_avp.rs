//! The copy of an offending AVP that goes into an error answer's
//! Failed-AVP, kept small.
//!
//! RFC 6733 §7.5 asks for the offending AVP so the sender can tell which
//! one was refused; its code, flags and Vendor-ID say that, and the first
//! bytes of its value are enough to recognise it. Copied whole, a request
//! carrying one huge AVP would get an error answer as large as itself
//! (1 MiB in, 1 MiB out, written back to whoever sent it). So an AVP longer
//! than [`FAILED_AVP_MAX_LEN`] is sent as its own header followed by the
//! first bytes of its value, with the AVP Length rewritten to what is sent
//! (the RFC's own device for Failed-AVP contents that cannot be the real
//! thing, §6.5 and §7.1.5: the header with a shortened or zero-filled
//! value). The result is always one well-formed AVP: a Grouped AVP keeps
//! only whole members, a value of any other type is cut at a 4-byte
//! boundary.

use super::avp::{Avp, AvpIter, AVP_FLAG_V};
use crate::dict::{self, AvpType};
use std::borrow::Cow;

/// The longest AVP (header and value) copied into a Failed-AVP; longer
/// ones are shortened to this. An error answer then stays within a few KiB
/// whatever the request carried.
pub const FAILED_AVP_MAX_LEN: usize = 1024;

impl Avp<'_> {
    /// This AVP as it goes into a Failed-AVP: itself, or its header and
    /// the first bytes of its value when it is long (see
    /// [`shorten_failed_avp`]). Defined here, beside the shortening, so
    /// that `avp.rs` does not import this file back.
    pub fn failed_copy(&self) -> Vec<u8> {
        shorten_failed_avp(self.raw()).into_owned()
    }
}

/// `raw` (one encoded AVP, header and data, no trailing padding) as it
/// goes into a Failed-AVP: unchanged when it is at most
/// [`FAILED_AVP_MAX_LEN`] long, else shortened as the module says.
pub fn shorten_failed_avp(raw: &[u8]) -> Cow<'_, [u8]> {
    if raw.len() <= FAILED_AVP_MAX_LEN || raw.len() < 8 {
        return Cow::Borrowed(raw);
    }
    let vendor_specific = raw[4] & AVP_FLAG_V != 0;
    let header_len = if vendor_specific { 12 } else { 8 };
    let Some((header, data)) = raw.split_at_checked(header_len) else {
        return Cow::Borrowed(raw);
    };
    let vendor = match header.get(8..12) {
        Some(v) => u32::from_be_bytes([v[0], v[1], v[2], v[3]]),
        None => 0,
    };
    let code = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
    let room = FAILED_AVP_MAX_LEN - header_len;
    let grouped = dict::avp(code, vendor).is_some_and(|d| d.ty == AvpType::Grouped);
    let keep = if grouped {
        whole_members_within(data, room)
    } else {
        room & !3
    };
    let mut out = Vec::with_capacity(header_len + keep);
    out.extend_from_slice(header);
    out.extend_from_slice(&data[..keep]);
    let len = (out.len() as u32).to_be_bytes();
    out[5..8].copy_from_slice(&len[1..]);
    Cow::Owned(out)
}

/// How many leading bytes of a Grouped AVP's data hold whole members (each
/// with its padding) and fit in `room`.
fn whole_members_within(data: &[u8], room: usize) -> usize {
    let mut iter = AvpIter::new(data);
    let mut end = 0;
    while let Ok(Some(member)) = iter.next_avp() {
        let padded = (member.raw().len() + 3) & !3;
        let next = (end + padded).min(data.len());
        if next > room {
            break;
        }
        end = next;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{AvpCode, MessageBuilder};
    use crate::dict::avp;
    use bytes::BytesMut;

    /// One AVP encoded by the builder, without the message header.
    fn encoded(f: impl FnOnce(&mut MessageBuilder<'_>)) -> Vec<u8> {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, 272, 4, 1, 1);
        f(&mut b);
        b.finish();
        let body = buf.split_off(crate::codec::HEADER_LEN);
        let avp = AvpIter::new(&body)
            .next()
            .expect("one AVP")
            .expect("well formed");
        avp.raw().to_vec()
    }

    fn one_avp(bytes: &[u8]) -> (u32, u32, usize) {
        let mut it = AvpIter::new(bytes);
        let a = it.next().expect("an AVP").expect("well formed");
        assert_eq!(a.raw().len(), bytes.len(), "exactly one AVP");
        assert!(it.next().is_none());
        (a.code(), a.vendor(), a.data().len())
    }

    #[test]
    fn a_short_avp_is_copied_whole() {
        let raw = encoded(|b| {
            b.str(avp::SESSION_ID, "pgw;1;1");
        });
        assert!(matches!(shorten_failed_avp(&raw), Cow::Borrowed(r) if r == raw.as_slice()));
    }

    #[test]
    fn a_long_value_keeps_its_header_and_first_bytes() {
        let value: Vec<u8> = (0..1 << 20).map(|i| i as u8).collect();
        for code in [
            AvpCode::new(999_998, 0, true),
            AvpCode::new(1005, 10415, true),
        ] {
            let raw = encoded(|b| {
                b.bytes(code, &value);
            });
            let short = shorten_failed_avp(&raw);
            assert!(short.len() <= FAILED_AVP_MAX_LEN, "{} bytes", short.len());
            let (c, v, data) = one_avp(&short);
            assert_eq!((c, v), (code.code, code.vendor));
            let hl = raw.len() - value.len();
            assert_eq!(&short[..4], &raw[..4], "same code");
            assert_eq!(short[4], raw[4], "same flags");
            assert_eq!(&short[hl..], &value[..data], "the value's first bytes");
            assert_eq!(data, FAILED_AVP_MAX_LEN - hl);
        }
    }

    #[test]
    fn a_long_grouped_avp_keeps_whole_members() {
        let raw = encoded(|b| {
            b.group(avp::PROXY_INFO, |g| {
                for i in 0..200 {
                    g.str(avp::PROXY_HOST, &format!("relay{i}.example"));
                }
            });
        });
        assert!(raw.len() > FAILED_AVP_MAX_LEN);
        let short = shorten_failed_avp(&raw);
        assert!(short.len() <= FAILED_AVP_MAX_LEN);
        let (code, _, _) = one_avp(&short);
        assert_eq!(code, avp::PROXY_INFO.code);
        let outer = AvpIter::new(&short).next().expect("avp").expect("ok");
        let members: Vec<_> = outer
            .grouped()
            .collect::<Result<_, _>>()
            .expect("every member whole");
        assert!(members.len() > 10, "{} members kept", members.len());
        assert_eq!(members[0].data(), b"relay0.example");
    }
}
