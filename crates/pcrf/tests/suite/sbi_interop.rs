//! The SBI listener against independent HTTP/2 clients, over real sockets:
//! Python's httpx plays both SMFs (tests/n7/sbi_smf.py: the Create bodies
//! open5gs's and free5gc's SMFs send, then Get, free5gc's Update, Delete)
//! over TLS with ALPN h2 and over h2c, and Debian's `nghttp` gives a second
//! opinion on h2c with prior knowledge. One test runs both SMFs against a
//! whole node and its policy; the others answer through
//! `support::TestSmPolicies`, a minimal implementation of the seam for the
//! tests only (tests/suite/support/n7_seam.rs), where what is under test is the
//! listener, its routes, the decoder and the decision as written.

use crate::support;

use pcrf::sbi::{SbiConfig, SbiTls};
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/n7")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Runs the SMF script against `base`; its steps by name.
fn smf(base: &str, ca: &str) -> HashMap<String, Value> {
    let dir = fixtures();
    let out = Command::new("python3")
        .arg(dir.join("sbi_smf.py"))
        .arg(base)
        .arg(ca)
        .arg(dir.join("open5gs-create.json"))
        .arg(dir.join("free5gc-create.json"))
        .arg(dir.join("free5gc-update.json"))
        .output()
        .expect("python3 with httpx (scripts/install-test-deps.sh)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| Some((v["step"].as_str()?.to_owned(), v)))
        .collect()
}

fn check_steps(steps: &HashMap<String, Value>) {
    let step = |name: &str| {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}: {steps:?}"))
    };
    for smf in ["open5gs", "free5gc"] {
        let c = step(&format!("create_{smf}"));
        assert_eq!(c["status"], 201, "{c}");
        assert_eq!(c["http_version"], "HTTP/2", "{c}");
        assert!(
            c["location_id"].is_string(),
            "free5gc's Location pattern: {c}"
        );
        assert_eq!(c["session_rule_complete"], true, "{c}");
        let triggers = c["triggers"].as_array().expect("triggers");
        for t in ["SE_AMBR_CH", "DEF_QOS_CH"] {
            assert!(triggers.iter().any(|x| x == t), "{t}: {c}");
        }
        assert_eq!(c["dynamic_rules"], 1, "{c}");
        assert_eq!(c["dynamic_rules_applied"], 1, "{c}");
        let g = step(&format!("get_{smf}"));
        assert_eq!(g["status"], 200, "{g}");
        assert_eq!(g["has_policy"], true, "{g}");
        assert_eq!(step(&format!("delete_{smf}"))["status"], 204);
        let gone = step(&format!("get_deleted_{smf}"));
        assert_eq!(gone["status"], 404, "{gone}");
        assert_eq!(gone["content_type"], "application/problem+json", "{gone}");
        assert_eq!(gone["cause"], "CONTEXT_NOT_FOUND", "{gone}");
    }
    assert_eq!(step("get_open5gs")["supi"], "imsi-001010000000001");
    assert_eq!(step("get_free5gc")["supi"], "imsi-208930000000003");
    let u = step("update_free5gc");
    assert_eq!(u["status"], 200, "{u}");
    assert_eq!(u["content_type"], "application/json", "{u}");
}

#[test]
fn both_smfs_over_h2c() {
    let rt = runtime();
    let (addr, _) = support::start_sbi(&rt, SbiConfig::default(), None);
    check_steps(&smf(&format!("http://{addr}"), "-"));
}

