//! How the node answers each Gx CCR: CCR-I opens the session and decides
//! it, CCR-U applies what the PCEF reported (usage, rule failures, location)
//! and re-decides when an input changed, CCR-T closes it and releases what
//! was bound to it (AF sessions, TDF sessions, the Sy session). Every change
//! is durable before the answer leaves. `push` re-decides an open session
//! on the node's own initiative and sends the difference in a RAR.

use crate::admission::Class;
use crate::config::UnknownSubscriber;
use crate::control::{ControlError, ReauthOutcome};
use crate::gx::{self, CcaExtras, Ccr, RequestType, UsageInstructions};
use crate::metrics::Command;
use crate::policy::decision::{Decision, Reject};
use crate::policy::input::RuleFailure;
use crate::policy::Ran;
use crate::session::{GxSession, RuleDiff, SessionState};
use crate::session_message::{Identity, Outcome};
use crate::store::Change;
use bytes::{Bytes, BytesMut};
use diameter::codec::{missing_avp, DiameterError, Message, MessageBuilder, FLAG_E, FLAG_T};
use diameter::dict::{avp, cmd};
use diameter::doic::OverloadReporter;
use diameter::result_code;
use diameter::transport::{PeerHandle, RequestError};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::node::{now_ms, Answered, Node, COMMIT_WAIT, USER_UNKNOWN};

/// What a DOIC report asks of reacting PCEFs while requests are shed: send
/// 30% less, for 10 s at a time (renewed while shedding goes on).
const OVERLOAD_REDUCTION_PERCENT: u32 = 30;
const OVERLOAD_REPORT_VALIDITY: Duration = Duration::from_secs(10);

