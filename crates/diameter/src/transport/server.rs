//! The accepting side: a TCP listener that runs one connection task per
//! peer, and on shutdown sends DPR to every peer, waits (bounded) for the
//! DPAs and closes. A TLS listener runs the handshake first (RFC 6733 §13,
//! TLS on connect), bounded by the CER timeout, and only then the
//! Diameter connection; a failed handshake is logged and closes the socket.
//!
//! Until its CER is accepted a connection is only a cost: a task, buffers,
//! a socket. At most `max_awaiting_cer` may wait at once; a further one
//! closes the *oldest* waiting connection (counted, see
//! [`PeerTable::closed_awaiting_cer`]). Closing the oldest rather than the
//! newest keeps the listener open to a real peer during a flood of silent
//! connections: its CER follows its connect within milliseconds, long
//! before `max_awaiting_cer` later connections could push it out, whereas
//! refusing newcomers would lock every peer out for as long as the flood
//! kept the slots full. The CER timeout closes the rest in any case.

use super::awaiting_cer::ErrorAwaitingCer;
use super::connection;
use super::handler::Handler;
use super::node::Node;
use super::peer_handle::{PeerHandle, PeerShared};
use super::peer_table::PeerTable;
use super::tls::{TlsConfig, TlsPeer};
use crate::peer::{CloseReason, DisconnectCause, Jitter, LocalNode, PeerSettings, PeerState, Role};
use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;

/// A listening Diameter server. Build it with [`Server::bind`] or
/// [`Node::listen`], then [`run`](Server::run) it.
pub struct Server<H> {
    listener: TcpListener,
    node: Node<H>,
    tls: Option<tokio_rustls::TlsAcceptor>,
}

fn handshake_failed() -> connection::Ended {
    connection::Ended {
        reason: CloseReason::TransportClosed,
        was_open: false,
    }
}

/// A node's listeners ([`Node`] itself is below this module).
impl<H: Handler> Node<H> {
    /// Binds a TCP listener; call [`Server::run`] to accept peers.
    pub async fn listen(&self, addr: impl ToSocketAddrs) -> std::io::Result<Server<H>> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Server::new(listener, self.clone(), None))
    }

    /// Binds a TCP listener whose peers start with a TLS handshake (RFC
    /// 6733 §13 "TLS on connect"; the IANA port is 5658). Each peer's
    /// certificate must chain to `tls`'s CA (and be presented at all when
    /// it requires client certificates) and name the Origin-Host of its
    /// CER, else the CER is answered 3010 DIAMETER_UNKNOWN_PEER.
    pub async fn listen_tls(
        &self,
        addr: impl ToSocketAddrs,
        tls: &TlsConfig,
    ) -> std::io::Result<Server<H>> {
        let listener = TcpListener::bind(addr).await?;
        Ok(Server::new(listener, self.clone(), Some(tls)))
    }
}

impl<H: Handler> Server<H> {
    fn new(listener: TcpListener, node: Node<H>, tls: Option<&TlsConfig>) -> Server<H> {
        Server {
            listener,
            node,
            tls: tls.map(TlsConfig::acceptor),
        }
    }

    /// Whether this listener speaks TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Binds `addr` for a node made of these parts (shorthand for
    /// `Node::new(local, settings, handler).listen(addr)`).
    pub async fn bind(
        addr: impl ToSocketAddrs,
        local: LocalNode,
        settings: PeerSettings,
        handler: H,
    ) -> std::io::Result<Server<H>> {
        Node::new(local, settings, handler).listen(addr).await
    }

    /// The address the listener is bound to (useful after binding port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The node this server belongs to (to start initiators sharing its table).
    pub fn node(&self) -> &Node<H> {
        &self.node
    }

    /// Open peers by Origin-Host.
    pub fn peer_table(&self) -> PeerTable {
        self.node.inner.table.clone()
    }

