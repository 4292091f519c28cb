//! Everything the policy can see, gathered into one structure: the
//! engine hashes it, and when the hash and the
//! script version are unchanged since the last decision, Lua is not run.
//! Anything the script may read MUST be in here, or the memo would be wrong.
//! Deserialize (every field defaulted) lets policy test cases give a partial input.

use crate::subscriber::Subscriber;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The subscriber as the policy sees it. `known` is false when the PCEF's
/// subscriber is not provisioned and config says to apply the default policy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubscriberInput {
    pub known: bool,
    pub imsi: Option<String>,
    pub msisdn: Option<String>,
    pub plan: Option<String>,
    pub services: Vec<String>,
    pub attributes: BTreeMap<String, serde_json::Value>,
}

impl SubscriberInput {
    pub fn from_profile(s: &Subscriber) -> SubscriberInput {
        SubscriberInput {
            known: true,
            imsi: Some(s.imsi.clone()),
            msisdn: s.msisdn.clone(),
            plan: s.plan.clone(),
            services: s.services.clone(),
            attributes: s.attributes.clone(),
        }
    }
}

/// A rule the PCEF reported as failed (Charging-Rule-Report).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RuleFailure {
    pub rule: String,
    /// PCC-Rule-Status (0 ACTIVE, 1 INACTIVE, 2 TEMPORARILY_INACTIVE).
    pub status: u32,
    /// Rule-Failure-Code (TS 29.212 §5.3.38), when given.
    pub code: Option<u32>,
}

/// What a protocol adapter keeps in a session record in its own terms (an
/// N7 SM policy context) and how the policy sees that session. The
/// adapter implements it, so the node builds a policy input for any
/// session without knowing the protocol that opened it.
pub trait SessionContext {
    /// The session as the policy sees it, before the node adds what
    /// every session has (the installed rules, the rule failures).
    fn session_input(&self) -> SessionInput;
}

/// The IP-CAN session as the policy sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionInput {
    // The texts are the session record's own (`Arc<str>`) and the
    // dictionary's names: building the input for each request (the memo
    // hashes it even when the policy does not run) copies none of them.
    pub apn: Option<Arc<str>>,
    /// RAT-Type name from the dictionary (e.g. "EUTRAN"), or the number.
    pub rat: Option<Cow<'static, str>>,
    pub ip_can_type: Option<Cow<'static, str>>,
    pub ue_ipv4: Option<String>,
    pub ue_ipv6_prefix: Option<Arc<str>>,
    /// 3GPP-User-Location-Info as hex.
    pub location: Option<Arc<str>>,
    /// 3GPP-MS-TimeZone as hex.
    pub ms_timezone: Option<Arc<str>>,
    /// IMEISV from User-Equipment-Info.
    pub device: Option<Arc<str>>,
    /// The PCEF's Origin-Host.
    pub pcef: Arc<str>,
    /// Names of rules installed now (predefined, base and dynamic).
    pub installed: Vec<String>,
    pub rule_failures: Vec<RuleFailure>,
    /// What only a 5G PDU session has (N7, TS 29.512); absent on Gx, so a
    /// script tells N7 from Gx by `session.n7 ~= nil`. On N7 the common
    /// fields above are filled as well (`apn` holds the DNN, `rat` the
    /// RatType, `location` the UserLocation as JSON text, `ms_timezone`
    /// the time zone as the SMF wrote it, `device` the PEI, `pcef` the
    /// SMF's notification URI host), so a policy written for Gx decides
    /// 5G sessions unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub n7: Option<N7SessionInput>,
}

/// A PDU session's own facts (SmPolicyContextData, TS 29.512 §5.6.2.3).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct N7SessionInput {
    /// "3GPP_ACCESS" or "NON_3GPP_ACCESS", when the SMF sent it.
    pub access_type: Option<String>,
    pub supi: String,
    pub gpsi: Option<String>,
    /// 0..=255.
    pub pdu_session_id: u8,
    /// "IPV4", "IPV6", "IPV4V6", "UNSTRUCTURED", "ETHERNET" (or another
    /// value a newer SMF sends).
    pub pdu_session_type: String,
    pub dnn: String,
    /// Slice/Service Type, 0..=255.
    pub sst: u8,
    /// Slice Differentiator, six hex digits.
    pub sd: Option<String>,
    /// Serving network as "mcc-mnc".
    pub serving_network: Option<String>,
    /// The subscribed session AMBR, bit/s, as the SMF sent it.
    pub subscribed_ambr_ul: Option<u64>,
    pub subscribed_ambr_dl: Option<u64>,
    /// The subscribed default QoS's 5QI.
    pub subscribed_5qi: Option<u32>,
}

