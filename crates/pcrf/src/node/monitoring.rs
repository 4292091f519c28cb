//! Usage monitoring on the node: counting the reports of a CCR into the
//! subscriber's accumulators, giving the policy its view of them, and turning
//! the decision's Monitoring-Keys into grants and stops at the PCEF.
//!
//! A CCR that touches usage holds the subscriber's usage lock from reading
//! the accumulators until the commit that carries both the session (with its
//! answer, for replay) and the accumulators; only then are both published.
//! A retransmission is answered from the stored answer and never counted
//! again, before or after a restart.

use super::{UsageLedger, COMMIT_WAIT};
use crate::limits::{LOGGED_ITEMS_PER_REQUEST, MAX_UNKNOWN_KEY_REPORTS_PER_REQUEST};
use crate::pcc::{self, UsageGrant, UsageInstructions, UsageReport};
use crate::policy::decision::Decision;
use crate::policy::input::UsageInput;
use crate::session::GxSession;
use crate::subscriber::Subscriber;
use crate::usage::config::Interface;
use crate::usage::grant::{grant_for, policy_view};
use crate::usage::step::{billing_day, UsageStep};
use crate::usage::{KeyGrant, SubscriberUsage};
use diameter::codec::DiameterError;
use diameter::result_code;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Event-Trigger USAGE_REPORT (TS 29.212 §5.3.7): sent with any grant.
pub const USAGE_REPORT: u32 = 33;

impl UsageLedger {
    /// Starts the usage side of a request for `subscriber`: takes the lock
    /// (bounded: a request never waits forever for another) and rolls the
    /// accumulators whose period ended. `None` when monitoring is off.
    pub(crate) async fn begin_usage(
        &self,
        subscriber: &str,
        profile: Option<&Subscriber>,
        now: i64,
    ) -> Result<Option<UsageStep>, DiameterError> {
        let cfg = self.node.usage.config_full();
        if cfg.is_empty() {
            return Ok(None);
        }
        let slot = self.node.usage.slot(subscriber);
        let guard = tokio::time::timeout(COMMIT_WAIT, slot.lock())
            .await
            .map_err(|_| {
                tracing::error!(
                    subscriber,
                    "usage of this subscriber stayed locked too long; answering 5012"
                );
                DiameterError::new(
                    result_code::DIAMETER_UNABLE_TO_COMPLY,
                    "subscriber usage busy",
                )
            })?;
        self.read_usage_if_needed(&slot, subscriber).await?;
        let mut next = (*slot.load()).clone();
        let billing_day = billing_day(profile);
        next.roll(&cfg, billing_day, now);
        let next = Arc::new(next);
        Ok(Some(UsageStep {
            cfg,
            slot,
            guard,
            next,
            billing_day,
            reported: BTreeSet::new(),
            unknown: Vec::new(),
            unknown_reports: 0,
        }))
    }

    /// On a shared store, reads the subscriber's row into its slot when
    /// the slot does not hold it yet (first use, or after another node
    /// wrote it). Call with the slot's lock held.
    pub(crate) async fn read_usage_if_needed(
        &self,
        slot: &crate::usage::table::UsageSlot,
        subscriber: &str,
    ) -> Result<(), DiameterError> {
        if slot.loaded() {
            return Ok(());
        }
        let read = tokio::time::timeout(
            COMMIT_WAIT,
            self.node.persistence.writer.read_usage(subscriber),
        )
        .await;
        match read {
            Ok(Ok(stored)) => {
                slot.load_stored(stored);
                Ok(())
            }
            Ok(Err(e)) => {
                tracing::error!(subscriber, error = %e, "usage could not be read; answering 5012");
                Err(DiameterError::new(
                    result_code::DIAMETER_UNABLE_TO_COMPLY,
                    "subscriber usage unreadable",
                ))
            }
            Err(_) => {
                tracing::error!(subscriber, "usage not read in time; answering 5012");
                Err(DiameterError::new(
                    result_code::DIAMETER_UNABLE_TO_COMPLY,
                    "subscriber usage unreadable",
                ))
            }
        }
    }

