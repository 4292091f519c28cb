//! Sy at the node (TS 29.219, the PCRF as the OCS's client), or N28 (TS
//! 29.594, the PCF as the CHF's client) with the same logic: counters the
//! policy asks for are subscribed (SLR; N28 POST or PUT) during the CCR or
//! N7 request and the session is decided again with their statuses; a
//! notification (SNR; N28 notify) updates statuses and re-decides the
//! subscriber's sessions (RAR or N7 push where the decision changed); the
//! subscriber's last session ending unsubscribes (STR; N28 DELETE). Which
//! peer carries the exchanges is `peer.rs`'s business.
//!
//! Fallback: when no peer answers within `[sy].timeout_ms` (or none is up,
//! or it answers with an error), the policy sees "unknown" for the counters
//! it asked about and decides anyway; the next request asks again after
//! `[sy].retry_secs`.

use crate::admission::Class;
use crate::metrics::{Command, Exposition, Kind, NO_ANSWER};
use crate::node::{
    now_ms, Answered, Capabilities, Persistence, Policy, Sessions, Settings, Signalling, Telemetry,
    COMMIT_WAIT,
};
use crate::pcc::PushReason;
use crate::policy::input::PolicyInput;
use crate::policy::Outcome;
use crate::session::spending::{CounterReport, SySession, UNKNOWN};
use crate::session::{GxSession, SessionState};
use crate::sy;
use crate::sy::chf::Chf;
use crate::sy::exchange::{NoAnswer, SubscribeRequest, Subscribed};
use crate::sy::n28::{
    self, NotifyFuture, NotifyOutcome, SpendingLimitStatus, SpendingNotifications,
    SubscriptionTerminationInfo,
};
use crate::sy::ocs::OcsPool;
use crate::sy::peer::SpendingPeer;
use crate::sy::state::SyPart;
use crate::txn::{self, Runner};
use bytes::{Bytes, BytesMut};
use diameter::codec::{DiameterError, Message};
use diameter::dict::cmd;
use diameter::result_code;
use diameter::transport::{self, Handler};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::sync::Weak;
use std::time::{Duration, Instant};

/// The Sy service: subscribes the policy counters a decision needs at the
/// OCS, and has sessions re-decided when the OCS changes their status.
pub struct Sy {
    pub(crate) sessions: Sessions,
    pub(crate) policy: Policy,
    pub(crate) signalling: Signalling,
    pub(crate) persistence: Persistence,
    pub(crate) telemetry: Telemetry,
    pub(crate) settings: Settings,
    pub(crate) txn: Runner,
    pub(crate) state: SyPart,
    /// This service, for the background exchanges it starts.
    pub(crate) me_ref: Weak<Sy>,
}

impl Sy {
    pub fn new(caps: &Capabilities, state: SyPart) -> Arc<Sy> {
        Arc::new_cyclic(|me| Sy {
            sessions: caps.sessions.clone(),
            policy: caps.policy.clone(),
            signalling: caps.signalling.clone(),
            persistence: caps.persistence.clone(),
            telemetry: caps.telemetry.clone(),
            settings: caps.settings.clone(),
            txn: Runner::new(caps),
            state,
            me_ref: me.clone(),
        })
    }
    /// Starts connecting to the configured OCSs from `dnode` (whose handler
    /// receives their SNRs), or takes the configured CHF, and schedules the
    /// pending status changes of recovered Sy sessions. Does nothing
    /// without `[sy].ocs` or `[sy].chf`.
    pub fn start_sy<H: Handler>(&self, dnode: &transport::Node<H>) {
        let cfg = self.settings.live().cfg.sy.clone();
        let peer = match &cfg.chf {
            Some(uri) if !cfg.uses_ocs() => SpendingPeer::Chf(Chf::new(uri, cfg.timeout_ms)),
            _ if cfg.uses_ocs() => SpendingPeer::Ocs(OcsPool::start(
                dnode,
                &cfg,
                &self.signalling.me().origin_realm,
            )),
            _ => return,
        };
        let chf = matches!(peer, SpendingPeer::Chf(_));
        if self.state.peer.set(peer).is_err() {
            return;
        }
        if chf {
            tracing::info!(
                chf = cfg.chf.as_deref().unwrap_or(""),
                timeout_ms = cfg.timeout_ms,
                recovered_sessions = self.state.table.len(),
                "N28: spending limits from the CHF"
            );
        } else {
            tracing::info!(
                ocs = ?cfg.ocs.iter().map(|o| o.origin_host.as_str()).collect::<Vec<_>>(),
                timeout_ms = cfg.timeout_ms,
                recovered_sessions = self.state.table.len(),
                "Sy: connecting to the OCSs"
            );
        }
        for key in self.state.table.subscribers() {
            if let Some(at) = self.state.table.get(&key).and_then(|s| s.next_change_ms()) {
                self.schedule_pending(key, at);
            }
        }
    }

