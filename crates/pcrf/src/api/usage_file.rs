//! The usage file (Monitoring-Keys, accumulators, plans) over the API, as
//! stored versions like the policy's: `PUT /v1/usage` deploys a new file
//! (validated, checked against the grants open sessions hold, recorded,
//! written to the usage file, in force at once, adopted by the other
//! nodes of a shared store), `GET /v1/usage/versions` lists the versions,
//! one with its text, a diff between two, and `POST
//! /v1/usage/rollback/{id}` deploys an old one again.

use super::auth::Caller;
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiPath, ApiQuery};
use super::policy::{plain_text, VersionsQuery};
use crate::control::version_views::{Artifact, Deployed, VersionView, VersionsPage};
use crate::control::Control;
use axum::extract::State;
use axum::response::Response;
use axum::{Extension, Json};
use serde::Deserialize;
use std::sync::Arc;
use utoipa::ToSchema;

/// `PUT /v1/usage`: a whole usage file.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageDraft {
    /// The usage file's TOML text (docs/usage.md).
    pub source: String,
    /// Why it is deployed, kept with the version.
    #[serde(default)]
    pub comment: String,
}

/// Deploy a usage file: validated, checked against the grants this node's
/// open sessions hold (a key they hold may not disappear or stop feeding
/// every accumulator), recorded as the next stored version, written to the
/// usage file and in force at once; on a shared store the other nodes
/// adopt it after the same check, and the answer says which did within a
/// few seconds.
#[utoipa::path(put, path = "/v1/usage", operation_id = "deployUsageFile",
    request_body = UsageDraft,
    responses(
        (status = 200, description = "In force", body = Deployed),
        (status = 409, description = "Another version was deployed meanwhile", body = ErrorBody),
        (status = 422, description = "Refused, with the reasons; the running file stays", body = ErrorBody),
        (status = 503, description = "The store cannot record it", body = ErrorBody),
    ))]
pub async fn deploy<C: Control>(
    State(ctl): State<Arc<C>>,
    caller: Option<Extension<Caller>>,
    ApiJson(draft): ApiJson<UsageDraft>,
) -> Result<Json<Deployed>, ApiError> {
    let by = caller.map_or("local", |Extension(c)| c.0);
    match ctl
        .deploy_usage(draft.source, by.to_string(), draft.comment)
        .await
    {
        Ok(d) => {
            tracing::info!(version = d.deployed.id, checksum = %d.version, by, "usage file deployed by API");
            Ok(Json(d))
        }
        Err(e) => {
            tracing::warn!(error = ?e, "usage file deployment by API refused; the running file stays");
            Err(e.into())
        }
    }
}

/// The stored usage file versions, newest first: who deployed each, when,
/// why, its parent, and which one this node counts by.
#[utoipa::path(get, path = "/v1/usage/versions", operation_id = "listUsageFileVersions",
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
        ctl.versions(Artifact::Usage, q.before, q.limit).await?,
    ))
}

/// One stored usage file version with its text.
#[utoipa::path(get, path = "/v1/usage/versions/{id}", operation_id = "getUsageFileVersion",
    params(("id" = i64, Path, description = "Version number")),
    responses(
        (status = 200, description = "The version and its text", body = VersionView),
        (status = 404, description = "No such version", body = ErrorBody),
    ))]
pub async fn version<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<VersionView>, ApiError> {
    Ok(Json(ctl.version(Artifact::Usage, id).await?))
}

/// What changed from usage file version `a` to version `b`, as a unified
/// diff (`text/plain`; empty when the files are the same).
#[utoipa::path(get, path = "/v1/usage/versions/{a}/diff/{b}", operation_id = "diffUsageFileVersions",
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
    Ok(plain_text(ctl.version_diff(Artifact::Usage, a, b).await?))
}

/// Deploy usage file version `id` again: a new version whose parent is
/// the newest, checked as any deployment (against today's grants).
#[utoipa::path(post, path = "/v1/usage/rollback/{id}", operation_id = "rollbackUsageFile",
    params(("id" = i64, Path, description = "The version to deploy again")),
    responses(
        (status = 200, description = "In force again, as a new version", body = Deployed),
        (status = 404, description = "No such version", body = ErrorBody),
        (status = 409, description = "Another version was deployed meanwhile", body = ErrorBody),
        (status = 422, description = "Refused by its check; the running file stays", body = ErrorBody),
    ))]
pub async fn rollback<C: Control>(
    State(ctl): State<Arc<C>>,
    caller: Option<Extension<Caller>>,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<Deployed>, ApiError> {
    let by = caller.map_or("local", |Extension(c)| c.0);
    let d = ctl.rollback_usage(id, by.to_string()).await?;
    tracing::info!(
        to = id,
        version = d.deployed.id,
        by,
        "usage file rolled back by API"
    );
    Ok(Json(d))
}
