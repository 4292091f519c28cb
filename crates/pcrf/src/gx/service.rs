//! How the node answers each Gx CCR: CCR-I opens the session and decides
//! it, CCR-U applies what the PCEF reported (usage, rule failures, location)
//! and re-decides when an input changed, CCR-T closes it and releases what
//! was bound to it (AF sessions, TDF sessions, the Sy session). Every change
//! is durable before the answer leaves. `push` re-decides an open session
//! on the node's own initiative and sends the difference in a RAR.

use crate::admission::Class;
use crate::config::UnknownSubscriber;
use crate::control::{ControlError, ReauthOutcome};
use crate::gx::state::PushCounters;
use crate::gx::{self, CcaExtras, Ccr};
use crate::metrics::Command;
use crate::node::{BoxFuture, GxSignalling};
use crate::pcc::{PushReason, PushSummary, RequestType, UsageInstructions};
use crate::policy::decision::{Decision, Reject};
use crate::rx::service::Rx;
use crate::sd::service::Sd;
use crate::session::{GxSession, RuleDiff, SessionSlot, SessionState};
use crate::session_message::Outcome;
use crate::sy::service::Sy;
use crate::txn::session_core::settle_revalidation;
use crate::txn::session_step::{self, Closing, Decided, Granted, Step};
use crate::txn::{self, Runner};
use bytes::{Bytes, BytesMut};
use diameter::codec::{missing_avp, DiameterError, Message, FLAG_T};
use diameter::dict::{avp, cmd};
use diameter::result_code;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::sync::Weak;
use std::time::Instant;

use crate::node::{
    now_ms, replay, Answered, Capabilities, Persistence, Policy, Sessions, Settings, Signalling,
    Subscribers, Telemetry, UsageLedger, COMMIT_WAIT, USER_UNKNOWN,
};

/// The Gx service: answers the PCEFs' CCRs and re-decides their sessions.
/// It holds the services of the applications bound to a Gx session, which
/// it tells when the session changes or ends.
pub struct Gx {
    pub(crate) sessions: Sessions,
    pub(crate) subscribers: Subscribers,
    pub(crate) usage: UsageLedger,
    pub(crate) policy: Policy,
    pub(crate) signalling: Signalling,
    pub(crate) persistence: Persistence,
    pub(crate) telemetry: Telemetry,
    pub(crate) settings: Settings,
    pub(crate) txn: Runner,
    pub(crate) push_counters: PushCounters,
    pub(crate) rx: Arc<Rx>,
    pub(crate) sd: Arc<Sd>,
    pub(crate) sy: Arc<Sy>,
    /// This service, for the background pushes it starts.
    pub(crate) me_ref: Weak<Gx>,
}

impl Gx {
    pub fn new(caps: &Capabilities, rx: Arc<Rx>, sd: Arc<Sd>, sy: Arc<Sy>) -> Arc<Gx> {
        Arc::new_cyclic(|me| Gx {
            sessions: caps.sessions.clone(),
            subscribers: caps.subscribers.clone(),
            usage: caps.usage.clone(),
            policy: caps.policy.clone(),
            signalling: caps.signalling.clone(),
            persistence: caps.persistence.clone(),
            telemetry: caps.telemetry.clone(),
            settings: caps.settings.clone(),
            txn: Runner::new(caps),
            push_counters: PushCounters::default(),
            rx,
            sd,
            sy,
            me_ref: me.clone(),
        })
    }
    /// Answers one Gx request from a PCEF.
    pub async fn handle_gx(&self, req: Message) -> Result<Bytes, DiameterError> {
        if req.command_code() != cmd::CREDIT_CONTROL {
            return Err(DiameterError::new(
                result_code::DIAMETER_COMMAND_UNSUPPORTED,
                "Gx serves CCR only",
            ));
        }
        let started = Instant::now();
        // Unknown M-bit AVPs, bad lengths and bad values anywhere in the
        // message are refused before anything is applied (RFC 6733 §7).
        let checked = req.validate().and_then(|_| gx::decode_ccr(&req));
        let ccr = match checked {
            Ok(c) => c,
            Err(e) => {
                let command = req
                    .find(avp::CC_REQUEST_TYPE)
                    .ok()
                    .flatten()
                    .and_then(|a| a.as_u32().ok())
                    .and_then(Command::from_cc_request_type)
                    .unwrap_or(Command::CcrUpdate);
                txn::refused(&self.txn, command, started, &e);
                return Err(e);
            }
        };
        let command = match ccr.request_type {
            Some(RequestType::Initial) => Command::CcrInitial,
            Some(RequestType::Update) => Command::CcrUpdate,
            _ => Command::CcrTermination,
        };
        let class = if command == Command::CcrInitial {
            Class::New
        } else {
            Class::Existing
        };
        let (req, ccr) = (&req, &ccr);
        let envelope = txn::Request {
            message: req,
            command,
            class,
            subject: ccr.session_id,
            started,
        };
        txn::serve(&self.txn, envelope, move |tries| async move {
            match ccr.request_type {
                Some(RequestType::Initial) => self.ccr_initial(req, ccr, tries > 0).await,
                Some(RequestType::Update | RequestType::Termination) => {
                    self.on_session(req, ccr).await
                }
                None => Err(missing_avp(avp::CC_REQUEST_TYPE, "CC-Request-Type")),
            }
        })
        .await
    }

