//! Usage monitoring against the real `pcrf` binary over Gx: grants and
//! re-grants, exact accounting under retransmission and `kill -9`, quota
//! exhaustion throttling in the very CCA that reported it, top-up and reset
//! restoring through a RAR, two keys summed into one accumulator, unknown
//! keys and absurd volumes, and congestion pushes spread over the window.

use crate::support;

use diameter::codec::{Message, MessageBuilder};
use diameter::dict::{avp, enums};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use support::*;

const IMSI: &str = "001010000000001";
const MB: u64 = 1_000_000;

fn start() -> Pcrf {
    Pcrf::start_with_usage("")
}

/// One Usage-Monitoring-Information with a Used-Service-Unit.
fn report(b: &mut MessageBuilder<'_>, key: &str, octets: u64) {
    b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
        g.bytes(avp::MONITORING_KEY, key.as_bytes())
            .group(avp::USED_SERVICE_UNIT, |u| {
                u.u64(avp::CC_TOTAL_OCTETS, octets);
            })
            .i32(avp::USAGE_MONITORING_LEVEL, 0);
    });
}

fn usage_report(b: &mut MessageBuilder<'_>, key: &str, octets: u64) {
    b.i32(avp::EVENT_TRIGGER, 33);
    report(b, key, octets);
}

/// Granted CC-Total-Octets by Monitoring-Key, and the keys stopped.
pub(crate) fn grants(m: &Message) -> (BTreeMap<String, u64>, Vec<String>) {
    let mut granted = BTreeMap::new();
    let mut stopped = Vec::new();
    for a in m.avps() {
        let a = a.expect("avp");
        if !a.is(avp::USAGE_MONITORING_INFORMATION) {
            continue;
        }
        let mut key = None;
        let mut total = None;
        let mut disabled = false;
        for g in a.grouped() {
            let g = g.expect("avp");
            if g.is(avp::MONITORING_KEY) {
                key = Some(String::from_utf8_lossy(g.as_octets()).into_owned());
            } else if g.is(avp::GRANTED_SERVICE_UNIT) {
                total = g
                    .grouped()
                    .find(avp::CC_TOTAL_OCTETS)
                    .expect("gsu")
                    .map(|t| t.as_u64().expect("u64"));
            } else if g.is(avp::USAGE_MONITORING_SUPPORT) {
                disabled = g.as_i32() == Ok(0);
            }
        }
        // A UMI without a key asks for a report of every key.
        let Some(key) = key else { continue };
        if disabled {
            stopped.push(key);
        } else if let Some(t) = total {
            granted.insert(key, t);
        }
    }
    (granted, stopped)
}

/// The value of an unlabelled sample in a metrics text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

fn triggers(m: &Message) -> Vec<i32> {
    m.avps()
        .filter_map(|a| a.ok())
        .filter(|a| a.is(avp::EVENT_TRIGGER))
        .map(|a| a.as_i32().expect("enum"))
        .collect()
}

