//! Reset periods of accumulators (daily, weekly, monthly on the billing
//! day) computed in the usage file's time zone. Periods are local calendar
//! periods, so their length in hours varies across DST changes and month
//! lengths; everything here goes through jiff's zone-aware arithmetic
//! rather than adding fixed durations to instants.

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use std::sync::Mutex;

/// When an accumulator starts over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reset {
    /// Counts forever (e.g. a lifetime or prepaid bucket).
    #[default]
    Never,
    /// At local midnight.
    Daily,
    /// At Monday 00:00 local time (ISO weeks).
    Weekly,
    /// At 00:00 local time on the subscriber's billing day.
    Monthly,
}

impl Reset {
    /// The name used in the usage file.
    pub fn name(self) -> &'static str {
        match self {
            Reset::Never => "never",
            Reset::Daily => "daily",
            Reset::Weekly => "weekly",
            Reset::Monthly => "monthly",
        }
    }

    /// Parses the usage file's name.
    pub fn from_name(name: &str) -> Option<Reset> {
        match name {
            "never" => Some(Reset::Never),
            "daily" => Some(Reset::Daily),
            "weekly" => Some(Reset::Weekly),
            "monthly" => Some(Reset::Monthly),
            _ => None,
        }
    }
}

impl std::fmt::Display for Reset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The period containing `at`: its start and its end (the next reset),
/// both the first instant of a local day in `tz`.
///
/// `Reset::Never` has no calendar start: its period is `(at, None)`, i.e. it
/// begins whenever it is first needed and never ends.
///
/// `billing_day` is clamped to 1..=28 (the only days every month has;
/// the usage file and the subscriber API refuse others, this keeps stored
/// garbage from panicking). At the edges of representable time an end that
/// cannot be computed is `None` and a start that cannot be is `at`.
pub fn period_at(
    reset: Reset,
    billing_day: u8,
    at: Timestamp,
    tz: &TimeZone,
) -> (Timestamp, Option<Timestamp>) {
    let today = at.to_zoned(tz.clone()).date();
    let (first, next) = match reset {
        Reset::Never => return (at, None),
        Reset::Daily => (Some(today), today.tomorrow().ok()),
        Reset::Weekly => {
            let back = i64::from(today.weekday().to_monday_zero_offset());
            let monday = today.checked_sub(back.days()).ok();
            (monday, monday.and_then(|d| d.checked_add(7.days()).ok()))
        }
        Reset::Monthly => {
            let day = billing_day.clamp(1, 28) as i8;
            let this_month = Date::new(today.year(), today.month(), day).ok();
            let start = if today.day() >= day {
                this_month
            } else {
                this_month.and_then(|d| d.checked_sub(1.month()).ok())
            };
            // Day <= 28 exists in every month, so adding a month never clamps.
            (start, start.and_then(|d| d.checked_add(1.month()).ok()))
        }
    };
    let start = first.and_then(|d| local_day_start(d, tz)).unwrap_or(at);
    (start, next.and_then(|d| local_day_start(d, tz)))
}

/// `period_at` remembered for the local day it was asked in. Every period
/// but Never's is a function of the local date alone, so within one day the
/// answer is known: the zone arithmetic (most of the cost of rolling a
/// subscriber's accumulators at every report) then runs once per day and
/// kind of period, not at every report. One per usage configuration (a
/// reload brings a new, empty one).
#[derive(Default)]
pub struct PeriodCache {
    entries: Mutex<Vec<CachedPeriod>>,
}

#[derive(Clone, Copy)]
struct CachedPeriod {
    reset: Reset,
    billing_day: u8,
    /// The local day the answer holds for, Unix ms `[from, until)`.
    from_ms: i64,
    until_ms: i64,
    start_ms: i64,
    end_ms: Option<i64>,
}

/// At most this many (kind, billing day) pairs are kept; there are only
/// 3 x 28 that can be asked, so this bound is never reached in practice.
const CACHED_PERIODS: usize = 128;

