//! Health, readiness, running configuration and the Prometheus scrape:
//! what load balancers, orchestrators and monitoring poll.

use super::http_stats::HttpStats;
use crate::control::Control;
use crate::metrics::{render_source, CONTENT_TYPE};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use serde::Serialize;
use std::sync::Arc;
use utoipa::ToSchema;

#[derive(Serialize, ToSchema)]
pub struct Health {
    /// Always "ok".
    status: &'static str,
}

#[derive(Serialize, ToSchema)]
pub struct Ready {
    ready: bool,
    /// Why the node cannot take traffic.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct ConfigInfo {
    /// Checksum of the running configuration file.
    checksum: String,
}

/// Liveness: the process answers HTTP (never needs a token).
#[utoipa::path(get, path = "/v1/health", operation_id = "health", security(),
    responses((status = 200, description = "Alive", body = Health)))]
pub async fn health() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Readiness: the store is writable.
#[utoipa::path(get, path = "/v1/ready", operation_id = "ready",
    responses(
        (status = 200, description = "Ready", body = Ready),
        (status = 503, description = "Not ready, with the reason", body = Ready),
    ))]
pub async fn ready<C: Control>(State(ctl): State<Arc<C>>) -> Response {
    match ctl.ready().await {
        Ok(()) => Json(Ready {
            ready: true,
            error: None,
        })
        .into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Ready {
                ready: false,
                error: Some(reason),
            }),
        )
            .into_response(),
    }
}

/// Checksum of the running configuration.
#[utoipa::path(get, path = "/v1/config", operation_id = "config",
    responses((status = 200, description = "Checksum", body = ConfigInfo)))]
pub async fn config<C: Control>(State(ctl): State<Arc<C>>) -> Json<ConfigInfo> {
    Json(ConfigInfo {
        checksum: ctl.config_checksum(),
    })
}

/// Prometheus metrics (text format 0.0.4): the node's scrape followed by
/// the API's own families.
#[utoipa::path(get, path = "/metrics", operation_id = "metrics",
    responses((status = 200, description = "The scrape", body = String, content_type = "text/plain")))]
pub async fn metrics<C: Control>(
    State(ctl): State<Arc<C>>,
    Extension(http): Extension<Arc<HttpStats>>,
) -> Response {
    let mut text = ctl.render_metrics();
    text.push_str(&render_source(http));
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response()
}
