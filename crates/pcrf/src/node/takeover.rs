//! Serving any session of a cluster: several nodes share one PostgreSQL
//! store, each holds in memory the sessions it serves, and a node that gets
//! a request for a session it does not hold reads it from the store and
//! serves it from then on ("takes it over": one path for Gx, Rx and the
//! REST operations). Every session and usage write is a compare-and-set on
//! the row's version, so a node whose copy is stale (another node served
//! the session or the subscriber meanwhile) writes nothing: the writer
//! fails only that request with a conflict, the node drops its copies, and
//! the request is handled again on fresh ones (docs/cluster.md).

use super::{Sessions, COMMIT_WAIT};
use crate::session::{SessionSlot, SessionState};
use crate::store::{Conflicted, StoreError};
use diameter::codec::DiameterError;
use diameter::result_code;
use std::future::Future;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// The message of the error a conflict turns into (5012 if it is still
/// there after the retries).
pub(crate) const CONFLICT: &str = "state written meanwhile by another node";

impl Sessions {
    /// The session's slot: the one in memory, or, on a store shared with
    /// other nodes, the open session read from the store and held here
    /// from now on. `Ok(None)`: no such open session. A store that cannot
    /// be read is an error (5012), not an unknown session: the PCEF must
    /// not drop a session because the database hiccuped.
    pub(crate) async fn find_or_take_over(
        &self,
        id: &str,
    ) -> Result<Option<Arc<SessionSlot>>, DiameterError> {
        if let Some(slot) = self.node.sessions.get(id) {
            return Ok(Some(slot));
        }
        if !self.node.persistence.writer.is_shared() {
            return Ok(None);
        }
        let stored = read_in_time(id, self.node.persistence.writer.read_session(id)).await?;
        let Some(s) = stored.filter(|s| s.state == SessionState::Open) else {
            return Ok(None);
        };
        match self.node.sessions.insert(Arc::new(s)) {
            Ok(slot) => {
                self.node
                    .telemetry
                    .counters
                    .taken_over
                    .fetch_add(1, Relaxed);
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
        if !self.node.persistence.writer.is_shared() {
            return false;
        }
        let Some(slot) = self.node.sessions.get(id) else {
            return false;
        };
        // No write of this node's own in flight while it compares.
        let _g = slot.lock().await;
        let held = slot.load().version.get();
        let read =
            tokio::time::timeout(COMMIT_WAIT, self.node.persistence.writer.read_session(id)).await;
        let moved = match read {
            Ok(Ok(Some(stored))) => stored.version.get() != held,
            // Deleted by another node.
            Ok(Ok(None)) => true,
            Ok(Err(_)) | Err(_) => false,
        };
        if moved {
            self.node.sessions.remove(id);
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
        if !self.node.persistence.writer.is_shared() {
            return Ok(0);
        }
        let ids = read_in_time(key, self.node.persistence.writer.sessions_of(key)).await?;
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
        let Some(slot) = self.node.sessions.get(id) else {
            return false;
        };
        let _g = slot.lock().await;
        // A write conflict of another request may have dropped this copy
        // while this one waited for its lock: it is then no longer the
        // copy held here, and the caller reads the session afresh.
        if !self
            .node
            .sessions
            .get(id)
            .is_some_and(|now| Arc::ptr_eq(&now, &slot))
        {
            return false;
        }
        let held = slot.load().version.get();
        match tokio::time::timeout(COMMIT_WAIT, self.node.persistence.writer.read_session(id)).await
        {
            Ok(Ok(Some(stored))) if stored.version.get() == held => true,
            Ok(Ok(Some(stored))) if stored.state == SessionState::Open => {
                slot.publish(Arc::new(stored));
                self.node
                    .telemetry
                    .counters
                    .taken_over
                    .fetch_add(1, Relaxed);
                tracing::info!(session = id, "session read afresh from the store");
                true
            }
            Ok(Ok(_)) => {
                self.node.sessions.remove(id);
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
                        self.node.sessions.remove(id);
                    }
                    Conflicted::Usage(subscriber) => self.node.usage.remove(subscriber),
                }
            }
        }
    }

    /// The error a write conflict answers with: `retrying_conflicts`
    /// handles the request again, a few times at most.
    pub(crate) fn conflict_error() -> DiameterError {
        DiameterError::new(result_code::DIAMETER_UNABLE_TO_COMPLY, CONFLICT)
    }
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
