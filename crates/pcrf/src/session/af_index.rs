//! Rx Session-Id → the Gx Session-Id it is bound to. AF sessions live
//! inside Gx records (`GxSession::af`); an STR or an AAR modification names
//! only the Rx session, so this finds its Gx session without a table walk.
//! The session table keeps it on insert, publish and remove, like the
//! binding index, so it is rebuilt from the records at start-up.

use super::record::{GxSession, SessionState};
use dashmap::DashMap;

/// Rx Session-Id → Gx Session-Id, for open Gx sessions.
#[derive(Default)]
pub struct AfIndex {
    gx_of: DashMap<String, String>,
}

fn rx_ids(s: &GxSession) -> impl Iterator<Item = &str> {
    let open = s.state == SessionState::Open;
    s.af.iter().filter(move |_| open).map(|a| a.id.as_str())
}

impl AfIndex {
    /// Indexes the AF sessions of a record.
    pub fn bind(&self, s: &GxSession) {
        for rx in rx_ids(s) {
            self.gx_of.insert(rx.to_owned(), s.id.to_string());
        }
    }

    /// Forgets the AF sessions of a record (only entries pointing to it).
    pub fn unbind(&self, s: &GxSession) {
        for rx in rx_ids(s) {
            self.gx_of.remove_if(rx, |_, gx| **gx == *s.id);
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
        self.gx_of.get(rx).map(|gx| gx.value().clone())
    }

    /// Indexed AF sessions (for gauges and tests).
    pub fn len(&self) -> usize {
        self.gx_of.len()
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
            notification_uri: None,
            created_ms: 0,
            updated_ms: 0,
        }
    }

    #[test]
    fn follows_records_as_they_change_and_close() {
        let idx = AfIndex::default();
        let mut a = GxSession::new("gx1", "001", "pgw", "r", 1);
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
