//! Overload control against the real server: a burst is queued, not shed
//! (thousands of CCR-Ts sent at once, as a load generator's end of run or a
//! gateway closing its sessions, all get 2001), while requests that keep
//! waiting past the queueing-delay target for a whole interval are answered
//! 3004 with a DOIC report (RFC 7683) to the PCEF that advertised DOIC.

use crate::support;

use diameter::dict::{avp, enums};
use std::sync::Arc;
use support::*;
use tokio::task::JoinSet;

/// A server whose unknown subscribers get the default policy, so sessions
/// open without provisioning each subscriber.
fn start(extra: &str) -> Pcrf {
    let mut p = Pcrf::start(extra);
    let cfg = std::fs::read_to_string(&p.config).expect("config");
    assert!(cfg.contains("[policy]\n"), "no [policy] section:\n{cfg}");
    std::fs::write(
        &p.config,
        cfg.replace(
            "[policy]\n",
            "[policy]\nunknown_subscriber = \"default_policy\"\n",
        ),
    )
    .expect("config");
    p.restart();
    p
}

fn session(i: u32) -> String {
    format!("pgw.test.local;burst;{i}")
}

fn imsi(i: u32) -> String {
    format!("00101{i:010}")
}

/// Sends one request per `i` in `range` at once (none waits for another's
/// answer) and returns each answer's Result-Code and whether it carried an
/// OC-OLR.
async fn all_at_once(
    pcef: &Arc<Pcef>,
    range: std::ops::Range<u32>,
    request_type: i32,
    doic: bool,
) -> Vec<(u32, bool)> {
    let mut set = JoinSet::new();
    for i in range {
        let pcef = pcef.clone();
        set.spawn(async move {
            let number = u32::from(request_type != enums::CC_REQUEST_TYPE::INITIAL_REQUEST);
            let cca = pcef
                .ccr(&session(i), request_type, number, |b| {
                    if request_type == enums::CC_REQUEST_TYPE::INITIAL_REQUEST {
                        initial_avps(b, &imsi(i));
                    } else {
                        b.i32(avp::TERMINATION_CAUSE, 1);
                    }
                    if doic {
                        b.group(avp::OC_SUPPORTED_FEATURES, |g| {
                            g.u64(avp::OC_FEATURE_VECTOR, 1);
                        });
                    }
                })
                .await;
            let olr = cca.find(avp::OC_OLR).expect("avps").is_some();
            (result_of(&cca), olr)
        });
    }
    let mut out = Vec::with_capacity(set.len());
    while let Some(r) = set.join_next().await {
        out.push(r.expect("task"));
    }
    out
}

fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name_and_labels} in\n{text}"))
}

/// More CCR-Ts at once than the old count bound (2,000 in flight node-wide,
/// 1,000 per connection) let through: every one is answered 2001. The
/// interval is 10 s, the PCEF's answer timeout here: the test is about a
/// burst the node drains within its interval, and a debug build on a
/// shared CI machine can take seconds to drain 3,000 CCR-Ts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_ccr_t_is_queued_and_all_answered_2001() {
    const N: u32 = 3_000;
    let p = start("[overload]\ninterval_ms = 10000\n");
    let pcef = Arc::new(Pcef::connect(p.diameter, "pgw.test.local").await);
    // Open the sessions in steps, so that only the CCR-Ts come as one burst.
    for step in (0..N).step_by(250) {
        let codes = all_at_once(
            &pcef,
            step..(step + 250).min(N),
            enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
            false,
        )
        .await;
        assert!(
            codes.iter().all(|(c, _)| *c == 2001),
            "CCR-I: {:?}",
            codes
                .iter()
                .filter(|(c, _)| *c != 2001)
                .take(5)
                .collect::<Vec<_>>()
        );
    }
    let codes = all_at_once(
        &pcef,
        0..N,
        enums::CC_REQUEST_TYPE::TERMINATION_REQUEST,
        true,
    )
    .await;
    let not_2001: Vec<_> = codes.iter().filter(|(c, _)| *c != 2001).collect();
    assert!(
        not_2001.is_empty(),
        "{} of {N} CCR-Ts not answered 2001, e.g. {:?}\n{}",
        not_2001.len(),
        not_2001.iter().take(5).collect::<Vec<_>>(),
        p.metrics()
            .lines()
            .filter(|l| l.starts_with("pcrf_overload") || l.starts_with("pcrf_queue"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        codes.iter().all(|(_, olr)| !olr),
        "no DOIC report for a burst"
    );
    let m = p.metrics();
    for class in ["new", "existing"] {
        for cause in ["queue_delay", "in_flight_cap"] {
            let series = format!("pcrf_overload_shed_total{{class=\"{class}\",cause=\"{cause}\"}}");
            assert_eq!(metric(&m, &series), 0.0, "{series}");
        }
    }
    assert_eq!(metric(&m, "pcrf_gx_in_flight "), 0.0);
    pcef_close(pcef).await;
}

/// With a 1 ms target over 10 ms intervals, 4,000 CCR-Is at once keep the
/// queue from emptying for many intervals: the ones that waited too long
/// are answered 3004 with an OC-OLR, counted by cause, and the others 2001.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_stays_is_shed_with_3004_and_a_doic_report() {
    const N: u32 = 4_000;
    let p = start("[overload]\ntarget_delay_ms = 1\ninterval_ms = 10\n");
    let pcef = Arc::new(Pcef::connect(p.diameter, "pgw.test.local").await);
    let codes = all_at_once(&pcef, 0..N, enums::CC_REQUEST_TYPE::INITIAL_REQUEST, true).await;
    let shed: Vec<_> = codes.iter().filter(|(c, _)| *c == 3004).collect();
    let served = codes.iter().filter(|(c, _)| *c == 2001).count();
    assert!(!shed.is_empty(), "nothing shed: {served} answered 2001");
    assert!(served > 0, "nothing served");
    assert_eq!(shed.len() + served, N as usize, "only 2001 and 3004");
    assert!(
        shed.iter().all(|(_, olr)| *olr),
        "every 3004 carries an OC-OLR"
    );
    let m = p.metrics();
    assert_eq!(
        metric(
            &m,
            "pcrf_overload_shed_total{class=\"new\",cause=\"queue_delay\"}"
        ),
        shed.len() as f64
    );
    // The peers' DOIC state shows the report: one was sent within its
    // 10 s validity (ended or not, it is shown until then).
    assert_eq!(
        metric(&m, "pcrf_peer_doic_supported{peer=\"pgw.test.local\"}"),
        1.0
    );
    assert!(metric(&m, "pcrf_peer_doic_sequence{peer=\"pgw.test.local\"}") > 0.0);
    assert!(
        metric(
            &m,
            "pcrf_peer_doic_validity_seconds{peer=\"pgw.test.local\"}"
        ) <= 10.0
    );
    pcef_close(pcef).await;
}

async fn pcef_close(pcef: Arc<Pcef>) {
    if let Ok(p) = Arc::try_unwrap(pcef) {
        p.close().await;
    }
}
