//! One connection's task: reads and frames messages, feeds the peer state
//! machine, routes application requests to the handler (concurrently, up to
//! the in-flight cap) and answers to their waiters, and hands everything to
//! write to the connection's writer task.

use super::awaiting_cer::{BufferCharge, ErrorAwaitingCer};
use super::counters::PeerCounters;
use super::error_answer;
use super::handler::Handler;
use super::node::{Node, NodeShared};
use super::peer_handle::{Control, Link, PeerHandle, PeerShared};
use super::peer_table::Admission;
use super::received;
use super::tls::TlsPeer;
use super::writer::write_loop;
use crate::codec::{frame_len, DiameterError, FrameError, Message};
use crate::peer::{
    Action, CloseReason, DisconnectCause, Inbound, Jitter, PeerMachine, PeerState, Role,
};
use crate::result_code;
use bytes::{Bytes, BytesMut};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// Read at least this much free space before each read.
const READ_CHUNK: usize = 64 * 1024;
/// The same before the capabilities exchange: a CER is a few hundred
/// bytes, and a connection that has not sent one is nobody we know.
const READ_CHUNK_AWAITING_CER: usize = 4 * 1024;

/// One request being handled: holds its permit and the in-flight gauge,
/// released even if the handler panics.
struct InFlight {
    shared: Arc<PeerShared>,
    _permit: OwnedSemaphorePermit,
}

impl InFlight {
    fn new(shared: Arc<PeerShared>, permit: OwnedSemaphorePermit) -> InFlight {
        PeerCounters::add(&shared.counters.in_flight, 1);
        InFlight {
            shared,
            _permit: permit,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        PeerCounters::sub(&self.shared.counters.in_flight, 1);
    }
}

/// How a connection ended.
pub(crate) struct Ended {
    pub(crate) reason: CloseReason,
    pub(crate) was_open: bool,
}

/// A node's connection over a stream it is given ([`Node`] itself is
/// below this module).
impl<H: Handler> Node<H> {
    /// Runs one connection over any byte stream (a TLS stream, an
    /// in-memory pipe...) in the given role, once, without reconnecting.
    /// The task ends with the reason the connection closed; close it with
    /// [`PeerHandle::close`]. Without a socket there is no local address to
    /// advertise, so set
    /// [`LocalNode::host_ip_addresses`](crate::peer::LocalNode::host_ip_addresses)
    /// for peers that require Host-IP-Address.
    pub fn attach<S>(
        &self,
        stream: S,
        remote: Option<SocketAddr>,
        role: Role,
        expected_host: Option<&str>,
    ) -> (PeerHandle, JoinHandle<CloseReason>)
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let initial = match role {
            Role::Responder => PeerState::WaitCer,
            Role::Initiator => PeerState::WaitCea,
        };
        let shared = Arc::new(PeerShared::new(
            self.inner.local.clone(),
            self.inner.settings.clone(),
            initial,
            Jitter::from_entropy().next_u64() as u32,
        ));
        let handle = PeerHandle::new(shared.clone());
        let node = self.inner.clone();
        let expected = expected_host.map(Arc::from);
        // No node-wide shutdown for a lone connection: the sender goes away.
        let (_, never) = watch::channel(None);
        let task = tokio::spawn(async move {
            run(
                node, stream, remote, None, role, shared, expected, None, never,
            )
            .await
            .reason
        });
        (handle, task)
    }
}

/// The room to make in the read buffer for a message announced `len`
/// bytes long of which `buffered` have arrived: what is missing, but no
/// more than has arrived already (at least one read chunk), so the
/// buffer at most doubles per step. Never the announced length up front:
/// a length field costs the sender four bytes, the memory is ours.
fn room_for_more(buffered: usize, len: usize) -> usize {
    len.saturating_sub(buffered).min(buffered.max(READ_CHUNK))
}

fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

struct Conn<H> {
    node: Arc<NodeShared<H>>,
    shared: Arc<PeerShared>,
    handle: PeerHandle,
    link: Arc<Link>,
    machine: PeerMachine,
    role: Role,
    expected_host: Option<Arc<str>>,
    /// `Some` when the connection runs over TLS.
    tls: Option<TlsPeer>,
    in_flight: Arc<Semaphore>,
    was_open: bool,
    /// Waiting for any sign of life after a probe DWR.
    probes: Vec<tokio::sync::oneshot::Sender<()>>,
}

