//! The node's notification events, made where their cause happens and
//! staged so that each is written in the commit of that cause: sessions
//! started and ended, quota thresholds crossed, the policy's own
//! `notify(name, payload)` (each deduplicated per subscriber and period, the
//! dedup state written in the same commit), profile changes and top-ups.

use super::state::Node;
use crate::notify::{names, Staged};
use crate::policy::Notification;
use crate::session::GxSession;
use crate::subscriber::Subscriber;
use crate::usage::step::UsageStep;
use serde_json::{json, Value};
use std::sync::Arc;

/// Staged events of one request; their writes go in its commit, and they
/// are handed to delivery once it committed.
#[derive(Default)]
pub(crate) struct StagedEvents(Vec<Staged>);

impl StagedEvents {
    pub(crate) fn push(&mut self, staged: Option<Staged>) {
        self.0.extend(staged);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The writes to add to the request's commit.
    pub(crate) fn changes(&self) -> impl Iterator<Item = crate::store::Change> + '_ {
        self.0.iter().filter_map(Staged::change)
    }

    /// After the commit: deliver them.
    pub(crate) fn publish(self) {
        for s in self.0 {
            s.publish();
        }
    }
}

/// The session's identity and place, common to the session events.
fn session_fields(s: &GxSession) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("session".into(), json!(s.id));
    if let Some(v) = &s.imsi {
        m.insert("imsi".into(), json!(v));
    }
    if let Some(v) = &s.msisdn {
        m.insert("msisdn".into(), json!(v));
    }
    if let Some(v) = &s.apn {
        m.insert("apn".into(), json!(v));
    }
    m.insert("pcef".into(), json!(s.pcef_host));
    if let Some(v) = s.ue_ipv4 {
        m.insert("ue_ipv4".into(), json!(v.to_string()));
    }
    if let Some(ctx) = &s.n7 {
        // A 5G PDU session: what N7 says of it instead of the Gx codes.
        m.insert("interface".into(), json!("n7"));
        if let Some(a) = ctx.access_type {
            m.insert("access_type".into(), json!(a.as_str()));
        }
        if let Some(r) = &ctx.rat_type {
            m.insert("rat".into(), json!(r.as_str()));
        }
        if let Some(id) = ctx.pdu_session_id {
            m.insert("pdu_session_id".into(), json!(id));
        }
        if let Some(slice) = &ctx.slice_info {
            m.insert("snssai".into(), json!(slice));
        }
        return m;
    }
    if let Some(v) = s.rat_type {
        m.insert("rat_type".into(), json!(v));
    }
    m
}

/// A `decision` event's payload for a session's decision, borrowed from
/// the session (docs/notifications.md lists the fields).
#[derive(serde::Serialize)]
struct DecisionPayload<'a> {
    session: &'a str,
    interface: &'a str,
    trigger: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan: Option<&'a str>,
    policy_version: u64,
    reused: bool,
    record: &'a crate::policy::record::DecisionRecord,
    installed: &'a crate::policy::SharedDecision,
    #[serde(skip_serializing_if = "Option::is_none")]
    rules_installed: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rules_removed: Option<&'a [String]>,
}

/// One line of the decision log's file.
#[derive(serde::Serialize)]
struct DecisionLine<'a, P: serde::Serialize> {
    time: String,
    name: &'a str,
    subscriber: &'a str,
    payload: &'a P,
}

/// The events capability: the notification events and the decision log
/// entries a request stages, each written in the commit of its cause.
#[derive(Clone)]
pub struct Events {
    pub(super) node: Arc<Node>,
}

impl Events {
    /// Stages an event when a sink takes `name` (the payload is built only
    /// then), dated `now` (Unix ms): the caller's clock, so that what
    /// decides a session reads none.
    pub(crate) fn stage_event(
        &self,
        name: &str,
        subscriber: Option<&str>,
        key: String,
        now: i64,
        payload: impl FnOnce() -> Value,
    ) -> Option<Staged> {
        if !self.node.persistence.outbox.wants(name) {
            return None;
        }
        self.node
            .persistence
            .outbox
            .stage(name, subscriber, key, payload(), now)
    }

