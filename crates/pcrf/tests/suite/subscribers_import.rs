//! `pcrf subscribers import` against the real `pcrf serve`: a CSV and a
//! JSON-lines file are provisioned through the batch endpoint and read back
//! (also after a restart, from the store); a bad file is refused with its
//! line named and imports nothing.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};
use support::{rss_kib, scratch_dir, Pcrf};

fn import(pcrf: &Pcrf, file: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pcrf"))
        .args(["subscribers", "import"])
        .arg(file)
        .args(["--api", &format!("http://{}", pcrf.api)])
        .args(extra)
        .env_remove("PCRF_API_TOKEN")
        .output()
        .expect("run pcrf subscribers import")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn csv_and_json_lines_are_imported_and_a_bad_file_imports_nothing() {
    let mut pcrf = Pcrf::start("");
    let dir = scratch_dir("import");

    let csv = dir.join("subs.csv");
    std::fs::write(
        &csv,
        "imsi,msisdn,plan,services,billing_day,quota.monthly,quota.daily\n\
         001010000000001,491700000001,basic,vip;tv,15,50000000000,\n\
         \n\
         001010000000002,,\"gold, yearly\",,,,1000\r\n\
         001010000000003,491700000003,basic,,,,\n",
    )
    .expect("write csv");
    // Batches of 2: the three rows go in two requests.
    let out = import(&pcrf, &csv, &["--batch", "2"]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("imported 3 profiles (3 created, 0 updated)"),
        "{stdout}"
    );
    assert!(text(&out.stderr).contains("2/3"), "{}", text(&out.stderr));
    let (st, s1) = pcrf.http("GET", "/v1/subscribers/001010000000001", None);
    assert_eq!(st, 200);
    assert_eq!(s1["msisdn"], "491700000001");
    assert_eq!(s1["services"], serde_json::json!(["tv", "vip"]));
    assert_eq!(s1["billing_day"], 15);
    assert_eq!(s1["quotas"], serde_json::json!({"monthly": 50000000000u64}));
    let (st, s2) = pcrf.http("GET", "/v1/subscribers/001010000000002", None);
    assert_eq!(st, 200);
    assert_eq!(s2["plan"], "gold, yearly");
    assert_eq!(s2["quotas"], serde_json::json!({"daily": 1000}));
    assert!(s2.get("msisdn").is_none(), "{s2}");

    let jsonl = dir.join("more.jsonl");
    std::fs::write(
        &jsonl,
        "{\"imsi\":\"001010000000003\",\"plan\":\"gold\"}\n\
         {\"imsi\":\"001010000000004\",\"attributes\":{\"blocked\":true}}\n",
    )
    .expect("write jsonl");
    let out = import(&pcrf, &jsonl, &[]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(
        text(&out.stdout).contains("imported 2 profiles (1 created, 1 updated)"),
        "{}",
        text(&out.stdout)
    );
    let (_, s3) = pcrf.http("GET", "/v1/subscribers/001010000000003", None);
    assert_eq!(s3["plan"], "gold");
    assert!(s3.get("msisdn").is_none(), "replaced, not merged: {s3}");
    let (_, s4) = pcrf.http("GET", "/v1/subscribers/001010000000004", None);
    assert_eq!(s4["attributes"]["blocked"], true);

    // A bad row after good ones: refused, the line named, nothing imported.
    let bad_csv = dir.join("bad.csv");
    std::fs::write(
        &bad_csv,
        "imsi,plan,billing_day\n001010000000010,basic,1\n001010000000011,basic,40\n",
    )
    .expect("write bad csv");
    let out = import(&pcrf, &bad_csv, &["--batch", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("bad.csv:3: billing_day must be 1 to 28, got 40"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was imported"), "{stderr}");
    assert_eq!(
        pcrf.http("GET", "/v1/subscribers/001010000000010", None).0,
        404
    );
    let bad_jsonl = dir.join("bad.ndjson");
    std::fs::write(
        &bad_jsonl,
        "{\"imsi\":\"001010000000012\"}\n{\"imsi\":\"001010000000013\",\"colour\":\"red\"}\n{\"imsi\":\"001010000000012\"}\n",
    )
    .expect("write bad jsonl");
    let out = import(&pcrf, &bad_jsonl, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("bad.ndjson:2: unknown field `colour`"),
        "{stderr}"
    );
    assert!(
        stderr.contains("bad.ndjson:3: imsi 001010000000012 repeats line 1"),
        "{stderr}"
    );
    assert_eq!(
        pcrf.http("GET", "/v1/subscribers/001010000000012", None).0,
        404
    );
    let unknown_column = dir.join("cols.csv");
    std::fs::write(&unknown_column, "imsi,colour\n001010000000020,red\n").expect("write");
    let out = import(&pcrf, &unknown_column, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("cols.csv:1: header: unknown column \"colour\""),
        "{}",
        text(&out.stderr)
    );

    // What was imported is durable: read back after a restart.
    pcrf.restart();
    let (st, again) = pcrf.http("GET", "/v1/subscribers/001010000000001", None);
    assert_eq!(st, 200);
    assert_eq!(again, s1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unreachable_api_is_a_clear_error() {
    let dir = scratch_dir("import-unreachable");
    let csv = dir.join("subs.csv");
    std::fs::write(&csv, "imsi\n001010000000001\n").expect("write");
    // A port nothing listens on (bound, then released).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let out = Command::new(env!("CARGO_BIN_EXE_pcrf"))
        .args(["subscribers", "import"])
        .arg(&csv)
        .args(["--api", &format!("http://127.0.0.1:{port}")])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("cannot reach the API"), "{stderr}");
    assert!(stderr.contains("0 of 1 profiles were imported"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A profile too large for `PUT` is refused by the batch endpoint and by
/// the import as well (the same check), naming the entry or line and the
/// field, and nothing is stored; an oversized batch leaves memory as it was.
#[test]
fn oversized_profiles_are_refused_by_every_way_in() {
    let pcrf = Pcrf::start("");
    let blob = "x".repeat(100 * 1024);
    let entry = format!(r#"{{"imsi":"001010000000077","attributes":{{"blob":"{blob}"}}}}"#);

    let (st, body) = pcrf.http("POST", "/v1/subscribers/batch", Some(&format!("[{entry}]")));
    assert_eq!(st, 400, "{body}");
    let msg = body["error"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("entry 0: ") && msg.contains("attribute \"blob\""),
        "{msg}"
    );
    assert_eq!(
        pcrf.http("GET", "/v1/subscribers/001010000000077", None).0,
        404
    );
    // PUT refuses it too, by the same rule, when the body limit allows it.
    let (st, body) = pcrf.http(
        "PUT",
        "/v1/subscribers/001010000000077",
        Some(&format!(
            r#"{{"attributes":{{"blob":"{}"}}}}"#,
            "x".repeat(60 * 1024)
        )),
    );
    assert_eq!(st, 201, "{body}");
    assert_eq!(
        pcrf.http("DELETE", "/v1/subscribers/001010000000077", None)
            .0,
        204
    );

    // Nearly the whole batch body limit in one attribute: refused, and the
    // server's memory does not keep it (storing it cost over 300 MB).
    let before = rss_kib(pcrf.pid());
    let huge = "y".repeat(12 << 20);
    let (st, body) = pcrf.http(
        "POST",
        "/v1/subscribers/batch",
        Some(&format!(
            r#"[{{"imsi":"001010000000078","attributes":{{"blob":"{huge}"}}}}]"#
        )),
    );
    assert_eq!(st, 400, "{body}");
    assert_eq!(
        pcrf.http("GET", "/v1/subscribers/001010000000078", None).0,
        404
    );
    let after = rss_kib(pcrf.pid());
    eprintln!("RSS around the refused 12 MiB batch: {before} KiB -> {after} KiB");
    assert!(
        after < before + 96 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );

    let dir = scratch_dir("import-oversized");
    let file = dir.join("subs.jsonl");
    std::fs::write(
        &file,
        format!("{{\"imsi\":\"001010000000079\"}}\n{entry}\n"),
    )
    .expect("write");
    let out = import(&pcrf, &file, &[]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("subs.jsonl:2: ") && stderr.contains("attribute \"blob\""),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was imported"), "{stderr}");
    assert_eq!(
        pcrf.http("GET", "/v1/subscribers/001010000000079", None).0,
        404
    );
}
