//! Diameter over TLS against freeDiameter 1.2.1 (GnuTLS), an independent
//! implementation of RFC 6733 §13 TLS on connect: freeDiameter connects to
//! our TLS listener with its own certificate, both sides check the other's
//! certificate against the CA and the DiameterIdentity, and CER/CEA and a
//! DWR/DWA cross the TLS session; then the other way round, our initiator
//! connecting to freeDiameter's TLS port. (A certificate that does not name the
//! peer's Identity cannot be tried with freeDiameter: it refuses to start
//! with one; tests/suite/transport_tls.rs covers our 3010 for it.)

use crate::support::{free_port, interop_dir, read_lossy, require_tool, ChildGuard, TempDir};
use crate::tls_certs::{Ca, Leaf};
use bytes::Bytes;
use diameter::peer::{Application, LocalNode, PeerSettings, PeerState};
use diameter::transport::{Handler, Node, PeerHandle, ServesNothing, TlsConfig};
use diameter::{DiameterError, Message};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const GX: u32 = 16_777_238;
const TGPP: u32 = 10_415;
const FD_EXTENSIONS: &str = "/usr/lib/freeDiameter";

/// Records which peers came up, and over what.
#[derive(Default)]
struct Recorder {
    up: Mutex<Vec<(String, bool)>>,
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
        self.up.lock().expect("lock").push((host, peer.is_tls()));
    }
}

fn write(dir: &TempDir, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p.display().to_string()
}

fn write_config(dir: &TempDir, template: &str, port: u16, fd: &Leaf, ca: &Ca) -> PathBuf {
    let cert = write(dir, "fd.pem", &fd.cert);
    let key = write(dir, "fd.key", &fd.key);
    let ca = write(dir, "ca.pem", &ca.pem);
    let text = std::fs::read_to_string(interop_dir().join(template))
        .expect("read template")
        .replace(
            "@ACL@",
            &interop_dir()
                .join("freediameter-tls-acl.conf")
                .display()
                .to_string(),
        )
        .replace("@PORT@", &port.to_string())
        .replace("@EXT@", FD_EXTENSIONS)
        .replace("@CERT@", &cert)
        .replace("@KEY@", &key)
        .replace("@CA@", &ca);
    let path = dir.join(template);
    std::fs::write(&path, text).expect("write config");
    path
}

fn start_fd(dir: &TempDir, conf: &Path) -> (ChildGuard, PathBuf) {
    require_tool("freeDiameterd");
    let log = dir.join("freeDiameterd.log");
    let f = std::fs::File::create(&log).expect("log");
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

fn with_log(what: &str, log: &Path) -> String {
    format!("{what}\n--- freeDiameterd log ---\n{}", read_lossy(log))
}

/// Our TLS listener for pcrf.test.local, running until the sender drops.
async fn listen(
    ca: &Ca,
) -> (
    Node<Recorder>,
    u16,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let leaf = ca.leaf(&["pcrf.test.local"]);
    let tls = TlsConfig::from_pem(
        leaf.cert.as_bytes(),
        leaf.key.as_bytes(),
        ca.pem.as_bytes(),
        true,
    )
    .expect("TLS config");
    let local = LocalNode::new("pcrf.test.local", "test.local")
        .with_host_ip("127.0.0.1".parse().expect("ip"))
        .with_application(Application::auth_vendor(GX, TGPP));
    let settings = PeerSettings {
        tw: Duration::from_secs(30),
        ..PeerSettings::default()
    };
    let node = Node::new(local, settings, Recorder::default());
    let server = node.listen_tls("127.0.0.1:0", &tls).await.expect("bind");
    let port = server.local_addr().expect("addr").port();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = rx.await;
    }));
    (node, port, tx, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn freediameter_connects_over_tls_with_mutual_certificates() {
    let ca = Ca::new("interop CA");
    let dir = TempDir::new("fd-tls");
    let (node, port, stop, serving) = listen(&ca).await;
    let conf = write_config(
        &dir,
        "freediameter-tls-initiator.conf",
        port,
        &ca.leaf(&["fd.test.local"]),
        &ca,
    );
    let (mut fd, log) = start_fd(&dir, &conf);

    let t = Instant::now();
    let mut peer = None;
    while t.elapsed() < Duration::from_secs(15) && peer.is_none() {
        peer = node.peer_table().get("fd.test.local");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let peer =
        peer.unwrap_or_else(|| panic!("{}", with_log("freeDiameter never opened over TLS", &log)));
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
    assert!(peer.is_tls());
    assert_eq!(
        node.handler().up.lock().expect("lock").as_slice(),
        [("fd.test.local".to_string(), true)]
    );
    // A watchdog round over TLS (freeDiameter's Tw is 6 s, ours 30 s).
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(12) && peer.counters().snapshot().messages_in < 2 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c = peer.counters().snapshot();
    assert!(
        c.messages_in >= 2 && c.messages_out >= 2,
        "CER + DWR in, CEA + DWA out: {c:?}\n{}",
        with_log("", &log)
    );
    assert!(
        read_lossy(&log).contains("STATE_OPEN"),
        "{}",
        with_log("freeDiameter did not reach STATE_OPEN", &log)
    );
    fd.signal("TERM");
    let _ = fd.wait_timeout(Duration::from_secs(10));
    drop(stop);
    let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_initiator_connects_to_freediameter_over_tls() {
    let ca = Ca::new("interop CA");
    let dir = TempDir::new("fd-tls-responder");
    let port = free_port();
    let conf = write_config(
        &dir,
        "freediameter-tls-responder.conf",
        port,
        &ca.leaf(&["fd.test.local"]),
        &ca,
    );
    let (mut fd, log) = start_fd(&dir, &conf);
    let leaf = ca.leaf(&["pcrf.test.local"]);
    let tls = TlsConfig::from_pem(
        leaf.cert.as_bytes(),
        leaf.key.as_bytes(),
        ca.pem.as_bytes(),
        true,
    )
    .expect("TLS config");
    let local = LocalNode::new("pcrf.test.local", "test.local")
        .with_host_ip("127.0.0.1".parse().expect("ip"))
        .with_application(Application::auth_vendor(GX, TGPP));
    let settings = PeerSettings {
        tw: Duration::from_secs(6),
        reconnect_initial: Duration::from_millis(300),
        ..PeerSettings::default()
    };
    let node = Node::new(local, settings, ServesNothing);
    let addr = format!("127.0.0.1:{port}").parse().expect("addr");
    let init = node.connect_tls(addr, "fd.test.local", &tls);
    assert!(
        init.wait_open(Duration::from_secs(15)).await,
        "{}",
        with_log("no TLS connection to freeDiameter", &log)
    );
    let peer = init.handle();
    assert!(peer.is_tls());
    assert_eq!(peer.origin_host().as_deref(), Some("fd.test.local"));
    // Our DWR (Tw 6 s) answered over TLS.
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(12) && peer.counters().snapshot().messages_in < 2 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c = peer.counters().snapshot();
    assert!(
        c.messages_in >= 2,
        "CEA + DWA: {c:?}\n{}",
        with_log("", &log)
    );
    init.shutdown(diameter::peer::DisconnectCause::Rebooting)
        .await;
    fd.signal("TERM");
    let _ = fd.wait_timeout(Duration::from_secs(10));
}
