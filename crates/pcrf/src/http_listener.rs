//! The TCP listener of the HTTP servers (the REST API and the SBI) with
//! limits: at most so many connections at once (further clients wait in
//! the accept backlog) and a connection closed when it has neither read
//! nor written for a while. axum's server has neither,
//! and a management API must not let idle or trickling clients pile up file
//! descriptors the Diameter side needs.
//!
//! With TLS (`[api.tls]`), handshakes run in tasks of their own, each
//! holding a connection slot and bounded in time, so a slow or silent
//! client never holds up the accept loop; finished streams reach
//! [`Listener::accept`] through a channel.

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;

/// Longest TLS handshake allowed (shorter when the idle timeout is).
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connection limits of the API listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    /// A connection with no byte read or written for this long is closed.
    pub idle_timeout: Duration,
    /// A request's head (request line and headers) must arrive whole
    /// within this long, however steadily its bytes trickle in.
    pub header_read_timeout: Duration,
    /// A request's body must arrive whole within this long of its head.
    pub body_timeout: Duration,
    /// Connections one client address may hold at once; a further one
    /// closes that address's oldest connection that has no request in
    /// progress (see `api/server.rs`).
    pub max_connections_per_address: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 256,
            idle_timeout: Duration::from_secs(60),
            header_read_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections_per_address: 64,
        }
    }
}

/// A [`TcpListener`] that applies [`ConnectionLimits`], optionally
/// serving TLS.
pub struct BoundedListener {
    mode: Mode,
    permits: Arc<Semaphore>,
    idle_timeout: Duration,
}

enum Mode {
    Plain(TcpListener),
    /// The TCP listener belongs to the accept task; handshaken streams
    /// arrive here. Dropping the receiver stops the task.
    Tls {
        incoming: mpsc::Receiver<(GuardedStream, SocketAddr)>,
        local: SocketAddr,
    },
}

impl BoundedListener {
    pub fn new(inner: TcpListener, limits: ConnectionLimits) -> BoundedListener {
        BoundedListener {
            mode: Mode::Plain(inner),
            permits: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            idle_timeout: limits.idle_timeout,
        }
    }

    /// A listener serving TLS with `tls`. Must be called within a Tokio
    /// runtime (it spawns the accept task).
    pub fn with_tls(
        inner: TcpListener,
        limits: ConnectionLimits,
        tls: Arc<ServerConfig>,
    ) -> io::Result<BoundedListener> {
        let local = inner.local_addr()?;
        let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
        let (tx, incoming) = mpsc::channel(16);
        tokio::spawn(tls_accept_loop(
            inner,
            permits.clone(),
            limits.idle_timeout,
            tokio_rustls::TlsAcceptor::from(tls),
            tx,
        ));
        Ok(BoundedListener {
            mode: Mode::Tls { incoming, local },
            permits,
            idle_timeout: limits.idle_timeout,
        })
    }
}

/// Accepts a TCP connection, retrying (after a pause) on errors such as
/// running out of file descriptors rather than spinning.
async fn accept_tcp(inner: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match inner.accept().await {
            Ok((stream, addr)) => {
                let _ = stream.set_nodelay(true);
                return (stream, addr);
            }
            Err(e) => {
                tracing::warn!(error = %e, "HTTP API accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Takes a connection slot, accepts, and hands the handshake to a task of
/// its own bounded by [`TLS_HANDSHAKE_TIMEOUT`]: the slot is released when
/// the handshake fails or times out, or with the connection.
async fn tls_accept_loop(
    inner: TcpListener,
    permits: Arc<Semaphore>,
    idle_timeout: Duration,
    acceptor: tokio_rustls::TlsAcceptor,
    tx: mpsc::Sender<(GuardedStream, SocketAddr)>,
) {
    let handshake_timeout = TLS_HANDSHAKE_TIMEOUT.min(idle_timeout);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p.ok(),
            () = tx.closed() => return,
        };
        let (stream, addr) = tokio::select! {
            s = accept_tcp(&inner) => s,
            () = tx.closed() => return,
        };
        let acceptor = acceptor.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => {
                    let guarded = GuardedStream::new(Io::Tls(Box::new(tls)), idle_timeout, permit);
                    // Fails only when the server has stopped.
                    let _ = tx.send((guarded, addr)).await;
                }
                Ok(Err(e)) => {
                    tracing::info!(client = %addr, error = %e, "HTTP API TLS handshake failed");
                }
                Err(_) => {
                    tracing::info!(client = %addr, secs = handshake_timeout.as_secs_f64(), "HTTP API TLS handshake timed out");
                }
            }
        });
    }
}

