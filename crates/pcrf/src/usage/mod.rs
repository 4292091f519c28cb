//! Usage monitoring (TS 29.212 §4.5.17): what the PCEF reports per
//! Monitoring-Key is counted into per-subscriber accumulators (monthly,
//! daily, night-time, per application...), configured in a file with a
//! checksum (which the memo's key includes, so a changed file re-decides
//! every session), and turned back into
//! grants and into policy inputs.
//!
//! The state is in two places, both written in the same group commit that
//! precedes the answer: a session's grants travel in its blob
//! (`SessionMonitoring`), a subscriber's accumulators are one row
//! (`SubscriberUsage`). Each Used-Service-Unit is counted exactly once: the
//! report, the new accumulators and the answer (kept for replay of a
//! retransmission) are one durable change.
//!
//! - `config.rs`: the usage file: keys, accumulators, plans' quotas; load,
//!   validation with locations, checksum, reload checks.
//! - `period.rs`: reset periods (daily, weekly, monthly on the billing day)
//!   in the configured time zone.
//! - `account.rs`: one subscriber's accumulators: count a report, roll over
//!   at period ends, top up, reset, quotas and what remains.
//! - `grant.rs`: what to grant per key (min(remaining, chunk)) and the
//!   policy's view of usage.
//! - `spread.rs`: when each of many pushes goes out, spread over a window.
//! - `table.rs`: every subscriber's usage in memory, with a writer lock.
//! - `units.rs`: amounts of service as the PCEF reports them, and the
//!   monitoring level.
//! - `monitoring.rs`: a session's monitored keys and what each was granted.
//! - `versions.rs`: the usage file's stored versions: deploy, rollback,
//!   adoption of another node's version, each checked against the grants
//!   open sessions hold.
//!
//! The operator's view (file format, counting, periods, grants, reloads) is
//! `docs/usage.md`; `config/usage.toml` is the example for the default policy.

pub mod account;
pub mod config;
pub mod grant;
mod monitoring;
pub mod period;
pub mod spread;
pub mod step;
pub mod table;
mod units;
pub mod versions;

pub use account::{Accumulator, Counted, LastReport, SubscriberUsage};
pub use config::{Interface, UsageConfig, UsageConfigError};
pub use monitoring::{KeyGrant, SessionMonitoring};
pub use period::Reset;
pub use units::{MonitoringLevel, ServiceUnits};

/// Inserts into a map that nearly always holds one entry (a session's
/// monitored keys, a subscriber's last reports): the first entry gets a
/// vector of exactly one, where a `Vec` makes room for four at its first
/// insert. Three empty slots were 288 bytes for each session holding one
/// grant, and 336 for each subscriber with one reported key, until the
/// next copy of the record (which allocates only what it holds).
pub(crate) fn insert_lean<K: Ord, V>(
    map: &mut litemap::LiteMap<K, V>,
    key: K,
    value: V,
) -> Option<V> {
    if map.is_empty() {
        *map = litemap::LiteMap::with_capacity(1);
    }
    map.insert(key, value)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_first_entry_gets_room_for_one() {
        let mut lean = litemap::LiteMap::new();
        assert_eq!(super::insert_lean(&mut lean, "total", 1), None);
        assert_eq!(lean.into_tuple_vec().capacity(), 1);
        let mut plain = litemap::LiteMap::new();
        plain.insert("total", 1);
        assert!(plain.into_tuple_vec().capacity() > 1);
        // Later entries grow it as usual.
        let mut lean = litemap::LiteMap::new();
        super::insert_lean(&mut lean, "b", 1);
        assert_eq!(super::insert_lean(&mut lean, "a", 2), None);
        assert_eq!(super::insert_lean(&mut lean, "a", 3), Some(2));
        assert_eq!(lean.into_tuple_vec(), vec![("a", 3), ("b", 1)]);
    }
}