fn used(p: &Pcrf, acc: &str) -> u64 {
    let (st, v) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(st, 200, "{v}");
    v["accumulators"][acc]["used"]
        .as_u64()
        .unwrap_or_else(|| panic!("no {acc} in {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quota_throttles_in_the_answering_cca_and_top_up_restores_by_rar() {
    let p = start();
    p.provision(IMSI, r#"{"plan":"basic","quotas":{"monthly":250000000}}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sid = "pgw.test.local;u;1";

    let cca = pcef.ccr_i(sid, IMSI).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(grants(&cca).0, BTreeMap::from([("total".into(), 100 * MB)]));
    assert!(triggers(&cca).contains(&33), "USAGE_REPORT with the grant");

    // 100 MB used: re-granted a full chunk (150 MB remain).
    let cca = pcef
        .ccr_u(sid, 1, |b| usage_report(b, "total", 100 * MB))
        .await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(grants(&cca).0["total"], 100 * MB);
    // 200 MB used: only what remains is granted.
    let cca = pcef
        .ccr_u(sid, 2, |b| usage_report(b, "total", 100 * MB))
        .await;
    assert_eq!(grants(&cca).0["total"], 50 * MB);
    assert_eq!(rule_changes(&cca), (vec![], vec![]));
    // The shipped policy holds its decision (`valid`) while the monthly
    // usage stays below 80% of the allowance (its quota-80 notice),
    // whatever rules are installed: the first report (100 of 250 MB)
    // reused the CCR-I's decision; this one reached 80% (200 of 250 MB),
    // so the script ran again rather than reusing it.
    assert_eq!(
        metric(&p.metrics(), "pcrf_policy_skips_within_bounds_total"),
        1.0
    );

    // 260 MB: the allowance is used up; the same CCA throttles.
    let cca = pcef
        .ccr_u(sid, 3, |b| usage_report(b, "total", 60 * MB))
        .await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(
        rule_changes(&cca),
        (vec!["throttled".to_string()], vec!["internet".to_string()])
    );
    assert_eq!(apn_ambr(&cca), Some((256_000, 1_000_000)));
    assert_eq!(
        grants(&cca).0["total"],
        100 * MB,
        "monitoring goes on after exhaustion so usage is still counted"
    );
    assert_eq!(used(&p, "monthly"), 260 * MB);
    let (_, v) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(v["accumulators"]["monthly"]["exhausted"], true);
    assert_eq!(v["last_reports"]["total"]["used"]["total"], 60 * MB);

    // A top-up lifts the throttle at once, by RAR.
    let (st, v) = p.http(
        "POST",
        &format!("/v1/subscribers/{IMSI}/topup"),
        Some(r#"{"accumulator":"monthly","octets":1000000000}"#),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (v["sessions"].as_u64(), v["rar_sent"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(v["usage"]["accumulators"]["monthly"]["remaining"], 990 * MB);
    let rars = pcef.wait_rars(1).await;
    assert_eq!(rars.len(), 1);
    assert_eq!(
        rule_changes(&rars[0]),
        (vec!["internet".to_string()], vec!["throttled".to_string()])
    );
    assert_eq!(apn_ambr(&rars[0]), Some((5_000_000, 20_000_000)));

    // Used up again, then a reset restores it too, asking for a report.
    let cca = pcef
        .ccr_u(sid, 4, |b| usage_report(b, "total", 1000 * MB))
        .await;
    assert_eq!(rule_changes(&cca).0, vec!["throttled".to_string()]);
    let (st, v) = p.http(
        "POST",
        &format!("/v1/subscribers/{IMSI}/usage/reset"),
        Some(r#"{"accumulator":"monthly"}"#),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["usage"]["accumulators"]["monthly"]["used"], 0);
    let rars = pcef.wait_rars(2).await;
    assert_eq!(rule_changes(&rars[1]).0, vec!["internet".to_string()]);
    let asks_report = rars[1].avps().filter_map(|a| a.ok()).any(|a| {
        a.is(avp::USAGE_MONITORING_INFORMATION)
            && a.grouped()
                .find(avp::USAGE_MONITORING_REPORT)
                .ok()
                .flatten()
                .is_some()
    });
    assert!(
        asks_report,
        "a reset asks the PCEF for its unreported usage"
    );

    // Bad input on the API.
    let (st, _) = p.http(
        "POST",
        &format!("/v1/subscribers/{IMSI}/topup"),
        Some(r#"{"accumulator":"nope","octets":1}"#),
    );
    assert_eq!(st, 400);
    let (st, _) = p.http(
        "POST",
        "/v1/subscribers/001010000000999/topup",
        Some(r#"{"accumulator":"monthly","octets":1}"#),
    );
    assert_eq!(st, 404);
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_report_counts_once_across_retransmission_and_kill_9() {
    let mut p = start();
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sid = "pgw.test.local;u;2";
    assert_eq!(result_of(&pcef.ccr_i(sid, IMSI).await), 2001);
    let cca = pcef
        .ccr_u(sid, 1, |b| usage_report(b, "total", 7 * MB))
        .await;
    assert_eq!(result_of(&cca), 2001);

    // The same CCR-U again (T flag): answered again, not counted again.
    let again = pcef
        .ccr_again(sid, 2, 1, |b| usage_report(b, "total", 7 * MB))
        .await;
    assert_eq!(&again.bytes()[20..], &cca.bytes()[20..]);
    assert_eq!(used(&p, "monthly"), 7 * MB);
    pcef.close().await;

    // The PCRF dies after answering; the PCEF, which never got the answer,
    // retransmits the same report to the restarted node.
    p.restart();
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let replay = pcef
        .ccr_u(sid, 1, |b| usage_report(b, "total", 7 * MB))
        .await;
    assert_eq!(result_of(&replay), 2001);
    assert_eq!(&replay.bytes()[20..], &cca.bytes()[20..]);
    assert_eq!(
        used(&p, "monthly"),
        7 * MB,
        "not counted twice:\n{}",
        p.log()
    );

    // The next report, and the final one in CCR-T, count.
    pcef.ccr_u(sid, 2, |b| usage_report(b, "total", 3 * MB))
        .await;
    let cct = pcef
        .ccr(sid, enums::CC_REQUEST_TYPE::TERMINATION_REQUEST, 3, |b| {
            b.i32(avp::TERMINATION_CAUSE, 1);
            report(b, "total", 2 * MB);
        })
        .await;
    assert_eq!(result_of(&cct), 2001);
    assert_eq!(used(&p, "monthly"), 12 * MB);
    pcef.close().await;
    p.restart();
    assert_eq!(used(&p, "monthly"), 12 * MB, "durable across kill -9");

    // The CCR-T's answer was lost with the node: its retransmission is
    // answered from the closed session in the store, not 5002, and the
    // final report is not counted again.
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let again = pcef
        .ccr_again(sid, 3, 3, |b| {
            b.i32(avp::TERMINATION_CAUSE, 1);
            report(b, "total", 2 * MB);
        })
        .await;
    assert_eq!(result_of(&again), 2001, "{}", p.log());
    assert_eq!(&again.bytes()[20..], &cct.bytes()[20..]);
    assert_eq!(used(&p, "monthly"), 12 * MB);
    // Without the T flag an unknown session stays 5002 (no store read).
    assert_eq!(
        result_of(&pcef.ccr_u("pgw.test.local;nope", 1, |_| {}).await),
        5002
    );
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_keys_sum_into_one_accumulator_and_unknown_keys_are_counted_apart() {
    let p = start();
    p.provision(IMSI, r#"{"plan":"basic","services":["vip"]}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sid = "pgw.test.local;u;3";
    let cca = pcef.ccr_i(sid, IMSI).await;
    assert_eq!(
        grants(&cca).0,
        BTreeMap::from([("total".into(), 100 * MB), ("vip".into(), 50 * MB)])
    );
    let cca = pcef
        .ccr_u(sid, 1, |b| {
            usage_report(b, "total", 30 * MB);
            report(b, "vip", 20 * MB);
            report(b, "mystery", 5 * MB);
        })
        .await;
    assert_eq!(result_of(&cca), 2001, "an unknown key is answered normally");
    assert_eq!(used(&p, "monthly"), 50 * MB);
    assert_eq!(used(&p, "vip-video"), 20 * MB);
    let (_, v) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(v["unknown_key_reports"], 1);
    assert!(p
        .metrics()
        .contains("pcrf_usage_unknown_key_reports_total 1"));

    // The VIP service is dropped: its key is stopped at the PCEF.
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let rars = pcef.wait_rars(1).await;
    assert_eq!(grants(&rars[0]).1, vec!["vip".to_string()]);
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absurd_volumes_are_refused_with_failed_avp_and_count_nothing() {
    let p = start();
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let sid = "pgw.test.local;u;4";
    pcef.ccr_i(sid, IMSI).await;
    // A "negative" volume: the top bit set, as a PCEF writing -1 would send.
    let cca = pcef
        .ccr_u(sid, 1, |b| usage_report(b, "total", u64::MAX))
        .await;
    assert_eq!(result_of(&cca), 5004);
    let failed = cca
        .find(avp::FAILED_AVP)
        .expect("avps")
        .expect("Failed-AVP");
    assert!(failed
        .grouped()
        .filter_map(|a| a.ok())
        .any(|a| a.is(avp::CC_TOTAL_OCTETS)
            || a.is(avp::USAGE_MONITORING_INFORMATION)
            || a.is(avp::USED_SERVICE_UNIT)));
    assert_eq!(used(&p, "monthly"), 0);
    // The session goes on.
    let cca = pcef.ccr_u(sid, 2, |b| usage_report(b, "total", MB)).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(used(&p, "monthly"), MB);
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn congestion_pushes_are_spread_over_the_window() {
    let p = start();
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let n = 20;
    for i in 0..n {
        let cca = pcef.ccr_i(&format!("pgw.test.local;c;{i}"), IMSI).await;
        assert_eq!(result_of(&cca), 2001);
    }
    let started = Instant::now();
    let (st, v) = p.http(
        "PUT",
        "/v1/cells/00f11000000101/congestion",
        Some(r#"{"congestion":2}"#),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["sessions"], n);
    // spread_secs = 2: the first RAR goes at once, the last about 1.9 s later.
    pcef.wait_rars(n).await;
    let times: Vec<Instant> = pcef
        .handler
        .rars
        .lock()
        .expect("lock")
        .iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(times.len(), n, "every session in the cell re-decided");
    let first = times.iter().min().expect("first").duration_since(started);
    let span = times
        .iter()
        .max()
        .expect("last")
        .duration_since(*times.iter().min().expect("first"));
    assert!(
        first < Duration::from_millis(900),
        "the first RAR leaves at once ({first:?})"
    );
    assert!(
        span >= Duration::from_millis(1500) && span < Duration::from_secs(5),
        "RARs spread over the 2 s window, not sent at once ({span:?})"
    );
    for r in pcef.rars() {
        assert_eq!(apn_ambr(&r), Some((5_000_000, 10_000_000)));
    }
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usage_file_change_that_orphans_grants_is_refused_a_harmless_one_applies() {
    let (p, path) = Pcrf::start_with_usage_file(USAGE_FILE, "");
    p.provision(IMSI, r#"{"plan":"basic","services":["vip"]}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let cca = pcef.ccr_i("pgw.test.local;u;5", IMSI).await;
    assert!(grants(&cca).0.contains_key("vip"));
    let checksum = |p: &Pcrf| {
        let (_, v) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
        v["usage_config"].as_str().expect("checksum").to_string()
    };
    let before = checksum(&p);

    // Dropping the key "vip" while a session holds a grant for it: refused.
    let orphaning = USAGE_FILE
        .replace("[keys.vip]\nlevel = \"rule\"\nchunk = \"50 MB\"\n", "")
        .replace("sources = [\"total\", \"vip\"]", "sources = [\"total\"]")
        .replace(
            "[accumulators.vip-video]\nreset = \"monthly\"\nsources = [\"vip\"]\n",
            "",
        );
    assert!(!orphaning.contains("vip"), "{orphaning}");
    std::fs::write(&path, &orphaning).expect("write");
    let refusal = p
        .wait_log("usage file reload refused", 0, Duration::from_secs(10))
        .await;
    assert!(
        refusal.contains("vip"),
        "the message names the key: {refusal}"
    );
    assert_eq!(checksum(&p), before, "the running file stays");

    // A harmless change (a bigger plan quota) applies.
    std::fs::write(
        &path,
        USAGE_FILE.replace("monthly = \"10 GB\"", "monthly = \"20 GB\""),
    )
    .expect("write");
    eventually_async(
        p.waiting_for("the usage file to be reloaded"),
        Duration::from_secs(10),
        || (checksum(&p) != before).then_some(()),
    )
    .await;
    let (_, v) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(v["accumulators"]["monthly"]["quota"], 20_000_000_000_u64);
    pcef.close().await;
}

/// `USAGE_FILE` without the key "vip" (and what it fed).
pub(crate) fn without_vip() -> String {
    let text = USAGE_FILE
        .replace("[keys.vip]\nlevel = \"rule\"\nchunk = \"50 MB\"\n", "")
        .replace("sources = [\"total\", \"vip\"]", "sources = [\"total\"]")
        .replace(
            "[accumulators.vip-video]\nreset = \"monthly\"\nsources = [\"vip\"]\n",
            "",
        );
    assert!(!text.contains("vip"), "{text}");
    text
}

fn put_usage(p: &Pcrf, text: &str, comment: &str) -> (u16, serde_json::Value) {
    let body = serde_json::json!({ "source": text, "comment": comment }).to_string();
    p.http("PUT", "/v1/usage", Some(&body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_file_versions_are_deployed_checked_against_grants_listed_and_rolled_back() {
    let (mut p, path) = Pcrf::start_with_usage_file(USAGE_FILE, "");
    let (st, page) = p.http("GET", "/v1/usage/versions", None);
    assert_eq!(st, 200, "{page}");
    assert_eq!(page["serving"], 1, "the file is version 1: {page}");
    assert_eq!(page["versions"][0]["by"], "file");

    // A bigger plan: version 2, in force at once, written to the file.
    let bigger = USAGE_FILE.replace("monthly = \"10 GB\"", "monthly = \"20 GB\"");
    let (st, d) = put_usage(&p, &bigger, "basic gets 20 GB");
    assert_eq!(st, 200, "{d}");
    assert_eq!(
        (
            d["deployed"]["id"].as_i64(),
            d["deployed"]["parent"].as_i64()
        ),
        (Some(2), Some(1))
    );
    assert_eq!(d["deployed"]["comment"], "basic gets 20 GB");
    assert_eq!(std::fs::read_to_string(&path).expect("file"), bigger);
    p.provision(IMSI, r#"{"plan":"basic","services":["vip"]}"#);
    let (_, usage) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(
        usage["accumulators"]["monthly"]["quota"],
        20_000_000_000_u64
    );
    assert_eq!(
        usage["usage_config"], d["version"],
        "the checksum is the version's hash"
    );

    // A session holds a grant for "vip": dropping it is refused, recorded
    // nowhere, and the file on disk is left alone.
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let cca = pcef.ccr_i("pgw.test.local;versions;1", IMSI).await;
    assert!(grants(&cca).0.contains_key("vip"));
    let (st, e) = put_usage(&p, &without_vip(), "drop vip");
    assert_eq!(st, 422, "{e}");
    assert!(
        e["error"]
            .as_str()
            .is_some_and(|m| m.contains("\"vip\"") && m.contains("1 session holds a grant")),
        "{e}"
    );
    let (st, e) = put_usage(&p, "[keys.total\n", "broken");
    assert_eq!(st, 422, "{e}");
    assert_eq!(std::fs::read_to_string(&path).expect("file"), bigger);
    let (_, page) = p.http("GET", "/v1/usage/versions", None);
    assert_eq!(page["versions"].as_array().map(Vec::len), Some(2), "{page}");

    // The session reports 5 MB of "vip" (counted in vip-video), then ends;
    // once it is gone, the same file is taken.
    let cca = pcef
        .ccr_u("pgw.test.local;versions;1", 1, |b| {
            usage_report(b, "vip", 5 * MB)
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    let cca = pcef.ccr_t("pgw.test.local;versions;1", 2).await;
    assert_eq!(result_of(&cca), 2001);
    let vip_video = |p: &Pcrf| {
        let (_, v) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
        v["accumulators"]["vip-video"]["used"].as_u64()
    };
    assert_eq!(vip_video(&p), Some(5 * MB));
    let (st, d) = put_usage(&p, &without_vip(), "drop vip");
    assert_eq!(st, 200, "{d}");
    assert_eq!(d["deployed"]["id"], 3);
    assert_eq!(vip_video(&p), None, "no version-3 accumulator vip-video");
    let (st, diff) = p
        .try_http("GET", "/v1/usage/versions/2/diff/3", None)
        .expect("diff");
    assert_eq!(st, 200);
    assert!(
        diff.contains("-[keys.vip]") && diff.contains("+sources = [\"total\"]"),
        "{diff}"
    );
    let (st, v) = p.http("GET", "/v1/usage/versions/2", None);
    assert_eq!(st, 200);
    assert_eq!(v["source"], bigger.as_str());
    assert_eq!(p.http("GET", "/v1/usage/versions/9", None).0, 404);

    // Rolled back to version 2 as version 4; the history survives a restart.
    let (st, d) = p.http("POST", "/v1/usage/rollback/2", None);
    assert_eq!(st, 200, "{d}");
    assert_eq!(
        (
            d["deployed"]["id"].as_i64(),
            d["deployed"]["comment"].as_str()
        ),
        (Some(4), Some("rollback to version 2"))
    );
    assert_eq!(std::fs::read_to_string(&path).expect("file"), bigger);
    // What vip-video had counted was kept in the stored usage while no
    // version counted it, and counts again.
    assert_eq!(vip_video(&p), Some(5 * MB));
    pcef.close().await;
    p.restart();
    let (_, page) = p.http("GET", "/v1/usage/versions", None);
    assert_eq!(page["serving"], 4, "{page}");
    assert_eq!(page["versions"].as_array().map(Vec::len), Some(4), "{page}");
    let (_, cluster) = p.http("GET", "/v1/cluster", None);
    assert_eq!(cluster["nodes"][0]["usage_version"], 4, "{cluster}");
    assert!(p.metrics().contains("pcrf_usage_version 4"));
    assert_eq!(vip_video(&p), Some(5 * MB), "and after a restart");
}
