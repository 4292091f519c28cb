//! Gx (TS 29.212) on the wire: decoding a CCR into what the PCRF needs and
//! encoding CCA and RAR from a decision diff. No state and no IO here; the
//! service (`service.rs`) decides what to do with a request.
//!
//! Decoding is one pass over the top-level AVPs, borrowing from the
//! received bytes; grouped AVPs are entered only for the few we read.

use crate::limits;
use crate::pcc::charging_id::decode_charging_id;
pub use crate::pcc::charging_id::ChargingId;
use crate::pcc::reauth_answer::decode_rule_report;
pub use crate::pcc::reauth_answer::{decode_raa, Raa, RuleReports};
use crate::pcc::usage_monitoring::{decode_usage_report, encode_usage};
use crate::pcc::{RequestType, UsageInstructions, UsageReport};
use crate::policy::decision::{Arp, RuleDefinition, RuleQos};
use crate::session::RuleDiff;
use crate::session_message::{
    self, decode_subscription_id, Identity, Outcome, END_USER_E164, END_USER_IMSI, TGPP,
};
use bytes::BytesMut;
use diameter::codec::{missing_avp, Avp, DiameterError, Message, MessageBuilder, TooLong};
use diameter::dict::{app, avp, cmd, enums};
use diameter::doic::OverloadReporter;
use diameter::result_code;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, SystemTime};

/// Gx application id.
pub const GX: u32 = app::GX;

/// What a CCR carries that the PCRF uses; everything borrowed.
#[derive(Debug, Default)]
pub struct Ccr<'a> {
    pub session_id: &'a str,
    pub origin_host: &'a str,
    pub origin_realm: &'a str,
    pub request_type: Option<RequestType>,
    pub request_number: u32,
    pub imsi: Option<&'a str>,
    pub msisdn: Option<&'a str>,
    pub apn: Option<&'a str>,
    pub ue_ipv4: Option<Ipv4Addr>,
    pub ue_ipv6_prefix: Option<&'a [u8]>,
    pub rat_type: Option<i32>,
    pub ip_can_type: Option<i32>,
    pub location: Option<&'a [u8]>,
    pub ms_timezone: Option<&'a [u8]>,
    /// IMEISV (User-Equipment-Info of type IMEISV, as text or BCD digits).
    pub device: Option<String>,
    /// (Feature-List-ID, Feature-List) offered.
    pub supported_features: Vec<(u32, u32)>,
    pub network_request_support: Option<i32>,
    pub event_triggers: Vec<i32>,
    pub rule_reports: RuleReports,
    pub termination_cause: Option<i32>,
    /// Usage-Monitoring-Information that carried Used-Service-Unit, in
    /// the order received.
    pub usage_reports: Vec<UsageReport<'a>>,
    /// The Auth-Application-Id the request names (must be Gx).
    pub auth_application_id: Option<u32>,
    /// Access-Network-Charging-Identifier-Gx: charging ids the PCEF
    /// assigned, for charging correlation with the AF (Rx).
    pub charging_ids: Vec<ChargingId>,
}

impl RequestType {
    /// The CC-Request-Type value (RFC 4006 §8.3).
    pub(crate) fn to_enum(self) -> i32 {
        match self {
            RequestType::Initial => enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
            RequestType::Update => enums::CC_REQUEST_TYPE::UPDATE_REQUEST,
            RequestType::Termination => enums::CC_REQUEST_TYPE::TERMINATION_REQUEST,
        }
    }

    pub(crate) fn from_enum(v: i32) -> Option<RequestType> {
        match v {
            enums::CC_REQUEST_TYPE::INITIAL_REQUEST => Some(RequestType::Initial),
            enums::CC_REQUEST_TYPE::UPDATE_REQUEST => Some(RequestType::Update),
            enums::CC_REQUEST_TYPE::TERMINATION_REQUEST => Some(RequestType::Termination),
            _ => None,
        }
    }
}

fn str_of<'a>(a: &Avp<'a>) -> Result<&'a str, DiameterError> {
    a.as_str()
}

