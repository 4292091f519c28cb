//! `POST /v1/policy/reload`: load and check the policy script and swap it in
//! (200 with the new version), or keep the old one and answer 422 with the
//! error and the script line. The console's policy workbench: the running
//! script and its history (`GET /v1/policy`), a draft checked, tested and
//! dry-run (`POST /v1/policy/check`, `/test`, `/dry-run`) and deployed
//! (`PUT /v1/policy`). The version is a 64-bit hash of the script,
//! sent as 16 hex digits as the log prints it (a JSON number that large
//! loses precision in JavaScript and jq).

use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::ApiJson;
use crate::control::Control;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokio::sync::Semaphore;
use utoipa::ToSchema;

/// Policy scripts compiled for the API at once (reload, check, test,
/// dry-run, deploy). Each compilation builds a Lua state of its own, up to
/// `[policy].memory_limit_mib`; a further request is answered 503 with
/// `Retry-After` rather than queued, so many clients cannot add up to
/// gigabytes.
pub const DRAFTS_AT_ONCE: usize = 4;

/// Middleware of the routes that compile a script: runs the request with
/// one of the [`DRAFTS_AT_ONCE`] places, or answers 503 with
/// `Retry-After: 1` when all are taken.
pub async fn one_of_few(
    State(places): State<Arc<Semaphore>>,
    req: Request,
    next: Next,
) -> Response {
    let Ok(_place) = places.try_acquire() else {
        let mut r = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "{DRAFTS_AT_ONCE} policy scripts are being compiled already; try again shortly"
            ),
        )
        .into_response();
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    };
    next.run(req).await
}

#[derive(Serialize, ToSchema)]
pub struct Reloaded {
    /// Version (hash) of the script now serving, 16 hex digits as logged.
    pub version: String,
}

/// Load, check and swap in the policy script.
#[utoipa::path(post, path = "/v1/policy/reload", operation_id = "reloadPolicy",
    responses(
        (status = 200, description = "New script serving", body = Reloaded),
        (status = 422, description = "Script refused; the old one keeps serving", body = ErrorBody),
    ))]
pub async fn reload<C: Control>(State(ctl): State<Arc<C>>) -> Result<Json<Reloaded>, ApiError> {
    match ctl.reload_policy().await {
        Ok(version) => {
            let version = format!("{version:016x}");
            tracing::info!(version, "policy reloaded by API");
            Ok(Json(Reloaded { version }))
        }
        Err(e) => {
            tracing::warn!(error = %e.error, line = ?e.line, "policy reload by API refused; old script kept");
            Err(e.into())
        }
    }
}

/// A policy script sent by the console's editor.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Draft {
    /// The whole script text.
    pub source: String,
}

/// `POST /v1/policy/test`: the draft, or the running script without one.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TestRequest {
    #[serde(default)]
    pub source: Option<String>,
}

/// `POST /v1/policy/dry-run`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DryRunRequest {
    pub source: String,
    /// IMSI.
    pub subscriber: String,
}

/// The version a draft would have.
#[derive(Serialize, ToSchema)]
pub struct Checked {
    /// 16 hex digits, as logged.
    pub version: String,
}

/// The running script: version, file, text, test-case file and the
/// versions that served before (oldest first; who and when).
#[utoipa::path(get, path = "/v1/policy", operation_id = "getPolicy",
    responses(
        (status = 200, description = "The running script", body = Object),
        (status = 503, description = "No policy engine behind this API", body = ErrorBody),
    ))]
pub async fn running<C: Control>(State(ctl): State<Arc<C>>) -> Result<Response, ApiError> {
    match ctl.policy() {
        Some(view) => Ok(Json(view).into_response()),
        None => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no policy engine behind this API",
        )),
    }
}

/// Compile and check a draft as a reload would, without running it for
/// traffic: its version, or 422 with the error and its line.
#[utoipa::path(post, path = "/v1/policy/check", operation_id = "checkPolicy",
    request_body = Draft,
    responses(
        (status = 200, description = "The draft would load", body = Checked),
        (status = 422, description = "Refused, with the script line", body = ErrorBody),
    ))]
pub async fn check<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiJson(draft): ApiJson<Draft>,
) -> Result<Json<Checked>, ApiError> {
    let version = ctl.check_policy(draft.source).await?;
    Ok(Json(Checked {
        version: format!("{version:016x}"),
    }))
}

/// Run the policy's test cases (`NAME.cases.toml` beside the script) on a
/// draft, or on the running script when no source is given.
#[utoipa::path(post, path = "/v1/policy/test", operation_id = "testPolicy",
    request_body = TestRequest,
    responses(
        (status = 200, description = "Results per case", body = Object),
        (status = 422, description = "The draft does not load, or the case file is malformed", body = ErrorBody),
    ))]
pub async fn test<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiJson(req): ApiJson<TestRequest>,
) -> Result<Response, ApiError> {
    let view = ctl.test_policy(req.source).await?;
    Ok(Json(view).into_response())
}

/// Decide with a draft and with the running script on the inputs of a
/// subscriber's last decision, side by side. Nothing is sent or stored.
#[utoipa::path(post, path = "/v1/policy/dry-run", operation_id = "dryRunPolicy",
    request_body = DryRunRequest,
    responses(
        (status = 200, description = "Both decisions and the inputs", body = Object),
        (status = 400, description = "Invalid IMSI", body = ErrorBody),
        (status = 404, description = "No such subscriber", body = ErrorBody),
    ))]
pub async fn dry_run<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiJson(req): ApiJson<DryRunRequest>,
) -> Result<Response, ApiError> {
    super::subscribers::check_imsi(&req.subscriber)?;
    let out = ctl.dry_run_policy(req.source, req.subscriber).await?;
    Ok(Json(out).into_response())
}

/// Deploy a draft: checked as a reload would, written to the policy file,
/// and serving at once; recorded in the history with who deployed it
/// ("token" when the API has one, "local" otherwise).
#[utoipa::path(put, path = "/v1/policy", operation_id = "deployPolicy",
    request_body = Draft,
    responses(
        (status = 200, description = "The draft is serving", body = Reloaded),
        (status = 422, description = "Refused, with the script line; the old script keeps serving", body = ErrorBody),
    ))]
pub async fn deploy<C: Control>(
    State(ctl): State<Arc<C>>,
    caller: Option<Extension<Caller>>,
    ApiJson(draft): ApiJson<Draft>,
) -> Result<Json<Reloaded>, ApiError> {
    let by = caller.map_or("local", |Extension(c)| c.0);
    match ctl.deploy_policy(draft.source, by.to_string()).await {
        Ok(version) => {
            let version = format!("{version:016x}");
            tracing::info!(version, by, "policy deployed by API");
            Ok(Json(Reloaded { version }))
        }
        Err(e) => {
            tracing::warn!(error = %e.error, line = ?e.line, "policy deployment by API refused; old script kept");
            Err(e.into())
        }
    }
}
