//! The stored form of a record: every store keeps a session or subscriber
//! as one JSON blob (see docs/durability.md for why JSON). Decoding is shared
//! so that both stores treat a corrupt record the same way: logged with its
//! key, counted, skipped; one bad row costs one record, not the node.

use crate::session::GxSession;
use crate::subscriber::Subscriber;

/// Decodes a session blob; `None` (logged, counted) when it is corrupt.
pub(crate) fn decode_session(skipped: &mut u64, id: &str, data: &[u8]) -> Option<GxSession> {
    match serde_json::from_slice::<GxSession>(data) {
        Ok(s) if s.id == id => Some(s),
        Ok(s) => {
            *skipped += 1;
            tracing::error!(session_id = %id, blob_id = %s.id,
                "stored session record names another Session-Id; skipped");
            None
        }
        Err(e) => {
            *skipped += 1;
            tracing::error!(session_id = %id, error = %e,
                "stored session record cannot be decoded; skipped");
            None
        }
    }
}

/// Decodes a subscriber blob; `None` (logged, counted) when it is corrupt.
pub(crate) fn decode_subscriber(skipped: &mut u64, imsi: &str, data: &[u8]) -> Option<Subscriber> {
    match serde_json::from_slice::<Subscriber>(data) {
        Ok(s) if s.imsi == imsi => Some(s),
        Ok(_) | Err(_) => {
            *skipped += 1;
            tracing::error!(imsi = %imsi, "stored subscriber record cannot be decoded; skipped");
            None
        }
    }
}
