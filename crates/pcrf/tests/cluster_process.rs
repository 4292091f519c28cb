//! Two `pcrf serve` processes on one PostgreSQL database: each lists the
//! other in `GET /v1/cluster` and sees it turn not alive after `kill -9`;
//! a subscriber provisioned, changed or deleted through one node is used
//! by the next CCR on the other, whose PCEF gets the re-decision in a RAR.
//! A top-up and a DELETE through the node that does not hold the session
//! take it over and reach the PCEF. Also `GET /v1/cluster` on the embedded store (this node alone). Needs a
//! real server: PCRF_TEST_DATABASE_URL (scripts/test.sh sets it up).

mod support;

use diameter::codec::Message;
use diameter::dict::avp;
use diameter::peer::{Application, DisconnectCause, LocalNode, PeerSettings};
use diameter::transport::{Initiator, Node};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::*;

const IMSI: &str = "001010000000001";

const CLUSTER: &str = r#"
[cluster]
heartbeat_interval_ms = 200
node_timeout_ms = 1000
"#;

/// A fresh schema of the test database, and the URL that uses it.
async fn test_schema() -> String {
    let base = std::env::var("PCRF_TEST_DATABASE_URL")
        .expect("PCRF_TEST_DATABASE_URL is not set: run scripts/test.sh, which starts PostgreSQL and sets it");
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(conn);
    let name = format!(
        "cluster_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    );
    client
        .batch_execute(&format!("CREATE SCHEMA {name}"))
        .await
        .expect("create schema");
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-csearch_path%3D{name}")
}

/// Two nodes on the database `url`: A is `pcrf.test.local`, B is
/// `pcrf-b.test.local` (started under the harness's name, then renamed).
fn two_nodes(url: &str) -> (Pcrf, Pcrf) {
    two_nodes_with(url, CLUSTER)
}

/// As `two_nodes`, `extra` in both configurations.
fn two_nodes_with(url: &str, extra: &str) -> (Pcrf, Pcrf) {
    let store = format!("kind = \"postgres\"\nurl = \"{url}\"");
    let mut b = Pcrf::start_with_store(Some(&store), extra);
    b.terminate();
    let text = std::fs::read_to_string(&b.config).expect("config");
    let renamed = text.replace(
        "origin_host = \"pcrf.test.local\"",
        "origin_host = \"pcrf-b.test.local\"",
    );
    assert_ne!(text, renamed);
    std::fs::write(&b.config, renamed).expect("write config");
    b.restart();
    let a = Pcrf::start_with_store(Some(&store), extra);
    (a, b)
}

/// Polls `check` until it holds or `within` passes; the last value.
fn wait_for<T>(within: Duration, mut check: impl FnMut() -> (bool, T)) -> (bool, T) {
    let deadline = Instant::now() + within;
    loop {
        let (ok, v) = check();
        if ok || Instant::now() > deadline {
            return (ok, v);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A PCEF connected to node B (whose Origin-Host the harness's PCEF
/// does not expect).
struct Gateway {
    handler: Arc<PcefHandler>,
    initiator: Initiator,
}

impl Gateway {
    async fn connect(b: &Pcrf) -> Gateway {
        let handler = Arc::new(PcefHandler {
            rars: Mutex::new(Vec::new()),
            raa_code: AtomicU32::new(2001),
        });
        let node = Node::with_parts(
            Arc::new(
                LocalNode::new("pgw.test.local", "test.local")
                    .with_application(Application::auth_vendor(GX, TGPP)),
            ),
            Arc::new(PeerSettings {
                request_timeout: Duration::from_secs(10),
                ..PeerSettings::default()
            }),
            handler.clone(),
            diameter::transport::PeerTable::new(),
        );
        let initiator = node.connect(b.diameter, Some("pcrf-b.test.local"));
        assert!(
            initiator.wait_open(Duration::from_secs(10)).await,
            "the PCEF could not connect to B:\n{}",
            b.log()
        );
        Gateway { handler, initiator }
    }

    /// A PCEF connected to both nodes (as one behind a routing agent
    /// reaches all): its requests go to A, and either node can reach it.
    async fn connect_both(a: &Pcrf, b: &Pcrf) -> (Gateway, Initiator) {
        let handler = Arc::new(PcefHandler {
            rars: Mutex::new(Vec::new()),
            raa_code: AtomicU32::new(2001),
        });
        let node = Node::with_parts(
            Arc::new(
                LocalNode::new("pgw.test.local", "test.local")
                    .with_application(Application::auth_vendor(GX, TGPP)),
            ),
            Arc::new(PeerSettings {
                request_timeout: Duration::from_secs(10),
                ..PeerSettings::default()
            }),
            handler.clone(),
            diameter::transport::PeerTable::new(),
        );
        let to_a = node.connect(a.diameter, Some("pcrf.test.local"));
        let to_b = node.connect(b.diameter, Some("pcrf-b.test.local"));
        assert!(to_a.wait_open(Duration::from_secs(10)).await, "{}", a.log());
        assert!(to_b.wait_open(Duration::from_secs(10)).await, "{}", b.log());
        (
            Gateway {
                handler,
                initiator: to_a,
            },
            to_b,
        )
    }

    async fn ccr_i(&self, session: &str) -> Message {
        send_gx_ccr(&self.initiator.handle(), false, session, 1, 0, |b| {
            initial_avps(b, IMSI)
        })
        .await
    }

    fn rars(&self) -> Vec<Message> {
        self.handler
            .rars
            .lock()
            .expect("lock")
            .iter()
            .map(|r| r.0.clone())
            .collect()
    }

    async fn close(self) {
        self.initiator.shutdown(DisconnectCause::Rebooting).await;
    }
}

fn node<'a>(cluster: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    cluster["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["name"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_list_each_other_and_a_killed_one_turns_not_alive() {
    let url = test_schema().await;
    let (a, mut b) = two_nodes(&url);
    let (ok, cluster) = wait_for(Duration::from_secs(10), || {
        let (st, c) = a.http("GET", "/v1/cluster", None);
        let both = st == 200
            && node(&c, "pcrf.test.local").is_some_and(|n| n["alive"] == true)
            && node(&c, "pcrf-b.test.local").is_some_and(|n| n["alive"] == true);
        (both, c)
    });
    assert!(ok, "both alive: {cluster}\n{}", a.log());
    assert_eq!(cluster["store"], "postgres");
    assert_eq!(cluster["node"], "pcrf.test.local");
    let me = node(&cluster, "pcrf.test.local").expect("A");
    assert_eq!(me["this_node"], true);
    assert_eq!(me["api"], a.api.to_string());
    let other = node(&cluster, "pcrf-b.test.local").expect("B");
    assert_eq!(other["this_node"], false);
    assert_eq!(other["api"], b.api.to_string());
    assert!(other["heartbeat_age_ms"].as_u64().expect("age") < 1000);

    // B holds a session: its heartbeat says so.
    b.provision(IMSI, r#"{"plan":"basic"}"#);
    let pcef = Gateway::connect(&b).await;
    assert_eq!(result_of(&pcef.ccr_i("pgw.test.local;c;1").await), 2001);
    let (ok, cluster) = wait_for(Duration::from_secs(5), || {
        let (_, c) = a.http("GET", "/v1/cluster", None);
        let held = node(&c, "pcrf-b.test.local").is_some_and(|n| n["sessions"] == 1);
        (held, c)
    });
    assert!(ok, "B's heartbeat counts its session: {cluster}");
    pcef.close().await;

    b.kill9();
    let killed = Instant::now();
    let (ok, cluster) = wait_for(Duration::from_secs(5), || {
        let (_, c) = a.http("GET", "/v1/cluster", None);
        let dead = node(&c, "pcrf-b.test.local").is_some_and(|n| n["alive"] == false);
        (dead, c)
    });
    assert!(ok, "B not alive after kill -9: {cluster}");
    // Not before its timeout, and A itself still alive.
    assert!(killed.elapsed() >= Duration::from_millis(500), "{cluster}");
    assert_eq!(cluster["alive"], 1);
    assert!(node(&cluster, "pcrf.test.local").is_some_and(|n| n["alive"] == true));
    assert!(a.metrics().contains("pcrf_cluster_nodes_alive 1\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_through_one_node_is_used_by_the_other() {
    let url = test_schema().await;
    let (a, b) = two_nodes(&url);
    // Created on A: B's next CCR-I uses the plan.
    let created = Instant::now();
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"plus"}"#);
    let (ok, seen) = wait_for(Duration::from_secs(5), || {
        let (st, s) = b.http("GET", &format!("/v1/subscribers/{IMSI}"), None);
        (st == 200, s)
    });
    assert!(ok, "B has the profile: {seen}\n{}", b.log());
    eprintln!("profile seen by B {:?} after A answered", created.elapsed());
    let pcef = Gateway::connect(&b).await;
    let sid = "pgw.test.local;c;2";
    let cca = pcef.ccr_i(sid).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(apn_ambr(&cca).map(|a| a.0), Some(20_000_000), "plan plus");

    // Changed on A: B re-decides its session and tells its PCEF.
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"unlimited"}"#);
    let (ok, rars) = wait_for(Duration::from_secs(5), || {
        let r = pcef.rars();
        (!r.is_empty(), r)
    });
    assert!(ok, "B pushed the change:\n{}", b.log());
    assert_eq!(rars.len(), 1);
    assert_eq!(apn_ambr(&rars[0]).map(|a| a.0), Some(50_000_000));
    assert_eq!(
        rars[0].session_id().ok().flatten(),
        Some(sid),
        "the session B holds"
    );
    // A held no session of it: A sent nothing (nothing to send to).
    assert!(!a
        .metrics()
        .contains(r#"pcrf_requests_total{command="RAR",result_code="2001"}"#));

    // A batch of 2,000 on A (one transaction, several notifications):
    // B has every profile.
    let batch: Vec<String> = (0..2000)
        .map(|i| format!("{{\"imsi\":\"00102{i:010}\",\"plan\":\"plus\"}}"))
        .collect();
    let batch = format!("[{}]", batch.join(","));
    let (st, out) = a.http("POST", "/v1/subscribers/batch", Some(&batch));
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["created"], 2000);
    for imsi in ["001020000000000", "001020000001999", "001020000000977"] {
        let (ok, _) = wait_for(Duration::from_secs(10), || {
            let (st, _) = b.http("GET", &format!("/v1/subscribers/{imsi}"), None);
            (st == 200, ())
        });
        assert!(ok, "B has {imsi}:\n{}", b.log());
    }

    // Deleted on A: B's next CCR-I no longer knows the subscriber.
    let (st, _) = a.http("DELETE", &format!("/v1/subscribers/{IMSI}"), None);
    assert!(st == 200 || st == 204, "{st}");
    let (ok, _) = wait_for(Duration::from_secs(5), || {
        let (st, _) = b.http("GET", &format!("/v1/subscribers/{IMSI}"), None);
        (st == 404, ())
    });
    assert!(ok, "B dropped the profile:\n{}", b.log());
    let cca = pcef.ccr_i("pgw.test.local;c;3").await;
    assert_eq!(result_of(&cca), 5030, "unknown subscriber");

    // B's listening connection is cut, and A provisions at once (the
    // notification may be sent before B listens again): B reconnects and
    // has the profile all the same.
    let terminated = terminate_feeds("pcrf-b.test.local").await;
    assert!(terminated >= 1, "B's feed connection is found");
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"plus"}"#);
    let (ok, _) = wait_for(Duration::from_secs(10), || {
        let (st, _) = b.http("GET", &format!("/v1/subscribers/{IMSI}"), None);
        let log = b.log();
        let again = log.contains("provisioning feed lost")
            && log.contains("provisioning feed listening again");
        (st == 200 && again, ())
    });
    assert!(ok, "B reconnected and has the profile:\n{}", b.log());
    let cca = pcef.ccr_i("pgw.test.local;c;4").await;
    assert_eq!(result_of(&cca), 2001);
    pcef.close().await;
}

/// Ends the listening connections of the nodes named `node` (of every
/// test schema); returns how many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_up_and_delete_through_the_other_node_reach_the_pcef() {
    let url = test_schema().await;
    let (usage, _) = usage_section(USAGE_FILE);
    let (a, b) = two_nodes_with(&url, &format!("{usage}{CLUSTER}"));
    a.provision(IMSI, r#"{"plan":"basic","quotas":{"monthly":50000000}}"#);
    let (ok, _) = wait_for(Duration::from_secs(5), || {
        let (st, s) = b.http("GET", &format!("/v1/subscribers/{IMSI}"), None);
        (st == 200, s)
    });
    assert!(ok, "B has the profile:\n{}", b.log());
    let (pcef, to_b) = Gateway::connect_both(&a, &b).await;
    let sid = "pgw.test.local;c;9";
    let gone = "pgw.test.local;c;10";
    assert_eq!(result_of(&pcef.ccr_i(sid).await), 2001);
    assert_eq!(result_of(&pcef.ccr_i(gone).await), 2001);

    // DELETE on B, which holds neither session: B takes `gone` over and
    // tells the PCEF to end it (Session-Release-Cause); the PCEF's CCR-T
    // to B closes it.
    let (st, out) = b.http("DELETE", &format!("/v1/sessions/{gone}"), None);
    assert!(st == 200 || st == 202, "{st} {out}\n{}", b.log());
    let rars = pcef.rars();
    assert_eq!(rars.len(), 1, "{}", b.log());
    assert_eq!(rars[0].session_id().ok().flatten(), Some(gone));
    assert!(rars[0]
        .find(avp::SESSION_RELEASE_CAUSE)
        .expect("avps")
        .is_some());
    let cca = send_gx_ccr(&to_b.handle(), false, gone, 3, 1, |b| {
        b.i32(avp::TERMINATION_CAUSE, 1);
    })
    .await;
    assert_eq!(result_of(&cca), 2001);
    let (_, v) = a.http("GET", &format!("/v1/sessions/{gone}"), None);
    eprintln!("A after the release: {v}");

    // 60 MB used of 50: A throttles the session it holds.
    let cca = send_gx_ccr(&pcef.initiator.handle(), false, sid, 2, 1, |b| {
        b.i32(avp::EVENT_TRIGGER, 33);
        b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
            g.bytes(avp::MONITORING_KEY, b"total")
                .group(avp::USED_SERVICE_UNIT, |u| {
                    u.u64(avp::CC_TOTAL_OCTETS, 60_000_000);
                })
                .i32(avp::USAGE_MONITORING_LEVEL, 0);
        });
    })
    .await;
    assert_eq!(rule_changes(&cca).0, vec!["throttled".to_string()]);

    // A top-up on B, which holds no open session of the subscriber: B
    // finds `sid` in the store, takes it over, and its RAR lifts the
    // throttle at the PCEF.
    let (st, v) = b.http(
        "POST",
        &format!("/v1/subscribers/{IMSI}/topup"),
        Some(r#"{"accumulator":"monthly","octets":1000000000}"#),
    );
    assert_eq!(st, 200, "{v}\n{}", b.log());
    assert_eq!(
        (v["sessions"].as_u64(), v["rar_sent"].as_u64()),
        (Some(1), Some(1)),
        "{v}\n{}",
        b.log()
    );
    let rars = pcef.rars();
    assert_eq!(rars.len(), 2, "{}", b.log());
    assert_eq!(rars[1].session_id().ok().flatten(), Some(sid));
    assert_eq!(
        rule_changes(&rars[1]),
        (vec!["internet".to_string()], vec!["throttled".to_string()])
    );
    assert!(b
        .metrics()
        .contains("pcrf_cluster_sessions_taken_over_total 2"));

    // A usage reset on A, whose copy of `sid` B has written since: A
    // reads it afresh and re-decides it (not left to B, not skipped).
    let (st, v) = a.http(
        "POST",
        &format!("/v1/subscribers/{IMSI}/usage/reset"),
        Some(r#"{"accumulator":"monthly"}"#),
    );
    assert_eq!(st, 200, "{v}\n{}", a.log());
    assert_eq!(
        (v["sessions"].as_u64(), v["rar_failed"].as_u64()),
        (Some(1), Some(0)),
        "{v}\n{}",
        a.log()
    );
    to_b.shutdown(DisconnectCause::Rebooting).await;
    pcef.close().await;
}

async fn terminate_feeds(node: &str) -> i64 {
    let base = std::env::var("PCRF_TEST_DATABASE_URL").expect("PCRF_TEST_DATABASE_URL");
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = $1",
            &[&format!("pcrf-feed {node}")],
        )
        .await
        .expect("terminate");
    row.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_embedded_store_the_node_is_alone() {
    let p = Pcrf::start("");
    let (st, c) = p.http("GET", "/v1/cluster", None);
    assert_eq!(st, 200, "{c}");
    assert_eq!(c["store"], "sqlite");
    assert_eq!(c["alive"], 1);
    assert_eq!(c["nodes"].as_array().map(Vec::len), Some(1));
    assert_eq!(c["nodes"][0]["name"], "pcrf.test.local");
    assert_eq!(c["nodes"][0]["this_node"], true);
    assert_eq!(c["nodes"][0]["api"], p.api.to_string());
    assert!(p.metrics().contains("pcrf_cluster_nodes_alive 1\n"));
}
