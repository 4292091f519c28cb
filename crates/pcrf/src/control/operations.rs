//! The operations behind the REST API and the CLI, carried out by the node:
//! provisioning, session look-up and control, policy reload, congestion,
//! top-ups and usage resets, readiness and metrics.

use crate::control::usage::{AccumulatorView, ReportView};
use crate::control::usage::{UsageChange, UsageView};
use crate::control::{
    Control, ControlError, ReauthOutcome, ReleaseCause, ReleaseOutcome, ReloadError, SessionFilter,
};
use crate::gx::service::Gx;
use crate::gx::{self, UsageInstructions};
use crate::session::{GxSession, SessionState};
use crate::store::postgres::QueryProfiler;
use crate::store::Change;
use crate::subscriber::Subscriber;
use crate::usage::config::UsageConfig;
use crate::usage::SubscriberUsage;
use std::sync::Arc;
use std::time::Duration;

use crate::node::{now_ms, Node, COMMIT_WAIT};

/// The operations over the node and the Gx service, which re-decides the
/// sessions an operation changes.
pub struct Operations {
    node: Arc<Node>,
    gx: Arc<Gx>,
}

impl Operations {
    pub fn new(node: Arc<Node>, gx: Arc<Gx>) -> Operations {
        Operations { node, gx }
    }

    /// A subscriber's usage as the API shows it, rolled to `now`.
    pub(crate) fn usage_of(&self, profile: &Subscriber, now: i64) -> UsageView {
        let cfg = self.node.usage_cfg.load();
        let day = cfg.billing_day_for(profile.billing_day);
        let mut u = (*self.node.usage.load(&profile.imsi)).clone();
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
    pub(crate) async fn change_usage(
        &self,
        imsi: &str,
        reason: crate::gx::state::PushReason,
        change: impl FnOnce(&mut SubscriberUsage, &UsageConfig, Option<u8>, i64) -> Result<(), String>,
        event: impl FnOnce(&Node, &SubscriberUsage) -> Option<crate::notify::Staged>,
    ) -> Result<UsageChange, ControlError> {
        let profile = self
            .node
            .subscribers
            .get(imsi)
            .ok_or_else(|| ControlError::NotFound(format!("no subscriber {imsi}")))?;
        let cfg = self.node.usage_cfg.load_full();
        if cfg.is_empty() {
            return Err(ControlError::Conflict(
                "usage monitoring is off (no usage file)".into(),
            ));
        }
        let now = now_ms();
        let day = profile.billing_day;
        let slot = self.node.usage.slot(imsi);
        {
            let _g = tokio::time::timeout(COMMIT_WAIT, slot.lock())
                .await
                .map_err(|_| ControlError::Unavailable("subscriber usage busy".into()))?;
            let mut next = (*slot.load()).clone();
            next.roll(&cfg, day, now);
            change(&mut next, &cfg, day, now).map_err(ControlError::Invalid)?;
            let next = Arc::new(next);
            let staged = event(&self.node, &next);
            let mut changes = vec![Change::PutUsage(next.clone())];
            changes.extend(staged.as_ref().and_then(|s| s.change()));
            self.node
                .store
                .submit(changes)
                .await
                .map_err(|e| ControlError::Unavailable(e.to_string()))?;
            slot.publish(next);
            if let Some(s) = staged {
                s.publish();
            }
        }
        let pushed = self.gx.push_subscriber(imsi, reason).await;
        Ok(UsageChange {
            usage: self.usage_of(&profile, now),
            sessions: pushed.sessions,
            rar_sent: pushed.rar_sent,
            rar_failed: pushed.failed,
        })
    }
}

impl Control for Operations {
    async fn put_subscriber(&self, subscriber: Subscriber) -> Result<bool, ControlError> {
        subscriber
            .validate()
            .map_err(|e| ControlError::Invalid(e.to_string()))?;
        let s = Arc::new(subscriber);
        let before = self.node.subscribers.get(&s.imsi);
        let staged = if before.as_deref() == Some(&*s) {
            None
        } else {
            self.node
                .subscriber_changed(&s.imsi, before.as_deref(), Some(&s))
        };
        let mut changes = vec![Change::PutSubscriber(s.clone())];
        changes.extend(staged.as_ref().and_then(|e| e.change()));
        self.node
            .store
            .submit(changes)
            .await
            .map_err(|e| ControlError::Unavailable(e.to_string()))?;
        let old = self.node.subscribers.put(s.clone());
        if let Some(e) = staged {
            e.publish();
        }
        if old.as_deref() != Some(&*s) {
            // Services, plan or quota changed: the sessions follow now.
            self.gx
                .push_subscriber(&s.imsi, crate::gx::state::PushReason::Provisioning)
                .await;
        }
        Ok(old.is_none())
    }

    fn subscriber(&self, imsi: &str) -> Option<Arc<Subscriber>> {
        self.node.subscribers.get(imsi)
    }

