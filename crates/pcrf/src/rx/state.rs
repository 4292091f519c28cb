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
    aborted: Mutex<VecDeque<String>>,
}

impl RxState {
    pub(crate) fn remember_aborted(&self, id: &str) {
        let mut q = self.aborted.lock();
        if q.len() >= ABORTED_REMEMBERED {
            q.pop_front();
        }
        q.push_back(id.to_owned());
    }

    pub(crate) fn take_aborted(&self, id: &str) -> bool {
        let mut q = self.aborted.lock();
        match q.iter().position(|x| x == id) {
            Some(at) => {
                q.remove(at);
                true
            }
            None => false,
        }
    }
}
