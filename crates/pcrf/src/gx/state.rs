//! What the Gx service keeps beside the session table: its counters of
//! pushes for /metrics (why a push happens and what a push of several
//! sessions did are shared: pcc/push.rs).

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
