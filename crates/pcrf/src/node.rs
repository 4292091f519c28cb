//! The running PCRF node: what every application's service shares (the
//! configuration in force, the subscriber, session and usage tables, the
//! policy engine, the store writer, the Diameter peers, the metrics) and the
//! steps they all take (find the subscriber, build the policy input, check
//! a decision against the rule catalog, commit changes). Each application
//! keeps its own state in its folder (`gx/state.rs`, `rx/state.rs`, ...)
//! and its flows in its `service.rs`; the REST operations are carried out
//! in `control/operations.rs`.

pub(crate) mod doic;
pub(crate) mod events;
mod monitoring;
pub(crate) mod ownership;
mod persistence;
mod policy_runner;
mod signalling;
pub(crate) mod takeover;
pub(crate) mod takeover_by;

pub(crate) use crate::usage::step::{billing_day, UsageStep};
pub use crate::usage::table::UsageCounters;
pub use persistence::Persistence;
pub use policy_runner::PolicyRunner;
pub use signalling::{BoxFuture, GxSignalling, Signalling, SmfSignalling};
use std::fmt::Write as _;
use std::sync::Weak;

use crate::admission::Admission;
use crate::config::Config;
use crate::limits::{LOGGED_ITEMS_PER_REQUEST, MAX_RULE_REPORTS_PER_REQUEST};
use crate::metrics::{
    peer_stats, write_peers, CommitStats, Exposition, HistogramSnapshot, Kind, Metrics,
    MetricsSource, PolicyStats as MetricsPolicyStats, SessionStats,
};
use crate::pcc::operation::{ControlError, ReauthOutcome};
use crate::pcc::{PushReason, PushSummary, UsageInstructions};
use crate::policy::decision::Decision;
use crate::policy::input::{
    NetworkInput, PolicyInput, SessionContext, SessionInput, SubscriberInput, TimeInput,
};
use crate::policy::shared_decision::CheckedUnder;
use crate::policy::PolicyEngine;
use crate::session::{GxSession, RuleDiff, SessionTable};
use crate::session_message::Identity;
use crate::store::group_commit::{APPLY_MICROS_BOUNDS, BATCH_SIZE_BOUNDS};
use crate::store::postgres::PostgresHandles;
use crate::store::ShardedWriter;
use crate::store::{Change, StoreError};
use crate::subscriber::Subscriber;
use crate::subscriber::SubscriberTable;
use crate::usage::config::UsageConfig;
use crate::usage::table::UsageTable;
use crate::usage::SubscriberUsage;
use bytes::{Bytes, BytesMut};
use diameter::codec::{DiameterError, Message};
use diameter::dict::{self, avp};
use diameter::result_code;
use diameter::transport::PeerTable;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// DIAMETER_USER_UNKNOWN: a Result-Code of RFC 4006 (§9.1) that TS 29.212
/// (§5.5) uses in a CCA-I for a subscriber the PCRF does not know.
pub const USER_UNKNOWN: u32 = 5030;

/// How long a request waits for the store (or for a subscriber's usage
/// held by another request) before it is answered 5012.
pub(crate) const COMMIT_WAIT: Duration = Duration::from_secs(5);

/// Counters of the node's own decisions, rendered into /metrics.
#[derive(Default)]
pub struct NodeCounters {
    /// Sessions read from the store on a miss and served here from then
    /// on (taken over from another node of a shared store).
    pub taken_over: AtomicU64,
    pub policy_fallbacks: AtomicU64,
    pub unknown_rule_names: AtomicU64,
    pub rule_failures_reported: AtomicU64,
    /// Rule reports past the per-request cap (answered, not applied).
    pub rule_reports_over_cap: AtomicU64,
    /// Rule failures a session dropped (oldest first) to stay in its cap.
    pub rule_failures_forgotten: AtomicU64,
    pub retransmissions: AtomicU64,
    pub store_failures: AtomicU64,
    pub writes_skipped: AtomicU64,
    /// Answers refused for exceeding `[diameter].max_message_bytes`.
    pub answers_too_large: AtomicU64,
    /// Requests on a session from a peer that is neither its peer nor a
    /// fail-over partner of it (answered 5002, see `ownership.rs`).
    pub foreign_session_requests: AtomicU64,
}

