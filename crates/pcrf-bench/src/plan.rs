//! The timeline of an open-loop run: sessions start on the arrival clock,
//! and each session's CCR-Us and CCR-T fall at fixed points of its hold
//! time, so every request has an intended send time known in advance.
//!
//! The planner is pure (a seeded RNG, no clock): the runner asks it for the
//! events due by "now" and sends them; the tests check the rate and the mix.

use crate::scenario::Scenario;
use crate::schedule::Arrivals;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

/// Which request of a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    Initial,
    /// The n-th CCR-U, from 1.
    Update(u32),
    Terminate,
}

/// One session as planned at its start.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionPlan {
    pub id: u64,
    /// Index into the scenario's flows.
    pub flow: usize,
    pub updates: u32,
    pub hold: Duration,
    /// Intended time of the CCR-I.
    pub start: Duration,
}

impl SessionPlan {
    /// The request at position `index` (0 is the CCR-I, the last the CCR-T).
    pub fn step(&self, index: u32) -> Step {
        if index == 0 {
            Step::Initial
        } else if index <= self.updates {
            Step::Update(index)
        } else {
            Step::Terminate
        }
    }

    /// Requests in this session.
    pub fn requests(&self) -> u32 {
        self.updates + 2
    }

    /// Intended time of the request at `index`: evenly spread over the hold time.
    pub fn time_of(&self, index: u32) -> Duration {
        self.start + self.hold.mul_f64(index as f64 / (self.updates + 1) as f64)
    }
}

/// What is due.
#[derive(Clone, Debug, PartialEq)]
pub enum Planned {
    /// A new session: send its CCR-I.
    Start(SessionPlan),
    /// The request at `index` of a session started earlier.
    Next { session: u64, index: u32 },
}

/// An event and its intended time (offset from the run's start).
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub at: Duration,
    pub what: Planned,
}

/// Produces a run's events in time order.
pub struct Planner<'s> {
    scenario: &'s Scenario,
    arrivals: Arrivals,
    rng: StdRng,
    /// No session starts at or after this time; steps of started ones still come.
    starts_until: Duration,
    next_start: Option<Duration>,
    /// (intended ns, session, index) of requests after the CCR-I.
    pending: BinaryHeap<Reverse<(u64, u64, u32)>>,
    next_id: u64,
}

