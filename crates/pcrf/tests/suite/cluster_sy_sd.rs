//! Two `pcrf serve` nodes on one PostgreSQL database behind the routing
//! agent (freeDiameter running deploy/cluster/freediameter/), for what
//! crosses nodes beyond Gx: an SNR from the OCS at the node that does not
//! hold the subscriber's session is applied there and its RAR reaches the
//! PCEF, and the node holding the session afterwards decides with those
//! statuses; SNRs at one node racing CCR-Us at the other are handled again
//! after their write conflicts and the status last acknowledged is the one
//! stored; the STR waits for the subscriber's last open session of the
//! cluster; an Sd CCR on a node whose copy of the Gx session another node
//! wrote since is handled again on a fresh copy (not answered 5012);
//! `GET /v1/sessions/{id}` shows what the other node wrote; and
//! `GET /v1/cluster` counts open sessions only (a closed one leaves the
//! count).
//!
//! The PCEF reaches the nodes only through the agent and names the node a
//! request is for with Destination-Host; the RARs come back through the
//! agent, and the test tells which node sent each by its Origin-Host. The
//! OCS is a peer the nodes connect to directly, as in a real deployment
//! (the PCRF is the Sy client and each node opens its own connection to
//! the OCS); the emulated OCS sends an SNR over the connection of the node
//! the test picks. The TDF is support's `Tdf`, the OCS support's `Ocs`.
//! The PCEF, the TDF and the OCS are real Diameter peers built with the
//! diameter crate. Needs freeDiameterd (scripts/install-test-deps.sh) and
//! a real server: PCRF_TEST_DATABASE_URL (scripts/test.sh sets it up).

use crate::support;

use diameter::codec::{Message, MessageBuilder};
use diameter::dict::{avp, cmd, enums};
use std::sync::Arc;
use std::time::Duration;
use support::*;

const IMSI: &str = "001010000000001";
const COUNTER: &str = "monthly-data";
const PGW: &str = "pgw1.pgw.example.net";
/// The OCS's Origin-Host and realm.
const OCS: &str = "ocs1.ocs.example.net";
const OCS_REALM: &str = "ocs.example.net";
/// The two nodes: A and B.
const A: &str = NODES[0];
const B: &str = NODES[1];

/// Two nodes behind the agent, `extra` in both configurations, and the
/// PCEF connected to the agent.
async fn two_nodes(extra: &str) -> (Cluster, Gateway) {
    let c = Cluster::start(2, &format!("{FAST_HEARTBEAT}{extra}")).await;
    let pcef = c.pcef(PGW).await;
    (c, pcef)
}

/// Provisions `profile` for IMSI through `at`, and waits for `other` to
/// have it (through the provisioning feed).
async fn provision(at: &Pcrf, other: &Pcrf, profile: &str) {
    at.provision(IMSI, profile);
    eventually_async(
        "the other node has the profile",
        Duration::from_secs(10),
        || {
            (other
                .http("GET", &format!("/v1/subscribers/{IMSI}"), None)
                .0
                == 200)
                .then_some(())
        },
    )
    .await;
}

fn session(p: &Pcrf, id: &str) -> serde_json::Value {
    let (st, v) = p.http("GET", &format!("/v1/sessions/{id}"), None);
    assert_eq!(st, 200, "{v}");
    v
}

/// Rules a message installs, without the rule base every session gets.
fn installed(m: &Message) -> Vec<String> {
    let mut v = rule_changes(m).0;
    v.retain(|r| r != "consumer");
    v
}

/// The RARs the PCEF got through the agent, each with the node that sent
/// it (its Origin-Host), in the order they came.
fn rars(pcef: &Gateway) -> Vec<(String, Message)> {
    pcef.rars()
        .into_iter()
        .map(|r| (origin_host(&r), r))
        .collect()
}

/// The OCS, two nodes with it in their `[sy]` (both connected to it),
/// the PCEF, and IMSI provisioned.
async fn with_ocs() -> (Ocs, Cluster, Gateway) {
    let ocs = Ocs::start(OCS, OCS_REALM, &[(COUNTER, "valid")]).await;
    let (c, pcef) = two_nodes(&sy_section(&[&ocs], 2000)).await;
    ocs.peer(A).await;
    ocs.peer(B).await;
    provision(
        &c.nodes[0],
        &c.nodes[1],
        r#"{"msisdn":"491700000001","plan":"basic"}"#,
    )
    .await;
    (ocs, c, pcef)
}

