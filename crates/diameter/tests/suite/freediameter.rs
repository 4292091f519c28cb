//! The peer protocol against freeDiameter 1.2.1, an independent Diameter
//! node: capabilities exchange, watchdogs and disconnection, with each side
//! in turn connecting.
//!
//! (a) freeDiameter connects to our server: CER/CEA, at least one DWR/DWA
//!     (its TwTimer of 6 s is the minimum it allows), and DPR/DPA when it
//!     is stopped with SIGTERM.
//! (b) our initiator connects to freeDiameter: CER/CEA, DWR/DWA, and DPR/DPA
//!     when we shut down.
//! (c) freeDiameter as a relay agent (a DRA) between our PCEF-side node and
//!     our PCRF: a Gx CCR crosses it by Destination-Realm and the CCA comes
//!     back, as when a DRA fronts several PCRFs.
//!
//! Each exchange is checked on both sides: our handler's peer events and
//! counters, and freeDiameter's own log (`-dd` prints every message it
//! sends and receives). freeDiameter advertises the Relay application
//! (it has no Gx application extension, only the Gx dictionary), which
//! shares every application with our Gx node.

use crate::support::{free_port, interop_dir, read_lossy, require_tool, ChildGuard, TempDir};
use bytes::{Bytes, BytesMut};
use diameter::dict::{avp, cmd};
use diameter::peer::{
    Application, CloseReason, DisconnectCause, LocalNode, PeerSettings, PeerState, WatchdogState,
};
use diameter::transport::{Handler, Node, PeerCountersSnapshot, PeerHandle};
use diameter::{DiameterError, Message, MessageBuilder};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const GX: u32 = 16_777_238;
const TGPP: u32 = 10_415;
const RELAY: u32 = 0xffff_ffff;
const FD_EXTENSIONS: &str = "/usr/lib/freeDiameter";

// How freeDiameter's `-dd` log shows messages to and from our node. It logs
// a received message before looking up its name, so messages are matched by
// "<application>/<command> f:<flags>" (R for requests).
const SENT: &str = "SENT to 'pcrf.test.local'";
const RCV: &str = "RCV from 'pcrf.test.local'";
/// A CER from a peer not yet identified.
const RCV_UNKNOWN: &str = "RCV from '<unknown>'";
const CER: &str = "0/257 f:R";
const DWR: &str = "0/280 f:R";
const DWA: &str = "0/280 f:-";
const DPR: &str = "0/282 f:R";
const DPA: &str = "0/282 f:-";
/// How freeDiameter prints the Gx application we advertise, once decoded.
const GX_IN_CAPABILITIES: &str = "Auth-Application-Id(258)[-M]=16777238";

/// What our node saw of its peers.
#[derive(Default)]
struct Recorder {
    up: Mutex<Vec<String>>,
    down: Mutex<Vec<(String, CloseReason, PeerCountersSnapshot)>>,
}

impl Handler for Recorder {
    fn serves(&self, _app_id: u32, _cmd: u32) -> bool {
        false
    }

    async fn handle(&self, _req: Message, _peer: PeerHandle) -> Result<Bytes, DiameterError> {
        Err(DiameterError::new(3001, "no application in this test"))
    }

    fn peer_up(&self, peer: &PeerHandle) {
        let host = peer
            .origin_host()
            .map(|h| h.to_string())
            .unwrap_or_default();
        self.up.lock().expect("lock").push(host);
    }

    fn peer_down(&self, peer: &PeerHandle, reason: CloseReason) {
        let host = peer
            .origin_host()
            .map(|h| h.to_string())
            .unwrap_or_default();
        let counters = peer.counters().snapshot();
        self.down
            .lock()
            .expect("lock")
            .push((host, reason, counters));
    }
}

fn local_node() -> LocalNode {
    LocalNode::new("pcrf.test.local", "test.local")
        .with_host_ip("127.0.0.1".parse().expect("ip"))
        .with_application(Application::auth_vendor(GX, TGPP))
}

