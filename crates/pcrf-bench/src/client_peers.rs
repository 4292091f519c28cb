//! The connections of one kind of emulated Diameter client (the PCEFs, the
//! AFs, the TDFs): each its own node connected to the PCRF, opened
//! together (the first that does not open fails the set-up, naming it),
//! picked round-robin, and disconnected together with DPR (REBOOTING).

use diameter::peer::{DisconnectCause, LocalNode, PeerSettings, PeerState};
use diameter::transport::{Handler, Initiator, Node, PeerHandle, PeerTable};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The open connections of a set of emulated clients, in node order.
pub struct ClientPeers {
    /// Taken out by [`ClientPeers::shutdown`].
    initiators: Mutex<Vec<Initiator>>,
    handles: Vec<PeerHandle>,
}

impl ClientPeers {
    /// Connects one node per `(local, handler)` to `target` and waits until
    /// every connection is open. On a connection that does not open within
    /// `timeout`, disconnects them all and says which one (`role` and its
    /// number from 1) and what to check (`hint`).
    pub async fn connect<H: Handler>(
        target: SocketAddr,
        settings: &Arc<PeerSettings>,
        nodes: impl IntoIterator<Item = (LocalNode, Arc<H>)>,
        timeout: Duration,
        role: &str,
        hint: &str,
    ) -> Result<ClientPeers, String> {
        let initiators: Vec<Initiator> = nodes
            .into_iter()
            .map(|(local, handler)| {
                Node::with_parts(Arc::new(local), settings.clone(), handler, PeerTable::new())
                    .connect(target, None)
            })
            .collect();
        let peers = ClientPeers {
            handles: initiators.iter().map(|i| i.handle()).collect(),
            initiators: Mutex::new(initiators),
        };
        for (i, h) in peers.handles.iter().enumerate() {
            let open = tokio::time::timeout(timeout, h.wait_state(|s| s == PeerState::Open))
                .await
                .is_ok();
            if !open {
                let state = h.state();
                peers.shutdown().await;
                return Err(format!(
                    "{role} {} could not open a Diameter connection to {target} within {timeout:?} (state {state:?}); {hint}",
                    i + 1,
                ));
            }
        }
        Ok(peers)
    }

    pub fn len(&self) -> usize {
        self.handles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// The connection of client `i` (modulo their number).
    pub fn handle(&self, i: usize) -> &PeerHandle {
        &self.handles[i % self.handles.len()]
    }

    /// Disconnects every client with DPR (REBOOTING: it may come back).
    pub async fn shutdown(&self) {
        let all: Vec<Initiator> =
            std::mem::take(&mut *self.initiators.lock().unwrap_or_else(|e| e.into_inner()));
        for i in all {
            i.shutdown(DisconnectCause::Rebooting).await;
        }
    }
}
