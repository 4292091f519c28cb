//! What one measurement run (open or closed loop) hands back to be
//! reported or judged.

use crate::cpu::CpuReport;
use crate::latency::Latency;
use crate::report::{OutsideWindow, SessionCounts};
use crate::stats::RunStats;
use std::time::{SystemTime, UNIX_EPOCH};

/// The figures of one run.
#[derive(Debug)]
pub struct RunResult {
    /// Requests intended inside the measurement window.
    pub stats: RunStats,
    pub outside: OutsideWindow,
    pub sessions: SessionCounts,
    /// Open loop: actual send time minus intended send time.
    pub send_lag: Option<Latency>,
    /// CPU reports in the order the samplers were given.
    pub cpu: Vec<CpuReport>,
    /// The server's store commits over the window (`--server-metrics`).
    pub store: Option<crate::server_counters::StoreReport>,
    /// Success answers per second over the window.
    pub achieved_tps: f64,
    pub window_s: f64,
    pub started_unix: u64,
}

/// A tag for Session-Ids that differs between runs (milliseconds of the
/// wall clock), so sessions of consecutive trials never collide.
pub fn run_tag() -> (u32, u64) {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_millis() as u32, d.as_secs())
}
