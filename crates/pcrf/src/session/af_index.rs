//! Rx Session-Id → the Gx Session-Id it is bound to. AF sessions live
//! inside Gx records (`GxSession::af`); an STR or an AAR modification names
//! only the Rx session, so this finds its Gx session without a table walk.
//! The session table keeps it on insert, publish and remove, like the
//! binding index, so it is rebuilt from the records at start-up.

use super::record::{GxSession, SessionState};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::BuildHasher;

const SHARDS: usize = 16;

/// Rx Session-Id → Gx Session-Id, for open Gx sessions.
pub struct AfIndex {
    shards: Vec<Mutex<HashMap<String, String>>>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for AfIndex {
    fn default() -> Self {
        AfIndex {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: Default::default(),
        }
    }
}

fn rx_ids(s: &GxSession) -> impl Iterator<Item = &str> {
    let open = s.state == SessionState::Open;
    s.af.iter().filter(move |_| open).map(|a| a.id.as_str())
}

impl AfIndex {
    fn shard(&self, rx: &str) -> &Mutex<HashMap<String, String>> {
        &self.shards[(self.hasher.hash_one(rx) as usize) % SHARDS]
    }

    /// Indexes the AF sessions of a record.
    pub fn bind(&self, s: &GxSession) {
        for rx in rx_ids(s) {
            self.shard(rx).lock().insert(rx.to_owned(), s.id.clone());
        }
    }

    /// Forgets the AF sessions of a record (only entries pointing to it).
    pub fn unbind(&self, s: &GxSession) {
        for rx in rx_ids(s) {
            let mut shard = self.shard(rx).lock();
            if shard.get(rx) == Some(&s.id) {
                shard.remove(rx);
            }
        }
    }

    /// Keeps the index right when `old` is replaced by `new`.
    pub fn moved(&self, old: &GxSession, new: &GxSession) {
        if old.af.is_empty() && new.af.is_empty() {
            return;
        }
        self.unbind(old);
        self.bind(new);
    }

    /// The Gx Session-Id an Rx session is bound to.
    pub fn gx_of(&self, rx: &str) -> Option<String> {
        self.shard(rx).lock().get(rx).cloned()
    }

    /// Indexed AF sessions (for gauges and tests).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::af::AfSession;

    fn af(id: &str) -> AfSession {
        AfSession {
            id: id.into(),
            af_host: "pcscf".into(),
            af_realm: "r".into(),
            application: None,
            charging_id: None,
            service_urn: None,
            specific_actions: vec![],
            media: vec![],
            rules: vec![],
            created_ms: 0,
            updated_ms: 0,
        }
    }

    #[test]
    fn follows_records_as_they_change_and_close() {
        let idx = AfIndex::default();
        let mut a = GxSession::new("gx1".into(), "001".into(), "pgw".into(), "r".into(), 1);
        a.af.push(af("rx1"));
        idx.bind(&a);
        assert_eq!(idx.gx_of("rx1").as_deref(), Some("gx1"));
        let mut b = a.clone();
        b.af = vec![af("rx2")];
        idx.moved(&a, &b);
        assert_eq!(idx.gx_of("rx1"), None);
        assert_eq!(idx.gx_of("rx2").as_deref(), Some("gx1"));
        let mut closed = b.clone();
        closed.state = SessionState::Closed;
        idx.moved(&b, &closed);
        assert!(idx.is_empty());
    }
}
