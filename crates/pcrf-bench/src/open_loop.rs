//! The open-loop run: requests leave at their intended times (from the
//! planner, i.e. from the rate alone), whatever the server does, and each
//! latency is measured from the intended time, so a stall of the server
//! shows in the figures instead of silently slowing the generator down
//! (no coordinated omission).
//!
//! One scheduler thread owns the plan, the sessions and the counters; it
//! sleeps with a 1 µs timer slack until the next intended time (at most
//! 1 ms), hands everything due to the tokio runtime in one batch, and picks
//! up finished requests from a shared queue when it wakes. Nothing wakes it
//! per answer and nothing crosses threads per request, which keeps the
//! generator's own CPU per request low enough to measure a fast server. A
//! session's next request waits for the previous answer, as a real PCEF
//! does; the wait counts in its latency. At the end of the window every open
//! session is closed with a CCR-T (the drain), outside the figures. Those
//! CCR-Ts leave together, thousands at once at high rates, so a server may
//! take longer than the scenario's timeout to answer the last of them: a
//! drain request waits for its answer until the drain's deadline, so that a
//! session whose CCR-T is answered 2001 counts as completed, not failed.

use crate::cpu::CpuWindow;
use crate::exchange::Exchanged;
use crate::latency::Latency;
use crate::pcef::Pcefs;
use crate::plan::{Event, Planned, Planner};
use crate::population::Occupancy;
use crate::progress::Progress;
use crate::report::{OutsideWindow, SessionCounts};
use crate::run_result::{run_tag, RunResult};
use crate::scenario::Scenario;
use crate::series::{Series, SeriesSpec};
use crate::session::{usage, RequestKind, RequestSpec, SessionIdentity};
use crate::stats::{Command, Outcome, RunStats};
use diameter::transport::PeerHandle;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The load of an open-loop run.
#[derive(Clone, Copy, Debug)]
pub struct OpenLoop {
    /// Requests per second offered (all commands together).
    pub rate: f64,
    /// Sent but not measured: until the request mix is steady.
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
}

/// A finished request, back from the runtime.
struct Done {
    session: u64,
    command: Command,
    intended: Instant,
    in_window: bool,
    ex: Exchanged,
}

/// Finished requests, waiting for the scheduler's next wake-up.
type DoneQueue = Arc<Mutex<Vec<Done>>>;

/// A request ready to go, waiting for the batch to be handed over.
struct Ready {
    peer: PeerHandle,
    spec: RequestSpec,
    session: u64,
    command: Command,
    intended: Instant,
    in_window: bool,
    /// The drain's requests wait for their answer this long (until the
    /// drain's deadline) instead of the scenario's timeout.
    timeout: Option<Duration>,
}

/// The longest the scheduler sleeps: bounds how late a request queued
/// behind its session's previous answer can leave.
const MAX_SLEEP: Duration = Duration::from_millis(1);

/// After the drain's deadline, how long outcomes (timeouts included) are
/// still picked up.
const DRAIN_GRACE: Duration = Duration::from_millis(250);

/// One session in progress.
struct Live {
    flow: usize,
    /// Index of its CCR-T.
    last_index: u32,
    subscriber: u64,
    peer: usize,
    identity: Arc<SessionIdentity>,
    in_flight: bool,
    /// Requests due while the previous one was unanswered, with their intended times.
    queued: VecDeque<(u32, Instant)>,
    destination_host: Option<Arc<str>>,
    failed: bool,
    /// The PCRF asked (RAR with Session-Release-Cause) to end the session:
    /// its CCR-T goes now and its planned requests no longer come.
    released: bool,
    next_number: u32,
}

impl Live {
    fn command(&self, index: u32) -> Command {
        if index == 0 {
            Command::CcrI
        } else if index >= self.last_index {
            Command::CcrT
        } else {
            Command::CcrU
        }
    }
}

struct Scheduler<'a> {
    rt: &'a tokio::runtime::Handle,
    pcefs: &'a Arc<Pcefs>,
    scenario: &'a Scenario,
    progress: &'a Progress,
    done: DoneQueue,
    ready: Vec<Ready>,
    rng: StdRng,
    run_tag: u32,
    window_start: Instant,
    window_end: Instant,
    /// When the drain gives up on requests still unanswered.
    drain_deadline: Instant,
    sessions: HashMap<u64, Live>,
    occupancy: Occupancy,
    stats: RunStats,
    outside: OutsideWindow,
    counts: SessionCounts,
    send_lag: Latency,
    in_flight: u64,
    draining: bool,
    last_answer: Option<Instant>,
    series: Option<Series>,
}

