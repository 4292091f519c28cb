//! The envelope every request of every application runs in, written once:
//! admission control (shed under overload, with a DOIC report to the peers
//! that speak it), the conflict retry (a write another runner made meanwhile
//! wrote nothing here: the request is handled again on fresh copies, a few
//! times at most), the request's metrics and its closing log line.
//!
//! [`commit_session`] is the other end: the one write and the publishing
//! that close every session transaction.
//!
//! An application adapter decodes its request, names its command, its
//! admission class and its subject (the Session-Id a conflict is logged
//! under), and hands the one attempt to [`serve`]; it writes none of the
//! above itself. The request's span (Session-Id, peer, application,
//! command) is opened one layer up, by the dispatcher, so that it also
//! covers decoding.

pub(crate) mod push;
pub(crate) mod session_core;
pub(crate) mod session_step;

use crate::admission::Class;
use crate::metrics::Command;
use crate::node::events::StagedEvents;
use crate::node::{
    usage_change, Answered, Capabilities, Events, Persistence, Policy, Sessions, Signalling,
    Subscribers, Telemetry, UsageLedger, UsageStep, COMMIT_WAIT,
};
use crate::notify::Staged;
use crate::session::{GxSession, SessionSlot};
use crate::session_message::Identity;
use crate::store::{Change, StoreError};
use crate::usage::table::UsageSlot;
use crate::usage::SubscriberUsage;
use bytes::{Bytes, BytesMut};
use diameter::codec::{DiameterError, Message, MessageBuilder, FLAG_E};
use diameter::dict::avp;
use diameter::doic::OverloadReporter;
use diameter::peer::Jitter;
use diameter::result_code;
use diameter::transport::request_received_at;
use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a DOIC report asks of reacting PCEFs while requests are shed: send
/// 30% less, for 10 s at a time (renewed while shedding goes on).
pub(crate) const OVERLOAD_REDUCTION_PERCENT: u32 = 30;
pub(crate) const OVERLOAD_REPORT_VALIDITY: Duration = Duration::from_secs(10);

/// The transaction runner: what every adapter hands its attempts to (the
/// request envelope, the session steps, the pushes, the commits). It holds
/// the capabilities a transaction spans; they are private to `txn`, so an
/// adapter reaches through the runner only what its functions do.
#[derive(Clone)]
pub struct Runner {
    sessions: Sessions,
    subscribers: Subscribers,
    usage: UsageLedger,
    policy: Policy,
    signalling: Signalling,
    persistence: Persistence,
    events: Events,
    telemetry: Telemetry,
}

impl Runner {
    pub fn new(caps: &Capabilities) -> Runner {
        Runner {
            sessions: caps.sessions.clone(),
            subscribers: caps.subscribers.clone(),
            usage: caps.usage.clone(),
            policy: caps.policy.clone(),
            signalling: caps.signalling.clone(),
            persistence: caps.persistence.clone(),
            events: caps.events.clone(),
            telemetry: caps.telemetry.clone(),
        }
    }

    /// Persists changes; the caller answers only after this returns Ok.
    pub(crate) async fn commit(&self, changes: Vec<Change>) -> Result<(), DiameterError> {
        let res = tokio::time::timeout(COMMIT_WAIT, self.persistence.store().submit(changes)).await;
        let err = match res {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e @ StoreError::Conflict(_))) => {
                // Nothing was written: the copies were stale. Dropped
                // here, read again when the request is handled again.
                tracing::info!(error = %e, "state written by another node; handling the request again");
                self.sessions.forget_conflicted(&e);
                return Err(Sessions::conflict_error());
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => "store did not commit in time".to_string(),
        };
        self.telemetry
            .counters()
            .store_failures
            .fetch_add(1, Relaxed);
        tracing::error!(error = %err, "state change not committed; answering DIAMETER_UNABLE_TO_COMPLY");
        Err(DiameterError::new(
            result_code::DIAMETER_UNABLE_TO_COMPLY,
            "state could not be stored",
        ))
    }
}

