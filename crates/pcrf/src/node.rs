//! The running PCRF node: what every application's service shares (the
//! configuration in force, the subscriber, session and usage tables, the
//! policy engine, the store writer, the Diameter peers, the metrics) and the
//! steps they all take (find the subscriber, build the policy input, check
//! a decision against the rule catalog, commit changes). Each application
//! keeps its own state in its folder (`gx/state.rs`, `rx/state.rs`, ...)
//! and its flows in its `service.rs`; the REST operations are carried out
//! in `control/operations.rs`.

pub use crate::gx::state::UsageCounters;

use crate::admission::Admission;
use crate::config::Config;
use crate::control::usage::{AccumulatorView, ReportView, UsageChange, UsageView};
use crate::control::ControlError;
use crate::metrics::{
    peer_stats, write_peers, CommitStats, Exposition, HistogramSnapshot, Kind, Metrics,
    MetricsSource, PolicyStats as MetricsPolicyStats, SessionStats,
};
use crate::policy::decision::Decision;
use crate::policy::input::{NetworkInput, PolicyInput, SessionInput, SubscriberInput, TimeInput};
use crate::policy::PolicyEngine;
use crate::session::{GxSession, SessionTable};
use crate::session_message::Identity;
use crate::store::group_commit::GroupCommit;
use crate::store::group_commit::BATCH_SIZE_BOUNDS;
use crate::store::postgres::PostgresHandles;
use crate::store::{Change, StoreError};
use crate::subscriber::Subscriber;
use crate::subscriber::SubscriberTable;
use crate::usage::config::UsageConfig;
use crate::usage::table::UsageTable;
use crate::usage::SubscriberUsage;
use bytes::Bytes;
use diameter::codec::DiameterError;
use diameter::dict::{self, avp};
use diameter::doic::OverloadReporter;
use diameter::result_code;
use diameter::transport::PeerTable;
use parking_lot::RwLock;
use std::collections::{HashMap, HashSet};
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
    pub policy_fallbacks: AtomicU64,
    pub unknown_rule_names: AtomicU64,
    pub rule_failures_reported: AtomicU64,
    pub retransmissions: AtomicU64,
    pub store_failures: AtomicU64,
    pub writes_skipped: AtomicU64,
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

/// The PCRF node.
pub struct Node {
    pub(crate) live: arc_swap::ArcSwap<Live>,
    pub(crate) admission: Admission,
    pub(crate) me: Identity,
    pub(crate) subscribers: SubscriberTable,
    pub(crate) sessions: SessionTable,
    pub(crate) policy: Arc<PolicyEngine>,
    pub(crate) store: GroupCommit,
    pub(crate) peers: PeerTable,
    /// Congestion level by cell (ECGI, 14 lowercase hex digits).
    pub(crate) congestion: RwLock<HashMap<String, u32>>,
    pub(crate) tz: jiff::tz::TimeZone,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) counters: NodeCounters,
    /// The PostgreSQL store's profiler and connection state, when it is one.
    pub(crate) pg: Option<PostgresHandles>,
    /// Every subscriber's accumulators (the read path; the store has them too).
    pub(crate) usage: UsageTable,
    /// The usage file in force (replaced by a reload that passes its checks).
    pub(crate) usage_cfg: arc_swap::ArcSwap<UsageConfig>,
    pub(crate) usage_counters: UsageCounters,
    pub(crate) push_counters: crate::gx::state::PushCounters,
    /// This node, for the background pushes it starts.
    pub(crate) me_ref: std::sync::Weak<Node>,
    /// DOIC overload reports to the PCEFs that asked for them.
    pub(crate) overload: OverloadReporter,
    /// A report is out (checked without the reporter's lock per request).
    pub(crate) overload_reported: std::sync::atomic::AtomicBool,
    /// Rx counters and recently aborted AF sessions.
    pub(crate) rx: crate::rx::state::RxState,
    /// Sd: which Gx session holds each TDF session (sd/state.rs).
    pub(crate) sd: crate::sd::state::SdState,
    /// Sy: the subscribers' Sy sessions and the OCS connections.
    pub(crate) sy: crate::sy::state::SyPart,
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

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What one Gx request produced: the answer and its result for metrics.
pub(crate) struct Answered {
    pub(crate) bytes: Bytes,
    pub(crate) code: u32,
}

impl Node {
    /// Assembles a node from what start-up loaded.
    pub fn new(p: NodeParts) -> Arc<Node> {
        let sub_table = SubscriberTable::default();
        for s in p.subscribers {
            sub_table.put(Arc::new(s));
        }
        let session_table = SessionTable::default();
        let sd = crate::sd::state::SdState::from_sessions(&p.sessions);
        let sy_part = crate::sy::state::SyPart::recover(&p.sessions);
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

    pub(crate) fn note_fallback(&self, session: &str, out: &crate::policy::Outcome) {
        if let Some(err) = &out.error {
            self.counters.policy_fallbacks.fetch_add(1, Relaxed);
            tracing::error!(session, error = %err, "policy failed; fallback decision applied");
        }
    }

    /// Drops rule names the PCEFs do not know (when a catalog is configured).
    pub(crate) fn check_catalog(&self, session: &str, mut d: Decision) -> Decision {
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

    pub(crate) fn policy_input(&self, s: &GxSession, sub: Option<&Subscriber>) -> PolicyInput {
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
    pub(crate) fn usage_of(&self, profile: &Subscriber, now: i64) -> UsageView {
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
    pub(crate) async fn change_usage(
        &self,
        imsi: &str,
        reason: crate::gx::state::PushReason,
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

/// An enumerated value's dictionary name, or the number.
fn enum_name(code: diameter::AvpCode, v: i32) -> String {
    dict::avp(code.code, code.vendor)
        .and_then(|d| d.enum_name(i64::from(v)))
        .map_or_else(|| v.to_string(), str::to_owned)
}

/// The ECGI (cell) of a 3GPP-User-Location-Info given as hex: type 130
/// (TAI+ECGI: 5 bytes TAI then 7 bytes ECGI) or 129 (ECGI only) (TS 29.061 §16.4.7.2).
pub(crate) fn ecgi_of_location(hex: &str) -> Option<String> {
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
    fn enum_names_come_from_the_dictionary() {
        assert_eq!(enum_name(avp::RAT_TYPE, 1004), "EUTRAN");
        assert_eq!(enum_name(avp::RAT_TYPE, 424242), "424242");
    }
}
