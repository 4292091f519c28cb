//! Why the store failed, for the request that needed it (answered 5012)
//! and for start-up. Every store and the group-commit writer return it.

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
    /// Another node wrote these rows since this node read them (a shared
    /// store's compare-and-set failed): nothing of the request was
    /// written. The node drops its copies, reads them again and retries.
    #[error("store conflict: {} row(s) written by another node", .0.len())]
    Conflict(Vec<Conflicted>),
}

/// A row whose compare-and-set failed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Conflicted {
    /// A session, by Session-Id.
    Session(String),
    /// A subscriber's usage, by subscriber key.
    Usage(String),
}

impl Conflicted {
    /// Whether `key` is this row.
    pub fn is(&self, key: &super::ChangeKey<'_>) -> bool {
        match (self, key) {
            (Conflicted::Session(a), super::ChangeKey::Session(b)) => a == b,
            (Conflicted::Usage(a), super::ChangeKey::Usage(b)) => a == b,
            _ => false,
        }
    }
}