    /// `session.started`, for a session opened by a CCR-I.
    pub(crate) fn session_started(&self, s: &GxSession) -> Option<Staged> {
        self.stage_event(
            names::SESSION_STARTED,
            Some(&s.subscriber),
            format!("{}:{}", names::SESSION_STARTED, s.id),
            s.created_ms,
            || Value::Object(session_fields(s)),
        )
    }

    /// `decision`, for the decision just made for `s` (its `last_decision`,
    /// `installed` what was sent), when `[decision_log]` is on and takes
    /// this subscriber. `trigger` names the request or push that decided;
    /// `rules` the names installed and removed, when a push knows them.
    pub(crate) fn decision_logged(
        &self,
        s: &GxSession,
        plan: Option<&str>,
        trigger: &str,
        reused: bool,
        rules: Option<(&[String], &[String])>,
    ) -> Option<Staged> {
        if !self.node.policy.decision_log().is_on() {
            return None;
        }
        let record = s.last_decision.as_deref()?;
        let to_sinks = self.node.persistence.outbox.wants(names::DECISION);
        if !self
            .node
            .policy
            .decision_log()
            .takes(&s.subscriber, plan, to_sinks)
        {
            return None;
        }
        let payload = DecisionPayload {
            session: &s.id,
            interface: if s.n7.is_some() { "n7" } else { "gx" },
            trigger,
            plan,
            policy_version: record.policy_version,
            reused,
            record,
            installed: &s.installed,
            rules_installed: rules.map(|(installed, _)| installed),
            rules_removed: rules.map(|(_, removed)| removed),
        };
        let now = super::now_ms();
        if let Some(file) = &self.node.policy.decision_log().file {
            // Written from the borrowed parts: the inputs (kept as JSON
            // text) go out as they are, with no tree of values built and
            // dropped for each line.
            let line = DecisionLine {
                time: crate::notify::event::iso_ms(now),
                name: names::DECISION,
                subscriber: &s.subscriber,
                payload: &payload,
            };
            file.write(serde_json::to_vec(&line).unwrap_or_default());
        }
        if !to_sinks {
            return None;
        }
        let payload = serde_json::to_value(&payload).unwrap_or(Value::Null);
        self.stage_decision(&s.subscriber, &s.id, payload, now)
    }

    /// `decision` for a dry run through the API (`POST /v1/policy/dry-run`),
    /// when `[decision_log]` takes `subscriber`: nothing was installed or
    /// sent; `dry` holds the inputs and what the running script and the
    /// draft decided.
    pub(crate) fn dry_run_logged(
        &self,
        subscriber: &str,
        plan: Option<&str>,
        mut dry: serde_json::Map<String, Value>,
    ) -> Option<Staged> {
        if !self.node.policy.decision_log().is_on() {
            return None;
        }
        let to_sinks = self.node.persistence.outbox.wants(names::DECISION);
        if !self
            .node
            .policy
            .decision_log()
            .takes(subscriber, plan, to_sinks)
        {
            return None;
        }
        dry.insert("interface".into(), json!("api"));
        dry.insert("trigger".into(), json!("dry-run"));
        if let Some(p) = plan {
            dry.insert("plan".into(), json!(p));
        }
        self.emit_decision(subscriber, "dry-run", Value::Object(dry), to_sinks)
    }

    /// Writes a `decision` payload to the decision log's file, and stages
    /// it for the sinks when one takes it (`to_sinks`).
    fn emit_decision(
        &self,
        subscriber: &str,
        about: &str,
        payload: Value,
        to_sinks: bool,
    ) -> Option<Staged> {
        let now = super::now_ms();
        if let Some(file) = &self.node.policy.decision_log().file {
            let line = DecisionLine {
                time: crate::notify::event::iso_ms(now),
                name: names::DECISION,
                subscriber,
                payload: &payload,
            };
            file.write(serde_json::to_vec(&line).unwrap_or_default());
        }
        if !to_sinks {
            return None;
        }
        self.stage_decision(subscriber, about, payload, now)
    }

