//! Policy pushes when an input changes outside a CCR: provisioning (profile,
//! top-up, usage reset), time (a time-of-day boundary, a period reset) and
//! the network (a cell's congestion). Each re-decides the affected sessions
//! and sends a RAR only where the decision changed. Pushes caused by one
//! event that may touch many sessions are spread evenly over
//! `[usage].spread_secs`, so a million sessions do not get their RAR in the
//! same second, with a bound on RARs awaiting their RAA.

use crate::control::ControlError;
use crate::gx::service::Gx;
use crate::node::{ecgi_of_location, now_ms};
use crate::pcc::{PushReason, PushSummary};
use crate::session::SessionState;
use crate::usage::spread::{next_boundary, Spread};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// RARs of one spread push awaiting their RAA at once.
const MAX_PUSHES_IN_FLIGHT: usize = 256;

impl Gx {
    /// Re-decides one session and records the outcome in the counters.
    async fn push_one(&self, id: &str, reason: PushReason) -> Result<bool, ControlError> {
        self.push_counters.decided.fetch_add(1, Relaxed);
        match self.push(id, reason.asks_report()).await {
            Ok(o) if o.rar_sent => {
                self.push_counters.rar_sent.fetch_add(1, Relaxed);
                Ok(true)
            }
            Ok(_) => {
                self.push_counters.unchanged.fetch_add(1, Relaxed);
                Ok(false)
            }
            Err(e) => {
                self.push_counters.failed.fetch_add(1, Relaxed);
                tracing::warn!(session = id, reason = reason.label(), error = %e, "push failed");
                Err(e)
            }
        }
    }

    /// Re-decides every open session of one subscriber now (a subscriber
    /// has few sessions); RAR where the decision changed. On a shared
    /// store, a session that moved to another node is left to that node.
    pub(crate) async fn push_subscriber(&self, key: &str, reason: PushReason) -> PushSummary {
        let mut sum = PushSummary::default();
        for id in self.sessions.table().ids_of_subscriber(key) {
            let open = self
                .sessions
                .table()
                .get(&id)
                .is_some_and(|s| s.load().state == SessionState::Open);
            if !open || self.sessions.moved_away(&id).await {
                continue;
            }
            sum.sessions += 1;
            match self.push_one(&id, reason).await {
                Ok(true) => sum.rar_sent += 1,
                Ok(false) => {}
                Err(_) => sum.failed += 1,
            }
        }
        sum
    }

    /// Re-decides `ids` in the background, spread evenly over
    /// `[usage].spread_secs` from now. Returns how many were scheduled.
    pub(crate) fn push_spread(&self, ids: Vec<String>, reason: PushReason) -> usize {
        let Some(this) = self.me_ref.upgrade() else {
            return 0;
        };
        let n = ids.len();
        if n == 0 {
            return 0;
        }
        let window = Duration::from_secs(self.settings.live().cfg.usage.spread_secs);
        tracing::info!(
            sessions = n,
            window_secs = window.as_secs(),
            reason = reason.label(),
            "pushes scheduled"
        );
        tokio::spawn(async move {
            let start = tokio::time::Instant::now();
            let gate = Arc::new(tokio::sync::Semaphore::new(MAX_PUSHES_IN_FLIGHT));
            for (id, offset) in ids.into_iter().zip(Spread::new(n, window)) {
                tokio::time::sleep_until(start + offset).await;
                let Ok(permit) = gate.clone().acquire_owned().await else {
                    break;
                };
                let this = this.clone();
                tokio::spawn(async move {
                    let _ = this.push_one(&id, reason).await;
                    drop(permit);
                });
            }
        });
        n
    }

    /// Open sessions whose last reported location is in `cell` (ECGI hex).
    pub(crate) fn sessions_in_cell(&self, cell: &str) -> Vec<String> {
        let cell = cell.to_ascii_lowercase();
        self.sessions
            .table()
            .list(
                None,
                |s| {
                    s.state == SessionState::Open
                        && s.location.as_deref().and_then(ecgi_of_location) == Some(cell.as_str())
                },
                usize::MAX,
            )
            .into_iter()
            .map(|s| s.id.to_string())
            .collect()
    }

    /// Every open session.
    fn open_session_ids(&self) -> Vec<String> {
        self.sessions
            .table()
            .list(None, |s| s.state == SessionState::Open, usize::MAX)
            .into_iter()
            .map(|s| s.id.to_string())
            .collect()
    }

