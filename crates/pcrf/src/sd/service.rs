//! Sd on the node (TS 29.212 §4b/§5b): the TDF session lives inside the Gx
//! session it is bound to, so every Sd change is applied under the Gx
//! session's lock and written with it in one commit.
//!
//! Solicited: when a Gx decision has ADC rules and no TDF session exists,
//! a TSR goes to the configured TDF after the Gx answer (never holding it
//! up). Unsolicited: the TDF's CCR-I is bound by the UE address. The TDF's
//! APPLICATION_START/STOP reports are policy input; a changed Gx decision
//! is pushed to the PCEF (RAR), changed ADC rules to the TDF (Sd RAR).
//! Usage the TDF reports is counted through the `sd:` sources of the usage
//! file, exactly once, in the same commit as the record and its answer.

use crate::admission::Class;
use crate::metrics::Command;
use crate::node::events::StagedEvents;
use crate::node::ownership::Requester;
use crate::node::{
    now_ms, replay, Answered, Capabilities, Sessions, Settings, Signalling, Subscribers, Telemetry,
    UsageLedger,
};
use crate::pcc::{RequestType, UsageGrant, UsageInstructions, UsageReport};
use crate::policy::decision::AdcRule;
use crate::policy::decision::Decision;
use crate::sd::state::SdState;
use crate::sd::{self, AdcChanges, TdfCcr, TsrSubject};
use crate::session::binding::stored_prefixes_containing;
use crate::session::tdf::{adc_diff, TdfMode, TdfSession};
use crate::session::{GxSession, SessionSlot, SessionState};
use crate::session_message::Outcome;
use crate::store::OpenSessionsBy;
use crate::subscriber::Subscriber;
use crate::sy::service::Sy;
use crate::txn::session_core;
use crate::txn::{self, Runner};
use crate::usage::config::Interface;
use crate::usage::grant::grant_for;
use bytes::{Bytes, BytesMut};
use diameter::codec::{missing_avp, DiameterError, Message};
use diameter::dict::{avp, cmd};
use diameter::result_code;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::sync::Weak;
use std::time::{Duration, Instant};

/// How long the TDF's CCR-T after our release (Sd RAR with
/// Session-Release-Cause) is still answered 2001 rather than 5002.
const RELEASED_KEPT: Duration = Duration::from_secs(300);

/// Session-Release-Cause UNSPECIFIED_REASON: the IP-CAN session ended.
const RELEASE_UNSPECIFIED: i32 = 0;

/// The Sd service: binds each TDF session to its Gx session and keeps the
/// TDF's ADC rules in step with the Gx decision.
pub struct Sd {
    pub(crate) sessions: Sessions,
    pub(crate) subscribers: Subscribers,
    pub(crate) usage: UsageLedger,
    pub(crate) signalling: Signalling,
    pub(crate) telemetry: Telemetry,
    pub(crate) settings: Settings,
    pub(crate) txn: Runner,
    pub(crate) state: SdState,
    pub(crate) sy: Arc<Sy>,
    /// This service, for the background exchanges it starts.
    pub(crate) me_ref: Weak<Sd>,
}

impl Sd {
    pub fn new(caps: &Capabilities, state: SdState, sy: Arc<Sy>) -> Arc<Sd> {
        Arc::new_cyclic(|me| Sd {
            sessions: caps.sessions.clone(),
            subscribers: caps.subscribers.clone(),
            usage: caps.usage.clone(),
            signalling: caps.signalling.clone(),
            telemetry: caps.telemetry.clone(),
            settings: caps.settings.clone(),
            txn: Runner::new(caps),
            state,
            sy,
            me_ref: me.clone(),
        })
    }
    /// Answers one Sd request from a TDF (its CCR).
    pub async fn handle_sd(&self, req: Message) -> Result<Bytes, DiameterError> {
        let started = Instant::now();
        if req.command_code() != cmd::CREDIT_CONTROL {
            return Err(DiameterError::new(
                result_code::DIAMETER_COMMAND_UNSUPPORTED,
                "Sd serves CCR only at the PCRF",
            ));
        }
        let c = match req.validate().and_then(|_| sd::decode_ccr(&req)) {
            Ok(c) => c,
            Err(e) => {
                txn::refused(&self.txn, Command::SdCcr, started, &e);
                return Err(e);
            }
        };
        let class = match c.request_type {
            Some(RequestType::Initial) => Class::New,
            _ => Class::Existing,
        };
        let (req, c) = (&req, &c);
        let envelope = txn::Request {
            message: req,
            command: Command::SdCcr,
            class,
            subject: c.session_id,
            started,
        };
        txn::serve(&self.txn, envelope, move |_| async move {
            match c.request_type {
                Some(RequestType::Initial) => self.sd_initial(req, c).await,
                Some(RequestType::Update) => self.sd_update(req, c).await,
                Some(RequestType::Termination) => self.sd_termination(req, c).await,
                None => Err(missing_avp(avp::CC_REQUEST_TYPE, "CC-Request-Type")),
            }
        })
        .await
    }

