//! The N5 application sessions on the node's sessions: an AF's request
//! is read as the Rx flows read an AAR (`rx::Aar`, the one neutral shape
//! of "an AF asks for media"), and `Rx::authorize` binds it to the PDU
//! (or IP-CAN) session at the UE address, runs the policy's media hook,
//! pushes the rules to the SMF (or PCEF) and stores the AF session in the
//! session's record. What comes back is answered as TS 29.514 says.
//!
//! Requests run in the request envelope (admission: 503 NF_CONGESTION
//! when shed; the conflict retry of a shared store).

use super::decode::{rx_media, specific_actions};
use super::model::{
    AppSessionContext, AppSessionContextReqData, AppSessionContextUpdateData, MediaComponent,
    MediaSubComponent,
};
use crate::admission::Class;
use crate::node::{Capabilities, Signalling};
use crate::policy::media;
use crate::rx::service::{AfOutcome, Rx, IP_CAN_SESSION_NOT_AVAILABLE};
use crate::rx::{Aar, RxRequestType};
use crate::sbi::body::bit_rate_text;
use crate::sbi::problem::{cause, ProblemDetails};
use crate::session::af::AfSession;
use crate::session::GxSession;
use crate::session_message::Outcome;
use crate::txn::{self, Runner};
use diameter::result_code;
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// The realm an N5 AF's session names in place of a Diameter realm.
const N5_REALM: &str = "5gc";

/// The N5 service.
pub struct AppSessions {
    signalling: Signalling,
    txn: Runner,
    rx: Arc<Rx>,
}

/// An operation's result: its answer, or the problem it is refused with.
pub type Op<T> = Result<T, ProblemDetails>;

impl AppSessions {
    /// Where the SBI's resources are reached.
    pub(crate) fn signalling(&self) -> &Signalling {
        &self.signalling
    }

    pub fn new(caps: &Capabilities, rx: Arc<Rx>) -> Arc<AppSessions> {
        Arc::new(AppSessions {
            signalling: caps.signalling.clone(),
            txn: Runner::new(caps),
            rx,
        })
    }

    fn admit(&self, class: Class) -> Result<crate::admission::Permit<'_>, ProblemDetails> {
        self.signalling
            .admission()
            .admit(class, None)
            .map_err(|_| ProblemDetails::congestion())
    }

    /// Create: the new application session's id and its context.
    pub async fn create(&self, req: AppSessionContextReqData) -> Op<(String, AppSessionContext)> {
        let _permit = self.admit(Class::New)?;
        let id = format!("{:032x}", rand::random::<u128>());
        let notif = req.notif_uri.as_deref().unwrap_or("");
        let host = crate::sbi::body::notification_authority(notif);
        let ue_ipv4 = req
            .ue_ipv4
            .as_deref()
            .and_then(|a| a.parse::<Ipv4Addr>().ok());
        // A UE address as Framed-IPv6-Prefix data (a /128), as an AAR
        // carries it: the binding finds the prefix holding it.
        let ue_ipv6 = req
            .ue_ipv6
            .as_deref()
            .and_then(|a| a.parse::<Ipv6Addr>().ok())
            .map(|a| {
                let mut data = vec![0u8, 128];
                data.extend_from_slice(&a.octets());
                data
            });
        let mut media = Vec::new();
        for (key, m) in &req.med_components {
            media.push(rx_media(key, m)?);
        }
        let aar = Aar {
            session_id: &id,
            origin_host: &host,
            origin_realm: N5_REALM,
            request_type: Some(RxRequestType::Initial),
            ue_ipv4,
            ue_ipv6_prefix: ue_ipv6.as_deref(),
            imsi: req.supi.as_deref().and_then(|s| s.strip_prefix("imsi-")),
            msisdn: req.gpsi.as_deref().and_then(|g| g.strip_prefix("msisdn-")),
            apn: req.dnn.as_deref(),
            application: req.af_app_id.clone(),
            charging_id: req.af_charg_id.as_deref().map(str::as_bytes),
            service_urn: None,
            specific_actions: specific_actions(req.ev_subsc.as_ref()),
            media,
            notification_uri: Some(notif),
        };
        let outcome = self.authorize(&aar).await?;
        let s = installed(outcome)?;
        let context = context_of(&s, &id).ok_or_else(|| not_found(&id))?;
        Ok((id, context))
    }

    /// The AF session `id` and the session it is bound to (taken over
    /// from another node if need be).
    async fn bound(&self, id: &str) -> Op<(Arc<GxSession>, AfSession)> {
        let slot = self
            .rx
            .bound_af_or_take_over(id)
            .await
            .map_err(|e| ProblemDetails::system_failure(e.message.to_string()))?
            .ok_or_else(|| not_found(id))?;
        let s = slot.load();
        let af =
            s.af.iter()
                .find(|a| a.id == id && a.notification_uri.is_some())
                .cloned()
                .ok_or_else(|| not_found(id))?;
        Ok((s, af))
    }

    /// Get: the application session's context as it stands.
    pub async fn get(&self, id: &str) -> Op<AppSessionContext> {
        let _permit = self.admit(Class::Existing)?;
        let (s, _) = self.bound(id).await?;
        context_of(&s, id).ok_or_else(|| not_found(id))
    }

    /// Update (PATCH): media added, changed or removed (`null`), events.
    pub async fn update(&self, id: &str, up: AppSessionContextUpdateData) -> Op<AppSessionContext> {
        let _permit = self.admit(Class::Existing)?;
        let (_, af) = self.bound(id).await?;
        let mut media = Vec::new();
        for (key, m) in &up.med_components {
            media.push(match m {
                Some(m) => rx_media(key, m)?,
                // Removed: as an AAR removes a component (Flow-Status
                // REMOVED); the key is its number (checked when decoded).
                None => media::MediaComponent {
                    number: key.parse().unwrap_or_default(),
                    flow_status: Some(4),
                    ..media::MediaComponent::default()
                },
            });
        }
        let aar = Aar {
            session_id: id,
            origin_host: &af.af_host,
            origin_realm: N5_REALM,
            request_type: Some(RxRequestType::Update),
            application: up.af_app_id.clone(),
            specific_actions: specific_actions(up.ev_subsc.as_ref()),
            media,
            ..Aar::default()
        };
        let outcome = self.authorize(&aar).await?;
        let s = installed(outcome)?;
        context_of(&s, id).ok_or_else(|| not_found(id))
    }

    /// Delete: the AF session ends, its rules removed at the SMF.
    pub async fn delete(&self, id: &str) -> Op<()> {
        let _permit = self.admit(Class::Existing)?;
        let code = txn::retrying_conflicts(&self.txn, id, |_| self.rx.end_af(id, None))
            .await
            .map_err(|e| ProblemDetails::system_failure(e.message.to_string()))?;
        match code {
            result_code::DIAMETER_SUCCESS => Ok(()),
            _ => Err(not_found(id)),
        }
    }

    async fn authorize(&self, aar: &Aar<'_>) -> Op<AfOutcome> {
        txn::retrying_conflicts(&self.txn, aar.session_id, |_| self.rx.authorize(aar))
            .await
            .map_err(|e| ProblemDetails::system_failure(e.message.to_string()))
    }
}

