//! `/v1/sessions`: list and inspect Gx sessions (with the last decision,
//! its inputs and script version), re-authorize one (RAR with the rule
//! difference) or release it (RAR with Session-Release-Cause).

use super::error::ApiError;
use super::extract::{ApiPath, ApiQuery};
use crate::control::{Control, ReleaseCause, SessionFilter, MAX_SESSION_LIMIT};
use crate::session::GxSession;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[derive(Serialize)]
struct SessionList<'a> {
    sessions: Vec<&'a GxSession>,
    /// More sessions matched than `limit`.
    truncated: bool,
}

pub async fn list<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiQuery(mut filter): ApiQuery<SessionFilter>,
) -> Result<Response, ApiError> {
    if filter.limit == 0 || filter.limit > MAX_SESSION_LIMIT {
        return Err(ApiError::bad_request(format!(
            "limit must be 1 to {MAX_SESSION_LIMIT}"
        )));
    }
    let limit = filter.limit;
    // One more than asked tells whether the listing was cut.
    filter.limit += 1;
    let found = ctl.sessions(&filter);
    let truncated = found.len() > limit;
    let body = SessionList {
        sessions: found.iter().take(limit).map(|s| &**s).collect(),
        truncated,
    };
    Ok(Json(body).into_response())
}

/// `GET /v1/subscribers/{imsi}/sessions`: the whole records, so whatever
/// is bound to a Gx session (Rx AF sessions now, others later) shows up
/// without this handler knowing about it.
#[derive(Serialize)]
struct SubscriberSessions<'a> {
    subscriber: &'a str,
    sessions: Vec<&'a GxSession>,
}

pub async fn of_subscriber<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(imsi): ApiPath<String>,
) -> Result<Response, ApiError> {
    super::subscribers::check_imsi(&imsi)?;
    let found = ctl.sessions(&SessionFilter {
        subscriber: Some(imsi.clone()),
        limit: MAX_SESSION_LIMIT,
        ..Default::default()
    });
    if found.is_empty() && ctl.subscriber(&imsi).is_none() {
        return Err(ApiError::not_found(format!("no subscriber {imsi}")));
    }
    let body = SubscriberSessions {
        subscriber: &imsi,
        sessions: found.iter().map(|s| &**s).collect(),
    };
    Ok(Json(body).into_response())
}

fn check_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > 1024 {
        return Err(ApiError::bad_request("Session-Id must be 1 to 1024 bytes"));
    }
    Ok(())
}

pub async fn get<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    check_id(&id)?;
    match ctl.session(&id).await {
        Some(s) => Ok(Json(&*s).into_response()),
        None => Err(ApiError::not_found(format!("no session {id}"))),
    }
}

/// `DELETE /v1/sessions/{id}?cause=...`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseQuery {
    #[serde(default)]
    pub cause: ReleaseCause,
}

pub async fn release<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ReleaseQuery>,
) -> Result<Response, ApiError> {
    check_id(&id)?;
    let outcome = ctl.release(&id, q.cause).await?;
    tracing::info!(session = %id, cause = q.cause.code(), result = ?outcome.result_code, "session released by API");
    Ok(Json(outcome).into_response())
}

pub async fn reauth<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    check_id(&id)?;
    let outcome = ctl.reauth(&id).await?;
    tracing::info!(
        session = %id,
        rar_sent = outcome.rar_sent,
        result = ?outcome.result_code,
        script_version = outcome.script_version,
        "session re-authorized by API"
    );
    Ok(Json(outcome).into_response())
}
