//! The Sy session of one subscriber as the Gx session records carry it
//! (TS 29.219 §4.5): its Session-Id, the policy counters subscribed at the
//! OCS with their statuses (and changes the OCS announced for later), and
//! the counters the OCS refused. With a CHF instead of an OCS (N28, TS
//! 29.594) the same record is the subscriber's spending-limit
//! subscription, and also holds the id the CHF gave it. One per subscriber, shared by all the
//! subscriber's Gx sessions; a copy rides in each of their records, so it
//! survives a restart with them. The Sy application (`sy/`) drives the
//! exchanges that change it.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A status the OCS says will apply from a given time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingStatus {
    pub status: String,
    /// Unix milliseconds.
    pub at_ms: i64,
}

/// One Policy-Counter-Status-Report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterReport {
    pub id: String,
    pub status: String,
    pub pending: Vec<PendingStatus>,
}

/// What the policy sees for a counter the OCS could not be asked about
/// (no OCS reachable, no answer in time, or a counter the OCS refused).
pub const UNKNOWN: &str = "unknown";

/// One subscribed counter.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterStatus {
    pub status: String,
    /// Statuses the OCS announced for later (Pending-Policy-Counter-Information).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingStatus>,
}

/// One subscriber's Sy session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SySession {
    /// Our Session-Id towards the OCS.
    pub session_id: String,
    /// The OCS accepted an initial SLR: the session exists there (and an
    /// STR must end it).
    pub open: bool,
    /// The OCS that answered last (Destination-Host of the next request);
    /// with a CHF, its URI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ocs_host: Option<String>,
    /// With a CHF (N28): the subscription's id at the CHF (the last
    /// segment of the `Location` it answered the subscribe with), which
    /// the modify and the unsubscribe name. None with an OCS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription: Option<String>,
    #[serde(default)]
    pub counters: BTreeMap<String, CounterStatus>,
    /// Counters the OCS does not know (5570): not asked again.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub refused: BTreeSet<String>,
    /// Unix ms of the last change: among the copies in a subscriber's
    /// records, the newest wins at start-up.
    pub updated_ms: i64,
}

impl SySession {
    pub fn new(session_id: String, now_ms: i64) -> SySession {
        SySession {
            session_id,
            open: false,
            ocs_host: None,
            subscription: None,
            counters: BTreeMap::new(),
            refused: BTreeSet::new(),
            updated_ms: now_ms,
        }
    }

    /// Of `wanted`, the counters neither subscribed nor refused. Counters
    /// of a session the peer does not hold (`open` false: the CHF ended
    /// the subscription) are not subscribed any more.
    pub fn missing(&self, wanted: &[String]) -> Vec<String> {
        let mut v: Vec<String> = wanted
            .iter()
            .filter(|c| {
                !(self.refused.contains(*c) || (self.open && self.counters.contains_key(*c)))
            })
            .cloned()
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Applies the OCS's reports (SLA or SNR): a report replaces the
    /// counter's status and its pending changes. Reports for counters not
    /// subscribed are taken too (the OCS may report more than asked).
    pub fn apply(&mut self, reports: &[CounterReport], now_ms: i64) {
        for r in reports {
            let mut pending = r.pending.clone();
            pending.sort_by_key(|p| p.at_ms);
            self.refused.remove(&r.id);
            self.counters.insert(
                r.id.clone(),
                CounterStatus {
                    status: r.status.clone(),
                    pending,
                },
            );
        }
        self.settle(now_ms);
        self.touch(now_ms);
    }

    /// Marks the copy changed at `now_ms`, always later than before: the
    /// newest copy (by `updated_ms`) wins at start-up and when a node reads
    /// a record another node wrote, so two changes within a millisecond
    /// must not look equally new.
    pub fn touch(&mut self, now_ms: i64) {
        self.updated_ms = now_ms.max(self.updated_ms.saturating_add(1));
    }

    /// Marks counters the OCS refused.
    pub fn refuse(&mut self, ids: &[String], now_ms: i64) {
        for id in ids {
            self.counters.remove(id);
            self.refused.insert(id.clone());
        }
        self.touch(now_ms);
    }

    /// The peer ended the subscription (an N28 terminate): it no longer
    /// holds it, the statuses it gave are "unknown" now (kept, so that the
    /// policy sees them so), and nothing is ended at the peer later.
    pub fn terminated(&mut self, now_ms: i64) {
        self.open = false;
        self.subscription = None;
        for c in self.counters.values_mut() {
            c.status = UNKNOWN.to_owned();
            c.pending.clear();
        }
        self.touch(now_ms);
    }

    /// Makes pending changes whose time came the status; true if any did.
    pub fn settle(&mut self, now_ms: i64) -> bool {
        let mut changed = false;
        for c in self.counters.values_mut() {
            while c.pending.first().is_some_and(|p| p.at_ms <= now_ms) {
                let p = c.pending.remove(0);
                changed |= c.status != p.status;
                c.status = p.status;
            }
        }
        changed
    }

    /// The earliest pending change, Unix ms.
    pub fn next_change_ms(&self) -> Option<i64> {
        self.counters
            .values()
            .filter_map(|c| c.pending.first().map(|p| p.at_ms))
            .min()
    }

    /// The statuses in force at `now_ms` as the policy sees them: every
    /// subscribed counter, and refused ones as "unknown".
    pub fn statuses(&self, now_ms: i64) -> BTreeMap<String, String> {
        let mut m: BTreeMap<String, String> = self
            .counters
            .iter()
            .map(|(id, c)| {
                let due = c.pending.iter().rev().find(|p| p.at_ms <= now_ms);
                let status = due.map_or(&c.status, |p| &p.status);
                (id.clone(), status.clone())
            })
            .collect();
        for id in &self.refused {
            m.insert(id.clone(), UNKNOWN.to_owned());
        }
        m
    }
}