/// Local time in the policy's configured time zone.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TimeInput {
    /// 0..=23.
    pub hour: u8,
    /// 0..=59. Minute granularity keeps the memo effective within a minute.
    pub minute: u8,
    /// 1 = Monday ..= 7 = Sunday (ISO 8601).
    pub weekday: u8,
    /// "YYYY-MM-DD". Shared by the requests of a day on a thread
    /// (`clock.rs`): the text is made once a day, not on every request.
    pub date: Arc<str>,
    /// The instant the fields above were read, Unix ms (0 when unknown, as
    /// in policy test cases). Not shown to the policy nor hashed: the memo
    /// checks a decision's time bound (`valid.secs`) against it.
    #[serde(skip)]
    pub at_ms: i64,
    /// The start of the local minute `at_ms` falls in, Unix ms: where a
    /// decision's `valid.secs` counts from.
    #[serde(skip)]
    pub minute_ms: i64,
}

/// Network state the operator sets through the API.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkInput {
    /// Congestion level of the subscriber's cell, 0 = none.
    pub congestion: u32,
}

/// One accumulator as the policy sees it. Whole megabytes (10^6 octets)
/// and whole percent, not octets: the input hash then changes only when a
/// figure the policy can act on changes, so most usage reports are decided
/// from the memo. Exact octets are in the API.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccumulatorInput {
    /// Used in the current period, MB (floor).
    pub used_mb: u64,
    /// The period's allowance (quota + top-ups), MB (floor); absent when
    /// the subscriber has no quota on this accumulator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota_mb: Option<u64>,
    /// used / allowance, whole percent (floor; may exceed 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percent: Option<u64>,
    /// The allowance is used up (exact, in octets).
    pub exhausted: bool,
}

/// Usage per accumulator (named in the usage file).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UsageInput {
    pub accumulators: BTreeMap<Arc<str>, AccumulatorInput>,
    /// Monitoring-Keys reported in this request that the usage file does
    /// not know (counted nowhere; the policy may react).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown_keys: Vec<String>,
}

/// The whole input of one policy run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyInput {
    pub subscriber: SubscriberInput,
    pub session: SessionInput,
    pub time: TimeInput,
    pub network: NetworkInput,
    pub usage: UsageInput,
    /// TDF-Application-Identifiers the TDF reports running now (started,
    /// not stopped; Sd), sorted. Empty without a TDF.
    pub applications: Vec<String>,
    /// Sy policy counter statuses by Policy-Counter-Identifier, as the OCS
    /// reports them ("unknown" when the OCS could not be asked).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub spending: BTreeMap<String, String>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An input with every field set (an N7 session, attributes of each
    /// JSON kind, accumulators with and without a quota).
    pub(crate) fn every_field_filled() -> PolicyInput {
        let mut p = PolicyInput::default();
        p.subscriber.known = true;
        p.subscriber.imsi = Some("001010000000001".into());
        p.subscriber.msisdn = Some("79000000001".into());
        p.subscriber.plan = Some("plus".into());
        p.subscriber.services = vec!["internet".into(), "vip".into()];
        p.subscriber.attributes.insert(
            "profile".into(),
            serde_json::json!({"blocked": false, "tier": 3, "tags": ["a", "b"], "none": null}),
        );
        p.session = SessionInput {
            apn: Some("internet".into()),
            rat: Some("EUTRAN".into()),
            ip_can_type: Some("3GPP-EPS".into()),
            ue_ipv4: Some("10.0.0.1".into()),
            ue_ipv6_prefix: Some("0040200100000000".into()),
            location: Some("8200f110000100f1100001a2b3c4".into()),
            ms_timezone: Some("4000".into()),
            device: Some("3534210112345601".into()),
            pcef: "pgw-1.bench.test".into(),
            installed: vec!["internet".into(), "vip-video".into()],
            rule_failures: vec![
                RuleFailure {
                    rule: "vip-video".into(),
                    status: 1,
                    code: Some(4),
                },
                RuleFailure {
                    rule: "other".into(),
                    status: 2,
                    code: None,
                },
            ],
            n7: None,
        };
        p.session.n7 = Some(crate::policy::input::N7SessionInput {
            access_type: Some("3GPP_ACCESS".into()),
            supi: "imsi-001010000000001".into(),
            gpsi: Some("msisdn-79000000001".into()),
            pdu_session_id: 5,
            pdu_session_type: "IPV4".into(),
            dnn: "internet".into(),
            sst: 1,
            sd: Some("000001".into()),
            serving_network: Some("001-01".into()),
            subscribed_ambr_ul: Some(1_000_000_000),
            subscribed_ambr_dl: Some(u64::MAX),
            subscribed_5qi: Some(9),
        });
        p.time = TimeInput {
            hour: 23,
            minute: 59,
            weekday: 7,
            date: "2026-11-22".into(),
            ..TimeInput::default()
        };
        p.network = NetworkInput { congestion: 2 };
        p.usage.accumulators.insert(
            "monthly".into(),
            AccumulatorInput {
                used_mb: 1234,
                quota_mb: Some(10_000),
                percent: Some(12),
                exhausted: false,
            },
        );
        p.usage.accumulators.insert(
            "daily".into(),
            AccumulatorInput {
                used_mb: 7,
                quota_mb: None,
                percent: None,
                exhausted: true,
            },
        );
        p.usage.unknown_keys = vec!["mystery".into()];
        p.applications = vec!["video-streaming".into()];
        p.spending.insert("monthly-data".into(), "exhausted".into());
        p
    }
}
