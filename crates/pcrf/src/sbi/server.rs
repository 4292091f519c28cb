//! The SBI listener: HTTP/2 only (TS 29.500 §5.2), h2c with prior
//! knowledge or TLS with ALPN h2, on its own address. Connections are
//! bounded in number and closed when idle by the same listener the REST
//! API uses; hyper's HTTP/2 server bounds streams per connection, header
//! list size (however many CONTINUATION frames carry it), streams reset
//! before their answer (rapid reset) and stream errors a client causes,
//! closing the connection with GOAWAY past them. Each request goes to
//! [`Routes::handle`].

use super::config::SbiConfig;
use super::routes::Routes;
use crate::http_listener::{BoundedListener, ConnectionLimits, GuardedStream};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::rustls::ServerConfig;

/// Serves `routes` on `listener` until `shutdown` resolves; connections
/// then finish the requests they have (GOAWAY) and the call returns when
/// all are closed.
pub async fn serve(
    listener: TcpListener,
    routes: Routes,
    config: &SbiConfig,
    tls: Option<Arc<ServerConfig>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = ConnectionLimits {
        max_connections: config.max_connections,
        idle_timeout: config.idle_timeout(),
        // Not used by this listener (HTTP/1 only).
        header_read_timeout: config.request_timeout(),
        body_timeout: config.request_timeout(),
        max_connections_per_address: config.max_connections,
    };
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(
            %addr,
            scheme = if tls.is_some() { "https (h2)" } else { "http (h2c)" },
            max_connections = config.max_connections,
            max_concurrent_streams = config.max_concurrent_streams,
            "SBI listening"
        );
    }
    let mut listener = match tls {
        None => BoundedListener::new(listener, limits),
        Some(tls) => BoundedListener::with_tls(listener, limits, tls)?,
    };
    let mut builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(config.max_concurrent_streams)
        .max_header_list_size(config.max_header_list_bytes)
        .max_pending_accept_reset_streams(config.max_pending_reset_streams)
        .max_local_error_reset_streams(config.max_local_error_reset_streams)
        // A connection whose client stops answering PINGs is closed.
        .keep_alive_interval(Some(config.idle_timeout() / 2))
        .keep_alive_timeout(Duration::from_secs(20).min(config.idle_timeout()))
        // Answers are small; a client holding its window at zero holds
        // at most this much of ours per stream.
        .max_send_buf_size(64 * 1024);
    let (stop_tx, stop_rx) = watch::channel(false);
    let (closed_tx, closed_rx) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let (io, addr) = tokio::select! {
            conn = axum::serve::Listener::accept(&mut listener) => conn,
            () = &mut shutdown => break,
        };
        tokio::spawn(serve_connection(
            io,
            addr,
            routes.clone(),
            builder.clone(),
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

async fn serve_connection(
    io: GuardedStream,
    addr: SocketAddr,
    routes: Routes,
    builder: hyper::server::conn::http2::Builder<TokioExecutor>,
    mut stop: watch::Receiver<bool>,
    _closed: watch::Receiver<()>,
) {
    let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
        let routes = routes.clone();
        async move { Ok::<_, std::convert::Infallible>(routes.handle(req).await) }
    });
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut stopping = *stop.borrow();
    if stopping {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    // Debug: a hostile client makes these by the thousand.
                    tracing::debug!(client = %addr, error = %e, "SBI connection ended");
                }
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
