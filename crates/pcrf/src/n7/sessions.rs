//! The four Npcf_SMPolicyControl operations on the node's sessions: an SM
//! policy is a session record like a Gx session, under the same table,
//! locks, store, usage accumulators, events, Sy subscription and cluster
//! take-over, decided by the same policy. What differs is only what the
//! SMF said (the context kept in the record's `n7`), and how the decision
//! is written (`decision_map`) and pushed (`notify`).
//!
//! Each operation runs in the same envelope as a Diameter request
//! (`txn`): admission (503 NF_CONGESTION when shed) and the conflict
//! retry of a shared store. Store failures are answered 500
//! SYSTEM_FAILURE; nothing is acknowledged before it is durable.

use super::bsf_binding::BindingKeeper;
use super::decision_map;
use super::held::{changes_for_smf, held_by_smf, rule_reports, unchanged_but_usage, whole_at};
use super::model::{
    AccuUsageReport, SmPolicyContextData, SmPolicyControl, SmPolicyDecision, SmPolicyDeleteData,
    SmPolicyUpdateContextData,
};
use super::repeat::{self, RequestDigest};
use super::service::{Created, OpFuture, SmPolicyService};
use super::session_input::apply_update;
use crate::admission::Class;
use crate::config::UnknownSubscriber;
use crate::node::{now_ms, Capabilities, Sessions, Settings, Signalling, Subscribers, Telemetry};
use crate::pcc::UsageReport;
use crate::policy::decision::Decision;
use crate::rx::service::Rx;
use crate::sbi::problem::{cause, ProblemDetails};
use crate::session::{GxSession, SessionSlot, SessionState};
use crate::sy::service::Sy;
use crate::txn::session_step::{self, Closing, Decided, Granted, Step};
use crate::txn::{self, Runner};
use crate::usage::ServiceUnits;
use diameter::codec::DiameterError;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The realm an N7 session's record names in place of a PCEF's realm: the
/// SMF has none (it is reached by its notification URI).
pub const N7_REALM: &str = "5gc";

/// The N7 service: the policy core's side of the SBI routes.
pub struct N7 {
    sessions: Sessions,
    subscribers: Subscribers,
    signalling: Signalling,
    telemetry: Telemetry,
    settings: Settings,
    txn: Runner,
    rx: Arc<Rx>,
    sy: Arc<Sy>,
    /// The PCF bindings at the BSF.
    bindings: Arc<BindingKeeper>,
}

impl N7 {
    pub fn new(caps: &Capabilities, rx: Arc<Rx>, sy: Arc<Sy>) -> Arc<N7> {
        Arc::new(N7 {
            bindings: BindingKeeper::new(caps),
            sessions: caps.sessions.clone(),
            subscribers: caps.subscribers.clone(),
            signalling: caps.signalling.clone(),
            telemetry: caps.telemetry.clone(),
            settings: caps.settings.clone(),
            txn: Runner::new(caps),
            rx,
            sy,
        })
    }

    /// Where the SBI's resources are reached, and the peers' metrics.
    pub(crate) fn signalling(&self) -> &Signalling {
        &self.signalling
    }

    pub(crate) fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// What keeps the sessions' PCF bindings (its sweep runs beside the
    /// SBI listener).
    pub fn bindings(&self) -> Arc<BindingKeeper> {
        self.bindings.clone()
    }

    /// Runs `attempt` in the request envelope: admitted (or shed with 503
    /// NF_CONGESTION), handled again after a write conflict.
    async fn enveloped<T, F, Fut>(&self, class: Class, subject: &str, attempt: F) -> Op<T>
    where
        F: FnMut(usize) -> Fut,
        Fut: std::future::Future<Output = Result<Op<T>, DiameterError>>,
    {
        let Ok(_permit) = self.signalling.admission().admit(class, None) else {
            return Err(ProblemDetails::congestion());
        };
        match txn::retrying_conflicts(&self.txn, subject, attempt).await {
            Ok(r) => r,
            Err(e) => Err(ProblemDetails::system_failure(e.message.to_string())),
        }
    }

