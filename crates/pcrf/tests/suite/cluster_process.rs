//! Two `pcrf serve` processes on one PostgreSQL database behind the
//! routing agent (freeDiameter running deploy/cluster/freediameter/): each
//! lists the other in `GET /v1/cluster` and sees it turn not alive after
//! `kill -9`; a subscriber provisioned, changed or deleted through one node
//! is used by the next CCR on the other, whose PCEF gets the re-decision in
//! a RAR through the agent. A top-up and a DELETE through the node that
//! does not hold the session take it over and reach the PCEF. The PCEF
//! reaches the nodes only through the agent and names the node a request
//! is for with Destination-Host. Also `GET /v1/cluster` on the embedded
//! store (this node alone). Needs freeDiameterd
//! (scripts/install-test-deps.sh) and a real server:
//! PCRF_TEST_DATABASE_URL (scripts/test.sh sets it up).

use crate::support;

use diameter::dict::avp;
use std::time::{Duration, Instant};
use support::*;

const IMSI: &str = "001010000000001";
const PGW: &str = "pgw1.pgw.example.net";
/// The two nodes: A and B.
const A: &str = NODES[0];
const B: &str = NODES[1];

fn node<'a>(cluster: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    cluster["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["name"] == name)
}

/// Waits until `p` has the profile of `imsi` (`present`) or has not.
fn wait_profile(p: &Pcrf, imsi: &str, present: bool, within: Duration) -> bool {
    let want = if present { 200 } else { 404 };
    poll_until(within, || {
        p.http("GET", &format!("/v1/subscribers/{imsi}"), None).0 == want
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_list_each_other_and_a_killed_one_turns_not_alive() {
    let mut c = Cluster::start(2, FAST_HEARTBEAT).await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let (ok, cluster) = poll_for(Duration::from_secs(10), || {
        let (st, c) = a.http("GET", "/v1/cluster", None);
        let both = st == 200
            && node(&c, A).is_some_and(|n| n["alive"] == true)
            && node(&c, B).is_some_and(|n| n["alive"] == true);
        (both, c)
    });
    assert!(ok, "both alive: {cluster}\n{}", a.log());
    assert_eq!(cluster["store"], "postgres");
    assert_eq!(cluster["node"], A);
    let me = node(&cluster, A).expect("A");
    assert_eq!(me["this_node"], true);
    assert_eq!(me["api"], a.api.to_string());
    let other = node(&cluster, B).expect("B");
    assert_eq!(other["this_node"], false);
    assert_eq!(other["api"], b.api.to_string());
    assert!(other["heartbeat_age_ms"].as_u64().expect("age") < 1000);

    // B holds a session: its heartbeat says so.
    b.provision(IMSI, r#"{"plan":"basic"}"#);
    let pgw = c.pcef(PGW).await;
    let cca = pgw.ccr_i(B, "pgw1.pgw.example.net;c;1", IMSI).await;
    assert_eq!((result_of(&cca), origin_host(&cca)), (2001, B.to_string()));
    let (ok, cluster) = poll_for(Duration::from_secs(5), || {
        let (_, c) = a.http("GET", "/v1/cluster", None);
        let held = node(&c, B).is_some_and(|n| n["sessions"] == 1);
        (held, c)
    });
    assert!(ok, "B's heartbeat counts its session: {cluster}");
    pgw.close().await;

    c.nodes[1].kill9();
    let killed = Instant::now();
    let a = &c.nodes[0];
    let (ok, cluster) = poll_for(Duration::from_secs(5), || {
        let (_, c) = a.http("GET", "/v1/cluster", None);
        let dead = node(&c, B).is_some_and(|n| n["alive"] == false);
        (dead, c)
    });
    assert!(ok, "B not alive after kill -9: {cluster}");
    // Not before its timeout, and A itself still alive.
    assert!(killed.elapsed() >= Duration::from_millis(500), "{cluster}");
    assert_eq!(cluster["alive"], 1);
    assert!(node(&cluster, A).is_some_and(|n| n["alive"] == true));
    assert!(a.metrics().contains("pcrf_cluster_nodes_alive 1\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_through_one_node_is_used_by_the_other() {
    let c = Cluster::start(2, FAST_HEARTBEAT).await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    // Created on A: B's next CCR-I uses the plan.
    let created = Instant::now();
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"plus"}"#);
    assert!(
        wait_profile(b, IMSI, true, Duration::from_secs(5)),
        "B has the profile:\n{}",
        b.log()
    );
    eprintln!("profile seen by B {:?} after A answered", created.elapsed());
    let pgw = c.pcef(PGW).await;
    let sid = "pgw1.pgw.example.net;c;2";
    let cca = pgw.ccr_i(B, sid, IMSI).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(origin_host(&cca), B);
    assert_eq!(apn_ambr(&cca).map(|a| a.0), Some(20_000_000), "plan plus");

    // Changed on A: B re-decides its session and tells its PCEF.
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"unlimited"}"#);
    let (ok, rars) = poll_for(Duration::from_secs(5), || {
        let r = pgw.rars();
        (!r.is_empty(), r)
    });
    assert!(ok, "B pushed the change:\n{}", b.log());
    assert_eq!(rars.len(), 1);
    assert_eq!(origin_host(&rars[0]), B);
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
        assert!(
            wait_profile(b, imsi, true, Duration::from_secs(10)),
            "B has {imsi}:\n{}",
            b.log()
        );
    }

    // Deleted on A: B's next CCR-I no longer knows the subscriber.
    let (st, _) = a.http("DELETE", &format!("/v1/subscribers/{IMSI}"), None);
    assert!(st == 200 || st == 204, "{st}");
    assert!(
        wait_profile(b, IMSI, false, Duration::from_secs(5)),
        "B dropped the profile:\n{}",
        b.log()
    );
    let cca = pgw.ccr_i(B, "pgw1.pgw.example.net;c;3", IMSI).await;
    assert_eq!(result_of(&cca), 5030, "unknown subscriber");

    // B's listening connection is cut, and A provisions at once (the
    // notification may be sent before B listens again): B reconnects and
    // has the profile all the same.
    let terminated = terminate_feeds(&c.db, B).await;
    assert!(terminated >= 1, "B's feed connection is found");
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"plus"}"#);
    let (ok, _) = poll_for(Duration::from_secs(10), || {
        let (st, _) = b.http("GET", &format!("/v1/subscribers/{IMSI}"), None);
        let log = b.log();
        let again = log.contains("provisioning feed lost")
            && log.contains("provisioning feed listening again");
        (st == 200 && again, ())
    });
    assert!(ok, "B reconnected and has the profile:\n{}", b.log());
    let cca = pgw.ccr_i(B, "pgw1.pgw.example.net;c;4", IMSI).await;
    assert_eq!(result_of(&cca), 2001);
    pgw.close().await;
}

/// Ends the listening connections to the test's database of the node
/// named `node`; returns how many.
async fn terminate_feeds(db: &TestDatabase, node: &str) -> i64 {
    let row = db
        .client()
        .await
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = $1 AND datname = current_database()",
            &[&format!("pcrf-feed {node}")],
        )
        .await
        .expect("terminate");
    row.get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_up_and_delete_through_the_other_node_reach_the_pcef() {
    let (usage, _) = usage_section(USAGE_FILE);
    let c = Cluster::start(2, &format!("{usage}{FAST_HEARTBEAT}")).await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    a.provision(IMSI, r#"{"plan":"basic","quotas":{"monthly":50000000}}"#);
    assert!(
        wait_profile(b, IMSI, true, Duration::from_secs(5)),
        "B has the profile:\n{}",
        b.log()
    );
    let pgw = c.pcef(PGW).await;
    let sid = "pgw1.pgw.example.net;c;9";
    let gone = "pgw1.pgw.example.net;c;10";
    assert_eq!(result_of(&pgw.ccr_i(A, sid, IMSI).await), 2001);
    assert_eq!(result_of(&pgw.ccr_i(A, gone, IMSI).await), 2001);

    // DELETE on B, which holds neither session: B takes `gone` over and
    // tells the PCEF to end it (Session-Release-Cause) through the agent;
    // the PCEF's CCR-T to B closes it.
    let (st, out) = b.http("DELETE", &format!("/v1/sessions/{gone}"), None);
    assert!(st == 200 || st == 202, "{st} {out}\n{}", b.log());
    poll_until(Duration::from_secs(5), || !pgw.rars().is_empty());
    let rars = pgw.rars();
    assert_eq!(rars.len(), 1, "{}", b.log());
    assert_eq!(origin_host(&rars[0]), B);
    assert_eq!(rars[0].session_id().ok().flatten(), Some(gone));
    assert!(rars[0]
        .find(avp::SESSION_RELEASE_CAUSE)
        .expect("avps")
        .is_some());
    let cca = pgw.ccr_t(B, gone, 1).await;
    assert_eq!((result_of(&cca), origin_host(&cca)), (2001, B.to_string()));
    let (_, v) = a.http("GET", &format!("/v1/sessions/{gone}"), None);
    eprintln!("A after the release: {v}");

    // 60 MB used of 50: A throttles the session it holds.
    let cca = pgw
        .ccr_u(A, sid, 1, |b| {
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
    assert_eq!(origin_host(&cca), A);
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
    let rars = pgw.rars();
    assert_eq!(rars.len(), 2, "{}", b.log());
    assert_eq!(origin_host(&rars[1]), B);
    assert_eq!(rars[1].session_id().ok().flatten(), Some(sid));
    assert_eq!(
        rule_changes(&rars[1]),
        (vec!["internet".to_string()], vec!["throttled".to_string()])
    );
    assert_eq!(b.taken_over(), 2, "{}", b.log());

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
    pgw.close().await;
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
