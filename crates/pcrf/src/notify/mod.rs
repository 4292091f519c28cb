//! Notifications to external systems: events (sessions started and ended,
//! quota thresholds, profile changes, top-ups, the policy's own `notify`)
//! written to an outbox in the same commit as the state change that caused
//! them, then delivered at least once, in order per subscriber, to
//! webhooks and AMQP brokers. See docs/notifications.md.

pub mod amqp;
pub mod config;
pub mod decision_history;
pub mod decision_log;
pub mod delivery;
pub mod event;
pub mod outbox;
pub mod sink;
pub mod webhook;

pub use config::{NotificationsConfig, SinkConfig, SinkKind};
pub use decision_log::DecisionLogConfig;
pub use event::{names, Event};
pub use outbox::{Outbox, OutboxStatus, Staged};
pub use sink::{Sink, SinkError};

use std::sync::Arc;

/// The receiver a sink's configuration describes. Adding a kind of sink is
/// a file implementing [`Sink`] and its line here.
pub fn build_sink(cfg: &SinkConfig) -> Result<Arc<dyn Sink>, String> {
    Ok(match cfg.kind {
        SinkKind::Webhook => Arc::new(webhook::Webhook::new(cfg)?),
        SinkKind::Amqp => Arc::new(amqp::Amqp::new(cfg)),
    })
}
