//! Sy (TS 29.219) without IO: the PCRF asks an OCS for the status of
//! policy counters (SLR/SLA), hears changes (SNR/SNA) and ends the Sy
//! session (STR/STA). Encoders append to a caller's builder; decoders
//! borrow nothing past the call and answer bad input with the RFC 6733
//! code and the offending AVP.

use crate::session::spending::{CounterReport, PendingStatus};
use crate::session_message;
use crate::session_message::{Identity, Outcome};
use diameter::codec::{missing_avp, Avp, DiameterError, Message, MessageBuilder};
use diameter::dict::{avp, enums};
use diameter::result_code;
use std::time::UNIX_EPOCH;

/// Sy Application-Id.
pub const SY: u32 = 16_777_302;
/// 3GPP Vendor-Id.
pub const TGPP: u32 = 10_415;

/// DIAMETER_ERROR_NO_AVAILABLE_POLICY_COUNTERS (TS 29.219 §5.5.3).
pub const NO_AVAILABLE_POLICY_COUNTERS: u32 = 4241;
/// DIAMETER_ERROR_UNKNOWN_POLICY_COUNTERS (TS 29.219 §5.5.4).
pub const UNKNOWN_POLICY_COUNTERS: u32 = 5570;

const END_USER_E164: i32 = 0;
const END_USER_IMSI: i32 = 1;

/// SL-Request-Type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlRequestType {
    /// The first SLR of a Sy session.
    Initial,
    /// A later SLR of the same session (more or fewer counters).
    Intermediate,
}

/// What one SLR says.
#[derive(Clone, Debug)]
pub struct Slr<'a> {
    pub session_id: &'a str,
    pub request_type: SlRequestType,
    pub destination_host: &'a str,
    pub destination_realm: &'a str,
    pub imsi: Option<&'a str>,
    pub msisdn: Option<&'a str>,
    pub counters: &'a [String],
}

/// Appends the AVPs of an SLR (TS 29.219 §5.6.2) to a request builder.
pub fn encode_slr(b: &mut MessageBuilder<'_>, me: &Identity, slr: &Slr<'_>) {
    session_message::application_first(
        b,
        SY,
        slr.session_id,
        me,
        slr.destination_host,
        slr.destination_realm,
    )
    .i32(
        avp::SL_REQUEST_TYPE,
        match slr.request_type {
            SlRequestType::Initial => enums::SL_REQUEST_TYPE::INITIAL_REQUEST,
            SlRequestType::Intermediate => enums::SL_REQUEST_TYPE::INTERMEDIATE_REQUEST,
        },
    );
    for c in slr.counters {
        b.str(avp::POLICY_COUNTER_IDENTIFIER, c);
    }
    // The subscriber is named in the initial request only (§4.5.1.1).
    if slr.request_type == SlRequestType::Initial {
        if let Some(imsi) = slr.imsi {
            b.group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(avp::SUBSCRIPTION_ID_TYPE, END_USER_IMSI)
                    .str(avp::SUBSCRIPTION_ID_DATA, imsi);
            });
        }
        if let Some(msisdn) = slr.msisdn {
            b.group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(avp::SUBSCRIPTION_ID_TYPE, END_USER_E164)
                    .str(avp::SUBSCRIPTION_ID_DATA, msisdn);
            });
        }
    }
}

/// Appends the AVPs of a Sy STR (TS 29.219 §5.6.6) to a request builder.
pub fn encode_str(
    b: &mut MessageBuilder<'_>,
    me: &Identity,
    session_id: &str,
    destination_host: &str,
    destination_realm: &str,
    termination_cause: i32,
) {
    session_message::application_last(b, SY, session_id, me, destination_host, destination_realm)
        .i32(avp::TERMINATION_CAUSE, termination_cause);
}

/// How an answer from the OCS came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerCode {
    /// Result-Code (base protocol or RFC 4006).
    Result(u32),
    /// Experimental-Result-Code of 3GPP (4241, 5570...).
    Experimental(u32),
    /// Neither was present.
    Missing,
}

