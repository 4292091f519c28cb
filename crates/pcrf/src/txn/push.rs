//! The transaction of a push, written once for every session whatever
//! its interface: the runner re-decides an open session on its own
//! initiative (a profile change, a top-up, a time-of-day boundary, a
//! cell's congestion, an operator's reauth) and sends the difference to
//! its enforcement point: a Gx RAR to a PCEF, an N7 update notification to
//! an SMF (`Signalling::send_push` picks).
//!
//! It takes the session's lock for the whole exchange, so a request for
//! the session waits for the answer; decides with `session_core::redecide`
//! (which waits for nothing); sends only where the decision changed; and
//! ends in one commit of what the answer settled (`session_core`'s
//! `Redecided::settle`), or, where the enforcement point no longer knows
//! the session, in the commit that forgets it here too.

use super::commit_session;
use super::Runner;
use crate::control::{ControlError, ReauthOutcome};
use crate::node::events::StagedEvents;
use crate::node::{now_ms, UsageStep};
use crate::policy::Notification;
use crate::rx::service::Rx;
use crate::sd::service::Sd;
use crate::session::{GxSession, RuleDiff, SessionSlot, SessionState};
use crate::store::Change;
use crate::subscriber::Subscriber;
use crate::sy::service::Sy;
use crate::txn::session_core::{self, settle_revalidation};
use diameter::result_code;
use std::sync::Arc;

/// The services bound to a policy session, which a push tells when the
/// session changes or ends: the AF sessions (Rx, N5), the TDF session
/// (Sd, whose ADC rules follow the decision) and the spending-limit
/// subscription (Sy).
#[derive(Clone, Copy)]
pub(crate) struct Bound<'a> {
    pub(crate) rx: &'a Rx,
    pub(crate) sd: &'a Sd,
    pub(crate) sy: &'a Sy,
}

/// Re-decides session `id` and, if the decision changed, pushes the
/// difference to its enforcement point (`ask_report`: with a request to
/// report the usage of every monitored key).
pub(crate) async fn push(
    runner: &Runner,
    bound: Bound<'_>,
    id: &str,
    ask_report: bool,
) -> Result<ReauthOutcome, ControlError> {
    // Any runner's API reaches any session: one held elsewhere is taken over.
    let slot = runner
        .sessions
        .find_or_take_over(id)
        .await
        .map_err(|e| ControlError::Unavailable(e.message.to_string()))?
        .ok_or_else(|| ControlError::NotFound(format!("no session {id}")))?;
    let _g = slot.lock().await;
    let cur = slot.load();
    if cur.state == SessionState::Closed {
        return Err(ControlError::Conflict(format!("session {id} is closed")));
    }
    let sub = runner
        .subscribers
        .find(cur.imsi.as_deref(), cur.msisdn.as_deref());
    let now = now_ms();
    let spending = bound.sy.spending_of(&cur);
    let usage = runner
        .usage
        .usage_view(&cur.subscriber, sub.as_deref(), now);
    let refine = |id: &str, d| bound.sd.check_adc(id, d);
    let mut red = session_core::redecide(runner, &cur, sub.as_ref(), spending, usage, now, refine);
    let (mut next, mut grants) = red.grants(runner, &cur, sub.as_deref(), now);
    let mut diff = RuleDiff::between(&cur.installed, &red.decision);
    let spent = red.revalidation_spent_secs();
    settle_revalidation(&mut diff, &mut next.revalidation_at_ms, now, spent);
    let installed = diff.installed_names();
    let removed = diff.removed_names();
    let script_version = red.script_version();
    if diff.is_empty() && grants.is_empty() {
        // Only the TDF's part (ADC rules) may have changed: Sd follows.
        bound.sd.adopt_adc(&slot, &cur, &red.decision.adc).await?;
        if !red.notes.is_empty() {
            let mut s = (*slot.load()).clone();
            let mut events = StagedEvents::default();
            let step =
                notifications(runner, &red.notes, &mut s, sub.as_deref(), &mut events).await?;
            if !events.is_empty() {
                commit(runner, &slot, s, step, events).await?;
            }
        }
        return Ok(ReauthOutcome {
            rar_sent: false,
            result_code: None,
            installed: Vec::new(),
            removed: Vec::new(),
            script_version,
        });
    }
    if ask_report && !next.monitoring.keys.is_empty() {
        // Every key: the enforcement point reports what it counted since
        // its last report.
        grants.report = Some(Vec::new());
    }
    let answer = runner
        .signalling
        .send_push(&cur, Some(&diff), Some(&red.decision), None, &grants)
        .await?;
    drop(diff);
    let code = answer
        .result_code
        .or(answer.experimental_result)
        .unwrap_or(0);
    if code == result_code::DIAMETER_UNKNOWN_SESSION_ID {
        forget(runner, bound, &cur).await?;
        return Err(ControlError::Peer(format!(
            "PCEF does not know session {id} (5002); removed"
        )));
    }
    let took_it = code == result_code::DIAMETER_SUCCESS;
    let (reused, notes) = (red.reused(), std::mem::take(&mut red.notes));
    let mut s = red.settle(&cur, next, took_it, now_ms());
    let af_notices =
        bound
            .rx
            .af_notes_from_pcef(&cur, &mut s, &answer.rule_reports, &answer.charging_ids);
    runner
        .sessions
        .apply_rule_reports(&mut s, &answer.rule_reports);
    // What the policy asked to notify holds once its decision is in force
    // at the enforcement point.
    let mut events = StagedEvents::default();
    let mut step = None;
    if took_it {
        step = notifications(runner, &notes, &mut s, sub.as_deref(), &mut events).await?;
        let plan = sub.as_deref().and_then(|p| p.plan.as_deref());
        let names = Some((&installed[..], &removed[..]));
        events.push(
            runner
                .events
                .decision_logged(&s, plan, "push", reused, names),
        );
    }
    let s = if !s.durably_equal(&cur) || step.is_some() || !events.is_empty() {
        commit(runner, &slot, s, step, events).await?
    } else {
        let s = Arc::new(s);
        slot.publish(s.clone());
        s
    };
    bound.sd.sd_follow(&s);
    bound.rx.spawn_af_notices(af_notices);
    Ok(ReauthOutcome {
        rar_sent: true,
        result_code: Some(code),
        installed,
        removed,
        script_version,
    })
}

