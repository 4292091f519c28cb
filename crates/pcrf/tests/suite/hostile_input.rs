//! Hostile input from a connected PCEF, against the real binary over TCP:
//! a report naming tens of thousands of rules or Monitoring-Keys costs
//! bounded work, log output and record size; a Session-Id or rule name
//! carrying a forged log line and terminal escape codes is written
//! escaped; oversized session fields are refused naming the AVP and
//! nothing of them is kept.

use crate::support;

use diameter::codec::{Message, MessageBuilder};
use diameter::dict::{avp, enums};
use std::time::{Duration, Instant};
use support::*;

const IMSI: &str = "001010000000001";
const OTHER_IMSI: &str = "001010000000002";

/// The second gateway, whose CCR-Is must not wait for the first's reports.
const SECOND_PEER: &str =
    "\n[[peers]]\norigin_host = \"pgw2.test.local\"\naddresses = [\"127.0.0.1\"]\n";

/// A Charging-Rule-Report marking `n` distinct rules INACTIVE.
fn rule_report(b: &mut MessageBuilder<'_>, n: usize) {
    b.group(avp::CHARGING_RULE_REPORT, |g| {
        for i in 0..n {
            g.str(avp::CHARGING_RULE_NAME, &format!("r{i:05}"));
        }
        g.i32(avp::PCC_RULE_STATUS, enums::PCC_RULE_STATUS::INACTIVE)
            .i32(avp::RULE_FAILURE_CODE, 4);
    });
}

/// The value of a counter in the /metrics text.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics"))
}

