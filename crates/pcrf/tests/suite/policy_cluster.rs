//! Policy versions across three nodes of one PostgreSQL store behind the
//! routing agent, as an operator runs a cluster: a version deployed on
//! any node decides on all three; a node killed while a version is
//! deployed serves it when it returns; and a rollback under Gx load
//! answers every request and leaves no open session with the withdrawn
//! version's decision, on any node (the sessions it decided are decided
//! again and pushed where the decision differs). Needs freeDiameterd (the
//! agent) and PCRF_TEST_DATABASE_URL (scripts/test.sh sets both up).

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

fn deploy(p: &Pcrf, source: &str, comment: &str) -> serde_json::Value {
    let body = serde_json::json!({ "source": source, "comment": comment }).to_string();
    let (st, d) = p.http("PUT", "/v1/policy", Some(&body));
    assert_eq!(st, 200, "{d}");
    d
}

fn serving(p: &Pcrf) -> i64 {
    let (_, v) = p.http("GET", "/v1/policy", None);
    v["id"].as_i64().unwrap_or(0)
}

/// The version that made `session`'s last decision, as `p` reports it.
fn decided_by(p: &Pcrf, session: &str) -> i64 {
    let (st, s) = p.http("GET", &format!("/v1/sessions/{session}"), None);
    assert_eq!(st, 200, "{s}");
    s["last_decision"]["policy_version"].as_i64().unwrap_or(0)
}

/// Waits until every node serves `version` and sees every other node
/// alive and serving it in `/v1/cluster`.
fn all_serve(c: &Cluster, version: i64, limit: Duration) {
    let (ok, views) = poll_for(limit, || {
        let views: Vec<serde_json::Value> = c
            .nodes
            .iter()
            .map(|n| n.http("GET", "/v1/cluster", None).1)
            .collect();
        let ok = c.nodes.iter().all(|n| serving(n) == version)
            && views.iter().all(|v| {
                v["nodes"].as_array().is_some_and(|ns| {
                    ns.len() == c.nodes.len()
                        && ns
                            .iter()
                            .all(|n| n["alive"] == true && n["policy_version"] == version)
                })
            });
        (ok, views)
    });
    assert!(ok, "not every node serves version {version}: {views:?}");
}

/// The script of the policy file with every APN-AMBR downlink set to
/// `dl`: its decisions differ from the file's on the wire.
fn with_downlink(original: &str, dl: u32) -> String {
    format!(
        "{original}\nlocal file_decide = decide\nfunction decide(input)\n  local d = file_decide(input)\n  if d.apn_ambr then d.apn_ambr.dl = {dl} end\n  return d\nend\n"
    )
}

