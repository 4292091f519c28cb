//! The `[cluster]` section of the configuration: how often a node writes
//! its heartbeat to the shared store and how old a heartbeat may be before
//! the node counts as dead. Read at every heartbeat, so a reload changes
//! it without a restart.

use serde::Deserialize;
use std::time::Duration;

fn default_heartbeat_interval_ms() -> u64 {
    1000
}

fn default_node_timeout_ms() -> u64 {
    5000
}

/// `[cluster]`: `heartbeat_interval_ms = 1000`, `node_timeout_ms = 5000`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// How often this node writes its heartbeat row (PostgreSQL store).
    #[serde(default = "default_heartbeat_interval_ms")]
    pub heartbeat_interval_ms: u64,
    /// A node whose last heartbeat is older than this is not alive.
    #[serde(default = "default_node_timeout_ms")]
    pub node_timeout_ms: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            heartbeat_interval_ms: default_heartbeat_interval_ms(),
            node_timeout_ms: default_node_timeout_ms(),
        }
    }
}

impl ClusterConfig {
    /// The interval must be at least 100 ms and the timeout longer than two
    /// intervals, so that one late heartbeat never marks a node dead.
    pub fn validate(&self) -> Result<(), String> {
        if self.heartbeat_interval_ms < 100 {
            return Err("[cluster].heartbeat_interval_ms must be at least 100".into());
        }
        if self.node_timeout_ms <= 2 * self.heartbeat_interval_ms {
            return Err(
                "[cluster].node_timeout_ms must be more than twice heartbeat_interval_ms".into(),
            );
        }
        Ok(())
    }

    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_millis(self.heartbeat_interval_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_a_timeout_within_two_intervals_is_refused() {
        assert!(ClusterConfig::default().validate().is_ok());
        let c = ClusterConfig {
            heartbeat_interval_ms: 1000,
            node_timeout_ms: 2000,
        };
        assert!(c.validate().is_err());
        let c = ClusterConfig {
            heartbeat_interval_ms: 10,
            node_timeout_ms: 5000,
        };
        assert!(c.validate().is_err());
    }
}
