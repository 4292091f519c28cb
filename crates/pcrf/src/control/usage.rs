//! A subscriber's usage as the operations report it: each accumulator
//! against its allowance and period, the last report per Monitoring-Key,
//! and what a top-up or a reset changed. The REST API serialises these
//! views as they are.

use crate::usage::ServiceUnits;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One accumulator as the API shows it; octets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReportView {
    /// RFC 3339.
    pub at: String,
    pub session: String,
    pub used: ServiceUnits,
}

/// `GET /v1/subscribers/{imsi}/usage`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct UsageChange {
    pub usage: UsageView,
    /// Open sessions re-decided, RARs sent, RARs failed.
    pub sessions: usize,
    pub rar_sent: usize,
    pub rar_failed: usize,
}
