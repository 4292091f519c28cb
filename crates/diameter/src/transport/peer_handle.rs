//! A cheap, cloneable handle on one peer: who it is, its state and
//! counters, and the way to send it requests (RAR, ASR...) and await their
//! answers, or to close it.
//!
//! For an initiator the handle outlives connections: it works while a
//! connection is open and says [`RequestError::NotConnected`] otherwise.

use super::counters::PeerCounters;
use super::request_error::RequestError;
use crate::codec::{Message, MessageBuilder, TooLong};
use crate::peer::{
    DisconnectCause, LocalNode, NegotiatedApps, PeerCapabilities, PeerSettings, PeerState,
    WatchdogState,
};
use bytes::{Bytes, BytesMut};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::{mpsc, oneshot, watch};

/// A local order to a connection task.
#[derive(Debug)]
pub(crate) enum Control {
    /// Close gracefully with DPR.
    Close(DisconnectCause),
    /// Drop the connection now (it lost an election or was replaced).
    Abort,
    /// Send a DWR now and say on this channel when the peer sends
    /// anything back; dropped unanswered when it cannot be probed.
    Probe(oneshot::Sender<()>),
}

/// The live parts of one connection that handles reach.
pub(crate) struct Link {
    pub(crate) out: mpsc::Sender<Bytes>,
    pub(crate) control: mpsc::UnboundedSender<Control>,
    pub(crate) pending: Mutex<HashMap<u32, oneshot::Sender<Message>>>,
    pub(crate) next_hbh: AtomicU32,
}

impl Link {
    pub(crate) fn pending(&self) -> MutexGuard<'_, HashMap<u32, oneshot::Sender<Message>>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Forgets a request's waiter when the request ends, whatever the way.
struct PendingGuard<'a> {
    link: &'a Link,
    hbh: u32,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        self.link.pending().remove(&self.hbh);
    }
}

/// What is known about the connection now.
#[derive(Default)]
pub(crate) struct ConnInfo {
    pub(crate) link: Option<Arc<Link>>,
    pub(crate) remote_addr: Option<SocketAddr>,
    pub(crate) caps: Option<Arc<PeerCapabilities>>,
    pub(crate) origin_host: Option<Arc<str>>,
    pub(crate) negotiated: NegotiatedApps,
    /// Whether the connection runs over TLS.
    pub(crate) tls: bool,
}

pub(crate) struct PeerShared {
    pub(crate) local: Arc<LocalNode>,
    pub(crate) settings: Arc<PeerSettings>,
    pub(crate) state: watch::Sender<PeerState>,
    pub(crate) watchdog: AtomicU8,
    pub(crate) conn: Mutex<ConnInfo>,
    pub(crate) counters: PeerCounters,
    /// Set by [`PeerHandle::close`]: an initiator stops reconnecting.
    pub(crate) closed_by_user: AtomicBool,
    e2e_high: u32,
    e2e_counter: AtomicU32,
}

impl PeerShared {
    pub(crate) fn new(
        local: Arc<LocalNode>,
        settings: Arc<PeerSettings>,
        initial: PeerState,
        e2e_seed: u32,
    ) -> PeerShared {
        PeerShared {
            e2e_high: (local.origin_state_id & 0xfff) << 20,
            e2e_counter: AtomicU32::new(e2e_seed),
            local,
            settings,
            state: watch::Sender::new(initial),
            watchdog: AtomicU8::new(0),
            conn: Mutex::new(ConnInfo::default()),
            counters: PeerCounters::default(),
            closed_by_user: AtomicBool::new(false),
        }
    }

    pub(crate) fn conn(&self) -> MutexGuard<'_, ConnInfo> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Publishes the state; waking watchers only on a change keeps the
    /// per-message path free of the watch channel's write lock.
    pub(crate) fn set_state(&self, s: PeerState) {
        self.state.send_if_modified(|cur| {
            let changed = *cur != s;
            *cur = s;
            changed
        });
    }

    pub(crate) fn set_watchdog(&self, w: WatchdogState) {
        let v = match w {
            WatchdogState::Okay => 0,
            WatchdogState::Suspect => 1,
            WatchdogState::Down => 2,
        };
        self.watchdog.store(v, Relaxed);
    }

    fn next_e2e(&self) -> u32 {
        // High 12 bits from Origin-State-Id, low 20 a counter (RFC 6733 §3).
        self.e2e_high | (self.e2e_counter.fetch_add(1, Relaxed) & 0xf_ffff)
    }
}

/// A handle on one peer. Clone freely: it is one `Arc`.
#[derive(Clone)]
pub struct PeerHandle {
    pub(crate) inner: Arc<PeerShared>,
}

impl std::fmt::Debug for PeerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerHandle")
            .field("origin_host", &self.origin_host())
            .field("remote_addr", &self.remote_addr())
            .field("state", &self.state())
            .finish()
    }
}

impl PeerHandle {
    pub(crate) fn new(inner: Arc<PeerShared>) -> PeerHandle {
        PeerHandle { inner }
    }

    /// Whether two handles name the same peer object.
    pub fn same(&self, other: &PeerHandle) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The peer's Origin-Host, once its CER/CEA was accepted.
    pub fn origin_host(&self) -> Option<Arc<str>> {
        self.inner.conn().origin_host.clone()
    }

    /// Everything the peer advertised in its CER/CEA.
    pub fn capabilities(&self) -> Option<Arc<PeerCapabilities>> {
        self.inner.conn().caps.clone()
    }

