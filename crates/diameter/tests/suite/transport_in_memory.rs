//! The transport over an in-memory pipe ([`Node::attach`]): the same code
//! path as TCP, without sockets (the seam where TLS will plug in).

use bytes::{Bytes, BytesMut};
use diameter::dict::avp;
use diameter::peer::{Application, CloseReason, DisconnectCause, LocalNode, PeerSettings, Role};
use diameter::transport::{Handler, Node, PeerHandle, ServesNothing};
use diameter::{DiameterError, Message, MessageBuilder};
use std::time::Duration;

const GX: u32 = 16_777_238;

struct Cca;

impl Handler for Cca {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        app_id == GX && cmd == 272
    }
    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        let mut out = BytesMut::new();
        let mut b = MessageBuilder::answer(&mut out, &req);
        b.result_code(2001)
            .origin(&peer.local().origin_host, &peer.local().origin_realm);
        b.finish();
        Ok(out.freeze())
    }
}

fn local(host: &str) -> LocalNode {
    LocalNode::new(host, "test.local").with_application(Application::auth(GX))
}

#[tokio::test]
async fn initiator_and_responder_over_a_pipe() {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let server = Node::new(local("pcrf.test.local"), PeerSettings::default(), Cca);
    let client = Node::new(
        local("pgw.test.local"),
        PeerSettings::default(),
        ServesNothing,
    );
    let (_srv_peer, srv_task) = server.attach(a, None, Role::Responder, None);
    let (peer, cli_task) = client.attach(b, None, Role::Initiator, Some("pcrf.test.local"));
    tokio::time::timeout(
        Duration::from_secs(5),
        peer.wait_state(|s| s.name() == "open"),
    )
    .await
    .expect("open");
    let ans = peer
        .request(GX, 272, |b| {
            b.str(avp::SESSION_ID, "pgw;1;1")
                .origin("pgw.test.local", "test.local");
        })
        .await
        .expect("answer");
    assert_eq!(
        ans.find(avp::RESULT_CODE)
            .expect("ok")
            .expect("rc")
            .as_u32(),
        Ok(2001)
    );
    assert!(server.peer_table().get("pgw.test.local").is_some());
    peer.close(DisconnectCause::Busy);
    assert_eq!(
        cli_task.await.expect("client task"),
        CloseReason::LocalDisconnect(DisconnectCause::Busy)
    );
    assert_eq!(
        srv_task.await.expect("server task"),
        CloseReason::PeerDisconnect(Some(DisconnectCause::Busy))
    );
    assert!(server.peer_table().is_empty());
}
