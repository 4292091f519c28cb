//! The cluster scenario's failover: one PCRF node killed at a chosen time
//! of the run (the scenario's `[cluster]` section: `kill_at` and the
//! `kill_command` that does it), and what the gateways saw around the kill,
//! read from the answer log: the requests that failed for good (after every
//! retransmission) and for how long failures went on, and the acknowledged
//! throughput just before and just after the kill. Whether anything
//! acknowledged was lost is `pcrf-bench verify`'s question (bench/cluster.sh
//! asks both).

use crate::delivery::AnswerRecord;
use crate::scenario::NodeKill;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The longest span on each side of the kill whose throughput is compared.
const THROUGHPUT_SPAN_MS: u64 = 10_000;

/// Runs `kill.command` once `kill.at` has passed since `start`: the Unix
/// time in milliseconds when it ran, or why it failed.
pub async fn kill_at(kill: NodeKill, start: Instant) -> Result<u64, String> {
    tokio::time::sleep_until(tokio::time::Instant::from_std(start + kill.at)).await;
    let at = unix_ms();
    let status = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&kill.command)
        .status()
        .await
        .map_err(|e| format!("[cluster] kill_command: {e}"))?;
    if status.success() {
        Ok(at)
    } else {
        Err(format!(
            "[cluster] kill_command `{}` failed: {status}",
            kill.command
        ))
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What the gateways saw around the kill.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FailoverReport {
    pub kill_command: String,
    /// When the node was killed (Unix milliseconds).
    pub killed_at_unix_ms: u64,
    /// Requests of the run (each counted once, whatever its tries).
    pub requests: u64,
    /// Requests with no success answer after every retransmission.
    pub failed: u64,
    /// Requests answered only after at least one retransmission.
    pub retransmitted: u64,
    /// The first and last failure's final outcome, in milliseconds from
    /// the kill (negative: before it).
    pub first_failure_ms: Option<i64>,
    pub last_failure_ms: Option<i64>,
    /// From the first failure to the last (0 with none or one).
    pub failing_ms: u64,
    /// Acknowledged requests per second over the span before the kill and
    /// over the same span after it (up to 10 s each, within the run).
    pub span_ms: u64,
    pub acknowledged_tps_before: f64,
    pub acknowledged_tps_after: f64,
}

impl FailoverReport {
    /// Reads the log of a run in which a node was killed at `killed_at`
    /// (Unix milliseconds).
    pub fn of(records: &[AnswerRecord], killed_at: u64, kill_command: &str) -> FailoverReport {
        let rel = |at: u64| at as i64 - killed_at as i64;
        let failures: Vec<i64> = records
            .iter()
            .filter(|r| !r.acknowledged())
            .map(|r| rel(r.at_ms))
            .collect();
        let first = failures.iter().copied().min();
        let last = failures.iter().copied().max();
        let earliest = records.iter().map(|r| r.at_ms).min().unwrap_or(killed_at);
        let latest = records.iter().map(|r| r.at_ms).max().unwrap_or(killed_at);
        let span = THROUGHPUT_SPAN_MS
            .min(killed_at.saturating_sub(earliest))
            .min(latest.saturating_sub(killed_at));
        let acked_in = |from: u64, to: u64| {
            records
                .iter()
                .filter(|r| r.acknowledged() && r.at_ms >= from && r.at_ms < to)
                .count() as f64
        };
        let per_s = |n: f64| {
            if span == 0 {
                0.0
            } else {
                n * 1000.0 / span as f64
            }
        };
        FailoverReport {
            kill_command: kill_command.to_string(),
            killed_at_unix_ms: killed_at,
            requests: records.len() as u64,
            failed: failures.len() as u64,
            retransmitted: records
                .iter()
                .filter(|r| r.tries > 1 && r.acknowledged())
                .count() as u64,
            first_failure_ms: first,
            last_failure_ms: last,
            failing_ms: match (first, last) {
                (Some(f), Some(l)) => (l - f) as u64,
                _ => 0,
            },
            span_ms: span,
            acknowledged_tps_before: per_s(acked_in(killed_at - span, killed_at)),
            acknowledged_tps_after: per_s(acked_in(killed_at, killed_at + span)),
        }
    }

    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "node killed: `{}`", self.kill_command);
        let _ = writeln!(
            s,
            "requests: {}, failed for good: {}, answered after retransmission: {}",
            self.requests, self.failed, self.retransmitted
        );
        match (self.first_failure_ms, self.last_failure_ms) {
            (Some(f), Some(l)) => {
                let _ = writeln!(
                    s,
                    "failures from {f:+} ms to {l:+} ms of the kill: for {} ms",
                    self.failing_ms
                );
            }
            _ => {
                let _ = writeln!(s, "no request failed");
            }
        }
        let _ = writeln!(
            s,
            "acknowledged TPS: {:.0} in the {:.1} s before the kill, {:.0} in the {:.1} s after",
            self.acknowledged_tps_before,
            self.span_ms as f64 / 1000.0,
            self.acknowledged_tps_after,
            self.span_ms as f64 / 1000.0
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rec(at_ms: u64, result: Option<u32>, tries: u32) -> AnswerRecord {
        AnswerRecord {
            session: "s".into(),
            imsi: "001010000000001".into(),
            command: "CCR-U".into(),
            number: 1,
            outcome: if result.is_some() {
                "answered".into()
            } else {
                "timeout".into()
            },
            result,
            octets: 0,
            tries,
            at_ms,
        }
    }

    #[test]
    fn failures_and_throughput_around_the_kill() {
        let kill = 100_000;
        let mut log = Vec::new();
        // 10 s before the kill: 100 acknowledged per second.
        for i in 0..1000 {
            log.push(rec(kill - 10_000 + i * 10, Some(2001), 1));
        }
        // After it: two failures (a timeout and a 3002 left after the
        // retries), 50 per second acknowledged for 10 s, one of them resent.
        log.push(rec(kill + 300, None, 3));
        log.push(rec(kill + 1_800, Some(3002), 3));
        for i in 0..500 {
            log.push(rec(kill + i * 20, Some(2001), if i == 7 { 2 } else { 1 }));
        }
        // The run goes on a little longer than the 10 s compared.
        log.push(rec(kill + 10_500, Some(2001), 1));
        let r = FailoverReport::of(&log, kill, "kill -9 42");
        assert_eq!(r.requests, 1503);
        assert_eq!(r.failed, 2);
        assert_eq!(r.retransmitted, 1);
        assert_eq!(
            (r.first_failure_ms, r.last_failure_ms),
            (Some(300), Some(1_800))
        );
        assert_eq!(r.failing_ms, 1_500);
        assert_eq!(r.span_ms, 10_000);
        assert!((r.acknowledged_tps_before - 100.0).abs() < 1e-9, "{r:?}");
        assert!((r.acknowledged_tps_after - 50.0).abs() < 1e-9, "{r:?}");
        assert!(r.summary().contains("for 1500 ms"), "{}", r.summary());
    }

    #[test]
    fn a_kill_nobody_noticed() {
        let log = vec![rec(5_000, Some(2001), 1), rec(7_000, Some(2001), 1)];
        let r = FailoverReport::of(&log, 6_000, "true");
        assert_eq!((r.failed, r.failing_ms, r.first_failure_ms), (0, 0, None));
        assert_eq!(r.span_ms, 1_000);
        assert!((r.acknowledged_tps_before - 1.0).abs() < 1e-9);
        assert!(r.summary().contains("no request failed"));
    }

    #[tokio::test]
    async fn the_command_runs_at_its_time_and_must_succeed() {
        let start = Instant::now();
        let kill = NodeKill {
            at: Duration::from_millis(200),
            command: "exit 0".into(),
        };
        let at = kill_at(kill, start).await.expect("ran");
        assert!(start.elapsed() >= Duration::from_millis(200));
        assert!(at > 1_600_000_000_000);
        let failing = NodeKill {
            at: Duration::ZERO,
            command: "exit 3".into(),
        };
        assert!(kill_at(failing, Instant::now()).await.is_err());
    }
}