impl Node {
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
                self.metrics
                    .request(command, e.result_code, started.elapsed());
                tracing::info!(session = ?req.session_id().ok().flatten(), error = %e, "CCR refused");
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
        let Some(_permit) = self.admission.admit(class) else {
            self.metrics
                .request(command, result_code::DIAMETER_TOO_BUSY, started.elapsed());
            // Peers that speak DOIC are asked to send less for a while.
            self.overload
                .report(OVERLOAD_REDUCTION_PERCENT, OVERLOAD_REPORT_VALIDITY);
            self.overload_reported.store(true, Relaxed);
            return Ok(too_busy_answer(&req, &self.me, &self.overload));
        };
        if self.overload_reported.load(Relaxed)
            && self.admission.in_flight() < self.admission.limit() / 2
        {
            // Load is back under half the bound: the report is withdrawn.
            self.overload_reported.store(false, Relaxed);
            self.overload.end();
        }
        let result = match ccr.request_type {
            Some(RequestType::Initial) => self.ccr_initial(&req, &ccr).await,
            Some(RequestType::Update) => self.ccr_update(&req, &ccr).await,
            Some(RequestType::Termination) => self.ccr_termination(&req, &ccr).await,
            None => Err(missing_avp(avp::CC_REQUEST_TYPE, "CC-Request-Type")),
        };
        let code = match &result {
            Ok(a) => a.code,
            Err(e) => e.result_code,
        };
        self.metrics.request(command, code, started.elapsed());
        tracing::debug!(
            session = ccr.session_id,
            command = command.label(),
            number = ccr.request_number,
            pcef = ccr.origin_host,
            result = code,
            us = started.elapsed().as_micros() as u64,
            "gx"
        );
        result.map(|a| a.bytes)
    }

    async fn ccr_initial(&self, req: &Message, c: &Ccr<'_>) -> Result<Answered, DiameterError> {
        if c.imsi.is_none() && c.msisdn.is_none() {
            return Err(missing_avp(avp::SUBSCRIPTION_ID, "Subscription-Id"));
        }
        // A retransmitted CCR-I is answered again, not applied twice.
        if let Some(slot) = self.sessions.get(c.session_id) {
            let _g = slot.lock().await;
            let cur = slot.load();
            if cur.state == SessionState::Open {
                if let Some(again) = self.replay_retransmission(&cur, req, c) {
                    return Ok(again);
                }
            }
        }
        let sub = self.find_subscriber(c.imsi, c.msisdn);
        if sub.is_none()
            && self.live.load().cfg.policy.unknown_subscriber == UnknownSubscriber::Reject
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
            c.origin_host.to_owned(),
            c.origin_realm.to_owned(),
            now,
        );
        s.imsi = c.imsi.map(str::to_owned);
        s.msisdn = c.msisdn.map(str::to_owned);
        s.supported_features = c.supported_features.clone();
        apply_reported(&mut s, c);
        s.last_request_number = c.request_number;

        let mut usage = self.begin_usage(&s.subscriber, sub.as_deref(), now).await?;
        if let Some(step) = usage.as_mut() {
            self.count_reports(step, &mut s, &c.usage_reports, now);
        }
        let mut input = self.policy_input(&s, sub.as_deref());
        if let Some(step) = &usage {
            input.usage = step.view(sub.as_deref());
        }
        let out = self.policy.decide(&input, None);
        self.note_fallback(&s.id, &out);
        let out = self.settle_spending(&mut s, &mut input, out).await;
        if let Some(rej) = &out.decision.reject {
            return Ok(self.reject(req, c, rej));
        }
        let mut decision = self.check_catalog(&s.id, out.decision.clone());
        let mut extras = self.extras(c);
        if let Some(step) = &usage {
            extras.usage = self.monitoring_answer(
                &step.next,
                sub.as_deref(),
                &mut s,
                &mut decision,
                &step.reported,
                now,
            );
        }
        let empty = Decision::default();
        let mut diff = RuleDiff::between(&empty, &decision);
        settle_revalidation(&mut diff, &mut s.revalidation_at_ms, now);
        let answer = self.cca(
            req,
            c,
            Outcome::Result(result_code::DIAMETER_SUCCESS),
            Some(&extras),
            Some(&diff),
        );
        s.last_decision = Some(Arc::new(out.into_record(&input, now)));
        s.installed = decision;
        s.last_answer = Some(answer.bytes.clone());
        let s = Arc::new(s);
        let slot = match self.sessions.insert(s.clone()) {
            Ok(slot) => slot,
            Err(_) => self.sessions.replace(s.clone()),
        };
        let _g = slot.lock().await;
        let mut changes = vec![Change::PutSession(s.clone())];
        changes.extend(usage_change(&usage));
        if let Err(e) = self.commit(changes).await {
            self.sessions.remove(&s.id);
            return Err(e);
        }
        slot.publish(s.clone());
        self.sd_follow(&s);
        if let Some(step) = usage {
            Node::finish_usage(step);
        }
        Ok(answer)
    }

    pub(crate) async fn ccr_update(
        &self,
        req: &Message,
        c: &Ccr<'_>,
    ) -> Result<Answered, DiameterError> {
        let Some(slot) = self.sessions.get(c.session_id) else {
            return Ok(self.cold_retransmission(req, c).await);
        };
        let _g = slot.lock().await;
        let cur = slot.load();
        if cur.state == SessionState::Closed {
            return Ok(self.unknown_session(req, c));
        }
        if let Some(again) = self.replay_retransmission(&cur, req, c) {
            return Ok(again);
        }
        let now = now_ms();
        let mut s = (*cur).clone();
        apply_reported(&mut s, c);
        if s.pcef_host != c.origin_host {
            // The session moved to another gateway node (PCEF fail-over): RARs go there now.
            s.pcef_host = c.origin_host.to_owned();
            s.pcef_realm = c.origin_realm.to_owned();
        }
        let af_notices = self.af_notes_from_pcef(&cur, &mut s, &c.rule_reports, &c.charging_ids);
        self.apply_rule_reports(&mut s, &c.rule_reports);
        s.last_request_number = c.request_number;
        s.updated_ms = now;

        let sub = self.find_subscriber(s.imsi.as_deref(), s.msisdn.as_deref());
        let mut usage = self.begin_usage(&s.subscriber, sub.as_deref(), now).await?;
        if let Some(step) = usage.as_mut() {
            self.count_reports(step, &mut s, &c.usage_reports, now);
        }
        let mut input = self.policy_input(&s, sub.as_deref());
        if let Some(step) = &usage {
            input.usage = step.view(sub.as_deref());
        }
        let out = self.policy.decide(&input, s.last_decision.as_deref());
        self.note_fallback(&s.id, &out);
        let out = self.settle_spending(&mut s, &mut input, out).await;
        if let Some(rej) = &out.decision.reject {
            let answer = self.reject(req, c, rej);
            if !c.usage_reports.is_empty() {
                // Refused or not, the usage happened: count it, once.
                s.last_answer = Some(answer.bytes.clone());
                let s = Arc::new(s);
                let mut changes = vec![Change::PutSession(s.clone())];
                changes.extend(usage_change(&usage));
                self.commit(changes).await?;
                slot.publish(s);
                if let Some(step) = usage {
                    Node::finish_usage(step);
                }
            }
            return Ok(answer);
        }
        let mut decision = self.check_catalog(&s.id, out.decision.clone());
        crate::session::af::add_af_rules(&s.af, &mut decision);
        let mut extras = CcaExtras::default();
        if let Some(step) = &usage {
            extras.usage = self.monitoring_answer(
                &step.next,
                sub.as_deref(),
                &mut s,
                &mut decision,
                &step.reported,
                now,
            );
        }
        let answer = {
            let mut diff = RuleDiff::between(&s.installed, &decision);
            settle_revalidation(&mut diff, &mut s.revalidation_at_ms, now);
            self.cca(
                req,
                c,
                Outcome::Result(result_code::DIAMETER_SUCCESS),
                Some(&extras),
                Some(&diff),
            )
        };
        if out.ran != Ran::Memo {
            s.last_decision = Some(Arc::new(out.into_record(&input, now)));
        }
        s.installed = decision;
        s.last_answer = Some(answer.bytes.clone());
        let s = Arc::new(s);
        // A request that reported usage is always written, with its answer:
        // a retransmission after a restart must be replayed, not counted again.
        let usage_write = usage_change(&usage);
        if s.durably_equal(&cur) && c.usage_reports.is_empty() && usage_write.is_none() {
            self.counters.writes_skipped.fetch_add(1, Relaxed);
        } else {
            let mut changes = vec![Change::PutSession(s.clone())];
            changes.extend(usage_write);
            self.commit(changes).await?;
        }
        slot.publish(s.clone());
        self.sd_follow(&s);
        if let Some(step) = usage {
            Node::finish_usage(step);
        }
        self.spawn_af_notices(af_notices);
        Ok(answer)
    }

    async fn ccr_termination(&self, req: &Message, c: &Ccr<'_>) -> Result<Answered, DiameterError> {
        let Some(slot) = self.sessions.get(c.session_id) else {
            return Ok(self.cold_retransmission(req, c).await);
        };
        let _g = slot.lock().await;
        let cur = slot.load();
        if cur.state == SessionState::Closed {
            if let Some(again) = self.replay_retransmission(&cur, req, c) {
                return Ok(again);
            }
            return Ok(self.unknown_session(req, c));
        }
        let now = now_ms();
        let mut s = (*cur).clone();
        apply_reported(&mut s, c);
        self.apply_rule_reports(&mut s, &c.rule_reports);
        // The final usage (CCR-T) is counted like any report.
        let mut usage = None;
        if !c.usage_reports.is_empty() {
            let sub = self.find_subscriber(s.imsi.as_deref(), s.msisdn.as_deref());
            usage = self.begin_usage(&s.subscriber, sub.as_deref(), now).await?;
            if let Some(step) = usage.as_mut() {
                self.count_reports(step, &mut s, &c.usage_reports, now);
            }
        }
        s.state = SessionState::Closed;
        s.closed_ms = Some(now);
        s.updated_ms = now;
        s.last_request_number = c.request_number;
        let answer = self.cca(
            req,
            c,
            Outcome::Result(result_code::DIAMETER_SUCCESS),
            None,
            None,
        );
        s.last_answer = Some(answer.bytes.clone());
        let s = Arc::new(s);
        let mut changes = vec![Change::PutSession(s.clone())];
        changes.extend(usage_change(&usage));
        self.commit(changes).await?;
        self.sd_release(&s);
        slot.publish(s.clone());
        self.abort_afs(&s);
        // Closed records live in the store only (API look-ups and late
        // retransmissions read them there): memory stays the size of the
        // open sessions whatever the churn and the retention.
        self.sessions.remove(c.session_id);
        self.sy_session_ended(&cur.subscriber);
        if let Some(step) = usage {
            Node::finish_usage(step);
        }
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
            let read = tokio::time::timeout(COMMIT_WAIT, self.store.read_session(c.session_id));
            if let Ok(Ok(Some(stored))) = read.await {
                if let Some(again) = self.replay_retransmission(&stored, req, c) {
                    return again;
                }
            }
        }
        self.unknown_session(req, c)
    }

    /// The stored answer again when `c` repeats the last CCR applied.
    fn replay_retransmission(
        &self,
        cur: &GxSession,
        req: &Message,
        c: &Ccr<'_>,
    ) -> Option<Answered> {
        if c.request_number != cur.last_request_number {
            return None;
        }
        let ans = cur.last_answer.as_deref()?;
        self.counters.retransmissions.fetch_add(1, Relaxed);
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
        gx::encode_cca(
            &mut buf,
            req,
            &self.me,
            c,
            outcome,
            extras.unwrap_or(&empty),
            diff,
            Some(&self.overload),
        );
        Answered {
            bytes: buf.freeze(),
            code: match outcome {
                Outcome::Result(rc) | Outcome::Experimental(rc) => rc,
            },
        }
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

    /// Records rule failures and forgets failed rules as installed (the
    /// PCEF does not have them); the policy sees the failures next.
    pub(crate) fn apply_rule_reports(&self, s: &mut GxSession, reports: &[RuleFailure]) {
        for r in reports {
            // PCC-Rule-Status ACTIVE (0) reports are not failures.
            if r.status == 0 {
                continue;
            }
            self.counters.rule_failures_reported.fetch_add(1, Relaxed);
            tracing::warn!(session = %s.id, rule = %r.rule, status = r.status, code = ?r.code, "PCEF reported a rule failure");
            s.installed.rules.retain(|n| n != &r.rule);
            s.installed.base_names.retain(|n| n != &r.rule);
            s.installed.definitions.retain(|d| d.name != r.rule);
            s.rule_failures.retain(|f| f.rule != r.rule);
            s.rule_failures.push(r.clone());
        }
    }

    /// Re-decides a session and, if the decision changed, pushes the
    /// difference to its PCEF in a RAR (holding the session's lock, so a
    /// CCR for it waits for the RAA).
    pub(crate) async fn push(
        &self,
        id: &str,
        ask_report: bool,
    ) -> Result<ReauthOutcome, ControlError> {
        let slot = self
            .sessions
            .get(id)
            .ok_or_else(|| ControlError::NotFound(format!("no session {id}")))?;
        let _g = slot.lock().await;
        let cur = slot.load();
        if cur.state == SessionState::Closed {
            return Err(ControlError::Conflict(format!("session {id} is closed")));
        }
        let sub = self.find_subscriber(cur.imsi.as_deref(), cur.msisdn.as_deref());
        let now = now_ms();
        let mut input = self.policy_input(&cur, sub.as_deref());
        input.usage = self.usage_view(&cur.subscriber, sub.as_deref(), now);
        let out = self.policy.decide(&input, cur.last_decision.as_deref());
        self.note_fallback(id, &out);
        let mut decision = self.check_catalog(id, out.decision.clone());
        crate::session::af::add_af_rules(&cur.af, &mut decision);
        let mut pending = (*cur).clone();
        let mut usage = UsageInstructions::default();
        if !self.usage_cfg.load().is_empty() {
            let accumulators = self.usage.load(&cur.subscriber);
            usage = self.monitoring_answer(
                &accumulators,
                sub.as_deref(),
                &mut pending,
                &mut decision,
                &Default::default(),
                now,
            );
        }
        let mut diff = RuleDiff::between(&cur.installed, &decision);
        settle_revalidation(&mut diff, &mut pending.revalidation_at_ms, now);
        let installed_names: Vec<String> = diff
            .install_names
            .iter()
            .map(|s| s.to_string())
            .chain(diff.install_base_names.iter().map(|s| s.to_string()))
            .chain(diff.install_definitions.iter().map(|d| d.name.clone()))
            .collect();
        let removed_names: Vec<String> = diff
            .remove_names
            .iter()
            .chain(diff.remove_base_names.iter())
            .map(|s| s.to_string())
            .collect();
        if diff.is_empty() && usage.is_empty() {
            // Only the TDF's part (ADC rules) may have changed: Sd follows.
            self.adopt_adc(&slot, &cur, &decision.adc).await?;
            return Ok(ReauthOutcome {
                rar_sent: false,
                result_code: None,
                installed: Vec::new(),
                removed: Vec::new(),
                script_version: out.script_version,
            });
        }
        if ask_report && !pending.monitoring.keys.is_empty() {
            // Every key: the PCEF reports what it counted since its last report.
            usage.report = Some(Vec::new());
        }
        let answer = self.send_rar(&cur, Some(&diff), None, &usage).await?;
        drop(diff);
        let raa =
            gx::decode_raa(&answer).map_err(|e| ControlError::Peer(format!("bad RAA: {e}")))?;
        let code = raa.result_code.or(raa.experimental_result).unwrap_or(0);
        let mut s = pending;
        let af_notices =
            self.af_notes_from_pcef(&cur, &mut s, &raa.rule_reports, &raa.charging_ids);
        self.apply_rule_reports(&mut s, &raa.rule_reports);
        if code == result_code::DIAMETER_UNKNOWN_SESSION_ID {
            // The PCEF no longer has it: forget it here too.
            self.commit(vec![Change::DeleteSession(id.to_owned())])
                .await
                .map_err(|e| ControlError::Unavailable(e.message.to_string()))?;
            self.sessions.remove(id);
            self.abort_afs(&cur);
            self.sy_session_ended(&cur.subscriber);
            return Err(ControlError::Peer(format!(
                "PCEF does not know session {id} (5002); removed"
            )));
        }
        if code != result_code::DIAMETER_SUCCESS {
            // Not installed: the grants and stops did not happen either.
            s.monitoring = cur.monitoring.clone();
        }
        let script_version = out.script_version;
        if code == result_code::DIAMETER_SUCCESS {
            s.installed = decision;
            if out.ran != Ran::Memo {
                s.last_decision = Some(Arc::new(out.into_record(&input, now_ms())));
            }
        }
        s.updated_ms = now_ms();
        let s = Arc::new(s);
        if !s.durably_equal(&cur) {
            self.commit(vec![Change::PutSession(s.clone())])
                .await
                .map_err(|e| ControlError::Unavailable(e.message.to_string()))?;
        }
        slot.publish(s.clone());
        self.sd_follow(&s);
        self.spawn_af_notices(af_notices);
        Ok(ReauthOutcome {
            rar_sent: true,
            result_code: Some(code),
            installed: installed_names,
            removed: removed_names,
            script_version,
        })
    }

    pub(crate) async fn send_rar(
        &self,
        s: &GxSession,
        diff: Option<&RuleDiff<'_>>,
        release: Option<i32>,
        usage: &UsageInstructions,
    ) -> Result<Message, ControlError> {
        let peer: PeerHandle = self
            .peers
            .get(&s.pcef_host)
            .ok_or_else(|| ControlError::Peer(format!("PCEF {} is not connected", s.pcef_host)))?;
        let started = Instant::now();
        let res = peer
            .request(gx::GX, cmd::RE_AUTH, |b| {
                gx::encode_rar(
                    b,
                    &s.id,
                    &self.me,
                    &s.pcef_host,
                    &s.pcef_realm,
                    diff,
                    release,
                    usage,
                )
            })
            .await;
        match res {
            Ok(ans) => {
                let code = gx::decode_raa(&ans)
                    .ok()
                    .and_then(|r| r.result_code.or(r.experimental_result))
                    .unwrap_or(0);
                self.metrics.request(Command::Rar, code, started.elapsed());
                Ok(ans)
            }
            Err(e) => {
                self.metrics
                    .request(Command::Rar, crate::metrics::NO_ANSWER, started.elapsed());
                Err(match e {
                    RequestError::Timeout => {
                        ControlError::Timeout(format!("no RAA from {} in time", s.pcef_host))
                    }
                    other => ControlError::Peer(format!("RAR to {} failed: {other}", s.pcef_host)),
                })
            }
        }
    }
}

