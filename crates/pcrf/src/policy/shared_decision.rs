//! A decision held once however many records hold it. Thousands of open
//! sessions of one plan hold equal decisions, and each session held its
//! installed decision and its last decision as two more copies: a few
//! hundred bytes each, with every rule and rule-base name in its own
//! allocation. A `SharedDecision` is reference-counted and made through a
//! process-wide table of the decisions alive, so equal decisions are one
//! allocation (rule names included) and a copy is a counter increment.
//!
//! Stored and shown exactly as the decision itself (serde sees through it),
//! so records written before it read the same, and read records share too.

use crate::policy::decision::Decision;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, LazyLock, Mutex, Weak};

/// A decision shared with every equal one alive. Reads through `Deref`;
/// a write (`DerefMut`) copies it first when others hold it, and that copy
/// is shared again only when it becomes a `SharedDecision` anew.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SharedDecision(Arc<Decision>);

impl SharedDecision {
    /// True when both are the same allocation (not only equal).
    pub fn same_as(&self, other: &SharedDecision) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl From<Decision> for SharedDecision {
    fn from(d: Decision) -> SharedDecision {
        SharedDecision(intern(d))
    }
}

impl Default for SharedDecision {
    fn default() -> SharedDecision {
        Decision::default().into()
    }
}

impl std::ops::Deref for SharedDecision {
    type Target = Decision;
    fn deref(&self) -> &Decision {
        &self.0
    }
}

impl std::ops::DerefMut for SharedDecision {
    fn deref_mut(&mut self) -> &mut Decision {
        Arc::make_mut(&mut self.0)
    }
}

impl std::fmt::Debug for SharedDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq<Decision> for SharedDecision {
    fn eq(&self, other: &Decision) -> bool {
        *self.0 == *other
    }
}

impl Serialize for SharedDecision {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SharedDecision {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SharedDecision, D::Error> {
        Decision::deserialize(d).map(SharedDecision::from)
    }
}

/// Shards of the table, so that writers of different decisions rarely
/// wait on one another.
const SHARDS: usize = 16;

/// Below this many entries a shard is never swept. An entry of a dropped
/// decision keeps the decision's block (~300 bytes, not what it pointed
/// to) until swept: at most 16 x 64 of them beyond twice those alive.
const SWEEP_FLOOR: usize = 64;

/// One shard: the decisions alive by their hash. One entry per hash: a
/// second decision with the same hash (a collision) takes the slot, and
/// the first is simply not shared with later equal ones.
#[derive(Default)]
struct Shard {
    by_hash: HashMap<u64, Weak<Decision>>,
    /// Entries after the last sweep: the next sweep comes when the shard
    /// has doubled since, so entries of dropped decisions stay bounded by
    /// twice those alive and the sweeps cost O(1) per insert.
    live_after_sweep: usize,
}

static TABLE: LazyLock<[Mutex<Shard>; SHARDS]> =
    LazyLock::new(|| std::array::from_fn(|_| Mutex::new(Shard::default())));

fn hash_of(d: &Decision) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3Default::new();
    d.hash(&mut h);
    h.finish()
}

/// The decision alive equal to `d`, or `d` itself, now alive.
fn intern(d: Decision) -> Arc<Decision> {
    let hash = hash_of(&d);
    let mut shard = TABLE[(hash as usize) % SHARDS]
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(alive) = shard.by_hash.get(&hash).and_then(Weak::upgrade) {
        if *alive == d {
            return alive;
        }
    }
    let d = Arc::new(d);
    shard.by_hash.insert(hash, Arc::downgrade(&d));
    let limit = SWEEP_FLOOR.max(2 * shard.live_after_sweep);
    if shard.by_hash.len() > limit {
        shard.by_hash.retain(|_, w| w.strong_count() > 0);
        let live = shard.by_hash.len();
        shard.by_hash.shrink_to(2 * live);
        shard.live_after_sweep = live;
    }
    d
}

/// The heap the table takes, with the checked forms' table: their
/// entries, and the blocks of dropped decisions their entries still keep
/// until swept (not the decisions alive, which the sessions hold): for the
/// memory report.
pub fn table_bytes() -> usize {
    let block = std::mem::size_of::<Decision>() + 2 * std::mem::size_of::<usize>();
    let interned: usize = TABLE
        .iter()
        .map(|s| {
            let s = s.lock().unwrap_or_else(|e| e.into_inner());
            let dead = s.by_hash.values().filter(|w| w.strong_count() == 0).count();
            s.by_hash.capacity() * (std::mem::size_of::<(u64, Weak<Decision>)>() + 1) + dead * block
        })
        .sum();
    let checked: usize = CHECKED
        .iter()
        .map(|s| {
            let s = s.lock().unwrap_or_else(|e| e.into_inner());
            let dead = s
                .by_raw
                .values()
                .map(|c| {
                    usize::from(c.raw.strong_count() == 0)
                        + usize::from(c.checked.strong_count() == 0)
                })
                .sum::<usize>();
            s.by_raw.capacity() * (std::mem::size_of::<(usize, Checked)>() + 1) + dead * block
        })
        .sum();
    interned + checked
}

/// The configuration a decision was checked under: the objects the checks
/// read (the rule catalog, the usage file, ...), compared by identity and
/// held by the entry, so an address is never reused while it names them.
/// Two at most, in a fixed array: taking it costs no allocation.
#[derive(Clone)]
pub struct CheckedUnder(pub [Option<Arc<dyn std::any::Any + Send + Sync>>; 2]);

impl CheckedUnder {
    fn same(&self, other: &CheckedUnder) -> bool {
        self.0.iter().zip(&other.0).all(|(a, b)| match (a, b) {
            (Some(a), Some(b)) => std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b)),
            (None, None) => true,
            _ => false,
        })
    }
}

