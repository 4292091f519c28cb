//! What this store last committed to each open session's row, as hashes.
//!
//! A batch is committed only if a row changed, which takes two round trips
//! (the statements, then COMMIT or ROLLBACK once their row counts are
//! known). When the store already knows a row will change, because a
//! session it committed earlier is written with different bytes, the
//! outcome is certain and COMMIT can travel with the statements: one round
//! trip, one wakeup less on each side per batch. Almost every batch at load
//! holds such an update.
//!
//! Only open sessions are kept (a closed or deleted one is forgotten), so
//! the map is bounded by the open sessions. It errs towards "not certain":
//! rows it has not seen, a batch whose outcome is unknown, and everything
//! after a reconnect are not known.

use super::encoded::Encoded;
use std::collections::HashMap;
use xxhash_rust::xxh3::xxh3_64;

/// Hashes of the session blobs last committed, by a hash of the session id.
#[derive(Debug, Default)]
pub(super) struct Written {
    sessions: HashMap<u64, u64>,
}

/// A session row a batch writes, hashed once per batch.
#[derive(Debug)]
pub(super) struct SessionRow {
    id: u64,
    /// The blob's hash; `None` for a delete.
    data: Option<u64>,
    open: bool,
}

/// The session rows of `batch`.
pub(super) fn session_rows(batch: &[Encoded<'_>]) -> Vec<SessionRow> {
    batch
        .iter()
        .filter_map(|e| match e {
            Encoded::Session {
                id, state, data, ..
            } => Some(SessionRow {
                id: xxh3_64(id.as_bytes()),
                data: Some(xxh3_64(data)),
                open: *state == "open",
            }),
            Encoded::DeleteSession(id) => Some(SessionRow {
                id: xxh3_64(id.as_bytes()),
                data: None,
                open: false,
            }),
            _ => None,
        })
        .collect()
}

impl Written {
    /// True when committing a batch with these rows certainly changes a
    /// row: it rewrites a session this store committed with other bytes.
    /// The upsert's WHERE compares exactly those bytes, so the row is updated.
    pub(super) fn changes_a_row(&self, rows: &[SessionRow]) -> bool {
        rows.iter()
            .any(|r| match (r.data, self.sessions.get(&r.id)) {
                (Some(data), Some(committed)) => *committed != data,
                _ => false,
            })
    }

    /// The batch was committed: its open sessions now hold these bytes.
    pub(super) fn committed(&mut self, rows: &[SessionRow]) {
        for r in rows {
            match r.data {
                Some(data) if r.open => {
                    self.sessions.insert(r.id, data);
                }
                _ => {
                    self.sessions.remove(&r.id);
                }
            }
        }
    }

    /// Whether the batch was committed is unknown (the connection failed):
    /// its sessions are no longer known.
    pub(super) fn unknown(&mut self, rows: &[SessionRow]) {
        for r in rows {
            self.sessions.remove(&r.id);
        }
    }

    /// A new connection may reach another server (a failover): nothing is known.
    pub(super) fn clear(&mut self) {
        self.sessions.clear();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.sessions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session<'a>(id: &'a str, state: &'static str, data: &[u8]) -> Encoded<'a> {
        Encoded::Session {
            id,
            subscriber: "001010000000001",
            state,
            pcef_host: "pgw.test",
            updated_ms: 1,
            closed_ms: None,
            data: data.to_vec(),
        }
    }

    #[test]
    fn only_a_known_session_with_other_bytes_is_certain() {
        let mut w = Written::default();
        let first = session_rows(&[session("gx;1", "open", b"v1")]);
        // Never committed here: the row may hold these bytes already.
        assert!(!w.changes_a_row(&first));
        w.committed(&first);
        // The same bytes again: the upsert may change nothing.
        assert!(!w.changes_a_row(&first));
        // Other bytes for a session it committed: certain.
        assert!(w.changes_a_row(&session_rows(&[session("gx;1", "open", b"v2")])));
        // Closing it is a change too.
        assert!(w.changes_a_row(&session_rows(&[session("gx;1", "closed", b"v2")])));
        // One certain row makes the batch certain, whatever else it holds.
        let mixed = [
            Encoded::DeleteUsage("001010000000009"),
            session("gx;2", "open", b"new"),
            session("gx;1", "open", b"v2"),
        ];
        assert!(w.changes_a_row(&session_rows(&mixed)));
        // Deleting it may find nothing (a purge): not certain.
        assert!(!w.changes_a_row(&session_rows(&[Encoded::DeleteSession("gx;1")])));
    }

    #[test]
    fn closed_deleted_and_unknown_sessions_are_forgotten() {
        let mut w = Written::default();
        w.committed(&session_rows(&[
            session("gx;1", "open", b"a"),
            session("gx;2", "open", b"b"),
            session("gx;3", "open", b"c"),
        ]));
        assert_eq!(w.len(), 3);
        // Closed (purged later by SQL, so never known again) and deleted.
        w.committed(&session_rows(&[
            session("gx;1", "closed", b"a2"),
            Encoded::DeleteSession("gx;2"),
        ]));
        assert_eq!(w.len(), 1);
        assert!(!w.changes_a_row(&session_rows(&[session("gx;1", "closed", b"a3")])));
        assert!(!w.changes_a_row(&session_rows(&[session("gx;2", "open", b"b2")])));
        // A batch that may or may not have committed.
        w.unknown(&session_rows(&[session("gx;3", "open", b"c2")]));
        assert!(!w.changes_a_row(&session_rows(&[session("gx;3", "open", b"c3")])));
        w.committed(&session_rows(&[session("gx;4", "open", b"d")]));
        w.clear();
        assert!(!w.changes_a_row(&session_rows(&[session("gx;4", "open", b"d2")])));
    }
}
