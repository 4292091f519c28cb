//! Every subscriber's usage in memory, with the usage file in force and
//! the counters of usage monitoring: the read path for policy inputs and
//! grants. Like the session table, sharded, with a per-subscriber async lock
//! that a writer holds from reading the accumulators until their new value
//! is committed, so two sessions of one subscriber reporting at once add up
//! and a failed commit leaves memory as the store has it.
//!
//! On a store shared by several nodes the table is filled on demand: a
//! subscriber's row is read when first needed (`UsageSlot::loaded`), and
//! dropped again when another node wrote it (a write conflict), so that
//! the next request reads it afresh.

use super::config::UsageConfig;
use super::SubscriberUsage;
use arc_swap::ArcSwap;
use dashmap::DashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// One subscriber's usage and the lock its writers hold.
pub struct UsageSlot {
    current: ArcSwap<SubscriberUsage>,
    update: Arc<tokio::sync::Mutex<()>>,
    /// The stored row has been read into `current` (or there is none to
    /// read: every row was loaded at start-up).
    loaded: std::sync::atomic::AtomicBool,
}

impl UsageSlot {
    fn new(u: Arc<SubscriberUsage>, loaded: bool) -> UsageSlot {
        UsageSlot {
            current: ArcSwap::new(u),
            update: Arc::new(tokio::sync::Mutex::new(())),
            loaded: std::sync::atomic::AtomicBool::new(loaded),
        }
    }
    /// Whether the stored row is in memory (check with the lock held).
    pub fn loaded(&self) -> bool {
        self.loaded.load(std::sync::atomic::Ordering::Acquire)
    }
    /// Puts the stored row (if any) in memory (call with the lock held).
    pub fn load_stored(&self, u: Option<SubscriberUsage>) {
        if let Some(u) = u {
            self.current.store(Arc::new(u));
        }
        self.loaded
            .store(true, std::sync::atomic::Ordering::Release);
    }
    /// The committed usage.
    pub fn load(&self) -> Arc<SubscriberUsage> {
        self.current.load_full()
    }
    /// Held while computing, committing and publishing the next value;
    /// owned, so it can travel with the value being computed.
    pub async fn lock(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.update.clone().lock_owned().await
    }
    /// Publishes a committed value (call with the lock held).
    pub fn publish(&self, u: Arc<SubscriberUsage>) {
        self.current.store(u);
    }
}

/// Counters of usage monitoring, rendered into /metrics.
#[derive(Default)]
pub struct UsageCounters {
    pub reports: AtomicU64,
    pub octets: AtomicU64,
    pub unknown_key_reports: AtomicU64,
    /// Of those, the ones past the cap one request shows to the policy.
    pub unknown_key_reports_over_cap: AtomicU64,
    pub unknown_keys_decided: AtomicU64,
    pub grants: AtomicU64,
}

/// The usage ledger: subscriber key -> usage, the usage file in force,
/// and what usage monitoring counted.
pub struct UsageTable {
    /// Keyed by the record's own subscriber text (one allocation for both).
    slots: DashMap<Arc<str>, Arc<UsageSlot>>,
    /// Rows are read when first needed (a shared store), not at start-up.
    on_demand: bool,
    /// The usage file in force (replaced by a reload that passes its
    /// checks).
    config: ArcSwap<UsageConfig>,
    pub counters: UsageCounters,
}

impl UsageTable {
    /// A table whose rows are read when first needed (`on_demand`), or
    /// all recovered at start-up, counting by `config`.
    pub fn new(on_demand: bool, config: UsageConfig) -> UsageTable {
        UsageTable {
            slots: DashMap::new(),
            on_demand,
            config: ArcSwap::from_pointee(config),
            counters: UsageCounters::default(),
        }
    }

    /// The usage file in force.
    pub fn config(&self) -> arc_swap::Guard<Arc<UsageConfig>> {
        self.config.load()
    }

    /// The usage file in force, held beyond this moment (a request's step).
    pub fn config_full(&self) -> Arc<UsageConfig> {
        self.config.load_full()
    }

    /// Puts `config` in force (checked by the caller).
    pub fn set_config(&self, config: UsageConfig) {
        self.config.store(Arc::new(config));
    }

    /// Forgets a subscriber's usage (another node wrote it): the next
    /// request reads it from the store.
    pub fn remove(&self, subscriber: &str) {
        self.slots.remove(subscriber);
    }

    /// The subscriber's slot, if any usage was ever recorded.
    pub fn get(&self, subscriber: &str) -> Option<Arc<UsageSlot>> {
        self.slots.get(subscriber).map(|s| s.value().clone())
    }

    /// The subscriber's slot, created empty when missing (nothing is
    /// written until a writer commits a value).
    pub fn slot(&self, subscriber: &str) -> Arc<UsageSlot> {
        // Looked up first: making the key costs an allocation, which only
        // a new subscriber needs.
        if let Some(slot) = self.get(subscriber) {
            return slot;
        }
        let key: Arc<str> = Arc::from(subscriber);
        self.slots
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(UsageSlot::new(
                    Arc::new(SubscriberUsage::new(key)),
                    !self.on_demand,
                ))
            })
            .value()
            .clone()
    }

    /// The committed usage of a subscriber, empty when none.
    pub fn load(&self, subscriber: &str) -> Arc<SubscriberUsage> {
        match self.get(subscriber) {
            Some(s) => s.load(),
            None => Arc::new(SubscriberUsage::new(subscriber)),
        }
    }

    /// Puts a recovered record (start-up).
    pub fn recover(&self, u: SubscriberUsage) {
        let key = u.subscriber.clone();
        self.slots
            .insert(key, Arc::new(UsageSlot::new(Arc::new(u), true)));
    }

    /// Subscribers with a usage record.
    pub fn subscribers(&self) -> Vec<String> {
        self.slots.iter().map(|s| s.key().to_string()).collect()
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slot_is_shared_and_publishes() {
        let t = UsageTable::new(false, UsageConfig::empty());
        assert!(t.get("001").is_none());
        assert_eq!(&*t.load("001").subscriber, "001");
        let a = t.slot("001");
        let b = t.slot("001");
        assert!(Arc::ptr_eq(&a, &b));
        {
            let _g = a.lock().await;
            let mut u = (*a.load()).clone();
            u.unknown_key_reports = 3;
            a.publish(Arc::new(u));
        }
        assert_eq!(t.load("001").unknown_key_reports, 3);
        t.recover(SubscriberUsage {
            subscriber: "002".into(),
            ..Default::default()
        });
        let mut subs = t.subscribers();
        subs.sort();
        assert_eq!(subs, vec!["001".to_string(), "002".to_string()]);
        assert_eq!(t.len(), 2);
    }
}
