//! How much the PCRF accepts from a peer and keeps of it, in one place: a
//! hostile or broken client must not make one request cost unbounded time,
//! memory or log output, nor make a session record grow without end.
//!
//! - Field sizes: every field a session stores or logs has a largest size,
//!   from the 3GPP or IETF type where one exists. A request carrying a
//!   larger one is refused with DIAMETER_INVALID_AVP_LENGTH (5014): the
//!   value's length is what is wrong. Its Failed-AVP carries the AVP's
//!   header and only the allowed number of its first octets (the length
//!   field set to match), so that the answer does not grow with the
//!   offending value. Nothing of the request is applied or stored.
//! - Counts: the reports of one request and the rule failures a session
//!   keeps are capped; what exceeds a cap is answered as usual, counted in
//!   a metric and neither stored nor logged one by one.
//! - Per-request log lines: at most [`LOGGED_ITEMS_PER_REQUEST`] lines for
//!   the items of one request, then one line summing them up.

use diameter::codec::{Avp, AvpCode, AvpIter, DiameterError};
use diameter::dict::avp;
use diameter::result_code;

/// Charging-Rule-Report entries (rule names with their status) one request
/// may carry; the rest are answered but not applied.
pub const MAX_RULE_REPORTS_PER_REQUEST: usize = 256;

/// Rule failures one session keeps for the policy (the most recent ones).
pub const MAX_RULE_FAILURES_KEPT: usize = 64;

/// Usage reports for Monitoring-Keys the usage file does not define that
/// one request shows to the policy; the rest are counted only.
pub const MAX_UNKNOWN_KEY_REPORTS_PER_REQUEST: usize = 16;

/// Log lines one request writes for its items (rule failures, unknown
/// Monitoring-Keys) before one summary line replaces the rest.
pub const LOGGED_ITEMS_PER_REQUEST: usize = 3;

/// Largest International Mobile Subscriber Identity: 15 digits (TS 23.003
/// §2.2).
pub const MAX_IMSI: usize = 15;

/// Largest MSISDN: an E.164 number, 15 digits (ITU-T E.164 §6).
pub const MAX_MSISDN: usize = 15;

/// Largest rule, rule base, ADC rule or Monitoring-Key name: names the
/// operator gives in the rule catalog and the usage file.
pub const MAX_RULE_NAME: usize = 128;

/// A field with a largest size in octets.
#[derive(Clone, Copy, Debug)]
pub struct FieldLimit {
    pub avp: AvpCode,
    pub name: &'static str,
    pub max: usize,
}

const fn limit(avp: AvpCode, name: &'static str, max: usize) -> FieldLimit {
    FieldLimit { avp, name, max }
}

/// The largest size of each field the PCRF reads, wherever it appears in
/// a request (top level or inside one of [`GROUPS_CHECKED`]).
pub const FIELD_LIMITS: &[FieldLimit] = &[
    // "<DiameterIdentity>;<high 32 bits>;<low 32 bits>[;<optional>]"
    // (RFC 6733 §8.8): a 255-octet identity, two numbers and some room.
    limit(avp::SESSION_ID, "Session-Id", 512),
    // DiameterIdentity: a fully qualified domain name (RFC 1035: 255).
    limit(avp::ORIGIN_HOST, "Origin-Host", 255),
    limit(avp::ORIGIN_REALM, "Origin-Realm", 255),
    limit(avp::DESTINATION_HOST, "Destination-Host", 255),
    limit(avp::DESTINATION_REALM, "Destination-Realm", 255),
    // IMSI and MSISDN are 15 digits; SIP URIs and NAIs fit a domain name.
    limit(avp::SUBSCRIPTION_ID_DATA, "Subscription-Id-Data", 255),
    // The APN: at most 100 octets (TS 23.003 §9.1).
    limit(avp::CALLED_STATION_ID, "Called-Station-Id", 100),
    // Reserved, prefix length and up to 16 octets of prefix (RFC 3162).
    limit(avp::FRAMED_IPV6_PREFIX, "Framed-IPv6-Prefix", 18),
    // A location type and its identities; the largest type defined (5GS
    // TAI and NCGI) is 15 octets (TS 29.061 §16.4.7.2).
    limit(avp::_3GPP_USER_LOCATION_INFO, "3GPP-User-Location-Info", 64),
    // Time zone and daylight saving time: 2 octets (TS 29.061 §16.4.7.2).
    limit(avp::_3GPP_MS_TIMEZONE, "3GPP-MS-TimeZone", 8),
    // IMEISV (8 octets BCD or 16 digits), a MAC or an EUI-64.
    limit(
        avp::USER_EQUIPMENT_INFO_VALUE,
        "User-Equipment-Info-Value",
        64,
    ),
    // Names the operator gives rules, keys and applications.
    limit(avp::CHARGING_RULE_NAME, "Charging-Rule-Name", MAX_RULE_NAME),
    limit(
        avp::CHARGING_RULE_BASE_NAME,
        "Charging-Rule-Base-Name",
        MAX_RULE_NAME,
    ),
    limit(avp::ADC_RULE_NAME, "ADC-Rule-Name", MAX_RULE_NAME),
    limit(avp::MONITORING_KEY, "Monitoring-Key", MAX_RULE_NAME),
    limit(
        avp::TDF_APPLICATION_IDENTIFIER,
        "TDF-Application-Identifier",
        MAX_RULE_NAME,
    ),
    limit(
        avp::TDF_APPLICATION_INSTANCE_IDENTIFIER,
        "TDF-Application-Instance-Identifier",
        MAX_RULE_NAME,
    ),
    limit(
        avp::AF_APPLICATION_IDENTIFIER,
        "AF-Application-Identifier",
        MAX_RULE_NAME,
    ),
    // Charging identifiers: 4 octets in EPC; an IMS charging id is text.
    limit(
        avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_VALUE,
        "Access-Network-Charging-Identifier-Value",
        64,
    ),
    limit(avp::AF_CHARGING_IDENTIFIER, "AF-Charging-Identifier", 255),
    limit(avp::SERVICE_URN, "Service-URN", 255),
    // One IPFilterRule: "permit out 17 from <addr/len> <ports> to ...".
    limit(avp::FLOW_DESCRIPTION, "Flow-Description", 512),
    // The SDP lines of one media component (TS 29.214 §5.3.7), kept with
    // the AF session: a few hundred octets in practice.
    limit(avp::CODEC_DATA, "Codec-Data", 4096),
];

