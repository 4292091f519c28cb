//! Typed values of AVP data (RFC 6733 §4.2 basic, §4.3 derived formats).
//!
//! Every getter checks the length or the content and answers a wrong one
//! with the RFC's error: 5014 (with the AVP's header and a zero payload of
//! the right size in Failed-AVP) for a bad length, 5004 (with the AVP) for a
//! bad value.

use super::avp::Avp;
use super::error::DiameterError;
use crate::result_code::{DIAMETER_INVALID_AVP_LENGTH, DIAMETER_INVALID_AVP_VALUE};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds from the NTP epoch (1900-01-01) to the Unix epoch (1970-01-01).
pub const NTP_UNIX_OFFSET: u64 = 2_208_988_800;

/// Converts a Diameter Time (NTP seconds, RFC 5905) to Unix seconds. Values
/// with the top bit clear are in NTP era 1 (from 2036-02-07), as RFC 6733
/// §4.3.1 prescribes. Era-0 values before 1970 (0x80000000..0x83AA7E80, a
/// peer's garbage) clamp to the Unix epoch rather than underflow.
pub fn ntp_to_unix(ntp: u32) -> u64 {
    if ntp & 0x8000_0000 != 0 {
        u64::from(ntp).saturating_sub(NTP_UNIX_OFFSET)
    } else {
        u64::from(ntp) + (1u64 << 32) - NTP_UNIX_OFFSET
    }
}

/// Converts Unix seconds to a Diameter Time (wrapping into era 1 after 2036).
pub fn unix_to_ntp(unix: u64) -> u32 {
    ((unix + NTP_UNIX_OFFSET) & 0xffff_ffff) as u32
}

impl<'a> Avp<'a> {
    fn fixed<const N: usize>(&self) -> Result<[u8; N], DiameterError> {
        self.data().try_into().map_err(|_| {
            DiameterError::with_failed_avp(
                DIAMETER_INVALID_AVP_LENGTH,
                self.header_with_zero_payload(N),
                "AVP data length does not match its type",
            )
        })
    }

    /// A 5004 DIAMETER_INVALID_AVP_VALUE error naming this AVP.
    pub fn invalid_value(&self, message: &'static str) -> DiameterError {
        DiameterError::with_failed_avp(DIAMETER_INVALID_AVP_VALUE, self.failed_copy(), message)
    }

