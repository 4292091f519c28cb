//! The result of a run: a serialisable report (`--json`) and the human
//! summary printed otherwise. Every figure says what it counts; the machine
//! it ran on is read at run time so a report stands on its own.

use crate::apdex::ApdexSummary;
use crate::cpu::CpuReport;
use crate::delivery::DeliveryCounts;
use crate::latency::Percentiles;
use crate::stats::{Command, CommandStats, Outcome, RunStats};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Where the run happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub cpu_model: String,
    /// CPUs this process may run on.
    pub cpus: usize,
    pub kernel: String,
}

impl Machine {
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Machine {
            cpu_model,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel,
        }
    }
}

/// One command's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandReport {
    pub command: String,
    pub sent: u64,
    pub answered: u64,
    /// Answers with a 2xxx result.
    pub succeeded: u64,
    pub timeouts: u64,
    pub send_failures: u64,
    /// Due but not sent because an earlier request of the session failed.
    pub skipped: u64,
    /// Answers by Result-Code ("2001") or Experimental-Result ("10415:5030").
    pub results: BTreeMap<String, u64>,
    /// Latency from the intended send time (open loop) or the send (closed loop).
    pub latency: Option<Percentiles>,
    pub apdex: ApdexSummary,
    /// Success answers per second of the measurement window.
    pub tps: f64,
}

impl CommandReport {
    pub fn from_stats(name: &str, s: &CommandStats, window_s: f64) -> CommandReport {
        CommandReport {
            command: name.to_string(),
            sent: s.sent,
            answered: s.answered,
            succeeded: s.succeeded,
            timeouts: s.timeouts,
            send_failures: s.send_failures,
            skipped: s.skipped,
            results: s.results.iter().map(|(k, n)| (k.key(), *n)).collect(),
            latency: s.latency.percentiles(),
            apdex: s.apdex.summary(),
            tps: if window_s > 0.0 {
                s.succeeded as f64 / window_s
            } else {
                0.0
            },
        }
    }

    /// Everything that is not a success answer.
    pub fn failures(&self) -> u64 {
        (self.answered - self.succeeded.min(self.answered))
            + self.timeouts
            + self.send_failures
            + self.skipped
    }
}

/// Session-level counts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionCounts {
    pub started: u64,
    /// Ended by an answered CCR-T.
    pub completed: u64,
    /// Ended early by a failed request.
    pub failed: u64,
    /// Could not start: every subscriber of the population had a session.
    pub population_exhausted: u64,
}

/// RARs the PCRF pushed and the RAAs we answered.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RarCounts {
    pub received: u64,
    pub answered: u64,
    /// RARs with Session-Release-Cause (the session then ends with CCR-T).
    pub release_requests: u64,
}

/// Requests of the warm-up and of the final drain (CCR-T of sessions still
/// open at the end): sent, but outside the measurement. How they failed is
/// kept too: a failed session is otherwise unexplained by the figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OutsideWindow {
    pub sent: u64,
    pub succeeded: u64,
    /// Answered with an error, timed out, not sent, or never sent because
    /// their session had failed.
    pub failed: u64,
    /// Of `failed`: no answer within the timeout.
    #[serde(default)]
    pub timeouts: u64,
    /// Answers by result ("2001", "3004", "10415:5030"), as in the window.
    #[serde(default)]
    pub results: BTreeMap<String, u64>,
}

impl OutsideWindow {
    /// One request outside the window ended with `outcome`.
    pub fn finished(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Answered(r) => {
                *self.results.entry(r.key()).or_default() += 1;
                if r.is_success() {
                    self.succeeded += 1;
                } else {
                    self.failed += 1;
                }
            }
            Outcome::Timeout => {
                self.timeouts += 1;
                self.failed += 1;
            }
            Outcome::SendFailed => self.failed += 1,
        }
    }

    /// Adds another's counts (closed-loop workers).
    pub fn add(&mut self, o: &OutsideWindow) {
        self.sent += o.sent;
        self.succeeded += o.succeeded;
        self.failed += o.failed;
        self.timeouts += o.timeouts;
        for (k, n) in &o.results {
            *self.results.entry(k.clone()).or_default() += n;
        }
    }
}

