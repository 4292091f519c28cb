//! Turning accumulators back into what goes out: the Granted-Service-Unit
//! per Monitoring-Key (the PCEF reports when it is used up, so the grant is
//! how precisely a quota is enforced), the policy's coarse view of usage,
//! and the count of running grants per key that reload checks need.

use super::account::local_hour;
use super::config::{Interface, UsageConfig};
use super::{MonitoringLevel, ServiceUnits, SessionMonitoring, SubscriberUsage};
use crate::policy::input::{AccumulatorInput, UsageInput};
use crate::subscriber::Subscriber;
use std::collections::BTreeMap;

/// Octets in the policy's megabyte.
const MB: u64 = 1_000_000;

/// What to grant for `key` over `interface` at `now_ms`: its level and
/// the units. `None` when the usage file does not know the key.
///
/// Octets are the key's chunk, lowered to what remains of the tightest
/// allowance among the accumulators the key feeds and that count now (an
/// hour-windowed accumulator outside its hours cannot be used up by this
/// grant). Accumulators without an allowance do not limit it, and neither
/// do exhausted ones: once a quota is used up monitoring goes on with full
/// chunks, so the usage is still counted (for the API, the other
/// accumulators and the policy, which decides what exhaustion means:
/// throttling, redirection). A grant of 0 would only make the PCEF report
/// at once, over and over.
///
/// `usage` should have been rolled to `now_ms` (as `count` does) so that
/// an ended period does not hold back a grant.
pub fn grant_for(
    cfg: &UsageConfig,
    usage: &SubscriberUsage,
    profile: Option<&Subscriber>,
    interface: Interface,
    key: &str,
    now_ms: i64,
) -> Option<(MonitoringLevel, ServiceUnits)> {
    let key_cfg = cfg.key(key)?;
    let hour = local_hour(cfg, now_ms);
    let octets = cfg
        .accumulators_fed_by(interface, key)
        .filter(|(_, acc)| acc.counts_at(hour))
        .filter_map(|(name, _)| usage.remaining(cfg, name, profile))
        .filter(|&left| left > 0)
        .fold(key_cfg.chunk, u64::min);
    Some((
        key_cfg.level,
        ServiceUnits {
            total: Some(octets),
            input: None,
            output: None,
            time: key_cfg.chunk_time,
        },
    ))
}

/// One accumulator as the policy sees it: whole MB and whole percent
/// (floor), so the policy's input hash changes only when a figure it can
/// act on does. A zero allowance reads as 100% and exhausted.
pub fn accumulator_view(used: u64, allowance: Option<u64>) -> AccumulatorInput {
    let percent = allowance.map(|a| {
        if a == 0 {
            100
        } else {
            let p = u128::from(used) * 100 / u128::from(a);
            u64::try_from(p).unwrap_or(u64::MAX)
        }
    });
    AccumulatorInput {
        used_mb: used / MB,
        quota_mb: allowance.map(|a| a / MB),
        percent,
        exhausted: allowance.is_some_and(|a| used >= a),
    }
}

/// The policy's view of a subscriber's usage: every configured accumulator
/// (zero when nothing was counted yet), none that the file no longer has.
/// Expects `usage` rolled to now, like `grant_for`.
pub fn policy_view(
    cfg: &UsageConfig,
    usage: &SubscriberUsage,
    profile: Option<&Subscriber>,
) -> UsageInput {
    let accumulators = cfg
        .accumulators()
        .keys()
        .map(|name| {
            let view = accumulator_view(usage.used(name), usage.allowance(cfg, name, profile));
            (name.clone(), view)
        })
        .collect();
    UsageInput {
        accumulators,
        unknown_keys: Vec::new(),
    }
}

