//! A Diameter node: our identity, settings, the application handler and
//! the table of open peers, shared by the node's server and initiators.
//!
//! This module is below everything that runs connections: the ways a node
//! starts them are defined next to what they start (`Node::listen` in
//! `server.rs`, `Node::connect` in `initiator.rs`, `Node::attach` in
//! `connection.rs`), so that those modules use the node and the node uses
//! none of them.

use super::handler::Handler;
use super::peer_table::PeerTable;
use crate::peer::{LocalNode, PeerSettings};
use std::sync::Arc;

pub(crate) struct NodeShared<H> {
    pub(crate) local: Arc<LocalNode>,
    pub(crate) settings: Arc<PeerSettings>,
    pub(crate) handler: Arc<H>,
    pub(crate) table: PeerTable,
}

/// One local Diameter node. Cheap to clone.
///
/// ```no_run
/// # async fn demo() -> std::io::Result<()> {
/// use diameter::peer::{Application, LocalNode, PeerSettings};
/// use diameter::transport::{Node, ServesNothing};
/// let local = LocalNode::new("pcrf.test.local", "test.local")
///     .with_application(Application::auth_vendor(16_777_238, 10415));
/// let node = Node::new(local, PeerSettings::default(), ServesNothing);
/// let server = node.listen("127.0.0.1:3868").await?;
/// tokio::spawn(server.run(async { let _ = tokio::signal::ctrl_c().await; }));
/// # Ok(()) }
/// ```
pub struct Node<H> {
    pub(crate) inner: Arc<NodeShared<H>>,
}

impl<H> Clone for Node<H> {
    fn clone(&self) -> Self {
        Node {
            inner: self.inner.clone(),
        }
    }
}

impl<H: Handler> Node<H> {
    /// A node with its own, empty [`PeerTable`].
    pub fn new(local: LocalNode, settings: PeerSettings, handler: H) -> Node<H> {
        Self::with_parts(
            Arc::new(local),
            Arc::new(settings),
            Arc::new(handler),
            PeerTable::new(),
        )
    }

    /// A node from shared parts (e.g. a handler the application also keeps).
    pub fn with_parts(
        local: Arc<LocalNode>,
        settings: Arc<PeerSettings>,
        handler: Arc<H>,
        table: PeerTable,
    ) -> Node<H> {
        Node {
            inner: Arc::new(NodeShared {
                local,
                settings,
                handler,
                table,
            }),
        }
    }

    /// Our identity.
    pub fn local(&self) -> &LocalNode {
        &self.inner.local
    }
    /// The settings every connection of this node uses.
    pub fn settings(&self) -> &PeerSettings {
        &self.inner.settings
    }
    /// The application handler.
    pub fn handler(&self) -> &Arc<H> {
        &self.inner.handler
    }
    /// Open peers by Origin-Host.
    pub fn peer_table(&self) -> &PeerTable {
        &self.inner.table
    }
}
