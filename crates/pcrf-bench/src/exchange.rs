//! Sending one Gx request on an emulated gateway and classifying how it
//! ended: the answer's result, a timeout, or a failure to send.

use crate::session::RequestSpec;
use crate::stats::{Outcome, ResultKind};
use diameter::dict::{app, avp, cmd};
use diameter::transport::{PeerHandle, RequestError};
use std::sync::Arc;
use std::time::Instant;

/// How a request ended and when.
#[derive(Clone, Debug)]
pub struct Exchanged {
    pub outcome: Outcome,
    pub sent_at: Instant,
    pub done_at: Instant,
    /// The answering server's Origin-Host (a CCR-I's answer names the PCRF
    /// that later requests of the session go to).
    pub origin_host: Option<Arc<str>>,
}

/// Sends the request and waits for its answer (the transport's request
/// timeout bounds the wait).
pub async fn exchange(peer: &PeerHandle, spec: &RequestSpec) -> Exchanged {
    let sent_at = Instant::now();
    let r = peer
        .request(app::GX, cmd::CREDIT_CONTROL, |b| spec.build(b))
        .await;
    let done_at = Instant::now();
    let (outcome, origin_host) = match r {
        Ok(answer) => {
            let host = answer
                .find(avp::ORIGIN_HOST)
                .ok()
                .flatten()
                .and_then(|a| a.as_identity().ok().map(Arc::from));
            (Outcome::Answered(ResultKind::of(&answer)), host)
        }
        Err(RequestError::Timeout) => (Outcome::Timeout, None),
        Err(_) => (Outcome::SendFailed, None),
    };
    Exchanged {
        outcome,
        sent_at,
        done_at,
        origin_host,
    }
}
