//! Sd (TS 29.212 §5b, PCRF <-> TDF) on the wire: the TDF's CCR decoded,
//! its CCA, the TSR that opens a solicited TDF session and its TSA, and the
//! Sd RAR (ADC rule changes, release) encoded. No state and no IO here;
//! `service.rs` decides what to do.

use crate::limits;
use crate::pcc::usage_monitoring;
use crate::pcc::{RequestType, UsageInstructions, UsageReport};
use crate::policy::decision::AdcRule;
use crate::session_message;
use crate::session_message::{Identity, Outcome};
use bytes::BytesMut;
use diameter::codec::{missing_avp, Avp, DiameterError, Message, MessageBuilder};
use diameter::dict::{app, avp, cmd, enums};
use std::net::Ipv4Addr;

/// Sd application id.
pub const SD: u32 = app::SD;

/// Event-Trigger values the TDF reports (TS 29.212 §5.3.7).
pub const APPLICATION_START: i32 = 39;
pub const APPLICATION_STOP: i32 = 40;
/// USAGE_REPORT: sent with any grant, as on Gx.
const USAGE_REPORT: i32 = 33;

/// DIAMETER_ERROR_INITIAL_PARAMETERS (TS 29.212 §5.5.3): the information
/// the PCRF needs is "not available for the decision to be made" — the
/// answer to a TDF's CCR-I whose UE address binds to no IP-CAN session.
pub const NO_IP_CAN_SESSION: u32 = 5140;

/// One application start or stop the TDF reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detection<'a> {
    /// TDF-Application-Identifier.
    pub application: &'a str,
    /// TDF-Application-Instance-Identifier, when sent.
    pub instance: Option<&'a [u8]>,
    /// true: APPLICATION_START, false: APPLICATION_STOP.
    pub started: bool,
}

/// What the PCRF reads from a TDF's CCR.
#[derive(Debug, Default)]
pub struct TdfCcr<'a> {
    pub session_id: &'a str,
    pub origin_host: &'a str,
    pub origin_realm: &'a str,
    pub request_type: Option<RequestType>,
    pub request_number: u32,
    pub imsi: Option<&'a str>,
    pub msisdn: Option<&'a str>,
    pub ue_ipv4: Option<Ipv4Addr>,
    pub ue_ipv6_prefix: Option<&'a [u8]>,
    pub event_triggers: Vec<i32>,
    pub detections: Vec<Detection<'a>>,
    pub usage_reports: Vec<UsageReport<'a>>,
}

