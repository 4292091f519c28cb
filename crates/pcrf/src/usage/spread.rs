//! When pushes go out. At a boundary where every session's policy changes
//! (the night boost starting at 01:00, a daily reset) the PCRF sends one
//! RAR per session; sent at once they would hit the PCEFs, the store and
//! ourselves as one burst. `Spread` gives each push an offset evenly over a
//! window instead, and `next_boundary` says when the next such local
//! time-of-day comes.

use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use std::time::Duration;

/// Offsets of `count` pushes spread evenly over `window`: push `i` goes at
/// `window * i / count`, so the first at 0 and the last one slot before the
/// window ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spread {
    count: usize,
    next: usize,
    window: Duration,
}

impl Spread {
    /// `count` 0 yields nothing; a zero `window` yields `count` zeros.
    pub fn new(count: usize, window: Duration) -> Spread {
        Spread {
            count,
            next: 0,
            window,
        }
    }

    /// The offset of push `i` (`None` when `i >= count`).
    pub fn offset(&self, i: usize) -> Option<Duration> {
        if i >= self.count {
            return None;
        }
        let total = self.window.as_nanos();
        let (i, count) = (i as u128, self.count as u128);
        // total * i overflows u128 only for absurd windows and counts; then
        // the coarser (total / count) * i, which cannot exceed total.
        let nanos = total
            .checked_mul(i)
            .map_or_else(|| total / count * i, |n| n / count);
        let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
        Some(Duration::new(secs, (nanos % 1_000_000_000) as u32))
    }
}

impl Iterator for Spread {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let offset = self.offset(self.next)?;
        self.next += 1;
        Some(offset)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.count.saturating_sub(self.next);
        (left, Some(left))
    }
}

impl ExactSizeIterator for Spread {}