impl Scheduler<'_> {
    fn in_window(&self, t: Instant) -> bool {
        t >= self.window_start && t < self.window_end
    }

    fn not_sent(&mut self, command: Command, intended: Instant) {
        if self.in_window(intended) {
            self.stats.skipped(command);
        } else {
            self.outside.failed += 1;
        }
        self.progress.failed.fetch_add(1, Relaxed);
    }

    fn event(&mut self, ev: Event, start: Instant) {
        let intended = start + ev.at;
        match ev.what {
            Planned::Start(plan) => {
                let last_index = plan.requests() - 1;
                let Some(subscriber) = self.occupancy.acquire() else {
                    self.counts.population_exhausted += 1;
                    self.not_sent(Command::CcrI, intended);
                    // A tombstone, so its later requests are counted as not sent.
                    self.sessions.insert(
                        plan.id,
                        Live {
                            flow: plan.flow,
                            last_index,
                            subscriber: u64::MAX,
                            peer: 0,
                            identity: Arc::new(SessionIdentity::new(
                                self.pcefs.gateway(0),
                                self.run_tag,
                                plan.id,
                                &self.scenario.population,
                                0,
                            )),
                            in_flight: false,
                            queued: VecDeque::new(),
                            destination_host: None,
                            failed: true,
                            released: false,
                            next_number: 0,
                        },
                    );
                    return;
                };
                self.counts.started += 1;
                let peer = (plan.id % self.pcefs.len() as u64) as usize;
                let identity = Arc::new(SessionIdentity::new(
                    self.pcefs.gateway(peer),
                    self.run_tag,
                    plan.id,
                    &self.scenario.population,
                    subscriber,
                ));
                self.sessions.insert(
                    plan.id,
                    Live {
                        flow: plan.flow,
                        last_index,
                        subscriber,
                        peer,
                        identity,
                        in_flight: false,
                        queued: VecDeque::new(),
                        destination_host: None,
                        failed: false,
                        released: false,
                        next_number: 0,
                    },
                );
                self.send(plan.id, 0, intended);
            }
            Planned::Next { session, index } => {
                let Some(live) = self.sessions.get_mut(&session) else {
                    return;
                };
                if live.released {
                    return;
                }
                if live.failed {
                    let command = live.command(index);
                    if index >= live.last_index {
                        self.sessions.remove(&session);
                    }
                    self.not_sent(command, intended);
                } else if live.in_flight {
                    live.queued.push_back((index, intended));
                } else {
                    self.send(session, index, intended);
                }
            }
        }
    }

    fn send(&mut self, session: u64, index: u32, intended: Instant) {
        let in_window = self.in_window(intended);
        let Some(live) = self.sessions.get_mut(&session) else {
            return;
        };
        let command = live.command(index);
        let flow = &self.scenario.flows[live.flow];
        let kind = match command {
            Command::CcrI => RequestKind::Initial,
            Command::CcrU => RequestKind::Update(usage(flow, &mut self.rng)),
            Command::CcrT => RequestKind::Terminate(usage(flow, &mut self.rng)),
        };
        let spec = RequestSpec {
            gateway: self.pcefs.gateway(live.peer).clone(),
            identity: live.identity.clone(),
            kind,
            number: live.next_number,
            destination_host: live.destination_host.clone(),
        };
        live.next_number += 1;
        live.in_flight = true;
        let peer = self.pcefs.handle(live.peer).clone();
        self.in_flight += 1;
        if in_window {
            self.stats.sent(command);
            self.send_lag
                .record(Instant::now().saturating_duration_since(intended));
        } else {
            self.outside.sent += 1;
        }
        self.progress.sent.fetch_add(1, Relaxed);
        // Sent by the drain: wait until its deadline, however long the
        // server takes to work through the drain's burst.
        let timeout = (self.draining && !in_window).then(|| {
            self.drain_deadline
                .saturating_duration_since(Instant::now())
                .max(self.scenario.timeout)
        });
        self.ready.push(Ready {
            peer,
            spec,
            session,
            command,
            intended,
            in_window,
            timeout,
        });
    }

    /// Hands every ready request to the runtime in one go: one cross-thread
    /// wake-up per batch, then a task per request spawned inside the runtime.
    fn flush(&mut self) {
        if self.ready.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.ready);
        let done = self.done.clone();
        let delivery = self.pcefs.delivery.clone();
        self.rt.spawn(async move {
            for r in batch {
                let done = done.clone();
                let delivery = delivery.clone();
                tokio::spawn(async move {
                    let ex = delivery.exchange_within(&r.peer, &r.spec, r.timeout).await;
                    done.lock().unwrap_or_else(|e| e.into_inner()).push(Done {
                        session: r.session,
                        command: r.command,
                        intended: r.intended,
                        in_window: r.in_window,
                        ex,
                    });
                });
            }
        });
    }

    fn done(&mut self, d: Done) {
        self.in_flight = self.in_flight.saturating_sub(1);
        let success = matches!(d.ex.outcome, Outcome::Answered(r) if r.is_success());
        if let Some(series) = self.series.as_mut() {
            series.record(
                d.ex.done_at.saturating_duration_since(d.intended),
                success,
                d.ex.outcome == Outcome::Timeout,
            );
        }
        match d.ex.outcome {
            Outcome::Timeout => self.progress.timeouts.fetch_add(1, Relaxed),
            _ if success => self.progress.succeeded.fetch_add(1, Relaxed),
            _ => self.progress.failed.fetch_add(1, Relaxed),
        };
        if d.in_window {
            let latency = d.ex.done_at.saturating_duration_since(d.intended);
            self.stats.finished(d.command, d.ex.outcome, latency);
            if success {
                self.last_answer = Some(
                    self.last_answer
                        .map_or(d.ex.done_at, |l| l.max(d.ex.done_at)),
                );
            }
        } else {
            self.outside.finished(d.ex.outcome);
        }
        let Some(live) = self.sessions.get_mut(&d.session) else {
            return;
        };
        live.in_flight = false;
        if d.command == Command::CcrT || !success {
            if success {
                self.counts.completed += 1;
            } else {
                self.counts.failed += 1;
            }
            self.occupancy.release(live.subscriber);
            if d.command == Command::CcrT || self.draining {
                let queued: Vec<_> = live.queued.drain(..).collect();
                let cmds: Vec<_> = queued.iter().map(|(i, t)| (live.command(*i), *t)).collect();
                self.sessions.remove(&d.session);
                for (c, t) in cmds {
                    self.not_sent(c, t);
                }
                return;
            }
            live.failed = true;
            let queued: Vec<_> = live.queued.drain(..).collect();
            let cmds: Vec<_> = queued.iter().map(|(i, t)| (live.command(*i), *t)).collect();
            let ends = queued.iter().any(|(i, _)| *i >= live.last_index);
            if ends {
                self.sessions.remove(&d.session);
            }
            for (c, t) in cmds {
                self.not_sent(c, t);
            }
            return;
        }
        // Later requests name the node that answered: the CCA-I's, or
        // after a failover the node that took the session over.
        if d.ex.origin_host.is_some() {
            live.destination_host = d.ex.origin_host.clone();
        }
        if let Some((index, intended)) = live.queued.pop_front() {
            self.send(d.session, index, intended);
        } else if self.draining || live.released {
            let last = live.last_index;
            self.send(d.session, last, Instant::now());
        }
    }

    /// The PCRF released a session (RAR with Session-Release-Cause): send
    /// its CCR-T now, or as soon as its request in flight is answered.
    fn release(&mut self, session_id: &str) {
        let mut parts = session_id.rsplit(';');
        let (Some(id), Some(tag)) = (parts.next(), parts.next()) else {
            return;
        };
        let (Ok(id), Ok(tag)) = (id.parse::<u64>(), tag.parse::<u32>()) else {
            return;
        };
        if tag != self.run_tag {
            return;
        }
        let Some(live) = self.sessions.get_mut(&id) else {
            return;
        };
        if live.failed || live.released || live.identity.session_id != session_id {
            return;
        }
        live.released = true;
        live.queued.clear();
        if !live.in_flight {
            let last = live.last_index;
            self.send(id, last, Instant::now());
        }
    }

    /// The window is over: every open session sends its CCR-T now (or
    /// after its request in flight and those already due).
    fn begin_drain(&mut self) {
        self.draining = true;
        let ids: Vec<u64> = self.sessions.keys().copied().collect();
        for id in ids {
            let Some(live) = self.sessions.get(&id) else {
                continue;
            };
            if live.failed {
                self.sessions.remove(&id);
            } else if !live.in_flight {
                let last = live.last_index;
                self.send(id, last, Instant::now());
            }
        }
    }
}

