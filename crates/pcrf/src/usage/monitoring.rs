//! A session's usage monitoring: the keys being monitored at its PCEF and
//! what was granted for each. It travels in the session's stored record.

use crate::usage::units::{MonitoringLevel, ServiceUnits};
use litemap::LiteMap;
use serde::{Deserialize, Serialize, Serializer};
use std::sync::Arc;

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
    /// By key, in key order. A sorted vector, not a `BTreeMap`: a session
    /// has one key or a few, and a `BTreeMap` allocates a whole node for
    /// eleven (1,156 bytes for one key, where this takes 104).
    ///
    /// The key names are shared (`session::shared_text`): every session
    /// monitoring `total` holds the one `total`, and the copy a request
    /// makes of its session copies no name.
    #[serde(
        serialize_with = "as_map",
        deserialize_with = "crate::usage::lean_map::shared_names"
    )]
    pub keys: LiteMap<Arc<str>, KeyGrant>,
}

/// The keys as a map in every format (LiteMap writes an empty map as a
/// sequence in JSON).
fn as_map<S: Serializer>(keys: &LiteMap<Arc<str>, KeyGrant>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(keys.iter())
}

impl SessionMonitoring {
    /// Nothing monitored (the field is left out of the stored record).
    pub fn is_idle(&self) -> bool {
        self.keys.is_empty()
    }
}