/// The first instant strictly after `at` at which the local time in `tz`
/// is one of `times` (hour, minute). A time skipped by a DST change happens
/// when the clocks have moved on (02:30 on a spring-forward night is 03:30);
/// a time that occurs twice counts at its first occurrence. Invalid times
/// (hour > 23, minute > 59) are ignored; `None` when none is valid.
pub fn next_boundary(times: &[(u8, u8)], at: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
    let today = at.to_zoned(tz.clone()).date();
    let valid: Vec<(i8, i8)> = times
        .iter()
        .filter(|(h, m)| *h <= 23 && *m <= 59)
        .map(|&(h, m)| (h as i8, m as i8))
        .collect();
    // Today and tomorrow hold the answer; the day after covers a DST shift
    // pushing tomorrow's candidate later than expected.
    (0i64..=2)
        .filter_map(|d| today.checked_add(d.days()).ok())
        .flat_map(|date| valid.iter().map(move |&(h, m)| date.at(h, m, 0, 0)))
        .filter_map(|local| local.to_zoned(tz.clone()).ok())
        .map(|z| z.timestamp())
        .filter(|t| *t > at)
        .min()
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
    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn spreads_evenly_from_zero() {
        let s: Vec<Duration> = Spread::new(4, secs(60.0)).collect();
        assert_eq!(s, vec![secs(0.0), secs(15.0), secs(30.0), secs(45.0)]);
        let s: Vec<Duration> = Spread::new(3, Duration::from_secs(10)).collect();
        assert_eq!(
            s,
            vec![
                Duration::ZERO,
                Duration::new(3, 333_333_333),
                Duration::new(6, 666_666_666)
            ]
        );
        assert_eq!(
            Spread::new(1, secs(60.0)).collect::<Vec<_>>(),
            vec![Duration::ZERO]
        );
    }

    #[test]
    fn edge_counts_and_windows() {
        assert_eq!(Spread::new(0, secs(60.0)).next(), None);
        assert_eq!(Spread::new(0, secs(60.0)).len(), 0);
        let zeros: Vec<Duration> = Spread::new(5, Duration::ZERO).collect();
        assert_eq!(zeros, vec![Duration::ZERO; 5]);
        let mut s = Spread::new(3, secs(3.0));
        assert_eq!(s.len(), 3);
        s.next();
        assert_eq!(s.len(), 2);
        // Offsets stay inside the window for any input, without panicking.
        let huge = Spread::new(usize::MAX, Duration::MAX);
        let last = huge.offset(usize::MAX - 1).expect("in range");
        assert!(last < Duration::MAX);
        assert_eq!(huge.offset(usize::MAX), None);
        let many = Spread::new(1_000_000, Duration::from_secs(1));
        assert_eq!(
            many.offset(999_999),
            Some(Duration::from_nanos(999_999_000))
        );
    }

    #[test]
    fn next_night_boundary_in_berlin() {
        let berlin = zone("Europe/Berlin");
        let night = [(1, 0), (6, 0)];
        // 00:30 local -> 01:00 local.
        assert_eq!(
            next_boundary(&night, ts("2026-01-19T23:30:00Z"), &berlin),
            Some(ts("2026-01-20T00:00:00Z"))
        );
        // Exactly at 01:00 the next one is 06:00 (strictly after).
        assert_eq!(
            next_boundary(&night, ts("2026-01-20T00:00:00Z"), &berlin),
            Some(ts("2026-01-20T05:00:00Z"))
        );
        // After 06:00: tomorrow 01:00, across the year end.
        assert_eq!(
            next_boundary(&night, ts("2025-12-31T12:00:00Z"), &berlin),
            Some(ts("2026-01-01T00:00:00Z"))
        );
        // Order of times does not matter.
        assert_eq!(
            next_boundary(&[(6, 0), (1, 0)], ts("2026-01-19T23:30:00Z"), &berlin),
            Some(ts("2026-01-20T00:00:00Z"))
        );
    }

    #[test]
    fn next_boundary_across_dst_changes() {
        let berlin = zone("Europe/Berlin");
        // 2026-03-29 02:30 does not exist in Berlin: it comes at 03:30 CEST.
        assert_eq!(
            next_boundary(&[(2, 30)], ts("2026-03-29T00:00:00Z"), &berlin),
            Some(ts("2026-03-29T01:30:00Z"))
        );
        // 2026-10-25 02:30 happens twice: the first (CEST) one.
        assert_eq!(
            next_boundary(&[(2, 30)], ts("2026-10-24T22:00:00Z"), &berlin),
            Some(ts("2026-10-25T00:30:00Z"))
        );
        // Between the two 02:30s, the next is the next day's.
        assert_eq!(
            next_boundary(&[(2, 30)], ts("2026-10-25T00:45:00Z"), &berlin),
            Some(ts("2026-10-26T01:30:00Z"))
        );
        // 01:00 the day after the spring change is 23:00 UTC, not 00:00.
        assert_eq!(
            next_boundary(&[(1, 0)], ts("2026-03-29T12:00:00Z"), &berlin),
            Some(ts("2026-03-29T23:00:00Z"))
        );
    }

    #[test]
    fn next_boundary_in_utc_and_bad_input() {
        let utc = zone("UTC");
        assert_eq!(
            next_boundary(&[(0, 0)], ts("2026-12-31T23:59:59Z"), &utc),
            Some(ts("2027-01-01T00:00:00Z"))
        );
        assert_eq!(next_boundary(&[], ts("2026-01-01T00:00:00Z"), &utc), None);
        assert_eq!(
            next_boundary(&[(24, 0), (1, 60)], ts("2026-01-01T00:00:00Z"), &utc),
            None
        );
        assert_eq!(
            next_boundary(&[(24, 0), (23, 59)], ts("2026-01-01T00:00:00Z"), &utc),
            Some(ts("2026-01-01T23:59:00Z"))
        );
        assert_eq!(next_boundary(&[(1, 0)], Timestamp::MAX, &utc), None);
    }
}
