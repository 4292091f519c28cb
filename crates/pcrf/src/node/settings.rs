//! The settings capability: the configuration in force with its rule
//! catalog, and putting a reloaded one in force. A separate handle so
//! that what only reads settings reaches nothing else of the node.

use super::state::{Live, Node};
use crate::config::Config;
use std::sync::Arc;

/// The configuration in force.
#[derive(Clone)]
pub struct Settings {
    pub(super) node: Arc<Node>,
}

impl Settings {
    /// The configuration in force, with its rule catalog.
    pub(crate) fn live(&self) -> arc_swap::Guard<Arc<Live>> {
        self.node.live.load()
    }

    /// Applies a reloaded configuration: the rule catalog, the unknown-
    /// subscriber rule and the retention change at once; returns the keys
    /// whose change needs a restart (they keep their running value).
    pub fn apply_config(&self, new: Config) -> Vec<&'static str> {
        let old = self.node.live.load().cfg.clone();
        let mut restart = Vec::new();
        if old.node.origin_host != new.node.origin_host
            || old.node.origin_realm != new.node.origin_realm
        {
            restart.push("[node]");
        }
        if old.diameter.listen != new.diameter.listen
            || old.diameter.watchdog_secs != new.diameter.watchdog_secs
            || old.diameter.max_message_bytes != new.diameter.max_message_bytes
            || old.diameter.max_in_flight != new.diameter.max_in_flight
            || old.diameter.max_pending_requests != new.diameter.max_pending_requests
            || old.diameter.request_timeout_ms != new.diameter.request_timeout_ms
            || old.diameter.max_connections_awaiting_cer
                != new.diameter.max_connections_awaiting_cer
            || old.diameter.cer_timeout_secs != new.diameter.cer_timeout_secs
            || old.diameter.max_message_bytes_awaiting_cer
                != new.diameter.max_message_bytes_awaiting_cer
            || old.diameter.max_buffered_bytes_awaiting_cer
                != new.diameter.max_buffered_bytes_awaiting_cer
            || old.diameter.tls != new.diameter.tls
        {
            restart.push("[diameter]");
        }
        if old.overload != new.overload {
            restart.push("[overload]");
        }
        // The transport reads these once, at start (relays included).
        let peers = |c: &Config| -> Vec<(String, Vec<std::net::IpAddr>, bool, bool)> {
            c.peers
                .iter()
                .map(|p| (p.origin_host.clone(), p.addresses.clone(), p.tls, p.relay))
                .collect()
        };
        if peers(&old) != peers(&new) {
            restart.push("[[peers]]");
        }
        if old.store != new.store {
            restart.push("[store]");
        }
        if old.usage.path != new.usage.path {
            restart.push("[usage].path");
        }
        if old.policy.path != new.policy.path
            || old.policy.time_zone != new.policy.time_zone
            || old.policy.instruction_limit != new.policy.instruction_limit
            || old.policy.memory_limit_mib != new.policy.memory_limit_mib
            || old.policy.fallback != new.policy.fallback
        {
            restart.push("[policy] (except unknown_subscriber)");
        }
        if old.api != new.api {
            restart.push("[api]");
        }
        if old.sy != new.sy {
            restart.push("[sy]");
        }
        // The outbox and its sinks are built once, at start.
        if old.notifications.sinks != new.notifications.sinks
            || old.notifications.max_backlog != new.notifications.max_backlog
        {
            restart.push("[notifications] (except quota_thresholds)");
        }
        self.node.live.store(Arc::new(Live::of(Arc::new(new))));
        restart
    }
}
