//! Notifications to a real HTTP receiver started by the test: session
//! events signed with HMAC-SHA256 (checked by the receiver), in order and
//! matching docs/notifications.schema.json; a receiver outage behind a TCP
//! proxy the test cuts, then the backlog drains with nothing lost; a full
//! backlog drops new events and counts them while Gx is answered; and the
//! policy's notify() firing once per usage period, across kill -9.

use crate::support;

use diameter::codec::MessageBuilder;
use diameter::dict::avp;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use support::notify::*;
use support::*;

const SECRET: &str = "a-shared-webhook-secret";

const ALL: &str = r#"["session.*", "policy.*", "quota.*", "subscriber.*", "usage.*", "peer.*"]"#;
const SESSIONS: &str = r#"["session.*"]"#;

fn sink(url: &str, extra: &str, events: &str) -> String {
    format!(
        r#"
[notifications]
{extra}

[[notifications.sinks]]
name = "crm"
kind = "webhook"
url = "{url}"
secret = "{SECRET}"
events = {events}
concurrency = 2
timeout_ms = 1000
retry_initial_ms = 50
retry_max_ms = 300
"#
    )
}

fn names(got: &[Received]) -> Vec<String> {
    got.iter()
        .map(|r| r.body["name"].as_str().unwrap_or("").to_owned())
        .collect()
}

fn status(p: &Pcrf) -> Value {
    let (st, body) = p.http("GET", "/v1/notifications/status", None);
    assert_eq!(st, 200, "{body}");
    body
}

/// Waits until the backlog is empty. An event is queued with the change
/// that raised it, before the answer to the request that made it: once
/// the backlog is empty after an answer, the receiver has every event
/// that request raised, and counting what it got proves what was not sent.
async fn all_delivered(p: &Pcrf) {
    eventually_async(
        p.waiting_for("every queued notification to be delivered"),
        Duration::from_secs(10),
        || (status(p)["backlog"] == 0).then_some(()),
    )
    .await;
}