    /// The Gx session holding TDF session `sd_id` by this node's index
    /// alone (a CCR-I's retransmission: no store read for a new session):
    /// its copy here, or, when a write conflict dropped that copy, the one
    /// in the store afresh.
    async fn tdf_holder(&self, sd_id: &str) -> Result<Option<Arc<SessionSlot>>, DiameterError> {
        match self.state.gx_of(sd_id) {
            Some(gx) => self.sessions.find_or_take_over(&gx).await,
            None => Ok(None),
        }
    }

    fn sd_cca(
        &self,
        req: &Message,
        c: &TdfCcr<'_>,
        outcome: Outcome,
        adc: &AdcChanges<'_>,
        usage: &UsageInstructions,
    ) -> Answered {
        let mut buf = BytesMut::with_capacity(256);
        sd::encode_cca(&mut buf, req, self.signalling.me(), c, outcome, adc, usage);
        Answered {
            decided_by: None,
            bytes: buf.freeze(),
            code: match outcome {
                Outcome::Result(rc) | Outcome::Experimental(rc) => rc,
            },
        }
    }

    fn sd_unknown(&self, req: &Message, c: &TdfCcr<'_>) -> Answered {
        self.state.counters.unknown_sessions.fetch_add(1, Relaxed);
        tracing::info!(
            session = c.session_id,
            tdf = c.origin_host,
            "Sd request for an unknown TDF session (5002)"
        );
        self.sd_refused(req, c)
    }

    /// 5002: the answer to a Session-Id that does not exist, and so also
    /// to a TDF acting on another TDF's session (see `node/ownership.rs`).
    fn sd_refused(&self, req: &Message, c: &TdfCcr<'_>) -> Answered {
        let rc = result_code::DIAMETER_UNKNOWN_SESSION_ID;
        self.sd_cca(
            req,
            c,
            Outcome::Result(rc),
            &AdcChanges::default(),
            &Default::default(),
        )
    }

    /// What a CCR on the existing TDF session `t` is answered before it is
    /// applied, if anything: 5002 when it comes from neither the TDF nor a
    /// fail-over partner of it; the kept answer again when it repeats the
    /// last request and comes from the TDF that answer went to.
    fn answer_again(&self, t: &TdfSession, req: &Message, c: &TdfCcr<'_>) -> Option<Answered> {
        let who = self.sessions.requester(&t.id, &t.host, c.origin_host);
        if !who.is_served() {
            return Some(self.sd_refused(req, c));
        }
        if who != Requester::Holder || t.last_request_number != c.request_number {
            return None;
        }
        let ans = t.last_answer.as_ref()?;
        self.telemetry
            .counters()
            .retransmissions
            .fetch_add(1, Relaxed);
        Some(replay(ans, req))
    }

    /// The ADC rules of a decision that are well formed (the rest dropped,
    /// counted and logged).
    /// Drops the ADC rules of a decision that are malformed or named twice.
    pub(crate) fn check_adc(&self, session: &str, mut d: Decision) -> Decision {
        if !d.adc.is_empty() {
            d.adc = self.valid_adc(session, &d.adc);
        }
        d
    }

    pub(crate) fn valid_adc(&self, session: &str, rules: &[AdcRule]) -> Vec<AdcRule> {
        let mut out: Vec<AdcRule> = Vec::with_capacity(rules.len());
        for r in rules {
            match r.check() {
                Ok(()) if !out.iter().any(|o| o.key() == r.key()) => out.push(r.clone()),
                Ok(()) => {
                    self.state.counters.invalid_adc.fetch_add(1, Relaxed);
                    tracing::warn!(
                        session,
                        rule = r.key(),
                        "policy named an ADC rule twice; the first is kept"
                    );
                }
                Err(e) => {
                    self.state.counters.invalid_adc.fetch_add(1, Relaxed);
                    tracing::warn!(session, error = %e, "policy returned a malformed ADC rule; dropped");
                }
            }
        }
        out
    }

