//! The closed-loop run (`--max`): C sessions at a time, each sending its
//! next request as soon as the previous one is answered, with no hold time.
//! It finds how much the server answers when pushed as hard as C
//! outstanding requests allow; latency is from the actual send (there is no
//! intended time), so it is not comparable with open-loop latency.

use crate::cpu::CpuWindow;
use crate::pcef::Pcefs;
use crate::progress::Progress;
use crate::report::{OutsideWindow, SessionCounts};
use crate::run_result::{run_tag, RunResult};
use crate::scenario::Scenario;
use crate::session::{usage, RequestKind, RequestSpec, SessionIdentity};
use crate::stats::{Command, Outcome, RunStats};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The load of a closed-loop run.
#[derive(Clone, Copy, Debug)]
pub struct ClosedLoop {
    /// Sessions driven at once (= requests in flight).
    pub concurrency: usize,
    pub warmup: Duration,
    pub duration: Duration,
    pub seed: u64,
}

struct Worker {
    stats: RunStats,
    outside: OutsideWindow,
    counts: SessionCounts,
    last_answer: Option<Instant>,
}

#[allow(clippy::too_many_arguments)]
async fn worker(
    w: usize,
    cfg: ClosedLoop,
    pcefs: Arc<Pcefs>,
    scenario: Arc<Scenario>,
    progress: Arc<Progress>,
    tag: u32,
    window_start: Instant,
    window_end: Instant,
) -> Worker {
    let mut rng = StdRng::seed_from_u64(cfg.seed.wrapping_add(w as u64));
    let mut out = Worker {
        stats: RunStats::new(&scenario.apdex),
        outside: OutsideWindow::default(),
        counts: SessionCounts::default(),
        last_answer: None,
    };
    let c = cfg.concurrency as u64;
    let pop = &scenario.population;
    let peer_index = w % pcefs.len();
    let peer = pcefs.handle(peer_index).clone();
    let gateway = pcefs.gateway(peer_index).clone();
    let mut j = 0u64;
    'sessions: while Instant::now() < window_end {
        // Worker w owns subscribers w, w + C, w + 2C...: never two sessions at once.
        let sub = (w as u64 + c * j) % pop.count();
        let id = j * c + w as u64;
        j += 1;
        let flow_i = scenario.pick_flow(&mut rng);
        let flow = &scenario.flows[flow_i];
        let last = flow.updates.sample(&mut rng) as u32 + 1;
        let identity = Arc::new(SessionIdentity::new(&gateway, tag, id, pop, sub));
        let mut destination_host = None;
        out.counts.started += 1;
        let mut index = 0;
        while index <= last {
            // Past the window (the drain), or released by the PCRF: close the session now.
            if index > 0
                && index < last
                && (Instant::now() >= window_end
                    || pcefs.counters.take_release(&identity.session_id))
            {
                index = last;
            }
            let command = match index {
                0 => Command::CcrI,
                i if i >= last => Command::CcrT,
                _ => Command::CcrU,
            };
            let kind = match command {
                Command::CcrI => RequestKind::Initial,
                Command::CcrU => RequestKind::Update(usage(flow, &mut rng)),
                Command::CcrT => RequestKind::Terminate(usage(flow, &mut rng)),
            };
            let spec = RequestSpec {
                gateway: gateway.clone(),
                identity: identity.clone(),
                kind,
                number: index,
                destination_host: destination_host.clone(),
            };
            progress.sent.fetch_add(1, Relaxed);
            let ex = pcefs.delivery.exchange(&peer, &spec).await;
            let in_window = ex.sent_at >= window_start && ex.sent_at < window_end;
            let success = matches!(ex.outcome, Outcome::Answered(r) if r.is_success());
            match ex.outcome {
                Outcome::Timeout => progress.timeouts.fetch_add(1, Relaxed),
                _ if success => progress.succeeded.fetch_add(1, Relaxed),
                _ => progress.failed.fetch_add(1, Relaxed),
            };
            if in_window {
                out.stats.sent(command);
                out.stats.finished(
                    command,
                    ex.outcome,
                    ex.done_at.saturating_duration_since(ex.sent_at),
                );
                if success {
                    out.last_answer = Some(ex.done_at);
                }
            } else {
                out.outside.sent += 1;
                out.outside.finished(ex.outcome);
            }
            if !success {
                out.counts.failed += 1;
                if matches!(ex.outcome, Outcome::SendFailed) {
                    // The connection is down: do not spin on it.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                continue 'sessions;
            }
            // Later requests name the node that answered: the CCA-I's, or
            // after a failover the node that took the session over.
            if ex.origin_host.is_some() {
                destination_host = ex.origin_host;
            }
            index += 1;
        }
        out.counts.completed += 1;
    }
    out
}

/// Runs the load on the current runtime.
pub async fn run(
    pcefs: Arc<Pcefs>,
    scenario: Arc<Scenario>,
    cfg: ClosedLoop,
    cpu: CpuWindow,
    progress: Arc<Progress>,
) -> Result<RunResult, String> {
    if cfg.concurrency == 0 || cfg.concurrency as u64 > scenario.population.count() {
        return Err(format!(
            "--concurrency must be 1..={} (the population), not {}",
            scenario.population.count(),
            cfg.concurrency
        ));
    }
    let (tag, started_unix) = run_tag();
    let start = Instant::now();
    let window_start = start + cfg.warmup;
    let window_end = window_start + cfg.duration;
    let sampler = std::thread::spawn(move || {
        let mut cpu = cpu;
        loop {
            let now = Instant::now();
            cpu.tick(now, window_start, window_end);
            match cpu.next_due(window_start, window_end) {
                Some(t) => std::thread::sleep(t.saturating_duration_since(now)),
                None => return cpu,
            }
        }
    });
    let tasks: Vec<_> = (0..cfg.concurrency)
        .map(|w| {
            tokio::spawn(worker(
                w,
                cfg,
                pcefs.clone(),
                scenario.clone(),
                progress.clone(),
                tag,
                window_start,
                window_end,
            ))
        })
        .collect();
    let mut stats = RunStats::new(&scenario.apdex);
    let mut outside = OutsideWindow::default();
    let mut counts = SessionCounts::default();
    let mut last_answer: Option<Instant> = None;
    for t in tasks {
        let w = t.await.map_err(|e| format!("worker failed: {e}"))?;
        stats.merge(&w.stats);
        outside.add(&w.outside);
        counts.started += w.counts.started;
        counts.completed += w.counts.completed;
        counts.failed += w.counts.failed;
        last_answer = match (last_answer, w.last_answer) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    let cpu = tokio::task::spawn_blocking(move || sampler.join())
        .await
        .map_err(|e| format!("CPU sampler failed: {e}"))?
        .map_err(|_| "CPU sampler panicked".to_string())?;
    let window_s = cfg.duration.as_secs_f64();
    let total = stats.total();
    let measured_s = last_answer
        .map_or(window_s, |l| {
            l.saturating_duration_since(window_start).as_secs_f64()
        })
        .max(window_s);
    Ok(RunResult {
        achieved_tps: total.succeeded as f64 / measured_s,
        cpu: cpu.reports(total.answered),
        store: cpu.store_report(total.answered),
        stats,
        outside,
        sessions: counts,
        send_lag: None,
        window_s,
        started_unix,
    })
}
