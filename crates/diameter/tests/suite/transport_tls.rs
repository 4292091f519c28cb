//! Diameter over TLS on loopback (RFC 6733 §13, TLS on connect), with
//! certificates made in the test: a good mutual handshake then CER/CEA and
//! a request both ways, TLS 1.2 as well as 1.3, and every refusal the
//! listener owes: a certificate from another CA, an expired one, none at
//! all, one that does not name the Origin-Host of the CER (3010), a plain
//! TCP client, garbage before the handshake, and a TLS-only peer on the
//! plain listener. Also the start-up errors of `TlsConfig`.

use crate::tls_certs::{Ca, Leaf};
use bytes::{Bytes, BytesMut};
use diameter::codec::{DiameterError, FLAG_E, FLAG_R};
use diameter::dict::{avp, cmd};
use diameter::peer::{Application, CloseReason, LocalNode, PeerSettings, PeerState};
use diameter::transport::{Handler, Node, PeerHandle, ServesNothing, TlsConfig, TlsError};
use diameter::{result_code, Message, MessageBuilder};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

const GX: u32 = 16_777_238;
const CCR: u32 = 272;
const WAIT: Duration = Duration::from_secs(5);
const SERVER: &str = "pcrf.test.local";
const CLIENT: &str = "pgw.test.local";

/// Answers CCR with 2001 and records peers coming and going.
#[derive(Default)]
struct Gx {
    downs: Mutex<Vec<CloseReason>>,
}

impl Handler for Gx {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        app_id == GX && cmd == CCR
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        let mut out = BytesMut::new();
        let mut b = MessageBuilder::answer(&mut out, &req);
        b.result_code(result_code::DIAMETER_SUCCESS)
            .origin(&peer.local().origin_host, &peer.local().origin_realm)
            .u32(avp::AUTH_APPLICATION_ID, GX);
        b.finish();
        Ok(out.freeze())
    }

    fn peer_down(&self, _peer: &PeerHandle, reason: CloseReason) {
        self.downs.lock().expect("lock").push(reason);
    }
}

fn local(host: &str) -> LocalNode {
    LocalNode::new(host, "test.local").with_application(Application::auth_vendor(GX, 10415))
}

fn quick() -> PeerSettings {
    PeerSettings {
        dpa_timeout: Duration::from_millis(300),
        cer_timeout: Duration::from_secs(3),
        ..PeerSettings::default()
    }
}

fn tls(leaf: &Leaf, ca: &Ca) -> TlsConfig {
    TlsConfig::from_pem(
        leaf.cert.as_bytes(),
        leaf.key.as_bytes(),
        ca.pem.as_bytes(),
        true,
    )
    .expect("TLS config")
}

struct Running {
    addr: SocketAddr,
    node: Node<Gx>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    /// A TLS listener for `host` with these settings.
    async fn tls(host: &str, settings: PeerSettings, cfg: &TlsConfig) -> Running {
        let node = Node::new(local(host), settings, Gx::default());
        let server = node.listen_tls("127.0.0.1:0", cfg).await.expect("bind");
        assert!(server.is_tls());
        Self::run(node, server)
    }

    fn run(node: Node<Gx>, server: diameter::transport::Server<Gx>) -> Running {
        let addr = server.local_addr().expect("addr");
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = rx.await;
        }));
        Running {
            addr,
            node,
            stop: Some(tx),
            task,
        }
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("server stops in time")
            .expect("task")
            .expect("run");
    }
}

fn ccr(b: &mut MessageBuilder<'_>, n: u32) {
    ccr_from(b, n, CLIENT)
}

/// A CCR from `origin`: the peer that sends it must be that node (a
/// request naming another Origin-Host is refused 3010).
fn ccr_from(b: &mut MessageBuilder<'_>, n: u32, origin: &str) {
    b.str(avp::SESSION_ID, &format!("{origin};1;{n}"))
        .origin(origin, "test.local")
        .str(avp::DESTINATION_REALM, "test.local")
        .u32(avp::AUTH_APPLICATION_ID, GX)
        .u32(avp::CC_REQUEST_TYPE, 1)
        .u32(avp::CC_REQUEST_NUMBER, n);
}

fn rc(m: &Message) -> u32 {
    m.find(avp::RESULT_CODE)
        .expect("ok")
        .expect("Result-Code")
        .as_u32()
        .expect("u32")
}