/// How many sessions hold a grant for each key, for
/// `UsageConfig::check_reload`.
pub fn granted_keys<'a>(
    sessions: impl IntoIterator<Item = &'a SessionMonitoring>,
) -> BTreeMap<String, usize> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for session in sessions {
        for key in session.keys.keys() {
            let n = counts.entry(key.to_string()).or_default();
            *n = n.saturating_add(1);
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::KeyGrant;

    const CFG: &str = r#"
time_zone = "Europe/Berlin"

[keys.total]
chunk = "100 MB"
[keys.vip]
level = "rule"
chunk = "50 MB"
chunk_time = 900
[keys.video]
chunk = "10 MB"

[accumulators.monthly]
reset = "monthly"
sources = ["total", "vip"]
[accumulators.night]
reset = "daily"
sources = ["total"]
hours = [1, 6]
[accumulators.vip-video]
reset = "monthly"
sources = ["vip"]
[accumulators.video]
reset = "never"
sources = ["sd:video"]

[plans.basic]
monthly = "10 GB"
night = "1 GB"
vip-video = "2 GB"
video = "5 MB"

[plans.unlimited]
"#;

    fn cfg() -> UsageConfig {
        UsageConfig::parse(CFG, "usage.toml").expect("test config")
    }
    fn ms(s: &str) -> i64 {
        s.parse::<jiff::Timestamp>()
            .expect("test timestamp")
            .as_millisecond()
    }
    fn octets(n: u64) -> ServiceUnits {
        ServiceUnits {
            total: Some(n),
            ..Default::default()
        }
    }
    fn sub(plan: &str) -> Subscriber {
        Subscriber {
            imsi: "001010000000001".into(),
            plan: Some(plan.into()),
            ..Default::default()
        }
    }
    /// Noon in Berlin: outside the night window.
    const NOON: &str = "2026-01-20T11:00:00Z";
    /// 02:00 in Berlin: inside it.
    const NIGHT: &str = "2026-01-20T01:00:00Z";

    fn granted(
        c: &UsageConfig,
        u: &SubscriberUsage,
        p: Option<&Subscriber>,
        key: &str,
        at: &str,
    ) -> Option<u64> {
        grant_for(c, u, p, Interface::Gx, key, ms(at)).and_then(|(_, units)| units.total)
    }

    #[test]
    fn unknown_key_gets_no_grant() {
        let c = cfg();
        let u = SubscriberUsage::new("s");
        assert_eq!(
            grant_for(&c, &u, None, Interface::Gx, "mystery", ms(NOON)),
            None
        );
        assert_eq!(
            grant_for(&UsageConfig::empty(), &u, None, Interface::Gx, "total", 0),
            None
        );
    }

    #[test]
    fn the_chunk_when_no_quota_applies() {
        let c = cfg();
        let u = SubscriberUsage::new("s");
        assert_eq!(granted(&c, &u, None, "total", NOON), Some(100_000_000));
        let unlimited = sub("unlimited");
        assert_eq!(
            granted(&c, &u, Some(&unlimited), "total", NOON),
            Some(100_000_000)
        );
        let (level, units) =
            grant_for(&c, &u, Some(&unlimited), Interface::Gx, "total", ms(NOON)).expect("known");
        assert_eq!(level, MonitoringLevel::Session);
        assert_eq!(units.time, None);
        assert_eq!((units.input, units.output), (None, None));
    }

    #[test]
    fn level_and_time_chunk_come_from_the_key() {
        let c = cfg();
        let u = SubscriberUsage::new("s");
        let (level, units) =
            grant_for(&c, &u, None, Interface::Gx, "vip", ms(NOON)).expect("known");
        assert_eq!(level, MonitoringLevel::Rule);
        assert_eq!(
            units,
            ServiceUnits {
                total: Some(50_000_000),
                input: None,
                output: None,
                time: Some(900)
            }
        );
    }

    #[test]
    fn grant_is_the_remaining_quota_when_below_the_chunk() {
        let c = cfg();
        let p = sub("basic");
        let mut u = SubscriberUsage::new("s");
        u.count(
            &c,
            Interface::Gx,
            "total",
            "x",
            &octets(9_970_000_000),
            ms(NOON),
            None,
        );
        assert_eq!(granted(&c, &u, Some(&p), "total", NOON), Some(30_000_000));
        // A top-up raises it back to the chunk.
        u.topup(&c, "monthly", 1_000_000_000, ms(NOON), None)
            .expect("known");
        assert_eq!(granted(&c, &u, Some(&p), "total", NOON), Some(100_000_000));
    }

    #[test]
    fn the_tightest_of_several_allowances_wins() {
        let c = cfg();
        let p = sub("basic");
        let mut u = SubscriberUsage::new("s");
        // vip feeds monthly (10 GB) and vip-video (2 GB).
        u.count(
            &c,
            Interface::Gx,
            "vip",
            "x",
            &octets(1_990_000_000),
            ms(NOON),
            None,
        );
        assert_eq!(granted(&c, &u, Some(&p), "vip", NOON), Some(10_000_000));
        // total feeds monthly only: 8.01 GB left there, so the full chunk.
        assert_eq!(granted(&c, &u, Some(&p), "total", NOON), Some(100_000_000));
    }

    #[test]
    fn exhausted_quota_keeps_monitoring_with_the_chunk() {
        let c = cfg();
        let p = sub("basic");
        let mut u = SubscriberUsage::new("s");
        u.count(
            &c,
            Interface::Gx,
            "vip",
            "x",
            &octets(2_000_000_000),
            ms(NOON),
            None,
        );
        // vip-video is used up; monthly still has 8 GB: not limiting either.
        assert_eq!(u.remaining(&c, "vip-video", Some(&p)), Some(0));
        assert_eq!(granted(&c, &u, Some(&p), "vip", NOON), Some(50_000_000));
        // Once monthly is nearly used up too, its remainder limits the grant.
        u.count(
            &c,
            Interface::Gx,
            "total",
            "x",
            &octets(7_999_000_000),
            ms(NOON),
            None,
        );
        assert_eq!(granted(&c, &u, Some(&p), "vip", NOON), Some(1_000_000));
        u.count(
            &c,
            Interface::Gx,
            "total",
            "x",
            &octets(5_000_000),
            ms(NOON),
            None,
        );
        assert_eq!(granted(&c, &u, Some(&p), "vip", NOON), Some(50_000_000));
    }

    #[test]
    fn an_hour_windowed_allowance_limits_only_inside_its_hours() {
        let c = cfg();
        let p = sub("basic");
        let mut u = SubscriberUsage::new("s");
        u.count(
            &c,
            Interface::Gx,
            "total",
            "x",
            &octets(990_000_000),
            ms(NIGHT),
            None,
        );
        assert_eq!(u.used("night"), 990_000_000);
        assert_eq!(granted(&c, &u, Some(&p), "total", NIGHT), Some(10_000_000));
        assert_eq!(granted(&c, &u, Some(&p), "total", NOON), Some(100_000_000));
    }

    #[test]
    fn grants_follow_the_interface() {
        let c = cfg();
        let p = sub("basic");
        let u = SubscriberUsage::new("s");
        // "video" feeds its 5 MB accumulator only over Sd.
        let sd = grant_for(&c, &u, Some(&p), Interface::Sd, "video", ms(NOON));
        assert_eq!(sd.and_then(|(_, g)| g.total), Some(5_000_000));
        assert_eq!(granted(&c, &u, Some(&p), "video", NOON), Some(10_000_000));
    }

    #[test]
    fn policy_view_in_mb_and_percent() {
        let c = cfg();
        let mut p = sub("basic");
        p.quotas.insert("video".into(), 0);
        let mut u = SubscriberUsage::new("s");
        u.count(
            &c,
            Interface::Gx,
            "total",
            "x",
            &octets(2_500_999_999),
            ms(NOON),
            None,
        );
        u.count(
            &c,
            Interface::Gx,
            "vip",
            "x",
            &octets(2_500_000_000),
            ms(NOON),
            None,
        );
        let v = policy_view(&c, &u, Some(&p)).accumulators;
        assert_eq!(
            v.keys().map(|k| &**k).collect::<Vec<_>>(),
            vec!["monthly", "night", "video", "vip-video"]
        );
        assert_eq!(
            v["monthly"],
            AccumulatorInput {
                used_mb: 5_000,
                quota_mb: Some(10_000),
                percent: Some(50),
                exhausted: false
            }
        );
        // Over the allowance: percent above 100.
        assert_eq!(
            v["vip-video"],
            AccumulatorInput {
                used_mb: 2_500,
                quota_mb: Some(2_000),
                percent: Some(125),
                exhausted: true
            }
        );
        assert_eq!(
            v["night"],
            AccumulatorInput {
                used_mb: 0,
                quota_mb: Some(1_000),
                percent: Some(0),
                exhausted: false
            }
        );
        // A zero quota is used up from the start.
        assert_eq!(
            v["video"],
            AccumulatorInput {
                used_mb: 0,
                quota_mb: Some(0),
                percent: Some(100),
                exhausted: true
            }
        );
        // No quota: no percent, never exhausted.
        let free = policy_view(&c, &u, Some(&sub("unlimited"))).accumulators;
        assert_eq!(
            free["monthly"],
            AccumulatorInput {
                used_mb: 5_000,
                quota_mb: None,
                percent: None,
                exhausted: false
            }
        );
    }

    #[test]
    fn exhausted_is_exact_in_octets_and_figures_floor() {
        assert_eq!(
            accumulator_view(999_999, Some(1_000_000)),
            AccumulatorInput {
                used_mb: 0,
                quota_mb: Some(1),
                percent: Some(99),
                exhausted: false
            }
        );
        assert!(accumulator_view(1_000_000, Some(1_000_000)).exhausted);
        assert_eq!(accumulator_view(u64::MAX, Some(1)).percent, Some(u64::MAX));
        assert_eq!(
            accumulator_view(u64::MAX, Some(u64::MAX)).percent,
            Some(100)
        );
        // Top-ups are part of the allowance the policy sees.
        let c = cfg();
        let p = sub("basic");
        let mut u = SubscriberUsage::new("s");
        u.topup(&c, "monthly", 1_500_000, ms(NOON), None)
            .expect("known");
        let v = policy_view(&c, &u, Some(&p)).accumulators;
        assert_eq!(v["monthly"].quota_mb, Some(10_001));
    }

    #[test]
    fn granted_keys_counts_sessions_per_key() {
        let grant = KeyGrant::default();
        let a = SessionMonitoring {
            keys: [
                ("total".into(), grant.clone()),
                ("vip".into(), grant.clone()),
            ]
            .into_iter()
            .collect(),
        };
        let b = SessionMonitoring {
            keys: [("total".into(), grant)].into_iter().collect(),
        };
        let idle = SessionMonitoring::default();
        let counts = granted_keys([&a, &b, &idle]);
        assert_eq!(
            counts,
            [("total".to_string(), 2), ("vip".to_string(), 1)].into()
        );
        assert!(granted_keys(std::iter::empty()).is_empty());
    }
}