    /// The counter statuses the policy sees now for the subscriber of
    /// session `s` (its Sy session adopted first when the record holds a
    /// newer copy: another node wrote it).
    pub(crate) fn spending_of(&self, s: &GxSession) -> BTreeMap<String, String> {
        // Sy off: nothing to read, no lock taken on the CCR path.
        if self.state.peer.get().is_none() {
            return BTreeMap::new();
        }
        self.adopt(s);
        if self.state.table.is_empty() {
            return BTreeMap::new();
        }
        self.state
            .table
            .get(&s.subscriber)
            .map(|sy| sy.statuses(now_ms()))
            .unwrap_or_default()
    }

    /// Takes the Sy session an open session record holds when it is newer
    /// than this node's copy (the record was written by another node, and
    /// read here on a take-over), so that an SNR for it is found here and
    /// no second Sy session is opened at the OCS. Its pending status
    /// changes are scheduled here too.
    fn adopt(&self, s: &GxSession) {
        let Some(sy) = s.sy.as_ref().filter(|_| s.state == SessionState::Open) else {
            return;
        };
        if self.state.table.adopt(&s.subscriber, sy) {
            tracing::info!(subscriber = %s.subscriber, sy_session = %sy.session_id, "Sy session read with a session record");
            if let Some(at) = sy.next_change_ms() {
                self.schedule_pending(s.subscriber.to_string(), at);
            }
        }
    }

    /// On a store shared with other nodes: takes over the subscriber's
    /// open sessions (an SNR may come to any node of the cluster) and
    /// adopts the Sy session their records hold, so that the statuses are
    /// stored in a current record and the re-decision reaches the PCEF.
    /// Whether the subscriber has an open session in the cluster: one the
    /// store listed, or one this node holds (always false on the embedded
    /// store, where nothing is taken over). Another request's write
    /// conflict may drop a copy taken over here before the SNR stores its
    /// statuses in it: the SNR must then be handled again, not answered.
    async fn gather(&self, key: &str) -> Result<bool, DiameterError> {
        if !self.persistence.store().is_shared() {
            return Ok(false);
        }
        let mut held = self.sessions.take_over_subscriber(key).await? > 0;
        for id in self.sessions.table().ids_of_subscriber(key) {
            if let Some(slot) = self.sessions.table().get(&id) {
                let s = slot.load();
                held |= s.state == SessionState::Open;
                self.adopt(&s);
            }
        }
        Ok(held)
    }

