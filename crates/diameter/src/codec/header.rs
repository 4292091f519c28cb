//! The 20-byte Diameter header (RFC 6733 §3).

/// Length of the fixed header.
pub const HEADER_LEN: usize = 20;
/// The only protocol version.
pub const VERSION: u8 = 1;
/// Request.
pub const FLAG_R: u8 = 0x80;
/// Proxiable.
pub const FLAG_P: u8 = 0x40;
/// Error (answers only).
pub const FLAG_E: u8 = 0x20;
/// Potentially retransmitted.
pub const FLAG_T: u8 = 0x10;
/// Bits RFC 6733 reserves; a sender must clear them.
pub const RESERVED_FLAGS: u8 = 0x0f;

/// The header fields, decoded (a copy: it is 20 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    pub length: u32,
    pub flags: u8,
    pub command_code: u32,
    pub application_id: u32,
    pub hop_by_hop: u32,
    pub end_to_end: u32,
}

impl Header {
    /// Decodes the first 20 bytes; `None` if fewer are given.
    pub fn decode(b: &[u8]) -> Option<Header> {
        let b: &[u8; HEADER_LEN] = b.get(..HEADER_LEN)?.try_into().ok()?;
        Some(Header {
            version: b[0],
            length: u32::from_be_bytes([0, b[1], b[2], b[3]]),
            flags: b[4],
            command_code: u32::from_be_bytes([0, b[5], b[6], b[7]]),
            application_id: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            hop_by_hop: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
            end_to_end: u32::from_be_bytes([b[16], b[17], b[18], b[19]]),
        })
    }

    /// Encodes into 20 bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.version;
        b[1..4].copy_from_slice(&self.length.to_be_bytes()[1..]);
        b[4] = self.flags;
        b[5..8].copy_from_slice(&self.command_code.to_be_bytes()[1..]);
        b[8..12].copy_from_slice(&self.application_id.to_be_bytes());
        b[12..16].copy_from_slice(&self.hop_by_hop.to_be_bytes());
        b[16..20].copy_from_slice(&self.end_to_end.to_be_bytes());
        b
    }

    pub fn is_request(&self) -> bool {
        self.flags & FLAG_R != 0
    }
    pub fn is_proxiable(&self) -> bool {
        self.flags & FLAG_P != 0
    }
    pub fn is_error(&self) -> bool {
        self.flags & FLAG_E != 0
    }
    pub fn is_retransmit(&self) -> bool {
        self.flags & FLAG_T != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let h = Header {
            version: 1,
            length: 0x01_02_04,
            flags: FLAG_R | FLAG_P,
            command_code: 272,
            application_id: 16_777_238,
            hop_by_hop: 0xdead_beef,
            end_to_end: 7,
        };
        let b = h.encode();
        assert_eq!(b[0], 1);
        assert_eq!(&b[1..4], &[1, 2, 4]);
        assert_eq!(Header::decode(&b), Some(h));
        assert!(h.is_request() && h.is_proxiable() && !h.is_error() && !h.is_retransmit());
        assert_eq!(Header::decode(&b[..19]), None);
    }
}