    /// `again`: after a write conflict, the stored session (a retransmission
    /// another node applied, or a Session-Id reused) is read first.
    async fn ccr_initial(
        &self,
        req: &Message,
        c: &Ccr<'_>,
        again: bool,
    ) -> Result<Answered, DiameterError> {
        if c.imsi.is_none() && c.msisdn.is_none() {
            return Err(missing_avp(avp::SUBSCRIPTION_ID, "Subscription-Id"));
        }
        // The row a new record replaces: written over at its version.
        let mut stored_version = 0;
        if again && self.sessions.table().get(c.session_id).is_none() {
            if let Ok(Ok(Some(st))) = tokio::time::timeout(
                COMMIT_WAIT,
                self.persistence.store().read_session(c.session_id),
            )
            .await
            {
                stored_version = st.version.get();
                if st.state == SessionState::Open {
                    self.sessions.find_or_take_over(c.session_id).await?;
                }
            }
        }
        // A retransmitted CCR-I is answered again, not applied twice; an
        // open session of another peer is neither replayed nor replaced.
        if let Some(slot) = self.sessions.table().get(c.session_id) {
            let answered = txn::holding(&slot, async |cur| {
                stored_version = cur.version.get();
                if cur.state != SessionState::Open {
                    return None;
                }
                self.refuse_stranger(&cur, req, c)
                    .or_else(|| self.replay_retransmission(&cur, req, c))
            })
            .await;
            if let Some(answer) = answered {
                return Ok(answer);
            }
        }
        let sub = self.subscribers.find(c.imsi, c.msisdn);
        if sub.is_none()
            && self.settings.live().cfg.policy.unknown_subscriber == UnknownSubscriber::Reject
        {
            tracing::info!(session = c.session_id, imsi = ?c.imsi, msisdn = ?c.msisdn, "unknown subscriber rejected");
            return Ok(self.cca(req, c, Outcome::Result(USER_UNKNOWN), None, None));
        }
        let now = now_ms();
        let key = sub
            .as_ref()
            .map(|s| s.imsi.clone())
            .or_else(|| c.imsi.map(str::to_owned))
            .or_else(|| c.msisdn.map(str::to_owned))
            .unwrap_or_default();
        let mut s = GxSession::new(
            c.session_id.to_owned(),
            key,
            c.origin_host,
            c.origin_realm,
            now,
        );
        s.version.set(stored_version);
        s.set_identity(c.imsi, c.msisdn);
        s.supported_features = c.supported_features.clone();
        apply_reported(&mut s, c);
        s.last_request_number = c.request_number;

        let Decided {
            verdict,
            mut pending,
        } = session_step::decide(
            &self.txn,
            &self.sy,
            &mut s,
            Step::Open,
            &c.usage_reports,
            now,
            |id, d| self.sd.check_adc(id, d),
        )
        .await?;
        let (decision, grants) = match verdict {
            Ok(Granted {
                decision, grants, ..
            }) => (decision, grants),
            Err(rej) => return Ok(self.rejected_by_policy(req, c, &s, &rej)),
        };
        let mut extras = self.extras(c);
        extras.usage = grants;
        let empty = Decision::default();
        let mut diff = RuleDiff::between(&empty, &decision);
        settle_revalidation(&mut diff, &mut s.revalidation_at_ms, now, 0);
        let answer = self.cca(
            req,
            c,
            Outcome::Result(result_code::DIAMETER_SUCCESS),
            Some(&extras),
            Some(&diff),
        );
        drop(diff);
        if answer.code != result_code::DIAMETER_SUCCESS {
            // The decision could not be sent (its CCA was too large): the
            // PCEF holds no session, so none is kept here either.
            return Ok(answer);
        }
        s.last_answer = Some(answer.bytes.clone());
        pending.install(&self.txn, &mut s, decision, "ccr-i", false);
        let s = Arc::new(s);
        session_step::commit_open(&self.txn, s.clone(), pending).await?;
        self.sd.sd_follow(&s);
        Ok(decided(answer, &s))
    }

