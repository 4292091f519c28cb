//! The policy as stored versions, through `pcrf serve` processes: a
//! deployment recorded with who and why, the history and the diff still
//! there after a restart, a rollback deployed as a new version, and the
//! decisions naming the version that made them. On a PostgreSQL store
//! shared by two nodes behind the routing agent: a deployment on one node
//! is served by the other, and a node whose own test cases refuse a
//! version keeps its own and says why (the deploying node's answer,
//! `GET /v1/cluster`, its metrics). A canary rollout: the canary decides
//! for its subscribers over Gx and the stable version for the others,
//! through kill -9, until aborted or promoted, and on the other node too.
//! The cluster tests need freeDiameterd and PCRF_TEST_DATABASE_URL
//! (scripts/test.sh sets it up).

use crate::support;

use diameter::dict::avp;
use std::time::Duration;
use support::*;

const IMSI: &str = "001010000000001";

fn versions(p: &Pcrf) -> serde_json::Value {
    let (st, v) = p.http("GET", "/v1/policy/versions", None);
    assert_eq!(st, 200, "{v}");
    v
}

fn deploy(p: &Pcrf, source: &str, comment: &str) -> (u16, serde_json::Value) {
    let body = serde_json::json!({ "source": source, "comment": comment }).to_string();
    p.http("PUT", "/v1/policy", Some(&body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_restart_history_diff_and_rollback() {
    let mut p = Pcrf::start("");
    let original = std::fs::read_to_string(&p.policy).expect("policy");
    let v = versions(&p);
    assert_eq!(v["serving"], 1, "{v}");
    assert_eq!(v["versions"][0]["by"], "file", "{v}");

    let edited = format!("{original}\n-- a comment line\n");
    let (st, d) = deploy(&p, &edited, "a harmless edit");
    assert_eq!(st, 200, "{d}");
    assert_eq!(
        (
            d["deployed"]["id"].as_i64(),
            d["deployed"]["parent"].as_i64()
        ),
        (Some(2), Some(1)),
        "{d}"
    );
    assert_eq!(
        d["nodes"],
        serde_json::json!([]),
        "alone on the embedded store"
    );

    p.restart();
    let v = versions(&p);
    assert_eq!(v["serving"], 2, "{v}");
    let listed: Vec<_> = v["versions"]
        .as_array()
        .expect("list")
        .iter()
        .map(|v| (v["id"].as_i64(), v["by"].as_str().map(str::to_owned)))
        .collect();
    assert_eq!(
        listed,
        vec![
            (Some(2), Some("local".into())),
            (Some(1), Some("file".into()))
        ],
        "{v}"
    );
    assert_eq!(v["versions"][0]["comment"], "a harmless edit");
    let (st, two) = p.http("GET", "/v1/policy/versions/2", None);
    assert_eq!((st, two["source"].as_str()), (200, Some(edited.as_str())));
    let diff = reqwest::get(format!("http://{}/v1/policy/versions/1/diff/2", p.api))
        .await
        .expect("diff")
        .text()
        .await
        .expect("text");
    assert!(diff.starts_with("--- version 1\n+++ version 2\n"), "{diff}");
    assert!(diff.contains("\n+-- a comment line\n"), "{diff}");

    let (st, r) = p.http("POST", "/v1/policy/rollback/1", None);
    assert_eq!(st, 200, "{r}");
    assert_eq!(
        (
            r["deployed"]["id"].as_i64(),
            r["deployed"]["parent"].as_i64()
        ),
        (Some(3), Some(2)),
        "{r}"
    );
    assert_eq!(r["deployed"]["hash"], v["versions"][1]["hash"], "{r}");
    assert_eq!(std::fs::read_to_string(&p.policy).expect("file"), original);
    let (st, _) = p.http("POST", "/v1/policy/rollback/99", None);
    assert_eq!(st, 404);

    // A decision names the version that made it.
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let cca = pcef.ccr_i("pgw.test.local;v;1", IMSI).await;
    assert_eq!(result_of(&cca), 2001);
    let (st, s) = p.http("GET", "/v1/sessions/pgw.test.local;v;1", None);
    assert_eq!(st, 200, "{s}");
    assert_eq!(s["last_decision"]["policy_version"], 3, "{s}");
    pcef.close().await;
}

fn node<'a>(cluster: &'a serde_json::Value, name: &str) -> Option<&'a serde_json::Value> {
    cluster["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["name"] == name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_on_one_node_is_served_by_the_other_or_refused_with_its_reason() {
    let c = Cluster::start(2, FAST_HEARTBEAT).await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let (ok, v) = poll_for(Duration::from_secs(10), || {
        let (_, v) = b.http("GET", "/v1/policy", None);
        (v["id"] == 1, v)
    });
    assert!(ok, "both serve version 1 (one of them recorded it): {v}");
    // Both heartbeats written with their version, so the answer below
    // waits for B's word on the next one.
    let (ok, cluster) = poll_for(Duration::from_secs(10), || {
        let (_, cl) = a.http("GET", "/v1/cluster", None);
        let both =
            node(&cl, NODES[1]).is_some_and(|n| n["alive"] == true && n["policy_version"] == 1);
        (both, cl)
    });
    assert!(ok, "{cluster}");

    let original = std::fs::read_to_string(&a.policy).expect("policy");
    let from_a = format!("{original}\n-- deployed on A\n");
    let (st, d) = deploy(a, &from_a, "cluster-wide");
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["deployed"]["id"], 2, "{d}");
    assert_eq!(
        d["nodes"],
        serde_json::json!([{"node": NODES[1], "state": "serving"}]),
        "{d}"
    );
    let (_, running) = b.http("GET", "/v1/policy", None);
    assert_eq!(
        (running["id"].as_i64(), running["source"].as_str()),
        (Some(2), Some(from_a.as_str()))
    );
    assert_eq!(
        std::fs::read_to_string(&b.policy).expect("B's file"),
        from_a
    );

    // B's decisions name version 2.
    b.provision(IMSI, r#"{"plan":"basic"}"#);
    let pgw = c.pcef("pgw1.pgw.example.net").await;
    let session = "pgw1.pgw.example.net;v;1";
    let cca = pgw.ccr_i(NODES[1], session, IMSI).await;
    assert_eq!(
        (result_of(&cca), origin_host(&cca)),
        (2001, NODES[1].to_string())
    );
    let (st, s) = b.http("GET", &format!("/v1/sessions/{session}"), None);
    assert_eq!(st, 200, "{s}");
    assert_eq!(s["last_decision"]["policy_version"], 2, "{s}");

    // B's own test cases ask for a rule no script decides: B refuses the
    // next version, keeps 2, and says why; A serves 3.
    let cases = b.policy.with_file_name("policy.cases.toml");
    std::fs::write(
        &cases,
        "[[case]]\nname = \"only on B\"\nexpect.rules = [\"b-only\"]\n",
    )
    .expect("cases");
    let (st, d) = deploy(a, &format!("{from_a}-- again\n"), "B refuses this");
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["nodes"][0]["state"], "refused", "{d}");
    let reason = d["nodes"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("only on B"), "{d}");
    let (_, running) = b.http("GET", "/v1/policy", None);
    assert_eq!(running["id"], 2, "{running}");
    assert_eq!(running["refused"]["version"], 3, "{running}");
    // B's view of A's row is as fresh as A's last heartbeat.
    let (ok, cluster) = poll_for(Duration::from_secs(5), || {
        let (_, cl) = b.http("GET", "/v1/cluster", None);
        let a_serves_3 = node(&cl, NODES[0]).is_some_and(|n| n["policy_version"] == 3);
        (a_serves_3, cl)
    });
    assert!(ok, "{cluster}");
    let me = node(&cluster, NODES[1]).expect("B");
    assert_eq!(
        (
            me["policy_version"].as_i64(),
            me["policy_refused"]["version"].as_i64()
        ),
        (Some(2), Some(3)),
        "{cluster}"
    );
    assert_eq!(b.counter("pcrf_policy_version_refused"), 1);
    assert_eq!(b.counter("pcrf_policy_version"), 2);
    pgw.close().await;
}

/// The policy file's script, with every APN-AMBR downlink set to
/// `CANARY_DL`: decisions of the canary are told apart over Gx.
fn canary_of(original: &str) -> String {
    format!(
        "{original}\nlocal stable_decide = decide\nfunction decide(input)\n  local d = stable_decide(input)\n  if d.apn_ambr then d.apn_ambr.dl = {CANARY_DL} end\n  return d\nend\n"
    )
}

const CANARY_DL: u32 = 123_456;
const ON_CANARY: &str = "001010000000101";
const ON_STABLE: &str = "001010000000102";

/// The sessions pushed a RAR so far, in order, each with the APN-AMBR
/// downlink it carried.
fn pushed(pcef: &Pcef) -> Vec<(String, Option<u32>)> {
    pcef.rars()
        .iter()
        .map(|m| {
            let session = m
                .find(avp::SESSION_ID)
                .ok()
                .flatten()
                .and_then(|a| a.as_str().ok().map(str::to_owned))
                .unwrap_or_default();
            (session, apn_ambr(m).map(|(_, dl)| dl))
        })
        .collect()
}

/// Waits until `pcef` got `n` RARs; the sessions of those after the first
/// `seen`, sorted, with their downlinks.
async fn pushes_after(pcef: &Pcef, seen: usize, n: usize) -> Vec<(String, Option<u32>)> {
    pcef.wait_rars(n).await;
    let mut after = pushed(pcef).split_off(seen);
    after.sort();
    after
}

/// The node's log lines naming the subscribers a rollout change moved,
/// written before it answers the change (none when it moved nobody).
fn redecisions(p: &Pcrf) -> Vec<String> {
    p.log()
        .lines()
        .filter(|l| l.contains("re-deciding the sessions a policy rollout moved"))
        .map(str::to_owned)
        .collect()
}

fn policy_version_of(p: &Pcrf, session: &str) -> serde_json::Value {
    let (st, s) = p.http("GET", &format!("/v1/sessions/{session}"), None);
    assert_eq!(st, 200, "{s}");
    s["last_decision"]["policy_version"].clone()
}

/// A new session of `imsi`: its APN-AMBR downlink and the version that
/// decided it.
async fn decided_by(p: &Pcrf, pcef: &Pcef, session: &str, imsi: &str) -> (u32, serde_json::Value) {
    let cca = pcef.ccr_i(session, imsi).await;
    assert_eq!(result_of(&cca), 2001);
    let dl = apn_ambr(&cca).map_or(0, |(_, dl)| dl);
    (dl, policy_version_of(p, session))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_decides_its_subscribers_by_the_canary_through_kill_9_until_aborted_or_promoted()
{
    let mut p = Pcrf::start("");
    let original = std::fs::read_to_string(&p.policy).expect("policy");
    let canary = canary_of(&original);
    p.provision(ON_CANARY, r#"{"plan":"basic"}"#);
    p.provision(ON_STABLE, r#"{"plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let (stable_dl, v) = decided_by(&p, &pcef, "pgw.test.local;r;1", ON_CANARY).await;
    assert_eq!(v, 1);
    assert_ne!(stable_dl, CANARY_DL);
    let (_, v) = decided_by(&p, &pcef, "pgw.test.local;r;2", ON_STABLE).await;
    assert_eq!(v, 1);

    // Nothing to widen, promote or abort yet; a share outside 0..100.
    for (method, path, body) in [
        ("PATCH", "/v1/policy/rollout", r#"{"share_percent":10}"#),
        ("POST", "/v1/policy/rollout/promote", ""),
        ("POST", "/v1/policy/rollout/abort", ""),
    ] {
        let (st, e) = p.http(method, path, Some(body));
        assert_eq!(st, 409, "{method} {path}: {e}");
        assert_eq!(e["error"], "no policy rollout is running", "{e}");
    }
    let bad = serde_json::json!({ "source": canary, "share_percent": 101 }).to_string();
    let (st, e) = p.http("POST", "/v1/policy/rollout", Some(&bad));
    assert_eq!(st, 400, "{e}");
    assert!(
        e["error"]
            .as_str()
            .unwrap_or_default()
            .contains("between 0 and 100"),
        "{e}"
    );

    // The canary for one listed subscriber (a share of 0).
    let start = serde_json::json!({
        "source": canary, "share_percent": 0, "subscribers": [ON_CANARY], "comment": "try the canary"
    })
    .to_string();
    let (st, r) = p.http("POST", "/v1/policy/rollout", Some(&start));
    assert_eq!(st, 200, "{r}");
    assert_eq!(
        r,
        serde_json::json!({"stable": 1, "canary": 2, "share_percent": 0.0, "subscribers": [ON_CANARY]})
    );
    let (st, e) = p.http("POST", "/v1/policy/rollout", Some(&start));
    assert_eq!(st, 409, "only one rollout at a time: {e}");
    // The open session whose subscriber moved is re-decided, and pushed
    // as its decision changed; the other one is not.
    let rars = pcef.wait_rars(1).await;
    assert_eq!(apn_ambr(&rars[0]).map(|(_, dl)| dl), Some(CANARY_DL));
    let (ok, v) = poll_for(Duration::from_secs(5), || {
        let v = policy_version_of(&p, "pgw.test.local;r;1");
        (v == 2, v)
    });
    assert!(ok, "the moved session is decided by the canary: {v}");
    assert_eq!(policy_version_of(&p, "pgw.test.local;r;2"), 1);
    // Only the moved subscriber was re-decided (the node logs whom before
    // it answers the rollout), so its one RAR is the only push.
    let moved = redecisions(&p);
    assert!(
        moved.len() == 1 && moved[0].ends_with("subscribers=1"),
        "{moved:?}"
    );
    assert_eq!(pcef.rars().len(), 1, "no push where nothing changed");

    assert_eq!(
        decided_by(&p, &pcef, "pgw.test.local;r;3", ON_CANARY).await,
        (CANARY_DL, serde_json::json!(2))
    );
    assert_eq!(
        decided_by(&p, &pcef, "pgw.test.local;r;4", ON_STABLE).await,
        (stable_dl, serde_json::json!(1))
    );
    assert_eq!(
        std::fs::read_to_string(&p.policy).expect("file"),
        original,
        "the file holds the stable version"
    );
    let by_version = |p: &Pcrf, v: &str| {
        p.metric_value(&format!(
            "pcrf_policy_version_decisions_total{{version=\"{v}\"}}"
        ))
    };
    assert!(
        by_version(&p, "2") >= 2.0 && by_version(&p, "1") >= 3.0,
        "{}",
        p.metrics()
    );
    // The latency of the requests each decided is split the same way:
    // the canary's CCR-I beside the stable version's (a push decides
    // without a request).
    let answered_by = |p: &Pcrf, v: &str| {
        p.metric_value(&format!(
            "pcrf_policy_version_request_duration_seconds_count{{version=\"{v}\"}}"
        ))
    };
    assert!(
        answered_by(&p, "2") >= 1.0 && answered_by(&p, "1") >= 2.0,
        "{}",
        p.metrics()
    );
    assert_eq!(
        p.metric_value("pcrf_policy_version_errors_total{version=\"2\"}"),
        0.0
    );
    pcef.close().await;

    // kill -9: the rollout is stored, and serves again.
    p.kill9();
    p.restart();
    let (st, running) = p.http("GET", "/v1/policy", None);
    assert_eq!(st, 200);
    assert_eq!(
        (
            running["id"].as_i64(),
            running["rollout"]["canary"].as_i64()
        ),
        (Some(1), Some(2)),
        "{running}"
    );
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    assert_eq!(
        decided_by(&p, &pcef, "pgw.test.local;r;5", ON_CANARY).await,
        (CANARY_DL, serde_json::json!(2))
    );
    assert_eq!(
        decided_by(&p, &pcef, "pgw.test.local;r;6", ON_STABLE).await,
        (stable_dl, serde_json::json!(1))
    );

    // Aborted: the stable script again, as version 3, for everyone.
    let (st, d) = p.http("POST", "/v1/policy/rollout/abort", None);
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["deployed"]["id"], 3, "{d}");
    let (_, running) = p.http("GET", "/v1/policy", None);
    assert!(running.get("rollout").is_none(), "{running}");
    // The canary's sessions (the PCEF reconnected under its name) are
    // pushed the stable decision again; the others have nothing to change.
    let back: Vec<_> = [1, 3, 5]
        .map(|n| (format!("pgw.test.local;r;{n}"), Some(stable_dl)))
        .into();
    assert_eq!(pushes_after(&pcef, 0, 3).await, back);
    assert_eq!(
        decided_by(&p, &pcef, "pgw.test.local;r;7", ON_CANARY).await,
        (stable_dl, serde_json::json!(3))
    );

    // The canary again by its version, widened to everyone, promoted.
    let again = serde_json::json!({ "version": 2, "share_percent": 0 }).to_string();
    let (st, r) = p.http("POST", "/v1/policy/rollout", Some(&again));
    assert_eq!(st, 200, "{r}");
    assert_eq!(
        (r["stable"].as_i64(), r["canary"].as_i64()),
        (Some(3), Some(4)),
        "{r}"
    );
    let (st, e) = p.http(
        "PATCH",
        "/v1/policy/rollout",
        Some(r#"{"share_percent":-1}"#),
    );
    assert_eq!(st, 400, "{e}");
    let (st, r) = p.http(
        "PATCH",
        "/v1/policy/rollout",
        Some(r#"{"share_percent":100}"#),
    );
    assert_eq!((st, r["share_percent"].as_f64()), (200, Some(100.0)), "{r}");
    // Everyone moved to the canary: every open session is pushed its
    // decision.
    let all: Vec<_> = (1..=7)
        .map(|n| (format!("pgw.test.local;r;{n}"), Some(CANARY_DL)))
        .collect();
    assert_eq!(pushes_after(&pcef, 3, 10).await, all);
    assert_eq!(
        decided_by(&p, &pcef, "pgw.test.local;r;8", ON_STABLE).await,
        (CANARY_DL, serde_json::json!(4))
    );
    let before = redecisions(&p).len();
    let (st, d) = p.http("POST", "/v1/policy/rollout/promote", None);
    assert_eq!((st, d["deployed"]["id"].as_i64()), (200, Some(4)), "{d}");
    assert_eq!(
        redecisions(&p).len(),
        before,
        "promoting moved nobody: nobody re-decided"
    );
    assert_eq!(pcef.rars().len(), 10, "promoting moved nobody: no push");
    assert_eq!(std::fs::read_to_string(&p.policy).expect("file"), canary);
    p.restart();
    let (_, running) = p.http("GET", "/v1/policy", None);
    assert_eq!(running["id"], 4, "{running}");
    assert!(running.get("rollout").is_none(), "{running}");
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    assert_eq!(
        decided_by(&p, &pcef, "pgw.test.local;r;9", ON_STABLE).await,
        (CANARY_DL, serde_json::json!(4))
    );
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_started_on_one_node_is_served_by_the_other_until_promoted() {
    let c = Cluster::start(2, FAST_HEARTBEAT).await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let (ok, v) = poll_for(Duration::from_secs(10), || {
        let (_, v) = b.http("GET", "/v1/policy", None);
        (v["id"] == 1, v)
    });
    assert!(ok, "both serve version 1: {v}");
    let original = std::fs::read_to_string(&a.policy).expect("policy");
    let start = serde_json::json!({
        "source": canary_of(&original), "share_percent": 0, "subscribers": [ON_CANARY]
    })
    .to_string();
    let (st, r) = a.http("POST", "/v1/policy/rollout", Some(&start));
    assert_eq!(st, 200, "{r}");
    let (ok, running) = poll_for(Duration::from_secs(10), || {
        let (_, v) = b.http("GET", "/v1/policy", None);
        (v["rollout"] == r, v)
    });
    assert!(ok, "B serves the rollout: {running}");
    assert_eq!(running["id"], 1, "{running}");

    b.provision(ON_CANARY, r#"{"plan":"basic"}"#);
    b.provision(ON_STABLE, r#"{"plan":"basic"}"#);
    let pgw = c.pcef("pgw1.pgw.example.net").await;
    for (n, imsi, version) in [(1, ON_CANARY, 2), (2, ON_STABLE, 1)] {
        let session = format!("pgw1.pgw.example.net;r;{n}");
        let cca = pgw.ccr_i(NODES[1], &session, imsi).await;
        assert_eq!(
            (result_of(&cca), origin_host(&cca)),
            (2001, NODES[1].to_string())
        );
        let (_, s) = b.http("GET", &format!("/v1/sessions/{session}"), None);
        assert_eq!(s["last_decision"]["policy_version"], version, "{imsi}: {s}");
    }

    let (st, d) = a.http("POST", "/v1/policy/rollout/promote", None);
    assert_eq!(st, 200, "{d}");
    let (ok, running) = poll_for(Duration::from_secs(10), || {
        let (_, v) = b.http("GET", "/v1/policy", None);
        (v["id"] == 2 && v.get("rollout").is_none(), v)
    });
    assert!(ok, "B serves the canary to everyone: {running}");
    pgw.close().await;
}
