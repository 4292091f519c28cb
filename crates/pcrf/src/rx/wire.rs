//! Rx (TS 29.214) on the wire: decoding the AF's AAR and STR (and its RAA
//! and ASA), encoding AAA, STA, the RAR that notifies the AF of a
//! Specific-Action, and the ASR that ends its session. No state and no IO
//! here; `service.rs` binds, decides and pushes.

use crate::limits;
use crate::policy::media::{MediaComponent, MediaSubComponent};
use crate::session_message;
use crate::session_message::{Identity, Outcome};
use bytes::BytesMut;
use diameter::codec::{missing_avp, Avp, DiameterError, Message, MessageBuilder};
use diameter::dict::{app, avp, cmd, enums};
use std::net::Ipv4Addr;

/// Rx application id.
pub const RX: u32 = app::RX;

/// Rx-Request-Type (TS 29.214 §5.3.50).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RxRequestType {
    Initial,
    Update,
    PcscfRestoration,
}

/// What an AAR carries that the PCRF uses.
#[derive(Debug, Default)]
pub struct Aar<'a> {
    pub session_id: &'a str,
    pub origin_host: &'a str,
    pub origin_realm: &'a str,
    pub request_type: Option<RxRequestType>,
    pub ue_ipv4: Option<Ipv4Addr>,
    /// Framed-IPv6-Prefix AVP data (RFC 3162 layout).
    pub ue_ipv6_prefix: Option<&'a [u8]>,
    pub imsi: Option<&'a str>,
    pub msisdn: Option<&'a str>,
    /// Called-Station-Id: the APN, to narrow the binding.
    pub apn: Option<&'a str>,
    pub application: Option<String>,
    pub charging_id: Option<&'a [u8]>,
    pub service_urn: Option<String>,
    pub specific_actions: Vec<u32>,
    pub media: Vec<MediaComponent>,
    /// An N5 AF's notification URI (never in an AAR).
    pub notification_uri: Option<&'a str>,
}

/// An STR: which Rx session ends.
#[derive(Debug, Default)]
pub struct Str<'a> {
    pub session_id: &'a str,
    pub origin_host: &'a str,
    pub termination_cause: Option<i32>,
}

fn require_rx(a: &Avp<'_>) -> Result<(), DiameterError> {
    if a.as_u32()? != RX {
        return Err(a.invalid_value("Auth-Application-Id is not Rx"));
    }
    Ok(())
}

