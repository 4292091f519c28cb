//! The registry of open peers by Origin-Host, so the application can find
//! the connection of the PCEF that owns a session (to send it a RAR), list
//! peers for metrics, and so the transport can refuse duplicates and run
//! the election of RFC 6733 §5.6.4 (see [`crate::peer::wins_election`]).
//!
//! Keys compare case-insensitively (Origin-Host is an FQDN); lookups
//! lower-case into a stack buffer, so they do not allocate.

use super::awaiting_cer::{AwaitingCerCosts, ErrorAwaitingCer};
use super::peer_handle::PeerHandle;
use crate::peer::{wins_election, Election, PeerState};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Longest DiameterIdentity looked up without allocating (an FQDN is at most 255).
const STACK_KEY: usize = 256;

#[derive(Default)]
struct Entries {
    /// Open peers, by lower-case Origin-Host.
    open: HashMap<Box<str>, PeerHandle>,
    /// Our initiator connections waiting for CEA, by the Origin-Host we
    /// expect (for the election).
    connecting: HashMap<Box<str>, PeerHandle>,
}

/// Open peers by Origin-Host. Cheap to clone (one `Arc`); shared by a
/// node's server and initiators.
#[derive(Clone, Default)]
pub struct PeerTable {
    inner: Arc<Mutex<Entries>>,
    listener: Arc<ListenerCounters>,
    awaiting_cer_costs: Arc<AwaitingCerCosts>,
}

/// What the node's listeners count outside any one peer.
#[derive(Default)]
struct ListenerCounters {
    /// Connections closed because `max_awaiting_cer` were already waiting.
    closed_awaiting_cer: AtomicU64,
    /// Connections accepted and not yet past CER.
    awaiting_cer: AtomicU64,
}

/// The transport's decision on a CER that passed the peer machine's checks.
pub(crate) enum Admission {
    Accept,
    /// Refuse with this Result-Code and text.
    Refuse(u32, &'static str),
    /// The peer is open through this other connection: probe it first.
    Occupied(PeerHandle),
}

fn with_lower<R>(host: &str, f: impl FnOnce(&str) -> R) -> R {
    let b = host.as_bytes();
    if b.len() <= STACK_KEY && !b.iter().any(u8::is_ascii_uppercase) {
        return f(host);
    }
    if b.len() <= STACK_KEY {
        let mut buf = [0u8; STACK_KEY];
        for (d, s) in buf.iter_mut().zip(b) {
            *d = s.to_ascii_lowercase();
        }
        // Lower-casing ASCII bytes keeps UTF-8 valid.
        match std::str::from_utf8(&buf[..b.len()]) {
            Ok(s) => f(s),
            Err(_) => f(&host.to_ascii_lowercase()),
        }
    } else {
        f(&host.to_ascii_lowercase())
    }
}

impl PeerTable {
    /// An empty table.
    pub fn new() -> PeerTable {
        PeerTable::default()
    }

    /// Connections closed, unanswered, because `max_awaiting_cer` accepted
    /// connections were already waiting for their CER.
    pub fn closed_awaiting_cer(&self) -> u64 {
        self.listener.closed_awaiting_cer.load(Ordering::Relaxed)
    }

    /// Accepted connections that have not yet completed CER.
    pub fn awaiting_cer(&self) -> u64 {
        self.listener.awaiting_cer.load(Ordering::Relaxed)
    }

    /// Connections closed before their capabilities exchange, by why.
    pub fn errors_awaiting_cer(&self) -> [(ErrorAwaitingCer, u64); ErrorAwaitingCer::ALL.len()] {
        self.awaiting_cer_costs.errors()
    }

    /// Bytes that connections awaiting CER hold in partly received
    /// messages, together.
    pub fn buffered_awaiting_cer(&self) -> u64 {
        self.awaiting_cer_costs.buffered()
    }

    pub(crate) fn awaiting_cer_costs(&self) -> &Arc<AwaitingCerCosts> {
        &self.awaiting_cer_costs
    }

