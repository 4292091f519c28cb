//! The node and its application services, assembled from what start-up
//! loaded: the shared node first, then Sy (which the others read spending
//! statuses from), Rx and Sd, and Gx last (it tells the other three when a
//! Gx session changes). Gx is then handed to the node as the one that
//! re-decides sessions on Sd's and Sy's behalf and sends its RARs, N7 as
//! the one that notifies the SMFs, N5 to Rx as the one that notifies the
//! N5 AFs, and every service's metrics are registered.

use crate::control::Operations;
use crate::gx::service::Gx;
use crate::n5::app_sessions::AppSessions;
use crate::n7::sessions::N7;
use crate::node::{Capabilities, GxSignalling, NodeParts, SmfSignalling};
use crate::rx::service::{AfSignalling, Rx};
use crate::sd::service::Sd;
use crate::sd::state::SdState;
use crate::sy::service::Sy;
use crate::sy::state::SyPart;
use std::sync::Arc;

/// The node's capabilities and the services of the applications.
#[derive(Clone)]
pub struct Services {
    pub node: Capabilities,
    pub gx: Arc<Gx>,
    pub rx: Arc<Rx>,
    pub sd: Arc<Sd>,
    pub sy: Arc<Sy>,
    /// N7: SM policies for the SMFs, on the same sessions.
    pub n7: Arc<N7>,
    /// N5: application sessions for AFs, through the Rx flows.
    pub n5: Arc<AppSessions>,
}

impl Services {
    pub fn new(parts: NodeParts) -> Services {
        let sd_state = SdState::from_sessions(&parts.sessions);
        let sy_state = SyPart::recover(&parts.sessions);
        let node = Capabilities::new(parts);
        let sy = Sy::new(&node, sy_state);
        let rx = Rx::new(&node, sy.clone());
        let sd = Sd::new(&node, sd_state, sy.clone());
        let gx = Gx::new(&node, rx.clone(), sd.clone(), sy.clone());
        let n7 = N7::new(&node, rx.clone(), sy.clone());
        let n5 = AppSessions::new(&node, rx.clone());
        let signalling: Arc<dyn GxSignalling> = gx.clone();
        node.signalling.set_gx(Arc::downgrade(&signalling));
        let smf: Arc<dyn SmfSignalling> = n7.clone();
        node.signalling.set_smf(Arc::downgrade(&smf));
        let afs: Arc<dyn AfSignalling> = n5.clone();
        rx.set_n5(Arc::downgrade(&afs));
        let metrics = node.telemetry.metrics().clone();
        metrics.register(Arc::new(node.telemetry.clone()));
        metrics.register(rx.clone());
        metrics.register(sy.clone());
        metrics.register(gx.clone());
        metrics.register(sd.clone());
        Services {
            node,
            gx,
            rx,
            sd,
            sy,
            n7,
            n5,
        }
    }

    /// The operations the REST API and the CLI drive.
    pub fn operations(&self) -> Operations {
        Operations::new(&self.node, self.gx.clone())
    }
}
