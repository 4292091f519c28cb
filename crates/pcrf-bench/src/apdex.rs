//! Apdex (Application Performance Index): how an operator would judge the
//! latency of one key operation with a single number and its target time T.
//!
//! Satisfied: latency < T; tolerating: T <= latency < 4T; frustrated:
//! latency >= 4T, or the operation failed (error answer, timeout, lost).
//! Apdex = (satisfied + tolerating / 2) / total. Counted exactly at record
//! time rather than read back from a bucketed histogram.

use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// Apdex counters for one operation with its target time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Apdex {
    t: Duration,
    satisfied: u64,
    tolerating: u64,
    frustrated: u64,
}

impl Apdex {
    /// A zeroed counter for target time `t` (must be above zero).
    pub fn new(t: Duration) -> Apdex {
        Apdex {
            t,
            satisfied: 0,
            tolerating: 0,
            frustrated: 0,
        }
    }

    /// The target time T.
    pub fn target(&self) -> Duration {
        self.t
    }

    /// Counts one successful operation that took `latency`.
    pub fn record(&mut self, latency: Duration) {
        if latency < self.t {
            self.satisfied += 1;
        } else if latency < self.t * 4 {
            self.tolerating += 1;
        } else {
            self.frustrated += 1;
        }
    }

    /// Counts one failed operation: always frustrated, whatever its latency.
    pub fn record_failure(&mut self) {
        self.frustrated += 1;
    }

    /// Adds another counter with the same T (per-peer counters merged at the end).
    pub fn merge(&mut self, other: &Apdex) {
        self.satisfied += other.satisfied;
        self.tolerating += other.tolerating;
        self.frustrated += other.frustrated;
    }

    pub fn total(&self) -> u64 {
        self.satisfied + self.tolerating + self.frustrated
    }

    /// The score in [0, 1]; `None` with no samples (an empty run has no score,
    /// not a perfect one).
    pub fn score(&self) -> Option<f64> {
        let total = self.total();
        (total > 0).then(|| (self.satisfied as f64 + self.tolerating as f64 / 2.0) / total as f64)
    }

    /// The serialisable summary.
    pub fn summary(&self) -> ApdexSummary {
        ApdexSummary {
            score: self.score(),
            t_ms: self.t.as_secs_f64() * 1e3,
            satisfied: self.satisfied,
            tolerating: self.tolerating,
            frustrated: self.frustrated,
        }
    }
}

/// Apdex as reported: the score with its T and the three counts.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct ApdexSummary {
    pub score: Option<f64>,
    pub t_ms: f64,
    pub satisfied: u64,
    pub tolerating: u64,
    pub frustrated: u64,
}

impl ApdexSummary {
    /// The conventional rating band of a score.
    pub fn rating(&self) -> &'static str {
        match self.score {
            None => "no samples",
            Some(s) if s >= 0.94 => "excellent",
            Some(s) if s >= 0.85 => "good",
            Some(s) if s >= 0.70 => "fair",
            Some(s) if s >= 0.50 => "poor",
            Some(_) => "unacceptable",
        }
    }
}

/// Printed the way Apdex is conventionally quoted: `0.97 [5 ms]`.
/// The score is truncated, not rounded, so 0.9999 never shows as 1.00.
impl fmt::Display for ApdexSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = format_ms(self.t_ms);
        match self.score {
            Some(s) => write!(f, "{:.2} [{t} ms]", (s * 100.0).floor() / 100.0),
            None => write!(f, "n/a [{t} ms]"),
        }
    }
}

/// A millisecond figure without trailing zeros: 5 -> "5", 0.5 -> "0.5".
fn format_ms(ms: f64) -> String {
    let s = format!("{ms:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn boundaries_follow_the_definition() {
        let mut a = Apdex::new(ms(5));
        a.record(Duration::from_micros(4_999)); // satisfied
        a.record(ms(5)); // exactly T: tolerating
        a.record(Duration::from_micros(19_999)); // tolerating
        a.record(ms(20)); // exactly 4T: frustrated
        let s = a.summary();
        assert_eq!((s.satisfied, s.tolerating, s.frustrated), (1, 2, 1));
        assert_eq!(s.score, Some((1.0 + 2.0 / 2.0) / 4.0));
    }

    #[test]
    fn failures_are_frustrated_and_score_is_standard() {
        let mut a = Apdex::new(ms(5));
        for _ in 0..90 {
            a.record(ms(1));
        }
        for _ in 0..6 {
            a.record(ms(10));
        }
        for _ in 0..4 {
            a.record_failure();
        }
        assert_eq!(a.total(), 100);
        assert_eq!(a.score(), Some(0.93));
        assert_eq!(a.summary().to_string(), "0.93 [5 ms]");
        assert_eq!(a.summary().rating(), "good");
    }

    #[test]
    fn empty_has_no_score_and_display_truncates() {
        let a = Apdex::new(Duration::from_micros(500));
        assert_eq!(a.score(), None);
        assert_eq!(a.summary().to_string(), "n/a [0.5 ms]");

        let mut b = Apdex::new(ms(5));
        for _ in 0..9_999 {
            b.record(ms(1));
        }
        b.record_failure();
        assert_eq!(b.summary().to_string(), "0.99 [5 ms]");
        let mut c = Apdex::new(ms(5));
        c.record(ms(1));
        assert_eq!(c.summary().to_string(), "1.00 [5 ms]");
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = Apdex::new(ms(5));
        a.record(ms(1));
        let mut b = Apdex::new(ms(5));
        b.record(ms(30));
        b.record(ms(6));
        a.merge(&b);
        let s = a.summary();
        assert_eq!((s.satisfied, s.tolerating, s.frustrated), (1, 1, 1));
    }
}
