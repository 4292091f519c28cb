//! The running PCRF node: the tables, the policy engine and the store writer,
//! and what happens to each request. A CCR is decoded (`gx.rs`), applied to
//! its session under the session's own lock, decided by the policy (or the
//! memo), persisted through the group commit, and only then answered.
//! The REST API drives the same operations through the `Control` trait.

mod monitoring;
mod pushes;
mod rx;
mod sd;
mod sy;

pub use monitoring::UsageCounters;

use crate::admission::{Admission, Class};
use crate::api::control::{
    Control, ControlError, ReauthOutcome, ReleaseCause, ReleaseOutcome, ReloadError, SessionFilter,
};
use crate::api::usage::{AccumulatorView, ReportView, UsageChange, UsageView};
use crate::config::{Config, UnknownSubscriber};
use crate::gx::{self, CcaExtras, Ccr, Identity, Outcome, RequestType, UsageInstructions};
use crate::metrics::{
    peer_stats, write_peers, Command, CommitStats, Exposition, HistogramSnapshot, Kind, Metrics,
    MetricsSource, PolicyStats as MetricsPolicyStats, SessionStats,
};
use crate::policy::decision::{Decision, Reject};
use crate::policy::input::{
    NetworkInput, PolicyInput, RuleFailure, SessionInput, SubscriberInput, TimeInput,
};
use crate::policy::{PolicyEngine, Ran};
use crate::session::{GxSession, RuleDiff, SessionState, SessionTable};
use crate::store::group_commit::GroupCommit;
use crate::store::group_commit::BATCH_SIZE_BOUNDS;
use crate::store::postgres::{PostgresHandles, QueryProfiler};
use crate::store::{Change, StoreError};
use crate::subscriber::Subscriber;
use crate::subscribers::SubscriberTable;
use crate::usage::config::UsageConfig;
use crate::usage::table::UsageTable;
use crate::usage::SubscriberUsage;
use bytes::{Bytes, BytesMut};
use diameter::codec::{missing_avp, DiameterError, Message, MessageBuilder, FLAG_E, FLAG_T};
use diameter::dict::{self, avp, cmd};
use diameter::doic::OverloadReporter;
use diameter::result_code;
use diameter::transport::{PeerHandle, PeerTable, RequestError};
use parking_lot::RwLock;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// DIAMETER_USER_UNKNOWN: a Result-Code of RFC 4006 (§9.1) that TS 29.212
/// (§5.5) uses in a CCA-I for a subscriber the PCRF does not know.
pub const USER_UNKNOWN: u32 = 5030;

/// What a DOIC report asks of reacting PCEFs while requests are shed: send
/// 30% less, for 10 s at a time (renewed while shedding goes on).
const OVERLOAD_REDUCTION_PERCENT: u32 = 30;
const OVERLOAD_REPORT_VALIDITY: Duration = Duration::from_secs(10);

/// How long a request waits for the store (or for a subscriber's usage
/// held by another request) before it is answered 5012.
const COMMIT_WAIT: Duration = Duration::from_secs(5);

/// Counters of the node's own decisions, rendered into /metrics.
#[derive(Default)]
pub struct NodeCounters {
    pub policy_fallbacks: AtomicU64,
    pub unknown_rule_names: AtomicU64,
    pub rule_failures_reported: AtomicU64,
    pub retransmissions: AtomicU64,
    pub store_failures: AtomicU64,
    pub writes_skipped: AtomicU64,
}

/// The parts of the configuration that change without a restart.
struct Live {
    cfg: Arc<Config>,
    catalog_rules: HashSet<String>,
    catalog_bases: HashSet<String>,
}

impl Live {
    fn of(cfg: Arc<Config>) -> Live {
        Live {
            catalog_rules: cfg.rules.predefined.iter().cloned().collect(),
            catalog_bases: cfg.rules.base_names.iter().cloned().collect(),
            cfg,
        }
    }
}

