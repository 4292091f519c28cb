//! The N5 request bodies checked and turned into what the AF flows read:
//! the bounds and JSON checks are N7's (`n7::decode`), and the media
//! components become the Rx media model (`policy::media`), so one policy
//! hook (`authorize_media`) and one set of AF flows serve Rx and N5.

use super::model::{
    AppSessionContext, AppSessionContextReqData, AppSessionContextUpdateData,
    AppSessionContextUpdateDataPatch, EventsSubscReqData, MediaComponent,
};
use crate::policy::media;
use crate::rx::valid_flow_description;
use crate::sbi::body::{bit_rate, check_identity, check_uri, parse_bounded, typed, DecodeLimits};
use crate::sbi::problem::ProblemDetails;
use std::net::{Ipv4Addr, Ipv6Addr};

/// The Create body (AppSessionContext), checked: its request data.
pub fn decode_create(
    body: &[u8],
    limits: &DecodeLimits,
) -> Result<AppSessionContextReqData, ProblemDetails> {
    let ctx: AppSessionContext = typed(parse_bounded(body, limits)?)?;
    let Some(req) = ctx.asc_req_data else {
        return Err(ProblemDetails::missing("/ascReqData"));
    };
    match req.notif_uri.as_deref() {
        None => return Err(ProblemDetails::missing("/ascReqData/notifUri")),
        Some(uri) => check_uri("/ascReqData/notifUri", uri)?,
    }
    match req.supp_feat.as_deref() {
        None => return Err(ProblemDetails::missing("/ascReqData/suppFeat")),
        Some(f) if !f.bytes().all(|b| b.is_ascii_hexdigit()) => {
            return Err(ProblemDetails::incorrect(
                "/ascReqData/suppFeat",
                "must be hexadecimal digits",
            ))
        }
        Some(_) => {}
    }
    if req.ue_ipv4.is_none() && req.ue_ipv6.is_none() {
        return Err(ProblemDetails::missing("/ascReqData/ueIpv4"));
    }
    if req
        .ue_ipv4
        .as_deref()
        .is_some_and(|a| a.parse::<Ipv4Addr>().is_err())
    {
        return Err(ProblemDetails::incorrect(
            "/ascReqData/ueIpv4",
            "not an IPv4 address",
        ));
    }
    if req
        .ue_ipv6
        .as_deref()
        .is_some_and(|a| a.parse::<Ipv6Addr>().is_err())
    {
        return Err(ProblemDetails::incorrect(
            "/ascReqData/ueIpv6",
            "not an IPv6 address",
        ));
    }
    check_identity("/ascReqData/supi", req.supi.as_deref(), false)?;
    check_identity("/ascReqData/gpsi", req.gpsi.as_deref(), false)?;
    check_identity("/ascReqData/afAppId", req.af_app_id.as_deref(), false)?;
    check_identity("/ascReqData/dnn", req.dnn.as_deref(), false)?;
    check_events(req.ev_subsc.as_ref())?;
    for (key, m) in &req.med_components {
        rx_media(key, m)?;
    }
    Ok(req)
}

/// The PATCH body (AppSessionContextUpdateDataPatch), checked: its update.
pub fn decode_patch(
    body: &[u8],
    limits: &DecodeLimits,
) -> Result<AppSessionContextUpdateData, ProblemDetails> {
    let patch: AppSessionContextUpdateDataPatch = typed(parse_bounded(body, limits)?)?;
    let up = patch.asc_req_data.unwrap_or_default();
    check_identity("/ascReqData/afAppId", up.af_app_id.as_deref(), false)?;
    check_events(up.ev_subsc.as_ref())?;
    for (key, m) in &up.med_components {
        if let Some(m) = m {
            rx_media(key, m)?;
        } else if key.parse::<u32>().is_err() {
            return Err(ProblemDetails::incorrect(
                &format!("/ascReqData/medComponents/{key}"),
                "a removed media component is named by its number",
            ));
        }
    }
    Ok(up)
}

