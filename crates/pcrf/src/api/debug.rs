//! The query profiler over HTTP (per-statement counts and times, switched
//! on for a window while the server runs):
//! `POST /v1/debug/query-profiler` {"enabled": true|false} switches it on
//! (a new measurement window) or off (figures frozen), and
//! `GET /v1/debug/queries?top=N` shows per statement the calls, calls per
//! second, execution and fetch time, rows and share of database time,
//! costliest first. Only the PostgreSQL store has one; with the embedded
//! store both answer 409 saying so.

use super::error::ApiError;
use super::extract::{ApiJson, ApiQuery};
use crate::control::Control;
use crate::store::postgres::{ProfileSnapshot, QueryProfiler};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Switch {
    pub enabled: bool,
}

#[derive(Serialize)]
pub struct Switched {
    pub enabled: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Top {
    #[serde(default = "fifteen")]
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

pub async fn queries<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiQuery(t): ApiQuery<Top>,
) -> Result<Json<ProfileSnapshot>, ApiError> {
    let mut snap = profiler(&*ctl)?.snapshot();
    snap.statements.truncate(t.top.max(1));
    Ok(Json(snap))
}
