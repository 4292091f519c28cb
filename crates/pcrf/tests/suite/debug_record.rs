//! `pcrf debug session|usage|subscriber`: records written by a running
//! server (sessions, usage, a profile), the server stopped, then each
//! printed as JSON from the store it left, on the embedded store and on
//! PostgreSQL (a database of its own on the server PCRF_TEST_DATABASE_URL
//! names, as scripts/test.sh sets it up). The rows themselves are in the
//! binary form, not JSON.

use crate::support;

use diameter::dict::avp;
use std::process::Command;
use support::*;

const IMSI: &str = "001010000000001";
const SID: &str = "pgw.test.local;debug;1";

/// Provisions, opens a session and reports 7 MB on it; the API's view of
/// the session.
async fn write_records(p: &Pcrf) -> serde_json::Value {
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    assert_eq!(result_of(&pcef.ccr_i(SID, IMSI).await), 2001);
    let cca = pcef
        .ccr_u(SID, 1, |b| {
            b.i32(avp::EVENT_TRIGGER, 33)
                .group(avp::USAGE_MONITORING_INFORMATION, |g| {
                    g.bytes(avp::MONITORING_KEY, b"total")
                        .group(avp::USED_SERVICE_UNIT, |u| {
                            u.u64(avp::CC_TOTAL_OCTETS, 7_000_000);
                        });
                });
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    pcef.close().await;
    let (st, session) = p.http("GET", &format!("/v1/sessions/{SID}"), None);
    assert_eq!(st, 200, "{session}");
    session
}

/// `pcrf debug ARGS --config FILE`: exit status, stdout, stderr.
fn debug(p: &Pcrf, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pcrf"))
        .arg("debug")
        .args(args)
        .arg("--config")
        .arg(&p.config)
        .env_remove("PCRF_CONFIG")
        .output()
        .expect("pcrf debug");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every record prints as JSON, and a missing one is an error.
fn check_printed(p: &Pcrf, shown: &serde_json::Value) {
    let (ok, out, err) = debug(p, &["session", SID]);
    assert!(ok, "{err}");
    let session: serde_json::Value = serde_json::from_str(&out).expect("session JSON");
    for field in [
        "id",
        "subscriber",
        "imsi",
        "apn",
        "installed",
        "monitoring",
        "created_ms",
    ] {
        assert_eq!(session[field], shown[field], "{field}:\n{out}");
    }
    assert_eq!(session["state"], "open");
    assert_eq!(
        session["last_decision"]["decision"], shown["last_decision"]["decision"],
        "{out}"
    );
    // The inputs are not stored (the API shows them while in memory).
    assert!(session["last_decision"]["inputs"].is_null(), "{out}");
    assert!(
        session["last_answer"]
            .as_str()
            .is_some_and(|a| a.starts_with("b64:")),
        "{out}"
    );

    let (ok, out, err) = debug(p, &["usage", IMSI]);
    assert!(ok, "{err}");
    let usage: serde_json::Value = serde_json::from_str(&out).expect("usage JSON");
    assert_eq!(usage["subscriber"], IMSI);
    assert_eq!(usage["accumulators"]["monthly"]["used"], 7_000_000, "{out}");
    assert_eq!(usage["last_reports"]["total"]["session"], SID, "{out}");

    let (ok, out, err) = debug(p, &["subscriber", IMSI]);
    assert!(ok, "{err}");
    let profile: serde_json::Value = serde_json::from_str(&out).expect("profile JSON");
    assert_eq!(profile["plan"], "basic", "{out}");
    assert_eq!(profile["msisdn"], "491700000001", "{out}");

    let (ok, out, err) = debug(p, &["session", "no-such-session"]);
    assert!(!ok, "{out}");
    assert!(err.contains("no session \"no-such-session\""), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prints_records_of_the_embedded_store_as_json() {
    let (usage, _) = usage_section(USAGE_FILE);
    let mut p = Pcrf::start(&usage);
    let shown = write_records(&p).await;
    // While the server holds the store, the command says so.
    let (ok, _, err) = debug(&p, &["session", SID]);
    assert!(!ok);
    assert!(err.contains("opening the store"), "{err}");
    assert!(p.terminate().success(), "{}", p.log());

    // The rows are binary records, not JSON (in whichever shard's file).
    let mut found = Vec::new();
    for entry in std::fs::read_dir(p.dir.join("data")).expect("data dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "db") {
            let db = rusqlite::Connection::open(&path).expect("open");
            let rows: Vec<Vec<u8>> = db
                .prepare("SELECT data FROM sessions WHERE id = ?1")
                .and_then(|mut q| q.query_map([SID], |r| r.get(0))?.collect())
                .expect("query");
            found.extend(rows);
        }
    }
    assert_eq!(found.len(), 1);
    assert_eq!(found[0][0], 0x01, "tagged binary record");

    check_printed(&p, &shown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prints_records_of_the_postgres_store_as_json() {
    let db = test_database("debug").await;
    let (usage, _) = usage_section(USAGE_FILE);
    let mut p = Pcrf::start_with_store(Some(&db.store_section()), &usage);
    let shown = write_records(&p).await;
    assert!(p.terminate().success(), "{}", p.log());

    let row = db
        .client()
        .await
        .query_one(
            "SELECT get_byte(data, 0) FROM sessions WHERE id = $1",
            &[&SID],
        )
        .await
        .expect("session row");
    assert_eq!(row.get::<_, i32>(0), 0x01, "tagged binary record");

    check_printed(&p, &shown);
}
