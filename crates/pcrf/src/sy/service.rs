//! Sy at the node (TS 29.219, the PCRF as the OCS's client): counters the
//! policy asks for are subscribed with an SLR during the CCR and the
//! session is decided again with their statuses; an SNR updates statuses
//! and re-decides the subscriber's sessions (RAR where the decision
//! changed); the subscriber's last Gx session ending sends the STR.
//!
//! Fallback: when no OCS answers within `[sy].timeout_ms` (or none is up,
//! or it answers with an error), the policy sees "unknown" for the counters
//! it asked about and decides anyway; the next CCR asks again.

use crate::admission::Class;
use crate::metrics::{Command, Exposition, Kind, NO_ANSWER};
use crate::node::{now_ms, Answered, Node, COMMIT_WAIT};
use crate::pcc::PushReason;
use crate::policy::input::PolicyInput;
use crate::policy::Outcome;
use crate::session::spending::{SySession, UNKNOWN};
use crate::session::{GxSession, SessionState};
use crate::store::Change;
use crate::sy::ocs::{OcsError, OcsPool};
use crate::sy::state::SyPart;
use crate::sy::{self, AnswerCode, SlRequestType, Slr};
use crate::txn;
use bytes::{Bytes, BytesMut};
use diameter::codec::{DiameterError, Message};
use diameter::dict::{cmd, enums};
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
    pub(crate) node: Arc<Node>,
    pub(crate) state: SyPart,
    /// This service, for the background exchanges it starts.
    pub(crate) me_ref: Weak<Sy>,
}

impl Sy {
    pub fn new(node: Arc<Node>, state: SyPart) -> Arc<Sy> {
        Arc::new_cyclic(|me| Sy {
            node,
            state,
            me_ref: me.clone(),
        })
    }
    /// Starts connecting to the configured OCSs from `dnode` (whose handler
    /// receives their SNRs), and schedules the pending status changes of
    /// recovered Sy sessions. Does nothing without `[sy].ocs`.
    pub fn start_sy<H: Handler>(&self, dnode: &transport::Node<H>) {
        let cfg = self.node.live.load().cfg.sy.clone();
        if !cfg.enabled() {
            return;
        }
        if self
            .state
            .ocs
            .set(OcsPool::start(dnode, &cfg, &self.node.me.origin_realm))
            .is_err()
        {
            return;
        }
        tracing::info!(
            ocs = ?cfg.ocs.iter().map(|o| o.origin_host.as_str()).collect::<Vec<_>>(),
            timeout_ms = cfg.timeout_ms,
            recovered_sessions = self.state.table.len(),
            "Sy: connecting to the OCSs"
        );
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
        if self.state.ocs.get().is_none() {
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
                self.schedule_pending(s.subscriber.clone(), at);
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
        if !self.node.store.is_shared() {
            return Ok(false);
        }
        let mut held = self.node.take_over_subscriber(key).await? > 0;
        for id in self.node.sessions.ids_of_subscriber(key) {
            if let Some(slot) = self.node.sessions.get(&id) {
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
        let Some(pool) = self.state.ocs.get() else {
            return out;
        };
        // A record another node wrote may hold a newer Sy session.
        self.adopt(s);
        let key = s.subscriber.clone();
        let wanted = &out.decision.spending_counters;
        if wanted.is_empty() || out.decision.reject.is_some() {
            s.sy = self.state.table.get(&key);
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
                    self.node.me.origin_host, self.state.boot_secs
                ),
                now,
            )
        });
        let missing = sy.missing(wanted);
        if missing.is_empty() {
            s.sy = current;
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
            s.sy = current;
            return self.decide_again(s, input);
        }
        let request_type = if sy.open {
            SlRequestType::Intermediate
        } else {
            SlRequestType::Initial
        };
        // The full list: an intermediate SLR replaces the subscription.
        let mut counters: Vec<String> = sy.counters.keys().cloned().collect();
        counters.extend(missing.iter().cloned());
        let started = Instant::now();
        let res = pool
            .request(sy::SY, cmd::SPENDING_LIMIT, |b, host, realm| {
                sy::encode_slr(
                    b,
                    &self.node.me,
                    &Slr {
                        session_id: &sy.session_id,
                        request_type,
                        destination_host: host,
                        destination_realm: realm,
                        imsi: s.imsi.as_deref(),
                        msisdn: s.msisdn.as_deref(),
                        counters: &counters,
                    },
                );
            })
            .await;
        let now = now_ms();
        let mut changed = false;
        match res {
            Ok(ans) => match sy::decode_sla(&ans.msg) {
                Ok(sla) => {
                    self.node
                        .metrics
                        .request(Command::Slr, sla.code.code(), started.elapsed());
                    if sla.code.is_success() {
                        sy.open = true;
                        sy.ocs_host = Some(ans.host.clone());
                        sy.apply(&sla.reports, now);
                        let unreported: Vec<String> = missing
                            .iter()
                            .filter(|c| !sy.counters.contains_key(*c))
                            .cloned()
                            .collect();
                        if !unreported.is_empty() {
                            // Not asked again: the OCS had its chance.
                            tracing::warn!(subscriber = %key, counters = ?unreported, ocs = %ans.host, "SLA without a status for these counters; they stay unknown");
                            sy.refuse(&unreported, now);
                        }
                        changed = true;
                    } else if sla.code == AnswerCode::Experimental(sy::UNKNOWN_POLICY_COUNTERS) {
                        let named: Vec<String> = sla
                            .failed_counters
                            .iter()
                            .filter(|c| missing.contains(c))
                            .cloned()
                            .collect();
                        let refused = if named.is_empty() {
                            missing.clone()
                        } else {
                            named
                        };
                        self.state
                            .unknown_counters
                            .fetch_add(refused.len() as u64, Relaxed);
                        tracing::warn!(subscriber = %key, counters = ?refused, ocs = %ans.host, "OCS does not know these policy counters (5570); they stay unknown");
                        sy.refuse(&refused, now);
                        changed = true;
                    } else {
                        self.state.fallbacks.fetch_add(1, Relaxed);
                        tracing::warn!(subscriber = %key, code = sla.code.code(), ocs = %ans.host, "SLR refused; the policy sees the counters as unknown");
                    }
                }
                Err(e) => {
                    self.node
                        .metrics
                        .request(Command::Slr, e.result_code, started.elapsed());
                    self.state.fallbacks.fetch_add(1, Relaxed);
                    tracing::warn!(subscriber = %key, error = %e, ocs = %ans.host, "bad SLA; the policy sees the counters as unknown");
                }
            },
            Err(e) => {
                self.node
                    .metrics
                    .request(Command::Slr, NO_ANSWER, started.elapsed());
                self.state.fallbacks.fetch_add(1, Relaxed);
                log_unanswered(&key, &e);
            }
        }
        let statuses = with_unknown(sy.statuses(now), wanted);
        if !changed {
            let retry = self.node.live.load().cfg.sy.retry_secs.saturating_mul(1000);
            entry
                .retry_at_ms
                .store(now.saturating_add(retry as i64), Relaxed);
        }
        if changed {
            if let Some(at) = sy.next_change_ms() {
                self.schedule_pending(key.clone(), at);
            }
            self.state.table.put(&key, sy.clone());
            s.sy = Some(sy);
        } else {
            s.sy = current;
        }
        input.spending = statuses;
        self.decide_again(s, input)
    }

