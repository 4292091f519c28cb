//! The end-of-run drain against a server that answers CCR-Ts late: every
//! session still open at the end of the window gets its CCR-T at once, and
//! a server working through such a burst may answer the last of them after
//! the scenario's timeout, with 2001. Those sessions were closed: they
//! must count as completed, not failed. The server is an in-process
//! transport node answering like the echo server, CCR-Ts after a delay.

use bytes::Bytes;
use diameter::dict::{app, avp, cmd};
use diameter::peer::{Application, LocalNode, PeerSettings};
use diameter::transport::{Handler, Node, PeerHandle};
use diameter::{DiameterError, Message};
use pcrf_bench::echo_server::EchoHandler;
use pcrf_bench::open_loop::OpenLoop;
use pcrf_bench::pcef::PcefOptions;
use pcrf_bench::runner::{measure, CpuTargets, Load, RunSetup};
use pcrf_bench::scenario::Scenario;
use std::sync::Arc;
use std::time::Duration;

/// The scenario's timeout; CCR-Ts are answered after twice as long.
const TIMEOUT: Duration = Duration::from_millis(400);
const CCR_T_DELAY: Duration = Duration::from_millis(800);

struct SlowToClose {
    echo: EchoHandler,
}

impl Handler for SlowToClose {
    fn serves(&self, app_id: u32, command: u32) -> bool {
        app_id == app::GX && command == cmd::CREDIT_CONTROL
    }

    async fn handle(&self, req: Message, _peer: PeerHandle) -> Result<Bytes, DiameterError> {
        let termination = req
            .find(avp::CC_REQUEST_TYPE)
            .ok()
            .flatten()
            .and_then(|a| a.as_enum().ok())
            == Some(3);
        if termination {
            // The slow peer under test: CCR-Ts outlast the scenario timeout.
            tokio::time::sleep(CCR_T_DELAY).await;
        }
        self.echo.answer(&req)
    }
}

fn scenario() -> Scenario {
    // Sessions would last 60 s: none ends inside the 1 s window, every one
    // is closed by the drain.
    Scenario::parse(
        r#"
        name = "drain"
        timeout = "400ms"
        [population]
        imsi_first = "001010000000001"
        msisdn_first = "79000000001"
        count = 1000
        [[flow]]
        name = "long"
        updates = 2
        hold = { dist = "fixed", value = "60s" }
        monitoring_keys = ["mk"]
        input_octets = 100
        output_octets = 200
        "#,
        "drain.toml",
    )
    .expect("scenario")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ccr_t_answered_2001_after_the_timeout_in_the_drain_completes_its_session() {
    let local = LocalNode::new("echo.pcrf.test", "pcrf.test")
        .with_application(Application::auth_vendor(app::GX, 10415));
    let node = Node::new(
        local,
        PeerSettings::default(),
        SlowToClose {
            echo: EchoHandler::new("echo.pcrf.test", "pcrf.test"),
        },
    );
    let server = node.listen("127.0.0.1:0").await.expect("listen");
    let target = server.local_addr().expect("addr");
    tokio::spawn(server.run(std::future::pending()));
    let scenario = scenario();
    assert_eq!(scenario.timeout, TIMEOUT);
    let setup = RunSetup {
        scenario: Arc::new(scenario),
        pcef: PcefOptions {
            target,
            peers: 2,
            request_timeout: TIMEOUT,
            watchdog: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        },
        cpu: CpuTargets::default(),
        progress: false,
    };
    let r = measure(
        &setup,
        Load::Open(OpenLoop {
            rate: 120.0, // 40 sessions per second (CCR-I and up to 2 CCR-U in the window)
            warmup: Duration::ZERO,
            duration: Duration::from_secs(1),
            seed: 5,
        }),
    )
    .await
    .expect("open loop");
    assert!(r.sessions.started >= 20, "{:?}", r.sessions);
    assert_eq!(r.commands[2].sent, 0, "no CCR-T inside the window");
    assert_eq!(r.total.failures(), 0, "{:?}", r.total.results);
    let o = &r.outside_window;
    assert_eq!(
        (o.failed, o.timeouts),
        (0, 0),
        "the drain's CCR-Ts waited for their answers: {o:?}"
    );
    assert_eq!(o.results.get("2001"), Some(&o.succeeded), "{o:?}");
    assert_eq!(
        r.sessions.completed, r.sessions.started,
        "every session closed with 2001: {:?}",
        r.sessions
    );
    assert_eq!(r.sessions.failed, 0);
}
