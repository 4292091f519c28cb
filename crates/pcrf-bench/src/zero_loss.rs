//! Zero-loss throughput: the highest rate a system holds for the whole
//! trial with no error, no timeout and p99 latency under a bound, found by
//! ramping up from a floor until a trial fails, then bisecting; the extreme
//! rate (the most it answered per second in any trial, losses allowed) is
//! reported beside it.
//!
//! This file is the search and the verdict only; running a trial is the
//! caller's, so the logic is tested against a simulated system.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// What the search needs to know of one finished trial.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialFigures {
    /// The offered rate (transactions per second).
    pub target_tps: f64,
    /// Requests due in the measurement window.
    pub scheduled: u64,
    /// Requests that got a success answer (2xxx).
    pub succeeded: u64,
    /// Error answers and send failures.
    pub errors: u64,
    /// Due but never sent because an earlier request of the session failed.
    pub not_sent: u64,
    pub timeouts: u64,
    pub p99: Option<Duration>,
    /// Success answers per second actually achieved.
    pub achieved_tps: f64,
}

/// The pass criteria.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Criteria {
    pub p99_bound: Duration,
    /// The share of the offered rate that must be achieved (the generator or
    /// the server falling behind the clock is a failure too).
    pub min_achieved_ratio: f64,
}

impl Default for Criteria {
    fn default() -> Self {
        Criteria {
            p99_bound: Duration::from_millis(10),
            min_achieved_ratio: 0.99,
        }
    }
}

/// Whether a trial held its rate with zero loss; the reason when not.
pub fn judge(f: &TrialFigures, c: &Criteria) -> Result<(), String> {
    if f.scheduled == 0 {
        return Err("nothing was scheduled".into());
    }
    if f.errors > 0 || f.timeouts > 0 || f.not_sent > 0 {
        let mut why = Vec::new();
        if f.errors > 0 {
            why.push(format!("{} errors", f.errors));
        }
        if f.timeouts > 0 {
            why.push(format!("{} timeouts", f.timeouts));
        }
        if f.not_sent > 0 {
            why.push(format!(
                "{} not sent (their session had failed)",
                f.not_sent
            ));
        }
        return Err(why.join(", "));
    }
    if f.succeeded < f.scheduled {
        return Err(format!(
            "{} of {} requests unanswered",
            f.scheduled - f.succeeded,
            f.scheduled
        ));
    }
    match f.p99 {
        Some(p99) if p99 > c.p99_bound => {
            return Err(format!(
                "p99 {:.3} ms above the {:.3} ms bound",
                p99.as_secs_f64() * 1e3,
                c.p99_bound.as_secs_f64() * 1e3
            ))
        }
        None => return Err("no latency samples".into()),
        _ => {}
    }
    if f.achieved_tps < f.target_tps * c.min_achieved_ratio {
        return Err(format!(
            "achieved {:.0} TPS of {:.0} offered",
            f.achieved_tps, f.target_tps
        ));
    }
    Ok(())
}

/// One trial as the search recorded it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub rate: f64,
    pub passed: bool,
    pub reason: Option<String>,
    pub achieved_tps: f64,
}

/// How much each trial of the ramp offers over the last that passed.
const RAMP: f64 = 2.0;

/// The outcome of a search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    /// The highest offered rate that passed; `None` if even the floor failed.
    pub zero_loss_tps: Option<f64>,
    /// The most success answers per second achieved in any trial.
    pub extreme_tps: f64,
    /// The ceiling passed: the true zero-loss rate may be higher.
    pub limited_by_max: bool,
    pub trials: Vec<Trial>,
}

/// The search: the floor first, then twice the last passing rate (capped at
/// `max`) until a trial fails, then midpoints of the bracket until it is
/// narrower than `resolution` (relative to its low end) or the trial budget
/// is spent. It ramps up rather than starting at the ceiling because a rate
/// far above capacity leaves the system behind it with a debt (a backlog,
/// a database checkpoint, dead rows to vacuum) that fails the next trials
/// whatever their rate: this way no trial offers more than twice the
/// highest rate that passed, and the caller rests longer after a failure
/// (`last_failed`).
#[derive(Clone, Debug)]
pub struct ZeroLossSearch {
    min: f64,
    max: f64,
    resolution: f64,
    max_trials: usize,
    /// Highest passing rate so far.
    lo: Option<f64>,
    /// Lowest failing rate so far.
    hi: Option<f64>,
    trials: Vec<Trial>,
}

