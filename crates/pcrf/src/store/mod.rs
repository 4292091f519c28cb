//! Durable storage behind one trait, so the embedded SQLite store and the
//! PostgreSQL store are interchangeable. The in-memory tables are the read
//! path; the store is written through the group-commit writer and read only
//! at start-up (recovery) and for cold subscribers.

pub(crate) mod blob;
pub mod config;
pub mod group_commit;
mod json_writer;
pub mod postgres;
pub mod sqlite;

#[cfg(test)]
mod crash_test;
#[cfg(test)]
mod fixtures;

pub use blob::encode_session;
pub use config::{Durability, StoreConfig, StoreKind};
pub use group_commit::{GroupCommit, GroupCommitOptions, GroupCommitStats, Pending, Slot};
pub use sqlite::SqliteStore;

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
}

/// The row a change touches: two changes with the same key in one batch
/// coalesce to the later one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChangeKey<'a> {
    Session(&'a str),
    Subscriber(&'a str),
    Usage(&'a str),
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
        }
    }
}

/// Storage failed; the request that needed it is answered 5012.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store cannot write or read now (disk full, directory not
    /// writable, database locked, writer stopped); the message says which.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Stored data cannot be decoded; the message names the record.
    #[error("store data corrupt: {0}")]
    Corrupt(String),
}

/// What a durable store can do. Implementations are blocking (called from
/// the group-commit writer thread and at start-up), never on the async path.
pub trait Store: Send + 'static {
    /// Applies every change in one transaction; commits only if a row
    /// changed (otherwise rolls back: nothing to make durable). Returns the
    /// number of rows changed; 0 means no commit happened.
    fn apply(&mut self, changes: &[Change]) -> Result<usize, StoreError>;
    /// Every open session, for recovery at start-up.
    fn open_sessions(&mut self) -> Result<Vec<GxSession>, StoreError>;
    /// Every subscriber profile (loaded at start-up; the table is the read path).
    fn subscribers(&mut self) -> Result<Vec<Subscriber>, StoreError>;
    /// One session by Session-Id, open or closed (API look-ups of records
    /// no longer in memory).
    fn session(&mut self, id: &str) -> Result<Option<GxSession>, StoreError>;
    /// One subscriber by IMSI (cold profiles behind the LRU).
    fn subscriber(&mut self, imsi: &str) -> Result<Option<Subscriber>, StoreError>;
    /// Every subscriber's usage row, for recovery at start-up (corrupt rows
    /// are skipped, logged and counted in `skipped_corrupt`).
    fn usage_records(&mut self) -> Result<Vec<SubscriberUsage>, StoreError>;
    /// One subscriber's usage row by its key (`SubscriberUsage::subscriber`).
    fn usage(&mut self, subscriber: &str) -> Result<Option<SubscriberUsage>, StoreError>;
    /// Deletes at most `limit` sessions closed before `before_ms` (in one
    /// short transaction, so the writer is never held long); returns how
    /// many. The caller repeats while it returns `limit`.
    fn purge_closed(&mut self, before_ms: i64, limit: usize) -> Result<usize, StoreError>;
    /// Records found undecodable by the last `open_sessions`,
    /// `subscribers` or `usage_records` call (skipped, each logged with its key); call it after
    /// each of them to report the count at start-up.
    fn skipped_corrupt(&self) -> u64;
}

/// Opens the store like `open_store`, also returning the handles the API
/// holds when the store has them (PostgreSQL: query profiler, connection
/// health for `/v1/ready`).
pub fn open_store_with_handles(
    config: &StoreConfig,
) -> Result<(Box<dyn Store>, Option<postgres::PostgresHandles>), StoreError> {
    match config.kind {
        StoreKind::Postgres => {
            let store = postgres::PostgresStore::open(config.postgres_options()?)?;
            let handles = store.handles();
            Ok((Box::new(store), Some(handles)))
        }
        StoreKind::Sqlite => Ok((open_store(config)?, None)),
    }
}

/// Opens the store the configuration names (creating and migrating it).
pub fn open_store(config: &StoreConfig) -> Result<Box<dyn Store>, StoreError> {
    match config.kind {
        StoreKind::Sqlite => {
            let mut store = SqliteStore::open(&config.path, config.durability)?;
            if let Some(mb) = config.max_size_mb {
                store.limit_size(mb.saturating_mul(1024 * 1024))?;
            }
            Ok(Box::new(store))
        }
        StoreKind::Postgres => Ok(Box::new(postgres::PostgresStore::open(
            config.postgres_options()?,
        )?)),
    }
}
