//! Runs the API router on a bound listener until shutdown; in-flight
//! requests finish first (graceful shutdown). Connections are limited in
//! number and closed when idle (see [`super::listener`]).

use super::listener::{BoundedListener, ClientAddr, ConnectionLimits};
use axum::Router;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_rustls::rustls::ServerConfig;

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
        tracing::info!(%addr, scheme, max_connections = limits.max_connections, idle_secs = limits.idle_timeout.as_secs(), "HTTP API listening");
    }
    let listener = match tls {
        None => BoundedListener::new(listener, limits),
        Some(tls) => BoundedListener::with_tls(listener, limits, tls)?,
    };
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<ClientAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
