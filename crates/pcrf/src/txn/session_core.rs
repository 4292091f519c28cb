//! The decision of a policy session, sans-IO: the part of opening or
//! updating a session that every interface shares and that waits for
//! nothing. It counts the usage a request reported into the subscriber's
//! accumulators, asks the policy ([`propose`]), and, once the spending
//! limits the policy asked for are settled, checks the decision, stages
//! the events it asked for and grants its Monitoring-Keys ([`grant`]).
//!
//! It takes neutral inputs (the session record the adapter filled from its
//! request, the usage reported per Monitoring-Key, the subscriber, `now`)
//! and returns neutral outputs (the decision, the grants, the events
//! staged, the changed accumulators), and opens no socket, reads no clock
//! (the policy's time of day and every event are dated `now`) and awaits
//! nothing: what needs a wait (the subscriber's usage lock and row, the
//! spending-limit peer) is done between the two calls by the transaction
//! runner (`txn::session_step`), as a sans-IO protocol core leaves its I/O
//! to the shell around it. A push re-decides an open session outside any
//! request the same way ([`redecide`], then [`Redecided::settle`] with
//! what the enforcement point answered; `txn::push` runs it). Its unit
//! tests run without a runtime.

use super::Runner;
use crate::node::events::StagedEvents;
use crate::node::UsageStep;
use crate::pcc::{UsageInstructions, UsageReport};
use crate::policy::decision::{Decision, Reject};
use crate::policy::input::UsageInput;
use crate::policy::shared_decision::SharedDecision;
use crate::policy::{Notification, Outcome, PolicyInput, Ran};
use crate::session::{GxSession, RuleDiff};
use crate::subscriber::Subscriber;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Which step decides: a new session (no decision before it, and a
/// `session-started` event), or an open one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Open,
    Update,
}

/// What the policy granted, checked: the decision to install, with the
/// usage grants and stops that go with it, and whether the memo reused
/// the last decision. A refusal is the policy's [`Reject`].
pub(crate) struct Granted {
    pub(crate) decision: SharedDecision,
    pub(crate) grants: UsageInstructions,
    pub(crate) reused: bool,
    /// Seconds since a reused decision was made: its revalidation time
    /// counts from then, so the adapter takes them off the decision's
    /// `revalidation_secs` (kept as made, so the decision stays shared).
    pub(crate) revalidation_spent_secs: u64,
}

/// What a decision step works on besides the session: the subscriber's
/// profile, its usage (`None` when monitoring is off) and the events the
/// transaction will write.
pub(crate) struct Context<'a> {
    pub(crate) sub: Option<&'a Arc<Subscriber>>,
    pub(crate) usage: Option<&'a mut UsageStep>,
    pub(crate) events: &'a mut StagedEvents,
    pub(crate) now: i64,
}

