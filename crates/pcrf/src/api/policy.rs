//! `POST /v1/policy/reload`: load and check the policy script and swap it in
//! (200 with the new version), or keep the old one and answer 422 with the
//! error and the script line. The console's policy workbench: the running
//! script and its history (`GET /v1/policy`), a draft checked, tested and
//! dry-run (`POST /v1/policy/check`, `/test`, `/dry-run`) and deployed
//! (`PUT /v1/policy`). The version is a 64-bit hash of the script,
//! sent as 16 hex digits as the log prints it (a JSON number that large
//! loses precision in JavaScript and jq). Every deployment is a stored
//! version with a number (`GET /v1/policy/versions`, one with its script,
//! a diff between two) and an old one can be deployed again
//! (`POST /v1/policy/rollback/{id}`). A canary rollout tries a version on
//! a share of the subscribers first (`/v1/policy/rollout`: start, widen,
//! promote, abort).

use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use crate::control::version_views::{
    Artifact, Deployed, RolloutStart, RolloutView, VersionView, VersionsPage,
};
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
    /// Why it is deployed, kept with the version (`PUT /v1/policy` only).
    #[serde(default)]
    pub comment: String,
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

/// Deploy a draft: checked as a reload would and on its test cases,
/// recorded as the next stored version with who deployed it ("token"
/// when the API has one, "local" otherwise) and the comment, written to
/// the policy file, and serving at once here; on a shared store the other
/// nodes adopt it, and the answer says which did within a few seconds.
#[utoipa::path(put, path = "/v1/policy", operation_id = "deployPolicy",
    request_body = Draft,
    responses(
        (status = 200, description = "The draft is serving", body = Deployed),
        (status = 409, description = "Another version was deployed meanwhile", body = ErrorBody),
        (status = 422, description = "Refused, with the script line; the old script keeps serving", body = ErrorBody),
        (status = 503, description = "The store cannot record it", body = ErrorBody),
    ))]
pub async fn deploy<C: Control>(
    State(ctl): State<Arc<C>>,
    caller: Option<Extension<Caller>>,
    ApiJson(draft): ApiJson<Draft>,
) -> Result<Json<Deployed>, ApiError> {
    let by = caller.map_or("local", |Extension(c)| c.0);
    match ctl
        .deploy_policy(draft.source, by.to_string(), draft.comment)
        .await
    {
        Ok(d) => {
            tracing::info!(version = d.deployed.id, hash = %d.version, by, "policy deployed by API");
            Ok(Json(d))
        }
        Err(e) => {
            tracing::warn!(error = ?e, "policy deployment by API refused; old script kept");
            Err(e.into())
        }
    }
}

/// `GET /v1/policy/versions` paging.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct VersionsQuery {
    /// Versions older than this id (the previous page's `next`).
    #[serde(default)]
    pub before: Option<i64>,
    /// At most this many (1 to 500; 50 by default).
    #[serde(default = "default_versions_page")]
    pub limit: usize,
}

fn default_versions_page() -> usize {
    crate::control::version_views::DEFAULT_VERSIONS_PAGE
}

/// The stored policy versions, newest first: who deployed each, when, why,
/// its parent, and which one this node serves.
#[utoipa::path(get, path = "/v1/policy/versions", operation_id = "listPolicyVersions",
    params(VersionsQuery),
    responses(
        (status = 200, description = "A page of versions", body = VersionsPage),
        (status = 503, description = "The store cannot be read", body = ErrorBody),
    ))]
pub async fn versions<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiQuery(q): ApiQuery<VersionsQuery>,
) -> Result<Json<VersionsPage>, ApiError> {
    Ok(Json(
        ctl.versions(Artifact::Policy, q.before, q.limit).await?,
    ))
}

/// One stored policy version with its script.
#[utoipa::path(get, path = "/v1/policy/versions/{id}", operation_id = "getPolicyVersion",
    params(("id" = i64, Path, description = "Version number")),
    responses(
        (status = 200, description = "The version and its script", body = VersionView),
        (status = 404, description = "No such version", body = ErrorBody),
    ))]
