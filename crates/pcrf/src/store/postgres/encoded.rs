//! A batch's changes encoded into row values before its transaction starts,
//! so that an encoding failure never leaves a transaction open.

use crate::session::SessionState;
use crate::store::blob;
use crate::store::{Change, StoreError};

/// A change encoded before the transaction starts (so an encoding failure
/// never leaves a transaction open).
pub(super) enum Encoded<'a> {
    Session {
        id: &'a str,
        subscriber: &'a str,
        state: &'static str,
        pcef_host: &'a str,
        updated_ms: i64,
        closed_ms: Option<i64>,
        data: Vec<u8>,
        /// The UE's IPv4 address (Rx binding through the store).
        ue_ipv4: Option<String>,
        /// The row version the record was read or last written at: the
        /// write succeeds only if the row is still there (compare-and-set).
        version: i64,
    },
    DeleteSession(&'a str),
    Subscriber {
        imsi: &'a str,
        msisdn: Option<&'a str>,
        data: Vec<u8>,
    },
    DeleteSubscriber(&'a str),
    Usage {
        subscriber: &'a str,
        data: Vec<u8>,
        /// As for sessions.
        version: i64,
    },
    DeleteUsage(&'a str),
    /// One row per sink.
    Event {
        seq: i64,
        sinks: &'a [std::sync::Arc<str>],
        subscriber: &'a str,
        data: &'a [u8],
    },
    AckEvent {
        seq: i64,
        sink: &'a str,
    },
}

pub(super) fn encode(change: &Change) -> Result<Encoded<'_>, StoreError> {
    Ok(match change {
        Change::PutSession(s) => Encoded::Session {
            id: &s.id,
            subscriber: &s.subscriber,
            state: match s.state {
                SessionState::Open => "open",
                SessionState::Closed => "closed",
            },
            pcef_host: &s.pcef_host,
            updated_ms: s.updated_ms,
            closed_ms: s.closed_ms,
            data: blob::encode_session(s)?,
            ue_ipv4: s.ue_ipv4.map(|a| a.to_string()),
            version: s.version.get() as i64,
        },
        Change::DeleteSession { id, .. } => Encoded::DeleteSession(id),
        Change::PutSubscriber(s) => Encoded::Subscriber {
            imsi: &s.imsi,
            msisdn: s.msisdn.as_deref(),
            data: blob::encode_subscriber(s)?,
        },
        Change::DeleteSubscriber(imsi) => Encoded::DeleteSubscriber(imsi),
        Change::PutUsage(u) => Encoded::Usage {
            subscriber: &u.subscriber,
            data: blob::encode_usage(u)?,
            version: u.version.get() as i64,
        },
        Change::DeleteUsage(subscriber) => Encoded::DeleteUsage(subscriber),
        Change::PutEvent(e) => Encoded::Event {
            seq: e.seq as i64,
            sinks: &e.sinks,
            subscriber: e.subscriber_key(),
            data: &e.body,
        },
        Change::AckEvent { seq, sink, .. } => Encoded::AckEvent {
            seq: *seq as i64,
            sink,
        },
    })
}
