//! One notification event: what happened (a name and a JSON payload), to
//! whom, when, and the idempotency key a receiver deduplicates on. The JSON
//! document is made once, when the event is made, and is what the store
//! keeps and every sink sends, byte for byte (docs/notifications.md and
//! docs/notifications.schema.json describe it).

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Names of the events the node emits by itself. Policy notifications are
/// named `policy.<name>`.
pub mod names {
    pub const SESSION_STARTED: &str = "session.started";
    pub const SESSION_ENDED: &str = "session.ended";
    pub const QUOTA_THRESHOLD: &str = "quota.threshold";
    pub const SUBSCRIBER_CHANGED: &str = "subscriber.changed";
    pub const USAGE_TOPUP: &str = "usage.topup";
    pub const PEER_UP: &str = "peer.up";
    pub const PEER_DOWN: &str = "peer.down";
    /// One policy decision and what it was made of (`[decision_log]`).
    pub const DECISION: &str = "decision";
    /// Prefix of the events a policy emits with `notify(name, payload)`.
    pub const POLICY_PREFIX: &str = "policy.";
}

/// The JSON document of an event, as sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Document {
    /// 16 hex digits; ids sort in the order events were made.
    pub id: String,
    /// RFC 3339, UTC, milliseconds.
    pub time: String,
    pub name: String,
    /// The subscriber key (IMSI, or MSISDN when no IMSI is known); absent
    /// for events about the node (peers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscriber: Option<String>,
    /// Equal for two deliveries of one occurrence, different otherwise: a
    /// receiver that has seen it can drop the duplicate.
    pub idempotency_key: String,
    pub payload: serde_json::Value,
}

/// An event on its way to its sinks.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Order of creation (also the id, in hex); unique in a node's store.
    pub seq: u64,
    pub name: String,
    pub subscriber: Option<String>,
    pub key: String,
    /// The JSON document.
    pub body: Bytes,
    /// The sinks still to deliver it to.
    pub sinks: Vec<Arc<str>>,
}

impl Event {
    /// Makes the event and its document.
    pub fn new(
        seq: u64,
        time_ms: i64,
        name: &str,
        subscriber: Option<&str>,
        key: String,
        payload: serde_json::Value,
        sinks: Vec<Arc<str>>,
    ) -> Event {
        let time = iso_ms(time_ms);
        let doc = Document {
            id: id_text(seq),
            time,
            name: name.to_owned(),
            subscriber: subscriber.map(str::to_owned),
            idempotency_key: key.clone(),
            payload,
        };
        // A Value and plain strings always serialise.
        let body = serde_json::to_vec(&doc).unwrap_or_default();
        Event {
            seq,
            name: name.to_owned(),
            subscriber: subscriber.map(str::to_owned),
            key,
            body: Bytes::from(body),
            sinks,
        }
    }

    /// An event read back from the store (one row per sink still owed).
    pub fn from_stored(seq: u64, sink: &str, data: &[u8]) -> Result<Event, String> {
        let doc: Document = serde_json::from_slice(data).map_err(|e| e.to_string())?;
        if doc.id != id_text(seq) {
            return Err(format!(
                "document id {} is not row {}",
                doc.id,
                id_text(seq)
            ));
        }
        Ok(Event {
            seq,
            name: doc.name,
            subscriber: doc.subscriber,
            key: doc.idempotency_key,
            body: Bytes::copy_from_slice(data),
            sinks: vec![Arc::from(sink)],
        })
    }

    pub fn id(&self) -> String {
        id_text(self.seq)
    }

    /// Whether the event is written with a provisioning change (a profile
    /// created, changed or deleted), whose rows live in the provisioning
    /// shard: its own row goes there too, so both commit together.
    pub fn with_provisioning(&self) -> bool {
        self.name == names::SUBSCRIBER_CHANGED
    }

    /// The key that routes this event's rows with the subscriber's other
    /// rows (a node event has none: "").
    pub fn subscriber_key(&self) -> &str {
        self.subscriber.as_deref().unwrap_or("")
    }
}

/// Unix ms as RFC 3339 in UTC with milliseconds, as event documents write
/// instants.
pub fn iso_ms(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

pub fn id_text(seq: u64) -> String {
    format!("{seq:016x}")
}

/// Whether `name` may name a policy notification: short, and made of
/// characters safe in a routing key and a URL.
pub fn valid_policy_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_round_trips_through_the_store_form() {
        let e = Event::new(
            0x1234,
            1_795_000_000_123,
            names::SESSION_STARTED,
            Some("001010000000001"),
            "session.started:s1".into(),
            serde_json::json!({"session": "s1"}),
            vec![Arc::from("crm")],
        );
        let text = std::str::from_utf8(&e.body).unwrap();
        assert!(text.contains(r#""id":"0000000000001234""#), "{text}");
        assert!(text.contains(r#""time":"2026-11-18T"#), "{text}");
        assert!(text.contains(".123Z"), "{text}");
        let back = Event::from_stored(0x1234, "crm", &e.body).unwrap();
        assert_eq!(back, e);
        assert!(Event::from_stored(0x1235, "crm", &e.body).is_err());
        assert!(Event::from_stored(1, "crm", b"{").is_err());
    }
}