impl ZeroLossSearch {
    pub fn new(min: f64, max: f64, resolution: f64, max_trials: usize) -> Result<Self, String> {
        if !(min.is_finite() && min > 0.0) {
            return Err(format!("--min must be a positive rate, not {min}"));
        }
        if !(max.is_finite() && max >= min) {
            return Err(format!("--max ({max}) must be at least --min ({min})"));
        }
        if !(resolution > 0.0 && resolution < 1.0) {
            return Err(format!("resolution must be in (0, 1), not {resolution}"));
        }
        if max_trials < 2 {
            return Err("a search needs at least 2 trials".into());
        }
        Ok(ZeroLossSearch {
            min,
            max,
            resolution,
            max_trials,
            lo: None,
            hi: None,
            trials: Vec::new(),
        })
    }

    /// The rate of the next trial, or `None` when the search is over.
    pub fn next_rate(&self) -> Option<f64> {
        if self.trials.len() >= self.max_trials {
            return None;
        }
        match (self.lo, self.hi) {
            (None, None) => Some(self.min),
            // The ceiling passed.
            (Some(lo), None) if lo >= self.max => None,
            (Some(lo), None) => Some((lo * RAMP).round().min(self.max)),
            // The floor failed.
            (None, Some(_)) => None,
            (Some(lo), Some(hi)) => {
                if hi - lo <= lo * self.resolution {
                    None
                } else {
                    Some(((lo + hi) / 2.0).round().max(lo + 1.0).min(hi))
                }
            }
        }
        .filter(|r| self.trials.iter().all(|t| t.rate != *r))
    }

    /// Whether the last trial failed (the system may still be catching up).
    pub fn last_failed(&self) -> bool {
        self.trials.last().is_some_and(|t| !t.passed)
    }

    /// Records the outcome of a trial at `rate`.
    pub fn record(&mut self, rate: f64, verdict: Result<(), String>, achieved_tps: f64) {
        let passed = verdict.is_ok();
        if passed {
            self.lo = Some(self.lo.map_or(rate, |lo| lo.max(rate)));
        } else {
            self.hi = Some(self.hi.map_or(rate, |hi| hi.min(rate)));
        }
        self.trials.push(Trial {
            rate,
            passed,
            reason: verdict.err(),
            achieved_tps,
        });
    }