/// Counts `reports` into the accumulators, stages what they crossed, and
/// decides session `s` with the policy (`spending`: the statuses of the
/// subscriber's spending-limit counters known now). The decision may ask
/// for counters not subscribed yet: the runner settles them before
/// [`grant`].
pub(crate) fn propose(
    runner: &Runner,
    s: &mut GxSession,
    step: Step,
    reports: &[UsageReport<'_>],
    spending: BTreeMap<String, String>,
    cx: &mut Context<'_>,
) -> (PolicyInput, Outcome) {
    if step == Step::Open {
        cx.events.push(runner.events.session_started(s));
    }
    if let Some(u) = cx.usage.as_deref_mut() {
        runner.usage.count_reports(u, s, reports, cx.now);
        runner
            .events
            .quota_thresholds(u, cx.sub.map(Arc::as_ref), cx.events, cx.now);
    }
    let mut input = runner.policy.policy_input(s, cx.sub, spending, cx.now);
    if let Some(u) = cx.usage.as_deref() {
        input.usage = u.view(cx.sub.map(Arc::as_ref));
    }
    let last = match step {
        Step::Open => None,
        Step::Update => s.last_decision.as_deref(),
    };
    let out = runner.policy.engine().decide(&input, last);
    runner.policy.note_fallback(&s.id, &out);
    (input, out)
}

/// Checks the decision `out` (the runner's checks, then `refine`: the
/// adapter's own, before the grants), stages the events the policy asked
/// for, and turns its Monitoring-Keys into grants and stops. A decision
/// that is not a reuse of the last one becomes the session's
/// `last_decision`. A refusal stages nothing more.
pub(crate) fn grant(
    runner: &Runner,
    s: &mut GxSession,
    step: Step,
    input: &PolicyInput,
    mut out: Outcome,
    refine: impl FnOnce(&str, Decision) -> Decision,
    cx: &mut Context<'_>,
) -> Result<Granted, Reject> {
    if let Some(rej) = out.decision.reject.clone() {
        return Err(rej);
    }
    let notes = std::mem::take(&mut out.notifications);
    runner
        .events
        .policy_notifications(&notes, s, cx.usage.as_deref_mut(), cx.events, cx.now);
    let decision = checked(runner, s, step, &out, refine, cx.usage.is_some());
    let mut grants = UsageInstructions::default();
    if let Some(u) = cx.usage.as_deref() {
        let wanted = &decision.monitoring;
        grants = runner.usage.monitoring_grants(
            &u.next,
            cx.sub.map(Arc::as_ref),
            s,
            wanted,
            &u.reported,
            cx.now,
        );
    }
    let reused = out.ran == Ran::Memo;
    let revalidation_spent_secs = out.revalidation_spent_secs;
    if !reused {
        s.last_decision = Some(Arc::new(out.into_record(input, cx.now)));
    }
    Ok(Granted {
        decision,
        grants,
        reused,
        revalidation_spent_secs,
    })
}

/// The decision of `out` after the runner's checks (the rule catalog, the
/// Monitoring-Keys against the usage file when `with_usage`), `refine`
/// (the adapter's own) and the AF sessions' rules on an update.
///
/// A decision reused from the memo is the same shared decision request
/// after request, and so is what the checks make of it: when they read
/// nothing but the decision and the configuration (no ADC rules for
/// `refine`, no AF session) and dropped nothing, what they made is
/// remembered beside the decision and taken again while the
/// configuration is the same, instead of copying the decision to check it
/// once more. Its `revalidation_secs` is as made: the time spent since is
/// the adapter's to take off (`Granted::revalidation_spent_secs`).
fn checked(
    runner: &Runner,
    s: &GxSession,
    step: Step,
    out: &Outcome,
    refine: impl FnOnce(&str, Decision) -> Decision,
    with_usage: bool,
) -> SharedDecision {
    let raw = &out.decision;
    let pure = raw.adc.is_empty() && (step == Step::Open || s.af.is_empty());
    let under = pure.then(|| runner.policy.checked_under(with_usage));
    if let Some(checked) = under.as_ref().and_then(|u| raw.checked_form(u)) {
        return checked;
    }
    let mut decision = refine(
        &s.id,
        runner.policy.check_catalog(&s.id, Decision::clone(raw)),
    );
    if step == Step::Update {
        crate::session::af::add_af_rules(&s.af, &mut decision);
    }
    if with_usage {
        runner.usage.check_monitoring(&s.id, &mut decision);
    }
    let decision = SharedDecision::from(decision);
    let dropped_nothing = decision.rules.len() == raw.rules.len()
        && decision.base_names.len() == raw.base_names.len()
        && decision.monitoring.len() == raw.monitoring.len();
    if let Some(under) = under.filter(|_| dropped_nothing) {
        raw.remember_checked(under, &decision);
    }
    decision
}

/// An open session decided again outside the request that opened or
/// updated it: by a push (a profile change, a top-up, a time-of-day
/// boundary, a cell's congestion), or by the TDF's request whose detected
/// applications are policy input. What the policy decides now, checked
/// as an update is; no grant is made and nothing is recorded until the
/// caller says what the enforcement point took.
pub(crate) struct Redecided {
    pub(crate) decision: SharedDecision,
    /// What the policy asked to notify: staged once the decision is in
    /// force (a push that changes nothing at the enforcement point stages
    /// them at once).
    pub(crate) notes: Vec<Notification>,
    input: PolicyInput,
    out: Outcome,
}

impl Redecided {
    /// Whether the memo reused the last decision.
    pub(crate) fn reused(&self) -> bool {
        self.out.ran == Ran::Memo
    }

    /// Whether the policy refused the session.
    pub(crate) fn refused(&self) -> bool {
        self.out.decision.reject.is_some()
    }

    /// The script version that decided.
    pub(crate) fn script_version(&self) -> u64 {
        self.out.script_version
    }

    /// Seconds since a reused decision was made (see [`Granted`]).
    pub(crate) fn revalidation_spent_secs(&self) -> u64 {
        self.out.revalidation_spent_secs
    }

    /// The grants and stops that go with the decision on the committed
    /// usage (keys newly monitored are granted; none was just reported),
    /// and `cur` as it is once its enforcement point holds them.
    pub(crate) fn grants(
        &self,
        runner: &Runner,
        cur: &GxSession,
        sub: Option<&Subscriber>,
        now: i64,
    ) -> (GxSession, UsageInstructions) {
        let mut next = cur.clone();
        if runner.usage.table().config().is_empty() {
            return (next, UsageInstructions::default());
        }
        let accumulators = runner.usage.table().load(&cur.subscriber);
        let wanted = &self.decision.monitoring;
        let none_reported = Default::default();
        let grants = runner.usage.monitoring_grants(
            &accumulators,
            sub,
            &mut next,
            wanted,
            &none_reported,
            now,
        );
        (next, grants)
    }

    /// `next` (the session with the grants, from [`Self::grants`]) once
    /// the enforcement point answered: `installed` when it took the
    /// decision (which becomes what it holds, and, unless reused, the
    /// session's `last_decision`); otherwise it still holds what `cur`
    /// says, and the grants and stops did not happen.
    pub(crate) fn settle(
        self,
        cur: &GxSession,
        mut next: GxSession,
        installed: bool,
        now: i64,
    ) -> GxSession {
        let Redecided {
            decision,
            input,
            out,
            ..
        } = self;
        if installed {
            next.installed = decision;
            if out.ran != Ran::Memo {
                next.last_decision = Some(Arc::new(out.into_record(&input, now)));
            }
        } else {
            next.monitoring = cur.monitoring.clone();
        }
        next.updated_ms = now;
        next
    }
}

/// Decides the open session `s` again: the policy on the session, the
/// subscriber and `usage` (the committed accumulators rolled to `now`,
/// or those a request is counting), `spending` the spending-limit
/// statuses known, checked as an update is (`refine`: the adapter's own
/// checks).
pub(crate) fn redecide(
    runner: &Runner,
    s: &GxSession,
    sub: Option<&Arc<Subscriber>>,
    spending: BTreeMap<String, String>,
    usage: UsageInput,
    now: i64,
    refine: impl FnOnce(&str, Decision) -> Decision,
) -> Redecided {
    let mut input = runner.policy.policy_input(s, sub, spending, now);
    input.usage = usage;
    let mut out = runner
        .policy
        .engine()
        .decide(&input, s.last_decision.as_deref());
    runner.policy.note_fallback(&s.id, &out);
    let notes = std::mem::take(&mut out.notifications);
    let with_usage = !runner.usage.table().config().is_empty();
    let decision = checked(runner, s, Step::Update, &out, refine, with_usage);
    Redecided {
        decision,
        notes,
        input,
        out,
    }
}

/// Revalidation-Time is an instant: send it only when the decision asks
/// for an instant more than a minute away from the one the enforcement
/// point has (`at_ms`, updated). A decision made `spent_secs` ago (reused)
/// counts its time from then.
pub(crate) fn settle_revalidation(
    diff: &mut RuleDiff<'_>,
    at_ms: &mut Option<i64>,
    now: i64,
    spent_secs: u64,
) {
    if let Some(secs) = diff.revalidation_secs.as_mut() {
        *secs = secs.saturating_sub(spent_secs);
        let secs = *secs;
        // Saturating: `Decision::check` bounds `secs`, and an instant far
        // out must still never overflow here.
        let at = now.saturating_add(i64::try_from(secs).unwrap_or(i64::MAX).saturating_mul(1000));
        if at_ms.is_some_and(|old| old.abs_diff(at) < 60_000) {
            diff.revalidation_secs = None;
        } else {
            *at_ms = Some(at);
        }
    }
}

#[cfg(test)]
mod tests {
    //! The decision steps of the Gx process tests, run on a node built on
    //! a fresh store, with no runtime entered while they decide: only the
    //! set-up (the node, the usage lock) awaits.
    use super::*;
    use crate::fuzz::{node_for_unit_tests, IMSI_BASIC, IMSI_BLOCKED};
    use crate::services::Services;
    use crate::usage::ServiceUnits;

    const NOW: i64 = 1_795_000_000_000;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    fn session(imsi: &str) -> GxSession {
        let mut s = GxSession::new(
            format!("pgw.test;1;{imsi}"),
            imsi.to_owned(),
            "pgw.test",
            "test",
            NOW,
        );
        s.imsi = Some(imsi.into());
        s.apn = Some("internet".into());
        s
    }

    /// One decision step, as the runner takes it, with the spending
    /// limits settled as they were (no Sy peer here).
    fn decide(
        node: &Services,
        usage: Option<&mut UsageStep>,
        s: &mut GxSession,
        step: Step,
        reports: &[UsageReport<'_>],
        now: i64,
    ) -> (Result<Granted, Reject>, StagedEvents) {
        let sub = node
            .node
            .subscribers
            .find(s.imsi.as_deref(), s.msisdn.as_deref());
        let mut events = StagedEvents::default();
        let mut cx = Context {
            sub: sub.as_ref(),
            usage,
            events: &mut events,
            now,
        };
        let (input, out) = propose(
            &Runner::new(&node.node),
            s,
            step,
            reports,
            BTreeMap::new(),
            &mut cx,
        );
        let verdict = grant(
            &Runner::new(&node.node),
            s,
            step,
            &input,
            out,
            |_, d| d,
            &mut cx,
        );
        (verdict, events)
    }

    fn rules(d: &Decision) -> Vec<String> {
        d.rules.clone()
    }

    #[test]
    fn the_decision_is_made_at_the_time_it_is_given() {
        let rt = runtime();
        let node = node_for_unit_tests(&rt);
        let at = |now: i64| {
            let mut s = session(IMSI_BASIC);
            let mut usage = rt
                .block_on(node.node.usage.begin_usage(&s.subscriber, None, now))
                .expect("usage");
            let (verdict, _) = decide(&node, usage.as_mut(), &mut s, Step::Open, &[], now);
            assert!(verdict.is_ok());
            let record = s.last_decision.expect("recorded");
            let inputs: serde_json::Value = serde_json::to_value(&record.inputs).expect("inputs");
            (record.at_ms, inputs["time"].clone())
        };
        // 1_795_000_000_000 is 2026-11-18 11:06:40 UTC, 12:06 in Berlin
        // (the node's zone); three hours on, whatever the clock says.
        let later = NOW + 3 * 3_600_000;
        let (made, time) = at(NOW);
        assert_eq!(
            (made, &time["hour"], &time["minute"], &time["date"]),
            (
                NOW,
                &serde_json::json!(12),
                &serde_json::json!(6),
                &serde_json::json!("2026-11-18")
            )
        );
        let (made, time) = at(later);
        assert_eq!((made, &time["hour"]), (later, &serde_json::json!(15)));
    }

    #[test]
    fn a_blocked_subscriber_is_refused_and_nothing_is_granted() {
        let rt = runtime();
        let node = node_for_unit_tests(&rt);
        let mut s = session(IMSI_BLOCKED);
        let mut usage = rt
            .block_on(node.node.usage.begin_usage(&s.subscriber, None, NOW))
            .expect("usage");
        let (verdict, _) = decide(&node, usage.as_mut(), &mut s, Step::Open, &[], NOW);
        let Err(rej) = verdict else {
            panic!("the blocked subscriber is granted")
        };
        assert_ne!(rej.code, 2001);
        assert!(s.last_decision.is_none(), "a refusal is not recorded");
    }

    #[test]
    fn open_grants_the_monthly_key_and_usage_beyond_the_allowance_throttles() {
        let rt = runtime();
        let node = node_for_unit_tests(&rt);
        let mut s = session(IMSI_BASIC);
        let mut usage = rt
            .block_on(node.node.usage.begin_usage(&s.subscriber, None, NOW))
            .expect("usage");
        let (verdict, _) = decide(&node, usage.as_mut(), &mut s, Step::Open, &[], NOW);
        let opened = verdict.unwrap_or_else(|r| panic!("refused: {r:?}"));
        assert!(!opened.reused, "nothing to reuse at open");
        let opened_rules = rules(&opened.decision);
        assert!(
            opened_rules.iter().any(|r| r == "internet"),
            "{opened_rules:?}"
        );
        let granted_key = opened.grants.grants.first().map(|g| g.key.clone());
        assert!(granted_key.is_some(), "a monitored key is granted");
        assert!(s.last_decision.is_some(), "the decision is recorded");
        s.installed = opened.decision;
        drop(usage);

        // An update reporting nothing new: the same decision, from the memo.
        let later = NOW + 60_000;
        let mut usage = rt
            .block_on(node.node.usage.begin_usage(&s.subscriber, None, later))
            .expect("usage");
        let (verdict, _) = decide(&node, usage.as_mut(), &mut s, Step::Update, &[], later);
        let same = verdict.unwrap_or_else(|r| panic!("refused: {r:?}"));
        assert!(same.reused, "an unchanged input reuses the decision");
        assert_eq!(rules(&same.decision), opened_rules);
        assert!(
            same.decision.same_as(&s.installed),
            "the reused decision's checked form is the installed one, not a copy"
        );
        drop(usage);

        // The rule catalog changes: the same reused decision is checked
        // again under it, not taken as it was checked before.
        let before = (*node.node.settings.live().cfg).clone();
        let mut cfg = before.clone();
        cfg.rules.predefined = opened_rules
            .iter()
            .filter(|r| *r != "internet")
            .cloned()
            .chain(["throttled".to_owned()])
            .collect();
        node.node.settings.apply_config(cfg);
        let mut usage = rt
            .block_on(node.node.usage.begin_usage(&s.subscriber, None, later))
            .expect("usage");
        let (verdict, _) = decide(&node, usage.as_mut(), &mut s, Step::Update, &[], later);
        let narrowed = verdict.unwrap_or_else(|r| panic!("refused: {r:?}"));
        assert!(narrowed.reused);
        assert!(
            !rules(&narrowed.decision).iter().any(|r| r == "internet"),
            "checked under the new catalog: {:?}",
            rules(&narrowed.decision)
        );
        node.node.settings.apply_config(before);
        drop(usage);

        // An update reporting more than the monthly allowance: throttled.
        let key = granted_key.unwrap_or_default();
        let report = [UsageReport {
            key: key.as_bytes(),
            level: None,
            used: ServiceUnits {
                total: Some(11_000_000_000),
                ..Default::default()
            },
        }];
        let mut usage = rt
            .block_on(node.node.usage.begin_usage(&s.subscriber, None, later))
            .expect("usage");
        let (verdict, _) = decide(&node, usage.as_mut(), &mut s, Step::Update, &report, later);
        let throttled = verdict.unwrap_or_else(|r| panic!("refused: {r:?}"));
        let throttled_rules = rules(&throttled.decision);
        assert!(
            throttled_rules.iter().any(|r| r == "throttled"),
            "{throttled_rules:?}"
        );
        assert!(!throttled.reused);
        let counted = usage.as_ref().map(|u| u.reported.len()).unwrap_or(0);
        assert_eq!(counted, 1, "the report is counted under its key");
    }

    /// An open session decided as a CCR-I would, with its decision
    /// installed: what a push starts from.
    fn opened(node: &Services, rt: &tokio::runtime::Runtime, imsi: &str) -> GxSession {
        let mut s = session(imsi);
        s.location = Some((String::from("8200f1100001") + "00f11000000101").into());
        let mut usage = rt
            .block_on(node.node.usage.begin_usage(&s.subscriber, None, NOW))
            .expect("usage");
        let (verdict, _) = decide(node, usage.as_mut(), &mut s, Step::Open, &[], NOW);
        s.installed = verdict
            .unwrap_or_else(|r| panic!("refused: {r:?}"))
            .decision;
        s
    }

    /// A push's re-decision of `cur` at `now`, as `txn::push` makes it:
    /// on the committed usage, with the grants on a copy of the session.
    fn pushed(
        node: &Services,
        cur: &GxSession,
        now: i64,
    ) -> (Redecided, GxSession, UsageInstructions) {
        let sub = node.node.subscribers.find(cur.imsi.as_deref(), None);
        let usage = node
            .node
            .usage
            .usage_view(&cur.subscriber, sub.as_deref(), now);
        let spending = BTreeMap::new();
        let red = redecide(
            &Runner::new(&node.node),
            cur,
            sub.as_ref(),
            spending,
            usage,
            now,
            |_, d| d,
        );
        let (next, grants) = red.grants(&Runner::new(&node.node), cur, sub.as_deref(), now);
        (red, next, grants)
    }

    #[test]
    fn a_push_with_no_input_changed_has_nothing_to_send() {
        let rt = runtime();
        let node = node_for_unit_tests(&rt);
        let cur = opened(&node, &rt, IMSI_BASIC);
        let later = NOW + 60_000;
        let (red, next, grants) = pushed(&node, &cur, later);
        assert!(red.reused(), "the same inputs reuse the decision");
        assert!(RuleDiff::between(&cur.installed, &red.decision).is_empty());
        assert!(grants.is_empty(), "the key held is not granted again");
        let next = red.settle(&cur, next, true, later);
        assert_eq!(next.installed.rules, cur.installed.rules);
        assert!(
            Arc::ptr_eq(
                next.last_decision.as_ref().expect("kept"),
                cur.last_decision.as_ref().expect("made at open")
            ),
            "a reused decision is not recorded again"
        );
    }

    #[test]
    fn a_push_for_a_congested_cell_installs_on_success_and_keeps_what_was_held_on_failure() {
        let rt = runtime();
        let node = node_for_unit_tests(&rt);
        let cur = opened(&node, &rt, IMSI_BASIC);
        let held = cur.installed.apn_ambr.expect("an APN-AMBR");
        node.node
            .policy
            .runner()
            .set_congestion("00f11000000101", 3);
        let later = NOW + 60_000;
        let (red, next, _) = pushed(&node, &cur, later);
        assert!(!red.reused(), "the congestion is a new input");
        let diff = RuleDiff::between(&cur.installed, &red.decision);
        let sent = diff.apn_ambr.expect("the AMBR changes").dl;
        assert!(sent < held.dl, "the downlink is cut: {sent} from {held:?}");
        drop(diff);
        let took = red.settle(&cur, next, true, later);
        assert_eq!(took.installed.apn_ambr.as_ref().map(|a| a.dl), Some(sent));
        let record = took.last_decision.as_deref().expect("recorded");
        assert_eq!(record.at_ms, later);

        // The enforcement point refused it: it holds what it held.
        let (red, next, _) = pushed(&node, &cur, later);
        let refused = red.settle(&cur, next, false, later);
        assert_eq!(refused.installed.apn_ambr, Some(held));
        assert_eq!(refused.monitoring, cur.monitoring);
        assert!(Arc::ptr_eq(
            refused.last_decision.as_ref().expect("kept"),
            cur.last_decision.as_ref().expect("made at open")
        ));
    }
}
