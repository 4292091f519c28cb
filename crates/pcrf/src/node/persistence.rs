//! Where the node's changes go and what shares them: the store writer
//! (the answer to a request leaves only after its changes are committed
//! there), the PostgreSQL store's profiler and connection state when the
//! store is one, the notification outbox whose events are written in the
//! same commits, and the cluster membership of the nodes sharing the store.

use std::sync::Arc;

use crate::cluster::membership::Membership;
use crate::notify::Outbox;
use crate::store::postgres::PostgresHandles;
use crate::store::ShardedWriter;

/// The store writer, the PostgreSQL handles, the outbox, the membership.
pub struct Persistence {
    writer: ShardedWriter,
    pg: Option<PostgresHandles>,
    outbox: Arc<Outbox>,
    membership: Arc<Membership>,
}

impl Persistence {
    pub(crate) fn new(
        writer: ShardedWriter,
        pg: Option<PostgresHandles>,
        outbox: Arc<Outbox>,
        membership: Arc<Membership>,
    ) -> Persistence {
        Persistence {
            writer,
            pg,
            outbox,
            membership,
        }
    }

    pub fn writer(&self) -> &ShardedWriter {
        &self.writer
    }

    /// The PostgreSQL store's profiler and connection state, when it is one.
    pub(crate) fn pg(&self) -> Option<&PostgresHandles> {
        self.pg.as_ref()
    }

    /// Notifications to external systems: events are staged here and
    /// written in the commit of the change that caused them.
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// The nodes sharing the store and their liveness (this node alone on
    /// the embedded store).
    pub fn membership(&self) -> &Arc<Membership> {
        &self.membership
    }
}
