//! What the policy decides with, beside the session and the subscriber:
//! the versions of the policy and of the usage file this node serves (the
//! engine runs one of them), the time zone its clock is read in, the
//! congestion the operator reported per cell, and the decision log that
//! records what a decision was made of. The applications reach the policy
//! through this and through the node's decision steps, never through the
//! engine's own state.

use std::collections::HashMap;
use std::sync::Arc;

use crate::notify::decision_log::DecisionLog;
use crate::policy::{PolicyEngine, PolicyVersions};
use crate::usage::versions::UsageVersions;
use parking_lot::RwLock;

/// The policy's and the usage file's versions, the time zone, the
/// congestion by cell and the decision log.
pub struct PolicyRunner {
    policy: Arc<PolicyVersions>,
    usage: Arc<UsageVersions>,
    tz: jiff::tz::TimeZone,
    /// Congestion level by cell (ECGI, 14 lowercase hex digits).
    congestion: RwLock<HashMap<String, u32>>,
    decision_log: DecisionLog,
}

impl PolicyRunner {
    pub(crate) fn new(
        policy: Arc<PolicyVersions>,
        usage: Arc<UsageVersions>,
        tz: jiff::tz::TimeZone,
        decision_log: DecisionLog,
    ) -> PolicyRunner {
        PolicyRunner {
            policy,
            usage,
            tz,
            congestion: RwLock::new(HashMap::new()),
            decision_log,
        }
    }

    /// The policy engine: the script serving, its rollout, its counters.
    pub fn engine(&self) -> &Arc<PolicyEngine> {
        self.policy.engine()
    }

    /// The stored versions of the policy.
    pub(crate) fn policy_versions(&self) -> &Arc<PolicyVersions> {
        &self.policy
    }

    /// The stored versions of the usage file.
    pub(crate) fn usage_versions(&self) -> &Arc<UsageVersions> {
        &self.usage
    }

    /// The time zone the policy's clock is read in (`[policy].time_zone`).
    pub(crate) fn tz(&self) -> &jiff::tz::TimeZone {
        &self.tz
    }

    pub(crate) fn decision_log(&self) -> &DecisionLog {
        &self.decision_log
    }

    /// The congestion level reported for `cell` (0 when none).
    pub(crate) fn congestion_at(&self, cell: &str) -> u32 {
        self.congestion.read().get(cell).copied().unwrap_or(0)
    }

    /// Sets `cell`'s congestion level (0 clears it); the level before.
    pub(crate) fn set_congestion(&self, cell: &str, level: u32) -> u32 {
        let mut map = self.congestion.write();
        let before = map.get(cell).copied().unwrap_or(0);
        if level == 0 {
            map.remove(cell);
        } else {
            map.insert(cell.to_ascii_lowercase(), level);
        }
        before
    }

    /// The versions this node serves of the policy and the usage file
    /// (its heartbeat, `GET /v1/cluster`).
    pub(crate) fn serving(&self) -> crate::cluster::membership::Serving {
        let (policy, usage) = (self.policy_versions(), self.usage_versions());
        crate::cluster::membership::Serving {
            policy_version: policy.serving(),
            policy_refused: policy.refused(),
            usage_version: usage.serving(),
            usage_refused: usage.refused(),
        }
    }
}