/// DIAMETER_TOO_BUSY (3004, a protocol error: E bit) for a shed request,
/// with an OC-OLR when the PCEF advertised DOIC.
pub(crate) fn too_busy_answer(req: &Message, me: &Identity, overload: &OverloadReporter) -> Bytes {
    let mut buf = BytesMut::with_capacity(256);
    let mut b = MessageBuilder::answer(&mut buf, req);
    b.set_flags(b.flags() | FLAG_E);
    b.result_code(result_code::DIAMETER_TOO_BUSY)
        .origin(&me.origin_host, &me.origin_realm)
        .str(avp::ERROR_MESSAGE, "PCRF overloaded; retry later");
    overload.append_to_answer(req, &mut b);
    b.finish();
    buf.freeze()
}

/// The accumulators to write with a request, when they changed.
pub(crate) fn usage_change(usage: &Option<crate::gx::monitoring::UsageStep>) -> Option<Change> {
    usage
        .as_ref()
        .filter(|u| u.changed())
        .map(|u| Change::PutUsage(u.next.clone()))
}

/// Revalidation-Time is an instant: send it only when the decision asks
/// for an instant more than a minute away from the one the PCEF has.
fn settle_revalidation(diff: &mut RuleDiff<'_>, at_ms: &mut Option<i64>, now: i64) {
    if let Some(secs) = diff.revalidation_secs {
        let at = now + (secs as i64) * 1000;
        if at_ms.is_some_and(|old| (old - at).abs() < 60_000) {
            diff.revalidation_secs = None;
        } else {
            *at_ms = Some(at);
        }
    }
}