/// Decodes an AAR. Missing mandatory AVPs give 5005, a malformed
/// Flow-Description or an unknown Media-Type 5004, a field over its size
/// limit ([`limits::FIELD_LIMITS`]) 5014, each with Failed-AVP.
pub fn decode_aar(msg: &Message) -> Result<Aar<'_>, DiameterError> {
    limits::check_field_sizes(msg.avps())?;
    let mut r = Aar::default();
    let (mut sid, mut host, mut realm, mut auth) = (false, false, false, false);
    for a in msg.avps() {
        let a = a?;
        match (a.vendor(), a.code()) {
            (0, 263) => {
                r.session_id = a.as_str()?;
                sid = true;
            }
            (0, 264) => {
                r.origin_host = a.as_identity()?;
                host = true;
            }
            (0, 296) => {
                r.origin_realm = a.as_identity()?;
                realm = true;
            }
            (0, 258) => {
                require_rx(&a)?;
                auth = true;
            }
            _ if a.is(avp::RX_REQUEST_TYPE) => {
                r.request_type = Some(match a.as_enum()? {
                    enums::RX_REQUEST_TYPE::INITIAL_REQUEST => RxRequestType::Initial,
                    enums::RX_REQUEST_TYPE::UPDATE_REQUEST => RxRequestType::Update,
                    enums::RX_REQUEST_TYPE::PCSCF_RESTORATION => RxRequestType::PcscfRestoration,
                    _ => return Err(a.invalid_value("unknown Rx-Request-Type")),
                })
            }
            _ if a.is(avp::FRAMED_IP_ADDRESS) => {
                let d = a.as_octets();
                if d.len() != 4 {
                    return Err(a.invalid_value("Framed-IP-Address must be 4 octets"));
                }
                r.ue_ipv4 = Some(Ipv4Addr::new(d[0], d[1], d[2], d[3]));
            }
            _ if a.is(avp::FRAMED_IPV6_PREFIX) => {
                if crate::session::binding::ipv6_prefix(a.as_octets()).is_none() {
                    return Err(a.invalid_value("malformed Framed-IPv6-Prefix"));
                }
                r.ue_ipv6_prefix = Some(a.as_octets());
            }
            _ if a.is(avp::SUBSCRIPTION_ID) => match session_message::decode_subscription_id(&a)? {
                (session_message::END_USER_IMSI, d) => r.imsi = Some(d),
                (session_message::END_USER_E164, d) => r.msisdn = Some(d),
                _ => {}
            },
            _ if a.is(avp::CALLED_STATION_ID) => r.apn = Some(a.as_str()?),
            _ if a.is(avp::AF_APPLICATION_IDENTIFIER) => {
                r.application = Some(String::from_utf8_lossy(a.as_octets()).into_owned())
            }
            _ if a.is(avp::AF_CHARGING_IDENTIFIER) => r.charging_id = Some(a.as_octets()),
            _ if a.is(avp::SERVICE_URN) => {
                r.service_urn = Some(String::from_utf8_lossy(a.as_octets()).into_owned())
            }
            _ if a.is(avp::SPECIFIC_ACTION) => {
                let v = a.as_enum()?;
                if v < 0 {
                    return Err(a.invalid_value("Specific-Action out of range"));
                }
                r.specific_actions.push(v as u32);
            }
            _ if a.is(avp::MEDIA_COMPONENT_DESCRIPTION) => r.media.push(decode_media(&a)?),
            _ => {}
        }
    }
    if !sid {
        return Err(missing_avp(avp::SESSION_ID, "Session-Id"));
    }
    if !auth {
        return Err(missing_avp(avp::AUTH_APPLICATION_ID, "Auth-Application-Id"));
    }
    if !host {
        return Err(missing_avp(avp::ORIGIN_HOST, "Origin-Host"));
    }
    if !realm {
        return Err(missing_avp(avp::ORIGIN_REALM, "Origin-Realm"));
    }
    Ok(r)
}

fn bandwidth(a: &Avp<'_>) -> Result<Option<u32>, DiameterError> {
    a.as_u32().map(Some)
}

fn status(a: &Avp<'_>) -> Result<Option<u32>, DiameterError> {
    let v = a.as_enum()?;
    if !(0..=4).contains(&v) {
        return Err(a.invalid_value("unknown Flow-Status"));
    }
    Ok(Some(v as u32))
}

/// The dictionary name of a Media-Type, or 5004 for a value it lacks.
fn media_type_name(a: &Avp<'_>) -> Result<String, DiameterError> {
    let v = a.as_enum()?;
    diameter::dict::avp(avp::MEDIA_TYPE.code, avp::MEDIA_TYPE.vendor)
        .and_then(|d| d.enums.iter().find(|(n, _)| *n == i64::from(v)))
        .map(|(_, name)| (*name).to_owned())
        .ok_or_else(|| a.invalid_value("unknown Media-Type"))
}

fn decode_media(a: &Avp<'_>) -> Result<MediaComponent, DiameterError> {
    let mut m = MediaComponent::default();
    let mut number = false;
    for g in a.grouped() {
        let g = g?;
        if g.is(avp::MEDIA_COMPONENT_NUMBER) {
            m.number = g.as_u32()?;
            number = true;
        } else if g.is(avp::MEDIA_TYPE) {
            m.media_type = Some(media_type_name(&g)?);
        } else if g.is(avp::MAX_REQUESTED_BANDWIDTH_UL) {
            m.max_ul = bandwidth(&g)?;
        } else if g.is(avp::MAX_REQUESTED_BANDWIDTH_DL) {
            m.max_dl = bandwidth(&g)?;
        } else if g.is(avp::RR_BANDWIDTH) {
            m.rr_bandwidth = bandwidth(&g)?;
        } else if g.is(avp::RS_BANDWIDTH) {
            m.rs_bandwidth = bandwidth(&g)?;
        } else if g.is(avp::FLOW_STATUS) {
            m.flow_status = status(&g)?;
        } else if g.is(avp::CODEC_DATA) {
            m.codec_data
                .push(String::from_utf8_lossy(g.as_octets()).into_owned());
        } else if g.is(avp::MEDIA_SUB_COMPONENT) {
            m.sub_components.push(decode_sub_component(&g)?);
        }
    }
    if !number {
        return Err(missing_avp(
            avp::MEDIA_COMPONENT_NUMBER,
            "Media-Component-Number",
        ));
    }
    Ok(m)
}

