//! Gx (TS 29.212) on the wire: decoding a CCR into what the PCRF needs and
//! encoding CCA and RAR from a decision diff. No state and no IO here; the
//! node (`node.rs`) decides what to do with a request.
//!
//! Decoding is one pass over the top-level AVPs, borrowing from the
//! received bytes; grouped AVPs are entered only for the few we read.

use crate::policy::decision::{Arp, RuleDefinition, RuleQos};
use crate::policy::input::RuleFailure;
use crate::session::RuleDiff;
use bytes::BytesMut;
use diameter::codec::{missing_avp, Avp, DiameterError, Message, MessageBuilder};
use diameter::dict::{app, avp, cmd, enums, vendor};
use diameter::result_code;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, SystemTime};

/// Gx application id.
pub const GX: u32 = app::GX;
/// 3GPP vendor id.
pub const TGPP: u32 = vendor::_3GPP;

/// CC-Request-Type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestType {
    Initial,
    Update,
    Termination,
}

impl RequestType {
    pub fn label(self) -> &'static str {
        match self {
            RequestType::Initial => "CCR-I",
            RequestType::Update => "CCR-U",
            RequestType::Termination => "CCR-T",
        }
    }
}

/// Subscription-Id-Type values (RFC 4006 §8.47).
const END_USER_E164: i32 = 0;
const END_USER_IMSI: i32 = 1;

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
    pub rule_reports: Vec<RuleFailure>,
    pub termination_cause: Option<i32>,
    /// The Auth-Application-Id the request names (must be Gx).
    pub auth_application_id: Option<u32>,
}

impl RequestType {
    fn from_enum(v: i32) -> Option<RequestType> {
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
/// values 5004, bad lengths 5014 (RFC 6733 §7).
pub fn decode_ccr(msg: &Message) -> Result<Ccr<'_>, DiameterError> {
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
            (0, 258) => c.auth_application_id = Some(a.as_u32()?),
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
            _ if a.is(avp::SUBSCRIPTION_ID) => {
                let mut ty = None;
                let mut data = None;
                for g in a.grouped() {
                    let g = g?;
                    if g.is(avp::SUBSCRIPTION_ID_TYPE) {
                        ty = Some(g.as_enum()?);
                    } else if g.is(avp::SUBSCRIPTION_ID_DATA) {
                        data = Some(g.as_str()?);
                    }
                }
                match (ty, data) {
                    (Some(END_USER_IMSI), Some(d)) => c.imsi = Some(d),
                    (Some(END_USER_E164), Some(d)) => c.msisdn = Some(d),
                    (Some(_), Some(_)) => {}
                    (None, _) => {
                        return Err(missing_avp(
                            avp::SUBSCRIPTION_ID_TYPE,
                            "Subscription-Id-Type",
                        ))
                    }
                    (_, None) => {
                        return Err(missing_avp(
                            avp::SUBSCRIPTION_ID_DATA,
                            "Subscription-Id-Data",
                        ))
                    }
                }
            }
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
    if let Some(id) = c.auth_application_id {
        if id != GX {
            return Err(DiameterError::new(
                result_code::DIAMETER_INVALID_AVP_VALUE,
                "Auth-Application-Id is not Gx",
            ));
        }
    }
    Ok(c)
}

/// Charging-Rule-Report: each named rule with its status and failure code.
fn decode_rule_report(a: &Avp<'_>, out: &mut Vec<RuleFailure>) -> Result<(), DiameterError> {
    let mut names = Vec::new();
    let mut status = None;
    let mut code = None;
    for g in a.grouped() {
        let g = g?;
        if g.is(avp::CHARGING_RULE_NAME) || g.is(avp::CHARGING_RULE_BASE_NAME) {
            names.push(String::from_utf8_lossy(g.as_octets()).into_owned());
        } else if g.is(avp::PCC_RULE_STATUS) {
            status = Some(g.as_enum()?);
        } else if g.is(avp::RULE_FAILURE_CODE) {
            code = Some(g.as_enum()?);
        }
    }
    let status = status.unwrap_or(enums::PCC_RULE_STATUS::INACTIVE);
    for rule in names {
        out.push(RuleFailure {
            rule,
            status: status.max(0) as u32,
            code: code.map(|c| c.max(0) as u32),
        });
    }
    Ok(())
}

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

/// Hex of bytes, for location and time zone kept as text.
pub fn hex(b: &[u8]) -> String {
    const H: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(H[(x >> 4) as usize] as char);
        s.push(H[(x & 15) as usize] as char);
    }
    s
}

