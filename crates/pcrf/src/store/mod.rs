//! Durable storage behind one trait, so the embedded SQLite store and the
//! PostgreSQL store are interchangeable. The in-memory tables are the read
//! path; the store is written through the group-commit writer and read only
//! at start-up (recovery) and for cold subscribers.

use crate::session::GxSession;
use crate::subscriber::Subscriber;
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
}

/// Storage failed; the request that needed it is answered 5012.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("store data corrupt: {0}")]
    Corrupt(String),
}

/// What a durable store can do. Implementations are blocking (called from
/// the group-commit writer thread and at start-up), never on the async path.
pub trait Store: Send + 'static {
    /// Applies every change in one transaction; commits only if a row
    /// changed. Returns the number of rows changed.
    fn apply(&mut self, changes: &[Change]) -> Result<usize, StoreError>;
    /// Every open session, for recovery at start-up.
    fn open_sessions(&mut self) -> Result<Vec<GxSession>, StoreError>;
    /// Every subscriber profile (loaded at start-up; the table is the read path).
    fn subscribers(&mut self) -> Result<Vec<Subscriber>, StoreError>;
    /// Deletes closed sessions closed before `before_ms`; returns how many.
    fn purge_closed(&mut self, before_ms: i64) -> Result<usize, StoreError>;
}