fn decode_sub_component(a: &Avp<'_>) -> Result<MediaSubComponent, DiameterError> {
    let mut s = MediaSubComponent::default();
    let mut number = false;
    for g in a.grouped() {
        let g = g?;
        if g.is(avp::FLOW_NUMBER) {
            s.flow_number = g.as_u32()?;
            number = true;
        } else if g.is(avp::FLOW_DESCRIPTION) {
            let text = g.as_str()?;
            if !valid_flow_description(text) {
                return Err(g.invalid_value("Flow-Description is not a valid IPFilterRule"));
            }
            s.flows.push(text.to_owned());
        } else if g.is(avp::FLOW_USAGE) {
            let v = g.as_enum()?;
            if !(0..=2).contains(&v) {
                return Err(g.invalid_value("unknown Flow-Usage"));
            }
            s.flow_usage = Some(v as u32);
        } else if g.is(avp::FLOW_STATUS) {
            s.flow_status = status(&g)?;
        } else if g.is(avp::MAX_REQUESTED_BANDWIDTH_UL) {
            s.max_ul = bandwidth(&g)?;
        } else if g.is(avp::MAX_REQUESTED_BANDWIDTH_DL) {
            s.max_dl = bandwidth(&g)?;
        }
    }
    if !number {
        return Err(missing_avp(avp::FLOW_NUMBER, "Flow-Number"));
    }
    Ok(s)
}

/// Whether `text` is an IPFilterRule as TS 29.214 §5.3.8 allows it:
/// `permit in|out <proto> from <addr> [ports] to <addr> [ports]`, with
/// proto a number or `ip`, addr `any`, `assigned` or an IPv4/IPv6 address
/// with an optional /bits mask, ports a comma list of `n` or `n-m`.
pub fn valid_flow_description(text: &str) -> bool {
    let mut t = text.split_ascii_whitespace().peekable();
    if t.next() != Some("permit") || !matches!(t.next(), Some("in" | "out")) {
        return false;
    }
    match t.next() {
        Some("ip") => {}
        Some(p) if p.parse::<u8>().is_ok() => {}
        _ => return false,
    }
    for keyword in ["from", "to"] {
        if t.next() != Some(keyword) {
            return false;
        }
        match t.next() {
            Some(a) if valid_address(a) => {}
            _ => return false,
        }
        if let Some(p) = t.peek() {
            if *p != "to" {
                if !valid_ports(p) {
                    return false;
                }
                t.next();
            }
        }
    }
    t.next().is_none()
}

fn valid_address(a: &str) -> bool {
    if a == "any" || a == "assigned" {
        return true;
    }
    let (ip, bits) = match a.split_once('/') {
        Some((ip, bits)) => (ip, Some(bits)),
        None => (a, None),
    };
    let max = match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => 32,
        Ok(std::net::IpAddr::V6(_)) => 128,
        Err(_) => return false,
    };
    bits.is_none_or(|b| b.parse::<u8>().is_ok_and(|b| b <= max))
}

fn valid_ports(p: &str) -> bool {
    p.split(',').all(|range| {
        let mut ends = range.splitn(2, '-');
        let lo = ends.next().and_then(|v| v.parse::<u16>().ok());
        match (lo, ends.next()) {
            (Some(_), None) => true,
            (Some(lo), Some(hi)) => hi.parse::<u16>().is_ok_and(|hi| hi >= lo),
            _ => false,
        }
    })
}

/// Decodes an STR.
pub fn decode_str(msg: &Message) -> Result<Str<'_>, DiameterError> {
    limits::check_field_sizes(msg.avps())?;
    let mut r = Str::default();
    let (mut sid, mut host) = (false, false);
    for a in msg.avps() {
        let a = a?;
        if a.is(avp::SESSION_ID) {
            r.session_id = a.as_str()?;
            sid = true;
        } else if a.is(avp::ORIGIN_HOST) {
            r.origin_host = a.as_identity()?;
            host = true;
        } else if a.is(avp::AUTH_APPLICATION_ID) {
            require_rx(&a)?;
        } else if a.is(avp::TERMINATION_CAUSE) {
            r.termination_cause = Some(a.as_enum()?);
        }
    }
    if !sid {
        return Err(missing_avp(avp::SESSION_ID, "Session-Id"));
    }
    if !host {
        return Err(missing_avp(avp::ORIGIN_HOST, "Origin-Host"));
    }
    Ok(r)
}