/// What one decision became after checks that read only it and the
/// configuration `under`. Neither decision is kept alive by the entry:
/// the sessions that hold them do (a checked form equal to its decision is
/// that same allocation, and a strong reference would keep it forever).
struct Checked {
    raw: Weak<Decision>,
    under: CheckedUnder,
    checked: Weak<Decision>,
}

/// One shard of the checked forms, by the address of the decision checked.
#[derive(Default)]
struct CheckedShard {
    by_raw: HashMap<usize, Checked>,
    live_after_sweep: usize,
}

static CHECKED: LazyLock<[Mutex<CheckedShard>; SHARDS]> =
    LazyLock::new(|| std::array::from_fn(|_| Mutex::new(CheckedShard::default())));

fn checked_shard(d: &Arc<Decision>) -> (usize, &'static Mutex<CheckedShard>) {
    let addr = Arc::as_ptr(d) as usize;
    // Allocations are 16-byte aligned: the low bits tell shards nothing.
    (addr, &CHECKED[(addr >> 4) % SHARDS])
}

impl SharedDecision {
    /// What this decision became when it was last checked under `under`
    /// (see [`Self::remember_checked`]), if it was.
    ///
    /// Every request that reuses a decision (the memo) checked it again:
    /// the rule catalog, the Monitoring-Keys against the usage file, the
    /// USAGE_REPORT trigger. Checking means changing, so each such request
    /// copied the whole decision (10 allocations of a CCR-U's 73), and the
    /// copy was then found equal to the installed one and dropped.
    pub fn checked_form(&self, under: &CheckedUnder) -> Option<SharedDecision> {
        let (addr, shard) = checked_shard(&self.0);
        let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        let entry = shard.by_raw.get(&addr)?;
        // The address is this decision's only while the entry's decision
        // is alive; a dead entry's address may be reused by another.
        let alive = entry.raw.upgrade()?;
        if !Arc::ptr_eq(&alive, &self.0) || !entry.under.same(under) {
            return None;
        }
        entry.checked.upgrade().map(SharedDecision)
    }

