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
//! tests only (see tests/suite/support/n7_seam.rs).
//!
//! N5 (Npcf_PolicyAuthorization) answers from the node's own sessions, so
//! its hostile AFs (tests/n7/n5_hostile.py, the same hand-built frames)
//! go to a real `pcrf serve` holding one PDU session, made over N7 by an
//! SMF whose notification side is tests/n7/smf_callback.py; the bounded
//! memory is that process's.

use crate::support;

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
    let (cases, stdout) = run_cases(
        Command::new("python3")
            .arg(dir.join("sbi_hostile.py"))
            .arg(addr.ip().to_string())
            .arg(addr.port().to_string())
            .arg(dir.join("open5gs-create.json")),
    );
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

/// The problem answer of `case` (its `key`): status, problem+json, the
/// 3GPP cause, a title and detail, and the first invalid parameter.
fn assert_problem(
    case: &Value,
    name: &str,
    key: &str,
    status: u64,
    want_cause: &str,
    param: Option<&str>,
) {
    let a = &case[key];
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
}

#[test]
fn hostile_afs_on_n5_get_4xx_and_the_node_keeps_serving() {
    use support::{create_body, free_port, Callback, Pcrf, Smf};
    assert!(
        python_ready(),
        "python3 with the h2 package is needed: run scripts/install-test-deps.sh"
    );
    let callback = Callback::start();
    let sbi = free_port();
    let p = Pcrf::start(&format!(
        "[sbi]\nlisten = \"127.0.0.1:{sbi}\"\nmax_body_bytes = 32768\n"
    ));
    p.provision("001010000000001", r#"{"plan":"basic"}"#);
    // The PDU session the AFs' Creates bind to (UE 10.45.0.2).
    let smf = Smf::new(sbi);
    let body = create_body(&callback, "/nsmf-callback/v1/sm-policy-notify/n5h");
    let (st, _, answer) = smf.call(true, "", Some(&body));
    assert_eq!(st, 201, "{answer}\n{}", p.log());

    let rss_before = support::rss_kib(p.pid());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let (cases, stdout) = run_cases(
        Command::new("python3")
            .arg(dir.join("n7/n5_hostile.py"))
            .arg("127.0.0.1")
            .arg(sbi.to_string())
            .arg(dir.join("n5/voice-create.json"))
            .arg(dir.join("n5/video-patch.json")),
    );
    let case = |name: &str| -> &Value {
        cases
            .get(name)
            .unwrap_or_else(|| panic!("case {name} did not run:\n{stdout}"))
    };
    for (name, v) in &cases {
        assert_eq!(
            v["others_served"],
            true,
            "{name}: others not served after it: {v}\n{}",
            p.log()
        );
    }
    let problem = |name: &str, status: u64, want_cause: &str, param: Option<&str>| {
        assert_problem(case(name), name, "answer", status, want_cause, param);
    };

    let ok = case("create");
    assert_eq!(ok["answer"]["status"], 201, "{ok}");
    let location = ok["answer"]["location"].as_str().expect("Location");
    assert!(
        location.contains("/npcf-policyauthorization/v1/app-sessions/"),
        "{location}"
    );
    assert_eq!(ok["get"]["status"], 200, "{ok}");
    assert_eq!(ok["patch"]["status"], 200, "{ok}");
    assert_eq!(ok["delete"]["status"], 204, "{ok}");

    let bad = "INVALID_MSG_FORMAT";
    let missing = "MANDATORY_IE_MISSING";
    let incorrect = "MANDATORY_IE_INCORRECT";
    let optional = "OPTIONAL_IE_INCORRECT";
    let media = "/ascReqData/medComponents/1";
    problem("malformed_json", 400, bad, None);
    problem("wrong_type", 400, bad, Some("/ascReqData/ueIpv4"));
    problem(
        "wrong_type_media",
        400,
        bad,
        Some(&format!("{media}/medCompN")),
    );
    problem("not_an_object", 400, bad, None);
    problem("missing_asc_req_data", 400, missing, Some("/ascReqData"));
    problem(
        "missing_notif_uri",
        400,
        missing,
        Some("/ascReqData/notifUri"),
    );
    problem(
        "missing_supp_feat",
        400,
        missing,
        Some("/ascReqData/suppFeat"),
    );
    problem(
        "missing_ue_address",
        400,
        missing,
        Some("/ascReqData/ueIpv4"),
    );
    problem(
        "missing_med_comp_n",
        400,
        missing,
        Some(&format!("{media}/medCompN")),
    );
    problem(
        "unknown_med_type",
        400,
        optional,
        Some(&format!("{media}/medType")),
    );
    problem(
        "unknown_f_status",
        400,
        optional,
        Some(&format!("{media}/fStatus")),
    );
    problem(
        "unknown_flow_usage",
        400,
        optional,
        Some(&format!("{media}/medSubComps/1/flowUsage")),
    );
    problem(
        "bad_flow_description",
        400,
        incorrect,
        Some(&format!("{media}/medSubComps/1/fDescs/0")),
    );
    problem(
        "bad_bit_rate",
        400,
        optional,
        Some(&format!("{media}/marBwUl")),
    );
    problem(
        "bad_notif_uri",
        400,
        incorrect,
        Some("/ascReqData/notifUri"),
    );
    // TS 29.514 §5.7.3: no PDU session for the address is a 500 with its
    // own cause, not a failure of the node.
    problem("no_pdu_session", 500, "PDU_SESSION_NOT_AVAILABLE", None);
    problem("deep_nesting", 400, bad, None);
    problem("wrong_content_type", 415, "UNSUPPORTED_MEDIA_TYPE", None);
    problem("create_as_merge_patch", 415, "UNSUPPORTED_MEDIA_TYPE", None);
    problem("patch_plain_json", 415, "UNSUPPORTED_MEDIA_TYPE", None);
    problem("patch_text_plain", 415, "UNSUPPORTED_MEDIA_TYPE", None);
    problem("patch_malformed", 400, bad, None);
    problem(
        "patch_remove_by_name",
        400,
        incorrect,
        Some("/ascReqData/medComponents/voice"),
    );
    problem("delete_malformed_body", 400, bad, None);
    problem("delete_wrong_type_body", 400, bad, Some("/events"));
    problem("wrong_method", 405, "METHOD_NOT_ALLOWED", None);
    assert_eq!(case("delete_live")["answer"]["status"], 204);

    let gone = "APPLICATION_SESSION_CONTEXT_NOT_FOUND";
    for name in [
        "get_unknown",
        "patch_unknown",
        "delete_unknown",
        "delete_twice",
    ] {
        problem(name, 404, gone, None);
    }
    problem("id_too_long", 404, "RESOURCE_URI_STRUCTURE_NOT_FOUND", None);
    // Ids no session could have: a 404 (the path names nothing), or the
    // stream reset when HTTP/2 itself refuses the path; never a 2xx or 5xx.
    for name in [
        "id_dot_dot",
        "id_percent_nul",
        "id_encoded_slash",
        "id_quote",
        "id_utf8",
        "id_raw_utf8",
        "id_space",
    ] {
        let v = case(name);
        for key in ["answer", "delete"] {
            if v[key].is_null() {
                continue;
            }
            let status = v[key]["status"].as_u64().unwrap_or(0);
            assert!((400..500).contains(&status), "{name} {key}: {v}");
            assert_eq!(
                v[key]["content_type"], "application/problem+json",
                "{name}: {v}"
            );
            assert!(v[key]["problem"]["cause"].is_string(), "{name}: {v}");
        }
    }
    problem("huge_body_declared", 413, "REQUEST_TOO_LARGE", None);
    problem("huge_body_streamed", 413, "REQUEST_TOO_LARGE", None);

    // A thousand Creates for one UE: every stream answered; the session
    // holds at most MAX_AF_SESSIONS of them, the rest refused with a 403,
    // and every one created is deleted again.
    let t = case("thousand_creates");
    let answered = t["answered"].as_object().expect("answered");
    let n = |k: &str| answered.get(k).and_then(Value::as_u64).unwrap_or(0);
    let cap = pcrf::rx::service::MAX_AF_SESSIONS as u64;
    assert_eq!(n("201") + n("403"), 1000, "{t}");
    assert_eq!(n("201"), cap, "{t}");
    assert_eq!(
        t["causes"]["REQUESTED_SERVICE_NOT_AUTHORIZED"],
        1000 - cap,
        "{t}"
    );
    assert_eq!(t["deletes"], serde_json::json!({"204": cap}), "{t}");
    assert!(t["goaway"].is_null(), "{t}");

    // Memory stays bounded: the attacks leave no large residue.
    let rss_after = support::rss_kib(p.pid());
    assert!(
        rss_after < rss_before + 64 * 1024,
        "RSS grew from {rss_before} KiB to {rss_after} KiB"
    );
    eprintln!("pcrf RSS before {rss_before} KiB, after {rss_after} KiB\n{stdout}");
    // The node still serves N7 as well.
    let (st, _, _) = smf.call(true, "", Some(&body));
    assert!(st == 201 || st == 200, "N7 after the attacks: {st}");
}

/// Runs an attack script to its end; each case it printed (one JSON line
/// each, by its `case` name), and all it printed.
fn run_cases(script: &mut Command) -> (HashMap<String, Value>, String) {
    let out = script.output().expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the script failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cases = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| Some((v["case"].as_str()?.to_owned(), v)))
        .collect();
    (cases, stdout)
}
