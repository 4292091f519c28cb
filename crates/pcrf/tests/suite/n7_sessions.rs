//! N7 on the node's own sessions, end to end: a `pcrf serve` with `[sbi]`,
//! the example policy and usage monitoring; the SMF's requests sent over
//! h2c with prior knowledge, and its notification side played by an
//! independent HTTP/2 server (tests/n7/smf_callback.py, Python's
//! hypercorn). An SM policy is decided by the same Lua policy as a Gx
//! session, counts usage into the same accumulators, survives `kill -9`,
//! shows in the REST API, is pushed to when the subscriber's profile
//! changes, and is forgotten when the SMF answers a push 404. Spending
//! limits from a CHF over N28 (tests/n7/chf_emulator.py) are shared with
//! the subscriber's Gx sessions.

use crate::support;

use serde_json::Value;
use std::time::Duration;
use support::{
    create_body, free_port, poll_until, rule_changes, Callback, Pcef, Pcrf, PythonPeer, Smf,
};

const IMSI: &str = "001010000000001";

fn start() -> (Pcrf, u16) {
    start_with("")
}

/// A node with `[sbi]` (and `sbi_extra` after it) and the usage file.
fn start_with(sbi_extra: &str) -> (Pcrf, u16) {
    let sbi = free_port();
    let p = Pcrf::start_with_usage(&format!("[sbi]\nlisten = \"127.0.0.1:{sbi}\"\n{sbi_extra}"));
    (p, sbi)
}