impl AnswerCode {
    /// The number for metrics and logs (0 when missing).
    pub fn code(self) -> u32 {
        match self {
            AnswerCode::Result(c) | AnswerCode::Experimental(c) => c,
            AnswerCode::Missing => 0,
        }
    }
    pub fn is_success(self) -> bool {
        matches!(self, AnswerCode::Result(c) if (2000..3000).contains(&c))
    }
}

/// A decoded SLA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sla {
    pub session_id: Option<String>,
    pub origin_host: Option<String>,
    pub code: AnswerCode,
    pub reports: Vec<CounterReport>,
    /// Policy-Counter-Identifiers named in Failed-AVP (with 5570: the
    /// counters the OCS does not know).
    pub failed_counters: Vec<String>,
}

fn answer_code(a: &Avp<'_>, code: &mut AnswerCode) -> Result<(), DiameterError> {
    match session_message::decode_outcome(a)? {
        Some(Outcome::Result(c)) => *code = AnswerCode::Result(c),
        Some(Outcome::Experimental(c)) => *code = AnswerCode::Experimental(c),
        None => {}
    }
    Ok(())
}

/// Decodes an SLA (TS 29.219 §5.6.3).
pub fn decode_sla(msg: &Message) -> Result<Sla, DiameterError> {
    let mut sla = Sla {
        session_id: None,
        origin_host: None,
        code: AnswerCode::Missing,
        reports: Vec::new(),
        failed_counters: Vec::new(),
    };
    for a in msg.avps() {
        let a = a?;
        if a.is(avp::SESSION_ID) {
            sla.session_id = Some(a.as_str()?.to_owned());
        } else if a.is(avp::ORIGIN_HOST) {
            sla.origin_host = Some(a.as_identity()?.to_owned());
        } else if a.is(avp::POLICY_COUNTER_STATUS_REPORT) {
            sla.reports.push(decode_report(&a)?);
        } else if a.is(avp::FAILED_AVP) {
            for f in a.grouped() {
                let f = f?;
                if f.is(avp::POLICY_COUNTER_IDENTIFIER) {
                    sla.failed_counters.push(f.as_str()?.to_owned());
                }
            }
        } else {
            answer_code(&a, &mut sla.code)?;
        }
    }
    Ok(sla)
}

/// A decoded SNR.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snr {
    pub session_id: String,
    pub reports: Vec<CounterReport>,
}

/// Decodes an SNR (TS 29.219 §5.6.4): the Sy Session-Id and the reports.
pub fn decode_snr(msg: &Message) -> Result<Snr, DiameterError> {
    let mut session_id = None;
    let mut reports = Vec::new();
    for a in msg.avps() {
        let a = a?;
        if a.is(avp::SESSION_ID) {
            session_id = Some(a.as_str()?.to_owned());
        } else if a.is(avp::POLICY_COUNTER_STATUS_REPORT) {
            reports.push(decode_report(&a)?);
        }
    }
    let session_id = session_id.ok_or_else(|| missing_avp(avp::SESSION_ID, "Session-Id"))?;
    Ok(Snr {
        session_id,
        reports,
    })
}

fn decode_report(a: &Avp<'_>) -> Result<CounterReport, DiameterError> {
    let mut id = None;
    let mut status = None;
    let mut pending = Vec::new();
    for g in a.grouped() {
        let g = g?;
        if g.is(avp::POLICY_COUNTER_IDENTIFIER) {
            id = Some(g.as_str()?.to_owned());
        } else if g.is(avp::POLICY_COUNTER_STATUS) {
            status = Some(g.as_str()?.to_owned());
        } else if g.is(avp::PENDING_POLICY_COUNTER_INFORMATION) {
            pending.push(decode_pending(&g)?);
        }
    }
    Ok(CounterReport {
        id: id.ok_or_else(|| {
            missing_avp(avp::POLICY_COUNTER_IDENTIFIER, "Policy-Counter-Identifier")
        })?,
        status: status
            .ok_or_else(|| missing_avp(avp::POLICY_COUNTER_STATUS, "Policy-Counter-Status"))?,
        pending,
    })
}

