//! A PCRF that releases every session with a RAR (Session-Release-Cause)
//! right after its CCR-I: the emulated gateways answer RAA 2001 and end
//! those sessions with a CCR-T at once, long before their planned hold
//! time, in both the open and the closed loop. The server is an in-process
//! transport node answering CCRs like the echo server.

use bytes::Bytes;
use diameter::dict::{app, avp, cmd};
use diameter::peer::{Application, LocalNode, PeerSettings};
use diameter::transport::{Handler, Node, PeerHandle};
use diameter::{DiameterError, Message};
use pcrf_bench::closed_loop::ClosedLoop;
use pcrf_bench::echo_server::EchoHandler;
use pcrf_bench::open_loop::OpenLoop;
use pcrf_bench::pcef::PcefOptions;
use pcrf_bench::runner::{measure, CpuTargets, Load, RunSetup};
use pcrf_bench::scenario::Scenario;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

struct Releasing {
    echo: EchoHandler,
}

impl Handler for Releasing {
    fn serves(&self, app_id: u32, command: u32) -> bool {
        app_id == app::GX && command == cmd::CREDIT_CONTROL
    }

    fn handle(
        &self,
        req: Message,
        peer: PeerHandle,
    ) -> impl Future<Output = Result<Bytes, DiameterError>> + Send {
        let answer = self.echo.answer(&req);
        let initial = req
            .find(avp::CC_REQUEST_TYPE)
            .ok()
            .flatten()
            .and_then(|a| a.as_enum().ok())
            == Some(1);
        if let (true, Ok(Some(sid))) = (initial, req.session_id()) {
            let sid = sid.to_string();
            tokio::spawn(async move {
                // The emulated PCEF releases the session a moment after its CCA,
                // as a real one would (deliberate, not a wait).
                tokio::time::sleep(Duration::from_millis(20)).await;
                let host = peer
                    .origin_host()
                    .map(|h| h.to_string())
                    .unwrap_or_default();
                let _ = peer
                    .request(app::GX, cmd::RE_AUTH, |b| {
                        b.str(avp::SESSION_ID, &sid)
                            .u32(avp::AUTH_APPLICATION_ID, app::GX)
                            .origin("echo.pcrf.test", "pcrf.test")
                            .str(avp::DESTINATION_REALM, "bench.test")
                            .str(avp::DESTINATION_HOST, &host)
                            .i32(avp::RE_AUTH_REQUEST_TYPE, 0)
                            .i32(avp::SESSION_RELEASE_CAUSE, 0);
                    })
                    .await;
            });
        }
        std::future::ready(answer)
    }
}

fn scenario() -> Scenario {
    // Sessions would last 10 s: any CCR-T inside a 2 s window is a release.
    Scenario::parse(
        r#"
        name = "release"
        [population]
        imsi_first = "001010000000001"
        msisdn_first = "79000000001"
        count = 1000
        [[flow]]
        name = "long"
        updates = 3
        hold = { dist = "fixed", value = "10s" }
        monitoring_keys = ["mk"]
        input_octets = 100
        output_octets = 200
        "#,
        "release.toml",
    )
    .expect("scenario")
}

async fn setup() -> RunSetup {
    let local = LocalNode::new("echo.pcrf.test", "pcrf.test")
        .with_application(Application::auth_vendor(app::GX, 10415));
    let node = Node::new(
        local,
        PeerSettings::default(),
        Releasing {
            echo: EchoHandler::new("echo.pcrf.test", "pcrf.test"),
        },
    );
    let server = node.listen("127.0.0.1:0").await.expect("listen");
    let target = server.local_addr().expect("addr");
    tokio::spawn(server.run(std::future::pending()));
    RunSetup {
        scenario: Arc::new(scenario()),
        pcef: PcefOptions {
            target,
            peers: 2,
            request_timeout: Duration::from_secs(2),
            watchdog: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        },
        cpu: CpuTargets::default(),
        progress: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_sessions_end_with_ccr_t_at_once() {
    let setup = setup().await;
    let r = measure(
        &setup,
        Load::Open(OpenLoop {
            rate: 250.0, // 50 sessions per second (5 requests each)
            warmup: Duration::ZERO,
            duration: Duration::from_secs(2),
            seed: 3,
        }),
    )
    .await
    .expect("open loop");
    let [i, u, t] = [&r.commands[0], &r.commands[1], &r.commands[2]];
    assert!(i.sent >= 50, "{}", i.sent);
    assert_eq!(u.sent, 0, "no CCR-U: every session was released first");
    // All but those started in the window's last few tens of ms ended in it.
    assert!(
        t.sent * 10 >= i.sent * 8,
        "CCR-T {} of CCR-I {}",
        t.sent,
        i.sent
    );
    assert_eq!(r.total.failures(), 0);
    assert_eq!(r.total.answered, r.total.sent);
    assert_eq!(r.sessions.completed, r.sessions.started);
    // A session started in the window's last 20 ms ends in the drain
    // before its RAR comes, so a few RARs may arrive after the report.
    assert!(r.rar.received <= r.sessions.started);
    assert!(r.rar.received * 10 >= r.sessions.started * 8);
    // Every RAR carried Session-Release-Cause and got its RAA (one may be
    // between the two counters when they are read).
    assert!(r.rar.release_requests + 1 >= r.rar.received);
    assert!(r.rar.answered + 1 >= r.rar.received);

    let r = measure(
        &setup,
        Load::Closed(ClosedLoop {
            concurrency: 4,
            warmup: Duration::ZERO,
            duration: Duration::from_secs(1),
            seed: 4,
        }),
    )
    .await
    .expect("closed loop");
    assert_eq!(r.total.failures(), 0);
    assert_eq!(r.sessions.completed, r.sessions.started);
    assert!(r.rar.release_requests > 0);
}