/// What a successful AAA may carry besides the result (TS 29.214 §5.6.2).
#[derive(Debug, Default)]
pub struct AaaExtras {
    pub ip_can_type: Option<i32>,
    pub rat_type: Option<i32>,
}

/// Encodes an AAA.
pub fn encode_aaa(
    out: &mut BytesMut,
    req: &Message,
    me: &Identity,
    outcome: Outcome,
    extras: &AaaExtras,
    error_message: Option<&str>,
) -> usize {
    let mut b = MessageBuilder::answer(out, req);
    b.u32(avp::AUTH_APPLICATION_ID, RX)
        .origin(&me.origin_host, &me.origin_realm);
    session_message::encode_outcome(&mut b, outcome);
    if let Some(m) = error_message {
        b.str(avp::ERROR_MESSAGE, m);
    }
    if let Some(v) = extras.ip_can_type {
        b.i32(avp::IP_CAN_TYPE, v);
    }
    if let Some(v) = extras.rat_type {
        b.i32(avp::RAT_TYPE, v);
    }
    b.proxy_info_from(req);
    b.finish()
}

/// Encodes an STA.
pub fn encode_sta(out: &mut BytesMut, req: &Message, me: &Identity, rc: u32) -> usize {
    let mut b = MessageBuilder::answer(out, req);
    b.origin(&me.origin_host, &me.origin_realm).result_code(rc);
    b.proxy_info_from(req);
    b.finish()
}

/// What a RAR to the AF reports (TS 29.214 §5.6.4).
#[derive(Debug, Default)]
pub struct AfNotice<'a> {
    pub actions: Vec<i32>,
    /// Flows concerned (Media-Component-Number, Flow-Numbers).
    pub flows: Vec<(u32, Vec<u32>)>,
    pub ip_can_type: Option<i32>,
    pub rat_type: Option<i32>,
    /// Access-Network-Charging-Identifier-Value (charging correlation).
    pub charging_id: Option<&'a [u8]>,
}

/// Encodes a RAR to the AF.
pub fn encode_af_rar(
    b: &mut MessageBuilder<'_>,
    session_id: &str,
    me: &Identity,
    dest_host: &str,
    dest_realm: &str,
    n: &AfNotice<'_>,
) {
    session_message::application_last(b, RX, session_id, me, dest_host, dest_realm).i32(
        avp::RE_AUTH_REQUEST_TYPE,
        enums::RE_AUTH_REQUEST_TYPE::AUTHORIZE_ONLY,
    );
    for a in &n.actions {
        b.i32(avp::SPECIFIC_ACTION, *a);
    }
    if let Some(id) = n.charging_id {
        b.group(avp::ACCESS_NETWORK_CHARGING_IDENTIFIER, |g| {
            g.bytes(avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_VALUE, id);
        });
    }
    for (mc, flows) in &n.flows {
        b.group(avp::FLOWS, |g| {
            g.u32(avp::MEDIA_COMPONENT_NUMBER, *mc);
            for f in flows {
                g.u32(avp::FLOW_NUMBER, *f);
            }
        });
    }
    if let Some(v) = n.ip_can_type {
        b.i32(avp::IP_CAN_TYPE, v);
    }
    if let Some(v) = n.rat_type {
        b.i32(avp::RAT_TYPE, v);
    }
}

/// Encodes an ASR to the AF.
pub fn encode_asr(
    b: &mut MessageBuilder<'_>,
    session_id: &str,
    me: &Identity,
    dest_host: &str,
    dest_realm: &str,
    abort_cause: i32,
) {
    session_message::application_last(b, RX, session_id, me, dest_host, dest_realm)
        .i32(avp::ABORT_CAUSE, abort_cause);
}