pub async fn version<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<VersionView>, ApiError> {
    Ok(Json(ctl.version(Artifact::Policy, id).await?))
}

/// What changed from version `a` to version `b`, as a unified diff
/// (`text/plain`, as `diff -u` prints it; empty when the scripts are the
/// same).
#[utoipa::path(get, path = "/v1/policy/versions/{a}/diff/{b}", operation_id = "diffPolicyVersions",
    params(
        ("a" = i64, Path, description = "The older side"),
        ("b" = i64, Path, description = "The newer side"),
    ),
    responses(
        (status = 200, description = "Unified diff", body = String, content_type = "text/plain"),
        (status = 404, description = "No such version", body = ErrorBody),
    ))]
pub async fn diff<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath((a, b)): ApiPath<(i64, i64)>,
) -> Result<Response, ApiError> {
    Ok(plain_text(ctl.version_diff(Artifact::Policy, a, b).await?))
}

/// A diff as `text/plain`.
pub(super) fn plain_text(text: String) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// Deploy version `id`'s script again: a new version whose parent is the
/// newest, checked as any deployment (its test cases must pass today).
#[utoipa::path(post, path = "/v1/policy/rollback/{id}", operation_id = "rollbackPolicy",
    params(("id" = i64, Path, description = "The version to deploy again")),
    responses(
        (status = 200, description = "Serving again, as a new version", body = Deployed),
        (status = 404, description = "No such version", body = ErrorBody),
        (status = 409, description = "Another version was deployed meanwhile", body = ErrorBody),
        (status = 422, description = "Refused by its checks; the running script keeps serving", body = ErrorBody),
    ))]
pub async fn rollback<C: Control>(
    State(ctl): State<Arc<C>>,
    caller: Option<Extension<Caller>>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Deployed>, ApiError> {
    let by = caller.map_or("local", |Extension(c)| c.0);
    let d = ctl.rollback_policy(id, by.to_string()).await?;
    tracing::info!(
        to = id,
        version = d.deployed.id,
        by,
        "policy rolled back by API"
    );
    Ok(Json(d))
}

/// `POST /v1/policy/rollout`: a script, or a stored version's script, for
/// a share of the subscribers and those listed.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutRequest {
    /// The canary's script (or `version`).
    #[serde(default)]
    pub source: Option<String>,
    /// A stored version whose script is the canary (or `source`).
    #[serde(default)]
    pub version: Option<i64>,
    /// The share of subscribers the canary decides for, 0 to 100.
    #[serde(default)]
    pub share_percent: f64,
    /// Subscribers (IMSI) on the canary whatever the share.
    #[serde(default)]
    pub subscribers: Vec<String>,
    /// Why, kept with the canary's version.
    #[serde(default)]
    pub comment: String,
}

/// `PATCH /v1/policy/rollout`: a larger share, more subscribers.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WidenRequest {
    /// The new share, 0 to 100; no smaller than the running one.
    #[serde(default)]
    pub share_percent: Option<f64>,
    /// Subscribers (IMSI) added to those on the canary.
    #[serde(default)]
    pub subscribers: Vec<String>,
}

fn share(percent: f64) -> Result<u32, ApiError> {
    crate::policy::rollout::basis_points_of(percent).map_err(ApiError::bad_request)
}

fn imsis(list: &[String]) -> Result<(), ApiError> {
    list.iter()
        .try_for_each(|imsi| super::subscribers::check_imsi(imsi))
}

/// Start a canary rollout: the script is checked as any deployment and
/// recorded as the next version, which then decides for `share_percent`
/// of the subscribers (a stable hash of the IMSI, so always the same
/// ones) and those listed; the version serving now stays for the rest.
/// Their open sessions are decided again, with a RAR where the decision
/// differs.
#[utoipa::path(post, path = "/v1/policy/rollout", operation_id = "startPolicyRollout",
    request_body = RolloutRequest,
    responses(
        (status = 200, description = "The rollout running", body = RolloutView),
        (status = 400, description = "A share outside 0..100, an invalid IMSI, neither or both of source and version", body = ErrorBody),
        (status = 404, description = "No such version", body = ErrorBody),
        (status = 409, description = "A rollout runs already, or another version was deployed meanwhile", body = ErrorBody),
        (status = 422, description = "Refused, with the script line; nothing changes", body = ErrorBody),
    ))]
