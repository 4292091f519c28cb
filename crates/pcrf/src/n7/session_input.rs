//! The policy's view of a PDU session, from the SMF's Create body: the
//! common fields a Gx policy already reads (`apn`, `rat`, `ue_ipv4`, ...)
//! and the N7-only ones under `session.n7`. Pure: no clock, no store.

use super::model::{SmPolicyContextData, SmPolicyUpdateContextData};
use crate::policy::input::{Ipv4Input, N7SessionInput, SessionContext, SessionInput};
use crate::sbi::body::bit_rate;

impl SessionContext for SmPolicyContextData {
    fn session_input(&self) -> SessionInput {
        session_input(self)
    }
}

/// The session as the policy sees it. `ctx` must have passed
/// [`super::decode::decode_create`] (mandatory fields present).
pub fn session_input(ctx: &SmPolicyContextData) -> SessionInput {
    let rat = ctx.rat_type.as_ref().map(|r| r.as_str().to_owned().into());
    SessionInput {
        apn: ctx.dnn.as_deref().map(Into::into),
        rat,
        // The Gx IP-CAN-Type a 5G PDU session stands for (TS 29.212
        // §5.3.27: 3GPP-5GS over 3GPP access, Non-3GPP-5GS otherwise).
        ip_can_type: ctx.access_type.map(|a| {
            match a {
                super::model::AccessType::ThreeGpp => "3GPP-5GS",
                super::model::AccessType::Non3Gpp => "Non-3GPP-5GS",
            }
            .into()
        }),
        ue_ipv4: ctx.ipv4_address.as_deref().map(Ipv4Input::of_text),
        ue_ipv6_prefix: ctx.ipv6_address_prefix.as_deref().map(Into::into),
        location: ctx
            .user_location_info
            .as_ref()
            .map(|l| l.to_string().into()),
        ms_timezone: ctx.ue_time_zone.as_deref().map(Into::into),
        device: ctx.pei.as_deref().map(Into::into),
        pcef: notification_host(ctx.notification_uri.as_deref().unwrap_or("")).into(),
        installed: Default::default(),
        rule_failures: Vec::new(),
        n7: Some(N7SessionInput {
            access_type: ctx.access_type.map(|a| a.as_str().to_owned()),
            supi: ctx.supi.clone().unwrap_or_default(),
            gpsi: ctx.gpsi.clone(),
            pdu_session_id: ctx
                .pdu_session_id
                .and_then(|id| u8::try_from(id).ok())
                .unwrap_or(0),
            pdu_session_type: ctx
                .pdu_session_type
                .as_ref()
                .map(|t| t.as_str().to_owned())
                .unwrap_or_default(),
            dnn: ctx.dnn.clone().unwrap_or_default(),
            sst: ctx.slice_info.as_ref().map_or(0, |s| s.sst),
            sd: ctx.slice_info.as_ref().and_then(|s| s.sd.clone()),
            serving_network: ctx
                .serving_network
                .as_ref()
                .map(|p| format!("{}-{}", p.mcc, p.mnc)),
            subscribed_ambr_ul: ctx
                .subs_sess_ambr
                .as_ref()
                .and_then(|a| bit_rate(&a.uplink)),
            subscribed_ambr_dl: ctx
                .subs_sess_ambr
                .as_ref()
                .and_then(|a| bit_rate(&a.downlink)),
            subscribed_5qi: ctx.subs_def_qos.as_ref().map(|q| u32::from(q.five_qi)),
        }),
    }
}

/// The SMF's context with what an Update changes: access and RAT type,
/// serving network, location, time zone, UE addresses (a released address
/// is forgotten), the subscribed AMBR and default QoS. The context is what
/// the session stores, so the policy and a Get see the PDU session as it
/// is now.
pub fn apply_update(ctx: &mut SmPolicyContextData, up: &SmPolicyUpdateContextData) {
    if let Some(a) = up.access_type {
        ctx.access_type = Some(a);
    }
    if let Some(rat) = &up.rat_type {
        ctx.rat_type = Some(rat.clone());
    }
    if let Some(p) = &up.serving_network {
        ctx.serving_network = Some(p.clone());
    }
    if let Some(loc) = &up.user_location_info {
        ctx.user_location_info = Some(loc.clone());
    }
    if let Some(tz) = &up.ue_time_zone {
        ctx.ue_time_zone = Some(tz.clone());
    }
    if up.rel_ipv4_address.is_some() && up.rel_ipv4_address == ctx.ipv4_address {
        ctx.ipv4_address = None;
    }
    if let Some(a) = &up.ipv4_address {
        ctx.ipv4_address = Some(a.clone());
    }
    if up.rel_ipv6_address_prefix.is_some() && up.rel_ipv6_address_prefix == ctx.ipv6_address_prefix
    {
        ctx.ipv6_address_prefix = None;
    }
    if let Some(p) = &up.ipv6_address_prefix {
        ctx.ipv6_address_prefix = Some(p.clone());
    }
    if let Some(a) = &up.subs_sess_ambr {
        ctx.subs_sess_ambr = Some(a.clone());
    }
    if let Some(q) = &up.subs_def_qos {
        ctx.subs_def_qos = Some(q.clone());
    }
}

/// The host (and port) of the SMF's notification URI: on N7 the peer the
/// policy sees in `session.pcef`.
fn notification_host(uri: &str) -> String {
    let rest = uri
        .strip_prefix("http://")
        .or_else(|| uri.strip_prefix("https://"))
        .unwrap_or(uri);
    rest.split('/').next().unwrap_or("").to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::n7::decode::{decode_create, decode_update};
    use crate::sbi::body::DecodeLimits;

    #[test]
    fn the_policy_sees_the_pdu_session() {
        let ctx = decode_create(
            include_bytes!("../../tests/n7/free5gc-create.json"),
            &DecodeLimits::default(),
        )
        .expect("decodes");
        let s = session_input(&ctx);
        assert_eq!(s.apn.as_deref(), Some("internet"));
        assert_eq!(s.rat.as_deref(), Some("NR"));
        assert_eq!(s.ip_can_type.as_deref(), Some("3GPP-5GS"));
        assert_eq!(s.ue_ipv4, Some("10.60.0.1".into()));
        assert_eq!(s.ms_timezone.as_deref(), Some("+08:00+1"));
        assert_eq!(s.device.as_deref(), Some("imeisv-1110000000000000"));
        assert_eq!(&*s.pcef, "127.0.0.2:8000");
        assert!(s
            .location
            .as_deref()
            .is_some_and(|l| l.contains("nrLocation")));
        let n7 = s.n7.clone().expect("n7");
        assert_eq!(n7.access_type.as_deref(), Some("3GPP_ACCESS"));
        assert_eq!(n7.supi, "imsi-208930000000003");
        assert_eq!(n7.gpsi.as_deref(), Some("msisdn-0900000000"));
        assert_eq!(n7.pdu_session_id, 10);
        assert_eq!((n7.sst, n7.sd.as_deref()), (1, Some("010203")));
        assert_eq!(n7.serving_network.as_deref(), Some("208-93"));
        assert_eq!(n7.subscribed_ambr_dl, Some(1_000_000_000));
        assert_eq!(n7.subscribed_5qi, Some(9));

        let up = decode_update(
            include_bytes!("../../tests/n7/free5gc-update.json"),
            &DecodeLimits::default(),
        )
        .expect("decodes");
        let mut ctx = ctx;
        apply_update(&mut ctx, &up);
        assert_eq!(session_input(&ctx).ue_ipv4, Some("10.60.0.9".into()));
    }
}
