//! The open-loop clock: when each new session is intended to start, given
//! the rate, whatever the server does.
//!
//! Intended times come from the rate alone (the i-th of a uniform process
//! is at i / rate, computed from i so no error accumulates), so a slow
//! answer never delays the next request; latency is measured from these
//! intended times, which keeps coordinated omission out of the figures.

use crate::scenario::ArrivalProcess;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::time::Duration;

/// Arrival times of an open-loop process, as offsets from the run's start.
#[derive(Clone, Debug)]
pub struct Arrivals {
    process: ArrivalProcess,
    /// Nanoseconds between arrivals on average.
    interval_ns: f64,
    index: u64,
    /// Poisson: the running sum of exponential gaps.
    poisson_ns: f64,
    rng: StdRng,
}

impl Arrivals {
    /// `rate` per second, above zero.
    pub fn new(process: ArrivalProcess, rate: f64, seed: u64) -> Result<Arrivals, String> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(format!("rate must be above zero, not {rate}"));
        }
        Ok(Arrivals {
            process,
            interval_ns: 1e9 / rate,
            index: 0,
            poisson_ns: 0.0,
            rng: StdRng::seed_from_u64(seed),
        })
    }

    /// The intended time of the next arrival (the first is at zero).
    pub fn next_time(&mut self) -> Duration {
        let ns = match self.process {
            ArrivalProcess::Uniform => self.index as f64 * self.interval_ns,
            ArrivalProcess::Poisson => {
                let t = self.poisson_ns;
                let u: f64 = self.rng.random();
                self.poisson_ns += -(1.0 - u).ln() * self.interval_ns;
                t
            }
        };
        self.index += 1;
        Duration::from_nanos(ns as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_is_exact_without_drift() {
        let mut a = Arrivals::new(ArrivalProcess::Uniform, 3000.0, 1).expect("rate");
        assert_eq!(a.next_time(), Duration::ZERO);
        let mut last = Duration::ZERO;
        for _ in 1..3_000_000 {
            last = a.next_time();
        }
        // The 3,000,000th arrival (index 2,999,999) is at 999.999667 s.
        let expect = Duration::from_nanos((2_999_999.0 * 1e9 / 3000.0) as u64);
        assert_eq!(last, expect);
    }

    #[test]
    fn poisson_has_the_mean_rate_and_is_reproducible() {
        let mut a = Arrivals::new(ArrivalProcess::Poisson, 1000.0, 42).expect("rate");
        let mut b = Arrivals::new(ArrivalProcess::Poisson, 1000.0, 42).expect("rate");
        let mut n = 0u32;
        let mut prev = Duration::ZERO;
        loop {
            let t = a.next_time();
            assert_eq!(t, b.next_time());
            assert!(t >= prev);
            prev = t;
            if t >= Duration::from_secs(100) {
                break;
            }
            n += 1;
        }
        // 100,000 expected; the standard deviation is about 316.
        assert!((n as f64 - 100_000.0).abs() < 1_600.0, "{n}");
    }

    #[test]
    fn rejects_bad_rates() {
        assert!(Arrivals::new(ArrivalProcess::Uniform, 0.0, 1).is_err());
        assert!(Arrivals::new(ArrivalProcess::Uniform, f64::NAN, 1).is_err());
        assert!(Arrivals::new(ArrivalProcess::Poisson, -5.0, 1).is_err());
    }
}
