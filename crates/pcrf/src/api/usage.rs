//! A subscriber's usage over the API: `GET /v1/subscribers/{imsi}/usage`
//! (accumulators, allowance, period, last report per key), `POST .../topup`
//! and `POST .../usage/reset`. A top-up or a reset re-decides the
//! subscriber's open sessions at once and pushes a RAR where the decision
//! changed (e.g. the throttle lifted); the answer says what was pushed.

use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiPath};
use super::subscribers::check_imsi;
use crate::control::{Control, UsageChange, UsageView};
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TopUp {
    pub accumulator: String,
    /// Octets added to this period's allowance.
    pub octets: u64,
}

/// `{}` resets every accumulator.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Reset {
    /// One accumulator, or every one when absent.
    #[serde(default)]
    pub accumulator: Option<String>,
}

/// The largest top-up accepted: 1 PB, far above any plan, well below
/// overflow.
pub const MAX_TOPUP_OCTETS: u64 = 1_000_000_000_000_000;

/// A subscriber's accumulators (used, allowance, period), the last report
/// per Monitoring-Key.
#[utoipa::path(get, path = "/v1/subscribers/{imsi}/usage", operation_id = "getUsage",
    params(("imsi" = String, Path, description = "IMSI, 5 to 15 digits")),
    responses(
        (status = 200, description = "Usage", body = UsageView),
        (status = 400, description = "Invalid IMSI", body = ErrorBody),
        (status = 404, description = "No such subscriber", body = ErrorBody),
    ))]
pub async fn get<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(imsi): ApiPath<String>,
) -> Result<Json<UsageView>, ApiError> {
    check_imsi(&imsi)?;
    ctl.usage_stored(&imsi)
        .await
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no subscriber {imsi}")))
}

/// Add octets to this period's allowance of one accumulator; the
/// subscriber's sessions are re-decided (RAR where the decision changed).
#[utoipa::path(post, path = "/v1/subscribers/{imsi}/topup", operation_id = "topUp",
    params(("imsi" = String, Path, description = "IMSI, 5 to 15 digits")),
    request_body = TopUp,
    responses(
        (status = 200, description = "Topped up", body = UsageChange),
        (status = 400, description = "Invalid input", body = ErrorBody),
        (status = 404, description = "No such subscriber", body = ErrorBody),
        (status = 409, description = "Usage monitoring is off", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 422, description = "JSON of the wrong shape", body = ErrorBody),
        (status = 503, description = "Store unavailable", body = ErrorBody),
    ))]
pub async fn topup<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(imsi): ApiPath<String>,
    ApiJson(body): ApiJson<TopUp>,
) -> Result<Json<UsageChange>, ApiError> {
    check_imsi(&imsi)?;
    if body.octets == 0 || body.octets > MAX_TOPUP_OCTETS {
        return Err(ApiError::bad_request(format!(
            "octets must be 1 to {MAX_TOPUP_OCTETS}"
        )));
    }
    let out = ctl.topup(&imsi, &body.accumulator, body.octets).await?;
    tracing::info!(imsi, accumulator = %body.accumulator, octets = body.octets, rar_sent = out.rar_sent, "top-up");
    Ok(Json(out))
}

/// Start a new period now for one accumulator (`{}` for all); the
/// subscriber's sessions are re-decided and asked for a usage report.
#[utoipa::path(post, path = "/v1/subscribers/{imsi}/usage/reset", operation_id = "resetUsage",
    params(("imsi" = String, Path, description = "IMSI, 5 to 15 digits")),
    request_body = Reset,
    responses(
        (status = 200, description = "Reset", body = UsageChange),
        (status = 400, description = "Invalid input", body = ErrorBody),
        (status = 404, description = "No such subscriber", body = ErrorBody),
        (status = 409, description = "Usage monitoring is off", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 422, description = "JSON of the wrong shape", body = ErrorBody),
        (status = 503, description = "Store unavailable", body = ErrorBody),
    ))]
pub async fn reset<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(imsi): ApiPath<String>,
    ApiJson(body): ApiJson<Reset>,
) -> Result<Json<UsageChange>, ApiError> {
    check_imsi(&imsi)?;
    let acc = body.accumulator;
    let out = ctl.reset_usage(&imsi, acc.as_deref()).await?;
    tracing::info!(imsi, accumulator = ?acc, rar_sent = out.rar_sent, "usage reset");
    Ok(Json(out))
}
