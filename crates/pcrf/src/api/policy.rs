//! `POST /v1/policy/reload`: load and check the policy script and swap it in
//! (200 with the new version), or keep the old one and answer 422 with the
//! error and the script line. The version is a 64-bit hash of the script,
//! sent as 16 hex digits as the log prints it (a JSON number that large
//! loses precision in JavaScript and jq).

use super::error::{ApiError, ErrorBody};
use crate::control::Control;
use axum::extract::State;
use axum::Json;
use serde::Serialize;
use std::sync::Arc;
use utoipa::ToSchema;

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
