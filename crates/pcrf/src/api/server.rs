//! Runs the API router on a bound listener until shutdown; in-flight
//! requests finish first (graceful shutdown).

use axum::Router;
use std::future::Future;
use std::net::SocketAddr;
use tokio::net::TcpListener;

/// Serves `router` on `listener` until `shutdown` resolves. Client
/// addresses are made available to the access log.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "HTTP API listening");
    }
    axum::serve(
        listener,
        router.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}
