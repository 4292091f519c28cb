//! The validating decoder of the SMF's request bodies: bytes in, a typed
//! body or a ProblemDetails naming the field at fault out. Every body is
//! bounded before serde sees it (nesting depth, every string, every list,
//! every object), then read into the TS 29.512 types, then checked field by
//! field (mandatory fields present, values in range). Nothing here panics
//! on any input: the fuzz target `n7_decoder` holds it to that.

use super::model::{
    AccuUsageReport, Ambr, SmPolicyContextData, SmPolicyDeleteData, SmPolicyUpdateContextData,
    Snssai, SubscribedDefaultQos,
};
use crate::sbi::body::{bit_rate, check_identity, check_uri, parse_bounded, typed, DecodeLimits};
use crate::sbi::problem::ProblemDetails;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Longest DNN (an APN is at most 100 octets, TS 23.003 §9.1).
pub const MAX_DNN_BYTES: usize = 100;
/// Most usage reports or rule reports in one request.
pub const MAX_REPORTS: usize = 64;

/// The Create body (SmPolicyContextData), checked.
pub fn decode_create(
    body: &[u8],
    limits: &DecodeLimits,
) -> Result<SmPolicyContextData, ProblemDetails> {
    let value = parse_bounded(body, limits)?;
    let ctx: SmPolicyContextData = typed(value)?;
    check_identity("/supi", ctx.supi.as_deref(), true)?;
    check_identity("/gpsi", ctx.gpsi.as_deref(), false)?;
    check_identity("/pei", ctx.pei.as_deref(), false)?;
    match ctx.pdu_session_id {
        None => return Err(ProblemDetails::missing("/pduSessionId")),
        Some(id) if !(0..=255).contains(&id) => {
            return Err(ProblemDetails::incorrect(
                "/pduSessionId",
                format!("{id} is not in 0..=255"),
            ))
        }
        Some(_) => {}
    }
    if ctx.pdu_session_type.is_none() {
        return Err(ProblemDetails::missing("/pduSessionType"));
    }
    match ctx.dnn.as_deref() {
        None => return Err(ProblemDetails::missing("/dnn")),
        Some(d) if d.is_empty() || d.len() > MAX_DNN_BYTES => {
            return Err(ProblemDetails::incorrect(
                "/dnn",
                format!("must be 1 to {MAX_DNN_BYTES} bytes"),
            ))
        }
        Some(_) => {}
    }
    match ctx.notification_uri.as_deref() {
        None => return Err(ProblemDetails::missing("/notificationUri")),
        Some(uri) => check_uri("/notificationUri", uri)?,
    }
    match &ctx.slice_info {
        None => return Err(ProblemDetails::missing("/sliceInfo")),
        Some(s) => check_snssai("/sliceInfo", s)?,
    }
    check_addresses(
        ctx.ipv4_address.as_deref(),
        ctx.ipv6_address_prefix.as_deref(),
    )?;
    check_time_zone(ctx.ue_time_zone.as_deref())?;
    check_ambr("/subsSessAmbr", ctx.subs_sess_ambr.as_ref())?;
    check_default_qos("/subsDefQos", ctx.subs_def_qos.as_ref())?;
    if let Some(f) = ctx.supp_feat.as_deref() {
        if !f.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(ProblemDetails::optional_incorrect(
                "/suppFeat",
                "must be hexadecimal digits",
            ));
        }
    }
    Ok(ctx)
}

/// The Update body (SmPolicyUpdateContextData), checked.
pub fn decode_update(
    body: &[u8],
    limits: &DecodeLimits,
) -> Result<SmPolicyUpdateContextData, ProblemDetails> {
    let value = parse_bounded(body, limits)?;
    let up: SmPolicyUpdateContextData = typed(value)?;
    check_addresses(
        up.ipv4_address.as_deref(),
        up.ipv6_address_prefix.as_deref(),
    )?;
    check_time_zone(up.ue_time_zone.as_deref())?;
    check_ambr("/subsSessAmbr", up.subs_sess_ambr.as_ref())?;
    check_default_qos("/subsDefQos", up.subs_def_qos.as_ref())?;
    check_reports(&up.accu_usage_reports)?;
    if up.rule_reports.len() > MAX_REPORTS {
        return Err(ProblemDetails::optional_incorrect(
            "/ruleReports",
            format!("more than {MAX_REPORTS} reports"),
        ));
    }
    Ok(up)
}

