//! `PUT /v1/cells/{cell}/congestion`: the congestion level of a cell, which
//! the policy sees for every subscriber located there; the sessions in the
//! cell are re-decided, spread over `[usage].spread_secs`. The cell is the E-UTRAN
//! Cell Global Identifier as it appears in 3GPP-User-Location-Info: 7 octets
//! (MCC/MNC, 28-bit ECI) written as 14 hex digits.

use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiPath};
use crate::control::Control;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;

/// The highest congestion level accepted (0 = none).
pub const MAX_CONGESTION: u32 = 100;

#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Congestion {
    /// 0 (none) to [`MAX_CONGESTION`].
    #[schema(maximum = 100)]
    pub congestion: u32,
}

#[derive(Serialize, ToSchema)]
pub struct CellState {
    pub cell: String,
    pub congestion: u32,
    /// Open sessions located in the cell, re-decided over the spread window.
    pub sessions: usize,
}

/// The cell id normalised to lowercase, or why it is not an ECGI.
pub fn normalize_cell(cell: &str) -> Result<String, ApiError> {
    if cell.len() != 14 || !cell.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::bad_request(format!(
            "cell must be an ECGI as 14 hex digits (7 octets as in 3GPP-User-Location-Info), got {cell:?}"
        )));
    }
    Ok(cell.to_ascii_lowercase())
}

/// Set a cell's congestion level (0 = none); the sessions located there are
/// re-decided, spread over `[usage].spread_secs`.
#[utoipa::path(put, path = "/v1/cells/{cell}/congestion", operation_id = "putCellCongestion",
    params(("cell" = String, Path, description = "ECGI as 14 hex digits, as in 3GPP-User-Location-Info")),
    request_body = Congestion,
    responses(
        (status = 200, description = "Set", body = CellState),
        (status = 400, description = "Invalid cell or level", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 422, description = "JSON of the wrong shape", body = ErrorBody),
    ))]
pub async fn put_cell<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(cell): ApiPath<String>,
    ApiJson(body): ApiJson<Congestion>,
) -> Result<Json<CellState>, ApiError> {
    let cell = normalize_cell(&cell)?;
    if body.congestion > MAX_CONGESTION {
        return Err(ApiError::bad_request(format!(
            "congestion must be 0 to {MAX_CONGESTION}"
        )));
    }
    let sessions = ctl.set_congestion(&cell, body.congestion);
    tracing::info!(
        cell,
        congestion = body.congestion,
        sessions,
        "cell congestion set by API"
    );
    Ok(Json(CellState {
        cell,
        congestion: body.congestion,
        sessions,
    }))
}