    /// After a CCR's decision: subscribes the counters it wants that are
    /// not subscribed yet (SLR, bounded by `[sy].timeout_ms`), and if it
    /// did, decides again with their statuses. Copies the subscriber's Sy
    /// session into `s` so that it is stored with it.
    pub(crate) async fn settle_spending(
        &self,
        s: &mut GxSession,
        input: &mut PolicyInput,
        out: Outcome,
    ) -> Outcome {
        let Some(peer) = self.state.peer.get() else {
            return out;
        };
        // A record another node wrote may hold a newer Sy session.
        self.adopt(s);
        let key = s.subscriber.to_string();
        let wanted = &out.decision.spending_counters;
        if wanted.is_empty() || out.decision.reject.is_some() {
            s.sy = self.state.table.get(&key).map(Box::new);
            return out;
        }
        let entry = self.state.table.entry(&key);
        // One SLR at a time per subscriber (two CCR-Is must not both send
        // an initial SLR).
        let _exchange = entry.exchange.lock().await;
        let current = entry.state.lock().clone();
        let now = now_ms();
        let mut sy = current.clone().unwrap_or_else(|| {
            let n = self.state.next_id.fetch_add(1, Relaxed);
            SySession::new(
                // The subscriber in it: any node of a cluster that gets an
                // SNR for it finds the subscriber's sessions in the store.
                format!(
                    "{};sy;{};{n};{key}",
                    self.signalling.me().origin_host,
                    self.state.boot_secs
                ),
                now,
            )
        });
        let missing = sy.missing(wanted);
        if missing.is_empty() {
            s.sy = current.map(Box::new);
            if input.spending == sy.statuses(now) {
                return out;
            }
            // Another request of the subscriber changed them meanwhile.
            input.spending = sy.statuses(now);
            return self.decide_again(s, input);
        }
        if now < entry.retry_at_ms.load(Relaxed) {
            // The last SLR got no usable answer a moment ago: do not hold
            // this CCR for the OCS again yet.
            input.spending = with_unknown(sy.statuses(now), wanted);
            s.sy = current.map(Box::new);
            return self.decide_again(s, input);
        }
        // The full list: a modify replaces the subscription. Counters of a
        // session the peer no longer holds are not part of it.
        let mut counters: Vec<String> = if sy.open {
            sy.counters.keys().cloned().collect()
        } else {
            Vec::new()
        };
        counters.extend(missing.iter().cloned());
        let notify_uri = format!(
            "{}{}",
            self.signalling.sbi_root(),
            n28::callback_path(&sy.session_id)
        );
        let started = Instant::now();
        let res = peer
            .subscribe(
                self.signalling.me(),
                &SubscribeRequest {
                    session: &sy,
                    imsi: s.imsi.as_deref(),
                    msisdn: s.msisdn.as_deref(),
                    counters: &counters,
                    notify_uri: &notify_uri,
                },
            )
            .await;
        let now = now_ms();
        let mut changed = false;
        match res {
            Ok(ans) => {
                self.telemetry
                    .metrics()
                    .request(Command::Slr, ans.code, started.elapsed());
                let kind = peer.kind();
                match ans.outcome {
                    Subscribed::Accepted {
                        reports,
                        subscription,
                    } => {
                        if !sy.open {
                            // A new subscription: what it reports is all
                            // there is (statuses of one the peer ended
                            // are gone).
                            sy.counters.clear();
                        }
                        sy.open = true;
                        sy.ocs_host = Some(ans.peer.clone());
                        if subscription.is_some() {
                            sy.subscription = subscription;
                        }
                        sy.apply(&reports, now);
                        let unreported: Vec<String> = missing
                            .iter()
                            .filter(|c| !sy.counters.contains_key(*c))
                            .cloned()
                            .collect();
                        if !unreported.is_empty() {
                            // Not asked again: the peer had its chance.
                            tracing::warn!(subscriber = %key, counters = ?unreported, peer = %ans.peer, "{kind} answered without a status for these counters; they stay unknown");
                            sy.refuse(&unreported, now);
                        }
                        changed = true;
                    }
                    Subscribed::UnknownCounters(named) => {
                        let named: Vec<String> =
                            named.into_iter().filter(|c| missing.contains(c)).collect();
                        let refused = if named.is_empty() {
                            missing.clone()
                        } else {
                            named
                        };
                        self.state
                            .unknown_counters
                            .fetch_add(refused.len() as u64, Relaxed);
                        tracing::warn!(subscriber = %key, counters = ?refused, peer = %ans.peer, "{kind} does not know these policy counters; they stay unknown");
                        sy.refuse(&refused, now);
                        changed = true;
                    }
                    Subscribed::Refused(why) => {
                        self.state.fallbacks.fetch_add(1, Relaxed);
                        tracing::warn!(subscriber = %key, code = ans.code, peer = %ans.peer, why, "{kind} refused the subscription; the policy sees the counters as unknown");
                    }
                }
            }
            Err(e) => {
                self.telemetry
                    .metrics()
                    .request(Command::Slr, NO_ANSWER, started.elapsed());
                self.state.fallbacks.fetch_add(1, Relaxed);
                log_unanswered(&key, peer.kind(), &e);
            }
        }
        let statuses = with_unknown(sy.statuses(now), wanted);
        if !changed {
            let retry = self.settings.live().cfg.sy.retry_secs.saturating_mul(1000);
            entry
                .retry_at_ms
                .store(now.saturating_add(retry as i64), Relaxed);
        }
        if changed {
            if let Some(at) = sy.next_change_ms() {
                self.schedule_pending(key.clone(), at);
            }
            self.state.table.put(&key, sy.clone());
            s.sy = Some(Box::new(sy));
        } else {
            s.sy = current.map(Box::new);
        }
        input.spending = statuses;
        self.decide_again(s, input)
    }