/// What the envelope needs to know of a decoded request.
pub(crate) struct Request<'a> {
    /// The request as it arrived (a shed request is answered from it).
    pub(crate) message: &'a Message,
    /// The command its metrics are counted under.
    pub(crate) command: Command,
    /// New state (shed first under overload) or existing state.
    pub(crate) class: Class,
    /// The Session-Id, for the log line of conflicts that persisted.
    pub(crate) subject: &'a str,
    /// When the request was read off the connection (its metrics' start).
    pub(crate) started: Instant,
}

/// Admits `req`, runs `attempt` until it does not end in a write conflict
/// (at most a few times), counts the result and logs it. `attempt` gets the
/// number of earlier tries (0 the first time).
pub(crate) async fn serve<F, Fut>(
    runner: &Runner,
    req: Request<'_>,
    attempt: F,
) -> Result<Bytes, DiameterError>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<Answered, DiameterError>>,
{
    let Ok(_permit) = runner
        .signalling
        .admission()
        .admit(req.class, request_received_at())
    else {
        runner.telemetry.metrics().request(
            req.command,
            result_code::DIAMETER_TOO_BUSY,
            req.started.elapsed(),
        );
        // Peers that speak DOIC are asked to send less for a while.
        runner
            .signalling
            .doic()
            .shedding(OVERLOAD_REDUCTION_PERCENT, OVERLOAD_REPORT_VALIDITY);
        return Ok(too_busy_answer(
            req.message,
            runner.signalling.me(),
            runner.signalling.doic().reporter(),
        ));
    };
    // The queue emptied within an interval: the report is withdrawn.
    runner
        .signalling
        .doic()
        .settle(|| runner.signalling.admission().overloaded());
    let result = retrying_conflicts(runner, req.subject, attempt).await;
    let code = match &result {
        Ok(a) => a.code,
        Err(e) => e.result_code,
    };
    let us = req.started.elapsed();
    runner.telemetry.metrics().request(req.command, code, us);
    if let Ok(Answered {
        decided_by: Some(version),
        ..
    }) = &result
    {
        runner
            .policy
            .engine()
            .count_answer(*version, code == result_code::DIAMETER_SUCCESS, us);
    }
    match &result {
        Err(e) => tracing::info!(command = req.command.label(), error = %e, "request refused"),
        Ok(_) => tracing::debug!(
            command = req.command.label(),
            result = code,
            us = us.as_micros() as u64,
            "answered"
        ),
    }
    result.map(|a| a.bytes)
}

/// The end of a session transaction, the same for every interface: the
/// session, the subscriber's accumulators (when the request changed them)
/// and the staged events go to the store in one write; only once it is
/// durable are the events delivered, the session published to readers and
/// the accumulators released. With `unchanged_from` (the record the
/// request started from) a session that changed nothing durable, with no
/// usage and no event, is not written at all (counted as a skipped
/// write). Call with the session's lock held.
pub(crate) async fn commit_session(
    runner: &Runner,
    slot: &SessionSlot,
    s: Arc<GxSession>,
    usage: Option<UsageStep>,
    events: StagedEvents,
    unchanged_from: Option<&GxSession>,
) -> Result<(), DiameterError> {
    let usage_write = usage_change(&usage);
    let unchanged = unchanged_from.is_some_and(|cur| s.durably_equal(cur));
    if unchanged && usage_write.is_none() && events.is_empty() {
        runner
            .telemetry
            .counters()
            .writes_skipped
            .fetch_add(1, Relaxed);
    } else {
        let mut changes = vec![Change::PutSession(s.clone())];
        changes.extend(usage_write);
        changes.extend(events.changes());
        runner.commit(changes).await?;
        events.publish();
    }
    slot.publish(s);
    if let Some(step) = usage {
        UsageLedger::finish_usage(step);
    }
    Ok(())
}

/// Runs `step` on session `id` held for one transaction: the session in
/// memory, or on a shared store the open one read from it and held here
/// from now on; its update lock taken for the whole step (a request for
/// the same session waits for it); its record as it is now. `Ok(None)`:
/// no such open session, for the adapter to answer in its protocol.
pub(crate) async fn with_session<R>(
    runner: &Runner,
    id: &str,
    step: impl AsyncFnOnce(&SessionSlot, Arc<GxSession>) -> Result<R, DiameterError>,
) -> Result<Option<R>, DiameterError> {
    let Some(slot) = runner.sessions.find_or_take_over(id).await? else {
        return Ok(None);
    };
    holding(&slot, async |cur| step(&slot, cur).await)
        .await
        .map(Some)
}