    pub(crate) fn count_closed_awaiting_cer(&self) {
        self.listener
            .closed_awaiting_cer
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_awaiting_cer(&self, n: usize) {
        self.listener
            .awaiting_cer
            .store(n as u64, Ordering::Relaxed);
    }

    fn entries(&self) -> MutexGuard<'_, Entries> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open peer with this Origin-Host (case-insensitive).
    pub fn get(&self, origin_host: &str) -> Option<PeerHandle> {
        with_lower(origin_host, |k| self.entries().open.get(k).cloned())
    }

    /// Every open peer.
    pub fn peers(&self) -> Vec<PeerHandle> {
        self.entries().open.values().cloned().collect()
    }

    /// How many peers are open.
    pub fn len(&self) -> usize {
        self.entries().open.len()
    }

    /// Whether no peer is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A responder connection's peer passed the CER checks: decide on
    /// duplicates and elections, and register it when accepted. When the
    /// peer is already open through another live connection the answer is
    /// [`Admission::Occupied`]: the caller probes that connection and, if it
    /// is dead, asks again with it as `replacing`, which is then dropped.
    pub(crate) fn admit(
        &self,
        handle: &PeerHandle,
        local_host: &str,
        replacing: Option<&PeerHandle>,
    ) -> Admission {
        let Some(caps) = handle.capabilities() else {
            return Admission::Refuse(
                crate::result_code::DIAMETER_UNABLE_TO_COMPLY,
                "no capabilities",
            );
        };
        let key = caps.origin_host.to_ascii_lowercase().into_boxed_str();
        let mut e = self.entries();
        if let Some(old) = e.open.get(&key) {
            // A connection already closing is no obstacle.
            if old.state() != PeerState::Closed {
                if !replacing.is_some_and(|r| r.same(old)) {
                    return Admission::Occupied(old.clone());
                }
                // Probed and silent: a half-open connection of a restarted
                // peer. Its own task unregisters it when it ends.
                old.abort();
            }
        }
        if let Some(ours) = e.connecting.get(&key) {
            match wins_election(local_host, &caps.origin_host) {
                Election::Won => {
                    ours.abort();
                    e.connecting.remove(&key);
                }
                Election::Lost => {
                    return Admission::Refuse(crate::result_code::ELECTION_LOST, "election lost");
                }
            }
        }
        e.open.insert(key, handle.clone());
        Admission::Accept
    }

    /// An initiator connection became open: register it unless the peer is
    /// already open through another connection (then `false`).
    pub(crate) fn register_initiated(&self, handle: &PeerHandle, expected: Option<&str>) -> bool {
        let Some(host) = handle.origin_host() else {
            return false;
        };
        let key = host.to_ascii_lowercase().into_boxed_str();
        let mut e = self.entries();
        if let Some(exp) = expected {
            with_lower(exp, |k| {
                if e.connecting.get(k).is_some_and(|h| h.same(handle)) {
                    e.connecting.remove(k);
                }
            });
        }
        if e.open.get(&key).is_some_and(|h| !h.same(handle)) {
            return false;
        }
        e.open.insert(key, handle.clone());
        true
    }

    /// An initiator is about to send its CER to `expected_host`.
    pub(crate) fn connecting(&self, handle: &PeerHandle, expected_host: &str) {
        let key = expected_host.to_ascii_lowercase().into_boxed_str();
        self.entries().connecting.insert(key, handle.clone());
    }

    /// Whether a peer with this Origin-Host is open through a connection
    /// other than `handle`'s.
    pub(crate) fn open_elsewhere(&self, host: &str, handle: &PeerHandle) -> bool {
        with_lower(host, |k| {
            self.entries()
                .open
                .get(k)
                .is_some_and(|h| !h.same(handle) && h.state() != PeerState::Closed)
        })
    }

    /// A connection ended: forget it wherever it is.
    pub(crate) fn remove(&self, handle: &PeerHandle) {
        let mut e = self.entries();
        e.open.retain(|_, h| !h.same(handle));
        e.connecting.retain(|_, h| !h.same(handle));
    }
}
