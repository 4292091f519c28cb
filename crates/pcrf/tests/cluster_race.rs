//! Two `pcrf serve` processes, each with its own Origin-Host, on one
//! PostgreSQL database: any node serves any session. CCR-Us with usage
//! reports for the same sessions and the same subscriber race on both
//! nodes, alternately and at once, and the stored usage is exactly the sum
//! of the reports acknowledged (nothing lost, nothing counted twice); a
//! session created on one node continues on the other after `kill -9`;
//! a session that moved is re-decided on a provisioning change, and
//! counted in the heartbeats, only where it is now; and sessions that
//! stay on their node are never taken over. Needs a
//! real server: PCRF_TEST_DATABASE_URL (scripts/test.sh sets it up).

mod support;

use diameter::codec::Message;
use diameter::dict::avp;
use std::sync::Arc;
use support::*;

const IMSI: &str = "001010000000001";

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

/// A node on the database at `url` named `origin_host` (the harness
/// writes one name; the node is restarted under its own).
fn node(url: &str, usage: &str, origin_host: &str) -> Pcrf {
    let mut p = Pcrf::start_with_store(
        Some(&format!("kind = \"postgres\"\nurl = \"{url}\"")),
        usage,
    );
    let text = std::fs::read_to_string(&p.config).expect("read config");
    let text = text.replace(
        "origin_host = \"pcrf.test.local\"",
        &format!("origin_host = \"{origin_host}\""),
    );
    std::fs::write(&p.config, text).expect("write config");
    p.restart();
    p
}

/// A CCR-U reporting `octets` on Monitoring-Key "total".
async fn report(pcef: &Pcef, session: &str, number: u32, octets: u64) -> Message {
    pcef.ccr_u(session, number, |b| {
        b.i32(avp::EVENT_TRIGGER, 33)
            .group(avp::USAGE_MONITORING_INFORMATION, |g| {
                g.bytes(avp::MONITORING_KEY, b"total")
                    .group(avp::USED_SERVICE_UNIT, |u| {
                        u.u64(avp::CC_TOTAL_OCTETS, octets);
                    });
            });
    })
    .await
}

fn used(p: &Pcrf, imsi: &str) -> u64 {
    let (st, v) = p.http("GET", &format!("/v1/subscribers/{imsi}/usage"), None);
    assert_eq!(st, 200, "{v}");
    v["accumulators"]["monthly"]["used"].as_u64().unwrap_or(0)
}

