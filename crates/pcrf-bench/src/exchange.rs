//! Sending one Gx request on an emulated gateway and classifying how it
//! ended: the answer's result, a timeout, or a failure to send.

use crate::session::RequestSpec;
use crate::stats::{Outcome, ResultKind};
use diameter::dict::{app, avp, cmd};
use diameter::transport::{PeerHandle, RequestError};
use diameter::Message;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a request ended and when.
#[derive(Clone, Debug)]
pub struct Exchanged {
    pub outcome: Outcome,
    pub sent_at: Instant,
    pub done_at: Instant,
    /// The answering server's Origin-Host (a CCR-I's answer names the PCRF
    /// that later requests of the session go to).
    pub origin_host: Option<Arc<str>>,
    /// Sends it took (more than 1 with retransmission, see `delivery`).
    pub tries: u32,
}

/// The answer's result; a success answer that does not echo the request's
/// Session-Id and CC-Request-Number counts as [`ResultKind::Mismatched`]
/// (a server bug the transport's hop-by-hop matching cannot see).
pub fn classify(answer: &Message, spec: &RequestSpec) -> ResultKind {
    let r = ResultKind::of(answer);
    if !r.is_success() {
        return r;
    }
    let Ok([sid, number]) = answer.pick(&[avp::SESSION_ID, avp::CC_REQUEST_NUMBER]) else {
        return ResultKind::Mismatched;
    };
    let same_session = sid.and_then(|a| a.as_str().ok()) == Some(spec.identity.session_id.as_str());
    let same_number = number.and_then(|a| a.as_u32().ok()) == Some(spec.number);
    if same_session && same_number {
        r
    } else {
        ResultKind::Mismatched
    }
}

/// Sends the request once and waits for its answer (`timeout`, or the
/// transport's request timeout, bounds the wait): the outcome and the
/// answering node's Origin-Host. `first_end_to_end` is `None` for the first
/// send, which stores its End-to-End Identifier there; a later send (a
/// retransmission) carries that identifier again, with the T flag.
pub async fn send_once(
    peer: &PeerHandle,
    spec: &RequestSpec,
    first_end_to_end: &mut Option<u32>,
    timeout: Option<Duration>,
) -> (Outcome, Option<Arc<str>>) {
    let build = |b: &mut diameter::MessageBuilder<'_>| {
        match *first_end_to_end {
            Some(e2e) => {
                b.set_retransmit().set_end_to_end(e2e);
            }
            None => *first_end_to_end = Some(b.end_to_end()),
        }
        spec.build(b)
    };
    let r = match timeout {
        Some(t) => {
            peer.request_within(t, app::GX, cmd::CREDIT_CONTROL, build)
                .await
        }
        None => peer.request(app::GX, cmd::CREDIT_CONTROL, build).await,
    };
    match r {
        Ok(answer) => {
            let host = answer
                .find(avp::ORIGIN_HOST)
                .ok()
                .flatten()
                .and_then(|a| a.as_identity().ok().map(Arc::from));
            (Outcome::Answered(classify(&answer, spec)), host)
        }
        Err(RequestError::Timeout) => (Outcome::Timeout, None),
        Err(_) => (Outcome::SendFailed, None),
    }
}

/// Sends the request and waits for its answer.
pub async fn exchange(peer: &PeerHandle, spec: &RequestSpec) -> Exchanged {
    let sent_at = Instant::now();
    let (outcome, origin_host) = send_once(peer, spec, &mut None, None).await;
    let done_at = Instant::now();
    Exchanged {
        outcome,
        sent_at,
        done_at,
        origin_host,
        tries: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::echo_server::EchoHandler;
    use crate::gx::Gateway;
    use crate::population::Population;
    use crate::session::{RequestKind, SessionIdentity};
    use bytes::BytesMut;
    use diameter::MessageBuilder;
    use std::net::Ipv4Addr;

    fn spec(number: u32) -> RequestSpec {
        let gateway = Arc::new(Gateway {
            origin_host: "pgw-1.bench.test".into(),
            origin_realm: "bench.test".into(),
            destination_realm: "pcrf.test".into(),
            destination_host: None,
            origin_state_id: 1,
            pgw_address: Ipv4Addr::LOCALHOST,
            sgw_address: Ipv4Addr::LOCALHOST,
            mcc_mnc: "00101".into(),
            apn: "internet".into(),
        });
        let pop = Population::new("001010000000001", "79000000001", 5).expect("pop");
        RequestSpec {
            identity: Arc::new(SessionIdentity::new(&gateway, 7, 3, &pop, 1)),
            gateway,
            kind: RequestKind::Update(vec![]),
            number,
            destination_host: None,
        }
    }

    fn request(spec: &RequestSpec) -> Message {
        Message::parse(crate::gx::encode(1, 2, |b| spec.build(b))).expect("request")
    }

    #[test]
    fn success_must_echo_session_and_number() {
        let echo = EchoHandler::new("echo.pcrf.test", "pcrf.test");
        let s = spec(4);
        let ok = Message::parse(echo.answer(&request(&s)).expect("answer")).expect("parse");
        assert_eq!(classify(&ok, &s), ResultKind::Code(2001));
        // The same answer read as the answer to request number 5, or to another session.
        assert_eq!(classify(&ok, &spec(5)), ResultKind::Mismatched);
        let mut other = spec(4);
        other.identity = Arc::new(SessionIdentity {
            session_id: "pgw-1.bench.test;7;999".into(),
            ..(*other.identity).clone()
        });
        assert_eq!(classify(&ok, &other), ResultKind::Mismatched);
    }

    #[test]
    fn error_answers_keep_their_code() {
        let s = spec(1);
        let req = request(&s);
        let mut buf = BytesMut::new();
        let err = diameter::DiameterError::new(3004, "busy");
        MessageBuilder::error_answer(&mut buf, &req, "pcrf", "pcrf.test", &err);
        let ans = Message::parse(buf.freeze()).expect("parse");
        assert_eq!(classify(&ans, &s), ResultKind::Code(3004));
    }
}
