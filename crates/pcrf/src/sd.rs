//! Sd (TS 29.212 §5b, PCRF <-> TDF) on the wire: the TDF's CCR decoded,
//! its CCA, the TSR that opens a solicited TDF session and its TSA, and the
//! Sd RAR (ADC rule changes, release) encoded. No state and no IO here;
//! `node/sd.rs` decides what to do.

use crate::gx::{self, Identity, Outcome, RequestType, UsageInstructions, UsageReport};
use crate::policy::decision::AdcRule;
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
/// Failed-AVP, bad values 5004 (RFC 6733 §7).
pub fn decode_ccr(msg: &Message) -> Result<TdfCcr<'_>, DiameterError> {
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
            c.request_type = Some(match a.as_enum()? {
                enums::CC_REQUEST_TYPE::INITIAL_REQUEST => RequestType::Initial,
                enums::CC_REQUEST_TYPE::UPDATE_REQUEST => RequestType::Update,
                enums::CC_REQUEST_TYPE::TERMINATION_REQUEST => RequestType::Termination,
                _ => return Err(a.invalid_value("CC-Request-Type must be 1, 2 or 3 on Sd")),
            });
            ty = true;
        } else if a.is(avp::CC_REQUEST_NUMBER) {
            c.request_number = a.as_u32()?;
            num = true;
        } else if a.is(avp::SUBSCRIPTION_ID) {
            let mut kind = None;
            let mut data = None;
            for g in a.grouped() {
                let g = g?;
                if g.is(avp::SUBSCRIPTION_ID_TYPE) {
                    kind = Some(g.as_enum()?);
                } else if g.is(avp::SUBSCRIPTION_ID_DATA) {
                    data = Some(g.as_str()?);
                }
            }
            match (kind, data) {
                (Some(1), Some(d)) => c.imsi = Some(d),
                (Some(0), Some(d)) => c.msisdn = Some(d),
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
            if let Some(r) = gx::decode_usage_report(&a)? {
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
                                d.bytes(avp::MONITORING_KEY, &gx::key_bytes(k));
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
    gx::encode_usage(b, usage);
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
    let success = match outcome {
        Outcome::Result(rc) => {
            b.result_code(rc);
            rc == diameter::result_code::DIAMETER_SUCCESS
        }
        Outcome::Experimental(code) => {
            b.experimental_result(gx::TGPP, code);
            false
        }
    };
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
    b.str(avp::SESSION_ID, session_id)
        .u32(avp::AUTH_APPLICATION_ID, SD)
        .origin(&me.origin_host, &me.origin_realm)
        .str(avp::DESTINATION_REALM, dest_realm)
        .str(avp::DESTINATION_HOST, dest_host);
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
    b.str(avp::SESSION_ID, session_id)
        .u32(avp::AUTH_APPLICATION_ID, SD)
        .origin(&me.origin_host, &me.origin_realm)
        .str(avp::DESTINATION_REALM, dest_realm)
        .str(avp::DESTINATION_HOST, dest_host)
        .i32(
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
        if a.is(avp::RESULT_CODE) {
            r.result_code = Some(a.as_u32()?);
        } else if a.is(avp::EXPERIMENTAL_RESULT) {
            if let Some(code) = a.grouped().find(avp::EXPERIMENTAL_RESULT_CODE)? {
                r.experimental_result = Some(code.as_u32()?);
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
