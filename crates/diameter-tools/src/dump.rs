//! A human-readable, indented dump of a Diameter message, for logs, the
//! operator's tools and test failures: the header with command and
//! application names, then every AVP with its name, code, vendor, flags and
//! typed value, descending into Grouped AVPs.
//!
//! The dump is a diagnostic of messages that may be malformed, so it never
//! panics and never stops early on a bad value: a value that does not decode
//! as its type is shown as hex with the reason; a framing error (which makes
//! the rest of the run unreadable) is shown and ends that run.

use diameter::codec::{
    ntp_to_unix, Avp, AvpIter, Message, AVP_FLAG_M, AVP_FLAG_P, AVP_FLAG_V, FLAG_E, FLAG_P, FLAG_R,
    FLAG_T,
};
use diameter::dict::{self, AvpType};
use std::fmt::{self, Write as _};

/// Grouped AVPs nested deeper than this are shown as hex: the dump recurses,
/// and a hostile message could otherwise nest a million levels.
const MAX_DEPTH: usize = 32;

/// The dump of `msg` as a string (see [`Dump`]).
pub fn dump(msg: &Message) -> String {
    Dump(msg).to_string()
}

/// Displays a message as an indented dump, e.g. `tracing::debug!("{}", Dump(&m))`.
pub struct Dump<'a>(pub &'a Message);

impl fmt::Display for Dump<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        let h = m.header();
        let cmd = dict::command(h.command_code);
        let (name, abbrev) = match cmd {
            Some(c) if h.is_request() => (c.name, c.request),
            Some(c) => (c.name, c.answer),
            None => ("Unknown-Command", "?"),
        };
        let kind = if h.is_request() { "Request" } else { "Answer" };
        write!(f, "{abbrev} {name}-{kind} (code {})", h.command_code)?;
        write!(f, " flags=0x{:02x}", h.flags)?;
        let mut letters = String::new();
        for (bit, c) in [(FLAG_R, 'R'), (FLAG_P, 'P'), (FLAG_E, 'E'), (FLAG_T, 'T')] {
            if h.flags & bit != 0 {
                letters.push(c);
            }
        }
        if !letters.is_empty() {
            write!(f, "[{letters}]")?;
        }
        let app = dict::application(h.application_id).map_or("unknown", |a| a.name);
        writeln!(
            f,
            " app={} ({app}) hbh=0x{:08x} e2e=0x{:08x} len={}",
            h.application_id, h.hop_by_hop, h.end_to_end, h.length
        )?;
        run(f, m.avps(), 1)
    }
}

/// Writes every AVP of a run (a message body or a Grouped AVP's data).
fn run(f: &mut fmt::Formatter<'_>, iter: AvpIter<'_>, depth: usize) -> fmt::Result {
    for item in iter {
        match item {
            Ok(avp) => one(f, &avp, depth)?,
            Err(e) => {
                indent(f, depth)?;
                writeln!(f, "! {e}; the rest of this level cannot be framed")?;
                break;
            }
        }
    }
    Ok(())
}

fn indent(f: &mut fmt::Formatter<'_>, depth: usize) -> fmt::Result {
    for _ in 0..depth {
        f.write_str("  ")?;
    }
    Ok(())
}

