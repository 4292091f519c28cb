//! A session's usage monitoring: the keys being monitored at its PCEF and
//! what was granted for each. It travels in the session's stored record.

use crate::usage::units::{MonitoringLevel, ServiceUnits};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
