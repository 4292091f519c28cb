//! What a connection may cost before its capabilities exchange (our CEA to
//! its CER, or its CEA to ours) has made it a peer we know. Anyone who can
//! reach the port can open such connections, so each cost is bounded here:
//!
//! - memory: a message may be at most
//!   [`PeerSettings::max_message_len_awaiting_cer`](crate::peer::PeerSettings::max_message_len_awaiting_cer)
//!   long (a CER is a few hundred bytes; a longer announced length closes
//!   the connection before any of it is buffered), and the bytes that all
//!   such connections hold in partly received messages together are
//!   bounded by
//!   [`PeerSettings::max_buffered_awaiting_cer`](crate::peer::PeerSettings::max_buffered_awaiting_cer):
//!   a connection whose bytes would pass it is closed;
//! - the log: their protocol errors are counted by kind
//!   ([`PeerTable::errors_awaiting_cer`](super::PeerTable::errors_awaiting_cer))
//!   and their warnings pass a [`LogLimiter`], so a client opening
//!   thousands of bad connections a second writes a few lines a second.

use crate::log_limit::LogLimiter;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Warning lines about connections awaiting CER, at most, per second.
const LOG_LINES_PER_SECOND: u32 = 10;

/// Why a connection was closed before its capabilities exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorAwaitingCer {
    /// A message header that cannot be framed (version, length).
    Framing,
    /// A message longer than `max_message_len_awaiting_cer`.
    TooLong,
    /// Its partly received message would pass `max_buffered_awaiting_cer`.
    BufferBudget,
    /// A framed message whose header `Message::parse` refused.
    Undecodable,
    /// A TLS handshake that failed or did not finish in time.
    TlsHandshake,
}

impl ErrorAwaitingCer {
    /// Every kind, in the order of [`PeerTable::errors_awaiting_cer`](super::PeerTable::errors_awaiting_cer).
    pub const ALL: [ErrorAwaitingCer; 5] = [
        ErrorAwaitingCer::Framing,
        ErrorAwaitingCer::TooLong,
        ErrorAwaitingCer::BufferBudget,
        ErrorAwaitingCer::Undecodable,
        ErrorAwaitingCer::TlsHandshake,
    ];

    /// The kind as metrics label it.
    pub fn name(self) -> &'static str {
        match self {
            ErrorAwaitingCer::Framing => "framing",
            ErrorAwaitingCer::TooLong => "too_long",
            ErrorAwaitingCer::BufferBudget => "buffer_budget",
            ErrorAwaitingCer::Undecodable => "undecodable",
            ErrorAwaitingCer::TlsHandshake => "tls_handshake",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The node-wide part: error counts, buffered bytes, the log limiter.
pub(crate) struct AwaitingCerCosts {
    errors: [AtomicU64; ErrorAwaitingCer::ALL.len()],
    buffered: AtomicU64,
    log: LogLimiter,
}

impl Default for AwaitingCerCosts {
    fn default() -> Self {
        AwaitingCerCosts {
            errors: Default::default(),
            buffered: AtomicU64::new(0),
            log: LogLimiter::new(LOG_LINES_PER_SECOND),
        }
    }
}

impl AwaitingCerCosts {
    pub(crate) fn errors(&self) -> [(ErrorAwaitingCer, u64); ErrorAwaitingCer::ALL.len()] {
        ErrorAwaitingCer::ALL.map(|k| (k, self.errors[k.index()].load(Relaxed)))
    }

    pub(crate) fn buffered(&self) -> u64 {
        self.buffered.load(Relaxed)
    }

    /// Counts an error of a connection awaiting CER and warns about it,
    /// within the log's rate.
    pub(crate) fn error(
        &self,
        kind: ErrorAwaitingCer,
        remote: Option<SocketAddr>,
        message: &'static str,
        detail: &dyn std::fmt::Display,
    ) {
        self.errors[kind.index()].fetch_add(1, Relaxed);
        let Some(suppressed) = self.log.admit() else {
            return;
        };
        if suppressed == 0 {
            tracing::warn!(kind = kind.name(), ?remote, error = %detail, "{message}");
        } else {
            tracing::warn!(
                kind = kind.name(),
                ?remote,
                error = %detail,
                suppressed,
                "{message} ({suppressed} similar warnings about connections awaiting CER left out; see pcrf_diameter_errors_awaiting_cer_total)"
            );
        }
    }
}

/// The bytes one connection holds in a partly received message, charged
/// to the node-wide total while it awaits CER; released when it opens or
/// ends (on drop).
pub(crate) struct BufferCharge {
    costs: Arc<AwaitingCerCosts>,
    held: u64,
}

impl BufferCharge {
    pub(crate) fn new(costs: Arc<AwaitingCerCosts>) -> BufferCharge {
        BufferCharge { costs, held: 0 }
    }

    /// Charges `bytes` (replacing the previous charge); `false` when the
    /// node-wide total is then above `budget`.
    pub(crate) fn set(&mut self, bytes: usize, budget: usize) -> bool {
        let bytes = bytes as u64;
        let total = if bytes >= self.held {
            let add = bytes - self.held;
            self.costs.buffered.fetch_add(add, Relaxed) + add
        } else {
            let sub = self.held - bytes;
            self.costs.buffered.fetch_sub(sub, Relaxed) - sub
        };
        self.held = bytes;
        total <= budget as u64
    }

    pub(crate) fn release(&mut self) {
        if self.held != 0 {
            self.costs.buffered.fetch_sub(self.held, Relaxed);
            self.held = 0;
        }
    }
}

impl Drop for BufferCharge {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_add_up_node_wide_and_are_released() {
        let costs = Arc::new(AwaitingCerCosts::default());
        let mut a = BufferCharge::new(costs.clone());
        let mut b = BufferCharge::new(costs.clone());
        assert!(a.set(3000, 8000));
        assert!(b.set(4000, 8000));
        assert_eq!(costs.buffered(), 7000);
        assert!(!b.set(6000, 8000), "9000 is over the budget");
        assert!(a.set(1000, 8000), "a smaller charge replaces the larger");
        assert_eq!(costs.buffered(), 7000);
        a.release();
        assert_eq!(costs.buffered(), 6000);
        drop(b);
        assert_eq!(costs.buffered(), 0);
    }

    #[test]
    fn errors_are_counted_by_kind() {
        let costs = AwaitingCerCosts::default();
        for _ in 0..3 {
            costs.error(ErrorAwaitingCer::Framing, None, "bad framing", &"x");
        }
        costs.error(ErrorAwaitingCer::TlsHandshake, None, "TLS", &"y");
        let counts = costs.errors();
        assert_eq!(counts[0], (ErrorAwaitingCer::Framing, 3));
        assert_eq!(counts[4], (ErrorAwaitingCer::TlsHandshake, 1));
        assert_eq!(counts.iter().map(|(_, n)| n).sum::<u64>(), 4);
    }
}
