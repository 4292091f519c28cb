//! The PostgreSQL connection's health, shared with the rest of the server:
//! the store lives on the writer thread behind `Box<dyn Store>`, but
//! `/v1/ready` and the metrics need to know whether the database is
//! reachable and how often the connection was replaced or lost.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A cloneable read-only view of one store's connection, or of the
/// connections of every shard's store together (`combine`).
#[derive(Clone, Debug)]
pub struct ConnectionMonitor(Arc<[Arc<State>]>);

impl Default for ConnectionMonitor {
    fn default() -> Self {
        ConnectionMonitor(Arc::new([Arc::new(State::default())]))
    }
}

#[derive(Debug, Default)]
struct State {
    up: AtomicBool,
    reconnects: AtomicU64,
    failures: AtomicU64,
}

impl ConnectionMonitor {
    /// One view of several stores' connections (the shards').
    pub fn combine(monitors: &[ConnectionMonitor]) -> Self {
        let states: Vec<Arc<State>> = monitors.iter().flat_map(|m| m.0.iter().cloned()).collect();
        ConnectionMonitor(states.into())
    }

    /// Whether the store holds a connection now (false from a failure until
    /// the next successful reconnect): what `/v1/ready` should report.
    /// Combined: whether every one does.
    pub fn is_up(&self) -> bool {
        self.0.iter().all(|s| s.up.load(Ordering::Relaxed))
    }

    /// Connections opened after the first (lifetime replacements and
    /// reconnects after failures).
    pub fn reconnects(&self) -> u64 {
        self.0
            .iter()
            .map(|s| s.reconnects.load(Ordering::Relaxed))
            .sum()
    }

    /// Connections lost and connection attempts failed.
    pub fn failures(&self) -> u64 {
        self.0
            .iter()
            .map(|s| s.failures.load(Ordering::Relaxed))
            .sum()
    }

    /// The state a store updates: its own (a store's monitor has one).
    fn own(&self) -> &State {
        &self.0[0]
    }

    pub(super) fn connected(&self, first: bool) {
        self.own().up.store(true, Ordering::Relaxed);
        if !first {
            self.own().reconnects.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(super) fn lost(&self) {
        self.own().up.store(false, Ordering::Relaxed);
        self.own().failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn attempt_failed(&self) {
        self.own().failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn closed(&self) {
        self.own().up.store(false, Ordering::Relaxed);
    }
}