    /// Grants for the Monitoring-Keys of ADC definitions (`only`: just
    /// these keys, the ones the TDF just reported), from the accumulators
    /// the `sd:` sources feed.
    fn sd_grants(
        &self,
        s: &GxSession,
        usage: &crate::usage::SubscriberUsage,
        rules: &[AdcRule],
        only: Option<&BTreeSet<String>>,
        now: i64,
    ) -> UsageInstructions {
        let cfg = self.usage.table().config();
        let mut out = UsageInstructions::default();
        if cfg.is_empty() {
            return out;
        }
        let profile = self
            .subscribers
            .find(s.imsi.as_deref(), s.msisdn.as_deref());
        let mut keys: Vec<&str> = rules
            .iter()
            .filter_map(|r| r.monitoring_key.as_deref())
            .filter(|k| only.is_none_or(|o| o.contains(*k)))
            .collect();
        keys.dedup();
        for k in keys {
            if let Some((level, units)) =
                grant_for(&cfg, usage, profile.as_deref(), Interface::Sd, k, now)
            {
                self.usage.table().counters.grants.fetch_add(1, Relaxed);
                out.grants.push(UsageGrant {
                    key: k.to_owned(),
                    level,
                    units,
                });
            }
        }
        out
    }

    /// The open Gx session a TDF's CCR-I binds to: by UE IPv4 address or
    /// IPv6 prefix; among several, the one of the same subscriber.
    fn bind_tdf(&self, c: &TdfCcr<'_>) -> Option<Arc<SessionSlot>> {
        let mut slots = match (c.ue_ipv4, c.ue_ipv6_prefix) {
            (Some(v4), _) => self.sessions.table().bound_to(IpAddr::V4(v4)),
            (None, Some(p)) => self
                .sessions
                .table()
                .bindings()
                .find_prefix(p)
                .iter()
                .filter_map(|id| self.sessions.table().get(id))
                .collect(),
            (None, None) => Vec::new(),
        };
        slots.retain(|s| s.load().state == SessionState::Open);
        let same_subscriber = |slot: &Arc<SessionSlot>| {
            let s = slot.load();
            (c.imsi.is_some() && s.imsi.as_deref() == c.imsi)
                || (c.msisdn.is_some() && s.msisdn.as_deref() == c.msisdn)
        };
        match slots.iter().position(same_subscriber) {
            Some(i) => Some(slots.swap_remove(i)),
            None => slots.into_iter().next(),
        }
    }

    /// On a store shared with other nodes, takes over the open Gx sessions
    /// the store has at the CCR-I's UE address, as `bind_tdf` looks in
    /// memory (the IPv4 address when given, else the IPv6 prefixes
    /// containing the address), then binds again.
    async fn bind_tdf_or_take_over(
        &self,
        c: &TdfCcr<'_>,
    ) -> Result<Option<Arc<SessionSlot>>, DiameterError> {
        if let Some(slot) = self.bind_tdf(c) {
            return Ok(Some(slot));
        }
        let by = match (c.ue_ipv4, c.ue_ipv6_prefix) {
            (Some(v4), _) => OpenSessionsBy::Ipv4(v4.to_string()),
            (None, Some(p)) => match stored_prefixes_containing(p) {
                keys if keys.is_empty() => return Ok(None),
                keys => OpenSessionsBy::Ipv6Prefixes(keys),
            },
            (None, None) => return Ok(None),
        };
        if self.sessions.take_over_by(by).await?.is_empty() {
            return Ok(None);
        }
        Ok(self.bind_tdf(c))
    }

    /// The Gx session holding TDF session `sd_id`: the one here, or on a
    /// store shared with other nodes, the one the store has holding it
    /// (the TDF session was opened or last served on another node), taken
    /// over and indexed here.
    async fn tdf_slot(&self, sd_id: &str) -> Result<Option<Arc<SessionSlot>>, DiameterError> {
        let holds = |slot: &Arc<SessionSlot>| {
            let s = slot.load();
            s.state == SessionState::Open && s.tdf.as_ref().is_some_and(|t| t.id == sd_id)
        };
        let here = self
            .state
            .gx_of(sd_id)
            .and_then(|g| self.sessions.table().get(&g));
        if let Some(slot) = here.filter(holds) {
            return Ok(Some(slot));
        }
        let by = OpenSessionsBy::SubSession(sd_id.to_owned());
        let found = self
            .sessions
            .take_over_by(by)
            .await?
            .into_iter()
            .find(holds);
        if let Some(slot) = &found {
            let gx = slot.load().id.to_string();
            self.state.index.write().insert(sd_id.to_owned(), gx);
        }
        Ok(found)
    }

