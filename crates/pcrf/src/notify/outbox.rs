//! The outbox in memory: every event committed and not yet delivered, per
//! sink, in lanes (a subscriber's events always take the same lane, so a
//! lane delivering one at a time keeps them in order). The store holds the
//! same events (written in the commit that caused them, removed once a sink
//! acknowledged them); this is what the delivery tasks work from, refilled
//! from the store at start-up.
//!
//! The backlog is bounded: `stage` refuses an event when the deliveries
//! waiting (one per event and sink) would pass `[notifications].max_backlog`.
//! The refused event is never written, counted as dropped for each sink it
//! was routed to and logged; the request that caused it goes on, never
//! waiting for room. Events already committed are never dropped.
//!
//! Peer events (`peer.up`, `peer.down`) have their own share of the bound,
//! a tenth of it: a gateway that connects and disconnects hundreds of times
//! makes two events each time, and would otherwise fill the backlog while
//! a receiver is down, so that the next subscriber event, the one a
//! receiver bills or alerts on, is dropped. Past its share a new peer event
//! is dropped (counted in `dropped` and `peer_dropped`) while subscriber
//! events still find room.

use super::config::{NotificationsConfig, SinkConfig, SinkKind};
use super::event::Event;
use crate::store::Change;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use tokio::sync::Notify;

/// Peer events may hold at most `max_backlog / PEER_SHARE_DIVISOR` of the
/// backlog (at least one delivery).
const PEER_SHARE_DIVISOR: usize = 10;

fn is_peer_event(name: &str) -> bool {
    name.starts_with("peer.")
}

/// One lane of a sink: its events by sequence number.
#[derive(Default)]
pub struct Lane {
    pub(super) queue: Mutex<BTreeMap<u64, Arc<Event>>>,
    pub(super) wake: Notify,
}

/// Counters of one sink since start.
#[derive(Default)]
pub struct SinkCounters {
    pub delivered: AtomicU64,
    /// Attempts that failed (each is retried).
    pub failed: AtomicU64,
    /// Events refused for want of room in the backlog.
    pub dropped: AtomicU64,
    /// Of `dropped`, the peer events refused because peer events held
    /// their whole share.
    pub peer_dropped: AtomicU64,
}

/// One sink's part of the outbox.
pub struct SinkQueue {
    pub cfg: SinkConfig,
    pub name: Arc<str>,
    pub lanes: Vec<Lane>,
    pub counters: SinkCounters,
    pub pending: AtomicUsize,
    pub last_error: Mutex<Option<String>>,
}

impl SinkQueue {
    fn lane_of(&self, event: &Event) -> &Lane {
        let h = xxhash_rust::xxh3::xxh3_64(event.subscriber_key().as_bytes());
        &self.lanes[(h % self.lanes.len() as u64) as usize]
    }

    /// Seq of the oldest event waiting, if any.
    pub fn oldest(&self) -> Option<u64> {
        self.lanes
            .iter()
            .filter_map(|l| l.queue.lock().keys().next().copied())
            .min()
    }
}

/// The outbox.
pub struct Outbox {
    max_backlog: usize,
    backlog: AtomicUsize,
    /// The part of `max_backlog` peer events may hold, and what they hold.
    max_peer_backlog: usize,
    peer_backlog: AtomicUsize,
    next_seq: AtomicU64,
    pub(super) sinks: Vec<Arc<SinkQueue>>,
    /// Refusals since the last warning (logged at most once a second).
    last_drop_log: Mutex<Option<std::time::Instant>>,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("sinks", &self.sinks.len())
            .field("backlog", &self.backlog())
            .finish()
    }
}

/// An event admitted to the backlog and not yet committed: put
/// `change()` in the commit of the state change that caused it, then
/// `publish()`. Dropped unpublished (the commit failed), it gives its room
/// back.
pub struct Staged {
    outbox: Arc<Outbox>,
    event: Option<Arc<Event>>,
}

impl Staged {
    pub fn event(&self) -> Option<&Arc<Event>> {
        self.event.as_ref()
    }

