//! Policy counters for /metrics: plain atomics bumped on the request path,
//! read as one snapshot by the metrics renderer.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Live counters, owned by the engine.
#[derive(Debug, Default)]
pub struct PolicyStats {
    pub(crate) runs: AtomicU64,
    pub(crate) skips: AtomicU64,
    pub(crate) skips_within_bounds: AtomicU64,
    pub(crate) errors: AtomicU64,
    pub(crate) reloads: AtomicU64,
    pub(crate) reload_failures: AtomicU64,
}

/// A point-in-time copy of the counters plus the serving script version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StatsSnapshot {
    /// `decide` calls that ran Lua (including those that failed).
    pub runs: u64,
    /// `decide` calls answered from the memo without running Lua.
    pub skips: u64,
    /// Of `skips`, those whose inputs had changed within the bounds the
    /// reused decision stated (`valid`).
    pub skips_within_bounds: u64,
    /// Lua runs that failed and were answered with the fallback decision.
    pub errors: u64,
    /// Successful reloads.
    pub reloads: u64,
    /// Reloads refused (the old script kept serving).
    pub reload_failures: u64,
    /// Version of the script serving now.
    pub script_version: u64,
    /// `log()` lines dropped by the per-call and per-second limits.
    pub log_dropped: u64,
}

impl PolicyStats {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    pub(crate) fn snapshot(&self, script_version: u64) -> StatsSnapshot {
        StatsSnapshot {
            runs: self.runs.load(Relaxed),
            skips: self.skips.load(Relaxed),
            skips_within_bounds: self.skips_within_bounds.load(Relaxed),
            errors: self.errors.load(Relaxed),
            reloads: self.reloads.load(Relaxed),
            reload_failures: self.reload_failures.load(Relaxed),
            script_version,
            log_dropped: super::sandbox::log_dropped(),
        }
    }
}