/// Runs `step` on the session of `slot`, found by the adapter (through a
/// binding: an AF's or a TDF's session, a subscriber's Sy state), held
/// for one transaction: its update lock taken for the whole step (a
/// request for the same session waits for it), its record as it is now.
/// The step ends with [`commit_session`] or [`commit_record`] when it
/// changes the record.
pub(crate) async fn holding<R>(
    slot: &SessionSlot,
    step: impl AsyncFnOnce(Arc<GxSession>) -> R,
) -> R {
    let _g = slot.lock().await;
    step(slot.load()).await
}

/// Writes session `s` alone (no usage, no event) and publishes it: the
/// end of a transaction that changed only the record (an AF session, a
/// TDF session, a spending-limit subscription). Call with the session's
/// lock held.
pub(crate) async fn commit_record(
    runner: &Runner,
    slot: &SessionSlot,
    s: Arc<GxSession>,
) -> Result<(), DiameterError> {
    commit_session(runner, slot, s, None, StagedEvents::default(), None).await
}

/// The end of a transaction on a subscriber's usage alone (an operator's
/// top-up or reset, a period's end): `next` with the event it staged, in
/// one commit, then both published. A write conflict (another runner wrote
/// the row meanwhile) drops the copy held here, so that the next try
/// reads the row again. Call with the usage slot's lock held.
pub(crate) async fn commit_usage(
    runner: &Runner,
    slot: &UsageSlot,
    next: Arc<SubscriberUsage>,
    staged: Option<Staged>,
) -> Result<(), StoreError> {
    let mut changes = vec![Change::PutUsage(next.clone())];
    changes.extend(staged.as_ref().and_then(|s| s.change()));
    if let Err(e) = runner.persistence.store().submit(changes).await {
        runner.sessions.forget_conflicted(&e);
        return Err(e);
    }
    slot.publish(next);
    if let Some(s) = staged {
        s.publish();
    }
    Ok(())
}

/// Counts a request refused before it reached [`serve`] (it did not
/// decode): its metrics and its log line, as `serve` writes them.
pub(crate) fn refused(runner: &Runner, command: Command, started: Instant, e: &DiameterError) {
    runner
        .telemetry
        .metrics()
        .request(command, e.result_code, started.elapsed());
    tracing::info!(command = command.label(), error = %e, "request refused");
}

/// How often a request is handled again after a write conflict before it
/// is answered like any store failure (5012). Each conflict means that the
/// other runner's write went through; the waits between tries (see
/// `conflict_backoff`) let two nodes hammering one subscriber take turns.
const CONFLICT_RETRIES: usize = 10;

/// Handles a request: `attempt(tries)` (`tries`: how often it was
/// handled before), and again after each write conflict, whose stale
/// copies `commit` dropped already, so the next try reads fresh ones.
/// At most `CONFLICT_RETRIES` tries, with `conflict_backoff` between
/// them; conflicts that persist are answered like any store failure
/// (5012, counted in `store_failures`). `subject` names the request in
/// the log (its Session-Id, or the subscriber). The one retry loop of
/// Gx, Rx, Sd, Sy and the REST usage changes.
pub(crate) async fn retrying_conflicts<T, F, Fut>(
    runner: &Runner,
    subject: &str,
    mut attempt: F,
) -> Result<T, DiameterError>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = Result<T, DiameterError>>,
{
    let mut tries = 0;
    loop {
        let r = attempt(tries).await;
        tries += 1;
        match r {
            Err(e) if is_conflict(&e) && tries < CONFLICT_RETRIES => {
                conflict_backoff(tries).await;
            }
            Err(e) if is_conflict(&e) => {
                runner
                    .telemetry
                    .counters()
                    .store_failures
                    .fetch_add(1, Relaxed);
                tracing::error!(
                    subject,
                    tries,
                    "write conflicts persisted; answering DIAMETER_UNABLE_TO_COMPLY"
                );
                return Err(e);
            }
            r => return r,
        }
    }
}

