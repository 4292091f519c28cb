//! The Npcf_SMPolicyControl data model (TS 29.512 §5.6, with the common
//! types of TS 29.571) as serde types: the SMF's request bodies and the
//! SmPolicyDecision we answer. Field names are the spec's camelCase.
//! Unknown fields are ignored, as the spec's extensibility asks (TS 29.501
//! §6.2); enumerations the spec marks extensible keep an unknown value as
//! text instead of refusing the request. Only the fields this PCF reads or
//! writes are typed; the rest of a request is skipped, never stored.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// An enumeration of TS 29.512/29.571 that the spec declares extensible
/// (`anyOf: [enum, string]`): a known value, or any other text kept as is.
macro_rules! extensible_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($variant,)+
            /// A value this node does not know (the enumeration is extensible).
            Other(String),
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $text,)+
                    $name::Other(s) => s,
                }
            }

            pub fn parse(s: &str) -> $name {
                match s {
                    $($text => $name::$variant,)+
                    other => $name::Other(other.to_owned()),
                }
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                Ok($name::parse(&s))
            }
        }
    };
}

extensible_enum!(
    /// TS 29.571 PduSessionType.
    PduSessionType {
        Ipv4 = "IPV4",
        Ipv6 = "IPV6",
        Ipv4v6 = "IPV4V6",
        Unstructured = "UNSTRUCTURED",
        Ethernet = "ETHERNET",
    }
);

extensible_enum!(
    /// TS 29.571 RatType.
    RatType {
        Nr = "NR",
        Eutra = "EUTRA",
        Wlan = "WLAN",
        Virtual = "VIRTUAL",
        Nbiot = "NBIOT",
        Wireline = "WIRELINE",
        LteM = "LTE-M",
        NrRedcap = "NR_REDCAP",
    }
);

extensible_enum!(
    /// TS 29.512 §5.6.3.6 PolicyControlRequestTrigger (the values this PCF
    /// sets or reads; others pass as text).
    PolicyControlRequestTrigger {
        PlmnCh = "PLMN_CH",
        ResMoRe = "RES_MO_RE",
        AcTyCh = "AC_TY_CH",
        UeIpCh = "UE_IP_CH",
        UsRe = "US_RE",
        AppSta = "APP_STA",
        AppSto = "APP_STO",
        AnInfo = "AN_INFO",
        DefQosCh = "DEF_QOS_CH",
        SeAmbrCh = "SE_AMBR_CH",
        NoCredit = "NO_CREDIT",
        ReTimeout = "RE_TIMEOUT",
        ResRelease = "RES_RELEASE",
        SuccResAllo = "SUCC_RES_ALLO",
        RatTyCh = "RAT_TY_CH",
        UeTzCh = "UE_TZ_CH",
        ScellCh = "SCELL_CH",
        UserLocationCh = "USER_LOCATION_CH",
    }
);

extensible_enum!(
    /// TS 29.512 §5.6.3.4 FlowDirection.
    FlowDirection {
        Downlink = "DOWNLINK",
        Uplink = "UPLINK",
        Bidirectional = "BIDIRECTIONAL",
        Unspecified = "UNSPECIFIED",
    }
);

extensible_enum!(
    /// TS 29.571 PreemptionCapability.
    PreemptionCapability {
        NotPreempt = "NOT_PREEMPT",
        MayPreempt = "MAY_PREEMPT",
    }
);

extensible_enum!(
    /// TS 29.571 PreemptionVulnerability.
    PreemptionVulnerability {
        NotPreemptable = "NOT_PREEMPTABLE",
        Preemptable = "PREEMPTABLE",
    }
);

extensible_enum!(
    /// TS 29.512 §5.6.3.x FlowStatus (of TrafficControlData).
    FlowStatus {
        EnabledUplink = "ENABLED-UPLINK",
        EnabledDownlink = "ENABLED-DOWNLINK",
        Enabled = "ENABLED",
        Disabled = "DISABLED",
        Removed = "REMOVED",
    }
);

extensible_enum!(
    /// TS 29.512 RuleStatus of a RuleReport.
    RuleStatus {
        Active = "ACTIVE",
        Inactive = "INACTIVE",
    }
);