/// The session the AF's media were installed in, or the refusal as TS
/// 29.514 answers it.
fn installed(outcome: AfOutcome) -> Op<Arc<GxSession>> {
    match outcome {
        AfOutcome::Installed(s) => Ok(s),
        AfOutcome::Refused(Outcome::Experimental(IP_CAN_SESSION_NOT_AVAILABLE), why) => {
            Err(ProblemDetails::new(
                500,
                "Internal Server Error",
                cause::PDU_SESSION_NOT_AVAILABLE,
                why,
            ))
        }
        AfOutcome::Refused(
            Outcome::Experimental(crate::rx::service::REQUESTED_SERVICE_NOT_AUTHORIZED),
            why,
        ) => Err(ProblemDetails::new(
            403,
            "Forbidden",
            cause::REQUESTED_SERVICE_NOT_AUTHORIZED,
            why,
        )),
        AfOutcome::Refused(Outcome::Result(result_code::DIAMETER_UNKNOWN_SESSION_ID), why) => {
            Err(ProblemDetails::new(
                404,
                "Not Found",
                cause::APPLICATION_SESSION_CONTEXT_NOT_FOUND,
                why,
            ))
        }
        AfOutcome::Refused(_, why) => Err(ProblemDetails::system_failure(why)),
    }
}

fn not_found(id: &str) -> ProblemDetails {
    ProblemDetails::new(
        404,
        "Not Found",
        cause::APPLICATION_SESSION_CONTEXT_NOT_FOUND,
        format!("no application session {id}"),
    )
}

/// The AF session `id` of `s` as an AppSessionContext.
fn context_of(s: &GxSession, id: &str) -> Option<AppSessionContext> {
    let af = s.af.iter().find(|a| a.id == id)?;
    let n7 = s.n7.as_deref();
    Some(AppSessionContext {
        asc_req_data: Some(AppSessionContextReqData {
            af_app_id: af.application.clone(),
            notif_uri: af.notification_uri.clone(),
            ue_ipv4: s.ue_ipv4.map(|a| a.to_string()),
            ue_ipv6: None,
            dnn: s.apn.as_deref().map(str::to_owned),
            supi: n7.and_then(|c| c.supi.clone()),
            gpsi: n7.and_then(|c| c.gpsi.clone()),
            af_charg_id: None,
            med_components: af
                .media
                .iter()
                .map(|m| (m.number.to_string(), n5_media(m)))
                .collect(),
            ev_subsc: None,
            supp_feat: Some("0".to_owned()),
        }),
    })
}

fn status_text(s: Option<u32>) -> Option<String> {
    Some(
        match s? {
            0 => "ENABLED-UPLINK",
            1 => "ENABLED-DOWNLINK",
            2 => "ENABLED",
            3 => "DISABLED",
            _ => "REMOVED",
        }
        .to_owned(),
    )
}

fn rate_text(r: Option<u32>) -> Option<String> {
    r.map(|b| bit_rate_text(u64::from(b)))
}

/// A media component of the Rx model as N5 writes it.
fn n5_media(m: &media::MediaComponent) -> MediaComponent {
    MediaComponent {
        med_comp_n: Some(m.number),
        med_type: m.media_type.clone(),
        f_status: status_text(m.flow_status),
        mar_bw_ul: rate_text(m.max_ul),
        mar_bw_dl: rate_text(m.max_dl),
        rr_bw: rate_text(m.rr_bandwidth),
        rs_bw: rate_text(m.rs_bandwidth),
        codecs: m.codec_data.clone(),
        med_sub_comps: m
            .sub_components
            .iter()
            .map(|s| {
                (
                    s.flow_number.to_string(),
                    MediaSubComponent {
                        f_num: Some(s.flow_number),
                        f_descs: s.flows.clone(),
                        f_status: status_text(s.flow_status),
                        flow_usage: s.flow_usage.map(|u| {
                            match u {
                                1 => "RTCP",
                                2 => "AF_SIGNALLING",
                                _ => "NO_INFO",
                            }
                            .to_owned()
                        }),
                        mar_bw_ul: rate_text(s.max_ul),
                        mar_bw_dl: rate_text(s.max_dl),
                    },
                )
            })
            .collect::<BTreeMap<_, _>>(),
    }
}
