//! The query profiler over HTTP (per-statement counts and times, switched
//! on for a window while the server runs):
//! `POST /v1/debug/query-profiler` {"enabled": true|false} switches it on
//! (a new measurement window) or off (figures frozen), and
//! `GET /v1/debug/queries?top=N` shows per statement the calls, calls per
//! second, execution and fetch time, rows and share of database time,
//! costliest first. Only the PostgreSQL store has one; with the embedded
//! store both answer 409 saying so.

use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiQuery};
use crate::control::Control;
use crate::store::postgres::{ProfileSnapshot, QueryProfiler};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::{IntoParams, ToSchema};

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Switch {
    pub enabled: bool,
}

#[derive(Serialize, ToSchema)]
pub struct Switched {
    pub enabled: bool,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct Top {
    /// Statements shown, costliest first.
    #[serde(default = "fifteen")]
    #[param(minimum = 1, default = 15)]
    pub top: usize,
}

fn fifteen() -> usize {
    15
}

fn profiler<C: Control>(ctl: &C) -> Result<QueryProfiler, ApiError> {
    ctl.query_profiler().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "the query profiler profiles the PostgreSQL store; this node runs [store] kind = \"sqlite\"",
        )
    })
}

/// Switch the store's query profiler on (new window) or off (figures
/// kept); PostgreSQL store only.
#[utoipa::path(post, path = "/v1/debug/query-profiler", operation_id = "switchQueryProfiler",
    request_body = Switch,
    responses(
        (status = 200, description = "The profiler's state", body = Switched),
        (status = 400, description = "Bad body", body = ErrorBody),
        (status = 409, description = "The store has no profiler (embedded SQLite)", body = ErrorBody),
    ))]
pub async fn switch<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiJson(s): ApiJson<Switch>,
) -> Result<Json<Switched>, ApiError> {
    let p = profiler(&*ctl)?;
    p.set_enabled(s.enabled);
    tracing::info!(enabled = s.enabled, "query profiler switched by API");
    Ok(Json(Switched {
        enabled: p.is_enabled(),
    }))
}

/// Per statement: calls, calls/s, execution and fetch time (µs), rows,
/// share of database time; costliest first.
#[utoipa::path(get, path = "/v1/debug/queries", operation_id = "queries",
    params(Top),
    responses(
        (status = 200, description = "The profile", body = Object),
        (status = 409, description = "The store has no profiler (embedded SQLite)", body = ErrorBody),
    ))]
pub async fn queries<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiQuery(t): ApiQuery<Top>,
) -> Result<Json<ProfileSnapshot>, ApiError> {
    let mut snap = profiler(&*ctl)?.snapshot();
    snap.statements.truncate(t.top.max(1));
    Ok(Json(snap))
}
