//! What the Sd service keeps beside the session table: which Gx session
//! holds each TDF session (rebuilt from the records at start-up), the TDF
//! sessions released lately, and its counters for /metrics.

use crate::session::{GxSession, SessionState};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

/// Counters of Sd, rendered into /metrics.
#[derive(Default)]
pub struct SdCounters {
    pub unknown_sessions: AtomicU64,
    pub unbound: AtomicU64,
    pub opened: AtomicU64,
    pub open_failed: AtomicU64,
    pub app_reports: AtomicU64,
    pub released: AtomicU64,
    pub invalid_adc: AtomicU64,
}

/// Sd state beside the session table: which Gx session holds each Sd
/// session (rebuilt from the records at start-up).
pub struct SdState {
    pub(crate) index: RwLock<HashMap<String, String>>,
    /// Sd Session-Id -> (the TDF's Origin-Host, when it was released):
    /// only that TDF's CCR-T is answered 2001 for it.
    pub(crate) released: Mutex<HashMap<String, (String, Instant)>>,
    pub(crate) next_id: AtomicU64,
    pub counters: SdCounters,
}

impl SdState {
    /// The index of the open Gx sessions' TDF sessions.
    pub fn from_sessions(sessions: &[GxSession]) -> SdState {
        let index = sessions
            .iter()
            .filter(|s| s.state == SessionState::Open)
            .filter_map(|s| s.tdf.as_ref().map(|t| (t.id.clone(), s.id.to_string())))
            .collect();
        SdState {
            index: RwLock::new(index),
            released: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            counters: SdCounters::default(),
        }
    }

    pub(crate) fn gx_of(&self, sd_id: &str) -> Option<String> {
        self.index.read().get(sd_id).cloned()
    }

    /// TDF sessions in memory (a gauge).
    pub(crate) fn len(&self) -> usize {
        self.index.read().len()
    }
}