    fn decide_again(&self, s: &GxSession, input: &PolicyInput) -> Outcome {
        let out = self
            .policy
            .engine()
            .decide(input, s.last_decision.as_deref());
        self.policy.note_fallback(&s.id, &out);
        out
    }

    /// After a session closed (`ended`: its record as it was, open): when
    /// it was the subscriber's last one, the Sy session ends (STR, or
    /// DELETE at the CHF, in the background: the answer does not wait).
    /// The Sy session the record holds is adopted first: a node that took
    /// the session over only to close it has no other copy. On a store
    /// shared with other nodes, the store says which sessions are still
    /// open (this node's copies may be stale, and the others may be held
    /// elsewhere).
    pub(crate) fn sy_session_ended(&self, ended: &GxSession) {
        self.adopt(ended);
        let key = &*ended.subscriber;
        let Some(sy) = self.state.table.get(key) else {
            return;
        };
        let Some(this) = self.me_ref.upgrade() else {
            return;
        };
        let key = key.to_owned();
        if self.persistence.store().is_shared() {
            tokio::spawn(async move {
                if this.in_use(&key, &sy.session_id).await {
                    this.state.kept.fetch_add(1, Relaxed);
                    let _ = this.persist_sy(&key, sy).await;
                } else {
                    this.end_sy_session(&key, &sy.session_id).await;
                }
            });
            return;
        }
        let others_open = self
            .sessions
            .table()
            .ids_of_subscriber(&key)
            .iter()
            .any(|id| {
                self.sessions
                    .table()
                    .get(id)
                    .is_some_and(|slot| slot.load().state == SessionState::Open)
            });
        if others_open {
            self.state.kept.fetch_add(1, Relaxed);
            // The closed record may have held the newest copy: keep one
            // in a record that stays open.
            tokio::spawn(async move {
                let _ = this.persist_sy(&key, sy).await;
            });
            return;
        }
        let Some(sy) = self.state.table.remove(&key) else {
            return;
        };
        if sy.open {
            tokio::spawn(async move { this.send_sy_str(&key, &sy).await });
        }
    }