    /// The write that makes the event durable.
    pub fn change(&self) -> Option<Change> {
        self.event.clone().map(Change::PutEvent)
    }

    /// Hands the committed event to its sinks' delivery.
    pub fn publish(mut self) {
        if let Some(e) = self.event.take() {
            self.outbox.enqueue(e);
        }
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if let Some(e) = self.event.take() {
            self.outbox.release(&e.name, e.sinks.len());
        }
    }
}

/// Microseconds since the epoch: new sequence numbers start above those of
/// any earlier run (which could only have made fewer than a million events
/// a second).
fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl Outbox {
    /// The outbox of `cfg`'s sinks (none: every event is ignored).
    pub fn new(cfg: &NotificationsConfig) -> Arc<Outbox> {
        let sinks = cfg
            .sinks
            .iter()
            .map(|s| {
                Arc::new(SinkQueue {
                    cfg: s.clone(),
                    name: Arc::from(s.name.as_str()),
                    lanes: (0..s.concurrency.max(1)).map(|_| Lane::default()).collect(),
                    counters: SinkCounters::default(),
                    pending: AtomicUsize::new(0),
                    last_error: Mutex::new(None),
                })
            })
            .collect();
        Arc::new(Outbox {
            max_backlog: cfg.max_backlog,
            backlog: AtomicUsize::new(0),
            max_peer_backlog: (cfg.max_backlog / PEER_SHARE_DIVISOR).max(1),
            peer_backlog: AtomicUsize::new(0),
            next_seq: AtomicU64::new(now_us()),
            sinks,
            last_drop_log: Mutex::new(None),
        })
    }

    /// An outbox with no sink.
    pub fn disabled() -> Arc<Outbox> {
        Outbox::new(&NotificationsConfig::default())
    }

    pub fn is_enabled(&self) -> bool {
        !self.sinks.is_empty()
    }

    pub fn max_backlog(&self) -> usize {
        self.max_backlog
    }

    /// Deliveries waiting, all sinks together.
    pub fn backlog(&self) -> usize {
        self.backlog.load(Relaxed)
    }

    pub fn sinks(&self) -> &[Arc<SinkQueue>] {
        &self.sinks
    }

    /// A number never handed out before by this node (sequence numbers
    /// skip it): makes the idempotency key of an event that has no natural
    /// one unique.
    pub fn next_id_hint(&self) -> u64 {
        self.next_seq.fetch_add(1, Relaxed)
    }

    /// Whether any sink takes events named `name` (a caller may skip
    /// building a payload otherwise).
    pub fn wants(&self, name: &str) -> bool {
        self.sinks.iter().any(|s| s.cfg.routes(name))
    }

    /// Makes an event and reserves its room in the backlog; `None` when no
    /// sink takes it, or when the backlog is full (then counted as dropped
    /// and logged).
    pub fn stage(
        self: &Arc<Self>,
        name: &str,
        subscriber: Option<&str>,
        key: String,
        payload: serde_json::Value,
        now_ms: i64,
    ) -> Option<Staged> {
        let sinks: Vec<&Arc<SinkQueue>> =
            self.sinks.iter().filter(|s| s.cfg.routes(name)).collect();
        if sinks.is_empty() {
            return None;
        }
        let n = sinks.len();
        if is_peer_event(name) {
            let before = self.peer_backlog.fetch_add(n, Relaxed);
            if before + n > self.max_peer_backlog {
                self.peer_backlog.fetch_sub(n, Relaxed);
                for s in &sinks {
                    s.counters.dropped.fetch_add(1, Relaxed);
                    s.counters.peer_dropped.fetch_add(1, Relaxed);
                }
                self.log_drop(name, subscriber, true);
                return None;
            }
        }
        let before = self.backlog.fetch_add(n, Relaxed);
        if before + n > self.max_backlog {
            self.backlog.fetch_sub(n, Relaxed);
            if is_peer_event(name) {
                self.peer_backlog.fetch_sub(n, Relaxed);
            }
            for s in &sinks {
                s.counters.dropped.fetch_add(1, Relaxed);
            }
            self.log_drop(name, subscriber, false);
            return None;
        }
        let seq = self.next_seq.fetch_add(1, Relaxed);
        let event = Event::new(
            seq,
            now_ms,
            name,
            subscriber,
            key,
            payload,
            sinks.iter().map(|s| s.name.clone()).collect(),
        );
        Some(Staged {
            outbox: self.clone(),
            event: Some(Arc::new(event)),
        })
    }

    /// Gives back the room of `deliveries` of an event named `name`.
    fn release(&self, name: &str, deliveries: usize) {
        self.backlog.fetch_sub(deliveries, Relaxed);
        if is_peer_event(name) {
            self.peer_backlog.fetch_sub(deliveries, Relaxed);
        }
    }

    /// `peer_share`: the event was refused for want of room in peer
    /// events' share, not in the whole backlog.
    fn log_drop(&self, name: &str, subscriber: Option<&str>, peer_share: bool) {
        let mut last = self.last_drop_log.lock();
        if last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(1)) {
            *last = Some(std::time::Instant::now());
            if peer_share {
                tracing::warn!(
                    event = name,
                    max_peer_backlog = self.max_peer_backlog,
                    "notification backlog: peer events hold their whole share; new peer event dropped (counted in pcrf_notifications_dropped_total)"
                );
            } else {
                tracing::warn!(
                    event = name,
                    subscriber,
                    max_backlog = self.max_backlog,
                    "notification backlog full: new event dropped (counted in pcrf_notifications_dropped_total)"
                );
            }
        }
    }

    /// Queues a committed event on each of its sinks.
    fn enqueue(&self, event: Arc<Event>) {
        for sink_name in &event.sinks {
            let Some(sink) = self.sinks.iter().find(|s| &s.name == sink_name) else {
                continue;
            };
            sink.pending.fetch_add(1, Relaxed);
            let lane = sink.lane_of(&event);
            lane.queue.lock().insert(event.seq, event.clone());
            lane.wake.notify_one();
        }
    }

    /// Refills the outbox with the events the store holds undelivered (at
    /// start-up, before any new event). Rows for a sink no longer configured
    /// are returned as acknowledgements to write: they can never be
    /// delivered, and are counted as dropped.
    pub fn recover(&self, stored: Vec<Event>) -> Vec<Change> {
        let mut forget = Vec::new();
        let mut max_seq = 0;
        for event in stored {
            max_seq = max_seq.max(event.seq);
            let mut known = Vec::new();
            for sink in &event.sinks {
                if self.sinks.iter().any(|s| &s.name == sink) {
                    known.push(sink.clone());
                } else {
                    tracing::warn!(event = %event.id(), sink = %sink,
                        "stored notification for a sink no longer configured: dropped");
                    forget.push(Change::AckEvent {
                        seq: event.seq,
                        sink: sink.clone(),
                        subscriber: event.subscriber_key().to_owned(),
                        provisioning: event.with_provisioning(),
                    });
                }
            }
            if known.is_empty() {
                continue;
            }
            // Recovered events may pass the bound: they are committed,
            // and never dropped; new ones wait for room.
            self.backlog.fetch_add(known.len(), Relaxed);
            if is_peer_event(&event.name) {
                self.peer_backlog.fetch_add(known.len(), Relaxed);
            }
            let event = Event {
                sinks: known,
                ..event
            };
            self.enqueue(Arc::new(event));
        }
        self.next_seq
            .fetch_max(max_seq.saturating_add(1).max(now_us()), Relaxed);
        forget
    }

    /// A delivery finished (acknowledged by the sink): its room is free.
    pub(super) fn delivered(&self, sink: &SinkQueue, lane: &Lane, seq: u64) {
        if let Some(event) = lane.queue.lock().remove(&seq) {
            sink.pending.fetch_sub(1, Relaxed);
            self.release(&event.name, 1);
            sink.counters.delivered.fetch_add(1, Relaxed);
        }
    }

    /// A snapshot for the API.
    pub fn status(&self) -> OutboxStatus {
        OutboxStatus {
            max_backlog: self.max_backlog,
            backlog: self.backlog(),
            max_peer_backlog: self.max_peer_backlog,
            peer_backlog: self.peer_backlog.load(Relaxed),
            sinks: self
                .sinks
                .iter()
                .map(|s| SinkStatus {
                    name: s.name.to_string(),
                    kind: s.cfg.kind,
                    backlog: s.pending.load(Relaxed),
                    oldest_event: s.oldest().map(super::event::id_text),
                    delivered: s.counters.delivered.load(Relaxed),
                    failed: s.counters.failed.load(Relaxed),
                    dropped: s.counters.dropped.load(Relaxed),
                    peer_dropped: s.counters.peer_dropped.load(Relaxed),
                    last_error: s.last_error.lock().clone(),
                })
                .collect(),
        }
    }
}

