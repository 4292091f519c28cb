//! Per-peer counters for metrics, as plain atomics: cheap to bump on the
//! hot path (relaxed ordering, one cache line per connection), read with
//! [`PeerCounters::snapshot`]. Beside them the peer's last error (what an
//! operator asks first when a counter moves), behind a mutex taken only
//! when an error happens.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// The most recent error on a peer's connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastError {
    /// Unix milliseconds.
    pub at_ms: i64,
    /// What happened, e.g. "answered 3004: too many requests in flight".
    pub text: String,
}

/// Counters of one peer (one connection; an initiator keeps them across reconnects).
#[derive(Debug, Default)]
pub struct PeerCounters {
    pub(crate) messages_in: AtomicU64,
    pub(crate) messages_out: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
    pub(crate) writes: AtomicU64,
    pub(crate) requests_in: AtomicU64,
    pub(crate) requests_out: AtomicU64,
    pub(crate) answers_in: AtomicU64,
    pub(crate) error_answers_out: AtomicU64,
    pub(crate) too_busy: AtomicU64,
    pub(crate) request_timeouts: AtomicU64,
    pub(crate) unmatched_answers: AtomicU64,
    pub(crate) in_flight: AtomicU64,
    pub(crate) connects: AtomicU64,
    last_error: Mutex<Option<LastError>>,
}

/// A copy of [`PeerCounters`] at one moment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PeerCountersSnapshot {
    /// Messages read (all kinds).
    pub messages_in: u64,
    /// Messages written (all kinds).
    pub messages_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Socket writes: `messages_out / writes` is the coalescing factor.
    pub writes: u64,
    /// Application requests received.
    pub requests_in: u64,
    /// Requests we originated.
    pub requests_out: u64,
    /// Answers to our requests that found their waiter.
    pub answers_in: u64,
    /// Error answers the transport produced (protocol errors, handler errors).
    pub error_answers_out: u64,
    /// Requests shed with 3004 DIAMETER_TOO_BUSY.
    pub too_busy: u64,
    /// Our requests that got no answer in time.
    pub request_timeouts: u64,
    /// Answers with no waiter (late or unknown hop-by-hop id).
    pub unmatched_answers: u64,
    /// Requests from the peer being handled now.
    pub in_flight: u64,
    /// Connections opened (for an initiator: reconnects + 1).
    pub connects: u64,
}

impl PeerCounters {
    /// Reads every counter.
    pub fn snapshot(&self) -> PeerCountersSnapshot {
        PeerCountersSnapshot {
            messages_in: self.messages_in.load(Relaxed),
            messages_out: self.messages_out.load(Relaxed),
            bytes_in: self.bytes_in.load(Relaxed),
            bytes_out: self.bytes_out.load(Relaxed),
            writes: self.writes.load(Relaxed),
            requests_in: self.requests_in.load(Relaxed),
            requests_out: self.requests_out.load(Relaxed),
            answers_in: self.answers_in.load(Relaxed),
            error_answers_out: self.error_answers_out.load(Relaxed),
            too_busy: self.too_busy.load(Relaxed),
            request_timeouts: self.request_timeouts.load(Relaxed),
            unmatched_answers: self.unmatched_answers.load(Relaxed),
            in_flight: self.in_flight.load(Relaxed),
            connects: self.connects.load(Relaxed),
        }
    }

    /// The most recent error, if any.
    pub fn last_error(&self) -> Option<LastError> {
        self.last_error.lock().ok().and_then(|e| e.clone())
    }

    /// Records an error as the last one (bounded to 256 bytes of text).
    pub(crate) fn error(&self, text: impl Into<String>) {
        let mut text = text.into();
        if text.len() > 256 {
            let mut cut = 256;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        let at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(LastError { at_ms, text });
        }
    }

    #[inline]
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }
    #[inline]
    pub(crate) fn sub(c: &AtomicU64, n: u64) {
        c.fetch_sub(n, Relaxed);
    }
}