    /// A CCR-U or CCR-T, on its session held; a session not open here is
    /// answered as a cold retransmission or an unknown one.
    async fn on_session(&self, req: &Message, c: &Ccr<'_>) -> Result<Answered, DiameterError> {
        let held = txn::with_session(&self.txn, c.session_id, async |slot, cur| {
            match c.request_type {
                Some(RequestType::Update) => self.update(req, c, slot, cur).await,
                _ => self.terminate(req, c, slot, cur).await,
            }
        });
        match held.await? {
            Some(answer) => Ok(answer),
            None => Ok(self.cold_retransmission(req, c).await),
        }
    }

    /// CCR-U on the session `cur`, held.
    async fn update(
        &self,
        req: &Message,
        c: &Ccr<'_>,
        slot: &SessionSlot,
        cur: Arc<GxSession>,
    ) -> Result<Answered, DiameterError> {
        if cur.state == SessionState::Closed {
            return Ok(self.unknown_session(req, c));
        }
        if let Some(refused) = self.refuse_stranger(&cur, req, c) {
            return Ok(refused);
        }
        if let Some(again) = self.replay_retransmission(&cur, req, c) {
            return Ok(again);
        }
        let now = now_ms();
        let mut s = (*cur).clone();
        apply_reported(&mut s, c);
        if *s.pcef_host != *c.origin_host {
            // A fail-over partner of the session's PCEF carries it on
            // (the only other peer served): RARs go there now.
            s.pcef_host = crate::session::shared_text::shared(c.origin_host);
            s.pcef_realm = crate::session::shared_text::shared(c.origin_realm);
        }
        let af_notices = self
            .rx
            .af_notes_from_pcef(&cur, &mut s, &c.rule_reports, &c.charging_ids);
        self.sessions.apply_rule_reports(&mut s, &c.rule_reports);
        s.last_request_number = c.request_number;
        s.updated_ms = now;

        let Decided {
            verdict,
            mut pending,
        } = session_step::decide(
            &self.txn,
            &self.sy,
            &mut s,
            Step::Update,
            &c.usage_reports,
            now,
            |id, d| self.sd.check_adc(id, d),
        )
        .await?;
        let (decision, grants, reused, spent) = match verdict {
            Ok(Granted {
                decision,
                grants,
                reused,
                revalidation_spent_secs,
            }) => (decision, grants, reused, revalidation_spent_secs),
            Err(rej) => {
                let answer = self.rejected_by_policy(req, c, &s, &rej);
                if !c.usage_reports.is_empty() {
                    // Refused or not, the usage happened: count it, once.
                    s.last_answer = Some(answer.bytes.clone());
                    pending.commit(&self.txn, slot, Arc::new(s), None).await?;
                }
                return Ok(answer);
            }
        };
        let extras = CcaExtras {
            usage: grants,
            ..CcaExtras::default()
        };
        let answer = {
            let mut diff = RuleDiff::between(&s.installed, &decision);
            settle_revalidation(&mut diff, &mut s.revalidation_at_ms, now, spent);
            self.cca(
                req,
                c,
                Outcome::Result(result_code::DIAMETER_SUCCESS),
                Some(&extras),
                Some(&diff),
            )
        };
        s.last_answer = Some(answer.bytes.clone());
        pending.install(&self.txn, &mut s, decision, "ccr-u", reused);
        let s = Arc::new(s);
        // A request that reported usage is always written, with its answer:
        // a retransmission after a restart must be replayed, not counted again.
        let unchanged_from = c.usage_reports.is_empty().then_some(&*cur);
        pending
            .commit(&self.txn, slot, s.clone(), unchanged_from)
            .await?;
        self.sd.sd_follow(&s);
        self.rx.spawn_af_notices(af_notices);
        Ok(decided(answer, &s))
    }

