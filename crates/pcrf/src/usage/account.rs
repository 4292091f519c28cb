//! One subscriber's accumulators: counting a usage report into them,
//! starting new periods when a reset time has passed, top-ups, operator
//! resets, and what a quota allows and leaves. Pure functions of the stored
//! row, the usage file and the clock reading passed in, so the caller
//! decides when and in which commit the result is written.
//!
//! Arithmetic saturates everywhere: a PCEF or a stored row may carry any
//! number, and a report must never take the node down.

use super::config::{Interface, UsageConfig};
use super::period::{period_at, Reset};
use super::ServiceUnits;
use crate::subscriber::Subscriber;
use jiff::Timestamp;
use litemap::LiteMap;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// One accumulator of one subscriber in its current period.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Accumulator {
    /// Octets counted in this period.
    pub used: u64,
    /// Octets added to the quota in this period (top-ups; gone at reset).
    #[serde(default)]
    pub topup: u64,
    /// Start of the current period, Unix ms.
    pub period_start_ms: i64,
    /// End of the current period (the next reset), Unix ms; `None` for an
    /// accumulator that never resets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_end_ms: Option<i64>,
}

/// The last report received for one Monitoring-Key (for the API).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LastReport {
    pub at_ms: i64,
    /// The Session-Id: the next report of the same session changes only
    /// the time and the amounts, and a copy of the account copies no text.
    pub session: Arc<str>,
    pub used: ServiceUnits,
}

/// A subscriber's usage: every accumulator and the last report per key.
/// One row in the store, written in the same commit as the session whose
/// report changed it.
///
/// The accumulator and key names are the node's shared texts
/// (`session::shared_text`): every subscriber's `monthly` is the one
/// `monthly`, and the copy a request makes of the account to count a
/// report (copy-on-write) copies no name: 5 allocations fewer per report
/// with the example usage file's five accumulators.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriberUsage {
    /// The subscriber key (IMSI, or MSISDN when no IMSI is known), as in
    /// `GxSession::subscriber`.
    pub subscriber: Arc<str>,
    #[serde(default, deserialize_with = "super::lean_map::shared_names")]
    pub accumulators: LiteMap<Arc<str>, Accumulator>,
    #[serde(default, deserialize_with = "super::lean_map::shared_names")]
    pub last_reports: LiteMap<Arc<str>, LastReport>,
    /// Reports for Monitoring-Keys the configuration does not know
    /// (counted, not added to any accumulator).
    #[serde(default)]
    pub unknown_key_reports: u64,
    /// Notifications already emitted in an accumulator's current period:
    /// `<name>:<accumulator>` to that period's start (Unix ms). Written in
    /// the same commit as the event, so a notification fires once a period
    /// however many requests find its condition true, and after a restart.
    #[serde(default, skip_serializing_if = "LiteMap::is_empty")]
    pub notified: LiteMap<String, i64>,
    /// The version of its row in a shared store (compare-and-set writes;
    /// not part of the record, never serialised).
    #[serde(skip)]
    pub version: crate::store::RowVersion,
}

/// How many Monitoring-Keys the configuration does not know keep a last
/// report in a subscriber's row: a PCEF sending ever new keys must not grow
/// the row without bound. Beyond this they are only counted.
pub const UNKNOWN_KEYS_KEPT: usize = 8;

/// What `count` did with a report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    /// The key is in the usage file. When false the report was counted in
    /// `unknown_key_reports` only; the caller logs it and tells the policy.
    pub known_key: bool,
    /// Accumulators the octets were added to.
    pub counted_in: Vec<Arc<str>>,
    /// Accumulators that started a new period before counting.
    pub reset: Vec<String>,
}

