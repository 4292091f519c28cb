//! Serving any session of a cluster: several nodes share one PostgreSQL
//! store, each holds in memory the sessions it serves, and a node that gets
//! a request for a session it does not hold reads it from the store and
//! serves it from then on ("takes it over": one path for Gx, Rx and the
//! REST operations). Every session and usage write is a compare-and-set on
//! the row's version, so a node whose copy is stale (another node served
//! the session or the subscriber meanwhile) writes nothing: the writer
//! fails only that request with a conflict, the node drops its copies, and
//! the request is handled again on fresh ones (docs/cluster.md).

use super::{Node, COMMIT_WAIT};
use crate::session::{SessionSlot, SessionState};
use crate::store::{Conflicted, StoreError};
use diameter::codec::DiameterError;
use diameter::peer::Jitter;
use diameter::result_code;
use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// How often a request is handled again after a write conflict before it
/// is answered like any store failure (5012). Each conflict means that the
/// other node's write went through; the waits between tries (see
/// `conflict_backoff`) let two nodes hammering one subscriber take turns.
const CONFLICT_RETRIES: usize = 10;

/// The message of the error a conflict turns into (5012 if it is still
/// there after the retries).
const CONFLICT: &str = "state written meanwhile by another node";

impl Node {
    /// The session's slot: the one in memory, or, on a store shared with
    /// other nodes, the open session read from the store and held here
    /// from now on. `Ok(None)`: no such open session. A store that cannot
    /// be read is an error (5012), not an unknown session: the PCEF must
    /// not drop a session because the database hiccuped.
    pub(crate) async fn find_or_take_over(
        &self,
        id: &str,
    ) -> Result<Option<Arc<SessionSlot>>, DiameterError> {
        if let Some(slot) = self.sessions.get(id) {
            return Ok(Some(slot));
        }
        if !self.store.is_shared() {
            return Ok(None);
        }
        let stored = read_in_time(id, self.store.read_session(id)).await?;
        let Some(s) = stored.filter(|s| s.state == SessionState::Open) else {
            return Ok(None);
        };
        match self.sessions.insert(Arc::new(s)) {
            Ok(slot) => {
                self.cluster.taken_over.fetch_add(1, Relaxed);
                tracing::info!(session = id, "session taken over from the store");
                Ok(Some(slot))
            }
            // Another request took it over meanwhile.
            Err(existing) => Ok(Some(existing)),
        }
    }

    /// On a store shared with other nodes: whether the session this node
    /// holds was written by another node since (it moved there: the agent
    /// routed a request of it elsewhere); if so its copy here is dropped,
    /// so that only the node holding it now re-decides it and counts it
    /// among the sessions it holds (its heartbeat). A store that cannot be
    /// read keeps the copy (a stale one would conflict at its next write).
    /// For pushes outside a CCR, not the hot path: one read per session.
    pub(crate) async fn moved_away(&self, id: &str) -> bool {
        if !self.store.is_shared() {
            return false;
        }
        let Some(slot) = self.sessions.get(id) else {
            return false;
        };
        // No write of this node's own in flight while it compares.
        let _g = slot.lock().await;
        let held = slot.load().version.get();
        let read = tokio::time::timeout(COMMIT_WAIT, self.store.read_session(id)).await;
        let moved = match read {
            Ok(Ok(Some(stored))) => stored.version.get() != held,
            // Deleted by another node.
            Ok(Ok(None)) => true,
            Ok(Err(_)) | Err(_) => false,
        };
        if moved {
            self.sessions.remove(id);
            tracing::info!(session = id, "session moved to another node; copy dropped");
        }
        moved
    }

    /// Takes over subscriber `key`'s open sessions that other nodes hold,
    /// so that an operation of this node's API (top-up, usage reset)
    /// re-decides them here and its RAR reaches the PCEF. Off the hot path:
    /// one store query per API call, none on the embedded store. How many
    /// open sessions of the subscriber the store listed (0 on the embedded
    /// store).
    pub(crate) async fn take_over_subscriber(&self, key: &str) -> Result<usize, DiameterError> {
        if !self.store.is_shared() {
            return Ok(0);
        }
        let ids = read_in_time(key, self.store.sessions_of(key)).await?;
        for id in &ids {
            if !self.refresh(id).await {
                self.find_or_take_over(id).await?;
            }
        }
        Ok(ids.len())
    }

