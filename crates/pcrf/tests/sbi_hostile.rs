//! The SBI listener under attack from an independent HTTP/2 peer: the
//! Python script tests/n7/sbi_hostile.py builds HTTP/2 frames by hand
//! (hyperframe, hpack) and sends malformed and hostile requests over real
//! sockets to the real listener, started in this process. Each case must
//! get a clear 4xx with problem details, or a GOAWAY, the listener must keep
//! serving other clients after each, and this process's memory must stay
//! bounded.
//!
//! The listener needs the four N7 operations to answer; the policy core
//! that implements them is not part of this test, so it gets
//! `support::TestSmPolicies`, a minimal implementation of the seam for the
//! tests only (see tests/support/n7_seam.rs).

mod support;

use pcrf::sbi::stats::Operation;
use pcrf::sbi::SbiConfig;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

fn python_ready() -> bool {
    Command::new("python3")
        .args(["-c", "import h2, hyperframe, hpack"])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn hostile_http2_clients_get_4xx_or_goaway_and_others_are_served() {
    assert!(
        python_ready(),
        "python3 with the h2 package is needed: run scripts/install-test-deps.sh"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let config = SbiConfig {
        // Short, so that the zero-window case ends within the test.
        idle_timeout_secs: 4,
        // Below the 65535-byte initial window, so the script can send a
        // body past it without waiting for WINDOW_UPDATEs.
        max_body_bytes: 32 * 1024,
        ..SbiConfig::default()
    };
    let (addr, stats) = support::start_sbi(&rt, config, None);
    let rss_before = support::rss_kib(std::process::id());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/n7");
    let out = Command::new("python3")
        .arg(dir.join("sbi_hostile.py"))
        .arg(addr.ip().to_string())
        .arg(addr.port().to_string())
        .arg(dir.join("open5gs-create.json"))
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the script failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cases: HashMap<String, Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| Some((v["case"].as_str()?.to_owned(), v)))
        .collect();
    let case = |name: &str| -> &Value {
        cases
            .get(name)
            .unwrap_or_else(|| panic!("case {name} did not run:\n{stdout}"))
    };
    for (name, v) in &cases {
        assert_eq!(
            v["others_served"], true,
            "{name}: others not served after it: {v}"
        );
    }

    let create = &case("create")["answer"];
    assert_eq!(create["status"], 201, "{create}");
    let location = create["location"].as_str().expect("Location");
    assert!(
        location.starts_with(&format!(
            "http://{addr}/npcf-smpolicycontrol/v1/sm-policies/"
        )),
        "{location}"
    );

    // Each bad request: a 4xx problem with the 3GPP cause and the field.
    let problem = |name: &str, status: u64, want_cause: &str, param: Option<&str>| {
        let a = &case(name)["answer"];
        assert_eq!(a["status"], status, "{name}: {a}");
        assert_eq!(a["content_type"], "application/problem+json", "{name}: {a}");
        let p = &a["problem"];
        assert_eq!(p["status"], status, "{name}: {a}");
        assert_eq!(p["cause"], want_cause, "{name}: {a}");
        assert!(
            p["title"].is_string() && p["detail"].is_string(),
            "{name}: {a}"
        );
        if let Some(param) = param {
            assert_eq!(p["invalidParams"][0]["param"], param, "{name}: {a}");
        }
    };
    problem("malformed_json", 400, "INVALID_MSG_FORMAT", None);
    problem(
        "wrong_type",
        400,
        "INVALID_MSG_FORMAT",
        Some("/pduSessionId"),
    );
    problem(
        "missing_mandatory",
        400,
        "MANDATORY_IE_MISSING",
        Some("/supi"),
    );
    problem(
        "unknown_closed_enum",
        400,
        "INVALID_MSG_FORMAT",
        Some("/accessType"),
    );
    problem("wrong_content_type", 415, "UNSUPPORTED_MEDIA_TYPE", None);
    problem(
        "unknown_path",
        404,
        "RESOURCE_URI_STRUCTURE_NOT_FOUND",
        None,
    );
    problem("wrong_method", 405, "METHOD_NOT_ALLOWED", None);
    problem("deep_nesting", 400, "INVALID_MSG_FORMAT", None);
    problem("huge_body_declared", 413, "REQUEST_TOO_LARGE", None);
    problem("huge_body_streamed", 413, "REQUEST_TOO_LARGE", None);
    // An extensible enumeration's unknown value is accepted, as the spec asks.
    assert_eq!(case("unknown_extensible_enum")["answer"]["status"], 201);

    // A thousand streams at once, past the stream limit the SETTINGS
    // announced: refused (RST_STREAM REFUSED_STREAM), and the connection
    // closed with GOAWAY once too many were.
    let t = case("thousand_streams");
    assert!(t["refused"].as_u64().unwrap_or(0) > 0, "{t}");
    assert_eq!(t["goaway"], 11, "ENHANCE_YOUR_CALM expected: {t}");
    for (status, n) in t["answered"].as_object().expect("answered") {
        assert_eq!(status, "404", "{t}: {n}");
    }
    // A thousand on one connection within the limit: every one answered.
    let t = case("thousand_streams_within_limit");
    assert_eq!(t["answered"], serde_json::json!({"404": 1000}), "{t}");

    // Rapid reset and the CONTINUATION flood end in GOAWAY (or a close).
    for name in ["rapid_reset", "continuation_flood"] {
        let v = case(name);
        assert!(!v["goaway"].is_null() || v["closed"] == true, "{name}: {v}");
    }
    let cont = case("continuation_flood");
    assert!(
        cont["answer"].is_null(),
        "a never-ending header block was answered: {cont}"
    );

    // SETTINGS and PING floods: h2 answers one at a time and stops reading
    // while its answer waits (memory bounded by design); the connection of
    // a client that floods and then does not answer the server's PINGs is
    // closed by the keep-alive, and the listener carries on meanwhile
    // (others_served above).
    for name in ["settings_flood", "ping_flood"] {
        let v = case(name);
        assert_eq!(v["frames_sent"], 100_000, "{name}: {v}");
        assert!(v["closed"] == true || !v["goaway"].is_null(), "{name}: {v}");
    }

    // Zero window: the answer's head arrives, no body byte, and the
    // connection is closed once the client stops answering PINGs.
    let z = case("zero_window");
    assert_eq!(z["status"], 201, "{z}");
    assert_eq!(z["body_bytes"], 0, "{z}");
    assert!(z["closed"] == true || !z["goaway"].is_null(), "{z}");

    // Memory stays bounded: the attacks leave no large residue.
    let rss_after = support::rss_kib(std::process::id());
    assert!(
        rss_after < rss_before + 64 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    eprintln!("RSS before {rss_before} KiB, after {rss_after} KiB\n{stdout}");

    // Every request was counted by operation and status.
    assert!(stats.requests(Operation::Create, 201) >= 10);
    assert!(stats.requests(Operation::Create, 400) >= 5);
    assert_eq!(stats.requests(Operation::Other, 404), 1);
    assert_eq!(stats.requests(Operation::Other, 405), 1);
}
