//! What the policy decides for one IP-CAN session: the PCC rules, QoS,
//! event triggers and revalidation the PCRF installs at the PCEF (TS 29.212).
//! The Lua script returns a table of this shape; the Gx encoder turns it into
//! AVPs, and the session diff compares two of them.

use serde::{Deserialize, Serialize};

/// Allocation-Retention-Priority (TS 29.212 §5.3.32).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arp {
    /// 1 (highest) ..= 15.
    pub priority: u32,
    /// May this bearer pre-empt others.
    #[serde(default)]
    pub may_preempt: bool,
    /// May this bearer be pre-empted.
    #[serde(default = "yes")]
    pub preemptable: bool,
}

fn yes() -> bool {
    true
}

/// QoS of a PCC rule (QoS-Information inside Charging-Rule-Definition).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleQos {
    pub qci: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arp: Option<Arp>,
    /// Max-Requested-Bandwidth-UL/DL, bit/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mbr_ul: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mbr_dl: Option<u32>,
    /// Guaranteed-Bitrate-UL/DL, bit/s (GBR QCIs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gbr_ul: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gbr_dl: Option<u32>,
}

/// A dynamic PCC rule (Charging-Rule-Definition, TS 29.212 §5.3.4).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDefinition {
    pub name: String,
    /// Flow-Description IPFilterRules, e.g. "permit out ip from any to assigned".
    #[serde(default)]
    pub flows: Vec<String>,
    /// Flow-Status: 0 ENABLED-UPLINK, 1 ENABLED-DOWNLINK, 2 ENABLED, 3 DISABLED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_status: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<RuleQos>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precedence: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rating_group: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_identifier: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub online: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitoring_key: Option<String>,
}

/// APN-AMBR, bit/s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ambr {
    pub ul: u32,
    pub dl: u32,
}

/// Default-EPS-Bearer-QoS.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BearerQos {
    pub qci: u32,
    pub arp: Arp,
}

/// The policy's refusal of a session (answered instead of rules).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reject {
    /// A Result-Code (e.g. 5003 DIAMETER_AUTHORIZATION_REJECTED) or, with
    /// `vendor`, an Experimental-Result-Code (e.g. 5142 PCC_RULE_EVENT, 3GPP 10415).
    pub code: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// An ADC rule for the TDF (Sd, TS 29.212 §5b.3.3): exactly one of a
/// predefined rule the TDF knows (`name` alone), a predefined group
/// (`base`), or a rule defined here (`name` with `application`, the
/// TDF-Application-Identifier to detect).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdcRule {
    /// ADC-Rule-Name (predefined, or the name of a definition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// ADC-Rule-Base-Name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// TDF-Application-Identifier: makes the rule an ADC-Rule-Definition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<String>,
    /// Monitoring-Key of the definition (usage per application over Sd).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monitoring_key: Option<String>,
}

impl AdcRule {
    /// The name the rule is installed and removed by.
    pub fn key(&self) -> &str {
        self.name.as_deref().or(self.base.as_deref()).unwrap_or("")
    }

    /// Exactly one of name or base, and a definition has a name.
    pub fn check(&self) -> Result<(), String> {
        match (&self.name, &self.base, &self.application) {
            (Some(n), None, _) if !n.is_empty() => Ok(()),
            (None, Some(b), None) if !b.is_empty() => Ok(()),
            (None, Some(_), Some(_)) => Err("an ADC rule base cannot carry an application".into()),
            _ => Err("an ADC rule needs exactly one non-empty `name` or `base`".into()),
        }
    }
}

/// The whole decision for one session.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decision {
    /// Predefined rules the PCEF knows (Charging-Rule-Name).
    #[serde(default)]
    pub rules: Vec<String>,
    /// Predefined rule groups (Charging-Rule-Base-Name).
    #[serde(default)]
    pub base_names: Vec<String>,
    /// Dynamic rules (Charging-Rule-Definition).
    #[serde(default)]
    pub definitions: Vec<RuleDefinition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apn_ambr: Option<Ambr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_bearer_qos: Option<BearerQos>,
    /// Event-Trigger values to subscribe to (TS 29.212 §5.3.7).
    #[serde(default)]
    pub event_triggers: Vec<u32>,
    /// Seconds from now until the PCEF must come back (REVALIDATION_TIMEOUT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revalidation_secs: Option<u64>,
    /// Set to refuse the session instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reject: Option<Reject>,
    /// Monitoring-Keys to monitor (configured in the usage file); the PCRF
    /// grants each min(remaining quota, the key's chunk). A key dropped from
    /// this list is stopped at the PCEF (Usage-Monitoring-Support DISABLED).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub monitoring: Vec<String>,
    /// ADC rules for the subscriber's TDF over Sd (application detection);
    /// not sent to the PCEF. See docs/sd.md.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adc: Vec<AdcRule>,
    /// Sy Policy-Counter-Identifiers whose status the policy wants: the
    /// PCRF subscribes to those not subscribed yet (SLR) and decides again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spending_counters: Vec<String>,
}