    async fn delete_subscriber(&self, imsi: &str) -> Result<bool, ControlError> {
        let Some(before) = self.node.subscribers.get(imsi) else {
            return Ok(false);
        };
        let staged = self.node.subscriber_changed(imsi, Some(&before), None);
        let mut changes = vec![Change::DeleteSubscriber(imsi.to_owned())];
        changes.extend(staged.as_ref().and_then(|e| e.change()));
        self.node
            .store
            .submit(changes)
            .await
            .map_err(|e| ControlError::Unavailable(e.to_string()))?;
        if let Some(e) = staged {
            e.publish();
        }
        Ok(self.node.subscribers.remove(imsi).is_some())
    }

    fn sessions(&self, filter: &SessionFilter) -> Vec<Arc<GxSession>> {
        // Sessions are indexed by IMSI (or MSISDN when no IMSI was sent).
        let key = filter.subscriber.as_deref().map(|k| {
            self.node
                .subscribers
                .by_msisdn(k)
                .map_or_else(|| k.to_owned(), |s| s.imsi.clone())
        });
        let f = SessionFilter {
            subscriber: key.clone(),
            ..filter.clone()
        };
        self.node
            .sessions
            .list(key.as_deref(), |s| f.matches(s), filter.limit)
    }

    async fn session(&self, id: &str) -> Option<Arc<GxSession>> {
        if let Some(s) = self.node.sessions.get(id) {
            return Some(s.load());
        }
        // Closed sessions live in the store only (until the retention ends).
        let read = tokio::time::timeout(COMMIT_WAIT, self.node.store.read_session(id)).await;
        match read {
            Ok(Ok(found)) => found.map(Arc::new),
            _ => None,
        }
    }

    async fn reauth(&self, id: &str) -> Result<ReauthOutcome, ControlError> {
        self.gx.push(id, false).await
    }

    async fn release(&self, id: &str, cause: ReleaseCause) -> Result<ReleaseOutcome, ControlError> {
        let slot = self
            .node
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
            .node
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
        let policy = self.node.policy.clone();
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
            let mut map = self.node.congestion.write();
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
        let ids = self.gx.sessions_in_cell(cell);
        self.gx
            .push_spread(ids, crate::gx::state::PushReason::Congestion)
    }

    fn usage(&self, imsi: &str) -> Option<UsageView> {
        let profile = self.node.subscribers.get(imsi)?;
        Some(self.usage_of(&profile, now_ms()))
    }

    async fn topup(
        &self,
        imsi: &str,
        accumulator: &str,
        octets: u64,
    ) -> Result<UsageChange, ControlError> {
        self.change_usage(
            imsi,
            crate::gx::state::PushReason::TopUp,
            |u, cfg, day, now| u.topup(cfg, accumulator, octets, now, day),
            |node, u| node.usage_topup(u, accumulator, octets),
        )
        .await
    }

    async fn reset_usage(
        &self,
        imsi: &str,
        accumulator: Option<&str>,
    ) -> Result<UsageChange, ControlError> {
        if let Some(a) = accumulator {
            if !self.node.usage_cfg.load().accumulators().contains_key(a) {
                return Err(ControlError::Invalid(format!(
                    "no accumulator {a:?} in the usage file"
                )));
            }
        }
        self.change_usage(
            imsi,
            crate::gx::state::PushReason::UsageReset,
            |u, cfg, day, now| u.reset(cfg, accumulator, now, day).map(|_| ()),
            |_, _| None,
        )
        .await
    }

    async fn ready(&self) -> Result<(), String> {
        if let Some(pg) = &self.node.pg {
            if !pg.connection.is_up() {
                return Err(
                    "store: PostgreSQL is unreachable (requests needing a write are answered 5012)"
                        .into(),
                );
            }
        }
        match tokio::time::timeout(Duration::from_secs(2), self.node.store.flush()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("store: {e}")),
            Err(_) => Err("store: writer did not answer within 2 s".into()),
        }
    }

    fn config_checksum(&self) -> String {
        self.node.live.load().cfg.checksum_hex()
    }

    fn render_metrics(&self) -> String {
        self.node.metrics.render()
    }

    fn notifications(&self) -> crate::notify::OutboxStatus {
        self.node.notify.status()
    }

    fn query_profiler(&self) -> Option<QueryProfiler> {
        self.node.pg.as_ref().map(|h| h.profiler.clone())
    }

    // Bulk provisioning: one submit, so the whole batch is one transaction
    // (all or none); the table is updated only once it is durable.
    async fn put_subscribers(
        &self,
        subscribers: Vec<Subscriber>,
    ) -> Result<crate::control::BatchOutcome, ControlError> {
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
            self.node
                .store
                .submit(changes)
                .await
                .map_err(|e| ControlError::Unavailable(e.to_string()))?;
        }
        let mut outcome = crate::control::BatchOutcome::default();
        for s in subscribers {
            match self.node.subscribers.put(s) {
                None => outcome.created += 1,
                Some(_) => outcome.updated += 1,
            }
        }
        Ok(outcome)
    }
}