    /// Unsolicited mode: the TDF opens a session for a UE address.
    async fn sd_initial(&self, req: &Message, c: &TdfCcr<'_>) -> Result<Answered, DiameterError> {
        if c.ue_ipv4.is_none() && c.ue_ipv6_prefix.is_none() {
            return Err(missing_avp(avp::FRAMED_IP_ADDRESS, "Framed-IP-Address"));
        }
        // A retransmitted CCR-I is answered again, not applied twice; a
        // TDF session of another TDF is neither replayed nor replaced.
        if let Some(slot) = self.tdf_holder(c.session_id).await? {
            let again = txn::holding(&slot, async |cur| {
                cur.tdf
                    .as_ref()
                    .filter(|t| t.id == c.session_id)
                    .and_then(|t| self.answer_again(t, req, c))
            })
            .await;
            if let Some(answer) = again {
                return Ok(answer);
            }
        }
        let Some(slot) = self.bind_tdf_or_take_over(c).await? else {
            self.state.counters.unbound.fetch_add(1, Relaxed);
            tracing::info!(session = c.session_id, ipv4 = ?c.ue_ipv4, "TDF session for an address with no IP-CAN session");
            return Ok(self.sd_cca(
                req,
                c,
                Outcome::Experimental(sd::NO_IP_CAN_SESSION),
                &AdcChanges::default(),
                &Default::default(),
            ));
        };
        txn::holding(&slot, async |cur| -> Result<Answered, DiameterError> {
            // A CCR-I retransmitted to another node than the one that applied
            // it finds its session through the store: answered again.
            if let Some(t) = cur.tdf.as_ref().filter(|t| t.id == c.session_id) {
                if let Some(answer) = self.answer_again(t, req, c) {
                    return Ok(answer);
                }
            }
            if cur.state == SessionState::Closed {
                self.state.counters.unbound.fetch_add(1, Relaxed);
                return Ok(self.sd_cca(
                    req,
                    c,
                    Outcome::Experimental(sd::NO_IP_CAN_SESSION),
                    &AdcChanges::default(),
                    &Default::default(),
                ));
            }
            let now = now_ms();
            let mut s = (*cur).clone();
            let wanted = self.valid_adc(&s.id, &s.installed.adc);
            let mut tdf = TdfSession::new(
                c.session_id.to_owned(),
                TdfMode::Unsolicited,
                c.origin_host.to_owned(),
                c.origin_realm.to_owned(),
            );
            tdf.last_request_number = c.request_number;
            let usage = self.usage.table().load(&s.subscriber);
            let grants = self.sd_grants(&s, &usage, &wanted, None, now);
            let answer = self.sd_cca(
                req,
                c,
                Outcome::Result(result_code::DIAMETER_SUCCESS),
                &AdcChanges {
                    install: wanted.iter().collect(),
                    remove: Vec::new(),
                },
                &grants,
            );
            tdf.installed = wanted;
            tdf.last_answer = Some(answer.bytes.to_vec());
            let replaced = s.tdf.replace(Box::new(tdf)).map(|old| old.id);
            s.updated_ms = now;
            let s = Arc::new(s);
            txn::commit_record(&self.txn, &slot, s.clone()).await?;
            {
                let mut index = self.state.index.write();
                if let Some(old) = replaced {
                    index.remove(&old);
                }
                index.insert(c.session_id.to_owned(), s.id.to_string());
            }
            self.state.counters.opened.fetch_add(1, Relaxed);
            tracing::info!(sd = c.session_id, gx = %s.id, tdf = c.origin_host, "TDF session bound (unsolicited)");
            Ok(answer)
        })
        .await
    }

