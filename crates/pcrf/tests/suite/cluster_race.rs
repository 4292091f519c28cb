//! Two `pcrf serve` processes, each with its own Origin-Host, on one
//! PostgreSQL database behind the routing agent (freeDiameter running
//! deploy/cluster/freediameter/): any node serves any session. The PCEF
//! and the AF reach the nodes only through the agent, and name the node a
//! request is for with Destination-Host, so the test decides which node
//! serves each request. CCR-Us with usage reports for the same sessions
//! and the same subscriber race on both nodes, alternately and at once,
//! and the stored usage is exactly the sum of the reports acknowledged
//! (nothing lost, nothing counted twice); a session created on one node
//! continues on the other after `kill -9` (the agent routes the requests
//! still naming the dead node to the live one); a session that moved is
//! re-decided on a provisioning change, and counted in the heartbeats,
//! only where it is now; and sessions that stay on their node are never
//! taken over. Needs freeDiameterd (scripts/install-test-deps.sh) and a
//! real server: PCRF_TEST_DATABASE_URL (scripts/test.sh sets it up).

use crate::support;

use diameter::codec::Message;
use diameter::dict::avp;
use std::sync::Arc;
use std::time::Duration;
use support::*;

const IMSI: &str = "001010000000001";
const PGW: &str = "pgw1.pgw.example.net";
/// The two nodes: A and B.
const A: &str = NODES[0];
const B: &str = NODES[1];

/// Two nodes behind the agent, with USAGE_FILE.
async fn two_nodes() -> Cluster {
    let (usage, _) = usage_section(USAGE_FILE);
    Cluster::start(2, &usage).await
}

/// A CCR-U to `node` reporting `octets` on Monitoring-Key "total".
async fn report(pcef: &Gateway, node: &str, session: &str, number: u32, octets: u64) -> Message {
    pcef.ccr_u(node, session, number, |b| usage_report(b, octets))
        .await
}

fn usage_report(b: &mut diameter::codec::MessageBuilder<'_>, octets: u64) {
    b.i32(avp::EVENT_TRIGGER, 33)
        .group(avp::USAGE_MONITORING_INFORMATION, |g| {
            g.bytes(avp::MONITORING_KEY, b"total")
                .group(avp::USED_SERVICE_UNIT, |u| {
                    u.u64(avp::CC_TOTAL_OCTETS, octets);
                });
        });
}