/// TS 29.571 AccessType: a closed enumeration (not extensible), so an
/// unknown value is an error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AccessType {
    #[serde(rename = "3GPP_ACCESS")]
    ThreeGpp,
    #[serde(rename = "NON_3GPP_ACCESS")]
    Non3Gpp,
}

impl AccessType {
    pub fn as_str(self) -> &'static str {
        match self {
            AccessType::ThreeGpp => "3GPP_ACCESS",
            AccessType::Non3Gpp => "NON_3GPP_ACCESS",
        }
    }
}

/// TS 29.571 Snssai.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Snssai {
    /// 0..=255.
    pub sst: u8,
    /// Six hex digits, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sd: Option<String>,
}

/// TS 29.571 PlmnId / PlmnIdNid.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PlmnId {
    pub mcc: String,
    pub mnc: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nid: Option<String>,
}

/// TS 29.571 Ambr: bit rates as text, e.g. `"100 Mbps"`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ambr {
    pub uplink: String,
    pub downlink: String,
}

/// TS 29.571 Arp.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Arp {
    /// 1..=15.
    pub priority_level: Option<u8>,
    pub preempt_cap: PreemptionCapability,
    pub preempt_vuln: PreemptionVulnerability,
}

/// TS 29.571 SubscribedDefaultQos.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscribedDefaultQos {
    #[serde(rename = "5qi")]
    pub five_qi: u16,
    pub arp: Arp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_level: Option<u8>,
}

/// TS 29.571 UserLocation: kept as the SMF sent it (EUTRA, NR or N3GA
/// location, each with its own nested shape); the policy sees it as JSON.
pub type UserLocation = serde_json::Value;

/// TS 29.512 §5.6.2.3 SmPolicyContextData: the Create body.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmPolicyContextData {
    pub supi: Option<String>,
    pub gpsi: Option<String>,
    pub pdu_session_id: Option<i64>,
    pub pdu_session_type: Option<PduSessionType>,
    pub dnn: Option<String>,
    pub notification_uri: Option<String>,
    pub slice_info: Option<Snssai>,
    pub access_type: Option<AccessType>,
    pub rat_type: Option<RatType>,
    pub serving_network: Option<PlmnId>,
    pub user_location_info: Option<UserLocation>,
    pub ue_time_zone: Option<String>,
    pub pei: Option<String>,
    pub ipv4_address: Option<String>,
    pub ipv6_address_prefix: Option<String>,
    pub subs_sess_ambr: Option<Ambr>,
    pub subs_def_qos: Option<SubscribedDefaultQos>,
    pub online: Option<bool>,
    pub offline: Option<bool>,
    pub supp_feat: Option<String>,
    pub smf_id: Option<String>,
}

/// TS 29.512 §5.6.2.18 AccuUsageReport.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccuUsageReport {
    pub ref_um_ids: Option<String>,
    pub vol_usage: Option<u64>,
    pub vol_usage_uplink: Option<u64>,
    pub vol_usage_downlink: Option<u64>,
    /// Seconds.
    pub time_usage: Option<u32>,
}

/// TS 29.512 §5.6.2.19 RuleReport.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleReport {
    #[serde(default)]
    pub pcc_rule_ids: Vec<String>,
    pub rule_status: Option<RuleStatus>,
    pub failure_code: Option<String>,
}

/// TS 29.512 §5.6.2.19 SmPolicyUpdateContextData: the Update body.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmPolicyUpdateContextData {
    #[serde(default)]
    pub rep_policy_ctrl_req_triggers: Vec<PolicyControlRequestTrigger>,
    pub access_type: Option<AccessType>,
    pub rat_type: Option<RatType>,
    pub serving_network: Option<PlmnId>,
    pub user_location_info: Option<UserLocation>,
    pub ue_time_zone: Option<String>,
    pub ipv4_address: Option<String>,
    pub rel_ipv4_address: Option<String>,
    pub ipv6_address_prefix: Option<String>,
    pub rel_ipv6_address_prefix: Option<String>,
    pub subs_sess_ambr: Option<Ambr>,
    pub subs_def_qos: Option<SubscribedDefaultQos>,
    #[serde(default)]
    pub accu_usage_reports: Vec<AccuUsageReport>,
    #[serde(default)]
    pub rule_reports: Vec<RuleReport>,
}