/// Provisions `imsis` through the first node and waits until every node knows them.
fn provision_all(c: &Cluster, imsis: &[String]) {
    for imsi in imsis {
        c.nodes[0].provision(imsi, r#"{"plan":"basic"}"#);
    }
    let (ok, missing) = poll_for(Duration::from_secs(15), || {
        let missing: Vec<String> = c
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(k, n)| {
                imsis
                    .iter()
                    .filter(|i| n.http("GET", &format!("/v1/subscribers/{i}"), None).0 != 200)
                    .map(move |i| format!("{}:{i}", NODES[k]))
            })
            .collect();
        (missing.is_empty(), missing)
    });
    assert!(ok, "subscribers not seen: {missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_on_one_of_three_nodes_decides_on_all_and_a_killed_node_adopts_it_on_return() {
    let mut c = Cluster::start(3, FAST_HEARTBEAT).await;
    all_serve(&c, 1, Duration::from_secs(20));
    let imsis: Vec<String> = (0..3).map(|i| format!("00101000000030{i}")).collect();
    provision_all(&c, &imsis);
    let original = std::fs::read_to_string(&c.nodes[0].policy).expect("policy");

    // Deployed on A: B and C serve it before A answers.
    let started = Instant::now();
    let d = deploy(
        &c.nodes[0],
        &with_downlink(&original, 222_000),
        "to all three",
    );
    let answered = started.elapsed();
    assert_eq!(d["deployed"]["id"], 2, "{d}");
    let states: Vec<(&str, &str)> = d["nodes"]
        .as_array()
        .map(|ns| {
            ns.iter()
                .map(|n| {
                    (
                        n["node"].as_str().unwrap_or(""),
                        n["state"].as_str().unwrap_or(""),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        states,
        [(NODES[1], "serving"), (NODES[2], "serving")],
        "{d}"
    );
    eprintln!("version 2 served by all three nodes {answered:?} after the deploy");
    all_serve(&c, 2, Duration::from_secs(10));
    let pgw = c.pcef("pgw1.pgw.example.net").await;
    for (i, imsi) in imsis.iter().enumerate() {
        let session = format!("pgw1.pgw.example.net;three;{i}");
        let cca = pgw.ccr_i(NODES[i], &session, imsi).await;
        assert_eq!(
            (result_of(&cca), origin_host(&cca)),
            (2001, NODES[i].to_string())
        );
        assert_eq!(apn_ambr(&cca).map(|(_, dl)| dl), Some(222_000));
        assert_eq!(decided_by(&c.nodes[i], &session), 2, "on {}", NODES[i]);
    }

    // C is killed; B deploys version 3 meanwhile; C serves it on return.
    c.nodes[2].kill9();
    let d = deploy(
        &c.nodes[1],
        &with_downlink(&original, 333_000),
        "while C is down",
    );
    assert_eq!(d["deployed"]["id"], 3, "{d}");
    assert_eq!(serving(&c.nodes[0]), 3);
    c.nodes[2].restart();
    c.wait_agent_open(2, Duration::from_secs(30));
    all_serve(&c, 3, Duration::from_secs(20));
    let session = "pgw1.pgw.example.net;three;returned";
    let cca = pgw.ccr_i(NODES[2], session, &imsis[2]).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(apn_ambr(&cca).map(|(_, dl)| dl), Some(333_000));
    assert_eq!(decided_by(&c.nodes[2], session), 3);
    pgw.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_under_load_answers_every_request_and_withdraws_the_version_everywhere() {
    let c = Cluster::start(3, FAST_HEARTBEAT).await;
    all_serve(&c, 1, Duration::from_secs(20));
    let imsis: Vec<String> = (0..12).map(|i| format!("0010100000004{i:02}")).collect();
    provision_all(&c, &imsis);
    let original = std::fs::read_to_string(&c.nodes[0].policy).expect("policy");
    deploy(
        &c.nodes[0],
        &with_downlink(&original, 444_000),
        "the bad one",
    );
    all_serve(&c, 2, Duration::from_secs(10));

    // Twelve sessions, four on each node, decided by version 2.
    let pgw = Arc::new(c.pcef("pgw1.pgw.example.net").await);
    let sessions: Vec<(usize, String, String)> = imsis
        .iter()
        .enumerate()
        .map(|(i, imsi)| (i % 3, format!("pgw1.pgw.example.net;rb;{i}"), imsi.clone()))
        .collect();
    for (n, session, imsi) in &sessions {
        let cca = pgw.ccr_i(NODES[*n], session, imsi).await;
        assert_eq!(result_of(&cca), 2001);
        assert_eq!(decided_by(&c.nodes[*n], session), 2);
    }

    // Load through the agent while the rollback runs: updates of half the
    // open sessions, and short sessions opened and closed. The other half
    // sends nothing: only the rollback's push can move them.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (pgw, stop, sessions) = (pgw.clone(), stop.clone(), sessions.clone());
        tokio::spawn(async move {
            let mut codes: Vec<u32> = Vec::new();
            let mut number = 1u32;
            let mut short = 0u32;
            while !stop.load(Ordering::Relaxed) {
                for (n, session, _) in sessions.iter().step_by(2) {
                    codes.push(result_of(
                        &pgw.ccr_u(NODES[*n], session, number, |_| {}).await,
                    ));
                }
                let (n, _, imsi) = &sessions[short as usize % sessions.len()];
                let id = format!("pgw1.pgw.example.net;short;{short}");
                codes.push(result_of(&pgw.ccr_i(NODES[*n], &id, imsi).await));
                codes.push(result_of(&pgw.ccr_t(NODES[*n], &id, 1).await));
                number += 1;
                short += 1;
                // Paces the load (a steady PCEF, not a flood).
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            codes
        })
    };
    // Deliberate: the rollback starts with the load well under way.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (st, d) = c.nodes[1].http("POST", "/v1/policy/rollback/1", None);
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["deployed"]["id"], 3, "{d}");

    // Every open session is decided again (a RAR, as its decision
    // differs), on whichever node holds it, while the load goes on.
    let (ok, left) = poll_for(Duration::from_secs(20), || {
        let left: Vec<String> = sessions
            .iter()
            .filter(|(n, s, _)| decided_by(&c.nodes[*n], s) != 3)
            .map(|(_, s, _)| s.clone())
            .collect();
        (left.is_empty(), left)
    });
    stop.store(true, Ordering::Relaxed);
    let codes = load.await.expect("load");
    assert!(ok, "sessions left with version 2's decision: {left:?}");
    assert!(codes.len() > sessions.len(), "the load ran: {codes:?}");
    assert!(codes.iter().all(|&c| c == 2001), "{codes:?}");
    let downlinks: Vec<u32> = pgw
        .rars()
        .iter()
        .filter_map(|m| apn_ambr(m).map(|(_, dl)| dl))
        .collect();
    // A session updated after the rollback got the file's decision in its
    // CCA; the others by a push. No push carried version 2's decision.
    assert!(!downlinks.is_empty(), "pushed");
    assert!(
        !downlinks.contains(&444_000),
        "a push carried version 2's downlink: {downlinks:?}"
    );
    match Arc::try_unwrap(pgw) {
        Ok(pgw) => pgw.close().await,
        Err(_) => panic!("the load still holds the PCEF"),
    }
}