    /// Stages a `decision` event for the sinks.
    fn stage_decision(
        &self,
        subscriber: &str,
        about: &str,
        payload: Value,
        now: i64,
    ) -> Option<Staged> {
        self.node.persistence.outbox.stage(
            names::DECISION,
            Some(subscriber),
            format!(
                "{}:{}:{}",
                names::DECISION,
                about,
                self.node.persistence.outbox.next_id_hint()
            ),
            payload,
            now,
        )
    }

    /// `session.ended`, with its length and the octets reported per
    /// Monitoring-Key over its life (the final usage included).
    pub(crate) fn session_ended(&self, s: &GxSession, cause: &str) -> Option<Staged> {
        self.stage_event(
            names::SESSION_ENDED,
            Some(&s.subscriber),
            format!("{}:{}", names::SESSION_ENDED, s.id),
            s.closed_ms.unwrap_or(s.updated_ms),
            || {
                let mut m = session_fields(s);
                let end = s.closed_ms.unwrap_or(s.updated_ms);
                m.insert("cause".into(), json!(cause));
                m.insert(
                    "duration_ms".into(),
                    json!(end.saturating_sub(s.created_ms).max(0)),
                );
                let usage: serde_json::Map<String, Value> = s
                    .monitoring
                    .keys
                    .iter()
                    .map(|(k, g)| (k.to_string(), json!(g.reported_octets)))
                    .collect();
                m.insert("usage_octets".into(), Value::Object(usage));
                Value::Object(m)
            },
        )
    }

    /// `quota.threshold` for each configured percentage of an allowance
    /// that this request's usage crossed, once per accumulator, threshold
    /// and period (remembered in the usage row, written with the event).
    pub(crate) fn quota_thresholds(
        &self,
        step: &mut UsageStep,
        profile: Option<&Subscriber>,
        out: &mut StagedEvents,
        at: i64,
    ) {
        // Nothing to do (and nothing allocated) without a sink for it.
        if !self.node.persistence.outbox.wants(names::QUOTA_THRESHOLD) {
            return;
        }
        let thresholds = self
            .node
            .live
            .load()
            .cfg
            .notifications
            .quota_thresholds
            .clone();
        let names: Vec<Arc<str>> = step.cfg.accumulators().keys().cloned().collect();
        for acc in names {
            let Some(allowance) = step.next.allowance(&step.cfg, &acc, profile) else {
                continue;
            };
            let Some(period) = step.next.accumulators.get(&*acc).map(|a| a.period_start_ms) else {
                continue;
            };
            let percent = |used: u64| -> u64 {
                if allowance == 0 {
                    100
                } else {
                    u64::try_from(u128::from(used) * 100 / u128::from(allowance))
                        .unwrap_or(u64::MAX)
                }
            };
            let used = step.next.used(&acc);
            let now = percent(used);
            for &t in &thresholds {
                let t = u64::from(t);
                let mark = format!("{}:{acc}:{t}", names::QUOTA_THRESHOLD);
                if now < t || step.next.notified.get(&mark) == Some(&period) {
                    continue;
                }
                let staged = self.stage_event(
                    names::QUOTA_THRESHOLD,
                    Some(&step.next.subscriber),
                    format!("{mark}:{}:{period}", step.next.subscriber),
                    at,
                    || {
                        json!({
                            "accumulator": acc,
                            "threshold_percent": t,
                            "percent": now,
                            "used_octets": used,
                            "allowance_octets": allowance,
                            "period_start": crate::notify::event::iso_ms(period),
                        })
                    },
                );
                if staged.is_some() {
                    Arc::make_mut(&mut step.next).notified.insert(mark, period);
                    out.push(staged);
                }
            }
        }
    }