/// Both SMFs' request shapes against a whole node: the example policy
/// decides (the vip plan's dynamic rule, AMBR and default QoS), and each
/// answer is what that SMF needs to apply it in full.
#[test]
fn both_smfs_against_the_node_and_its_policy() {
    let sbi = support::free_port();
    let p = support::Pcrf::start(&format!("[sbi]\nlisten = \"127.0.0.1:{sbi}\"\n"));
    for imsi in ["001010000000001", "208930000000003"] {
        p.provision(imsi, r#"{"plan":"basic","services":["vip"]}"#);
    }
    check_steps(&smf(&format!("http://127.0.0.1:{sbi}"), "-"));
}

#[test]
fn both_smfs_over_tls_with_alpn_h2() {
    let dir = std::env::temp_dir().join(format!("pcrf-sbi-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "SBI test CA");
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .expect("params")
        .signed_by(&key, &issuer)
        .expect("leaf");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    };
    let ca_file = write("ca.pem", &ca.pem());
    let tls = SbiTls {
        certificate: write("sbi.pem", &cert.pem()),
        private_key: write("sbi.key", &key.serialize_pem()),
        ca: None,
        require_client_certificate: false,
    };
    let server_config = pcrf::sbi::config::h2_tls(&tls).expect("TLS loads");
    assert_eq!(server_config.alpn_protocols, vec![b"h2".to_vec()]);
    let rt = runtime();
    let (addr, _) = support::start_sbi(&rt, SbiConfig::default(), Some(server_config));
    let base = format!("https://localhost:{}", addr.port());
    check_steps(&smf(&base, &ca_file.display().to_string()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// nghttp (nghttp2, C) as a second opinion: h2c with prior knowledge, the
/// frames it shows, and the answer.
#[test]
fn nghttp_speaks_h2c_with_prior_knowledge() {
    let rt = runtime();
    let (addr, _) = support::start_sbi(&rt, SbiConfig::default(), None);
    let body = fixtures().join("free5gc-create.json");
    let out = Command::new("nghttp")
        .args(["-v", "-H", "content-type: application/json", "-d"])
        .arg(&body)
        .arg(format!("http://{addr}/npcf-smpolicycontrol/v1/sm-policies"))
        .output()
        .expect("nghttp (nghttp2-client, scripts/install-test-deps.sh)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains(":status: 201"), "{text}");
    assert!(text.contains("location: http://"), "{text}");
    assert!(text.contains("\"sessRules\""), "{text}");
}

/// An operation that never finishes is answered 504 TIMED_OUT_REQUEST
/// after `request_timeout_secs`, and the connection serves on. The seam
/// here is the test's own: every operation hangs.
#[test]
fn a_request_not_answered_in_time_gets_504() {
    use pcrf::n7::model::*;
    use pcrf::n7::service::{Created, OpFuture, SmPolicyService};
    struct Hangs;
    impl SmPolicyService for Hangs {
        fn create(&self, _: SmPolicyContextData) -> OpFuture<'_, Created> {
            Box::pin(std::future::pending())
        }
        fn get(&self, _: &str) -> OpFuture<'_, SmPolicyControl> {
            Box::pin(std::future::pending())
        }
        fn update(
            &self,
            _: &str,
            _: SmPolicyUpdateContextData,
            _: pcrf::n7::repeat::RequestDigest,
        ) -> OpFuture<'_, SmPolicyDecision> {
            Box::pin(std::future::pending())
        }
        fn delete(&self, _: &str, _: SmPolicyDeleteData) -> OpFuture<'_, ()> {
            Box::pin(std::future::pending())
        }
    }
    let rt = runtime();
    let config = SbiConfig {
        request_timeout_secs: 1,
        ..SbiConfig::default()
    };
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let stats = std::sync::Arc::new(pcrf::sbi::stats::SbiStats::new());
    let routes = pcrf::sbi::routes::Routes {
        service: std::sync::Arc::new(Hangs),
        app_sessions: None,
        spending: None,
        stats: stats.clone(),
        max_body_bytes: config.max_body_bytes,
        decode_limits: config.decode_limits(),
        request_timeout: config.request_timeout(),
        scheme: "http",
        fallback_authority: addr.to_string(),
    };
    rt.spawn(async move {
        let _ =
            pcrf::sbi::server::serve(listener, routes, &config, None, std::future::pending()).await;
    });
    // Two requests on one connection: both time out, neither holds the other.
    let url = format!("http://{addr}/npcf-smpolicycontrol/v1/sm-policies/1");
    let out = Command::new("nghttp")
        .args(["-v", &url, &format!("{url}x")])
        .output()
        .expect("nghttp");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches(":status: 504").count(), 2, "{text}");
    assert!(text.contains("TIMED_OUT_REQUEST"), "{text}");
    assert_eq!(stats.requests(pcrf::sbi::stats::Operation::Get, 504), 2);
}