/// Decodes a TDF's CCR on Sd. Missing mandatory AVPs give 5005 with
/// Failed-AVP, bad values 5004, fields over their size limit
/// ([`limits::FIELD_LIMITS`]) 5014 (RFC 6733 §7).
pub fn decode_ccr(msg: &Message) -> Result<TdfCcr<'_>, DiameterError> {
    limits::check_field_sizes(msg.avps())?;
    let mut c = TdfCcr::default();
    let (mut sid, mut host, mut realm, mut ty, mut num) = (false, false, false, false, false);
    // Application-Detection-Information is read after the top-level
    // Event-Triggers, which say start or stop when it does not itself.
    let mut detections: Vec<Avp<'_>> = Vec::new();
    for a in msg.avps() {
        let a = a?;
        if a.is(avp::SESSION_ID) {
            c.session_id = a.as_str()?;
            sid = true;
        } else if a.is(avp::ORIGIN_HOST) {
            c.origin_host = a.as_identity()?;
            host = true;
        } else if a.is(avp::ORIGIN_REALM) {
            c.origin_realm = a.as_identity()?;
            realm = true;
        } else if a.is(avp::AUTH_APPLICATION_ID) {
            if a.as_u32()? != SD {
                return Err(a.invalid_value("Auth-Application-Id is not Sd"));
            }
        } else if a.is(avp::CC_REQUEST_TYPE) {
            c.request_type = Some(
                RequestType::from_enum(a.as_enum()?)
                    .ok_or_else(|| a.invalid_value("CC-Request-Type must be 1, 2 or 3 on Sd"))?,
            );
            ty = true;
        } else if a.is(avp::CC_REQUEST_NUMBER) {
            c.request_number = a.as_u32()?;
            num = true;
        } else if a.is(avp::SUBSCRIPTION_ID) {
            match crate::session_message::decode_subscription_id(&a)? {
                (1, d) => c.imsi = Some(d),
                (0, d) => c.msisdn = Some(d),
                _ => {}
            }
        } else if a.is(avp::FRAMED_IP_ADDRESS) {
            c.ue_ipv4 = Some(
                crate::session::binding::ipv4(a.as_octets())
                    .ok_or_else(|| a.invalid_value("Framed-IP-Address must be 4 octets"))?,
            );
        } else if a.is(avp::FRAMED_IPV6_PREFIX) {
            let d = a.as_octets();
            if crate::session::binding::ipv6_prefix(d).is_none() {
                return Err(a.invalid_value("Framed-IPv6-Prefix is malformed"));
            }
            c.ue_ipv6_prefix = Some(d);
        } else if a.is(avp::EVENT_TRIGGER) {
            c.event_triggers.push(a.as_enum()?);
        } else if a.is(avp::APPLICATION_DETECTION_INFORMATION) {
            detections.push(a);
        } else if a.is(avp::USAGE_MONITORING_INFORMATION) {
            if let Some(r) = usage_monitoring::decode_usage_report(&a)? {
                c.usage_reports.push(r);
            }
        }
    }
    let required = [
        (sid, avp::SESSION_ID, "Session-Id"),
        (host, avp::ORIGIN_HOST, "Origin-Host"),
        (realm, avp::ORIGIN_REALM, "Origin-Realm"),
        (ty, avp::CC_REQUEST_TYPE, "CC-Request-Type"),
        (num, avp::CC_REQUEST_NUMBER, "CC-Request-Number"),
    ];
    for (present, code, name) in required {
        if !present {
            return Err(missing_avp(code, name));
        }
    }
    let start = c.event_triggers.contains(&APPLICATION_START);
    let stop = c.event_triggers.contains(&APPLICATION_STOP);
    for a in detections {
        c.detections.push(decode_detection(&a, start, stop)?);
    }
    Ok(c)
}

/// One Application-Detection-Information (§5.3.91). Start or stop comes
/// from its own Event-Trigger when present, else from the request's, which
/// must then say one of the two.
fn decode_detection<'a>(
    a: &Avp<'a>,
    start: bool,
    stop: bool,
) -> Result<Detection<'a>, DiameterError> {
    let mut application = None;
    let mut instance = None;
    let mut own = None;
    for g in a.grouped() {
        let g = g?;
        if g.is(avp::TDF_APPLICATION_IDENTIFIER) {
            let id = std::str::from_utf8(g.as_octets())
                .map_err(|_| g.invalid_value("TDF-Application-Identifier is not UTF-8"))?;
            if id.is_empty() {
                return Err(g.invalid_value("TDF-Application-Identifier is empty"));
            }
            application = Some(id);
        } else if g.is(avp::TDF_APPLICATION_INSTANCE_IDENTIFIER) {
            instance = Some(g.as_octets());
        } else if g.is(avp::EVENT_TRIGGER) {
            match g.as_enum()? {
                APPLICATION_START => own = Some(true),
                APPLICATION_STOP => own = Some(false),
                _ => {}
            }
        }
    }
    let Some(application) = application else {
        return Err(missing_avp(
            avp::TDF_APPLICATION_IDENTIFIER,
            "TDF-Application-Identifier",
        ));
    };
    let started = match (own, start, stop) {
        (Some(s), _, _) => s,
        (None, true, false) => true,
        (None, false, true) => false,
        (None, true, true) => {
            return Err(a.invalid_value(
                "Application-Detection-Information without its own Event-Trigger in a CCR reporting both start and stop",
            ))
        }
        (None, false, false) => {
            return Err(missing_avp(avp::EVENT_TRIGGER, "Event-Trigger"));
        }
    };
    Ok(Detection {
        application,
        instance,
        started,
    })
}