/// Our watchdog interval: in (a) longer than freeDiameter's, so the DWRs are
/// its own; in (b) 6 s (the RFC 3539 minimum) and shorter than its, so the
/// DWRs are ours.
fn settings(tw_secs: u64) -> PeerSettings {
    PeerSettings {
        tw: Duration::from_secs(tw_secs),
        ..PeerSettings::default()
    }
}

/// Writes a config from its template in tests/interop.
fn write_config(dir: &TempDir, template: &str, port: u16) -> PathBuf {
    write_config_with(dir, template, port, 0)
}

/// [`write_config`] with the port of our PCRF for the relay's ConnectPeer.
fn write_config_with(dir: &TempDir, template: &str, port: u16, pcrf_port: u16) -> PathBuf {
    let text = std::fs::read_to_string(interop_dir().join(template))
        .expect("read template")
        .replace("@PORT@", &port.to_string())
        .replace("@PCRF_PORT@", &pcrf_port.to_string())
        .replace("@EXT@", FD_EXTENSIONS)
        .replace(
            "@ACL@",
            &interop_dir()
                .join("freediameter-acl.conf")
                .display()
                .to_string(),
        );
    let path = dir.join(template);
    std::fs::write(&path, text).expect("write config");
    path
}

fn start_fd(dir: &TempDir, conf: &Path) -> (ChildGuard, PathBuf) {
    require_tool("freeDiameterd");
    assert!(
        Path::new(FD_EXTENSIONS)
            .join("dict_dcca_3gpp.fdx")
            .is_file(),
        "freediameter-extensions is not installed; run scripts/install-test-deps.sh"
    );
    let log = dir.join("freeDiameterd.log");
    let f = std::fs::File::create(&log).expect("log");
    // Line-buffered, so the log is complete while it runs (and after a kill).
    let child = ChildGuard::spawn(
        "freeDiameterd",
        Command::new("stdbuf")
            .args(["-oL", "-eL", "freeDiameterd"])
            .arg("-c")
            .arg(conf)
            .arg("-dd")
            .stdin(Stdio::null())
            .stdout(f.try_clone().expect("dup"))
            .stderr(f),
    );
    (child, log)
}

