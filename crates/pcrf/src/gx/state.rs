//! What the Gx service keeps beside the session table: its counters of
//! pushes for /metrics, why a re-decision was pushed, and what a push of
//! several sessions did.

use std::sync::atomic::AtomicU64;

/// Counters of pushes, rendered into /metrics.
#[derive(Default)]
pub struct PushCounters {
    pub decided: AtomicU64,
    pub rar_sent: AtomicU64,
    pub unchanged: AtomicU64,
    pub failed: AtomicU64,
    pub resets: AtomicU64,
}

/// Why a push happens (logs and metrics).
#[derive(Clone, Copy, Debug)]
pub enum PushReason {
    Provisioning,
    TopUp,
    UsageReset,
    PeriodReset,
    TimeBoundary,
    Congestion,
    /// Sy: the OCS changed a policy counter's status (SNR or a pending change).
    Spending,
}

impl PushReason {
    pub(crate) fn label(self) -> &'static str {
        match self {
            PushReason::Provisioning => "provisioning",
            PushReason::TopUp => "top-up",
            PushReason::UsageReset => "usage reset",
            PushReason::PeriodReset => "period reset",
            PushReason::TimeBoundary => "time boundary",
            PushReason::Congestion => "congestion",
            PushReason::Spending => "spending status",
        }
    }

    /// Plan and usage changes ask the PCEF for the usage it has not
    /// reported yet, so the accumulators catch up at once.
    pub(crate) fn asks_report(self) -> bool {
        matches!(
            self,
            PushReason::Provisioning | PushReason::UsageReset | PushReason::PeriodReset
        )
    }
}

/// What one push of several sessions did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PushSummary {
    /// Open sessions re-decided.
    pub sessions: usize,
    /// Of them, those whose decision changed and got a RAR.
    pub rar_sent: usize,
    /// Of them, those whose RAR failed (no peer, timeout, error answer).
    pub failed: usize,
}