/// The ADC rule changes of one message: installs and removals.
#[derive(Debug, Default)]
pub struct AdcChanges<'a> {
    pub install: Vec<&'a AdcRule>,
    pub remove: Vec<String>,
}

impl AdcChanges<'_> {
    pub fn is_empty(&self) -> bool {
        self.install.is_empty() && self.remove.is_empty()
    }
}

/// ADC-Rule-Install (definitions, names, base names) and ADC-Rule-Remove.
fn encode_adc(b: &mut MessageBuilder<'_>, changes: &AdcChanges<'_>) {
    if !changes.install.is_empty() {
        b.group(avp::ADC_RULE_INSTALL, |g| {
            for r in &changes.install {
                match (&r.name, &r.base, &r.application) {
                    (Some(name), _, Some(app)) => {
                        g.group(avp::ADC_RULE_DEFINITION, |d| {
                            d.bytes(avp::ADC_RULE_NAME, name.as_bytes())
                                .bytes(avp::TDF_APPLICATION_IDENTIFIER, app.as_bytes());
                            if let Some(k) = &r.monitoring_key {
                                d.bytes(avp::MONITORING_KEY, &usage_monitoring::key_bytes(k));
                            }
                        });
                    }
                    (Some(name), _, None) => {
                        g.bytes(avp::ADC_RULE_NAME, name.as_bytes());
                    }
                    (None, Some(base), _) => {
                        g.str(avp::ADC_RULE_BASE_NAME, base);
                    }
                    (None, None, _) => {}
                }
            }
        });
    }
    if !changes.remove.is_empty() {
        b.group(avp::ADC_RULE_REMOVE, |g| {
            for name in &changes.remove {
                g.bytes(avp::ADC_RULE_NAME, name.as_bytes());
            }
        });
    }
}

/// Event-Trigger USAGE_REPORT (33): asked whenever usage is granted.
fn encode_usage_with_trigger(b: &mut MessageBuilder<'_>, usage: &UsageInstructions) {
    if !usage.grants.is_empty() {
        b.i32(avp::EVENT_TRIGGER, USAGE_REPORT);
    }
    usage_monitoring::encode_usage(b, usage);
}

/// Encodes the CCA to a TDF's CCR. `adc` and `usage` are left out of
/// error answers and of a CCA-T.
pub fn encode_cca(
    out: &mut BytesMut,
    req: &Message,
    me: &Identity,
    ccr: &TdfCcr<'_>,
    outcome: Outcome,
    adc: &AdcChanges<'_>,
    usage: &UsageInstructions,
) -> usize {
    let mut b = MessageBuilder::answer(out, req);
    b.u32(avp::AUTH_APPLICATION_ID, SD)
        .origin(&me.origin_host, &me.origin_realm);
    session_message::encode_outcome(&mut b, outcome);
    let success = outcome == Outcome::Result(diameter::result_code::DIAMETER_SUCCESS);
    if let Some(t) = ccr.request_type {
        b.i32(avp::CC_REQUEST_TYPE, t.to_enum());
    }
    b.u32(avp::CC_REQUEST_NUMBER, ccr.request_number);
    if success && ccr.request_type != Some(RequestType::Termination) {
        encode_adc(&mut b, adc);
        encode_usage_with_trigger(&mut b, usage);
    }
    b.proxy_info_from(req);
    b.finish()
}

/// What a TSR says about the subscriber and the UE.
#[derive(Debug, Default)]
pub struct TsrSubject<'a> {
    pub imsi: Option<&'a str>,
    pub msisdn: Option<&'a str>,
    pub ue_ipv4: Option<Ipv4Addr>,
    /// Framed-IPv6-Prefix AVP data.
    pub ue_ipv6_prefix: Option<&'a [u8]>,
    pub apn: Option<&'a str>,
}