/// What `GET /v1/notifications/status` shows.
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct OutboxStatus {
    /// `[notifications].max_backlog`.
    pub max_backlog: usize,
    /// Deliveries waiting (one per event and sink), all sinks together.
    pub backlog: usize,
    /// The share of `max_backlog` peer events may hold (a tenth).
    pub max_peer_backlog: usize,
    /// Of `backlog`, the deliveries of peer events.
    pub peer_backlog: usize,
    pub sinks: Vec<SinkStatus>,
}

/// One sink in the status.
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct SinkStatus {
    pub name: String,
    #[schema(value_type = String)]
    pub kind: SinkKind,
    /// Events waiting for this sink.
    pub backlog: usize,
    /// Id of the oldest of them.
    pub oldest_event: Option<String>,
    pub delivered: u64,
    /// Failed attempts (each retried until delivered).
    pub failed: u64,
    /// Events refused because the backlog was full (or, for a peer
    /// event, peer events' share of it).
    pub dropped: u64,
    /// Of `dropped`, peer events refused because peer events held their
    /// share of the backlog.
    pub peer_dropped: u64,
    /// The last failure, kept after later successes.
    pub last_error: Option<String>,
}

impl serde::Serialize for SinkKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.label())
    }
}

impl crate::metrics::MetricsSource for Outbox {
    fn write(&self, out: &mut crate::metrics::Exposition) {
        use crate::metrics::Kind;
        let labels: Vec<[(&str, &str); 1]> =
            self.sinks.iter().map(|s| [("sink", &*s.name)]).collect();
        type Read = fn(&SinkQueue) -> u64;
        let families: [(&str, &str, Kind, Read); 4] = [
            (
                "pcrf_notifications_backlog",
                "Notifications committed and not yet delivered, per sink (bounded by [notifications].max_backlog, all sinks together).",
                Kind::Gauge,
                |s| s.pending.load(Relaxed) as u64,
            ),
            (
                "pcrf_notifications_delivered_total",
                "Notifications a sink acknowledged.",
                Kind::Counter,
                |s| s.counters.delivered.load(Relaxed),
            ),
            (
                "pcrf_notifications_failed_total",
                "Delivery attempts that failed (each is retried with backoff until delivered).",
                Kind::Counter,
                |s| s.counters.failed.load(Relaxed),
            ),
            (
                "pcrf_notifications_dropped_total",
                "New notifications not written because the backlog was full ([notifications].max_backlog).",
                Kind::Counter,
                |s| s.counters.dropped.load(Relaxed),
            ),
        ];
        for (name, help, kind, value) in families {
            let mut f = out.family(name, help, kind);
            for (sink, l) in self.sinks.iter().zip(&labels) {
                f.sample(l, value(sink));
            }
        }
        out.gauge(
            "pcrf_notifications_backlog_limit",
            "[notifications].max_backlog: deliveries that may wait, all sinks together.",
            self.max_backlog as u64,
        );
    }
}