    async fn create_once(&self, ctx: &SmPolicyContextData) -> Result<Op<Created>, DiameterError> {
        let txn = &self.txn;
        let supi = ctx.supi.as_deref().unwrap_or("");
        let imsi = supi.strip_prefix("imsi-");
        let msisdn = ctx.gpsi.as_deref().and_then(|g| g.strip_prefix("msisdn-"));
        let sub = self.subscribers.find(imsi, msisdn);
        if sub.is_none()
            && self.settings.live().cfg.policy.unknown_subscriber == UnknownSubscriber::Reject
        {
            tracing::info!(supi, "unknown subscriber rejected (N7)");
            return Ok(Err(ProblemDetails::new(
                400,
                "Bad Request",
                cause::USER_UNKNOWN,
                format!("subscriber {supi} is not provisioned"),
            )));
        }
        let now = now_ms();
        let key = sub
            .as_ref()
            .map(|s| s.imsi.clone())
            .or_else(|| imsi.map(str::to_owned))
            .or_else(|| msisdn.map(str::to_owned))
            .unwrap_or_else(|| supi.to_owned());
        // PCF resource cleanup: a Create for a PDU session (SUPI and PDU
        // session id) that an open association here already serves means
        // the SMF no longer has that one (it lost the answer to its first
        // Create, or its own state). The old association is deleted first,
        // with its BSF binding and AF sessions, as its Delete would.
        for stale in self.associations_of(&key, ctx.pdu_session_id) {
            tracing::info!(session = %stale, supi, "N7 Create for a PDU session already served; the old association is deleted");
            self.delete_once(&stale, &SmPolicyDeleteData::default())
                .await?
                .ok();
        }
        let smf =
            crate::sbi::body::notification_authority(ctx.notification_uri.as_deref().unwrap_or(""));
        let mut s = GxSession::new(new_policy_id(), key, &smf, N7_REALM, now);
        s.set_identity(imsi, msisdn);
        s.n7 = Some(Box::new(ctx.clone()));
        mirror_context(&mut s);

        let Decided {
            verdict,
            mut pending,
        } = session_step::decide(txn, &self.sy, &mut s, Step::Open, &[], now, |_, d| d).await?;
        let (decision, reused) = match verdict {
            Ok(Granted {
                decision, reused, ..
            }) => (decision, reused),
            Err(rej) => return Ok(Err(decision_map::refusal(&rej))),
        };
        s.revalidation_at_ms = revalidation_at(&decision, now);
        let answer = whole_at(&decision, &s.monitoring, s.revalidation_at_ms);
        pending.install(txn, &mut s, decision, "create", reused);
        let s = Arc::new(s);
        session_step::commit_open(txn, s.clone(), pending).await?;
        self.bindings.bind(&s);
        Ok(Ok(Created {
            id: s.id.to_string(),
            decision: answer,
        }))
    }

    /// The open N7 sessions held here of subscriber `key` for PDU session
    /// `pdu_session_id` (none without one).
    fn associations_of(&self, key: &str, pdu_session_id: Option<i64>) -> Vec<String> {
        if pdu_session_id.is_none() {
            return Vec::new();
        }
        self.sessions
            .table()
            .list(
                Some(key),
                |s| {
                    is_open_sm_policy(s)
                        && s.n7
                            .as_deref()
                            .is_some_and(|c| c.pdu_session_id == pdu_session_id)
                },
                usize::MAX,
            )
            .into_iter()
            .map(|s| s.id.to_string())
            .collect()
    }

    /// The open N7 session `id`, taken over from another node if need be.
    /// A session taken over gets a PCF binding naming this txn, so that
    /// the BSF sends the AFs of the UE where the session is served now.
    async fn open_session(&self, id: &str) -> Result<Op<Arc<SessionSlot>>, DiameterError> {
        let held_here = self.sessions.table().get(id).is_some();
        let Some(slot) = self.sessions.find_or_take_over(id).await? else {
            return Ok(Err(not_found(id)));
        };
        let s = slot.load();
        if !is_open_sm_policy(&s) {
            return Ok(Err(not_found(id)));
        }
        if !held_here {
            self.bindings.bind(&s);
        }
        Ok(Ok(slot))
    }

    /// Runs `step` on the open SM policy `id`, held for one transaction
    /// (see `txn::with_session`); a problem when there is none. A session
    /// taken over from another node gets a PCF binding naming this txn,
    /// as in [`Self::open_session`].
    async fn on_open_session<R>(
        &self,
        id: &str,
        step: impl AsyncFnOnce(&SessionSlot, Arc<GxSession>) -> Result<Op<R>, DiameterError>,
    ) -> Result<Op<R>, DiameterError> {
        let held_here = self.sessions.table().get(id).is_some();
        let held = txn::with_session(&self.txn, id, async move |slot, cur| {
            if !is_open_sm_policy(&cur) {
                return Ok(Err(not_found(id)));
            }
            if !held_here {
                self.bindings.bind(&cur);
            }
            step(slot, cur).await
        });
        Ok(held.await?.unwrap_or_else(|| Err(not_found(id))))
    }