/// Decodes a Gx CCR. Missing mandatory AVPs give 5005 with Failed-AVP, bad
/// values 5004, bad lengths and fields over their size limit
/// ([`limits::FIELD_LIMITS`]) 5014 (RFC 6733 §7).
pub fn decode_ccr(msg: &Message) -> Result<Ccr<'_>, DiameterError> {
    limits::check_field_sizes(msg.avps())?;
    let mut c = Ccr::default();
    let mut have = (false, false, false, false, false);
    for a in msg.avps() {
        let a = a?;
        match (a.vendor(), a.code()) {
            (0, 263) => {
                c.session_id = str_of(&a)?;
                have.0 = true;
            }
            (0, 264) => {
                c.origin_host = a.as_identity()?;
                have.1 = true;
            }
            (0, 296) => {
                c.origin_realm = a.as_identity()?;
                have.2 = true;
            }
            (0, 258) => {
                let id = a.as_u32()?;
                if id != GX {
                    // 5004 must name the offending AVP (RFC 6733 §7.1.5).
                    return Err(a.invalid_value("Auth-Application-Id is not Gx"));
                }
                c.auth_application_id = Some(id);
            }
            _ if a.is(avp::CC_REQUEST_TYPE) => {
                let v = a.as_enum()?;
                c.request_type =
                    Some(RequestType::from_enum(v).ok_or_else(|| {
                        a.invalid_value("CC-Request-Type must be 1, 2 or 3 on Gx")
                    })?);
                have.3 = true;
            }
            _ if a.is(avp::CC_REQUEST_NUMBER) => {
                c.request_number = a.as_u32()?;
                have.4 = true;
            }
            _ if a.is(avp::SUBSCRIPTION_ID) => match decode_subscription_id(&a)? {
                (END_USER_IMSI, d) => c.imsi = Some(d),
                (END_USER_E164, d) => c.msisdn = Some(d),
                _ => {}
            },
            _ if a.is(avp::CALLED_STATION_ID) => c.apn = Some(str_of(&a)?),
            _ if a.is(avp::FRAMED_IP_ADDRESS) => {
                // RFC 7155: Framed-IP-Address is 4 octets of IPv4.
                let d = a.as_octets();
                if d.len() != 4 {
                    return Err(a.invalid_value("Framed-IP-Address must be 4 octets"));
                }
                c.ue_ipv4 = Some(Ipv4Addr::new(d[0], d[1], d[2], d[3]));
            }
            _ if a.is(avp::FRAMED_IPV6_PREFIX) => c.ue_ipv6_prefix = Some(a.as_octets()),
            _ if a.is(avp::RAT_TYPE) => c.rat_type = Some(a.as_enum()?),
            _ if a.is(avp::IP_CAN_TYPE) => c.ip_can_type = Some(a.as_enum()?),
            _ if a.is(avp::_3GPP_USER_LOCATION_INFO) => c.location = Some(a.as_octets()),
            _ if a.is(avp::_3GPP_MS_TIMEZONE) => c.ms_timezone = Some(a.as_octets()),
            _ if a.is(avp::USER_EQUIPMENT_INFO) => {
                let mut ty = None;
                let mut val = None;
                for g in a.grouped() {
                    let g = g?;
                    if g.is(avp::USER_EQUIPMENT_INFO_TYPE) {
                        ty = Some(g.as_enum()?);
                    } else if g.is(avp::USER_EQUIPMENT_INFO_VALUE) {
                        val = Some(g.as_octets());
                    }
                }
                if let (Some(0), Some(v)) = (ty, val) {
                    c.device = Some(imeisv_text(v));
                }
            }
            _ if a.is(avp::SUPPORTED_FEATURES) => {
                let mut id = None;
                let mut list = None;
                for g in a.grouped() {
                    let g = g?;
                    if g.is(avp::FEATURE_LIST_ID) {
                        id = Some(g.as_u32()?);
                    } else if g.is(avp::FEATURE_LIST) {
                        list = Some(g.as_u32()?);
                    }
                }
                if let (Some(id), Some(list)) = (id, list) {
                    c.supported_features.push((id, list));
                }
            }
            _ if a.is(avp::NETWORK_REQUEST_SUPPORT) => {
                c.network_request_support = Some(a.as_enum()?)
            }
            _ if a.is(avp::EVENT_TRIGGER) => c.event_triggers.push(a.as_enum()?),
            _ if a.is(avp::CHARGING_RULE_REPORT) => decode_rule_report(&a, &mut c.rule_reports)?,
            _ if a.is(avp::TERMINATION_CAUSE) => c.termination_cause = Some(a.as_enum()?),
            _ if a.is(avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_GX) => {
                c.charging_ids.push(decode_charging_id(&a)?)
            }
            _ if a.is(avp::USAGE_MONITORING_INFORMATION) => {
                if let Some(r) = decode_usage_report(&a)? {
                    c.usage_reports.push(r);
                }
            }
            _ => {}
        }
    }
    if !have.0 {
        return Err(missing_avp(avp::SESSION_ID, "Session-Id"));
    }
    if !have.1 {
        return Err(missing_avp(avp::ORIGIN_HOST, "Origin-Host"));
    }
    if !have.2 {
        return Err(missing_avp(avp::ORIGIN_REALM, "Origin-Realm"));
    }
    if !have.3 {
        return Err(missing_avp(avp::CC_REQUEST_TYPE, "CC-Request-Type"));
    }
    if !have.4 {
        return Err(missing_avp(avp::CC_REQUEST_NUMBER, "CC-Request-Number"));
    }
    Ok(c)
}

/// Charging-Rule-Report: each named rule with its status and failure code.
/// User-Equipment-Value of type IMEISV: UTF-8 digits per TS 29.212, though
/// some gateways send BCD; show either as digits.
fn imeisv_text(v: &[u8]) -> String {
    if v.iter().all(|b| b.is_ascii_digit()) {
        return String::from_utf8_lossy(v).into_owned();
    }
    let mut s = String::with_capacity(v.len() * 2);
    for b in v {
        for nib in [b & 0x0f, b >> 4] {
            if nib < 10 {
                s.push((b'0' + nib) as char);
            }
        }
    }
    s
}

/// What goes in a successful CCA besides the rules.
#[derive(Debug, Default)]
pub struct CcaExtras {
    pub supported_features: Vec<(u32, u32)>,
    /// Set when the PCEF sent Network-Request-Support.
    pub bearer_control_mode: Option<i32>,
    /// Usage-monitoring grants, disables and report requests. Left out of
    /// a CCA-T: the session is over, there is nothing left to monitor.
    pub usage: UsageInstructions,
}

/// Encodes a CCA. `diff` is None for error answers and CCA-T.
// Each argument is a separate input of the answer; a struct would only
// rename them.
#[allow(clippy::too_many_arguments)]
pub fn encode_cca(
    out: &mut BytesMut,
    req: &Message,
    me: &Identity,
    ccr: &Ccr<'_>,
    outcome: Outcome,
    extras: &CcaExtras,
    diff: Option<&RuleDiff<'_>>,
    overload: Option<&OverloadReporter>,
) -> Result<usize, TooLong> {
    let mut b = MessageBuilder::answer(out, req);
    b.u32(avp::AUTH_APPLICATION_ID, GX)
        .origin(&me.origin_host, &me.origin_realm);
    session_message::encode_outcome(&mut b, outcome);
    if let Some(t) = ccr.request_type {
        b.i32(avp::CC_REQUEST_TYPE, t.to_enum());
    }
    b.u32(avp::CC_REQUEST_NUMBER, ccr.request_number);
    for (id, list) in &extras.supported_features {
        b.group(avp::SUPPORTED_FEATURES, |g| {
            g.u32(avp::VENDOR_ID, TGPP)
                .u32(avp::FEATURE_LIST_ID, *id)
                .u32(avp::FEATURE_LIST, *list);
        });
    }
    if let Some(bcm) = extras.bearer_control_mode {
        b.i32(avp::BEARER_CONTROL_MODE, bcm);
    }
    if let Some(d) = diff {
        encode_diff(&mut b, d);
    }
    if ccr.request_type != Some(RequestType::Termination) {
        encode_usage(&mut b, &extras.usage);
    }
    b.proxy_info_from(req);
    // DOIC (RFC 7683): only to a PCEF whose request advertised it.
    if let Some(r) = overload {
        r.append_to_answer(req, &mut b);
    }
    b.try_finish()
}

