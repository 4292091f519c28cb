//! Runs the API router on a bound listener until shutdown; in-flight
//! requests finish first (graceful shutdown). Connections are limited in
//! number and closed when idle (see [`super::listener`]).
//!
//! The HTTP/1 connection loop is our own rather than `axum::serve`, whose
//! hyper builder has no timer: without one hyper's header-read deadline
//! never fires, and a client trickling a header byte now and then (each
//! byte restarting the idle timer) holds its connection slot for as long as
//! it likes. Here every request head must arrive whole within
//! `header_read_timeout` and its body within `body_timeout`.
//!
//! Each client address may hold at most `max_connections_per_address`
//! connections. A further one does not wait or get refused: it closes that
//! address's oldest connection that has no request in progress (idle
//! between requests, or still sending its head). Clients behind one address
//! (all of them on 127.0.0.1 in a test, or behind a NAT) therefore can't
//! lock each other out: a well-behaved client's new connection is served at
//! once while another connection of the same address trickles. A
//! connection whose request is being handled is never closed this way; when
//! every connection of the address is busy, the new one is closed instead.

use crate::http_listener::{BoundedListener, ClientAddr, ConnectionLimits, GuardedStream};
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::Router;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tokio::time::Sleep;
use tokio_rustls::rustls::ServerConfig;
use tower::ServiceExt;

/// Serves `router` on `listener` until `shutdown` resolves, with the default
/// [`ConnectionLimits`].
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, router, shutdown, ConnectionLimits::default()).await
}

/// [`serve`] with explicit limits. Client addresses are made available to
/// the access log.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: ConnectionLimits,
) -> std::io::Result<()> {
    serve_tls(listener, router, shutdown, limits, None).await
}

