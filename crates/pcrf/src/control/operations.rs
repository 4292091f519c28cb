//! The operations behind the REST API and the CLI, carried out by the node:
//! provisioning, session look-up and control, policy reload, congestion,
//! top-ups and usage resets, readiness and metrics.

use crate::control::console::{
    DryDecision, DryRun, PolicyView, RecentDecisions, SubscriberHit, SubscriberPage,
    SubscriberQuery, TestView, MAX_PAGE,
};
use crate::control::usage::{AccumulatorView, ReportView};
use crate::control::usage::{UsageChange, UsageView};
use crate::control::version_views::{
    Artifact, Deployed, RolloutStart, RolloutView, VersionView, VersionsPage,
};
use crate::control::versions::{self, Deploy, Deployer, UsageDeploy};
use crate::control::DeployFailure;
use crate::control::{
    Control, ControlError, ReauthOutcome, ReleaseCause, ReleaseOutcome, ReloadError, SessionFilter,
};
use crate::gx::service::Gx;
use crate::pcc::UsageInstructions;
use crate::policy::input::PolicyInput;
use crate::session::{GxSession, SessionState};
use crate::store::postgres::QueryProfiler;
use crate::store::Change;
use crate::subscriber::Subscriber;
use crate::usage::config::UsageConfig;
use crate::usage::SubscriberUsage;
use std::sync::Arc;
use std::time::Duration;

use crate::node::events::StagedEvents;
use crate::node::{
    now_ms, Capabilities, Events, Persistence, Policy, Sessions, Settings, Signalling, Subscribers,
    Telemetry, UsageLedger, COMMIT_WAIT,
};
use crate::txn::Runner;

/// Runs a policy task off the async workers (Lua may run for a while);
/// its error as a reload's: the message and the script line.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, crate::policy::PolicyError> + Send + 'static,
) -> Result<T, ReloadError> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ReloadError {
            line: e.line(),
            error: e.to_string(),
        }),
        Err(e) => Err(ReloadError {
            error: format!("policy task failed: {e}"),
            line: None,
        }),
    }
}

/// The operations over the node and the Gx service, which re-decides the
/// sessions an operation changes.
pub struct Operations {
    sessions: Sessions,
    subscribers: Subscribers,
    usage: UsageLedger,
    policy: Policy,
    signalling: Signalling,
    persistence: Persistence,
    events: Events,
    telemetry: Telemetry,
    settings: Settings,
    versions: Deployer,
    txn: Runner,
    gx: Arc<Gx>,
}

impl Operations {
    /// Logs a dry run as a `decision` event when `[decision_log]` takes
    /// its subscriber: written (alone) before the answer, as a request's
    /// decision is in its commit.
    async fn log_dry_run(&self, dry: &DryRun, plan: Option<&str>) -> Result<(), ControlError> {
        let mut fields = serde_json::Map::new();
        if let Some(s) = &dry.session {
            fields.insert("session".into(), serde_json::json!(s));
        }
        fields.insert(
            "policy_version".into(),
            serde_json::json!(self.policy.runner().policy_versions().serving()),
        );
        fields.insert("inputs".into(), dry.inputs.clone());
        fields.insert(
            "running".into(),
            serde_json::to_value(&dry.running).unwrap_or_default(),
        );
        fields.insert(
            "draft".into(),
            serde_json::to_value(&dry.draft).unwrap_or_default(),
        );
        let mut events = StagedEvents::default();
        events.push(self.events.dry_run_logged(&dry.subscriber, plan, fields));
        if events.is_empty() {
            return Ok(());
        }
        let changes: Vec<Change> = events.changes().collect();
        self.txn
            .commit(changes)
            .await
            .map_err(|e| ControlError::Unavailable(e.message.to_string()))?;
        events.publish();
        Ok(())
    }

    pub fn new(caps: &Capabilities, gx: Arc<Gx>) -> Operations {
        Operations {
            sessions: caps.sessions.clone(),
            subscribers: caps.subscribers.clone(),
            usage: caps.usage.clone(),
            policy: caps.policy.clone(),
            signalling: caps.signalling.clone(),
            persistence: caps.persistence.clone(),
            events: caps.events.clone(),
            telemetry: caps.telemetry.clone(),
            settings: caps.settings.clone(),
            versions: Deployer::new(caps),
            txn: Runner::new(caps),
            gx,
        }
    }