/// Runs one connection to its end.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run<S, H>(
    node: Arc<NodeShared<H>>,
    stream: S,
    remote: Option<SocketAddr>,
    local_ip: Option<IpAddr>,
    role: Role,
    shared: Arc<PeerShared>,
    expected_host: Option<Arc<str>>,
    tls: Option<TlsPeer>,
    mut shutdown: watch::Receiver<Option<DisconnectCause>>,
) -> Ended
where
    S: AsyncRead + AsyncWrite + Send + 'static,
    H: Handler,
{
    let settings = node.settings.clone();
    let (mut rd, wr) = tokio::io::split(stream);
    let queue = settings.max_in_flight.saturating_mul(2).clamp(64, 65_536);
    let (out_tx, out_rx) = mpsc::channel::<Bytes>(queue);
    let (ctl_tx, mut ctl_rx) = mpsc::unbounded_channel::<Control>();
    let mut jitter = Jitter::from_entropy();
    let link = Arc::new(Link {
        out: out_tx,
        control: ctl_tx,
        pending: Mutex::default(),
        next_hbh: AtomicU32::new(jitter.next_u64() as u32),
    });
    {
        let mut c = shared.conn();
        c.link = Some(link.clone());
        c.remote_addr = remote;
        c.caps = None;
        c.origin_host = None;
        c.negotiated = Default::default();
        c.tls = tls.is_some();
    }
    shared.set_watchdog(crate::peer::WatchdogState::Okay);
    PeerCounters::add(&shared.counters.connects, 1);
    let writer = tokio::spawn(write_loop(wr, out_rx, shared.clone()));
    let handle = PeerHandle::new(shared.clone());
    let t0 = now();
    let machine = match role {
        Role::Responder => PeerMachine::responder(
            node.local.clone(),
            settings.clone(),
            remote,
            local_ip,
            t0,
            jitter,
        ),
        Role::Initiator => {
            if let Some(h) = &expected_host {
                node.table.connecting(&handle, h);
            }
            PeerMachine::initiator(
                node.local.clone(),
                settings.clone(),
                remote,
                local_ip,
                t0,
                jitter,
            )
        }
    };
    let mut conn = Conn {
        in_flight: Arc::new(Semaphore::new(settings.max_in_flight.max(1))),
        node,
        shared,
        handle,
        link,
        machine,
        role,
        expected_host,
        tls,
        was_open: false,
        probes: Vec::new(),
    };
    let max_len = settings.max_message_len;
    let max_len_awaiting_cer = settings.max_message_len_awaiting_cer.min(max_len);
    let buffer_budget = settings.max_buffered_awaiting_cer;
    let costs = conn.node.table.awaiting_cer_costs().clone();
    let mut charge = BufferCharge::new(costs.clone());
    let mut rbuf = BytesMut::with_capacity(READ_CHUNK_AWAITING_CER);
    let mut shutdown_seen = shutdown.borrow().is_some();
    if let Some(cause) = *shutdown.borrow() {
        conn.machine.close(t0, cause);
    }
    let mut ended = conn.pump().await;
    while ended.is_none() {
        let chunk = if conn.was_open {
            READ_CHUNK
        } else {
            READ_CHUNK_AWAITING_CER
        };
        if rbuf.capacity() - rbuf.len() < chunk / 4 {
            rbuf.reserve(chunk);
        }
        tokio::select! {
            r = rd.read_buf(&mut rbuf) => match r {
                Ok(0) | Err(_) => conn.machine.transport_closed(),
                Ok(n) => {
                    PeerCounters::add(&conn.shared.counters.bytes_in, n as u64);
                    // Drain every complete message now in the buffer.
                    loop {
                        let limit = if conn.was_open { max_len } else { max_len_awaiting_cer };
                        match frame_len(&rbuf, limit) {
                            Ok(Some(len)) if rbuf.len() >= len => {
                                let frame = rbuf.split_to(len).freeze();
                                conn.on_frame(frame).await;
                                // Act on each message before the next (a CER
                                // must be admitted before what follows it).
                                ended = conn.pump().await;
                                if ended.is_some() {
                                    break;
                                }
                            }
                            Ok(Some(len)) => {
                                rbuf.reserve(room_for_more(rbuf.len(), len));
                                break;
                            }
                            Ok(None) => break,
                            // The stream cannot be re-synchronised (RFC 6733 §3).
                            Err(e) if conn.was_open => {
                                tracing::warn!(peer = ?remote, error = %e, "bad framing, closing");
                                ended = Some(CloseReason::ProtocolViolation);
                                break;
                            }
                            Err(e) => {
                                let kind = match e {
                                    FrameError::TooLong { .. } => ErrorAwaitingCer::TooLong,
                                    FrameError::Version(_) | FrameError::BadLength(_) => {
                                        ErrorAwaitingCer::Framing
                                    }
                                };
                                costs.error(kind, remote, "bad framing before CER, closing", &e);
                                ended = Some(CloseReason::ProtocolViolation);
                                break;
                            }
                        }
                    }
                    if conn.was_open {
                        charge.release();
                    } else if ended.is_none() && !charge.set(rbuf.len(), buffer_budget) {
                        costs.error(
                            ErrorAwaitingCer::BufferBudget,
                            remote,
                            "connections awaiting CER hold too many bytes, closing",
                            &format_args!(
                                "{} bytes of a partial message, over max_buffered_awaiting_cer ({buffer_budget}) together",
                                rbuf.len()
                            ),
                        );
                        ended = Some(CloseReason::ProtocolViolation);
                    }
                }
            },
            _ = sleep_until(conn.machine.next_deadline()) => conn.machine.on_timer(now()),
            Some(ctl) = ctl_rx.recv() => match ctl {
                Control::Close(cause) => {
                    conn.shared.closed_by_user.store(true, std::sync::atomic::Ordering::Relaxed);
                    conn.machine.close(now(), cause);
                }
                Control::Abort => conn.machine.transport_closed(),
                Control::Probe(tx) => {
                    if conn.machine.probe() {
                        conn.probes.push(tx);
                    }
                }
            },
            r = shutdown.changed(), if !shutdown_seen => {
                shutdown_seen = true;
                if r.is_ok() {
                    if let Some(cause) = *shutdown.borrow() {
                        conn.machine.close(now(), cause);
                    }
                }
            }
        }
        if ended.is_none() {
            ended = conn.pump().await;
        }
    }
    // The buffer and its charge go now, not after the writer's flush.
    drop(rbuf);
    drop(charge);
    let reason = ended.unwrap_or(CloseReason::TransportClosed);
    conn.finish(reason, writer).await
}

