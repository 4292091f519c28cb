//! Which shard a row belongs to. The store is split into shards, each with
//! its own group-commit writer (and, for SQLite, its own database file), so
//! that durable writes run in parallel. A subscriber's rows (its sessions,
//! its usage) always land in one shard, chosen by a hash of the subscriber
//! key, so that a request's changes still commit in one transaction;
//! subscriber profiles (provisioning) always land in shard 0.
//!
//! The hash is part of the on-disk layout of the embedded store: a row is
//! looked for only in its shard's file. XXH3 is specified and stable across
//! releases and platforms (std's `DefaultHasher` is neither).

use super::change::{Change, Route};
use xxhash_rust::xxh3::xxh3_64;

/// The most shards (`[store] writers`) accepted: past the cores of any
/// server we run on, more writers only add files and connections.
pub const MAX_SHARDS: usize = 64;

/// The shard of a subscriber key among `shards` (at least 1).
pub fn of_subscriber(subscriber: &str, shards: usize) -> usize {
    let shards = shards.max(1) as u64;
    (xxh3_64(subscriber.as_bytes()) % shards) as usize
}

/// The shard `route` writes to among `shards`.
pub fn of_route(route: Route<'_>, shards: usize) -> usize {
    match route {
        Route::Subscriber(key) => of_subscriber(key, shards),
        Route::Provisioning => 0,
    }
}

/// The shard `change` writes to among `shards`.
pub fn of_change(change: &Change, shards: usize) -> usize {
    of_route(change.route(), shards)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::fixtures::{session, subscriber, usage};
    use std::sync::Arc;

    #[test]
    fn a_subscribers_sessions_and_usage_share_a_shard() {
        for shards in 1..=8 {
            for i in 0..200 {
                let key = format!("0010100000{i:05}");
                let s = Change::PutSession(Arc::new(session(&format!("gx;{i}"), &key, 1)));
                let d = Change::delete_session(format!("gx;{i}"), key.clone());
                let u = Change::PutUsage(Arc::new(usage(&key, 1)));
                let du = Change::DeleteUsage(key.clone());
                let want = of_change(&s, shards);
                assert!(want < shards);
                for c in [&d, &u, &du] {
                    assert_eq!(of_change(c, shards), want, "{key} in {shards}");
                }
                let p = Change::PutSubscriber(Arc::new(subscriber(&key)));
                assert_eq!(of_change(&p, shards), 0);
                assert_eq!(of_change(&Change::DeleteSubscriber(key), shards), 0);
            }
        }
    }

    #[test]
    fn subscribers_spread_over_every_shard_and_the_hash_is_fixed() {
        let mut counts = [0usize; 4];
        for i in 0..4000 {
            counts[of_subscriber(&format!("0010100000{i:05}"), 4)] += 1;
        }
        // Even within a few percent: no shard idles.
        for c in counts {
            assert!((900..=1100).contains(&c), "{counts:?}");
        }
        // The layout on disk depends on these values: they never change.
        assert_eq!(of_subscriber("001010000000001", 1), 0);
        assert_eq!(
            (0..6)
                .map(|i| of_subscriber(&format!("00101000000000{i}"), 4))
                .collect::<Vec<_>>(),
            FIXED.to_vec()
        );
    }

    /// Computed once with XXH3-64 and kept: a change here moves rows
    /// between shard files of existing data directories.
    const FIXED: [usize; 6] = [2, 3, 0, 3, 3, 3];
}
