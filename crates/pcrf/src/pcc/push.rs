//! Why the PCRF decides an open session again outside a CCR (provisioning,
//! a top-up, a reset, a time boundary, congestion, a spending status), and
//! what a push of several sessions did: asked for by the operations, the
//! node and the applications, carried out by the Gx service.

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
    /// A policy rollout moved the subscriber to another version.
    Rollout,
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
            PushReason::Rollout => "policy rollout",
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