/// The parts of the configuration that change without a restart.
pub(crate) struct Live {
    pub(crate) cfg: Arc<Config>,
    pub(crate) catalog_rules: HashSet<String>,
    pub(crate) catalog_bases: HashSet<String>,
}

impl Live {
    pub(crate) fn of(cfg: Arc<Config>) -> Live {
        Live {
            catalog_rules: cfg.rules.predefined.iter().cloned().collect(),
            catalog_bases: cfg.rules.base_names.iter().cloned().collect(),
            cfg,
        }
    }
}

/// The PCRF node: the configuration in force, the three tables the
/// requests work on, and the capabilities they are carried out with.
/// Every field is private: the applications and the REST operations reach
/// each part through its accessor and act on it through its own methods.
pub struct Node {
    live: arc_swap::ArcSwap<Live>,
    sessions: SessionTable,
    subscribers: SubscriberTable,
    /// Every subscriber's accumulators (the read path; the store has them
    /// too), the usage file in force and the usage counters.
    usage: UsageTable,
    policy: PolicyRunner,
    signalling: Signalling,
    persistence: Persistence,
    telemetry: Telemetry,
}

/// The metrics registry and the node's own counters.
pub struct Telemetry {
    metrics: Arc<Metrics>,
    counters: NodeCounters,
}

/// What start-up hands to the node.
pub struct NodeParts {
    pub cfg: Arc<Config>,
    /// The policy's versions and the engine serving one of them.
    pub policy: Arc<crate::policy::PolicyVersions>,
    pub store: ShardedWriter,
    pub subscribers: Vec<Subscriber>,
    pub sessions: Vec<GxSession>,
    pub usage: Vec<SubscriberUsage>,
    pub usage_cfg: UsageConfig,
    /// The usage file's versions; `usage_cfg` is the one in force
    /// (`UsageVersions::start` returns both).
    pub usage_versions: Arc<crate::usage::versions::UsageVersions>,
    pub peers: PeerTable,
    pub metrics: Arc<Metrics>,
    pub tz: jiff::tz::TimeZone,
    pub pg: Option<PostgresHandles>,
    /// The notification outbox (`Outbox::disabled()` for none).
    pub notify: Arc<crate::notify::Outbox>,
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What one Gx request produced: the answer and its result for metrics.
pub(crate) struct Answered {
    pub(crate) bytes: Bytes,
    pub(crate) code: u32,
    /// The stored policy version that decided it, when the policy did
    /// (its latency and errors are counted by version too).
    pub(crate) decided_by: Option<u64>,
}

impl Node {
    /// Assembles a node from what start-up loaded.
    pub fn new(p: NodeParts) -> Arc<Node> {
        let sub_table = SubscriberTable::default();
        for s in p.subscribers {
            sub_table.put(Arc::new(s));
        }
        let session_table = SessionTable::default();
        for s in p.sessions {
            session_table.replace(Arc::new(s));
        }
        let usage = UsageTable::new(p.store.is_shared(), p.usage_cfg);
        for u in p.usage {
            usage.recover(u);
        }
        let cfg = p.cfg;
        let membership = Arc::new(crate::cluster::membership::Membership::new(
            cfg.node.origin_host.clone(),
            now_ms(),
            cfg.store.kind == crate::store::config::StoreKind::Postgres,
            cfg.cluster.node_timeout_ms,
        ));
        let decision_log = crate::notify::decision_log::DecisionLog::start(&cfg.decision_log);
        Arc::new(Node {
            signalling: Signalling::new(
                Identity {
                    origin_host: cfg.node.origin_host.clone(),
                    origin_realm: cfg.node.origin_realm.clone(),
                },
                p.peers,
                Admission::new(
                    cfg.diameter.max_pending_requests,
                    cfg.overload.target(),
                    cfg.overload.interval(),
                ),
            ),
            live: arc_swap::ArcSwap::from_pointee(Live::of(cfg)),
            subscribers: sub_table,
            sessions: session_table,
            policy: PolicyRunner::new(p.policy, p.usage_versions, p.tz, decision_log),
            persistence: Persistence::new(p.store, p.pg, p.notify, membership),
            usage,
            telemetry: Telemetry {
                metrics: p.metrics,
                counters: NodeCounters::default(),
            },
        })
    }