/// A whole run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub tool: String,
    pub version: String,
    /// "open-loop" or "closed-loop".
    pub mode: String,
    pub scenario: String,
    pub target: String,
    pub peers: usize,
    /// Open loop: the offered rate (requests per second).
    pub offered_tps: Option<f64>,
    /// Closed loop: sessions driven at once.
    pub concurrency: Option<usize>,
    pub warmup_s: f64,
    pub duration_s: f64,
    pub started_unix: u64,
    pub machine: Machine,
    pub commands: Vec<CommandReport>,
    pub total: CommandReport,
    /// Success answers per second over the measurement window (stretched
    /// to the last answer when answers came late).
    pub achieved_tps: f64,
    pub sessions: SessionCounts,
    pub rar: RarCounts,
    pub outside_window: OutsideWindow,
    /// Open loop: how late requests left against their intended time (the
    /// generator's own delay, included in the latencies above).
    pub send_lag: Option<Percentiles>,
    pub server_cpu: Option<CpuReport>,
    pub db_cpu: Option<CpuReport>,
    pub generator_cpu: Option<CpuReport>,
    /// The server's store commits over the window (`--server-metrics`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_store: Option<crate::server_counters::StoreReport>,
    /// Connection problems seen (peer down, reconnects).
    pub peer_events: Vec<String>,
    /// Retransmissions (T flag, same CC-Request-Number) after timeouts and
    /// lost connections; all zero unless `--retransmit` was given.
    #[serde(default)]
    pub delivery: DeliveryCounts,
}

/// The per-command and total sections of a report from the run's counters.
pub fn command_reports(stats: &RunStats, window_s: f64) -> (Vec<CommandReport>, CommandReport) {
    let commands = Command::ALL
        .iter()
        .map(|c| CommandReport::from_stats(c.name(), stats.command(*c), window_s))
        .collect();
    let total = CommandReport::from_stats("total", &stats.total(), window_s);
    (commands, total)
}

fn ms(p: &Option<Percentiles>, f: impl Fn(&Percentiles) -> f64) -> String {
    p.as_ref()
        .map_or_else(|| "-".into(), |p| format!("{:.3}", f(p)))
}

fn cpu_line(what: &str, c: &CpuReport) -> String {
    let per_txn = c
        .cpu_us_per_txn
        .map_or_else(|| "n/a".into(), |u| format!("{u:.1} µs/txn"));
    let peak = c
        .peak_percent_of_core
        .map_or_else(String::new, |p| format!(", peak {p:.1}%"));
    format!(
        "{what} CPU (pid {}): {:.1}% of one core, {per_txn}{peak} (over {:.1} s)\n",
        c.pids
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(","),
        c.cpu_percent_of_core,
        c.wall_s
    )
}