/// The Delete body (SmPolicyDeleteData), checked. An empty body is an
/// empty SmPolicyDeleteData: every field of it is optional.
pub fn decode_delete(
    body: &[u8],
    limits: &DecodeLimits,
) -> Result<SmPolicyDeleteData, ProblemDetails> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(SmPolicyDeleteData::default());
    }
    let value = parse_bounded(body, limits)?;
    let del: SmPolicyDeleteData = typed(value)?;
    check_time_zone(del.ue_time_zone.as_deref())?;
    check_reports(&del.accu_usage_reports)?;
    Ok(del)
}

fn check_snssai(param: &str, s: &Snssai) -> Result<(), ProblemDetails> {
    match s.sd.as_deref() {
        Some(sd) if sd.len() != 6 || !sd.bytes().all(|b| b.is_ascii_hexdigit()) => Err(
            ProblemDetails::incorrect(&format!("{param}/sd"), "must be six hexadecimal digits"),
        ),
        _ => Ok(()),
    }
}

pub(crate) fn check_addresses(
    ipv4: Option<&str>,
    ipv6_prefix: Option<&str>,
) -> Result<(), ProblemDetails> {
    if let Some(a) = ipv4 {
        if a.parse::<Ipv4Addr>().is_err() {
            return Err(ProblemDetails::optional_incorrect(
                "/ipv4Address",
                "not an IPv4 address",
            ));
        }
    }
    if let Some(p) = ipv6_prefix {
        let ok = p.split_once('/').is_some_and(|(addr, len)| {
            addr.parse::<Ipv6Addr>().is_ok() && len.parse::<u8>().is_ok_and(|l| l <= 128)
        });
        if !ok {
            return Err(ProblemDetails::optional_incorrect(
                "/ipv6AddressPrefix",
                "not an IPv6 prefix (address/length)",
            ));
        }
    }
    Ok(())
}

/// TS 29.571 TimeZone: `+hh:mm` or `-hh:mm`, optionally `+1` or `+2`
/// (daylight saving).
fn check_time_zone(tz: Option<&str>) -> Result<(), ProblemDetails> {
    let Some(tz) = tz else { return Ok(()) };
    let b = tz.as_bytes();
    let base = b.len() >= 6
        && (b[0] == b'+' || b[0] == b'-')
        && b[1].is_ascii_digit()
        && b[2].is_ascii_digit()
        && b[3] == b':'
        && b[4].is_ascii_digit()
        && b[5].is_ascii_digit();
    let dst = matches!(
        &b.get(6..),
        Some([]) | Some([b'+', b'1']) | Some([b'+', b'2'])
    );
    if base && dst {
        Ok(())
    } else {
        Err(ProblemDetails::optional_incorrect(
            "/ueTimeZone",
            "not a time zone (+hh:mm, optionally +1 or +2)",
        ))
    }
}

fn check_ambr(param: &str, ambr: Option<&Ambr>) -> Result<(), ProblemDetails> {
    let Some(a) = ambr else { return Ok(()) };
    if bit_rate(&a.uplink).is_none() {
        return Err(ProblemDetails::optional_incorrect(
            &format!("{param}/uplink"),
            "not a bit rate",
        ));
    }
    if bit_rate(&a.downlink).is_none() {
        return Err(ProblemDetails::optional_incorrect(
            &format!("{param}/downlink"),
            "not a bit rate",
        ));
    }
    Ok(())
}

fn check_default_qos(param: &str, q: Option<&SubscribedDefaultQos>) -> Result<(), ProblemDetails> {
    let Some(q) = q else { return Ok(()) };
    if q.five_qi > 255 {
        return Err(ProblemDetails::optional_incorrect(
            &format!("{param}/5qi"),
            "not in 0..=255",
        ));
    }
    if let Some(p) = q.arp.priority_level {
        if !(1..=15).contains(&p) {
            return Err(ProblemDetails::optional_incorrect(
                &format!("{param}/arp/priorityLevel"),
                "not in 1..=15",
            ));
        }
    }
    Ok(())
}