fn decode_pending(a: &Avp<'_>) -> Result<PendingStatus, DiameterError> {
    let mut status = None;
    let mut at = None;
    for g in a.grouped() {
        let g = g?;
        if g.is(avp::POLICY_COUNTER_STATUS) {
            status = Some(g.as_str()?.to_owned());
        } else if g.is(avp::PENDING_POLICY_COUNTER_CHANGE_TIME) {
            let t = g.as_time()?;
            let ms = t
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            at = Some(ms);
        }
    }
    Ok(PendingStatus {
        status: status
            .ok_or_else(|| missing_avp(avp::POLICY_COUNTER_STATUS, "Policy-Counter-Status"))?,
        at_ms: at.ok_or_else(|| {
            missing_avp(
                avp::PENDING_POLICY_COUNTER_CHANGE_TIME,
                "Pending-Policy-Counter-Change-Time",
            )
        })?,
    })
}

/// The SNA to an SNR (TS 29.219 §5.6.5) with `result` as Result-Code.
pub fn encode_sna(out: &mut bytes::BytesMut, req: &Message, me: &Identity, result: u32) {
    // The builder copies the request's Session-Id first (RFC 6733 §6.2).
    let mut b = MessageBuilder::answer(out, req);
    b.result_code(result)
        .origin(&me.origin_host, &me.origin_realm);
    b.finish();
}

/// A decoded STA: its result only.
pub fn decode_sta(msg: &Message) -> Result<AnswerCode, DiameterError> {
    let mut code = AnswerCode::Missing;
    for a in msg.avps() {
        answer_code(&a?, &mut code)?;
    }
    Ok(code)
}

/// Command codes Sy serves at the PCRF (the OCS sends SNR).
pub fn serves(application_id: u32, command_code: u32) -> bool {
    application_id == SY && command_code == diameter::dict::cmd::SPENDING_STATUS_NOTIFICATION
}