/// Encodes a TSR (TDF-Session-Request, §5b.6.2) opening a solicited TDF
/// session with the ADC rules to install.
#[allow(clippy::too_many_arguments)]
pub fn encode_tsr(
    b: &mut MessageBuilder<'_>,
    session_id: &str,
    me: &Identity,
    dest_host: &str,
    dest_realm: &str,
    subject: &TsrSubject<'_>,
    adc: &AdcChanges<'_>,
    usage: &UsageInstructions,
) {
    session_message::application_first(b, SD, session_id, me, dest_host, dest_realm);
    for (kind, data) in [(1, subject.imsi), (0, subject.msisdn)] {
        if let Some(d) = data {
            b.group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(avp::SUBSCRIPTION_ID_TYPE, kind)
                    .str(avp::SUBSCRIPTION_ID_DATA, d);
            });
        }
    }
    if let Some(ip) = subject.ue_ipv4 {
        b.bytes(avp::FRAMED_IP_ADDRESS, &ip.octets());
    }
    if let Some(p) = subject.ue_ipv6_prefix {
        b.bytes(avp::FRAMED_IPV6_PREFIX, p);
    }
    if let Some(apn) = subject.apn {
        b.str(avp::CALLED_STATION_ID, apn);
    }
    encode_adc(b, adc);
    encode_usage_with_trigger(b, usage);
}

/// Encodes an Sd RAR: ADC rule changes and usage instructions, or (with a
/// Session-Release-Cause) the end of the TDF session (§4b.5.3).
#[allow(clippy::too_many_arguments)]
pub fn encode_rar(
    b: &mut MessageBuilder<'_>,
    session_id: &str,
    me: &Identity,
    dest_host: &str,
    dest_realm: &str,
    release_cause: Option<i32>,
    adc: &AdcChanges<'_>,
    usage: &UsageInstructions,
) {
    session_message::application_first(b, SD, session_id, me, dest_host, dest_realm).i32(
        avp::RE_AUTH_REQUEST_TYPE,
        enums::RE_AUTH_REQUEST_TYPE::AUTHORIZE_ONLY,
    );
    if let Some(cause) = release_cause {
        b.i32(avp::SESSION_RELEASE_CAUSE, cause);
        return;
    }
    encode_adc(b, adc);
    encode_usage_with_trigger(b, usage);
}

/// The result of a TSA or Sd RAA: Result-Code or Experimental-Result-Code
/// (3GPP), and the ADC rules it reports failed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SdAnswer {
    pub result_code: Option<u32>,
    pub experimental_result: Option<u32>,
    /// ADC-Rule-Name / ADC-Rule-Base-Name of each ADC-Rule-Report.
    pub failed_rules: Vec<String>,
}

impl SdAnswer {
    pub fn code(&self) -> u32 {
        self.result_code.or(self.experimental_result).unwrap_or(0)
    }
}

/// Decodes a TSA or an Sd RAA.
pub fn decode_answer(msg: &Message) -> Result<SdAnswer, DiameterError> {
    let mut r = SdAnswer::default();
    for a in msg.avps() {
        let a = a?;
        if let Some(outcome) = session_message::decode_outcome(&a)? {
            match outcome {
                Outcome::Result(c) => r.result_code = Some(c),
                Outcome::Experimental(c) => r.experimental_result = Some(c),
            }
        } else if a.is(avp::ADC_RULE_REPORT) {
            for g in a.grouped() {
                let g = g?;
                if g.is(avp::ADC_RULE_NAME) || g.is(avp::ADC_RULE_BASE_NAME) {
                    r.failed_rules
                        .push(String::from_utf8_lossy(g.as_octets()).into_owned());
                }
            }
        }
    }
    Ok(r)
}

/// Command codes Sd serves at the PCRF: the TDF's CCR (its RAA and TSA
/// come back as answers to our requests).
pub fn serves(application_id: u32, command_code: u32) -> bool {
    application_id == SD && command_code == cmd::CREDIT_CONTROL
}

#[cfg(test)]
mod tests {
    use super::*;
    use diameter::result_code;

    fn me() -> Identity {
        Identity {
            origin_host: "pcrf.test".into(),
            origin_realm: "test".into(),
        }
    }