#[test]
fn an_sm_policy_is_a_durable_session_decided_by_the_policy() {
    let callback = Callback::start();
    // The callback server plays the BSF too; the repeat window spans the
    // restart below.
    let (mut p, sbi) = start_with(&format!(
        "repeat_window_ms = 120000\n[sbi.bsf]\nuri = \"http://127.0.0.1:{}/bsf\"\n",
        callback.port
    ));
    p.provision(IMSI, r#"{"plan":"basic","services":["vip"]}"#);
    let smf = Smf::new(sbi);

    let (st, location, decision) = smf.call(
        true,
        "",
        Some(&create_body(
            &callback,
            "/nsmf-callback/v1/sm-policy-notify/1",
        )),
    );
    assert_eq!(st, 201, "{decision}");
    let id = location
        .rsplit('/')
        .next()
        .expect("Location ends with the id")
        .to_owned();
    assert_eq!(id.len(), 32, "{location}");
    // The example policy's basic plan: 5 / 20 Mbit/s, QCI 9 as 5QI 9,
    // the vip rule with its QoS and flows, "total" and "vip" monitored.
    let rule = &decision["sessRules"]["session"];
    assert_eq!(rule["authSessAmbr"]["uplink"], "5000000 bps", "{decision}");
    assert_eq!(rule["authDefQos"]["5qi"], 9, "{decision}");
    let vip = &decision["pccRules"]["vip-video"];
    let qos = vip["refQosData"][0].as_str().expect("refQosData");
    assert!(decision["qosDecs"][qos].is_object(), "{decision}");
    assert!(
        vip["flowInfos"][0]["flowDirection"].is_string(),
        "{decision}"
    );
    assert!(
        decision["umDecs"]["total"]["volumeThreshold"].is_u64(),
        "{decision}"
    );
    let triggers = decision["policyCtrlReqTriggers"].to_string();
    for t in ["SE_AMBR_CH", "DEF_QOS_CH", "US_RE"] {
        assert!(triggers.contains(t), "{t}: {decision}");
    }

    // Its PCF binding is registered at the BSF, and its id kept.
    let bindings = "/bsf/nbsf-management/v1/pcfBindings";
    let registered = poll_until(Duration::from_secs(10), || {
        callback.requests().iter().any(|r| {
            r["path"] == bindings
                && r["body"]["supi"] == "imsi-001010000000001"
                && r["body"]["ipv4Addr"] == "10.45.0.2"
                && r["body"]["pcfIpEndPoints"][0]["port"] == sbi
        })
    });
    assert!(registered, "{:?}", callback.requests());
    let stored = poll_until(Duration::from_secs(10), || {
        p.http("GET", &format!("/v1/sessions/{id}"), None).1["bsf_binding"].is_string()
    });
    assert!(stored, "{}", p.log());

    // Without a CHF configured, the N28 callback is not served.
    let (st, _, problem) = smf.http(
        reqwest::Method::POST,
        "/npcf-callback/v1/n28/pcrf.test.local%3Bsy%3B1%3B1%3B001010000000001/notify",
        Some(&serde_json::json!({"statusInfos": {}})),
        "application/json",
    );
    assert_eq!(st, 404, "{problem}");
    assert_eq!(
        problem["cause"], "RESOURCE_URI_STRUCTURE_NOT_FOUND",
        "{problem}"
    );

    // The REST API lists it beside Gx sessions.
    let (st, s) = p.http("GET", &format!("/v1/sessions/{id}"), None);
    assert_eq!(st, 200, "{s}");
    assert_eq!(s["apn"], "internet", "{s}");
    assert_eq!(s["ue_ipv4"], "10.45.0.2", "{s}");

    // Usage reported in an Update counts into the subscriber's
    // accumulators, and the threshold is granted again.
    let update = serde_json::json!({
        "repPolicyCtrlReqTriggers": ["US_RE"],
        "accuUsageReports": [{"refUmIds": "total", "volUsage": 3_000_000}],
        "ratType": "EUTRA",
    });
    let (st, _, changed) = smf.call(true, &format!("/{id}/update"), Some(&update));
    assert_eq!(st, 200, "{changed}");
    assert!(
        changed["umDecs"]["total"].is_object(),
        "a reported key is granted again: {changed}"
    );
    let (st, u) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(st, 200, "{u}");
    assert_eq!(u["accumulators"]["monthly"]["used"], 3_000_000, "{u}");

    // The SMF sending the same Update again (its answer lost) gets the
    // same answer, and its usage is not counted twice.
    let (st, _, again) = smf.call(true, &format!("/{id}/update"), Some(&update));
    assert_eq!((st, &again), (200, &changed));
    let (_, u) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(u["accumulators"]["monthly"]["used"], 3_000_000, "{u}");

    // kill -9: the session, its context as updated, and the usage stay.
    p.kill9();
    p.restart();
    let smf = Smf::new(sbi);
    // A repeat after the crash is still recognised.
    let (st, _, again) = smf.call(true, &format!("/{id}/update"), Some(&update));
    assert_eq!((st, &again), (200, &changed));
    let (_, u) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(u["accumulators"]["monthly"]["used"], 3_000_000, "{u}");
    // A new report, though, counts.
    let next = serde_json::json!({
        "repPolicyCtrlReqTriggers": ["US_RE"],
        "accuUsageReports": [{"refUmIds": "total", "volUsage": 500_000}],
    });
    let (st, _, body) = smf.call(true, &format!("/{id}/update"), Some(&next));
    assert_eq!(st, 200, "{body}");
    let (st, _, got) = smf.call(false, &format!("/{id}"), None);
    assert_eq!(st, 200, "{got}");
    assert_eq!(got["context"]["supi"], "imsi-001010000000001", "{got}");
    assert_eq!(got["context"]["ratType"], "EUTRA", "{got}");
    assert_eq!(
        got["policy"]["sessRules"]["session"]["authSessAmbr"]["uplink"], "5000000 bps",
        "{got}"
    );
    let (_, u) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(u["accumulators"]["monthly"]["used"], 3_500_000, "{u}");

    // Delete with the final usage; then it is gone.
    let del = serde_json::json!({
        "accuUsageReports": [{"refUmIds": "total", "volUsage": 1_000_000}],
    });
    let (st, _, body) = smf.call(true, &format!("/{id}/delete"), Some(&del));
    assert_eq!(st, 204, "{body}");
    // The binding (its id read back from the store after the restart) goes.
    let removed = poll_until(Duration::from_secs(10), || {
        callback.requests().iter().any(|r| {
            r["method"] == "DELETE"
                && r["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with(&format!("{bindings}/b")))
        })
    });
    assert!(removed, "{:?}", callback.requests());
    let (_, u) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(u["accumulators"]["monthly"]["used"], 4_500_000, "{u}");
    let (st, _, gone) = smf.call(false, &format!("/{id}"), None);
    assert_eq!(st, 404, "{gone}");
    assert_eq!(gone["cause"], "CONTEXT_NOT_FOUND", "{gone}");
    let (st, _, gone) = smf.call(true, &format!("/{id}/update"), Some(&update));
    assert_eq!(st, 404, "{gone}");
}

#[test]
fn a_profile_change_is_pushed_to_the_smf_and_a_404_forgets_the_session() {
    let callback = Callback::start();
    // The callback server plays the BSF too.
    let (p, sbi) = start_with(&format!(
        "[sbi.bsf]\nuri = \"http://127.0.0.1:{}/bsf\"\n",
        callback.port
    ));
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let smf = Smf::new(sbi);
    let (st, location, _) = smf.call(
        true,
        "",
        Some(&create_body(
            &callback,
            "/nsmf-callback/v1/sm-policy-notify/7",
        )),
    );
    assert_eq!(st, 201);
    let id = location.rsplit('/').next().expect("id").to_owned();

    // A new plan: the node decides again and tells the SMF only the change.
    p.provision(IMSI, r#"{"plan":"plus"}"#);
    let pushed = poll_until(Duration::from_secs(10), || {
        callback
            .requests()
            .iter()
            .any(|r| r["path"] == "/nsmf-callback/v1/sm-policy-notify/7/update")
    });
    assert!(
        pushed,
        "no notification: {:?}\n{}",
        callback.requests(),
        p.log()
    );
    let note = callback
        .requests()
        .into_iter()
        .find(|r| r["path"] == "/nsmf-callback/v1/sm-policy-notify/7/update")
        .expect("notification");
    assert_eq!(note["http_version"], "2", "{note}");
    assert_eq!(note["content_type"], "application/json", "{note}");
    let body = &note["body"];
    assert!(
        body["resourceUri"]
            .as_str()
            .is_some_and(|u| u.ends_with(&format!("/npcf-smpolicycontrol/v1/sm-policies/{id}"))),
        "{body}"
    );
    let decision = &body["smPolicyDecision"];
    assert_eq!(
        decision["sessRules"]["session"]["authSessAmbr"]["uplink"], "20000000 bps",
        "{decision}"
    );
    assert!(
        decision.get("pccRules").is_none(),
        "only what changed is pushed: {decision}"
    );
    let (_, _, got) = smf.call(false, &format!("/{id}"), None);
    assert_eq!(
        got["policy"]["sessRules"]["session"]["authSessAmbr"]["uplink"], "20000000 bps",
        "{got}"
    );

    // An SMF that answers 503 once is tried again, and the second try
    // goes through.
    // (Each its own PDU session id: a Create for one already served
    // would replace that association.)
    let mut flaky = create_body(&callback, "/flaky/1");
    flaky["pduSessionId"] = Value::from(2);
    let (st, location, _) = smf.call(true, "", Some(&flaky));
    assert_eq!(st, 201);
    let flaky_id = location.rsplit('/').next().expect("id").to_owned();
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let tries = || {
        callback
            .requests()
            .iter()
            .filter(|r| r["path"] == "/flaky/1/update")
            .count()
    };
    assert!(
        poll_until(Duration::from_secs(10), || tries() == 2),
        "{}",
        p.log()
    );
    let (_, _, got) = smf.call(false, &format!("/{flaky_id}"), None);
    assert_eq!(
        got["policy"]["sessRules"]["session"]["authSessAmbr"]["uplink"], "5000000 bps",
        "the retried push is in force: {got}"
    );

    // An SMF that no longer has the session answers 404: forgotten here.
    let mut gone = create_body(&callback, "/gone/1");
    gone["pduSessionId"] = Value::from(3);
    let (st, location, _) = smf.call(true, "", Some(&gone));
    assert_eq!(st, 201);
    let gone_id = location.rsplit('/').next().expect("id").to_owned();
    p.provision(IMSI, r#"{"plan":"unlimited"}"#);
    let forgotten = poll_until(Duration::from_secs(10), || {
        smf.call(false, &format!("/{gone_id}"), None).0 == 404
    });
    assert!(forgotten, "{}", p.log());
    assert_eq!(smf.call(false, &format!("/{id}"), None).0, 200);
    // Its PCF binding goes from the BSF; the two open sessions' stay.
    let unbound = || {
        callback
            .requests()
            .iter()
            .filter(|r| r["method"] == "DELETE")
            .count()
    };
    assert!(
        poll_until(Duration::from_secs(10), || unbound() == 1),
        "{:?}\n{}",
        callback.requests(),
        p.log()
    );
}

/// Two cluster nodes on a new PostgreSQL database named after `tag`,
/// each with `[sbi]` on a port of its own and `extra` after it: the
/// database (dropped with it), the nodes, and their SBI ports.
fn sbi_cluster(tag: &str, extra: &str) -> (support::TestDatabase, Vec<Pcrf>, [u16; 2]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let db = rt.block_on(support::test_database(tag));
    let (usage, _) = support::usage_section(support::USAGE_FILE);
    let ports = [free_port(), free_port()];
    let nodes = ports
        .iter()
        .zip(support::NODES)
        .map(|(port, name)| {
            Pcrf::start_cluster_node_with(
                name,
                support::REALM,
                support::AGENT,
                Some(&db.url),
                &format!("{usage}[sbi]\nlisten = \"127.0.0.1:{port}\"\n{extra}"),
            )
        })
        .collect();
    (db, nodes, ports)
}

/// Two nodes on one PostgreSQL database, each with its own SBI listener:
/// an SM policy created through one is updated, read and deleted through
/// the other (which takes the session over), the usage lands in the one
/// allowance, and the first node, asked again, reads the session as the
/// second left it.
#[test]
fn any_cluster_node_serves_any_sm_policy() {
    let callback = Callback::start();
    // The callback server plays the BSF.
    let (_db, nodes, ports) = sbi_cluster(
        "n7_cluster",
        &format!(
            "[sbi.bsf]\nuri = \"http://127.0.0.1:{}/bsf\"\n",
            callback.port
        ),
    );
    nodes[0].provision(IMSI, r#"{"plan":"basic"}"#);
    let (a, b) = (Smf::new(ports[0]), Smf::new(ports[1]));
    let (st, location, _) = a.call(
        true,
        "",
        Some(&create_body(
            &callback,
            "/nsmf-callback/v1/sm-policy-notify/c",
        )),
    );
    assert_eq!(st, 201);
    let id = location.rsplit('/').next().expect("id").to_owned();

    let update = serde_json::json!({
        "accuUsageReports": [{"refUmIds": "total", "volUsage": 2_000_000}],
        "ratType": "EUTRA",
    });
    let (st, _, body) = b.call(true, &format!("/{id}/update"), Some(&update));
    assert_eq!(st, 200, "{body}\n{}", nodes[1].log());
    let (st, _, got) = a.call(false, &format!("/{id}"), None);
    assert_eq!(st, 200, "{got}");
    assert_eq!(
        got["context"]["ratType"], "EUTRA",
        "node 0 reads node 1's write: {got}"
    );
    let (_, u) = nodes[1].http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(u["accumulators"]["monthly"]["used"], 2_000_000, "{u}");
    // Node 1 took the session over: the BSF now sends the UE's AFs there.
    let bindings = |port: u16| {
        callback
            .requests()
            .iter()
            .filter(|r| r["method"] == "POST" && r["body"]["pcfIpEndPoints"][0]["port"] == port)
            .count()
    };
    assert!(
        poll_until(Duration::from_secs(10), || bindings(ports[0]) >= 1
            && bindings(ports[1]) >= 1),
        "{:?}",
        callback.requests()
    );

    // The SMF sends the Update again to node 0 (it lost node 1's answer):
    // node 0's copy is stale, its write conflicts, and on the fresh record
    // it sees the repeat: the same answer, the usage not counted twice.
    let (st, _, again) = a.call(true, &format!("/{id}/update"), Some(&update));
    assert_eq!((st, &again), (200, &body), "{}", nodes[0].log());
    let (_, u) = nodes[0].http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(u["accumulators"]["monthly"]["used"], 2_000_000, "{u}");
    // A new report at node 0 counts.
    let next = serde_json::json!({
        "accuUsageReports": [{"refUmIds": "total", "volUsage": 500_000}],
    });
    let (st, _, _) = a.call(true, &format!("/{id}/update"), Some(&next));
    assert_eq!(st, 200);
    let (_, u) = nodes[1].http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(u["accumulators"]["monthly"]["used"], 2_500_000, "{u}");
    let (st, _, _) = b.call(true, &format!("/{id}/delete"), None);
    assert_eq!(st, 204);
    assert_eq!(a.call(false, &format!("/{id}"), None).0, 404);
    // However often it moved, no binding is left behind at the BSF: each
    // one registered (the callback names them b1, b2, ... in order) is
    // removed, some more than once (a 404 then).
    let all_removed = || {
        let requests = callback.requests();
        let registered = requests
            .iter()
            .filter(|r| r["method"] == "POST" && r["path"] == "/bsf/nbsf-management/v1/pcfBindings")
            .count();
        (1..=registered).all(|n| {
            requests.iter().any(|r| {
                r["method"] == "DELETE"
                    && r["path"] == format!("/bsf/nbsf-management/v1/pcfBindings/b{n}").as_str()
            })
        })
    };
    assert!(
        poll_until(Duration::from_secs(10), all_removed),
        "{:?}",
        callback.requests()
    );
}

/// An N5 media component `n` of `kind` (AUDIO, VIDEO) between the UE of
/// the open5gs Create (10.45.0.2) and an AF's media at `port`.
fn media(n: u32, kind: &str, port: u32) -> Value {
    serde_json::json!({"medCompN": n, "medType": kind, "marBwUl": "64 Kbps",
        "marBwDl": "48 Kbps", "fStatus": "ENABLED",
        "medSubComps": {"1": {"fNum": 1, "fDescs": [
            format!("permit out 17 from 192.0.2.9 {port} to 10.45.0.2 {port}"),
            format!("permit in 17 from 10.45.0.2 {port} to 192.0.2.9 {port}")]}}})
}

/// The AF's side of a VoNR call over N5 (Npcf_PolicyAuthorization): the
/// application session binds to the PDU session by UE address, its audio
/// becomes a GBR 5QI 1 rule at the SMF, a video component added by PATCH
/// a 5QI 2 rule and removed again (`null`); when the SMF deletes the PDU
/// session the AF is told (`/terminate`) and its delete is answered 204.
#[test]
fn an_af_over_n5_gets_its_media_to_the_smf() {
    use reqwest::Method;
    let callback = Callback::start();
    let (mut p, sbi) = start();
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let smf = Smf::new(sbi);
    let notify = "/nsmf-callback/v1/sm-policy-notify/n5";
    let (st, location, _) = smf.call(true, "", Some(&create_body(&callback, notify)));
    assert_eq!(st, 201);
    let pdu = location.rsplit('/').next().expect("id").to_owned();

    let af = format!("http://127.0.0.1:{}/af/1", callback.port);
    let body = serde_json::json!({"ascReqData": {
        "afAppId": "IMS Services", "notifUri": af, "ueIpv4": "10.45.0.2",
        "dnn": "internet", "suppFeat": "0",
        "evSubsc": {"events": [{"event": "FAILED_RESOURCES_ALLOCATION"}]},
        "medComponents": {"1": media(1, "AUDIO", 5000)}}});
    let root = "/npcf-policyauthorization/v1/app-sessions";
    let (st, location, context) = smf.http(Method::POST, root, Some(&body), "application/json");
    assert_eq!(st, 201, "{context}\n{}", p.log());
    assert!(
        location.contains("/npcf-policyauthorization/v1/app-sessions/"),
        "{location}"
    );
    let app = location.rsplit('/').next().expect("id").to_owned();
    assert_eq!(
        context["ascReqData"]["medComponents"]["1"]["medType"], "AUDIO",
        "{context}"
    );

    let update = format!("{notify}/update");
    let pushed = |n: usize| {
        let mut got = None;
        poll_until(Duration::from_secs(10), || {
            got = callback
                .requests()
                .into_iter()
                .filter(|r| r["path"] == update.as_str())
                .nth(n);
            got.is_some()
        });
        got.unwrap_or_else(|| panic!("push {n} not received: {:?}", callback.requests()))
    };
    let decision = pushed(0)["body"]["smPolicyDecision"].clone();
    let rules = decision["pccRules"].as_object().expect("pccRules").clone();
    assert_eq!(rules.len(), 1, "{decision}");
    let (voice_rule, rule) = rules.into_iter().next().expect("rule");
    let qos = rule["refQosData"][0].as_str().expect("qos").to_owned();
    assert_eq!(decision["qosDecs"][&qos]["5qi"], 1, "{decision}");
    assert_eq!(
        decision["qosDecs"][&qos]["gbrDl"], "48000 bps",
        "{decision}"
    );

    // kill -9: the application session stays, bound as it was.
    p.kill9();
    p.restart();
    let smf = Smf::new(sbi);
    let at = format!("{root}/{app}");
    let (st, _, got) = smf.http(Method::GET, &at, None, "");
    assert_eq!(st, 200, "{got}\n{}", p.log());
    assert_eq!(
        got["ascReqData"]["medComponents"]["1"]["medType"], "AUDIO",
        "{got}"
    );

    // Video joins, then leaves.
    let patch =
        serde_json::json!({"ascReqData": {"medComponents": {"2": media(2, "VIDEO", 6000)}}});
    let (st, _, context) = smf.http(
        Method::PATCH,
        &at,
        Some(&patch),
        "application/merge-patch+json",
    );
    assert_eq!(st, 200, "{context}");
    assert_eq!(
        context["ascReqData"]["medComponents"]["2"]["medType"],
        "VIDEO"
    );
    let decision = pushed(1)["body"]["smPolicyDecision"].clone();
    let video_rule = decision["pccRules"]
        .as_object()
        .and_then(|r| r.keys().next().cloned())
        .expect("the video rule");
    assert_ne!(video_rule, voice_rule);
    let remove = serde_json::json!({"ascReqData": {"medComponents": {"2": null}}});
    let (st, _, _) = smf.http(
        Method::PATCH,
        &at,
        Some(&remove),
        "application/merge-patch+json",
    );
    assert_eq!(st, 200);
    let decision = pushed(2)["body"]["smPolicyDecision"].clone();
    assert!(decision["pccRules"][&video_rule].is_null(), "{decision}");
    assert!(
        decision["pccRules"].get(&video_rule).is_some(),
        "{decision}"
    );
    let (st, _, got) = smf.http(Method::GET, &at, None, "");
    assert_eq!(st, 200, "{got}");

    // No PDU session holds an address: 500 PDU_SESSION_NOT_AVAILABLE.
    let mut nowhere = body.clone();
    nowhere["ascReqData"]["ueIpv4"] = Value::from("10.99.0.1");
    let (st, _, problem) = smf.http(Method::POST, root, Some(&nowhere), "application/json");
    assert_eq!(
        (st, problem["cause"].as_str()),
        (500, Some("PDU_SESSION_NOT_AVAILABLE"))
    );

    // The PDU session ends: the AF is told, and its delete is answered.
    let (st, _, _) = smf.call(true, &format!("/{pdu}/delete"), None);
    assert_eq!(st, 204);
    let told = poll_until(Duration::from_secs(10), || {
        callback.requests().iter().any(|r| {
            r["path"] == "/af/1/terminate" && r["body"]["termCause"] == "PDU_SESSION_TERMINATION"
        })
    });
    assert!(told, "{:?}", callback.requests());
    let (st, _, _) = smf.http(Method::POST, &format!("{at}/delete"), None, "");
    assert_eq!(st, 204);
    let (st, _, gone) = smf.http(Method::GET, &at, None, "");
    assert_eq!(st, 404, "{gone}");
}

/// An AF's application session on a two-node PostgreSQL cluster: created
/// at one node, it survives that node's `kill -9` and the other node
/// serves it (GET, a PATCH whose rule reaches the SMF, delete).
#[test]
fn an_af_session_survives_its_node_and_any_node_serves_it() {
    use reqwest::Method;
    let callback = Callback::start();
    let (_db, mut nodes, ports) = sbi_cluster("n5_cluster", "");
    nodes[0].provision(IMSI, r#"{"plan":"basic"}"#);
    let (a, b) = (Smf::new(ports[0]), Smf::new(ports[1]));
    let notify = "/nsmf-callback/v1/sm-policy-notify/n5c";
    let (st, _, _) = a.call(true, "", Some(&create_body(&callback, notify)));
    assert_eq!(st, 201);
    let body = serde_json::json!({"ascReqData": {
        "afAppId": "IMS Services",
        "notifUri": format!("http://127.0.0.1:{}/af/c", callback.port),
        "ueIpv4": "10.45.0.2", "dnn": "internet", "suppFeat": "0",
        "medComponents": {"1": media(1, "AUDIO", 5000)}}});
    let root = "/npcf-policyauthorization/v1/app-sessions";
    let (st, location, context) = a.http(Method::POST, root, Some(&body), "application/json");
    assert_eq!(st, 201, "{context}");
    let at = format!("{root}/{}", location.rsplit('/').next().expect("id"));
    let pushes = || {
        callback
            .requests()
            .into_iter()
            .filter(|r| r["path"] == format!("{notify}/update").as_str())
            .collect::<Vec<_>>()
    };
    assert!(poll_until(Duration::from_secs(10), || pushes().len() == 1));

    // Node 0 dies; node 1 serves the application session.
    nodes[0].kill9();
    let (st, _, got) = b.http(Method::GET, &at, None, "");
    assert_eq!(st, 200, "{got}\n{}", nodes[1].log());
    assert_eq!(
        got["ascReqData"]["medComponents"]["1"]["medType"], "AUDIO",
        "{got}"
    );
    let patch =
        serde_json::json!({"ascReqData": {"medComponents": {"2": media(2, "VIDEO", 6000)}}});
    let (st, _, got) = b.http(
        Method::PATCH,
        &at,
        Some(&patch),
        "application/merge-patch+json",
    );
    assert_eq!(st, 200, "{got}\n{}", nodes[1].log());
    assert!(
        poll_until(Duration::from_secs(10), || pushes().len() == 2),
        "the video rule reaches the SMF from node 1: {:?}",
        callback.requests()
    );
    let decision = &pushes()[1]["body"]["smPolicyDecision"];
    assert!(
        decision["qosDecs"].to_string().contains("\"5qi\":2"),
        "{decision}"
    );
    let (st, _, _) = b.http(Method::POST, &format!("{at}/delete"), None, "");
    assert_eq!(st, 204);
    assert!(
        poll_until(Duration::from_secs(10), || pushes().len() == 3),
        "the rules' removal reaches the SMF: {:?}",
        callback.requests()
    );
    // Node 0 back: the session is gone there too.
    nodes[0].restart();
    let a = Smf::new(ports[0]);
    let (st, _, gone) = a.http(Method::GET, &at, None, "");
    assert_eq!(st, 404, "{gone}");
}

const COUNTER: &str = "monthly-data";

/// A node whose `[sy]` names a CHF: chf_emulator.py knowing `table`
/// ({counter: status}).
fn start_with_chf(table: &str) -> (Pcrf, u16, PythonPeer) {
    let chf = PythonPeer::script_with("chf_emulator.py", free_port(), &[table]);
    let (p, sbi) = start_with(&format!(
        "\n[sy]\ntimeout_ms = 5000\nretry_secs = 1\nchf = \"http://127.0.0.1:{}\"\n",
        chf.port
    ));
    (p, sbi, chf)
}

/// The requests the CHF got with `method`.
fn chf_requests(chf: &PythonPeer, method: &str) -> Vec<Value> {
    chf.requests()
        .into_iter()
        .filter(|r| r["method"] == method)
        .collect()
}

/// As [`chf_requests`], once there are at least `n` (or after 10 s): the
/// CHF prints each request as it takes it, and the line reaches the test
/// a moment later, possibly after the node's answer that it caused.
fn chf_requests_n(chf: &PythonPeer, method: &str, n: usize) -> Vec<Value> {
    poll_until(Duration::from_secs(10), || {
        chf_requests(chf, method).len() >= n
    });
    chf_requests(chf, method)
}

/// Replaces `from` by `to` in the node's policy script and reloads it.
fn reload_edited(p: &Pcrf, from: &str, to: &str) {
    let script = std::fs::read_to_string(&p.policy).expect("policy");
    let edited = script.replace(from, to);
    assert_ne!(edited, script, "the test's edit must hit the script");
    std::fs::write(&p.policy, edited).expect("write");
    let (st, out) = p.http("POST", "/v1/policy/reload", None);
    assert_eq!(st, 200, "{out}");
}

/// The pushes (`/update`) the SMF's callback got at `notify`.
fn pushes(callback: &Callback, notify: &str) -> Vec<Value> {
    let path = format!("{notify}/update");
    callback
        .requests()
        .into_iter()
        .filter(|r| r["path"] == path.as_str())
        .collect()
}

fn metric(p: &Pcrf, prefix: &str) -> f64 {
    p.metrics()
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// A create for subscriber `imsi`, its pushes to `notify`.
fn create_for(callback: &Callback, notify: &str, imsi: &str) -> Value {
    let mut body = create_body(callback, notify);
    body["supi"] = Value::from(format!("imsi-{imsi}"));
    body
}

#[test]
fn spending_limits_come_from_a_chf_over_n28_shared_with_gx() {
    let callback = Callback::start();
    let (mut p, sbi, chf) = start_with_chf(r#"{"monthly-data": "valid"}"#);
    p.provision(IMSI, r#"{"plan":"basic","msisdn":"491700000001"}"#);
    let smf = Smf::new(sbi);

    // N7 Create: the policy asks for the counter; one subscription at the
    // CHF, and the decision uses its status (valid: not throttled).
    let notify = "/nsmf-callback/v1/sm-policy-notify/28";
    let (st, location, decision) = smf.call(true, "", Some(&create_for(&callback, notify, IMSI)));
    assert_eq!(st, 201, "{decision}\n{}", p.log());
    let id = location.rsplit('/').next().expect("id").to_owned();
    assert!(decision["pccRules"]["internet"].is_object(), "{decision}");
    assert!(
        decision["pccRules"].get("throttled").is_none(),
        "{decision}"
    );
    let posts = chf_requests_n(&chf, "POST", 1);
    assert_eq!(posts.len(), 1, "{posts:?}\n{}", p.log());
    let ctx = &posts[0]["body"];
    assert_eq!(
        posts[0]["path"],
        "/nchf-spendinglimitcontrol/v1/subscriptions"
    );
    assert_eq!(posts[0]["http_version"], "2");
    assert_eq!(ctx["supi"], format!("imsi-{IMSI}"), "{ctx}");
    assert_eq!(ctx["gpsi"], "msisdn-491700000001", "{ctx}");
    assert_eq!(
        ctx["policyCounterIds"],
        serde_json::json!([COUNTER]),
        "{ctx}"
    );
    let notif_uri = ctx["notifUri"].as_str().expect("notifUri").to_owned();
    let sbi_root = format!("http://127.0.0.1:{sbi}");
    let notif_path = notif_uri
        .strip_prefix(&sbi_root)
        .expect("the notifUri is on the node's SBI listener")
        .to_owned();
    assert!(
        notif_path.starts_with("/npcf-callback/v1/n28/"),
        "{notif_uri}"
    );

    // kill -9: the subscription (its id, its statuses) is in the record.
    p.kill9();
    p.restart();
    let smf = Smf::new(sbi);

    // A Gx session of the same subscriber shares it: nothing new asked.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let pcef = rt.block_on(Pcef::connect(p.diameter, "pgw.test.local"));
    let cca = rt.block_on(pcef.ccr_i("pgw;n28;1", IMSI));
    assert_eq!(support::result_of(&cca), 2001, "{}", p.log());
    assert!(
        rule_changes(&cca).0.contains(&"internet".to_owned()),
        "valid: not throttled"
    );
    assert_eq!(chf.requests().len(), 1, "{:?}", chf.requests());

    // The CHF notifies a change: both sessions are decided again, the SMF
    // gets a push and the PCEF a RAR, both throttled.
    let status = serde_json::json!({
        "supi": format!("imsi-{IMSI}"),
        "statusInfos": {COUNTER: {"policyCounterId": COUNTER, "currentStatus": "exhausted"}},
    });
    let (st, _, body) = smf.http(
        reqwest::Method::POST,
        &format!("{notif_path}/notify"),
        Some(&status),
        "application/json",
    );
    assert_eq!(st, 204, "{body}\n{}", p.log());
    let pushed = poll_until(Duration::from_secs(10), || {
        pushes(&callback, notify)
            .iter()
            .any(|r| r["body"]["smPolicyDecision"]["pccRules"]["throttled"].is_object())
    });
    assert!(pushed, "{:?}\n{}", callback.requests(), p.log());
    let rars = rt.block_on(pcef.wait_rars(1));
    assert!(
        rule_changes(&rars[0]).0.contains(&"throttled".to_owned()),
        "the Gx session is throttled too"
    );

    // A notification for a subscription the node does not hold: 404.
    let (st, _, problem) = smf.http(
        reqwest::Method::POST,
        "/npcf-callback/v1/n28/nobody%3Bsy%3B1%3B1%3Bx/notify",
        Some(&status),
        "application/json",
    );
    assert_eq!(st, 404, "{problem}");
    assert_eq!(problem["cause"], "CONTEXT_NOT_FOUND", "{problem}");
    // A body that is not a SpendingLimitStatus: 400.
    let (st, _, problem) = smf.http(
        reqwest::Method::POST,
        &format!("{notif_path}/notify"),
        Some(&serde_json::json!({"statusInfos": 7})),
        "application/json",
    );
    assert_eq!(st, 400, "{problem}");

    // The subscriber's N7 session ends: the Gx one still uses the
    // subscription. Its CCR-T is the last: DELETE at the CHF.
    let (st, _, _) = smf.call(true, &format!("/{id}/delete"), None);
    assert_eq!(st, 204);
    let kept = poll_until(Duration::from_secs(10), || {
        metric(&p, "pcrf_sy_sessions_kept_total ") == 1.0
    });
    assert!(kept, "the subscription is kept: {}", p.metrics());
    assert!(
        chf_requests(&chf, "DELETE").is_empty(),
        "{:?}",
        chf.requests()
    );
    let cca = rt.block_on(pcef.ccr_t("pgw;n28;1", 1));
    assert_eq!(support::result_of(&cca), 2001);
    let deleted = poll_until(Duration::from_secs(10), || {
        chf_requests(&chf, "DELETE").len() == 1
    });
    assert!(deleted, "{:?}\n{}", chf.requests(), p.log());
    assert_eq!(
        chf_requests(&chf, "DELETE")[0]["path"],
        "/nchf-spendinglimitcontrol/v1/subscriptions/sub-1"
    );
    assert!(
        metric(
            &p,
            "pcrf_sbi_requests_total{operation=\"spending_limit_notify\",status=\"204\"}"
        ) >= 1.0,
        "{}",
        p.metrics()
    );

    // Another subscriber: the CHF ends its subscription (terminate): the
    // counters are unknown (not exhausted: not throttled), and the
    // subscription is forgotten (a notify for it is 404; the DELETE at the
    // end is for the one made anew after retry_secs).
    const IMSI2: &str = "001010000000002";
    p.provision(IMSI2, r#"{"plan":"basic"}"#);
    let notify2 = "/nsmf-callback/v1/sm-policy-notify/29";
    let (st, location, _) = smf.call(true, "", Some(&create_for(&callback, notify2, IMSI2)));
    assert_eq!(st, 201);
    let id2 = location.rsplit('/').next().expect("id").to_owned();
    let posts = chf_requests_n(&chf, "POST", 2);
    assert_eq!(posts.len(), 2, "{posts:?}");
    let notif_path2 = posts[1]["body"]["notifUri"]
        .as_str()
        .and_then(|u| u.strip_prefix(&sbi_root))
        .expect("notifUri")
        .to_owned();
    assert_ne!(notif_path2, notif_path, "one subscription per subscriber");
    let (st, _, _) = smf.http(
        reqwest::Method::POST,
        &format!("{notif_path2}/notify"),
        Some(&status),
        "application/json",
    );
    assert_eq!(st, 204);
    let throttled = poll_until(Duration::from_secs(10), || {
        pushes(&callback, notify2)
            .iter()
            .any(|r| r["body"]["smPolicyDecision"]["pccRules"]["throttled"].is_object())
    });
    assert!(throttled, "{:?}", callback.requests());
    let (st, _, body) = smf.http(
        reqwest::Method::POST,
        &format!("{notif_path2}/terminate"),
        Some(&serde_json::json!({"supi": format!("imsi-{IMSI2}"), "termCause": "FINAL_REPORT"})),
        "application/json",
    );
    assert_eq!(st, 204, "{body}");
    let released = poll_until(Duration::from_secs(10), || {
        pushes(&callback, notify2)
            .iter()
            .any(|r| r["body"]["smPolicyDecision"]["pccRules"]["internet"].is_object())
    });
    assert!(
        released,
        "unknown is not exhausted: {:?}\n{}",
        callback.requests(),
        p.log()
    );
    let (st, _, _) = smf.http(
        reqwest::Method::POST,
        &format!("{notif_path2}/notify"),
        Some(&status),
        "application/json",
    );
    assert_eq!(st, 404, "a terminated subscription is forgotten");
    // After retry_secs (1 s here) the next request subscribes anew.
    std::thread::sleep(Duration::from_millis(1100));
    let update = serde_json::json!({"repPolicyCtrlReqTriggers": ["RAT_TY_CH"], "ratType": "NR"});
    let (st, _, changed) = smf.call(true, &format!("/{id2}/update"), Some(&update));
    assert_eq!(st, 200, "{changed}");
    let posts = chf_requests_n(&chf, "POST", 3);
    assert_eq!(posts.len(), 3, "{posts:?}\n{}", p.log());
    assert_eq!(
        posts[2]["body"]["notifUri"], posts[1]["body"]["notifUri"],
        "the same session, subscribed again"
    );
    let (st, _, _) = smf.call(true, &format!("/{id2}/delete"), None);
    assert_eq!(st, 204);
    let deleted = poll_until(Duration::from_secs(10), || {
        chf_requests(&chf, "DELETE").len() == 2
    });
    assert!(deleted, "{:?}", chf.requests());
    assert_eq!(
        chf_requests(&chf, "DELETE")[1]["path"],
        "/nchf-spendinglimitcontrol/v1/subscriptions/sub-3",
        "{:?}",
        chf.requests()
    );
}

#[test]
fn counters_the_chf_does_not_know_stay_unknown_and_are_not_asked_again() {
    let callback = Callback::start();
    let (p, sbi, chf) = start_with_chf("{}");
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let smf = Smf::new(sbi);
    let notify = "/nsmf-callback/v1/sm-policy-notify/30";
    let (st, location, decision) = smf.call(true, "", Some(&create_for(&callback, notify, IMSI)));
    assert_eq!(st, 201, "{decision}");
    assert!(
        decision["pccRules"]["internet"].is_object(),
        "unknown: {decision}"
    );
    let id = location.rsplit('/').next().expect("id").to_owned();
    assert_eq!(chf_requests_n(&chf, "POST", 1).len(), 1, "{}", p.log());
    let update = serde_json::json!({"repPolicyCtrlReqTriggers": ["RAT_TY_CH"], "ratType": "NR"});
    let (st, _, changed) = smf.call(true, &format!("/{id}/update"), Some(&update));
    assert_eq!(st, 200, "{changed}");
    assert_eq!(
        chf_requests(&chf, "POST").len(),
        1,
        "not asked again: {:?}",
        chf.requests()
    );
    assert_eq!(
        metric(&p, "pcrf_sy_unknown_counters_total"),
        1.0,
        "{}",
        p.metrics()
    );
    let (st, _, _) = smf.call(true, &format!("/{id}/delete"), None);
    assert_eq!(st, 204);
    // The Sy session is forgotten once the last session ended (whether to
    // end it at the CHF is decided then).
    let forgotten = poll_until(Duration::from_secs(10), || {
        metric(&p, "pcrf_sy_sessions ") == 0.0
    });
    assert!(forgotten, "{}", p.metrics());
    assert!(
        chf_requests(&chf, "DELETE").is_empty(),
        "nothing subscribed, nothing to delete: {:?}",
        chf.requests()
    );
}

#[test]
fn a_new_counter_modifies_the_subscription_and_a_lost_one_is_made_anew() {
    let callback = Callback::start();
    let table = r#"{"monthly-data": "valid", "roaming": "blocked", "video": "valid"}"#;
    let (p, sbi, chf) = start_with_chf(table);
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let smf = Smf::new(sbi);
    let notify = "/nsmf-callback/v1/sm-policy-notify/31";
    let (st, location, decision) = smf.call(true, "", Some(&create_for(&callback, notify, IMSI)));
    assert_eq!(st, 201, "{decision}");
    let id = location.rsplit('/').next().expect("id").to_owned();
    assert_eq!(chf_requests_n(&chf, "POST", 1).len(), 1, "{}", p.log());

    // The policy now also asks for "roaming": the next request modifies
    // the subscription with the whole list (PUT), no second POST.
    reload_edited(
        &p,
        "decision.spending_counters = { SY_COUNTER }",
        "decision.spending_counters = { SY_COUNTER, \"roaming\" }",
    );
    let update = serde_json::json!({"repPolicyCtrlReqTriggers": ["RAT_TY_CH"], "ratType": "NR"});
    let (st, _, changed) = smf.call(true, &format!("/{id}/update"), Some(&update));
    assert_eq!(st, 200, "{changed}");
    let puts = chf_requests_n(&chf, "PUT", 1);
    assert_eq!(puts.len(), 1, "{:?}\n{}", chf.requests(), p.log());
    assert_eq!(
        puts[0]["path"],
        "/nchf-spendinglimitcontrol/v1/subscriptions/sub-1"
    );
    assert_eq!(
        puts[0]["body"]["policyCounterIds"],
        serde_json::json!([COUNTER, "roaming"])
    );
    assert_eq!(chf_requests(&chf, "POST").len(), 1);

    // The CHF restarts and forgets its subscriptions: the next modify is
    // answered 404, and the subscription is made anew (POST, all counters)
    // in the same exchange.
    let port = chf.port;
    drop(chf);
    let chf = PythonPeer::script_with("chf_emulator.py", port, &[table]);
    reload_edited(
        &p,
        "{ SY_COUNTER, \"roaming\" }",
        "{ SY_COUNTER, \"roaming\", \"video\" }",
    );
    // Another Update (an equal one would be taken for a repeat).
    let update = serde_json::json!({"repPolicyCtrlReqTriggers": ["RAT_TY_CH"], "ratType": "EUTRA"});
    let (st, _, changed) = smf.call(true, &format!("/{id}/update"), Some(&update));
    assert_eq!(st, 200, "{changed}");
    poll_until(Duration::from_secs(10), || chf.requests().len() >= 2);
    let methods: Vec<Value> = chf.requests().iter().map(|r| r["method"].clone()).collect();
    assert_eq!(
        methods,
        ["PUT", "POST"],
        "{:?}\n{}",
        chf.requests(),
        p.log()
    );
    assert_eq!(
        chf_requests(&chf, "POST")[0]["body"]["policyCounterIds"],
        serde_json::json!([COUNTER, "roaming", "video"])
    );

    let (st, _, _) = smf.call(true, &format!("/{id}/delete"), None);
    assert_eq!(st, 204);
    let deleted = poll_until(Duration::from_secs(10), || {
        chf_requests(&chf, "DELETE").len() == 1
    });
    assert!(deleted, "{:?}", chf.requests());
    assert_eq!(
        chf_requests(&chf, "DELETE")[0]["path"],
        "/nchf-spendinglimitcontrol/v1/subscriptions/sub-1",
        "the new subscription's id"
    );
}

/// N28 on a two-node PostgreSQL cluster: the subscription node 0 made
/// for a PDU session is in the session's record, so when node 0 dies and
/// node 1 serves the SMF's Delete, node 1 ends the subscription at the CHF
/// by the id node 0 got.
#[test]
fn a_spending_subscription_outlives_its_node_in_a_cluster() {
    let callback = Callback::start();
    let chf = PythonPeer::script_with(
        "chf_emulator.py",
        free_port(),
        &[r#"{"monthly-data": "valid"}"#],
    );
    let (_db, mut nodes, ports) = sbi_cluster(
        "n28_cluster",
        &format!(
            "[sy]\ntimeout_ms = 5000\nchf = \"http://127.0.0.1:{}\"\n",
            chf.port
        ),
    );
    nodes[0].provision(IMSI, r#"{"plan":"basic"}"#);
    let notify = "/nsmf-callback/v1/sm-policy-notify/n28c";
    let a = Smf::new(ports[0]);
    let (st, location, decision) = a.call(true, "", Some(&create_for(&callback, notify, IMSI)));
    assert_eq!(st, 201, "{decision}");
    let id = location.rsplit('/').next().expect("id").to_owned();
    assert_eq!(chf_requests_n(&chf, "POST", 1).len(), 1);

    nodes[0].kill9();
    let b = Smf::new(ports[1]);
    let (st, _, body) = b.call(true, &format!("/{id}/delete"), None);
    assert_eq!(st, 204, "{body}\n{}", nodes[1].log());
    let deletes = chf_requests_n(&chf, "DELETE", 1);
    assert_eq!(
        deletes.first().map(|r| r["path"].clone()),
        Some(Value::from(
            "/nchf-spendinglimitcontrol/v1/subscriptions/sub-1"
        )),
        "{:?}\n{}",
        chf.requests(),
        nodes[1].log()
    );
    // Node 1 made no subscription of its own.
    assert_eq!(chf_requests(&chf, "POST").len(), 1, "{:?}", chf.requests());
}

#[test]
fn a_session_left_without_a_binding_gets_one_at_restart_and_loses_it_before_it_closes() {
    let callback = Callback::start();
    // The BSF is down when the PDU session starts: its registration fails.
    let bsf_port = free_port();
    let (mut p, sbi) = start_with(&format!(
        "[sbi.bsf]\nuri = \"http://127.0.0.1:{bsf_port}/bsf\"\ntimeout_ms = 300\n"
    ));
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let smf = Smf::new(sbi);
    let (st, location, decision) = smf.call(
        true,
        "",
        Some(&create_body(
            &callback,
            "/nsmf-callback/v1/sm-policy-notify/9",
        )),
    );
    assert_eq!(st, 201, "{decision}");
    let id = location.rsplit('/').next().expect("id").to_owned();
    let failed = poll_until(Duration::from_secs(10), || {
        p.log_count("PCF binding not registered at the BSF") > 0
    });
    assert!(failed, "{}", p.log());
    let (_, s) = p.http("GET", &format!("/v1/sessions/{id}"), None);
    assert!(s["bsf_binding"].is_null(), "{s}");

    // The node dies; the BSF comes up; at restart the session gets its
    // binding without any request from the SMF.
    p.kill9();
    let bsf = PythonPeer::script("smf_callback.py", bsf_port);
    p.restart();
    let stored = poll_until(Duration::from_secs(15), || {
        p.http("GET", &format!("/v1/sessions/{id}"), None).1["bsf_binding"].is_string()
    });
    assert!(stored, "{}", p.log());
    let registered: Vec<Value> = bsf
        .requests()
        .into_iter()
        .filter(|r| r["method"] == "POST")
        .collect();
    assert_eq!(registered.len(), 1, "registered once: {registered:?}");
    assert_eq!(registered[0]["body"]["ipv4Addr"], "10.45.0.2");

    let smf = Smf::new(sbi);
    // The Delete removes the binding before it closes the session: the
    // closed record no longer names one, and the BSF was asked already.
    let (st, _, body) = smf.call(true, &format!("/{id}/delete"), Some(&serde_json::json!({})));
    assert_eq!(st, 204, "{body}");
    let (st, closed) = p.http("GET", &format!("/v1/sessions/{id}"), None);
    assert_eq!(st, 200, "{closed}");
    assert_eq!(closed["state"], "closed", "{closed}");
    assert!(closed["bsf_binding"].is_null(), "{closed}");
    let asked = poll_until(Duration::from_secs(5), || {
        bsf.requests().iter().any(|r| r["method"] == "DELETE")
    });
    assert!(asked, "{:?}", bsf.requests());
}

#[test]
fn a_create_for_a_pdu_session_already_served_replaces_its_association() {
    let callback = Callback::start();
    let (p, sbi) = start_with(&format!(
        "[sbi.bsf]\nuri = \"http://127.0.0.1:{}/bsf\"\n",
        callback.port
    ));
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let smf = Smf::new(sbi);
    let body = create_body(&callback, "/nsmf-callback/v1/sm-policy-notify/3");
    let (st, first, _) = smf.call(true, "", Some(&body));
    assert_eq!(st, 201);
    let first = first.rsplit('/').next().expect("id").to_owned();
    let bound = poll_until(Duration::from_secs(10), || {
        p.http("GET", &format!("/v1/sessions/{first}"), None).1["bsf_binding"].is_string()
    });
    assert!(bound, "{}", p.log());

    // The SMF lost the answer and creates the same PDU session again: the
    // first association goes, with its binding; the second serves.
    let (st, second, _) = smf.call(true, "", Some(&body));
    assert_eq!(st, 201);
    let second = second.rsplit('/').next().expect("id").to_owned();
    assert_ne!(first, second);
    let (st, _, gone) = smf.call(false, &format!("/{first}"), None);
    assert_eq!(st, 404, "{gone}");
    assert_eq!(smf.call(false, &format!("/{second}"), None).0, 200);
    let (_, closed) = p.http("GET", &format!("/v1/sessions/{first}"), None);
    assert_eq!(closed["state"], "closed", "{closed}");
    assert!(closed["bsf_binding"].is_null(), "{closed}");
    let removed = poll_until(Duration::from_secs(5), || {
        callback.requests().iter().any(|r| r["method"] == "DELETE")
    });
    assert!(removed, "{:?}", callback.requests());

    // Another PDU session of the same UE is not touched.
    let mut other = body.clone();
    other["pduSessionId"] = Value::from(2);
    let (st, _, _) = smf.call(true, "", Some(&other));
    assert_eq!(st, 201);
    assert_eq!(smf.call(false, &format!("/{second}"), None).0, 200);
}