fn raw_cer(host: &str) -> Bytes {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::new(&mut buf, FLAG_R, cmd::CAPABILITIES_EXCHANGE, 0, 7, 7);
    b.origin(host, "test.local")
        .address(avp::HOST_IP_ADDRESS, "127.0.0.1".parse().expect("ip"))
        .u32(avp::VENDOR_ID, 0)
        .str(avp::PRODUCT_NAME, "raw")
        .group(avp::VENDOR_SPECIFIC_APPLICATION_ID, |g| {
            g.u32(avp::VENDOR_ID, 10415)
                .u32(avp::AUTH_APPLICATION_ID, GX);
        });
    b.finish();
    buf.freeze()
}

/// Reads one Diameter message; `None` when the peer closed (or failed) first.
async fn recv<S: AsyncRead + Unpin>(s: &mut S) -> Option<Message> {
    let mut buf = BytesMut::new();
    loop {
        if buf.len() >= 4 {
            let len = u32::from_be_bytes([0, buf[1], buf[2], buf[3]]) as usize;
            if buf.len() >= len {
                return Message::parse(buf.split_to(len).freeze()).ok();
            }
        }
        let n = tokio::time::timeout(WAIT, s.read_buf(&mut buf))
            .await
            .expect("the server neither answered nor closed in time")
            .unwrap_or(0);
        if n == 0 {
            return None;
        }
    }
}

/// A raw rustls client (not our stack): to pick the TLS version, present
/// any certificate, and see the handshake's own result.
async fn raw_tls(
    addr: SocketAddr,
    client: Option<&Leaf>,
    trust: &Ca,
    version: &'static rustls::SupportedProtocolVersion,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(trust.pem.as_bytes()).expect("CA pem"))
        .expect("root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[version])
        .expect("versions")
        .with_root_certificates(roots);
    let cfg = match client {
        Some(l) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(l.cert.as_bytes()).expect("cert")],
                PrivateKeyDer::from_pem_slice(l.key.as_bytes()).expect("key"),
            )
            .expect("client cert"),
        None => builder.with_no_client_auth(),
    };
    let tcp = TcpStream::connect(addr).await?;
    let mut s = tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(ServerName::try_from(SERVER).expect("name"), tcp)
        .await?;
    // TLS 1.3 client certificates are judged after the client's Finished:
    // a refusal shows on the first read, so make the server speak.
    s.write_all(&raw_cer(CLIENT)).await?;
    Ok(s)
}

/// The handshake succeeded and the server answered our CER: with what.
async fn cea_over<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> Option<Message> {
    recv(s).await
}

/// Whether the server still serves a good peer (after abuse from another).
async fn still_serves(addr: SocketAddr, ca: &Ca) {
    let good = ca.leaf(&[CLIENT]);
    let mut s = raw_tls(addr, Some(&good), ca, &rustls::version::TLS13)
        .await
        .expect("good handshake");
    let cea = cea_over(&mut s).await.expect("CEA");
    assert_eq!(rc(&cea), 2001);
}

#[tokio::test]
async fn mutual_tls_then_cer_cea_and_requests_both_ways() {
    let ca = Ca::new("test CA");
    let srv = Running::tls(SERVER, quick(), &tls(&ca.leaf(&[SERVER]), &ca)).await;

    let client = Node::new(local(CLIENT), quick(), ServesNothing);
    let init = client.connect_tls(srv.addr, SERVER, &tls(&ca.leaf(&[CLIENT]), &ca));
    assert!(init.wait_open(WAIT).await, "TLS connection opens");
    let peer = init.handle();
    assert!(peer.is_tls());
    assert_eq!(peer.origin_host().as_deref(), Some(SERVER));
    let ans = peer.request(GX, CCR, |b| ccr(b, 1)).await.expect("answer");
    assert_eq!(rc(&ans), 2001);

    // The server side: registered, over TLS, and it can send to us.
    let on_server = srv.node.peer_table().get(CLIENT).expect("registered");
    assert!(on_server.is_tls());
    assert_eq!(on_server.state(), PeerState::Open);
    let back = on_server
        .request(GX, CCR, |b| ccr_from(b, 2, SERVER))
        .await
        .expect("the client answers");
    // The client serves nothing: 3001 proves the request crossed TLS and back.
    assert_eq!(rc(&back), result_code::DIAMETER_COMMAND_UNSUPPORTED);

    init.shutdown(diameter::peer::DisconnectCause::Rebooting)
        .await;
    srv.stop().await;
}

