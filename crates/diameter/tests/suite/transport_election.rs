//! Two nodes that both listen and both connect to each other at once
//! (RFC 6733 §5.6.4): exactly one connection survives, both nodes find each
//! other in their peer tables, requests flow both ways, and the losing
//! initiator stands by instead of reconnecting in a loop.

use bytes::{Bytes, BytesMut};
use diameter::dict::avp;
use diameter::peer::{Application, DisconnectCause, LocalNode, PeerSettings};
use diameter::transport::{Handler, Node, PeerHandle};
use diameter::{result_code, DiameterError, Message, MessageBuilder};
use std::time::Duration;
use tokio::sync::oneshot;

const GX: u32 = 16_777_238;
const CCR: u32 = 272;

struct Answer;

impl Handler for Answer {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        app_id == GX && cmd == CCR
    }
    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        let mut out = BytesMut::new();
        let mut b = MessageBuilder::answer(&mut out, &req);
        b.result_code(result_code::DIAMETER_SUCCESS)
            .origin(&peer.local().origin_host, &peer.local().origin_realm);
        b.finish();
        Ok(out.freeze())
    }
}

fn node(host: &str) -> Node<Answer> {
    let settings = PeerSettings {
        reconnect_initial: Duration::from_millis(20),
        tc: Duration::from_millis(100),
        dpa_timeout: Duration::from_millis(500),
        ..PeerSettings::default()
    };
    let local = LocalNode::new(host, "test.local").with_application(Application::auth(GX));
    Node::new(local, settings, Answer)
}

async fn ask(p: &PeerHandle) -> u32 {
    let from = p.local().origin_host.clone();
    let ans = p
        .request(GX, CCR, |b| {
            b.str(avp::SESSION_ID, &format!("{from};1;1"))
                .origin(&from, "test.local");
        })
        .await
        .expect("answer");
    ans.find(avp::RESULT_CODE)
        .expect("ok")
        .expect("rc")
        .as_u32()
        .expect("u32")
}

#[tokio::test]
async fn simultaneous_connections_leave_exactly_one() {
    for round in 0..5 {
        let a = node("a.test.local");
        let b = node("b.test.local");
        let sa = a.listen("127.0.0.1:0").await.expect("bind a");
        let sb = b.listen("127.0.0.1:0").await.expect("bind b");
        let (aa, ab) = (sa.local_addr().expect("a"), sb.local_addr().expect("b"));
        let (stop_a, rx_a) = oneshot::channel::<()>();
        let (stop_b, rx_b) = oneshot::channel::<()>();
        let ta = tokio::spawn(sa.run(async {
            let _ = rx_a.await;
        }));
        let tb = tokio::spawn(sb.run(async {
            let _ = rx_b.await;
        }));
        let ia = a.connect(ab, Some("b.test.local"));
        let ib = b.connect(aa, Some("a.test.local"));

        // Wait until both tables settle on one peer each.
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let pa = a.peer_table().get("b.test.local");
                let pb = b.peer_table().get("a.test.local");
                if let (Some(pa), Some(pb)) = (pa, pb) {
                    if pa.is_open() && pb.is_open() {
                        break;
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("both sides open");
        // Let any losing attempt finish. Deliberately a fixed window, not a
        // poll: what follows checks an absence (the loser stands by rather
        // than reconnecting every 20 ms and displacing the winner), which
        // only a stretch of many reconnect intervals can show.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let pa = a.peer_table().get("b.test.local").expect("a has b");
        let pb = b.peer_table().get("a.test.local").expect("b has a");
        assert_eq!((a.peer_table().len(), b.peer_table().len()), (1, 1));
        let a_initiated = pa.same(&ia.handle());
        let b_initiated = pb.same(&ib.handle());
        assert!(
            a_initiated ^ b_initiated,
            "round {round}: exactly one connection survives (a's: {a_initiated}, b's: {b_initiated})"
        );
        eprintln!(
            "round {round}: surviving connection initiated by {}",
            if a_initiated { "a" } else { "b" }
        );
        // The standing-by initiator is not open.
        let loser = if a_initiated {
            ib.handle()
        } else {
            ia.handle()
        };
        assert!(!loser.is_open());
        assert_eq!(ask(&pa).await, 2001);
        assert_eq!(ask(&pb).await, 2001);

        ia.shutdown(DisconnectCause::DoNotWantToTalkToYou).await;
        ib.shutdown(DisconnectCause::DoNotWantToTalkToYou).await;
        let _ = stop_a.send(());
        let _ = stop_b.send(());
        ta.await.expect("task").expect("run a");
        tb.await.expect("task").expect("run b");
    }
}
