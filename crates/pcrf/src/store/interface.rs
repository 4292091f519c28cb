//! What a durable store can do, as one trait, so the embedded SQLite store
//! and the PostgreSQL store are interchangeable behind the group-commit
//! writer.

use crate::session::GxSession;
use crate::store::{Change, StoreError};
use crate::subscriber::Subscriber;
use crate::usage::SubscriberUsage;

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
    /// Every notification still owed to a sink, oldest first (one `Event`
    /// per row: its `sinks` holds that row's sink). Corrupt rows are
    /// skipped, logged and counted in `skipped_corrupt`.
    fn pending_events(&mut self) -> Result<Vec<crate::notify::Event>, StoreError>;
    /// Deletes at most `limit` sessions closed before `before_ms` (in one
    /// short transaction, so the writer is never held long); returns how
    /// many. The caller repeats while it returns `limit`.
    fn purge_closed(&mut self, before_ms: i64, limit: usize) -> Result<usize, StoreError>;
    /// Whether the store takes a write now, by making one that changes
    /// nothing: the readiness check. A store that cannot tell (a full
    /// disk may still take a write that needs no new space) leaves that to
    /// the outcome of the last batch (see `group_commit`).
    fn probe(&mut self) -> Result<(), StoreError>;
    /// Records found undecodable by the last `open_sessions`,
    /// `subscribers` or `usage_records` call (skipped, each logged with its key); call it after
    /// each of them to report the count at start-up.
    fn skipped_corrupt(&self) -> u64;
    /// Names this node (its Origin-Host). A store shared by several nodes
    /// writes it as the owner of the sessions this node writes, and
    /// `open_sessions` then returns this node's own only. The embedded
    /// store (one node) ignores it.
    fn set_owner(&mut self, _node: &str) {}
    /// Whether session and usage writes are compare-and-set on the row's
    /// version (a store shared by several nodes).
    fn compare_and_set(&self) -> bool {
        false
    }
    /// The ids of the open sessions `by` finds, from a store shared by
    /// several nodes (a request on a node that holds none of them: an Rx
    /// AAR or a TDF's CCR, a top-up). The embedded store has no other
    /// node: none.
    fn open_session_ids(&mut self, _by: &OpenSessionsBy) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }
    /// Upkeep on the writer thread between batches, after a batch's
    /// answers left: the embedded store lets its WAL start over (see
    /// `checkpointer`). Errors are the store's to log; the next batch
    /// reports a store that fails.
    fn after_batch(&mut self) {}
    /// Gives back what the store holds in memory only for speed (the
    /// embedded store's page cache), when the writer has been idle a while;
    /// it is read back from disk as needed.
    fn release_memory(&mut self) {}
    /// Bytes the store holds in memory for speed now (the embedded store's
    /// page cache; 0 for a store that holds none here).
    fn cache_bytes(&self) -> u64 {
        0
    }
}

/// What finds open sessions another node may hold, in a store shared by
/// several nodes: each is an indexed column of the session row, written
/// with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenSessionsBy {
    /// The UE's IPv4 address (an Rx AAR or a TDF's CCR-I).
    Ipv4(String),
    /// The UE's IPv6 prefix: the stored prefixes that contain the address
    /// an AF or a TDF sent (`session::binding::stored_prefixes_containing`).
    Ipv6Prefixes(Vec<String>),
    /// The subscriber key (a top-up or usage change through the API).
    Subscriber(String),
    /// An Rx or Sd Session-Id the Gx session holds (an AAR update, an STR,
    /// a TDF's CCR-U or CCR-T).
    SubSession(String),
}
