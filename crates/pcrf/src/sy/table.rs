//! Every subscriber's Sy session, sharded by subscriber, with the index
//! from Sy Session-Id to subscriber that an SNR needs. Each entry's lock
//! makes one subscriber's SLRs one at a time. Rebuilt from the session
//! records at start-up, and from each record another node wrote when this
//! node serves it (`adopt`). No IO here: the Sy service (`service.rs`)
//! drives the exchanges.

use crate::session::spending::SySession;
use crate::session::{GxSession, SessionState};
use dashmap::DashMap;
use std::collections::HashMap;
use std::sync::Arc;

/// One subscriber's entry: the state (read synchronously by the policy
/// input) and a lock that makes the subscriber's SLRs one at a time.
#[derive(Default)]
pub struct SyEntry {
    pub exchange: tokio::sync::Mutex<()>,
    pub state: parking_lot::Mutex<Option<SySession>>,
    /// Unix ms before which no SLR is tried again after one got no usable
    /// answer (memory only: a restart tries at once).
    pub retry_at_ms: std::sync::atomic::AtomicI64,
}

/// Every subscriber's Sy session, and the Sy Session-Id index for SNR.
/// Sharded maps: a CCR reads its subscriber's entry, so one lock for all
/// would serialise every CCR of the node.
#[derive(Default)]
pub struct SyTable {
    by_subscriber: DashMap<String, Arc<SyEntry>>,
    by_session: DashMap<String, String>,
    count: std::sync::atomic::AtomicUsize,
}

impl SyTable {
    /// From the records loaded at start-up: per subscriber, the newest
    /// copy among its open sessions.
    pub fn recover(sessions: &[GxSession]) -> SyTable {
        let t = SyTable::default();
        let mut newest: HashMap<&str, &SySession> = HashMap::new();
        for s in sessions.iter().filter(|s| s.state == SessionState::Open) {
            if let Some(sy) = &s.sy {
                let e = newest.entry(&s.subscriber).or_insert(sy);
                if sy.updated_ms > e.updated_ms {
                    *e = sy;
                }
            }
        }
        for (key, sy) in newest {
            t.put(key, sy.clone());
        }
        t
    }

    /// The subscriber's entry, created empty if absent.
    pub fn entry(&self, key: &str) -> Arc<SyEntry> {
        self.by_subscriber
            .entry(key.to_owned())
            .or_default()
            .value()
            .clone()
    }

    /// A copy of the subscriber's Sy session.
    pub fn get(&self, key: &str) -> Option<SySession> {
        let e = self.by_subscriber.get(key)?.value().clone();
        let s = e.state.lock().clone();
        s
    }

    /// Sets the subscriber's Sy session (and indexes its Session-Id).
    pub fn put(&self, key: &str, sy: SySession) {
        self.index(key, &sy);
        *self.entry(key).state.lock() = Some(sy);
    }