/// Pushes whose outcome is counted (a RAR, unchanged or failed).
fn pushes_done(p: &Pcrf) -> f64 {
    p.metric_value("pcrf_pushes_rar_total")
        + p.metric_value("pcrf_pushes_unchanged_total")
        + p.metric_value("pcrf_pushes_failed_total")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_events_reach_the_webhook_signed_in_order_and_as_documented() {
    let rx = WebhookReceiver::start(SECRET).await;
    let p = Pcrf::start(&sink(&rx.url(), "", ALL));
    p.provision("001010000000001", r#"{"plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sid = "pgw.test.local;notify;1";
    assert_eq!(result_of(&pcef.ccr_i(sid, "001010000000001").await), 2001);
    assert_eq!(result_of(&pcef.ccr_t(sid, 1).await), 2001);

    // The subscriber's events, and the PCEF's connection (no subscriber).
    assert!(
        poll_until_async(Duration::from_secs(10), || rx.received().len() >= 4).await,
        "got {:?}\n{}",
        names(&rx.received()),
        p.log()
    );
    let (peer, got): (Vec<Received>, Vec<Received>) = rx
        .received()
        .into_iter()
        .partition(|r| r.body.get("subscriber").is_none());
    assert_eq!(names(&peer), ["peer.up"]);
    assert_eq!(peer[0].body["payload"]["peer"], "pgw.test.local");
    assert!(peer[0].signed);
    assert_matches_schema(&peer[0].body);
    assert_eq!(
        names(&got),
        ["subscriber.changed", "session.started", "session.ended"],
        "one subscriber's events arrive in the order they happened"
    );
    for r in &got {
        assert!(
            r.signed,
            "X-Pcrf-Signature must match the body: {:?}",
            r.body
        );
        assert_eq!(r.event_header.as_deref(), r.body["name"].as_str());
        assert_matches_schema(&r.body);
        assert_eq!(r.body["subscriber"], "001010000000001");
    }
    assert_eq!(got[1].body["payload"]["session"], sid);
    assert_eq!(
        got[1].body["idempotency_key"],
        format!("session.started:{sid}")
    );
    assert_eq!(got[2].body["payload"]["cause"], "ccr-t");
    assert_eq!(got[0].body["payload"]["change"], "created");
    let ids: Vec<&str> = got.iter().map(|r| r.body["id"].as_str().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted, "ids sort in the order the events were made");

    // Delivered and acknowledged: nothing waits.
    assert!(
        poll_until_async(Duration::from_secs(5), || status(&p)["backlog"] == 0).await,
        "{}",
        status(&p)
    );
    let s = status(&p);
    assert_eq!(s["sinks"][0]["name"], "crm");
    assert_eq!(s["sinks"][0]["delivered"], 4);
    let m = p.metrics();
    assert!(
        m.contains("pcrf_notifications_backlog{sink=\"crm\"} 0"),
        "{m}"
    );
    assert!(
        m.contains("pcrf_notifications_delivered_total{sink=\"crm\"} 4"),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_outage_backs_up_then_drains_without_loss() {
    let rx = WebhookReceiver::start(SECRET).await;
    let proxy = Proxy::start(rx.addr).await;
    let p = Pcrf::start(&sink(&format!("http://{}/hook", proxy.addr), "", SESSIONS));
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sessions = 20;
    for i in 0..sessions {
        p.provision(&format!("0010100000001{i:02}"), r#"{"plan":"basic"}"#);
    }

    proxy.cut();
    for i in 0..sessions {
        let sid = format!("pgw.test.local;outage;{i}");
        let imsi = format!("0010100000001{i:02}");
        assert_eq!(result_of(&pcef.ccr_i(&sid, &imsi).await), 2001);
        assert_eq!(result_of(&pcef.ccr_t(&sid, 1).await), 2001);
    }
    // The receiver is unreachable: the events wait, failures are counted.
    assert!(
        poll_until_async(Duration::from_secs(5), || status(&p)["sinks"][0]["failed"]
            .as_u64()
            .unwrap_or(0)
            > 0)
        .await
    );
    let s = status(&p);
    assert_eq!(s["backlog"], 2 * sessions, "{s}");
    assert!(s["sinks"][0]["last_error"].is_string(), "{s}");
    assert!(p.metrics().contains(&format!(
        "pcrf_notifications_backlog{{sink=\"crm\"}} {}",
        2 * sessions
    )));
    // A 30 s outage, as a receiver's restart or a network cut would be:
    // nothing arrives, nothing is dropped, the node keeps retrying.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(rx.received().len(), 0);
    assert_eq!(status(&p)["backlog"], 2 * sessions);

    proxy.restore();
    assert!(
        poll_until_async(Duration::from_secs(20), || status(&p)["backlog"] == 0).await,
        "the backlog drains once the receiver is back: {}",
        status(&p)
    );
    let got = rx.received();
    let mut by_key: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in &got {
        assert!(r.signed);
        assert_matches_schema(&r.body);
        by_key
            .entry(r.body["idempotency_key"].as_str().unwrap().to_owned())
            .or_default()
            .insert(r.body["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(by_key.len(), 2 * sessions as usize, "every event arrived");
    for (key, ids) in &by_key {
        assert_eq!(ids.len(), 1, "a duplicate is the same event: {key} {ids:?}");
    }
    // Per subscriber: started before ended.
    for i in 0..sessions {
        let imsi = format!("0010100000001{i:02}");
        let of: Vec<String> = got
            .iter()
            .filter(|r| r.body["subscriber"] == imsi.as_str())
            .map(|r| r.body["name"].as_str().unwrap().to_owned())
            .collect();
        let first_end = of.iter().position(|n| n == "session.ended").unwrap();
        assert!(
            of[..first_end].iter().any(|n| n == "session.started"),
            "{of:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_backlog_drops_new_events_and_gx_is_still_answered() {
    let rx = WebhookReceiver::start(SECRET).await;
    let proxy = Proxy::start(rx.addr).await;
    let p = Pcrf::start(&sink(
        &format!("http://{}/hook", proxy.addr),
        "max_backlog = 3",
        SESSIONS,
    ));
    p.provision("001010000000009", r#"{"plan":"basic"}"#);
    proxy.cut();
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    for i in 0..3 {
        let sid = format!("pgw.test.local;full;{i}");
        assert_eq!(result_of(&pcef.ccr_i(&sid, "001010000000009").await), 2001);
    }
    let s = status(&p);
    assert_eq!(s["backlog"], 3, "{s}");
    assert_eq!(s["sinks"][0]["dropped"], 0, "{s}");
    // Full: the next events are dropped, the requests answered all the same.
    for i in 0..3 {
        let sid = format!("pgw.test.local;full;{i}");
        assert_eq!(result_of(&pcef.ccr_t(&sid, 1).await), 2001);
    }
    let s = status(&p);
    assert_eq!(s["backlog"], 3, "{s}");
    assert_eq!(s["sinks"][0]["dropped"], 3, "{s}");
    assert!(p
        .metrics()
        .contains("pcrf_notifications_dropped_total{sink=\"crm\"} 3"));
    assert!(p.log().contains("notification backlog full"));
    proxy.restore();
    assert!(poll_until_async(Duration::from_secs(10), || rx.received().len() == 3).await);
    assert!(names(&rx.received()).iter().all(|n| n == "session.started"));
}

const NOTIFY_POLICY: &str = r#"
function decide(input)
  local monthly = input.usage.accumulators.monthly
  if monthly ~= nil and monthly.percent ~= nil and monthly.percent >= 80 then
    notify("quota-80", { accumulator = "monthly", percent = monthly.percent })
  end
  if input.session.apn == "internet" then
    notify("welcome", { apn = input.session.apn })
  end
  return { rules = { "internet" }, monitoring = { "total" } }
end
"#;

fn report(b: &mut MessageBuilder<'_>, octets: u64) {
    b.i32(avp::EVENT_TRIGGER, 33);
    b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
        g.bytes(avp::MONITORING_KEY, b"total")
            .group(avp::USED_SERVICE_UNIT, |u| {
                u.u64(avp::CC_TOTAL_OCTETS, octets);
            })
            .i32(avp::USAGE_MONITORING_LEVEL, 0);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_notify_fires_once_per_period_even_across_kill_9() {
    const MB: u64 = 1_000_000;
    let rx = WebhookReceiver::start(SECRET).await;
    let mut p = Pcrf::start_with_usage(&sink(&rx.url(), "quota_thresholds = [50]", ALL));
    std::fs::write(&p.policy, NOTIFY_POLICY).expect("policy");
    let (st, body) = p.http("POST", "/v1/policy/reload", None);
    assert_eq!(st, 200, "{body}");
    // 100 MB a month.
    p.provision(
        "001010000000001",
        r#"{"plan":"basic","quotas":{"monthly":100000000}}"#,
    );
    let sid = "pgw.test.local;policy;1";
    {
        let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
        assert_eq!(result_of(&pcef.ccr_i(sid, "001010000000001").await), 2001);
        // 40%, 60% (crosses the 50% threshold), 85%, 90%, 95%: three
        // updates above 80% make one notice.
        for (n, octets) in [
            (1, 40 * MB),
            (2, 20 * MB),
            (3, 25 * MB),
            (4, 5 * MB),
            (5, 5 * MB),
        ] {
            let a = pcef.ccr_u(sid, n, |b| report(b, octets)).await;
            assert_eq!(result_of(&a), 2001);
        }
    }
    // One per idempotency key.
    let named = |name: &str| {
        let mut seen = BTreeSet::new();
        rx.received()
            .into_iter()
            .filter(|r| r.body["name"] == name)
            .filter(|r| seen.insert(r.body["idempotency_key"].to_string()))
            .collect::<Vec<_>>()
    };
    assert!(
        poll_until_async(Duration::from_secs(10), || named("policy.quota-80").len()
            == 1)
        .await
    );
    let quota = named("policy.quota-80");
    assert_eq!(quota[0].body["payload"]["accumulator"], "monthly");
    assert_eq!(quota[0].body["payload"]["percent"], 85);
    assert_matches_schema(&quota[0].body);
    let welcome = named("policy.welcome");
    assert_eq!(welcome.len(), 1, "once per session");
    assert_eq!(
        welcome[0].body["idempotency_key"],
        format!("policy.welcome:001010000000001:session:{sid}")
    );
    let threshold = named("quota.threshold");
    assert_eq!(threshold.len(), 1, "{:?}", names(&rx.received()));
    assert_eq!(threshold[0].body["payload"]["threshold_percent"], 50);
    assert_eq!(threshold[0].body["payload"]["percent"], 60);
    assert_matches_schema(&threshold[0].body);

    // The marks were written with the events: a restart forgets nothing.
    // (A delivery whose acknowledgement the kill beats is sent again, with
    // its idempotency key: count keys, not deliveries.)
    p.restart();
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let a = pcef.ccr_u(sid, 6, |b| report(b, MB)).await;
    assert_eq!(result_of(&a), 2001);
    let sid2 = "pgw.test.local;policy;2";
    assert_eq!(result_of(&pcef.ccr_i(sid2, "001010000000001").await), 2001);
    assert!(
        poll_until_async(Duration::from_secs(10), || named("policy.welcome").len()
            == 2)
        .await
    );
    all_delivered(&p).await;
    assert_eq!(
        named("policy.quota-80").len(),
        1,
        "{:?}",
        names(&rx.received())
    );
    assert_eq!(named("quota.threshold").len(), 1);
}

/// Notifies when the profile says the subscriber is a roamer: the input
/// changes with a provisioning change, not with a CCR.
const ROAMING_POLICY: &str = r#"
function decide(input)
  local sub = input.subscriber
  if sub ~= nil and sub.attributes ~= nil and sub.attributes.roaming == true then
    notify("roaming", { plan = sub.plan })
  end
  return { rules = { "internet" } }
end
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_notify_fires_on_a_push_redecision_once() {
    let rx = WebhookReceiver::start(SECRET).await;
    let p = Pcrf::start(&sink(&rx.url(), "", r#"["policy.*"]"#));
    std::fs::write(&p.policy, ROAMING_POLICY).expect("policy");
    let (st, body) = p.http("POST", "/v1/policy/reload", None);
    assert_eq!(st, 200, "{body}");
    p.provision("001010000000001", r#"{"plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sid = "pgw.test.local;push;1";
    assert_eq!(result_of(&pcef.ccr_i(sid, "001010000000001").await), 2001);

    // The profile changes through the API: the session is re-decided
    // without a CCR (the rules stay the same, so no RAR is even needed).
    p.provision(
        "001010000000001",
        r#"{"plan":"basic","attributes":{"roaming":true}}"#,
    );
    assert!(
        poll_until_async(Duration::from_secs(10), || !rx.received().is_empty()).await,
        "{}",
        p.log()
    );
    // Re-decided again (another change, same attribute) and by a CCR-U:
    // the notification is still once per session.
    let pushed = pushes_done(&p);
    p.provision(
        "001010000000001",
        r#"{"plan":"plus","attributes":{"roaming":true}}"#,
    );
    assert_eq!(result_of(&pcef.ccr_u(sid, 1, |_| {}).await), 2001);
    let (st, _) = p.http("POST", &format!("/v1/sessions/{sid}/reauth"), None);
    assert_eq!(st, 200);
    // The provisioning re-decides the session on a task of its own.
    eventually_async(
        p.waiting_for("the push after the provisioning"),
        Duration::from_secs(10),
        || (pushes_done(&p) > pushed).then_some(()),
    )
    .await;
    all_delivered(&p).await;
    let got = rx.received();
    let mut keys: Vec<String> = got
        .iter()
        .map(|r| r.body["idempotency_key"].to_string())
        .collect();
    keys.dedup();
    assert_eq!(keys.len(), 1, "{:?}", names(&got));
    assert_eq!(got[0].body["name"], "policy.roaming");
    assert_eq!(got[0].body["payload"]["plan"], "basic");
    assert_matches_schema(&got[0].body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_pcef_no_longer_knows_ends_with_its_cause() {
    let rx = WebhookReceiver::start(SECRET).await;
    let p = Pcrf::start(&sink(&rx.url(), "", SESSIONS));
    p.provision("001010000000001", r#"{"plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sid = "pgw.test.local;gone;1";
    assert_eq!(result_of(&pcef.ccr_i(sid, "001010000000001").await), 2001);

    // The PCEF lost the session: it answers the next RAR 5002, and the
    // PCRF forgets it without a CCR-T.
    pcef.handler
        .raa_code
        .store(5002, std::sync::atomic::Ordering::Relaxed);
    p.provision("001010000000001", r#"{"plan":"unlimited"}"#);
    let (st, _) = p.http("POST", &format!("/v1/sessions/{sid}/reauth"), None);
    assert_eq!(st, 404);
    assert!(
        poll_until_async(Duration::from_secs(10), || rx.received().len() >= 2).await,
        "{:?}\n{}",
        names(&rx.received()),
        p.log()
    );
    let got = rx.received();
    assert_eq!(names(&got), ["session.started", "session.ended"]);
    assert_eq!(got[1].body["payload"]["session"], sid);
    assert_eq!(got[1].body["payload"]["cause"], "unknown-session");
    assert_matches_schema(&got[1].body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_webhook_is_trusted_through_its_ca_file_only() {
    let pki = TestPki::new("Webhook test CA");
    let other = TestPki::new("Some other CA");
    let good = WebhookReceiver::start_https(SECRET, &pki).await;
    // Serves a certificate of the same CA, but the sink trusts another.
    let rogue = WebhookReceiver::start_https(SECRET, &pki).await;
    let dir = scratch_dir("webhook-https");
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, &pki.ca_pem).expect("ca");
    let other_ca = dir.join("other-ca.pem");
    std::fs::write(&other_ca, &other.ca_pem).expect("ca");
    let sink = |name: &str, url: &str, ca: &std::path::Path| {
        format!(
            r#"
[[notifications.sinks]]
name = "{name}"
kind = "webhook"
url = "{url}"
ca_file = "{}"
secret = "{SECRET}"
events = {SESSIONS}
timeout_ms = 1000
retry_initial_ms = 50
retry_max_ms = 300
"#,
            ca.display()
        )
    };
    let p = Pcrf::start(&format!(
        "{}{}",
        sink("crm", &good.url(), &ca),
        sink("rogue", &rogue.url(), &other_ca)
    ));
    p.provision("001010000000001", r#"{"plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sid = "pgw.test.local;https;1";
    assert_eq!(result_of(&pcef.ccr_i(sid, "001010000000001").await), 2001);
    assert!(
        poll_until_async(Duration::from_secs(10), || good.received().len() == 1).await,
        "{}",
        p.log()
    );
    let got = good.received();
    assert_eq!(got[0].body["name"], "session.started");
    assert!(got[0].signed);
    // The other sink's receiver is not trusted: nothing gets through, and
    // the status says why.
    let rogue_status = || {
        status(&p)["sinks"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["name"] == "rogue").cloned())
            .unwrap_or_default()
    };
    assert!(
        poll_until_async(Duration::from_secs(10), || rogue_status()["last_error"]
            .is_string())
        .await,
        "{}",
        status(&p)
    );
    assert!(rogue.received().is_empty());
    let why = rogue_status()["last_error"].to_string();
    assert!(why.contains("certificate"), "{why}");
    assert_eq!(rogue_status()["delivered"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_notification_naming_an_accumulator_is_once_per_period() {
    const MB: u64 = 1_000_000;
    let rx = WebhookReceiver::start(SECRET).await;
    let p = Pcrf::start_with_usage(&sink(&rx.url(), "", r#"["policy.quota-*"]"#));
    std::fs::write(&p.policy, NOTIFY_POLICY).expect("policy");
    let (st, body) = p.http("POST", "/v1/policy/reload", None);
    assert_eq!(st, 200, "{body}");
    p.provision(
        "001010000000001",
        r#"{"plan":"basic","quotas":{"monthly":100000000}}"#,
    );
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sid = "pgw.test.local;push-quota;1";
    assert_eq!(result_of(&pcef.ccr_i(sid, "001010000000001").await), 2001);
    let a = pcef.ccr_u(sid, 1, |b| report(b, 45 * MB)).await;
    assert_eq!(result_of(&a), 2001);
    all_delivered(&p).await;
    assert!(rx.received().is_empty(), "{:?}", names(&rx.received()));

    // The allowance shrinks to 50 MB: 90% used, found by the push.
    p.provision(
        "001010000000001",
        r#"{"plan":"basic","quotas":{"monthly":50000000}}"#,
    );
    assert!(
        poll_until_async(Duration::from_secs(10), || !rx.received().is_empty()).await,
        "{}",
        p.log()
    );
    // The mark went to the usage row: the next CCR-U (92%) does not repeat it.
    let a = pcef.ccr_u(sid, 2, |b| report(b, MB)).await;
    assert_eq!(result_of(&a), 2001);
    all_delivered(&p).await;
    let got = rx.received();
    let mut keys: Vec<String> = got
        .iter()
        .map(|r| r.body["idempotency_key"].to_string())
        .collect();
    keys.dedup();
    assert_eq!(keys.len(), 1, "{:?}", names(&got));
    assert_eq!(got[0].body["name"], "policy.quota-80");
    assert_eq!(got[0].body["payload"]["percent"], 90);
    assert!(
        keys[0].starts_with("\"policy.quota-80:001010000000001:monthly:"),
        "{}",
        keys[0]
    );
}

/// What the redirecting receiver saw: (method, path) of every request.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_a_failed_attempt_and_never_followed() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // /hook answers 302 to /elsewhere, then 307 to /elsewhere, then 200.
    let seen: Seen = Default::default();
    let answers = std::sync::Arc::new(AtomicUsize::new(0));
    let (s1, s2) = (seen.clone(), seen.clone());
    let app = axum::Router::new()
        .route(
            "/hook",
            axum::routing::post(move |body: axum::body::Bytes| {
                let (seen, answers) = (s1.clone(), answers.clone());
                async move {
                    let name = serde_json::from_slice::<Value>(&body)
                        .map(|v| v["name"].as_str().unwrap_or("").to_owned())
                        .unwrap_or_default();
                    seen.lock()
                        .unwrap()
                        .push(("POST".into(), format!("/hook {name}")));
                    let redirect = |code| {
                        axum::http::Response::builder()
                            .status(code)
                            .header("location", "/elsewhere")
                            .body(axum::body::Body::empty())
                            .unwrap()
                    };
                    match answers.fetch_add(1, Ordering::SeqCst) {
                        0 => redirect(302),
                        1 => redirect(307),
                        _ => axum::http::Response::new(axum::body::Body::empty()),
                    }
                }
            }),
        )
        .route(
            "/elsewhere",
            axum::routing::any(move |method: axum::http::Method| {
                let seen = s2.clone();
                async move {
                    seen.lock()
                        .unwrap()
                        .push((method.to_string(), "/elsewhere".into()));
                    axum::http::StatusCode::OK
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let p = Pcrf::start(&sink(
        &format!("http://{addr}/hook"),
        "",
        r#"["subscriber.*"]"#,
    ));
    p.provision("001010000000077", r#"{"plan":"basic"}"#);
    assert!(
        poll_until_async(Duration::from_secs(10), || status(&p)["sinks"][0]
            ["delivered"]
            == 1)
        .await,
        "{}",
        status(&p)
    );
    let s = status(&p);
    assert_eq!(
        s["sinks"][0]["failed"], 2,
        "both redirects were failures: {s}"
    );
    let last_error = s["sinks"][0]["last_error"].as_str().unwrap_or("");
    assert!(
        last_error.contains("307") && last_error.contains("/elsewhere"),
        "{s}"
    );
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().all(|(_, path)| !path.starts_with("/elsewhere")),
        "the redirect's target got a request: {seen:?}"
    );
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(p.log().contains("/elsewhere"), "the Location is logged");
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_events_cannot_crowd_subscriber_events_out_of_the_backlog() {
    let rx = WebhookReceiver::start(SECRET).await;
    let proxy = Proxy::start(rx.addr).await;
    let p = Pcrf::start(&sink(
        &format!("http://{}/hook", proxy.addr),
        "max_backlog = 20",
        r#"["session.*", "peer.*"]"#,
    ));
    p.provision("001010000000088", r#"{"plan":"basic"}"#);
    proxy.cut();
    // A flapping peer: 30 connections, 60 peer events, three times the
    // backlog.
    for _ in 0..30 {
        let flapping = Pcef::connect(p.diameter, "pgw.test.local").await;
        flapping.close().await;
    }
    assert!(
        poll_until_async(Duration::from_secs(10), || status(&p)["sinks"][0]
            ["dropped"]
            .as_u64()
            .unwrap_or(0)
            > 0)
        .await,
        "{}",
        status(&p)
    );
    let s = status(&p);
    eprintln!("after the flapping: {s}");
    let peers = s["backlog"].as_u64().unwrap_or(0);
    assert!(peers <= 2, "peer events hold at most a tenth: {s}");
    assert!(p.log().contains("peer events"), "the drop names its share");

    // The subscriber's events still find room.
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    for i in 0..5 {
        let sid = format!("pgw.test.local;crowd;{i}");
        assert_eq!(result_of(&pcef.ccr_i(&sid, "001010000000088").await), 2001);
    }
    let s = status(&p);
    assert_eq!(s["backlog"].as_u64().unwrap_or(0), peers + 5, "{s}");
    proxy.restore();
    assert!(
        poll_until_async(Duration::from_secs(10), || names(&rx.received())
            .iter()
            .filter(|n| *n == "session.started")
            .count()
            == 5)
        .await
    );
}
