//! What the Sy service keeps: every subscriber's Sy session, its peer (the
//! connections to the OCSs, or the CHF; set once the node starts), what makes
//! its Session-Ids unique, and its counters for /metrics.

use crate::session::GxSession;
use crate::sy::peer::SpendingPeer;
use crate::sy::table::SyTable;
use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// The node's Sy part: the Sy sessions, the peer and counters.
pub struct SyPart {
    pub(crate) table: SyTable,
    pub(crate) peer: OnceLock<SpendingPeer>,
    /// Session-Id uniqueness: start time and a counter.
    pub(crate) boot_secs: u64,
    pub(crate) next_id: AtomicU64,
    /// SLRs that got no usable answer: the policy saw "unknown".
    pub(crate) fallbacks: AtomicU64,
    /// Counters the peer said it does not know (5570,
    /// UNKNOWN_POLICY_COUNTERS).
    pub(crate) unknown_counters: AtomicU64,
    /// Sessions that ended while another of the subscriber's sessions
    /// still used its Sy session, which was kept.
    pub(crate) kept: AtomicU64,
}

impl SyPart {
    /// From the records loaded at start-up.
    pub fn recover(sessions: &[GxSession]) -> SyPart {
        SyPart {
            table: SyTable::recover(sessions),
            peer: OnceLock::new(),
            boot_secs: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            next_id: AtomicU64::new(1),
            fallbacks: AtomicU64::new(0),
            unknown_counters: AtomicU64::new(0),
            kept: AtomicU64::new(0),
        }
    }
}