    /// The peer's transport address (the current connection's).
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.inner.conn().remote_addr
    }

    /// Whether the current (or last) connection runs over TLS.
    pub fn is_tls(&self) -> bool {
        self.inner.conn().tls
    }

    /// The connection state.
    pub fn state(&self) -> PeerState {
        *self.inner.state.borrow()
    }

    /// Whether application messages can flow now.
    pub fn is_open(&self) -> bool {
        self.state() == PeerState::Open
    }

    /// The RFC 3539 watchdog state: route no new requests to a SUSPECT peer.
    pub fn watchdog(&self) -> WatchdogState {
        match self.inner.watchdog.load(Relaxed) {
            0 => WatchdogState::Okay,
            1 => WatchdogState::Suspect,
            _ => WatchdogState::Down,
        }
    }

    /// Whether `app_id` was negotiated with the peer.
    pub fn supports(&self, app_id: u32) -> bool {
        self.inner.conn().negotiated.contains(app_id)
    }

    /// Our own identity (for Origin-Host/Origin-Realm in answers).
    pub fn local(&self) -> &LocalNode {
        &self.inner.local
    }

    /// This peer's counters.
    pub fn counters(&self) -> &PeerCounters {
        &self.inner.counters
    }

    /// Waits until the state satisfies `f` (e.g. `PeerState::Open`), or the
    /// handle's peer is gone for good.
    pub async fn wait_state(&self, f: impl Fn(PeerState) -> bool) -> PeerState {
        let mut rx = self.inner.state.subscribe();
        let seen = match rx.wait_for(|s| f(*s)).await {
            Ok(s) => *s,
            Err(_) => self.state(),
        };
        seen
    }

    /// Sends a request and awaits its answer. The transport writes the
    /// header (R and P flags, `cmd`, `app_id`, fresh hop-by-hop and
    /// end-to-end ids); `build` adds the AVPs: Session-Id first when the
    /// command has one, then Origin-Host/Origin-Realm (see
    /// [`local`](Self::local)), Destination-Realm and the rest. Fails after
    /// `request_timeout`, or at once when the peer is not open or the
    /// application was not negotiated with it.
    pub async fn request(
        &self,
        app_id: u32,
        cmd: u32,
        build: impl FnOnce(&mut MessageBuilder<'_>),
    ) -> Result<Message, RequestError> {
        self.request_within(self.inner.settings.request_timeout, app_id, cmd, build)
            .await
    }

    /// As [`request`](Self::request), waiting at most `timeout` for the
    /// answer instead of the configured `request_timeout`.
    pub async fn request_within(
        &self,
        timeout: std::time::Duration,
        app_id: u32,
        cmd: u32,
        build: impl FnOnce(&mut MessageBuilder<'_>),
    ) -> Result<Message, RequestError> {
        let link = {
            let conn = self.inner.conn();
            let Some(link) = conn.link.clone() else {
                return Err(RequestError::NotConnected);
            };
            if !conn.negotiated.contains(app_id) {
                return Err(if self.is_open() {
                    RequestError::ApplicationNotNegotiated(app_id)
                } else {
                    RequestError::NotOpen
                });
            }
            link
        };
        if !self.is_open() {
            return Err(RequestError::NotOpen);
        }
        let hbh = link.next_hbh.fetch_add(1, Relaxed);
        let e2e = self.inner.next_e2e();
        let mut buf = BytesMut::with_capacity(512);
        let mut b = MessageBuilder::request(&mut buf, cmd, app_id, hbh, e2e);
        build(&mut b);
        // The peer enforces the same maximum: a longer request would only
        // close the connection (or, over 24 bits, desynchronise it).
        let max = self.inner.settings.max_message_len as usize;
        match b.try_finish() {
            Ok(len) if len <= max => {}
            Ok(len) | Err(TooLong { len }) => return Err(RequestError::TooLarge { len, max }),
        }
        let (tx, rx) = oneshot::channel();
        link.pending().insert(hbh, tx);
        // Removes the waiter however this ends: answer, timeout, or the
        // caller dropping the future.
        let _waiter = PendingGuard { link: &link, hbh };
        PeerCounters::add(&self.inner.counters.requests_out, 1);
        let exchange = async {
            link.out
                .send(buf.freeze())
                .await
                .map_err(|_| RequestError::Disconnected)?;
            rx.await.map_err(|_| RequestError::Disconnected)
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => {
                PeerCounters::add(&self.inner.counters.request_timeouts, 1);
                self.inner.counters.error(format!(
                    "no answer to our command {cmd} within {:?}",
                    self.inner.settings.request_timeout
                ));
                Err(RequestError::Timeout)
            }
        }
    }

    /// Closes the connection gracefully: DPR with `cause`, then close when
    /// the DPA arrives (bounded by `dpa_timeout`). For an initiator this
    /// also stops reconnecting.
    pub fn close(&self, cause: DisconnectCause) {
        self.inner.closed_by_user.store(true, Relaxed);
        if let Some(link) = self.inner.conn().link.clone() {
            let _ = link.control.send(Control::Close(cause));
        }
    }

    /// Whether this connection is alive: it is open and its peer sends
    /// something (a DWA to the DWR sent now) within `bound`.
    pub(crate) async fn probe(&self, bound: std::time::Duration) -> bool {
        let Some(link) = self.inner.conn().link.clone() else {
            return false;
        };
        let (tx, rx) = oneshot::channel();
        if link.control.send(Control::Probe(tx)).is_err() {
            return false;
        }
        drop(link);
        matches!(tokio::time::timeout(bound, rx).await, Ok(Ok(())))
    }

    pub(crate) fn abort(&self) {
        if let Some(link) = self.inner.conn().link.clone() {
            let _ = link.control.send(Control::Abort);
        }
    }
}