    /// CCR-T on the session `cur`, held.
    async fn terminate(
        &self,
        req: &Message,
        c: &Ccr<'_>,
        slot: &SessionSlot,
        cur: Arc<GxSession>,
    ) -> Result<Answered, DiameterError> {
        if let Some(refused) = self.refuse_stranger(&cur, req, c) {
            return Ok(refused);
        }
        if cur.state == SessionState::Closed {
            if let Some(again) = self.replay_retransmission(&cur, req, c) {
                return Ok(again);
            }
            return Ok(self.unknown_session(req, c));
        }
        let mut s = (*cur).clone();
        apply_reported(&mut s, c);
        self.sessions.apply_rule_reports(&mut s, &c.rule_reports);
        s.last_request_number = c.request_number;
        let answer = self.cca(
            req,
            c,
            Outcome::Result(result_code::DIAMETER_SUCCESS),
            None,
            None,
        );
        let closing = Closing {
            reports: &c.usage_reports,
            answer: Some(answer.bytes.clone()),
            cause: "ccr-t",
            now: now_ms(),
        };
        let s = session_step::close(&self.txn, &self.rx, &self.sy, slot, &cur, s, closing).await?;
        self.sd.sd_release(&s);
        Ok(answer)
    }

    /// 5002 DIAMETER_UNKNOWN_SESSION_ID.
    fn unknown_session(&self, req: &Message, c: &Ccr<'_>) -> Answered {
        let rc = result_code::DIAMETER_UNKNOWN_SESSION_ID;
        self.cca(req, c, Outcome::Result(rc), None, None)
    }

    /// A CCR for a session not in memory: 5002, unless it is a
    /// retransmission (T flag) of the last CCR applied to a session the
    /// store still has (a CCR-T whose answer was lost when the node died:
    /// closed sessions are not loaded at start-up). Only retransmissions
    /// read the store, so unknown Session-Ids cannot make the writer busy.
    async fn cold_retransmission(&self, req: &Message, c: &Ccr<'_>) -> Answered {
        if req.flags() & FLAG_T != 0 {
            let read = tokio::time::timeout(
                COMMIT_WAIT,
                self.persistence.store().read_session(c.session_id),
            );
            if let Ok(Ok(Some(stored))) = read.await {
                if let Some(refused) = self.refuse_stranger(&stored, req, c) {
                    return refused;
                }
                if let Some(again) = self.replay_retransmission(&stored, req, c) {
                    return again;
                }
            }
        }
        self.unknown_session(req, c)
    }

    /// 5002 when the CCR comes from neither the session's PCEF nor a
    /// fail-over partner of it (see `node/ownership.rs`).
    fn refuse_stranger(&self, cur: &GxSession, req: &Message, c: &Ccr<'_>) -> Option<Answered> {
        let who = self
            .sessions
            .requester(&cur.id, &cur.pcef_host, c.origin_host);
        (!who.is_served()).then(|| self.unknown_session(req, c))
    }

    /// The stored answer again when `c` repeats the last CCR applied and
    /// comes from the PCEF that answer went to: a fail-over partner
    /// repeating the number has its request applied, not another peer's
    /// answer.
    fn replay_retransmission(
        &self,
        cur: &GxSession,
        req: &Message,
        c: &Ccr<'_>,
    ) -> Option<Answered> {
        if c.request_number != cur.last_request_number
            || !cur.pcef_host.eq_ignore_ascii_case(c.origin_host)
        {
            return None;
        }
        let ans = cur.last_answer.as_deref()?;
        self.telemetry
            .counters()
            .retransmissions
            .fetch_add(1, Relaxed);
        Some(replay(ans, req))
    }