    /// Forgets the subscriber's Sy session `sy_id` and, if the OCS opened
    /// it, ends it there (STR). One that replaced it meanwhile is kept.
    async fn end_sy_session(&self, key: &str, sy_id: &str) {
        if self
            .state
            .table
            .get(key)
            .is_none_or(|sy| sy.session_id != sy_id)
        {
            return;
        }
        let Some(sy) = self.state.table.remove(key) else {
            return;
        };
        if sy.open {
            self.send_sy_str(key, &sy).await;
        }
    }

    /// Whether an open session of the subscriber, at any node, still uses
    /// Sy session `sy_id`: its stored record holds it, or none yet (one
    /// holding another Sy session, that another node opened, does not). A
    /// store that cannot be read counts as yes: ending a Sy session still
    /// in use is worse than leaving one to the OCS's clean-up. Off the hot
    /// path: read when a session of a subscriber with a Sy session ends.
    async fn in_use(&self, key: &str, sy_id: &str) -> bool {
        let ids = match tokio::time::timeout(COMMIT_WAIT, self.persistence.store().sessions_of(key))
            .await
        {
            Ok(Ok(ids)) => ids,
            Ok(Err(e)) => {
                tracing::warn!(subscriber = key, error = %e, "open sessions not read; the Sy session is kept");
                return true;
            }
            Err(_) => {
                tracing::warn!(
                    subscriber = key,
                    "open sessions not read in time; the Sy session is kept"
                );
                return true;
            }
        };
        for id in ids {
            match tokio::time::timeout(COMMIT_WAIT, self.persistence.store().read_session(&id))
                .await
            {
                Ok(Ok(Some(s))) => {
                    // A record without one was written before the Sy
                    // session opened: the subscriber's is its own too.
                    if s.state == SessionState::Open
                        && s.sy.as_ref().is_none_or(|sy| sy.session_id == sy_id)
                    {
                        return true;
                    }
                }
                Ok(Ok(None)) => {}
                Ok(Err(_)) | Err(_) => return true,
            }
        }
        false
    }

    /// Ends the subscriber's session at the peer (STR; N28 DELETE).
    async fn send_sy_str(&self, key: &str, sy: &SySession) {
        let Some(peer) = self.state.peer.get() else {
            return;
        };
        let started = Instant::now();
        match peer.unsubscribe(self.signalling.me(), sy).await {
            Ok(ans) => {
                self.telemetry
                    .metrics()
                    .request(Command::Str, ans.code, started.elapsed());
                tracing::info!(subscriber = key, sy_session = %sy.session_id, peer = %ans.peer, code = ans.code, "{} session ended", peer.kind());
            }
            Err(e) => {
                self.telemetry
                    .metrics()
                    .request(Command::Str, NO_ANSWER, started.elapsed());
                tracing::warn!(subscriber = key, sy_session = %sy.session_id, error = %e, "unsubscribe from the {} unanswered; it keeps the subscription until it cleans up", peer.kind());
            }
        }
    }

    /// Answers an SNR from an OCS: new statuses are stored, then the
    /// subscriber's sessions are re-decided (RAR where the decision
    /// changed). An SNR for a Sy session we do not have is 5002.
    pub async fn handle_sy(&self, req: Message) -> Result<Bytes, DiameterError> {
        let req = &req;
        let envelope = txn::Request {
            message: req,
            command: Command::Snr,
            class: Class::Existing,
            subject: req.session_id().ok().flatten().unwrap_or_default(),
            started: Instant::now(),
        };
        txn::serve(&self.txn, envelope, move |_| async move {
            let (bytes, code) = self.snr(req).await?;
            Ok(Answered {
                bytes,
                code,
                decided_by: None,
            })
        })
        .await
    }