    /// Remembers `checked` as what this decision becomes under `under`.
    /// Only for checks that dropped nothing: a check that drops something
    /// counts and logs it, which must happen for every request.
    pub fn remember_checked(&self, under: CheckedUnder, checked: &SharedDecision) {
        let (addr, shard) = checked_shard(&self.0);
        let mut shard = shard.lock().unwrap_or_else(|e| e.into_inner());
        shard.by_raw.insert(
            addr,
            Checked {
                raw: Arc::downgrade(&self.0),
                under,
                checked: Arc::downgrade(&checked.0),
            },
        );
        let limit = SWEEP_FLOOR.max(2 * shard.live_after_sweep);
        if shard.by_raw.len() > limit {
            shard
                .by_raw
                .retain(|_, c| c.raw.strong_count() > 0 && c.checked.strong_count() > 0);
            let live = shard.by_raw.len();
            shard.by_raw.shrink_to(2 * live);
            shard.live_after_sweep = live;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(rule: &str) -> Decision {
        Decision {
            rules: vec![rule.into()],
            ..Default::default()
        }
    }

    #[test]
    fn equal_decisions_are_one_allocation() {
        let a = SharedDecision::from(decision("shared-decision-test-a"));
        let b = SharedDecision::from(decision("shared-decision-test-a"));
        let c = SharedDecision::from(decision("shared-decision-test-c"));
        assert!(a.same_as(&b));
        assert!(!a.same_as(&c));
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn a_write_copies_and_leaves_the_others_alone() {
        let a = SharedDecision::from(decision("shared-decision-test-w"));
        let mut b = a.clone();
        b.rules.push("more".into());
        assert_eq!(a.rules, vec!["shared-decision-test-w".to_string()]);
        assert_eq!(b.rules.len(), 2);
        assert!(!a.same_as(&b));
    }

    #[test]
    fn reads_and_writes_as_the_decision_itself() {
        let d = decision("shared-decision-test-s");
        let shared = SharedDecision::from(d.clone());
        assert_eq!(
            serde_json::to_value(&shared).ok(),
            serde_json::to_value(&d).ok()
        );
        let bytes = rmp_serde::to_vec_named(&d).expect("encodes");
        let back: SharedDecision = rmp_serde::from_slice(&bytes).expect("decodes");
        assert!(back.same_as(&shared));
    }

    #[test]
    fn a_checked_form_is_taken_under_the_same_configuration_only() {
        let catalog: Arc<dyn std::any::Any + Send + Sync> = Arc::new(1u8);
        let usage: Arc<dyn std::any::Any + Send + Sync> = Arc::new(2u8);
        let other: Arc<dyn std::any::Any + Send + Sync> = Arc::new(1u8);
        let under = CheckedUnder([Some(catalog.clone()), Some(usage.clone())]);
        let raw = SharedDecision::from(decision("shared-decision-checked-raw"));
        assert!(raw.checked_form(&under).is_none());
        let mut made = Decision::clone(&raw);
        made.event_triggers.push(26);
        let checked = SharedDecision::from(made);
        raw.remember_checked(under.clone(), &checked);
        let again = raw.checked_form(&under).expect("remembered");
        assert!(again.same_as(&checked));
        // An equal decision is the same allocation, so it finds it too.
        let equal = SharedDecision::from(decision("shared-decision-checked-raw"));
        assert!(equal.checked_form(&under).is_some());
        // Another catalog object (even an equal one), or no usage file.
        assert!(raw
            .checked_form(&CheckedUnder([Some(other), Some(usage.clone())]))
            .is_none());
        assert!(raw
            .checked_form(&CheckedUnder([Some(catalog), None]))
            .is_none());
        // Held by nobody, the checked form is not kept alive by the entry.
        drop((again, checked));
        assert!(raw.checked_form(&under).is_none());
    }

    #[test]
    fn dropped_decisions_leave_the_table() {
        for i in 0..10 * SWEEP_FLOOR * SHARDS {
            drop(SharedDecision::from(decision(&format!(
                "shared-decision-drop-{i}"
            ))));
        }
        let entries: usize = TABLE
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).by_hash.len())
            .sum();
        // Other tests run alongside and keep a few alive.
        assert!(entries <= 2 * SWEEP_FLOOR * SHARDS, "{entries}");
    }
}
