//! One state change to persist, as the services hand it to the group-commit
//! writer: a session, a subscriber, a subscriber's usage, or their removal,
//! and the notification outbox's events (written with the change that
//! caused them, removed once delivered).

use crate::notify::Event;
use crate::session::GxSession;
use crate::subscriber::Subscriber;
use crate::usage::SubscriberUsage;
use std::sync::Arc;

/// One state change to persist.
#[derive(Clone, Debug)]
pub enum Change {
    /// Insert or replace a session (the whole record is one row).
    PutSession(Arc<GxSession>),
    /// Remove a session record (after retention, or on 5002 from the PCEF).
    DeleteSession(String),
    PutSubscriber(Arc<Subscriber>),
    DeleteSubscriber(String),
    /// Insert or replace a subscriber's usage accumulators (one row per
    /// subscriber key, written in the same batch as the session whose
    /// report changed them).
    PutUsage(Arc<SubscriberUsage>),
    /// Remove a subscriber's usage row (by `SubscriberUsage::subscriber`).
    DeleteUsage(String),
    /// Put a notification in the outbox: one row per sink it is owed to,
    /// keyed by its sequence number and the sink, carrying its subscriber
    /// (so it routes with the subscriber's other rows).
    PutEvent(Arc<Event>),
    /// A sink has the event: remove its row.
    AckEvent {
        seq: u64,
        sink: Arc<str>,
        subscriber: String,
    },
}

/// The row a change touches: two changes with the same key in one batch
/// coalesce to the later one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChangeKey<'a> {
    Session(&'a str),
    Subscriber(&'a str),
    Usage(&'a str),
    /// An event (all its rows).
    Event(u64),
    /// One event's row for one sink.
    EventDelivery(u64, &'a str),
}

impl Change {
    /// The row this change writes.
    pub fn key(&self) -> ChangeKey<'_> {
        match self {
            Change::PutSession(s) => ChangeKey::Session(&s.id),
            Change::DeleteSession(id) => ChangeKey::Session(id),
            Change::PutSubscriber(s) => ChangeKey::Subscriber(&s.imsi),
            Change::DeleteSubscriber(imsi) => ChangeKey::Subscriber(imsi),
            Change::PutUsage(u) => ChangeKey::Usage(&u.subscriber),
            Change::DeleteUsage(subscriber) => ChangeKey::Usage(subscriber),
            Change::PutEvent(e) => ChangeKey::Event(e.seq),
            Change::AckEvent { seq, sink, .. } => ChangeKey::EventDelivery(*seq, sink),
        }
    }
}