    /// Counts a CCR's usage reports (each exactly once: the caller commits
    /// them with the session and its answer).
    pub(crate) fn count_reports(
        &self,
        step: &mut UsageStep,
        s: &mut GxSession,
        reports: &[UsageReport<'_>],
        now: i64,
    ) {
        for r in reports {
            let (key, octets) = self.count_report(step, Interface::Gx, &s.id, r, now);
            if let Some(g) = s.monitoring.keys.get_mut(key.as_str()) {
                g.reported_octets = g.reported_octets.saturating_add(octets);
            }
            step.reported.insert(key);
        }
        self.sum_up_unknown_keys(step, Interface::Gx, &s.id);
    }

    /// Counts one usage report from `interface` (for Gx session `gx_id`)
    /// into the accumulators its sources feed, and in the metrics; a key
    /// the usage file does not know is logged and kept in `step.unknown`.
    /// Returns the key as text and the octets reported.
    pub(crate) fn count_report(
        &self,
        step: &mut UsageStep,
        interface: Interface,
        gx_id: &str,
        r: &UsageReport<'_>,
        now: i64,
    ) -> (String, u64) {
        let key = pcc::key_text(r.key).into_owned();
        let octets = r.used.octets();
        let counted = Arc::make_mut(&mut step.next).count(
            &step.cfg,
            interface,
            &key,
            gx_id,
            &r.used,
            now,
            step.billing_day,
        );
        self.node.usage.counters.reports.fetch_add(1, Relaxed);
        self.node.usage.counters.octets.fetch_add(octets, Relaxed);
        if !counted.known_key {
            self.node
                .usage
                .counters
                .unknown_key_reports
                .fetch_add(1, Relaxed);
            if step.unknown_reports < LOGGED_ITEMS_PER_REQUEST {
                match interface {
                    Interface::Gx => {
                        tracing::warn!(session = %gx_id, key = %key, octets, "usage report for a Monitoring-Key the usage file does not know; counted nowhere")
                    }
                    Interface::Sd => {
                        tracing::warn!(session = %gx_id, key = %key, octets, "Sd usage report for a Monitoring-Key the usage file does not know; counted nowhere")
                    }
                }
            }
            if step.unknown.len() < MAX_UNKNOWN_KEY_REPORTS_PER_REQUEST {
                step.unknown.push(key.clone());
            } else {
                self.node
                    .usage
                    .counters
                    .unknown_key_reports_over_cap
                    .fetch_add(1, Relaxed);
            }
            step.unknown_reports += 1;
        }
        (key, octets)
    }

    /// One line for a request's usage reports for unknown Monitoring-Keys
    /// past those logged one by one, instead of a line each.
    pub(crate) fn sum_up_unknown_keys(&self, step: &UsageStep, interface: Interface, gx_id: &str) {
        let n = step.unknown_reports;
        if n <= LOGGED_ITEMS_PER_REQUEST {
            return;
        }
        let over_cap = n.saturating_sub(MAX_UNKNOWN_KEY_REPORTS_PER_REQUEST);
        tracing::warn!(
            session = %gx_id,
            interface = ?interface,
            reports = n,
            over_cap,
            "{n} usage reports for Monitoring-Keys the usage file does not know, {over_cap} over the cap of {MAX_UNKNOWN_KEY_REPORTS_PER_REQUEST} shown to the policy; {} not logged one by one",
            n - LOGGED_ITEMS_PER_REQUEST,
        );
    }

    /// The policy's usage input for a session when no request holds the
    /// lock (pushes): the committed accumulators, rolled to `now`.
    pub(crate) fn usage_view(
        &self,
        subscriber: &str,
        profile: Option<&Subscriber>,
        now: i64,
    ) -> UsageInput {
        let cfg = self.node.usage.config();
        if cfg.is_empty() {
            return UsageInput::default();
        }
        let mut u = (*self.node.usage.load(subscriber)).clone();
        u.roll(&cfg, billing_day(profile), now);
        policy_view(&cfg, &u, profile)
    }

    /// Keeps the decision's Monitoring-Keys that the usage file defines,
    /// each once (filtered in place: nothing is copied), and adds the
    /// USAGE_REPORT trigger while any is monitored. Depends on the decision
    /// and the usage file only.
    pub(crate) fn check_monitoring(&self, session: &str, decision: &mut Decision) {
        let cfg = self.node.usage.config();
        let mut i = 0;
        while let Some(k) = decision.monitoring.get(i) {
            let keep = if cfg.key(k).is_none() {
                self.node
                    .usage
                    .counters
                    .unknown_keys_decided
                    .fetch_add(1, Relaxed);
                tracing::warn!(session, key = %k, "policy asked to monitor a key the usage file does not define; ignored");
                false
            } else {
                !decision.monitoring[..i].contains(k)
            };
            if keep {
                i += 1;
            } else {
                decision.monitoring.remove(i);
            }
        }
        if !decision.monitoring.is_empty() && !decision.event_triggers.contains(&USAGE_REPORT) {
            decision.event_triggers.push(USAGE_REPORT);
        }
    }

    /// What the answer (or RAR) carries for the checked keys `wanted`: a
    /// grant for each key newly monitored or just reported, a stop for
    /// each key no longer wanted; the session's grants follow. `usage` is
    /// the subscriber's accumulators after counting.
    pub(crate) fn monitoring_grants(
        &self,
        usage: &SubscriberUsage,
        profile: Option<&Subscriber>,
        s: &mut GxSession,
        wanted: &[String],
        reported: &BTreeSet<String>,
        now: i64,
    ) -> UsageInstructions {
        let cfg = self.node.usage.config();
        let mut out = UsageInstructions::default();
        for k in wanted {
            let fresh = !s.monitoring.keys.contains_key(k.as_str());
            if !fresh && !reported.contains(k) {
                continue;
            }
            let Some((level, units)) = grant_for(&cfg, usage, profile, Interface::Gx, k, now)
            else {
                continue;
            };
            let reported_octets = s
                .monitoring
                .keys
                .get(k.as_str())
                .map_or(0, |g| g.reported_octets);
            let grant = KeyGrant {
                granted: units,
                level,
                granted_ms: now,
                reported_octets,
            };
            match s.monitoring.keys.get_mut(k.as_str()) {
                Some(held) => *held = grant,
                None => {
                    let key = crate::session::shared_text::shared(k);
                    crate::usage::lean_map::insert_lean(&mut s.monitoring.keys, key, grant);
                }
            }
            self.node.usage.counters.grants.fetch_add(1, Relaxed);
            out.grants.push(UsageGrant {
                key: k.clone(),
                level,
                units,
            });
        }
        let stopped: Vec<Arc<str>> = s
            .monitoring
            .keys
            .keys()
            .filter(|k| !wanted.iter().any(|w| *w.as_str() == ***k))
            .cloned()
            .collect();
        for k in stopped {
            s.monitoring.keys.remove(&*k);
            out.disable.push(k.to_string());
        }
        out
    }

    /// Publishes the accumulators a commit made durable.
    pub(crate) fn finish_usage(step: UsageStep) {
        let UsageStep {
            slot,
            next,
            guard: _guard,
            ..
        } = step;
        slot.publish(next);
    }

    /// Monitoring keys with running grants, and in how many open sessions
    /// (what a usage-file reload must not orphan).
    pub fn granted_keys(&self) -> std::collections::BTreeMap<String, usize> {
        let mut out = std::collections::BTreeMap::new();
        for s in self.node.sessions.list(
            None,
            |s| s.state == crate::session::SessionState::Open,
            usize::MAX,
        ) {
            for k in s.monitoring.keys.keys() {
                *out.entry(k.to_string()).or_insert(0) += 1;
            }
        }
        out
    }
}
