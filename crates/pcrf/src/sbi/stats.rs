//! Counters of the SBI listener: requests by operation and answer status,
//! and latency by operation, kept as atomics (the hot path takes no lock)
//! and written into the node's metrics registry at scrape time. The
//! families are described in docs/metrics.md.

use crate::metrics::{Exposition, Histogram, Kind, MetricsSource};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// What a request was, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Get,
    Update,
    Delete,
    AppCreate,
    AppGet,
    AppUpdate,
    AppDelete,
    /// A CHF's spending-limit notification (N28 notify).
    SpendingNotify,
    /// A CHF ending a spending-limit subscription (N28 terminate).
    SpendingTerminate,
    /// Anything not routed to an operation (404, 405, ...).
    Other,
}

impl Operation {
    pub const ALL: [Operation; 11] = [
        Operation::Create,
        Operation::Get,
        Operation::Update,
        Operation::Delete,
        Operation::AppCreate,
        Operation::AppGet,
        Operation::AppUpdate,
        Operation::AppDelete,
        Operation::SpendingNotify,
        Operation::SpendingTerminate,
        Operation::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Operation::Create => "sm_policy_create",
            Operation::Get => "sm_policy_get",
            Operation::Update => "sm_policy_update",
            Operation::Delete => "sm_policy_delete",
            Operation::AppCreate => "app_session_create",
            Operation::AppGet => "app_session_get",
            Operation::AppUpdate => "app_session_update",
            Operation::AppDelete => "app_session_delete",
            Operation::SpendingNotify => "spending_limit_notify",
            Operation::SpendingTerminate => "spending_limit_terminate",
            Operation::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The statuses counted one by one; any other is counted as "other".
const STATUSES: [u16; 14] = [
    200, 201, 204, 400, 403, 404, 405, 408, 411, 413, 415, 500, 503, 504,
];

struct OperationStats {
    by_status: [AtomicU64; STATUSES.len() + 1],
    latency: Histogram,
}

/// The listener's counters.
pub struct SbiStats {
    ops: Vec<OperationStats>,
}

impl Default for SbiStats {
    fn default() -> Self {
        SbiStats::new()
    }
}

impl SbiStats {
    pub fn new() -> SbiStats {
        SbiStats {
            ops: Operation::ALL
                .iter()
                .map(|_| OperationStats {
                    by_status: std::array::from_fn(|_| AtomicU64::new(0)),
                    latency: Histogram::latency(),
                })
                .collect(),
        }
    }

    /// One request answered with `status` after `elapsed`.
    pub fn record(&self, op: Operation, status: u16, elapsed: Duration) {
        let s = &self.ops[op.index()];
        let i = STATUSES
            .iter()
            .position(|&x| x == status)
            .unwrap_or(STATUSES.len());
        s.by_status[i].fetch_add(1, Relaxed);
        s.latency.observe_duration(elapsed);
    }

    /// Requests of `op` answered with `status` so far.
    pub fn requests(&self, op: Operation, status: u16) -> u64 {
        let i = STATUSES
            .iter()
            .position(|&x| x == status)
            .unwrap_or(STATUSES.len());
        self.ops[op.index()].by_status[i].load(Relaxed)
    }
}

impl MetricsSource for SbiStats {
    fn write(&self, out: &mut Exposition) {
        {
            let mut f = out.family(
                "pcrf_sbi_requests_total",
                "SBI (HTTP/2) requests by operation and answer status.",
                Kind::Counter,
            );
            for op in Operation::ALL {
                let s = &self.ops[op.index()];
                for (i, n) in s.by_status.iter().enumerate() {
                    let n = n.load(Relaxed);
                    if n == 0 {
                        continue;
                    }
                    let status = STATUSES
                        .get(i)
                        .map_or_else(|| "other".to_owned(), |s| s.to_string());
                    f.sample(&[("operation", op.label()), ("status", &status)], n);
                }
            }
        }
        let mut f = out.family(
            "pcrf_sbi_request_duration_seconds",
            "SBI (HTTP/2) request latency, from the request head to the answer, by operation.",
            Kind::Histogram,
        );
        for op in Operation::ALL {
            f.histogram(
                &[("operation", op.label())],
                &self.ops[op.index()].latency.snapshot(),
            );
        }
    }
}
