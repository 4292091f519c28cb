//! The steps of a policy session that every interface shares, written
//! once: opening a session, updating it with what its enforcement point
//! reported, and closing it. A Gx CCR-I and an N7 Create open; a CCR-U
//! and an N7 Update update; a CCR-T and an N7 Delete close.
//!
//! An adapter (`gx/service.rs`, `n7/sessions.rs`) decodes its request,
//! finds and locks the session, applies what the request said to a copy
//! of the record, and hands it here with the usage it reported. The step
//! counts that usage into the subscriber's accumulators, decides with the
//! policy (settling the spending limits it asks for), stages the events,
//! validates the decision and turns its Monitoring-Keys into grants. The
//! adapter then encodes the answer of its protocol from the verdict,
//! and the transaction ends in one commit ([`commit_open`],
//! [`super::commit_session`], [`close`]).
//!
//! The decision itself is `session_core`, which waits for nothing; this
//! runner does what needs a wait around it: the subscriber's usage lock
//! and row (on a shared store) before it, the spending limits' peer
//! between its two halves when the decision names counters not subscribed
//! yet, and the commit after it. Time is the adapter's `now`, read once
//! per request.

use super::commit_session;
use super::Runner;
use crate::node::events::StagedEvents;
use crate::node::{usage_change, UsageLedger, UsageStep};
use crate::pcc::UsageReport;
use crate::policy::decision::{Decision, Reject};
use crate::policy::shared_decision::SharedDecision;
use crate::rx::service::Rx;
use crate::session::{GxSession, SessionSlot, SessionState};
use crate::store::Change;
use crate::subscriber::Subscriber;
use crate::sy::service::Sy;
use crate::txn::session_core::{self, Context};
pub(crate) use crate::txn::session_core::{Granted, Step};
use bytes::Bytes;
use diameter::codec::DiameterError;
use std::sync::Arc;

/// A decided step: the verdict, and what the transaction writes with the
/// session.
pub(crate) struct Decided {
    pub(crate) verdict: Result<Granted, Reject>,
    pub(crate) pending: Pending,
}

/// What a session transaction writes beside the session record, in the
/// same commit: the subscriber's usage (its lock held until then) and the
/// events staged.
pub(crate) struct Pending {
    pub(crate) usage: Option<UsageStep>,
    pub(crate) events: StagedEvents,
    /// The subscriber's profile, when provisioned.
    pub(crate) sub: Option<Arc<Subscriber>>,
}

impl Pending {
    /// Records `decision` as what the enforcement point now holds, and
    /// stages its entry in the decision log (`trigger`: the request that
    /// decided, in the log's words).
    pub(crate) fn install(
        &mut self,
        runner: &Runner,
        s: &mut GxSession,
        decision: impl Into<SharedDecision>,
        trigger: &str,
        reused: bool,
    ) {
        s.installed = decision.into();
        let plan = self.sub.as_deref().and_then(|p| p.plan.as_deref());
        self.events.push(
            runner
                .events
                .decision_logged(s, plan, trigger, reused, None),
        );
    }

    /// Writes session `s` with the usage and events in one commit, then
    /// publishes them (see [`commit_session`]).
    pub(crate) async fn commit(
        self,
        runner: &Runner,
        slot: &SessionSlot,
        s: Arc<GxSession>,
        unchanged_from: Option<&GxSession>,
    ) -> Result<(), DiameterError> {
        commit_session(runner, slot, s, self.usage, self.events, unchanged_from).await
    }
}

