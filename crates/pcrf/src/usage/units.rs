//! Amounts of service as the PCEF reports and the PCRF grants them
//! (Used-Service-Unit, Granted-Service-Unit), and the level a key is
//! monitored at (session or PCC rule).

use serde::{Deserialize, Serialize};

/// Amounts of service, as in Used-Service-Unit / Granted-Service-Unit
/// (RFC 4006 §8.17-8.21): octets in total and per direction, and seconds.
/// `None` means the AVP was absent, not zero.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
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