    async fn get_once(&self, id: &str) -> Result<Op<SmPolicyControl>, DiameterError> {
        // On a shared store another node may have served the SMF since: a
        // copy held here that is no longer current is dropped, and the
        // record read afresh (a write would find out by its conflict; a
        // read must look).
        self.sessions.moved_away(id).await;
        let slot = match self.open_session(id).await? {
            Ok(slot) => slot,
            Err(p) => return Ok(Err(p)),
        };
        let cur = slot.load();
        let Some(ctx) = cur.n7.as_deref() else {
            return Ok(Err(not_found(id)));
        };
        Ok(Ok(SmPolicyControl {
            context: ctx.clone(),
            policy: held_by_smf(&cur),
        }))
    }

    async fn update_once(
        &self,
        id: &str,
        up: &SmPolicyUpdateContextData,
        digest: RequestDigest,
    ) -> Result<Op<SmPolicyDecision>, DiameterError> {
        let held = self.on_open_session(id, async |slot, cur| {
            self.update(slot, cur, up, digest).await
        });
        held.await
    }

    /// An Update on the SM policy `cur`, held.
    async fn update(
        &self,
        slot: &SessionSlot,
        cur: Arc<GxSession>,
        up: &SmPolicyUpdateContextData,
        digest: RequestDigest,
    ) -> Result<Op<SmPolicyDecision>, DiameterError> {
        let txn = &self.txn;
        let now = now_ms();
        if let Some(answer) = self.repeated(&cur, digest, now) {
            return Ok(answer);
        }
        let mut s = (*cur).clone();
        if let Some(ctx) = s.n7.as_deref_mut() {
            apply_update(ctx, up);
        }
        mirror_context(&mut s);
        self.sessions
            .apply_rule_reports(&mut s, &rule_reports(&up.rule_reports));
        s.updated_ms = now;

        let reports = usage_reports(&up.accu_usage_reports);
        let Decided {
            verdict,
            mut pending,
        } = session_step::decide(txn, &self.sy, &mut s, Step::Update, &reports, now, |_, d| d)
            .await?;
        let (decision, fresh, reused, spent) = match verdict {
            Ok(Granted {
                decision,
                grants,
                reused,
                revalidation_spent_secs,
            }) => (decision, grants, reused, revalidation_spent_secs),
            Err(rej) => {
                // Refused or not, the usage happened: counted, once.
                let refused: Op<SmPolicyDecision> = Err(decision_map::refusal(&rej));
                s.last_answer = remembered(digest, s.updated_ms, &refused);
                pending.commit(txn, slot, Arc::new(s), None).await?;
                return Ok(refused);
            }
        };
        // Counted from when the decision was made (a reused one earlier).
        let made = now.saturating_sub(
            i64::try_from(spent)
                .unwrap_or(i64::MAX)
                .saturating_mul(1000),
        );
        s.revalidation_at_ms = revalidation_at(&decision, made);
        let answer = match unchanged_but_usage(&cur, &s, &decision, &fresh) {
            Some(answer) => answer,
            None => {
                let after = whole_at(&decision, &s.monitoring, s.revalidation_at_ms);
                changes_for_smf(&held_by_smf(&cur), &after, &fresh)
            }
        };
        pending.install(txn, &mut s, decision, "update", reused);
        // Remembered with the usage it counted (one write), so that the
        // SMF sending it again, here or at another txn, even after a
        // crash, is answered the same and counted once.
        let answer = Ok(answer);
        s.last_answer = remembered(digest, s.updated_ms, &answer);
        pending.commit(txn, slot, Arc::new(s), Some(&cur)).await?;
        Ok(answer)
    }

    /// The answer again when the Update with `digest` repeats the last
    /// one applied to `cur` (see `n7::repeat`): the same answer while
    /// nothing changed the session since, or else (a push went out
    /// meanwhile) the whole decision the SMF now holds, which it applies
    /// without change. Either way nothing is counted or decided again.
    fn repeated(
        &self,
        cur: &GxSession,
        digest: RequestDigest,
        now: i64,
    ) -> Option<Op<SmPolicyDecision>> {
        let window = self
            .settings
            .live()
            .cfg
            .sbi
            .as_ref()
            .map_or(0, |sbi| sbi.repeat_window_ms);
        let kept = cur.last_answer.as_deref()?;
        let again = repeat::recall(kept, digest, now, window)?;
        self.telemetry
            .counters()
            .retransmissions
            .fetch_add(1, Relaxed);
        tracing::info!(session = %cur.id, applied_ms = again.applied_ms, "N7 Update repeated by the SMF; answered again, not applied twice");
        let same = (cur.updated_ms == again.applied_ms)
            .then(|| serde_json::from_slice(again.answer_json).ok())
            .flatten();
        Some(same.unwrap_or_else(|| Ok(held_by_smf(cur))))
    }

