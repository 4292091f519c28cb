//! The Diameter node's request handler: each request goes to its
//! application's service by Application-Id (Gx, Rx, Sd, Sy), inside a
//! span that names its Session-Id, the peer's Origin-Host, the application
//! and the command, so every log line written while it is handled says
//! which request it belongs to. Peer opens and closes are logged here too.

use crate::services::Services;
use crate::{gx, rx, sd, sy};
use bytes::Bytes;
use diameter::codec::{DiameterError, Message};
use diameter::peer::CloseReason;
use diameter::transport::{Handler, PeerHandle};
use std::time::Duration;
use tracing::Instrument;

/// The Diameter node's request handler: routes each request to its
/// application's service by Application-Id.
pub struct Dispatcher {
    pub services: Services,
    pub closes: PeerCloseLog,
}

/// Logs peer closes at most once a second per Origin-Host, with how many
/// were not logged: a peer that flaps thousands of times a second must not
/// flood the log (the peer metrics still count every close).
#[derive(Default)]
pub struct PeerCloseLog(
    parking_lot::Mutex<std::collections::HashMap<String, (std::time::Instant, u64)>>,
);

impl PeerCloseLog {
    /// How many earlier closes went unlogged, or None to stay quiet at
    /// `now` (a parameter so the tests can step the clock).
    fn admit(&self, host: &str, now: std::time::Instant) -> Option<u64> {
        let mut m = self.0.lock();
        if m.len() > 10_000 {
            // Bounded memory with peers of ever new names.
            m.retain(|_, (at, _)| now.duration_since(*at) < Duration::from_secs(1));
        }
        match m.get_mut(host) {
            Some((at, quiet)) if now.duration_since(*at) < Duration::from_secs(1) => {
                *quiet += 1;
                None
            }
            Some((at, quiet)) => {
                let q = *quiet;
                *at = now;
                *quiet = 0;
                Some(q)
            }
            None => {
                m.insert(host.to_owned(), (now, 0));
                Some(0)
            }
        }
    }
}

impl Handler for Dispatcher {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        gx::serves(app_id, cmd)
            || rx::serves(app_id, cmd)
            || sd::serves(app_id, cmd)
            || sy::serves(app_id, cmd)
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        let app = req.application_id();
        let span = request_span(&req, &peer, app);
        let s = &self.services;
        if let Some(host) = peer.origin_host() {
            s.node.signalling.doic().note(host, &req);
        }
        async move {
            match app {
                rx::RX => s.rx.handle_rx(req).await,
                sd::SD => s.sd.handle_sd(req).await,
                sy::SY => s.sy.handle_sy(req).await,
                _ => s.gx.handle_gx(req).await,
            }
        }
        .instrument(span)
        .await
    }

    fn peer_up(&self, peer: &PeerHandle) {
        tracing::info!(peer = ?peer.origin_host(), addr = ?peer.remote_addr(), tls = peer.is_tls(), "Diameter peer open");
        if let Some(host) = peer.origin_host() {
            self.services
                .node
                .events
                .peer_event(crate::notify::names::PEER_UP, &host, None);
        }
    }

    fn peer_down(&self, peer: &PeerHandle, reason: CloseReason) {
        let host = peer.origin_host();
        if let Some(h) = &host {
            self.services.node.signalling.doic().forget(h);
            self.services.node.events.peer_event(
                crate::notify::names::PEER_DOWN,
                h,
                Some(format!("{reason:?}")),
            );
        }
        let key = host.as_deref().unwrap_or("(before CER)");
        if let Some(unlogged) = self.closes.admit(key, std::time::Instant::now()) {
            match reason {
                // A DPR/DPA exchange is an orderly close (a gateway
                // rebooting or shutting down), not something to look into.
                CloseReason::PeerDisconnect(_) | CloseReason::LocalDisconnect(_) => {
                    tracing::info!(peer = ?host, ?reason, unlogged, "Diameter peer closed");
                }
                _ => tracing::warn!(peer = ?host, ?reason, unlogged, "Diameter peer closed"),
            }
        }
    }
}

/// The span one request is handled in. Its fields are read from the
/// header and the first AVPs (Session-Id comes first in every session
/// command), so building it costs no decode of the message.
fn request_span(req: &Message, peer: &PeerHandle, app: u32) -> tracing::Span {
    let application = match app {
        gx::GX => "gx",
        rx::RX => "rx",
        sd::SD => "sd",
        sy::SY => "sy",
        _ => "other",
    };
    let command = diameter::dict::command(req.command_code()).map_or("?", |c| c.request);
    let session = req.session_id().ok().flatten().unwrap_or_default();
    let origin = peer.origin_host();
    tracing::info_span!(
        "request",
        session,
        peer = origin.as_deref().unwrap_or("?"),
        app = application,
        cmd = command,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_closes_are_logged_once_a_second_per_peer() {
        let log = PeerCloseLog::default();
        let t0 = std::time::Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(log.admit("pgw1", t0), Some(0));
        assert_eq!(log.admit("pgw1", at(10)), None);
        assert_eq!(log.admit("pgw1", at(999)), None, "still within the second");
        assert_eq!(
            log.admit("pgw2", at(999)),
            Some(0),
            "another peer is not held back"
        );
        assert_eq!(
            log.admit("pgw1", at(1000)),
            Some(2),
            "the quiet ones are counted"
        );
        assert_eq!(log.admit("pgw1", at(1001)), None, "the second starts again");
    }
}
