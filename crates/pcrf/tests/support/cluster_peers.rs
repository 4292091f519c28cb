//! The Rx and Sd peers of a cluster test: an AF (P-CSCF) or a TDF that
//! connects to one node by its Origin-Host, sends its requests there, and
//! answers whatever the node sends it (RAR, ASR, TSR) with 2001, keeping
//! each request for the test to look at. Each node of a cluster may get
//! the requests of one Rx or Sd session (through a routing agent, or after
//! the node that had it died).

use super::*;

pub const RX: u32 = 16_777_236;
pub const SD: u32 = 16_777_303;

/// Keeps the requests a node sent and answers them 2001.
struct Answers2001 {
    app: u32,
    requests: Mutex<Vec<Message>>,
}

impl Handler for Answers2001 {
    fn serves(&self, app_id: u32, _cmd: u32) -> bool {
        app_id == self.app
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

/// An AF (application `RX`) or a TDF (`SD`) connected to one node.
pub struct AppPeer {
    handler: Arc<Answers2001>,
    initiator: Option<Initiator>,
    pub peer: PeerHandle,
    pub app: u32,
}

impl AppPeer {
    /// Connects as `origin_host` (realm test.local) for application `app`
    /// to the node at `addr` named `pcrf_host`.
    pub async fn connect(
        addr: SocketAddr,
        origin_host: &str,
        app: u32,
        pcrf_host: &str,
    ) -> AppPeer {
        let local = LocalNode::new(origin_host, "test.local")
            .with_application(Application::auth_vendor(app, TGPP));
        let handler = Arc::new(Answers2001 {
            app,
            requests: Mutex::new(Vec::new()),
        });
        let node = Node::with_parts(
            Arc::new(local),
            Arc::new(PeerSettings {
                request_timeout: Duration::from_secs(10),
                ..PeerSettings::default()
            }),
            handler.clone(),
            diameter::transport::PeerTable::new(),
        );
        let initiator = node.connect(addr, Some(pcrf_host));
        assert!(
            initiator.wait_open(Duration::from_secs(10)).await,
            "{origin_host} could not connect to {pcrf_host}"
        );
        let peer = initiator.handle();
        AppPeer {
            handler,
            initiator: Some(initiator),
            peer,
            app,
        }
    }

    /// Sends a request of command `code` for `session`: Session-Id,
    /// Auth-Application-Id, origin and Destination-Realm, then `extra`.
    pub async fn request(
        &self,
        code: u32,
        session: &str,
        extra: impl FnOnce(&mut MessageBuilder<'_>),
    ) -> Message {
        let local = self.peer.local().clone();
        let app = self.app;
        self.peer
            .request(app, code, |b| {
                b.str(avp::SESSION_ID, session)
                    .u32(avp::AUTH_APPLICATION_ID, app)
                    .origin(&local.origin_host, &local.origin_realm)
                    .str(avp::DESTINATION_REALM, "test.local");
                extra(b);
            })
            .await
            .expect("an answer")
    }

    /// The requests the node sent this peer so far.
    pub fn requests(&self) -> Vec<Message> {
        self.handler.requests.lock().expect("lock").clone()
    }

    pub async fn close(mut self) {
        if let Some(i) = self.initiator.take() {
            i.shutdown(DisconnectCause::Rebooting).await;
        }
    }
}