/// The delete body (EventsSubscReqData, optional), checked: an empty
/// body is none; anything else must be that object.
pub fn decode_delete(
    body: &[u8],
    limits: &DecodeLimits,
) -> Result<Option<EventsSubscReqData>, ProblemDetails> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let ev: EventsSubscReqData = typed(parse_bounded(body, limits)?)?;
    check_events(Some(&ev))?;
    Ok(Some(ev))
}

fn check_events(ev: Option<&EventsSubscReqData>) -> Result<(), ProblemDetails> {
    if let Some(uri) = ev.and_then(|e| e.notif_uri.as_deref()) {
        check_uri("/ascReqData/evSubsc/notifUri", uri)?;
    }
    Ok(())
}

/// The Rx Specific-Actions (TS 29.214 §5.3.31) an AF's event
/// subscriptions stand for (TS 29.514 §5.6.3.3 AfEvent); events without
/// an Rx counterpart are not subscribed.
pub fn specific_actions(ev: Option<&EventsSubscReqData>) -> Vec<u32> {
    let mut out: Vec<u32> = ev
        .map(|e| e.events.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| {
            Some(match e.event.as_str() {
                "CHARGING_CORRELATION" => 1,
                "ACCESS_TYPE_CHANGE" => 6,
                "FAILED_RESOURCES_ALLOCATION" => 9,
                "ANI_REPORT" => 12,
                "SUCCESSFUL_RESOURCES_ALLOCATION" => 16,
                _ => return None,
            })
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The AfEvent an Rx Specific-Action is notified as.
pub fn af_event(action: i32) -> &'static str {
    match action {
        1 => "CHARGING_CORRELATION",
        6 => "ACCESS_TYPE_CHANGE",
        9 => "FAILED_RESOURCES_ALLOCATION",
        12 => "ANI_REPORT",
        16 => "SUCCESSFUL_RESOURCES_ALLOCATION",
        _ => "QOS_NOTIF",
    }
}

fn flow_status(param: &str, s: Option<&str>) -> Result<Option<u32>, ProblemDetails> {
    Ok(Some(match s {
        None => return Ok(None),
        Some("ENABLED-UPLINK") => 0,
        Some("ENABLED-DOWNLINK") => 1,
        Some("ENABLED") => 2,
        Some("DISABLED") => 3,
        Some("REMOVED") => 4,
        Some(other) => {
            return Err(ProblemDetails::optional_incorrect(
                param,
                format!("{other:?} is not a FlowStatus"),
            ))
        }
    }))
}

fn rate(param: &str, r: Option<&str>) -> Result<Option<u32>, ProblemDetails> {
    match r {
        None => Ok(None),
        Some(t) => bit_rate(t)
            .map(|b| Some(u32::try_from(b).unwrap_or(u32::MAX)))
            .ok_or_else(|| ProblemDetails::optional_incorrect(param, "not a bit rate")),
    }
}

/// One media component as the Rx media model holds it (`key` is its map
/// key, for the error's location).
pub fn rx_media(key: &str, m: &MediaComponent) -> Result<media::MediaComponent, ProblemDetails> {
    let at = format!("/ascReqData/medComponents/{key}");
    let Some(number) = m.med_comp_n else {
        return Err(ProblemDetails::missing(&format!("{at}/medCompN")));
    };
    const TYPES: [&str; 8] = [
        "AUDIO",
        "VIDEO",
        "DATA",
        "APPLICATION",
        "CONTROL",
        "TEXT",
        "MESSAGE",
        "OTHER",
    ];
    if let Some(t) = m.med_type.as_deref() {
        if !TYPES.contains(&t) {
            return Err(ProblemDetails::optional_incorrect(
                &format!("{at}/medType"),
                format!("{t:?} is not a MediaType"),
            ));
        }
    }
    let mut sub_components = Vec::new();
    for (skey, s) in &m.med_sub_comps {
        let sat = format!("{at}/medSubComps/{skey}");
        let Some(flow_number) = s.f_num else {
            return Err(ProblemDetails::missing(&format!("{sat}/fNum")));
        };
        for (i, f) in s.f_descs.iter().enumerate() {
            if !valid_flow_description(f) {
                return Err(ProblemDetails::incorrect(
                    &format!("{sat}/fDescs/{i}"),
                    "not an IPFilterRule (permit in|out proto from A to B)",
                ));
            }
        }
        sub_components.push(media::MediaSubComponent {
            flow_number,
            flows: s.f_descs.clone(),
            flow_usage: match s.flow_usage.as_deref() {
                None => None,
                Some("NO_INFO") => Some(0),
                Some("RTCP") => Some(1),
                Some("AF_SIGNALLING") => Some(2),
                Some(other) => {
                    return Err(ProblemDetails::optional_incorrect(
                        &format!("{sat}/flowUsage"),
                        format!("{other:?} is not a FlowUsage"),
                    ))
                }
            },
            flow_status: flow_status(&format!("{sat}/fStatus"), s.f_status.as_deref())?,
            max_ul: rate(&format!("{sat}/marBwUl"), s.mar_bw_ul.as_deref())?,
            max_dl: rate(&format!("{sat}/marBwDl"), s.mar_bw_dl.as_deref())?,
        });
    }
    Ok(media::MediaComponent {
        number,
        media_type: m.med_type.clone(),
        max_ul: rate(&format!("{at}/marBwUl"), m.mar_bw_ul.as_deref())?,
        max_dl: rate(&format!("{at}/marBwDl"), m.mar_bw_dl.as_deref())?,
        rr_bandwidth: rate(&format!("{at}/rrBw"), m.rr_bw.as_deref())?,
        rs_bandwidth: rate(&format!("{at}/rsBw"), m.rs_bw.as_deref())?,
        flow_status: flow_status(&format!("{at}/fStatus"), m.f_status.as_deref())?,
        codec_data: m.codecs.clone(),
        sub_components,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: &str = r#"{"ascReqData": {
        "afAppId": "IMS Services", "notifUri": "http://127.0.0.9:8000/af/1",
        "ueIpv4": "10.45.0.2", "dnn": "ims", "supi": "imsi-001010000000001",
        "suppFeat": "0",
        "evSubsc": {"events": [{"event": "FAILED_RESOURCES_ALLOCATION"}, {"event": "QOS_NOTIF"}]},
        "medComponents": {"1": {"medCompN": 1, "medType": "AUDIO", "marBwUl": "64 Kbps",
            "marBwDl": "48 Kbps", "fStatus": "ENABLED",
            "medSubComps": {"1": {"fNum": 1, "fDescs": [
                "permit out 17 from 192.0.2.9 5000 to 10.45.0.2 4000",
                "permit in 17 from 10.45.0.2 4000 to 192.0.2.9 5000"]}}}}}}"#;

    #[test]
    fn a_voice_call_reads_as_rx_media() {
        let req = decode_create(CALL.as_bytes(), &DecodeLimits::default()).expect("decodes");
        let m = rx_media("1", &req.med_components["1"]).expect("media");
        assert_eq!(m.media_type.as_deref(), Some("AUDIO"));
        assert_eq!((m.max_ul, m.max_dl), (Some(64_000), Some(48_000)));
        assert_eq!(m.flow_status, Some(2));
        assert_eq!(m.sub_components[0].flows.len(), 2);
        assert_eq!(specific_actions(req.ev_subsc.as_ref()), vec![9]);
    }

    #[test]
    fn bad_bodies_name_the_field() {
        let limits = DecodeLimits::default();
        let e = decode_create(
            br#"{"ascReqData": {"suppFeat": "0", "ueIpv4": "10.0.0.1"}}"#,
            &limits,
        )
        .expect_err("no notifUri");
        assert_eq!(e.status, 400);
        assert!(e.invalid_params[0].param.ends_with("/notifUri"), "{e:?}");
        let bad_flow = CALL.replace("permit out 17", "allow out 17");
        let e = decode_create(bad_flow.as_bytes(), &limits).expect_err("bad flow");
        assert!(e.invalid_params[0].param.contains("/fDescs/"), "{e:?}");
        let no_ue = CALL.replace("\"ueIpv4\": \"10.45.0.2\",", "");
        assert!(decode_create(no_ue.as_bytes(), &limits).is_err());
        let patch = decode_patch(
            br#"{"ascReqData": {"medComponents": {"2": null}}}"#,
            &limits,
        )
        .expect("removal");
        assert_eq!(patch.med_components["2"], None);
    }
}