impl<H: Handler> Conn<H> {
    /// Carries out the machine's actions; `Some` once it says close.
    async fn pump(&mut self) -> Option<CloseReason> {
        while let Some(a) = self.machine.poll_action() {
            match a {
                Action::Send(b) => self.send(b).await,
                Action::Admit => {
                    self.publish_peer();
                    if let Err(text) = self.check_transport() {
                        self.machine
                            .refuse(result_code::DIAMETER_UNKNOWN_PEER, text);
                    } else {
                        self.admit().await;
                    }
                }
                Action::Open if self.role == Role::Initiator && self.check_transport().is_err() => {
                    // The CEA came from a peer our TLS session does not
                    // authenticate: close without a word (no DPR to it).
                    self.machine.reject(result_code::DIAMETER_UNKNOWN_PEER);
                }
                Action::Open
                    if self.role == Role::Initiator && self.check_answering_peer().is_err() =>
                {
                    // Not the peer we meant to reach: the same.
                    self.machine.reject(result_code::DIAMETER_UNKNOWN_PEER);
                }
                Action::Open => {
                    self.publish_peer();
                    self.shared.set_state(PeerState::Open);
                    if self.role == Role::Initiator
                        && !self
                            .node
                            .table
                            .register_initiated(&self.handle, self.expected_host.as_deref())
                    {
                        // Already open through the connection the peer made to us.
                        self.machine
                            .close(now(), DisconnectCause::DoNotWantToTalkToYou);
                    } else {
                        self.was_open = true;
                        self.node.handler.peer_up(&self.handle);
                    }
                }
                Action::Watchdog(w) => self.shared.set_watchdog(w),
                Action::Alive => {
                    for tx in self.probes.drain(..) {
                        let _ = tx.send(());
                    }
                }
                Action::Close(reason) => {
                    self.shared.set_state(PeerState::Closed);
                    return Some(reason);
                }
            }
            self.shared.set_state(self.machine.state());
        }
        None
    }

