//! `pcrf serve` on the PostgreSQL store, as a process: sessions and usage
//! accumulators survive `kill -9`, `/v1/ready` reflects the database, and the query profiler is
//! switched and read over the API and the `pcrf debug` CLI. Needs a real
//! server: PCRF_TEST_DATABASE_URL (scripts/test.sh sets it up).

use crate::support;

use support::*;

const IMSI: &str = "001010000000001";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_end_to_end() {
    let db = test_database("proc").await;
    let url = &db.url;
    let (usage, _) = usage_section(USAGE_FILE);
    let mut p = Pcrf::start_with_store(
        Some(&format!("kind = \"postgres\"\nurl = \"{url}\"")),
        &usage,
    );
    let (st, ready) = p.http("GET", "/v1/ready", None);
    assert_eq!(st, 200, "{ready}\n{}", p.log());
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);

    let (st, _) = p.http(
        "POST",
        "/v1/debug/query-profiler",
        Some(r#"{"enabled":true}"#),
    );
    assert_eq!(st, 200);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sids: Vec<String> = (0..10).map(|i| format!("pgw.test.local;pg;{i}")).collect();
    for s in &sids {
        assert_eq!(result_of(&pcef.ccr_i(s, IMSI).await), 2001);
    }
    let (st, prof) = p.http("GET", "/v1/debug/queries?top=5", None);
    assert_eq!(st, 200, "{prof}");
    let statements = prof["statements"].as_array().expect("statements");
    assert!(!statements.is_empty() && statements.len() <= 5, "{prof}");
    assert!(
        statements.iter().any(|q| q["calls"].as_u64() > Some(0)),
        "{prof}"
    );

    // The CLI reads the same table.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pcrf"))
        .args(["debug", "queries", "--api", &p.api.to_string()])
        .output()
        .expect("pcrf debug queries");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("calls/s"));

    // A usage report in each session: the accumulators are rows too.
    for s in &sids {
        let cca = pcef
            .ccr_u(s, 1, |b| {
                b.i32(diameter::dict::avp::EVENT_TRIGGER, 33).group(
                    diameter::dict::avp::USAGE_MONITORING_INFORMATION,
                    |g| {
                        g.bytes(diameter::dict::avp::MONITORING_KEY, b"total")
                            .group(diameter::dict::avp::USED_SERVICE_UNIT, |u| {
                                u.u64(diameter::dict::avp::CC_TOTAL_OCTETS, 1_000_000);
                            });
                    },
                );
            })
            .await;
        assert_eq!(result_of(&cca), 2001);
    }
    assert_eq!(p.monthly_used(IMSI), 10_000_000);

    pcef.close().await;
    p.restart(); // SIGKILL, then start on the same database
    assert_eq!(
        p.monthly_used(IMSI),
        10_000_000,
        "usage recovered from PostgreSQL"
    );
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    for s in &sids {
        assert_eq!(
            result_of(&pcef.ccr_u(s, 2, |_| {}).await),
            2001,
            "session {s} lost after kill -9 on PostgreSQL:\n{}",
            p.log()
        );
    }
    pcef.close().await;

    // `pcrf db migrate` on an up-to-date schema is a no-op that says the version.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pcrf"))
        .args(["db", "migrate"])
        .env("PCRF_DATABASE_URL", url)
        .output()
        .expect("pcrf db migrate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("schema at version"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_has_no_query_profiler() {
    let p = Pcrf::start("");
    let (st, body) = p.http("GET", "/v1/debug/queries", None);
    assert_eq!(st, 409, "{body}");
    assert!(body["error"]
        .as_str()
        .is_some_and(|e| e.contains("PostgreSQL")));
}
