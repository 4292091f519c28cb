//! The usage ledger capability: every subscriber's accumulators, the
//! usage file in force, and the monitoring steps of a request on them
//! (`monitoring.rs`: taking the subscriber's usage, counting reports,
//! the policy's view, the grants). A separate handle so that what counts
//! or reads usage reaches nothing else of the node.

use super::state::Node;
use crate::usage::config::UsageConfig;
use crate::usage::table::UsageTable;
use std::sync::Arc;

/// The usage table and the monitoring steps.
#[derive(Clone)]
pub struct UsageLedger {
    pub(super) node: Arc<Node>,
}

impl UsageLedger {
    /// The accumulators held in memory, the usage file in force, the
    /// usage counters.
    pub(crate) fn table(&self) -> &UsageTable {
        &self.node.usage
    }
}

/// A usage file version is checked against this node's open sessions'
/// grants and put in force in its usage table.
impl crate::usage::versions::UsageHost for UsageLedger {
    fn in_force(&self) -> Arc<UsageConfig> {
        self.node.usage.config_full()
    }

    fn granted_keys(&self) -> std::collections::BTreeMap<String, usize> {
        UsageLedger::granted_keys(self)
    }

    fn put_in_force(&self, config: UsageConfig) {
        if config.checksum() != self.node.usage.config().checksum() {
            tracing::info!(checksum = %config.checksum_hex(), "usage file in force");
        }
        self.node.usage.set_config(config);
    }
}