impl Report {
    /// The human summary.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let load = match (self.offered_tps, self.concurrency) {
            (Some(r), _) => format!("{r:.0} TPS offered"),
            (None, Some(c)) => format!("{c} sessions at once, as fast as answered"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "pcrf-bench {}: scenario {}, {load}, {:.0} s measured after {:.1} s warm-up, {} peers -> {}",
            self.mode, self.scenario, self.duration_s, self.warmup_s, self.peers, self.target
        );
        let _ = writeln!(
            s,
            "machine: {}, {} CPUs, Linux {}",
            self.machine.cpu_model, self.machine.cpus, self.machine.kernel
        );
        let _ = writeln!(
            s,
            "{:<7} {:>9} {:>9} {:>9} {:>7} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}  Apdex",
            "command",
            "sent",
            "answered",
            "success",
            "failed",
            "t/o",
            "p50 ms",
            "p90",
            "p99",
            "p99.9",
            "max",
        );
        for c in self.commands.iter().chain(std::iter::once(&self.total)) {
            let _ = writeln!(
                s,
                "{:<7} {:>9} {:>9} {:>9} {:>7} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8}  {}",
                c.command,
                c.sent,
                c.answered,
                c.succeeded,
                c.failures() - c.timeouts,
                c.timeouts,
                ms(&c.latency, |p| p.p50_ms),
                ms(&c.latency, |p| p.p90_ms),
                ms(&c.latency, |p| p.p99_ms),
                ms(&c.latency, |p| p.p999_ms),
                ms(&c.latency, |p| p.max_ms),
                c.apdex
            );
        }
        // Result-Codes first, then Experimental-Results (vendor:code).
        let mut results: Vec<_> = self.total.results.iter().collect();
        results.sort_by_key(|(k, _)| (k.contains(':'), k.len(), k.to_string()));
        let codes: Vec<String> = results.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        let _ = writeln!(s, "results: {}", codes.join(", "));
        let _ = writeln!(s, "achieved: {:.1} TPS", self.achieved_tps);
        let o = &self.outside_window;
        if o.sent > 0 {
            let codes: Vec<String> = o.results.iter().map(|(k, n)| format!("{k}: {n}")).collect();
            let _ = writeln!(
                s,
                "outside the window (warm-up, drain): {} sent, {} succeeded, {} failed ({} timeouts; results {})",
                o.sent,
                o.succeeded,
                o.failed,
                o.timeouts,
                if codes.is_empty() { "none".into() } else { codes.join(", ") }
            );
        }
        let _ = writeln!(
            s,
            "sessions: {} started, {} completed, {} failed, {} not started (population exhausted)",
            self.sessions.started,
            self.sessions.completed,
            self.sessions.failed,
            self.sessions.population_exhausted
        );
        if self.rar.received > 0 {
            let _ = writeln!(
                s,
                "RAR: {} received, {} answered with RAA 2001, {} asked to release the session",
                self.rar.received, self.rar.answered, self.rar.release_requests
            );
        }
        if self.delivery.max_retries > 0 {
            let _ = writeln!(
                s,
                "retransmissions: {} (T flag, up to {} per request), {} requests answered after one",
                self.delivery.retransmissions,
                self.delivery.max_retries,
                self.delivery.answered_after_retransmission
            );
        }
        if let Some(l) = &self.send_lag {
            let _ = writeln!(
                s,
                "generator send lag: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (included in latency)",
                l.p50_ms, l.p99_ms, l.max_ms
            );
        }
        if let Some(c) = &self.server_cpu {
            s.push_str(&cpu_line("server", c));
        }
        if let Some(c) = &self.db_cpu {
            s.push_str(&cpu_line("database", c));
        }
        if let Some(c) = &self.generator_cpu {
            s.push_str(&cpu_line("generator", c));
        }
        if let Some(st) = &self.server_store {
            let per_100 = st
                .commits_per_100_transactions
                .map_or("-".to_string(), |v| format!("{v:.2}"));
            let _ = writeln!(
                s,
                "server store: {} commits for {} transactions ({per_100} per 100), {} batches, {} rows changed",
                st.commits, st.transactions, st.batches, st.rows_changed
            );
        }
        for e in &self.peer_events {
            let _ = writeln!(s, "peer: {e}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::ApdexTargets;
    use crate::stats::{Outcome, ResultKind};
    use std::time::Duration;

    fn report() -> Report {
        let t = ApdexTargets {
            ccr_i: Duration::from_millis(5),
            ccr_u: Duration::from_millis(5),
            ccr_t: Duration::from_millis(5),
            aar: Duration::from_millis(10),
            str: Duration::from_millis(10),
            call_setup: Duration::from_millis(20),
        };
        let mut st = RunStats::new(&t);
        for _ in 0..10 {
            st.sent(Command::CcrI);
            st.finished(
                Command::CcrI,
                Outcome::Answered(ResultKind::Code(2001)),
                Duration::from_micros(300),
            );
        }
        st.sent(Command::CcrU);
        st.finished(
            Command::CcrU,
            Outcome::Answered(ResultKind::Experimental(10415, 5030)),
            Duration::from_micros(300),
        );
        let (commands, total) = command_reports(&st, 2.0);
        Report {
            tool: "pcrf-bench".into(),
            version: "0".into(),
            mode: "open-loop".into(),
            scenario: "seed".into(),
            target: "127.0.0.1:3868".into(),
            peers: 2,
            offered_tps: Some(5.5),
            concurrency: None,
            warmup_s: 0.0,
            duration_s: 2.0,
            started_unix: 0,
            machine: Machine::detect(),
            commands,
            total,
            achieved_tps: 5.0,
            sessions: SessionCounts::default(),
            rar: RarCounts::default(),
            outside_window: OutsideWindow::default(),
            send_lag: None,
            server_cpu: None,
            db_cpu: None,
            server_store: None,
            generator_cpu: None,
            peer_events: vec![],
            delivery: DeliveryCounts::default(),
        }
    }

    #[test]
    fn json_round_trips_and_summary_shows_the_figures() {
        let r = report();
        assert_eq!(r.commands.len(), 3);
        assert_eq!(r.commands[0].tps, 5.0);
        assert_eq!(r.total.results["10415:5030"], 1);
        assert_eq!(r.total.failures(), 1);
        let json = serde_json::to_string(&r).expect("json");
        let back: Report = serde_json::from_str(&json).expect("parse");
        // Floats may differ in the last bit through JSON; the rest is exact.
        assert_eq!(back.commands[1].results, r.commands[1].results);
        assert_eq!(back.machine, r.machine);
        let (a, b) = (back.total.apdex.score, r.total.apdex.score);
        assert!((a.expect("score") - b.expect("score")).abs() < 1e-12);
        let s = r.summary();
        assert!(s.contains("CCR-I"), "{s}");
        assert!(s.contains("1.00 [5 ms]"), "{s}");
        assert!(s.contains("0.00 [5 ms]"), "{s}");
        assert!(s.contains("2001: 10, 10415:5030: 1"), "{s}");
        assert!(s.contains("achieved: 5.0 TPS"), "{s}");
    }

    #[test]
    fn machine_is_read() {
        let m = Machine::detect();
        assert!(m.cpus >= 1);
        assert!(!m.cpu_model.is_empty());
    }
}
