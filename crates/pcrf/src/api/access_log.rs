//! One log line per API request, so an operator can reconstruct who changed
//! what: changes (PUT/POST/DELETE) at info, reads at debug, with method,
//! path, status, duration and client address. Tokens and bodies are never
//! logged. The same middleware counts the request in [`HttpStats`].
//!
//! tower-http's `TraceLayer` would not do: its response hook sees neither
//! the method (which picks the level), the route template nor the client
//! address, so the counting middleware would stay and the line would lose
//! what an operator reads it for.

use super::http_stats::HttpStats;
use crate::http_listener::ClientAddr;
use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use std::sync::Arc;
use std::time::Instant;

/// Middleware: logs the request after it is answered.
pub async fn log_request(
    State(stats): State<Arc<HttpStats>>,
    req: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string());
    let client = req
        .extensions()
        .get::<ConnectInfo<ClientAddr>>()
        .map(|ConnectInfo(ClientAddr(addr))| addr.to_string())
        .unwrap_or_default();
    let resp = next.run(req).await;
    let status = resp.status().as_u16();
    stats.record(route.as_deref(), &method, status);
    let us = started.elapsed().as_micros() as u64;
    if method == Method::GET || method == Method::HEAD {
        tracing::debug!(target: "pcrf::api", %method, path, status, us, client, "http");
    } else {
        tracing::info!(target: "pcrf::api", %method, path, status, us, client, "http");
    }
    resp
}
