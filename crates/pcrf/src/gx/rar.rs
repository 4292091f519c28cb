//! A RAR to a session's PCEF, for what the node composed elsewhere (a
//! rule removed by a binding, a session released, a push decided by Rx or
//! the REST API): the node hands over what changed, the Gx service encodes
//! it and routes it. Gx's wire format stays in this application; the node
//! reaches it through `GxSignalling`.

use crate::gx::service::Gx;
use crate::metrics::Command;
use crate::pcc::operation::ControlError;
use crate::pcc::UsageInstructions;
use crate::session::{GxSession, RuleDiff};
use diameter::codec::Message;
use diameter::dict::{self, cmd};
use diameter::transport::{PeerHandle, RequestError};
use std::time::Instant;

impl Gx {
    /// Sends `s`'s PCEF a RAR with `diff` (or releasing the session with
    /// `release`) and the usage instructions, over its own connection or a
    /// relay, and returns its RAA; counted under `Command::Rar`.
    pub(crate) async fn send_rar(
        &self,
        s: &GxSession,
        diff: Option<&RuleDiff<'_>>,
        release: Option<i32>,
        usage: &UsageInstructions,
    ) -> Result<Message, ControlError> {
        let peer: PeerHandle = self.signalling.route_to(&s.pcef_host).ok_or_else(|| {
            ControlError::Peer(format!(
                "PCEF {} is not connected, directly or through a relay",
                s.pcef_host
            ))
        })?;
        let started = Instant::now();
        let res = peer
            .request(dict::app::GX, cmd::RE_AUTH, |b| {
                crate::gx::encode_rar(
                    b,
                    &s.id,
                    self.signalling.me(),
                    &s.pcef_host,
                    &s.pcef_realm,
                    diff,
                    release,
                    usage,
                )
            })
            .await;
        match res {
            Ok(ans) => {
                let code = crate::pcc::reauth_answer::decode_raa(&ans)
                    .ok()
                    .and_then(|r| r.result_code.or(r.experimental_result))
                    .unwrap_or(0);
                self.telemetry
                    .metrics()
                    .request(Command::Rar, code, started.elapsed());
                Ok(ans)
            }
            Err(e) => {
                self.telemetry.metrics().request(
                    Command::Rar,
                    crate::metrics::NO_ANSWER,
                    started.elapsed(),
                );
                Err(match e {
                    RequestError::Timeout => {
                        ControlError::Timeout(format!("no RAA from {} in time", s.pcef_host))
                    }
                    other => ControlError::Peer(format!("RAR to {} failed: {other}", s.pcef_host)),
                })
            }
        }
    }
}