pub async fn start_rollout<C: Control>(
    State(ctl): State<Arc<C>>,
    caller: Option<Extension<Caller>>,
    ApiJson(req): ApiJson<RolloutRequest>,
) -> Result<Json<RolloutView>, ApiError> {
    let by = caller.map_or("local", |Extension(c)| c.0);
    imsis(&req.subscribers)?;
    let start = RolloutStart {
        share_basis_points: share(req.share_percent)?,
        source: req.source,
        version: req.version,
        subscribers: req.subscribers,
        comment: req.comment,
    };
    let r = ctl.start_rollout(start, by.to_string()).await?;
    tracing::info!(
        canary = r.canary,
        stable = r.stable,
        share_percent = r.share_percent,
        by,
        "policy rollout started by API"
    );
    Ok(Json(r))
}

/// Widen the running rollout: a larger share (subscribers only move from
/// the stable version to the canary), more listed subscribers.
#[utoipa::path(patch, path = "/v1/policy/rollout", operation_id = "widenPolicyRollout",
    request_body = WidenRequest,
    responses(
        (status = 200, description = "The rollout running", body = RolloutView),
        (status = 400, description = "A share outside 0..100 or below the running one, an invalid IMSI", body = ErrorBody),
        (status = 409, description = "No rollout is running", body = ErrorBody),
    ))]
pub async fn widen_rollout<C: Control>(
    State(ctl): State<Arc<C>>,
    caller: Option<Extension<Caller>>,
    ApiJson(req): ApiJson<WidenRequest>,
) -> Result<Json<RolloutView>, ApiError> {
    let by = caller.map_or("local", |Extension(c)| c.0);
    imsis(&req.subscribers)?;
    let bp = req.share_percent.map(share).transpose()?;
    let r = ctl
        .widen_rollout(bp, req.subscribers, by.to_string())
        .await?;
    tracing::info!(
        canary = r.canary,
        share_percent = r.share_percent,
        by,
        "policy rollout widened by API"
    );
    Ok(Json(r))
}

/// Promote the running rollout: its canary decides for everyone and is
/// written to the policy file.
#[utoipa::path(post, path = "/v1/policy/rollout/promote", operation_id = "promotePolicyRollout",
    responses(
        (status = 200, description = "The canary serves everyone", body = Deployed),
        (status = 409, description = "No rollout is running", body = ErrorBody),
    ))]
pub async fn promote_rollout<C: Control>(
    State(ctl): State<Arc<C>>,
    caller: Option<Extension<Caller>>,
) -> Result<Json<Deployed>, ApiError> {
    let by = caller.map_or("local", |Extension(c)| c.0);
    let d = ctl.promote_rollout(by.to_string()).await?;
    tracing::info!(
        version = d.deployed.id,
        by,
        "policy rollout promoted by API"
    );
    Ok(Json(d))
}

/// Abort the running rollout: the stable version's script is deployed
/// again as the next version and decides for everyone.
#[utoipa::path(post, path = "/v1/policy/rollout/abort", operation_id = "abortPolicyRollout",
    responses(
        (status = 200, description = "The stable script serves everyone, as a new version", body = Deployed),
        (status = 409, description = "No rollout is running", body = ErrorBody),
        (status = 422, description = "The stable script fails its checks today; the rollout keeps running", body = ErrorBody),
    ))]
pub async fn abort_rollout<C: Control>(
    State(ctl): State<Arc<C>>,
    caller: Option<Extension<Caller>>,
) -> Result<Json<Deployed>, ApiError> {
    let by = caller.map_or("local", |Extension(c)| c.0);
    let d = ctl.abort_rollout(by.to_string()).await?;
    tracing::info!(version = d.deployed.id, by, "policy rollout aborted by API");
    Ok(Json(d))
}