/// The CCA sent instead of one too long to send (`len` bytes, over the
/// 24-bit Diameter length or the configured `max`): 5012
/// DIAMETER_UNABLE_TO_COMPLY with an Error-Message saying why, and the
/// AVPs a CCA needs to be matched (Session-Id, CC-Request-Type/Number).
pub fn encode_cca_too_large(
    out: &mut BytesMut,
    req: &Message,
    me: &Identity,
    ccr: &Ccr<'_>,
    len: usize,
    max: usize,
) -> usize {
    let mut b = MessageBuilder::answer(out, req);
    b.u32(avp::AUTH_APPLICATION_ID, GX)
        .origin(&me.origin_host, &me.origin_realm)
        .result_code(result_code::DIAMETER_UNABLE_TO_COMPLY);
    if let Some(t) = ccr.request_type {
        b.i32(avp::CC_REQUEST_TYPE, t.to_enum());
    }
    b.u32(avp::CC_REQUEST_NUMBER, ccr.request_number).str(
        avp::ERROR_MESSAGE,
        &format!("the answer ({len} bytes) exceeds the maximum message size ({max} bytes)"),
    );
    b.proxy_info_from(req);
    b.finish()
}

/// Writes the rule and QoS AVPs of a diff (shared by CCA and RAR).
fn encode_diff(b: &mut MessageBuilder<'_>, d: &RuleDiff<'_>) {
    if let Some(triggers) = d.event_triggers {
        if triggers.is_empty() {
            b.i32(avp::EVENT_TRIGGER, enums::EVENT_TRIGGER::NO_EVENT_TRIGGERS);
        }
        for t in triggers {
            b.i32(avp::EVENT_TRIGGER, *t as i32);
        }
    }
    if !d.remove_names.is_empty() || !d.remove_base_names.is_empty() {
        b.group(avp::CHARGING_RULE_REMOVE, |g| {
            for n in &d.remove_names {
                g.str(avp::CHARGING_RULE_NAME, n);
            }
            for n in &d.remove_base_names {
                g.str(avp::CHARGING_RULE_BASE_NAME, n);
            }
        });
    }
    if !d.install_names.is_empty()
        || !d.install_base_names.is_empty()
        || !d.install_definitions.is_empty()
    {
        b.group(avp::CHARGING_RULE_INSTALL, |g| {
            for r in &d.install_definitions {
                encode_definition(g, r);
            }
            for n in &d.install_names {
                g.str(avp::CHARGING_RULE_NAME, n);
            }
            for n in &d.install_base_names {
                g.str(avp::CHARGING_RULE_BASE_NAME, n);
            }
        });
    }
    if let Some(ambr) = d.apn_ambr {
        b.group(avp::QOS_INFORMATION, |g| {
            g.u32(avp::APN_AGGREGATE_MAX_BITRATE_UL, ambr.ul)
                .u32(avp::APN_AGGREGATE_MAX_BITRATE_DL, ambr.dl);
        });
    }
    // `Decision::check` bounds `secs`; an instant the clock cannot
    // represent is left out rather than computed with a panic.
    if let Some(at) = d
        .revalidation_secs
        .and_then(|secs| SystemTime::now().checked_add(Duration::from_secs(secs)))
    {
        b.time(avp::REVALIDATION_TIME, at);
    }
    if let Some(q) = d.default_bearer_qos {
        b.group(avp::DEFAULT_EPS_BEARER_QOS, |g| {
            g.i32(avp::QOS_CLASS_IDENTIFIER, q.qci as i32);
            encode_arp(g, &q.arp);
        });
    }
}

fn encode_arp(b: &mut MessageBuilder<'_>, arp: &Arp) {
    b.group(avp::ALLOCATION_RETENTION_PRIORITY, |g| {
        g.u32(avp::PRIORITY_LEVEL, arp.priority)
            // PRE-EMPTION_CAPABILITY_ENABLED = 0, _DISABLED = 1 (TS 29.212 §5.3.46)
            .i32(
                avp::PRE_EMPTION_CAPABILITY,
                if arp.may_preempt { 0 } else { 1 },
            )
            // PRE-EMPTION_VULNERABILITY_ENABLED = 0, _DISABLED = 1 (§5.3.47)
            .i32(
                avp::PRE_EMPTION_VULNERABILITY,
                if arp.preemptable { 0 } else { 1 },
            );
    });
}

fn encode_rule_qos(b: &mut MessageBuilder<'_>, q: &RuleQos) {
    b.group(avp::QOS_INFORMATION, |g| {
        g.i32(avp::QOS_CLASS_IDENTIFIER, q.qci as i32);
        if let Some(v) = q.mbr_ul {
            g.u32(avp::MAX_REQUESTED_BANDWIDTH_UL, v);
        }
        if let Some(v) = q.mbr_dl {
            g.u32(avp::MAX_REQUESTED_BANDWIDTH_DL, v);
        }
        if let Some(v) = q.gbr_ul {
            g.u32(avp::GUARANTEED_BITRATE_UL, v);
        }
        if let Some(v) = q.gbr_dl {
            g.u32(avp::GUARANTEED_BITRATE_DL, v);
        }
        if let Some(arp) = &q.arp {
            encode_arp(g, arp);
        }
    });
}

fn encode_definition(b: &mut MessageBuilder<'_>, r: &RuleDefinition) {
    b.group(avp::CHARGING_RULE_DEFINITION, |g| {
        g.str(avp::CHARGING_RULE_NAME, &r.name);
        if let Some(v) = r.service_identifier {
            g.u32(avp::SERVICE_IDENTIFIER, v);
        }
        if let Some(v) = r.rating_group {
            g.u32(avp::RATING_GROUP, v);
        }
        for f in &r.flows {
            g.group(avp::FLOW_INFORMATION, |fi| {
                fi.str(avp::FLOW_DESCRIPTION, f);
            });
        }
        if let Some(v) = r.flow_status {
            g.i32(avp::FLOW_STATUS, v as i32);
        }
        if let Some(q) = &r.qos {
            encode_rule_qos(g, q);
        }
        if let Some(v) = r.online {
            g.i32(avp::ONLINE, i32::from(v));
        }
        if let Some(v) = r.offline {
            g.i32(avp::OFFLINE, i32::from(v));
        }
        if let Some(v) = r.precedence {
            g.u32(avp::PRECEDENCE, v);
        }
        if let Some(k) = &r.monitoring_key {
            g.bytes(avp::MONITORING_KEY, k.as_bytes());
        }
    });
}

/// Encodes a RAR to the PCEF carrying a diff, or a release.
#[allow(clippy::too_many_arguments)]
pub fn encode_rar(
    b: &mut MessageBuilder<'_>,
    session_id: &str,
    me: &Identity,
    dest_host: &str,
    dest_realm: &str,
    diff: Option<&RuleDiff<'_>>,
    release_cause: Option<i32>,
    usage: &UsageInstructions,
) {
    session_message::application_first(b, GX, session_id, me, dest_host, dest_realm).i32(
        avp::RE_AUTH_REQUEST_TYPE,
        enums::RE_AUTH_REQUEST_TYPE::AUTHORIZE_ONLY,
    );
    if let Some(cause) = release_cause {
        b.i32(avp::SESSION_RELEASE_CAUSE, cause);
    }
    if let Some(d) = diff {
        encode_diff(b, d);
    }
    encode_usage(b, usage);
}

