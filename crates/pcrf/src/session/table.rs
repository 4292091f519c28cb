//! The in-memory session table: the read path for every request after a
//! session is created. Sharded so that requests for different sessions never
//! contend; each session has its own async update lock so two requests for
//! the same session (a retransmission racing the original) apply in order,
//! while readers (the API, policy pushes) read the current record lock-free.

use super::af_index::AfIndex;
use super::binding::Bindings;
use super::id_set::IdSet;
use super::record::{GxSession, SessionState};
use arc_swap::ArcSwap;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use std::sync::Arc;

/// One session's slot: the current record and the lock writers hold while
/// they compute, commit and publish the next one.
pub struct SessionSlot {
    current: ArcSwap<GxSession>,
    update: tokio::sync::Mutex<()>,
    /// The table's address index, kept right as records are published.
    bindings: Arc<Bindings>,
    /// The table's Rx Session-Id index, kept right the same way.
    af: Arc<AfIndex>,
}

impl std::fmt::Debug for SessionSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSlot")
            .field("id", &self.load().id)
            .finish()
    }
}

impl SessionSlot {
    fn new(s: Arc<GxSession>, bindings: Arc<Bindings>, af: Arc<AfIndex>) -> SessionSlot {
        SessionSlot {
            current: ArcSwap::new(s),
            update: tokio::sync::Mutex::new(()),
            bindings,
            af,
        }
    }
    /// The current record.
    pub fn load(&self) -> Arc<GxSession> {
        self.current.load_full()
    }
    /// Serialises writers of this session; hold it across the commit.
    pub async fn lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.update.lock().await
    }
    /// Publishes a new record (call with the update lock held).
    pub fn publish(&self, s: Arc<GxSession>) {
        let old = self.current.swap(s.clone());
        self.bindings.moved(&old, &s);
        self.af.moved(&old, &s);
    }
}

/// All Gx sessions, open and recently closed, by Session-Id, with an index
/// by subscriber for policy pushes and one by UE address for binding Rx
/// and Sd sessions.
#[derive(Default)]
pub struct SessionTable {
    /// Keyed by the record's own Session-Id allocation, as the indexes are.
    slots: DashMap<Arc<str>, Arc<SessionSlot>>,
    /// A subscriber's sessions: nearly always one (id_set.rs).
    by_subscriber: DashMap<Arc<str>, IdSet>,
    bindings: Arc<Bindings>,
    af: Arc<AfIndex>,
}

impl SessionTable {
    /// The slot of a session, if known.
    pub fn get(&self, id: &str) -> Option<Arc<SessionSlot>> {
        self.slots.get(id).map(|s| s.value().clone())
    }

    /// Inserts a new session, or returns the existing slot if the id is taken
    /// (a CCR-I retransmission or a PCEF reusing an id).
    pub fn insert(&self, s: Arc<GxSession>) -> Result<Arc<SessionSlot>, Arc<SessionSlot>> {
        let slot = Arc::new(SessionSlot::new(
            s.clone(),
            self.bindings.clone(),
            self.af.clone(),
        ));
        match self.slots.entry(s.id.clone()) {
            Entry::Occupied(existing) => return Err(existing.get().clone()),
            Entry::Vacant(e) => {
                e.insert(slot.clone());
            }
        }
        self.bindings.bind(&s);
        self.af.bind(&s);
        self.index(&s.subscriber, &s.id);
        Ok(slot)
    }

    /// Replaces the slot of a session with a new record, keeping indexes
    /// right (used when a closed session's id is reused by a new CCR-I).
    pub fn replace(&self, s: Arc<GxSession>) -> Arc<SessionSlot> {
        let slot = Arc::new(SessionSlot::new(
            s.clone(),
            self.bindings.clone(),
            self.af.clone(),
        ));
        let old = self.slots.insert(s.id.clone(), slot.clone());
        if let Some(old) = &old {
            self.bindings.unbind(&old.load());
            self.af.unbind(&old.load());
        }
        self.bindings.bind(&s);
        self.af.bind(&s);
        if let Some(old) = old {
            let old = old.load();
            if old.subscriber != s.subscriber {
                self.unindex(&old.subscriber, &s.id);
            }
        }
        self.index(&s.subscriber, &s.id);
        slot
    }

    /// Forgets a session entirely.
    pub fn remove(&self, id: &str) -> Option<Arc<SessionSlot>> {
        let (_, slot) = self.slots.remove(id)?;
        let cur = slot.load();
        self.bindings.unbind(&cur);
        self.af.unbind(&cur);
        self.unindex(&cur.subscriber, id);
        Some(slot)
    }

    fn index(&self, sub: &Arc<str>, id: &Arc<str>) {
        match self.by_subscriber.get_mut(&**sub) {
            Some(mut ids) => ids.insert(id),
            None => self
                .by_subscriber
                .entry(sub.clone())
                .or_default()
                .insert(id),
        }
    }

    fn unindex(&self, sub: &str, id: &str) {
        self.by_subscriber.remove_if_mut(sub, |_, set| {
            set.remove(id);
            set.is_empty()
        });
    }

    /// Slots of the open sessions holding a UE address (TS 29.213 §8.2
    /// binding): the IPv4 address, or an IPv6 prefix containing it.
    pub fn bound_to(&self, addr: std::net::IpAddr) -> Vec<Arc<SessionSlot>> {
        self.bindings
            .find(addr)
            .iter()
            .filter_map(|id| self.get(id))
            .collect()
    }