    fn ccr(
        request_type: i32,
        extra: impl FnOnce(&mut MessageBuilder<'_>),
    ) -> Result<Message, DiameterError> {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, SD, 1, 2);
        b.str(avp::SESSION_ID, "tdf;1")
            .u32(avp::AUTH_APPLICATION_ID, SD)
            .origin("tdf.test", "test")
            .str(avp::DESTINATION_REALM, "test")
            .i32(avp::CC_REQUEST_TYPE, request_type)
            .u32(avp::CC_REQUEST_NUMBER, 3);
        extra(&mut b);
        b.finish();
        Message::parse(buf.freeze())
    }

    fn detection(b: &mut MessageBuilder<'_>, app: &str, trigger: Option<i32>) {
        b.group(avp::APPLICATION_DETECTION_INFORMATION, |g| {
            g.bytes(avp::TDF_APPLICATION_IDENTIFIER, app.as_bytes())
                .bytes(avp::TDF_APPLICATION_INSTANCE_IDENTIFIER, b"i1");
            if let Some(t) = trigger {
                g.i32(avp::EVENT_TRIGGER, t);
            }
        });
    }

    fn rule(name: &str, app: Option<&str>, key: Option<&str>) -> AdcRule {
        AdcRule {
            name: Some(name.into()),
            base: None,
            application: app.map(str::to_owned),
            monitoring_key: key.map(str::to_owned),
        }
    }