    fn decide_again(&self, s: &GxSession, input: &PolicyInput) -> Outcome {
        let out = self.node.policy.decide(input, s.last_decision.as_deref());
        self.node.note_fallback(&s.id, &out);
        out
    }

    /// After a Gx session closed: when it was the subscriber's last one,
    /// the Sy session ends (STR, in the background: the CCA does not wait).
    /// On a store shared with other nodes, the store says which sessions
    /// are still open (this node's copies may be stale, and the others may
    /// be held elsewhere).
    pub(crate) fn sy_session_ended(&self, key: &str) {
        let Some(sy) = self.state.table.get(key) else {
            return;
        };
        let Some(this) = self.me_ref.upgrade() else {
            return;
        };
        let key = key.to_owned();
        if self.node.store.is_shared() {
            tokio::spawn(async move {
                if this.in_use(&key, &sy.session_id).await {
                    let _ = this.persist_sy(&key, sy).await;
                } else {
                    this.end_sy_session(&key, &sy.session_id).await;
                }
            });
            return;
        }
        let others_open = self.node.sessions.ids_of_subscriber(&key).iter().any(|id| {
            self.node
                .sessions
                .get(id)
                .is_some_and(|slot| slot.load().state == SessionState::Open)
        });
        if others_open {
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
        let ids = match tokio::time::timeout(COMMIT_WAIT, self.node.store.sessions_of(key)).await {
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
            match tokio::time::timeout(COMMIT_WAIT, self.node.store.read_session(&id)).await {
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

    async fn send_sy_str(&self, key: &str, sy: &SySession) {
        let Some(pool) = self.state.ocs.get() else {
            return;
        };
        let started = Instant::now();
        let res = pool
            .request(sy::SY, cmd::SESSION_TERMINATION, |b, host, realm| {
                sy::encode_str(
                    b,
                    &self.node.me,
                    &sy.session_id,
                    host,
                    realm,
                    enums::TERMINATION_CAUSE::DIAMETER_LOGOUT,
                );
            })
            .await;
        match res {
            Ok(ans) => {
                let code = sy::decode_sta(&ans.msg).map_or_else(|e| e.result_code, |c| c.code());
                self.node
                    .metrics
                    .request(Command::Str, code, started.elapsed());
                tracing::info!(subscriber = key, sy_session = %sy.session_id, ocs = %ans.host, code, "Sy session ended");
            }
            Err(e) => {
                self.node
                    .metrics
                    .request(Command::Str, NO_ANSWER, started.elapsed());
                tracing::warn!(subscriber = key, sy_session = %sy.session_id, error = %e, "STR to the OCS unanswered; the OCS keeps the Sy session until it cleans up");
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
        txn::serve(&self.node, envelope, move |_| async move {
            let (bytes, code) = self.snr(req).await?;
            Ok(Answered { bytes, code })
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
            sy::encode_sna(&mut out, req, &self.node.me, code);
            (out.freeze(), code)
        };
        let key = self.state.table.subscriber_of(&snr.session_id).or_else(|| {
            self.node
                .store
                .is_shared()
                .then(|| subscriber_in(&snr.session_id).map(str::to_owned))
                .flatten()
        });
        let Some(key) = key else {
            tracing::info!(sy_session = %snr.session_id, "SNR for an unknown Sy session");
            return Ok(answer(result_code::DIAMETER_UNKNOWN_SESSION_ID));
        };
        let held = self.gather(&key).await?;
        let entry = self.state.table.entry(&key);
        let updated = {
            let _exchange = entry.exchange.lock().await;
            let mut st = entry.state.lock();
            match st.as_mut() {
                Some(sy) if sy.session_id == snr.session_id => {
                    sy.apply(&snr.reports, now_ms());
                    Some(sy.clone())
                }
                _ => None,
            }
        };
        let Some(sy) = updated else {
            return Ok(answer(result_code::DIAMETER_UNKNOWN_SESSION_ID));
        };
        // A conflict is handled again (`handle_sy`); the reports are
        // applied again to the statuses then read (the same statuses).
        // So is a request whose taken-over session another request here
        // dropped meanwhile (its write met a conflict): nothing is stored
        // yet, and the answer must not say otherwise.
        if !self.persist_sy(&key, sy.clone()).await? && held {
            return Err(Node::conflict_error());
        }
        tracing::info!(subscriber = %key, sy_session = %sy.session_id, reports = snr.reports.len(), "SNR applied");
        if let Some(at) = sy.next_change_ms() {
            self.schedule_pending(key.clone(), at);
        }
        if let Some(this) = self.me_ref.upgrade() {
            tokio::spawn(async move {
                this.node.push_subscriber(&key, PushReason::Spending).await;
            });
        }
        Ok(answer(result_code::DIAMETER_SUCCESS))
    }

    /// Writes the subscriber's Sy session into one of its open session
    /// records (the newest copy wins at start-up, so one is enough).
    /// Whether one holds it now: false when this node holds none.
    async fn persist_sy(&self, key: &str, sy: SySession) -> Result<bool, DiameterError> {
        for id in self.node.sessions.ids_of_subscriber(key) {
            let Some(slot) = self.node.sessions.get(&id) else {
                continue;
            };
            let _g = slot.lock().await;
            let cur = slot.load();
            if cur.state != SessionState::Open {
                continue;
            }
            if cur.sy.as_ref() == Some(&sy) {
                return Ok(true);
            }
            let mut s = (*cur).clone();
            s.sy = Some(sy);
            s.updated_ms = now_ms();
            let s = Arc::new(s);
            self.node
                .commit(vec![Change::PutSession(s.clone())])
                .await?;
            slot.publish(s);
            return Ok(true);
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
                this.node.push_subscriber(&key, PushReason::Spending).await;
            }
        });
    }

    /// Sy metrics beyond the per-command counts.
    pub(crate) fn write_sy_metrics(&self, out: &mut Exposition) {
        let Some(pool) = self.state.ocs.get() else {
            return;
        };
        {
            let mut f = out.family(
                "pcrf_sy_ocs_up",
                "Each configured OCS: 1 when its connection is open and its watchdog okay.",
                Kind::Gauge,
            );
            for (host, up) in pool.status() {
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

fn log_unanswered(key: &str, e: &OcsError) {
    tracing::warn!(subscriber = key, error = %e, "SLR unanswered; the policy sees the counters as unknown");
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
