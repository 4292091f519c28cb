//! `pcrf-bench zero-loss`: trials of the open-loop run at the rates the
//! search asks for, each judged by the zero-loss criteria, and the
//! report of the whole search (every trial's full report included).

use crate::open_loop::OpenLoop;
use crate::report::{Machine, Report};
use crate::runner::{measure, Load, RunSetup};
use crate::zero_loss::{judge, Criteria, SearchResult, TrialFigures, ZeroLossSearch};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::Duration;

/// How to search.
#[derive(Clone, Copy, Debug)]
pub struct SearchSettings {
    pub min: f64,
    pub max: f64,
    pub warmup: Duration,
    pub duration: Duration,
    pub criteria: Criteria,
    pub resolution: f64,
    pub max_trials: usize,
    /// Quiet time between trials, for the server to finish the last one's work.
    pub pause: Duration,
    /// Quiet time after a failed trial instead: an overload leaves the
    /// server, and a database behind it, more to catch up on.
    pub recovery: Duration,
    pub seed: u64,
}

/// The search's report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ZeroLossReport {
    pub tool: String,
    pub version: String,
    pub scenario: String,
    pub target: String,
    pub machine: Machine,
    pub min_tps: f64,
    pub max_tps: f64,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub p99_bound_ms: f64,
    pub min_achieved_ratio: f64,
    pub result: SearchResult,
    pub trials: Vec<Report>,
}

/// The figures the verdict needs, from a trial's report.
pub fn figures(r: &Report) -> TrialFigures {
    let t = &r.total;
    let scheduled = t.sent + t.skipped;
    TrialFigures {
        // Offered inside the window (below the nominal rate while the mix ramps up).
        target_tps: scheduled as f64 / r.duration_s.max(1e-9),
        scheduled,
        succeeded: t.succeeded,
        errors: t.failures() - t.timeouts - t.skipped,
        not_sent: t.skipped,
        timeouts: t.timeouts,
        p99: t
            .latency
            .as_ref()
            .map(|p| Duration::from_secs_f64(p.p99_ms / 1e3)),
        achieved_tps: r.achieved_tps,
    }
}

/// Runs the search; `log` receives one line per trial as it ends.
pub async fn search(
    setup: &RunSetup,
    s: SearchSettings,
    mut log: impl FnMut(&str),
) -> Result<ZeroLossReport, String> {
    let mut search = ZeroLossSearch::new(s.min, s.max, s.resolution, s.max_trials)?;
    let mut trials = Vec::new();
    while let Some(rate) = search.next_rate() {
        if search.last_failed() {
            tokio::time::sleep(s.recovery).await;
        } else if !trials.is_empty() {
            tokio::time::sleep(s.pause).await;
        }
        let load = Load::Open(OpenLoop {
            rate,
            warmup: s.warmup,
            duration: s.duration,
            seed: s.seed.wrapping_add(trials.len() as u64),
        });
        let report = measure(setup, load).await?;
        let f = figures(&report);
        let verdict = judge(&f, &s.criteria);
        log(&format!(
            "trial {}: {:.0} TPS offered -> {} (achieved {:.0} TPS, p99 {})",
            trials.len() + 1,
            rate,
            match &verdict {
                Ok(()) => "zero loss".to_string(),
                Err(why) => format!("FAIL: {why}"),
            },
            f.achieved_tps,
            f.p99
                .map_or("n/a".into(), |d| format!("{:.3} ms", d.as_secs_f64() * 1e3)),
        ));
        search.record(rate, verdict, f.achieved_tps);
        trials.push(report);
    }
    Ok(ZeroLossReport {
        tool: "pcrf-bench".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        scenario: setup.scenario.name.clone(),
        target: setup.pcef.target.to_string(),
        machine: Machine::detect(),
        min_tps: s.min,
        max_tps: s.max,
        warmup_s: s.warmup.as_secs_f64(),
        duration_s: s.duration.as_secs_f64(),
        p99_bound_ms: s.criteria.p99_bound.as_secs_f64() * 1e3,
        min_achieved_ratio: s.criteria.min_achieved_ratio,
        result: search.result(),
        trials,
    })
}

impl ZeroLossReport {
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "zero-loss search: scenario {}, {} trials of {:.0} s (after {:.1} s warm-up) between {:.0} and {:.0} TPS -> {}",
            self.scenario,
            self.result.trials.len(),
            self.duration_s,
            self.warmup_s,
            self.min_tps,
            self.max_tps,
            self.target
        );
        let _ = writeln!(
            s,
            "criteria: no error, no timeout, p99 <= {} ms, achieved >= {:.0}% of offered",
            self.p99_bound_ms,
            self.min_achieved_ratio * 100.0
        );
        let _ = writeln!(
            s,
            "machine: {}, {} CPUs",
            self.machine.cpu_model, self.machine.cpus
        );
        match self.result.zero_loss_tps {
            Some(z) => {
                let _ = writeln!(
                    s,
                    "zero-loss: {z:.0} TPS{}",
                    if self.result.limited_by_max {
                        " (the --max given: the real figure may be higher)"
                    } else {
                        ""
                    }
                );
            }
            None => {
                let _ = writeln!(s, "zero-loss: none at or above {:.0} TPS", self.min_tps);
            }
        }
        let _ = writeln!(
            s,
            "extreme: {:.0} TPS answered with success",
            self.result.extreme_tps
        );
        s
    }
}