fn log_len(p: &Pcrf) -> usize {
    p.log().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_30000_rule_report_is_capped_summed_up_and_does_not_hold_up_another_peer() {
    let p = Pcrf::start_with_usage(SECOND_PEER);
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    p.provision(OTHER_IMSI, r#"{"msisdn":"491700000002","plan":"basic"}"#);
    let hostile = Pcef::connect(p.diameter, "pgw.test.local").await;
    let other = Pcef::connect(p.diameter, "pgw2.test.local").await;
    let sid = "pgw.test.local;reports;1";
    assert_eq!(result_of(&hostile.ccr_i(sid, IMSI).await), 2001);
    let log_before = log_len(&p);

    // Three CCR-Us of 30,000 rules each, while the other gateway opens
    // sessions.
    let reports = async {
        for n in 1..=3u32 {
            let started = Instant::now();
            let cca = hostile.ccr_u(sid, n, |b| rule_report(b, 30_000)).await;
            assert_eq!(result_of(&cca), 2001);
            eprintln!("30,000-rule CCR-U {n} answered in {:?}", started.elapsed());
        }
    };
    let others = async {
        let mut slowest = Duration::ZERO;
        for i in 0..20 {
            let started = Instant::now();
            let cca = other
                .ccr_i(&format!("pgw2.test.local;other;{i}"), OTHER_IMSI)
                .await;
            slowest = slowest.max(started.elapsed());
            assert_eq!(result_of(&cca), 2001);
        }
        slowest
    };
    let ((), slowest) = tokio::join!(reports, others);
    eprintln!("the other peer's slowest CCR-I: {slowest:?}");

    // A fourth report of unknown Monitoring-Keys, 10,000 of them.
    let cca = hostile
        .ccr_u(sid, 4, |b| {
            b.i32(avp::EVENT_TRIGGER, 33);
            for i in 0..10_000 {
                b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
                    g.bytes(avp::MONITORING_KEY, format!("k{i:05}").as_bytes())
                        .group(avp::USED_SERVICE_UNIT, |u| {
                            u.u64(avp::CC_TOTAL_OCTETS, 1);
                        });
                });
            }
        })
        .await;
    assert_eq!(result_of(&cca), 2001);

    // Stored: at most the cap of failures, the newest.
    let (st, session) = p.http("GET", &format!("/v1/sessions/{sid}"), None);
    assert_eq!(st, 200, "{session}");
    eprintln!(
        "session record as JSON: {} bytes",
        session.to_string().len()
    );
    let failures = session["rule_failures"].as_array().expect("rule_failures");
    assert_eq!(failures.len(), 64, "{}", failures.len());
    // The first 256 of each report are applied, the newest 64 kept.
    assert_eq!(failures[63]["rule"], "r00255");

    // Counted, not logged one by one: a few lines per request, not
    // 30,000 (7.6 MB each before).
    let m = p.metrics();
    assert_eq!(
        counter(&m, "pcrf_rule_reports_over_cap_total"),
        3 * (30_000 - 256)
    );
    assert_eq!(counter(&m, "pcrf_usage_unknown_key_reports_total"), 10_000);
    assert_eq!(
        counter(&m, "pcrf_usage_unknown_key_reports_over_cap_total"),
        10_000 - 16
    );
    let log = p.log();
    let written = log.len() - log_before;
    eprintln!("log written by the four requests: {written} bytes");
    assert!(
        written < 16 * 1024,
        "{written} bytes of log:\n{}",
        &log[log_before..]
    );
    assert!(
        log.contains("30000 rule reports, 29744 over the cap of 256 per request"),
        "{}",
        &log[log_before..]
    );
    assert!(
        log.contains("10000 usage reports for Monitoring-Keys the usage file does not know"),
        "{}",
        &log[log_before..]
    );
    hostile.close().await;
    other.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_log_line_in_a_session_id_or_rule_name_is_written_escaped() {
    let p = Pcrf::start("");
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let forged = "\n2026-11-28T04:00:00.000Z ERROR pcrf: forged\x1b[31m";
    let sid = format!("pgw.test.local;inject;1{forged}");
    assert_eq!(result_of(&pcef.ccr_i(&sid, IMSI).await), 2001);
    let cca = pcef
        .ccr_u(&sid, 1, |b| {
            b.group(avp::CHARGING_RULE_REPORT, |g| {
                g.str(avp::CHARGING_RULE_NAME, &format!("video{forged}"))
                    .i32(avp::PCC_RULE_STATUS, enums::PCC_RULE_STATUS::INACTIVE);
            });
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    pcef.close().await;
    let log = p.log();
    assert!(
        log.lines().all(
            |l| !l.contains("ERROR pcrf: forged") || !l.starts_with("2026-11-28T04:00:00.000Z")
        ),
        "{log}"
    );
    assert!(!log.contains('\x1b'), "{log:?}");
    let escaped = "\\n2026-11-28T04:00:00.000Z ERROR pcrf: forged\\u{1b}[31m";
    let rule_line = log
        .lines()
        .find(|l| l.contains("PCEF reported a rule failure"))
        .unwrap_or_else(|| panic!("no rule failure line:\n{log}"));
    assert!(
        rule_line.contains(&format!("pgw.test.local;inject;1{escaped}")),
        "{rule_line}"
    );
    assert!(
        rule_line.contains(&format!("video{escaped}")),
        "{rule_line}"
    );
}

/// A CCR-I as `initial_avps` sends it with `field` added (a second
/// Called-Station-Id or location is not what is tested: each oversized
/// field replaces the normal one).
async fn ccr_i_with(
    pcef: &Pcef,
    sid: &str,
    field: impl FnOnce(&mut MessageBuilder<'_>),
) -> Message {
    pcef.ccr(sid, enums::CC_REQUEST_TYPE::INITIAL_REQUEST, 0, |b| {
        b.group(avp::SUBSCRIPTION_ID, |g| {
            g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                .str(avp::SUBSCRIPTION_ID_DATA, IMSI);
        })
        .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 9])
        .i32(avp::IP_CAN_TYPE, 5)
        .i32(avp::RAT_TYPE, 1004);
        field(b);
    })
    .await
}

/// What one case adds to the CCR-I: the oversized field.
type AddField = Box<dyn FnOnce(&mut MessageBuilder<'_>) + Send>;

/// The code of the AVP inside an answer's Failed-AVP.
fn failed_avp_code(m: &Message) -> u32 {
    let failed = m.find(avp::FAILED_AVP).expect("avps").expect("Failed-AVP");
    let inner = failed
        .grouped()
        .next()
        .expect("one AVP")
        .expect("well-formed");
    inner.code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_session_fields_are_refused_naming_the_avp_and_not_stored() {
    let p = Pcrf::start("");
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let big_sid = format!("pgw.test.local;big;{}", "s".repeat(200_000));
    let location = vec![0x82u8; 400_000];
    let apn = "a".repeat(100_000);
    let cases: Vec<(String, AddField, u32)> = vec![
        (big_sid, Box::new(|_| {}), 263),
        (
            "pgw.test.local;big;location".into(),
            Box::new(move |b| {
                b.bytes(avp::_3GPP_USER_LOCATION_INFO, &location);
            }),
            22,
        ),
        (
            "pgw.test.local;big;apn".into(),
            Box::new(move |b| {
                b.str(avp::CALLED_STATION_ID, &apn);
            }),
            30,
        ),
        (
            "pgw.test.local;big;imsi".into(),
            Box::new(|b| {
                b.group(avp::SUBSCRIPTION_ID, |g| {
                    g.i32(avp::SUBSCRIPTION_ID_TYPE, 0)
                        .str(avp::SUBSCRIPTION_ID_DATA, "4917000000000001");
                });
            }),
            444,
        ),
    ];
    for (sid, field, code) in cases {
        let cca = ccr_i_with(&pcef, &sid, field).await;
        assert_eq!(result_of(&cca), 5014, "{sid:.40}");
        assert_eq!(failed_avp_code(&cca), code, "{sid:.40}");
        // The answer does not echo the oversized value back.
        if code != 263 {
            assert!(cca.len() < 2048, "{} bytes", cca.len());
        }
    }
    let (st, sessions) = p.http("GET", "/v1/sessions", None);
    assert_eq!(st, 200, "{sessions}");
    assert_eq!(
        sessions["sessions"].as_array().map(Vec::len),
        Some(0),
        "{sessions}"
    );
    // At the limits, the same request is served.
    let cca = ccr_i_with(&pcef, "pgw.test.local;at-the-limits;1", |b| {
        b.str(avp::CALLED_STATION_ID, &"a".repeat(100))
            .bytes(avp::_3GPP_USER_LOCATION_INFO, &[0x82; 64]);
    })
    .await;
    assert_eq!(result_of(&cca), 2001);
    pcef.close().await;
}
