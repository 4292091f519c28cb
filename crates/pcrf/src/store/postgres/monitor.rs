//! The PostgreSQL connection's health, shared with the rest of the server:
//! the store lives on the writer thread behind `Box<dyn Store>`, but
//! `/v1/ready` and the metrics need to know whether the database is
//! reachable and how often the connection was replaced or lost.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A cloneable read-only view of one store's connection.
#[derive(Clone, Debug, Default)]
pub struct ConnectionMonitor(Arc<State>);

#[derive(Debug, Default)]
struct State {
    up: AtomicBool,
    reconnects: AtomicU64,
    failures: AtomicU64,
}

impl ConnectionMonitor {
    /// Whether the store holds a connection now (false from a failure until
    /// the next successful reconnect): what `/v1/ready` should report.
    pub fn is_up(&self) -> bool {
        self.0.up.load(Ordering::Relaxed)
    }

    /// Connections opened after the first (lifetime replacements and
    /// reconnects after failures).
    pub fn reconnects(&self) -> u64 {
        self.0.reconnects.load(Ordering::Relaxed)
    }

    /// Connections lost and connection attempts failed.
    pub fn failures(&self) -> u64 {
        self.0.failures.load(Ordering::Relaxed)
    }

    pub(super) fn connected(&self, first: bool) {
        self.0.up.store(true, Ordering::Relaxed);
        if !first {
            self.0.reconnects.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(super) fn lost(&self) {
        self.0.up.store(false, Ordering::Relaxed);
        self.0.failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn attempt_failed(&self) {
        self.0.failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn closed(&self) {
        self.0.up.store(false, Ordering::Relaxed);
    }
}
