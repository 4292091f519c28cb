//! The enforcement points' services as the node reaches them: the Gx
//! service for PCEFs (re-decisions, RARs) and the N7 service for SMFs.
//! Traits, so that the node knows neither Gx's wire format nor N7's
//! resources; the services implement them and are named to the node at
//! start-up (`Signalling::set_gx`, `Signalling::set_smf`).

use std::future::Future;
use std::pin::Pin;

use crate::pcc::operation::{ControlError, ReauthOutcome};
use crate::pcc::reauth_answer::Raa;
use crate::pcc::{PushReason, PushSummary, UsageInstructions};
use crate::policy::decision::Decision;
use crate::session::{GxSession, RuleDiff};
use diameter::codec::Message;

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
/// `Signalling::send_push` and knows neither N7's resources nor its JSON.
pub trait SmfSignalling: Send + Sync {
    fn push<'a>(
        &'a self,
        s: &'a GxSession,
        after: &'a Decision,
        release: Option<i32>,
        usage: &'a UsageInstructions,
    ) -> BoxFuture<'a, Result<Raa, ControlError>>;
}
