//! The node's face toward its Diameter peers: who it is (Origin-Host and
//! -Realm), the connections, admission of incoming requests and the DOIC
//! overload report that goes with it, and the ways to the Gx service that
//! sends what the node composes toward a PCEF (RARs, re-decisions) and to
//! the N7 service that notifies an SMF. The applications answer with
//! this identity, route their requests through it and are admitted by
//! it; none of them holds a peer table of its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock, Weak};

use crate::admission::Admission;
use crate::pcc::operation::{ControlError, ReauthOutcome};
use crate::pcc::reauth_answer::Raa;
use crate::pcc::{PushReason, PushSummary, UsageInstructions};
use crate::policy::decision::Decision;
use crate::session::{GxSession, RuleDiff};
use crate::session_message::Identity;
use diameter::codec::Message;
use diameter::transport::{PeerHandle, PeerTable};

use super::doic::Doic;

/// A boxed future: what a [`GxSignalling`] method returns, so that the trait
/// can be held as a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the node and the applications bound to a Gx session ask of the Gx
/// service: to decide a session, or all of a subscriber's sessions, again
/// and push the difference to the PCEF, or to send a RAR the node composed.
/// Sd (an application detected) and Sy (a spending status changed) learn
/// things that change a Gx decision; the Gx service, which holds them,
/// implements this, so neither they nor the node know Gx's wire format.
pub trait GxSignalling: Send + Sync {
    fn session<'a>(
        &'a self,
        id: &'a str,
        ask_report: bool,
    ) -> BoxFuture<'a, Result<ReauthOutcome, ControlError>>;

    fn subscriber<'a>(&'a self, key: &'a str, reason: PushReason) -> BoxFuture<'a, PushSummary>;

    /// A RAR to `s`'s PCEF with `diff`, or releasing the session with
    /// `release`; its RAA.
    fn rar<'a>(
        &'a self,
        s: &'a GxSession,
        diff: Option<&'a RuleDiff<'a>>,
        release: Option<i32>,
        usage: &'a UsageInstructions,
    ) -> BoxFuture<'a, Result<Message, ControlError>>;
}

/// What the node asks of the N7 service: to push to an N7 session's SMF
/// the decision `after` (the notification carries its difference from
/// what the SMF holds, with `usage`'s thresholds), or the session's end
/// with the Session-Release-Cause `release`; the SMF's answer read as an
/// RAA says it. The node pushes to every enforcement point through
/// `Node::send_push` and knows neither N7's resources nor its JSON.
pub trait SmfSignalling: Send + Sync {
    fn push<'a>(
        &'a self,
        s: &'a GxSession,
        after: &'a Decision,
        release: Option<i32>,
        usage: &'a UsageInstructions,
    ) -> BoxFuture<'a, Result<Raa, ControlError>>;
}

/// The identity, the peers, admission, DOIC and the Gx and N7 services.
pub struct Signalling {
    me: Identity,
    peers: PeerTable,
    admission: Admission,
    /// The peers that advertised DOIC (shown with the peer metrics), and
    /// the overload report they get while requests are shed.
    doic: Doic,
    /// The Gx service, which re-decides sessions when Sd or Sy learn
    /// something that changes a decision, and sends the RARs the node
    /// composes (set once the services exist).
    gx: OnceLock<Weak<dyn GxSignalling>>,
    /// The N7 service, which pushes to the SMFs (set once the services
    /// exist).
    smf: OnceLock<Weak<dyn SmfSignalling>>,
}

impl Signalling {
    pub(crate) fn new(me: Identity, peers: PeerTable, admission: Admission) -> Signalling {
        Signalling {
            me,
            peers,
            admission,
            doic: Doic::default(),
            gx: OnceLock::new(),
            smf: OnceLock::new(),
        }
    }

    /// This node's Origin-Host and Origin-Realm.
    pub(crate) fn me(&self) -> &Identity {
        &self.me
    }

    pub(crate) fn peers(&self) -> &PeerTable {
        &self.peers
    }

    pub(crate) fn admission(&self) -> &Admission {
        &self.admission
    }

    pub(crate) fn doic(&self) -> &Doic {
        &self.doic
    }

    /// Names the Gx service (once).
    pub(crate) fn set_gx(&self, gx: Weak<dyn GxSignalling>) {
        let _ = self.gx.set(gx);
    }

    /// The Gx service, while it runs.
    pub(crate) fn gx(&self) -> Option<Arc<dyn GxSignalling>> {
        self.gx.get().and_then(Weak::upgrade)
    }

    /// Names the N7 service (once).
    pub(crate) fn set_smf(&self, smf: Weak<dyn SmfSignalling>) {
        let _ = self.smf.set(smf);
    }

    /// The N7 service, while it runs.
    pub(crate) fn smf(&self) -> Option<Arc<dyn SmfSignalling>> {
        self.smf.get().and_then(Weak::upgrade)
    }

    /// The connection a request to the Diameter node `host` goes over: its
    /// own when it is connected to this node, else that of a connected peer
    /// that advertised the Relay Application-Id (0xffffffff) in its
    /// capabilities exchange (a routing agent, which forwards the request
    /// by its Destination-Host). A PCEF that attached through another node
    /// of the cluster is reached so.
    pub(crate) fn route_to(&self, host: &str) -> Option<PeerHandle> {
        let direct = self.peers.get(host);
        if direct.as_ref().is_some_and(PeerHandle::is_open) {
            return direct;
        }
        let relay = self.peers.peers().into_iter().find(|p| {
            p.is_open()
                && p.capabilities()
                    .is_some_and(|c| c.applications.iter().any(|a| a.is_relay()))
        });
        relay.or(direct)
    }
}
