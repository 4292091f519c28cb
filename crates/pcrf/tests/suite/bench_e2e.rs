//! A short run of the load generator (`pcrf-bench`, as a library) against
//! the real `pcrf` binary: the seed scenario's CCR-I / CCR-U with usage /
//! CCR-T mix from two emulated gateways. Asserts that every request got a
//! 2001 and that the report is complete and well-formed; no timing is
//! asserted (performance is measured by benchmarks, not tests).

use crate::support;

use pcrf_bench::open_loop::OpenLoop;
use pcrf_bench::pcef::PcefOptions;
use pcrf_bench::runner::{measure, CpuTargets, Load, RunSetup};
use pcrf_bench::scenario::Scenario;
use std::sync::Arc;
use std::time::Duration;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_scenario_against_the_real_server_is_all_answered() {
    // Unprovisioned subscribers get the default policy, so no bulk provisioning.
    let p = Pcrf::start(
        "[[peers]]\norigin_host = \"pgw-1.bench.test\"\n[[peers]]\norigin_host = \"pgw-2.bench.test\"\n",
    );
    let cfg = std::fs::read_to_string(&p.config).expect("config");
    assert!(
        cfg.contains("[policy]\n"),
        "no [policy] section to extend:\n{cfg}"
    );
    std::fs::write(
        &p.config,
        cfg.replace(
            "[policy]\n",
            "[policy]\nunknown_subscriber = \"default_policy\"\n",
        ),
    )
    .expect("config");
    let mut p = p;
    p.restart();

    let scenario =
        Scenario::load(&repo_root().join("bench/scenarios/seed-fast.toml")).expect("scenario");
    let setup = RunSetup {
        scenario: Arc::new(scenario),
        pcef: PcefOptions {
            target: p.diameter,
            peers: 2,
            request_timeout: Duration::from_secs(5),
            watchdog: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        },
        cpu: CpuTargets {
            server_pids: vec![p.pid()],
            server_metrics: Some(format!("http://{}/metrics", p.api)),
            ..Default::default()
        },
        progress: false,
    };
    let load = Load::Open(OpenLoop {
        rate: 150.0,
        warmup: Duration::from_secs(1),
        duration: Duration::from_secs(3),
        seed: 7,
    });
    let r = measure(&setup, load)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", p.log()));

    let names: Vec<_> = r.commands.iter().map(|c| c.command.as_str()).collect();
    assert_eq!(names, ["CCR-I", "CCR-U", "CCR-T"]);
    let t = &r.total;
    assert!(t.sent > 100, "only {} requests sent", t.sent);
    assert_eq!(t.answered, t.sent, "every request answered:\n{}", p.log());
    assert_eq!(
        t.results.get("2001"),
        Some(&t.sent),
        "every answer 2001: {:?}",
        t.results
    );
    assert_eq!((t.timeouts, t.send_failures, t.skipped), (0, 0, 0));
    assert_eq!(r.sessions.failed, 0);
    assert_eq!(
        r.sessions.started, r.sessions.completed,
        "every session ended with CCR-T"
    );
    for c in &r.commands {
        let score = c.apdex.score.expect("apdex");
        assert!((0.0..=1.0).contains(&score));
        assert_eq!(
            c.apdex.satisfied + c.apdex.tolerating + c.apdex.frustrated,
            c.sent
        );
    }
    assert!(r.server_cpu.is_some(), "server CPU sampled");
    // Commits over the window, read from the server's own counters: every
    // CCR-I, CCR-U with usage and CCR-T writes, so some committed, and no
    // more than one commit per answered request.
    let store = r.server_store.as_ref().expect("store counters read");
    assert_eq!(store.transactions, t.answered);
    assert!(
        store.commits > 0 && store.commits <= store.transactions,
        "{store:?}"
    );
    assert!(store.rows_changed >= store.commits, "{store:?}");
    let json = serde_json::to_value(&r).expect("report serialises");
    assert!(json["server_cpu"].is_object(), "{json}");

    // The server saw the same: all sessions closed, none left open.
    let (_, open) = p.http("GET", "/v1/sessions?limit=100000", None);
    let open_now = open["sessions"]
        .as_array()
        .map(|a| a.iter().filter(|s| s["state"] == "open").count())
        .unwrap_or(usize::MAX);
    assert_eq!(open_now, 0, "sessions left open on the server");
}