/// Writes one AVP: `Name (code[, vendor V Name]) [flags] = value`.
fn one(f: &mut fmt::Formatter<'_>, avp: &Avp<'_>, depth: usize) -> fmt::Result {
    indent(f, depth)?;
    let def = dict::avp(avp.code(), avp.vendor());
    match def {
        Some(d) => write!(f, "{} ({}", d.name, avp.code())?,
        None => write!(f, "AVP ({}", avp.code())?,
    }
    if avp.vendor() != 0 {
        write!(f, ", vendor {}", avp.vendor())?;
        if let Some(v) = dict::vendor_name(avp.vendor()) {
            write!(f, " {v}")?;
        }
    }
    f.write_str(") [")?;
    let flags = avp.flags();
    for (bit, c) in [(AVP_FLAG_V, 'V'), (AVP_FLAG_M, 'M'), (AVP_FLAG_P, 'P')] {
        if flags & bit != 0 {
            f.write_char(c)?;
        }
    }
    let other = flags & !(AVP_FLAG_V | AVP_FLAG_M | AVP_FLAG_P);
    if other != 0 {
        write!(f, " reserved=0x{other:02x}")?;
    }
    f.write_str("]")?;
    let Some(d) = def else {
        f.write_str(" = ")?;
        hex(f, avp.data())?;
        return f.write_str(" (not in the dictionary)\n");
    };
    if d.ty == AvpType::Grouped {
        if depth >= MAX_DEPTH {
            f.write_str(" = ")?;
            hex(f, avp.data())?;
            return f.write_str(" (nested too deep to show)\n");
        }
        f.write_str(" {\n")?;
        run(f, avp.grouped(), depth + 1)?;
        indent(f, depth)?;
        return f.write_str("}\n");
    }
    f.write_str(" = ")?;
    value(f, avp, d)?;
    f.write_char('\n')
}

/// The typed value of a non-grouped AVP, or its hex with the reason it does
/// not decode.
fn value(f: &mut fmt::Formatter<'_>, avp: &Avp<'_>, d: &dict::AvpDef) -> fmt::Result {
    let named = |f: &mut fmt::Formatter<'_>, v: i64| match d.enum_name(v) {
        Some(n) => write!(f, "{n} ({v})"),
        None => write!(f, "{v}"),
    };
    let shown = match d.ty {
        // Names (Charging-Rule-Name, Monitoring-Key) are octets on the wire
        // but text to a reader: printable ASCII is shown quoted, the rest in hex.
        AvpType::OctetString => return octets(f, avp.data()),
        AvpType::UTF8String
        | AvpType::DiameterIdentity
        | AvpType::DiameterURI
        | AvpType::IPFilterRule
        | AvpType::QoSFilterRule => avp.as_str().map(|s| write!(f, "{s:?}")),
        AvpType::Integer32 | AvpType::Enumerated => avp.as_i32().map(|v| named(f, i64::from(v))),
        AvpType::Unsigned32 => avp.as_u32().map(|v| named(f, i64::from(v))),
        AvpType::Integer64 => avp.as_i64().map(|v| write!(f, "{v}")),
        AvpType::Unsigned64 => avp.as_u64().map(|v| write!(f, "{v}")),
        AvpType::Float32 => avp.as_f32().map(|v| write!(f, "{v}")),
        AvpType::Float64 => avp.as_f64().map(|v| write!(f, "{v}")),
        AvpType::Address => avp.as_address().map(|ip| write!(f, "{ip}")),
        AvpType::Time => avp.as_ntp().map(|n| rfc3339(f, ntp_to_unix(n))),
        AvpType::Grouped => return hex(f, avp.data()),
    };
    match shown {
        Ok(r) => r,
        Err(e) => {
            hex(f, avp.data())?;
            write!(f, " (invalid {}: {})", d.ty.name(), e.message)
        }
    }
}

fn octets(f: &mut fmt::Formatter<'_>, data: &[u8]) -> fmt::Result {
    if !data.is_empty() && data.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
        // Printable ASCII is valid UTF-8.
        return write!(f, "{:?}", String::from_utf8_lossy(data));
    }
    hex(f, data)
}

fn hex(f: &mut fmt::Formatter<'_>, data: &[u8]) -> fmt::Result {
    if data.is_empty() {
        return f.write_str("(empty)");
    }
    f.write_str("0x")?;
    for b in data {
        write!(f, "{b:02x}")?;
    }
    Ok(())
}

