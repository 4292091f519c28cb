//! The node's face toward its Diameter peers: who it is (Origin-Host and
//! -Realm), the connections, admission of incoming requests and the DOIC
//! overload report that goes with it, and the ways to the Gx service that
//! sends what the node composes toward a PCEF (RARs, re-decisions) and to
//! the N7 service that notifies an SMF. The applications answer with
//! this identity, route their requests through it and are admitted by
//! it; none of them holds a peer table of its own.

use std::sync::{Arc, Weak};

use crate::admission::Admission;
use crate::pcc::operation::{ControlError, ReauthOutcome};
use crate::pcc::{PushReason, PushSummary, UsageInstructions};
use crate::policy::decision::Decision;
use crate::session::{GxSession, RuleDiff};
use crate::session_message::Identity;
use diameter::transport::PeerHandle;

use super::doic::Doic;
use super::enforcement::{GxSignalling, SmfSignalling};
use super::state::Node;

/// The signalling capability: the identity, the peers, admission, DOIC,
/// and the ways to the Gx and N7 services (RARs, re-decisions, SMF
/// notifications, the BSF binding).
#[derive(Clone)]
pub struct Signalling {
    pub(super) node: Arc<Node>,
}

impl Signalling {
    /// This node's Origin-Host and Origin-Realm.
    pub(crate) fn me(&self) -> &Identity {
        &self.node.signalling.me
    }

    pub(crate) fn admission(&self) -> &Admission {
        &self.node.signalling.admission
    }

    pub(crate) fn doic(&self) -> &Doic {
        &self.node.signalling.doic
    }

    /// Names the Gx service (once).
    pub fn set_gx(&self, gx: Weak<dyn GxSignalling>) {
        let _ = self.node.signalling.gx.set(gx);
    }

    /// The Gx service, while it runs.
    pub(crate) fn gx(&self) -> Option<Arc<dyn GxSignalling>> {
        self.node.signalling.gx.get().and_then(Weak::upgrade)
    }

    /// Names the N7 service (once).
    pub fn set_smf(&self, smf: Weak<dyn SmfSignalling>) {
        let _ = self.node.signalling.smf.set(smf);
    }

    /// The N7 service, while it runs.
    pub(crate) fn smf(&self) -> Option<Arc<dyn SmfSignalling>> {
        self.node.signalling.smf.get().and_then(Weak::upgrade)
    }

    /// The connection a request to the Diameter node `host` goes over: its
    /// own when it is connected to this node, else that of a connected peer
    /// that advertised the Relay Application-Id (0xffffffff) in its
    /// capabilities exchange (a routing agent, which forwards the request
    /// by its Destination-Host). A PCEF that attached through another node
    /// of the cluster is reached so.
    pub(crate) fn route_to(&self, host: &str) -> Option<PeerHandle> {
        let direct = self.node.signalling.peers.get(host);
        if direct.as_ref().is_some_and(PeerHandle::is_open) {
            return direct;
        }
        let relay = self.node.signalling.peers.peers().into_iter().find(|p| {
            p.is_open()
                && p.capabilities()
                    .is_some_and(|c| c.applications.iter().any(|a| a.is_relay()))
        });
        relay.or(direct)
    }

    /// Pushes to the session's enforcement point and returns its answer
    /// as an RAA says it: a Gx RAR to the PCEF, or, for an N7 session, a
    /// notification to the SMF (through [`SmfSignalling`]). `diff` is what changed
    /// (what a RAR carries), `after` the whole decision it leads to (what
    /// an SMF's difference is computed against), `release` ends the
    /// session with that Session-Release-Cause.
    pub(crate) async fn send_push(
        &self,
        s: &GxSession,
        diff: Option<&RuleDiff<'_>>,
        after: Option<&Decision>,
        release: Option<i32>,
        usage: &UsageInstructions,
    ) -> Result<crate::pcc::reauth_answer::Raa, ControlError> {
        if s.n7.is_some() {
            let Some(smf) = self.smf() else {
                return Err(ControlError::Unavailable(
                    "the N7 service is not running".into(),
                ));
            };
            return smf
                .push(s, after.unwrap_or(&s.installed), release, usage)
                .await;
        }
        let Some(gx) = self.gx() else {
            return Err(ControlError::Unavailable(
                "the Gx service is not running".into(),
            ));
        };
        let answer = gx.rar(s, diff, release, usage).await?;
        crate::pcc::reauth_answer::decode_raa(&answer)
            .map_err(|e| ControlError::Peer(format!("bad RAA: {e}")))
    }

    /// Removes the PCF binding the N7 session `s` holds at the BSF (see
    /// `n7::bsf_binding`), waiting for the BSF: called before the commit
    /// that closes the session, so that a crash between the two leaves the
    /// session open rather than a binding behind. True when the session
    /// holds no binding any more (none, removed, or the BSF has none).
    pub(crate) async fn unbind_at_bsf(&self, s: &GxSession) -> bool {
        let Some(id) = s.bsf_binding.as_deref() else {
            return true;
        };
        let live = self.node.live.load();
        let Some(bsf) = live.cfg.sbi.as_ref().and_then(|s| s.bsf()) else {
            return false;
        };
        match bsf.deregister(id).await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(binding = %id, session = %s.id, error = %e, "PCF binding not removed at the BSF; its id stays in the closed record");
                false
            }
        }
    }

    /// Where the SBI's resources are reached: under the API prefix
    /// registered with the NRF, or else the SBI listener's own address.
    pub(crate) fn sbi_root(&self) -> String {
        let live = self.node.live.load();
        match &live.cfg.sbi {
            Some(sbi) => match &sbi.nrf {
                Some(nrf) => nrf.api_prefix.trim_end_matches('/').to_owned(),
                None => {
                    let scheme = if sbi.tls.is_some() { "https" } else { "http" };
                    format!("{scheme}://{}", sbi.listen)
                }
            },
            None => String::new(),
        }
    }

    /// Re-decides one session through the Gx service and pushes the
    /// difference to its PCEF (see [`GxSignalling`]).
    pub(crate) async fn push(
        &self,
        id: &str,
        ask_report: bool,
    ) -> Result<ReauthOutcome, ControlError> {
        match self.gx() {
            Some(gx) => gx.session(id, ask_report).await,
            None => Err(ControlError::Unavailable(
                "the Gx service is not running".into(),
            )),
        }
    }

    /// Re-decides every open session of a subscriber through the Gx service.
    pub(crate) async fn push_subscriber(&self, key: &str, reason: PushReason) -> PushSummary {
        match self.gx() {
            Some(gx) => gx.subscriber(key, reason).await,
            None => PushSummary::default(),
        }
    }
}
