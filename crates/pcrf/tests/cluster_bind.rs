//! Rx and Sd sessions across the nodes of a cluster (two `pcrf serve`
//! processes on one PostgreSQL database): an AF's AAR naming only the
//! UE's IPv6 address binds, on a node that does not hold it, to the Gx
//! session another node opened; an AAR update and an STR for an AF
//! session bound on another node (alive with a stale copy, or dead) reach
//! the PCEF's rules; a TDF session bound on one node (by IPv4 address or
//! IPv6 prefix) goes on at the other. Each finds the Gx session through
//! the store's indexed columns and takes it over. Needs a real server:
//! PCRF_TEST_DATABASE_URL (scripts/test.sh sets it up).

mod support;

use diameter::codec::{Message, MessageBuilder};
use diameter::dict::{avp, cmd, enums};
use support::cluster_peers::{AppPeer, RX, SD};
use support::*;

const IMSI: &str = "001010000000001";
const PEERS: &str =
    "\n[[peers]]\norigin_host = \"pcscf.test.local\"\naddresses = [\"127.0.0.1\"]\n\
     \n[[peers]]\norigin_host = \"tdf.test.local\"\naddresses = [\"127.0.0.1\"]\n";
const A: &str = "pcrf-a.test.local";
const B: &str = "pcrf-b.test.local";
/// The UE's delegated prefix, 2001:db8:7:1::/64, as Framed-IPv6-Prefix.
const UE_PREFIX: [u8; 10] = [0, 64, 0x20, 0x01, 0x0d, 0xb8, 0, 7, 0, 1];

