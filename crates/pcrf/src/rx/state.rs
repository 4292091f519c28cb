//! What the Rx service keeps beside the session table: its counters for
//! /metrics and the AF sessions it aborted lately (their STR is then
//! answered 2001 although the session is gone).

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;

/// How many aborted AF session ids are remembered.
const ABORTED_REMEMBERED: usize = 4096;

/// Rx counters and the recently aborted Rx sessions.
#[derive(Default)]
pub struct RxState {
    pub binding_failures: AtomicU64,
    pub af_notifications: AtomicU64,
    pub policy_errors: AtomicU64,
    /// (Rx Session-Id, the AF's Origin-Host): only that AF's STR is
    /// answered 2001 for it.
    aborted: Mutex<VecDeque<(String, String)>>,
}

impl RxState {
    pub(crate) fn remember_aborted(&self, id: &str, af_host: &str) {
        let mut q = self.aborted.lock();
        if q.len() >= ABORTED_REMEMBERED {
            q.pop_front();
        }
        q.push_back((id.to_owned(), af_host.to_owned()));
    }

    /// Forgets the aborted session `id` when `served` accepts its AF's
    /// Origin-Host (the STR comes from that AF); whether it did.
    pub(crate) fn take_aborted(&self, id: &str, served: impl FnOnce(&str) -> bool) -> bool {
        let mut q = self.aborted.lock();
        match q.iter().position(|(x, _)| x == id) {
            Some(at) if served(&q[at].1) => {
                q.remove(at);
                true
            }
            _ => false,
        }
    }
}
