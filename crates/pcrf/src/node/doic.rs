//! The node's side of DOIC (RFC 7683): which connected Diameter peers speak
//! it, and the overload report it sends them while requests are shed.
//!
//! A peer is marked when one of its requests carries OC-Supported-Features
//! offering the loss algorithm, and forgotten when its connection closes,
//! so the operator can see which peers get the reports. The report starts
//! when admission sheds a request and is withdrawn once the queue emptied
//! within an interval.

use diameter::codec::Message;
use diameter::doic::{requests_doic, OverloadReporter};
use parking_lot::RwLock;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// The DOIC peers and the overload report.
#[derive(Default)]
pub struct Doic {
    /// Origin-Hosts of the peers that advertised DOIC, as their
    /// connections name them (the peer metrics use the same names).
    peers: RwLock<HashSet<Arc<str>>>,
    /// The report the answers carry to the peers that asked for one.
    reporter: OverloadReporter,
    /// Whether a report runs (so its end is sent once).
    reported: AtomicBool,
}

impl Doic {
    /// Marks `host` when `req` advertises DOIC. A peer already marked costs
    /// a read lock; the set is written once per connection.
    pub fn note(&self, host: Arc<str>, req: &Message) {
        if !requests_doic(req) || self.peers.read().contains(&host) {
            return;
        }
        self.peers.write().insert(host);
    }

    /// The peer's connection closed: what it advertised is gone with it.
    pub fn forget(&self, host: &str) {
        self.peers.write().remove(host);
    }

    /// Whether `host` advertised DOIC on its current connection.
    pub fn speaks(&self, host: &str) -> bool {
        self.peers.read().contains(host)
    }

    /// A request was shed: peers that speak DOIC are asked to send
    /// `percent` less for `validity` (renewed while shedding goes on).
    pub fn shedding(&self, percent: u32, validity: Duration) {
        self.reporter.report(percent, validity);
        self.reported.store(true, Relaxed);
    }

    /// A request was admitted: a report that runs is withdrawn once
    /// `overloaded` (asked only then) says the overload is over.
    pub fn settle(&self, overloaded: impl FnOnce() -> bool) {
        if self.reported.load(Relaxed) && !overloaded() {
            self.reported.store(false, Relaxed);
            self.reporter.end();
        }
    }

    /// The report, for the encoders of the answers.
    pub fn reporter(&self) -> &OverloadReporter {
        &self.reporter
    }
}
