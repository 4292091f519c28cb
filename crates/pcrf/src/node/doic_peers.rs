//! Which connected Diameter peers speak DOIC (RFC 7683): a peer is marked
//! when one of its requests carries OC-Supported-Features offering the loss
//! algorithm, and forgotten when its connection closes, so the operator can
//! see which peers get the overload reports this node sends.

use diameter::codec::Message;
use diameter::doic::requests_doic;
use parking_lot::RwLock;
use std::collections::HashSet;
use std::sync::Arc;

/// Origin-Hosts of the peers that advertised DOIC, as their connections
/// name them (the peer metrics use the same names).
#[derive(Default)]
pub struct DoicPeers(RwLock<HashSet<Arc<str>>>);

impl DoicPeers {
    /// Marks `host` when `req` advertises DOIC. A peer already marked costs
    /// a read lock; the set is written once per connection.
    pub fn note(&self, host: Arc<str>, req: &Message) {
        if !requests_doic(req) || self.0.read().contains(&host) {
            return;
        }
        self.0.write().insert(host);
    }

    /// The peer's connection closed: what it advertised is gone with it.
    pub fn forget(&self, host: &str) {
        self.0.write().remove(host);
    }

    /// Whether `host` advertised DOIC on its current connection.
    pub fn contains(&self, host: &str) -> bool {
        self.0.read().contains(host)
    }
}
