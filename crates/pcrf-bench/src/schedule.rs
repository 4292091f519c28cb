//! The open-loop clock: when each new session is intended to start, given
//! the rate, whatever the server does.
//!
//! Intended times come from the rate alone (the i-th of a uniform process
//! is at i / rate, computed from i so no error accumulates), so a slow
//! answer never delays the next request; latency is measured from these
//! intended times, which keeps coordinated omission out of the figures.

use crate::scenario::{ArrivalProcess, Scenario};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::future::Future;
use std::time::{Duration, Instant};

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

/// Offers calls for `duration` from `start`, as `arrivals` says, each of
/// a flow of `scenario` picked with `rng`: `call(id, hold, intended)` is
/// spawned a little ahead of its intended time (it sleeps until then
/// itself); returns once every call has ended. The VoLTE and VoNR call
/// models share it, so both offer the same calls at the same times.
pub async fn offer_calls<F, Fut>(
    scenario: &Scenario,
    mut arrivals: Arrivals,
    mut rng: StdRng,
    start: Instant,
    duration: Duration,
    mut call: F,
) where
    F: FnMut(u64, Duration, Instant) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    let mut id = 0u64;
    loop {
        let at = arrivals.next_time();
        if at >= duration {
            break;
        }
        let flow = &scenario.flows[scenario.pick_flow(&mut rng)];
        let hold = flow.hold.sample(&mut rng);
        let intended = start + at;
        tokio::time::sleep_until((intended - Duration::from_millis(5).min(at)).into()).await;
        tasks.spawn(call(id, hold, intended));
        id += 1;
        // Reap finished calls so the set stays small in long runs.
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
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