/// Grouped AVPs whose members the PCRF reads, so their members are checked
/// against [`FIELD_LIMITS`] too.
pub const GROUPS_CHECKED: &[AvpCode] = &[
    avp::SUBSCRIPTION_ID,
    avp::USER_EQUIPMENT_INFO,
    avp::CHARGING_RULE_REPORT,
    avp::USAGE_MONITORING_INFORMATION,
    avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_GX,
    avp::MEDIA_COMPONENT_DESCRIPTION,
    avp::MEDIA_SUB_COMPONENT,
    avp::ADC_RULE_REPORT,
    avp::APPLICATION_DETECTION_INFORMATION,
];

/// How deep checked groups may nest (Media-Sub-Component inside
/// Media-Component-Description is the deepest the PCRF reads); deeper
/// nesting is not read by the PCRF, so it is not walked either.
const MAX_GROUP_DEPTH: usize = 3;

/// Refuses a request in which a field is larger than its limit: 5014 naming
/// the AVP. Call it on the message's AVPs before decoding them.
pub fn check_field_sizes(avps: AvpIter<'_>) -> Result<(), DiameterError> {
    check_run(avps, 0)
}

fn check_run(avps: AvpIter<'_>, depth: usize) -> Result<(), DiameterError> {
    for a in avps {
        let a = a?;
        if let Some(l) = FIELD_LIMITS.iter().find(|l| a.is(l.avp)) {
            at_most(&a, l.max, l.name)?;
        } else if depth < MAX_GROUP_DEPTH && GROUPS_CHECKED.iter().any(|g| a.is(*g)) {
            check_run(a.grouped(), depth + 1)?;
        }
    }
    Ok(())
}

