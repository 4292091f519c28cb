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
use serde_json::json;
use std::sync::Arc;

/// Liveness: the process answers HTTP. Never needs a token.
pub async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Readiness: 503 with the reason when the node cannot take traffic.
pub async fn ready<C: Control>(State(ctl): State<Arc<C>>) -> Response {
    match ctl.ready().await {
        Ok(()) => Json(json!({"ready": true})).into_response(),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"ready": false, "error": reason})),
        )
            .into_response(),
    }
}

pub async fn config<C: Control>(State(ctl): State<Arc<C>>) -> Json<serde_json::Value> {
    Json(json!({"checksum": ctl.config_checksum()}))
}

/// The node's scrape followed by the API's own families.
pub async fn metrics<C: Control>(
    State(ctl): State<Arc<C>>,
    Extension(http): Extension<Arc<HttpStats>>,
) -> Response {
    let mut text = ctl.render_metrics();
    text.push_str(&render_source(http));
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response()
}
