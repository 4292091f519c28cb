//! What the policy decides for one IP-CAN session: the PCC rules, QoS,
//! event triggers and revalidation the PCRF installs at the PCEF (TS 29.212).
//! The Lua script returns a table of this shape; the Gx encoder turns it into
//! AVPs, and the session diff compares two of them.

use super::validity::Validity;
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
    /// How long and over which usage the decision holds (validity.rs):
    /// read by the memo, never sent anywhere. The engine takes it out of
    /// the decision it answers, so it is only ever set in a script's
    /// return value and in `policy test` results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid: Option<Validity>,
}

/// The largest Revalidation-Time offset a decision may ask for: one year.
/// Revalidation-Time is an NTP instant (32-bit seconds), and "now + secs"
/// must stay a representable instant on every path that computes it.
pub const MAX_REVALIDATION_SECS: u64 = 366 * 24 * 3600;
/// Longest name a decision may carry (rule, rule base, ADC rule, Monitoring-Key,
/// Sy counter): names travel in many messages and key maps, so they stay short.
pub const MAX_NAME_BYTES: usize = 255;
/// Longest Flow-Description (IPFilterRule) or reject reason.
pub const MAX_TEXT_BYTES: usize = 4096;
/// Most entries in any one list of a decision (rules, base names, definitions,
/// event triggers, Monitoring-Keys, ADC rules, Sy counters).
pub const MAX_LIST_LEN: usize = 1024;
/// Most Flow-Descriptions in one rule definition.
pub const MAX_FLOWS: usize = 256;

/// Why a decision cannot be encoded: the field (a path such as
/// `definitions[3].qos.arp.priority`) and the value it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfRange {
    pub field: String,
    pub value: String,
    pub allowed: &'static str,
}

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "decision field {} = {} is out of range ({})",
            self.field, self.value, self.allowed
        )
    }
}

fn bad(field: impl Into<String>, value: impl ToString, allowed: &'static str) -> OutOfRange {
    OutOfRange {
        field: field.into(),
        value: value.to_string(),
        allowed,
    }
}

fn in_range(
    field: impl FnOnce() -> String,
    v: u64,
    lo: u64,
    hi: u64,
    allowed: &'static str,
) -> Result<(), OutOfRange> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err(bad(field(), v, allowed))
    }
}

/// A string's length (the value logged is the length, not the text).
fn text(
    field: impl FnOnce() -> String,
    s: &str,
    max: usize,
    empty_ok: bool,
) -> Result<(), OutOfRange> {
    if s.len() > max || (!empty_ok && s.is_empty()) {
        let allowed = match (max, empty_ok) {
            (MAX_NAME_BYTES, false) => "1..=255 bytes",
            (MAX_TEXT_BYTES, true) => "at most 4096 bytes",
            _ => "a bounded length",
        };
        return Err(bad(
            field(),
            format!("a string of {} bytes", s.len()),
            allowed,
        ));
    }
    Ok(())
}

fn list_len<T>(field: &str, l: &[T], max: usize) -> Result<(), OutOfRange> {
    if l.len() > max {
        let allowed = if max == MAX_FLOWS {
            "at most 256 entries"
        } else {
            "at most 1024 entries"
        };
        return Err(bad(format!("{field} (count)"), l.len(), allowed));
    }
    Ok(())
}

fn names(field: &str, l: &[String]) -> Result<(), OutOfRange> {
    list_len(field, l, MAX_LIST_LEN)?;
    for (i, n) in l.iter().enumerate() {
        text(|| format!("{field}[{i}]"), n, MAX_NAME_BYTES, false)?;
    }
    Ok(())
}

fn check_arp(field: &str, a: &Arp) -> Result<(), OutOfRange> {
    in_range(
        || format!("{field}.priority"),
        a.priority.into(),
        1,
        15,
        "1..=15",
    )
}

fn check_qci(field: impl FnOnce() -> String, qci: u32) -> Result<(), OutOfRange> {
    in_range(field, qci.into(), 1, 255, "1..=255")
}