    /// The slot of the Gx session an Rx session is bound to.
    pub fn bound_af(&self, rx_session: &str) -> Option<Arc<SessionSlot>> {
        self.af.gx_of(rx_session).and_then(|id| self.get(&id))
    }

    /// The Rx Session-Id index (for gauges and tests).
    pub fn af_index(&self) -> &AfIndex {
        &self.af
    }

    /// The address index (for gauges and tests).
    pub fn bindings(&self) -> &Bindings {
        &self.bindings
    }

    /// The subscribers with a session here.
    pub fn subscribers(&self) -> Vec<String> {
        self.by_subscriber
            .iter()
            .map(|e| e.key().to_string())
            .collect()
    }

    /// Session ids of a subscriber (open and closed).
    pub fn ids_of_subscriber(&self, sub: &str) -> Vec<String> {
        self.by_subscriber
            .get(sub)
            .map(|s| s.iter().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Current records of one subscriber (through the index) or of all,
    /// that `keep` accepts, sorted by Session-Id, at most `limit`.
    pub fn list(
        &self,
        subscriber: Option<&str>,
        keep: impl Fn(&GxSession) -> bool,
        limit: usize,
    ) -> Vec<Arc<GxSession>> {
        let candidates: Vec<Arc<SessionSlot>> = match subscriber {
            Some(sub) => self
                .ids_of_subscriber(sub)
                .iter()
                .filter_map(|id| self.get(id))
                .collect(),
            None => self.slots.iter().map(|s| s.value().clone()).collect(),
        };
        let mut out: Vec<Arc<GxSession>> = candidates
            .iter()
            .map(|s| s.load())
            .filter(|s| keep(s))
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        out.truncate(limit);
        out
    }

    /// Open and closed sessions held (gauges; walks the table).
    /// Sessions held, open and closed: O(shards), unlike [`Self::counts`].
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn counts(&self) -> (usize, usize) {
        let mut open = 0;
        let mut closed = 0;
        for v in self.slots.iter() {
            match v.load().state {
                SessionState::Open => open += 1,
                SessionState::Closed => closed += 1,
            }
        }
        (open, closed)
    }

    /// Ids of closed sessions closed before `before_ms` (for purging).
    pub fn closed_before(&self, before_ms: i64) -> Vec<String> {
        self.slots
            .iter()
            .map(|v| v.load())
            .filter(|v| {
                v.state == SessionState::Closed && v.closed_ms.is_some_and(|c| c < before_ms)
            })
            .map(|v| v.id.to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(id: &str, sub: &str, apn: &str) -> Arc<GxSession> {
        let mut s = GxSession::new(id, sub, "pgw1", "realm", 1);
        s.apn = Some(apn.into());
        Arc::new(s)
    }

    #[test]
    fn insert_get_index_remove() {
        let t = SessionTable::default();
        assert!(t.insert(session("a", "001", "internet")).is_ok());
        assert!(t.insert(session("b", "001", "ims")).is_ok());
        assert!(t.insert(session("a", "002", "internet")).is_err());
        assert_eq!(t.ids_of_subscriber("001").len(), 2);
        let ims = |s: &GxSession| s.apn.as_deref() == Some("ims");
        let found = t.list(Some("001"), ims, 10);
        assert_eq!(found.iter().map(|s| &*s.id).collect::<Vec<_>>(), vec!["b"]);
        assert_eq!(t.list(None, |_| true, 1).len(), 1, "limit applies");
        assert_eq!(t.counts(), (2, 0));
        t.remove("a");
        assert!(t.get("a").is_none());
        assert_eq!(t.ids_of_subscriber("001"), vec!["b".to_string()]);
        t.replace(session("b", "003", "ims"));
        assert!(t.ids_of_subscriber("001").is_empty());
        assert_eq!(t.ids_of_subscriber("003"), vec!["b".to_string()]);
    }

    #[test]
    fn the_address_index_follows_insert_publish_replace_and_remove() {
        let t = SessionTable::default();
        let mut s = (*session("a", "001", "internet")).clone();
        s.ue_ipv4 = Some([10, 1, 0, 1].into());
        let slot = t.insert(Arc::new(s.clone())).expect("new");
        let ip = |v: [u8; 4]| std::net::IpAddr::from(v);
        assert_eq!(t.bound_to(ip([10, 1, 0, 1])).len(), 1);
        // A CCR-U moved the UE to another address.
        s.ue_ipv4 = Some([10, 1, 0, 2].into());
        slot.publish(Arc::new(s.clone()));
        assert!(t.bound_to(ip([10, 1, 0, 1])).is_empty());
        assert_eq!(t.bound_to(ip([10, 1, 0, 2])).len(), 1);
        // A new CCR-I reusing the id with another address.
        s.ue_ipv4 = Some([10, 1, 0, 3].into());
        t.replace(Arc::new(s.clone()));
        assert!(t.bound_to(ip([10, 1, 0, 2])).is_empty());
        assert_eq!(t.bound_to(ip([10, 1, 0, 3])).len(), 1);
        t.remove("a");
        assert!(t.bindings().is_empty());
    }

    #[tokio::test]
    async fn writers_of_one_session_are_serialised() {
        let t = Arc::new(SessionTable::default());
        let slot = t.insert(session("s", "001", "internet")).expect("new");
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let slot = slot.clone();
            tasks.push(tokio::spawn(async move {
                let _g = slot.lock().await;
                let mut next = (*slot.load()).clone();
                tokio::task::yield_now().await;
                next.last_request_number += 1;
                slot.publish(Arc::new(next));
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(slot.load().last_request_number, 50);
    }
}