impl Listener for BoundedListener {
    type Io = GuardedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (GuardedStream, SocketAddr) {
        match &mut self.mode {
            Mode::Plain(inner) => {
                // The semaphore is never closed, so acquiring only waits.
                let permit = self.permits.clone().acquire_owned().await.ok();
                let (stream, addr) = accept_tcp(inner).await;
                (
                    GuardedStream::new(Io::Plain(stream), self.idle_timeout, permit),
                    addr,
                )
            }
            Mode::Tls { incoming, .. } => match incoming.recv().await {
                Some(accepted) => accepted,
                // The accept task never ends while the receiver lives:
                // nothing more will come.
                None => std::future::pending().await,
            },
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.mode {
            Mode::Plain(inner) => inner.local_addr(),
            Mode::Tls { local, .. } => Ok(*local),
        }
    }
}

/// The client's address, for the access log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub SocketAddr);

impl Connected<IncomingStream<'_, BoundedListener>> for ClientAddr {
    fn connect_info(stream: IncomingStream<'_, BoundedListener>) -> Self {
        ClientAddr(*stream.remote_addr())
    }
}

/// One accepted connection: holds its connection slot and its idle timer.
pub struct GuardedStream {
    stream: Io,
    idle: Pin<Box<Sleep>>,
    idle_timeout: Duration,
    _permit: Option<OwnedSemaphorePermit>,
}

/// The connection under the limits: plain TCP or TLS over it.
enum Io {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl GuardedStream {
    fn new(stream: Io, idle_timeout: Duration, permit: Option<OwnedSemaphorePermit>) -> Self {
        GuardedStream {
            stream,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            idle_timeout,
            _permit: permit,
        }
    }

    fn touch(&mut self) {
        self.idle.as_mut().reset(Instant::now() + self.idle_timeout);
    }

    /// Pending I/O: fails the connection once the idle timer has fired.
    fn check_idle(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.idle.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "HTTP connection idle too long",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.touch();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => this.check_idle(cx),
        }
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    this.touch();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => match this.check_idle(cx) {
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                _ => Poll::Pending,
            },
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// `[api.tls]` and `[sbi.tls]`: an HTTP server's certificate, key and,
/// for mutual TLS, the CA its clients' certificates must chain to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerTls {
    /// Our certificate chain, PEM, end-entity first.
    pub certificate: PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub private_key: PathBuf,
    /// CA certificate(s), PEM, that client certificates must chain to.
    /// Without it clients are not asked for a certificate.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// Clients must present a certificate chaining to `ca` (mutual TLS).
    #[serde(default)]
    pub require_client_certificate: bool,
}

impl ServerTls {
    /// Reads and checks the files; the error names the key at fault (under
    /// `section`, such as `api.tls`) and its file.
    pub fn load(&self, section: &str) -> Result<Arc<tokio_rustls::rustls::ServerConfig>, String> {
        use diameter::transport::TlsError;
        if self.require_client_certificate && self.ca.is_none() {
            return Err(format!("{section}.require_client_certificate needs {section}.ca (the CA client certificates must chain to)"));
        }
        diameter::transport::TlsConfig::http_server_from_pem_files(
            &self.certificate,
            &self.private_key,
            self.ca.as_deref(),
            self.require_client_certificate,
        )
        .map_err(|e| {
            let cert = self.certificate.display();
            let key = self.private_key.display();
            let ca = self
                .ca
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let field = match &e {
                TlsError::Read { what, .. } if what.contains("certificate") => "certificate",
                TlsError::Read { what, .. } if what.contains("private key") => "private_key",
                TlsError::Read { .. } | TlsError::BadCa(_) => "ca",
                TlsError::NoCertificate { what } | TlsError::BadPem { what, .. } if *what == ca => {
                    "ca"
                }
                TlsError::NoCertificate { .. } => "certificate",
                TlsError::BadPem { what, .. } if *what == key.to_string() => "private_key",
                TlsError::BadPem { .. } => "certificate",
                TlsError::NoPrivateKey { .. } | TlsError::BadKey(_) => "private_key",
                TlsError::KeyMismatch => {
                    return format!(
                        "{section}.private_key: {e} (certificate {cert}, private key {key})"
                    );
                }
                TlsError::Config(_) => "certificate",
            };
            format!("{section}.{field}: {e}")
        })
    }
}
