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
}