    /// Decides on a CER that passed every check of its own: duplicates and
    /// elections (the peer table). A CER for a peer already open through
    /// another connection probes that connection with a DWR, bounded by
    /// `replace_probe`: silent, it is taken for the half-open leftover of a
    /// peer that restarted and replaced, so the peer is served at once
    /// (with or without a new Origin-State-Id); alive, it stays and the new
    /// CER is refused 5012 (RFC 6733 state table: R-Open + R-Conn-CER ->
    /// R-Reject), so nobody can push a live peer off by claiming its name.
    async fn admit(&mut self) {
        let local = self.node.local.origin_host.as_str();
        let mut replacing: Option<PeerHandle> = None;
        loop {
            match self
                .node
                .table
                .admit(&self.handle, local, replacing.as_ref())
            {
                Admission::Accept => return self.machine.accept(now()),
                Admission::Refuse(rc, text) => return self.machine.refuse(rc, text),
                // Another connection took the place while we probed.
                Admission::Occupied(_) if replacing.is_some() => {
                    return self.machine.refuse(
                        result_code::DIAMETER_UNABLE_TO_COMPLY,
                        "a connection with this peer is already open",
                    )
                }
                Admission::Occupied(old) => {
                    let bound = self.node.settings.replace_probe;
                    let host = self.machine.peer().map(|p| p.origin_host.clone());
                    let remote = self.machine.remote_addr();
                    if old.probe(bound).await {
                        tracing::warn!(
                            peer = ?host,
                            ?remote,
                            "CER refused (5012): this peer is already open through a connection that answers"
                        );
                        return self.machine.refuse(
                            result_code::DIAMETER_UNABLE_TO_COMPLY,
                            "a connection with this peer is already open",
                        );
                    }
                    tracing::warn!(
                        peer = ?host,
                        ?remote,
                        old = ?old.remote_addr(),
                        ?bound,
                        "the peer's open connection did not answer a DWR: replaced by the new one"
                    );
                    replacing = Some(old);
                }
            }
        }
    }

