//! A subscriber's usage over the API: `GET /v1/subscribers/{imsi}/usage`
//! (accumulators, allowance, period, last report per key), `POST .../topup`
//! and `POST .../usage/reset`. A top-up or a reset re-decides the
//! subscriber's open sessions at once and pushes a RAR where the decision
//! changed (e.g. the throttle lifted); the answer says what was pushed.

use super::control::Control;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath};
use super::subscribers::check_imsi;
use crate::usage::ServiceUnits;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One accumulator as the API shows it; octets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccumulatorView {
    /// never, daily, weekly or monthly.
    pub reset: String,
    pub used: u64,
    /// Added by top-ups in this period.
    pub topup: u64,
    /// The subscriber's (or the plan's) quota, without top-ups.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<u64>,
    /// quota + topup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowance: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remaining: Option<u64>,
    pub exhausted: bool,
    /// RFC 3339.
    pub period_start: String,
    /// RFC 3339; absent for an accumulator that never resets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_end: Option<String>,
}

/// The last report of one Monitoring-Key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportView {
    /// RFC 3339.
    pub at: String,
    pub session: String,
    pub used: ServiceUnits,
}

/// `GET /v1/subscribers/{imsi}/usage`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageView {
    pub subscriber: String,
    pub billing_day: u8,
    pub accumulators: BTreeMap<String, AccumulatorView>,
    pub last_reports: BTreeMap<String, ReportView>,
    pub unknown_key_reports: u64,
    /// Checksum of the usage file these figures follow.
    pub usage_config: String,
}

/// What a top-up or reset did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageChange {
    pub usage: UsageView,
    /// Open sessions re-decided, RARs sent, RARs failed.
    pub sessions: usize,
    pub rar_sent: usize,
    pub rar_failed: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopUp {
    pub accumulator: String,
    /// Octets added to this period's allowance.
    pub octets: u64,
}

/// `{}` resets every accumulator.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reset {
    /// One accumulator, or every one when absent.
    #[serde(default)]
    pub accumulator: Option<String>,
}

/// The largest top-up accepted: 1 PB, far above any plan, well below
/// overflow.
pub const MAX_TOPUP_OCTETS: u64 = 1_000_000_000_000_000;

pub async fn get<C: Control>(
    State(ctl): State<Arc<C>>,
    ApiPath(imsi): ApiPath<String>,
) -> Result<Json<UsageView>, ApiError> {
    check_imsi(&imsi)?;
    ctl.usage(&imsi)
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no subscriber {imsi}")))
}

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