    /// Names the Gx service: it re-decides sessions for Sd and Sy and
    /// sends the RARs the node composes.
    pub fn set_gx(&self, gx: Weak<dyn GxSignalling>) {
        self.signalling.set_gx(gx);
    }

    /// The Gx service, while it runs.
    pub(crate) fn gx_service(&self) -> Option<Arc<dyn GxSignalling>> {
        self.signalling.gx()
    }

    /// Names the N7 service: it pushes to the SMFs of N7 sessions.
    pub fn set_smf(&self, smf: Weak<dyn SmfSignalling>) {
        self.signalling.set_smf(smf);
    }

    /// The configuration in force, with its rule catalog.
    pub(crate) fn live(&self) -> arc_swap::Guard<Arc<Live>> {
        self.live.load()
    }

    pub fn sessions(&self) -> &SessionTable {
        &self.sessions
    }

    pub(crate) fn subscribers(&self) -> &SubscriberTable {
        &self.subscribers
    }

    pub(crate) fn usage(&self) -> &UsageTable {
        &self.usage
    }

    /// The policy's and the usage file's versions, the time zone, the
    /// congestion by cell, the decision log.
    pub fn policy_runner(&self) -> &PolicyRunner {
        &self.policy
    }

    /// The identity, the peers, admission, DOIC and the Gx service.
    pub(crate) fn signalling(&self) -> &Signalling {
        &self.signalling
    }

    /// This node's Origin-Host and Origin-Realm.
    pub(crate) fn me(&self) -> &Identity {
        self.signalling.me()
    }

    /// The store writer, the PostgreSQL handles, the outbox, the membership.
    pub fn persistence(&self) -> &Persistence {
        &self.persistence
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.telemetry.metrics
    }

    pub fn counters(&self) -> &NodeCounters {
        &self.telemetry.counters
    }

    /// The versions this node serves of the policy and the usage file
    /// (its heartbeat, `GET /v1/cluster`).
    pub(crate) fn serving(&self) -> crate::cluster::membership::Serving {
        let (policy, usage) = (self.policy.policy_versions(), self.policy.usage_versions());
        crate::cluster::membership::Serving {
            policy_version: policy.serving(),
            policy_refused: policy.refused(),
            usage_version: usage.serving(),
            usage_refused: usage.refused(),
        }
    }

    /// The nodes sharing the store, this one as it is now.
    pub(crate) fn cluster_view(&self) -> crate::cluster::membership::ClusterView {
        self.persistence
            .membership()
            .view(self.sessions.len() as u64, self.serving())
    }

    /// The policy engine: the script serving, its rollout, its counters.
    pub fn policy(&self) -> &Arc<PolicyEngine> {
        self.policy.engine()
    }

    /// The store writer.
    pub fn store(&self) -> &ShardedWriter {
        self.persistence.writer()
    }

    pub(crate) fn find_subscriber(
        &self,
        imsi: Option<&str>,
        msisdn: Option<&str>,
    ) -> Option<Arc<Subscriber>> {
        imsi.and_then(|i| self.subscribers.get(i))
            .or_else(|| msisdn.and_then(|m| self.subscribers.by_msisdn(m)))
    }

    /// Persists changes; the caller answers only after this returns Ok.
    pub(crate) async fn commit(&self, changes: Vec<Change>) -> Result<(), DiameterError> {
        let res = tokio::time::timeout(COMMIT_WAIT, self.store().submit(changes)).await;
        let err = match res {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e @ StoreError::Conflict(_))) => {
                // Nothing was written: the copies were stale. Dropped
                // here, read again when the request is handled again.
                tracing::info!(error = %e, "state written by another node; handling the request again");
                self.forget_conflicted(&e);
                return Err(Node::conflict_error());
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "store did not commit in time".to_string(),
        };
        self.telemetry.counters.store_failures.fetch_add(1, Relaxed);
        tracing::error!(error = %err, "state change not committed; answering DIAMETER_UNABLE_TO_COMPLY");
        Err(DiameterError::new(
            result_code::DIAMETER_UNABLE_TO_COMPLY,
            "state could not be stored",
        ))
    }

    pub(crate) fn note_fallback(&self, session: &str, out: &crate::policy::Outcome) {
        if let Some(err) = &out.error {
            self.telemetry
                .counters
                .policy_fallbacks
                .fetch_add(1, Relaxed);
            tracing::error!(session, error = %err, "policy failed; fallback decision applied");
        }
    }