    pub(crate) async fn snr(&self, req: &Message) -> Result<(Bytes, u32), DiameterError> {
        if req.command_code() != cmd::SPENDING_STATUS_NOTIFICATION {
            return Err(DiameterError::new(
                result_code::DIAMETER_COMMAND_UNSUPPORTED,
                "Sy serves SNR only",
            ));
        }
        req.validate()?;
        let snr = sy::decode_snr(req)?;
        let answer = |code: u32| {
            let mut out = BytesMut::with_capacity(256);
            sy::encode_sna(&mut out, req, self.signalling.me(), code);
            (out.freeze(), code)
        };
        // A CHF's subscriptions are not notified over Sy.
        if matches!(self.state.peer.get(), Some(SpendingPeer::Chf(_))) {
            return Ok(answer(result_code::DIAMETER_UNKNOWN_SESSION_ID));
        }
        let code = match self
            .apply_notified(&snr.session_id, Notified::Reports(&snr.reports))
            .await?
        {
            true => result_code::DIAMETER_SUCCESS,
            false => result_code::DIAMETER_UNKNOWN_SESSION_ID,
        };
        Ok(answer(code))
    }

    /// What a notification (SNR, N28 notify or terminate) says about
    /// session `session_id`, whichever peer sent it: stored in the
    /// subscriber's records, then the subscriber's sessions are decided
    /// again (RAR or N7 push where the decision changed). False when no
    /// open session of that id is found (SNR 5002, N28 404). A write
    /// conflict is an error to handle the notification again with.
    pub(crate) async fn apply_notified(
        &self,
        session_id: &str,
        what: Notified<'_>,
    ) -> Result<bool, DiameterError> {
        let key = self.state.table.subscriber_of(session_id).or_else(|| {
            self.persistence
                .store()
                .is_shared()
                .then(|| subscriber_in(session_id).map(str::to_owned))
                .flatten()
        });
        let Some(key) = key else {
            tracing::info!(sy_session = %session_id, "notification for an unknown Sy session");
            return Ok(false);
        };
        let held = self.gather(&key).await?;
        let entry = self.state.table.entry(&key);
        let updated = {
            let _exchange = entry.exchange.lock().await;
            let mut st = entry.state.lock();
            match st.as_mut() {
                Some(sy) if sy.session_id == session_id && sy.open => {
                    match what {
                        Notified::Reports(reports) => sy.apply(reports, now_ms()),
                        Notified::Terminated => {
                            sy.terminated(now_ms());
                            // Not subscribed again at once: the peer ended
                            // it; the statuses are "unknown" meanwhile.
                            let retry = self.settings.live().cfg.sy.retry_secs.saturating_mul(1000);
                            entry
                                .retry_at_ms
                                .store(now_ms().saturating_add(retry as i64), Relaxed);
                        }
                    }
                    Some(sy.clone())
                }
                _ => None,
            }
        };
        let Some(sy) = updated else {
            return Ok(false);
        };
        // A conflict is handled again (`handle_sy`, `retrying_conflicts`);
        // the reports are applied again to the statuses then read (the
        // same statuses). So is a request whose taken-over session another
        // request here dropped meanwhile (its write met a conflict):
        // nothing is stored yet, and the answer must not say otherwise.
        if !self.persist_sy(&key, sy.clone()).await? && held {
            return Err(Sessions::conflict_error());
        }
        match what {
            Notified::Reports(reports) => {
                tracing::info!(subscriber = %key, sy_session = %sy.session_id, reports = reports.len(), "spending status notification applied");
            }
            Notified::Terminated => {
                tracing::info!(subscriber = %key, sy_session = %sy.session_id, "the CHF ended the spending-limit subscription; its counters are unknown");
            }
        }
        if let Some(at) = sy.next_change_ms() {
            self.schedule_pending(key.clone(), at);
        }
        if let Some(this) = self.me_ref.upgrade() {
            tokio::spawn(async move {
                this.signalling
                    .push_subscriber(&key, PushReason::Spending)
                    .await;
            });
        }
        Ok(true)
    }