/// Waits until freeDiameter's log has a line containing every one of `parts`.
async fn wait_log(log: &Path, parts: &[&str], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if log_has(log, parts) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn log_has(log: &Path, parts: &[&str]) -> bool {
    read_lossy(log)
        .lines()
        .any(|l| parts.iter().all(|p| l.contains(p)))
}

/// Waits (bounded) until the peer's counters show at least this many
/// messages read and written; the counters as last seen.
async fn wait_counters(peer: &PeerHandle, min_in: u64, min_out: u64) -> PeerCountersSnapshot {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let c = peer.counters().snapshot();
        if (c.messages_in >= min_in && c.messages_out >= min_out) || Instant::now() >= deadline {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A failure message with freeDiameter's log attached.
fn with_log(what: &str, log: &Path) -> String {
    format!("{what}\n--- freeDiameterd log ---\n{}", read_lossy(log))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freediameter_connects_to_our_server() {
    let dir = TempDir::new("fd-initiator");
    let node = Node::new(local_node(), settings(30), Recorder::default());
    let server = node.listen("127.0.0.1:0").await.expect("bind");
    let port = server.local_addr().expect("addr").port();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async {
        let _ = stop_rx.await;
    }));

    let conf = write_config(&dir, "freediameter-initiator.conf", port);
    let (mut fd, log) = start_fd(&dir, &conf);

    // CER/CEA: the peer is open on our side and on freeDiameter's.
    let t = Instant::now();
    let mut peer = None;
    while t.elapsed() < Duration::from_secs(15) && peer.is_none() {
        peer = node.peer_table().get("fd.test.local");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let peer = peer.unwrap_or_else(|| panic!("{}", with_log("freeDiameter never opened", &log)));
    assert!(
        tokio::time::timeout(
            Duration::from_secs(5),
            peer.wait_state(|s| s == PeerState::Open)
        )
        .await
        .is_ok(),
        "{}",
        with_log("peer not open", &log)
    );
    assert_eq!(
        node.handler().up.lock().expect("lock").as_slice(),
        ["fd.test.local"]
    );
    let caps = peer.capabilities().expect("capabilities");
    assert_eq!(caps.origin_realm, "test.local");
    assert!(peer.supports(GX), "Gx shared through freeDiameter's Relay");
    assert!(wait_log(&log, &[SENT, CER], Duration::from_secs(5)).await);
    assert!(
        wait_log(
            &log,
            &[
                "Capabilities-Exchange-Answer",
                "'DIAMETER_SUCCESS'",
                GX_IN_CAPABILITIES
            ],
            Duration::from_secs(5)
        )
        .await,
        "{}",
        with_log("freeDiameter did not decode our CEA", &log)
    );
    assert!(
        wait_log(
            &log,
            &["'STATE_WAITCEA'", "'STATE_OPEN'"],
            Duration::from_secs(5)
        )
        .await,
        "{}",
        with_log("freeDiameter did not reach STATE_OPEN", &log)
    );

    // DWR/DWA: freeDiameter's watchdog (Tw 6 s, jittered); we answer.
    assert!(
        wait_log(&log, &[RCV, DWA], Duration::from_secs(25)).await,
        "{}",
        with_log("freeDiameter's DWR got no DWA from us", &log)
    );
    assert!(log_has(&log, &[SENT, DWR]));
    assert_eq!(peer.watchdog(), WatchdogState::Okay);
    let c = wait_counters(&peer, 2, 2).await;
    assert!(
        c.messages_in >= 2 && c.messages_out >= 2,
        "CER/DWR in, CEA/DWA out: {c:?}"
    );

    // SIGTERM: freeDiameter sends DPR, we answer DPA and it exits.
    fd.signal("TERM");
    let status = fd.wait_timeout(Duration::from_secs(25));
    assert!(
        status.is_some(),
        "{}",
        with_log("freeDiameter did not exit", &log)
    );
    assert!(
        log_has(&log, &[SENT, DPR]),
        "{}",
        with_log("no DPR sent", &log)
    );
    assert!(
        log_has(&log, &[RCV, DPA]),
        "{}",
        with_log("no DPA received", &log)
    );
    let down = {
        let t = Instant::now();
        loop {
            if let Some(d) = node.handler().down.lock().expect("lock").first().cloned() {
                break d;
            }
            assert!(t.elapsed() < Duration::from_secs(5), "peer_down never came");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert_eq!(down.0, "fd.test.local");
    assert!(
        matches!(down.1, CloseReason::PeerDisconnect(_)),
        "closed for {:?}",
        down.1
    );
    // CER, at least one DWR or DWA, DPR in; CEA, DWA or DWR, DPA out.
    assert!(
        down.2.messages_in >= 3 && down.2.messages_out >= 3,
        "{:?}",
        down.2
    );
    assert!(node.peer_table().is_empty());

    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn we_connect_to_freediameter() {
    let dir = TempDir::new("fd-responder");
    let port = free_port();
    let conf = write_config(&dir, "freediameter-responder.conf", port);
    let (mut fd, log) = start_fd(&dir, &conf);
    assert!(
        wait_log(
            &log,
            &["freeDiameterd daemon initialized"],
            Duration::from_secs(10)
        )
        .await,
        "{}",
        with_log("freeDiameter did not start", &log)
    );

    let node = Node::new(local_node(), settings(6), Recorder::default());
    let addr = ([127, 0, 0, 1], port).into();
    let initiator = node.connect(addr, Some("fd.test.local"));
    assert!(
        initiator.wait_open(Duration::from_secs(15)).await,
        "{}",
        with_log("our initiator did not open", &log)
    );
    let peer = initiator.handle();
    let caps = peer.capabilities().expect("capabilities");
    assert_eq!(&*caps.origin_host, "fd.test.local");
    assert_eq!(caps.product_name, "freeDiameter");
    assert!(caps.supported_vendor_ids.contains(&TGPP), "{caps:?}");
    assert!(
        caps.applications.contains(&Application::auth(RELAY)),
        "freeDiameter advertises Relay: {caps:?}"
    );
    assert!(peer.supports(GX));
    assert!(
        wait_log(&log, &[RCV_UNKNOWN, CER], Duration::from_secs(5)).await,
        "{}",
        with_log("freeDiameter did not log our CER", &log)
    );
    assert!(
        wait_log(&log, &[GX_IN_CAPABILITIES], Duration::from_secs(5)).await,
        "{}",
        with_log("freeDiameter did not decode our Gx application", &log)
    );
    assert!(
        wait_log(
            &log,
            &["'STATE_OPEN'", "pcrf.test.local"],
            Duration::from_secs(5)
        )
        .await,
        "{}",
        with_log("freeDiameter did not open the peer", &log)
    );

    // DWR/DWA: our watchdog (Tw 6 s, jittered); freeDiameter answers.
    assert!(
        wait_log(&log, &[RCV, DWR], Duration::from_secs(20)).await,
        "{}",
        with_log("freeDiameter received no DWR from us", &log)
    );
    assert!(
        wait_log(&log, &[SENT, DWA], Duration::from_secs(2)).await,
        "{}",
        with_log("freeDiameter did not answer our DWR", &log)
    );
    let c = wait_counters(&peer, 2, 2).await;
    assert!(
        c.messages_in >= 2 && c.messages_out >= 2,
        "CER/DWR out, CEA/DWA in: {c:?}"
    );
    assert!(peer.is_open());
    assert_eq!(peer.watchdog(), WatchdogState::Okay);

    // Our DPR, freeDiameter's DPA.
    initiator.shutdown(DisconnectCause::Rebooting).await;
    assert!(
        wait_log(&log, &[RCV, DPR], Duration::from_secs(5)).await,
        "{}",
        with_log("freeDiameter did not receive our DPR", &log)
    );
    assert!(
        log_has(&log, &[SENT, DPA]),
        "{}",
        with_log("freeDiameter did not answer DPA", &log)
    );
    let down = node.handler().down.lock().expect("lock").first().cloned();
    let down = down.expect("peer_down");
    assert_eq!(down.0, "fd.test.local");
    assert_eq!(
        down.1,
        CloseReason::LocalDisconnect(DisconnectCause::Rebooting)
    );
    assert!(
        down.2.messages_in >= 3,
        "CEA, DWA or DWR, DPA: {:?}",
        down.2
    );
    assert!(fd.running(), "freeDiameter must survive our disconnection");
}

/// Our PCRF behind the relay: answers CCR-I with 2001 and keeps the requests.
#[derive(Default)]
struct Pcrf {
    ccrs: Mutex<Vec<Message>>,
}

impl Handler for Pcrf {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        app_id == GX && cmd == cmd::CREDIT_CONTROL
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        let [rtype, rnum] = req.pick(&[avp::CC_REQUEST_TYPE, avp::CC_REQUEST_NUMBER])?;
        let mut out = BytesMut::new();
        let mut b = MessageBuilder::answer(&mut out, &req);
        b.u32(avp::AUTH_APPLICATION_ID, GX)
            .origin(&peer.local().origin_host, &peer.local().origin_realm)
            .result_code(2001);
        for a in [rtype, rnum].into_iter().flatten() {
            b.raw_avp(a.raw());
        }
        b.finish();
        self.ccrs.lock().expect("lock").push(req);
        Ok(out.freeze())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freediameter_relays_gx_between_our_nodes() {
    let dir = TempDir::new("fd-relay");
    // Our PCRF, which freeDiameter connects to.
    let pcrf = Node::new(
        LocalNode::new("pcrf.test.local", "pcrf.realm")
            .with_host_ip("127.0.0.1".parse().expect("ip"))
            .with_application(Application::auth_vendor(GX, TGPP)),
        // freeDiameter forwards pcef.test.local's requests: a relay may
        // speak for others (any other peer's requests must name itself).
        PeerSettings {
            relays: vec!["dra.test.local".into()],
            ..settings(30)
        },
        Pcrf::default(),
    );
    let server = pcrf.listen("127.0.0.1:0").await.expect("bind");
    let pcrf_port = server.local_addr().expect("addr").port();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async {
        let _ = stop_rx.await;
    }));

    let port = free_port();
    let conf = write_config_with(&dir, "freediameter-relay.conf", port, pcrf_port);
    let (_fd, log) = start_fd(&dir, &conf);
    assert!(
        wait_log(
            &log,
            &["'STATE_OPEN'", "'pcrf.test.local'"],
            Duration::from_secs(15)
        )
        .await,
        "{}",
        with_log("the relay did not open our PCRF", &log)
    );

    // Our PCEF side connects to the relay and sends a CCR-I for the PCRF's realm.
    let pcef = Node::new(
        LocalNode::new("pcef.test.local", "pcef.realm")
            .with_host_ip("127.0.0.1".parse().expect("ip"))
            .with_application(Application::auth_vendor(GX, TGPP)),
        settings(30),
        Recorder::default(),
    );
    let initiator = pcef.connect(([127, 0, 0, 1], port).into(), Some("dra.test.local"));
    assert!(
        initiator.wait_open(Duration::from_secs(15)).await,
        "{}",
        with_log("our PCEF side did not open the relay", &log)
    );
    let session = "pcef.test.local;1767225600;7";
    let cca = initiator
        .handle()
        .request(GX, cmd::CREDIT_CONTROL, |b| {
            b.str(avp::SESSION_ID, session)
                .u32(avp::AUTH_APPLICATION_ID, GX)
                .origin("pcef.test.local", "pcef.realm")
                .str(avp::DESTINATION_REALM, "pcrf.realm")
                .i32(avp::CC_REQUEST_TYPE, 1)
                .u32(avp::CC_REQUEST_NUMBER, 0)
                .group(avp::SUBSCRIPTION_ID, |g| {
                    g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                        .str(avp::SUBSCRIPTION_ID_DATA, "001010123456789");
                });
        })
        .await
        .unwrap_or_else(|e| panic!("{}", with_log(&format!("CCR through the relay: {e}"), &log)));

    // The answer is our PCRF's, relayed back.
    assert_eq!(cca.command_code(), cmd::CREDIT_CONTROL);
    assert!(!cca.is_request());
    assert_eq!(cca.session_id(), Ok(Some(session)));
    let [rc, host, rtype] = cca
        .pick(&[avp::RESULT_CODE, avp::ORIGIN_HOST, avp::CC_REQUEST_TYPE])
        .expect("well-formed");
    assert_eq!(rc.map(|a| a.as_u32()), Some(Ok(2001)));
    assert_eq!(host.map(|a| a.as_str()), Some(Ok("pcrf.test.local")));
    assert_eq!(rtype.map(|a| a.as_enum()), Some(Ok(1)));

    // The PCRF saw the request with the relay in its Route-Record.
    let ccrs = pcrf.handler().ccrs.lock().expect("lock").clone();
    assert_eq!(ccrs.len(), 1);
    let route: Vec<String> = ccrs[0]
        .avps()
        .filter_code(avp::ROUTE_RECORD)
        .map(|a| a.expect("ok").as_str().expect("identity").to_owned())
        .collect();
    assert_eq!(
        route,
        ["pcef.test.local"],
        "RFC 6733 §6.1.8: the relay records the peer it got the request from"
    );
    let [origin] = ccrs[0].pick(&[avp::ORIGIN_HOST]).expect("ok");
    assert_eq!(origin.map(|a| a.as_str()), Some(Ok("pcef.test.local")));

    // And freeDiameter's log shows both hops, both ways.
    for (dir_, peer_, flags) in [
        ("RCV from", "pcef.test.local", "16777238/272 f:RP"),
        ("SENT to", "pcrf.test.local", "16777238/272 f:RP"),
        ("RCV from", "pcrf.test.local", "16777238/272 f:-P"),
        ("SENT to", "pcef.test.local", "16777238/272 f:-P"),
    ] {
        let who = format!("{dir_} '{peer_}'");
        assert!(
            log_has(&log, &[&who, flags]),
            "{}",
            with_log(&format!("no {who} {flags}"), &log)
        );
    }

    initiator.shutdown(DisconnectCause::Rebooting).await;
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;
}