    pub(crate) fn cca(
        &self,
        req: &Message,
        c: &Ccr<'_>,
        outcome: Outcome,
        extras: Option<&CcaExtras>,
        diff: Option<&RuleDiff<'_>>,
    ) -> Answered {
        let mut buf = BytesMut::with_capacity(512);
        let empty = CcaExtras::default();
        let encoded = gx::encode_cca(
            &mut buf,
            req,
            self.signalling.me(),
            c,
            outcome,
            extras.unwrap_or(&empty),
            diff,
            Some(self.signalling.doic().reporter()),
        );
        // An answer larger than the configured maximum (which the PCEF
        // enforces too) or than the 24-bit length would desynchronise or
        // drop the connection: answer 5012 instead, on the same connection.
        let max = self.settings.live().cfg.diameter.max_message_bytes as usize;
        let len = match encoded {
            Ok(len) if len <= max => {
                return Answered {
                    decided_by: None,
                    bytes: answer_of_its_size(buf),
                    code: match outcome {
                        Outcome::Result(rc) | Outcome::Experimental(rc) => rc,
                    },
                }
            }
            Ok(len) => len,
            Err(e) => e.len,
        };
        self.telemetry
            .counters()
            .answers_too_large
            .fetch_add(1, Relaxed);
        tracing::error!(
            session = c.session_id,
            bytes = len,
            max,
            "CCA larger than [diameter].max_message_bytes; answering DIAMETER_UNABLE_TO_COMPLY"
        );
        buf.clear();
        gx::encode_cca_too_large(&mut buf, req, self.signalling.me(), c, len, max);
        Answered {
            decided_by: None,
            bytes: buf.freeze(),
            code: result_code::DIAMETER_UNABLE_TO_COMPLY,
        }
    }

    /// `reject`, counted against the policy version that decided the
    /// refusal (the one the subscriber is assigned).
    fn rejected_by_policy(
        &self,
        req: &Message,
        c: &Ccr<'_>,
        s: &GxSession,
        rej: &Reject,
    ) -> Answered {
        let mut answer = self.reject(req, c, rej);
        answer.decided_by = Some(
            self.policy
                .engine()
                .assigned_id(s.imsi.as_deref(), s.msisdn.as_deref()),
        );
        answer
    }

    pub(crate) fn reject(&self, req: &Message, c: &Ccr<'_>, rej: &Reject) -> Answered {
        tracing::info!(session = c.session_id, code = rej.code, reason = ?rej.reason, "policy rejected the session");
        let outcome = match rej.vendor {
            Some(_) => Outcome::Experimental(rej.code),
            None => Outcome::Result(rej.code),
        };
        self.cca(req, c, outcome, None, None)
    }

    pub(crate) fn extras(&self, c: &Ccr<'_>) -> CcaExtras {
        // We implement the Rel-8..Rel-10 Gx feature bits of Feature-List-ID 1
        // that change nothing on the wire for us; offer back the intersection.
        const OURS: u32 = 0b111;
        CcaExtras {
            supported_features: c
                .supported_features
                .iter()
                .filter(|(id, _)| *id == 1)
                .map(|(id, list)| (*id, list & OURS))
                .collect(),
            // UE_NW (2) when the PCEF says it supports network-initiated
            // bearers, UE_ONLY (0) otherwise (TS 29.212 §4.5.1).
            bearer_control_mode: c
                .network_request_support
                .map(|nrs| if nrs == 1 { 2 } else { 0 }),
            usage: Default::default(),
        }
    }

    /// Re-decides a session and, if the decision changed, pushes the
    /// difference to its PCEF in a RAR (see `txn::push`).
    pub(crate) async fn push(
        &self,
        id: &str,
        ask_report: bool,
    ) -> Result<ReauthOutcome, ControlError> {
        txn::push::push(&self.txn, self.bound(), id, ask_report).await
    }

    /// The services bound to a Gx session.
    fn bound(&self) -> txn::push::Bound<'_> {
        txn::push::Bound {
            rx: &self.rx,
            sd: &self.sd,
            sy: &self.sy,
        }
    }
}