    /// The checks that depend on the transport, once the peer told its
    /// Origin-Host (CER or CEA): a peer configured as TLS-only must not be
    /// on plain TCP, and over TLS the peer's certificate must name that
    /// Origin-Host (RFC 6733 §13.1). `Err` is the text for the CEA; the
    /// reason is logged here.
    /// Initiator: the CEA must name the Origin-Host we expected at this
    /// address (when we named one), and one the allow-list admits from it;
    /// else another node answering there would pass for our peer.
    fn check_answering_peer(&self) -> Result<(), &'static str> {
        let Some(host) = self.machine.peer().map(|p| p.origin_host.as_str()) else {
            return Ok(());
        };
        let remote = self.machine.remote_addr();
        if let Some(expected) = &self.expected_host {
            if !expected.eq_ignore_ascii_case(host) {
                tracing::warn!(
                    peer = host,
                    expected = %expected,
                    ?remote,
                    "peer refused: its CEA names another Origin-Host than the one we connected to"
                );
                return Err("the CEA names another Origin-Host");
            }
        }
        if !self.node.settings.is_allowed(host, remote.map(|a| a.ip())) {
            tracing::warn!(
                peer = host,
                ?remote,
                "peer refused: its CEA names a peer not allowed"
            );
            return Err("peer not allowed");
        }
        Ok(())
    }

    fn check_transport(&self) -> Result<(), &'static str> {
        let Some(host) = self.machine.peer().map(|p| p.origin_host.as_str()) else {
            return Ok(());
        };
        let remote = self.machine.remote_addr();
        match &self.tls {
            None if self.node.settings.requires_tls(host) => {
                tracing::warn!(
                    peer = host,
                    ?remote,
                    "peer refused: it must connect over TLS, and came over plain TCP"
                );
                Err("this peer must connect over TLS")
            }
            None => Ok(()),
            // Our own certificate check (when we required one) already ran
            // in the handshake; a peer that presented none is identified by
            // the allow-list alone.
            Some(t) if t.certificate.is_none() => Ok(()),
            Some(t) => t.check_identity(host).map_err(|reason| {
                tracing::warn!(
                    peer = host,
                    ?remote,
                    %reason,
                    "peer refused: its TLS certificate does not name the Origin-Host it sent"
                );
                "the TLS certificate does not match the Origin-Host"
            }),
        }
    }

    /// Copies what the machine learned about the peer where handles see it.
    fn publish_peer(&self) {
        let mut c = self.shared.conn();
        if let Some(p) = self.machine.peer() {
            if c.caps.as_deref() != Some(p) {
                c.origin_host = Some(Arc::from(p.origin_host.as_str()));
                c.caps = Some(Arc::new(p.clone()));
            }
        }
        c.negotiated = self.machine.negotiated().clone();
    }

    /// Queues a message for the writer. A peer that has not let us write
    /// for a whole Tw is not reading: drop it rather than block forever
    /// (its watchdog could not fire while we wait here).
    async fn send(&mut self, b: Bytes) {
        let tw = self.node.settings.tw;
        match tokio::time::timeout(tw, self.link.out.send(b)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => self.machine.transport_closed(),
        }
    }

    async fn on_frame(&mut self, frame: Bytes) {
        PeerCounters::add(&self.shared.counters.messages_in, 1);
        let msg = match Message::parse(frame.clone()) {
            Ok(m) => m,
            Err(e) => {
                let open = matches!(self.machine.state(), PeerState::Open | PeerState::Closing);
                match error_answer::for_frame(&frame, &self.node.local, &e) {
                    Some(ans) if open => {
                        PeerCounters::add(&self.shared.counters.error_answers_out, 1);
                        self.shared
                            .counters
                            .error(format!("undecodable message answered: {e}"));
                        self.send(ans).await;
                    }
                    // Before the peer is open nothing but a good CER is
                    // acceptable; a bad answer has nobody to answer.
                    _ if !open => {
                        if !self.was_open {
                            self.node.table.awaiting_cer_costs().error(
                                ErrorAwaitingCer::Undecodable,
                                self.machine.remote_addr(),
                                "undecodable message before CER, closing",
                                &e,
                            );
                        }
                        self.machine.transport_closed()
                    }
                    _ => {}
                }
                return;
            }
        };
        match self.machine.receive(now(), msg) {
            Inbound::Consumed => {}
            Inbound::Application(msg) if msg.is_request() => self.dispatch(msg).await,
            Inbound::Application(msg) => self.route_answer(msg),
        }
    }

    fn route_answer(&self, msg: Message) {
        let waiter = self.link.pending().remove(&msg.hop_by_hop());
        let c = &self.shared.counters;
        match waiter {
            Some(tx) => {
                PeerCounters::add(&c.answers_in, 1);
                let _ = tx.send(msg);
            }
            None => PeerCounters::add(&c.unmatched_answers, 1),
        }
    }

    async fn reject(&mut self, msg: &Message, err: DiameterError) {
        PeerCounters::add(&self.shared.counters.error_answers_out, 1);
        self.shared.counters.error(format!(
            "command {} answered {}: {}",
            msg.command_code(),
            err.result_code,
            err.message
        ));
        let ans = error_answer::for_message(msg, &self.node.local, &err);
        self.send(ans).await;
    }

    /// Whether a request names another Origin-Host than the peer this
    /// connection's CER identified, from a peer not configured as a relay.
    /// Such a request is refused 3010 DIAMETER_UNKNOWN_PEER with the E bit:
    /// its originator is not a peer we exchanged capabilities with (RFC
    /// 6733 §5.3, §7.1.3), and only a relay (DRA) forwards others' requests.
    /// A protocol error rather than 5012 UNABLE_TO_COMPLY: the application
    /// never saw it, and nothing was applied. A missing Origin-Host is left
    /// to the application (5005). One search of the top-level AVPs and a
    /// byte compare: no allocation.
    fn speaks_for_another(&self, msg: &Message) -> bool {
        let Some(peer) = self.machine.peer() else {
            return false;
        };
        let Ok(Some(origin)) = msg.find(crate::dict::avp::ORIGIN_HOST) else {
            return false;
        };
        if origin
            .data()
            .eq_ignore_ascii_case(peer.origin_host.as_bytes())
        {
            return false;
        }
        if self.node.settings.is_relay(&peer.origin_host) {
            return false;
        }
        // Debug, not warn: a misconfigured peer would flood the log with
        // one line per request; its error answers are counted.
        tracing::debug!(
            peer = %peer.origin_host,
            origin = %String::from_utf8_lossy(origin.data()),
            "request refused (3010): its Origin-Host is not the peer of this connection, which is not a relay"
        );
        true
    }

    async fn dispatch(&mut self, msg: Message) {
        let c = &self.shared.counters;
        PeerCounters::add(&c.requests_in, 1);
        // Top-level AVP framing (cheap: headers only); values are the handler's.
        if let Some(Err(e)) = Iterator::find(&mut msg.avps(), |a| a.is_err()) {
            return self.reject(&msg, e).await;
        }
        if self.speaks_for_another(&msg) {
            let e = DiameterError::new(
                result_code::DIAMETER_UNKNOWN_PEER,
                "Origin-Host is not the peer of this connection, which is not a relay",
            );
            return self.reject(&msg, e).await;
        }
        let (app, cmd) = (msg.application_id(), msg.command_code());
        if !self.machine.negotiated().contains(app) {
            let e = DiameterError::new(
                result_code::DIAMETER_APPLICATION_UNSUPPORTED,
                "application not negotiated with this peer",
            );
            return self.reject(&msg, e).await;
        }
        if !self.node.handler.serves(app, cmd) {
            let e = DiameterError::new(
                result_code::DIAMETER_COMMAND_UNSUPPORTED,
                "command not supported",
            );
            return self.reject(&msg, e).await;
        }
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            PeerCounters::add(&c.too_busy, 1);
            let e = DiameterError::new(
                result_code::DIAMETER_TOO_BUSY,
                "too many requests in flight",
            );
            return self.reject(&msg, e).await;
        };
        let in_flight = InFlight::new(self.shared.clone(), permit);
        let handler = self.node.handler.clone();
        let local = self.node.local.clone();
        let out = self.link.out.clone();
        let peer = self.handle.clone();
        let max_len = self.node.settings.max_message_len as usize;
        let received = std::time::Instant::now();
        tokio::spawn(received::scope(received, async move {
            let req = msg.clone();
            // Boxed: a handler's future can be kilobytes (the PCRF's is
            // ~10 KB), which spawning would otherwise copy more than once.
            let ans = match Box::pin(handler.handle(req, peer.clone())).await {
                // The peer enforces the same maximum and would close the
                // connection on a longer answer: refuse it here instead.
                Ok(b) if b.len() > max_len => {
                    PeerCounters::add(&peer.inner.counters.error_answers_out, 1);
                    peer.inner.counters.error(format!(
                        "command {}: answer of {} bytes over the maximum {max_len}, answered 5012",
                        msg.command_code(),
                        b.len()
                    ));
                    tracing::error!(
                        command = msg.command_code(),
                        bytes = b.len(),
                        max = max_len,
                        "answer larger than the maximum message size; answering DIAMETER_UNABLE_TO_COMPLY"
                    );
                    let e = DiameterError::new(
                        result_code::DIAMETER_UNABLE_TO_COMPLY,
                        format!(
                            "the answer ({} bytes) exceeds the maximum message size ({max_len} bytes)",
                            b.len()
                        ),
                    );
                    error_answer::for_message(&msg, &local, &e)
                }
                Ok(b) => b,
                Err(e) => {
                    PeerCounters::add(&peer.inner.counters.error_answers_out, 1);
                    peer.inner.counters.error(format!(
                        "command {} answered {}: {}",
                        msg.command_code(),
                        e.result_code,
                        e.message
                    ));
                    error_answer::for_message(&msg, &local, &e)
                }
            };
            let _ = out.send(ans).await;
            drop(in_flight);
        }));
    }

    /// Tears down: unregister, fail pending requests, flush and close.
    async fn finish(self, reason: CloseReason, writer: tokio::task::JoinHandle<()>) -> Ended {
        self.shared.set_state(PeerState::Closed);
        self.node.table.remove(&self.handle);
        {
            let mut c = self.shared.conn();
            if c.link.as_ref().is_some_and(|l| Arc::ptr_eq(l, &self.link)) {
                c.link = None;
            }
        }
        // Dropping the waiters' senders tells them Disconnected.
        self.link.pending().clear();
        let Conn {
            link,
            handle,
            node,
            was_open,
            ..
        } = self;
        drop(link);
        // The writer ends when every sender is gone (handler tasks finish
        // or find the queue closed); bound the wait.
        let bound = node.settings.dpa_timeout.min(Duration::from_secs(2));
        let abort = writer.abort_handle();
        if tokio::time::timeout(bound, writer).await.is_err() {
            abort.abort();
        }
        tracing::debug!(peer = ?handle.origin_host(), ?reason, "connection closed");
        if was_open {
            node.handler.peer_down(&handle, reason);
        }
        Ended { reason, was_open }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_grows_with_what_arrived_not_with_the_announced_length() {
        // 4 bytes of an 8 MiB message: one read chunk, not 8 MiB.
        assert_eq!(room_for_more(4, 8 << 20), READ_CHUNK);
        // Half of it arrived: room for the other half.
        assert_eq!(room_for_more(4 << 20, 8 << 20), 4 << 20);
        // Nearly all of it: just the rest.
        assert_eq!(room_for_more((8 << 20) - 10, 8 << 20), 10);
        assert_eq!(room_for_more(100, 50), 0);
    }
}