    /// Drops rule names the PCEFs do not know (when a catalog is configured).
    pub(crate) fn check_catalog(&self, session: &str, mut d: Decision) -> Decision {
        let live = self.live.load();
        if !live.catalog_rules.is_empty() {
            d.rules.retain(|r| {
                let ok = live.catalog_rules.contains(r);
                if !ok {
                    self.telemetry.counters.unknown_rule_names.fetch_add(1, Relaxed);
                    tracing::warn!(session, rule = %r, "policy named a predefined rule not in [rules].predefined; dropped");
                }
                ok
            });
        }
        if !live.catalog_bases.is_empty() {
            d.base_names.retain(|r| {
                let ok = live.catalog_bases.contains(r);
                if !ok {
                    self.telemetry.counters.unknown_rule_names.fetch_add(1, Relaxed);
                    tracing::warn!(session, base = %r, "policy named a rule base not in [rules].base_names; dropped");
                }
                ok
            });
        }
        d
    }

    /// The configuration the node's decision checks read: the rule
    /// catalog, and the usage file when the Monitoring-Keys are checked.
    pub(crate) fn checked_under(&self, with_usage: bool) -> CheckedUnder {
        let catalog: Arc<dyn std::any::Any + Send + Sync> = self.live.load_full();
        let usage = with_usage.then(|| {
            let usage: Arc<dyn std::any::Any + Send + Sync> = self.usage.config_full();
            usage
        });
        CheckedUnder([Some(catalog), usage])
    }

    /// What the policy decides `s` on at `now` (Unix ms).
    pub(crate) fn policy_input(
        &self,
        s: &GxSession,
        sub: Option<&Subscriber>,
        spending: BTreeMap<String, String>,
        now: i64,
    ) -> PolicyInput {
        let subscriber = match sub {
            Some(p) => SubscriberInput::from_profile(p),
            None => SubscriberInput {
                known: false,
                imsi: s.imsi.as_deref().map(str::to_owned),
                msisdn: s.msisdn.as_deref().map(str::to_owned),
                ..Default::default()
            },
        };
        let d = &s.installed;
        let mut installed =
            Vec::with_capacity(d.rules.len() + d.base_names.len() + d.definitions.len());
        installed.extend(d.rules.iter().cloned());
        installed.extend(d.base_names.iter().cloned());
        installed.extend(d.definitions.iter().map(|d| d.name.clone()));
        installed.sort();
        let congestion = s
            .location
            .as_deref()
            .and_then(ecgi_of_location)
            .map_or(0, |cell| self.policy.congestion_at(cell));
        let session = match &s.n7 {
            // A 5G PDU session: what the SMF said, as N7 names it.
            Some(ctx) => {
                let mut session = ctx.session_input();
                session.installed = installed;
                session.rule_failures = s.rule_failures.clone();
                session
            }
            None => SessionInput {
                apn: s.apn.clone(),
                rat: s.rat_type.map(|v| enum_name(avp::RAT_TYPE, v)),
                ip_can_type: s.ip_can_type.map(|v| enum_name(avp::IP_CAN_TYPE, v)),
                ue_ipv4: s.ue_ipv4.map(|ip| {
                    // At most 15 characters: one allocation, not a growing one.
                    let mut text = String::with_capacity(15);
                    let _ = write!(text, "{ip}");
                    text
                }),
                ue_ipv6_prefix: s.ue_ipv6_prefix.clone(),
                location: s.location.clone(),
                ms_timezone: s.ms_timezone.clone(),
                device: s.device.clone(),
                pcef: s.pcef_host.clone(),
                installed,
                rule_failures: s.rule_failures.clone(),
                n7: None,
            },
        };
        PolicyInput {
            subscriber,
            session,
            time: TimeInput::at_ms(now, self.policy.tz()),
            network: NetworkInput { congestion },
            usage: Default::default(),
            applications: s.tdf.as_ref().map(|t| t.applications()).unwrap_or_default(),
            spending,
        }
    }

