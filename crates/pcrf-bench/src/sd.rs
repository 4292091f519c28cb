//! Sd messages (3GPP TS 29.212 §5b) as a TDF (a DPI node) sends them: the
//! CCR-I of the unsolicited mode (the TDF saw the UE's traffic first), the
//! CCR-U reporting APPLICATION_START with Application-Detection-Information
//! and usage per application (ADC rule level), the CCR-T, and the answers
//! to the PCRF's TSR and RAR.
//!
//! Sans-IO like [`crate::gx`]: the functions add AVPs to a builder whose
//! header the caller (or `PeerHandle::request`) started.

use crate::gx;
use bytes::{Bytes, BytesMut};
use diameter::dict::{app, avp, enums};
use diameter::{Message, MessageBuilder};
use std::net::Ipv4Addr;

/// The emulated TDF's Diameter identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TdfIdentity {
    pub origin_host: String,
    pub origin_realm: String,
    pub destination_realm: String,
    pub origin_state_id: u32,
}

/// Usage of one detected application since the last report: its
/// Monitoring-Key (from the ADC rule) and octets, as a PCEF reports a
/// monitoring key's.
pub use crate::gx::Usage as AppUsage;

/// What differs between the CCRs of one Sd session.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub session_id: &'a str,
    pub tdf: &'a TdfIdentity,
    /// The PCRF that sent the TSR or answered the CCR-I.
    pub destination_host: Option<&'a str>,
    /// CC-Request-Number: 0 for the CCR-I, then 1, 2...
    pub number: u32,
}

fn header_avps(b: &mut MessageBuilder<'_>, r: &Request<'_>, request_type: i32) {
    b.str(avp::SESSION_ID, r.session_id)
        .u32(avp::AUTH_APPLICATION_ID, app::SD)
        .origin(&r.tdf.origin_host, &r.tdf.origin_realm)
        .str(avp::DESTINATION_REALM, &r.tdf.destination_realm);
    if let Some(h) = r.destination_host {
        b.str(avp::DESTINATION_HOST, h);
    }
    b.i32(avp::CC_REQUEST_TYPE, request_type)
        .u32(avp::CC_REQUEST_NUMBER, r.number)
        .u32(avp::ORIGIN_STATE_ID, r.tdf.origin_state_id);
}

/// The unsolicited mode's CCR-I (TS 29.212 §5b.3.1): the UE's address and
/// its identities, as far as the TDF knows them.
pub fn ccr_initial(b: &mut MessageBuilder<'_>, r: &Request<'_>, ue_ip: Ipv4Addr, imsi: &str) {
    header_avps(b, r, enums::CC_REQUEST_TYPE::INITIAL_REQUEST);
    b.group(avp::SUBSCRIPTION_ID, |g| {
        g.i32(
            avp::SUBSCRIPTION_ID_TYPE,
            enums::SUBSCRIPTION_ID_TYPE::END_USER_IMSI,
        )
        .str(avp::SUBSCRIPTION_ID_DATA, imsi);
    })
    .bytes(avp::FRAMED_IP_ADDRESS, &ue_ip.octets());
}

/// A CCR-U (TS 29.212 §5b.3.3, §5b.3.4): APPLICATION_START for each of
/// `started` (TDF-Application-Identifier, instance) and usage per
/// application.
pub fn ccr_update(
    b: &mut MessageBuilder<'_>,
    r: &Request<'_>,
    started: &[(&str, u32)],
    usage: &[AppUsage],
) {
    header_avps(b, r, enums::CC_REQUEST_TYPE::UPDATE_REQUEST);
    if !started.is_empty() {
        b.i32(avp::EVENT_TRIGGER, enums::EVENT_TRIGGER::APPLICATION_START);
    }
    if !usage.is_empty() {
        b.i32(avp::EVENT_TRIGGER, enums::EVENT_TRIGGER::USAGE_REPORT);
    }
    for (application, instance) in started {
        b.group(avp::APPLICATION_DETECTION_INFORMATION, |g| {
            g.bytes(avp::TDF_APPLICATION_IDENTIFIER, application.as_bytes())
                .bytes(
                    avp::TDF_APPLICATION_INSTANCE_IDENTIFIER,
                    &instance.to_be_bytes(),
                );
        });
    }
    gx::usage_avps(b, usage, enums::USAGE_MONITORING_LEVEL::ADC_RULE_LEVEL);
}