/// A fresh schema of the test database, and the URL that uses it.
async fn test_schema() -> String {
    let base = std::env::var("PCRF_TEST_DATABASE_URL")
        .expect("PCRF_TEST_DATABASE_URL is not set: run scripts/test.sh, which starts PostgreSQL and sets it");
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(conn);
    let name = format!(
        "bind_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    );
    client
        .batch_execute(&format!("CREATE SCHEMA {name}"))
        .await
        .expect("create schema");
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options=-csearch_path%3D{name}")
}

/// A node named `origin_host` on the database at `url`, accepting the AF
/// and the TDF.
fn node(url: &str, origin_host: &str) -> Pcrf {
    let mut p = Pcrf::start_with_store(
        Some(&format!("kind = \"postgres\"\nurl = \"{url}\"")),
        PEERS,
    );
    let text = std::fs::read_to_string(&p.config).expect("read config");
    let text = text.replace(
        "origin_host = \"pcrf.test.local\"",
        &format!("origin_host = \"{origin_host}\""),
    );
    std::fs::write(&p.config, text).expect("write config");
    p.restart();
    p
}

/// A counter's value in a node's /metrics (0 when absent).
fn counter(p: &Pcrf, name: &str) -> u64 {
    p.metrics()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits up to 10 s for the PCEF's `n`th RAR (1-based).
async fn nth_rar(pcef: &Pcef, n: usize, log: impl Fn() -> String) -> Message {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(m) = pcef.rars().get(n - 1) {
            return m.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no RAR {n} at the PCEF:\n{}",
            log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A CCR-I of `session` for IMSI whose UE has only `UE_PREFIX` (no IPv4).
async fn ccr_i_ipv6_only(pcef: &Pcef, session: &str) -> Message {
    pcef.ccr(session, enums::CC_REQUEST_TYPE::INITIAL_REQUEST, 0, |b| {
        b.group(avp::SUBSCRIPTION_ID, |g| {
            g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                .str(avp::SUBSCRIPTION_ID_DATA, IMSI);
        })
        .bytes(avp::FRAMED_IPV6_PREFIX, &UE_PREFIX)
        .i32(avp::IP_CAN_TYPE, 5)
        .i32(avp::RAT_TYPE, 1004);
    })
    .await
}

/// One audio component (number `n`, `kbps` down) with one flow to the
/// UE at `ue`.
fn audio(b: &mut MessageBuilder<'_>, n: u32, kbps: u32, ue: &str) {
    let down = format!("permit out 17 from 192.0.2.9 5000 to {ue} {}", 4000 + n);
    let up = format!("permit in 17 from {ue} {} to 192.0.2.9 5000", 4000 + n);
    b.group(avp::MEDIA_COMPONENT_DESCRIPTION, |c| {
        c.u32(avp::MEDIA_COMPONENT_NUMBER, n)
            .i32(avp::MEDIA_TYPE, enums::MEDIA_TYPE::AUDIO)
            .u32(avp::MAX_REQUESTED_BANDWIDTH_UL, 64_000)
            .u32(avp::MAX_REQUESTED_BANDWIDTH_DL, kbps * 1000)
            .i32(avp::FLOW_STATUS, 2)
            .group(avp::MEDIA_SUB_COMPONENT, |s| {
                s.u32(avp::FLOW_NUMBER, 1)
                    .str(avp::FLOW_DESCRIPTION, &down)
                    .str(avp::FLOW_DESCRIPTION, &up);
            });
    });
}

/// The AF's STR for `session`.
async fn str_(af: &AppPeer, session: &str) -> Message {
    af.request(cmd::SESSION_TERMINATION, session, |b| {
        b.i32(avp::TERMINATION_CAUSE, 1);
    })
    .await
}

/// Framed-IPv6-Prefix data for the UE's full address 2001:db8:7:1::99, as
/// a P-CSCF sends it (/128).
fn ue_address_128() -> Vec<u8> {
    let mut d = vec![0u8, 128];
    d.extend_from_slice(
        &"2001:db8:7:1::99"
            .parse::<std::net::Ipv6Addr>()
            .expect("address")
            .octets(),
    );
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aar_by_ipv6_address_on_the_other_node_binds_to_the_gx_session() {
    let url = test_schema().await;
    let a = node(&url, A);
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let b = node(&url, B);
    let to_a = Pcef::connect_to(a.diameter, "pgw.test.local", A).await;
    let to_b = Pcef::connect_to(b.diameter, "pgw.test.local", B).await;
    let gx = "pgw.test.local;bind-v6;1";
    assert_eq!(result_of(&ccr_i_ipv6_only(&to_a, gx).await), 2001);

    let af = AppPeer::connect(b.diameter, "pcscf.test.local", RX, B).await;
    let addr = ue_address_128();
    let aaa = af
        .request(cmd::AA, "pcscf.test.local;v6call;1", |m| {
            m.bytes(avp::FRAMED_IPV6_PREFIX, &addr);
            audio(m, 1, 48, "2001:db8:7:1::99");
        })
        .await;
    assert_eq!(result_of(&aaa), 2001, "{}", b.log());
    assert_eq!(counter(&b, "pcrf_cluster_sessions_taken_over_total"), 1);
    // B serves the session now: its rule went to the PCEF from B.
    let rar = nth_rar(&to_b, 1, || b.log()).await;
    assert_eq!(rar.session_id().ok().flatten(), Some(gx));
    let (installed, _) = rule_changes(&rar);
    assert_eq!(installed.len(), 1, "{installed:?}");
    assert!(to_a.rars().is_empty());
    // An address outside the prefix binds to nothing, here or there.
    let mut outside = ue_address_128();
    outside[9] = 2; // 2001:db8:7:2::99
    let aaa = af
        .request(cmd::AA, "pcscf.test.local;v6call;2", |m| {
            m.bytes(avp::FRAMED_IPV6_PREFIX, &outside);
            audio(m, 1, 48, "2001:db8:7:2::99");
        })
        .await;
    assert_eq!(result_of(&aaa), 5065);
    af.close().await;
    to_a.close().await;
    to_b.close().await;
}

/// An AAR update at the node that opened the Gx session, after another
/// node bound the AF session to it (its copy lacks the AF session), and
/// an STR at a node holding nothing of it, after the node that served the
/// AF session last died: both find the Gx session through the store and
/// reach the PCEF's rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aar_update_and_an_str_on_another_node_reach_the_pcef() {
    const UE: &str = "10.45.0.2";
    let url = test_schema().await;
    let mut a = node(&url, A);
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let mut b = node(&url, B);
    let to_a = Pcef::connect_to(a.diameter, "pgw.test.local", A).await;
    let to_b = Pcef::connect_to(b.diameter, "pgw.test.local", B).await;
    let gx = "pgw.test.local;bind-af;1";
    let call = "pcscf.test.local;afcall;1";
    // The Gx session (UE 10.45.0.2) is on A, the AF session is bound on B.
    assert_eq!(result_of(&to_a.ccr_i(gx, IMSI).await), 2001);
    let af_b = AppPeer::connect(b.diameter, "pcscf.test.local", RX, B).await;
    let aaa = af_b
        .request(cmd::AA, call, |m| {
            m.bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2]);
            audio(m, 1, 48, UE);
        })
        .await;
    assert_eq!(result_of(&aaa), 2001, "{}", b.log());
    let (voice, _) = rule_changes(&nth_rar(&to_b, 1, || b.log()).await);
    assert_eq!(voice.len(), 1, "{voice:?}");

    // The AF's update arrives at A, whose copy has no AF session.
    let af_a = AppPeer::connect(a.diameter, "pcscf.test.local", RX, A).await;
    let aaa = af_a
        .request(cmd::AA, call, |m| {
            m.i32(avp::RX_REQUEST_TYPE, 1);
            audio(m, 2, 64, UE);
        })
        .await;
    assert_eq!(result_of(&aaa), 2001, "{}", a.log());
    let (added, removed) = rule_changes(&nth_rar(&to_a, 1, || a.log()).await);
    assert_eq!(added.len(), 1, "{added:?}");
    assert_ne!(added, voice, "the new component's rule");
    assert!(removed.is_empty());
    assert_eq!(counter(&a, "pcrf_cluster_sessions_taken_over_total"), 1);
    af_b.close().await;
    to_b.close().await;

    // B restarts and holds nothing (A wrote the session last); then A dies.
    // The AF's STR reaches B.
    b.kill9();
    b.restart();
    a.kill9();
    let to_b = Pcef::connect_to(b.diameter, "pgw.test.local", B).await;
    let af_b = AppPeer::connect(b.diameter, "pcscf.test.local", RX, B).await;
    let sta = str_(&af_b, call).await;
    assert_eq!(result_of(&sta), 2001, "{}", b.log());
    let (none, mut removed) = rule_changes(&nth_rar(&to_b, 1, || b.log()).await);
    assert!(none.is_empty());
    removed.sort();
    let mut both = [voice, added].concat();
    both.sort();
    assert_eq!(removed, both, "the STR removes both components' rules");
    let (_, s) = b.http("GET", &format!("/v1/sessions/{gx}"), None);
    assert_eq!(s["af"], serde_json::json!(null), "{s}");
    // Gone: a second STR, or an update, is unknown.
    assert_eq!(result_of(&str_(&af_b, call).await), 5002);
    let aaa = af_b
        .request(cmd::AA, call, |m| {
            m.i32(avp::RX_REQUEST_TYPE, 1);
            audio(m, 1, 48, UE);
        })
        .await;
    assert_eq!(result_of(&aaa), 5002);
    af_b.close().await;
    to_b.close().await;
}

/// A TDF CCR for `session` of `request_type` and `number`, then `extra`.
async fn tdf_ccr(
    tdf: &AppPeer,
    session: &str,
    request_type: i32,
    number: u32,
    extra: impl FnOnce(&mut MessageBuilder<'_>),
) -> Message {
    tdf.request(cmd::CREDIT_CONTROL, session, |b| {
        b.i32(avp::CC_REQUEST_TYPE, request_type)
            .u32(avp::CC_REQUEST_NUMBER, number);
        extra(b);
    })
    .await
}

/// A TDF's CCR-U reporting `app` started (or stopped).
async fn application(tdf: &AppPeer, session: &str, number: u32, app: &str, start: bool) -> Message {
    tdf_ccr(
        tdf,
        session,
        enums::CC_REQUEST_TYPE::UPDATE_REQUEST,
        number,
        |b| {
            b.i32(avp::EVENT_TRIGGER, if start { 39 } else { 40 })
                .group(avp::APPLICATION_DETECTION_INFORMATION, |g| {
                    g.bytes(avp::TDF_APPLICATION_IDENTIFIER, app.as_bytes());
                });
        },
    )
    .await
}

/// A TDF's CCR-I at a node that does not hold the Gx session (by IPv4
/// address, and by IPv6 prefix), then its CCR-T, or an application report,
/// at the node that opened the Gx session (whose copy has no TDF session).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tdf_session_bound_on_one_node_goes_on_at_the_other() {
    let url = test_schema().await;
    let imsi6 = "001010000000006";
    let a = node(&url, A);
    a.provision(IMSI, r#"{"plan":"basic","services":["video-detect"]}"#);
    a.provision(imsi6, r#"{"plan":"basic","services":["video-detect"]}"#);
    let b = node(&url, B);
    let to_a = Pcef::connect_to(a.diameter, "pgw.test.local", A).await;
    let to_b = Pcef::connect_to(b.diameter, "pgw.test.local", B).await;
    let tdf_a = AppPeer::connect(a.diameter, "tdf.test.local", SD, A).await;
    let tdf_b = AppPeer::connect(b.diameter, "tdf.test.local", SD, B).await;
    let (initial, termination) = (
        enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
        enums::CC_REQUEST_TYPE::TERMINATION_REQUEST,
    );

    // The Gx session (UE 10.45.0.2) is on A; the TDF's CCR-I arrives at B.
    let gx = "pgw.test.local;bind-sd;1";
    assert_eq!(result_of(&to_a.ccr_i(gx, IMSI).await), 2001);
    let sd = "tdf.test.local;sd;1";
    let cca = tdf_ccr(&tdf_b, sd, initial, 0, |b| {
        b.group(avp::SUBSCRIPTION_ID, |g| {
            g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                .str(avp::SUBSCRIPTION_ID_DATA, IMSI);
        })
        .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2]);
    })
    .await;
    assert_eq!(result_of(&cca), 2001, "{}", b.log());
    assert_eq!(counter(&b, "pcrf_cluster_sessions_taken_over_total"), 1);
    let (_, s) = b.http("GET", &format!("/v1/sessions/{gx}"), None);
    assert_eq!(s["tdf"]["id"], sd, "{s}");
    // Its CCR-T arrives at A, whose copy has no TDF session.
    let cca = tdf_ccr(&tdf_a, sd, termination, 1, |_| {}).await;
    assert_eq!(result_of(&cca), 2001, "{}", a.log());
    let (_, s) = a.http("GET", &format!("/v1/sessions/{gx}"), None);
    assert_eq!(s["tdf"], serde_json::json!(null), "{s}");
    assert_eq!(
        result_of(&application(&tdf_a, sd, 2, "p2p", true).await),
        5002
    );

    // An IPv6-only Gx session on B; the TDF's CCR-I for its prefix at A.
    let gx6 = "pgw.test.local;bind-sd;6";
    let cca = to_b
        .ccr(gx6, initial, 0, |m| {
            m.group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                    .str(avp::SUBSCRIPTION_ID_DATA, imsi6);
            })
            .bytes(avp::FRAMED_IPV6_PREFIX, &UE_PREFIX);
        })
        .await;
    assert_eq!(result_of(&cca), 2001, "{}", b.log());
    let sd6 = "tdf.test.local;sd;6";
    let cca = tdf_ccr(&tdf_a, sd6, initial, 0, |m| {
        m.bytes(avp::FRAMED_IPV6_PREFIX, &UE_PREFIX);
    })
    .await;
    assert_eq!(result_of(&cca), 2001, "{}", a.log());
    // Its application report at B (copy without the TDF session): served,
    // and the changed decision reaches the PCEF from B.
    let cca = application(&tdf_b, sd6, 1, "video-streaming", true).await;
    assert_eq!(result_of(&cca), 2001, "{}", b.log());
    let rar = nth_rar(&to_b, 1, || b.log()).await;
    assert_eq!(rar.session_id().ok().flatten(), Some(gx6));
    assert_eq!(
        rule_changes(&rar),
        (vec!["video-optimized".to_string()], vec![])
    );
    let (_, s) = b.http("GET", &format!("/v1/sessions/{gx6}"), None);
    assert_eq!(
        s["tdf"]["running"],
        serde_json::json!(["video-streaming"]),
        "{s}"
    );
    assert!(to_a.rars().is_empty());
    for t in [tdf_a, tdf_b] {
        t.close().await;
    }
    to_a.close().await;
    to_b.close().await;
}