    /// Records rule failures and forgets failed rules as installed (the
    /// PCEF does not have them); the policy sees the failures next. The
    /// reports past the per-request cap and the failures past the
    /// per-session cap are counted, not kept; the first few failures are
    /// logged one by one, the rest summed up in one line.
    pub(crate) fn apply_rule_reports(
        &self,
        s: &mut GxSession,
        reports: &crate::pcc::reauth_answer::RuleReports,
    ) {
        let applied = crate::session::rule_failures::apply(s, reports);
        let c = &self.telemetry.counters;
        c.rule_failures_reported
            .fetch_add(applied.failures as u64, Relaxed);
        c.rule_reports_over_cap.fetch_add(reports.over_cap, Relaxed);
        c.rule_failures_forgotten
            .fetch_add(applied.forgotten as u64, Relaxed);
        let failed = reports.iter().filter(|r| r.status != 0);
        for r in failed.take(LOGGED_ITEMS_PER_REQUEST) {
            tracing::warn!(session = %s.id, rule = %r.rule, status = r.status, code = ?r.code, "PCEF reported a rule failure");
        }
        if applied.failures > LOGGED_ITEMS_PER_REQUEST || reports.over_cap > 0 {
            tracing::warn!(
                session = %s.id,
                reports = reports.received(),
                failures = applied.failures,
                over_cap = reports.over_cap,
                forgotten = applied.forgotten,
                "{} rule reports, {} over the cap of {} per request; {} failures, {} not logged one by one, {} older ones forgotten",
                reports.received(),
                reports.over_cap,
                MAX_RULE_REPORTS_PER_REQUEST,
                applied.failures,
                applied.failures.saturating_sub(LOGGED_ITEMS_PER_REQUEST),
                applied.forgotten,
            );
        }
    }

    /// Pushes to the session's enforcement point and returns its answer
    /// as an RAA says it: a Gx RAR to the PCEF, or, for an N7 session, a
    /// notification to the SMF (through [`SmfSignalling`]). `diff` is what changed
    /// (what a RAR carries), `after` the whole decision it leads to (what
    /// an SMF's difference is computed against), `release` ends the
    /// session with that Session-Release-Cause.
    pub(crate) async fn send_push(
        &self,
        s: &GxSession,
        diff: Option<&RuleDiff<'_>>,
        after: Option<&Decision>,
        release: Option<i32>,
        usage: &UsageInstructions,
    ) -> Result<crate::pcc::reauth_answer::Raa, ControlError> {
        if s.n7.is_some() {
            let Some(smf) = self.signalling.smf() else {
                return Err(ControlError::Unavailable(
                    "the N7 service is not running".into(),
                ));
            };
            return smf
                .push(s, after.unwrap_or(&s.installed), release, usage)
                .await;
        }
        let Some(gx) = self.gx_service() else {
            return Err(ControlError::Unavailable(
                "the Gx service is not running".into(),
            ));
        };
        let answer = gx.rar(s, diff, release, usage).await?;
        crate::pcc::reauth_answer::decode_raa(&answer)
            .map_err(|e| ControlError::Peer(format!("bad RAA: {e}")))
    }

