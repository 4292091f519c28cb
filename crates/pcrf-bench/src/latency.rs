//! Latency distribution of one operation: an HdrHistogram of nanoseconds,
//! read back as the percentiles we report (p50/p90/p99/p99.9/max).
//!
//! HdrHistogram keeps 3 significant digits across the whole range in fixed
//! memory, so a 60 s run at 30k TPS costs no more than a 1 s run, and
//! per-peer histograms merge exactly at the end.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The largest latency we can record (longer ones are clamped to it); far
/// above any timeout we would configure.
const MAX_NS: u64 = 3_600_000_000_000;

/// A latency histogram.
#[derive(Clone, Debug)]
pub struct Latency {
    h: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    pub fn new() -> Latency {
        let h = Histogram::new_with_bounds(1, MAX_NS, 3)
            .expect("constant bounds within hdrhistogram's limits");
        Latency { h }
    }

    /// Records one latency; zero is stored as 1 ns, longer than an hour as an hour.
    pub fn record(&mut self, d: Duration) {
        let ns = u64::try_from(d.as_nanos())
            .unwrap_or(MAX_NS)
            .clamp(1, MAX_NS);
        self.h.saturating_record(ns);
    }

    pub fn count(&self) -> u64 {
        self.h.len()
    }

    pub fn merge(&mut self, other: &Latency) {
        // Same bounds on both sides, so add cannot fail; if it ever did, the
        // samples are recorded one bucket at a time instead.
        if self.h.add(&other.h).is_err() {
            for v in other.h.iter_recorded() {
                self.h
                    .saturating_record_n(v.value_iterated_to(), v.count_at_value());
            }
        }
    }

    /// The value at quantile `q` (0..=1).
    pub fn quantile(&self, q: f64) -> Duration {
        Duration::from_nanos(self.h.value_at_quantile(q))
    }

    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.h.max())
    }

    /// The reported percentiles, in milliseconds; `None` when nothing was recorded.
    pub fn percentiles(&self) -> Option<Percentiles> {
        if self.h.is_empty() {
            return None;
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        Some(Percentiles {
            count: self.h.len(),
            mean_ms: self.h.mean() / 1e6,
            p50_ms: ms(self.quantile(0.50)),
            p90_ms: ms(self.quantile(0.90)),
            p99_ms: ms(self.quantile(0.99)),
            p999_ms: ms(self.quantile(0.999)),
            max_ms: ms(self.max()),
        })
    }
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut l = Latency::new();
        // 1..=1000 µs, one each.
        for us in 1..=1000u64 {
            l.record(Duration::from_micros(us));
        }
        let p = l.percentiles().expect("samples");
        assert_eq!(p.count, 1000);
        let close = |a: f64, b: f64| (a - b).abs() <= b * 0.002;
        assert!(close(p.p50_ms, 0.500), "{p:?}");
        assert!(close(p.p90_ms, 0.900), "{p:?}");
        assert!(close(p.p99_ms, 0.990), "{p:?}");
        assert!(close(p.p999_ms, 0.999), "{p:?}");
        assert!(close(p.max_ms, 1.000), "{p:?}");
        assert!(close(p.mean_ms, 0.5005), "{p:?}");
    }

    #[test]
    fn empty_has_no_percentiles_and_extremes_are_clamped() {
        let mut l = Latency::new();
        assert!(l.percentiles().is_none());
        l.record(Duration::ZERO);
        l.record(Duration::from_secs(10_000));
        assert_eq!(l.count(), 2);
        let max = l.max();
        assert!(max >= Duration::from_secs(3599) && max <= Duration::from_secs(3602));
    }

    #[test]
    fn merge_combines_samples() {
        let mut a = Latency::new();
        let mut b = Latency::new();
        for _ in 0..99 {
            a.record(Duration::from_micros(100));
        }
        b.record(Duration::from_millis(50));
        a.merge(&b);
        assert_eq!(a.count(), 100);
        assert!(a.quantile(0.5) < Duration::from_micros(101));
        assert!(a.max() >= Duration::from_millis(49));
    }
}
