//! A RAR for a PCEF that reaches the PCRF only through a routing agent:
//! freeDiameter 1.2.1 (`freeDiameterd`, a real DRA) connects to `pcrf
//! serve` and advertises the Relay application; the PCEF is connected to
//! freeDiameter alone. Its CCR-I crosses the relay by Destination-Realm,
//! and a provisioning change then goes back as a RAR through the relay,
//! with Destination-Host naming the PCEF, which freeDiameter routes to it.

mod support;

use diameter::dict::avp;
use diameter::peer::{Application, DisconnectCause, LocalNode, PeerSettings};
use diameter::transport::Node;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::*;

const IMSI: &str = "001010000000001";
const FD_EXTENSIONS: &str = "/usr/lib/freeDiameter";

const RELAY_PEER: &str = r#"
[[peers]]
origin_host = "dra.test.local"
addresses = ["127.0.0.1"]
relay = true
"#;

/// freeDiameterd, killed when dropped.
struct Fd(std::process::Child);

impl Drop for Fd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// freeDiameter as a relay: the PCEF connects on `port`, it connects to
/// the PCRF at `pcrf_port`; both may connect without TLS.
fn start_relay(dir: &Path, port: u16, pcrf_port: u16) -> (Fd, std::path::PathBuf) {
    assert!(
        Path::new(FD_EXTENSIONS)
            .join("dict_dcca_3gpp.fdx")
            .is_file(),
        "freediameter-extensions is not installed; run scripts/install-test-deps.sh"
    );
    let acl = dir.join("acl.conf");
    std::fs::write(
        &acl,
        "ALLOW_IPSEC pcrf.test.local\nALLOW_IPSEC pgw.test.local\n",
    )
    .expect("write acl");
    let conf = dir.join("relay.conf");
    std::fs::write(
        &conf,
        format!(
            r#"Identity = "dra.test.local";
Realm = "dra.realm";
Port = {port};
SecPort = 0;
No_SCTP;
No_IPv6;
TcTimer = 5;
TwTimer = 30;
LoadExtension = "{FD_EXTENSIONS}/dict_nasreq.fdx";
LoadExtension = "{FD_EXTENSIONS}/dict_dcca.fdx";
LoadExtension = "{FD_EXTENSIONS}/dict_dcca_3gpp.fdx";
LoadExtension = "{FD_EXTENSIONS}/acl_wl.fdx" : "{acl}";
ConnectPeer = "pcrf.test.local" {{ ConnectTo = "127.0.0.1"; Port = {pcrf_port}; No_TLS; }};
"#,
            acl = acl.display()
        ),
    )
    .expect("write relay config");
    let log = dir.join("freeDiameterd.log");
    let f = std::fs::File::create(&log).expect("log");
    let child = Command::new("stdbuf")
        .args(["-oL", "-eL", "freeDiameterd", "-dd", "-c"])
        .arg(&conf)
        .stdin(Stdio::null())
        .stdout(f.try_clone().expect("dup"))
        .stderr(f)
        .spawn()
        .expect("freeDiameterd (run scripts/install-test-deps.sh)");
    (Fd(child), log)
}

fn log_has(log: &Path, parts: &[&str]) -> bool {
    String::from_utf8_lossy(&std::fs::read(log).unwrap_or_default())
        .lines()
        .any(|l| parts.iter().all(|p| l.contains(p)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rar_for_a_pcef_behind_the_routing_agent_goes_through_it() {
    let p = Pcrf::start(RELAY_PEER);
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let port = free_port();
    let (_fd, log) = start_relay(&p.dir, port, p.diameter.port());
    let fd_log = || String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).into_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log_has(&log, &["'STATE_OPEN'", "'pcrf.test.local'"]) {
        assert!(
            Instant::now() < deadline,
            "the relay did not open the PCRF:\n{}\n{}",
            fd_log(),
            p.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The PCEF, connected to the relay only.
    let handler = Arc::new(PcefHandler {
        rars: Mutex::new(Vec::new()),
        raa_code: AtomicU32::new(2001),
    });
    let node = Node::with_parts(
        Arc::new(
            LocalNode::new("pgw.test.local", "test.local")
                .with_host_ip("127.0.0.1".parse().expect("ip"))
                .with_application(Application::auth_vendor(GX, TGPP)),
        ),
        // The relay forwards the PCRF's requests: it may speak for others.
        Arc::new(PeerSettings {
            request_timeout: Duration::from_secs(10),
            relays: vec!["dra.test.local".into()],
            ..PeerSettings::default()
        }),
        handler.clone(),
        diameter::transport::PeerTable::new(),
    );
    let pcef = node.connect(([127, 0, 0, 1], port).into(), Some("dra.test.local"));
    assert!(
        pcef.wait_open(Duration::from_secs(15)).await,
        "the PCEF did not open the relay:\n{}",
        fd_log()
    );
    let sid = "pgw.test.local;relay;1";
    let cca = send_gx_ccr(&pcef.handle(), false, sid, 1, 0, |b| initial_avps(b, IMSI)).await;
    assert_eq!(result_of(&cca), 2001, "{}", p.log());
    assert_eq!(apn_ambr(&cca).map(|a| a.0), Some(5_000_000));

    // A plan change: the RAR goes through the relay to the PCEF.
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"unlimited"}"#);
    let deadline = Instant::now() + Duration::from_secs(10);
    let rar = loop {
        if let Some(r) = handler.rars.lock().expect("lock").first() {
            break r.0.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no RAR reached the PCEF:\n{}\n{}",
            p.log(),
            fd_log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(rar.session_id().ok().flatten(), Some(sid));
    assert_eq!(apn_ambr(&rar).map(|a| a.0), Some(50_000_000));
    let [host, realm] = rar
        .pick(&[avp::DESTINATION_HOST, avp::DESTINATION_REALM])
        .expect("well-formed");
    assert_eq!(host.map(|a| a.as_str()), Some(Ok("pgw.test.local")));
    assert_eq!(realm.map(|a| a.as_str()), Some(Ok("test.local")));
    // The relay recorded the PCRF on the way (RFC 6733 §6.1.8).
    let route: Vec<String> = rar
        .avps()
        .filter_code(avp::ROUTE_RECORD)
        .filter_map(|a| a.ok().and_then(|a| a.as_str().ok().map(str::to_owned)))
        .collect();
    assert_eq!(route, ["pcrf.test.local"]);
    // The RAA came back the same way.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !p
        .metrics()
        .contains(r#"pcrf_requests_total{command="RAR",result_code="2001"} 1"#)
    {
        assert!(
            Instant::now() < deadline,
            "RAA not counted:\n{}",
            p.metrics()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pcef.shutdown(DisconnectCause::Rebooting).await;
}