/// A counter's value in a node's /metrics (0 when absent).
fn counter(p: &Pcrf, name: &str) -> u64 {
    p.metrics()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_racing_on_the_same_sessions_count_every_acknowledged_report_once() {
    let url = test_schema().await;
    let (usage, _) = usage_section(USAGE_FILE);
    let a = node(&url, &usage, "pcrf-a.test.local");
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    a.provision("001010000000002", r#"{"plan":"basic"}"#);
    a.provision("001010000000003", r#"{"plan":"basic"}"#);
    // Started after provisioning: B reads the profiles at start-up.
    let b = node(&url, &usage, "pcrf-b.test.local");
    let to_a = Arc::new(Pcef::connect_to(a.diameter, "pgw.test.local", "pcrf-a.test.local").await);
    let to_b = Arc::new(Pcef::connect_to(b.diameter, "pgw.test.local", "pcrf-b.test.local").await);

    // Sessions that stay on their node: no take-over, no conflict, and
    // nothing read from the store on the way (the counters stay 0).
    let own_a = "pgw.test.local;own;a";
    let own_b = "pgw.test.local;own;b";
    assert_eq!(result_of(&to_a.ccr_i(own_a, "001010000000002").await), 2001);
    assert_eq!(result_of(&to_b.ccr_i(own_b, "001010000000003").await), 2001);
    for n in 1..=5 {
        assert_eq!(result_of(&report(&to_a, own_a, n, 100).await), 2001);
        assert_eq!(result_of(&report(&to_b, own_b, n, 100).await), 2001);
    }
    for p in [&a, &b] {
        assert_eq!(
            counter(p, "pcrf_cluster_sessions_taken_over_total"),
            0,
            "{}",
            p.log()
        );
        assert_eq!(counter(p, "pcrf_cluster_conflicts_total"), 0, "{}", p.log());
    }

    // The race: four sessions of one subscriber, created on A. Each round
    // sends one report for a session to each node at once; the sessions
    // run concurrently, so the subscriber's usage row is written by both
    // nodes all the time and every session moves at every round.
    const SESSIONS: usize = 4;
    const ROUNDS: u32 = 15;
    let sids: Vec<String> = (0..SESSIONS)
        .map(|i| format!("pgw.test.local;race;{i}"))
        .collect();
    for s in &sids {
        assert_eq!(result_of(&to_a.ccr_i(s, IMSI).await), 2001);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (i, s) in sids.iter().enumerate() {
        let (to_a, to_b, s) = (to_a.clone(), to_b.clone(), s.clone());
        tasks.spawn(async move {
            let (mut acked, mut sent, mut failed) = (0u64, 0u32, 0u32);
            for r in 1..=ROUNDS {
                // Distinct amounts: a report lost or counted twice shows.
                let oa = 1_000 * (i as u64 + 1) + u64::from(r);
                let ob = 100_000 * (i as u64 + 1) + u64::from(r);
                let (ca, cb) = tokio::join!(
                    report(&to_a, &s, 2 * r, oa),
                    report(&to_b, &s, 2 * r + 1, ob)
                );
                for (cca, octets) in [(ca, oa), (cb, ob)] {
                    sent += 1;
                    match result_of(&cca) {
                        2001 => acked += octets,
                        5012 => failed += 1,
                        other => panic!("session {s}: unexpected result {other}"),
                    }
                }
            }
            (acked, sent, failed)
        });
    }
    let (mut acked, mut sent, mut failed) = (0, 0, 0);
    while let Some(r) = tasks.join_next().await {
        let (x, s, f) = r.expect("race task");
        acked += x;
        sent += s;
        failed += f;
    }
    assert_eq!(
        used(&a, IMSI),
        acked,
        "A: stored usage differs from the acknowledged reports"
    );
    assert_eq!(
        used(&b, IMSI),
        acked,
        "B: stored usage differs from the acknowledged reports"
    );
    // Conflicts are retried: nearly every request succeeds.
    assert!(
        failed * 10 <= sent,
        "{failed} of {sent} failed\nA:\n{}\nB:\n{}",
        a.log(),
        b.log()
    );
    let taken = counter(&a, "pcrf_cluster_sessions_taken_over_total")
        + counter(&b, "pcrf_cluster_sessions_taken_over_total");
    let conflicts =
        counter(&a, "pcrf_cluster_conflicts_total") + counter(&b, "pcrf_cluster_conflicts_total");
    eprintln!(
        "race: {sent} reports sent, {failed} answered 5012, {acked} octets acknowledged and stored; \
         {taken} sessions taken over, {conflicts} conflicts"
    );
    assert!(
        taken > 0 && conflicts > 0,
        "taken over {taken}, conflicts {conflicts}"
    );

    // Both nodes keep serving, each session from either node.
    let n = 2 * ROUNDS + 2;
    for s in &sids {
        assert_eq!(result_of(&report(&to_b, s, n, 1).await), 2001);
        assert_eq!(result_of(&report(&to_a, s, n + 1, 1).await), 2001);
    }
    assert_eq!(used(&a, IMSI), acked + 2 * SESSIONS as u64);
    // The sessions that stayed put were never part of it.
    assert_eq!(used(&a, "001010000000002"), 500);
    assert_eq!(used(&b, "001010000000003"), 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_continues_on_the_other_node_after_kill_9() {
    let url = test_schema().await;
    let (usage, _) = usage_section(USAGE_FILE);
    let mut a = node(&url, &usage, "pcrf-a.test.local");
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let b = node(&url, &usage, "pcrf-b.test.local");
    let to_a = Pcef::connect_to(a.diameter, "pgw.test.local", "pcrf-a.test.local").await;
    let sid = "pgw.test.local;failover;1";
    assert_eq!(result_of(&to_a.ccr_i(sid, IMSI).await), 2001);
    assert_eq!(result_of(&report(&to_a, sid, 1, 7_000).await), 2001);
    a.kill9();

    let to_b = Pcef::connect_to(b.diameter, "pgw.test.local", "pcrf-b.test.local").await;
    assert_eq!(
        result_of(&report(&to_b, sid, 2, 3_000).await),
        2001,
        "session created on A not served by B:\n{}",
        b.log()
    );
    assert_eq!(used(&b, IMSI), 10_000, "usage continues on B");
    assert_eq!(counter(&b, "pcrf_cluster_sessions_taken_over_total"), 1);
    // B's heartbeat counts the session it took over.
    let held = wait_until(|| {
        let (_, c) = b.http("GET", "/v1/cluster", None);
        c["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|n| n["name"] == "pcrf-b.test.local" && n["sessions"] == 1)
    });
    assert!(held, "B's heartbeat counts the session:\n{}", b.log());
    // A provisioning change re-decides the session on the node that now
    // holds it: B's PCEF gets the RAR.
    b.provision(IMSI, r#"{"msisdn":"491700000001","plan":"unlimited"}"#);
    assert!(wait_until(|| to_b.rars().len() == 1), "{}", b.log());
    let rar = &to_b.rars()[0];
    assert_eq!(rar.session_id().ok().flatten(), Some(sid));
    assert_eq!(
        apn_ambr(rar).map(|a| a.0),
        Some(50_000_000),
        "plan unlimited"
    );
    // A restarts without an operator and loads only its own sessions:
    // the one B took over is B's now.
    a.restart();
    assert_eq!(
        counter(&a, "pcrf_sessions{state=\"open\"}"),
        0,
        "{}",
        a.log()
    );
    assert_eq!(counter(&b, "pcrf_sessions{state=\"open\"}"), 1);
    // A change made on A reaches the session on B (and A, holding none of
    // it, sends nothing).
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    assert!(wait_until(|| to_b.rars().len() == 2), "{}", b.log());
    assert_eq!(
        apn_ambr(&to_b.rars()[1]).map(|a| a.0),
        Some(5_000_000),
        "plan basic"
    );
    assert!(
        !a.metrics()
            .contains(r#"pcrf_requests_total{command="RAR",result_code="2001"}"#),
        "{}",
        a.log()
    );
    assert_eq!(result_of(&to_b.ccr_t(sid, 3).await), 2001);
    to_b.close().await;
}

/// A session that moved to B while A is alive (the agent routed a request
/// of it to B): a provisioning change made on A is pushed by B alone, A
/// drops its stale copy instead of sending a RAR from it, and the
/// heartbeats count the session on B only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_session_is_re_decided_and_counted_only_where_it_is_now() {
    let url = test_schema().await;
    let (usage, _) = usage_section(USAGE_FILE);
    let a = node(&url, &usage, "pcrf-a.test.local");
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let b = node(&url, &usage, "pcrf-b.test.local");
    let to_a = Pcef::connect_to(a.diameter, "pgw.test.local", "pcrf-a.test.local").await;
    let to_b = Pcef::connect_to(b.diameter, "pgw.test.local", "pcrf-b.test.local").await;
    let sid = "pgw.test.local;moved;1";
    assert_eq!(result_of(&to_a.ccr_i(sid, IMSI).await), 2001);
    assert_eq!(result_of(&report(&to_b, sid, 1, 1_000).await), 2001);
    assert_eq!(counter(&b, "pcrf_cluster_sessions_taken_over_total"), 1);

    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"unlimited"}"#);
    assert!(
        wait_until(|| to_b.rars().len() == 1),
        "B pushed the change:\n{}",
        b.log()
    );
    assert_eq!(apn_ambr(&to_b.rars()[0]).map(|x| x.0), Some(50_000_000));
    assert!(
        wait_until(|| counter(&a, "pcrf_sessions{state=\"open\"}") == 0),
        "A dropped its stale copy:\n{}",
        a.log()
    );
    assert!(to_a.rars().is_empty(), "A pushed its stale copy");
    let held = |c: &serde_json::Value, name: &str| {
        c["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["name"] == name)
            .and_then(|n| n["sessions"].as_u64())
    };
    let counted = wait_until(|| {
        let (_, c) = a.http("GET", "/v1/cluster", None);
        held(&c, "pcrf-a.test.local") == Some(0) && held(&c, "pcrf-b.test.local") == Some(1)
    });
    assert!(counted, "{}", a.http("GET", "/v1/cluster", None).1);
    assert_eq!(result_of(&to_b.ccr_t(sid, 2).await), 2001);
    to_a.close().await;
    to_b.close().await;
}

/// Polls `check` every 50 ms for up to 5 s; whether it held.
fn wait_until(mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !check() {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    true
}

const RX: u32 = 16_777_236;

/// An AF (P-CSCF) connected to the node named `pcrf_host` at `addr`.
async fn af_connect(
    addr: std::net::SocketAddr,
    pcrf_host: &str,
) -> diameter::transport::PeerHandle {
    use diameter::peer::{Application, LocalNode, PeerSettings};
    let local = LocalNode::new("pcscf.test.local", "test.local")
        .with_application(Application::auth_vendor(RX, TGPP));
    let handler = Arc::new(PcefHandler {
        rars: std::sync::Mutex::new(Vec::new()),
        raa_code: std::sync::atomic::AtomicU32::new(2001),
    });
    let node = diameter::transport::Node::with_parts(
        Arc::new(local),
        Arc::new(PeerSettings {
            request_timeout: std::time::Duration::from_secs(10),
            ..PeerSettings::default()
        }),
        handler,
        diameter::transport::PeerTable::new(),
    );
    let initiator = node.connect(addr, Some(pcrf_host));
    assert!(
        initiator
            .wait_open(std::time::Duration::from_secs(10))
            .await,
        "the AF could not connect to {pcrf_host}"
    );
    let peer = initiator.handle();
    // The connection lives as long as the test.
    std::mem::forget(initiator);
    peer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aar_on_the_other_node_binds_to_the_gx_session_through_the_store() {
    use diameter::dict::{cmd, enums};
    let url = test_schema().await;
    let (usage, _) = usage_section(USAGE_FILE);
    let extra = format!(
        "{usage}\n[[peers]]\norigin_host = \"pcscf.test.local\"\naddresses = [\"127.0.0.1\"]\n"
    );
    let a = node(&url, &extra, "pcrf-a.test.local");
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let b = node(&url, &extra, "pcrf-b.test.local");
    let to_a = Pcef::connect_to(a.diameter, "pgw.test.local", "pcrf-a.test.local").await;
    let to_b = Pcef::connect_to(b.diameter, "pgw.test.local", "pcrf-b.test.local").await;
    let gx = "pgw.test.local;rx-cluster;1";
    // The Gx session (UE 10.45.0.2) is on A; the AAR arrives at B.
    assert_eq!(result_of(&to_a.ccr_i(gx, IMSI).await), 2001);
    let af = af_connect(b.diameter, "pcrf-b.test.local").await;
    let local = af.local().clone();
    let aaa = af
        .request(RX, cmd::AA, |m| {
            m.str(avp::SESSION_ID, "pcscf.test.local;call;1")
                .u32(avp::AUTH_APPLICATION_ID, RX)
                .origin(&local.origin_host, &local.origin_realm)
                .str(avp::DESTINATION_REALM, "test.local")
                .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2])
                .group(avp::MEDIA_COMPONENT_DESCRIPTION, |c| {
                    c.u32(avp::MEDIA_COMPONENT_NUMBER, 1)
                        .i32(avp::MEDIA_TYPE, enums::MEDIA_TYPE::AUDIO)
                        .u32(avp::MAX_REQUESTED_BANDWIDTH_UL, 64_000)
                        .u32(avp::MAX_REQUESTED_BANDWIDTH_DL, 48_000)
                        .i32(avp::FLOW_STATUS, 2)
                        .group(avp::MEDIA_SUB_COMPONENT, |s| {
                            s.u32(avp::FLOW_NUMBER, 1)
                                .str(
                                    avp::FLOW_DESCRIPTION,
                                    "permit out 17 from 192.0.2.9 5000 to 10.45.0.2 4000",
                                )
                                .str(
                                    avp::FLOW_DESCRIPTION,
                                    "permit in 17 from 10.45.0.2 4000 to 192.0.2.9 5000",
                                );
                        });
                });
        })
        .await
        .expect("AAA");
    assert_eq!(result_of(&aaa), 2001, "{}", b.log());
    assert_eq!(counter(&b, "pcrf_cluster_sessions_taken_over_total"), 1);
    // B now serves the session: the rule went to the PCEF from B.
    let rars = to_b.rars();
    assert_eq!(rars.len(), 1, "{}", b.log());
    assert_eq!(rars[0].session_id().ok().flatten(), Some(gx));
    // And the next CCR-U on A finds B's write (a conflict, then served).
    assert_eq!(result_of(&report(&to_a, gx, 1, 10).await), 2001);
    assert_eq!(
        counter(&a, "pcrf_cluster_conflicts_total"),
        1,
        "{}",
        a.log()
    );
}
