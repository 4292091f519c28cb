//! The decision log at a real webhook: a CCR-I and a CCR-U each emit a
//! `decision` event carrying the subscriber, the session, the deployed
//! version and the very record the session keeps, at the webhook and as
//! lines of the file; a pushed re-decision (RAR) is logged with its rules;
//! a sample of 0, or the log off, emits none; the subscriber filter leaves
//! another subscriber out; a dry run through the API is logged with what
//! the running script and the draft decided; a bad section stops
//! `check-config`.

use crate::support;

use serde_json::Value;
use std::time::Duration;
use support::notify::*;
use support::*;

const SECRET: &str = "a-shared-webhook-secret";

fn config(url: &str, log: &str) -> String {
    format!(
        r#"
[decision_log]
{log}

[[notifications.sinks]]
name = "audit"
kind = "webhook"
url = "{url}"
secret = "{SECRET}"
events = ["decision", "session.ended"]
timeout_ms = 1000
retry_initial_ms = 50
retry_max_ms = 300
"#
    )
}

fn decisions(rx: &WebhookReceiver) -> Vec<Value> {
    rx.received()
        .into_iter()
        .map(|r| r.body)
        .filter(|b| b["name"] == "decision")
        .collect()
}

/// Opens a session, updates it and ends it; the `session.ended` event,
/// which follows the decisions on the subscriber's lane, marks that every
/// decision event of the session has arrived.
async fn open_update_close(p: &Pcrf, rx: &WebhookReceiver, sid: &str, imsi: &str) -> Value {
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    assert_eq!(result_of(&pcef.ccr_i(sid, imsi).await), 2001);
    assert_eq!(result_of(&pcef.ccr_u(sid, 1, |_| {}).await), 2001);
    let (st, session) = p.http("GET", &format!("/v1/sessions/{sid}"), None);
    assert_eq!(st, 200, "{session}");
    assert_eq!(result_of(&pcef.ccr_t(sid, 2).await), 2001);
    assert!(
        poll_until_async(Duration::from_secs(10), || rx
            .received()
            .iter()
            .any(
                |r| r.body["name"] == "session.ended" && r.body["payload"]["session"] == sid
            ))
        .await,
        "no session.ended for {sid}\n{}",
        p.log()
    );
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_decision_reaches_the_webhook_with_its_record() {
    let rx = WebhookReceiver::start(SECRET).await;
    let p = Pcrf::start(&config(&rx.url(), "enabled = true"));
    p.provision("001010000000001", r#"{"plan":"basic"}"#);
    let sid = "pgw.test.local;declog;1";
    let session = open_update_close(&p, &rx, sid, "001010000000001").await;

    let got = decisions(&rx);
    assert_eq!(got.len(), 2, "{got:?}");
    let kept = &session["last_decision"];
    assert!(
        kept["policy_version"].as_u64().unwrap_or(0) >= 1,
        "{session}"
    );
    for (event, trigger) in got.iter().zip(["ccr-i", "ccr-u"]) {
        assert_matches_schema(event);
        assert_eq!(event["subscriber"], "001010000000001");
        let payload = &event["payload"];
        assert_eq!(payload["session"], sid);
        assert_eq!(payload["interface"], "gx");
        assert_eq!(payload["trigger"], trigger);
        assert_eq!(payload["plan"], "basic");
        assert_eq!(payload["policy_version"], kept["policy_version"]);
        assert_eq!(payload["record"]["policy_version"], kept["policy_version"]);
        // The rules decided are those the session keeps.
        assert_eq!(payload["record"]["decision"], kept["decision"], "{payload}");
        assert_eq!(payload["installed"], session["installed"], "{payload}");
    }
    assert_eq!(got[0]["payload"]["record"], *kept, "the CCR-I decided it");
    assert!(
        got[0]["payload"]["record"]["inputs"].is_object(),
        "the inputs that made the decision: {}",
        got[0]["payload"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_of_none_logs_nothing() {
    let rx = WebhookReceiver::start(SECRET).await;
    let p = Pcrf::start(&config(&rx.url(), "enabled = true\nsample_percent = 0"));
    p.provision("001010000000001", r#"{"plan":"basic"}"#);
    open_update_close(&p, &rx, "pgw.test.local;declog;2", "001010000000001").await;
    assert_eq!(decisions(&rx), Vec::<Value>::new());
    assert_eq!(p.metric_value("pcrf_decision_log_sampled_out_total"), 2.0);
    assert_eq!(p.metric_value("pcrf_decision_log_logged_total"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filter_leaves_other_subscribers_out() {
    let rx = WebhookReceiver::start(SECRET).await;
    let p = Pcrf::start(&config(
        &rx.url(),
        "enabled = true\nsubscribers = [\"001010000000001\"]",
    ));
    p.provision("001010000000001", r#"{"plan":"basic"}"#);
    p.provision("001010000000002", r#"{"plan":"basic"}"#);
    open_update_close(&p, &rx, "pgw.test.local;declog;3", "001010000000002").await;
    open_update_close(&p, &rx, "pgw.test.local;declog;4", "001010000000001").await;
    let got = decisions(&rx);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(got.iter().all(|e| e["subscriber"] == "001010000000001"));
    assert_eq!(p.metric_value("pcrf_decision_log_logged_total"), 2.0);
    assert_eq!(p.metric_value("pcrf_decision_log_sampled_out_total"), 0.0);
}

#[test]
fn a_bad_section_stops_start_up_with_its_key() {
    let text = "[decision_log]\nenabled = true\nsample_percent = 150\n";
    let dir = std::env::temp_dir().join(format!("pcrf-declog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("pcrf.toml");
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_pcrf"))
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("[decision_log].sample_percent"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_decision_is_a_line_of_the_file_too() {
    let dir = std::env::temp_dir().join(format!("pcrf-declog-file-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("decisions.jsonl");
    let rx = WebhookReceiver::start(SECRET).await;
    let p = Pcrf::start(&config(
        &rx.url(),
        &format!("enabled = true\nfile = {:?}", path.display().to_string()),
    ));
    p.provision("001010000000001", r#"{"plan":"basic"}"#);
    let sid = "pgw.test.local;declog;5";
    let session = open_update_close(&p, &rx, sid, "001010000000001").await;
    let lines = || -> Vec<Value> {
        std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    assert!(
        poll_until_async(Duration::from_secs(10), || lines().len() >= 2).await,
        "{:?}\n{}",
        lines(),
        p.log()
    );
    let got = lines();
    assert_eq!(got.len(), 2, "{got:?}");
    for (line, trigger) in got.iter().zip(["ccr-i", "ccr-u"]) {
        assert_eq!(line["name"], "decision");
        assert_eq!(line["subscriber"], "001010000000001");
        assert_eq!(line["payload"]["session"], sid);
        assert_eq!(line["payload"]["trigger"], trigger);
        assert_eq!(
            line["payload"]["policy_version"],
            session["last_decision"]["policy_version"]
        );
        assert_eq!(
            line["payload"]["record"]["decision"],
            session["last_decision"]["decision"]
        );
    }
    // The same documents' payloads as the webhook got.
    let hooked: Vec<Value> = decisions(&rx)
        .into_iter()
        .map(|e| e["payload"].clone())
        .collect();
    let filed: Vec<Value> = got.iter().map(|l| l["payload"].clone()).collect();
    assert_eq!(hooked, filed);
    // The API reads them back, newest first; another subscriber has none.
    let (st, back) = p.http("GET", "/v1/subscribers/001010000000001/decisions", None);
    assert_eq!(st, 200, "{back}");
    let mut newest_first = got.clone();
    newest_first.reverse();
    assert_eq!(back["decisions"], Value::from(newest_first));
    assert_eq!(back["complete"], true);
    let (st, one) = p.http(
        "GET",
        "/v1/subscribers/001010000000001/decisions?limit=1",
        None,
    );
    assert_eq!(st, 200);
    assert_eq!(one["decisions"][0]["payload"]["trigger"], "ccr-u");
    assert_eq!(one["complete"], false);
    let (_, none) = p.http("GET", "/v1/subscribers/001010000000002/decisions", None);
    assert_eq!(none["decisions"], Value::from(Vec::<Value>::new()));
    let (st, e) = p.http(
        "GET",
        "/v1/subscribers/001010000000001/decisions?limit=0",
        None,
    );
    assert_eq!(st, 400, "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_redecision_is_logged_and_nothing_is_when_off() {
    let rx = WebhookReceiver::start(SECRET).await;
    let p = Pcrf::start(&config(&rx.url(), "enabled = true"));
    p.provision("001010000000001", r#"{"plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sid = "pgw.test.local;declog;6";
    assert_eq!(result_of(&pcef.ccr_i(sid, "001010000000001").await), 2001);
    // A plan change re-decides the open session and pushes it (a RAR).
    p.provision("001010000000001", r#"{"plan":"unlimited"}"#);
    assert!(
        poll_until_async(Duration::from_secs(10), || decisions(&rx)
            .iter()
            .any(|e| e["payload"]["trigger"] == "push"))
        .await,
        "{:?}\n{}",
        decisions(&rx),
        p.log()
    );
    let push = decisions(&rx)
        .into_iter()
        .find(|e| e["payload"]["trigger"] == "push")
        .unwrap_or_default();
    assert_matches_schema(&push);
    assert_eq!(push["payload"]["session"], sid);
    assert_eq!(push["payload"]["plan"], "unlimited");
    assert!(push["payload"]["rules_installed"].is_array(), "{push}");

    let rx = WebhookReceiver::start(SECRET).await;
    let p = Pcrf::start(&config(&rx.url(), "enabled = false"));
    p.provision("001010000000001", r#"{"plan":"basic"}"#);
    open_update_close(&p, &rx, "pgw.test.local;declog;7", "001010000000001").await;
    assert_eq!(decisions(&rx), Vec::<Value>::new());
    assert_eq!(p.metric_value("pcrf_decision_log_logged_total"), 0.0);
    // Nothing to read back either, and the answer says why.
    let (st, e) = p.http("GET", "/v1/subscribers/001010000000001/decisions", None);
    assert_eq!(st, 409, "{e}");
    assert!(
        e["error"]
            .as_str()
            .is_some_and(|m| m.contains("[decision_log]")),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_is_logged_with_both_decisions_and_a_filtered_one_is_not() {
    let rx = WebhookReceiver::start(SECRET).await;
    let p = Pcrf::start(&config(
        &rx.url(),
        "enabled = true\nsubscribers = [\"001010000000001\"]",
    ));
    p.provision("001010000000001", r#"{"plan":"basic"}"#);
    p.provision("001010000000002", r#"{"plan":"basic"}"#);
    let draft = std::fs::read_to_string(&p.policy).expect("policy");
    let dry_run = |imsi: &str| {
        let body = serde_json::json!({ "source": draft, "subscriber": imsi }).to_string();
        let (st, answer) = p.http("POST", "/v1/policy/dry-run", Some(&body));
        assert_eq!(st, 200, "{answer}");
        answer
    };
    // Left out by the filter first; the subscriber's session.ended later
    // marks that the lane carried everything before it.
    dry_run("001010000000002");
    let answer = dry_run("001010000000001");
    open_update_close(&p, &rx, "pgw.test.local;declog;dry", "001010000000001").await;
    let got = decisions(&rx);
    let dry: Vec<&Value> = got
        .iter()
        .filter(|e| e["payload"]["trigger"] == "dry-run")
        .collect();
    assert_eq!(dry.len(), 1, "{got:?}");
    let event = dry[0];
    assert_matches_schema(event);
    assert_eq!(event["subscriber"], "001010000000001");
    let payload = &event["payload"];
    assert_eq!(payload["interface"], "api");
    assert_eq!(payload["plan"], "basic");
    assert_eq!(payload["inputs"], answer["inputs"]);
    assert_eq!(payload["running"], answer["running"]);
    assert_eq!(payload["draft"], answer["draft"]);
    assert!(payload["running"]["decision"].is_object(), "{payload}");
    assert_eq!(p.metric_value("pcrf_decision_log_logged_total"), 3.0);
}
