//! A Diameter node: our identity, settings, the application handler and
//! the table of open peers, shared by the node's server and initiators.

use super::connection;
use super::handler::Handler;
use super::initiator::Initiator;
use super::peer_handle::{PeerHandle, PeerShared};
use super::peer_table::PeerTable;
use super::server::Server;
use super::tls::TlsConfig;
use crate::peer::{CloseReason, Jitter, LocalNode, PeerSettings, PeerState, Role};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub(crate) struct NodeShared<H> {
    pub(crate) local: Arc<LocalNode>,
    pub(crate) settings: Arc<PeerSettings>,
    pub(crate) handler: Arc<H>,
    pub(crate) table: PeerTable,
}

/// One local Diameter node. Cheap to clone.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use diameter::peer::{Application, LocalNode, PeerSettings};
/// use diameter::transport::{Node, ServesNothing};
/// let local = LocalNode::new("pcrf.test.local", "test.local")
///     .with_application(Application::auth_vendor(16_777_238, 10415));
/// let node = Node::new(local, PeerSettings::default(), ServesNothing);
/// let server = node.listen("127.0.0.1:3868").await?;
/// tokio::spawn(server.run(async { let _ = tokio::signal::ctrl_c().await; }));
/// # Ok(()) }
/// ```
pub struct Node<H> {
    pub(crate) inner: Arc<NodeShared<H>>,
}

impl<H> Clone for Node<H> {
    fn clone(&self) -> Self {
        Node {
            inner: self.inner.clone(),
        }
    }
}

impl<H: Handler> Node<H> {
    /// A node with its own, empty [`PeerTable`].
    pub fn new(local: LocalNode, settings: PeerSettings, handler: H) -> Node<H> {
        Self::with_parts(
            Arc::new(local),
            Arc::new(settings),
            Arc::new(handler),
            PeerTable::new(),
        )
    }

    /// A node from shared parts (e.g. a handler the application also keeps).
    pub fn with_parts(
        local: Arc<LocalNode>,
        settings: Arc<PeerSettings>,
        handler: Arc<H>,
        table: PeerTable,
    ) -> Node<H> {
        Node {
            inner: Arc::new(NodeShared {
                local,
                settings,
                handler,
                table,
            }),
        }
    }

    /// Our identity.
    pub fn local(&self) -> &LocalNode {
        &self.inner.local
    }
    /// The settings every connection of this node uses.
    pub fn settings(&self) -> &PeerSettings {
        &self.inner.settings
    }
    /// The application handler.
    pub fn handler(&self) -> &Arc<H> {
        &self.inner.handler
    }
    /// Open peers by Origin-Host.
    pub fn peer_table(&self) -> &PeerTable {
        &self.inner.table
    }

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

    /// Runs one connection over any byte stream (a TLS stream, an
    /// in-memory pipe...) in the given role, once, without reconnecting.
    /// The task ends with the reason the connection closed; close it with
    /// [`PeerHandle::close`]. Without a socket there is no local address to
    /// advertise, so set [`LocalNode::host_ip_addresses`] for peers that
    /// require Host-IP-Address.
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
            connection::run(
                node, stream, remote, None, role, shared, expected, None, never,
            )
            .await
            .reason
        });
        (handle, task)
    }
}
