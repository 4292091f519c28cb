//! Recognising an Update the SMF sends again because it lost the answer.
//!
//! Diameter gives a retransmission away by its CC-Request-Number; HTTP
//! has nothing alike, and an SMF that times out on an Update (or fails
//! over to another node of the cluster) sends the same body again. Applied
//! twice, its usage reports would count twice. So each applied Update
//! leaves in the session record (in `last_answer`, which Gx uses for its
//! own retransmissions, stored with the usage it counted in one write) a
//! digest of the request, when it was applied and the answer it got. An
//! Update with the same digest within `[sbi].repeat_window_ms` of that is
//! a repeat: it changes nothing and is answered again.
//!
//! The digest covers the body and the `3gpp-Sbi-Origination-Timestamp`
//! header (TS 29.500) when the SMF sends one: a repeat keeps its stamp, so
//! two distinct Updates with equal bodies are then told apart however
//! close together. Without the header, two distinct Updates byte for byte
//! equal within the window are taken for one; the window (10 s by
//! default) is shorter than any usage reporting interval an operator
//! would grant, and longer than an SMF's retry timers.

use sha2::{Digest, Sha256};

/// The header an SMF may stamp its requests with (TS 29.500 §5.2.3.2.17).
pub const ORIGINATION_TIMESTAMP: &str = "3gpp-sbi-origination-timestamp";

/// What tells one Update from another: 128 bits of SHA-256.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestDigest([u8; 16]);

impl RequestDigest {
    /// The digest of an Update's origination stamp (if any) and body.
    pub fn of(origination: Option<&[u8]>, body: &[u8]) -> RequestDigest {
        let mut h = Sha256::new();
        // The stamp's length first, so that no stamp and body can pass for
        // another split of the same bytes.
        let stamp = origination.unwrap_or_default();
        h.update((stamp.len() as u64).to_be_bytes());
        h.update(stamp);
        h.update(body);
        let full = h.finalize();
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        RequestDigest(out)
    }
}

/// The tag that starts a remembered Update (a Gx session's `last_answer`
/// is a Diameter answer, whose first byte is the version, 1).
const TAG: &[u8; 4] = b"N7U1";
const HEADER: usize = TAG.len() + 16 + 8;

/// The bytes kept in the record for an applied Update: its digest, when it
/// was applied (the record's `updated_ms` then) and the answer's JSON.
pub fn remember(digest: RequestDigest, applied_ms: i64, answer_json: &[u8]) -> bytes::Bytes {
    let mut out = Vec::with_capacity(HEADER + answer_json.len());
    out.extend_from_slice(TAG);
    out.extend_from_slice(&digest.0);
    out.extend_from_slice(&applied_ms.to_be_bytes());
    out.extend_from_slice(answer_json);
    out.into()
}

/// The Update a record remembers, when the one with `digest` at `now_ms`
/// repeats it.
#[derive(Debug, PartialEq, Eq)]
pub struct Repeated<'a> {
    /// When the original was applied (Unix ms).
    pub applied_ms: i64,
    /// The answer it got, JSON.
    pub answer_json: &'a [u8],
}

/// Whether `digest` at `now_ms` repeats the Update remembered in `kept`
/// (within `window_ms` of it; a window of 0 recognises none).
pub fn recall(
    kept: &[u8],
    digest: RequestDigest,
    now_ms: i64,
    window_ms: u64,
) -> Option<Repeated<'_>> {
    if window_ms == 0 || kept.len() < HEADER || &kept[..TAG.len()] != TAG {
        return None;
    }
    if kept[TAG.len()..TAG.len() + 16] != digest.0 {
        return None;
    }
    let mut at = [0u8; 8];
    at.copy_from_slice(&kept[TAG.len() + 16..HEADER]);
    let applied_ms = i64::from_be_bytes(at);
    let age = now_ms.saturating_sub(applied_ms);
    if age < 0 || age as u64 > window_ms {
        return None;
    }
    Some(Repeated {
        applied_ms,
        answer_json: &kept[HEADER..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_equal_request_within_the_window_is_a_repeat() {
        let d = RequestDigest::of(None, br#"{"accuUsageReports":[]}"#);
        let kept = remember(d, 1_000, b"{}");
        let r = recall(&kept, d, 5_000, 10_000).expect("a repeat");
        assert_eq!(r.applied_ms, 1_000);
        assert_eq!(r.answer_json, b"{}");
        // Too late, off, another body, or another stamp: not a repeat.
        assert_eq!(recall(&kept, d, 11_001, 10_000), None);
        assert_eq!(recall(&kept, d, 5_000, 0), None);
        let other = RequestDigest::of(None, br#"{"accuUsageReports":[{}]}"#);
        assert_eq!(recall(&kept, other, 5_000, 10_000), None);
        let stamped = RequestDigest::of(
            Some(b"Tue, 04 Feb 2020 08:49:37.845 GMT"),
            br#"{"accuUsageReports":[]}"#,
        );
        assert_ne!(stamped, d);
        // A clock that went back does not make an old one current.
        assert_eq!(recall(&kept, d, 999, 10_000), None);
    }

    #[test]
    fn a_diameter_answer_or_garbage_is_never_a_repeat() {
        let d = RequestDigest::of(None, b"");
        assert_eq!(recall(&[1, 0, 0, 20], d, 0, 10_000), None);
        assert_eq!(recall(b"N7U1short", d, 0, 10_000), None);
        // The stamp and body cannot trade bytes.
        assert_ne!(
            RequestDigest::of(Some(b"ab"), b"c"),
            RequestDigest::of(Some(b"a"), b"bc")
        );
    }
}