    /// Application starts and stops, and usage, from the TDF.
    async fn sd_update(&self, req: &Message, c: &TdfCcr<'_>) -> Result<Answered, DiameterError> {
        let Some(slot) = self.tdf_slot(c.session_id).await? else {
            return Ok(self.sd_unknown(req, c));
        };
        txn::holding(&slot, async |cur| -> Result<Answered, DiameterError> {
            let Some(old_tdf) = cur
                .tdf
                .as_ref()
                .filter(|t| t.id == c.session_id && cur.state == SessionState::Open)
            else {
                return Ok(self.sd_unknown(req, c));
            };
            if let Some(answer) = self.answer_again(old_tdf, req, c) {
                return Ok(answer);
            }
            let now = now_ms();
            let mut s = (*cur).clone();
            let mut tdf = old_tdf.clone();
            // A fail-over partner of the TDF carries the session on (the only
            // other peer served): Sd RARs go there now.
            tdf.host = c.origin_host.to_owned();
            tdf.realm = c.origin_realm.to_owned();
            for d in &c.detections {
                self.state.counters.app_reports.fetch_add(1, Relaxed);
                if d.started {
                    tdf.running.insert(d.application.to_owned());
                } else {
                    tdf.running.remove(d.application);
                }
            }
            tdf.last_request_number = c.request_number;
            s.tdf = Some(tdf);
            s.updated_ms = now;

            let sub = self.subscribers
                .find(s.imsi.as_deref(), s.msisdn.as_deref());
            let usage = self
                .counted_sd_usage(&s, sub.as_deref(), &c.usage_reports, now)
                .await?;
            // The applications are policy input: decide again.
            let view = match &usage {
                Some(step) => step.view(sub.as_deref()),
                None => self.usage.usage_view(&s.subscriber, sub.as_deref(), now),
            };
            let spending = self.sy.spending_of(&s);
            let refine = |id: &str, d| self.check_adc(id, d);
            let red =
                session_core::redecide(&self.txn, &s, sub.as_ref(), spending, view, now, refine);
            let installed = s.tdf.as_ref().map_or(Vec::new(), |t| t.installed.clone());
            // A refusal concerns the PCEF's session; the TDF keeps its rules.
            let wanted = if red.refused() {
                installed.clone()
            } else {
                red.decision.adc.clone()
            };
            let (install, remove) = adc_diff(&installed, &wanted);
            // Grants for the keys just reported and for newly installed rules.
            let mut regrant: BTreeSet<String> = c
                .usage_reports
                .iter()
                .map(|r| crate::pcc::key_text(r.key).into_owned())
                .collect();
            regrant.extend(install.iter().filter_map(|r| r.monitoring_key.clone()));
            let grants = match &usage {
                Some(step) => self.sd_grants(&s, &step.next, &wanted, Some(&regrant), now),
                None if !regrant.is_empty() => {
                    let current = self.usage.table().load(&s.subscriber);
                    self.sd_grants(&s, &current, &wanted, Some(&regrant), now)
                }
                None => UsageInstructions::default(),
            };
            // The PCEF's part follows after this answer: Signalling::push decides
            // again with the new applications and sends a Gx RAR if it changed.
            let apps_changed =
                cur.tdf.as_ref().map(|t| &t.running) != s.tdf.as_ref().map(|t| &t.running);
            let answer = self.sd_cca(
                req,
                c,
                Outcome::Result(result_code::DIAMETER_SUCCESS),
                &AdcChanges { install, remove },
                &grants,
            );
            if let Some(t) = s.tdf.as_mut() {
                t.installed.clone_from(&wanted);
                t.last_answer = Some(answer.bytes.to_vec());
            }
            s.installed.adc = wanted;
            let s = Arc::new(s);
            txn::commit_session(
                &self.txn,
                &slot,
                s.clone(),
                usage,
                StagedEvents::default(),
                None,
            )
            .await?;
            if apps_changed {
                if let Some(this) = self.me_ref.upgrade() {
                    let id = s.id.clone();
                    tokio::spawn(async move {
                        if let Err(e) = this.signalling.push(&id, false).await {
                            tracing::warn!(session = %id, error = %e, "push after an application report failed");
                        }
                    });
                }
            }
            Ok(answer)
        })
        .await
    }