/// The CCR-T with the final usage.
pub fn ccr_terminate(b: &mut MessageBuilder<'_>, r: &Request<'_>, usage: &[AppUsage]) {
    header_avps(b, r, enums::CC_REQUEST_TYPE::TERMINATION_REQUEST);
    b.i32(
        avp::TERMINATION_CAUSE,
        enums::TERMINATION_CAUSE::DIAMETER_LOGOUT,
    );
    gx::usage_avps(b, usage, enums::USAGE_MONITORING_LEVEL::ADC_RULE_LEVEL);
}

/// The TDF's answer to a TSR (TSA, TS 29.212 §5b.6.2) or an Sd RAR (RAA,
/// §5b.6.6) with `result_code`.
pub fn answer(
    req: &Message,
    origin_host: &str,
    origin_realm: &str,
    origin_state_id: u32,
    result_code: u32,
) -> Bytes {
    let mut buf = BytesMut::with_capacity(256);
    let mut b = MessageBuilder::answer(&mut buf, req);
    b.result_code(result_code)
        .origin(origin_host, origin_realm)
        .u32(avp::ORIGIN_STATE_ID, origin_state_id);
    b.finish();
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use diameter::dict::cmd;

    fn tdf() -> TdfIdentity {
        TdfIdentity {
            origin_host: "tdf-1.bench.test".into(),
            origin_realm: "bench.test".into(),
            destination_realm: "pcrf.test".into(),
            origin_state_id: 5,
        }
    }

    fn encode(f: impl FnOnce(&mut MessageBuilder<'_>)) -> Message {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, app::SD, 1, 2);
        f(&mut b);
        b.finish();
        Message::parse(buf.freeze()).expect("parse")
    }

    #[test]
    fn ccrs_are_valid_and_say_what_they_report() {
        let t = tdf();
        let r = Request {
            session_id: "tdf-1.bench.test;1;1",
            tdf: &t,
            destination_host: None,
            number: 0,
        };
        let i = encode(|b| ccr_initial(b, &r, Ipv4Addr::new(10, 0, 0, 9), "001010000000009"));
        i.validate().expect("valid CCR-I");
        assert_eq!(i.application_id(), app::SD);
        let fip = i
            .find(avp::FRAMED_IP_ADDRESS)
            .expect("ok")
            .expect("present");
        assert_eq!(fip.as_octets(), [10, 0, 0, 9]);

        let r = Request {
            number: 1,
            destination_host: Some("pcrf.pcrf.test"),
            ..r
        };
        let usage = [AppUsage {
            monitoring_key: "mk-video".into(),
            input_octets: 10,
            output_octets: 990,
        }];
        let u = encode(|b| ccr_update(b, &r, &[("youtube", 1)], &usage));
        u.validate().expect("valid CCR-U");
        let triggers: Vec<i32> = u
            .avps()
            .filter_code(avp::EVENT_TRIGGER)
            .map(|a| a.expect("ok").as_enum().expect("enum"))
            .collect();
        assert_eq!(triggers, [39, 33]);
        let adi = u
            .find(avp::APPLICATION_DETECTION_INFORMATION)
            .expect("ok")
            .expect("present");
        let id = adi
            .grouped()
            .find(avp::TDF_APPLICATION_IDENTIFIER)
            .expect("ok")
            .expect("present");
        assert_eq!(id.as_octets(), b"youtube");
        // No application started: no APPLICATION_START, no detection info.
        let u = encode(|b| ccr_update(b, &r, &[], &usage));
        assert_eq!(u.avps().filter_code(avp::EVENT_TRIGGER).count(), 1);
        assert!(u
            .find(avp::APPLICATION_DETECTION_INFORMATION)
            .expect("ok")
            .is_none());

        let t = encode(|b| ccr_terminate(b, &r, &usage));
        t.validate().expect("valid CCR-T");
        let tsa =
            Message::parse(answer(&t, "tdf-1.bench.test", "bench.test", 5, 2001)).expect("parse");
        tsa.validate().expect("valid TSA");
        assert_eq!(tsa.session_id(), Ok(Some("tdf-1.bench.test;1;1")));
    }
}