    /// Removes the PCF binding the N7 session `s` holds at the BSF (see
    /// `n7::bsf_binding`), waiting for the BSF: called before the commit
    /// that closes the session, so that a crash between the two leaves the
    /// session open rather than a binding behind. True when the session
    /// holds no binding any more (none, removed, or the BSF has none).
    pub(crate) async fn unbind_at_bsf(&self, s: &GxSession) -> bool {
        let Some(id) = s.bsf_binding.as_deref() else {
            return true;
        };
        let live = self.live.load();
        let Some(bsf) = live.cfg.sbi.as_ref().and_then(|s| s.bsf()) else {
            return false;
        };
        match bsf.deregister(id).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(binding = %id, session = %s.id, error = %e, "PCF binding not removed at the BSF; its id stays in the closed record");
                false
            }
        }
    }

    /// Where the SBI's resources are reached: under the API prefix
    /// registered with the NRF, or else the SBI listener's own address.
    pub(crate) fn sbi_root(&self) -> String {
        let live = self.live.load();
        match &live.cfg.sbi {
            Some(sbi) => match &sbi.nrf {
                Some(nrf) => nrf.api_prefix.trim_end_matches('/').to_owned(),
                None => {
                    let scheme = if sbi.tls.is_some() { "https" } else { "http" };
                    format!("{scheme}://{}", sbi.listen)
                }
            },
            None => String::new(),
        }
    }

    /// Re-decides one session through the Gx service and pushes the
    /// difference to its PCEF (see [`GxSignalling`]).
    pub(crate) async fn push(
        &self,
        id: &str,
        ask_report: bool,
    ) -> Result<ReauthOutcome, ControlError> {
        match self.gx_service() {
            Some(gx) => gx.session(id, ask_report).await,
            None => Err(ControlError::Unavailable(
                "the Gx service is not running".into(),
            )),
        }
    }

    /// Re-decides every open session of a subscriber through the Gx service.
    pub(crate) async fn push_subscriber(&self, key: &str, reason: PushReason) -> PushSummary {
        match self.gx_service() {
            Some(gx) => gx.subscriber(key, reason).await,
            None => PushSummary::default(),
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
            || old.diameter.max_connections_awaiting_cer
                != new.diameter.max_connections_awaiting_cer
            || old.diameter.cer_timeout_secs != new.diameter.cer_timeout_secs
            || old.diameter.max_message_bytes_awaiting_cer
                != new.diameter.max_message_bytes_awaiting_cer
            || old.diameter.max_buffered_bytes_awaiting_cer
                != new.diameter.max_buffered_bytes_awaiting_cer
            || old.diameter.tls != new.diameter.tls
        {
            restart.push("[diameter]");
        }
        if old.overload != new.overload {
            restart.push("[overload]");
        }
        // The transport reads these once, at start (relays included).
        let peers = |c: &Config| -> Vec<(String, Vec<std::net::IpAddr>, bool, bool)> {
            c.peers
                .iter()
                .map(|p| (p.origin_host.clone(), p.addresses.clone(), p.tls, p.relay))
                .collect()
        };
        if peers(&old) != peers(&new) {
            restart.push("[[peers]]");
        }
        if old.store != new.store {
            restart.push("[store]");
        }
        if old.usage.path != new.usage.path {
            restart.push("[usage].path");
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
        // The outbox and its sinks are built once, at start.
        if old.notifications.sinks != new.notifications.sinks
            || old.notifications.max_backlog != new.notifications.max_backlog
        {
            restart.push("[notifications] (except quota_thresholds)");
        }
        self.live.store(Arc::new(Live::of(Arc::new(new))));
        restart
    }

    /// Removes closed sessions older than the retention, from memory and store.
    pub async fn purge_closed(&self) -> Result<usize, StoreError> {
        let before = now_ms() - (self.live.load().cfg.sessions.retention_secs as i64) * 1000;
        let ids = self.sessions.closed_before(before);
        for id in &ids {
            self.sessions.remove(id);
        }
        self.store().purge_closed(before).await
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

/// A usage file version is checked against this node's open sessions'
/// grants and put in force in its usage table.
impl crate::usage::versions::UsageHost for Node {
    fn in_force(&self) -> Arc<UsageConfig> {
        self.usage.config_full()
    }

    fn granted_keys(&self) -> std::collections::BTreeMap<String, usize> {
        Node::granted_keys(self)
    }

    fn put_in_force(&self, config: UsageConfig) {
        if config.checksum() != self.usage.config().checksum() {
            tracing::info!(checksum = %config.checksum_hex(), "usage file in force");
        }
        self.usage.set_config(config);
    }
}

/// The accumulators to write with a request, when they changed.
pub(crate) fn usage_change(usage: &Option<UsageStep>) -> Option<Change> {
    usage
        .as_ref()
        .filter(|u| u.changed())
        .map(|u| Change::PutUsage(u.next.clone()))
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
        decided_by: None,
        bytes: b.freeze(),
        code,
    }
}

/// An enumerated value's dictionary name, or the number.
fn enum_name(code: diameter::AvpCode, v: i32) -> std::borrow::Cow<'static, str> {
    dict::avp(code.code, code.vendor)
        .and_then(|d| d.enum_name(i64::from(v)))
        .map_or_else(|| v.to_string().into(), std::borrow::Cow::Borrowed)
}

/// The ECGI (cell) of a 3GPP-User-Location-Info given as hex: type 130
/// (TAI+ECGI: 5 bytes TAI then 7 bytes ECGI) or 129 (ECGI only) (TS 29.061 §16.4.7.2).
pub(crate) fn ecgi_of_location(hex: &str) -> Option<&str> {
    let ty = u8::from_str_radix(hex.get(0..2)?, 16).ok()?;
    match ty {
        130 => hex.get(12..26),
        129 => hex.get(2..16),
        _ => None,
    }
}

impl Node {
    fn write_store_metrics(&self, out: &mut Exposition) {
        let g = self.store().stats();
        let Some(batch_sizes) = HistogramSnapshot::from_cumulative(
            &BATCH_SIZE_BOUNDS,
            0,
            &g.batch_size_le,
            g.batches,
            g.requests,
        ) else {
            return;
        };
        let Some(apply_times) = HistogramSnapshot::from_cumulative(
            &APPLY_MICROS_BOUNDS,
            6,
            &g.apply_micros_le,
            g.applies,
            g.apply_micros,
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
            apply_times,
        }
        .write(out);
    }
}

impl MetricsSource for Node {
    fn write(&self, out: &mut Exposition) {
        self.session_stats().write(out);
        let p = self.policy().stats();
        MetricsPolicyStats {
            runs: p.runs,
            skips: p.skips,
            skips_within_bounds: p.skips_within_bounds,
            errors: p.errors,
            reloads_ok: p.reloads,
            reloads_failed: p.reload_failures,
            script_version: p.script_version,
            log_dropped: p.log_dropped,
        }
        .write(out);
        self.write_store_metrics(out);
        self.policy.decision_log().write_metrics(out);
        let configured: Vec<String> = self
            .live
            .load()
            .cfg
            .peers
            .iter()
            .map(|p| p.origin_host.clone())
            .collect();
        let mut peers = peer_stats(self.signalling.peers(), &configured);
        for p in &mut peers {
            p.doic_supported = self.signalling.doic().speaks(&p.host);
        }
        write_peers(out, &peers, self.signalling.doic().reporter().current());
        out.counter(
            "pcrf_diameter_closed_awaiting_cer_total",
            "Diameter connections closed before CER because [diameter].max_connections_awaiting_cer were already waiting.",
            self.signalling.peers().closed_awaiting_cer(),
        );
        out.gauge(
            "pcrf_diameter_connections_awaiting_cer",
            "Diameter connections accepted and not yet past CER.",
            self.signalling.peers().awaiting_cer(),
        );
        out.gauge(
            "pcrf_diameter_buffered_bytes_awaiting_cer",
            "Bytes that Diameter connections awaiting CER hold in partly received messages, together (at most [diameter].max_buffered_bytes_awaiting_cer).",
            self.signalling.peers().buffered_awaiting_cer(),
        );
        let mut errors = out.family(
            "pcrf_diameter_errors_awaiting_cer_total",
            "Diameter connections closed for a protocol error before their capabilities exchange, by kind: framing (bad version or length), too_long (over [diameter].max_message_bytes_awaiting_cer), buffer_budget (over [diameter].max_buffered_bytes_awaiting_cer), undecodable, tls_handshake.",
            Kind::Counter,
        );
        for (kind, n) in self.signalling.peers().errors_awaiting_cer() {
            errors.sample(&[("kind", kind.name())], n);
        }
        let c = &self.telemetry.counters;
        let shed = self.signalling.admission().shed();
        out.family(
            "pcrf_overload_shed_total",
            "Gx and Sd requests answered DIAMETER_TOO_BUSY: cause queue_delay in sustained overload ([overload]), in_flight_cap at [diameter].max_pending_requests (new = CCR-I, shed first).",
            Kind::Counter,
        )
        .sample(&[("class", "new"), ("cause", "queue_delay")], shed.new_delay)
        .sample(&[("class", "existing"), ("cause", "queue_delay")], shed.existing_delay)
        .sample(&[("class", "new"), ("cause", "in_flight_cap")], shed.new_cap)
        .sample(&[("class", "existing"), ("cause", "in_flight_cap")], shed.existing_cap);
        out.gauge(
            "pcrf_gx_in_flight",
            "Gx and Sd requests being worked on now.",
            self.signalling.admission().in_flight(),
        );
        out.gauge(
            "pcrf_overload_active",
            "1 while the node is in sustained overload (queueing delay above [overload].target_delay_ms for a whole interval) or has half of [diameter].max_pending_requests in flight, else 0.",
            self.signalling.admission().overloaded(),
        );
        out.gauge(
            "pcrf_queue_delay_min_seconds",
            "The smallest queueing delay (read to handler start) of the current [overload] interval so far.",
            self.signalling.admission().interval_min_delay().map_or(0.0, |d| d.as_secs_f64()),
        );
        let u = &self.usage.counters;
        let counters: [(&str, &str, &AtomicU64); 16] = [
            ("pcrf_policy_fallbacks_total", "Decisions that fell back to [policy].fallback because the script failed or returned a value out of range.", &c.policy_fallbacks),
            ("pcrf_answers_too_large_total", "Answers over [diameter].max_message_bytes, replaced by DIAMETER_UNABLE_TO_COMPLY (5012).", &c.answers_too_large),
            ("pcrf_unknown_rule_names_total", "Rule or base names a decision named that the [rules] catalog does not list (dropped).", &c.unknown_rule_names),
            ("pcrf_rule_failures_reported_total", "Rules the PCEFs reported as failed (Charging-Rule-Report).", &c.rule_failures_reported),
            ("pcrf_rule_reports_over_cap_total", "Charging-Rule-Report entries past the cap of one request (or naming a rule longer than a rule name may be): answered, not applied.", &c.rule_reports_over_cap),
            ("pcrf_rule_failures_forgotten_total", "Rule failures a session dropped, oldest first, to keep at most its cap for the policy.", &c.rule_failures_forgotten),
            ("pcrf_retransmissions_total", "Retransmitted CCRs answered again without being applied twice.", &c.retransmissions),
            ("pcrf_foreign_session_requests_total", "Gx, Sd or Rx requests on a session from a peer that is neither the session's peer nor in its [[peers]] failover_group: answered 5002, nothing applied.", &c.foreign_session_requests),
            ("pcrf_store_failures_total", "Requests answered 5012 because their state change could not be committed.", &c.store_failures),
            ("pcrf_writes_skipped_total", "CCR-U whose session changed nothing durable: no write.", &c.writes_skipped),
            ("pcrf_usage_reports_total", "Usage reports (Used-Service-Unit per Monitoring-Key) counted, each once.", &u.reports),
            ("pcrf_usage_reported_octets_total", "Octets in those reports.", &u.octets),
            ("pcrf_usage_unknown_key_reports_total", "Reports for Monitoring-Keys the usage file does not define (counted in no accumulator).", &u.unknown_key_reports),
            ("pcrf_usage_unknown_key_reports_over_cap_total", "Of those, the reports past the cap one request shows to the policy (counted only).", &u.unknown_key_reports_over_cap),
            ("pcrf_usage_unknown_keys_decided_total", "Monitoring-Keys a decision named that the usage file does not define (ignored).", &u.unknown_keys_decided),
            ("pcrf_usage_grants_total", "Granted-Service-Unit sent (initial grants and re-grants).", &u.grants),
        ];
        for (name, help, value) in counters {
            out.counter(name, help, value.load(Relaxed));
        }
        out.gauge(
            "pcrf_usage_subscribers",
            "Subscribers with usage accumulators in memory.",
            self.usage.len() as u64,
        );
        out.counter(
            "pcrf_cluster_sessions_taken_over_total",
            "Sessions this node did not hold, read from the shared store on a request and served here from then on.",
            self.telemetry.counters.taken_over.load(Relaxed),
        );
        out.counter(
            "pcrf_cluster_conflicts_total",
            "Session or usage rows another node had written since this node read them: the request was handled again on a fresh copy.",
            self.store().stats().conflicts,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecgi_from_location() {
        // TAI+ECGI: type 130, TAI (MCC/MNC 3 bytes + TAC 2), ECGI (3 + 4).
        let loc = "82".to_string() + "00f110" + "0001" + "00f110" + "00000101";
        assert_eq!(ecgi_of_location(&loc), Some("00f11000000101"));
        assert_eq!(ecgi_of_location("8100f11000000101"), Some("00f11000000101"));
        assert_eq!(ecgi_of_location("01"), None);
        assert_eq!(ecgi_of_location("zz"), None);
    }

    #[test]
    fn enum_names_come_from_the_dictionary() {
        assert_eq!(enum_name(avp::RAT_TYPE, 1004), "EUTRAN");
        assert_eq!(enum_name(avp::RAT_TYPE, 424242), "424242");
    }
}