/// The PCRF node.
pub struct Node {
    live: arc_swap::ArcSwap<Live>,
    admission: Admission,
    me: Identity,
    subscribers: SubscriberTable,
    sessions: SessionTable,
    policy: Arc<PolicyEngine>,
    store: GroupCommit,
    peers: PeerTable,
    /// Congestion level by cell (ECGI, 14 lowercase hex digits).
    congestion: RwLock<HashMap<String, u32>>,
    tz: jiff::tz::TimeZone,
    metrics: Arc<Metrics>,
    counters: NodeCounters,
    /// The PostgreSQL store's profiler and connection state, when it is one.
    pg: Option<PostgresHandles>,
    /// Every subscriber's accumulators (the read path; the store has them too).
    usage: UsageTable,
    /// The usage file in force (replaced by a reload that passes its checks).
    usage_cfg: arc_swap::ArcSwap<UsageConfig>,
    usage_counters: UsageCounters,
    push_counters: pushes::PushCounters,
    /// This node, for the background pushes it starts.
    me_ref: std::sync::Weak<Node>,
    /// DOIC overload reports to the PCEFs that asked for them.
    overload: OverloadReporter,
    /// A report is out (checked without the reporter's lock per request).
    overload_reported: std::sync::atomic::AtomicBool,
    /// Rx counters and recently aborted AF sessions.
    rx: rx::RxState,
    /// Sd: which Gx session holds each TDF session (node/sd.rs).
    sd: sd::SdState,
    /// Sy: the subscribers' Sy sessions and the OCS connections.
    sy: sy::SyPart,
}

