//! Diameter over TLS against the real `pcrf serve` (RFC 6733 §13, TLS on
//! connect): `[diameter.tls]` opens a second listener beside the plain
//! one; a PCEF with a certificate from the configured CA opens a Gx
//! session over it, `pcrf client gx`'s TLS option does too, a certificate
//! from another CA is refused, and a peer configured `tls = true` is
//! refused on the plain port. Certificates are made in the test.

use crate::support;

use crate::tls_certs;

use diameter::peer::{Application, DisconnectCause, LocalNode, PeerSettings};
use diameter::transport::{Node, ServesNothing, TlsConfig};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;
use support::*;
use tls_certs::{Ca, Leaf};

const IMSI: &str = "001010000000077";

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
}

fn write_leaf(dir: &Path, name: &str, leaf: &Leaf) -> (String, String) {
    let cert = dir.join(format!("{name}.pem"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&cert, &leaf.cert).expect("write cert");
    std::fs::write(&key, &leaf.key).expect("write key");
    (cert.display().to_string(), key.display().to_string())
}

fn node(host: &str) -> Node<ServesNothing> {
    let local =
        LocalNode::new(host, "test.local").with_application(Application::auth_vendor(GX, TGPP));
    Node::new(local, PeerSettings::default(), ServesNothing)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_pcef_opens_a_gx_session_and_strangers_are_refused() {
    let ca = Ca::new("operator CA");
    let dir = scratch_dir("tls-certs");
    let (cert, key) = write_leaf(&dir, "pcrf", &ca.leaf(&["pcrf.test.local"]));
    let ca_path = dir.join("ca.pem");
    std::fs::write(&ca_path, &ca.pem).expect("write ca");
    let tls_addr = free_addr();
    let p = Pcrf::start(&format!(
        r#"
[diameter.tls]
listen = "{tls_addr}"
certificate = "{cert}"
private_key = "{key}"
ca = "{ca}"

[[peers]]
origin_host = "pgw-tls.test.local"
tls = true
"#,
        ca = ca_path.display()
    ));
    p.provision(IMSI, r#"{"msisdn":"491700000077","plan":"basic"}"#);
    assert!(
        p.log().contains("Diameter over TLS listening"),
        "{}",
        p.log()
    );

    // A TLS-only PCEF: a Gx session over TLS.
    let pgw = node("pgw-tls.test.local");
    let init = pgw.connect_tls(
        tls_addr,
        "pcrf.test.local",
        &tls(&ca.leaf(&["pgw-tls.test.local"]), &ca),
    );
    assert!(
        init.wait_open(Duration::from_secs(10)).await,
        "TLS PCEF connects:\n{}",
        p.log()
    );
    assert!(init.handle().is_tls());
    let session = "pgw-tls.test.local;1;1";
    let cca = init
        .handle()
        .request(GX, diameter::dict::cmd::CREDIT_CONTROL, |b| {
            b.str(diameter::dict::avp::SESSION_ID, session)
                .u32(diameter::dict::avp::AUTH_APPLICATION_ID, GX)
                .origin("pgw-tls.test.local", "test.local")
                .str(diameter::dict::avp::DESTINATION_REALM, "test.local")
                .i32(diameter::dict::avp::CC_REQUEST_TYPE, 1)
                .u32(diameter::dict::avp::CC_REQUEST_NUMBER, 0);
            initial_avps(b, IMSI);
        })
        .await
        .expect("CCA");
    assert_eq!(result_of(&cca), 2001);
    let (status, body) = p.http("GET", &format!("/v1/sessions?subscriber={IMSI}"), None);
    assert_eq!(status, 200, "{body}");
    assert!(body.to_string().contains(session), "{body}");
    init.shutdown(DisconnectCause::Rebooting).await;

    // The same peer over plain TCP: refused (it is configured tls = true).
    let plain = node("pgw-tls.test.local").connect(p.diameter, Some("pcrf.test.local"));
    assert!(!plain.wait_open(Duration::from_secs(2)).await);
    drop(plain);

    // A certificate the operator's CA did not sign.
    let rogue_ca = Ca::new("rogue CA");
    let rogue = node("pgw.test.local").connect_tls(
        tls_addr,
        "pcrf.test.local",
        &tls(&rogue_ca.leaf(&["pgw.test.local"]), &ca),
    );
    assert!(!rogue.wait_open(Duration::from_secs(2)).await);
    drop(rogue);

    // `pcrf client gx` with its TLS option, as the allowed plain peer
    // pgw.test.local (TLS is allowed to any peer, required of some).
    let (ccert, ckey) = write_leaf(&dir, "pgw", &ca.leaf(&["pgw.test.local"]));
    let opts = pcrf::client::GxClientOptions {
        server: tls_addr,
        origin_host: "pgw.test.local".into(),
        origin_realm: "test.local".into(),
        imsi: IMSI.into(),
        msisdn: None,
        apn: "internet".into(),
        ue_ip: "10.0.0.77".parse().expect("ip"),
        updates: 0,
        reports: Vec::new(),
        hold: Duration::ZERO,
        keep_session: false,
    };
    let tls_opts = pcrf::client::GxClientTls {
        certificate: ccert.into(),
        private_key: ckey.into(),
        ca: ca_path.clone(),
        server_host: "pcrf.test.local".into(),
    };
    pcrf::client::run(opts, Some(tls_opts), std::future::pending())
        .await
        .expect("pcrf client gx over TLS");

    let log = p.log();
    assert!(
        log.contains("peer refused: it must connect over TLS"),
        "{log}"
    );
    assert!(log.contains("TLS handshake failed"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
