//! The accepting side: a TCP listener that runs one connection task per
//! peer, and on shutdown sends DPR to every peer, waits (bounded) for the
//! DPAs and closes. A TLS listener runs the handshake first (RFC 6733 §13,
//! TLS on connect), bounded by the CER timeout, and only then the
//! Diameter connection; a failed handshake is logged and closes the socket.

use super::connection;
use super::handler::Handler;
use super::node::Node;
use super::peer_handle::PeerShared;
use super::peer_table::PeerTable;
use super::tls::{TlsConfig, TlsPeer};
use crate::peer::{CloseReason, DisconnectCause, Jitter, LocalNode, PeerSettings, PeerState, Role};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::watch;
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
                        match &self.tls {
                            None => {
                                tasks.spawn(connection::run(
                                    node,
                                    stream,
                                    Some(remote),
                                    local_ip,
                                    Role::Responder,
                                    shared,
                                    None,
                                    None,
                                    stop,
                                ));
                            }
                            Some(acceptor) => {
                                let acceptor = acceptor.clone();
                                tasks.spawn(async move {
                                    let limit = node.settings.cer_timeout;
                                    let stream = match tokio::time::timeout(limit, acceptor.accept(stream)).await {
                                        Ok(Ok(s)) => s,
                                        Ok(Err(e)) => {
                                            tracing::warn!(%remote, error = %e, "TLS handshake failed; connection closed");
                                            return handshake_failed();
                                        }
                                        Err(_) => {
                                            tracing::warn!(%remote, "no TLS handshake within the CER timeout; connection closed");
                                            return handshake_failed();
                                        }
                                    };
                                    let peer = TlsPeer::from_connection(stream.get_ref().1);
                                    connection::run(
                                        node,
                                        stream,
                                        Some(remote),
                                        local_ip,
                                        Role::Responder,
                                        shared,
                                        None,
                                        Some(peer),
                                        stop,
                                    )
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