/// The Result-Code (or Experimental-Result-Code) of the AF's RAA or ASA.
pub fn decode_answer_code(msg: &Message) -> Result<u32, DiameterError> {
    for a in msg.avps() {
        if let Some(Outcome::Result(c) | Outcome::Experimental(c)) =
            session_message::decode_outcome(&a?)?
        {
            return Ok(c);
        }
    }
    Err(missing_avp(avp::RESULT_CODE, "Result-Code"))
}

/// Command codes Rx serves.
pub fn serves(application_id: u32, command_code: u32) -> bool {
    application_id == RX && (command_code == cmd::AA || command_code == cmd::SESSION_TERMINATION)
}

#[cfg(test)]
mod tests {
    use super::*;
    use diameter::result_code;

    fn aar(extra: impl FnOnce(&mut MessageBuilder<'_>)) -> Message {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::AA, RX, 1, 2);
        b.str(avp::SESSION_ID, "pcscf;1")
            .u32(avp::AUTH_APPLICATION_ID, RX)
            .origin("pcscf.example", "example")
            .str(avp::DESTINATION_REALM, "example");
        extra(&mut b);
        b.finish();
        Message::parse(buf.freeze()).expect("valid")
    }

    fn voice(b: &mut MessageBuilder<'_>, flow: &str, media_type: i32) {
        b.group(avp::MEDIA_COMPONENT_DESCRIPTION, |m| {
            m.u32(avp::MEDIA_COMPONENT_NUMBER, 1)
                .i32(avp::MEDIA_TYPE, media_type)
                .u32(avp::MAX_REQUESTED_BANDWIDTH_UL, 64_000)
                .u32(avp::MAX_REQUESTED_BANDWIDTH_DL, 64_000)
                .u32(avp::RR_BANDWIDTH, 2_000)
                .u32(avp::RS_BANDWIDTH, 600)
                .i32(avp::FLOW_STATUS, 2)
                .str(avp::CODEC_DATA, "uplink\noffer\nm=audio 4000 RTP/AVP 96")
                .group(avp::MEDIA_SUB_COMPONENT, |s| {
                    s.u32(avp::FLOW_NUMBER, 1)
                        .str(avp::FLOW_DESCRIPTION, flow)
                        .str(
                            avp::FLOW_DESCRIPTION,
                            "permit in 17 from 10.45.0.2 4000 to 192.0.2.9 5000",
                        )
                        .i32(avp::FLOW_USAGE, 0);
                });
        });
    }

    #[test]
    fn decodes_an_initial_aar() {
        let m = aar(|b| {
            b.i32(avp::RX_REQUEST_TYPE, 0)
                .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2])
                .str(avp::CALLED_STATION_ID, "ims")
                .bytes(avp::AF_APPLICATION_IDENTIFIER, b"IMS Services")
                .bytes(avp::AF_CHARGING_IDENTIFIER, &[1, 2, 3])
                .bytes(avp::SERVICE_URN, b"sos")
                .i32(avp::SPECIFIC_ACTION, 9)
                .i32(avp::SPECIFIC_ACTION, 2)
                .group(avp::SUBSCRIPTION_ID, |g| {
                    g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                        .str(avp::SUBSCRIPTION_ID_DATA, "001010000000001");
                });
            voice(b, "permit out 17 from 192.0.2.9 5000 to 10.45.0.2 4000", 0);
        });
        assert!(m.validate().is_ok());
        let r = decode_aar(&m).expect("decodes");
        assert_eq!(r.session_id, "pcscf;1");
        assert_eq!(r.origin_host, "pcscf.example");
        assert_eq!(r.request_type, Some(RxRequestType::Initial));
        assert_eq!(r.ue_ipv4, Some(Ipv4Addr::new(10, 45, 0, 2)));
        assert_eq!(r.apn, Some("ims"));
        assert_eq!(r.imsi, Some("001010000000001"));
        assert_eq!(r.application.as_deref(), Some("IMS Services"));
        assert_eq!(r.charging_id, Some(&[1u8, 2, 3][..]));
        assert_eq!(r.service_urn.as_deref(), Some("sos"));
        assert_eq!(r.specific_actions, vec![9, 2]);
        let mc = &r.media[0];
        assert_eq!(mc.number, 1);
        assert_eq!(mc.media_type.as_deref(), Some("AUDIO"));
        assert_eq!((mc.max_ul, mc.max_dl), (Some(64_000), Some(64_000)));
        assert_eq!((mc.rr_bandwidth, mc.rs_bandwidth), (Some(2_000), Some(600)));
        assert_eq!(mc.flow_status, Some(2));
        assert_eq!(mc.codec_data.len(), 1);
        let sc = &mc.sub_components[0];
        assert_eq!(sc.flow_number, 1);
        assert_eq!(sc.flows.len(), 2);
        assert_eq!(sc.flow_usage, Some(0));
    }

    #[test]
    fn ipv6_prefix_binding_is_decoded() {
        let m = aar(|b| {
            b.bytes(
                avp::FRAMED_IPV6_PREFIX,
                &[0, 64, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1],
            );
        });
        let r = decode_aar(&m).expect("decodes");
        assert!(r.ue_ipv6_prefix.is_some());
        let bad = aar(|b| {
            b.bytes(avp::FRAMED_IPV6_PREFIX, &[0, 200]);
        });
        let e = decode_aar(&bad).expect_err("prefix length 200");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_VALUE);
    }

    #[test]
    fn malformed_flow_description_is_5004_naming_it() {
        let m = aar(|b| voice(b, "permit sideways 17 from any to any", 0));
        let e = decode_aar(&m).expect_err("bad rule");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_VALUE);
        let failed = e.failed_avp.expect("Failed-AVP");
        assert_eq!(&failed[..4], &avp::FLOW_DESCRIPTION.code.to_be_bytes());
        assert!(failed.ends_with(b"permit sideways 17 from any to any"));
    }

    #[test]
    fn unknown_media_type_is_5004_naming_it() {
        let m = aar(|b| voice(b, "permit out 17 from any to assigned", 42));
        let e = decode_aar(&m).expect_err("Media-Type 42");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_VALUE);
        let failed = e.failed_avp.expect("Failed-AVP");
        assert_eq!(&failed[..4], &avp::MEDIA_TYPE.code.to_be_bytes());
        // OTHER (0xFFFFFFFF) is a known value.
        let m = aar(|b| voice(b, "permit out 17 from any to assigned", -1));
        assert_eq!(
            decode_aar(&m).expect("OTHER").media[0]
                .media_type
                .as_deref(),
            Some("OTHER")
        );
    }

    #[test]
    fn missing_and_foreign_avps_are_refused() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::AA, RX, 1, 2);
        b.str(avp::SESSION_ID, "s").origin("h", "r");
        b.finish();
        let m = Message::parse(buf.freeze()).expect("valid");
        let e = decode_aar(&m).expect_err("no Auth-Application-Id");
        assert_eq!(e.result_code, result_code::DIAMETER_MISSING_AVP);

        let m = aar(|b| {
            b.group(avp::MEDIA_COMPONENT_DESCRIPTION, |m| {
                m.i32(avp::MEDIA_TYPE, 0);
            });
        });
        let e = decode_aar(&m).expect_err("no Media-Component-Number");
        assert_eq!(e.result_code, result_code::DIAMETER_MISSING_AVP);
        let failed = e.failed_avp.expect("Failed-AVP");
        assert_eq!(
            &failed[..4],
            &avp::MEDIA_COMPONENT_NUMBER.code.to_be_bytes()
        );

        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::AA, RX, 1, 2);
        b.str(avp::SESSION_ID, "s")
            .u32(avp::AUTH_APPLICATION_ID, 4)
            .origin("h", "r");
        b.finish();
        let m = Message::parse(buf.freeze()).expect("valid");
        let e = decode_aar(&m).expect_err("not Rx");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_VALUE);
    }

    #[test]
    fn flow_descriptions() {
        for ok in [
            "permit out 17 from 192.0.2.9 5000 to 10.45.0.2 4000",
            "permit in ip from any to assigned",
            "permit out 6 from 2001:db8::1/128 80,443,8000-8080 to assigned",
            "permit in 17 from 10.0.0.0/8 to 192.0.2.0/24 1-65535",
        ] {
            assert!(valid_flow_description(ok), "{ok}");
        }
        for bad in [
            "",
            "deny out 17 from any to any",
            "permit out udp from any to any",
            "permit out 17 from any",
            "permit out 17 from nowhere to any",
            "permit out 17 from 10.0.0.1/33 to any",
            "permit out 17 from any 9-1 to any",
            "permit out 17 from any to any 70000",
            "permit out 17 from any to any frag",
        ] {
            assert!(!valid_flow_description(bad), "{bad}");
        }
    }

    #[test]
    fn str_and_answers_round_trip() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::SESSION_TERMINATION, RX, 1, 2);
        b.str(avp::SESSION_ID, "pcscf;1")
            .origin("pcscf.example", "example")
            .u32(avp::AUTH_APPLICATION_ID, RX)
            .i32(avp::TERMINATION_CAUSE, 1);
        b.finish();
        let req = Message::parse(buf.freeze()).expect("valid");
        let s = decode_str(&req).expect("decodes");
        assert_eq!((s.session_id, s.termination_cause), ("pcscf;1", Some(1)));

        let me = Identity {
            origin_host: "pcrf.example".into(),
            origin_realm: "example".into(),
        };
        let mut out = BytesMut::new();
        encode_sta(&mut out, &req, &me, 2001);
        let sta = Message::parse(out.freeze()).expect("STA");
        assert!(sta.validate().is_ok());
        assert_eq!(sta.session_id().ok().flatten(), Some("pcscf;1"));
        assert_eq!(decode_answer_code(&sta), Ok(2001));

        let aar_req = aar(|_| {});
        let mut out = BytesMut::new();
        let extras = AaaExtras {
            ip_can_type: Some(5),
            rat_type: Some(1004),
        };
        encode_aaa(
            &mut out,
            &aar_req,
            &me,
            Outcome::Experimental(5065),
            &extras,
            Some("no IP-CAN session"),
        );
        let aaa = Message::parse(out.freeze()).expect("AAA");
        assert!(aaa.validate().is_ok());
        assert_eq!(aaa.command_code(), cmd::AA);
        assert_eq!(decode_answer_code(&aaa), Ok(5065));
        let [auth, rat] = aaa
            .pick(&[avp::AUTH_APPLICATION_ID, avp::RAT_TYPE])
            .expect("avps");
        assert_eq!(auth.map(|a| a.as_u32()), Some(Ok(RX)));
        assert_eq!(rat.map(|a| a.as_i32()), Some(Ok(1004)));
    }

    #[test]
    fn rar_and_asr_to_the_af() {
        let me = Identity {
            origin_host: "pcrf.example".into(),
            origin_realm: "example".into(),
        };
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::RE_AUTH, RX, 1, 2);
        encode_af_rar(
            &mut b,
            "pcscf;1",
            &me,
            "pcscf.example",
            "example",
            &AfNotice {
                actions: vec![enums::SPECIFIC_ACTION::INDICATION_OF_FAILED_RESOURCES_ALLOCATION],
                flows: vec![(1, vec![1, 2])],
                ip_can_type: Some(5),
                rat_type: None,
                charging_id: Some(b"pgw-1"),
            },
        );
        b.finish();
        let rar = Message::parse(buf.freeze()).expect("RAR");
        assert!(rar.validate().is_ok());
        let [action, flows, anci] = rar
            .pick(&[
                avp::SPECIFIC_ACTION,
                avp::FLOWS,
                avp::ACCESS_NETWORK_CHARGING_IDENTIFIER,
            ])
            .expect("avps");
        assert_eq!(action.map(|a| a.as_i32()), Some(Ok(9)));
        let flow_numbers: Vec<u32> = flows
            .expect("Flows")
            .grouped()
            .flatten()
            .filter(|a| a.is(avp::FLOW_NUMBER))
            .map(|a| a.as_u32().expect("u32"))
            .collect();
        assert_eq!(flow_numbers, vec![1, 2]);
        assert!(anci.is_some());

        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::ABORT_SESSION, RX, 1, 2);
        encode_asr(
            &mut b,
            "pcscf;1",
            &me,
            "pcscf.example",
            "example",
            enums::ABORT_CAUSE::BEARER_RELEASED,
        );
        b.finish();
        let asr = Message::parse(buf.freeze()).expect("ASR");
        assert!(asr.validate().is_ok());
        let cause = asr
            .find(avp::ABORT_CAUSE)
            .expect("avps")
            .expect("Abort-Cause");
        assert_eq!(cause.as_i32(), Ok(0));
    }
}