    pub fn as_u32(&self) -> Result<u32, DiameterError> {
        self.fixed::<4>().map(u32::from_be_bytes)
    }
    pub fn as_u64(&self) -> Result<u64, DiameterError> {
        self.fixed::<8>().map(u64::from_be_bytes)
    }
    pub fn as_i32(&self) -> Result<i32, DiameterError> {
        self.fixed::<4>().map(i32::from_be_bytes)
    }
    pub fn as_i64(&self) -> Result<i64, DiameterError> {
        self.fixed::<8>().map(i64::from_be_bytes)
    }
    pub fn as_f32(&self) -> Result<f32, DiameterError> {
        self.fixed::<4>().map(f32::from_be_bytes)
    }
    pub fn as_f64(&self) -> Result<f64, DiameterError> {
        self.fixed::<8>().map(f64::from_be_bytes)
    }
    /// Enumerated is an Integer32 on the wire.
    pub fn as_enum(&self) -> Result<i32, DiameterError> {
        self.as_i32()
    }
    /// OctetString: the bytes as they are.
    pub fn as_octets(&self) -> &'a [u8] {
        self.data()
    }
    /// UTF8String (and DiameterIdentity, DiameterURI, IPFilterRule), validated.
    pub fn as_str(&self) -> Result<&'a str, DiameterError> {
        let d = self.data();
        // Nearly every string AVP (identities, Session-Id, IMSI, APN) is
        // ASCII: an OR of all bytes vectorises and proves it, which costs a
        // fraction of the general UTF-8 check.
        if d.iter().fold(0u8, |acc, b| acc | b) < 0x80 {
            // SAFETY: every byte is below 0x80, and ASCII is valid UTF-8.
            return Ok(unsafe { std::str::from_utf8_unchecked(d) });
        }
        std::str::from_utf8(d).map_err(|_| self.invalid_value("AVP is not valid UTF-8"))
    }
    /// DiameterIdentity: a non-empty FQDN of printable ASCII.
    pub fn as_identity(&self) -> Result<&'a str, DiameterError> {
        let d = self.data();
        // Counts bytes outside 0x21..=0x7e without an early exit, so it vectorises.
        let outside = d.iter().fold(0u8, |acc, b| {
            acc | u8::from(b.wrapping_sub(0x21) > 0x7e - 0x21)
        });
        if d.is_empty() || outside != 0 {
            return Err(self.invalid_value("DiameterIdentity must be a non-empty ASCII FQDN"));
        }
        // SAFETY: every byte is printable ASCII, which is valid UTF-8.
        Ok(unsafe { std::str::from_utf8_unchecked(d) })
    }
    /// Address: a 2-byte IANA family (1 IPv4, 2 IPv6) and the address.
    pub fn as_address(&self) -> Result<IpAddr, DiameterError> {
        let d = self.data();
        match (
            d.first()
                .zip(d.get(1))
                .map(|(a, b)| u16::from_be_bytes([*a, *b])),
            d.len(),
        ) {
            (Some(1), 6) => Ok(IpAddr::V4(Ipv4Addr::new(d[2], d[3], d[4], d[5]))),
            (Some(2), 18) => {
                let mut o = [0u8; 16];
                o.copy_from_slice(&d[2..]);
                Ok(IpAddr::V6(Ipv6Addr::from(o)))
            }
            _ => Err(self.invalid_value("Address must be IPv4 (family 1) or IPv6 (family 2)")),
        }
    }
    /// Time as raw NTP seconds.
    pub fn as_ntp(&self) -> Result<u32, DiameterError> {
        self.as_u32()
    }
    /// Time as a SystemTime.
    pub fn as_time(&self) -> Result<SystemTime, DiameterError> {
        self.as_ntp()
            .map(|n| UNIX_EPOCH + Duration::from_secs(ntp_to_unix(n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::AvpIter;

    fn one(code: u32, data: &[u8]) -> Vec<u8> {
        let mut v = code.to_be_bytes().to_vec();
        v.push(0x40);
        v.extend_from_slice(&((8 + data.len()) as u32).to_be_bytes()[1..]);
        v.extend_from_slice(data);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    fn with<T>(code: u32, data: &[u8], f: impl FnOnce(Avp<'_>) -> T) -> T {
        let b = one(code, data);
        let avp = AvpIter::new(&b).next().expect("item").expect("ok");
        f(avp)
    }

    #[test]
    fn integers_and_floats() {
        assert_eq!(with(1, &7u32.to_be_bytes(), |a| a.as_u32()), Ok(7));
        assert_eq!(with(1, &(-7i32).to_be_bytes(), |a| a.as_i32()), Ok(-7));
        assert_eq!(
            with(1, &u64::MAX.to_be_bytes(), |a| a.as_u64()),
            Ok(u64::MAX)
        );
        assert_eq!(with(1, &(-1i64).to_be_bytes(), |a| a.as_i64()), Ok(-1));
        assert_eq!(with(1, &1.5f32.to_be_bytes(), |a| a.as_f32()), Ok(1.5));
        assert_eq!(with(1, &2.5f64.to_be_bytes(), |a| a.as_f64()), Ok(2.5));
        let e = with(268, &[0, 1], |a| a.as_u32()).expect_err("short");
        assert_eq!(e.result_code, 5014);
        assert_eq!(e.failed_avp.map(|f| f.len()), Some(12));
    }

    #[test]
    fn strings_and_identities() {
        assert_eq!(
            with(1, "héllo".as_bytes(), |a| a.as_str().map(str::to_owned)),
            Ok("héllo".into())
        );
        let e = with(1, &[0xff, 0xfe], |a| a.as_str().map(str::to_owned)).expect_err("utf8");
        assert_eq!(e.result_code, 5004);
        assert!(with(264, b"pcef.example", |a| a.as_identity().is_ok()));
        assert!(with(264, b"", |a| a.as_identity().is_err()));
        assert!(with(264, b"a b", |a| a.as_identity().is_err()));
        // Every byte outside printable ASCII is refused, at any position.
        for bad in [0x20u8, 0x7f, 0x80, 0xc3, 0xff, 0x00, 0x0a] {
            for at in [0, 5, 39] {
                let mut id = [b'a'; 40];
                id[at] = bad;
                assert!(
                    with(264, &id, |a| a.as_identity().is_err()),
                    "{bad:#x} at {at}"
                );
            }
        }
        assert!(with(264, b"!~", |a| a.as_identity().is_ok()));
        // Long ASCII strings take the fast path; one non-ASCII byte anywhere
        // sends them through the full check, which must still decide right.
        let ascii = "x".repeat(70);
        assert_eq!(
            with(1, ascii.as_bytes(), |a| a.as_str().map(str::len)),
            Ok(70)
        );
        let mut mixed = ascii.clone().into_bytes();
        mixed.extend_from_slice("é".as_bytes());
        assert_eq!(with(1, &mixed, |a| a.as_str().map(str::len)), Ok(72));
        mixed.push(0x80);
        let e = with(1, &mixed, |a| a.as_str().map(str::len)).expect_err("stray continuation");
        assert_eq!(e.result_code, 5004);
    }

    #[test]
    fn addresses() {
        assert_eq!(
            with(257, &[0, 1, 10, 0, 0, 1], |a| a.as_address()),
            Ok(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)))
        );
        let mut v6 = vec![0, 2];
        v6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        assert_eq!(
            with(257, &v6, |a| a.as_address()),
            Ok(IpAddr::V6(Ipv6Addr::LOCALHOST))
        );
        assert_eq!(
            with(257, &[0, 1, 10], |a| a.as_address()).map_err(|e| e.result_code),
            Err(5004)
        );
    }

    #[test]
    fn ntp_eras() {
        // 2026-01-01T00:00:00Z
        let unix = 1_767_225_600u64;
        let ntp = unix_to_ntp(unix);
        assert_eq!(ntp_to_unix(ntp), unix);
        // After the 2036 rollover the top bit is clear.
        let later = (1u64 << 32) - NTP_UNIX_OFFSET + 10; // 2036-02-07T06:28:26Z
        assert!(unix_to_ntp(later) & 0x8000_0000 == 0);
        assert_eq!(ntp_to_unix(unix_to_ntp(later)), later);
        // Era 0 before 1970 cannot be a Unix time: clamp, never underflow
        // (found by the decode fuzz target).
        assert_eq!(ntp_to_unix(0x8000_0000), 0);
        assert_eq!(ntp_to_unix(2_208_988_799), 0);
        assert_eq!(ntp_to_unix(2_208_988_801), 1);
    }
}
