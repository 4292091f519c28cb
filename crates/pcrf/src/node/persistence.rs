//! Where the node's changes go and what shares them: the store writer
//! (the answer to a request leaves only after its changes are committed
//! there), the PostgreSQL store's profiler and connection state when the
//! store is one, the notification outbox whose events are written in the
//! same commits, and the cluster membership of the nodes sharing the store.
//! A separate handle so that what writes or reads the store directly (the
//! REST operations, the cluster tasks, the transaction runner) is named.

use std::sync::Arc;

use crate::cluster::membership::Membership;
use crate::notify::Outbox;
use crate::store::postgres::PostgresHandles;
use crate::store::ShardedWriter;

use super::state::Node;

/// The persistence capability: the store writer, the PostgreSQL handles,
/// the outbox, the membership.
#[derive(Clone)]
pub struct Persistence {
    pub(super) node: Arc<Node>,
}

impl Persistence {
    /// The store writer.
    pub fn store(&self) -> &ShardedWriter {
        &self.node.persistence.writer
    }

    /// The PostgreSQL store's profiler and connection state, when it is one.
    pub(crate) fn pg(&self) -> Option<&PostgresHandles> {
        self.node.persistence.pg.as_ref()
    }

    /// Notifications to external systems: events are staged here and
    /// written in the commit of the change that caused them.
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.node.persistence.outbox
    }

    /// The nodes sharing the store and their liveness (this node alone on
    /// the embedded store).
    pub fn membership(&self) -> &Arc<Membership> {
        &self.node.persistence.membership
    }

    /// The nodes sharing the store, this one as it is now.
    pub(crate) fn cluster_view(&self) -> crate::cluster::membership::ClusterView {
        self.node
            .persistence
            .membership
            .view(self.node.sessions.len() as u64, self.node.policy.serving())
    }
}