    /// Brings the copy of session `id` held here up to the stored record
    /// when another node wrote it since (one read, under the session's
    /// lock). Whether a copy is held here now: none when none was, or when
    /// the session was closed or deleted meanwhile (the copy is dropped).
    /// A store that cannot be read keeps the copy (a stale one conflicts at
    /// its next write).
    async fn refresh(&self, id: &str) -> bool {
        let Some(slot) = self.sessions.get(id) else {
            return false;
        };
        let _g = slot.lock().await;
        // A write conflict of another request may have dropped this copy
        // while this one waited for its lock: it is then no longer the
        // copy held here, and the caller reads the session afresh.
        if !self
            .sessions
            .get(id)
            .is_some_and(|now| Arc::ptr_eq(&now, &slot))
        {
            return false;
        }
        let held = slot.load().version.get();
        match tokio::time::timeout(COMMIT_WAIT, self.store.read_session(id)).await {
            Ok(Ok(Some(stored))) if stored.version.get() == held => true,
            Ok(Ok(Some(stored))) if stored.state == SessionState::Open => {
                slot.publish(Arc::new(stored));
                self.cluster.taken_over.fetch_add(1, Relaxed);
                tracing::info!(session = id, "session read afresh from the store");
                true
            }
            Ok(Ok(_)) => {
                self.sessions.remove(id);
                false
            }
            Ok(Err(_)) | Err(_) => true,
        }
    }

    /// Drops what memory holds of rows another node wrote, so that the
    /// next request reads them afresh.
    pub(crate) fn forget_conflicted(&self, e: &StoreError) {
        if let StoreError::Conflict(rows) = e {
            for r in rows {
                match r {
                    Conflicted::Session(id) => {
                        self.sessions.remove(id);
                    }
                    Conflicted::Usage(subscriber) => self.usage.remove(subscriber),
                }
            }
        }
    }

    /// The error a write conflict answers with: `retrying_conflicts`
    /// handles the request again, at most `CONFLICT_RETRIES` times.
    pub(crate) fn conflict_error() -> DiameterError {
        DiameterError::new(result_code::DIAMETER_UNABLE_TO_COMPLY, CONFLICT)
    }

    /// Handles a request: `attempt(tries)` (`tries`: how often it was
    /// handled before), and again after each write conflict, whose stale
    /// copies `commit` dropped already, so the next try reads fresh ones.
    /// At most `CONFLICT_RETRIES` tries, with `conflict_backoff` between
    /// them; conflicts that persist are answered like any store failure
    /// (5012, counted in `store_failures`). `subject` names the request in
    /// the log (its Session-Id, or the subscriber). The one retry loop of
    /// Gx, Rx, Sd, Sy and the REST usage changes.
    pub(crate) async fn retrying_conflicts<T, F, Fut>(
        &self,
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
                Err(e) if Node::is_conflict(&e) && tries < CONFLICT_RETRIES => {
                    Node::conflict_backoff(tries).await;
                }
                Err(e) if Node::is_conflict(&e) => {
                    self.counters.store_failures.fetch_add(1, Relaxed);
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
        e.result_code == result_code::DIAMETER_UNABLE_TO_COMPLY && e.message == CONFLICT
    }
}

/// The wait after the `tries`-th write conflict: uniformly in
/// `0..=tries` ms, drawn from `jitter`.
fn conflict_wait(tries: usize, jitter: &mut Jitter) -> std::time::Duration {
    let max = std::time::Duration::from_millis(u64::try_from(tries).unwrap_or(u64::MAX));
    jitter.between(std::time::Duration::ZERO, max)
}

/// A store read of a take-over, bounded by `COMMIT_WAIT`. A store that
/// cannot be read, or not in time, is an error (5012, logged with
/// `subject`: a Session-Id, a subscriber, a look-up), never an unknown
/// session: the PCEF must not drop a session because the database
/// hiccuped.
pub(super) async fn read_in_time<T>(
    subject: &(impl std::fmt::Debug + ?Sized),
    read: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, DiameterError> {
    let error = match tokio::time::timeout(COMMIT_WAIT, read).await {
        Ok(Ok(found)) => return Ok(found),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {} ms", COMMIT_WAIT.as_millis()),
    };
    tracing::error!(?subject, %error, "the store could not be read; answering 5012");
    Err(DiameterError::new(
        result_code::DIAMETER_UNABLE_TO_COMPLY,
        "session could not be read from the store",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

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
