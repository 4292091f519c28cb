//! Overload control: which Gx and Sd requests are answered
//! DIAMETER_TOO_BUSY (3004) at once instead of being worked on.
//!
//! A burst is not an overload. Thousands of requests arriving together
//! (a gateway reconnecting, every session of a run closing at once) wait
//! their turn and are answered 2001 as long as the node drains them within
//! the latency bound. Shedding starts only on sustained overload, measured
//! as queueing delay the way CoDel measures it: the delay is the time from
//! the transport reading a request to its handler starting, and the node
//! is overloaded once the *minimum* delay of the requests started during a
//! whole interval stayed above the target (a queue that never empties). It
//! then sheds the requests that waited too long: new sessions (CCR-I)
//! past the target, the CCR-U and CCR-T that report usage and release
//! resources only past twice the target. A count of requests in flight
//! (`[diameter].max_pending_requests`) remains as a hard memory cap, a
//! last resort with the same preference for CCR-U/T.
//!
//! [`QueueDelay`] is the sans-IO core (timestamps are passed in, in
//! microseconds); [`Admission`] reads the clock and counts.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Share of the hard cap (in percent) above which new sessions are refused.
const INITIAL_SHARE_PERCENT: usize = 80;

/// Which class a request is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Creates state (CCR-I): shed first.
    New,
    /// Updates or releases state (CCR-U, CCR-T).
    Existing,
}

/// Why a request was shed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shed {
    /// Sustained overload: it waited past the target while the queue has
    /// not emptied for a whole interval.
    QueueDelay,
    /// The hard cap on requests in flight.
    InFlightCap,
}

/// CoDel's measurement, lock-free: the minimum queueing delay over
/// intervals that start with the first request after the previous one
/// ended. An interval whose minimum stayed above the target makes the next
/// one overloaded; an interval with a request under the target, or a whole
/// interval with no request at all, ends it.
pub struct QueueDelay {
    target_us: u64,
    interval_us: u64,
    /// When the current interval ends (µs on the caller's clock); 0 before
    /// the first request.
    interval_end: AtomicU64,
    /// The smallest delay seen in the current interval (`u64::MAX`: none).
    min_us: AtomicU64,
    overloaded: AtomicBool,
}

impl QueueDelay {
    pub fn new(target: Duration, interval: Duration) -> QueueDelay {
        QueueDelay {
            target_us: (target.as_micros() as u64).max(1),
            interval_us: (interval.as_micros() as u64).max(1),
            interval_end: AtomicU64::new(0),
            min_us: AtomicU64::new(u64::MAX),
            overloaded: AtomicBool::new(false),
        }
    }

    /// Records a request starting at `now_us` after waiting `delay_us`;
    /// whether the node is in sustained overload now.
    pub fn observe(&self, now_us: u64, delay_us: u64) -> bool {
        let end = self.interval_end.load(Relaxed);
        if now_us >= end
            && self
                .interval_end
                .compare_exchange(end, now_us + self.interval_us, Relaxed, Relaxed)
                .is_ok()
        {
            // This request opens the next interval; the one that ended
            // decides whether the node is overloaded during it.
            let min = self.min_us.swap(delay_us, Relaxed);
            let idle = end == 0 || now_us >= end + self.interval_us;
            let overloaded = !idle && min != u64::MAX && min > self.target_us;
            self.overloaded.store(overloaded, Relaxed);
            return overloaded;
        }
        self.min_us.fetch_min(delay_us, Relaxed);
        self.overloaded.load(Relaxed)
    }

    /// Whether a request of `class` that waited `delay_us` is shed, given
    /// the state `observe` returned.
    pub fn sheds(&self, overloaded: bool, class: Class, delay_us: u64) -> bool {
        overloaded
            && match class {
                Class::New => delay_us > self.target_us,
                Class::Existing => delay_us > self.target_us.saturating_mul(2),
            }
    }

    /// Sustained overload, as of the last request.
    pub fn overloaded(&self) -> bool {
        self.overloaded.load(Relaxed)
    }

    /// The smallest queueing delay of the current interval so far, µs.
    pub fn interval_min_us(&self) -> Option<u64> {
        Some(self.min_us.load(Relaxed)).filter(|m| *m != u64::MAX)
    }
}