#[tokio::test]
async fn tls_1_2_and_1_3_are_both_accepted() {
    let ca = Ca::new("test CA");
    let srv = Running::tls(SERVER, quick(), &tls(&ca.leaf(&[SERVER]), &ca)).await;
    let leaf = ca.leaf(&[CLIENT]);
    for (v, name) in [
        (&rustls::version::TLS12, rustls::ProtocolVersion::TLSv1_2),
        (&rustls::version::TLS13, rustls::ProtocolVersion::TLSv1_3),
    ] {
        let mut s = raw_tls(srv.addr, Some(&leaf), &ca, v)
            .await
            .expect("handshake");
        assert_eq!(s.get_ref().1.protocol_version(), Some(name));
        let cea = cea_over(&mut s).await.expect("CEA");
        assert_eq!(rc(&cea), 2001, "{name:?}");
        drop(s);
        // One connection per Origin-Host: wait for the server to forget it.
        tokio::time::timeout(WAIT, async {
            while srv.node.peer_table().get(CLIENT).is_some() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("closed");
    }
    srv.stop().await;
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused_both_ways() {
    let ca = Ca::new("test CA");
    let other = Ca::new("someone else's CA");
    let srv = Running::tls(SERVER, quick(), &tls(&ca.leaf(&[SERVER]), &ca)).await;

    // A client whose certificate the server's CA did not sign.
    let stranger = other.leaf(&[CLIENT]);
    let refused = match raw_tls(srv.addr, Some(&stranger), &ca, &rustls::version::TLS13).await {
        Err(_) => true,
        Ok(mut s) => cea_over(&mut s).await.is_none(),
    };
    assert!(refused, "a certificate from an unknown CA got a CEA");

    // Our initiator, trusting only the other CA, refuses the server.
    let client = Node::new(local(CLIENT), quick(), ServesNothing);
    let init = client.connect_tls(srv.addr, SERVER, &tls(&other.leaf(&[CLIENT]), &other));
    assert!(!init.wait_open(Duration::from_secs(2)).await);
    assert!(srv.node.peer_table().is_empty());
    drop(init);

    still_serves(srv.addr, &ca).await;
    srv.stop().await;
}

#[tokio::test]
async fn an_expired_certificate_is_refused_both_ways() {
    let ca = Ca::new("test CA");
    let srv = Running::tls(SERVER, quick(), &tls(&ca.leaf(&[SERVER]), &ca)).await;
    let old = ca.expired_leaf(&[CLIENT]);
    let refused = match raw_tls(srv.addr, Some(&old), &ca, &rustls::version::TLS13).await {
        Err(_) => true,
        Ok(mut s) => cea_over(&mut s).await.is_none(),
    };
    assert!(refused, "an expired client certificate got a CEA");

    // A server whose certificate expired is refused by our initiator.
    let stale = Running::tls(SERVER, quick(), &tls(&ca.expired_leaf(&[SERVER]), &ca)).await;
    let client = Node::new(local(CLIENT), quick(), ServesNothing);
    let init = client.connect_tls(stale.addr, SERVER, &tls(&ca.leaf(&[CLIENT]), &ca));
    assert!(!init.wait_open(Duration::from_secs(2)).await);
    assert!(stale.node.peer_table().is_empty());
    drop(init);
    stale.stop().await;
    srv.stop().await;
}

#[tokio::test]
async fn no_client_certificate_is_refused_when_required() {
    let ca = Ca::new("test CA");
    let srv = Running::tls(SERVER, quick(), &tls(&ca.leaf(&[SERVER]), &ca)).await;
    let refused = match raw_tls(srv.addr, None, &ca, &rustls::version::TLS13).await {
        Err(_) => true,
        Ok(mut s) => cea_over(&mut s).await.is_none(),
    };
    assert!(refused, "a client without a certificate got a CEA");
    srv.stop().await;
}

#[tokio::test]
async fn a_certificate_not_naming_the_origin_host_gets_3010() {
    let ca = Ca::new("test CA");
    let srv = Running::tls(SERVER, quick(), &tls(&ca.leaf(&[SERVER]), &ca)).await;
    // Valid and trusted, but for another host than the CER's Origin-Host.
    let other = ca.leaf(&["other.test.local"]);
    let mut s = raw_tls(srv.addr, Some(&other), &ca, &rustls::version::TLS13)
        .await
        .expect("the handshake itself succeeds");
    let cea = cea_over(&mut s).await.expect("a CEA saying why");
    assert_eq!(rc(&cea), result_code::DIAMETER_UNKNOWN_PEER);
    assert_ne!(cea.flags() & FLAG_E, 0, "3010 is a protocol error");
    assert!(recv(&mut s).await.is_none(), "then the server closes");
    assert!(srv.node.peer_table().is_empty());

    // Our initiator: the server's certificate names the host we dialled,
    // but its CEA claims another Origin-Host: we close.
    let liar = Running::tls("evil.test.local", quick(), &tls(&ca.leaf(&[SERVER]), &ca)).await;
    let client = Node::new(local(CLIENT), quick(), ServesNothing);
    let init = client.connect_tls(liar.addr, SERVER, &tls(&ca.leaf(&[CLIENT]), &ca));
    assert!(!init.wait_open(Duration::from_secs(2)).await);
    assert!(client.peer_table().is_empty());
    // The liar saw us open (its CEA went out) and then drop the connection.
    tokio::time::timeout(WAIT, async {
        while liar.node.handler().downs.lock().expect("lock").is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the initiator dropped the connection");
    assert_eq!(
        liar.node.handler().downs.lock().expect("lock")[0],
        CloseReason::TransportClosed
    );
    drop(init);
    liar.stop().await;
    srv.stop().await;
}

#[tokio::test]
async fn plain_tcp_and_garbage_on_the_tls_port_are_closed_without_harm() {
    let ca = Ca::new("test CA");
    let srv = Running::tls(SERVER, quick(), &tls(&ca.leaf(&[SERVER]), &ca)).await;

    // A plain Diameter client: its CER is not a TLS record.
    let mut plain = TcpStream::connect(srv.addr).await.expect("connect");
    plain.write_all(&raw_cer(CLIENT)).await.expect("write");
    let mut buf = Vec::new();
    let n = tokio::time::timeout(WAIT, plain.read_to_end(&mut buf))
        .await
        .expect("closed in time")
        .unwrap_or(0);
    // At most a TLS alert record (content type 21), never a Diameter answer.
    assert!(n == 0 || buf[0] == 21, "unexpected reply {buf:?}");

    // Garbage, a half TLS record header, and a connect-and-close.
    for junk in [&[0xffu8; 300][..], &[0x16, 0x03, 0x01, 0x40][..], &[][..]] {
        let mut s = TcpStream::connect(srv.addr).await.expect("connect");
        s.write_all(junk).await.expect("write");
        drop(s);
    }
    assert!(srv.node.peer_table().is_empty());
    still_serves(srv.addr, &ca).await;
    srv.stop().await;
}

#[tokio::test]
async fn a_tls_only_peer_is_refused_on_the_plain_listener() {
    let settings = PeerSettings {
        tls_required: vec!["PGW.test.local".into()],
        ..quick()
    };
    let node = Node::new(local(SERVER), settings, Gx::default());
    let server = node.listen("127.0.0.1:0").await.expect("bind");
    assert!(!server.is_tls());
    let srv = Running::run(node, server);
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    s.write_all(&raw_cer(CLIENT)).await.expect("write");
    let cea = recv(&mut s).await.expect("CEA");
    assert_eq!(rc(&cea), result_code::DIAMETER_UNKNOWN_PEER);
    assert!(recv(&mut s).await.is_none(), "then the server closes");
    // Another peer may still use plain TCP.
    let mut s = TcpStream::connect(srv.addr).await.expect("connect");
    s.write_all(&raw_cer("other.test.local"))
        .await
        .expect("write");
    assert_eq!(rc(&recv(&mut s).await.expect("CEA")), 2001);
    srv.stop().await;
}

#[test]
fn tls_config_errors_say_what_is_wrong() {
    let ca = Ca::new("test CA");
    let a = ca.leaf(&[SERVER]);
    let b = ca.leaf(&[SERVER]);
    let pem = |s: &str| s.as_bytes().to_vec();

    let e = TlsConfig::from_pem(&pem(&a.cert), &pem(&b.key), &pem(&ca.pem), true)
        .expect_err("mismatched key");
    assert!(matches!(e, TlsError::KeyMismatch), "{e}");
    assert_eq!(
        e.to_string(),
        "the private key does not match the certificate"
    );

    let e = TlsConfig::from_pem(&pem(&a.cert), &pem(&a.cert), &pem(&ca.pem), true)
        .expect_err("a certificate is no key");
    assert!(matches!(e, TlsError::NoPrivateKey { .. }), "{e}");

    let e = TlsConfig::from_pem(b"", &pem(&a.key), &pem(&ca.pem), true).expect_err("no cert");
    assert!(matches!(e, TlsError::NoCertificate { .. }), "{e}");

    let e =
        TlsConfig::from_pem(&pem(&a.cert), &pem(&a.key), b"nothing here", true).expect_err("no CA");
    assert!(matches!(e, TlsError::NoCertificate { .. }), "{e}");
    assert!(e.to_string().starts_with("CA:"), "{e}");

    let missing = std::path::Path::new("/nonexistent/pcrf-test/cert.pem");
    let e = TlsConfig::from_pem_files(missing, missing, missing, true).expect_err("missing");
    assert!(
        e.to_string()
            .starts_with("cannot read the certificate file /nonexistent/pcrf-test/cert.pem:"),
        "{e}"
    );

    let ok = TlsConfig::from_pem(&pem(&a.cert), &pem(&a.key), &pem(&ca.pem), false).expect("ok");
    assert!(!ok.requires_client_certificate());
}