    /// Indexes Sy Session-Id `sy` under subscriber `key`, counting it when
    /// it is new.
    fn index(&self, key: &str, sy: &SySession) {
        let fresh = self
            .by_session
            .insert(sy.session_id.clone(), key.to_owned())
            .is_none();
        if fresh {
            self.count
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Takes `sy`, a copy read with one of the subscriber's open session
    /// records (another node may have written it), when this table holds
    /// none for the subscriber or an older one (by `updated_ms`, as at
    /// start-up). Whether it took it.
    pub fn adopt(&self, key: &str, sy: &SySession) -> bool {
        if let Some(e) = self.by_subscriber.get(key) {
            if e.state
                .lock()
                .as_ref()
                .is_some_and(|cur| cur.updated_ms >= sy.updated_ms)
            {
                return false;
            }
        }
        let e = self.entry(key);
        let mut st = e.state.lock();
        if let Some(cur) = st.as_ref() {
            if cur.updated_ms >= sy.updated_ms {
                return false;
            }
            if cur.session_id != sy.session_id && self.by_session.remove(&cur.session_id).is_some()
            {
                self.count
                    .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        self.index(key, sy);
        *st = Some(sy.clone());
        true
    }

    /// The subscriber key of a Sy Session-Id.
    pub fn subscriber_of(&self, sy_session_id: &str) -> Option<String> {
        self.by_session
            .get(sy_session_id)
            .map(|key| key.value().clone())
    }

    /// Forgets the subscriber's Sy session; returns it.
    pub fn remove(&self, key: &str) -> Option<SySession> {
        let (_, e) = self.by_subscriber.remove(key)?;
        let sy = e.state.lock().take()?;
        let gone = self.by_session.remove(&sy.session_id).is_some();
        if gone {
            self.count
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        }
        Some(sy)
    }

    /// Subscribers with a Sy session.
    pub fn subscribers(&self) -> Vec<String> {
        self.by_session.iter().map(|e| e.value().clone()).collect()
    }

    /// Sy sessions now held.
    pub fn len(&self) -> usize {
        self.count.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::spending::{CounterReport, PendingStatus, UNKNOWN};

    fn report(id: &str, status: &str, pending: &[(&str, i64)]) -> CounterReport {
        CounterReport {
            id: id.into(),
            status: status.into(),
            pending: pending
                .iter()
                .map(|(s, at)| PendingStatus {
                    status: (*s).into(),
                    at_ms: *at,
                })
                .collect(),
        }
    }

    #[test]
    fn missing_skips_subscribed_and_refused() {
        let mut s = SySession::new("sy;1".into(), 0);
        // The peer accepted the subscription (as the service marks it).
        s.open = true;
        s.apply(&[report("a", "valid", &[])], 1);
        s.refuse(&["b".into()], 2);
        let wanted = vec!["a".into(), "b".into(), "c".into(), "c".into()];
        assert_eq!(s.missing(&wanted), ["c"]);
        // The CHF ended the subscription: "a" is unknown, and asked again.
        s.subscription = Some("sub-1".into());
        s.terminated(3);
        assert_eq!(s.statuses(3)["a"], UNKNOWN);
        assert_eq!(s.subscription, None);
        assert_eq!(s.missing(&wanted), ["a", "c"]);
    }

    #[test]
    fn a_record_written_before_the_subscription_id_existed_is_read() {
        let old = r#"{"session_id": "h;sy;1;2;k", "open": true, "ocs_host": "ocs1",
            "counters": {"a": {"status": "valid"}}, "updated_ms": 5}"#;
        let s: SySession = serde_json::from_str(old).expect("old record");
        assert_eq!(s.subscription, None);
        assert_eq!(s.statuses(5)["a"], "valid");
        let mut chf = s.clone();
        chf.subscription = Some("sub-1".into());
        let back: SySession =
            serde_json::from_str(&serde_json::to_string(&chf).expect("json")).expect("read");
        assert_eq!(back, chf);
    }

    #[test]
    fn statuses_show_refused_as_unknown_and_apply_due_pending_changes() {
        let mut s = SySession::new("sy;1".into(), 0);
        s.apply(
            &[report(
                "a",
                "valid",
                &[("exhausted", 100), ("blocked", 200)],
            )],
            10,
        );
        s.refuse(&["b".into()], 10);
        assert_eq!(s.statuses(50)["a"], "valid");
        assert_eq!(s.statuses(150)["a"], "exhausted");
        assert_eq!(s.statuses(250)["a"], "blocked");
        assert_eq!(s.statuses(50)["b"], UNKNOWN);
        assert_eq!(s.next_change_ms(), Some(100));
        assert!(s.settle(150));
        assert_eq!(s.counters["a"].status, "exhausted");
        assert_eq!(s.next_change_ms(), Some(200));
        assert!(!s.settle(150), "nothing more due");
    }

    #[test]
    fn a_report_for_a_refused_counter_takes_it_back() {
        let mut s = SySession::new("sy;1".into(), 0);
        s.refuse(&["a".into()], 1);
        s.apply(&[report("a", "valid", &[])], 2);
        assert!(s.refused.is_empty());
        assert_eq!(s.statuses(2)["a"], "valid");
    }

    #[test]
    fn recover_takes_the_newest_copy_of_open_sessions_and_indexes_it() {
        let mut old = SySession::new("sy;1".into(), 0);
        old.updated_ms = 5;
        let mut new = old.clone();
        new.updated_ms = 9;
        new.open = true;
        let mut a = GxSession::new("gx;a", "imsi1", "p", "r", 0);
        a.sy = Some(Box::new(old));
        let mut b = GxSession::new("gx;b", "imsi1", "p", "r", 0);
        b.sy = Some(Box::new(new.clone()));
        let mut closed = GxSession::new("gx;c", "imsi2", "p", "r", 0);
        closed.state = SessionState::Closed;
        closed.sy = Some(Box::new(SySession::new("sy;2".into(), 0)));
        let t = SyTable::recover(&[a, b, closed]);
        assert_eq!(t.get("imsi1"), Some(new));
        assert_eq!(t.subscriber_of("sy;1").as_deref(), Some("imsi1"));
        assert!(
            t.get("imsi2").is_none(),
            "closed sessions hold no Sy session"
        );
        assert_eq!(t.remove("imsi1").map(|s| s.session_id), Some("sy;1".into()));
        assert!(t.subscriber_of("sy;1").is_none());
        assert!(t.is_empty());
    }

    #[test]
    fn adopt_takes_only_a_newer_copy_and_moves_the_index() {
        let t = SyTable::default();
        let mut mine = SySession::new("sy;1".into(), 0);
        mine.updated_ms = 10;
        t.put("imsi1", mine.clone());
        let mut older = SySession::new("sy;2".into(), 0);
        older.updated_ms = 5;
        assert!(!t.adopt("imsi1", &older), "older: kept ours");
        assert_eq!(t.get("imsi1"), Some(mine.clone()));
        assert!(t.subscriber_of("sy;2").is_none());
        let mut newer = mine.clone();
        newer.updated_ms = 20;
        newer.open = true;
        assert!(t.adopt("imsi1", &newer));
        assert_eq!(t.get("imsi1"), Some(newer));
        assert_eq!(t.len(), 1);
        let mut other = SySession::new("sy;3".into(), 0);
        other.updated_ms = 30;
        assert!(t.adopt("imsi1", &other), "another node's Sy session");
        assert!(t.subscriber_of("sy;1").is_none(), "the old id unindexed");
        assert_eq!(t.subscriber_of("sy;3").as_deref(), Some("imsi1"));
        assert_eq!(t.len(), 1);
        assert!(
            t.adopt("imsi2", &SySession::new("sy;4".into(), 1)),
            "none held"
        );
        assert_eq!(t.subscriber_of("sy;4").as_deref(), Some("imsi2"));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn old_records_without_sy_still_load() {
        let s = GxSession::new("gx;a", "imsi1", "p", "r", 0);
        let mut v = serde_json::to_value(&s).expect("json");
        assert!(v.get("sy").is_none(), "absent when none");
        v.as_object_mut().expect("object").remove("sy");
        let back: GxSession = serde_json::from_value(v).expect("loads");
        assert!(back.sy.is_none());
    }
}
