//! Gx against the real `pcrf` binary over TCP: CCA contents AVP by AVP,
//! the rule diff on CCR-U, retransmissions, error paths, RAR pushes from
//! the API, restart after `kill -9`, and policy hot reload.

use crate::support;

use diameter::codec::FLAG_T;
use diameter::dict::{avp, enums};
use support::*;

const IMSI: &str = "001010000000001";

fn basic(p: &Pcrf) {
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ccr_i_answers_the_whole_decision() {
    let p = Pcrf::start("");
    basic(&p);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let cca = pcef.ccr_i("pgw.test.local;1;1", IMSI).await;

    assert_eq!(result_of(&cca), 2001);
    assert!(!cca.is_request());
    let first = cca.avps().next().expect("first").expect("avp");
    assert!(first.is(avp::SESSION_ID), "Session-Id must come first");
    let [host, auth, rtype, rnum, bcm, dbq] = cca
        .pick(&[
            avp::ORIGIN_HOST,
            avp::AUTH_APPLICATION_ID,
            avp::CC_REQUEST_TYPE,
            avp::CC_REQUEST_NUMBER,
            avp::BEARER_CONTROL_MODE,
            avp::DEFAULT_EPS_BEARER_QOS,
        ])
        .expect("avps");
    assert_eq!(
        host.map(|a| a.as_str().map(str::to_owned)),
        Some(Ok("pcrf.test.local".into()))
    );
    assert_eq!(auth.map(|a| a.as_u32()), Some(Ok(GX)));
    assert_eq!(rtype.map(|a| a.as_i32()), Some(Ok(1)));
    assert_eq!(rnum.map(|a| a.as_u32()), Some(Ok(0)));
    assert_eq!(
        bcm.map(|a| a.as_i32()),
        Some(Ok(2)),
        "UE_NW: the PCEF sent Network-Request-Support"
    );
    let qci = dbq
        .expect("Default-EPS-Bearer-QoS")
        .grouped()
        .find(avp::QOS_CLASS_IDENTIFIER)
        .expect("grouped")
        .expect("QCI");
    assert_eq!(qci.as_i32(), Ok(9));

    let (installed, removed) = rule_changes(&cca);
    assert_eq!(
        installed,
        vec!["consumer".to_string(), "internet".to_string()]
    );
    assert!(removed.is_empty());
    let (ul, dl) = apn_ambr(&cca).expect("APN-AMBR");
    assert_eq!(ul, 5_000_000);
    assert!(
        dl == 20_000_000 || dl == 50_000_000,
        "day or night AMBR of the basic plan, got {dl}"
    );
    let triggers: Vec<i32> = cca
        .avps()
        .flatten()
        .filter(|a| a.is(avp::EVENT_TRIGGER))
        .map(|a| a.as_i32().expect("enum"))
        .collect();
    assert_eq!(triggers, vec![2, 13, 17, 18, 19]);
    assert!(cca.find(avp::REVALIDATION_TIME).expect("avps").is_some());
    let sf = cca
        .find(avp::SUPPORTED_FEATURES)
        .expect("avps")
        .expect("Supported-Features echoed");
    let list = sf
        .grouped()
        .find(avp::FEATURE_LIST)
        .expect("g")
        .expect("Feature-List");
    assert_eq!(list.as_u32(), Ok(0b11));

    // The API shows the session, its decision and the inputs that made it.
    let (st, s) = p.http("GET", "/v1/sessions/pgw.test.local;1;1", None);
    assert_eq!(st, 200, "{s}");
    assert_eq!(s["state"], "open");
    assert_eq!(s["apn"], "internet");
    assert_eq!(s["ue_ipv4"], "10.45.0.2");
    assert_eq!(s["last_decision"]["inputs"]["session"]["rat"], "EUTRAN");
    assert_eq!(
        s["last_decision"]["script_version"].as_str().map(str::len),
        Some(16)
    );
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ccr_u_carries_only_the_difference_and_retransmissions_apply_once() {
    let p = Pcrf::start("");
    basic(&p);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sid = "pgw.test.local;2;1";
    assert_eq!(result_of(&pcef.ccr_i(sid, IMSI).await), 2001);

    // Nothing changed: success and no rules at all.
    let cca = pcef.ccr_u(sid, 1, |_| {}).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(rule_changes(&cca), (vec![], vec![]));
    assert!(apn_ambr(&cca).is_none(), "unchanged AMBR is not re-sent");

    // The subscriber buys the VIP service. The provisioning pushes it at
    // once, but this PCEF refuses the RAR (5012), so nothing is installed
    // and the next CCR-U carries just the new rule.
    pcef.handler
        .raa_code
        .store(5012, std::sync::atomic::Ordering::Relaxed);
    p.provision(
        IMSI,
        r#"{"msisdn":"491700000001","plan":"basic","services":["vip"]}"#,
    );
    assert_eq!(pcef.rars().len(), 1);
    pcef.handler
        .raa_code
        .store(2001, std::sync::atomic::Ordering::Relaxed);
    let cca = pcef
        .ccr_u(sid, 2, |b| {
            b.i32(avp::EVENT_TRIGGER, enums::EVENT_TRIGGER::RAT_CHANGE)
                .i32(avp::RAT_TYPE, 1000);
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(rule_changes(&cca), (vec!["vip-video".to_string()], vec![]));

    // Retransmission of that CCR-U (T flag, same number): the same answer, not re-applied.
    let again = pcef
        .ccr_again(sid, 2, 2, |b| {
            b.i32(avp::EVENT_TRIGGER, enums::EVENT_TRIGGER::RAT_CHANGE)
                .i32(avp::RAT_TYPE, 1000);
        })
        .await;
    assert_eq!(again.flags() & FLAG_T, 0);
    assert_eq!(
        rule_changes(&again),
        (vec!["vip-video".to_string()], vec![])
    );
    assert_eq!(
        &again.bytes()[20..],
        &cca.bytes()[20..],
        "identical answer body"
    );
    assert!(p.metrics().contains("pcrf_retransmissions_total 1"));

    // The service is dropped: the provisioning's RAR removes just it, and
    // the next CCR-U has nothing left to change.
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let rars = pcef.rars();
    assert_eq!(rars.len(), 2);
    assert_eq!(
        rule_changes(&rars[1]),
        (vec![], vec!["vip-video".to_string()])
    );
    let cca = pcef.ccr_u(sid, 3, |_| {}).await;
    assert_eq!(rule_changes(&cca), (vec![], vec![]));

    // CCR-T closes it; later CCRs for it are 5002.
    assert_eq!(result_of(&pcef.ccr_t(sid, 4).await), 2001);
    let (_, s) = p.http("GET", &format!("/v1/sessions/{sid}"), None);
    assert_eq!(s["state"], "closed");
    assert_eq!(result_of(&pcef.ccr_u(sid, 5, |_| {}).await), 5002);
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_paths() {
    let p = Pcrf::start("");
    basic(&p);
    p.provision(
        "001010000000009",
        r#"{"plan":"basic","attributes":{"blocked":true}}"#,
    );
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;

    // Unknown session.
    assert_eq!(result_of(&pcef.ccr_u("nope;1", 1, |_| {}).await), 5002);
    assert_eq!(result_of(&pcef.ccr_t("nope;2", 1).await), 5002);
    // Unknown subscriber: DIAMETER_USER_UNKNOWN (RFC 4006) in Result-Code.
    let cca = pcef
        .ccr(
            "pgw.test.local;3;1",
            enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
            0,
            |b| initial_avps_with(b, "001019999999999", "491709999999"),
        )
        .await;
    assert_eq!(result_of(&cca), 5030);
    assert!(cca.find(avp::RESULT_CODE).expect("avps").is_some());
    // Policy refusal.
    assert_eq!(
        result_of(&pcef.ccr_i("pgw.test.local;3;2", "001010000000009").await),
        5003
    );

    // Missing CC-Request-Number: 5005 with the missing AVP in Failed-AVP.
    let cca = pcef
        .peer
        .request(GX, diameter::dict::cmd::CREDIT_CONTROL, |b| {
            b.str(avp::SESSION_ID, "pgw.test.local;3;3")
                .u32(avp::AUTH_APPLICATION_ID, GX)
                .origin("pgw.test.local", "test.local")
                .str(avp::DESTINATION_REALM, "test.local")
                .i32(avp::CC_REQUEST_TYPE, 1);
            initial_avps(b, IMSI);
        })
        .await
        .expect("answer");
    assert_eq!(result_of(&cca), 5005);
    let failed = cca
        .find(avp::FAILED_AVP)
        .expect("avps")
        .expect("Failed-AVP");
    let inner = failed.grouped().next().expect("inner").expect("avp");
    assert!(inner.is(avp::CC_REQUEST_NUMBER));

    // An unknown AVP with the M bit: 5001 with it in Failed-AVP.
    let cca = pcef
        .ccr_u("pgw.test.local;3;4", 1, |b| {
            b.bytes(diameter::AvpCode::new(65_000, 99_999, true), b"??");
        })
        .await;
    assert_eq!(result_of(&cca), 5001);
    let failed = cca
        .find(avp::FAILED_AVP)
        .expect("avps")
        .expect("Failed-AVP");
    assert_eq!(
        failed.grouped().next().expect("inner").expect("avp").code(),
        65_000
    );

    // A bad value: CC-Request-Type 9.
    let cca = pcef.ccr("pgw.test.local;3;5", 9, 0, |_| {}).await;
    assert_eq!(result_of(&cca), 5004);

    // Metrics count by command and result code.
    let m = p.metrics();
    assert!(
        m.contains(r#"pcrf_requests_total{command="CCR-I",result_code="5030"} 1"#),
        "{m}"
    );
    assert!(
        m.contains(r#"pcrf_requests_total{command="CCR-U",result_code="5002"} 1"#),
        "{m}"
    );
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_survive_kill_9() {
    let mut p = Pcrf::start("");
    basic(&p);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sids: Vec<String> = (0..20).map(|i| format!("pgw.test.local;9;{i}")).collect();
    for s in &sids {
        assert_eq!(result_of(&pcef.ccr_i(s, IMSI).await), 2001);
    }
    pcef.close().await;
    p.restart(); // SIGKILL, then start again on the same data

    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    for s in &sids {
        let cca = pcef.ccr_u(s, 1, |_| {}).await;
        assert_eq!(
            result_of(&cca),
            2001,
            "session {s} lost after kill -9:\n{}",
            p.log()
        );
        assert_eq!(
            rule_changes(&cca),
            (vec![], vec![]),
            "installed rules were recovered too"
        );
    }
    // The retransmission memory survives too: CCR-I number 0 again is replayed.
    let cca = pcef.ccr_i(&sids[0], IMSI).await;
    assert_eq!(result_of(&cca), 2001);
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_pushes_rar_and_release() {
    let p = Pcrf::start("");
    basic(&p);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sid = "pgw.test.local;4;1";
    assert_eq!(result_of(&pcef.ccr_i(sid, IMSI).await), 2001);

    // Nothing changed: no RAR.
    let (st, out) = p.http("POST", &format!("/v1/sessions/{sid}/reauth"), None);
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["rar_sent"], false);
    assert!(pcef.rars().is_empty());
    // The log shows the script version as everything else does: 16 hex digits.
    let log = p.log();
    let logged = log
        .lines()
        .find(|l| l.contains("session re-authorized by API"))
        .and_then(|l| l.split("script_version=").nth(1))
        .map(|v| v.split(' ').next().unwrap_or("").to_string())
        .unwrap_or_default();
    assert!(
        logged.len() == 16 && logged.bytes().all(|b| b.is_ascii_hexdigit()),
        "script_version={logged:?} in {log}"
    );
    assert_eq!(
        out["script_version"],
        logged.as_str(),
        "the API says the same"
    );

    // A plan change is pushed by the provisioning itself (before its
    // answer): the RAR carries the new AMBR only; a reauth then finds
    // nothing left to send.
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"unlimited"}"#);
    let (st, out) = p.http("POST", &format!("/v1/sessions/{sid}/reauth"), None);
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["rar_sent"], false);
    assert!(p
        .metrics()
        .contains(r#"pcrf_requests_total{command="RAR",result_code="2001"} 1"#));
    let rars = pcef.rars();
    assert_eq!(rars.len(), 1);
    assert_eq!(apn_ambr(&rars[0]).map(|a| a.0), Some(50_000_000));
    assert_eq!(rule_changes(&rars[0]), (vec![], vec![]));

    // Release: RAR with Session-Release-Cause.
    let (st, out) = p.http("DELETE", &format!("/v1/sessions/{sid}"), None);
    assert!(st == 200 || st == 202, "{st} {out}");
    let rars = pcef.rars();
    assert_eq!(rars.len(), 2);
    assert!(rars[1]
        .find(avp::SESSION_RELEASE_CAUSE)
        .expect("avps")
        .is_some());

    // An RAA 5002 from the PCEF (here to the push of a plan change)
    // removes the session.
    pcef.handler
        .raa_code
        .store(5002, std::sync::atomic::Ordering::Relaxed);
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"plus"}"#);
    let (st, _) = p.http("POST", &format!("/v1/sessions/{sid}/reauth"), None);
    assert_eq!(st, 404);
    let (st, _) = p.http("GET", &format!("/v1/sessions/{sid}"), None);
    assert_eq!(st, 404);
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_hot_reload_good_and_broken() {
    let p = Pcrf::start("[policy.fallback]\nrules = [\"internet\"]\n");
    basic(&p);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    assert_eq!(
        result_of(&pcef.ccr_i("pgw.test.local;5;1", IMSI).await),
        2001
    );

    // A broken script is refused with its line; the old one keeps serving.
    let good = std::fs::read_to_string(&p.policy).expect("policy");
    std::fs::write(&p.policy, "function decide(input)\n  return {\nend\n").expect("write");
    let (st, err) = p.http("POST", "/v1/policy/reload", None);
    assert_eq!(st, 422, "{err}");
    assert!(err["line"].as_u64().is_some(), "{err}");
    let cca = pcef.ccr_i("pgw.test.local;5;2", IMSI).await;
    assert_eq!(
        rule_changes(&cca).0,
        vec!["consumer".to_string(), "internet".to_string()]
    );

    // Sandbox: a script reaching for os.execute or looping forever is refused at reload.
    std::fs::write(
        &p.policy,
        "function decide(input) os.execute('true') return {} end\n",
    )
    .expect("write");
    let (st, _) = p.http("POST", "/v1/policy/reload", None);
    assert_eq!(st, 422);
    std::fs::write(&p.policy, "function decide(input) while true do end end\n").expect("write");
    let (st, _) = p.http("POST", "/v1/policy/reload", None);
    assert_eq!(st, 422);

    // A good new script applies to the next decision.
    let boosted = good.replace("basic = { ul = 5 * MBPS", "basic = { ul = 7 * MBPS");
    assert_ne!(boosted, good, "the test's edit must hit the script");
    std::fs::write(&p.policy, boosted).expect("write");
    let (st, out) = p.http("POST", "/v1/policy/reload", None);
    assert_eq!(st, 200, "{out}");
    let cca = pcef.ccr_i("pgw.test.local;5;3", IMSI).await;
    assert_eq!(apn_ambr(&cca).map(|a| a.0), Some(7_000_000));
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlisted_peer_is_refused() {
    let p = Pcrf::start("");
    let local = diameter::peer::LocalNode::new("evil.test.local", "test.local")
        .with_application(diameter::peer::Application::auth_vendor(GX, TGPP));
    let node = diameter::transport::Node::new(
        local,
        diameter::peer::PeerSettings::default(),
        diameter::transport::ServesNothing,
    );
    let ini = node.connect(p.diameter, Some("pcrf.test.local"));
    assert!(
        !ini.wait_open(std::time::Duration::from_secs(3)).await,
        "a peer not in [[peers]] must not get an open connection"
    );
    ini.shutdown(diameter::peer::DisconnectCause::Rebooting)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_is_graceful() {
    let mut p = Pcrf::start("");
    basic(&p);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    assert_eq!(
        result_of(&pcef.ccr_i("pgw.test.local;6;1", IMSI).await),
        2001
    );
    let st = p.terminate();
    assert!(st.success(), "exit status {st}:\n{}", p.log());
    let log = p.log();
    assert!(log.contains("store flushed"), "{log}");
    // The PCEF saw a DPR and the connection closed.
    assert!(
        pcef.peer
            .wait_state(|s| s == diameter::peer::PeerState::Closed)
            .await
            == diameter::peer::PeerState::Closed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_live_parts_of_the_config() {
    let p = Pcrf::start("[rules]\npredefined = [\"internet\"]\nbase_names = [\"other\"]\n");
    basic(&p);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    // The catalog does not list "consumer": the policy's base name is dropped.
    let cca = pcef.ccr_i("pgw.test.local;7;1", IMSI).await;
    assert_eq!(rule_changes(&cca).0, vec!["internet".to_string()]);
    let (_, before) = p.http("GET", "/v1/config", None);

    // A broken file is refused and changes nothing.
    let good = std::fs::read_to_string(&p.config).expect("config");
    std::fs::write(&p.config, "[rules\n").expect("write");
    let refusals = p.log_count("configuration reload refused");
    p.signal("-HUP");
    // The refusal is logged once the server has read and judged the file:
    // only then can the configuration be compared.
    p.wait_log(
        "configuration reload refused",
        refusals,
        std::time::Duration::from_secs(5),
    )
    .await;
    let (_, same) = p.http("GET", "/v1/config", None);
    assert_eq!(same, before);

    std::fs::write(
        &p.config,
        good.replace("base_names = [\"other\"]", "base_names = [\"consumer\"]"),
    )
    .expect("write");
    p.signal("-HUP");
    eventually_async(
        p.waiting_for("SIGHUP to reload the configuration"),
        std::time::Duration::from_secs(5),
        || (p.http("GET", "/v1/config", None).1 != before).then_some(()),
    )
    .await;
    let cca = pcef.ccr_i("pgw.test.local;7;2", IMSI).await;
    assert_eq!(
        rule_changes(&cca).0,
        vec!["consumer".to_string(), "internet".to_string()]
    );
    pcef.close().await;
}

/// A log line written while a request is handled names the request: its
/// Session-Id, the peer's Origin-Host, the application and the command
/// (the span the dispatcher opens), so one session can be followed
/// through the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_lines_inside_a_request_name_it() {
    // The generated configuration ends inside its [log] table.
    let p = Pcrf::start("format = \"json\"\n");
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    // CC-Request-Type 9 is refused (5004) and the refusal is logged.
    let cca = pcef.ccr("pgw.test.local;7;1", 9, 0, |_| {}).await;
    assert_eq!(result_of(&cca), 5004);
    pcef.close().await;
    let log = p.log();
    let refused: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["message"] == "request refused")
        .collect();
    assert_eq!(refused.len(), 1, "{log}");
    let span = &refused[0]["span"];
    assert_eq!(span["name"], "request", "{log}");
    assert_eq!(span["session"], "pgw.test.local;7;1", "{log}");
    assert_eq!(span["peer"], "pgw.test.local", "{log}");
    assert_eq!(span["app"], "gx", "{log}");
    assert_eq!(span["cmd"], "CCR", "{log}");
}

/// A gateway that closes with DPR (here: rebooting) is an orderly close,
/// logged at info; only abnormal closes are warnings an operator should
/// look into.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_closing_with_dpr_is_logged_at_info() {
    let p = Pcrf::start("format = \"json\"\n");
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    pcef.close().await;
    let closed = |log: &str| -> Option<serde_json::Value> {
        log.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| v["message"] == "Diameter peer closed")
    };
    let line = eventually_async(
        p.waiting_for("the close to be logged"),
        std::time::Duration::from_secs(5),
        || closed(&p.log()),
    )
    .await;
    assert_eq!(line["level"], "INFO", "{line}");
    assert!(
        line["reason"]
            .as_str()
            .unwrap_or("")
            .contains("PeerDisconnect"),
        "{line}"
    );
}