impl RuleDefinition {
    fn check(&self, at: &str) -> Result<(), OutOfRange> {
        text(|| format!("{at}.name"), &self.name, MAX_NAME_BYTES, false)?;
        list_len(&format!("{at}.flows"), &self.flows, MAX_FLOWS)?;
        for (i, f) in self.flows.iter().enumerate() {
            text(|| format!("{at}.flows[{i}]"), f, MAX_TEXT_BYTES, true)?;
        }
        if let Some(v) = self.flow_status {
            // ENABLED-UPLINK (0) ..= REMOVED (4), TS 29.212 §5.3.11.
            in_range(|| format!("{at}.flow_status"), v.into(), 0, 4, "0..=4")?;
        }
        if let Some(q) = &self.qos {
            check_qci(|| format!("{at}.qos.qci"), q.qci)?;
            if let Some(a) = &q.arp {
                check_arp(&format!("{at}.qos.arp"), a)?;
            }
        }
        if let Some(k) = &self.monitoring_key {
            text(|| format!("{at}.monitoring_key"), k, MAX_NAME_BYTES, false)?;
        }
        Ok(())
    }
}

impl Decision {
    /// Checks that every field fits the AVP it is sent in and the limits
    /// above, so the encoders never see a value they cannot write. Bit
    /// rates, precedence, rating groups and service identifiers are
    /// Unsigned32 AVPs: their `u32` type is their range. A decision that
    /// fails is a policy error (the fallback decision applies).
    pub fn check(&self) -> Result<(), OutOfRange> {
        names("rules", &self.rules)?;
        names("base_names", &self.base_names)?;
        list_len("definitions", &self.definitions, MAX_LIST_LEN)?;
        for (i, r) in self.definitions.iter().enumerate() {
            r.check(&format!("definitions[{i}]"))?;
        }
        if let Some(q) = &self.default_bearer_qos {
            check_qci(|| "default_bearer_qos.qci".into(), q.qci)?;
            check_arp("default_bearer_qos.arp", &q.arp)?;
        }
        list_len("event_triggers", &self.event_triggers, MAX_LIST_LEN)?;
        for (i, t) in self.event_triggers.iter().enumerate() {
            // Event-Trigger is Enumerated (Integer32).
            in_range(
                || format!("event_triggers[{i}]"),
                (*t).into(),
                0,
                i32::MAX as u64,
                "0..=2147483647",
            )?;
        }
        if let Some(s) = self.revalidation_secs {
            in_range(
                || "revalidation_secs".into(),
                s,
                0,
                MAX_REVALIDATION_SECS,
                "0..=31622400 (one year)",
            )?;
        }
        if let Some(r) = &self.reject {
            if let Some(reason) = &r.reason {
                text(|| "reject.reason".into(), reason, MAX_TEXT_BYTES, true)?;
            }
        }
        names("monitoring", &self.monitoring)?;
        list_len("adc", &self.adc, MAX_LIST_LEN)?;
        for (i, a) in self.adc.iter().enumerate() {
            for (what, v, max) in [
                ("name", &a.name, MAX_NAME_BYTES),
                ("base", &a.base, MAX_NAME_BYTES),
                ("application", &a.application, MAX_NAME_BYTES),
                ("monitoring_key", &a.monitoring_key, MAX_NAME_BYTES),
            ] {
                if let Some(v) = v {
                    text(|| format!("adc[{i}].{what}"), v, max, true)?;
                }
            }
        }
        names("spending_counters", &self.spending_counters)?;
        if let Some(v) = &self.valid {
            if let Some(secs) = v.secs {
                in_range(
                    || "valid.secs".into(),
                    secs,
                    0,
                    MAX_REVALIDATION_SECS,
                    "0..=31622400 (one year)",
                )?;
            }
            if let Some(u) = &v.usage {
                let named: Vec<&str> = u.names().collect();
                list_len("valid.usage", &named, MAX_LIST_LEN)?;
                for n in named {
                    text(|| "valid.usage (a name)".into(), n, MAX_NAME_BYTES, false)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(d: &Decision) -> String {
        d.check().expect_err("out of range").field
    }

    #[test]
    fn every_bounded_field_is_checked() {
        assert_eq!(Decision::default().check(), Ok(()));
        let d = Decision {
            revalidation_secs: Some(i64::MAX as u64),
            ..Default::default()
        };
        let e = d.check().expect_err("too far");
        assert_eq!(e.field, "revalidation_secs");
        assert_eq!(e.value, i64::MAX.to_string());
        assert!(e
            .to_string()
            .contains("revalidation_secs = 9223372036854775807"));
        let ok = Decision {
            revalidation_secs: Some(MAX_REVALIDATION_SECS),
            ..Default::default()
        };
        assert_eq!(ok.check(), Ok(()));

        let arp = |priority| Arp {
            priority,
            may_preempt: false,
            preemptable: true,
        };
        let bearer = |qci, priority| Decision {
            default_bearer_qos: Some(BearerQos {
                qci,
                arp: arp(priority),
            }),
            ..Default::default()
        };
        assert_eq!(bearer(9, 15).check(), Ok(()));
        assert_eq!(field_of(&bearer(0, 1)), "default_bearer_qos.qci");
        assert_eq!(field_of(&bearer(256, 1)), "default_bearer_qos.qci");
        assert_eq!(field_of(&bearer(u32::MAX, 1)), "default_bearer_qos.qci");
        assert_eq!(field_of(&bearer(9, 0)), "default_bearer_qos.arp.priority");
        assert_eq!(field_of(&bearer(9, 16)), "default_bearer_qos.arp.priority");

        let def = |r: RuleDefinition| Decision {
            definitions: vec![
                RuleDefinition {
                    name: "ok".into(),
                    ..Default::default()
                },
                r,
            ],
            ..Default::default()
        };
        let named = |name: &str| RuleDefinition {
            name: name.into(),
            ..Default::default()
        };
        assert_eq!(field_of(&def(named(""))), "definitions[1].name");
        assert_eq!(
            field_of(&def(named(&"x".repeat(256)))),
            "definitions[1].name"
        );
        let mut r = named("r");
        r.qos = Some(RuleQos {
            qci: 1,
            arp: Some(arp(99)),
            mbr_ul: Some(u32::MAX),
            mbr_dl: None,
            gbr_ul: None,
            gbr_dl: None,
        });
        assert_eq!(field_of(&def(r.clone())), "definitions[1].qos.arp.priority");
        r.qos = None;
        r.flow_status = Some(5);
        assert_eq!(field_of(&def(r.clone())), "definitions[1].flow_status");
        r.flow_status = None;
        r.flows = vec!["f".repeat(MAX_TEXT_BYTES + 1)];
        assert_eq!(field_of(&def(r.clone())), "definitions[1].flows[0]");
        r.flows = vec![String::new(); MAX_FLOWS + 1];
        assert_eq!(field_of(&def(r.clone())), "definitions[1].flows (count)");
        r.flows = vec![];
        r.monitoring_key = Some("k".repeat(300));
        assert_eq!(field_of(&def(r)), "definitions[1].monitoring_key");

        let many = Decision {
            rules: vec!["r".into(); MAX_LIST_LEN + 1],
            ..Default::default()
        };
        assert_eq!(field_of(&many), "rules (count)");
        let trig = Decision {
            event_triggers: vec![2, u32::MAX],
            ..Default::default()
        };
        assert_eq!(field_of(&trig), "event_triggers[1]");
        let mk = Decision {
            monitoring: vec![String::new()],
            ..Default::default()
        };
        assert_eq!(field_of(&mk), "monitoring[0]");
        let adc = Decision {
            adc: vec![AdcRule {
                name: Some("n".repeat(256)),
                base: None,
                application: None,
                monitoring_key: None,
            }],
            ..Default::default()
        };
        assert_eq!(field_of(&adc), "adc[0].name");
        let sy = Decision {
            spending_counters: vec!["c".repeat(256)],
            ..Default::default()
        };
        assert_eq!(field_of(&sy), "spending_counters[0]");
    }
}