impl PeriodCache {
    /// `period_at` in Unix ms; `None` for `Reset::Never` (it has no
    /// calendar period to remember) and at the edges of representable time.
    pub fn get(
        &self,
        reset: Reset,
        billing_day: u8,
        at_ms: i64,
        tz: &TimeZone,
    ) -> Option<(i64, Option<i64>)> {
        if reset == Reset::Never {
            return None;
        }
        let hit = |e: &CachedPeriod| {
            e.reset == reset
                && e.billing_day == billing_day
                && (e.from_ms..e.until_ms).contains(&at_ms)
        };
        {
            let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = entries.iter().find(|e| hit(e)) {
                return Some((e.start_ms, e.end_ms));
            }
        }
        let at = Timestamp::from_millisecond(at_ms).ok()?;
        let today = at.to_zoned(tz.clone()).date();
        let from_ms = local_day_start(today, tz)?.as_millisecond();
        let until_ms = local_day_start(today.tomorrow().ok()?, tz)?.as_millisecond();
        let (start, end) = period_at(reset, billing_day, at, tz);
        let fresh = CachedPeriod {
            reset,
            billing_day,
            from_ms,
            until_ms,
            start_ms: start.as_millisecond(),
            end_ms: end.map(|e| e.as_millisecond()),
        };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let same = |e: &CachedPeriod| e.reset == reset && e.billing_day == billing_day;
        if let Some(e) = entries.iter_mut().find(|e| same(e)) {
            *e = fresh;
        } else if entries.len() < CACHED_PERIODS {
            entries.push(fresh);
        }
        Some((fresh.start_ms, fresh.end_ms))
    }
}

impl Clone for PeriodCache {
    /// A copy starts empty: it fills again at the first use.
    fn clone(&self) -> Self {
        PeriodCache::default()
    }
}

impl std::fmt::Debug for PeriodCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeriodCache")
    }
}

/// The start of the local day after the one containing `at` (`None` only
/// at the end of representable time).
pub fn next_local_midnight(at: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
    let tomorrow = at.to_zoned(tz.clone()).date().tomorrow().ok()?;
    local_day_start(tomorrow, tz)
}

