//! What an application (the PCRF, a load generator) implements to answer
//! requests and to learn which peers come and go.

use super::peer_handle::PeerHandle;
use crate::codec::{DiameterError, Message};
use crate::peer::CloseReason;
use bytes::Bytes;
use std::future::Future;

/// Answers application requests. One instance serves every connection of a
/// [`super::Node`]; requests run concurrently, so it must be `Sync`.
pub trait Handler: Send + Sync + 'static {
    /// Whether requests of command `cmd` in application `app_id` are
    /// answered here. Others get 3001 DIAMETER_COMMAND_UNSUPPORTED
    /// (applications not negotiated with the peer get 3007 before this).
    fn serves(&self, app_id: u32, cmd: u32) -> bool;

    /// Answers one request: `Ok` with the whole encoded answer (build it with
    /// [`crate::MessageBuilder::answer`]), or `Err` for the transport to send
    /// the RFC 6733 §7 error answer (E bit, Failed-AVP...) built from it.
    fn handle(
        &self,
        req: Message,
        peer: PeerHandle,
    ) -> impl Future<Output = Result<Bytes, DiameterError>> + Send;

    /// A peer's connection became open (after CER/CEA). Keep it short: it
    /// runs on the connection's task.
    fn peer_up(&self, _peer: &PeerHandle) {}

    /// A peer's open connection ended.
    fn peer_down(&self, _peer: &PeerHandle, _reason: CloseReason) {}
}

/// A handler that serves no application request (every one is answered
/// 3001): for pure clients such as a load generator that only sends.
#[derive(Clone, Copy, Debug, Default)]
pub struct ServesNothing;

impl Handler for ServesNothing {
    fn serves(&self, _app_id: u32, _cmd: u32) -> bool {
        false
    }

    async fn handle(&self, _req: Message, _peer: PeerHandle) -> Result<Bytes, DiameterError> {
        Err(DiameterError::new(
            crate::result_code::DIAMETER_COMMAND_UNSUPPORTED,
            "no application served",
        ))
    }
}