    /// Rolls the accumulators of every subscriber with an open session
    /// whose period ended by `now_ms` (committing them), then pushes their
    /// sessions, spread. Returns how many subscribers were reset. Time is a
    /// parameter so that tests inject it.
    pub async fn reset_sweep(&self, now_ms: i64) -> usize {
        let cfg = self.usage.table().config_full();
        if cfg.is_empty() {
            return 0;
        }
        let mut reset = 0;
        let mut ids = Vec::new();
        // The subscribers with a session here (others roll lazily at their
        // next request); on a shared store their usage may not be in
        // memory yet: it is read first.
        for key in self.sessions.table().subscribers() {
            let sessions = self.sessions.table().ids_of_subscriber(&key);
            if sessions.is_empty() {
                continue;
            }
            let slot = match self.usage.table().get(&key) {
                Some(slot) => slot,
                None if self.persistence.store().is_shared() => self.usage.table().slot(&key),
                None => continue,
            };
            if !slot.loaded() {
                let _g = slot.lock().await;
                if self.usage.read_usage_if_needed(&slot, &key).await.is_err() {
                    continue;
                }
            }
            let ended = slot
                .load()
                .accumulators
                .values()
                .any(|a| a.period_end_ms.is_some_and(|end| end <= now_ms));
            if !ended {
                continue;
            }
            let profile = self.subscribers.table().get(&key);
            let _g = slot.lock().await;
            let mut next = (*slot.load()).clone();
            let rolled = next.roll(&cfg, crate::node::billing_day(profile.as_deref()), now_ms);
            if rolled.is_empty() {
                continue;
            }
            match crate::txn::commit_usage(&self.txn, &slot, Arc::new(next), None).await {
                Ok(()) => {
                    reset += 1;
                    self.push_counters.resets.fetch_add(1, Relaxed);
                    tracing::info!(subscriber = %key, accumulators = ?rolled, "usage period reset");
                    ids.extend(sessions);
                }
                Err(e) => {
                    // Written by another node meanwhile: read again next time.
                    tracing::error!(subscriber = %key, error = %e, "usage reset not stored; retried at the next sweep");
                }
            }
        }
        self.push_spread(ids, PushReason::PeriodReset);
        reset
    }

    /// The time-driven pushes until `stop`: at each configured time-of-day
    /// boundary every open session is re-decided; at each local midnight of
    /// the usage file's zone ended periods are reset (and once a minute, so
    /// a reset missed while the node was down or busy happens soon after).
    pub async fn run_schedule(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            let now = jiff::Timestamp::now();
            let boundaries = self.settings.live().cfg.usage.boundaries();
            let next_b = next_boundary(&boundaries, now, self.policy.runner().tz());
            let minute = now + jiff::SignedDuration::from_secs(60 - now.as_second().rem_euclid(60));
            let (wake, is_boundary) = match next_b {
                Some(b) if b <= minute => (b, true),
                _ => (minute, false),
            };
            let wait = now.duration_until(wake).unsigned_abs();
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return;
                    }
                    continue;
                }
            }
            if is_boundary {
                let ids = self.open_session_ids();
                tracing::info!(
                    sessions = ids.len(),
                    "time-of-day boundary: re-deciding every open session"
                );
                self.push_spread(ids, PushReason::TimeBoundary);
            }
            self.reset_sweep(now_ms()).await;
        }
    }
}

impl crate::metrics::MetricsSource for Gx {
    fn write(&self, out: &mut crate::metrics::Exposition) {
        let p = &self.push_counters;
        let counters: [(&str, &str, &std::sync::atomic::AtomicU64); 5] = [
            (
                "pcrf_pushes_decided_total",
                "Sessions re-decided because an input changed outside a CCR.",
                &p.decided,
            ),
            (
                "pcrf_pushes_rar_total",
                "Of them, sessions whose decision changed and got a RAR.",
                &p.rar_sent,
            ),
            (
                "pcrf_pushes_unchanged_total",
                "Of them, sessions whose decision did not change (no RAR).",
                &p.unchanged,
            ),
            (
                "pcrf_pushes_failed_total",
                "Pushes that failed (PCEF not connected, no RAA, error answer).",
                &p.failed,
            ),
            (
                "pcrf_usage_period_resets_total",
                "Subscribers whose accumulators were reset at a period boundary.",
                &p.resets,
            ),
        ];
        for (name, help, value) in counters {
            out.counter(name, help, value.load(Relaxed));
        }
    }
}