/// The first instant of `date` in `tz`: midnight, or the end of the gap
/// where a DST change skips midnight (e.g. America/Sao_Paulo until 2019).
fn local_day_start(date: Date, tz: &TimeZone) -> Option<Timestamp> {
    let zoned = date.to_zoned(tz.clone()).ok()?;
    Some(zoned.start_of_day().ok()?.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("test timestamp")
    }
    fn zone(name: &str) -> TimeZone {
        TimeZone::get(name).expect("test zone")
    }

    #[test]
    fn names_round_trip() {
        for r in [Reset::Never, Reset::Daily, Reset::Weekly, Reset::Monthly] {
            assert_eq!(Reset::from_name(r.name()), Some(r));
        }
        assert_eq!(Reset::from_name("Monthly"), None);
    }

    #[test]
    fn never_starts_now_and_never_ends() {
        let at = ts("2026-03-10T12:00:00Z");
        assert_eq!(period_at(Reset::Never, 1, at, &zone("UTC")), (at, None));
    }

    #[test]
    fn daily_in_utc_and_across_the_year_end() {
        let utc = zone("UTC");
        let (s, e) = period_at(Reset::Daily, 1, ts("2025-12-31T23:59:59Z"), &utc);
        assert_eq!(s, ts("2025-12-31T00:00:00Z"));
        assert_eq!(e, Some(ts("2026-01-01T00:00:00Z")));
        // Exactly at midnight the new day has begun.
        let (s, _) = period_at(Reset::Daily, 1, ts("2026-01-01T00:00:00Z"), &utc);
        assert_eq!(s, ts("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn daily_across_berlin_dst_days() {
        let berlin = zone("Europe/Berlin");
        // 2026-03-29: clocks go 02:00 -> 03:00, the day has 23 hours.
        let (s, e) = period_at(Reset::Daily, 1, ts("2026-03-29T10:00:00Z"), &berlin);
        assert_eq!(s, ts("2026-03-28T23:00:00Z"));
        assert_eq!(e, Some(ts("2026-03-29T22:00:00Z")));
        // 2026-10-25: clocks go 03:00 -> 02:00, the day has 25 hours.
        let (s, e) = period_at(Reset::Daily, 1, ts("2026-10-25T12:00:00Z"), &berlin);
        assert_eq!(s, ts("2026-10-24T22:00:00Z"));
        assert_eq!(e, Some(ts("2026-10-25T23:00:00Z")));
        // 23:30 UTC on the 24th is already the 25th in Berlin.
        let (s, _) = period_at(Reset::Daily, 1, ts("2026-10-24T23:30:00Z"), &berlin);
        assert_eq!(s, ts("2026-10-24T22:00:00Z"));
    }

    #[test]
    fn day_that_skips_midnight_starts_at_the_end_of_the_gap() {
        // Sao Paulo 2018-11-04: 00:00 -> 01:00, the day starts at 01:00 -03.
        let sp = zone("America/Sao_Paulo");
        let (s, e) = period_at(Reset::Daily, 1, ts("2018-11-04T12:00:00Z"), &sp);
        assert_eq!(s, ts("2018-11-04T03:00:00Z"));
        assert_eq!(e, Some(ts("2018-11-05T02:00:00Z")));
    }

    #[test]
    fn weekly_starts_on_monday_local() {
        let berlin = zone("Europe/Berlin");
        // Sunday 2026-01-04 23:30 UTC is Monday 00:30 in Berlin: a new week.
        let (s, e) = period_at(Reset::Weekly, 1, ts("2026-01-04T23:30:00Z"), &berlin);
        assert_eq!(s, ts("2026-01-04T23:00:00Z"));
        assert_eq!(e, Some(ts("2026-01-11T23:00:00Z")));
        // In UTC it is still the week that began Monday 2025-12-29.
        let (s, e) = period_at(Reset::Weekly, 1, ts("2026-01-04T23:30:00Z"), &zone("UTC"));
        assert_eq!(s, ts("2025-12-29T00:00:00Z"));
        assert_eq!(e, Some(ts("2026-01-05T00:00:00Z")));
        // The week of the spring DST change is an hour short.
        let (s, e) = period_at(Reset::Weekly, 1, ts("2026-03-27T12:00:00Z"), &berlin);
        assert_eq!(s, ts("2026-03-22T23:00:00Z"));
        assert_eq!(e, Some(ts("2026-03-29T22:00:00Z")));
    }

    #[test]
    fn monthly_on_billing_day_15_across_a_month_end() {
        let utc = zone("UTC");
        let (s, e) = period_at(Reset::Monthly, 15, ts("2026-01-31T18:00:00Z"), &utc);
        assert_eq!(s, ts("2026-01-15T00:00:00Z"));
        assert_eq!(e, Some(ts("2026-02-15T00:00:00Z")));
        // Before the billing day: the period began last month, even last year.
        let (s, e) = period_at(Reset::Monthly, 15, ts("2026-01-03T00:00:00Z"), &utc);
        assert_eq!(s, ts("2025-12-15T00:00:00Z"));
        assert_eq!(e, Some(ts("2026-01-15T00:00:00Z")));
        // Across February (28 days) and the year end.
        let (s, e) = period_at(Reset::Monthly, 28, ts("2026-02-28T00:00:00Z"), &utc);
        assert_eq!(s, ts("2026-02-28T00:00:00Z"));
        assert_eq!(e, Some(ts("2026-03-28T00:00:00Z")));
        let (s, e) = period_at(Reset::Monthly, 1, ts("2025-12-31T23:59:59.999Z"), &utc);
        assert_eq!(s, ts("2025-12-01T00:00:00Z"));
        assert_eq!(e, Some(ts("2026-01-01T00:00:00Z")));
    }

    #[test]
    fn monthly_in_berlin_across_dst_and_year_end() {
        let berlin = zone("Europe/Berlin");
        // Period 15 March (CET, +01) to 15 April (CEST, +02).
        let (s, e) = period_at(Reset::Monthly, 15, ts("2026-04-01T00:00:00Z"), &berlin);
        assert_eq!(s, ts("2026-03-14T23:00:00Z"));
        assert_eq!(e, Some(ts("2026-04-14T22:00:00Z")));
        // New Year's Eve 23:30 UTC is already January in Berlin.
        let (s, e) = period_at(Reset::Monthly, 1, ts("2025-12-31T23:30:00Z"), &berlin);
        assert_eq!(s, ts("2025-12-31T23:00:00Z"));
        assert_eq!(e, Some(ts("2026-01-31T23:00:00Z")));
    }

    #[test]
    fn out_of_range_billing_days_are_clamped_not_panics() {
        let utc = zone("UTC");
        let at = ts("2026-02-10T00:00:00Z");
        assert_eq!(
            period_at(Reset::Monthly, 0, at, &utc),
            period_at(Reset::Monthly, 1, at, &utc)
        );
        assert_eq!(
            period_at(Reset::Monthly, 31, at, &utc),
            period_at(Reset::Monthly, 28, at, &utc)
        );
    }

    #[test]
    fn edges_of_time_do_not_panic() {
        let berlin = zone("Europe/Berlin");
        for r in [Reset::Daily, Reset::Weekly, Reset::Monthly] {
            let (_, e) = period_at(r, 28, Timestamp::MAX, &berlin);
            assert_eq!(e, None, "{r}");
            let (s, _) = period_at(r, 28, Timestamp::MIN, &berlin);
            assert!(s >= Timestamp::MIN, "{r}");
        }
        assert_eq!(next_local_midnight(Timestamp::MAX, &berlin), None);
    }

    #[test]
    fn next_midnight_is_local() {
        let berlin = zone("Europe/Berlin");
        assert_eq!(
            next_local_midnight(ts("2026-03-28T23:30:00Z"), &berlin),
            Some(ts("2026-03-29T22:00:00Z"))
        );
        assert_eq!(
            next_local_midnight(ts("2025-12-31T22:59:59Z"), &berlin),
            Some(ts("2025-12-31T23:00:00Z"))
        );
        assert_eq!(
            next_local_midnight(ts("2025-12-31T23:00:00Z"), &zone("UTC")),
            Some(ts("2026-01-01T00:00:00Z"))
        );
    }

    #[test]
    fn the_cache_answers_as_period_at_does_across_days_and_dst_changes() {
        // Every 37 minutes over three months, through Berlin's and Sao
        // Paulo's (2018: midnight skipped) DST changes, asked in time order
        // as a running node asks: each answer equals the uncached one.
        for (name, from) in [
            ("Europe/Berlin", "2026-03-01T00:00:00Z"),
            ("America/Sao_Paulo", "2018-10-01T00:00:00Z"),
        ] {
            let tz = zone(name);
            let cache = PeriodCache::default();
            let mut at = ts(from).as_millisecond();
            let until = at + 92 * 86_400_000;
            while at < until {
                for reset in [Reset::Daily, Reset::Weekly, Reset::Monthly] {
                    for day in [1, 15, 28] {
                        let (start, end) = period_at(reset, day, ts_ms(at), &tz);
                        let want = (start.as_millisecond(), end.map(|e| e.as_millisecond()));
                        assert_eq!(
                            cache.get(reset, day, at, &tz),
                            Some(want),
                            "{name} {reset} {day} {at}"
                        );
                    }
                }
                at += 37 * 60_000;
            }
        }
    }

    #[test]
    fn the_cache_leaves_never_to_its_caller() {
        let cache = PeriodCache::default();
        assert_eq!(cache.get(Reset::Never, 1, 0, &zone("UTC")), None);
    }

    fn ts_ms(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(ms).expect("test instant")
    }
}
