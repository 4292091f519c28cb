//! Runs the API router on a bound listener until shutdown; in-flight
//! requests finish first (graceful shutdown). Connections are limited in
//! number and closed when idle (see [`super::listener`]).

use super::listener::{BoundedListener, ClientAddr, ConnectionLimits};
use axum::Router;
use std::future::Future;
use tokio::net::TcpListener;

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
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, max_connections = limits.max_connections, idle_secs = limits.idle_timeout.as_secs(), "HTTP API listening");
    }
    axum::serve(
        BoundedListener::new(listener, limits),
        router.into_make_service_with_connect_info::<ClientAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
