//! The delivery loop: one task per lane of each sink takes the lane's
//! oldest event, hands it to the sink until the sink has it (retrying with
//! exponential backoff and jitter, forever: an event is never given up),
//! then records the acknowledgement in the store and moves to the next.
//! One event in flight per lane keeps each subscriber's events in order;
//! the lanes of a sink are its concurrency.
//!
//! The acknowledgement (`Change::AckEvent`) is queued to the group-commit
//! writer without waiting for its commit: if the node dies before it
//! commits, the event is delivered again after the restart, with the same
//! idempotency key (at least once).

use super::outbox::{Lane, Outbox, SinkQueue};
use super::sink::{Sink, SinkError};
use crate::store::{Change, ShardedWriter};
use diameter::peer::{Backoff, Jitter};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Starts the lanes of every sink; they stop when `stop` turns true.
pub fn start(
    outbox: &Arc<Outbox>,
    sinks: Vec<Arc<dyn Sink>>,
    store: ShardedWriter,
    stop: watch::Receiver<bool>,
) {
    for (queue, sink) in outbox.sinks().iter().zip(sinks) {
        for lane in 0..queue.lanes.len() {
            tokio::spawn(run_lane(
                outbox.clone(),
                queue.clone(),
                lane,
                sink.clone(),
                store.clone(),
                stop.clone(),
            ));
        }
    }
}

/// Waits `d`, or until `stop`; true when stopped.
async fn stopped_during(stop: &mut watch::Receiver<bool>, d: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(d) => false,
        _ = stop.wait_for(|v| *v) => true,
    }
}

async fn run_lane(
    outbox: Arc<Outbox>,
    queue: Arc<SinkQueue>,
    lane_index: usize,
    sink: Arc<dyn Sink>,
    store: ShardedWriter,
    mut stop: watch::Receiver<bool>,
) {
    let lane: &Lane = &queue.lanes[lane_index];
    let cfg = &queue.cfg;
    // The sink bounds each attempt itself; this only guards against a
    // sink that does not.
    let attempt_limit = cfg.timeout() + Duration::from_secs(1);
    loop {
        if *stop.borrow() {
            return;
        }
        let next = lane.queue.lock().values().next().cloned();
        let Some(event) = next else {
            tokio::select! {
                _ = lane.wake.notified() => continue,
                _ = stop.wait_for(|v| *v) => return,
            }
        };
        let mut backoff = Backoff::new(
            Duration::from_millis(cfg.retry_initial_ms),
            Duration::from_millis(cfg.retry_max_ms),
            None,
            Jitter::from_entropy(),
        );
        let mut failures: u32 = 0;
        loop {
            let out = tokio::time::timeout(attempt_limit, sink.deliver(&event))
                .await
                .unwrap_or_else(|_| Err(SinkError("attempt timed out".into())));
            match out {
                Ok(()) => break,
                Err(e) => {
                    queue.counters.failed.fetch_add(1, Relaxed);
                    if failures == 0 {
                        tracing::warn!(sink = %queue.name, event = %event.id(), name = %event.name,
                            error = %e, "notification not delivered; retrying with backoff");
                    }
                    *queue.last_error.lock() = Some(e.0);
                    failures = failures.saturating_add(1);
                    if stopped_during(&mut stop, backoff.next_delay()).await {
                        return;
                    }
                }
            }
        }
        if failures > 0 {
            tracing::info!(sink = %queue.name, event = %event.id(), attempts = failures + 1,
                "notification delivered after retries");
        }
        let ack = Change::AckEvent {
            seq: event.seq,
            sink: queue.name.clone(),
            subscriber: event.subscriber_key().to_owned(),
            provisioning: event.with_provisioning(),
        };
        match store.reserve_for(&ack).await {
            // Not awaited: see the module's comment.
            Ok(slot) => drop(slot.send(vec![ack])),
            Err(e) => tracing::warn!(sink = %queue.name, event = %event.id(), error = %e,
                "delivered notification not acknowledged in the store; it will be sent again after a restart"),
        }
        outbox.delivered(&queue, lane, event.seq);
    }
}
