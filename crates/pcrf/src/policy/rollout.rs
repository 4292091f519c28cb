//! A canary rollout of a policy version: the new version decides for a
//! share of the subscribers (and any listed by IMSI), the stable one for
//! the rest, until it is promoted or aborted. This module holds the record
//! kept in the versions store (so it outlives a restart and every node of
//! a shared store serves the same rollout) and the assignment of a
//! subscriber to a side, which must be the same on every node and for
//! every request.

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The artifact name of the rollout records, beside the policy's versions.
pub const ROLLOUT: &str = "policy-rollout";

/// Shares are counted in basis points: 10000 is every subscriber.
pub const ALL_BASIS_POINTS: u32 = 10_000;

/// One rollout record. The newest record names the rollout serving while
/// it is `running` and its `canary` is the newest stored policy version;
/// any later deployment (PUT, a rollback, the file, an abort) ends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rollout {
    /// The version the other subscribers stay on.
    pub stable: i64,
    /// The version on trial.
    pub canary: i64,
    /// The share of subscribers on the canary, in basis points (0..=10000).
    pub share_basis_points: u32,
    /// Subscribers (IMSI, or MSISDN for sessions without one) on the
    /// canary whatever the share.
    #[serde(default)]
    pub subscribers: Vec<String>,
    /// False once promoted or aborted.
    pub running: bool,
}

impl Rollout {
    /// Whether the subscriber with these keys is decided by the canary.
    pub fn assigns_canary(&self, imsi: Option<&str>, msisdn: Option<&str>) -> bool {
        let listed = |k: Option<&str>| k.is_some_and(|k| self.subscribers.iter().any(|s| s == k));
        if listed(imsi) || listed(msisdn) {
            return true;
        }
        imsi.or(msisdn)
            .is_some_and(|key| on_canary(key, self.canary, self.share_basis_points))
    }
}

/// Whether subscriber `key` falls in the first `basis_points` of 10000
/// for the rollout of version `canary`: xxh3 of the key, seeded with the
/// canary's version so each rollout picks its own subscribers, mod 10000.
/// The same key always lands on the same side of one rollout, and a wider
/// share only adds subscribers to the canary.
pub fn on_canary(key: &str, canary: i64, basis_points: u32) -> bool {
    let bucket = xxh3_64_with_seed(key.as_bytes(), canary as u64) % u64::from(ALL_BASIS_POINTS);
    bucket < u64::from(basis_points)
}

/// `share_percent` (0 to 100, two decimals count) as basis points, or why
/// not.
pub fn basis_points_of(share_percent: f64) -> Result<u32, String> {
    if !share_percent.is_finite() || !(0.0..=100.0).contains(&share_percent) {
        return Err(format!(
            "share_percent must be between 0 and 100, not {share_percent}"
        ));
    }
    Ok((share_percent * 100.0).round() as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn imsi(i: u32) -> String {
        format!("0010100{i:08}")
    }

    #[test]
    fn five_percent_puts_five_percent_on_the_canary_always_the_same_ones() {
        let on: Vec<bool> = (0..10_000).map(|i| on_canary(&imsi(i), 7, 500)).collect();
        let n = on.iter().filter(|&&c| c).count();
        assert!((400..=600).contains(&n), "{n} of 10000 on a 5% canary");
        let again = (0..10_000).filter(|&i| on_canary(&imsi(i), 7, 500)).count();
        assert_eq!(n, again, "the same subscribers each time");
        assert_eq!(
            (0..10_000).filter(|&i| on_canary(&imsi(i), 7, 0)).count(),
            0
        );
        assert_eq!(
            (0..10_000)
                .filter(|&i| on_canary(&imsi(i), 7, ALL_BASIS_POINTS))
                .count(),
            10_000
        );
    }

    #[test]
    fn widening_only_moves_subscribers_to_the_canary() {
        for i in 0..10_000 {
            let k = imsi(i);
            if on_canary(&k, 3, 500) {
                assert!(on_canary(&k, 3, 2_000), "{k} left the canary when widened");
            }
        }
        let wide = (0..10_000)
            .filter(|&i| on_canary(&imsi(i), 3, 2_000))
            .count();
        assert!((1_900..=2_100).contains(&wide), "{wide} on a 20% canary");
    }

    #[test]
    fn listed_subscribers_are_on_the_canary_whatever_the_share() {
        let r = Rollout {
            stable: 1,
            canary: 2,
            share_basis_points: 0,
            subscribers: vec!["001010000000042".into(), "491700000001".into()],
            running: true,
        };
        assert!(r.assigns_canary(Some("001010000000042"), None));
        assert!(r.assigns_canary(Some("001010000000043"), Some("491700000001")));
        assert!(!r.assigns_canary(Some("001010000000043"), None));
        assert!(!r.assigns_canary(None, None));
    }

    #[test]
    fn shares_outside_0_to_100_are_refused() {
        assert_eq!(basis_points_of(5.0), Ok(500));
        assert_eq!(basis_points_of(0.25), Ok(25));
        assert_eq!(basis_points_of(100.0), Ok(10_000));
        assert!(basis_points_of(-1.0).is_err());
        assert!(basis_points_of(100.5).is_err());
        assert!(basis_points_of(f64::NAN).is_err());
    }
}