    /// The subscriber's usage, taken for this request, with the TDF's
    /// reports counted into the accumulators its `sd:` sources feed (each
    /// once: committed with the record and its answer); none when the TDF
    /// reported no usage.
    async fn counted_sd_usage(
        &self,
        s: &GxSession,
        profile: Option<&Subscriber>,
        reports: &[UsageReport<'_>],
        now: i64,
    ) -> Result<Option<crate::node::UsageStep>, DiameterError> {
        if reports.is_empty() {
            return Ok(None);
        }
        let mut usage = self.usage.begin_usage(&s.subscriber, profile, now).await?;
        if let Some(step) = usage.as_mut() {
            for r in reports {
                let (key, _) = self.usage.count_report(step, Interface::Sd, &s.id, r, now);
                step.reported.insert(key);
            }
            self.usage.sum_up_unknown_keys(step, Interface::Sd, &s.id);
        }
        Ok(usage)
    }

    /// The TDF ends its session (on its own, or after our release).
    async fn sd_termination(
        &self,
        req: &Message,
        c: &TdfCcr<'_>,
    ) -> Result<Answered, DiameterError> {
        let ok = |this: &Sd| {
            this.sd_cca(
                req,
                c,
                Outcome::Result(result_code::DIAMETER_SUCCESS),
                &AdcChanges::default(),
                &Default::default(),
            )
        };
        // Released here lately (no store read for it), by its own TDF.
        if self.state.gx_of(c.session_id).is_none() {
            let mut released = self.state.released.lock();
            let theirs = released.get(c.session_id).is_some_and(|(host, _)| {
                self.sessions
                    .requester(c.session_id, host, c.origin_host)
                    .is_served()
            });
            if theirs {
                released.remove(c.session_id);
                drop(released);
                return Ok(ok(self));
            }
        }
        let Some(slot) = self.tdf_slot(c.session_id).await? else {
            return Ok(self.sd_unknown(req, c));
        };
        txn::holding(&slot, async |cur| -> Result<Answered, DiameterError> {
            let Some(tdf) = cur.tdf.as_ref().filter(|t| t.id == c.session_id) else {
                return Ok(self.sd_unknown(req, c));
            };
            if !self
                .sessions
                .requester(&tdf.id, &tdf.host, c.origin_host)
                .is_served()
            {
                return Ok(self.sd_refused(req, c));
            }
            let now = now_ms();
            let mut s = (*cur).clone();
            let mut usage = None;
            if !c.usage_reports.is_empty() {
                let sub = self
                    .subscribers
                    .find(s.imsi.as_deref(), s.msisdn.as_deref());
                usage = self
                    .counted_sd_usage(&s, sub.as_deref(), &c.usage_reports, now)
                    .await?;
            }
            s.tdf = None;
            s.updated_ms = now;
            let answer = ok(self);
            txn::commit_session(
                &self.txn,
                &slot,
                Arc::new(s),
                usage,
                StagedEvents::default(),
                None,
            )
            .await?;
            self.state.index.write().remove(c.session_id);
            Ok(answer)
        })
        .await
    }

    /// After a Gx answer or push: opens the TDF session (solicited) or
    /// sends the TDF its changed ADC rules, on a task of its own.
    pub(crate) fn sd_follow(&self, s: &GxSession) {
        if s.state != SessionState::Open {
            return;
        }
        let needed = match &s.tdf {
            None => !s.installed.adc.is_empty() && self.settings.live().cfg.sd.tdf.is_some(),
            Some(t) => t.installed != s.installed.adc,
        };
        if !needed {
            return;
        }
        let Some(this) = self.me_ref.upgrade() else {
            return;
        };
        let id = s.id.clone();
        tokio::spawn(async move { this.sd_reconcile(&id).await });
    }

    /// Brings the TDF in line with the Gx session's decision, under the
    /// session's lock: TSR when there is no TDF session, Sd RAR otherwise.
    async fn sd_reconcile(&self, gx_id: &str) {
        let Some(slot) = self.sessions.table().get(gx_id) else {
            return;
        };
        txn::holding(&slot, async |cur| {
            if cur.state != SessionState::Open {
                return;
            }
            let wanted = self.valid_adc(&cur.id, &cur.installed.adc);
            let mut s = (*cur).clone();
            let outcome = match &cur.tdf {
                None if wanted.is_empty() => return,
                None => self.send_tsr(&cur, &wanted).await.map(|(t, failed)| {
                    let mut t = t;
                    t.installed = wanted
                        .iter()
                        .filter(|r| !failed.contains(&r.key().to_owned()))
                        .cloned()
                        .collect();
                    s.tdf = Some(Box::new(t));
                }),
                Some(t) => {
                    let (install, remove) = adc_diff(&t.installed, &wanted);
                    if install.is_empty() && remove.is_empty() {
                        return;
                    }
                    let changes = AdcChanges { install, remove };
                    let usage = self.usage.table().load(&cur.subscriber);
                    let only: BTreeSet<String> = changes
                        .install
                        .iter()
                        .filter_map(|r| r.monitoring_key.clone())
                        .collect();
                    let grants = self.sd_grants(&cur, &usage, &wanted, Some(&only), now_ms());
                    match self.send_sd_rar(t, None, &changes, &grants).await {
                        Ok(ans) if ans.code() == result_code::DIAMETER_SUCCESS => {
                            if let Some(t) = s.tdf.as_mut() {
                                t.installed = wanted
                                    .iter()
                                    .filter(|r| !ans.failed_rules.contains(&r.key().to_owned()))
                                    .cloned()
                                    .collect();
                            }
                            Ok(())
                        }
                        Ok(ans) if ans.code() == result_code::DIAMETER_UNKNOWN_SESSION_ID => {
                            // The TDF no longer has it: forget it here too.
                            self.state.index.write().remove(&t.id);
                            s.tdf = None;
                            Ok(())
                        }
                        Ok(ans) => Err(format!("Sd RAA {}", ans.code())),
                        Err(e) => Err(e),
                    }
                }
            };
            if let Err(e) = outcome {
                self.state.counters.open_failed.fetch_add(1, Relaxed);
                tracing::warn!(session = gx_id, error = %e, "TDF not brought in line with the decision");
                return;
            }
            s.updated_ms = now_ms();
            let s = Arc::new(s);
            if let Err(e) = txn::commit_record(&self.txn, &slot, s.clone()).await {
                tracing::error!(session = gx_id, error = %e, "TDF session state not stored");
                return;
            }
            if let Some(t) = &s.tdf {
                if cur.tdf.is_none() {
                    self.state
                        .index
                        .write()
                        .insert(t.id.clone(), s.id.to_string());
                    self.state.counters.opened.fetch_add(1, Relaxed);
                    tracing::info!(sd = %t.id, gx = gx_id, tdf = %t.host, "TDF session opened (solicited)");
                }
            }
        })
        .await
    }

    /// Sends a TSR to the configured TDF; on success, the new TDF session
    /// and the ADC rules it reported failed.
    async fn send_tsr(
        &self,
        s: &GxSession,
        wanted: &[AdcRule],
    ) -> Result<(TdfSession, Vec<String>), String> {
        let cfg = self.settings.live().cfg.clone();
        let host = cfg.sd.tdf.clone().ok_or("no [sd].tdf configured")?;
        let realm = cfg
            .sd
            .realm
            .clone()
            .unwrap_or_else(|| cfg.node.origin_realm.clone());
        let peer = self
            .signalling
            .route_to(&host)
            .ok_or_else(|| format!("TDF {host} is not connected, directly or through a relay"))?;
        let n = self.state.next_id.fetch_add(1, Relaxed);
        let id = format!("{};sd;{};{n}", self.signalling.me().origin_host, now_ms());
        let prefix = s
            .ue_ipv6_prefix
            .as_deref()
            .and_then(|h| hex::decode(h).ok());
        let subject = TsrSubject {
            imsi: s.imsi.as_deref(),
            msisdn: s.msisdn.as_deref(),
            ue_ipv4: s.ue_ipv4,
            ue_ipv6_prefix: prefix.as_deref(),
            apn: s.apn.as_deref(),
        };
        let changes = AdcChanges {
            install: wanted.iter().collect(),
            remove: Vec::new(),
        };
        let usage = self.usage.table().load(&s.subscriber);
        let grants = self.sd_grants(s, &usage, wanted, None, now_ms());
        let started = Instant::now();
        let res = peer
            .request(sd::SD, cmd::TDF_SESSION, |b| {
                sd::encode_tsr(
                    b,
                    &id,
                    self.signalling.me(),
                    &host,
                    &realm,
                    &subject,
                    &changes,
                    &grants,
                )
            })
            .await;
        let ans = match res {
            Ok(m) => m,
            Err(e) => {
                self.telemetry.metrics().request(
                    Command::Tsr,
                    crate::metrics::NO_ANSWER,
                    started.elapsed(),
                );
                return Err(format!("TSR to {host}: {e}"));
            }
        };
        let tsa = sd::decode_answer(&ans).map_err(|e| format!("bad TSA: {e}"))?;
        self.telemetry
            .metrics()
            .request(Command::Tsr, tsa.code(), started.elapsed());
        if tsa.code() != result_code::DIAMETER_SUCCESS {
            return Err(format!("TDF {host} refused the TSR: {}", tsa.code()));
        }
        let realm_of_answer = ans
            .find(avp::ORIGIN_REALM)
            .ok()
            .flatten()
            .and_then(|a| a.as_identity().ok().map(str::to_owned))
            .unwrap_or(realm);
        Ok((
            TdfSession::new(id, TdfMode::Solicited, host, realm_of_answer),
            tsa.failed_rules,
        ))
    }

    async fn send_sd_rar(
        &self,
        t: &TdfSession,
        release: Option<i32>,
        changes: &AdcChanges<'_>,
        usage: &UsageInstructions,
    ) -> Result<sd::SdAnswer, String> {
        let peer = self.signalling.route_to(&t.host).ok_or_else(|| {
            format!(
                "TDF {} is not connected, directly or through a relay",
                t.host
            )
        })?;
        let started = Instant::now();
        let res = peer
            .request(sd::SD, cmd::RE_AUTH, |b| {
                sd::encode_rar(
                    b,
                    &t.id,
                    self.signalling.me(),
                    &t.host,
                    &t.realm,
                    release,
                    changes,
                    usage,
                )
            })
            .await;
        match res {
            Ok(m) => {
                let raa = sd::decode_answer(&m).map_err(|e| format!("bad Sd RAA: {e}"))?;
                self.telemetry
                    .metrics()
                    .request(Command::SdRar, raa.code(), started.elapsed());
                Ok(raa)
            }
            Err(e) => {
                self.telemetry.metrics().request(
                    Command::SdRar,
                    crate::metrics::NO_ANSWER,
                    started.elapsed(),
                );
                Err(format!("Sd RAR to {}: {e}", t.host))
            }
        }
    }

    /// A push whose decision changed only the ADC rules: record them (no
    /// Gx RAR) and let the TDF follow. Called under the session's lock.
    pub(crate) async fn adopt_adc(
        &self,
        slot: &SessionSlot,
        cur: &GxSession,
        adc: &[AdcRule],
    ) -> Result<(), crate::pcc::operation::ControlError> {
        if cur.installed.adc == adc {
            return Ok(());
        }
        let mut s = cur.clone();
        s.installed.adc = adc.to_vec();
        s.updated_ms = now_ms();
        let s = Arc::new(s);
        txn::commit_record(&self.txn, slot, s.clone())
            .await
            .map_err(|e| crate::pcc::operation::ControlError::Unavailable(e.message.to_string()))?;
        self.sd_follow(&s);
        Ok(())
    }

    /// The Gx session ended: its TDF session is released (Sd RAR with
    /// Session-Release-Cause); the TDF's CCR-T that follows is answered 2001.
    pub(crate) fn sd_release(&self, s: &GxSession) {
        let Some(t) = s.tdf.clone() else {
            return;
        };
        self.state.index.write().remove(&t.id);
        {
            let mut released = self.state.released.lock();
            released.retain(|_, (_, at)| at.elapsed() < RELEASED_KEPT);
            released.insert(t.id.clone(), (t.host.clone(), Instant::now()));
        }
        self.state.counters.released.fetch_add(1, Relaxed);
        let Some(this) = self.me_ref.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            let none = AdcChanges::default();
            match this
                .send_sd_rar(&t, Some(RELEASE_UNSPECIFIED), &none, &Default::default())
                .await
            {
                Ok(a) if a.code() == result_code::DIAMETER_SUCCESS => {}
                Ok(a) => {
                    this.state.released.lock().remove(&t.id);
                    tracing::info!(sd = %t.id, code = a.code(), "TDF answered the release with an error");
                }
                Err(e) => {
                    this.state.released.lock().remove(&t.id);
                    tracing::warn!(sd = %t.id, error = %e, "TDF session release not delivered");
                }
            }
        });
    }
}