/// Decides session `s` (a copy the adapter owns, holding what the request
/// reported): takes the subscriber's usage, proposes a decision
/// (`session_core::propose`), settles the spending limits it asks for,
/// and checks and grants it (`session_core::grant`; `refine`: the
/// adapter's own checks).
pub(crate) async fn decide(
    runner: &Runner,
    sy: &Sy,
    s: &mut GxSession,
    step: Step,
    reports: &[UsageReport<'_>],
    now: i64,
    refine: impl FnOnce(&str, Decision) -> Decision,
) -> Result<Decided, DiameterError> {
    let sub = runner
        .subscribers
        .find(s.imsi.as_deref(), s.msisdn.as_deref());
    let mut usage = runner
        .usage
        .begin_usage(&s.subscriber, sub.as_deref(), now)
        .await?;
    let mut events = StagedEvents::default();
    let mut cx = Context {
        sub: sub.as_ref(),
        usage: usage.as_mut(),
        events: &mut events,
        now,
    };
    let spending = sy.spending_of(s);
    let (mut input, out) = session_core::propose(runner, s, step, reports, spending, &mut cx);
    let out = sy.settle_spending(s, &mut input, out).await;
    let verdict = session_core::grant(runner, s, step, &input, out, refine, &mut cx);
    Ok(Decided {
        verdict,
        pending: Pending { usage, events, sub },
    })
}

/// Ends the opening of session `s`: puts it in the session table (over
/// a closed record of the same id), writes it with its usage and events
/// in one commit, and only then makes them visible. A failed commit
/// leaves nothing behind: the table forgets the session again.
pub(crate) async fn commit_open(
    runner: &Runner,
    s: Arc<GxSession>,
    pending: Pending,
) -> Result<Arc<SessionSlot>, DiameterError> {
    let Pending { usage, events, .. } = pending;
    let slot = match runner.sessions.table().insert(s.clone()) {
        Ok(slot) => slot,
        Err(_) => runner.sessions.table().replace(s.clone()),
    };
    {
        let _g = slot.lock().await;
        let mut changes = vec![Change::PutSession(s.clone())];
        changes.extend(usage_change(&usage));
        changes.extend(events.changes());
        if let Err(e) = runner.commit(changes).await {
            runner.sessions.table().remove(&s.id);
            return Err(e);
        }
        events.publish();
        slot.publish(s);
        if let Some(u) = usage {
            UsageLedger::finish_usage(u);
        }
    }
    Ok(slot)
}

/// What ends a session: the request's final usage, and the answer a
/// retransmission of it gets again (`None` where the protocol replays
/// otherwise).
pub(crate) struct Closing<'a> {
    pub(crate) reports: &'a [UsageReport<'a>],
    pub(crate) answer: Option<Bytes>,
    /// The cause the `session-ended` event names.
    pub(crate) cause: &'a str,
    pub(crate) now: i64,
}

/// Closes session `s` (a copy of `cur`, the record under `slot`'s lock):
/// counts its final usage, marks it closed, writes it with its usage and
/// events in one commit, then releases what was bound to it (its AF
/// sessions, its share of the spending-limit subscription) and forgets it
/// here: closed records live in the store only (API look-ups and late
/// retransmissions read them there), so memory stays the size of the open
/// sessions whatever the churn and the retention.
pub(crate) async fn close(
    runner: &Runner,
    rx: &Rx,
    sy: &Sy,
    slot: &SessionSlot,
    cur: &GxSession,
    mut s: GxSession,
    closing: Closing<'_>,
) -> Result<Arc<GxSession>, DiameterError> {
    let Closing {
        reports,
        answer,
        cause,
        now,
    } = closing;
    let mut usage = None;
    let mut events = StagedEvents::default();
    if !reports.is_empty() {
        let sub = runner
            .subscribers
            .find(s.imsi.as_deref(), s.msisdn.as_deref());
        usage = runner
            .usage
            .begin_usage(&s.subscriber, sub.as_deref(), now)
            .await?;
        if let Some(u) = usage.as_mut() {
            runner.usage.count_reports(u, &mut s, reports, now);
            runner
                .events
                .quota_thresholds(u, sub.as_deref(), &mut events, now);
        }
    }
    s.state = SessionState::Closed;
    s.closed_ms = Some(now);
    s.updated_ms = now;
    if answer.is_some() {
        s.last_answer = answer;
    }
    events.push(runner.events.session_ended(&s, cause));
    let s = Arc::new(s);
    commit_session(runner, slot, s.clone(), usage, events, None).await?;
    rx.abort_afs(&s);
    runner.sessions.table().remove(&s.id);
    sy.sy_session_ended(cur);
    Ok(s)
}
