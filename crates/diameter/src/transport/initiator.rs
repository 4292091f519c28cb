//! The connecting side: keeps one connection to a configured peer, with
//! reconnection after failures by jittered exponential backoff (Tc as the
//! cap) and the Disconnect-Cause rules of RFC 6733 §5.4.3. Over TLS each
//! connection starts with the handshake (RFC 6733 §13), bounded by the CEA
//! timeout; a failed handshake counts as a failed connection.

use super::connection;
use super::handler::Handler;
use super::node::Node;
use super::peer_handle::{PeerHandle, PeerShared};
use super::tls::{server_name, TlsConfig, TlsPeer};
use crate::peer::{Backoff, CloseReason, DisconnectCause, Jitter, PeerSettings, PeerState, Role};
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A peer we connect to. Its [`PeerHandle`] stays valid across reconnects.
/// Dropping it stops the initiator as [`shutdown`](Initiator::shutdown)
/// with REBOOTING would, without waiting.
#[must_use = "dropping the Initiator stops it"]
pub struct Initiator {
    handle: PeerHandle,
    stop: watch::Sender<Option<DisconnectCause>>,
    task: Option<JoinHandle<()>>,
}

impl Drop for Initiator {
    fn drop(&mut self) {
        if self.stop.borrow().is_none() {
            let _ = self.stop.send(Some(DisconnectCause::Rebooting));
        }
    }
}

/// A node's connections to peers ([`Node`] itself is below this module).
impl<H: Handler> Node<H> {
    /// Keeps a connection to the peer at `addr`, reconnecting with backoff.
    /// `peer_host` is the Origin-Host we expect there (for the election of
    /// RFC 6733 §5.6.4 and to skip reconnecting while that peer is open
    /// through a connection it made to us); `None` when unknown. A CEA
    /// naming another Origin-Host, or one the allow-list does not admit
    /// from `addr`, closes the connection (3010 DIAMETER_UNKNOWN_PEER).
    pub fn connect(&self, addr: SocketAddr, peer_host: Option<&str>) -> Initiator {
        Initiator::start(self.clone(), addr, peer_host.map(Arc::from), None)
    }

    /// As [`connect`](Self::connect), over TLS: each connection starts with
    /// a TLS handshake in which the server's certificate must chain to
    /// `tls`'s CA and name `peer_host`; we present our own certificate.
    /// The certificate must also name the Origin-Host of the CEA, else the
    /// connection closes (CloseReason::Rejected(3010)).
    pub fn connect_tls(&self, addr: SocketAddr, peer_host: &str, tls: &TlsConfig) -> Initiator {
        Initiator::start(
            self.clone(),
            addr,
            Some(Arc::from(peer_host)),
            Some(tls.connector()),
        )
    }
}

impl Initiator {
    pub(crate) fn start<H: Handler>(
        node: Node<H>,
        addr: SocketAddr,
        expected_host: Option<Arc<str>>,
        tls: Option<tokio_rustls::TlsConnector>,
    ) -> Initiator {
        let mut jitter = Jitter::from_entropy();
        let shared = Arc::new(PeerShared::new(
            node.inner.local.clone(),
            node.inner.settings.clone(),
            PeerState::Closed,
            jitter.next_u64() as u32,
        ));
        let handle = PeerHandle::new(shared.clone());
        let (stop, stop_rx) = watch::channel(None);
        let task = tokio::spawn(keep_connected(
            node,
            addr,
            expected_host,
            tls,
            shared,
            stop_rx,
            jitter,
        ));
        Initiator {
            handle,
            stop,
            task: Some(task),
        }
    }

    /// The peer's handle (requests work while a connection is open).
    pub fn handle(&self) -> PeerHandle {
        self.handle.clone()
    }

    /// Waits until the connection is open, at most `timeout`.
    pub async fn wait_open(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.handle.wait_state(|s| s == PeerState::Open))
            .await
            .is_ok()
    }

    /// Stops: DPR with `cause` if open, waits for the DPA (bounded by
    /// `dpa_timeout`), and no more reconnecting.
    pub async fn shutdown(mut self, cause: DisconnectCause) {
        let _ = self.stop.send(Some(cause));
        let bound = self.handle.inner.settings.dpa_timeout + Duration::from_secs(1);
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(bound, task).await.is_err() {
                abort.abort();
            }
        }
    }
}