fn check_reports(reports: &[AccuUsageReport]) -> Result<(), ProblemDetails> {
    if reports.len() > MAX_REPORTS {
        return Err(ProblemDetails::optional_incorrect(
            "/accuUsageReports",
            format!("more than {MAX_REPORTS} reports"),
        ));
    }
    for (i, r) in reports.iter().enumerate() {
        match r.ref_um_ids.as_deref() {
            None => {
                return Err(ProblemDetails::missing(&format!(
                    "/accuUsageReports/{i}/refUmIds"
                )))
            }
            Some(id) if id.is_empty() || id.len() > crate::policy::decision::MAX_NAME_BYTES => {
                return Err(ProblemDetails::incorrect(
                    &format!("/accuUsageReports/{i}/refUmIds"),
                    "must be 1 to 255 bytes",
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::n7::model::{AccessType, PduSessionType, RatType};
    use crate::sbi::problem::cause;
    use serde_json::Value;

    const OPEN5GS: &[u8] = include_bytes!("../../tests/n7/open5gs-create.json");
    const FREE5GC: &[u8] = include_bytes!("../../tests/n7/free5gc-create.json");
    const FREE5GC_UPDATE: &[u8] = include_bytes!("../../tests/n7/free5gc-update.json");

    fn limits() -> DecodeLimits {
        DecodeLimits::default()
    }

    fn without(body: &[u8], field: &str) -> Vec<u8> {
        let mut v: Value = serde_json::from_slice(body).expect("fixture");
        v.as_object_mut().expect("object").remove(field);
        serde_json::to_vec(&v).expect("json")
    }

    fn with(body: &[u8], field: &str, value: Value) -> Vec<u8> {
        let mut v: Value = serde_json::from_slice(body).expect("fixture");
        v[field] = value;
        serde_json::to_vec(&v).expect("json")
    }

    #[test]
    fn both_smfs_create_bodies_decode() {
        let o = decode_create(OPEN5GS, &limits()).expect("open5gs");
        assert_eq!(o.supi.as_deref(), Some("imsi-001010000000001"));
        assert_eq!(o.pdu_session_type, Some(PduSessionType::Ipv4));
        assert_eq!(o.rat_type, Some(RatType::Nr));
        assert_eq!(o.access_type, None);
        assert_eq!(o.subs_def_qos.as_ref().map(|q| q.five_qi), Some(9));
        let f = decode_create(FREE5GC, &limits()).expect("free5gc");
        assert_eq!(f.access_type, Some(AccessType::ThreeGpp));
        assert_eq!(
            f.slice_info.as_ref().and_then(|s| s.sd.as_deref()),
            Some("010203")
        );
        assert_eq!(f.supp_feat.as_deref(), Some("F"));
        let u = decode_update(FREE5GC_UPDATE, &limits()).expect("update");
        assert_eq!(u.accu_usage_reports[0].vol_usage, Some(1_000_000));
        assert_eq!(u.rule_reports[0].pcc_rule_ids, vec!["vip-video".to_owned()]);
    }

    #[test]
    fn every_mandatory_field_is_named_when_missing() {
        for (field, pointer) in [
            ("supi", "/supi"),
            ("pduSessionId", "/pduSessionId"),
            ("pduSessionType", "/pduSessionType"),
            ("dnn", "/dnn"),
            ("notificationUri", "/notificationUri"),
            ("sliceInfo", "/sliceInfo"),
        ] {
            let e = decode_create(&without(FREE5GC, field), &limits()).expect_err(field);
            assert_eq!(e.status, 400);
            assert_eq!(
                e.cause.as_deref(),
                Some(cause::MANDATORY_IE_MISSING),
                "{field}"
            );
            assert_eq!(e.invalid_params[0].param, pointer);
        }
    }

    #[test]
    fn wrong_values_are_named() {
        let cases: Vec<(&str, Value, &str, &str)> = vec![
            (
                "pduSessionId",
                serde_json::json!(300),
                "/pduSessionId",
                cause::MANDATORY_IE_INCORRECT,
            ),
            (
                "pduSessionId",
                serde_json::json!("one"),
                "/pduSessionId",
                cause::INVALID_MSG_FORMAT,
            ),
            (
                "dnn",
                serde_json::json!(""),
                "/dnn",
                cause::MANDATORY_IE_INCORRECT,
            ),
            (
                "notificationUri",
                serde_json::json!("ftp://x/y"),
                "/notificationUri",
                cause::MANDATORY_IE_INCORRECT,
            ),
            (
                "sliceInfo",
                serde_json::json!({"sst": 1, "sd": "xyz"}),
                "/sliceInfo/sd",
                cause::MANDATORY_IE_INCORRECT,
            ),
            (
                "sliceInfo",
                serde_json::json!({"sst": 256}),
                "/sliceInfo/sst",
                cause::INVALID_MSG_FORMAT,
            ),
            (
                "accessType",
                serde_json::json!("5G_SATELLITE"),
                "/accessType",
                cause::INVALID_MSG_FORMAT,
            ),
            (
                "ipv4Address",
                serde_json::json!("10.0.0.300"),
                "/ipv4Address",
                cause::OPTIONAL_IE_INCORRECT,
            ),
            (
                "ipv6AddressPrefix",
                serde_json::json!("2001:db8::"),
                "/ipv6AddressPrefix",
                cause::OPTIONAL_IE_INCORRECT,
            ),
            (
                "ueTimeZone",
                serde_json::json!("UTC"),
                "/ueTimeZone",
                cause::OPTIONAL_IE_INCORRECT,
            ),
            (
                "subsSessAmbr",
                serde_json::json!({"uplink": "fast", "downlink": "1 Gbps"}),
                "/subsSessAmbr/uplink",
                cause::OPTIONAL_IE_INCORRECT,
            ),
            (
                "supi",
                serde_json::json!(12),
                "/supi",
                cause::INVALID_MSG_FORMAT,
            ),
        ];
        for (field, value, pointer, want) in cases {
            let e = decode_create(&with(FREE5GC, field, value.clone()), &limits())
                .expect_err(&format!("{field} = {value}"));
            assert_eq!(e.cause.as_deref(), Some(want), "{field} = {value}");
            assert_eq!(e.invalid_params[0].param, pointer, "{field} = {value}");
        }
    }

    #[test]
    fn extensible_enumerations_keep_unknown_values() {
        let body = with(FREE5GC, "ratType", serde_json::json!("SATELLITE_NR"));
        let body = with(&body, "pduSessionType", serde_json::json!("IPV8"));
        let ctx = decode_create(&body, &limits()).expect("accepted");
        assert_eq!(ctx.rat_type, Some(RatType::Other("SATELLITE_NR".into())));
        assert_eq!(
            ctx.pdu_session_type
                .map(|t| t.as_str().to_owned())
                .as_deref(),
            Some("IPV8")
        );
        // Unknown fields are ignored.
        let body = with(
            FREE5GC,
            "vendorSpecific-000001",
            serde_json::json!({"x": [1, 2]}),
        );
        assert!(decode_create(&body, &limits()).is_ok());
    }

    #[test]
    fn bodies_past_the_bounds_are_refused_before_they_are_read() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let e = decode_create(deep.as_bytes(), &limits()).expect_err("deep");
        assert_eq!(e.cause.as_deref(), Some(cause::INVALID_MSG_FORMAT));
        // Brackets inside strings do not count.
        let quoted = with(
            FREE5GC,
            "dnnSelMode",
            Value::String("[[[[[[[[[[[[[[[[[[[[[[".into()),
        );
        assert!(decode_create(&quoted, &limits()).is_ok());
        let long = with(FREE5GC, "supi", Value::String("i".repeat(5000)));
        let e = decode_create(&long, &limits()).expect_err("long");
        assert_eq!(e.invalid_params[0].param, "/supi");
        let wide = with(
            FREE5GC,
            "interGrpIds",
            Value::Array(vec![Value::Null; 1000]),
        );
        let e = decode_create(&wide, &limits()).expect_err("wide");
        assert_eq!(e.invalid_params[0].param, "/interGrpIds");
        for bad in [&b"not json"[..], b"[]", b"", b"{\"supi\":", b"\xff\xfe"] {
            let e = decode_create(bad, &limits()).expect_err("bad");
            assert_eq!(e.cause.as_deref(), Some(cause::INVALID_MSG_FORMAT));
        }
    }

    #[test]
    fn usage_reports_need_their_key() {
        let body = br#"{"accuUsageReports": [{"refUmIds": "a", "volUsage": 1}, {"volUsage": 2}]}"#;
        let e = decode_update(body, &limits()).expect_err("missing key");
        assert_eq!(e.invalid_params[0].param, "/accuUsageReports/1/refUmIds");
        assert_eq!(e.cause.as_deref(), Some(cause::MANDATORY_IE_MISSING));
        assert_eq!(
            decode_delete(b"", &limits()).expect("empty"),
            SmPolicyDeleteData::default()
        );
        assert!(decode_delete(b"{}", &limits()).is_ok());
        assert!(decode_delete(b"[1]", &limits()).is_err());
    }

    #[test]
    fn bit_rates_read_as_the_spec_writes_them() {
        assert_eq!(bit_rate("1000 Mbps"), Some(1_000_000_000));
        assert_eq!(bit_rate("1.5 Kbps"), Some(1500));
        assert_eq!(bit_rate("7 bps"), Some(7));
        assert_eq!(bit_rate("1e9 bps"), None);
        assert_eq!(bit_rate("-1 bps"), None);
        assert_eq!(bit_rate("1 Mb"), None);
        assert_eq!(bit_rate("99999999999999999999999 Tbps"), None);
    }
}