    #[test]
    fn tdf_ccr_i_with_address_and_subscriber() {
        let m = ccr(1, |b| {
            b.group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                    .str(avp::SUBSCRIPTION_ID_DATA, "001010000000001");
            })
            .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2]);
        })
        .expect("message");
        m.validate().expect("valid");
        let c = decode_ccr(&m).expect("decodes");
        assert_eq!(c.session_id, "tdf;1");
        assert_eq!(c.origin_host, "tdf.test");
        assert_eq!(c.request_type, Some(RequestType::Initial));
        assert_eq!(c.request_number, 3);
        assert_eq!(c.imsi, Some("001010000000001"));
        assert_eq!(c.ue_ipv4, Some(Ipv4Addr::new(10, 45, 0, 2)));
    }

    #[test]
    fn start_and_stop_from_the_request_or_the_detection() {
        let m = ccr(2, |b| {
            b.i32(avp::EVENT_TRIGGER, APPLICATION_START);
            detection(b, "video-streaming", None);
            detection(b, "p2p", Some(APPLICATION_STOP));
        })
        .expect("message");
        let c = decode_ccr(&m).expect("decodes");
        assert_eq!(
            c.detections,
            vec![
                Detection {
                    application: "video-streaming",
                    instance: Some(b"i1"),
                    started: true
                },
                Detection {
                    application: "p2p",
                    instance: Some(b"i1"),
                    started: false
                },
            ]
        );
    }

    #[test]
    fn usage_reports_are_read_as_on_gx() {
        let m = ccr(2, |b| {
            b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.bytes(avp::MONITORING_KEY, b"video")
                    .group(avp::USED_SERVICE_UNIT, |u| {
                        u.u64(avp::CC_TOTAL_OCTETS, 1234);
                    });
            });
        })
        .expect("message");
        let c = decode_ccr(&m).expect("decodes");
        assert_eq!(c.usage_reports.len(), 1);
        assert_eq!(c.usage_reports[0].key, b"video");
        assert_eq!(c.usage_reports[0].used.octets(), 1234);
    }

    #[test]
    fn bad_input_gets_the_rfc_code_and_failed_avp() {
        // No CC-Request-Number: 5005.
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, SD, 1, 2);
        b.str(avp::SESSION_ID, "tdf;1")
            .origin("tdf.test", "test")
            .i32(avp::CC_REQUEST_TYPE, 1);
        b.finish();
        let m = Message::parse(buf.freeze()).expect("message");
        let e = decode_ccr(&m).expect_err("refused");
        assert_eq!(e.result_code, result_code::DIAMETER_MISSING_AVP);
        assert!(e.failed_avp.is_some());
        // A detection that says neither start nor stop: 5005 Event-Trigger.
        let m = ccr(2, |b| detection(b, "video", None)).expect("message");
        let e = decode_ccr(&m).expect_err("refused");
        assert_eq!(e.result_code, result_code::DIAMETER_MISSING_AVP);
        // Both in the request and none in the detection: ambiguous, 5004.
        let m = ccr(2, |b| {
            b.i32(avp::EVENT_TRIGGER, APPLICATION_START)
                .i32(avp::EVENT_TRIGGER, APPLICATION_STOP);
            detection(b, "video", None);
        })
        .expect("message");
        let e = decode_ccr(&m).expect_err("refused");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_VALUE);
        // A detection without TDF-Application-Identifier: 5005.
        let m = ccr(2, |b| {
            b.group(avp::APPLICATION_DETECTION_INFORMATION, |g| {
                g.i32(avp::EVENT_TRIGGER, APPLICATION_START);
            });
        })
        .expect("message");
        let e = decode_ccr(&m).expect_err("refused");
        assert_eq!(e.result_code, result_code::DIAMETER_MISSING_AVP);
        // A three-octet IPv4 address, a CC-Request-Type 4, the Gx app id: 5004.
        for bad in [
            ccr(1, |b| {
                b.bytes(avp::FRAMED_IP_ADDRESS, &[10, 0, 0]);
            }),
            ccr(4, |_| {}),
        ] {
            let e = decode_ccr(&bad.expect("message")).expect_err("refused");
            assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_VALUE);
            assert!(e.failed_avp.is_some());
        }
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, SD, 1, 2);
        b.str(avp::SESSION_ID, "tdf;1")
            .u32(avp::AUTH_APPLICATION_ID, app::GX);
        b.finish();
        let e = decode_ccr(&Message::parse(buf.freeze()).expect("message")).expect_err("refused");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_VALUE);
    }

    #[test]
    fn truncated_grouped_avp_is_refused_not_a_panic() {
        let m = ccr(2, |b| {
            // An ADI whose inner AVP claims more bytes than it has.
            b.raw_avp(&[
                0, 0, 0x04, 0x4a, 0x80, 0, 0, 24, 0, 0, 0x28, 0xaf, 0, 0, 0x04, 0x40, 0x80, 0, 0,
                99, 0, 0, 0x28, 0xaf,
            ]);
        });
        let m = m.expect("the outer lengths are consistent");
        let e = decode_ccr(&m).expect_err("the inner length is not");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_LENGTH);
        assert!(m.validate().is_err());
    }

    #[test]
    fn cca_carries_adc_rules_and_grants_and_validates() {
        let req = ccr(1, |b| {
            b.bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2]);
        })
        .expect("message");
        let c = decode_ccr(&req).expect("decodes");
        let defined = rule("video", Some("video-streaming"), Some("video"));
        let named = rule("p2p-block", None, None);
        let base = AdcRule {
            name: None,
            base: Some("dpi-default".into()),
            application: None,
            monitoring_key: None,
        };
        let usage = UsageInstructions {
            grants: vec![usage_monitoring::UsageGrant {
                key: "video".into(),
                level: Default::default(),
                units: crate::usage::ServiceUnits {
                    total: Some(1000),
                    ..Default::default()
                },
            }],
            ..Default::default()
        };
        let mut buf = BytesMut::new();
        encode_cca(
            &mut buf,
            &req,
            &me(),
            &c,
            Outcome::Result(2001),
            &AdcChanges {
                install: vec![&defined, &named, &base],
                remove: vec!["old".into()],
            },
            &usage,
        );
        let ans = Message::parse(buf.freeze()).expect("answer");
        ans.validate().expect("valid against the dictionary");
        assert_eq!(ans.application_id(), SD);
        let install = ans
            .find(avp::ADC_RULE_INSTALL)
            .expect("avps")
            .expect("install");
        let def = install
            .grouped()
            .find(avp::ADC_RULE_DEFINITION)
            .expect("grouped")
            .expect("definition");
        let app = def
            .grouped()
            .find(avp::TDF_APPLICATION_IDENTIFIER)
            .expect("grouped")
            .expect("app id");
        assert_eq!(app.as_octets(), b"video-streaming");
        let name = install
            .grouped()
            .find(avp::ADC_RULE_NAME)
            .expect("grouped")
            .expect("name");
        assert_eq!(name.as_octets(), b"p2p-block");
        assert!(install
            .grouped()
            .find(avp::ADC_RULE_BASE_NAME)
            .expect("grouped")
            .is_some());
        assert!(ans.find(avp::ADC_RULE_REMOVE).expect("avps").is_some());
        let back = usage_monitoring::decode_usage_instructions(&ans).expect("usage");
        assert_eq!(back.grants.len(), 1);
        let trigger = ans
            .find(avp::EVENT_TRIGGER)
            .expect("avps")
            .expect("trigger");
        assert_eq!(trigger.as_enum(), Ok(USAGE_REPORT));
        // An error answer carries no rules.
        let mut buf = BytesMut::new();
        encode_cca(
            &mut buf,
            &req,
            &me(),
            &c,
            Outcome::Experimental(NO_IP_CAN_SESSION),
            &AdcChanges {
                install: vec![&defined],
                remove: vec![],
            },
            &usage,
        );
        let ans = Message::parse(buf.freeze()).expect("answer");
        assert!(ans.find(avp::ADC_RULE_INSTALL).expect("avps").is_none());
        assert_eq!(
            decode_answer(&ans).expect("decodes").code(),
            NO_IP_CAN_SESSION
        );
    }

    #[test]
    fn tsr_and_rar_encode_valid_requests() {
        let defined = rule("video", Some("video-streaming"), None);
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::TDF_SESSION, SD, 5, 6);
        encode_tsr(
            &mut b,
            "pcrf;sd;1",
            &me(),
            "tdf.test",
            "test",
            &TsrSubject {
                imsi: Some("001010000000001"),
                msisdn: Some("491700000001"),
                ue_ipv4: Some(Ipv4Addr::new(10, 45, 0, 2)),
                ue_ipv6_prefix: Some(&[0, 64, 0x20, 1, 0xd, 0xb8, 0, 0, 0, 1]),
                apn: Some("internet"),
            },
            &AdcChanges {
                install: vec![&defined],
                remove: vec![],
            },
            &UsageInstructions::default(),
        );
        b.finish();
        let tsr = Message::parse(buf.freeze()).expect("tsr");
        tsr.validate().expect("valid");
        assert_eq!(tsr.command_code(), cmd::TDF_SESSION);
        assert!(tsr.find(avp::ADC_RULE_INSTALL).expect("avps").is_some());
        assert_eq!(
            tsr.find(avp::FRAMED_IP_ADDRESS)
                .expect("avps")
                .expect("ip")
                .as_octets(),
            &[10, 45, 0, 2]
        );

        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::RE_AUTH, SD, 5, 6);
        encode_rar(
            &mut b,
            "pcrf;sd;1",
            &me(),
            "tdf.test",
            "test",
            Some(0),
            &AdcChanges {
                install: vec![&defined],
                remove: vec![],
            },
            &UsageInstructions::default(),
        );
        b.finish();
        let rar = Message::parse(buf.freeze()).expect("rar");
        rar.validate().expect("valid");
        assert!(rar
            .find(avp::SESSION_RELEASE_CAUSE)
            .expect("avps")
            .is_some());
        assert!(
            rar.find(avp::ADC_RULE_INSTALL).expect("avps").is_none(),
            "a release carries no rules"
        );
    }

    #[test]
    fn tsa_with_a_failed_adc_rule() {
        let tsr = {
            let mut buf = BytesMut::new();
            let mut b = MessageBuilder::request(&mut buf, cmd::TDF_SESSION, SD, 5, 6);
            b.str(avp::SESSION_ID, "pcrf;sd;1");
            b.finish();
            Message::parse(buf.freeze()).expect("tsr")
        };
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::answer(&mut buf, &tsr);
        b.result_code(2001)
            .origin("tdf.test", "test")
            .group(avp::ADC_RULE_REPORT, |g| {
                g.bytes(avp::ADC_RULE_NAME, b"video");
            });
        b.finish();
        let a = decode_answer(&Message::parse(buf.freeze()).expect("tsa")).expect("decodes");
        assert_eq!(a.code(), 2001);
        assert_eq!(a.failed_rules, vec!["video".to_string()]);
    }
}