/// Unix seconds as RFC 3339 UTC (`2026-01-01T00:00:00Z`); seconds past
/// the year 9999 print as the number.
fn rfc3339(f: &mut fmt::Formatter<'_>, unix: u64) -> fmt::Result {
    match i64::try_from(unix).map(jiff::Timestamp::from_second) {
        Ok(Ok(t)) => write!(f, "{t}"),
        _ => write!(f, "{unix}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use diameter::codec::{unix_to_ntp, AvpCode, MessageBuilder};
    use diameter::dict::{app, avp, cmd, enums};
    use std::net::{IpAddr, Ipv4Addr};

    fn ccr() -> Message {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, app::GX, 0x11, 0x22);
        b.str(avp::SESSION_ID, "pcef.example;1;2")
            .str(avp::ORIGIN_HOST, "pcef.example")
            .i32(
                avp::CC_REQUEST_TYPE,
                enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
            )
            .group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(
                    avp::SUBSCRIPTION_ID_TYPE,
                    enums::SUBSCRIPTION_ID_TYPE::END_USER_IMSI,
                )
                .str(avp::SUBSCRIPTION_ID_DATA, "001010123456789");
            })
            .address(avp::AN_GW_ADDRESS, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
            .bytes(avp::_3GPP_USER_LOCATION_INFO, &[0x82, 0x00, 0xf1])
            .u32(avp::RESULT_CODE, 2001)
            .u32(avp::EXPERIMENTAL_RESULT_CODE, 5142)
            .u32(avp::EVENT_TIMESTAMP, unix_to_ntp(1_767_225_600))
            .i32(avp::MEDIA_TYPE, -1)
            .bytes(AvpCode::new(999_999, 0, false), b"\x01\x02");
        b.finish();
        Message::parse(buf.freeze()).expect("valid")
    }

    #[test]
    fn printable_octet_strings_read_as_text() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::RE_AUTH, app::GX, 1, 2);
        b.bytes(avp::CHARGING_RULE_NAME, b"vip-video")
            .bytes(avp::MONITORING_KEY, b"\x00\x01")
            .bytes(avp::CHARGING_RULE_BASE_NAME, b"");
        b.finish();
        let d = dump(&Message::parse(buf.freeze()).expect("valid"));
        assert!(
            d.contains("Charging-Rule-Name (1005, vendor 10415 3GPP) [VM] = \"vip-video\""),
            "{d}"
        );
        assert!(
            d.contains("Monitoring-Key (1066, vendor 10415 3GPP) [V] = 0x0001"),
            "{d}"
        );
    }

    #[test]
    fn header_and_typed_values() {
        let d = dump(&ccr());
        let lines: Vec<&str> = d.lines().collect();
        let first = format!(
            "CCR Credit-Control-Request (code 272) flags=0xc0[RP] app=16777238 (Gx) \
             hbh=0x00000011 e2e=0x00000022 len={}",
            ccr().len()
        );
        assert_eq!(lines[0], first);
        assert_eq!(lines[1], "  Session-Id (263) [M] = \"pcef.example;1;2\"");
        assert_eq!(lines[2], "  Origin-Host (264) [M] = \"pcef.example\"");
        assert_eq!(
            lines[3],
            "  CC-Request-Type (416) [M] = INITIAL_REQUEST (1)"
        );
        assert_eq!(lines[4], "  Subscription-Id (443) [M] {");
        assert_eq!(
            lines[5],
            "    Subscription-Id-Type (450) [M] = END_USER_IMSI (1)"
        );
        assert_eq!(
            lines[6],
            "    Subscription-Id-Data (444) [M] = \"001010123456789\""
        );
        assert_eq!(lines[7], "  }");
        assert_eq!(
            lines[8],
            "  AN-GW-Address (1050, vendor 10415 3GPP) [V] = 127.0.0.2"
        );
        assert_eq!(
            lines[9],
            "  3GPP-User-Location-Info (22, vendor 10415 3GPP) [V] = 0x8200f1"
        );
        assert_eq!(
            lines[10],
            "  Result-Code (268) [M] = DIAMETER_SUCCESS (2001)"
        );
        assert_eq!(
            lines[11],
            "  Experimental-Result-Code (298) [M] = DIAMETER_PCC_RULE_EVENT (5142)"
        );
        assert_eq!(
            lines[12],
            "  Event-Timestamp (55) [M] = 2026-01-01T00:00:00Z"
        );
        assert_eq!(
            lines[13],
            "  Media-Type (520, vendor 10415 3GPP) [VM] = OTHER (-1)"
        );
        assert_eq!(
            lines[14],
            "  AVP (999999) [] = 0x0102 (not in the dictionary)"
        );
        assert_eq!(lines.len(), 15);
    }

    #[test]
    fn answers_use_the_answer_abbreviation() {
        let req = ccr();
        let mut out = BytesMut::new();
        let mut b = MessageBuilder::answer(&mut out, &req);
        b.result_code(2001);
        b.finish();
        let ans = Message::parse(out.freeze()).expect("answer");
        assert!(dump(&ans).starts_with("CCA Credit-Control-Answer (code 272) flags=0x40[P]"));
    }

    #[test]
    fn bad_values_show_hex_and_reason() {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, 257, 0, 1, 1);
        b.bytes(avp::RESULT_CODE, &[0, 1])
            .bytes(avp::SESSION_ID, &[0xff, 0xfe])
            .bytes(avp::HOST_IP_ADDRESS, &[0, 9, 1]);
        b.finish();
        let m = Message::parse(buf.freeze()).expect("header ok");
        let d = dump(&m);
        assert!(
            d.contains("Result-Code (268) [M] = 0x0001 (invalid Unsigned32:"),
            "{d}"
        );
        assert!(
            d.contains("Session-Id (263) [M] = 0xfffe (invalid UTF8String:"),
            "{d}"
        );
        assert!(
            d.contains("Host-IP-Address (257) [M] = 0x000901 (invalid Address:"),
            "{d}"
        );
    }

    #[test]
    fn framing_errors_are_shown_and_end_the_level() {
        // A CER whose second AVP claims more bytes than the message has.
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, 257, 0, 1, 1);
        b.str(avp::ORIGIN_HOST, "a").str(avp::ORIGIN_REALM, "b");
        b.finish();
        let mut v = buf.to_vec();
        v[20 + 12 + 7] = 200; // Origin-Realm's length
        let m = Message::parse(Bytes::from(v)).expect("header ok");
        let d = dump(&m);
        let lines: Vec<&str> = d.lines().collect();
        assert_eq!(lines.len(), 3, "{d}");
        assert!(lines[1].starts_with("  Origin-Host"));
        assert!(lines[2].starts_with("  ! AVP length does not fit"), "{d}");
        assert!(lines[2].contains("5014"), "{d}");
    }

    #[test]
    fn deep_nesting_is_cut_off_without_recursion() {
        // 40 nested Proxy-Info AVPs (Grouped), built inside out.
        let mut inner: Vec<u8> = Vec::new();
        for _ in 0..40 {
            let mut v = 284u32.to_be_bytes().to_vec();
            v.push(0x40);
            v.extend_from_slice(&((8 + inner.len()) as u32).to_be_bytes()[1..]);
            v.extend_from_slice(&inner);
            inner = v;
        }
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, 257, 0, 1, 1);
        b.raw_avp(&inner);
        b.finish();
        let m = Message::parse(buf.freeze()).expect("header ok");
        let d = dump(&m);
        assert!(d.contains("(nested too deep to show)"), "{d}");
        assert_eq!(d.matches('{').count(), MAX_DEPTH - 1);
    }

    #[test]
    fn rfc3339_dates() {
        struct T(u64);
        impl fmt::Display for T {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                rfc3339(f, self.0)
            }
        }
        assert_eq!(T(0).to_string(), "1970-01-01T00:00:00Z");
        assert_eq!(T(951_782_400).to_string(), "2000-02-29T00:00:00Z");
        assert_eq!(T(1_767_225_599).to_string(), "2025-12-31T23:59:59Z");
        // The NTP era-1 rollover (RFC 6733 §4.3.1).
        assert_eq!(T(2_085_978_496).to_string(), "2036-02-07T06:28:16Z");
    }
}