    /// A CHF's notification, handled as an SNR: admitted as a request on
    /// existing sessions, and again after a write conflict.
    async fn n28_notified(&self, session_id: &str, what: Notified<'_>) -> NotifyOutcome {
        // Only the configured CHF's subscriptions are notified over N28:
        // an OCS's statuses are not changed through the SBI.
        if !matches!(self.state.peer.get(), Some(SpendingPeer::Chf(_))) {
            return NotifyOutcome::Unknown;
        }
        let Ok(_permit) = self.signalling.admission().admit(Class::Existing, None) else {
            return NotifyOutcome::Busy;
        };
        let started = Instant::now();
        let r = txn::retrying_conflicts(&self.txn, session_id, |_| {
            self.apply_notified(session_id, what)
        })
        .await;
        let (code, outcome) = match r {
            Ok(true) => (result_code::DIAMETER_SUCCESS, NotifyOutcome::Applied),
            Ok(false) => (
                result_code::DIAMETER_UNKNOWN_SESSION_ID,
                NotifyOutcome::Unknown,
            ),
            Err(e) => (e.result_code, NotifyOutcome::Failed(e.message.to_string())),
        };
        self.telemetry
            .metrics()
            .request(Command::Snr, code, started.elapsed());
        outcome
    }

    /// Writes the subscriber's Sy session into one of its open session
    /// records (the newest copy wins at start-up, so one is enough).
    /// Whether one holds it now: false when this node holds none.
    async fn persist_sy(&self, key: &str, sy: SySession) -> Result<bool, DiameterError> {
        for id in self.sessions.table().ids_of_subscriber(key) {
            let Some(slot) = self.sessions.table().get(&id) else {
                continue;
            };
            let held = txn::holding(&slot, async |cur| {
                if cur.state != SessionState::Open {
                    return Ok(false);
                }
                if cur.sy.as_deref() != Some(&sy) {
                    let mut s = (*cur).clone();
                    s.sy = Some(Box::new(sy.clone()));
                    s.updated_ms = now_ms();
                    txn::commit_record(&self.txn, &slot, Arc::new(s)).await?;
                }
                Ok(true)
            })
            .await?;
            if held {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// At `at_ms` (Unix ms), the pending status changes then due apply:
    /// stored, and the subscriber's sessions re-decided.
    fn schedule_pending(&self, key: String, at_ms: i64) {
        let Some(this) = self.me_ref.upgrade() else {
            return;
        };
        let wait = Duration::from_millis(u64::try_from(at_ms - now_ms()).unwrap_or(0));
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let entry = this.state.table.entry(&key);
            let settled = {
                let _exchange = entry.exchange.lock().await;
                let mut st = entry.state.lock();
                match st.as_mut() {
                    Some(sy) => sy.settle(now_ms()).then(|| {
                        sy.touch(now_ms());
                        sy.clone()
                    }),
                    None => None,
                }
            };
            let Some(sy) = settled else {
                return;
            };
            tracing::info!(subscriber = %key, "pending policy counter statuses apply");
            if let Some(next) = sy.next_change_ms() {
                this.schedule_pending(key.clone(), next);
            }
            if this.persist_sy(&key, sy).await.is_ok() {
                this.signalling
                    .push_subscriber(&key, PushReason::Spending)
                    .await;
            }
        });
    }

    /// Sy metrics beyond the per-command counts.
    pub(crate) fn write_sy_metrics(&self, out: &mut Exposition) {
        let Some(peer) = self.state.peer.get() else {
            return;
        };
        if let SpendingPeer::Ocs(_) = peer {
            let mut f = out.family(
                "pcrf_sy_ocs_up",
                "Each configured OCS: 1 when its connection is open and its watchdog okay.",
                Kind::Gauge,
            );
            for (host, up) in peer.ocs_status() {
                f.sample(&[("ocs", host.as_str())], u64::from(up));
            }
        }
        out.family(
            "pcrf_sy_sessions",
            "Sy sessions held (one per subscriber with counters subscribed).",
            Kind::Gauge,
        )
        .sample(&[], self.state.table.len() as u64);
        out.family(
            "pcrf_sy_fallbacks_total",
            "SLRs without a usable answer: the policy saw the counters as unknown.",
            Kind::Counter,
        )
        .sample(&[], self.state.fallbacks.load(Relaxed));
        out.family(
            "pcrf_sy_unknown_counters_total",
            "Policy counters the OCS said it does not know (5570).",
            Kind::Counter,
        )
        .sample(&[], self.state.unknown_counters.load(Relaxed));
        out.family(
            "pcrf_sy_sessions_kept_total",
            "Sessions that ended while another of the subscriber's sessions still used its Sy session (kept, no STR).",
            Kind::Counter,
        )
        .sample(&[], self.state.kept.load(Relaxed));
    }
}

/// The subscriber key a Sy Session-Id of ours carries (its last part:
/// `<origin-host>;sy;<boot>;<n>;<subscriber>`); none in one made before it
/// did.
fn subscriber_in(sy_session_id: &str) -> Option<&str> {
    let (_, rest) = sy_session_id.split_once(";sy;")?;
    let mut parts = rest.splitn(3, ';');
    parts.next()?;
    parts.next()?;
    parts.next().filter(|key| !key.is_empty())
}

/// `statuses` with "unknown" for each wanted counter it lacks.
fn with_unknown(
    mut statuses: BTreeMap<String, String>,
    wanted: &[String],
) -> BTreeMap<String, String> {
    for c in wanted {
        statuses
            .entry(c.clone())
            .or_insert_with(|| UNKNOWN.to_owned());
    }
    statuses
}

fn log_unanswered(key: &str, kind: &str, e: &NoAnswer) {
    tracing::warn!(subscriber = key, error = %e, "subscription at the {kind} unanswered; the policy sees the counters as unknown");
}

/// What a notification says, whichever peer sent it.
#[derive(Clone, Copy)]
pub(crate) enum Notified<'a> {
    /// New statuses (SNR, N28 notify).
    Reports(&'a [CounterReport]),
    /// The peer ended the subscription (N28 terminate).
    Terminated,
}

impl SpendingNotifications for Sy {
    fn notify(&self, session_id: String, status: SpendingLimitStatus) -> NotifyFuture<'_> {
        Box::pin(async move {
            let reports = match status.reports() {
                Ok(r) => r,
                // The routes check the body first; a notification that
                // cannot be read changes nothing.
                Err(e) => return NotifyOutcome::Failed(e),
            };
            self.n28_notified(&session_id, Notified::Reports(&reports))
                .await
        })
    }

    fn terminate(&self, session_id: String, info: SubscriptionTerminationInfo) -> NotifyFuture<'_> {
        Box::pin(async move {
            tracing::info!(sy_session = %session_id, supi = %info.supi, cause = ?info.term_cause, "CHF terminates the spending-limit subscription");
            self.n28_notified(&session_id, Notified::Terminated).await
        })
    }
}

impl crate::metrics::MetricsSource for Sy {
    fn write(&self, out: &mut crate::metrics::Exposition) {
        self.write_sy_metrics(out);
    }
}

#[cfg(test)]
mod tests {
    use super::subscriber_in;

    #[test]
    fn the_subscriber_is_read_back_from_the_sy_session_id() {
        assert_eq!(
            subscriber_in("pcrf1.example;sy;1764165600;7;001010000000001"),
            Some("001010000000001")
        );
        assert_eq!(
            subscriber_in("pcrf1.example;sy;1764165600;7;a;b"),
            Some("a;b")
        );
        assert_eq!(
            subscriber_in("pcrf1.example;sy;1764165600;7"),
            None,
            "made before"
        );
        assert_eq!(subscriber_in("pcrf1.example;sy;1764165600;7;"), None);
        assert_eq!(subscriber_in("pgw;1;2"), None);
    }
}