/// A stored answer sent again with the retransmission's ids.
pub(crate) fn replay(stored: &[u8], req: &Message) -> Answered {
    let mut b = BytesMut::from(stored);
    if b.len() >= 20 {
        b[12..16].copy_from_slice(&req.hop_by_hop().to_be_bytes());
        b[16..20].copy_from_slice(&req.end_to_end().to_be_bytes());
    }
    let code = Message::parse(Bytes::copy_from_slice(stored))
        .ok()
        .and_then(|m| {
            m.find(avp::RESULT_CODE)
                .ok()
                .flatten()
                .and_then(|a| a.as_u32().ok())
        })
        .unwrap_or(result_code::DIAMETER_SUCCESS);
    Answered {
        bytes: b.freeze(),
        code,
    }
}

/// Copies what the PCEF reported into the session (only what it sent).
fn apply_reported(s: &mut GxSession, c: &Ccr<'_>) {
    if let Some(v) = c.apn {
        s.apn = Some(v.to_owned());
    }
    if let Some(v) = c.ue_ipv4 {
        s.ue_ipv4 = Some(v);
    }
    if let Some(v) = c.ue_ipv6_prefix {
        s.ue_ipv6_prefix = Some(gx::hex(v));
    }
    if let Some(v) = c.rat_type {
        s.rat_type = Some(v);
    }
    if let Some(v) = c.ip_can_type {
        s.ip_can_type = Some(v);
    }
    if let Some(v) = c.location {
        s.location = Some(gx::hex(v));
    }
    if let Some(v) = c.ms_timezone {
        s.ms_timezone = Some(gx::hex(v));
    }
    if let Some(v) = &c.device {
        s.device = Some(v.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shed_request_gets_3004_and_an_olr_only_if_it_speaks_doic() {
        let me = Identity {
            origin_host: "pcrf.test".into(),
            origin_realm: "test".into(),
        };
        let request = |doic: bool| {
            let mut buf = BytesMut::new();
            let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, gx::GX, 7, 9);
            b.str(avp::SESSION_ID, "pgw;1");
            if doic {
                b.group(avp::OC_SUPPORTED_FEATURES, |g| {
                    g.u64(avp::OC_FEATURE_VECTOR, 1);
                });
            }
            b.finish();
            Message::parse(buf.freeze()).expect("request")
        };
        let reporter = OverloadReporter::new();
        reporter.report(OVERLOAD_REDUCTION_PERCENT, OVERLOAD_REPORT_VALIDITY);
        let ans = Message::parse(too_busy_answer(&request(true), &me, &reporter)).expect("answer");
        assert_ne!(ans.flags() & FLAG_E, 0, "3004 is a protocol error");
        assert_eq!(ans.hop_by_hop(), 7);
        let rc = ans
            .find(avp::RESULT_CODE)
            .expect("avps")
            .expect("Result-Code");
        assert_eq!(rc.as_u32(), Ok(result_code::DIAMETER_TOO_BUSY));
        let olr = ans.find(avp::OC_OLR).expect("avps").expect("OC-OLR");
        let pct = olr
            .grouped()
            .find(avp::OC_REDUCTION_PERCENTAGE)
            .expect("grouped")
            .expect("reduction");
        assert_eq!(pct.as_u32(), Ok(OVERLOAD_REDUCTION_PERCENT));
        ans.validate().expect("a valid answer");
        let plain =
            Message::parse(too_busy_answer(&request(false), &me, &reporter)).expect("answer");
        assert!(plain.find(avp::OC_OLR).expect("avps").is_none());
    }
}