async fn wait_or_stop(d: Duration, stop: &mut watch::Receiver<Option<DisconnectCause>>) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|s| s.is_some()) => true,
    }
}

async fn keep_connected<H: Handler>(
    node: Node<H>,
    addr: SocketAddr,
    expected_host: Option<Arc<str>>,
    tls: Option<tokio_rustls::TlsConnector>,
    shared: Arc<PeerShared>,
    mut stop: watch::Receiver<Option<DisconnectCause>>,
    jitter: Jitter,
) {
    let s = node.inner.settings.clone();
    let mut backoff = Backoff::new(s.reconnect_initial, s.tc, s.refused_holdoff, jitter);
    let handle = PeerHandle::new(shared.clone());
    loop {
        if stop.borrow().is_some() || shared.closed_by_user.load(Relaxed) {
            break;
        }
        if let Some(h) = &expected_host {
            if node.inner.table.open_elsewhere(h, &handle) {
                // The peer connected to us; stand by while that lasts.
                if wait_or_stop(backoff.next_delay(), &mut stop).await {
                    break;
                }
                continue;
            }
        }
        let connected = tokio::time::timeout(s.cer_timeout, TcpStream::connect(addr)).await;
        let delay = match connected {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                let local_ip = stream.local_addr().ok().map(|a| a.ip());
                let ended = match &tls {
                    None => Some(
                        connection::run(
                            node.inner.clone(),
                            stream,
                            Some(addr),
                            local_ip,
                            Role::Initiator,
                            shared.clone(),
                            expected_host.clone(),
                            None,
                            stop.clone(),
                        )
                        .await,
                    ),
                    Some(connector) => {
                        match handshake(connector, stream, addr, expected_host.as_deref(), &s).await
                        {
                            Some(stream) => {
                                let peer = TlsPeer::from_connection(stream.get_ref().1);
                                Some(
                                    connection::run(
                                        node.inner.clone(),
                                        stream,
                                        Some(addr),
                                        local_ip,
                                        Role::Initiator,
                                        shared.clone(),
                                        expected_host.clone(),
                                        Some(peer),
                                        stop.clone(),
                                    )
                                    .await,
                                )
                            }
                            None => None,
                        }
                    }
                };
                match ended {
                    Some(ended) => {
                        if ended.was_open {
                            backoff.reset();
                        }
                        match ended.reason {
                            CloseReason::PeerDisconnect(cause) => {
                                backoff.after_peer_disconnect(cause)
                            }
                            _ => Some(backoff.next_delay()),
                        }
                    }
                    None => Some(backoff.next_delay()),
                }
            }
            Ok(Err(e)) => {
                tracing::debug!(%addr, error = %e, "connect failed");
                Some(backoff.next_delay())
            }
            Err(_) => Some(backoff.next_delay()),
        };
        shared.set_state(PeerState::Closed);
        let Some(delay) = delay else {
            tracing::info!(%addr, "peer asked not to reconnect; initiator stops");
            break;
        };
        if stop.borrow().is_some() || shared.closed_by_user.load(Relaxed) {
            break;
        }
        if wait_or_stop(delay, &mut stop).await {
            break;
        }
    }
    shared.set_state(PeerState::Closed);
}

/// The client half of the TLS handshake, verifying the server's
/// certificate against the Origin-Host we expect there; `None` (logged)
/// when it fails or takes longer than the CEA timeout.
async fn handshake(
    connector: &tokio_rustls::TlsConnector,
    stream: TcpStream,
    addr: SocketAddr,
    expected_host: Option<&str>,
    s: &PeerSettings,
) -> Option<tokio_rustls::client::TlsStream<TcpStream>> {
    let Some(host) = expected_host else {
        tracing::warn!(%addr, "TLS needs the peer's Origin-Host to verify its certificate");
        return None;
    };
    let name = match server_name(host) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(%addr, error = %e, "cannot start TLS");
            return None;
        }
    };
    match tokio::time::timeout(s.cer_timeout, connector.connect(name, stream)).await {
        Ok(Ok(t)) => Some(t),
        Ok(Err(e)) => {
            tracing::warn!(%addr, peer = host, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::warn!(%addr, peer = host, "TLS handshake timed out");
            None
        }
    }
}