/// Copies what the PCEF reported into the session (only what it sent).
/// A value equal to the one held is left shared, not allocated again: most
/// CCR-U repeat the APN, location and time zone unchanged.
fn apply_reported(s: &mut GxSession, c: &Ccr<'_>) {
    if let Some(v) = c.apn {
        if s.apn.as_deref() != Some(v) {
            s.apn = Some(crate::session::shared_text::shared(v));
        }
    }
    if let Some(v) = c.ue_ipv4 {
        s.ue_ipv4 = Some(v);
    }
    if let Some(v) = c.ue_ipv6_prefix {
        set_hex(&mut s.ue_ipv6_prefix, v);
    }
    if let Some(v) = c.rat_type {
        s.rat_type = Some(v);
    }
    if let Some(v) = c.ip_can_type {
        s.ip_can_type = Some(v);
    }
    if let Some(v) = c.location {
        set_hex(&mut s.location, v);
    }
    if let Some(v) = c.ms_timezone {
        set_hex(&mut s.ms_timezone, v);
    }
    if let Some(v) = &c.device {
        if s.device.as_deref() != Some(v.as_str()) {
            s.device = Some(v.as_str().into());
        }
    }
}

/// Sets `held` to the lowercase hex of `bytes`, unless it holds that already.
fn set_hex(held: &mut Option<Arc<str>>, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let same = held.as_deref().is_some_and(|h| {
        h.len() == 2 * bytes.len()
            && h.as_bytes().chunks_exact(2).zip(bytes).all(|(pair, b)| {
                pair[0] == DIGITS[usize::from(b >> 4)] && pair[1] == DIGITS[usize::from(b & 15)]
            })
    });
    if !same {
        *held = Some(hex::encode(bytes).into());
    }
}

impl GxSignalling for Gx {
    fn session<'a>(
        &'a self,
        id: &'a str,
        ask_report: bool,
    ) -> BoxFuture<'a, Result<ReauthOutcome, ControlError>> {
        Box::pin(self.push(id, ask_report))
    }

    fn subscriber<'a>(&'a self, key: &'a str, reason: PushReason) -> BoxFuture<'a, PushSummary> {
        Box::pin(self.push_subscriber(key, reason))
    }

    fn rar<'a>(
        &'a self,
        s: &'a GxSession,
        diff: Option<&'a RuleDiff<'a>>,
        release: Option<i32>,
        usage: &'a UsageInstructions,
    ) -> BoxFuture<'a, Result<Message, ControlError>> {
        Box::pin(self.send_rar(s, diff, release, usage))
    }
}

/// The encoded answer in an allocation of its own size. The session keeps
/// it (to replay to a retransmission) for as long as it is open, and the
/// buffer it was encoded into has room to spare: 512 bytes, or twice as
/// many once an answer outgrew them. One copy of a few hundred bytes per
/// answer against up to half a KiB less per open session.
fn answer_of_its_size(buf: BytesMut) -> Bytes {
    if buf.capacity() - buf.len() > 32 {
        Bytes::copy_from_slice(&buf)
    } else {
        buf.freeze()
    }
}

/// `answer`, counted against the policy version that made `s`'s decision.
fn decided(mut answer: Answered, s: &GxSession) -> Answered {
    answer.decided_by = s.last_decision.as_ref().map(|d| d.policy_version);
    answer
}

#[cfg(test)]
mod tests {
    use super::set_hex;
    use std::sync::Arc;

    #[test]
    fn an_unchanged_hex_value_stays_shared_and_a_changed_one_is_replaced() {
        let mut held: Option<Arc<str>> = None;
        set_hex(&mut held, &[0x82, 0x00, 0xf1, 0x10]);
        assert_eq!(held.as_deref(), Some("8200f110"));
        let before = held.clone().expect("set");
        set_hex(&mut held, &[0x82, 0x00, 0xf1, 0x10]);
        assert!(
            Arc::ptr_eq(&before, held.as_ref().expect("set")),
            "the same value is not allocated again"
        );
        set_hex(&mut held, &[0x82, 0x00, 0xf1, 0x11]);
        assert_eq!(held.as_deref(), Some("8200f111"));
        set_hex(&mut held, &[0x82, 0x00, 0xf1]);
        assert_eq!(held.as_deref(), Some("8200f1"));
    }
}
