//! The files the product ships agree with each other and with the server:
//! every Monitoring-Key the default policy names is defined in the default
//! usage file (else its grants and reports count nowhere), and every metric
//! a running server exposes is described in docs/metrics.md.

use crate::support;

use pcrf::usage::config::UsageConfig;
use support::*;

const IMSI: &str = "001010000000001";

#[test]
fn every_monitoring_key_of_the_default_policy_is_in_the_usage_file() {
    let root = repo_root();
    let policy = std::fs::read_to_string(root.join("policies/default.lua")).expect("policy");
    let usage = UsageConfig::load(&root.join("config/usage.toml")).expect("usage file loads");
    let mut named = Vec::new();
    for part in policy.split("monitoring_key").skip(1) {
        // `monitoring_key = "NAME"`: the first quoted string after it.
        let Some(open) = part.find('"') else { continue };
        let rest = &part[open + 1..];
        if let Some(close) = rest.find('"') {
            named.push(rest[..close].to_string());
        }
    }
    assert!(
        !named.is_empty(),
        "the default policy names monitoring keys"
    );
    for key in &named {
        assert!(
            usage.key(key).is_some(),
            "policies/default.lua names monitoring_key {key:?}, which config/usage.toml does not define"
        );
        assert!(
            usage.feeds_any(key),
            "config/usage.toml defines {key:?} but no accumulator counts it"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exposed_metric_is_documented() {
    let p = Pcrf::start("");
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    // A session, so that the request, peer and session families have samples.
    assert_eq!(
        result_of(&pcef.ccr_i("pgw.test.local;1;1", IMSI).await),
        2001
    );
    let exposed = p.metrics();
    pcef.close().await;
    let docs = std::fs::read_to_string(repo_root().join("docs/metrics.md")).expect("docs");
    let mut names: Vec<&str> = exposed
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(|n| {
            n.strip_suffix("_bucket")
                .or_else(|| n.strip_suffix("_sum"))
                .or_else(|| n.strip_suffix("_count"))
                .unwrap_or(n)
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    assert!(names.len() > 40, "a server exposes its families: {names:?}");
    let missing: Vec<&&str> = names
        .iter()
        .filter(|n| !docs.contains(&format!("`{n}")))
        .collect();
    assert!(
        missing.is_empty(),
        "exposed by the server but not in docs/metrics.md: {missing:?}"
    );
}
