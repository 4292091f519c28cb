//! `/v1/sessions`: list and inspect Gx sessions (with the last decision,
//! its inputs and script version), re-authorize one (RAR with the rule
//! difference) or release it (RAR with Session-Release-Cause).

use super::error::{ApiError, ErrorBody};
use super::extract::{ApiPath, ApiQuery};
use super::subscribers::check_imsi;
use crate::control::console::RecentDecisions;
use crate::control::{
    Control, ReauthOutcome, ReleaseCause, ReleaseOutcome, SessionFilter, MAX_SESSION_LIMIT,
};
use crate::session::GxSession;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::{IntoParams, ToSchema};

#[derive(Serialize, ToSchema)]
struct SessionList<'a> {
    sessions: Vec<&'a GxSession>,
    /// More sessions matched than `limit`.
    truncated: bool,
}

/// List Gx sessions, optionally filtered.
#[utoipa::path(get, path = "/v1/sessions", operation_id = "listSessions",
    params(
        ("subscriber" = Option<String>, Query, description = "IMSI or MSISDN"),
        ("apn" = Option<String>, Query, description = "Called-Station-Id"),
        ("peer" = Option<String>, Query, description = "The PCEF's Origin-Host"),
        ("limit" = Option<usize>, Query, minimum = 1, maximum = 100000, description = "At most this many sessions (default 1000)"),
    ),
    responses(
        (status = 200, description = "Matching sessions", body = SessionList),
        (status = 400, description = "Invalid query", body = ErrorBody),
    ))]
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
#[derive(Serialize, ToSchema)]
struct SubscriberSessions<'a> {
    subscriber: &'a str,
    sessions: Vec<&'a GxSession>,
}

/// A subscriber's open Gx sessions with what is bound to them (Rx AF
/// sessions with their media and rules).
#[utoipa::path(get, path = "/v1/subscribers/{imsi}/sessions", operation_id = "getSubscriberSessions",
    params(("imsi" = String, Path, description = "IMSI, 5 to 15 digits")),
    responses(
        (status = 200, description = "Sessions", body = SubscriberSessions),
        (status = 400, description = "Invalid IMSI", body = ErrorBody),
        (status = 404, description = "No such subscriber", body = ErrorBody),
    ))]
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

/// A session with its last decision, the decision's inputs and script
/// version.
#[utoipa::path(get, path = "/v1/sessions/{id}", operation_id = "getSession",
    params(("id" = String, Path, description = "Session-Id (percent-encoded)")),
    responses(
        (status = 200, description = "The session", body = GxSession),
        (status = 400, description = "Invalid Session-Id", body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
    ))]
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
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReleaseQuery {
    /// Session-Release-Cause; UNSPECIFIED_REASON when absent.
    #[serde(default)]
    #[param(inline)]
    pub cause: ReleaseCause,
}

/// Release the session: RAR with Session-Release-Cause to its PCEF.
#[utoipa::path(delete, path = "/v1/sessions/{id}", operation_id = "releaseSession",
    params(("id" = String, Path, description = "Session-Id (percent-encoded)"), ReleaseQuery),
    responses(
        (status = 200, description = "RAR answered", body = ReleaseOutcome),
        (status = 400, description = "Invalid Session-Id or cause", body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
        (status = 409, description = "Session already closed", body = ErrorBody),
        (status = 502, description = "PCEF not connected or answered with an error", body = ErrorBody),
        (status = 504, description = "No RAA in time", body = ErrorBody),
    ))]
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

/// Re-decide the session and push the rule difference in a RAR.
#[utoipa::path(post, path = "/v1/sessions/{id}/reauth", operation_id = "reauthSession",
    params(("id" = String, Path, description = "Session-Id (percent-encoded)")),
    responses(
        (status = 200, description = "Re-decided", body = ReauthOutcome),
        (status = 400, description = "Invalid Session-Id", body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
        (status = 409, description = "Session closed", body = ErrorBody),
        (status = 502, description = "PCEF not connected or answered with an error", body = ErrorBody),
        (status = 504, description = "No RAA in time", body = ErrorBody),
    ))]
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
        // 16 hex digits, as the reload answer, the API and /metrics show it.
        script_version = %format_args!("{:016x}", outcome.script_version),
        "session re-authorized by API"
    );
    Ok(Json(outcome).into_response())
}

/// `GET /v1/subscribers/{imsi}/decisions` paging.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct DecisionsQuery {
    /// At most this many, newest first (1 to 200; 20 by default).
    #[serde(default = "default_decisions")]
    pub limit: usize,
}

fn default_decisions() -> usize {
    20
}

/// The most decisions one request returns.
pub const MAX_DECISIONS: usize = 200;

/// A subscriber's last policy decisions on this node, newest first, read
/// back from the decision log's file (`[decision_log]` with `file`): what
/// was decided, when, by which policy version, on which inputs, and what
/// was sent, after the session's own record has moved on.
#[utoipa::path(get, path = "/v1/subscribers/{imsi}/decisions", operation_id = "getSubscriberDecisions",
    params(("imsi" = String, Path, description = "IMSI, 5 to 15 digits"), DecisionsQuery),
    responses(
        (status = 200, description = "Decisions, newest first", body = RecentDecisions),
        (status = 400, description = "Invalid IMSI or limit", body = ErrorBody),
        (status = 409, description = "The decision log writes no file on this node", body = ErrorBody),
        (status = 503, description = "The file cannot be read", body = ErrorBody),
    ))]
pub async fn decisions<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(imsi): ApiPath<String>,
    ApiQuery(q): ApiQuery<DecisionsQuery>,
) -> Result<Json<RecentDecisions>, ApiError> {
    check_imsi(&imsi)?;
    if q.limit == 0 || q.limit > MAX_DECISIONS {
        return Err(ApiError::bad_request(format!(
            "limit must be 1 to {MAX_DECISIONS}"
        )));
    }
    Ok(Json(ctl.recent_decisions(imsi, q.limit).await?))
}
