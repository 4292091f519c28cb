//! Sy against the real `pcrf` binary: a PCEF over Gx, and OCSs built with
//! the diameter crate (real Diameter servers answering SLRs from a
//! test-controlled counter table and sending SNRs). CCR-I subscribes the
//! policy's counter and the decision uses its status; an SNR changes it
//! and the PCEF gets a RAR; the last CCR-T sends the STR; failover to the
//! second OCS; no OCS at all or unknown counters: the documented fallback;
//! and the Sy session survives `kill -9`.

use crate::support;

use diameter::codec::{Message, FLAG_T};
use diameter::dict::{avp, cmd};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use support::*;

/// The PCRF's Origin-Host: the OCS sends its SNRs over its connection.
const PCRF: &str = "pcrf.test.local";
const IMSI: &str = "001010000000001";
const COUNTER: &str = "monthly-data";

fn start(sy: &str) -> Pcrf {
    let p = Pcrf::start(sy);
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    p
}

/// Rules a CCA installs, without the rule base every session gets.
fn installed(cca: &Message) -> Vec<String> {
    let mut v = rule_changes(cca).0;
    v.retain(|r| r != "consumer");
    v
}

fn metric(p: &Pcrf, prefix: &str) -> f64 {
    p.metrics()
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slr_at_ccr_i_snr_pushes_rar_and_last_ccr_t_sends_str() {
    let ocs = Ocs::start("ocs1.test.local", "test.local", &[(COUNTER, "valid")]).await;
    let p = start(&sy_section(&[&ocs], 2000));
    ocs.peer(PCRF).await;
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;

    // CCR-I: the policy asks for the counter, the SLR carries the IMSI.
    let cca = pcef.ccr_i("pgw;sy;1", IMSI).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(installed(&cca), ["internet"], "valid: not throttled");
    let slrs = ocs.requests(cmd::SPENDING_LIMIT);
    assert_eq!(slrs.len(), 1);
    let slr = &slrs[0];
    assert_eq!(counter_ids(slr), [COUNTER]);
    let sl_type = slr
        .find(avp::SL_REQUEST_TYPE)
        .expect("ok")
        .expect("present");
    assert_eq!(sl_type.as_i32(), Ok(0), "INITIAL_REQUEST");
    let sub = slr
        .find(avp::SUBSCRIPTION_ID)
        .expect("ok")
        .expect("Subscription-Id");
    assert!(sub
        .grouped()
        .filter_map(|a| a.ok())
        .any(|a| a.is(avp::SUBSCRIPTION_ID_DATA) && a.as_str() == Ok(IMSI)));
    let sy_session = slr
        .session_id()
        .expect("sid")
        .expect("Session-Id")
        .to_owned();

    // A second session of the subscriber: the counter is subscribed already.
    let cca = pcef.ccr_i("pgw;sy;2", IMSI).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(ocs.requests(cmd::SPENDING_LIMIT).len(), 1, "no second SLR");

    // The OCS: exhausted. Both sessions are throttled through RARs.
    let sna = ocs.snr(PCRF, &sy_session, COUNTER, "exhausted").await;
    assert_eq!(result_of(&sna), 2001);
    let rars = eventually_async("two RARs", Duration::from_secs(10), || {
        let r = pcef.rars();
        (r.len() >= 2).then_some(r)
    })
    .await;
    for rar in &rars {
        let (install, remove) = rule_changes(rar);
        assert_eq!(install, ["throttled"]);
        assert_eq!(remove, ["internet"]);
    }
    // The same status again changes nothing: no RAR. The SNR re-decides
    // both sessions on a task of its own; once both outcomes are counted
    // no RAR can still be on its way.
    let outcomes = |p: &Pcrf| {
        metric(p, "pcrf_pushes_rar_total")
            + metric(p, "pcrf_pushes_unchanged_total")
            + metric(p, "pcrf_pushes_failed_total")
    };
    let (before, unchanged) = (outcomes(&p), metric(&p, "pcrf_pushes_unchanged_total"));
    let sna = ocs.snr(PCRF, &sy_session, COUNTER, "exhausted").await;
    assert_eq!(result_of(&sna), 2001);
    eventually_async(
        p.waiting_for("both sessions re-decided after the repeated SNR"),
        Duration::from_secs(10),
        || (outcomes(&p) >= before + 2.0).then_some(()),
    )
    .await;
    assert_eq!(metric(&p, "pcrf_pushes_unchanged_total"), unchanged + 2.0);
    assert_eq!(pcef.rars().len(), 2);

    // A report without its status: 5005 naming the missing AVP.
    let peer = ocs.peer(PCRF).await;
    let bad = peer
        .request(SY, cmd::SPENDING_STATUS_NOTIFICATION, |b| {
            b.str(avp::SESSION_ID, &sy_session)
                .u32(avp::AUTH_APPLICATION_ID, SY)
                .origin(&ocs.host, "test.local")
                .str(avp::DESTINATION_REALM, "test.local")
                .group(avp::POLICY_COUNTER_STATUS_REPORT, |g| {
                    g.str(avp::POLICY_COUNTER_IDENTIFIER, COUNTER);
                });
        })
        .await
        .expect("answer");
    assert_eq!(result_of(&bad), 5005);
    assert!(
        bad.find(avp::FAILED_AVP).expect("ok").is_some(),
        "Failed-AVP"
    );
    assert_eq!(pcef.rars().len(), 2, "nothing applied");

    // An SNR for a Sy session we do not have: 5002.
    let sna = ocs.snr(PCRF, "no-such-session", COUNTER, "valid").await;
    assert_eq!(result_of(&sna), 5002);

    // The first CCR-T leaves a session: no STR. The last one sends it.
    assert_eq!(result_of(&pcef.ccr_t("pgw;sy;1", 1).await), 2001);
    assert_eq!(result_of(&pcef.ccr_t("pgw;sy;2", 1).await), 2001);
    let str_ = eventually_async("STR", Duration::from_secs(10), || {
        ocs.requests(cmd::SESSION_TERMINATION).pop()
    })
    .await;
    assert_eq!(str_.session_id().expect("sid"), Some(sy_session.as_str()));
    // An STR for the first CCR-T would have been sent before this one, on
    // the same connection: there is exactly one.
    assert_eq!(ocs.requests(cmd::SESSION_TERMINATION).len(), 1);
    let cause = str_
        .find(avp::TERMINATION_CAUSE)
        .expect("ok")
        .expect("cause");
    assert_eq!(cause.as_i32(), Ok(1), "DIAMETER_LOGOUT");

    let m = p.metrics();
    assert!(
        m.contains("pcrf_sy_ocs_up{ocs=\"ocs1.test.local\"} 1"),
        "{m}"
    );
    assert!(
        metric(
            &p,
            "pcrf_requests_total{command=\"SLR\",result_code=\"2001\"}"
        ) >= 1.0,
        "{m}"
    );
    assert!(
        metric(
            &p,
            "pcrf_requests_total{command=\"SNR\",result_code=\"5002\"}"
        ) >= 1.0,
        "{m}"
    );
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_at_attach_throttles_in_the_cca_i() {
    let ocs = Ocs::start("ocs1.test.local", "test.local", &[(COUNTER, "exhausted")]).await;
    let p = start(&sy_section(&[&ocs], 2000));
    ocs.peer(PCRF).await;
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let cca = pcef.ccr_i("pgw;sy;1", IMSI).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(installed(&cca), ["throttled"]);
    assert_eq!(apn_ambr(&cca), Some((256_000, 1_000_000)));
    // The status changes to valid: the throttle is lifted through a RAR.
    let sy_session = ocs.requests(cmd::SPENDING_LIMIT)[0]
        .session_id()
        .expect("sid")
        .expect("Session-Id")
        .to_owned();
    ocs.snr(PCRF, &sy_session, COUNTER, "valid").await;
    let rar = eventually_async("RAR", Duration::from_secs(10), || pcef.rars().pop()).await;
    assert_eq!(rule_changes(&rar).0, ["internet"]);
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_ocs_up_falls_back_to_unknown_without_holding_gx() {
    // An OCS that is configured but not there.
    let ocs = Ocs::start("ocs1.test.local", "test.local", &[(COUNTER, "exhausted")]).await;
    let config = sy_section(&[&ocs], 500);
    let mut ocs = ocs;
    ocs.stop().await;
    let p = start(&config);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let t0 = Instant::now();
    let cca = pcef.ccr_i("pgw;sy;1", IMSI).await;
    assert_eq!(result_of(&cca), 2001);
    assert!(t0.elapsed() < Duration::from_secs(2), "Gx was held");
    assert_eq!(installed(&cca), ["internet"], "unknown does not throttle");
    let (_, session) = p.http("GET", "/v1/sessions/pgw;sy;1", None);
    let spending = &session["last_decision"]["inputs"]["spending"];
    assert_eq!(spending[COUNTER], "unknown", "{session}");
    assert!(metric(&p, "pcrf_sy_fallbacks_total") >= 1.0);
    assert!(p
        .metrics()
        .contains("pcrf_sy_ocs_up{ocs=\"ocs1.test.local\"} 0"));
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_ocs_fails_over_to_the_next_with_the_t_flag_and_a_stopped_one_too() {
    let mut ocs1 = Ocs::start("ocs1.test.local", "test.local", &[(COUNTER, "valid")]).await;
    let ocs2 = Ocs::start("ocs2.test.local", "test.local", &[(COUNTER, "exhausted")]).await;
    let p = start(&sy_section(&[&ocs1, &ocs2], 2000));
    ocs1.peer(PCRF).await;
    ocs2.peer(PCRF).await;
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;

    // OCS 1 hangs: the SLR goes to OCS 2 again, as a retransmission.
    ocs1.answer_after(Duration::from_millis(5000));
    let t0 = Instant::now();
    let cca = pcef.ccr_i("pgw;sy;1", IMSI).await;
    assert!(
        t0.elapsed() < Duration::from_millis(2500),
        "bounded by timeout_ms"
    );
    assert_eq!(installed(&cca), ["throttled"], "OCS 2's status used");
    assert_eq!(ocs1.requests(cmd::SPENDING_LIMIT).len(), 1);
    let second = ocs2.requests(cmd::SPENDING_LIMIT);
    assert_eq!(second.len(), 1);
    assert_ne!(second[0].flags() & FLAG_T, 0, "T flag on the retry");
    let dest = second[0]
        .find(avp::DESTINATION_HOST)
        .expect("ok")
        .expect("host");
    assert_eq!(dest.as_str(), Ok("ocs2.test.local"));

    // OCS 1 is stopped: requests go straight to OCS 2.
    ocs1.answer_after(Duration::ZERO);
    ocs1.stop().await;
    eventually_async("OCS 1 down", Duration::from_secs(10), || {
        p.metrics()
            .contains("pcrf_sy_ocs_up{ocs=\"ocs1.test.local\"} 0")
            .then_some(())
    })
    .await;
    assert_eq!(result_of(&pcef.ccr_t("pgw;sy;1", 1).await), 2001);
    let str_ = eventually_async("STR at OCS 2", Duration::from_secs(10), || {
        ocs2.requests(cmd::SESSION_TERMINATION).pop()
    })
    .await;
    assert_eq!(str_.flags() & FLAG_T, 0, "first try");
    assert!(ocs1.requests(cmd::SESSION_TERMINATION).is_empty());
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_counters_are_refused_once_counted_and_nothing_corrupted() {
    // This OCS knows no counter at all.
    let ocs = Ocs::start("ocs1.test.local", "test.local", &[]).await;
    let p = start(&sy_section(&[&ocs], 2000));
    ocs.peer(PCRF).await;
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let cca = pcef.ccr_i("pgw;sy;1", IMSI).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(installed(&cca), ["internet"]);
    assert_eq!(metric(&p, "pcrf_sy_unknown_counters_total"), 1.0);
    assert!(
        metric(
            &p,
            "pcrf_requests_total{command=\"SLR\",result_code=\"5570\"}"
        ) >= 1.0,
        "{}",
        p.metrics()
    );
    // Not asked again on the next update; the session goes on.
    let cca = pcef
        .ccr_u("pgw;sy;1", 1, |b| {
            b.i32(avp::EVENT_TRIGGER, 13);
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(ocs.requests(cmd::SPENDING_LIMIT).len(), 1);
    let (_, session) = p.http("GET", "/v1/sessions/pgw;sy;1", None);
    assert_eq!(session["state"], "open");
    // The OCS never created the session: no STR for it.
    assert_eq!(result_of(&pcef.ccr_t("pgw;sy;1", 2).await), 2001);
    never_within(
        "an STR for a Sy session the OCS never created",
        Duration::from_millis(300),
        || !ocs.requests(cmd::SESSION_TERMINATION).is_empty(),
    )
    .await;
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sy_session_survives_kill_9() {
    let ocs = Ocs::start("ocs1.test.local", "test.local", &[(COUNTER, "exhausted")]).await;
    let mut p = start(&sy_section(&[&ocs], 2000));
    ocs.peer(PCRF).await;
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let cca = pcef.ccr_i("pgw;sy;1", IMSI).await;
    assert_eq!(installed(&cca), ["throttled"]);
    let sy_session = ocs.requests(cmd::SPENDING_LIMIT)[0]
        .session_id()
        .expect("sid")
        .expect("Session-Id")
        .to_owned();
    pcef.close().await;

    p.kill9();
    p.restart();
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    // The PCRF reconnects to the OCS; the status is remembered (no new SLR).
    eventually_async("the PCRF back at the OCS", Duration::from_secs(10), || {
        p.metrics()
            .contains("pcrf_sy_ocs_up{ocs=\"ocs1.test.local\"} 1")
            .then_some(())
    })
    .await;
    assert_eq!(metric(&p, "pcrf_sy_sessions"), 1.0);
    // An SNR for the session from before the crash is known.
    let sna = ocs.snr(PCRF, &sy_session, COUNTER, "valid").await;
    assert_eq!(result_of(&sna), 2001);
    let rar = eventually_async("RAR", Duration::from_secs(10), || pcef.rars().pop()).await;
    assert_eq!(rule_changes(&rar).0, ["internet"]);
    assert_eq!(result_of(&pcef.ccr_t("pgw;sy;1", 1).await), 2001);
    let str_ = eventually_async("STR", Duration::from_secs(10), || {
        ocs.requests(cmd::SESSION_TERMINATION).pop()
    })
    .await;
    assert_eq!(str_.session_id().expect("sid"), Some(sy_session.as_str()));
    assert_eq!(ocs.requests(cmd::SPENDING_LIMIT).len(), 1, "no new SLR");
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_status_change_applies_at_its_time() {
    let ocs = Ocs::start("ocs1.test.local", "test.local", &[(COUNTER, "valid")]).await;
    ocs.announce_pending("exhausted", Duration::from_millis(2500));
    let p = start(&sy_section(&[&ocs], 2000));
    ocs.peer(PCRF).await;
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let t0 = Instant::now();
    let cca = pcef.ccr_i("pgw;sy;1", IMSI).await;
    assert_eq!(installed(&cca), ["internet"], "not yet");
    let rar = eventually_async("RAR at the change time", Duration::from_secs(10), || {
        pcef.rars().pop()
    })
    .await;
    // Diameter Time has whole seconds: the change is 1.5..=2.5 s away.
    assert!(t0.elapsed() >= Duration::from_millis(1400), "too early");
    assert_eq!(rule_changes(&rar).0, ["throttled"]);
    assert_eq!(ocs.requests(cmd::SPENDING_LIMIT).len(), 1, "no SLR needed");
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_survive_kill_9_after_the_session_holding_them_ended() {
    let ocs = Ocs::start("ocs1.test.local", "test.local", &[(COUNTER, "valid")]).await;
    let mut p = start(&sy_section(&[&ocs], 2000));
    ocs.peer(PCRF).await;
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    for id in ["pgw;sy;1", "pgw;sy;2"] {
        assert_eq!(installed(&pcef.ccr_i(id, IMSI).await), ["internet"]);
    }
    let sy_session = ocs.requests(cmd::SPENDING_LIMIT)[0]
        .session_id()
        .expect("sid")
        .expect("Session-Id")
        .to_owned();
    ocs.snr(PCRF, &sy_session, COUNTER, "exhausted").await;
    eventually_async("two RARs", Duration::from_secs(10), || {
        (pcef.rars().len() >= 2).then_some(())
    })
    .await;
    // End the session whose record holds the new status.
    let status_of = |id: &str| {
        let (_, s) = p.http("GET", &format!("/v1/sessions/{id}"), None);
        s["sy"]["counters"][COUNTER]["status"]
            .as_str()
            .map(str::to_owned)
    };
    let (ended, left) = if status_of("pgw;sy;1").as_deref() == Some("exhausted") {
        ("pgw;sy;1", "pgw;sy;2")
    } else {
        ("pgw;sy;2", "pgw;sy;1")
    };
    assert_eq!(status_of(ended).as_deref(), Some("exhausted"), "persisted");
    assert_eq!(result_of(&pcef.ccr_t(ended, 1).await), 2001);
    eventually_async(
        "the copy moved to the open record",
        Duration::from_secs(10),
        || (status_of(left).as_deref() == Some("exhausted")).then_some(()),
    )
    .await;
    pcef.close().await;

    p.kill9();
    p.restart();
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    // The remaining session still decides with "exhausted": nothing changes.
    let cca = pcef
        .ccr_u(left, 1, |b| {
            b.i32(avp::EVENT_TRIGGER, 13);
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(rule_changes(&cca), (vec![], vec![]), "still throttled");
    assert_eq!(ocs.requests(cmd::SPENDING_LIMIT).len(), 1, "no new SLR");
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_ocs_holds_each_subscriber_once_per_retry_period() {
    let ocs = Ocs::start("ocs1.test.local", "test.local", &[(COUNTER, "exhausted")]).await;
    ocs.answer_after(Duration::from_millis(10_000));
    let p = start(&format!("{}retry_secs = 30\n", sy_section(&[&ocs], 300)));
    ocs.peer(PCRF).await;
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let t0 = Instant::now();
    let cca = pcef.ccr_i("pgw;sy;1", IMSI).await;
    let first = t0.elapsed();
    assert!(
        first >= Duration::from_millis(250),
        "waited for the OCS: {first:?}"
    );
    assert!(first < Duration::from_millis(1500), "bounded: {first:?}");
    assert_eq!(installed(&cca), ["internet"], "unknown does not throttle");
    // Within retry_secs the next CCRs of the subscriber do not wait again.
    let t1 = Instant::now();
    let cca = pcef
        .ccr_u("pgw;sy;1", 1, |b| {
            b.i32(avp::EVENT_TRIGGER, 13);
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    let cca = pcef.ccr_i("pgw;sy;2", IMSI).await;
    assert_eq!(result_of(&cca), 2001);
    assert!(
        t1.elapsed() < Duration::from_millis(250),
        "{:?}",
        t1.elapsed()
    );
    assert_eq!(ocs.requests(cmd::SPENDING_LIMIT).len(), 1);
    assert!(
        metric(
            &p,
            "pcrf_requests_total{command=\"SLR\",result_code=\"none\"}"
        ) >= 1.0,
        "{}",
        p.metrics()
    );
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pcef_forgetting_the_last_session_ends_the_sy_session() {
    let ocs = Ocs::start("ocs1.test.local", "test.local", &[(COUNTER, "valid")]).await;
    let p = start(&sy_section(&[&ocs], 2000));
    ocs.peer(PCRF).await;
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    assert_eq!(result_of(&pcef.ccr_i("pgw;sy;1", IMSI).await), 2001);
    let sy_session = ocs.requests(cmd::SPENDING_LIMIT)[0]
        .session_id()
        .expect("sid")
        .expect("Session-Id")
        .to_owned();
    // The PCEF no longer knows the session: the RAR the SNR causes gets 5002.
    pcef.handler.raa_code.store(5002, Ordering::Relaxed);
    ocs.snr(PCRF, &sy_session, COUNTER, "exhausted").await;
    let str_ = eventually_async("STR", Duration::from_secs(10), || {
        ocs.requests(cmd::SESSION_TERMINATION).pop()
    })
    .await;
    assert_eq!(str_.session_id().expect("sid"), Some(sy_session.as_str()));
    assert_eq!(metric(&p, "pcrf_sy_sessions"), 0.0);
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ocs_answering_with_another_origin_host_is_not_used() {
    // Listening where ocs1 is configured, but calling itself rogue.
    let rogue = Ocs::start("rogue.test.local", "test.local", &[(COUNTER, "exhausted")]).await;
    let config = format!(
        "\n[sy]\ntimeout_ms = 500\nocs = [ {{ origin_host = \"ocs1.test.local\", address = \"{}\" }} ]\n",
        rogue.addr
    );
    let p = start(&config);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    // The node reached the address and refused who answered there.
    p.wait_log(
        "its CEA names another Origin-Host than the one we connected to",
        0,
        Duration::from_secs(10),
    )
    .await;
    let cca = pcef.ccr_i("pgw;sy;1", IMSI).await;
    assert_eq!(
        installed(&cca),
        ["internet"],
        "the rogue's status is not used"
    );
    assert!(rogue.requests(cmd::SPENDING_LIMIT).is_empty());
    assert!(p
        .metrics()
        .contains("pcrf_sy_ocs_up{ocs=\"ocs1.test.local\"} 0"));
    pcef.close().await;
}
