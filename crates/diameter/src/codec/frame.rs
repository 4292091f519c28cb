//! Finding message boundaries in a byte stream, without IO.
//!
//! A transport calls [`frame_len`] on its read buffer; it says how long the
//! next message is once its header has arrived. A length that cannot be
//! trusted (below the header size, not a multiple of 4, above the configured
//! maximum, or a version other than 1) is an error: after it the stream
//! cannot be re-synchronised, so the connection must be closed (RFC 6733 §3).

use super::header::{HEADER_LEN, VERSION};

/// Why a stream cannot be framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("unsupported Diameter version {0}")]
    Version(u8),
    #[error("message length {0} is not a multiple of 4 or below the header size")]
    BadLength(u32),
    #[error("message length {len} exceeds the maximum of {max}")]
    TooLong { len: u32, max: u32 },
}

/// Length of the next whole message at the start of `buf`, once its first
/// four bytes have arrived; `Ok(None)` means "read more".
pub fn frame_len(buf: &[u8], max_len: u32) -> Result<Option<usize>, FrameError> {
    let Some(first) = buf.get(..4) else {
        return Ok(None);
    };
    if first[0] != VERSION {
        return Err(FrameError::Version(first[0]));
    }
    let len = u32::from_be_bytes([0, first[1], first[2], first[3]]);
    if (len as usize) < HEADER_LEN || len % 4 != 0 {
        return Err(FrameError::BadLength(len));
    }
    if len > max_len {
        return Err(FrameError::TooLong { len, max: max_len });
    }
    Ok(Some(len as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_four_bytes() {
        assert_eq!(frame_len(&[1, 0, 0], 1024), Ok(None));
        assert_eq!(frame_len(&[1, 0, 0, 20], 1024), Ok(Some(20)));
    }

    #[test]
    fn rejects_untrustworthy_lengths() {
        assert_eq!(frame_len(&[2, 0, 0, 20], 1024), Err(FrameError::Version(2)));
        assert_eq!(
            frame_len(&[1, 0, 0, 16], 1024),
            Err(FrameError::BadLength(16))
        );
        assert_eq!(
            frame_len(&[1, 0, 0, 22], 1024),
            Err(FrameError::BadLength(22))
        );
        assert_eq!(
            frame_len(&[1, 0, 4, 4], 1024),
            Err(FrameError::TooLong {
                len: 1028,
                max: 1024
            })
        );
    }
}
