//! The stored form of a record: every store keeps a session, a subscriber
//! or a subscriber's usage as one JSON blob (see docs/durability.md for why
//! JSON). Decoding is shared so that both stores treat a corrupt record the
//! same way: logged with its key, counted, skipped; one bad row costs one
//! record, not the node.

use crate::session::GxSession;
use crate::subscriber::Subscriber;
use crate::usage::SubscriberUsage;

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

/// Decodes a usage blob; `None` (logged, counted) when it is corrupt or
/// names another subscriber than its row.
pub(crate) fn decode_usage(
    skipped: &mut u64,
    subscriber: &str,
    data: &[u8],
) -> Option<SubscriberUsage> {
    match serde_json::from_slice::<SubscriberUsage>(data) {
        Ok(u) if u.subscriber == subscriber => Some(u),
        Ok(u) => {
            *skipped += 1;
            tracing::error!(subscriber = %subscriber, blob_subscriber = %u.subscriber,
                "stored usage record names another subscriber; skipped");
            None
        }
        Err(e) => {
            *skipped += 1;
            tracing::error!(subscriber = %subscriber, error = %e,
                "stored usage record cannot be decoded; skipped");
            None
        }
    }
}
