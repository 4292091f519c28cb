//! Usage monitoring (TS 29.212 §4.5.17): what the PCEF reports per
//! Monitoring-Key is counted into per-subscriber accumulators (monthly,
//! daily, night-time, per application...), configured in a file with a
//! checksum (the source article's optimization 3), and turned back into
//! grants and into policy inputs.
//!
//! The state is in two places, both written in the same group commit that
//! precedes the answer: a session's grants travel in its blob
//! (`SessionMonitoring`), a subscriber's accumulators are one row
//! (`SubscriberUsage`). Each Used-Service-Unit is counted exactly once: the
//! report, the new accumulators and the answer (kept for replay of a
//! retransmission) are one durable change.
//!
//! - `config.rs`: the usage file: keys, accumulators, plans' quotas; load,
//!   validation with locations, checksum, reload checks.
//! - `period.rs`: reset periods (daily, weekly, monthly on the billing day)
//!   in the configured time zone.
//! - `account.rs`: one subscriber's accumulators: count a report, roll over
//!   at period ends, top up, reset, quotas and what remains.
//! - `grant.rs`: what to grant per key (min(remaining, chunk)) and the
//!   policy's view of usage.
//! - `spread.rs`: when each of many pushes goes out, spread over a window.
//! - `table.rs`: every subscriber's usage in memory, with a writer lock.
//!
//! The operator's view (file format, counting, periods, grants, reloads) is
//! `docs/usage.md`; `config/usage.toml` is the example for the default policy.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub mod account;
pub mod config;
pub mod grant;
pub mod period;
pub mod spread;
pub mod table;

pub use account::Counted;
pub use config::{Interface, UsageConfig, UsageConfigError};
pub use period::Reset;

/// Amounts of service, as in Used-Service-Unit / Granted-Service-Unit
/// (RFC 4006 §8.17-8.21): octets in total and per direction, and seconds.
/// `None` means the AVP was absent, not zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServiceUnits {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<u64>,
    /// CC-Time, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<u32>,
}

impl ServiceUnits {
    /// Octets this amount stands for: CC-Total-Octets when given, otherwise
    /// input + output (a PCEF may report only the directions).
    pub fn octets(&self) -> u64 {
        self.total.unwrap_or_else(|| {
            self.input
                .unwrap_or(0)
                .saturating_add(self.output.unwrap_or(0))
        })
    }

    pub fn is_empty(&self) -> bool {
        self.total.is_none() && self.input.is_none() && self.output.is_none() && self.time.is_none()
    }
}

/// Usage-Monitoring-Level (TS 29.212 §5.3.60).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MonitoringLevel {
    /// SESSION_LEVEL (0): the whole IP-CAN session.
    #[default]
    Session,
    /// PCC_RULE_LEVEL (1): the rules that name the key.
    Rule,
}

impl MonitoringLevel {
    /// The AVP's value.
    pub fn code(self) -> i32 {
        match self {
            MonitoringLevel::Session => 0,
            MonitoringLevel::Rule => 1,
        }
    }
}

/// One key's grant as installed at the PCEF (part of the session's blob).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyGrant {
    pub granted: ServiceUnits,
    pub level: MonitoringLevel,
    /// When this grant was sent, Unix ms.
    pub granted_ms: i64,
    /// Octets reported by this session for this key since the session began.
    #[serde(default)]
    pub reported_octets: u64,
}

/// A session's usage-monitoring state: the keys being monitored at its
/// PCEF and what was granted for each. Stored in the session's blob.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionMonitoring {
    pub keys: BTreeMap<String, KeyGrant>,
}

impl SessionMonitoring {
    /// Nothing monitored (the field is left out of the stored record).
    pub fn is_idle(&self) -> bool {
        self.keys.is_empty()
    }
}

/// One accumulator of one subscriber in its current period.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Accumulator {
    /// Octets counted in this period.
    pub used: u64,
    /// Octets added to the quota in this period (top-ups; gone at reset).
    #[serde(default)]
    pub topup: u64,
    /// Start of the current period, Unix ms.
    pub period_start_ms: i64,
    /// End of the current period (the next reset), Unix ms; `None` for an
    /// accumulator that never resets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_end_ms: Option<i64>,
}

/// The last report received for one Monitoring-Key (for the API).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LastReport {
    pub at_ms: i64,
    pub session: String,
    pub used: ServiceUnits,
}

/// A subscriber's usage: every accumulator and the last report per key.
/// One row in the store, written in the same commit as the session whose
/// report changed it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriberUsage {
    /// The subscriber key (IMSI, or MSISDN when no IMSI is known), as in
    /// `GxSession::subscriber`.
    pub subscriber: String,
    #[serde(default)]
    pub accumulators: BTreeMap<String, Accumulator>,
    #[serde(default)]
    pub last_reports: BTreeMap<String, LastReport>,
    /// Reports for Monitoring-Keys the configuration does not know
    /// (counted, not added to any accumulator).
    #[serde(default)]
    pub unknown_key_reports: u64,
}