    /// The policy's `notify(name, payload)` calls, as `policy.<name>`
    /// events. Each is emitted once per period: the current period of the
    /// accumulator the payload names (`accumulator = "monthly"`), or else
    /// the session. What was emitted is remembered in the usage row or the
    /// session record, written in the same commit as the event.
    pub(crate) fn policy_notifications(
        &self,
        notes: &[Notification],
        s: &mut GxSession,
        mut step: Option<&mut UsageStep>,
        out: &mut StagedEvents,
        now: i64,
    ) {
        for n in notes {
            let name = format!("{}{}", names::POLICY_PREFIX, n.name);
            let accumulator = n
                .payload
                .get("accumulator")
                .and_then(Value::as_str)
                .and_then(|a| {
                    let step = step.as_deref()?;
                    let period = step.next.accumulators.get(a)?.period_start_ms;
                    Some((a.to_owned(), period))
                });
            match (accumulator, step.as_deref_mut()) {
                (Some((acc, period)), Some(step)) => {
                    let mark = format!("{}:{acc}", n.name);
                    if step.next.notified.get(&mark) == Some(&period) {
                        continue;
                    }
                    let staged = self.stage_event(
                        &name,
                        Some(&s.subscriber),
                        format!("{name}:{}:{acc}:{period}", s.subscriber),
                        now,
                        || n.payload.clone(),
                    );
                    if staged.is_some() {
                        Arc::make_mut(&mut step.next).notified.insert(mark, period);
                        out.push(staged);
                    }
                }
                _ => {
                    if s.notified.contains(&n.name) {
                        continue;
                    }
                    let staged = self.stage_event(
                        &name,
                        Some(&s.subscriber),
                        format!("{name}:{}:session:{}", s.subscriber, s.id),
                        now,
                        || n.payload.clone(),
                    );
                    if staged.is_some() {
                        s.notified.insert(n.name.clone());
                        out.push(staged);
                    }
                }
            }
        }
    }

    /// `peer.up` / `peer.down`: a Diameter peer past CER came or went.
    /// Nothing else changes with it, so the event is a commit of its own,
    /// made off the connection's path.
    pub(crate) fn peer_event(&self, name: &'static str, host: &str, reason: Option<String>) {
        let Some(staged) = self.stage_event(
            name,
            None,
            format!(
                "{name}:{host}:{}",
                self.node.persistence.outbox.next_id_hint()
            ),
            super::now_ms(),
            || match &reason {
                Some(r) => json!({ "peer": host, "reason": r }),
                None => json!({ "peer": host }),
            },
        ) else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let store = self.node.persistence.writer.clone();
        rt.spawn(async move {
            let Some(change) = staged.change() else {
                return;
            };
            match store.submit(vec![change]).await {
                Ok(()) => staged.publish(),
                Err(e) => tracing::warn!(error = %e, "peer notification not stored; dropped"),
            }
        });
    }

    /// `usage.topup`: octets added to an accumulator's allowance through
    /// the API, with what it holds after.
    pub(crate) fn usage_topup(
        &self,
        usage: &crate::usage::SubscriberUsage,
        accumulator: &str,
        octets: u64,
    ) -> Option<Staged> {
        let acc = usage.accumulators.get(accumulator);
        self.stage_event(
            names::USAGE_TOPUP,
            Some(&usage.subscriber),
            format!(
                "{}:{}:{}",
                names::USAGE_TOPUP,
                usage.subscriber,
                self.node.persistence.outbox.next_id_hint()
            ),
            super::now_ms(),
            || {
                json!({
                    "accumulator": accumulator,
                    "octets": octets,
                    "topup_octets": acc.map_or(0, |a| a.topup),
                    "used_octets": acc.map_or(0, |a| a.used),
                })
            },
        )
    }

    /// `subscriber.changed`: a profile created, replaced or deleted through
    /// the API (its plan before and after).
    pub(crate) fn subscriber_changed(
        &self,
        imsi: &str,
        before: Option<&Subscriber>,
        after: Option<&Subscriber>,
    ) -> Option<Staged> {
        let change = match (before, after) {
            (None, Some(_)) => "created",
            (Some(_), Some(_)) => "updated",
            (Some(_), None) => "deleted",
            (None, None) => return None,
        };
        self.stage_event(
            names::SUBSCRIBER_CHANGED,
            Some(imsi),
            format!(
                "{}:{imsi}:{}",
                names::SUBSCRIBER_CHANGED,
                self.node.persistence.outbox.next_id_hint()
            ),
            super::now_ms(),
            || {
                json!({
                    "change": change,
                    "plan": after.and_then(|s| s.plan.clone()),
                    "previous_plan": before.and_then(|s| s.plan.clone()),
                    "plan_changed": before.and_then(|s| s.plan.as_deref()) != after.and_then(|s| s.plan.as_deref()),
                })
            },
        )
    }
}