/// [`serve_with`], over TLS when `tls` is given (HTTPS).
pub async fn serve_tls(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    limits: ConnectionLimits,
    tls: Option<Arc<ServerConfig>>,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        let scheme = if tls.is_some() { "https" } else { "http" };
        tracing::info!(
            %addr,
            scheme,
            max_connections = limits.max_connections,
            max_connections_per_address = limits.max_connections_per_address,
            idle_secs = limits.idle_timeout.as_secs(),
            header_read_secs = limits.header_read_timeout.as_secs_f64(),
            body_secs = limits.body_timeout.as_secs_f64(),
            "HTTP API listening"
        );
    }
    let mut listener = match tls {
        None => BoundedListener::new(listener, limits),
        Some(tls) => BoundedListener::with_tls(listener, limits, tls)?,
    };
    let addresses = Arc::new(Addresses {
        cap: limits
            .max_connections_per_address
            .clamp(1, limits.max_connections.max(1)),
        next_id: AtomicU64::new(0),
        map: Mutex::new(HashMap::new()),
    });
    // `stop` tells connections to finish; every connection task holds a
    // `closed` receiver, so `closed_tx.closed()` resolves when all are gone.
    let (stop_tx, stop_rx) = watch::channel(false);
    let (closed_tx, closed_rx) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let (io, addr) = tokio::select! {
            conn = axum::serve::Listener::accept(&mut listener) => conn,
            () = &mut shutdown => break,
        };
        let Some(admitted) = addresses.admit(addr.ip()) else {
            tracing::debug!(client = %addr, "HTTP API connection refused: every connection of this address has a request in progress");
            continue;
        };
        tokio::spawn(serve_connection(
            io,
            addr,
            router.clone(),
            limits,
            admitted,
            stop_rx.clone(),
            closed_rx.clone(),
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(closed_rx);
    closed_tx.closed().await;
    Ok(())
}

/// Serves one connection until it ends, is closed for a newer connection
/// of its address, or finishes after shutdown.
async fn serve_connection(
    io: GuardedStream,
    addr: SocketAddr,
    router: Router,
    limits: ConnectionLimits,
    admitted: Admitted,
    mut stop: watch::Receiver<bool>,
    _closed: watch::Receiver<()>,
) {
    let state = admitted.state.clone();
    let body_timeout = limits.body_timeout;
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let busy = Busy::start(state.clone());
        let mut req = req.map(|body| Body::new(DeadlineBody::new(body, body_timeout)));
        req.extensions_mut().insert(ConnectInfo(ClientAddr(addr)));
        let router = router.clone();
        async move {
            // Busy until hyper has written the whole response and dropped
            // its body: a connection answering is no idle one.
            let response = router.oneshot(req).await;
            response.map(|r| r.map(|body| Body::new(BusyBody { body, _busy: busy })))
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // A client may send several requests in one write (pipelining) and
    // close its sending side right after, as `printf ... | nc` does. By
    // default hyper takes that close for the end of the connection and
    // drops the requests still buffered, answered or not; with half-close
    // it answers every one it has read and then closes. The idle and
    // header timeouts still end a connection that goes quiet.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .half_close(true)
        // Answers to pipelined requests go out in one write.
        .pipeline_flush(true);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let evicted = admitted.state.evict.notified();
    tokio::pin!(evicted);
    let mut stopping = *stop.borrow();
    if stopping {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(client = %addr, error = %e, "HTTP API connection ended");
                }
                break;
            }
            () = &mut evicted => {
                // Debug: during an attack this happens hundreds of times a
                // second, and the log must not become the next bottleneck.
                tracing::debug!(client = %addr, "HTTP API connection closed: a newer connection of this address needed its place");
                break;
            }
            r = stop.changed(), if !stopping => {
                stopping = true;
                if r.is_ok() {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// Open connections by client address, oldest first.
struct Addresses {
    cap: usize,
    next_id: AtomicU64,
    map: Mutex<HashMap<IpAddr, Vec<Arc<ConnState>>>>,
}

struct ConnState {
    id: u64,
    /// Requests being handled (head received, response not yet produced).
    in_flight: AtomicUsize,
    /// Notified to close the connection for a newer one of its address.
    evict: Notify,
}

impl Addresses {
    /// Registers a new connection from `ip`; at the cap, closes the oldest
    /// of its connections without a request in progress. `None` when all
    /// of them have one: the new connection is then dropped.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Admitted> {
        let mut map = self.map.lock();
        let list = map.entry(ip).or_default();
        if list.len() >= self.cap {
            let idle = list
                .iter()
                .position(|c| c.in_flight.load(Ordering::Acquire) == 0)?;
            let old = list.remove(idle);
            old.evict.notify_one();
        }
        let state = Arc::new(ConnState {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            in_flight: AtomicUsize::new(0),
            evict: Notify::new(),
        });
        list.push(state.clone());
        Some(Admitted {
            addresses: self.clone(),
            ip,
            state,
        })
    }
}

/// A connection's place in [`Addresses`], given up on drop.
struct Admitted {
    addresses: Arc<Addresses>,
    ip: IpAddr,
    state: Arc<ConnState>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut map = self.addresses.map.lock();
        if let Some(list) = map.get_mut(&self.ip) {
            list.retain(|c| c.id != self.state.id);
            if list.is_empty() {
                map.remove(&self.ip);
            }
        }
    }
}

/// Marks a request in progress on its connection while alive.
struct Busy(Arc<ConnState>);

impl Busy {
    fn start(state: Arc<ConnState>) -> Busy {
        state.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(state)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that keeps its request counted as in progress.
struct BusyBody {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for BusyBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A request body that fails once `body_timeout` has passed since the
/// request's head arrived, however steadily its bytes trickle in.
struct DeadlineBody {
    inner: Incoming,
    deadline: Pin<Box<Sleep>>,
    timeout: Duration,
}

impl DeadlineBody {
    fn new(inner: Incoming, timeout: Duration) -> DeadlineBody {
        DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
        }
    }
}

/// The error a body past its deadline ends with.
#[derive(Debug, thiserror::Error)]
#[error("request body not received within {0:?}")]
struct BodyTimedOut(Duration);

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match this.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimedOut(this.timeout).into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
