//! The query profiler (the source PCRF's `tt_perf_info`): per statement,
//! how often it ran, how long the database took to execute it and how long
//! fetching its results took, so the costly queries of a live system can be
//! found without restarting it. Off by default; when off the store pays one
//! relaxed atomic load per batch.

use parking_lot::Mutex;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A cloneable handle on one store's profiler: the API holds a clone to
/// switch it and read it while the writer thread records into it.
#[derive(Clone, Default)]
pub struct QueryProfiler(Arc<Inner>);

struct Inner {
    enabled: AtomicBool,
    window: Mutex<Window>,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            enabled: AtomicBool::new(false),
            window: Mutex::new(Window {
                since: Instant::now(),
                until: None,
                by_name: HashMap::new(),
            }),
        }
    }
}

struct Window {
    since: Instant,
    // Set when switched off, so calls per second stay true afterwards.
    until: Option<Instant>,
    by_name: HashMap<&'static str, Totals>,
}

struct Totals {
    sql: &'static str,
    calls: u64,
    exec: Duration,
    fetch: Duration,
    rows: u64,
}

/// One statement's figures over the profiling window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct QueryStat {
    /// Short stable name (e.g. `upsert_session`, `commit`).
    pub name: &'static str,
    pub sql: &'static str,
    pub calls: u64,
    pub calls_per_sec: f64,
    /// Waiting for the database to execute it (µs).
    pub exec_us_total: u64,
    pub exec_us_mean: u64,
    /// Receiving and decoding its result rows (µs).
    pub fetch_us_total: u64,
    pub fetch_us_mean: u64,
    /// Rows affected (writes) or returned (reads).
    pub rows: u64,
    /// This statement's share of all database time in the window (0..=100).
    pub share_pct: f64,
}

/// The profiler's state at one instant.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProfileSnapshot {
    pub enabled: bool,
    /// Length of the window the figures cover.
    pub window_secs: f64,
    /// Execution plus fetch time of every statement (µs).
    pub total_us: u64,
    /// Sorted by total (execution + fetch) time, costliest first.
    pub statements: Vec<QueryStat>,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl QueryProfiler {
    /// A profiler, off.
    pub fn new() -> Self {
        Self::default()
    }

    /// Switches profiling on or off at runtime. Switching it on from off
    /// starts a new window (figures cleared); switching it off freezes them
    /// for reading.
    pub fn set_enabled(&self, on: bool) {
        let mut w = self.0.window.lock();
        let was = self.0.enabled.swap(on, Ordering::Relaxed);
        if on && !was {
            w.since = Instant::now();
            w.until = None;
            w.by_name.clear();
        } else if !on && was {
            w.until = Some(Instant::now());
        }
    }

    /// Whether statements are being recorded (the only cost when off).
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.0.enabled.load(Ordering::Relaxed)
    }

    /// Clears the figures and restarts the window, leaving it on or off.
    pub fn reset(&self) {
        let mut w = self.0.window.lock();
        w.since = Instant::now();
        w.until = (!self.is_enabled()).then_some(w.since);
        w.by_name.clear();
    }

    /// Adds one execution of a statement.
    pub(crate) fn record(
        &self,
        name: &'static str,
        sql: &'static str,
        exec: Duration,
        fetch: Duration,
        rows: u64,
    ) {
        let mut w = self.0.window.lock();
        let t = w.by_name.entry(name).or_insert(Totals {
            sql,
            calls: 0,
            exec: Duration::ZERO,
            fetch: Duration::ZERO,
            rows: 0,
        });
        t.calls += 1;
        t.exec += exec;
        t.fetch += fetch;
        t.rows += rows;
    }

    /// Every statement seen in the window, costliest first.
    pub fn snapshot(&self) -> ProfileSnapshot {
        let w = self.0.window.lock();
        let end = w.until.unwrap_or_else(Instant::now);
        let secs = end.saturating_duration_since(w.since).as_secs_f64();
        // Summed from the rounded figures, so the shares add up to 100.
        let total_us: u64 = w
            .by_name
            .values()
            .map(|t| micros(t.exec).saturating_add(micros(t.fetch)))
            .fold(0, u64::saturating_add);
        let mut statements: Vec<QueryStat> = w
            .by_name
            .iter()
            .map(|(name, t)| {
                let exec_us = micros(t.exec);
                let fetch_us = micros(t.fetch);
                let calls = t.calls.max(1);
                QueryStat {
                    name,
                    sql: t.sql,
                    calls: t.calls,
                    calls_per_sec: if secs > 0.0 {
                        t.calls as f64 / secs
                    } else {
                        0.0
                    },
                    exec_us_total: exec_us,
                    exec_us_mean: exec_us / calls,
                    fetch_us_total: fetch_us,
                    fetch_us_mean: fetch_us / calls,
                    rows: t.rows,
                    share_pct: if total_us > 0 {
                        (exec_us + fetch_us) as f64 * 100.0 / total_us as f64
                    } else {
                        0.0
                    },
                }
            })
            .collect();
        statements.sort_by(|a, b| {
            (b.exec_us_total + b.fetch_us_total)
                .cmp(&(a.exec_us_total + a.fetch_us_total))
                .then(a.name.cmp(b.name))
        });
        ProfileSnapshot {
            enabled: self.is_enabled(),
            window_secs: secs,
            total_us,
            statements,
        }
    }
}

impl std::fmt::Debug for QueryProfiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryProfiler")
            .field("enabled", &self.is_enabled())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_records_nothing_visible_on_sorts_by_total_time() {
        let p = QueryProfiler::new();
        assert!(!p.is_enabled());
        assert!(p.snapshot().statements.is_empty());
        p.set_enabled(true);
        let ms = Duration::from_millis;
        p.record("a", "SELECT a", ms(1), ms(0), 1);
        p.record("b", "SELECT b", ms(2), ms(1), 10);
        p.record("b", "SELECT b", ms(2), ms(1), 10);
        p.record("a", "SELECT a", ms(1), ms(0), 1);
        let s = p.snapshot();
        assert!(s.enabled);
        assert_eq!(s.total_us, 8000);
        assert_eq!(s.statements[0].name, "b");
        assert_eq!(s.statements[0].calls, 2);
        assert_eq!(s.statements[0].exec_us_mean, 2000);
        assert_eq!(s.statements[0].fetch_us_total, 2000);
        assert_eq!(s.statements[0].rows, 20);
        assert!((s.statements[0].share_pct - 75.0).abs() < 1e-9);
        assert_eq!(s.statements[1].name, "a");
        // Off freezes the figures; on again starts a new window.
        p.set_enabled(false);
        assert_eq!(p.snapshot().statements.len(), 2);
        assert!(!p.snapshot().enabled);
        p.set_enabled(true);
        assert!(p.snapshot().statements.is_empty());
        p.record("a", "SELECT a", ms(1), ms(0), 1);
        p.reset();
        assert!(p.snapshot().statements.is_empty());
    }
}
