//! The Rx and Sd peers of the cluster tests besides the PCEF. An AF is a
//! `Gateway` behind the agent (agent.rs); `request_to` sends it any Rx
//! request for a given node, as a P-CSCF does after the node's first
//! answer. A TDF connects to a node directly (the agent's shipped
//! configuration admits PCEFs and AFs only): `Tdf` answers what the node
//! sends it (TSR, Sd RAR) with 2001 and keeps each request.

use super::*;

pub const SD: u32 = 16_777_303;
/// The TDF's Origin-Host and realm.
pub const TDF: &str = "tdf1.tdf.example.net";
pub const TDF_REALM: &str = "tdf.example.net";

/// The `[[peers]]` entry a node needs to accept the TDF.
pub fn tdf_peer_config() -> String {
    format!("\n[[peers]]\norigin_host = \"{TDF}\"\naddresses = [\"127.0.0.1\"]\n")
}

/// Sends a request of application `app` and command `code` for `session`
/// from `peer` to `node` of the PCRF realm (Destination-Host), `extra`
/// after the common AVPs; the answer.
pub async fn request_to(
    peer: &PeerHandle,
    app: u32,
    code: u32,
    node: &str,
    session: &str,
    extra: impl FnOnce(&mut MessageBuilder<'_>),
) -> Message {
    let local = peer.local().clone();
    peer.request(app, code, |b| {
        b.str(avp::SESSION_ID, session)
            .u32(avp::AUTH_APPLICATION_ID, app)
            .origin(&local.origin_host, &local.origin_realm)
            .str(avp::DESTINATION_REALM, REALM)
            .str(avp::DESTINATION_HOST, node);
        extra(b);
    })
    .await
    .unwrap_or_else(|e| panic!("no answer from {node} for {session}: {e:?}"))
}

/// Keeps the requests a node sent the TDF and answers them 2001.
struct TdfHandler {
    requests: Mutex<Vec<Message>>,
}

impl Handler for TdfHandler {
    fn serves(&self, app_id: u32, _cmd: u32) -> bool {
        app_id == SD
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        self.requests.lock().expect("lock").push(req.clone());
        let mut buf = bytes::BytesMut::new();
        let mut b = MessageBuilder::answer(&mut buf, &req);
        b.origin(&peer.local().origin_host, &peer.local().origin_realm)
            .result_code(2001);
        b.finish();
        Ok(buf.freeze())
    }
}

/// A TDF connected to one node.
pub struct Tdf {
    handler: Arc<TdfHandler>,
    initiator: Option<Initiator>,
    pub peer: PeerHandle,
    node: String,
}

impl Tdf {
    /// Connects to `node`, named `name` (its config has `tdf_peer_config`).
    pub async fn connect(node: &Pcrf, name: &str) -> Tdf {
        let local =
            LocalNode::new(TDF, TDF_REALM).with_application(Application::auth_vendor(SD, TGPP));
        let handler = Arc::new(TdfHandler {
            requests: Mutex::new(Vec::new()),
        });
        let transport = Node::with_parts(
            Arc::new(local),
            Arc::new(PeerSettings {
                request_timeout: Duration::from_secs(10),
                ..PeerSettings::default()
            }),
            handler.clone(),
            diameter::transport::PeerTable::new(),
        );
        let initiator = transport.connect(node.diameter, Some(name));
        assert!(
            initiator.wait_open(Duration::from_secs(10)).await,
            "the TDF could not connect to {name}"
        );
        let peer = initiator.handle();
        Tdf {
            handler,
            initiator: Some(initiator),
            peer,
            node: name.to_owned(),
        }
    }

    /// A CCR for `session` of `request_type` and `number`, then `extra`.
    pub async fn ccr(
        &self,
        session: &str,
        request_type: i32,
        number: u32,
        extra: impl FnOnce(&mut MessageBuilder<'_>),
    ) -> Message {
        request_to(
            &self.peer,
            SD,
            cmd::CREDIT_CONTROL,
            &self.node,
            session,
            |b| {
                b.i32(avp::CC_REQUEST_TYPE, request_type)
                    .u32(avp::CC_REQUEST_NUMBER, number);
                extra(b);
            },
        )
        .await
    }

    /// The requests the node sent the TDF so far.
    pub fn requests(&self) -> Vec<Message> {
        self.handler.requests.lock().expect("lock").clone()
    }

    pub async fn close(mut self) {
        if let Some(i) = self.initiator.take() {
            i.shutdown(DisconnectCause::Rebooting).await;
        }
    }
}