/// TS 29.512 §5.6.2.14 SmPolicyDeleteData: the Delete body (all optional).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmPolicyDeleteData {
    pub user_location_info: Option<UserLocation>,
    pub ue_time_zone: Option<String>,
    pub serving_network: Option<PlmnId>,
    #[serde(default)]
    pub accu_usage_reports: Vec<AccuUsageReport>,
}

/// TS 29.512 §5.6.2.7 SessionRule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRule {
    pub sess_rule_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_sess_ambr: Option<Ambr>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_def_qos: Option<AuthorizedDefaultQos>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ref_um_data: Option<String>,
}

/// TS 29.512 §5.6.2.34 AuthorizedDefaultQos.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthorizedDefaultQos {
    #[serde(rename = "5qi")]
    pub five_qi: u16,
    pub arp: Arp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_level: Option<u8>,
}

/// TS 29.512 §5.6.2.14 FlowInformation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FlowInformation {
    pub flow_description: String,
    pub flow_direction: FlowDirection,
}

/// TS 29.512 §5.6.2.6 PccRule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PccRule {
    pub pcc_rule_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flow_infos: Vec<FlowInformation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precedence: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ref_qos_data: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ref_tc_data: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ref_chg_data: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ref_um_data: Vec<String>,
}

/// TS 29.512 §5.6.2.8 QosData.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QosData {
    pub qos_id: String,
    #[serde(rename = "5qi")]
    pub five_qi: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arp: Option<Arp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxbr_ul: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maxbr_dl: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gbr_ul: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gbr_dl: Option<String>,
}

/// TS 29.512 §5.6.2.10 TrafficControlData (only the gate here).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrafficControlData {
    pub tc_id: String,
    pub flow_status: FlowStatus,
}

/// TS 29.512 §5.6.2.11 ChargingData.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChargingData {
    pub chg_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub online: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rating_group: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_id: Option<u32>,
}

/// TS 29.512 §5.6.2.12 UsageMonitoringData.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageMonitoringData {
    pub um_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_threshold: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_threshold_uplink: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_threshold_downlink: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_threshold: Option<u32>,
}

/// A map entry of a decision: a value, or `null` to remove what the SMF
/// holds under that key (TS 29.512 §4.2.6.1, the "removal" of a rule).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry<T> {
    Set(T),
    Remove,
}

impl<T: Serialize> Serialize for Entry<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Entry::Set(v) => v.serialize(s),
            Entry::Remove => s.serialize_none(),
        }
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Entry<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Option::<T>::deserialize(d)? {
            Some(v) => Entry::Set(v),
            None => Entry::Remove,
        })
    }
}

/// Entries by id, in id order (answers are then byte-for-byte stable).
pub type EntryMap<T> = BTreeMap<String, Entry<T>>;

/// TS 29.512 §5.6.2.4 SmPolicyDecision: the whole decision in a Create or
/// Get answer, or only what changed in an Update answer or a notification.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmPolicyDecision {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sess_rules: EntryMap<SessionRule>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub pcc_rules: EntryMap<PccRule>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub qos_decs: EntryMap<QosData>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub traff_cont_decs: EntryMap<TrafficControlData>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub chg_decs: EntryMap<ChargingData>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub um_decs: EntryMap<UsageMonitoringData>,
    /// `None`: unchanged (a difference) or none (a whole decision);
    /// `Remove` (`null`): the SMF drops every trigger it held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_ctrl_req_triggers: Option<Entry<Vec<PolicyControlRequestTrigger>>>,
    /// RFC 3339 instant the SMF must come back by (RE_TIMEOUT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revalidation_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub online: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offline: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supp_feat: Option<String>,
}

impl SmPolicyDecision {
    /// Nothing in it (an Update answer with no change).
    pub fn is_empty(&self) -> bool {
        *self == SmPolicyDecision::default()
    }
}

/// TS 29.512 §5.6.2.5 SmPolicyNotification: what a push carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmPolicyNotification {
    /// The SM policy's resource URI.
    pub resource_uri: String,
    pub sm_policy_decision: SmPolicyDecision,
}

/// TS 29.512 §5.6.2.2 SmPolicyControl: the Get answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SmPolicyControl {
    pub context: SmPolicyContextData,
    pub policy: SmPolicyDecision,
}
