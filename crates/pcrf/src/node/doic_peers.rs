//! Which connected Diameter peers speak DOIC (RFC 7683): a peer is marked
//! when one of its requests carries OC-Supported-Features offering the loss
//! algorithm, and forgotten when its connection closes, so the operator can
//! see which peers get the overload reports this node sends.

use diameter::codec::Message;
use diameter::doic::requests_doic;
use parking_lot::RwLock;
use std::collections::HashSet;

/// Origin-Hosts (lowercase) of the peers that advertised DOIC.
#[derive(Default)]
pub struct DoicPeers(RwLock<HashSet<String>>);

impl DoicPeers {
    /// Marks `host` when `req` advertises DOIC. A peer already marked costs
    /// a read lock; the set is written once per connection.
    pub fn note(&self, host: &str, req: &Message) {
        if !requests_doic(req) {
            return;
        }
        let key = host.to_ascii_lowercase();
        if self.0.read().contains(&key) {
            return;
        }
        self.0.write().insert(key);
    }

    /// The peer's connection closed: what it advertised is gone with it.
    pub fn forget(&self, host: &str) {
        self.0.write().remove(&host.to_ascii_lowercase());
    }

    /// Whether `host` advertised DOIC on its current connection.
    pub fn contains(&self, host: &str) -> bool {
        self.0.read().contains(&host.to_ascii_lowercase())
    }
}
