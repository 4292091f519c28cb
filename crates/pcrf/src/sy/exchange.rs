//! What one spending-limit exchange asks and what it got, the same for
//! either peer (an OCS over Sy, a CHF over N28), so that the service
//! (`service.rs`) keeps one logic and only the transport (`peer.rs`)
//! differs.

use crate::session::spending::{CounterReport, SySession};

/// A subscribe (the first of the subscriber's session) or a modify (the
/// whole list of counters, which replaces the subscription).
pub struct SubscribeRequest<'a> {
    /// The subscriber's session: its id, whether the peer holds it, and
    /// the CHF's subscription id.
    pub session: &'a SySession,
    pub imsi: Option<&'a str>,
    pub msisdn: Option<&'a str>,
    /// Every counter of the subscription (subscribed and new).
    pub counters: &'a [String],
    /// Where a CHF notifies (N28 only): the session's callback URI.
    pub notify_uri: &'a str,
}

/// How a peer took a subscribe.
#[derive(Debug, PartialEq, Eq)]
pub enum Subscribed {
    /// The statuses it reported; with a CHF, the subscription's id (none
    /// on a modify, which keeps it).
    Accepted {
        reports: Vec<CounterReport>,
        subscription: Option<String>,
    },
    /// It does not know these counters (Sy 5570, N28 400
    /// UNKNOWN_POLICY_COUNTERS); empty when it named none.
    UnknownCounters(Vec<String>),
    /// Any other refusal, or an answer that could not be read: why.
    Refused(String),
}

/// A peer's answer.
#[derive(Debug)]
pub struct Answer<T> {
    /// Which peer answered (the OCS's Origin-Host, the CHF's URI).
    pub peer: String,
    /// The result code counted in the metrics (for a CHF, the one a
    /// Diameter answer would carry: 2001, 5570, 5002, 5012).
    pub code: u32,
    pub outcome: T,
}

/// No peer answered: why.
#[derive(Debug)]
pub struct NoAnswer(pub String);

impl std::fmt::Display for NoAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
