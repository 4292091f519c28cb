//! The API's TCP listener with limits: at most so many connections at once
//! (further clients wait in the accept backlog) and a connection closed when
//! it has neither read nor written for a while. axum's server has neither,
//! and a management API must not let idle or trickling clients pile up file
//! descriptors the Diameter side needs.

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// Connection limits of the API listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    /// A connection with no byte read or written for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 256,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// A [`TcpListener`] that applies [`ConnectionLimits`].
pub struct BoundedListener {
    inner: TcpListener,
    permits: Arc<Semaphore>,
    idle_timeout: Duration,
}

impl BoundedListener {
    pub fn new(inner: TcpListener, limits: ConnectionLimits) -> BoundedListener {
        BoundedListener {
            inner,
            permits: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            idle_timeout: limits.idle_timeout,
        }
    }
}

impl Listener for BoundedListener {
    type Io = GuardedStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (GuardedStream, SocketAddr) {
        // The semaphore is never closed, so acquiring only waits.
        let permit = self.permits.clone().acquire_owned().await.ok();
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    let _ = stream.set_nodelay(true);
                    let guarded = GuardedStream {
                        stream,
                        idle: Box::pin(tokio::time::sleep(self.idle_timeout)),
                        idle_timeout: self.idle_timeout,
                        _permit: permit,
                    };
                    return (guarded, addr);
                }
                // Out of file descriptors and the like: wait rather than spin.
                Err(e) => {
                    tracing::warn!(error = %e, "HTTP API accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
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
    stream: TcpStream,
    idle: Pin<Box<Sleep>>,
    idle_timeout: Duration,
    _permit: Option<OwnedSemaphorePermit>,
}

impl GuardedStream {
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
