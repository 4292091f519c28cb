//! The Npcf_PolicyAuthorization data model (TS 29.514 §5.6) as serde
//! types: what an AF (a P-CSCF for IMS voice) sends to create and change
//! an application session, and what it is told. Field names are the
//! spec's camelCase; unknown fields are ignored (TS 29.501 §6.2); only the
//! fields this PCF reads or writes are typed.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The API root of Npcf_PolicyAuthorization (TS 29.514 §5.1).
pub const N5_SERVICE_ROOT: &str = "/npcf-policyauthorization/v1";

/// TS 29.514 §5.6.2.17 MediaSubComponent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MediaSubComponent {
    pub f_num: Option<u32>,
    /// IPFilterRule text, as Rx's Flow-Description.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub f_descs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub f_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_usage: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mar_bw_ul: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mar_bw_dl: Option<String>,
}

/// TS 29.514 §5.6.2.7 MediaComponent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MediaComponent {
    pub med_comp_n: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub med_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub f_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mar_bw_ul: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mar_bw_dl: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rr_bw: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rs_bw: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub codecs: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub med_sub_comps: BTreeMap<String, MediaSubComponent>,
}

/// TS 29.514 §5.6.2.6 AfEventSubscription.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AfEventSubscription {
    pub event: String,
}

/// TS 29.514 §5.6.2.8 EventsSubscReqData.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventsSubscReqData {
    #[serde(default)]
    pub events: Vec<AfEventSubscription>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notif_uri: Option<String>,
}

/// TS 29.514 §5.6.2.3 AppSessionContextReqData: the AF's request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppSessionContextReqData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub af_app_id: Option<String>,
    pub notif_uri: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ue_ipv4: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ue_ipv6: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dnn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supi: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpsi: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub af_charg_id: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub med_components: BTreeMap<String, MediaComponent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ev_subsc: Option<EventsSubscReqData>,
    pub supp_feat: Option<String>,
}

/// TS 29.514 §5.6.2.2 AppSessionContext: the Create body and the Get
/// answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppSessionContext {
    pub asc_req_data: Option<AppSessionContextReqData>,
}

/// TS 29.514 §5.6.2.15 AppSessionContextUpdateData: a PATCH
/// (`application/merge-patch+json`); a media component set to `null` is
/// removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppSessionContextUpdateData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub af_app_id: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub med_components: BTreeMap<String, Option<MediaComponent>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ev_subsc: Option<EventsSubscReqData>,
}

/// TS 29.514 §5.6.2.13 AppSessionContextUpdateDataPatch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AppSessionContextUpdateDataPatch {
    pub asc_req_data: Option<AppSessionContextUpdateData>,
}