    async fn delete_once(
        &self,
        id: &str,
        del: &SmPolicyDeleteData,
    ) -> Result<Op<()>, DiameterError> {
        let held = self.on_open_session(id, async |slot, cur| self.delete(slot, cur, del).await);
        held.await
    }

    /// A Delete of the SM policy `cur`, held.
    async fn delete(
        &self,
        slot: &SessionSlot,
        cur: Arc<GxSession>,
        del: &SmPolicyDeleteData,
    ) -> Result<Op<()>, DiameterError> {
        let txn = &self.txn;
        let now = now_ms();
        let mut s = (*cur).clone();
        if let Some(ctx) = s.n7.as_deref_mut() {
            if let Some(loc) = &del.user_location_info {
                ctx.user_location_info = Some(loc.clone());
            }
            if let Some(tz) = &del.ue_time_zone {
                ctx.ue_time_zone = Some(tz.clone());
            }
            if let Some(p) = &del.serving_network {
                ctx.serving_network = Some(p.clone());
            }
        }
        // The binding goes before the record says closed (see
        // `n7::bsf_binding`).
        if self.signalling.unbind_at_bsf(&cur).await {
            s.bsf_binding = None;
        }
        let reports = usage_reports(&del.accu_usage_reports);
        let closing = Closing {
            reports: &reports,
            answer: None,
            cause: "n7-delete",
            now,
        };
        session_step::close(txn, &self.rx, &self.sy, slot, &cur, s, closing).await?;
        Ok(Ok(()))
    }
}

/// An operation's result: its answer, or the problem it is refused with.
type Op<T> = Result<T, ProblemDetails>;

impl SmPolicyService for N7 {
    fn create(&self, ctx: SmPolicyContextData) -> OpFuture<'_, Created> {
        Box::pin(async move {
            let ctx = &ctx;
            let subject = ctx.supi.clone().unwrap_or_default();
            self.enveloped(Class::New, &subject, move |_| self.create_once(ctx))
                .await
        })
    }

    fn get(&self, id: &str) -> OpFuture<'_, SmPolicyControl> {
        let id = id.to_owned();
        Box::pin(async move {
            let id = id.as_str();
            self.enveloped(Class::Existing, id, move |_| self.get_once(id))
                .await
        })
    }

    fn update(
        &self,
        id: &str,
        update: SmPolicyUpdateContextData,
        digest: RequestDigest,
    ) -> OpFuture<'_, SmPolicyDecision> {
        let id = id.to_owned();
        Box::pin(async move {
            let (id, up) = (id.as_str(), &update);
            self.enveloped(Class::Existing, id, move |_| {
                self.update_once(id, up, digest)
            })
            .await
        })
    }

    fn delete(&self, id: &str, delete: SmPolicyDeleteData) -> OpFuture<'_, ()> {
        let id = id.to_owned();
        Box::pin(async move {
            let (id, del) = (id.as_str(), &delete);
            self.enveloped(Class::Existing, id, move |_| self.delete_once(id, del))
                .await
        })
    }
}

/// What a session record keeps of an applied Update: its digest, when,
/// and its answer (a decision, or the problem it was refused with).
fn remembered(
    digest: RequestDigest,
    applied_ms: i64,
    answer: &Op<SmPolicyDecision>,
) -> Option<bytes::Bytes> {
    let json = serde_json::to_vec(answer).ok()?;
    Some(repeat::remember(digest, applied_ms, &json))
}

/// Whether `s` is an open SM policy (not closed, not a Gx session):
/// checked when the slot is found and again under its lock.
fn is_open_sm_policy(s: &GxSession) -> bool {
    s.state == SessionState::Open && s.n7.is_some()
}

/// 404 CONTEXT_NOT_FOUND: no open SM policy by that id (never created,
/// deleted, or the id of a Gx session).
fn not_found(id: &str) -> ProblemDetails {
    ProblemDetails::new(
        404,
        "Not Found",
        cause::CONTEXT_NOT_FOUND,
        format!("no SM policy {id}"),
    )
}