/// `a` if its data is at most `max` octets, else 5014 naming it (`name` is
/// the AVP's name, for the Error-Message).
pub fn at_most(a: &Avp<'_>, max: usize, name: &'static str) -> Result<(), DiameterError> {
    if a.data().len() <= max {
        return Ok(());
    }
    let raw = a.raw();
    let header = raw.len() - a.data().len();
    let mut failed = raw[..header + max].to_vec();
    let len = (header + max) as u32;
    failed[5..8].copy_from_slice(&len.to_be_bytes()[1..]);
    Err(DiameterError::with_failed_avp(
        result_code::DIAMETER_INVALID_AVP_LENGTH,
        failed,
        format!("{name} is longer than {max} octets"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use diameter::codec::{Message, MessageBuilder};
    use diameter::dict::{app, cmd};

    fn request(body: impl FnOnce(&mut MessageBuilder<'_>)) -> Message {
        let mut buf = bytes::BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, app::GX, 1, 1);
        body(&mut b);
        b.finish();
        Message::parse(buf.freeze()).expect("message")
    }

    #[test]
    fn a_field_at_its_limit_passes_and_one_octet_more_is_5014_naming_it() {
        let at = request(|b| {
            b.str(avp::CALLED_STATION_ID, &"a".repeat(100));
        });
        check_field_sizes(at.avps()).expect("100 octets is an APN");
        let over = request(|b| {
            b.str(avp::SESSION_ID, "pgw;1;2");
            b.str(avp::CALLED_STATION_ID, &"a".repeat(100_000));
        });
        let e = check_field_sizes(over.avps()).expect_err("too long");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_LENGTH);
        assert!(e.message.contains("Called-Station-Id"), "{}", e.message);
        let failed = e.failed_avp.expect("Failed-AVP");
        // The AVP's own header (code 30), cut to the limit: the answer
        // does not echo 100 kB back.
        assert_eq!(&failed[..4], &30u32.to_be_bytes());
        assert_eq!(failed.len(), 8 + 100);
        assert_eq!(&failed[5..8], &108u32.to_be_bytes()[1..]);
    }

    #[test]
    fn rx_and_sd_requests_are_held_to_the_same_limits() {
        let long_id = "s".repeat(513);
        let mut buf = bytes::BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::AA, app::RX, 1, 2);
        b.str(avp::SESSION_ID, &long_id)
            .origin("pcscf.example", "example");
        b.finish();
        let aar = Message::parse(buf.freeze()).expect("message");
        let e = crate::rx::decode_aar(&aar).expect_err("Session-Id too long");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_LENGTH);
        assert!(e.message.contains("Session-Id"), "{}", e.message);

        let mut buf = bytes::BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, app::SD, 1, 2);
        b.str(avp::SESSION_ID, "tdf;1")
            .origin("tdf.example", "example")
            .group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                    .str(avp::SUBSCRIPTION_ID_DATA, "0010100000000012");
            });
        b.finish();
        let ccr = Message::parse(buf.freeze()).expect("message");
        let e = crate::sd::decode_ccr(&ccr).expect_err("a 16-digit IMSI");
        assert_eq!(e.result_code, result_code::DIAMETER_INVALID_AVP_LENGTH);
        assert!(e.message.contains("IMSI"), "{}", e.message);
        assert_eq!(
            &e.failed_avp.expect("Failed-AVP")[..4],
            &444u32.to_be_bytes()
        );
    }

    /// What a peer can put into a session record is bounded: every field
    /// it sends at its limit, and the rule failures at their cap, encode
    /// to a few KiB (the rest of a record is what the policy, the rule
    /// catalog and the usage file decide).
    #[test]
    fn a_session_with_every_peer_field_at_its_limit_stays_small() {
        use crate::policy::input::RuleFailure;
        use crate::session::GxSession;
        let max = |name: &str| {
            FIELD_LIMITS
                .iter()
                .find(|l| l.name == name)
                .map(|l| l.max)
                .expect("listed")
        };
        let text = |n: usize| "x".repeat(n);
        let hex = |n: usize| "ab".repeat(n);
        let mut s = GxSession::new(
            text(max("Session-Id")),
            text(MAX_IMSI),
            &text(max("Origin-Host")),
            &text(max("Origin-Realm")),
            0,
        );
        s.imsi = Some(text(MAX_IMSI).into());
        s.msisdn = Some(text(MAX_MSISDN).into());
        s.apn = Some(text(max("Called-Station-Id")).into());
        s.ue_ipv6_prefix = Some(hex(max("Framed-IPv6-Prefix")).into());
        s.location = Some(hex(max("3GPP-User-Location-Info")).into());
        s.ms_timezone = Some(hex(max("3GPP-MS-TimeZone")).into());
        s.device = Some(text(max("User-Equipment-Info-Value") * 2).into());
        let reports: Vec<RuleFailure> = (0..10 * MAX_RULE_FAILURES_KEPT)
            .map(|i| RuleFailure {
                rule: format!("{i:0>width$}", width = MAX_RULE_NAME),
                status: 1,
                code: Some(4),
            })
            .collect();
        crate::session::rule_failures::apply(&mut s, &reports);
        let stored = crate::store::encode_session(&s).expect("encodes");
        assert!(stored.len() < 16 * 1024, "{} bytes", stored.len());
    }

    #[test]
    fn members_of_read_groups_are_checked_too() {
        let m = request(|b| {
            b.group(avp::CHARGING_RULE_REPORT, |g| {
                g.bytes(avp::CHARGING_RULE_NAME, &[b'r'; 129]);
            });
        });
        let e = check_field_sizes(m.avps()).expect_err("rule name too long");
        assert!(e.message.contains("Charging-Rule-Name"), "{}", e.message);
        let failed = e.failed_avp.expect("Failed-AVP");
        assert_eq!(&failed[..4], &1005u32.to_be_bytes());
        // Vendor-specific: 12 octets of header.
        assert_eq!(failed.len(), 12 + 128);
    }
}
