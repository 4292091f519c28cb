//! The usage file's versions across three nodes of one PostgreSQL store
//! behind the routing agent: a file deployed on one node is adopted by
//! the others (each writes it to its own usage file and counts by it); a
//! node whose open sessions hold a grant the new file would orphan keeps
//! its version and says why in `/v1/cluster` and in the deploying node's
//! answer; a rollback reaches every node. Needs freeDiameterd (the
//! agent) and PCRF_TEST_DATABASE_URL (scripts/test.sh sets both up).

use crate::support;
use crate::usage_process::{grants, without_vip};

use std::path::PathBuf;
use std::time::Duration;
use support::*;

const IMSI: &str = "001010000000451";

fn put_usage(p: &Pcrf, text: &str, comment: &str) -> serde_json::Value {
    let body = serde_json::json!({ "source": text, "comment": comment }).to_string();
    let (st, d) = p.http("PUT", "/v1/usage", Some(&body));
    assert_eq!(st, 200, "{d}");
    d
}

/// What the deploying node's answer says of each other node.
fn states(d: &serde_json::Value) -> Vec<(String, String)> {
    d["nodes"]
        .as_array()
        .map(|ns| {
            ns.iter()
                .map(|n| {
                    (
                        n["node"].as_str().unwrap_or("").to_string(),
                        n["state"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Each node's usage file version and refusal as node `from` lists them.
fn usage_versions(from: &Pcrf) -> Vec<(i64, Option<i64>)> {
    let (_, v) = from.http("GET", "/v1/cluster", None);
    v["nodes"]
        .as_array()
        .map(|ns| {
            ns.iter()
                .map(|n| {
                    (
                        n["usage_version"].as_i64().unwrap_or(0),
                        n["usage_refused"]["version"].as_i64(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until every node lists `expected` (by node, in name order).
fn all_list(c: &Cluster, expected: &[(i64, Option<i64>)]) {
    for (i, n) in c.nodes.iter().enumerate() {
        let (ok, seen) = poll_for(Duration::from_secs(15), || {
            let seen = usage_versions(n);
            (seen == expected, seen)
        });
        assert!(ok, "{} lists {seen:?}, not {expected:?}", NODES[i]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usage_file_deployed_on_one_node_counts_on_all_and_a_node_holding_its_grants_refuses() {
    let mut files: Vec<PathBuf> = Vec::new();
    let sections: Vec<String> = (0..3)
        .map(|_| {
            let (section, path) = usage_section(USAGE_FILE);
            files.push(path);
            format!("{section}{FAST_HEARTBEAT}")
        })
        .collect();
    let c = Cluster::start_each(3, |i| sections[i].clone()).await;
    all_list(&c, &[(1, None), (1, None), (1, None)]);
    c.nodes[0].provision(IMSI, r#"{"plan":"basic","services":["vip"]}"#);

    // A bigger plan, deployed on A: B and C count by it before A answers.
    let bigger = USAGE_FILE.replace("monthly = \"10 GB\"", "monthly = \"20 GB\"");
    let d = put_usage(&c.nodes[0], &bigger, "basic gets 20 GB");
    assert_eq!(d["deployed"]["id"], 2, "{d}");
    assert_eq!(
        states(&d),
        [
            (NODES[1].to_string(), "serving".to_string()),
            (NODES[2].to_string(), "serving".to_string())
        ],
        "{d}"
    );
    all_list(&c, &[(2, None), (2, None), (2, None)]);
    for ((n, file), name) in c.nodes.iter().zip(&files).zip(NODES) {
        let (_, usage) = n.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
        assert_eq!(
            usage["accumulators"]["monthly"]["quota"], 20_000_000_000_u64,
            "{name}"
        );
        assert_eq!(std::fs::read_to_string(file).expect("file"), bigger);
    }

    // B holds a session with a grant for "vip"; A drops the key. A and C
    // take it; B keeps version 2 and says why.
    let pgw = c.pcef("pgw1.pgw.example.net").await;
    let session = "pgw1.pgw.example.net;usage;1";
    let cca = pgw.ccr_i(NODES[1], session, IMSI).await;
    assert_eq!(
        (result_of(&cca), origin_host(&cca)),
        (2001, NODES[1].to_string())
    );
    assert!(grants(&cca).0.contains_key("vip"));
    let d = put_usage(&c.nodes[0], &without_vip(), "drop vip");
    assert_eq!(d["deployed"]["id"], 3, "{d}");
    assert_eq!(
        states(&d),
        [
            (NODES[1].to_string(), "refused".to_string()),
            (NODES[2].to_string(), "serving".to_string())
        ],
        "{d}"
    );
    let reason = d["nodes"][0]["reason"].as_str().unwrap_or("");
    assert!(
        reason.contains("\"vip\"") && reason.contains("1 session holds a grant"),
        "{d}"
    );
    all_list(&c, &[(3, None), (2, Some(3)), (3, None)]);
    assert!(c.nodes[1]
        .metrics()
        .contains("pcrf_usage_version_refused 1"));
    assert_eq!(
        std::fs::read_to_string(&files[1]).expect("file"),
        bigger,
        "B's file keeps its version"
    );

    // Rolled back on C to version 2: version 4, which B takes as well.
    let (st, d) = c.nodes[2].http("POST", "/v1/usage/rollback/2", None);
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["deployed"]["id"], 4, "{d}");
    all_list(&c, &[(4, None), (4, None), (4, None)]);
    assert_eq!(std::fs::read_to_string(&files[0]).expect("file"), bigger);
    assert!(c.nodes[1]
        .metrics()
        .contains("pcrf_usage_version_refused 0"));
    let cca = pgw.ccr_t(NODES[1], session, 1).await;
    assert_eq!(result_of(&cca), 2001);
    pgw.close().await;
}