/// Unix ms to an instant, clamped to jiff's range rather than failing.
pub(crate) fn timestamp(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap_or(if ms < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

/// The local hour (0..=23) at `ms` in the usage file's zone.
pub(crate) fn local_hour(cfg: &UsageConfig, ms: i64) -> u8 {
    timestamp(ms).to_zoned(cfg.time_zone().clone()).hour() as u8
}

/// The period containing `now_ms`, in Unix ms.
fn current_period(cfg: &UsageConfig, reset: Reset, day: u8, now_ms: i64) -> (i64, Option<i64>) {
    if let Some(period) = cfg.periods().get(reset, day, now_ms, cfg.time_zone()) {
        return period;
    }
    let (start, end) = period_at(reset, day, timestamp(now_ms), cfg.time_zone());
    let start = if reset == Reset::Never {
        // Never's period begins when first needed: keep the caller's exact ms.
        now_ms
    } else {
        start.as_millisecond()
    };
    (start, end.map(|e| e.as_millisecond()))
}

fn fresh(period: (i64, Option<i64>)) -> Accumulator {
    Accumulator {
        used: 0,
        topup: 0,
        period_start_ms: period.0,
        period_end_ms: period.1,
    }
}

impl SubscriberUsage {
    /// An empty row for a subscriber (accumulators appear at the first roll).
    pub fn new(subscriber: impl Into<Arc<str>>) -> SubscriberUsage {
        SubscriberUsage {
            subscriber: subscriber.into(),
            ..Default::default()
        }
    }

    /// Brings the accumulators to `now_ms`: creates the configured ones that
    /// are missing, with their current period, and starts over (used and
    /// top-up 0, new period) those whose period has ended. Returns the names
    /// of those started over.
    ///
    /// When the usage file or the billing day changed the period of a running
    /// accumulator, it takes the new period's bounds but keeps what it
    /// counted: a configuration change never erases usage. A clock behind
    /// the stored period (another node's, skewed) does not move it back.
    /// Accumulators no longer configured are left as they are (not counted,
    /// not shown to the policy) so that re-adding one finds its usage.
    ///
    /// `billing_day` is the subscriber's; the file's default when `None` or
    /// out of range.
    pub fn roll(&mut self, cfg: &UsageConfig, billing_day: Option<u8>, now_ms: i64) -> Vec<String> {
        let day = cfg.billing_day_for(billing_day);
        let mut started_over = Vec::new();
        if self.accumulators.is_empty() {
            // Room for exactly the configured ones (a `Vec` grows by
            // doubling: four slots for three accumulators, eight for five).
            self.accumulators = LiteMap::with_capacity(cfg.accumulators().len());
        }
        for (name, acc_cfg) in cfg.accumulators() {
            let period = current_period(cfg, acc_cfg.reset, day, now_ms);
            let Some(acc) = self.accumulators.get_mut(&**name) else {
                self.accumulators.insert(name.clone(), fresh(period));
                continue;
            };
            if acc.period_end_ms.is_some_and(|end| now_ms >= end) {
                *acc = fresh(period);
                started_over.push(name.to_string());
            } else if acc.period_end_ms != period.1 && now_ms >= acc.period_start_ms {
                if acc_cfg.reset != Reset::Never {
                    acc.period_start_ms = period.0;
                }
                acc.period_end_ms = period.1;
            }
        }
        started_over
    }

    /// Counts one Used-Service-Unit reported for `key` over `interface` by
    /// `session`: rolls first, then adds its octets to every accumulator the
    /// key feeds over that interface whose hour window contains the local
    /// time now, and keeps it as the key's last report.
    ///
    /// The report is attributed to the moment it is received: a PCEF does
    /// not say when within its report the octets went by. Accumulators with
    /// hours are accurate when reports are pushed at the window's edges
    /// (see `spread::next_boundary`).
    ///
    /// An unknown key is counted in `unknown_key_reports` and keeps a last
    /// report (up to `UNKNOWN_KEYS_KEPT` distinct unknown keys); no
    /// accumulator changes.
    #[allow(clippy::too_many_arguments)]
    pub fn count(
        &mut self,
        cfg: &UsageConfig,
        interface: Interface,
        key: &str,
        session: &str,
        used: &ServiceUnits,
        now_ms: i64,
        billing_day: Option<u8>,
    ) -> Counted {
        let reset = self.roll(cfg, billing_day, now_ms);
        let known_key = cfg.key(key).is_some();
        let mut counted_in = Vec::new();
        if known_key {
            let hour = local_hour(cfg, now_ms);
            let octets = used.octets();
            for (name, acc_cfg) in cfg.accumulators_fed_by(interface, key) {
                if !acc_cfg.counts_at(hour) {
                    continue;
                }
                if let Some(acc) = self.accumulators.get_mut(&**name) {
                    acc.used = acc.used.saturating_add(octets);
                    counted_in.push(name.clone());
                }
            }
        } else {
            self.unknown_key_reports = self.unknown_key_reports.saturating_add(1);
        }
        let keep = known_key
            || self.last_reports.contains_key(key)
            || self
                .last_reports
                .keys()
                .filter(|k| cfg.key(k).is_none())
                .count()
                < UNKNOWN_KEYS_KEPT;
        if let Some(last) = self.last_reports.get_mut(key) {
            // The key's last report replaced in place: its name and, for
            // the same session, the Session-Id are kept.
            last.at_ms = now_ms;
            if *last.session != *session {
                last.session = Arc::from(session);
            }
            last.used = *used;
        } else if keep {
            let last = LastReport {
                at_ms: now_ms,
                session: Arc::from(session),
                used: *used,
            };
            let key = crate::session::shared_text::shared(key);
            super::lean_map::insert_lean(&mut self.last_reports, key, last);
        }
        Counted {
            known_key,
            counted_in,
            reset,
        }
    }

    /// Adds `octets` to the allowance of accumulator `acc` until its period
    /// ends (rolls first, so a top-up never lands in a period already over).
    pub fn topup(
        &mut self,
        cfg: &UsageConfig,
        acc: &str,
        octets: u64,
        now_ms: i64,
        billing_day: Option<u8>,
    ) -> Result<(), String> {
        if cfg.accumulator(acc).is_none() {
            return Err(unknown_accumulator(cfg, acc));
        }
        self.roll(cfg, billing_day, now_ms);
        if let Some(a) = self.accumulators.get_mut(acc) {
            a.topup = a.topup.saturating_add(octets);
        }
        Ok(())
    }

    /// An operator's reset of one accumulator, or of all configured ones:
    /// as at the start of a period (used and top-up 0) in the current
    /// period; one that never resets starts its count now. Returns the
    /// names reset.
    pub fn reset(
        &mut self,
        cfg: &UsageConfig,
        acc: Option<&str>,
        now_ms: i64,
        billing_day: Option<u8>,
    ) -> Result<Vec<String>, String> {
        if let Some(name) = acc {
            if cfg.accumulator(name).is_none() {
                return Err(unknown_accumulator(cfg, name));
            }
        }
        let day = cfg.billing_day_for(billing_day);
        let mut done = Vec::new();
        for (name, acc_cfg) in cfg.accumulators() {
            if acc.is_some_and(|a| a != &**name) {
                continue;
            }
            let period = current_period(cfg, acc_cfg.reset, day, now_ms);
            self.accumulators.insert(name.clone(), fresh(period));
            done.push(name.to_string());
        }
        Ok(done)
    }

    /// Octets counted in `acc` this period (0 when it has none yet).
    pub fn used(&self, acc: &str) -> u64 {
        self.accumulators.get(acc).map_or(0, |a| a.used)
    }

    /// The period's allowance on `acc`: the subscriber's own quota, else
    /// their plan's, plus this period's top-ups. `None` when neither quota
    /// exists (unlimited; top-ups alone make no quota) or `acc` is not
    /// configured.
    pub fn allowance(
        &self,
        cfg: &UsageConfig,
        acc: &str,
        profile: Option<&Subscriber>,
    ) -> Option<u64> {
        cfg.accumulator(acc)?;
        let profile = profile?;
        let quota = profile.quotas.get(acc).copied().or_else(|| {
            profile
                .plan
                .as_deref()
                .and_then(|plan| cfg.plan_quota(plan, acc))
        })?;
        let topup = self.accumulators.get(acc).map_or(0, |a| a.topup);
        Some(quota.saturating_add(topup))
    }

    /// What is left of the allowance (0 when used up or over); `None` when
    /// there is no allowance.
    pub fn remaining(
        &self,
        cfg: &UsageConfig,
        acc: &str,
        profile: Option<&Subscriber>,
    ) -> Option<u64> {
        Some(
            self.allowance(cfg, acc, profile)?
                .saturating_sub(self.used(acc)),
        )
    }
}

fn unknown_accumulator(cfg: &UsageConfig, acc: &str) -> String {
    let known: Vec<&str> = cfg.accumulators().keys().map(|k| &**k).collect();
    format!(
        "unknown accumulator {acc:?} (configured: {})",
        if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(counted: &[Arc<str>]) -> Vec<&str> {
        counted.iter().map(|n| &**n).collect()
    }

    const CFG: &str = r#"
time_zone = "Europe/Berlin"
billing_day = 15

[keys.total]
chunk = "100 MB"
[keys.vip]
level = "rule"
chunk = "50 MB"
[keys.video]
chunk = "10 MB"

[accumulators.monthly]
reset = "monthly"
sources = ["total", "vip"]
[accumulators.daily]
reset = "daily"
sources = ["total"]
[accumulators.night]
reset = "daily"
sources = ["total"]
hours = [1, 6]
[accumulators.video]
reset = "never"
sources = ["sd:video"]

[plans.basic]
monthly = "10 GB"
"#;

    fn cfg() -> UsageConfig {
        UsageConfig::parse(CFG, "usage.toml").expect("test config")
    }
    fn ms(s: &str) -> i64 {
        s.parse::<Timestamp>()
            .expect("test timestamp")
            .as_millisecond()
    }
    fn octets(n: u64) -> ServiceUnits {
        ServiceUnits {
            total: Some(n),
            ..Default::default()
        }
    }
    fn basic() -> Subscriber {
        Subscriber {
            imsi: "001010000000001".into(),
            plan: Some("basic".into()),
            ..Default::default()
        }
    }

    #[test]
    fn roll_creates_every_configured_accumulator_with_its_period() {
        let c = cfg();
        let mut u = SubscriberUsage::new("001010000000001");
        let now = ms("2026-01-20T12:00:00Z");
        assert!(u.roll(&c, None, now).is_empty());
        assert_eq!(u.accumulators.len(), 4);
        let m = &u.accumulators.get("monthly").expect("monthly");
        // Billing day 15 from the file, Berlin midnight is 23:00 UTC in winter.
        assert_eq!(m.period_start_ms, ms("2026-01-14T23:00:00Z"));
        assert_eq!(m.period_end_ms, Some(ms("2026-02-14T23:00:00Z")));
        assert_eq!(
            u.accumulators.get("daily").expect("daily").period_end_ms,
            Some(ms("2026-01-20T23:00:00Z"))
        );
        assert_eq!(
            u.accumulators.get("video").expect("video").period_start_ms,
            now
        );
        assert_eq!(
            u.accumulators.get("video").expect("video").period_end_ms,
            None
        );
        // Rolling again in the same period changes nothing.
        let before = u.clone();
        assert!(u.roll(&c, None, now + 3_600_000).is_empty());
        assert_eq!(u, before);
    }

    #[test]
    fn two_keys_are_summed_into_one_accumulator() {
        let c = cfg();
        let mut u = SubscriberUsage::new("s");
        let now = ms("2026-01-20T12:00:00Z");
        let a = u.count(
            &c,
            Interface::Gx,
            "total",
            "sess-1",
            &octets(300),
            now,
            None,
        );
        assert_eq!(names(&a.counted_in), ["daily", "monthly"]);
        let b = u.count(&c, Interface::Gx, "vip", "sess-1", &octets(200), now, None);
        assert_eq!(names(&b.counted_in), ["monthly"]);
        assert!(a.known_key && b.known_key);
        assert_eq!(u.used("monthly"), 500);
        assert_eq!(u.used("daily"), 300);
        assert_eq!(u.used("night"), 0);
        assert_eq!(u.last_reports.get("vip").expect("vip").used, octets(200));
        assert_eq!(
            u.last_reports.get("total").expect("total").session,
            "sess-1".into()
        );
        assert_eq!(u.last_reports.get("total").expect("total").at_ms, now);
    }

    #[test]
    fn directions_count_when_total_is_absent() {
        let c = cfg();
        let mut u = SubscriberUsage::new("s");
        let used = ServiceUnits {
            input: Some(40),
            output: Some(2),
            ..Default::default()
        };
        u.count(
            &c,
            Interface::Gx,
            "total",
            "x",
            &used,
            ms("2026-01-20T12:00:00Z"),
            None,
        );
        assert_eq!(u.used("monthly"), 42);
    }

    #[test]
    fn night_accumulator_counts_only_inside_its_hours() {
        let c = cfg();
        let mut u = SubscriberUsage::new("s");
        // Berlin is UTC+1 in January: local 00:59, 01:00, 05:59, 06:00.
        for (at, counted) in [
            ("2026-01-19T23:59:00Z", false),
            ("2026-01-20T00:00:00Z", true),
            ("2026-01-20T04:59:59Z", true),
            ("2026-01-20T05:00:00Z", false),
        ] {
            let r = u.count(&c, Interface::Gx, "total", "x", &octets(10), ms(at), None);
            assert_eq!(names(&r.counted_in).contains(&"night"), counted, "{at}");
        }
        assert_eq!(u.used("night"), 20);
        // In summer (UTC+2) 01:30 local is 23:30 UTC the day before.
        let r = u.count(
            &c,
            Interface::Gx,
            "total",
            "x",
            &octets(1),
            ms("2026-07-19T23:30:00Z"),
            None,
        );
        assert!(names(&r.counted_in).contains(&"night"));
    }

    #[test]
    fn monthly_resets_on_billing_day_15_across_a_month_end() {
        let c = cfg();
        let mut u = SubscriberUsage::new("s");
        let day = Some(15);
        u.count(
            &c,
            Interface::Gx,
            "total",
            "x",
            &octets(1_000),
            ms("2026-01-20T12:00:00Z"),
            day,
        );
        // Across the month end: same billing period, only the daily ones start over.
        let r = u.count(
            &c,
            Interface::Gx,
            "total",
            "x",
            &octets(500),
            ms("2026-02-01T12:00:00Z"),
            day,
        );
        assert_eq!(r.reset, vec!["daily", "night"]);
        assert_eq!(u.used("monthly"), 1_500);
        // The last instant before the 15th local midnight still counts in January's period.
        let r = u.count(
            &c,
            Interface::Gx,
            "total",
            "x",
            &octets(1),
            ms("2026-02-14T22:59:59.999Z"),
            day,
        );
        assert!(!r.reset.contains(&"monthly".to_string()));
        assert_eq!(u.used("monthly"), 1_501);
        let r = u.count(
            &c,
            Interface::Gx,
            "total",
            "x",
            &octets(7),
            ms("2026-02-14T23:00:00Z"),
            day,
        );
        assert!(r.reset.contains(&"monthly".to_string()));
        assert_eq!(u.used("monthly"), 7);
        assert_eq!(
            u.accumulators
                .get("monthly")
                .expect("monthly")
                .period_end_ms,
            Some(ms("2026-03-14T23:00:00Z"))
        );
    }

    #[test]
    fn a_subscriber_billing_day_overrides_the_default() {
        let c = cfg();
        let mut u = SubscriberUsage::new("s");
        u.roll(&c, Some(3), ms("2026-01-20T12:00:00Z"));
        assert_eq!(
            u.accumulators
                .get("monthly")
                .expect("monthly")
                .period_start_ms,
            ms("2026-01-02T23:00:00Z")
        );
        // A changed billing day takes effect at once, usage is kept.
        u.count(
            &c,
            Interface::Gx,
            "total",
            "x",
            &octets(9),
            ms("2026-01-20T12:00:00Z"),
            Some(3),
        );
        let r = u.roll(&c, Some(25), ms("2026-01-21T12:00:00Z"));
        assert!(!r.contains(&"monthly".to_string()));
        assert_eq!(u.used("monthly"), 9);
        assert_eq!(
            u.accumulators
                .get("monthly")
                .expect("monthly")
                .period_start_ms,
            ms("2025-12-24T23:00:00Z")
        );
        assert_eq!(
            u.accumulators
                .get("monthly")
                .expect("monthly")
                .period_end_ms,
            Some(ms("2026-01-24T23:00:00Z"))
        );
    }

    #[test]
    fn a_config_change_of_reset_keeps_usage_and_a_slow_clock_does_not_go_back() {
        let c = cfg();
        let mut u = SubscriberUsage::new("s");
        let now = ms("2026-01-20T12:00:00Z");
        u.count(&c, Interface::Sd, "video", "x", &octets(5), now, None);
        assert_eq!(u.used("video"), 5);
        let daily = UsageConfig::parse(&CFG.replace("reset = \"never\"", "reset = \"daily\""), "u")
            .expect("config");
        assert!(u.roll(&daily, None, now + 1).is_empty());
        assert_eq!(u.used("video"), 5);
        assert_eq!(
            u.accumulators.get("video").expect("video").period_end_ms,
            Some(ms("2026-01-20T23:00:00Z"))
        );
        // Another node a few seconds behind, before today's start: nothing moves.
        let before = u.clone();
        u.roll(&daily, None, ms("2026-01-19T22:59:58Z"));
        assert_eq!(u, before);
    }

    #[test]
    fn sources_are_per_interface() {
        let c = cfg();
        let mut u = SubscriberUsage::new("s");
        let now = ms("2026-01-20T12:00:00Z");
        let gx = u.count(&c, Interface::Gx, "video", "x", &octets(5), now, None);
        assert!(gx.known_key && gx.counted_in.is_empty());
        let sd = u.count(&c, Interface::Sd, "video", "x", &octets(5), now, None);
        assert_eq!(names(&sd.counted_in), ["video"]);
        assert_eq!(u.used("video"), 5);
        let sd_total = u.count(&c, Interface::Sd, "total", "x", &octets(5), now, None);
        assert!(sd_total.counted_in.is_empty());
    }

    #[test]
    fn unknown_key_is_counted_not_accumulated() {
        let c = cfg();
        let mut u = SubscriberUsage::new("s");
        let now = ms("2026-01-20T12:00:00Z");
        let r = u.count(
            &c,
            Interface::Gx,
            "mystery",
            "sess-9",
            &octets(77),
            now,
            None,
        );
        assert!(!r.known_key);
        assert!(r.counted_in.is_empty());
        assert_eq!(u.unknown_key_reports, 1);
        assert_eq!(
            u.last_reports.get("mystery").expect("mystery").session,
            "sess-9".into()
        );
        assert!(u.accumulators.values().all(|a| a.used == 0));
        // Many distinct unknown keys: all counted, a bounded number kept.
        for i in 0..20 {
            u.count(
                &c,
                Interface::Gx,
                &format!("junk{i}"),
                "s",
                &octets(1),
                now,
                None,
            );
        }
        assert_eq!(u.unknown_key_reports, 21);
        assert_eq!(u.last_reports.len(), UNKNOWN_KEYS_KEPT);
        // A kept unknown key still gets its latest report; known keys always do.
        u.count(
            &c,
            Interface::Gx,
            "mystery",
            "sess-10",
            &octets(1),
            now,
            None,
        );
        assert_eq!(
            u.last_reports.get("mystery").expect("mystery").session,
            "sess-10".into()
        );
        u.count(&c, Interface::Gx, "total", "s", &octets(1), now, None);
        assert!(u.last_reports.contains_key("total"));
    }

    #[test]
    fn topup_then_period_reset_clears_it() {
        let c = cfg();
        let p = basic();
        let mut u = SubscriberUsage::new("s");
        let now = ms("2026-01-20T12:00:00Z");
        u.count(
            &c,
            Interface::Gx,
            "total",
            "x",
            &octets(10_000_000_000),
            now,
            None,
        );
        assert_eq!(u.remaining(&c, "monthly", Some(&p)), Some(0));
        u.topup(&c, "monthly", 2_000_000_000, now, None)
            .expect("known accumulator");
        assert_eq!(u.allowance(&c, "monthly", Some(&p)), Some(12_000_000_000));
        assert_eq!(u.remaining(&c, "monthly", Some(&p)), Some(2_000_000_000));
        // The next billing period starts without the top-up.
        let r = u.roll(&c, None, ms("2026-02-15T00:00:00Z"));
        assert!(r.contains(&"monthly".to_string()));
        assert_eq!(u.accumulators.get("monthly").expect("monthly").topup, 0);
        assert_eq!(u.allowance(&c, "monthly", Some(&p)), Some(10_000_000_000));
        assert_eq!(u.remaining(&c, "monthly", Some(&p)), Some(10_000_000_000));
        let e = u.topup(&c, "yearly", 1, now, None).expect_err("unknown");
        assert!(e.contains("\"yearly\"") && e.contains("monthly"), "{e}");
    }

    #[test]
    fn operator_reset_one_or_all() {
        let c = cfg();
        let mut u = SubscriberUsage::new("s");
        let now = ms("2026-01-20T12:00:00Z");
        u.count(&c, Interface::Gx, "total", "x", &octets(10), now, None);
        u.topup(&c, "monthly", 5, now, None).expect("known");
        assert_eq!(
            u.reset(&c, Some("daily"), now, None),
            Ok(vec!["daily".to_string()])
        );
        assert_eq!((u.used("daily"), u.used("monthly")), (0, 10));
        let all = u.reset(&c, None, now + 5, None).expect("all");
        assert_eq!(all, vec!["daily", "monthly", "night", "video"]);
        assert!(u.accumulators.values().all(|a| a.used == 0 && a.topup == 0));
        // The period is the current one; never-resetting ones start counting now.
        assert_eq!(
            u.accumulators
                .get("monthly")
                .expect("monthly")
                .period_start_ms,
            ms("2026-01-14T23:00:00Z")
        );
        assert_eq!(
            u.accumulators.get("video").expect("video").period_start_ms,
            now + 5
        );
        assert!(u.reset(&c, Some("nope"), now, None).is_err());
    }

    #[test]
    fn allowance_is_the_profile_quota_else_the_plan_quota() {
        let c = cfg();
        let u = SubscriberUsage::new("s");
        let mut p = basic();
        assert_eq!(u.allowance(&c, "monthly", Some(&p)), Some(10_000_000_000));
        assert_eq!(u.allowance(&c, "daily", Some(&p)), None);
        p.quotas.insert("monthly".into(), 1_000);
        p.quotas.insert("daily".into(), 0);
        assert_eq!(u.allowance(&c, "monthly", Some(&p)), Some(1_000));
        assert_eq!(u.remaining(&c, "daily", Some(&p)), Some(0));
        p.plan = Some("gold".into());
        p.quotas.clear();
        assert_eq!(u.allowance(&c, "monthly", Some(&p)), None);
        assert_eq!(u.allowance(&c, "monthly", None), None);
        p.quotas.insert("ghost".into(), 1);
        assert_eq!(u.allowance(&c, "ghost", Some(&p)), None);
    }

    #[test]
    fn nothing_overflows_or_panics() {
        let c = cfg();
        let p = basic();
        let mut u = SubscriberUsage::new("s");
        for now in [i64::MIN, -1, 0, i64::MAX] {
            u.count(
                &c,
                Interface::Gx,
                "total",
                "x",
                &octets(u64::MAX),
                now,
                Some(200),
            );
            u.count(
                &c,
                Interface::Gx,
                "total",
                "x",
                &octets(u64::MAX),
                now,
                Some(0),
            );
            u.topup(&c, "monthly", u64::MAX, now, None).expect("known");
            u.topup(&c, "monthly", u64::MAX, now, None).expect("known");
            assert_eq!(u.used("monthly"), u64::MAX);
            assert_eq!(u.allowance(&c, "monthly", Some(&p)), Some(u64::MAX));
            assert!(u.remaining(&c, "monthly", Some(&p)).is_some());
            assert!(u.reset(&c, None, now, None).is_ok());
        }
        let both = ServiceUnits {
            input: Some(u64::MAX),
            output: Some(u64::MAX),
            ..Default::default()
        };
        u.count(&c, Interface::Gx, "total", "x", &both, 0, None);
        assert_eq!(u.used("monthly"), u64::MAX);
        // A stored row with nonsense periods is brought back to sense.
        u.accumulators.insert(
            "daily".into(),
            Accumulator {
                used: 1,
                topup: 0,
                period_start_ms: i64::MAX,
                period_end_ms: Some(i64::MIN),
            },
        );
        let r = u.roll(&c, None, ms("2026-01-20T12:00:00Z"));
        assert_eq!(r, vec!["daily"]);
    }

    #[test]
    fn empty_config_counts_every_key_as_unknown() {
        let c = UsageConfig::empty();
        let mut u = SubscriberUsage::new("s");
        let r = u.count(&c, Interface::Gx, "total", "x", &octets(1), 0, None);
        assert!(!r.known_key);
        assert!(u.accumulators.is_empty());
        assert!(u
            .reset(&c, None, 0, None)
            .expect("nothing to reset")
            .is_empty());
    }
}
