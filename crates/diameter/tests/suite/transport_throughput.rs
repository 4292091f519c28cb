//! A throughput probe, not a benchmark suite: one initiator keeps many
//! requests in flight to one server over loopback and reports requests per
//! second and messages per write. Ignored by default (timing depends on the
//! machine); run it with
//! `cargo test --release -p pcrf-diameter --test transport_throughput -- --ignored --nocapture`.

use bytes::{Bytes, BytesMut};
use diameter::dict::avp;
use diameter::peer::{Application, DisconnectCause, LocalNode, PeerSettings};
use diameter::transport::{Handler, Node, PeerHandle, ServesNothing};
use diameter::{DiameterError, Message, MessageBuilder};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

const GX: u32 = 16_777_238;

struct Cca;

impl Handler for Cca {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        app_id == GX && cmd == 272
    }
    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        let mut out = BytesMut::with_capacity(256);
        let mut b = MessageBuilder::answer(&mut out, &req);
        b.result_code(2001)
            .origin(&peer.local().origin_host, &peer.local().origin_realm)
            .u32(avp::AUTH_APPLICATION_ID, GX);
        b.finish();
        Ok(out.freeze())
    }
}

fn local(host: &str) -> LocalNode {
    LocalNode::new(host, "test.local").with_application(Application::auth_vendor(GX, 10415))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "timing probe; run explicitly in release"]
async fn requests_per_second_over_loopback() {
    let server = Node::new(local("pcrf.test.local"), PeerSettings::default(), Cca)
        .listen("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = server.local_addr().expect("addr");
    let srv_node = server.node().clone();
    let (stop, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = rx.await;
    }));
    let client = Node::new(
        local("pgw.test.local"),
        PeerSettings::default(),
        ServesNothing,
    );
    let init = client.connect(addr, None);
    assert!(init.wait_open(Duration::from_secs(5)).await);
    let peer = init.handle();

    let total: u32 = 100_000;
    let concurrency: u32 = 256;
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for w in 0..concurrency {
        let p = peer.clone();
        set.spawn(async move {
            let mut sid = String::with_capacity(64);
            let mut n = w;
            while n < total {
                sid.clear();
                use std::fmt::Write;
                let _ = write!(sid, "pgw.test.local;1;{n}");
                let ans = p
                    .request(GX, 272, |b| {
                        b.str(avp::SESSION_ID, &sid)
                            .origin("pgw.test.local", "test.local")
                            .str(avp::DESTINATION_REALM, "test.local")
                            .u32(avp::AUTH_APPLICATION_ID, GX)
                            .u32(avp::CC_REQUEST_TYPE, 2)
                            .u32(avp::CC_REQUEST_NUMBER, n);
                    })
                    .await
                    .expect("answer");
                assert!(!ans.is_request());
                n += concurrency;
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("worker");
    }
    let elapsed = started.elapsed();
    let server_side = srv_node
        .peer_table()
        .get("pgw.test.local")
        .expect("open")
        .counters()
        .snapshot();
    let client_side = peer.counters().snapshot();
    eprintln!(
        "{total} requests in {elapsed:?}: {:.0} req/s; server {:.1} msgs/write, client {:.1} msgs/write",
        f64::from(total) / elapsed.as_secs_f64(),
        server_side.messages_out as f64 / server_side.writes.max(1) as f64,
        client_side.messages_out as f64 / client_side.writes.max(1) as f64,
    );
    assert_eq!(client_side.answers_in, u64::from(total));
    init.shutdown(DisconnectCause::Rebooting).await;
    let _ = stop.send(());
    task.await.expect("task").expect("run");
}