    /// A subscriber's usage as the API shows it, rolled to `now`.
    pub(crate) fn usage_of(&self, profile: &Subscriber, now: i64) -> UsageView {
        let u = (*self.usage.table().load(&profile.imsi)).clone();
        self.view_of(profile, u, now)
    }

    /// `u` as the API shows it, rolled to `now`.
    fn view_of(&self, profile: &Subscriber, mut u: SubscriberUsage, now: i64) -> UsageView {
        let cfg = self.usage.table().config();
        let day = cfg.billing_day_for(profile.billing_day);
        u.roll(&cfg, Some(day), now);
        let rfc3339 = |ms: i64| {
            jiff::Timestamp::from_millisecond(ms).map_or_else(|_| ms.to_string(), |t| t.to_string())
        };
        let accumulators = cfg
            .accumulators()
            .iter()
            .map(|(name, acfg)| {
                let a = u.accumulators.get(&**name).cloned().unwrap_or_default();
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
                (name.to_string(), view)
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
                        k.to_string(),
                        ReportView {
                            at: rfc3339(r.at_ms),
                            session: r.session.to_string(),
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
        reason: crate::pcc::PushReason,
        change: impl Fn(&mut SubscriberUsage, &UsageConfig, Option<u8>, i64) -> Result<(), String>,
        event: impl Fn(&Events, &SubscriberUsage) -> Option<crate::notify::Staged>,
    ) -> Result<UsageChange, ControlError> {
        let profile = self
            .subscribers
            .table()
            .get(imsi)
            .ok_or_else(|| ControlError::NotFound(format!("no subscriber {imsi}")))?;
        let cfg = self.usage.table().config_full();
        if cfg.is_empty() {
            return Err(ControlError::Conflict(
                "usage monitoring is off (no usage file)".into(),
            ));
        }
        let now = now_ms();
        let day = profile.billing_day;
        // Another node may have written the accumulators since this one
        // read them (a conflict): they are read again and the change is
        // applied to those, a few times at most. The outer error is the
        // store's (a conflict is tried again), the inner one the change's.
        let (change, event, cfg) = (&change, &event, &cfg);
        let changed = crate::txn::retrying_conflicts(&self.txn, imsi, move |_| async move {
                let slot = self.usage.table().slot(imsi);
                let Ok(_g) = tokio::time::timeout(COMMIT_WAIT, slot.lock()).await else {
                    return Ok(Err(ControlError::Unavailable(
                        "subscriber usage busy".into(),
                    )));
                };
                if let Err(e) = self.usage.read_usage_if_needed(&slot, imsi).await {
                    return Ok(Err(ControlError::Unavailable(e.message.to_string())));
                }
                let mut next = (*slot.load()).clone();
                next.roll(cfg, day, now);
                if let Err(e) = change(&mut next, cfg, day, now) {
                    return Ok(Err(ControlError::Invalid(e)));
                }
                let next = Arc::new(next);
                let staged = event(&self.events, &next);
                match crate::txn::commit_usage(&self.txn, &slot, next, staged).await {
                    Ok(()) => Ok(Ok(())),
                    Err(e @ crate::store::StoreError::Conflict(_)) => {
                        tracing::info!(subscriber = imsi, error = %e, "usage written by another node; changing it again");
                        Err(Sessions::conflict_error())
                    }
                    Err(e) => Ok(Err(ControlError::Unavailable(e.to_string()))),
                }
            })
            .await;
        match changed {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(ControlError::Unavailable(e.message.to_string())),
        }
        // Sessions another node holds are re-decided here: their RAR must
        // carry the change to the PCEF now.
        self.sessions
            .take_over_subscriber(imsi)
            .await
            .map_err(|e| ControlError::Unavailable(e.message.to_string()))?;
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
        let before = self.subscribers.table().get(&s.imsi);
        let staged = if before.as_deref() == Some(&*s) {
            None
        } else {
            self.events
                .subscriber_changed(&s.imsi, before.as_deref(), Some(&s))
        };
        let mut changes = vec![Change::PutSubscriber(s.clone())];
        changes.extend(staged.as_ref().and_then(|e| e.change()));
        self.persistence
            .store()
            .submit(changes)
            .await
            .map_err(|e| ControlError::Unavailable(e.to_string()))?;
        // On a shared store the provisioning feed may have put it already
        // (and re-decided the sessions): push only if this put changed it.
        let old = self.subscribers.table().put(s.clone());
        if let Some(e) = staged {
            e.publish();
        }
        if old.as_deref() != Some(&*s) {
            // Services, plan or quota changed: the sessions follow now.
            self.gx
                .push_subscriber(&s.imsi, crate::pcc::PushReason::Provisioning)
                .await;
        }
        Ok(before.is_none())
    }

    fn subscriber(&self, imsi: &str) -> Option<Arc<Subscriber>> {
        self.subscribers.table().get(imsi)
    }

    async fn delete_subscriber(&self, imsi: &str) -> Result<bool, ControlError> {
        let Some(before) = self.subscribers.table().get(imsi) else {
            return Ok(false);
        };
        let staged = self.events.subscriber_changed(imsi, Some(&before), None);
        let mut changes = vec![Change::DeleteSubscriber(imsi.to_owned())];
        changes.extend(staged.as_ref().and_then(|e| e.change()));
        self.persistence
            .store()
            .submit(changes)
            .await
            .map_err(|e| ControlError::Unavailable(e.to_string()))?;
        if let Some(e) = staged {
            e.publish();
        }
        // The provisioning feed may have removed it already.
        self.subscribers.table().remove(imsi);
        Ok(true)
    }

    fn sessions(&self, filter: &SessionFilter) -> Vec<Arc<GxSession>> {
        // Sessions are indexed by IMSI (or MSISDN when no IMSI was sent).
        let key = filter.subscriber.as_deref().map(|k| {
            self.subscribers
                .table()
                .by_msisdn(k)
                .map_or_else(|| k.to_owned(), |s| s.imsi.clone())
        });
        let f = SessionFilter {
            subscriber: key.clone(),
            ..filter.clone()
        };
        self.sessions
            .table()
            .list(key.as_deref(), |s| f.matches(s), filter.limit)
    }

    async fn session(&self, id: &str) -> Option<Arc<GxSession>> {
        let held = self.sessions.table().get(id).map(|s| s.load());
        // On a store shared with other nodes the copy here may be stale
        // (another node served the session since): the store is read, and
        // the copy here shown only when it cannot be. Not the hot path.
        if held.is_some() && !self.persistence.store().is_shared() {
            return held;
        }
        // Closed sessions live in the store only (until the retention ends).
        let read =
            tokio::time::timeout(COMMIT_WAIT, self.persistence.store().read_session(id)).await;
        match read {
            Ok(Ok(Some(found))) => Some(Arc::new(found)),
            Ok(Ok(None)) => None,
            Ok(Err(e)) => {
                tracing::warn!(session = id, error = %e, "session not read from the store; showing the copy held here");
                held
            }
            Err(_) => {
                tracing::warn!(
                    session = id,
                    "session not read from the store in time; showing the copy held here"
                );
                held
            }
        }
    }

    async fn reauth(&self, id: &str) -> Result<ReauthOutcome, ControlError> {
        self.gx.push(id, false).await
    }

    async fn release(&self, id: &str, cause: ReleaseCause) -> Result<ReleaseOutcome, ControlError> {
        // Any node's API reaches any session: one held elsewhere is taken
        // over, and the RAR goes to its PCEF (through the relay when this
        // node has no connection to it).
        let slot = self
            .sessions
            .find_or_take_over(id)
            .await
            .map_err(|e| ControlError::Unavailable(e.message.to_string()))?
            .ok_or_else(|| ControlError::NotFound(format!("no session {id}")))?;
        let cur = slot.load();
        if cur.state == SessionState::Closed {
            return Err(ControlError::Conflict(format!("session {id} is closed")));
        }
        // Not under the session lock: the PCEF answers with RAA and then
        // sends CCR-T, which needs that lock.
        let raa = self
            .signalling
            .send_push(
                &cur,
                None,
                None,
                Some(cause.code() as i32),
                &UsageInstructions::default(),
            )
            .await?;
        Ok(ReleaseOutcome {
            result_code: raa.result_code.or(raa.experimental_result),
        })
    }

    async fn reload_policy(&self) -> Result<u64, ReloadError> {
        let versions = self.policy.runner().policy_versions().clone();
        let res = tokio::task::spawn_blocking(move || versions.reload_file())
            .await
            .map_err(|e| ReloadError {
                error: format!("reload task failed: {e}"),
                line: None,
            })?;
        match res {
            Ok(_) => Ok(self.policy.engine().version()),
            Err(e) => Err(match DeployFailure::from(e) {
                DeployFailure::Refused(r) => r,
                DeployFailure::Failed(c) => ReloadError {
                    error: c.to_string(),
                    line: None,
                },
            }),
        }
    }

    fn set_congestion(&self, cell: &str, level: u32) -> usize {
        if self.policy.runner().set_congestion(cell, level) == level {
            return 0;
        }
        let ids = self.gx.sessions_in_cell(cell);
        self.gx.push_spread(ids, crate::pcc::PushReason::Congestion)
    }

    fn usage(&self, imsi: &str) -> Option<UsageView> {
        let profile = self.subscribers.table().get(imsi)?;
        Some(self.usage_of(&profile, now_ms()))
    }

    async fn usage_stored(&self, imsi: &str) -> Option<UsageView> {
        let profile = self.subscribers.table().get(imsi)?;
        if self.persistence.store().is_shared() {
            // Other nodes may have counted since this one last did.
            let read =
                tokio::time::timeout(COMMIT_WAIT, self.persistence.store().read_usage(imsi)).await;
            if let Ok(Ok(stored)) = read {
                let u = stored.unwrap_or_else(|| SubscriberUsage::new(imsi));
                return Some(self.view_of(&profile, u, now_ms()));
            }
        }
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
            crate::pcc::PushReason::TopUp,
            |u, cfg, day, now| u.topup(cfg, accumulator, octets, now, day),
            |events, u| events.usage_topup(u, accumulator, octets),
        )
        .await
    }

    async fn reset_usage(
        &self,
        imsi: &str,
        accumulator: Option<&str>,
    ) -> Result<UsageChange, ControlError> {
        if let Some(a) = accumulator {
            if !self.usage.table().config().accumulators().contains_key(a) {
                return Err(ControlError::Invalid(format!(
                    "no accumulator {a:?} in the usage file"
                )));
            }
        }
        self.change_usage(
            imsi,
            crate::pcc::PushReason::UsageReset,
            |u, cfg, day, now| u.reset(cfg, accumulator, now, day).map(|_| ()),
            |_, _| None,
        )
        .await
    }

    async fn ready(&self) -> Result<(), String> {
        // A write, not a flush: a flush passes while every write fails.
        // First, so that its error (a read-only database, a replaced file)
        // is the reason given.
        match tokio::time::timeout(Duration::from_secs(2), self.persistence.store().probe()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("store not writable: {e}")),
            Err(_) => return Err("store: writer did not answer within 2 s".into()),
        }
        if let Some(pg) = self.persistence.pg() {
            if !pg.connection.is_up() {
                return Err(
                    "store: PostgreSQL is unreachable (requests needing a write are answered 5012)"
                        .into(),
                );
            }
        }
        Ok(())
    }

    fn config_checksum(&self) -> String {
        self.settings.live().cfg.checksum_hex()
    }

    fn render_metrics(&self) -> String {
        self.telemetry.metrics().render()
    }

    fn cluster(&self) -> Option<crate::cluster::membership::ClusterView> {
        Some(self.persistence.cluster_view())
    }

    fn notifications(&self) -> crate::notify::OutboxStatus {
        self.persistence.outbox().status()
    }

    fn search_subscribers(&self, query: &SubscriberQuery) -> SubscriberPage {
        let q = query.q.trim();
        let limit = query.limit.clamp(1, MAX_PAGE);
        let hit = |imsi: &str, profile: Option<&Subscriber>| SubscriberHit {
            imsi: imsi.to_string(),
            msisdn: profile.and_then(|p| p.msisdn.clone()),
            plan: profile.and_then(|p| p.plan.clone()),
            sessions: self.sessions.table().ids_of_subscriber(imsi).len(),
            provisioned: profile.is_some(),
        };
        let one = |p: Arc<Subscriber>, matched_by| SubscriberPage {
            subscribers: vec![hit(&p.imsi, Some(&p))],
            next: None,
            matched_by,
        };
        if let Ok(addr) = q.parse::<std::net::IpAddr>() {
            let mut keys: Vec<String> = self
                .sessions
                .table()
                .bound_to(addr)
                .iter()
                .map(|slot| slot.load().subscriber.to_string())
                .collect();
            keys.sort();
            keys.dedup();
            return SubscriberPage {
                subscribers: keys
                    .iter()
                    .map(|k| hit(k, self.subscribers.table().get(k).as_deref()))
                    .collect(),
                next: None,
                matched_by: "ue_address",
            };
        }
        if let Some(p) = self.subscribers.table().get(q) {
            return one(p, "imsi");
        }
        if let Some(p) = self.subscribers.table().by_msisdn(q) {
            return one(p, "msisdn");
        }
        // Leading IMSI digits: a range of the ordered index. When none
        // match, leading MSISDN digits: a scan of the table.
        let after = query.after.as_deref();
        let table = &self.subscribers.table();
        let imsi_digits = table
            .imsi_page(q, None, 1)
            .is_some_and(|(first, _)| !first.is_empty());
        let (found, more, matched_by) = match imsi_digits {
            true => {
                let (found, more) = table.imsi_page(q, after, limit).unwrap_or_default();
                (found, more, "imsi_prefix")
            }
            false => {
                let (found, more) = table.scan(
                    |s| s.msisdn.as_deref().is_some_and(|m| m.starts_with(q)),
                    after,
                    limit,
                );
                (found, more, "msisdn_prefix")
            }
        };
        SubscriberPage {
            next: more.then(|| found.last().map(|s| s.imsi.clone())).flatten(),
            subscribers: found.iter().map(|p| hit(&p.imsi, Some(p))).collect(),
            matched_by,
        }
    }

    fn policy(&self) -> Option<PolicyView> {
        let engine = &self.policy.engine();
        let cases = crate::policy::cases::file_of(engine.path());
        Some(PolicyView {
            version: format!("{:016x}", engine.version()),
            path: engine.path().display().to_string(),
            source: engine.source().to_string(),
            cases: cases.is_file().then(|| cases.display().to_string()),
            id: self.policy.runner().policy_versions().serving(),
            refused: self.policy.runner().policy_versions().refused(),
            rollout: self
                .policy
                .runner()
                .policy_versions()
                .rollout()
                .as_ref()
                .map(RolloutView::of),
        })
    }

    async fn check_policy(&self, source: String) -> Result<u64, ReloadError> {
        let policy = self.policy.engine().clone();
        blocking(move || policy.draft(source).map(|d| d.version())).await
    }

    async fn test_policy(&self, source: Option<String>) -> Result<TestView, ReloadError> {
        let policy = self.policy.engine().clone();
        blocking(move || {
            let cases = crate::policy::cases::file_of(policy.path());
            let report = match source {
                Some(src) => crate::policy::cases::run_on(&policy.draft(src)?, &cases)?,
                None => crate::policy::cases::run_on(&policy, &cases)?,
            };
            Ok(TestView::of(&report, cases.display().to_string()))
        })
        .await
    }

    async fn dry_run_policy(&self, source: String, imsi: String) -> Result<DryRun, ControlError> {
        let profile = self.subscribers.table().get(&imsi);
        // The inputs of the subscriber's most recent decision, if any.
        let session = self
            .sessions
            .table()
            .ids_of_subscriber(&imsi)
            .into_iter()
            .filter_map(|id| self.sessions.table().get(&id).map(|s| s.load()))
            .filter(|s| s.state == SessionState::Open)
            .filter_map(|s| {
                let rec = s.last_decision.clone()?;
                let input: PolicyInput = rec.inputs.to_input()?;
                Some((rec.at_ms, s.id.to_string(), input))
            })
            .max_by_key(|(at, _, _)| *at);
        let plan = profile.as_ref().and_then(|p| p.plan.clone());
        let (session, input) = match (session, profile) {
            (Some((_, id, input)), _) => (Some(id), input),
            (None, Some(p)) => {
                let mut input = crate::policy::engine::sample_inputs()
                    .into_iter()
                    .next()
                    .map(|(_, i)| i)
                    .unwrap_or_default();
                input.subscriber = crate::policy::input::SubscriberInput::from_profile(&p);
                (None, input)
            }
            (None, None) => return Err(ControlError::NotFound(format!("no subscriber {imsi}"))),
        };
        let policy = self.policy.engine().clone();
        let inputs = serde_json::to_value(&input).unwrap_or_default();
        let (running, draft) = tokio::task::spawn_blocking(move || {
            let decide = |e: &crate::policy::PolicyEngine| match e.evaluate(&input) {
                Ok(d) => DryDecision {
                    script_version: format!("{:016x}", e.version()),
                    decision: Some(d),
                    error: None,
                },
                Err(err) => DryDecision {
                    script_version: format!("{:016x}", e.version()),
                    decision: None,
                    error: Some(err.to_string()),
                },
            };
            let running = decide(&policy);
            let draft = match policy.draft(source) {
                Ok(d) => decide(&d),
                Err(err) => DryDecision {
                    script_version: String::new(),
                    decision: None,
                    error: Some(err.to_string()),
                },
            };
            (running, draft)
        })
        .await
        .map_err(|e| ControlError::Internal(format!("dry run failed: {e}")))?;
        let dry = DryRun {
            subscriber: imsi,
            session,
            inputs,
            running,
            draft,
        };
        self.log_dry_run(&dry, plan.as_deref()).await?;
        Ok(dry)
    }

    async fn deploy_policy(
        &self,
        source: String,
        by: String,
        comment: String,
    ) -> Result<Deployed, DeployFailure> {
        versions::deploy(&self.versions, Deploy::Source { source, comment }, by).await
    }

    async fn rollback_policy(&self, id: i64, by: String) -> Result<Deployed, DeployFailure> {
        versions::deploy(&self.versions, Deploy::Rollback(id), by).await
    }

    async fn start_rollout(
        &self,
        start: RolloutStart,
        by: String,
    ) -> Result<RolloutView, DeployFailure> {
        versions::start_rollout(&self.versions, start, by).await
    }

    async fn widen_rollout(
        &self,
        share_basis_points: Option<u32>,
        subscribers: Vec<String>,
        by: String,
    ) -> Result<RolloutView, DeployFailure> {
        versions::widen_rollout(&self.versions, share_basis_points, subscribers, by).await
    }

    async fn promote_rollout(&self, by: String) -> Result<Deployed, DeployFailure> {
        versions::deploy(&self.versions, Deploy::Promote, by).await
    }

    async fn abort_rollout(&self, by: String) -> Result<Deployed, DeployFailure> {
        versions::deploy(&self.versions, Deploy::Abort, by).await
    }

    async fn recent_decisions(
        &self,
        imsi: String,
        limit: usize,
    ) -> Result<RecentDecisions, ControlError> {
        let Some((file, keep)) = self.policy.runner().decision_log().file_set() else {
            return Err(ControlError::Conflict(
                "the decision log writes no file here: set [decision_log] enabled = true and file"
                    .into(),
            ));
        };
        let shown = file.display().to_string();
        let who = imsi.clone();
        let found = tokio::task::spawn_blocking(move || {
            crate::notify::decision_history::recent(
                &file,
                keep,
                &who,
                limit,
                crate::notify::decision_history::SCAN_BUDGET_BYTES,
            )
        })
        .await
        .map_err(|e| ControlError::Internal(format!("decision log read failed: {e}")))?
        .map_err(ControlError::Unavailable)?;
        Ok(RecentDecisions {
            subscriber: imsi,
            file: shown,
            decisions: found.decisions,
            complete: found.complete,
        })
    }

    async fn deploy_usage(
        &self,
        text: String,
        by: String,
        comment: String,
    ) -> Result<Deployed, DeployFailure> {
        versions::deploy_usage(&self.versions, UsageDeploy::Text { text, comment }, by).await
    }

    async fn rollback_usage(&self, id: i64, by: String) -> Result<Deployed, DeployFailure> {
        versions::deploy_usage(&self.versions, UsageDeploy::Rollback(id), by).await
    }

    async fn versions(
        &self,
        artifact: Artifact,
        before: Option<i64>,
        limit: usize,
    ) -> Result<VersionsPage, ControlError> {
        versions::list(&self.versions, artifact, before, limit).await
    }

    async fn version(&self, artifact: Artifact, id: i64) -> Result<VersionView, ControlError> {
        versions::get(&self.versions, artifact, id).await
    }

    async fn version_diff(
        &self,
        artifact: Artifact,
        a: i64,
        b: i64,
    ) -> Result<String, ControlError> {
        versions::diff(&self.versions, artifact, a, b).await
    }

    fn query_profiler(&self) -> Option<QueryProfiler> {
        self.persistence.pg().map(|h| h.profiler.clone())
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
        // Created or updated as the table stood before this transaction: on
        // a shared store the provisioning feed may put this batch's
        // profiles into the table between the commit and the loop below.
        let existed: Vec<bool> = subscribers
            .iter()
            .map(|s| self.subscribers.table().get(&s.imsi).is_some())
            .collect();
        if !subscribers.is_empty() {
            let changes = subscribers
                .iter()
                .map(|s| Change::PutSubscriber(s.clone()))
                .collect();
            self.persistence
                .store()
                .submit(changes)
                .await
                .map_err(|e| ControlError::Unavailable(e.to_string()))?;
        }
        let mut outcome = crate::control::BatchOutcome::default();
        for (s, existed) in subscribers.into_iter().zip(existed) {
            self.subscribers.table().put(s);
            if existed {
                outcome.updated += 1;
            } else {
                outcome.created += 1;
            }
        }
        Ok(outcome)
    }
}
