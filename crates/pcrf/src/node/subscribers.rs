//! The subscribers capability: the subscriber profiles held in memory and
//! the look-up every request makes (by IMSI, else by MSISDN). A separate
//! handle so that what reads or provisions profiles reaches nothing else.

use super::state::Node;
use crate::subscriber::{Subscriber, SubscriberTable};
use std::sync::Arc;

/// The subscriber table.
#[derive(Clone)]
pub struct Subscribers {
    pub(super) node: Arc<Node>,
}

impl Subscribers {
    /// The profiles held in memory.
    pub(crate) fn table(&self) -> &SubscriberTable {
        &self.node.subscribers
    }

    pub(crate) fn find(&self, imsi: Option<&str>, msisdn: Option<&str>) -> Option<Arc<Subscriber>> {
        imsi.and_then(|i| self.node.subscribers.get(i))
            .or_else(|| msisdn.and_then(|m| self.node.subscribers.by_msisdn(m)))
    }
}
