//! The version of a record's row in a store shared by several nodes
//! (PostgreSQL), carried with the in-memory record so that a write is a
//! compare-and-set: it succeeds only if the row is still at the version
//! this record was read or last written at (see docs/cluster.md). The
//! writer sets the new version on the committed record itself, so the
//! services that publish that record after the commit need not know it.
//! Not part of the record's content: never serialised, and equal whatever
//! its value (a record read twice is the same record).

use std::sync::atomic::{AtomicU64, Ordering};

/// A row version (0: never stored, or a row older than versioning).
#[derive(Default)]
pub struct RowVersion(AtomicU64);

impl RowVersion {
    /// A record read at `v`.
    pub fn at(v: u64) -> RowVersion {
        RowVersion(AtomicU64::new(v))
    }

    /// The version of the row this record was read or written at.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// The record is now stored at `v` (the writer, after the commit;
    /// a store, when it reads the record).
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Release);
    }
}

impl Clone for RowVersion {
    fn clone(&self) -> Self {
        RowVersion::at(self.get())
    }
}

impl PartialEq for RowVersion {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for RowVersion {}

impl std::fmt::Debug for RowVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_copies_the_version_and_never_differs() {
        let a = RowVersion::at(3);
        let b = a.clone();
        a.set(4);
        assert_eq!((a.get(), b.get()), (4, 3));
        assert_eq!(a, b);
    }
}