/// DIAMETER_SUCCESS, for the SNA.
pub const SUCCESS: u32 = result_code::DIAMETER_SUCCESS;

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use diameter::dict::cmd;
    use std::time::{Duration, SystemTime};

    fn me() -> Identity {
        Identity {
            origin_host: "pcrf.example".into(),
            origin_realm: "example".into(),
        }
    }

    fn parse(buf: BytesMut) -> Message {
        Message::parse(buf.freeze()).expect("parse")
    }

    fn answer(build: impl FnOnce(&mut MessageBuilder<'_>)) -> Message {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::new(&mut buf, 0, cmd::SPENDING_LIMIT, SY, 1, 2);
        build(&mut b);
        b.finish();
        parse(buf)
    }

    /// An SLA 2001 from ocs.example: monthly-data exhausted, valid again
    /// at 1_800_000_000; `more` adds further reports.
    fn sla_2001(more: impl FnOnce(&mut MessageBuilder<'_>)) -> Message {
        answer(|b| {
            b.str(avp::SESSION_ID, "s")
                .result_code(2001)
                .origin("ocs.example", "example");
            report(
                b,
                "monthly-data",
                "exhausted",
                Some(("valid", 1_800_000_000)),
            );
            more(b);
        })
    }

    fn report(b: &mut MessageBuilder<'_>, id: &str, status: &str, pending: Option<(&str, u64)>) {
        b.group(avp::POLICY_COUNTER_STATUS_REPORT, |g| {
            g.str(avp::POLICY_COUNTER_IDENTIFIER, id)
                .str(avp::POLICY_COUNTER_STATUS, status);
            if let Some((s, secs)) = pending {
                g.group(avp::PENDING_POLICY_COUNTER_INFORMATION, |p| {
                    p.str(avp::POLICY_COUNTER_STATUS, s).time(
                        avp::PENDING_POLICY_COUNTER_CHANGE_TIME,
                        UNIX_EPOCH + Duration::from_secs(secs),
                    );
                });
            }
        });
    }

    #[test]
    fn slr_initial_names_counters_and_subscriber_and_validates() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::SPENDING_LIMIT, SY, 7, 8);
        let counters = vec!["monthly-data".to_string(), "roaming".to_string()];
        encode_slr(
            &mut b,
            &me(),
            &Slr {
                session_id: "pcrf.example;sy;1",
                request_type: SlRequestType::Initial,
                destination_host: "ocs.example",
                destination_realm: "example",
                imsi: Some("001010000000001"),
                msisdn: Some("491700000001"),
                counters: &counters,
            },
        );
        b.finish();
        let m = parse(buf);
        m.validate().expect("valid against the dictionary");
        assert_eq!(m.session_id().expect("sid"), Some("pcrf.example;sy;1"));
        let ids: Vec<&str> = m
            .avps()
            .filter_map(|a| a.ok())
            .filter(|a| a.is(avp::POLICY_COUNTER_IDENTIFIER))
            .map(|a| a.as_str().expect("utf8"))
            .collect();
        assert_eq!(ids, ["monthly-data", "roaming"]);
        let subs = m
            .avps()
            .filter_map(|a| a.ok())
            .filter(|a| a.is(avp::SUBSCRIPTION_ID))
            .count();
        assert_eq!(subs, 2);
        let t = m.find(avp::SL_REQUEST_TYPE).expect("ok").expect("present");
        assert_eq!(t.as_i32(), Ok(0));
    }

    #[test]
    fn slr_intermediate_omits_the_subscriber() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::SPENDING_LIMIT, SY, 7, 8);
        encode_slr(
            &mut b,
            &me(),
            &Slr {
                session_id: "s",
                request_type: SlRequestType::Intermediate,
                destination_host: "ocs.example",
                destination_realm: "example",
                imsi: Some("001010000000001"),
                msisdn: None,
                counters: &["x".to_string()],
            },
        );
        b.finish();
        let m = parse(buf);
        assert!(m.find(avp::SUBSCRIPTION_ID).expect("ok").is_none());
        let t = m.find(avp::SL_REQUEST_TYPE).expect("ok").expect("present");
        assert_eq!(t.as_i32(), Ok(1));
    }

    #[test]
    fn sla_reports_and_pending_changes_decode() {
        let m = sla_2001(|b| {
            report(b, "roaming", "valid", None);
        });
        let sla = decode_sla(&m).expect("decode");
        assert!(sla.code.is_success());
        assert_eq!(sla.origin_host.as_deref(), Some("ocs.example"));
        assert_eq!(sla.reports.len(), 2);
        assert_eq!(sla.reports[0].status, "exhausted");
        assert_eq!(
            sla.reports[0].pending,
            vec![PendingStatus {
                status: "valid".into(),
                at_ms: 1_800_000_000_000
            }]
        );
        assert!(sla.reports[1].pending.is_empty());
    }

    #[test]
    fn sla_unknown_counters_names_them_from_failed_avp() {
        let m = answer(|b| {
            b.str(avp::SESSION_ID, "s")
                .origin("ocs.example", "example")
                .group(avp::EXPERIMENTAL_RESULT, |g| {
                    g.u32(avp::VENDOR_ID, TGPP)
                        .u32(avp::EXPERIMENTAL_RESULT_CODE, UNKNOWN_POLICY_COUNTERS);
                })
                .group(avp::FAILED_AVP, |g| {
                    g.str(avp::POLICY_COUNTER_IDENTIFIER, "bogus");
                });
        });
        let sla = decode_sla(&m).expect("decode");
        assert_eq!(sla.code, AnswerCode::Experimental(UNKNOWN_POLICY_COUNTERS));
        assert!(!sla.code.is_success());
        assert_eq!(sla.failed_counters, ["bogus"]);
    }

    #[test]
    fn report_without_status_is_missing_avp() {
        let m = answer(|b| {
            b.str(avp::SESSION_ID, "s").result_code(2001);
            b.group(avp::POLICY_COUNTER_STATUS_REPORT, |g| {
                g.str(avp::POLICY_COUNTER_IDENTIFIER, "x");
            });
        });
        let e = decode_sla(&m).expect_err("missing status");
        assert_eq!(e.result_code, result_code::DIAMETER_MISSING_AVP);
    }

    #[test]
    fn bad_utf8_counter_is_invalid_value() {
        let m = answer(|b| {
            b.str(avp::SESSION_ID, "s").result_code(2001);
            b.group(avp::POLICY_COUNTER_STATUS_REPORT, |g| {
                g.bytes(avp::POLICY_COUNTER_IDENTIFIER, &[0xff, 0xfe])
                    .str(avp::POLICY_COUNTER_STATUS, "valid");
            });
        });
        let e = decode_sla(&m).expect_err("bad utf8");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_VALUE);
    }

    #[test]
    fn snr_decodes_and_needs_a_session_id() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::SPENDING_STATUS_NOTIFICATION, SY, 1, 1);
        b.str(avp::SESSION_ID, "pcrf;sy;1")
            .origin("ocs.example", "example");
        report(&mut b, "monthly-data", "exhausted", None);
        b.finish();
        let snr = decode_snr(&parse(buf)).expect("decode");
        assert_eq!(snr.session_id, "pcrf;sy;1");
        assert_eq!(snr.reports[0].id, "monthly-data");

        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::SPENDING_STATUS_NOTIFICATION, SY, 1, 1);
        b.origin("ocs.example", "example");
        b.finish();
        let e = decode_snr(&parse(buf)).expect_err("no session");
        assert_eq!(e.result_code, result_code::DIAMETER_MISSING_AVP);
    }

    #[test]
    fn sna_echoes_the_session_and_validates() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::SPENDING_STATUS_NOTIFICATION, SY, 5, 6);
        b.str(avp::SESSION_ID, "pcrf;sy;1")
            .origin("ocs.example", "example");
        b.finish();
        let req = parse(buf);
        let mut out = BytesMut::new();
        encode_sna(&mut out, &req, &me(), 5002);
        let a = parse(out);
        a.validate().expect("valid");
        assert!(!a.is_request());
        assert_eq!(a.hop_by_hop(), 5);
        assert_eq!(a.session_id().expect("sid"), Some("pcrf;sy;1"));
        let sids = a
            .avps()
            .filter_map(|x| x.ok())
            .filter(|x| x.is(avp::SESSION_ID))
            .count();
        assert_eq!(sids, 1, "exactly one Session-Id");
        assert_eq!(
            a.find(avp::RESULT_CODE)
                .expect("ok")
                .map(|r| r.as_u32().expect("u32")),
            Some(5002)
        );
    }

    #[test]
    fn mangled_answers_and_notifications_never_panic() {
        let sla = sla_2001(|_| {});
        let whole = sla.bytes().to_vec();
        let decode_all = |bytes: Vec<u8>| {
            if let Ok(m) = Message::parse(bytes::Bytes::from(bytes)) {
                let _ = m.validate();
                let _ = decode_sla(&m);
                let _ = decode_snr(&m);
                let _ = decode_sta(&m);
            }
        };
        for i in 0..whole.len() {
            decode_all(whole[..i].to_vec());
            for bit in [0x01u8, 0x80, 0xff] {
                let mut m = whole.clone();
                m[i] ^= bit;
                decode_all(m);
            }
        }
    }

    #[test]
    fn str_validates_and_sta_decodes() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::SESSION_TERMINATION, SY, 1, 1);
        encode_str(&mut b, &me(), "pcrf;sy;1", "ocs.example", "example", 1);
        b.finish();
        let m = parse(buf);
        m.validate().expect("valid");
        assert_eq!(
            m.find(avp::TERMINATION_CAUSE)
                .expect("ok")
                .map(|t| t.as_i32().expect("i32")),
            Some(1)
        );
        let sta = answer(|b| {
            b.str(avp::SESSION_ID, "pcrf;sy;1").result_code(2001);
        });
        assert!(decode_sta(&sta).expect("decode").is_success());
        let _ = SystemTime::now();
    }
}
