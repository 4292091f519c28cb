//! Durable storage behind one trait, so the embedded SQLite store and the
//! PostgreSQL store are interchangeable. The in-memory tables are the read
//! path; the store is written through the group-commit writer and read only
//! at start-up (recovery) and for cold subscribers.

mod change;
mod error;
mod interface;
mod open;
mod row_version;

pub use change::{Change, ChangeKey, Route};
pub use error::{Conflicted, StoreError};
pub use interface::{OpenSessionsBy, Store};
pub use open::{open_shards, OpenedStore, Recovered};
pub use row_version::RowVersion;

pub(crate) mod blob;
mod checkpointer;
pub mod config;
pub mod group_commit;
pub mod postgres;
pub mod shard;
mod sharded_writer;
pub mod sqlite;
pub mod sqlite_layout;
pub mod sqlite_versions;
pub mod versions;

#[cfg(test)]
mod crash_test;
#[cfg(test)]
mod fixtures;

pub use blob::encode_session;
pub use config::{Durability, StoreConfig, StoreKind};
pub use group_commit::{GroupCommit, GroupCommitOptions, GroupCommitStats, Pending, Slot};
pub use sharded_writer::ShardedWriter;
pub use sqlite::SqliteStore;
pub use sqlite_versions::SqliteVersions;
pub use versions::{NewVersion, StoredVersion, VersionStore};