/// Who we are on the wire.
#[derive(Clone, Debug)]
pub struct Identity {
    pub origin_host: String,
    pub origin_realm: String,
}

/// The result part of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A base Result-Code.
    Result(u32),
    /// A 3GPP Experimental-Result-Code.
    Experimental(u32),
}

/// What goes in a successful CCA besides the rules.
#[derive(Debug, Default)]
pub struct CcaExtras {
    pub supported_features: Vec<(u32, u32)>,
    /// Set when the PCEF sent Network-Request-Support.
    pub bearer_control_mode: Option<i32>,
}

/// Encodes a CCA. `diff` is None for error answers and CCA-T.
pub fn encode_cca(
    out: &mut BytesMut,
    req: &Message,
    me: &Identity,
    ccr: &Ccr<'_>,
    outcome: Outcome,
    extras: &CcaExtras,
    diff: Option<&RuleDiff<'_>>,
) -> usize {
    let mut b = MessageBuilder::answer(out, req);
    b.u32(avp::AUTH_APPLICATION_ID, GX)
        .origin(&me.origin_host, &me.origin_realm);
    match outcome {
        Outcome::Result(rc) => {
            b.result_code(rc);
        }
        Outcome::Experimental(code) => {
            b.experimental_result(TGPP, code);
        }
    }
    if let Some(t) = ccr.request_type {
        b.i32(
            avp::CC_REQUEST_TYPE,
            match t {
                RequestType::Initial => enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
                RequestType::Update => enums::CC_REQUEST_TYPE::UPDATE_REQUEST,
                RequestType::Termination => enums::CC_REQUEST_TYPE::TERMINATION_REQUEST,
            },
        );
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
    if let Some(secs) = d.revalidation_secs {
        b.time(
            avp::REVALIDATION_TIME,
            SystemTime::now() + Duration::from_secs(secs),
        );
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
) {
    b.str(avp::SESSION_ID, session_id)
        .u32(avp::AUTH_APPLICATION_ID, GX)
        .origin(&me.origin_host, &me.origin_realm)
        .str(avp::DESTINATION_REALM, dest_realm)
        .str(avp::DESTINATION_HOST, dest_host)
        .i32(
            avp::RE_AUTH_REQUEST_TYPE,
            enums::RE_AUTH_REQUEST_TYPE::AUTHORIZE_ONLY,
        );
    if let Some(cause) = release_cause {
        b.i32(avp::SESSION_RELEASE_CAUSE, cause);
    }
    if let Some(d) = diff {
        encode_diff(b, d);
    }
}

/// The result of an RAA: its Result-Code or Experimental-Result-Code, and
/// any rule failures it reports.
#[derive(Debug, Default)]
pub struct Raa {
    pub result_code: Option<u32>,
    pub experimental_result: Option<u32>,
    pub rule_reports: Vec<RuleFailure>,
}

/// Decodes an RAA.
pub fn decode_raa(msg: &Message) -> Result<Raa, DiameterError> {
    let mut r = Raa::default();
    for a in msg.avps() {
        let a = a?;
        if a.is(avp::RESULT_CODE) {
            r.result_code = Some(a.as_u32()?);
        } else if a.is(avp::EXPERIMENTAL_RESULT) {
            if let Some(code) = a.grouped().find(avp::EXPERIMENTAL_RESULT_CODE)? {
                r.experimental_result = Some(code.as_u32()?);
            }
        } else if a.is(avp::CHARGING_RULE_REPORT) {
            decode_rule_report(&a, &mut r.rule_reports)?;
        }
    }
    Ok(r)
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
    use crate::policy::decision::{Ambr, BearerQos, Decision};

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
            c.rule_reports,
            vec![RuleFailure {
                rule: "vip".into(),
                status: 1,
                code: Some(4)
            }]
        );
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
        );
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
}