/// Command codes Gx serves.
pub fn serves(application_id: u32, command_code: u32) -> bool {
    application_id == GX && (command_code == cmd::CREDIT_CONTROL || command_code == cmd::RE_AUTH)
}

/// The UE address as a generic IP (for the Rx binding index later).
pub fn ue_ip(c: &Ccr<'_>) -> Option<IpAddr> {
    c.ue_ipv4.map(IpAddr::V4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcc::usage_monitoring::*;
    use crate::policy::decision::{Ambr, BearerQos, Decision};
    use crate::policy::input::RuleFailure;
    use crate::usage::{MonitoringLevel, ServiceUnits};
    use std::borrow::Cow;

    fn ccr_i() -> Message {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, GX, 1, 2);
        b.str(avp::SESSION_ID, "pgw;1;2")
            .u32(avp::AUTH_APPLICATION_ID, GX)
            .origin("pgw.example", "example")
            .str(avp::DESTINATION_REALM, "example")
            .i32(avp::CC_REQUEST_TYPE, 1)
            .u32(avp::CC_REQUEST_NUMBER, 0)
            .group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(avp::SUBSCRIPTION_ID_TYPE, END_USER_E164)
                    .str(avp::SUBSCRIPTION_ID_DATA, "491700000001");
            })
            .group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(avp::SUBSCRIPTION_ID_TYPE, END_USER_IMSI)
                    .str(avp::SUBSCRIPTION_ID_DATA, "001010000000001");
            })
            .bytes(avp::FRAMED_IP_ADDRESS, &[10, 0, 0, 7])
            .i32(avp::RAT_TYPE, 1004)
            .str(avp::CALLED_STATION_ID, "internet")
            .group(avp::USER_EQUIPMENT_INFO, |g| {
                g.i32(avp::USER_EQUIPMENT_INFO_TYPE, 0)
                    // BCD as some gateways send it: 35 34 90 06 98 73 31 90 -> swapped nibbles
                    .bytes(avp::USER_EQUIPMENT_INFO_VALUE, &[0x53, 0x43, 0x09, 0x60]);
            })
            .group(avp::CHARGING_RULE_REPORT, |g| {
                g.str(avp::CHARGING_RULE_NAME, "vip")
                    .i32(avp::PCC_RULE_STATUS, 1)
                    .i32(avp::RULE_FAILURE_CODE, 4);
            })
            .group(avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_GX, |g| {
                g.bytes(
                    avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_VALUE,
                    &[0, 0, 0, 42],
                )
                .str(avp::CHARGING_RULE_NAME, "vip");
            });
        b.finish();
        Message::parse(buf.freeze()).expect("valid")
    }

    #[test]
    fn decodes_what_the_pcrf_uses() {
        let m = ccr_i();
        let c = decode_ccr(&m).expect("decodes");
        assert_eq!(c.session_id, "pgw;1;2");
        assert_eq!(c.origin_host, "pgw.example");
        assert_eq!(c.request_type, Some(RequestType::Initial));
        assert_eq!(c.imsi, Some("001010000000001"));
        assert_eq!(c.msisdn, Some("491700000001"));
        assert_eq!(c.ue_ipv4, Some(Ipv4Addr::new(10, 0, 0, 7)));
        assert_eq!(c.rat_type, Some(1004));
        assert_eq!(c.apn, Some("internet"));
        assert_eq!(c.device.as_deref(), Some("35349006"));
        assert_eq!(
            c.charging_ids,
            vec![ChargingId {
                value: vec![0, 0, 0, 42],
                rules: vec!["vip".into()]
            }]
        );
        assert_eq!(
            c.rule_reports.kept,
            vec![RuleFailure {
                rule: "vip".into(),
                status: 1,
                code: Some(4)
            }]
        );
    }

    #[test]
    fn rule_reports_past_the_cap_are_counted_not_kept() {
        let m = ccr_u(|b| {
            b.group(avp::CHARGING_RULE_REPORT, |g| {
                for i in 0..30_000 {
                    g.str(avp::CHARGING_RULE_NAME, &format!("r{i:05}"));
                }
                g.i32(avp::PCC_RULE_STATUS, 1);
            });
        });
        let c = decode_ccr(&m).expect("decodes");
        assert_eq!(
            c.rule_reports.len(),
            crate::limits::MAX_RULE_REPORTS_PER_REQUEST
        );
        assert_eq!(c.rule_reports.over_cap, 30_000 - 256);
        assert_eq!(c.rule_reports.received(), 30_000);
        assert_eq!(c.rule_reports[255].rule, "r00255");
    }

    #[test]
    fn missing_and_bad_avps_name_themselves() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, GX, 1, 2);
        b.str(avp::SESSION_ID, "s")
            .origin("h", "r")
            .i32(avp::CC_REQUEST_TYPE, 2);
        b.finish();
        let m = Message::parse(buf.freeze()).expect("valid");
        let e = decode_ccr(&m).expect_err("no CC-Request-Number");
        assert_eq!(e.result_code, result_code::DIAMETER_MISSING_AVP);
        let failed = e.failed_avp.expect("Failed-AVP");
        assert_eq!(&failed[..4], &avp::CC_REQUEST_NUMBER.code.to_be_bytes());

        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, GX, 1, 2);
        b.str(avp::SESSION_ID, "s")
            .origin("h", "r")
            .i32(avp::CC_REQUEST_TYPE, 2)
            .u32(avp::CC_REQUEST_NUMBER, 1)
            .bytes(avp::FRAMED_IP_ADDRESS, &[1, 2, 3]);
        b.finish();
        let m = Message::parse(buf.freeze()).expect("valid");
        let e = decode_ccr(&m).expect_err("3-byte address");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_VALUE);

        // Found by the gx_handler fuzz target: 5004 without its Failed-AVP.
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, GX, 1, 2);
        b.str(avp::SESSION_ID, "s")
            .u32(avp::AUTH_APPLICATION_ID, 4)
            .origin("h", "r")
            .i32(avp::CC_REQUEST_TYPE, 2)
            .u32(avp::CC_REQUEST_NUMBER, 1);
        b.finish();
        let m = Message::parse(buf.freeze()).expect("valid");
        let e = decode_ccr(&m).expect_err("not Gx");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_VALUE);
        let failed = e.failed_avp.expect("Failed-AVP");
        assert_eq!(&failed[..4], &avp::AUTH_APPLICATION_ID.code.to_be_bytes());
        assert_eq!(&failed[8..], &4u32.to_be_bytes());
    }

    #[test]
    fn cca_carries_the_diff_and_rar_the_release() {
        let req = ccr_i();
        let c = decode_ccr(&req).expect("decodes");
        let me = Identity {
            origin_host: "pcrf.example".into(),
            origin_realm: "example".into(),
        };
        let old = Decision {
            rules: vec!["gone".into()],
            ..Default::default()
        };
        let new = Decision {
            rules: vec!["internet".into()],
            apn_ambr: Some(Ambr { ul: 1000, dl: 2000 }),
            default_bearer_qos: Some(BearerQos {
                qci: 9,
                arp: Arp {
                    priority: 10,
                    may_preempt: false,
                    preemptable: true,
                },
            }),
            event_triggers: vec![],
            ..Default::default()
        };
        let diff = RuleDiff::between(&old, &new);
        let mut out = BytesMut::new();
        encode_cca(
            &mut out,
            &req,
            &me,
            &c,
            Outcome::Result(2001),
            &CcaExtras::default(),
            Some(&diff),
            None,
        )
        .expect("fits");
        let cca = Message::parse(out.freeze()).expect("valid CCA");
        assert_eq!(cca.validate().map(|n| n > 10), Ok(true));
        let [inst, rem, qos, dbq, rc] = cca
            .pick(&[
                avp::CHARGING_RULE_INSTALL,
                avp::CHARGING_RULE_REMOVE,
                avp::QOS_INFORMATION,
                avp::DEFAULT_EPS_BEARER_QOS,
                avp::RESULT_CODE,
            ])
            .expect("avps");
        let name = |a: Option<Avp<'_>>| {
            a.and_then(|a| a.grouped().find(avp::CHARGING_RULE_NAME).ok().flatten())
                .map(|n| n.as_str().map(str::to_owned))
        };
        assert_eq!(name(inst), Some(Ok("internet".into())));
        assert_eq!(name(rem), Some(Ok("gone".into())));
        assert!(qos.is_some() && dbq.is_some());
        assert_eq!(rc.map(|a| a.as_u32()), Some(Ok(2001)));

        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::RE_AUTH, GX, 5, 6);
        encode_rar(
            &mut b,
            "pgw;1;2",
            &me,
            "pgw.example",
            "example",
            None,
            Some(0),
            &UsageInstructions::default(),
        );
        b.finish();
        let rar = Message::parse(buf.freeze()).expect("valid RAR");
        assert_eq!(rar.validate().map(|n| n >= 8), Ok(true));
        assert!(rar
            .find(avp::SESSION_RELEASE_CAUSE)
            .expect("avps")
            .is_some());
        assert_eq!(rar.session_id(), Ok(Some("pgw;1;2")));
    }

    /// A CCR-U reporting usage; `umis` adds the reports.
    fn ccr_u(umis: impl FnOnce(&mut MessageBuilder<'_>)) -> Message {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, GX, 3, 4);
        b.str(avp::SESSION_ID, "pgw;1;2")
            .u32(avp::AUTH_APPLICATION_ID, GX)
            .origin("pgw.example", "example")
            .str(avp::DESTINATION_REALM, "example")
            .i32(avp::CC_REQUEST_TYPE, 2)
            .u32(avp::CC_REQUEST_NUMBER, 1)
            .i32(avp::EVENT_TRIGGER, enums::EVENT_TRIGGER::USAGE_REPORT);
        umis(&mut b);
        b.finish();
        let m = Message::parse(buf.freeze()).expect("valid");
        m.validate().expect("our test CCR is valid");
        m
    }

    fn usu(b: &mut MessageBuilder<'_>, total: u64, input: u64, output: u64) {
        b.group(avp::USED_SERVICE_UNIT, |s| {
            s.u64(avp::CC_TOTAL_OCTETS, total)
                .u64(avp::CC_INPUT_OCTETS, input)
                .u64(avp::CC_OUTPUT_OCTETS, output);
        });
    }

    fn me() -> Identity {
        Identity {
            origin_host: "pcrf.example".into(),
            origin_realm: "example".into(),
        }
    }

    #[test]
    fn decodes_one_and_several_usage_reports() {
        let m = ccr_u(|b| {
            b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.bytes(avp::MONITORING_KEY, b"internet");
                usu(g, 300, 100, 200);
                g.i32(avp::USAGE_MONITORING_LEVEL, 0);
            });
        });
        let c = decode_ccr(&m).expect("decodes");
        assert_eq!(c.event_triggers, vec![33]);
        assert_eq!(
            c.usage_reports,
            vec![UsageReport {
                key: b"internet",
                level: Some(0),
                used: ServiceUnits {
                    total: Some(300),
                    input: Some(100),
                    output: Some(200),
                    time: None
                },
            }]
        );

        let m = ccr_u(|b| {
            b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.bytes(avp::MONITORING_KEY, b"video");
                usu(g, 7, 3, 4);
                g.i32(avp::USAGE_MONITORING_LEVEL, 1);
            })
            // A UMI without Used-Service-Unit reports nothing.
            .group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.bytes(avp::MONITORING_KEY, b"idle");
            })
            .group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.bytes(avp::MONITORING_KEY, b"voice")
                    .group(avp::USED_SERVICE_UNIT, |s| {
                        s.u32(avp::CC_TIME, 60);
                    });
            });
        });
        let c = decode_ccr(&m).expect("decodes");
        assert_eq!(
            c.usage_reports,
            vec![
                UsageReport {
                    key: b"video",
                    level: Some(1),
                    used: ServiceUnits {
                        total: Some(7),
                        input: Some(3),
                        output: Some(4),
                        time: None
                    },
                },
                UsageReport {
                    key: b"voice",
                    level: None,
                    used: ServiceUnits {
                        time: Some(60),
                        ..Default::default()
                    },
                },
            ]
        );
    }

    #[test]
    fn two_used_service_units_add_up_and_directions_alone_count() {
        let m = ccr_u(|b| {
            b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.bytes(avp::MONITORING_KEY, b"internet");
                // Before and after a tariff change; the second has no total.
                usu(g, 1_000, 400, 600);
                g.group(avp::USED_SERVICE_UNIT, |s| {
                    s.u64(avp::CC_INPUT_OCTETS, 5)
                        .u64(avp::CC_OUTPUT_OCTETS, 6)
                        .u32(avp::CC_TIME, 9);
                });
            })
            .group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.bytes(avp::MONITORING_KEY, b"dirs")
                    .group(avp::USED_SERVICE_UNIT, |s| {
                        s.u64(avp::CC_INPUT_OCTETS, 11)
                            .u64(avp::CC_OUTPUT_OCTETS, 22);
                    });
            });
        });
        let c = decode_ccr(&m).expect("decodes");
        assert_eq!(c.usage_reports.len(), 2);
        // The second part's directions count in the total too.
        assert_eq!(
            c.usage_reports[0].used,
            ServiceUnits {
                total: Some(1_011),
                input: Some(405),
                output: Some(606),
                time: Some(9)
            }
        );
        assert_eq!(
            c.usage_reports[1].used,
            ServiceUnits {
                total: None,
                input: Some(11),
                output: Some(22),
                time: None
            }
        );
        assert_eq!(c.usage_reports[1].used.octets(), 33);
        // Sums saturate rather than wrap (each part is bounded, the
        // helper is not).
        let big = ServiceUnits {
            total: Some(u64::MAX - 1),
            time: Some(u32::MAX),
            ..Default::default()
        };
        let sum = add_units(big, big);
        assert_eq!((sum.total, sum.time), (Some(u64::MAX), Some(u32::MAX)));
    }

    #[test]
    fn a_report_without_monitoring_key_is_5005() {
        let m = ccr_u(|b| {
            b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
                usu(g, 1, 1, 0);
            });
        });
        let e = decode_ccr(&m).expect_err("no Monitoring-Key");
        assert_eq!(e.result_code, result_code::DIAMETER_MISSING_AVP);
        let failed = e.failed_avp.expect("Failed-AVP");
        assert_eq!(&failed[..4], &1066u32.to_be_bytes());
        // Vendor-specific example: V flag and the 3GPP vendor id.
        assert_eq!(failed[4] & 0x80, 0x80);
        assert_eq!(&failed[8..12], &TGPP.to_be_bytes());
    }

    #[test]
    fn absurd_usage_is_5004_naming_the_avp() {
        // What a PCEF sends for -1 octets: the top bit set.
        let negative = (-1i64) as u64;
        let m = ccr_u(|b| {
            b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.bytes(avp::MONITORING_KEY, b"internet");
                usu(g, 10, 10, negative);
            });
        });
        let e = decode_ccr(&m).expect_err("negative octets");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_VALUE);
        let failed = e.failed_avp.expect("Failed-AVP");
        // CC-Output-Octets, M flag, length 16, the value as received.
        let mut want = Vec::new();
        want.extend_from_slice(&414u32.to_be_bytes());
        want.push(0x40);
        want.extend_from_slice(&16u32.to_be_bytes()[1..]);
        want.extend_from_slice(&negative.to_be_bytes());
        assert_eq!(&failed[..], &want[..]);

        // The limit itself is accepted, one more is not.
        let at = |v: u64| {
            ccr_u(|b| {
                b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
                    g.bytes(avp::MONITORING_KEY, b"k");
                    g.group(avp::USED_SERVICE_UNIT, |s| {
                        s.u64(avp::CC_TOTAL_OCTETS, v);
                    });
                });
            })
        };
        let ok = at(MAX_REPORTED_OCTETS);
        assert_eq!(
            decode_ccr(&ok).expect("at the limit").usage_reports[0]
                .used
                .total,
            Some(MAX_REPORTED_OCTETS)
        );
        let over = at(MAX_REPORTED_OCTETS + 1);
        let e = decode_ccr(&over).expect_err("above the limit");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_VALUE);
        assert_eq!(
            &e.failed_avp.expect("Failed-AVP")[..4],
            &421u32.to_be_bytes()
        );

        let m = ccr_u(|b| {
            b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.bytes(avp::MONITORING_KEY, b"k");
                g.group(avp::USED_SERVICE_UNIT, |s| {
                    s.u32(avp::CC_TIME, MAX_REPORTED_SECONDS + 1);
                });
            });
        });
        let e = decode_ccr(&m).expect_err("eleven years");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_VALUE);
        let failed = e.failed_avp.expect("Failed-AVP");
        assert_eq!(&failed[..4], &420u32.to_be_bytes());
        assert_eq!(&failed[8..], &(MAX_REPORTED_SECONDS + 1).to_be_bytes());
    }

    #[test]
    fn non_utf8_keys_become_hex_text_and_back() {
        let raw = [0xff, 0x00, 0x41];
        let m = ccr_u(|b| {
            b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.bytes(avp::MONITORING_KEY, &raw);
                usu(g, 1, 0, 1);
            });
        });
        let c = decode_ccr(&m).expect("decodes");
        assert_eq!(c.usage_reports[0].key, &raw[..]);
        let text = key_text(c.usage_reports[0].key);
        assert_eq!(text, "hex:ff0041");
        assert_eq!(&*key_bytes(&text), &raw[..]);
        assert!(matches!(key_text(b"internet"), Cow::Borrowed("internet")));
        assert_eq!(&*key_bytes("internet"), b"internet");
        // A UTF-8 key that looks like hex text is escaped, so it round-trips.
        assert_eq!(key_text(b"hex:41"), "hex:6865783a3431");
        assert_eq!(&*key_bytes(&key_text(b"hex:41")), b"hex:41");
        // Text that is not valid hex after the prefix stays text.
        assert_eq!(&*key_bytes("hex:4"), b"hex:4");
        assert_eq!(&*key_bytes("hex:zz"), b"hex:zz");
    }

    fn instructions() -> UsageInstructions {
        UsageInstructions {
            grants: vec![
                UsageGrant {
                    key: "internet".into(),
                    level: MonitoringLevel::Session,
                    units: ServiceUnits {
                        total: Some(10_000_000),
                        ..Default::default()
                    },
                },
                UsageGrant {
                    key: "hex:ff01".into(),
                    level: MonitoringLevel::Rule,
                    units: ServiceUnits {
                        total: None,
                        input: Some(1),
                        output: Some(2),
                        time: Some(3_600),
                    },
                },
            ],
            disable: vec!["video".into()],
            report: None,
        }
    }

    #[test]
    fn cca_with_grants_and_disable_decodes_back() {
        let req = ccr_u(|_| {});
        let c = decode_ccr(&req).expect("decodes");
        let extras = CcaExtras {
            usage: instructions(),
            ..Default::default()
        };
        let old = Decision {
            rules: vec!["a".into()],
            ..Default::default()
        };
        let new = Decision {
            rules: vec!["b".into()],
            ..Default::default()
        };
        let diff = RuleDiff::between(&old, &new);
        let mut out = BytesMut::new();
        encode_cca(
            &mut out,
            &req,
            &me(),
            &c,
            Outcome::Result(2001),
            &extras,
            Some(&diff),
            None,
        )
        .expect("fits");
        let cca = Message::parse(out.freeze()).expect("valid CCA");
        cca.validate().expect("CCA passes validation");
        assert_eq!(decode_usage_instructions(&cca), Ok(instructions()));
        // The non-UTF-8 key went out as its bytes.
        let keys: Vec<Vec<u8>> = cca
            .avps()
            .filter_code(avp::USAGE_MONITORING_INFORMATION)
            .map(|a| {
                let a = a.expect("AVP");
                let k = a.grouped().find(avp::MONITORING_KEY).expect("ok");
                k.expect("key").as_octets().to_vec()
            })
            .collect();
        assert_eq!(
            keys,
            vec![b"internet".to_vec(), vec![0xff, 0x01], b"video".to_vec()]
        );
        // UMIs come after the rule AVPs.
        let order: Vec<u32> = cca.avps().map(|a| a.expect("AVP").code()).collect();
        let last_rule = order
            .iter()
            .rposition(|c| *c == avp::CHARGING_RULE_INSTALL.code)
            .expect("install");
        let first_umi = order
            .iter()
            .position(|c| *c == avp::USAGE_MONITORING_INFORMATION.code)
            .expect("umi");
        assert!(last_rule < first_umi, "{order:?}");
        // We do not add Event-Trigger; that is the node's decision.
        assert!(cca.find(avp::EVENT_TRIGGER).expect("avps").is_none());

        // Nothing of it in a CCA-T.
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, GX, 7, 8);
        b.str(avp::SESSION_ID, "pgw;1;2")
            .origin("pgw.example", "example")
            .i32(avp::CC_REQUEST_TYPE, 3)
            .u32(avp::CC_REQUEST_NUMBER, 2);
        b.finish();
        let req_t = Message::parse(buf.freeze()).expect("valid");
        let t = decode_ccr(&req_t).expect("decodes");
        let mut out = BytesMut::new();
        encode_cca(
            &mut out,
            &req_t,
            &me(),
            &t,
            Outcome::Result(2001),
            &extras,
            None,
            None,
        )
        .expect("fits");
        let cca_t = Message::parse(out.freeze()).expect("valid CCA-T");
        cca_t.validate().expect("CCA-T passes validation");
        assert_eq!(
            decode_usage_instructions(&cca_t),
            Ok(UsageInstructions::default())
        );
    }

    fn rar_with(usage: &UsageInstructions) -> Message {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::RE_AUTH, GX, 5, 6);
        encode_rar(
            &mut b,
            "pgw;1;2",
            &me(),
            "pgw.example",
            "example",
            None,
            None,
            usage,
        );
        b.finish();
        let rar = Message::parse(buf.freeze()).expect("valid RAR");
        rar.validate().expect("RAR passes validation");
        rar
    }

    #[test]
    fn rar_asks_for_reports_of_all_keys_or_some() {
        let all = UsageInstructions {
            report: Some(vec![]),
            ..Default::default()
        };
        assert!(!all.is_empty());
        assert!(UsageInstructions::default().is_empty());
        let rar = rar_with(&all);
        let umis: Vec<Avp<'_>> = rar
            .avps()
            .filter_code(avp::USAGE_MONITORING_INFORMATION)
            .collect::<Result<_, _>>()
            .expect("AVPs");
        assert_eq!(umis.len(), 1);
        let inner: Vec<(u32, i32)> = umis[0]
            .grouped()
            .map(|g| {
                let g = g.expect("AVP");
                (g.code(), g.as_enum().expect("enum"))
            })
            .collect();
        // Only Usage-Monitoring-Report = USAGE_MONITORING_REPORT_REQUIRED.
        assert_eq!(inner, vec![(1069, 0)]);
        assert_eq!(decode_usage_instructions(&rar), Ok(all));

        let one = UsageInstructions {
            report: Some(vec!["internet".into()]),
            ..Default::default()
        };
        let rar = rar_with(&one);
        assert_eq!(decode_usage_instructions(&rar), Ok(one));
        let umi = rar
            .find(avp::USAGE_MONITORING_INFORMATION)
            .expect("avps")
            .expect("UMI");
        let key = umi.grouped().find(avp::MONITORING_KEY).expect("ok");
        assert_eq!(key.map(|k| k.as_octets()), Some(&b"internet"[..]));

        // No instructions, no UMI.
        let rar = rar_with(&UsageInstructions::default());
        assert!(rar
            .find(avp::USAGE_MONITORING_INFORMATION)
            .expect("avps")
            .is_none());
    }

    #[test]
    fn the_load_generators_reports_decode() {
        use pcrf_bench::gx as bench;
        let gw = bench::Gateway {
            origin_host: "pgw-1.bench.test".into(),
            origin_realm: "bench.test".into(),
            destination_realm: "pcrf.test".into(),
            destination_host: None,
            origin_state_id: 1,
            pgw_address: Ipv4Addr::new(192, 0, 2, 1),
            sgw_address: Ipv4Addr::new(192, 0, 2, 2),
            mcc_mnc: "00101".into(),
            apn: "internet".into(),
        };
        let sub = bench::Subscriber {
            imsi: "001010000000001".into(),
            msisdn: "79000000001".into(),
            ue_ip: Ipv4Addr::new(10, 0, 0, 1),
            imeisv: "3534900698733101".into(),
            cell_id: 1,
            tac: 1,
        };
        let r = bench::Request {
            session_id: "pgw-1.bench.test;1;1",
            gateway: &gw,
            destination_host: Some("pcrf.test"),
            subscriber: &sub,
            number: 1,
            charging_id: 1,
        };
        let usage = [
            bench::Usage {
                monitoring_key: "mk-internet".into(),
                input_octets: 1_000,
                output_octets: 20_000,
            },
            bench::Usage {
                monitoring_key: "mk-video".into(),
                input_octets: 5,
                output_octets: 6,
            },
        ];
        let u = Message::parse(bench::encode(1, 1, |b| bench::ccr_update(b, &r, &usage)))
            .expect("parse");
        let c = decode_ccr(&u).expect("decodes");
        assert_eq!(c.request_type, Some(RequestType::Update));
        assert!(c
            .event_triggers
            .contains(&enums::EVENT_TRIGGER::USAGE_REPORT));
        let got: Vec<(Cow<'_, str>, Option<i32>, ServiceUnits)> = c
            .usage_reports
            .iter()
            .map(|r| (key_text(r.key), r.level, r.used))
            .collect();
        let units = |i, o| ServiceUnits {
            total: Some(i + o),
            input: Some(i),
            output: Some(o),
            time: None,
        };
        assert_eq!(
            got,
            vec![
                ("mk-internet".into(), Some(0), units(1_000, 20_000)),
                ("mk-video".into(), Some(0), units(5, 6)),
            ]
        );
        let t = Message::parse(bench::encode(2, 2, |b| {
            bench::ccr_terminate(b, &r, &usage[1..], 1)
        }))
        .expect("parse");
        let c = decode_ccr(&t).expect("decodes");
        assert_eq!(c.usage_reports.len(), 1);
        assert_eq!(c.usage_reports[0].used, units(5, 6));
    }

    /// Random policy results, extreme integers, huge strings and many rules
    /// included, through the decision check and the CCA encoder: nothing
    /// panics, and each CCA either parses back and validates or is refused
    /// (removed from the buffer, the refusal's length over 24 bits). The
    /// seed is fixed so a failure reproduces.
    #[test]
    fn random_decisions_encode_or_are_refused_never_panic() {
        use crate::policy::decision::{
            AdcRule, Arp, RuleDefinition, RuleQos, MAX_NAME_BYTES, MAX_REVALIDATION_SECS,
        };
        use diameter::codec::MAX_MESSAGE_LEN;
        use rand::{rngs::StdRng, Rng, SeedableRng};

        fn int(rng: &mut StdRng) -> u32 {
            match rng.random_range(0..6) {
                0 => 0,
                1 => u32::MAX,
                2 => i32::MAX as u32 + rng.random_range(0..2),
                3 => rng.random_range(0..20),
                4 => rng.random_range(250..260),
                _ => rng.random(),
            }
        }
        fn text(rng: &mut StdRng, huge: bool) -> String {
            let len = match rng.random_range(0..5) {
                0 => 0,
                1 => MAX_NAME_BYTES + rng.random_range(0..2),
                2 if huge => (1 << 24) + rng.random_range(0..64),
                _ => rng.random_range(1..40),
            };
            "é".repeat(len / 2) + &"x".repeat(len % 2)
        }
        fn list(rng: &mut StdRng, huge: bool) -> Vec<String> {
            let n = if rng.random_bool(0.05) {
                rng.random_range(1000..1100)
            } else {
                rng.random_range(0..4)
            };
            (0..n).map(|_| text(rng, huge && n < 4)).collect()
        }
        fn arp(rng: &mut StdRng) -> Arp {
            Arp {
                priority: int(rng),
                may_preempt: rng.random(),
                preemptable: rng.random(),
            }
        }
        fn decision(rng: &mut StdRng, huge: bool) -> Decision {
            let opt = |rng: &mut StdRng| rng.random_bool(0.5).then(|| int(rng));
            let defs = (0..rng.random_range(0..4))
                .map(|_| RuleDefinition {
                    name: text(rng, false),
                    flows: list(rng, huge),
                    flow_status: opt(rng),
                    qos: rng.random_bool(0.5).then(|| RuleQos {
                        qci: int(rng),
                        arp: rng.random_bool(0.5).then(|| arp(rng)),
                        mbr_ul: opt(rng),
                        mbr_dl: opt(rng),
                        gbr_ul: opt(rng),
                        gbr_dl: opt(rng),
                    }),
                    precedence: opt(rng),
                    rating_group: opt(rng),
                    service_identifier: opt(rng),
                    online: rng.random_bool(0.5).then(|| rng.random()),
                    offline: rng.random_bool(0.5).then(|| rng.random()),
                    monitoring_key: rng.random_bool(0.5).then(|| text(rng, false)),
                })
                .collect();
            Decision {
                rules: list(rng, huge),
                base_names: list(rng, false),
                definitions: defs,
                apn_ambr: rng.random_bool(0.5).then(|| Ambr {
                    ul: int(rng),
                    dl: int(rng),
                }),
                default_bearer_qos: rng.random_bool(0.5).then(|| BearerQos {
                    qci: int(rng),
                    arp: arp(rng),
                }),
                event_triggers: (0..rng.random_range(0..4)).map(|_| int(rng)).collect(),
                revalidation_secs: rng.random_bool(0.5).then(|| match rng.random_range(0..4) {
                    0 => u64::MAX,
                    1 => i64::MAX as u64,
                    2 => MAX_REVALIDATION_SECS + rng.random_range(0..2),
                    _ => rng.random_range(0..100_000),
                }),
                reject: None,
                monitoring: list(rng, false),
                adc: (0..rng.random_range(0..3))
                    .map(|_| AdcRule {
                        name: Some(text(rng, false)),
                        base: None,
                        application: None,
                        monitoring_key: None,
                    })
                    .collect(),
                spending_counters: list(rng, false),
                valid: None,
            }
        }

        let req = ccr_i();
        let c = decode_ccr(&req).expect("decodes");
        let me = Identity {
            origin_host: "pcrf.example".into(),
            origin_realm: "example".into(),
        };
        let mut rng = StdRng::seed_from_u64(0x5eed_0f9c);
        let nothing = Decision::default();
        let (mut sent, mut refused, mut unchecked) = (0, 0, 0);
        for round in 0..400 {
            let d = decision(&mut rng, round % 40 == 0);
            if d.check().is_err() {
                unchecked += 1;
            }
            // Encoded whether or not the check passes: the encoder must
            // not panic on any value either.
            let diff = RuleDiff::between(&nothing, &d);
            let mut out = BytesMut::from(&b"queued"[..]);
            match encode_cca(
                &mut out,
                &req,
                &me,
                &c,
                Outcome::Result(2001),
                &CcaExtras::default(),
                Some(&diff),
                None,
            ) {
                Ok(len) => {
                    sent += 1;
                    let m = Message::parse(out.split_off(6).freeze()).expect("parses back");
                    assert_eq!(m.len(), len);
                    m.validate().expect("a well-formed CCA");
                }
                Err(e) => {
                    refused += 1;
                    assert!(e.len > MAX_MESSAGE_LEN, "{e}");
                    assert_eq!(&out[..], b"queued", "refused CCA left in the buffer");
                }
            }
        }
        assert!(
            sent > 0 && refused > 0 && unchecked > 0,
            "{sent} {refused} {unchecked}"
        );
    }
}