/// What start-up hands to the node.
pub struct NodeParts {
    pub cfg: Arc<Config>,
    pub policy: Arc<PolicyEngine>,
    pub store: GroupCommit,
    pub subscribers: Vec<Subscriber>,
    pub sessions: Vec<GxSession>,
    pub usage: Vec<SubscriberUsage>,
    pub usage_cfg: UsageConfig,
    pub peers: PeerTable,
    pub metrics: Arc<Metrics>,
    pub tz: jiff::tz::TimeZone,
    pub pg: Option<PostgresHandles>,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What one Gx request produced: the answer and its result for metrics.
struct Answered {
    bytes: Bytes,
    code: u32,
}

impl Node {
    /// Assembles a node from what start-up loaded.
    pub fn new(p: NodeParts) -> Arc<Node> {
        let sub_table = SubscriberTable::default();
        for s in p.subscribers {
            sub_table.put(Arc::new(s));
        }
        let session_table = SessionTable::default();
        let sd = sd::SdState::from_sessions(&p.sessions);
        let sy_part = sy::SyPart::recover(&p.sessions);
        for s in p.sessions {
            session_table.replace(Arc::new(s));
        }
        let usage = UsageTable::default();
        for u in p.usage {
            usage.recover(u);
        }
        let cfg = p.cfg;
        Arc::new_cyclic(|me| Node {
            me: Identity {
                origin_host: cfg.node.origin_host.clone(),
                origin_realm: cfg.node.origin_realm.clone(),
            },
            admission: Admission::new(cfg.diameter.max_pending_requests),
            live: arc_swap::ArcSwap::from_pointee(Live::of(cfg)),
            subscribers: sub_table,
            sessions: session_table,
            policy: p.policy,
            store: p.store,
            peers: p.peers,
            congestion: RwLock::new(HashMap::new()),
            tz: p.tz,
            metrics: p.metrics,
            counters: NodeCounters::default(),
            pg: p.pg,
            usage,
            usage_cfg: arc_swap::ArcSwap::from_pointee(p.usage_cfg),
            usage_counters: UsageCounters::default(),
            push_counters: Default::default(),
            me_ref: me.clone(),
            overload: OverloadReporter::new(),
            overload_reported: Default::default(),
            rx: Default::default(),
            sd,
            sy: sy_part,
        })
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
    pub fn policy(&self) -> &Arc<PolicyEngine> {
        &self.policy
    }
    pub fn store(&self) -> &GroupCommit {
        &self.store
    }
    pub fn session_table(&self) -> &SessionTable {
        &self.sessions
    }
    pub fn counters(&self) -> &NodeCounters {
        &self.counters
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

    fn find_subscriber(&self, imsi: Option<&str>, msisdn: Option<&str>) -> Option<Arc<Subscriber>> {
        imsi.and_then(|i| self.subscribers.get(i))
            .or_else(|| msisdn.and_then(|m| self.subscribers.by_msisdn(m)))
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

    async fn ccr_update(&self, req: &Message, c: &Ccr<'_>) -> Result<Answered, DiameterError> {
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

    /// Persists changes; the caller answers only after this returns Ok.
    async fn commit(&self, changes: Vec<Change>) -> Result<(), DiameterError> {
        let res = tokio::time::timeout(COMMIT_WAIT, self.store.submit(changes)).await;
        let err = match res {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => "store did not commit in time".to_string(),
        };
        self.counters.store_failures.fetch_add(1, Relaxed);
        tracing::error!(error = %err, "state change not committed; answering DIAMETER_UNABLE_TO_COMPLY");
        Err(DiameterError::new(
            result_code::DIAMETER_UNABLE_TO_COMPLY,
            "state could not be stored",
        ))
    }

    fn cca(
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

    fn reject(&self, req: &Message, c: &Ccr<'_>, rej: &Reject) -> Answered {
        tracing::info!(session = c.session_id, code = rej.code, reason = ?rej.reason, "policy rejected the session");
        let outcome = match rej.vendor {
            Some(_) => Outcome::Experimental(rej.code),
            None => Outcome::Result(rej.code),
        };
        self.cca(req, c, outcome, None, None)
    }

    fn extras(&self, c: &Ccr<'_>) -> CcaExtras {
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

    fn note_fallback(&self, session: &str, out: &crate::policy::Outcome) {
        if let Some(err) = &out.error {
            self.counters.policy_fallbacks.fetch_add(1, Relaxed);
            tracing::error!(session, error = %err, "policy failed; fallback decision applied");
        }
    }

    /// Drops rule names the PCEFs do not know (when a catalog is configured).
    fn check_catalog(&self, session: &str, mut d: Decision) -> Decision {
        if !d.adc.is_empty() {
            d.adc = self.valid_adc(session, &d.adc);
        }
        let live = self.live.load();
        if !live.catalog_rules.is_empty() {
            d.rules.retain(|r| {
                let ok = live.catalog_rules.contains(r);
                if !ok {
                    self.counters.unknown_rule_names.fetch_add(1, Relaxed);
                    tracing::warn!(session, rule = %r, "policy named a predefined rule not in [rules].predefined; dropped");
                }
                ok
            });
        }
        if !live.catalog_bases.is_empty() {
            d.base_names.retain(|r| {
                let ok = live.catalog_bases.contains(r);
                if !ok {
                    self.counters.unknown_rule_names.fetch_add(1, Relaxed);
                    tracing::warn!(session, base = %r, "policy named a rule base not in [rules].base_names; dropped");
                }
                ok
            });
        }
        d
    }

    /// Records rule failures and forgets failed rules as installed (the
    /// PCEF does not have them); the policy sees the failures next.
    fn apply_rule_reports(&self, s: &mut GxSession, reports: &[RuleFailure]) {
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

    fn policy_input(&self, s: &GxSession, sub: Option<&Subscriber>) -> PolicyInput {
        let subscriber = match sub {
            Some(p) => SubscriberInput::from_profile(p),
            None => SubscriberInput {
                known: false,
                imsi: s.imsi.clone(),
                msisdn: s.msisdn.clone(),
                ..Default::default()
            },
        };
        let mut installed: Vec<String> = s.installed.rules.clone();
        installed.extend(s.installed.base_names.iter().cloned());
        installed.extend(s.installed.definitions.iter().map(|d| d.name.clone()));
        installed.sort();
        let congestion = s
            .location
            .as_deref()
            .and_then(ecgi_of_location)
            .and_then(|cell| self.congestion.read().get(&cell).copied())
            .unwrap_or(0);
        PolicyInput {
            subscriber,
            session: SessionInput {
                apn: s.apn.clone(),
                rat: s.rat_type.map(|v| enum_name(avp::RAT_TYPE, v)),
                ip_can_type: s.ip_can_type.map(|v| enum_name(avp::IP_CAN_TYPE, v)),
                ue_ipv4: s.ue_ipv4.map(|ip| ip.to_string()),
                ue_ipv6_prefix: s.ue_ipv6_prefix.clone(),
                location: s.location.clone(),
                ms_timezone: s.ms_timezone.clone(),
                device: s.device.clone(),
                pcef: s.pcef_host.clone(),
                installed,
                rule_failures: s.rule_failures.clone(),
            },
            time: TimeInput::now(&self.tz),
            network: NetworkInput { congestion },
            usage: Default::default(),
            applications: s.tdf.as_ref().map(|t| t.applications()).unwrap_or_default(),
            spending: self.spending_of(&s.subscriber),
        }
    }

    /// Re-decides a session and, if the decision changed, pushes the
    /// difference to its PCEF in a RAR (holding the session's lock, so a
    /// CCR for it waits for the RAA).
    async fn push(&self, id: &str, ask_report: bool) -> Result<ReauthOutcome, ControlError> {
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

    async fn send_rar(
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

    /// Applies a reloaded configuration: the rule catalog, the unknown-
    /// subscriber rule and the retention change at once; returns the keys
    /// whose change needs a restart (they keep their running value).
    pub fn apply_config(&self, new: Config) -> Vec<&'static str> {
        let old = self.live.load().cfg.clone();
        let mut restart = Vec::new();
        if old.node.origin_host != new.node.origin_host
            || old.node.origin_realm != new.node.origin_realm
        {
            restart.push("[node]");
        }
        if old.diameter.listen != new.diameter.listen
            || old.diameter.watchdog_secs != new.diameter.watchdog_secs
            || old.diameter.max_message_bytes != new.diameter.max_message_bytes
            || old.diameter.max_in_flight != new.diameter.max_in_flight
            || old.diameter.max_pending_requests != new.diameter.max_pending_requests
            || old.diameter.request_timeout_ms != new.diameter.request_timeout_ms
            || old.diameter.tls != new.diameter.tls
        {
            restart.push("[diameter]");
        }
        let peers = |c: &Config| -> Vec<(String, Vec<std::net::IpAddr>, bool)> {
            c.peers
                .iter()
                .map(|p| (p.origin_host.clone(), p.addresses.clone(), p.tls))
                .collect()
        };
        if peers(&old) != peers(&new) {
            restart.push("[[peers]]");
        }
        if old.store != new.store {
            restart.push("[store]");
        }
        if old.policy.path != new.policy.path
            || old.policy.time_zone != new.policy.time_zone
            || old.policy.instruction_limit != new.policy.instruction_limit
            || old.policy.memory_limit_mib != new.policy.memory_limit_mib
            || old.policy.fallback != new.policy.fallback
        {
            restart.push("[policy] (except unknown_subscriber)");
        }
        if old.api != new.api {
            restart.push("[api]");
        }
        if old.sy != new.sy {
            restart.push("[sy]");
        }
        self.live.store(Arc::new(Live::of(Arc::new(new))));
        restart
    }

    /// A subscriber's usage as the API shows it, rolled to `now`.
    fn usage_of(&self, profile: &Subscriber, now: i64) -> UsageView {
        let cfg = self.usage_cfg.load();
        let day = cfg.billing_day_for(profile.billing_day);
        let mut u = (*self.usage.load(&profile.imsi)).clone();
        u.roll(&cfg, Some(day), now);
        let rfc3339 = |ms: i64| {
            jiff::Timestamp::from_millisecond(ms).map_or_else(|_| ms.to_string(), |t| t.to_string())
        };
        let accumulators = cfg
            .accumulators()
            .iter()
            .map(|(name, acfg)| {
                let a = u.accumulators.get(name).cloned().unwrap_or_default();
                let allowance = u.allowance(&cfg, name, Some(profile));
                let view = AccumulatorView {
                    reset: acfg.reset.name().to_string(),
                    used: a.used,
                    topup: a.topup,
                    quota: allowance.map(|al| al.saturating_sub(a.topup)),
                    allowance,
                    remaining: allowance.map(|al| al.saturating_sub(a.used)),
                    exhausted: allowance.is_some_and(|al| a.used >= al),
                    period_start: rfc3339(a.period_start_ms),
                    period_end: a.period_end_ms.map(rfc3339),
                };
                (name.clone(), view)
            })
            .collect();
        UsageView {
            subscriber: profile.imsi.clone(),
            billing_day: day,
            accumulators,
            last_reports: u
                .last_reports
                .iter()
                .map(|(k, r)| {
                    (
                        k.clone(),
                        ReportView {
                            at: rfc3339(r.at_ms),
                            session: r.session.clone(),
                            used: r.used,
                        },
                    )
                })
                .collect(),
            unknown_key_reports: u.unknown_key_reports,
            usage_config: cfg.checksum_hex(),
        }
    }

    /// Changes a provisioned subscriber's accumulators under their lock,
    /// commits, publishes, then re-decides the subscriber's open sessions.
    async fn change_usage(
        &self,
        imsi: &str,
        reason: pushes::PushReason,
        change: impl FnOnce(&mut SubscriberUsage, &UsageConfig, Option<u8>, i64) -> Result<(), String>,
    ) -> Result<UsageChange, ControlError> {
        let profile = self
            .subscribers
            .get(imsi)
            .ok_or_else(|| ControlError::NotFound(format!("no subscriber {imsi}")))?;
        let cfg = self.usage_cfg.load_full();
        if cfg.is_empty() {
            return Err(ControlError::Conflict(
                "usage monitoring is off (no usage file)".into(),
            ));
        }
        let now = now_ms();
        let day = profile.billing_day;
        let slot = self.usage.slot(imsi);
        {
            let _g = tokio::time::timeout(COMMIT_WAIT, slot.lock())
                .await
                .map_err(|_| ControlError::Unavailable("subscriber usage busy".into()))?;
            let mut next = (*slot.load()).clone();
            next.roll(&cfg, day, now);
            change(&mut next, &cfg, day, now).map_err(ControlError::Invalid)?;
            let next = Arc::new(next);
            self.store
                .submit(vec![Change::PutUsage(next.clone())])
                .await
                .map_err(|e| ControlError::Unavailable(e.to_string()))?;
            slot.publish(next);
        }
        let pushed = self.push_subscriber(imsi, reason).await;
        Ok(UsageChange {
            usage: self.usage_of(&profile, now),
            sessions: pushed.sessions,
            rar_sent: pushed.rar_sent,
            rar_failed: pushed.failed,
        })
    }

    /// Refuses a usage file that would orphan running grants.
    pub fn check_usage_config(&self, new: &UsageConfig) -> Result<(), String> {
        new.check_reload(&self.usage_cfg.load(), &self.granted_keys())
    }

    /// Puts a checked usage file in force.
    pub fn apply_usage_config(&self, new: UsageConfig) {
        if new.checksum() != self.usage_cfg.load().checksum() {
            tracing::info!(checksum = %new.checksum_hex(), "usage file reloaded");
        }
        self.usage_cfg.store(Arc::new(new));
    }

    /// Removes closed sessions older than the retention, from memory and store.
    pub async fn purge_closed(&self) -> Result<usize, StoreError> {
        let before = now_ms() - (self.live.load().cfg.sessions.retention_secs as i64) * 1000;
        let ids = self.sessions.closed_before(before);
        for id in &ids {
            self.sessions.remove(id);
        }
        self.store.purge_closed(before).await
    }

    fn session_stats(&self) -> SessionStats {
        let (open, closed) = self.sessions.counts();
        SessionStats {
            open_sessions: open as u64,
            closed_sessions: closed as u64,
            cached_subscribers: self.subscribers.len() as u64,
        }
    }
}

/// DIAMETER_TOO_BUSY (3004, a protocol error: E bit) for a shed request,
/// with an OC-OLR when the PCEF advertised DOIC.
fn too_busy_answer(req: &Message, me: &Identity, overload: &OverloadReporter) -> Bytes {
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
fn usage_change(usage: &Option<monitoring::UsageStep>) -> Option<Change> {
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
fn replay(stored: &[u8], req: &Message) -> Answered {
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

/// An enumerated value's dictionary name, or the number.
fn enum_name(code: diameter::AvpCode, v: i32) -> String {
    dict::avp(code.code, code.vendor)
        .and_then(|d| d.enum_name(i64::from(v)))
        .map_or_else(|| v.to_string(), str::to_owned)
}

/// The ECGI (cell) of a 3GPP-User-Location-Info given as hex: type 130
/// (TAI+ECGI: 5 bytes TAI then 7 bytes ECGI) or 129 (ECGI only) (TS 29.061 §16.4.7.2).
fn ecgi_of_location(hex: &str) -> Option<String> {
    let ty = u8::from_str_radix(hex.get(0..2)?, 16).ok()?;
    match ty {
        130 => hex.get(12..26).map(str::to_owned),
        129 => hex.get(2..16).map(str::to_owned),
        _ => None,
    }
}

impl Node {
    fn write_store_metrics(&self, out: &mut Exposition) {
        let g = self.store.stats();
        let Some(batch_sizes) = HistogramSnapshot::from_cumulative(
            &BATCH_SIZE_BOUNDS,
            0,
            &g.batch_size_le,
            g.batches,
            g.requests,
        ) else {
            return;
        };
        CommitStats {
            batches: g.batches,
            commits: g.commits,
            skipped: g.skipped_commits,
            rows: g.rows_changed,
            coalesced: g.coalesced,
            errors: g.errors,
            purged: g.purged,
            queued: g.queued,
            apply_micros: g.apply_micros,
            batch_sizes,
        }
        .write(out);
    }
}

impl MetricsSource for Node {
    fn write(&self, out: &mut Exposition) {
        self.session_stats().write(out);
        self.write_rx_metrics(out);
        let p = self.policy.stats();
        MetricsPolicyStats {
            runs: p.runs,
            skips: p.skips,
            errors: p.errors,
            reloads_ok: p.reloads,
            reloads_failed: p.reload_failures,
            script_version: p.script_version,
        }
        .write(out);
        self.write_store_metrics(out);
        self.write_sy_metrics(out);
        let configured: Vec<String> = self
            .live
            .load()
            .cfg
            .peers
            .iter()
            .map(|p| p.origin_host.clone())
            .collect();
        write_peers(out, &peer_stats(&self.peers, &configured));
        let c = &self.counters;
        let (shed_new, shed_existing) = self.admission.shed();
        out.family(
            "pcrf_overload_shed_total",
            "Gx requests answered DIAMETER_TOO_BUSY because the node was at [diameter].max_pending_requests (new = CCR-I, shed first).",
            Kind::Counter,
        )
        .sample(&[("class", "new")], shed_new)
        .sample(&[("class", "existing")], shed_existing);
        out.gauge(
            "pcrf_gx_in_flight",
            "Gx requests being worked on now.",
            self.admission.in_flight(),
        );
        let u = &self.usage_counters;
        let p = &self.push_counters;
        let counters: [(&str, &str, &AtomicU64); 16] = [
            ("pcrf_policy_fallbacks_total", "Decisions that fell back to [policy].fallback because the script failed.", &c.policy_fallbacks),
            ("pcrf_unknown_rule_names_total", "Rule or base names a decision named that the [rules] catalog does not list (dropped).", &c.unknown_rule_names),
            ("pcrf_rule_failures_reported_total", "Rules the PCEFs reported as failed (Charging-Rule-Report).", &c.rule_failures_reported),
            ("pcrf_retransmissions_total", "Retransmitted CCRs answered again without being applied twice.", &c.retransmissions),
            ("pcrf_store_failures_total", "Requests answered 5012 because their state change could not be committed.", &c.store_failures),
            ("pcrf_writes_skipped_total", "CCR-U whose session changed nothing durable: no write (optimization 1).", &c.writes_skipped),
            ("pcrf_usage_reports_total", "Usage reports (Used-Service-Unit per Monitoring-Key) counted, each once.", &u.reports),
            ("pcrf_usage_reported_octets_total", "Octets in those reports.", &u.octets),
            ("pcrf_usage_unknown_key_reports_total", "Reports for Monitoring-Keys the usage file does not define (counted in no accumulator).", &u.unknown_key_reports),
            ("pcrf_usage_unknown_keys_decided_total", "Monitoring-Keys a decision named that the usage file does not define (ignored).", &u.unknown_keys_decided),
            ("pcrf_usage_grants_total", "Granted-Service-Unit sent (initial grants and re-grants).", &u.grants),
            ("pcrf_pushes_decided_total", "Sessions re-decided because an input changed outside a CCR.", &p.decided),
            ("pcrf_pushes_rar_total", "Of them, sessions whose decision changed and got a RAR.", &p.rar_sent),
            ("pcrf_pushes_unchanged_total", "Of them, sessions whose decision did not change (no RAR).", &p.unchanged),
            ("pcrf_pushes_failed_total", "Pushes that failed (PCEF not connected, no RAA, error answer).", &p.failed),
            ("pcrf_usage_period_resets_total", "Subscribers whose accumulators were reset at a period boundary.", &p.resets),
        ];
        for (name, help, value) in counters {
            out.counter(name, help, value.load(Relaxed));
        }
        self.write_sd_metrics(out);
        out.gauge(
            "pcrf_usage_subscribers",
            "Subscribers with usage accumulators in memory.",
            self.usage.len() as u64,
        );
    }
}

impl Control for Node {
    async fn put_subscriber(&self, subscriber: Subscriber) -> Result<bool, ControlError> {
        subscriber
            .validate()
            .map_err(|e| ControlError::Invalid(e.to_string()))?;
        let s = Arc::new(subscriber);
        self.store
            .submit(vec![Change::PutSubscriber(s.clone())])
            .await
            .map_err(|e| ControlError::Unavailable(e.to_string()))?;
        let old = self.subscribers.put(s.clone());
        if old.as_deref() != Some(&*s) {
            // Services, plan or quota changed: the sessions follow now.
            self.push_subscriber(&s.imsi, pushes::PushReason::Provisioning)
                .await;
        }
        Ok(old.is_none())
    }

    fn subscriber(&self, imsi: &str) -> Option<Arc<Subscriber>> {
        self.subscribers.get(imsi)
    }

    async fn delete_subscriber(&self, imsi: &str) -> Result<bool, ControlError> {
        if self.subscribers.get(imsi).is_none() {
            return Ok(false);
        }
        self.store
            .submit(vec![Change::DeleteSubscriber(imsi.to_owned())])
            .await
            .map_err(|e| ControlError::Unavailable(e.to_string()))?;
        Ok(self.subscribers.remove(imsi).is_some())
    }

    fn sessions(&self, filter: &SessionFilter) -> Vec<Arc<GxSession>> {
        // Sessions are indexed by IMSI (or MSISDN when no IMSI was sent).
        let key = filter.subscriber.as_deref().map(|k| {
            self.subscribers
                .by_msisdn(k)
                .map_or_else(|| k.to_owned(), |s| s.imsi.clone())
        });
        let f = SessionFilter {
            subscriber: key.clone(),
            ..filter.clone()
        };
        self.sessions
            .list(key.as_deref(), |s| f.matches(s), filter.limit)
    }

    async fn session(&self, id: &str) -> Option<Arc<GxSession>> {
        if let Some(s) = self.sessions.get(id) {
            return Some(s.load());
        }
        // Closed sessions live in the store only (until the retention ends).
        let read = tokio::time::timeout(COMMIT_WAIT, self.store.read_session(id)).await;
        match read {
            Ok(Ok(found)) => found.map(Arc::new),
            _ => None,
        }
    }

    async fn reauth(&self, id: &str) -> Result<ReauthOutcome, ControlError> {
        self.push(id, false).await
    }

    async fn release(&self, id: &str, cause: ReleaseCause) -> Result<ReleaseOutcome, ControlError> {
        let slot = self
            .sessions
            .get(id)
            .ok_or_else(|| ControlError::NotFound(format!("no session {id}")))?;
        let cur = slot.load();
        if cur.state == SessionState::Closed {
            return Err(ControlError::Conflict(format!("session {id} is closed")));
        }
        // Not under the session lock: the PCEF answers with RAA and then
        // sends CCR-T, which needs that lock.
        let answer = self
            .send_rar(
                &cur,
                None,
                Some(cause.code() as i32),
                &UsageInstructions::default(),
            )
            .await?;
        let raa =
            gx::decode_raa(&answer).map_err(|e| ControlError::Peer(format!("bad RAA: {e}")))?;
        Ok(ReleaseOutcome {
            result_code: raa.result_code.or(raa.experimental_result),
        })
    }

    async fn reload_policy(&self) -> Result<u64, ReloadError> {
        let policy = self.policy.clone();
        let res = tokio::task::spawn_blocking(move || policy.reload())
            .await
            .map_err(|e| ReloadError {
                error: format!("reload task failed: {e}"),
                line: None,
            })?;
        res.map_err(|e| ReloadError {
            line: e.line(),
            error: e.to_string(),
        })
    }

    fn set_congestion(&self, cell: &str, level: u32) -> usize {
        {
            let mut map = self.congestion.write();
            let before = map.get(cell).copied().unwrap_or(0);
            if level == 0 {
                map.remove(cell);
            } else {
                map.insert(cell.to_ascii_lowercase(), level);
            }
            if before == level {
                return 0;
            }
        }
        let ids = self.sessions_in_cell(cell);
        self.push_spread(ids, pushes::PushReason::Congestion)
    }

    fn usage(&self, imsi: &str) -> Option<UsageView> {
        let profile = self.subscribers.get(imsi)?;
        Some(self.usage_of(&profile, now_ms()))
    }

    async fn topup(
        &self,
        imsi: &str,
        accumulator: &str,
        octets: u64,
    ) -> Result<UsageChange, ControlError> {
        self.change_usage(imsi, pushes::PushReason::TopUp, |u, cfg, day, now| {
            u.topup(cfg, accumulator, octets, now, day)
        })
        .await
    }

    async fn reset_usage(
        &self,
        imsi: &str,
        accumulator: Option<&str>,
    ) -> Result<UsageChange, ControlError> {
        if let Some(a) = accumulator {
            if !self.usage_cfg.load().accumulators().contains_key(a) {
                return Err(ControlError::Invalid(format!(
                    "no accumulator {a:?} in the usage file"
                )));
            }
        }
        self.change_usage(imsi, pushes::PushReason::UsageReset, |u, cfg, day, now| {
            u.reset(cfg, accumulator, now, day).map(|_| ())
        })
        .await
    }

    async fn ready(&self) -> Result<(), String> {
        if let Some(pg) = &self.pg {
            if !pg.connection.is_up() {
                return Err(
                    "store: PostgreSQL is unreachable (requests needing a write are answered 5012)"
                        .into(),
                );
            }
        }
        match tokio::time::timeout(Duration::from_secs(2), self.store.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("store: {e}")),
            Err(_) => Err("store: writer did not answer within 2 s".into()),
        }
    }

    fn config_checksum(&self) -> String {
        self.live.load().cfg.checksum_hex()
    }

    fn render_metrics(&self) -> String {
        self.metrics.render()
    }

    fn query_profiler(&self) -> Option<QueryProfiler> {
        self.pg.as_ref().map(|h| h.profiler.clone())
    }

    // Bulk provisioning: one submit, so the whole batch is one transaction
    // (all or none); the table is updated only once it is durable.
    async fn put_subscribers(
        &self,
        subscribers: Vec<Subscriber>,
    ) -> Result<crate::api::control::BatchOutcome, ControlError> {
        for (i, s) in subscribers.iter().enumerate() {
            s.validate()
                .map_err(|e| ControlError::Invalid(format!("entry {i}: {e}")))?;
        }
        let subscribers: Vec<Arc<Subscriber>> = subscribers.into_iter().map(Arc::new).collect();
        if !subscribers.is_empty() {
            let changes = subscribers
                .iter()
                .map(|s| Change::PutSubscriber(s.clone()))
                .collect();
            self.store
                .submit(changes)
                .await
                .map_err(|e| ControlError::Unavailable(e.to_string()))?;
        }
        let mut outcome = crate::api::control::BatchOutcome::default();
        for s in subscribers {
            match self.subscribers.put(s) {
                None => outcome.created += 1,
                Some(_) => outcome.updated += 1,
            }
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecgi_from_location() {
        // TAI+ECGI: type 130, TAI (MCC/MNC 3 bytes + TAC 2), ECGI (3 + 4).
        let loc = "82".to_string() + "00f110" + "0001" + "00f110" + "00000101";
        assert_eq!(ecgi_of_location(&loc).as_deref(), Some("00f11000000101"));
        assert_eq!(
            ecgi_of_location("8100f11000000101").as_deref(),
            Some("00f11000000101")
        );
        assert_eq!(ecgi_of_location("01"), None);
        assert_eq!(ecgi_of_location("zz"), None);
    }

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

    #[test]
    fn enum_names_come_from_the_dictionary() {
        assert_eq!(enum_name(avp::RAT_TYPE, 1004), "EUTRAN");
        assert_eq!(enum_name(avp::RAT_TYPE, 424242), "424242");
    }
}
