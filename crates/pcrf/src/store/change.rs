//! One state change to persist, as the services hand it to the group-commit
//! writer: a session, a subscriber, a subscriber's usage, or their removal,
//! and the notification outbox's events (written with the change that
//! caused them, removed once delivered); and the shard each change belongs
//! to (see `store::shard`).

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
    /// With its subscriber key (`GxSession::subscriber`): the shard that
    /// holds the row is chosen by it.
    DeleteSession {
        id: String,
        subscriber: String,
    },
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
        /// The event was written with a provisioning change (its row is
        /// in the provisioning shard; see `Event::with_provisioning`).
        provisioning: bool,
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
            Change::DeleteSession { id, .. } => ChangeKey::Session(id),
            Change::PutSubscriber(s) => ChangeKey::Subscriber(&s.imsi),
            Change::DeleteSubscriber(imsi) => ChangeKey::Subscriber(imsi),
            Change::PutUsage(u) => ChangeKey::Usage(&u.subscriber),
            Change::DeleteUsage(subscriber) => ChangeKey::Usage(subscriber),
            Change::PutEvent(e) => ChangeKey::Event(e.seq),
            Change::AckEvent { seq, sink, .. } => ChangeKey::EventDelivery(*seq, sink),
        }
    }
}

/// Which writer a change goes to: the rows of one subscriber (its sessions
/// and usage) always to the same one, so that they commit together;
/// provisioning (subscriber profiles) always to the first, so that a bulk
/// provisioning request stays one transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route<'a> {
    /// By the subscriber key (`GxSession::subscriber`,
    /// `SubscriberUsage::subscriber`).
    Subscriber(&'a str),
    /// Subscriber profiles: shard 0.
    Provisioning,
}

impl Change {
    /// `DeleteSession` of session `id` of subscriber `subscriber`.
    pub fn delete_session(id: impl Into<String>, subscriber: impl Into<String>) -> Change {
        Change::DeleteSession {
            id: id.into(),
            subscriber: subscriber.into(),
        }
    }

    /// Where this change is written (see `Route`).
    pub fn route(&self) -> Route<'_> {
        match self {
            Change::PutSession(s) => Route::Subscriber(&s.subscriber),
            Change::DeleteSession { subscriber, .. } => Route::Subscriber(subscriber),
            Change::PutUsage(u) => Route::Subscriber(&u.subscriber),
            Change::DeleteUsage(subscriber) => Route::Subscriber(subscriber),
            Change::PutSubscriber(_) | Change::DeleteSubscriber(_) => Route::Provisioning,
            // An event goes where the change that caused it goes, so that
            // both commit in one transaction; its acknowledgement follows.
            Change::PutEvent(e) if e.with_provisioning() => Route::Provisioning,
            Change::PutEvent(e) => Route::Subscriber(e.subscriber_key()),
            Change::AckEvent {
                provisioning: true, ..
            } => Route::Provisioning,
            Change::AckEvent { subscriber, .. } => Route::Subscriber(subscriber),
        }
    }
}