/// A CCR-U's AVPs reporting that the UE moved to cell `cell`: a change
/// the node must store (a CCR-U that changes nothing is not written).
fn moved_to(b: &mut MessageBuilder<'_>, cell: u8) {
    b.i32(avp::EVENT_TRIGGER, 13).bytes(
        avp::_3GPP_USER_LOCATION_INFO,
        &[130, 0, 0xf1, 0x10, 0, 1, 0, 0xf1, 0x10, 0, 0, 1, cell],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_snr_at_the_node_without_the_session_reaches_the_pcef_and_the_holder_decides_with_it() {
    let (mut ocs, c, pcef) = with_ocs().await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);

    // The session is on A, which subscribes the counter at the OCS.
    let sid = "pgw;csy;1";
    let cca = pcef.ccr_i(A, sid, IMSI).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(origin_host(&cca), A);
    assert_eq!(installed(&cca), ["internet"], "valid: not throttled");
    assert_eq!(ocs.requests(cmd::SPENDING_LIMIT).len(), 1);
    let sy_session = ocs.sy_session();

    // The OCS sends its SNR to B, which never saw the subscriber: applied
    // there, and B throttles the PCEF by a RAR through the agent.
    let sna = ocs.snr(B, &sy_session, COUNTER, "exhausted").await;
    assert_eq!(result_of(&sna), 2001, "{}", b.log());
    let got = eventually_async("the RAR", Duration::from_secs(10), || {
        let r = rars(&pcef);
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, B, "the RAR comes from B");
    assert_eq!(got[0].1.session_id().ok().flatten(), Some(sid));
    let (install, remove) = rule_changes(&got[0].1);
    assert_eq!(install, ["throttled"]);
    assert_eq!(remove, ["internet"]);
    let stored = session(b, sid);
    assert_eq!(stored["sy"]["counters"][COUNTER]["status"], "exhausted");
    assert_eq!(stored["sy"]["session_id"], sy_session.as_str());

    // The PCEF's next CCR-U goes to A again (its Destination-Host): A
    // serves it from the record B wrote, with the OCS's status. It stays
    // throttled and no second Sy session is opened.
    let cca = pcef.ccr_u(A, sid, 1, |_| {}).await;
    assert_eq!(result_of(&cca), 2001, "{}", a.log());
    assert_eq!(origin_host(&cca), A);
    assert!(
        !rule_changes(&cca).0.contains(&"internet".to_string()),
        "A decided with the stale status: {:?}",
        rule_changes(&cca)
    );
    let stored = session(a, sid);
    let rules = stored["installed"]["rules"].to_string();
    assert!(rules.contains("throttled"), "{stored}");
    assert!(!rules.contains("\"internet\""), "{stored}");
    assert_eq!(ocs.requests(cmd::SPENDING_LIMIT).len(), 1, "no second SLR");

    // An SNR back to A (which holds the session again) lifts it.
    let sna = ocs.snr(A, &sy_session, COUNTER, "valid").await;
    assert_eq!(result_of(&sna), 2001, "{}", a.log());
    let got = eventually_async("the second RAR", Duration::from_secs(10), || {
        let r = rars(&pcef);
        (r.len() >= 2).then_some(r)
    })
    .await;
    assert_eq!(got.len(), 2);
    let (from, last) = got.last().expect("RAR");
    assert_eq!(from, A, "the second RAR comes from A");
    assert_eq!(
        rule_changes(last),
        (vec!["internet".to_string()], vec!["throttled".to_string()])
    );
    pcef.close().await;
    ocs.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_snrs_and_ccr_us_are_retried_and_the_acknowledged_status_is_stored() {
    let (mut ocs, c, pcef) = with_ocs().await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let pcef = Arc::new(pcef);
    let sid = "pgw;crace;1";
    assert_eq!(result_of(&pcef.ccr_i(A, sid, IMSI).await), 2001);
    let sy_session = ocs.sy_session();
    const ROUNDS: u32 = 40;
    // The PCEF keeps reporting moves to A while the OCS keeps changing the
    // status at B: both write the same session row.
    let gx = {
        let pcef = pcef.clone();
        tokio::spawn(async move {
            let mut codes = Vec::new();
            for n in 1..=ROUNDS {
                let cca = pcef
                    .ccr_u(A, sid, n, |b| moved_to(b, (n % 200) as u8))
                    .await;
                codes.push(result_of(&cca));
                // A busy PCEF and a busy OCS, not floods: each writes the
                // row every few milliseconds (and B's re-decision too).
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            codes
        })
    };
    let mut sna_codes = Vec::new();
    // The status of the last SNR acknowledged: the one stored.
    let mut acked = "valid";
    for i in 0..ROUNDS {
        let status = if i % 2 == 0 { "exhausted" } else { "valid" };
        let code = result_of(&ocs.snr(B, &sy_session, COUNTER, status).await);
        if code == 2001 {
            acked = status;
        }
        sna_codes.push(code);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cca_codes = gx.await.expect("Gx task");
    // Conflicts are handled again: nearly every request succeeds (as in
    // cluster_race, a request that loses 10 times in a row to a row
    // written back to back is answered 5012, nothing of it written).
    let all: Vec<u32> = sna_codes.iter().chain(&cca_codes).copied().collect();
    let failed = all.iter().filter(|c| **c == 5012).count();
    assert!(
        all.iter().all(|c| *c == 2001 || *c == 5012) && failed * 10 <= all.len(),
        "SNAs {sna_codes:?}, CCAs {cca_codes:?}\nA:\n{}\nB:\n{}",
        a.log(),
        b.log()
    );
    let conflicts = b.counter("pcrf_cluster_conflicts_total");
    assert!(conflicts > 0, "B's SNRs never met A's writes");
    eprintln!("race: SNAs {sna_codes:?}, CCAs {cca_codes:?}, {conflicts} conflicts at B");
    // Whichever node wrote last, the stored Sy session has the last status
    // the PCRF acknowledged to the OCS, and the decision follows it.
    let stored = session(a, sid);
    assert_eq!(
        stored["sy"]["counters"][COUNTER]["status"],
        acked,
        "{stored}\nA:\n{}\nB:\n{}",
        a.log(),
        b.log()
    );
    let cca = pcef.ccr_u(A, sid, ROUNDS + 1, |b| moved_to(b, 250)).await;
    assert_eq!(result_of(&cca), 2001);
    let rules = session(a, sid)["installed"]["rules"].to_string();
    let expected = if acked == "valid" {
        "\"internet\""
    } else {
        "\"throttled\""
    };
    assert!(rules.contains(expected), "{rules}");
    ocs.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sy_session_ends_with_the_subscribers_last_open_session_of_the_cluster() {
    let (mut ocs, c, pcef) = with_ocs().await;
    let b = &c.nodes[1];

    // The Sy session opens with the first session, on A.
    assert_eq!(result_of(&pcef.ccr_i(A, "pgw;cstr;1", IMSI).await), 2001);
    let sy_session = ocs.sy_session();
    // An SNR at B brings the subscriber there; its second session opens
    // on B with the same Sy session.
    assert_eq!(
        result_of(&ocs.snr(B, &sy_session, COUNTER, "valid").await),
        2001
    );
    let cca = pcef.ccr_i(B, "pgw;cstr;2", IMSI).await;
    assert_eq!((result_of(&cca), origin_host(&cca)), (2001, B.to_string()));
    assert_eq!(
        ocs.requests(cmd::SPENDING_LIMIT).len(),
        1,
        "one Sy session for the subscriber"
    );
    assert_eq!(
        session(b, "pgw;cstr;2")["sy"]["session_id"],
        sy_session.as_str()
    );
    // The first session goes back to A and ends there: the second is
    // still open on B, so the Sy session goes on.
    assert_eq!(
        result_of(&pcef.ccr_u(A, "pgw;cstr;1", 1, |b| moved_to(b, 9)).await),
        2001
    );
    assert_eq!(result_of(&pcef.ccr_t(A, "pgw;cstr;1", 2).await), 2001);
    // A reads from the store that the subscriber's other session is open,
    // and keeps the Sy session.
    let a = &c.nodes[0];
    eventually_async("the Sy session kept on A", Duration::from_secs(10), || {
        (a.metric_value("pcrf_sy_sessions_kept_total") == 1.0).then_some(())
    })
    .await;
    assert!(
        ocs.requests(cmd::SESSION_TERMINATION).is_empty(),
        "STR while B serves the subscriber"
    );
    // The last one ends on B (which still holds a stale copy of the first
    // in memory): the STR goes.
    assert_eq!(result_of(&pcef.ccr_t(B, "pgw;cstr;2", 1).await), 2001);
    let str_ = eventually_async("the STR", Duration::from_secs(10), || {
        ocs.requests(cmd::SESSION_TERMINATION).pop()
    })
    .await;
    assert_eq!(str_.session_id().expect("sid"), Some(sy_session.as_str()));
    assert_eq!(ocs.requests(cmd::SESSION_TERMINATION).len(), 1);
    pcef.close().await;
    ocs.stop().await;
}

/// A TDF CCR-I's AVPs naming the UE of the PCEF's sessions: IMSI, and
/// the address `initial_avps` gives it.
fn the_ue(b: &mut MessageBuilder<'_>) {
    b.group(avp::SUBSCRIPTION_ID, |g| {
        g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
            .str(avp::SUBSCRIPTION_ID_DATA, IMSI);
    })
    .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sd_ccr_on_a_copy_the_other_node_wrote_since_is_handled_again() {
    let (c, pcef) = two_nodes("").await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    provision(b, a, r#"{"plan":"basic","services":["video-detect"]}"#).await;

    // The Gx session and its TDF session are on B.
    let sid = "pgw;csd;1";
    assert_eq!(result_of(&pcef.ccr_i(B, sid, IMSI).await), 2001);
    // The TDF, behind the agent too, names B.
    let tdf = Gateway::tdf(&c.agent, "tdf1.tdf.example.net").await;
    let initial = enums::CC_REQUEST_TYPE::INITIAL_REQUEST;
    let cca = sd_ccr(&tdf, B, "tdf;csd;1", initial, 0, the_ue).await;
    assert_eq!(result_of(&cca), 2001, "{}", b.log());

    // A Gx CCR-U at A: A takes the session over and writes it, so B's
    // copy is one version behind.
    assert_eq!(
        result_of(&pcef.ccr_u(A, sid, 1, |b| moved_to(b, 7)).await),
        2001
    );
    let conflicts_before = b.counter("pcrf_cluster_conflicts_total");

    // The TDF reports an application start at B: B's write of its stale
    // copy conflicts, and the CCR is handled again on the stored session.
    let cca = sd_ccr(
        &tdf,
        B,
        "tdf;csd;1",
        enums::CC_REQUEST_TYPE::UPDATE_REQUEST,
        1,
        |b| {
            b.i32(avp::EVENT_TRIGGER, 39)
                .group(avp::APPLICATION_DETECTION_INFORMATION, |g| {
                    g.bytes(avp::TDF_APPLICATION_IDENTIFIER, b"video-streaming");
                });
        },
    )
    .await;
    assert_eq!(result_of(&cca), 2001, "{}", b.log());
    assert!(
        b.counter("pcrf_cluster_conflicts_total") > conflicts_before,
        "B's copy was stale: its first write conflicted"
    );
    // Exactly once: the stored session has the start, after A's CCR-U.
    for node in [a, b] {
        let stored = session(node, sid);
        assert_eq!(
            stored["tdf"]["running"],
            serde_json::json!(["video-streaming"]),
            "{stored}"
        );
        assert_eq!(stored["tdf"]["last_request_number"], 1, "{stored}");
        assert_eq!(stored["last_request_number"], 1, "{stored}");
    }
    // The changed Gx decision reaches the PCEF, from B.
    let got = eventually_async(
        "the RAR for the application",
        Duration::from_secs(10),
        || {
            let r = rars(&pcef);
            (!r.is_empty()).then_some(r)
        },
    )
    .await;
    assert_eq!(got[0].0, B, "the RAR comes from B");
    tdf.close().await;
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_session_shows_what_the_other_node_wrote() {
    let (c, pcef) = two_nodes("").await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    provision(a, b, r#"{"plan":"basic"}"#).await;
    let sid = "pgw;cget;1";
    assert_eq!(result_of(&pcef.ccr_i(A, sid, IMSI).await), 2001);
    assert_eq!(session(a, sid)["last_request_number"], 0);
    // B serves the next CCRs: A still holds its copy of before.
    for (number, cell) in [(1, 7), (2, 8)] {
        let cca = pcef.ccr_u(B, sid, number, |b| moved_to(b, cell)).await;
        assert_eq!((result_of(&cca), origin_host(&cca)), (2001, B.to_string()));
    }
    let on_a = session(a, sid);
    assert_eq!(on_a["location"], "8200f110000100f11000000108", "{on_a}");
    assert_eq!(
        on_a["last_request_number"],
        2,
        "A shows the stored session: {on_a}\nA:\n{}\nB:\n{}",
        a.log(),
        b.log()
    );
    assert_eq!(on_a, session(b, sid));
    pcef.close().await;
}

fn held_by(p: &Pcrf, name: &str) -> Option<u64> {
    let (_, c) = p.http("GET", "/v1/cluster", None);
    c["nodes"].as_array()?.iter().find(|n| n["name"] == name)?["sessions"].as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_view_counts_open_sessions_only() {
    let (c, pcef) = two_nodes("").await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    a.provision(IMSI, r#"{"plan":"basic"}"#);
    assert_eq!(result_of(&pcef.ccr_i(A, "pgw;ccnt;1", IMSI).await), 2001);
    assert_eq!(result_of(&pcef.ccr_i(A, "pgw;ccnt;2", IMSI).await), 2001);
    eventually_async("A counted 2 open sessions", Duration::from_secs(10), || {
        (held_by(b, A) == Some(2)).then_some(())
    })
    .await;
    // One ends: its record stays in memory for the retention, but it is
    // no longer a session A serves.
    assert_eq!(result_of(&pcef.ccr_t(A, "pgw;ccnt;1", 1).await), 2001);
    assert_eq!(session(a, "pgw;ccnt;1")["state"], "closed");
    eventually_async("A counted 1 open session", Duration::from_secs(10), || {
        (held_by(b, A) == Some(1) && held_by(a, A) == Some(1)).then_some(())
    })
    .await;
    pcef.close().await;
}
