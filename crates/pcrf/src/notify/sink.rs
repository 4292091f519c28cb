//! What a notification receiver must do for the delivery loop: take one
//! event and say whether the receiver has it. Retries, ordering, timeouts,
//! backoff and the acknowledgement in the store are the delivery loop's
//! (`delivery.rs`), so a new kind of receiver (Kafka, SMPP, ...) is one
//! file implementing this trait plus its line in `notify::build_sink`.

use super::event::Event;
use std::future::Future;
use std::pin::Pin;

/// Why an attempt failed (logged, kept in the status; the event is retried).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SinkError(pub String);

/// A boxed delivery future, so sinks can be held as trait objects.
pub type Delivery<'a> = Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send + 'a>>;

/// A receiver of events.
pub trait Sink: Send + Sync + 'static {
    /// Delivers one event. `Ok` only once the receiver has taken
    /// responsibility for it (a 2xx answer, a publisher confirm): the event
    /// is then removed from the store. May be called again for the same
    /// event after a failure or a restart (at least once).
    fn deliver<'a>(&'a self, event: &'a Event) -> Delivery<'a>;
}