/// A new SM policy id: 128 random bits in hex, so that no SMF can guess
/// (and so touch) another SMF's policies, and ids from different nodes of
/// a cluster never collide.
fn new_policy_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// Copies the context's DNN and UE addresses into the record's common
/// fields, where the Rx binding, the API and the console look for them.
fn mirror_context(s: &mut GxSession) {
    let Some(ctx) = s.n7.as_deref() else {
        return;
    };
    s.apn = ctx.dnn.as_deref().map(crate::session::shared_text::shared);
    s.ue_ipv4 = ctx.ipv4_address.as_deref().and_then(|a| a.parse().ok());
    s.ue_ipv6_prefix = ctx
        .ipv6_address_prefix
        .as_deref()
        .and_then(framed_ipv6_prefix_hex)
        .map(Into::into);
    s.device = ctx.pei.as_deref().map(Into::into);
}

/// An IPv6 prefix (`2001:db8:1::/64`) as the record keeps a Gx
/// Framed-IPv6-Prefix: hex of its AVP data (RFC 3162 §2.3: a reserved
/// octet, the length, the prefix's significant octets).
pub(crate) fn framed_ipv6_prefix_hex(text: &str) -> Option<String> {
    let (addr, len) = text.split_once('/')?;
    let addr: std::net::Ipv6Addr = addr.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    if len > 128 {
        return None;
    }
    let octets = addr.octets();
    let mut data = vec![0, len];
    data.extend_from_slice(&octets[..usize::from(len).div_ceil(8)]);
    Some(hex::encode(data))
}

/// The usage reports of an Update or Delete as the accumulators count
/// them: `refUmIds` is the Monitoring-Key, volumes are octets.
fn usage_reports(reports: &[AccuUsageReport]) -> Vec<UsageReport<'_>> {
    reports
        .iter()
        .filter_map(|r| {
            let key = r.ref_um_ids.as_deref()?;
            Some(UsageReport {
                key: key.as_bytes(),
                level: None,
                used: ServiceUnits {
                    total: r.vol_usage,
                    input: r.vol_usage_uplink,
                    output: r.vol_usage_downlink,
                    time: r.time_usage,
                },
            })
        })
        .collect()
}

/// When the SMF must come back (RE_TIMEOUT), Unix ms.
fn revalidation_at(d: &Decision, now: i64) -> Option<i64> {
    let secs = d
        .revalidation_secs?
        .min(crate::policy::decision::MAX_REVALIDATION_SECS);
    let ms = i64::try_from(secs).unwrap_or(i64::MAX).saturating_mul(1000);
    Some(now.saturating_add(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_prefix_is_kept_as_framed_ipv6_prefix_data() {
        assert_eq!(
            framed_ipv6_prefix_hex("2001:db8:1::/64").as_deref(),
            Some("004020010db800010000")
        );
        assert_eq!(framed_ipv6_prefix_hex("2001:db8::/129"), None);
        assert_eq!(framed_ipv6_prefix_hex("nonsense"), None);
        let hex = framed_ipv6_prefix_hex("2001:db8:1::/48").expect("prefix");
        let data = hex::decode(hex).expect("hex");
        let (addr, len) = crate::session::binding::ipv6_prefix(&data).expect("reads back");
        assert_eq!((addr.to_string().as_str(), len), ("2001:db8:1::", 48));
    }

    #[test]
    fn usage_reports_count_volumes_under_their_monitoring_key() {
        let reports = vec![
            AccuUsageReport {
                ref_um_ids: Some("monthly".into()),
                vol_usage: Some(1000),
                vol_usage_uplink: Some(400),
                vol_usage_downlink: Some(600),
                time_usage: Some(30),
            },
            AccuUsageReport::default(),
        ];
        let r = usage_reports(&reports);
        assert_eq!(r.len(), 1, "a report without a key counts nowhere");
        assert_eq!(r[0].key, b"monthly");
        assert_eq!(r[0].used.octets(), 1000);
        assert_eq!(r[0].used.time, Some(30));
    }

    #[test]
    fn the_notification_authority_is_the_smf() {
        assert_eq!(
            crate::sbi::body::notification_authority(
                "http://127.0.0.4:7777/nsmf-callback/v1/sm-policy-notify/1"
            ),
            "127.0.0.4:7777"
        );
        assert_eq!(
            crate::sbi::body::notification_authority("https://smf.5gc/cb"),
            "smf.5gc"
        );
    }

    #[test]
    fn ids_are_long_and_distinct() {
        let a = new_policy_id();
        assert_eq!(a.len(), 32);
        assert_ne!(a, new_policy_id());
    }
}
