//! One measured run from set-up to report: the CPU samplers, the emulated
//! gateways, the open- or closed-loop load, and the report assembled from
//! what they counted. Shared by `pcrf-bench run` and each zero-loss trial.

use crate::closed_loop::{self, ClosedLoop};
use crate::cpu::{find_pids_by_name, CpuSampler, CpuWindow};
use crate::delivery::Delivery;
use crate::open_loop::{self, OpenLoop};
use crate::pcef::{PcefOptions, Pcefs};
use crate::progress::Progress;
use crate::report::{command_reports, Machine, RarCounts, Report};
use crate::scenario::Scenario;
use crate::series::SeriesSpec;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Which load to offer.
#[derive(Clone, Copy, Debug)]
pub enum Load {
    Open(OpenLoop),
    Closed(ClosedLoop),
}

/// Which processes' CPU to account.
#[derive(Clone, Debug, Default)]
pub struct CpuTargets {
    pub server_pids: Vec<u32>,
    pub server_name: Option<String>,
    pub db_pids: Vec<u32>,
    pub db_name: Option<String>,
    /// The server's `/metrics` URL: its store commits are counted over
    /// the same window (`pcrf serve` only).
    pub server_metrics: Option<String>,
}

impl CpuTargets {
    fn resolve(pids: &[u32], name: &Option<String>) -> Result<Vec<u32>, String> {
        if !pids.is_empty() {
            return Ok(pids.to_vec());
        }
        match name {
            Some(n) => find_pids_by_name(n).map_err(|e| e.to_string()),
            None => Ok(Vec::new()),
        }
    }
}

/// Everything a run needs besides the load.
#[derive(Clone, Debug)]
pub struct RunSetup {
    pub scenario: Arc<Scenario>,
    pub pcef: PcefOptions,
    pub cpu: CpuTargets,
    pub progress: bool,
}

/// What a chaos run adds to a measurement (nothing by default).
#[derive(Clone, Debug, Default)]
pub struct RunExtras {
    /// Retransmission and the answer log.
    pub delivery: Arc<Delivery>,
    /// Open loop: a CSV row of figures every interval.
    pub series: Option<SeriesSpec>,
}

/// Connects the gateways, offers the load, and reports.
pub async fn measure(setup: &RunSetup, load: Load) -> Result<Report, String> {
    measure_with(setup, load, &RunExtras::default()).await
}

/// [`measure`] with retransmission, an answer log or a series.
pub async fn measure_with(
    setup: &RunSetup,
    load: Load,
    extras: &RunExtras,
) -> Result<Report, String> {
    // Samplers first: a wrong pid fails before any traffic.
    let server = CpuTargets::resolve(&setup.cpu.server_pids, &setup.cpu.server_name)?;
    let db = CpuTargets::resolve(&setup.cpu.db_pids, &setup.cpu.db_name)?;
    let mut samplers = Vec::new();
    let mut slots = [None, None, None];
    for (slot, (label, pids)) in [
        ("server", server),
        ("database", db),
        ("generator", vec![std::process::id()]),
    ]
    .into_iter()
    .enumerate()
    {
        if !pids.is_empty() {
            slots[slot] = Some(samplers.len());
            samplers.push(CpuSampler::new(label, pids).map_err(|e| e.to_string())?);
        }
    }
    let counters = match &setup.cpu.server_metrics {
        Some(url) => Some(crate::server_counters::ServerCounters::new(url).await?),
        None => None,
    };
    let cpu = CpuWindow::new(samplers).with_counters(counters);

    let fast_reconnect = extras.delivery.retransmit.enabled();
    let mut pcefs = Pcefs::connect_tuned(&setup.pcef, &setup.scenario.gx, fast_reconnect).await?;
    pcefs.delivery = extras.delivery.clone();
    let pcefs = Arc::new(pcefs);
    let progress = Progress::new();
    let printer = if setup.progress {
        progress.spawn_printer()
    } else {
        None
    };
    let result = match load {
        Load::Open(cfg) => {
            let rt = tokio::runtime::Handle::current();
            let (p, s, pr) = (pcefs.clone(), setup.scenario.clone(), progress.clone());
            let series = extras.series.clone();
            tokio::task::spawn_blocking(move || open_loop::run(&rt, &p, &s, cfg, cpu, &pr, series))
                .await
                .map_err(|e| format!("scheduler failed: {e}"))?
        }
        Load::Closed(_) if extras.series.is_some() => {
            Err("--series needs an open-loop run (--rate)".to_string())
        }
        Load::Closed(cfg) => {
            closed_loop::run(
                pcefs.clone(),
                setup.scenario.clone(),
                cfg,
                cpu,
                progress.clone(),
            )
            .await
        }
    };
    progress.stop();
    if let Some(p) = printer {
        let _ = p.join();
    }
    let rar = RarCounts {
        received: pcefs.counters.rar_received.load(Relaxed),
        answered: pcefs.counters.raa_sent.load(Relaxed),
        release_requests: pcefs.counters.release_requests.load(Relaxed),
    };
    let peer_events = pcefs.events();
    if pcefs.delivery.log.is_some() || pcefs.delivery.retransmit.enabled() {
        // Every request's final outcome must reach the log before the
        // gateways go: an unlogged request would look like a double count.
        let bound = pcefs.delivery.retransmit.worst_case(setup.scenario.timeout);
        let left = pcefs.delivery.wait_idle(bound).await;
        if left > 0 {
            eprintln!("pcrf-bench: {left} requests still unfinished after {bound:?}; the answer log lacks them");
        }
    }
    pcefs.shutdown().await;
    let r = result?;
    let (commands, total) = command_reports(&r.stats, r.window_s);
    let cpu_at = |i: Option<usize>| i.and_then(|i| r.cpu.get(i).cloned());
    let (mode, offered, concurrency, warmup) = match load {
        Load::Open(c) => ("open-loop", Some(c.rate), None, c.warmup),
        Load::Closed(c) => ("closed-loop", None, Some(c.concurrency), c.warmup),
    };
    Ok(Report {
        tool: "pcrf-bench".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        mode: mode.into(),
        scenario: setup.scenario.name.clone(),
        target: setup.pcef.target.to_string(),
        peers: setup.pcef.peers,
        offered_tps: offered,
        concurrency,
        warmup_s: warmup.as_secs_f64(),
        duration_s: r.window_s,
        started_unix: r.started_unix,
        machine: Machine::detect(),
        commands,
        total,
        achieved_tps: r.achieved_tps,
        sessions: r.sessions,
        rar,
        outside_window: r.outside,
        send_lag: r.send_lag.as_ref().and_then(|l| l.percentiles()),
        server_cpu: cpu_at(slots[0]),
        db_cpu: cpu_at(slots[1]),
        generator_cpu: cpu_at(slots[2]),
        server_store: r.store.clone(),
        peer_events,
        delivery: pcefs.delivery.counts(),
    })
}