/// The RARs `pcef` got from `node`.
fn rars_from(pcef: &Gateway, node: &str) -> Vec<Message> {
    pcef.rars()
        .into_iter()
        .filter(|r| origin_host(r) == node)
        .collect()
}

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_racing_on_the_same_sessions_count_every_acknowledged_report_once() {
    let c = two_nodes().await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    a.provision("001010000000002", r#"{"plan":"basic"}"#);
    a.provision("001010000000003", r#"{"plan":"basic"}"#);
    // Provisioned through A: B has the profiles once the feed brought them.
    for imsi in [IMSI, "001010000000002", "001010000000003"] {
        let seen = poll_until(WAIT, || {
            b.http("GET", &format!("/v1/subscribers/{imsi}"), None).0 == 200
        });
        assert!(seen, "B has {imsi}:\n{}", b.log());
    }
    let pgw = Arc::new(c.pcef(PGW).await);

    // Sessions that stay on their node: no take-over, no conflict, and
    // nothing read from the store on the way (the counters stay 0).
    let own_a = "pgw1.pgw.example.net;own;a";
    let own_b = "pgw1.pgw.example.net;own;b";
    assert_eq!(
        result_of(&pgw.ccr_i(A, own_a, "001010000000002").await),
        2001
    );
    assert_eq!(
        result_of(&pgw.ccr_i(B, own_b, "001010000000003").await),
        2001
    );
    for n in 1..=5 {
        assert_eq!(result_of(&report(&pgw, A, own_a, n, 100).await), 2001);
        assert_eq!(result_of(&report(&pgw, B, own_b, n, 100).await), 2001);
    }
    for p in [a, b] {
        assert_eq!(p.taken_over(), 0, "{}", p.log());
        assert_eq!(p.counter("pcrf_cluster_conflicts_total"), 0, "{}", p.log());
    }

    // The race: four sessions of one subscriber, created on A. Each round
    // sends one report for a session to each node at once; the sessions
    // run concurrently, so the subscriber's usage row is written by both
    // nodes all the time and every session moves at every round.
    const SESSIONS: usize = 4;
    const ROUNDS: u32 = 15;
    let sids: Vec<String> = (0..SESSIONS)
        .map(|i| format!("pgw1.pgw.example.net;race;{i}"))
        .collect();
    for s in &sids {
        assert_eq!(result_of(&pgw.ccr_i(A, s, IMSI).await), 2001);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (i, s) in sids.iter().enumerate() {
        let (pgw, s) = (pgw.clone(), s.clone());
        tasks.spawn(async move {
            let (mut acked, mut sent, mut failed) = (0u64, 0u32, 0u32);
            for r in 1..=ROUNDS {
                // Distinct amounts: a report lost or counted twice shows.
                let oa = 1_000 * (i as u64 + 1) + u64::from(r);
                let ob = 100_000 * (i as u64 + 1) + u64::from(r);
                let (ca, cb) = tokio::join!(
                    report(&pgw, A, &s, 2 * r, oa),
                    report(&pgw, B, &s, 2 * r + 1, ob)
                );
                for (cca, octets, node) in [(ca, oa, A), (cb, ob, B)] {
                    sent += 1;
                    // Each answer comes from the node the request named.
                    assert_eq!(origin_host(&cca), node, "session {s}");
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
        a.monthly_used(IMSI),
        acked,
        "A: stored usage differs from the acknowledged reports"
    );
    assert_eq!(
        b.monthly_used(IMSI),
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
    let taken = a.taken_over() + b.taken_over();
    let conflicts =
        a.counter("pcrf_cluster_conflicts_total") + b.counter("pcrf_cluster_conflicts_total");
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
        assert_eq!(result_of(&report(&pgw, B, s, n, 1).await), 2001);
        assert_eq!(result_of(&report(&pgw, A, s, n + 1, 1).await), 2001);
    }
    assert_eq!(a.monthly_used(IMSI), acked + 2 * SESSIONS as u64);
    // The sessions that stayed put were never part of it.
    assert_eq!(a.monthly_used("001010000000002"), 500);
    assert_eq!(b.monthly_used("001010000000003"), 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_continues_on_the_other_node_after_kill_9() {
    let mut c = two_nodes().await;
    c.nodes[0].provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let pgw = c.pcef(PGW).await;
    let sid = "pgw1.pgw.example.net;failover;1";
    assert_eq!(result_of(&pgw.ccr_i(A, sid, IMSI).await), 2001);
    assert_eq!(result_of(&report(&pgw, A, sid, 1, 7_000).await), 2001);
    c.nodes[0].kill9();

    // The PCEF still names A; the agent, A's connection gone, routes the
    // request to B (the PCEF retries as it would on 3002 or a timeout).
    let update = diameter::dict::enums::CC_REQUEST_TYPE::UPDATE_REQUEST;
    let cca = pgw
        .deliver(Some(A), sid, update, 2, IMSI, |b| usage_report(b, 3_000))
        .await;
    let b = &c.nodes[1];
    assert_eq!(
        result_of(&cca),
        2001,
        "session created on A not served by B:\n{}",
        b.log()
    );
    assert_eq!(origin_host(&cca), B, "answered by B");
    assert_eq!(b.monthly_used(IMSI), 10_000, "usage continues on B");
    assert_eq!(b.taken_over(), 1);
    // B's heartbeat counts the session it took over.
    let held = poll_until(WAIT, || {
        let (_, c) = b.http("GET", "/v1/cluster", None);
        c["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|n| n["name"] == B && n["sessions"] == 1)
    });
    assert!(held, "B's heartbeat counts the session:\n{}", b.log());
    // A provisioning change re-decides the session on the node that now
    // holds it: B's RAR reaches the PCEF through the agent.
    b.provision(IMSI, r#"{"msisdn":"491700000001","plan":"unlimited"}"#);
    assert!(
        poll_until(WAIT, || pgw.rars().len() == 1),
        "{}\n{}",
        b.log(),
        c.agent.log()
    );
    let rar = &pgw.rars()[0];
    assert_eq!(origin_host(rar), B);
    assert_eq!(rar.session_id().ok().flatten(), Some(sid));
    assert_eq!(
        apn_ambr(rar).map(|a| a.0),
        Some(50_000_000),
        "plan unlimited"
    );
    // A restarts without an operator, rejoins the agent, and loads only
    // its own sessions: the one B took over is B's now.
    c.nodes[0].restart();
    c.wait_agent_open(0, Duration::from_secs(30));
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    assert_eq!(a.counter("pcrf_sessions{state=\"open\"}"), 0, "{}", a.log());
    assert_eq!(b.counter("pcrf_sessions{state=\"open\"}"), 1);
    // A change made on A reaches the session on B (and A, holding none of
    // it, sends nothing).
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    assert!(poll_until(WAIT, || pgw.rars().len() == 2), "{}", b.log());
    assert_eq!(
        apn_ambr(&pgw.rars()[1]).map(|a| a.0),
        Some(5_000_000),
        "plan basic"
    );
    assert!(rars_from(&pgw, A).is_empty(), "A pushed a RAR");
    assert!(
        !a.metrics()
            .contains(r#"pcrf_requests_total{command="RAR",result_code="2001"}"#),
        "{}",
        a.log()
    );
    let cca = pgw.ccr_t(B, sid, 3).await;
    assert_eq!((result_of(&cca), origin_host(&cca)), (2001, B.to_string()));
    pgw.close().await;
}

/// A session that moved to B while A is alive (the agent routed a request
/// of it to B): a provisioning change made on A is pushed by B alone, A
/// drops its stale copy instead of sending a RAR from it, and the
/// heartbeats count the session on B only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_session_is_re_decided_and_counted_only_where_it_is_now() {
    let c = two_nodes().await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let pgw = c.pcef(PGW).await;
    let sid = "pgw1.pgw.example.net;moved;1";
    assert_eq!(result_of(&pgw.ccr_i(A, sid, IMSI).await), 2001);
    assert_eq!(result_of(&report(&pgw, B, sid, 1, 1_000).await), 2001);
    assert_eq!(b.taken_over(), 1);

    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"unlimited"}"#);
    assert!(
        poll_until(WAIT, || rars_from(&pgw, B).len() == 1),
        "B pushed the change:\n{}",
        b.log()
    );
    assert_eq!(
        apn_ambr(&rars_from(&pgw, B)[0]).map(|x| x.0),
        Some(50_000_000)
    );
    assert!(
        poll_until(WAIT, || a.counter("pcrf_sessions{state=\"open\"}") == 0),
        "A dropped its stale copy:\n{}",
        a.log()
    );
    assert!(rars_from(&pgw, A).is_empty(), "A pushed its stale copy");
    assert_eq!(pgw.rars().len(), 1, "one RAR in all");
    let held = |c: &serde_json::Value, name: &str| {
        c["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["name"] == name)
            .and_then(|n| n["sessions"].as_u64())
    };
    let counted = poll_until(WAIT, || {
        let (_, c) = a.http("GET", "/v1/cluster", None);
        held(&c, A) == Some(0) && held(&c, B) == Some(1)
    });
    assert!(counted, "{}", a.http("GET", "/v1/cluster", None).1);
    assert_eq!(result_of(&pgw.ccr_t(B, sid, 2).await), 2001);
    pgw.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aar_on_the_other_node_binds_to_the_gx_session_through_the_store() {
    use diameter::dict::{cmd, enums};
    let c = two_nodes().await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let pgw = c.pcef(PGW).await;
    let gx = "pgw1.pgw.example.net;rx-cluster;1";
    // The Gx session (UE 10.45.0.2) is on A; the AAR goes to B.
    assert_eq!(result_of(&pgw.ccr_i(A, gx, IMSI).await), 2001);
    let af = Gateway::af(&c.agent, "pcscf1.pcscf.example.net").await;
    let local = af.peer().local().clone();
    let aaa = af
        .peer()
        .request(RX, cmd::AA, |m| {
            m.str(avp::SESSION_ID, "pcscf1.pcscf.example.net;call;1")
                .u32(avp::AUTH_APPLICATION_ID, RX)
                .origin(&local.origin_host, &local.origin_realm)
                .str(avp::DESTINATION_REALM, REALM)
                .str(avp::DESTINATION_HOST, B)
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
    assert_eq!(origin_host(&aaa), B);
    assert_eq!(b.taken_over(), 1);
    // B now serves the session: the rule went to the PCEF from B.
    poll_until(WAIT, || !pgw.rars().is_empty());
    let rars = pgw.rars();
    assert_eq!(rars.len(), 1, "{}", b.log());
    assert_eq!(origin_host(&rars[0]), B);
    assert_eq!(rars[0].session_id().ok().flatten(), Some(gx));
    // And the next CCR-U on A finds B's write (a conflict, then served).
    assert_eq!(result_of(&report(&pgw, A, gx, 1, 10).await), 2001);
    assert_eq!(a.counter("pcrf_cluster_conflicts_total"), 1, "{}", a.log());
    af.close().await;
    pgw.close().await;
}