/// The enforcement point no longer has session `cur`: it is forgotten
/// here too, with its end told (no CCR-T or Delete will ever come) in the
/// same commit. An N7 session's binding goes before its record does.
async fn forget(runner: &Runner, bound: Bound<'_>, cur: &GxSession) -> Result<(), ControlError> {
    runner.signalling.unbind_at_bsf(cur).await;
    let mut ended = cur.clone();
    ended.state = SessionState::Closed;
    ended.closed_ms = Some(now_ms());
    let mut events = StagedEvents::default();
    events.push(runner.events.session_ended(&ended, "unknown-session"));
    let mut changes = vec![Change::delete_session(&*cur.id, &*cur.subscriber)];
    changes.extend(events.changes());
    runner
        .commit(changes)
        .await
        .map_err(|e| ControlError::Unavailable(e.message.to_string()))?;
    events.publish();
    runner.sessions.table().remove(&cur.id);
    bound.rx.abort_afs(cur);
    bound.sy.sy_session_ended(cur);
    Ok(())
}

/// The policy's `notify()` calls from a re-decision outside a request,
/// staged and deduplicated as on a request. The subscriber's usage is
/// taken only when one names an accumulator: its mark is written there.
/// `events` comes empty; the step is returned only when some were staged.
async fn notifications(
    runner: &Runner,
    notes: &[Notification],
    s: &mut GxSession,
    sub: Option<&Subscriber>,
    events: &mut StagedEvents,
) -> Result<Option<UsageStep>, ControlError> {
    if notes.is_empty() {
        return Ok(None);
    }
    let now = now_ms();
    let mut step = if notes.iter().any(|n| n.payload.get("accumulator").is_some()) {
        runner
            .usage
            .begin_usage(&s.subscriber, sub, now)
            .await
            .map_err(|e| ControlError::Unavailable(e.message.to_string()))?
    } else {
        None
    };
    runner
        .events
        .policy_notifications(notes, s, step.as_mut(), events, now);
    if events.is_empty() {
        // All emitted before: nothing to write, the usage is left as is.
        return Ok(None);
    }
    Ok(step)
}

/// Writes a pushed session with its events and usage marks in one commit,
/// then makes them visible.
async fn commit(
    runner: &Runner,
    slot: &SessionSlot,
    s: GxSession,
    step: Option<UsageStep>,
    events: StagedEvents,
) -> Result<Arc<GxSession>, ControlError> {
    let s = Arc::new(s);
    commit_session(runner, slot, s.clone(), step, events, None)
        .await
        .map_err(|e| ControlError::Unavailable(e.message.to_string()))?;
    Ok(s)
}