    /// Accepts peers until `shutdown` completes; then stops accepting, sends
    /// DPR (REBOOTING) to every connection, waits for them to close (at most
    /// `dpa_timeout` plus a second) and returns.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let (stop_tx, stop_rx) = watch::channel(None::<DisconnectCause>);
        let mut tasks = JoinSet::new();
        let mut jitter = Jitter::from_entropy();
        let awaiting = Arc::new(AwaitingCer {
            cap: self.node.inner.settings.max_awaiting_cer.max(1),
            next_id: std::sync::atomic::AtomicU64::new(0),
            list: Mutex::new(VecDeque::new()),
        });
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                r = self.listener.accept() => match r {
                    Ok((stream, remote)) => {
                        let _ = stream.set_nodelay(true);
                        let local_ip = stream.local_addr().ok().map(|a| a.ip());
                        let shared = Arc::new(PeerShared::new(
                            self.node.inner.local.clone(),
                            self.node.inner.settings.clone(),
                            PeerState::WaitCer,
                            jitter.next_u64() as u32,
                        ));
                        let node = self.node.inner.clone();
                        let stop = stop_rx.clone();
                        let waiting = awaiting.admit(&node.table, shared.clone());
                        match &self.tls {
                            None => {
                                tasks.spawn(waiting.bound(connection::run(
                                    node,
                                    stream,
                                    Some(remote),
                                    local_ip,
                                    Role::Responder,
                                    shared,
                                    None,
                                    None,
                                    stop,
                                )));
                            }
                            Some(acceptor) => {
                                let acceptor = acceptor.clone();
                                tasks.spawn(async move {
                                    let limit = node.settings.cer_timeout;
                                    let handshake = tokio::time::timeout(limit, acceptor.accept(stream));
                                    let evicted = waiting.closed.clone();
                                    let handshake = tokio::select! {
                                        h = handshake => h,
                                        () = evicted.notified() => {
                                            tracing::debug!(%remote, "closed during its TLS handshake: too many connections awaiting CER");
                                            return handshake_failed();
                                        }
                                    };
                                    let stream = match handshake {
                                        Ok(Ok(s)) => s,
                                        Ok(Err(e)) => {
                                            node.table.awaiting_cer_costs().error(ErrorAwaitingCer::TlsHandshake, Some(remote), "TLS handshake failed; connection closed", &e);
                                            return handshake_failed();
                                        }
                                        Err(_) => {
                                            node.table.awaiting_cer_costs().error(ErrorAwaitingCer::TlsHandshake, Some(remote), "no TLS handshake within the CER timeout; connection closed", &"timeout");
                                            return handshake_failed();
                                        }
                                    };
                                    let peer = TlsPeer::from_connection(stream.get_ref().1);
                                    waiting.bound(connection::run(
                                        node,
                                        stream,
                                        Some(remote),
                                        local_ip,
                                        Role::Responder,
                                        shared,
                                        None,
                                        Some(peer),
                                        stop,
                                    ))
                                    .await
                                });
                            }
                        }
                    }
                    Err(e) => {
                        // EMFILE and friends: back off briefly instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        drop(self.listener);
        let _ = stop_tx.send(Some(DisconnectCause::Rebooting));
        let bound = self.node.inner.settings.dpa_timeout + Duration::from_secs(1);
        let _ =
            tokio::time::timeout(bound, async { while tasks.join_next().await.is_some() {} }).await;
        tasks.abort_all();
        Ok(())
    }
}

/// The connections accepted and not yet past CER, oldest first.
struct AwaitingCer {
    cap: usize,
    next_id: std::sync::atomic::AtomicU64,
    list: Mutex<VecDeque<(u64, Arc<Notify>)>>,
}

impl AwaitingCer {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Arc<Notify>)>> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a new connection; at the cap, tells the oldest waiting
    /// one to close.
    fn admit(self: &Arc<Self>, table: &PeerTable, shared: Arc<PeerShared>) -> Waiting {
        let id = self
            .next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let closed = Arc::new(Notify::new());
        let mut list = self.lock();
        while list.len() >= self.cap {
            let Some((_, oldest)) = list.pop_front() else {
                break;
            };
            oldest.notify_one();
            table.count_closed_awaiting_cer();
        }
        list.push_back((id, closed.clone()));
        table.set_awaiting_cer(list.len());
        Waiting {
            set: self.clone(),
            table: table.clone(),
            id,
            closed,
            shared,
        }
    }
}

/// One connection's place among those awaiting CER, given up when it
/// opens or ends.
struct Waiting {
    set: Arc<AwaitingCer>,
    table: PeerTable,
    id: u64,
    /// Notified when a newer connection needs the place.
    closed: Arc<Notify>,
    shared: Arc<PeerShared>,
}

impl Waiting {
    fn leave(&self) {
        let mut list = self.set.lock();
        list.retain(|(id, _)| *id != self.id);
        self.table.set_awaiting_cer(list.len());
    }

    /// Runs the connection `run`, leaving the waiting set once the peer
    /// is open, and aborting the connection if told to make room first.
    async fn bound(self, run: impl Future<Output = connection::Ended>) -> connection::Ended {
        tokio::pin!(run);
        let mut state = self.shared.state.subscribe();
        let mut waiting = true;
        loop {
            tokio::select! {
                // The connection first: it publishes its link (what
                // `abort` goes through) on its first poll.
                biased;
                ended = &mut run => {
                    self.leave();
                    return ended;
                }
                () = self.closed.notified(), if waiting => {
                    waiting = false;
                    tracing::debug!(remote = ?self.shared.conn().remote_addr, "connection closed before CER: too many connections awaiting CER");
                    PeerHandle::new(self.shared.clone()).abort();
                }
                open = async { state.wait_for(|s| *s == PeerState::Open).await.is_ok() }, if waiting => {
                    waiting = false;
                    if open {
                        self.leave();
                    }
                }
            }
        }
    }
}