/// Runs the load on this thread (call it from a dedicated thread, not from
/// a runtime worker); requests run on `rt`.
pub fn run(
    rt: &tokio::runtime::Handle,
    pcefs: &Arc<Pcefs>,
    scenario: &Scenario,
    cfg: OpenLoop,
    mut cpu: CpuWindow,
    progress: &Progress,
    series: Option<SeriesSpec>,
) -> Result<RunResult, String> {
    // A precise sleeper: intended times are microseconds apart at high rates.
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1_000 as libc::c_ulong, 0, 0, 0);
    }
    if pcefs.is_empty() {
        return Err("no gateway connected".into());
    }
    let (tag, started_unix) = run_tag();
    let start = Instant::now() + Duration::from_millis(20);
    let window_start = start + cfg.warmup;
    let window_end = window_start + cfg.duration;
    // Every request still in flight gets its answer, its timeout, or (with
    // retransmission) all its tries.
    let per_request = pcefs
        .delivery
        .retransmit
        .worst_case(scenario.timeout)
        .max(scenario.timeout * 2);
    let drain_deadline = window_end + per_request + Duration::from_secs(1);
    let mut planner = Planner::new(scenario, cfg.rate, cfg.seed, cfg.warmup + cfg.duration)?;
    let series = series.map(|s| Series::create(s, start)).transpose()?;
    let done: DoneQueue = Arc::new(Mutex::new(Vec::new()));
    let mut finished = Vec::new();
    let mut s = Scheduler {
        rt,
        pcefs,
        scenario,
        progress,
        done: done.clone(),
        ready: Vec::new(),
        rng: StdRng::seed_from_u64(cfg.seed.wrapping_add(0x5eed)),
        run_tag: tag,
        window_start,
        window_end,
        drain_deadline,
        sessions: HashMap::new(),
        occupancy: Occupancy::new(scenario.population.count()),
        stats: RunStats::new(&scenario.apdex),
        outside: OutsideWindow::default(),
        counts: SessionCounts::default(),
        send_lag: Latency::new(),
        in_flight: 0,
        draining: false,
        last_answer: None,
        series,
    };
    loop {
        std::mem::swap(
            &mut finished,
            &mut *done.lock().unwrap_or_else(|e| e.into_inner()),
        );
        for d in finished.drain(..) {
            s.done(d);
        }
        let released: Vec<String> = {
            let mut r = pcefs.counters.lock_releases();
            if r.is_empty() {
                Vec::new()
            } else {
                r.drain().collect()
            }
        };
        for sid in released {
            s.release(&sid);
        }
        let now = Instant::now();
        cpu.tick(now, window_start, window_end);
        if let Some(series) = s.series.as_mut() {
            series.tick(now);
        }
        if !s.draining {
            if now >= window_end {
                s.begin_drain();
            } else if now >= start {
                let t = now - start;
                while let Some(ev) = planner.pop_due(t) {
                    s.event(ev, start);
                }
            }
        }
        s.flush();
        // The drain's requests time out at the deadline: a little longer
        // for their outcomes to come back and be counted.
        if s.draining && (s.in_flight == 0 || now >= drain_deadline + DRAIN_GRACE) {
            break;
        }
        let mut wake = now + MAX_SLEEP;
        if !s.draining {
            if let Some(t) = planner.next_time() {
                wake = wake.min(start + t);
            }
            wake = wake.min(window_end);
        }
        if let Some(c) = cpu.next_due(window_start, window_end) {
            wake = wake.min(c);
        }
        if let Some(series) = &s.series {
            wake = wake.min(series.next_due());
        }
        let wait = wake.saturating_duration_since(Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
    let window_s = cfg.duration.as_secs_f64();
    let measured_s = s
        .last_answer
        .map_or(window_s, |l| {
            l.saturating_duration_since(window_start).as_secs_f64()
        })
        .max(window_s);
    if let Some(series) = s.series.take() {
        let path = series.path().display().to_string();
        let rows = series.finish(Instant::now())?;
        eprintln!("series: {rows} rows in {path}");
    }
    let total = s.stats.total();
    Ok(RunResult {
        achieved_tps: total.succeeded as f64 / measured_s,
        cpu: cpu.reports(total.answered),
        store: cpu.store_report(total.answered),
        stats: s.stats,
        outside: s.outside,
        sessions: s.counts,
        send_lag: Some(s.send_lag),
        window_s,
        started_unix,
    })
}