impl Sd {
    /// Sd counters and the TDF session gauge for /metrics.
    pub(crate) fn write_sd_metrics(&self, out: &mut crate::metrics::Exposition) {
        let c = &self.state.counters;
        let counters: [(&str, &str, &AtomicU64); 7] = [
            ("pcrf_sd_unknown_sessions_total", "TDF requests for Sd sessions the PCRF does not know (answered 5002).", &c.unknown_sessions),
            ("pcrf_sd_unbound_total", "TDF CCR-I whose UE address is held by no open Gx session (answered 5140).", &c.unbound),
            ("pcrf_sd_sessions_opened_total", "TDF sessions opened (TSA success or TDF CCR-I bound).", &c.opened),
            ("pcrf_sd_reconcile_failed_total", "TSRs and Sd RARs that did not bring the TDF in line (not connected, no answer, refused).", &c.open_failed),
            ("pcrf_sd_application_reports_total", "APPLICATION_START/STOP reports from TDFs.", &c.app_reports),
            ("pcrf_sd_released_total", "TDF sessions released because their Gx session ended.", &c.released),
            ("pcrf_sd_invalid_adc_rules_total", "ADC rules of a decision dropped as malformed or repeated.", &c.invalid_adc),
        ];
        for (name, help, value) in counters {
            out.counter(name, help, value.load(Relaxed));
        }
        out.gauge(
            "pcrf_sd_sessions",
            "TDF sessions bound to open Gx sessions.",
            self.state.len() as u64,
        );
    }
}

impl crate::metrics::MetricsSource for Sd {
    fn write(&self, out: &mut crate::metrics::Exposition) {
        self.write_sd_metrics(out);
    }
}