impl<'s> Planner<'s> {
    /// A planner offering `rate` requests per second on average (sessions
    /// start at rate / mean requests per session).
    pub fn new(
        scenario: &'s Scenario,
        rate: f64,
        seed: u64,
        starts_until: Duration,
    ) -> Result<Planner<'s>, String> {
        let session_rate = rate / scenario.mean_requests_per_session();
        let mut arrivals = Arrivals::new(scenario.arrivals, session_rate, seed)?;
        let first = arrivals.next_time();
        Ok(Planner {
            scenario,
            arrivals,
            rng: StdRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15),
            starts_until,
            next_start: (first < starts_until).then_some(first),
            pending: BinaryHeap::new(),
            next_id: 0,
        })
    }

    /// When the next event is due, if any remains.
    pub fn next_time(&self) -> Option<Duration> {
        let step = self
            .pending
            .peek()
            .map(|Reverse((ns, _, _))| Duration::from_nanos(*ns));
        match (self.next_start, step) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The earliest event due at or before `now`.
    pub fn pop_due(&mut self, now: Duration) -> Option<Event> {
        let at = self.next_time().filter(|t| *t <= now)?;
        let step_first = self
            .pending
            .peek()
            .is_some_and(|Reverse((ns, _, _))| Duration::from_nanos(*ns) == at);
        if step_first {
            let Reverse((_, session, index)) = self.pending.pop()?;
            return Some(Event {
                at,
                what: Planned::Next { session, index },
            });
        }
        let plan = self.new_session(at);
        let next = self.arrivals.next_time();
        self.next_start = (next < self.starts_until).then_some(next);
        for index in 1..plan.requests() {
            let t = plan.time_of(index).as_nanos() as u64;
            self.pending.push(Reverse((t, plan.id, index)));
        }
        Some(Event {
            at,
            what: Planned::Start(plan),
        })
    }

    fn new_session(&mut self, start: Duration) -> SessionPlan {
        let flow = self.scenario.pick_flow(&mut self.rng);
        let f = &self.scenario.flows[flow];
        let updates = f.updates.sample(&mut self.rng) as u32;
        let hold = f.hold.sample(&mut self.rng);
        let id = self.next_id;
        self.next_id += 1;
        SessionPlan {
            id,
            flow,
            updates,
            hold,
            start,
        }
    }

    /// Sessions started so far.
    pub fn sessions_started(&self) -> u64 {
        self.next_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(arrivals: &str) -> Scenario {
        let text = format!(
            r#"
            name = "t"
            arrivals = "{arrivals}"
            [population]
            imsi_first = "001010000000001"
            msisdn_first = "79000000001"
            count = 100000
            [[flow]]
            name = "data"
            weight = 3
            updates = [2, 4]
            hold = {{ dist = "uniform", min = "1s", max = "3s" }}
            [[flow]]
            name = "short"
            weight = 1
            updates = 1
            hold = {{ dist = "fixed", value = "500ms" }}
            "#
        );
        Scenario::parse(&text, "t.toml").expect("valid")
    }

    #[test]
    fn plan_steps_and_times() {
        let p = SessionPlan {
            id: 1,
            flow: 0,
            updates: 3,
            hold: Duration::from_secs(4),
            start: Duration::from_secs(10),
        };
        assert_eq!(p.requests(), 5);
        assert_eq!(p.step(0), Step::Initial);
        assert_eq!(p.step(3), Step::Update(3));
        assert_eq!(p.step(4), Step::Terminate);
        assert_eq!(p.time_of(0), Duration::from_secs(10));
        assert_eq!(p.time_of(1), Duration::from_secs(11));
        assert_eq!(p.time_of(4), Duration::from_secs(14));
    }

    /// Counts requests per kind in [from, to) over a whole run.
    fn run(s: &Scenario, rate: f64, until: Duration) -> (Vec<Duration>, [u64; 3]) {
        let mut p = Planner::new(s, rate, 9, until).expect("planner");
        let mut times = Vec::new();
        let mut kinds = [0u64; 3];
        let mut plans = std::collections::HashMap::new();
        let mut last = Duration::ZERO;
        while let Some(ev) = p.pop_due(Duration::MAX) {
            assert!(ev.at >= last, "events come in time order");
            last = ev.at;
            times.push(ev.at);
            let step = match ev.what {
                Planned::Start(plan) => {
                    let s0 = plan.step(0);
                    plans.insert(plan.id, plan);
                    s0
                }
                Planned::Next { session, index } => plans[&session].step(index),
            };
            kinds[match step {
                Step::Initial => 0,
                Step::Update(_) => 1,
                Step::Terminate => 2,
            }] += 1;
        }
        (times, kinds)
    }

    #[test]
    fn steady_state_rate_and_mix_match_the_scenario() {
        for arrivals in ["uniform", "poisson"] {
            let s = scenario(arrivals);
            // Mean requests per session: 0.75 x 5 + 0.25 x 3 = 4.5.
            assert_eq!(s.mean_requests_per_session(), 4.5);
            let (times, kinds) = run(&s, 3000.0, Duration::from_secs(60));
            // After the longest hold (3 s) the offered rate is the target.
            let window = times
                .iter()
                .filter(|t| **t >= Duration::from_secs(10) && **t < Duration::from_secs(50))
                .count() as f64
                / 40.0;
            assert!(
                (window - 3000.0).abs() < 3000.0 * 0.03,
                "{arrivals}: {window}"
            );
            // Every session ends: as many CCR-T as CCR-I, and 2.5 CCR-U per session on average (0.75 x 3 + 0.25 x 1).
            assert_eq!(kinds[0], kinds[2]);
            let u_per_session = kinds[1] as f64 / kinds[0] as f64;
            assert!((u_per_session - 2.5).abs() < 0.1, "{u_per_session}");
        }
    }

    #[test]
    fn nothing_starts_after_the_end_but_sessions_finish() {
        let s = scenario("uniform");
        let mut p = Planner::new(&s, 450.0, 1, Duration::from_secs(2)).expect("planner");
        let mut starts = 0;
        let mut last_start = Duration::ZERO;
        while let Some(ev) = p.pop_due(Duration::MAX) {
            if let Planned::Start(plan) = ev.what {
                starts += 1;
                last_start = plan.start;
            }
        }
        // 100 sessions per second for 2 s.
        assert_eq!(starts, 200);
        assert!(last_start < Duration::from_secs(2));
        assert_eq!(p.sessions_started(), 200);
        assert!(p.next_time().is_none());
    }

    #[test]
    fn pop_due_respects_now() {
        let s = scenario("uniform");
        let mut p = Planner::new(&s, 450.0, 1, Duration::from_secs(10)).expect("planner");
        // Sessions start every 10 ms: at 25 ms, three are due (0, 10, 20 ms).
        let mut n = 0;
        while p.pop_due(Duration::from_millis(25)).is_some() {
            n += 1;
        }
        assert_eq!(n, 3);
        assert_eq!(p.next_time(), Some(Duration::from_millis(30)));
        assert!(Planner::new(&s, 0.0, 1, Duration::from_secs(1)).is_err());
    }
}