/// The node-wide admission control: the queueing-delay test, the hard cap,
/// and what they shed.
pub struct Admission {
    limit: usize,
    delay: QueueDelay,
    epoch: Instant,
    in_flight: AtomicUsize,
    shed_new: [AtomicU64; 2],
    shed_existing: [AtomicU64; 2],
}

/// Held while a request is worked on.
pub struct Permit<'a>(&'a Admission);

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

/// Shed counts by class and cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShedCounts {
    pub new_delay: u64,
    pub new_cap: u64,
    pub existing_delay: u64,
    pub existing_cap: u64,
}

impl Admission {
    /// `limit`: the hard cap on requests in flight; `target` and
    /// `interval`: the queueing-delay test.
    pub fn new(limit: usize, target: Duration, interval: Duration) -> Admission {
        Admission {
            limit: limit.max(1),
            delay: QueueDelay::new(target, interval),
            epoch: Instant::now(),
            in_flight: AtomicUsize::new(0),
            shed_new: Default::default(),
            shed_existing: Default::default(),
        }
    }

    /// A permit for a request read at `received` (`None`: not through the
    /// transport, no delay), or why it must be answered 3004.
    pub fn admit(&self, class: Class, received: Option<Instant>) -> Result<Permit<'_>, Shed> {
        let now = Instant::now();
        let delay = received.map_or(Duration::ZERO, |r| now.saturating_duration_since(r));
        let now_us = now.saturating_duration_since(self.epoch).as_micros() as u64;
        self.admit_at(class, now_us, delay.as_micros() as u64)
    }

    /// [`admit`](Self::admit) at `now_us` (µs since this admission was
    /// made) for a request that waited `delay_us`.
    pub fn admit_at(&self, class: Class, now_us: u64, delay_us: u64) -> Result<Permit<'_>, Shed> {
        let overloaded = self.delay.observe(now_us, delay_us);
        if self.delay.sheds(overloaded, class, delay_us) {
            self.count(class, Shed::QueueDelay);
            return Err(Shed::QueueDelay);
        }
        let cap = match class {
            Class::New => (self.limit * INITIAL_SHARE_PERCENT / 100).max(1),
            Class::Existing => self.limit,
        };
        let prev = self.in_flight.fetch_add(1, Relaxed);
        if prev >= cap {
            self.in_flight.fetch_sub(1, Relaxed);
            self.count(class, Shed::InFlightCap);
            return Err(Shed::InFlightCap);
        }
        Ok(Permit(self))
    }

    fn count(&self, class: Class, cause: Shed) {
        let by_cause = match class {
            Class::New => &self.shed_new,
            Class::Existing => &self.shed_existing,
        };
        by_cause[cause as usize].fetch_add(1, Relaxed);
    }

    /// Sustained overload (queueing delay, as of the last request) or at
    /// least half the hard cap in flight: while it lasts, DOIC peers are
    /// asked to send less. (Half the cap, so that a report made at the cap
    /// is not withdrawn by the next request admitted below it.)
    pub fn overloaded(&self) -> bool {
        self.delay.overloaded() || self.in_flight() >= self.limit / 2
    }

    /// The smallest queueing delay of the current interval so far.
    pub fn interval_min_delay(&self) -> Option<Duration> {
        self.delay.interval_min_us().map(Duration::from_micros)
    }

    /// The hard cap.
    pub fn limit(&self) -> usize {
        self.limit
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Relaxed)
    }

    /// Requests shed so far.
    pub fn shed(&self) -> ShedCounts {
        let d = Shed::QueueDelay as usize;
        let c = Shed::InFlightCap as usize;
        ShedCounts {
            new_delay: self.shed_new[d].load(Relaxed),
            new_cap: self.shed_new[c].load(Relaxed),
            existing_delay: self.shed_existing[d].load(Relaxed),
            existing_cap: self.shed_existing[c].load(Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000;

    fn admission(limit: usize) -> Admission {
        // Target 20 ms, interval 1 s.
        Admission::new(
            limit,
            Duration::from_millis(20),
            Duration::from_millis(1000),
        )
    }

    #[test]
    fn new_sessions_are_shed_first_at_the_cap() {
        let a = admission(10);
        let held: Vec<_> = (0..8)
            .map(|_| a.admit_at(Class::New, 0, 0).expect("below 80%"))
            .collect();
        assert_eq!(
            a.admit_at(Class::New, 0, 0).err(),
            Some(Shed::InFlightCap),
            "CCR-I refused at 80%"
        );
        let more: Vec<_> = (0..2)
            .map(|_| a.admit_at(Class::Existing, 0, 0).expect("room for U/T"))
            .collect();
        assert_eq!(
            a.admit_at(Class::Existing, 0, 0).err(),
            Some(Shed::InFlightCap),
            "everything refused at 100%"
        );
        assert_eq!(
            a.shed(),
            ShedCounts {
                new_cap: 1,
                existing_cap: 1,
                ..ShedCounts::default()
            }
        );
        assert_eq!(a.in_flight(), 10);
        assert!(a.overloaded(), "reported at the cap");
        drop(held);
        drop(more);
        assert_eq!(a.in_flight(), 0);
        assert!(!a.overloaded(), "withdrawn under half the cap");
        assert!(a.admit_at(Class::New, 0, 0).is_ok());
    }

    #[test]
    fn a_burst_drained_within_the_interval_is_all_admitted() {
        // 5,000 requests read at t = 10 s, started one every 150 µs: the
        // last waited 750 ms, far above the target, but the queue empties
        // within the interval.
        let a = admission(100_000);
        let arrival = 10_000 * MS;
        let mut held = Vec::new();
        for i in 0..5_000u64 {
            let now = arrival + i * 150;
            held.push(
                a.admit_at(Class::Existing, now, now - arrival)
                    .expect("a burst is queued, not shed"),
            );
        }
        assert_eq!(a.in_flight(), 5_000);
        // Afterwards requests wait no more: still not overloaded.
        for i in 0..100u64 {
            let now = arrival + 800 * MS + i * 20 * MS;
            assert!(a.admit_at(Class::New, now, 100).is_ok());
        }
        assert!(!a.overloaded());
        assert_eq!(a.shed(), ShedCounts::default());
    }

    #[test]
    fn sustained_delay_sheds_new_sessions_past_the_target_and_the_rest_past_twice_it() {
        let a = admission(100_000);
        // For a whole interval every request waited 50 ms (the queue never
        // empties): all admitted.
        let mut now = 0;
        while now < 1_000 * MS {
            assert!(a.admit_at(Class::New, now, 50 * MS).is_ok(), "at {now} µs");
            now += MS;
        }
        assert!(!a.overloaded(), "the first interval is still open");
        // The next interval opens: overloaded.
        assert_eq!(
            a.admit_at(Class::New, now, 50 * MS).err(),
            Some(Shed::QueueDelay)
        );
        assert!(a.overloaded());
        // CCR-U/T pass until they waited twice the target...
        assert!(a.admit_at(Class::Existing, now + 1, 30 * MS).is_ok());
        assert_eq!(
            a.admit_at(Class::Existing, now + 2, 41 * MS).err(),
            Some(Shed::QueueDelay)
        );
        // ...and a request that did not wait passes whatever its class.
        assert!(a.admit_at(Class::New, now + 3, 5 * MS).is_ok());
        let shed = a.shed();
        assert_eq!((shed.new_delay, shed.existing_delay), (1, 1));
    }

    #[test]
    fn one_interval_with_a_short_wait_ends_the_overload() {
        let a = admission(100_000);
        let mut now = 0;
        while now <= 2_100 * MS {
            let _ = a.admit_at(Class::Existing, now, 100 * MS);
            now += 10 * MS;
        }
        assert!(a.overloaded());
        // One request in this interval under the target: the next one is not
        // overloaded.
        let _ = a.admit_at(Class::Existing, now, 2 * MS);
        now = 3_200 * MS;
        assert!(a.admit_at(Class::Existing, now, 100 * MS).is_ok());
        assert!(!a.overloaded());
    }

    #[test]
    fn an_idle_interval_ends_the_overload() {
        let a = admission(100_000);
        let mut now = 0;
        while now <= 2_100 * MS {
            let _ = a.admit_at(Class::Existing, now, 100 * MS);
            now += 10 * MS;
        }
        assert!(a.overloaded());
        // Nothing for longer than an interval: the queue is gone.
        now += 5_000 * MS;
        assert!(a.admit_at(Class::New, now, 30 * MS).is_ok());
        assert!(!a.overloaded());
    }

    #[test]
    fn the_first_request_is_never_overloaded() {
        let a = admission(100_000);
        assert!(a.admit_at(Class::New, 5, 10_000 * MS).is_ok());
        assert!(!a.overloaded());
        assert_eq!(a.interval_min_delay(), Some(Duration::from_secs(10)));
    }
}