    pub fn result(&self) -> SearchResult {
        SearchResult {
            zero_loss_tps: self.lo,
            extreme_tps: self
                .trials
                .iter()
                .map(|t| t.achieved_tps)
                .fold(0.0, f64::max),
            limited_by_max: self.lo == Some(self.max),
            trials: self.trials.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(target: f64, achieved: f64, p99_ms: u64) -> TrialFigures {
        TrialFigures {
            target_tps: target,
            scheduled: 1000,
            succeeded: 1000,
            errors: 0,
            not_sent: 0,
            timeouts: 0,
            p99: Some(Duration::from_millis(p99_ms)),
            achieved_tps: achieved,
        }
    }

    #[test]
    fn verdicts() {
        let c = Criteria::default();
        assert_eq!(judge(&figures(1000.0, 1000.0, 2), &c), Ok(()));
        let mut f = figures(1000.0, 1000.0, 2);
        f.timeouts = 1;
        assert_eq!(judge(&f, &c), Err("1 timeouts".into()));
        let mut f = figures(1000.0, 1000.0, 2);
        f.errors = 3;
        f.not_sent = 4;
        assert_eq!(
            judge(&f, &c),
            Err("3 errors, 4 not sent (their session had failed)".into())
        );
        let mut f = figures(1000.0, 1000.0, 2);
        f.succeeded = 999;
        assert!(judge(&f, &c).is_err());
        assert!(judge(&figures(1000.0, 1000.0, 11), &c).is_err());
        assert!(judge(&figures(1000.0, 980.0, 2), &c).is_err());
        let mut f = figures(1000.0, 1000.0, 2);
        f.p99 = None;
        assert!(judge(&f, &c).is_err());
    }

    /// Runs a search against a system that holds any rate up to `capacity`
    /// and answers at most `capacity` per second beyond it.
    fn search_against(capacity: f64, min: f64, max: f64) -> SearchResult {
        let mut s = ZeroLossSearch::new(min, max, 0.01, 30).expect("valid");
        while let Some(rate) = s.next_rate() {
            let achieved = rate.min(capacity);
            let f = figures(rate, achieved, if rate <= capacity { 1 } else { 500 });
            s.record(rate, judge(&f, &Criteria::default()), achieved);
        }
        s.result()
    }

    #[test]
    fn bisection_converges_within_resolution() {
        let r = search_against(37_300.0, 1_000.0, 100_000.0);
        let zl = r.zero_loss_tps.expect("found");
        assert!((37_300.0 * 0.99..=37_300.0).contains(&zl), "{zl}");
        assert_eq!(r.extreme_tps, 37_300.0);
        assert!(!r.limited_by_max);
        let rates: Vec<f64> = r.trials.iter().map(|t| t.rate).collect();
        assert_eq!(rates[..7], [1e3, 2e3, 4e3, 8e3, 16e3, 32e3, 64e3]);
        assert!(r.trials.len() < 15, "{}", r.trials.len());
    }

    #[test]
    fn no_trial_offers_more_than_twice_what_passed() {
        for capacity in [1_500.0, 9_999.0, 37_300.0, 99_000.0] {
            let r = search_against(capacity, 1_000.0, 100_000.0);
            let mut best = 0.0_f64;
            for t in &r.trials {
                assert!(
                    best == 0.0 || t.rate <= 2.0 * best,
                    "{} after {best}",
                    t.rate
                );
                if t.passed {
                    best = best.max(t.rate);
                }
            }
        }
    }

    #[test]
    fn ceiling_and_floor_end_the_search() {
        let r = search_against(1e9, 1_000.0, 50_000.0);
        assert_eq!(r.zero_loss_tps, Some(50_000.0));
        assert!(r.limited_by_max);
        let rates: Vec<f64> = r.trials.iter().map(|t| t.rate).collect();
        assert_eq!(rates, [1e3, 2e3, 4e3, 8e3, 16e3, 32e3, 50e3]);

        let r = search_against(500.0, 1_000.0, 50_000.0);
        assert_eq!(r.zero_loss_tps, None);
        assert_eq!(r.trials.len(), 1);
        assert_eq!(r.extreme_tps, 500.0);
    }

    #[test]
    fn a_failed_trial_is_known_to_the_caller() {
        let mut s = ZeroLossSearch::new(1_000.0, 8_000.0, 0.01, 10).expect("valid");
        assert!(!s.last_failed());
        s.record(1_000.0, Ok(()), 1_000.0);
        assert!(!s.last_failed());
        s.record(2_000.0, Err("p99".into()), 1_900.0);
        assert!(s.last_failed());
        assert_eq!(s.next_rate(), Some(1_500.0));
    }

    #[test]
    fn trial_budget_is_respected_and_inputs_checked() {
        let mut s = ZeroLossSearch::new(1.0, 1e9, 1e-6, 4).expect("valid");
        let mut n = 0;
        while let Some(rate) = s.next_rate() {
            n += 1;
            let ok = rate <= 12_345.0;
            s.record(rate, if ok { Ok(()) } else { Err("x".into()) }, rate);
        }
        assert_eq!(n, 4);
        assert!(ZeroLossSearch::new(0.0, 10.0, 0.01, 10).is_err());
        assert!(ZeroLossSearch::new(10.0, 5.0, 0.01, 10).is_err());
        assert!(ZeroLossSearch::new(1.0, 5.0, 0.0, 10).is_err());
    }

    #[test]
    fn equal_bounds_is_one_trial() {
        let r = search_against(10_000.0, 5_000.0, 5_000.0);
        assert_eq!(r.zero_loss_tps, Some(5_000.0));
        assert_eq!(r.trials.len(), 1);
    }
}