/// Waits before handling a request again after its `tries`-th
/// conflict: a random 0..=tries ms, so that two nodes retrying against
/// each other fall out of step.
async fn conflict_backoff(tries: usize) {
    let wait = conflict_wait(tries, &mut Jitter::from_entropy());
    tokio::time::sleep(wait).await;
}

/// Whether a request failed on a write conflict (worth handling again).
fn is_conflict(e: &DiameterError) -> bool {
    e.result_code == result_code::DIAMETER_UNABLE_TO_COMPLY
        && e.message == crate::node::takeover::CONFLICT
}

/// The wait after the `tries`-th write conflict: uniformly in
/// `0..=tries` ms, drawn from `jitter`.
fn conflict_wait(tries: usize, jitter: &mut Jitter) -> Duration {
    let max = Duration::from_millis(u64::try_from(tries).unwrap_or(u64::MAX));
    jitter.between(Duration::ZERO, max)
}

/// DIAMETER_TOO_BUSY (3004, a protocol error: E bit) for a shed request,
/// with an OC-OLR when the PCEF advertised DOIC.
pub(crate) fn too_busy_answer(req: &Message, me: &Identity, overload: &OverloadReporter) -> Bytes {
    let mut buf = BytesMut::with_capacity(256);
    let mut b = MessageBuilder::answer(&mut buf, req);
    b.set_flags(b.flags() | FLAG_E);
    b.result_code(result_code::DIAMETER_TOO_BUSY)
        .origin(&me.origin_host, &me.origin_realm)
        .str(avp::ERROR_MESSAGE, "PCRF overloaded; retry later");
    overload.append_to_answer(req, &mut b);
    b.finish();
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use diameter::dict::cmd;

    #[test]
    fn a_shed_request_gets_3004_and_an_olr_only_if_it_speaks_doic() {
        let me = Identity {
            origin_host: "pcrf.test".into(),
            origin_realm: "test".into(),
        };
        let request = |doic: bool| {
            let mut buf = BytesMut::new();
            let mut b = MessageBuilder::request(
                &mut buf,
                cmd::CREDIT_CONTROL,
                diameter::dict::app::GX,
                7,
                9,
            );
            b.str(avp::SESSION_ID, "pgw;1");
            if doic {
                b.group(avp::OC_SUPPORTED_FEATURES, |g| {
                    g.u64(avp::OC_FEATURE_VECTOR, 1);
                });
            }
            b.finish();
            Message::parse(buf.freeze()).expect("request")
        };
        let reporter = OverloadReporter::new();
        reporter.report(OVERLOAD_REDUCTION_PERCENT, OVERLOAD_REPORT_VALIDITY);
        let ans = Message::parse(too_busy_answer(&request(true), &me, &reporter)).expect("answer");
        assert_ne!(ans.flags() & FLAG_E, 0, "3004 is a protocol error");
        assert_eq!(ans.hop_by_hop(), 7);
        let rc = ans
            .find(avp::RESULT_CODE)
            .expect("avps")
            .expect("Result-Code");
        assert_eq!(rc.as_u32(), Ok(result_code::DIAMETER_TOO_BUSY));
        let olr = ans.find(avp::OC_OLR).expect("avps").expect("OC-OLR");
        let pct = olr
            .grouped()
            .find(avp::OC_REDUCTION_PERCENTAGE)
            .expect("grouped")
            .expect("reduction");
        assert_eq!(pct.as_u32(), Ok(OVERLOAD_REDUCTION_PERCENT));
        ans.validate().expect("a valid answer");
        let plain =
            Message::parse(too_busy_answer(&request(false), &me, &reporter)).expect("answer");
        assert!(plain.find(avp::OC_OLR).expect("avps").is_none());
    }

    #[test]
    fn a_conflict_wait_stays_within_its_tries_and_spreads() {
        let mut jitter = Jitter::seeded(11);
        for tries in [0usize, 1, 3, 10] {
            let waits: Vec<Duration> = (0..200)
                .map(|_| conflict_wait(tries, &mut jitter))
                .collect();
            let max = Duration::from_millis(tries as u64);
            assert!(waits.iter().all(|w| *w <= max), "{tries}: {waits:?}");
            if tries > 0 {
                let distinct: std::collections::HashSet<_> = waits.iter().collect();
                assert!(distinct.len() > 150, "{tries}: {}", distinct.len());
            }
        }
    }
}
