//! Rx and Sd sessions across the nodes of a cluster: two `pcrf serve`
//! processes on one PostgreSQL database behind the routing agent
//! (freeDiameter running deploy/cluster/freediameter/). The PCEF, the AF
//! and the TDF reach the nodes only through the agent and name the node a
//! request is for with Destination-Host. An AF's AAR naming only the UE's
//! IPv6 address binds, on a node that does not hold it, to the Gx session
//! another node opened; an AAR update and an STR for an AF session bound
//! on another node (alive, or dead) reach the PCEF's rules; a TDF session
//! bound on one node (by IPv4 address, or by IPv6 prefix) goes on at the
//! other, and its release when the Gx session ends reaches the TDF through
//! the agent. Each finds the Gx session through the store's indexed
//! columns and takes it over. Needs freeDiameterd (scripts/install-test-deps.sh)
//! and a real server: PCRF_TEST_DATABASE_URL (scripts/test.sh sets it up).

use crate::support;

use diameter::codec::{Message, MessageBuilder};
use diameter::dict::{avp, cmd, enums};
use std::time::Duration;
use support::*;

const IMSI: &str = "001010000000001";
const PGW: &str = "pgw1.pgw.example.net";
const PCSCF: &str = "pcscf1.pcscf.example.net";
const TDF: &str = "tdf1.tdf.example.net";
/// The two nodes: A and B.
const A: &str = NODES[0];
const B: &str = NODES[1];
/// The UE's delegated prefix, 2001:db8:7:1::/64, as Framed-IPv6-Prefix.
const UE_PREFIX: [u8; 10] = [0, 64, 0x20, 0x01, 0x0d, 0xb8, 0, 7, 0, 1];
const WAIT: Duration = Duration::from_secs(10);

/// Two nodes behind the agent.
async fn two_nodes() -> Cluster {
    Cluster::start(2, "").await
}

/// The RARs `gateway` (the PCEF, or the TDF) got from `node`.
fn rars_from(gateway: &Gateway, node: &str) -> Vec<Message> {
    gateway
        .rars()
        .into_iter()
        .filter(|r| origin_host(r) == node)
        .collect()
}

/// Waits for the `n`th RAR (1-based) `gateway` got from `node`.
fn nth_rar_from(gateway: &Gateway, node: &str, n: usize, log: impl Fn() -> String) -> Message {
    let got = poll_until(WAIT, || rars_from(gateway, node).len() >= n);
    assert!(got, "no RAR {n} from {node}:\n{}", log());
    rars_from(gateway, node)[n - 1].clone()
}

/// A CCR-I to `node` for `imsi` whose UE has only `UE_PREFIX` (no IPv4).
async fn ccr_i_ipv6_only(pcef: &Gateway, node: &str, session: &str, imsi: &str) -> Message {
    let to = Destination {
        realm: REALM,
        host: Some(node),
    };
    let initial = enums::CC_REQUEST_TYPE::INITIAL_REQUEST;
    send_gx_request(pcef.peer(), to, false, session, initial, 0, |b| {
        b.group(avp::SUBSCRIPTION_ID, |g| {
            g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                .str(avp::SUBSCRIPTION_ID_DATA, imsi);
        })
        .bytes(avp::FRAMED_IPV6_PREFIX, &UE_PREFIX)
        .i32(avp::IP_CAN_TYPE, 5)
        .i32(avp::RAT_TYPE, 1004);
    })
    .await
    .expect("CCA-I")
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

/// The AF's AAR for `session` to `node`, `extra` after the common AVPs.
async fn aar(
    af: &Gateway,
    node: &str,
    session: &str,
    extra: impl FnOnce(&mut MessageBuilder<'_>),
) -> Message {
    af.request_to(cmd::AA, node, session, extra).await
}

/// The AF's STR for `session` to `node`.
async fn str_(af: &Gateway, node: &str, session: &str) -> Message {
    af.request_to(cmd::SESSION_TERMINATION, node, session, |b| {
        b.i32(avp::TERMINATION_CAUSE, 1);
    })
    .await
}

/// Framed-IPv6-Prefix data of a full UE address (/128), as a P-CSCF
/// sends it.
fn address_128(addr: &str) -> Vec<u8> {
    let mut d = vec![0u8, 128];
    d.extend_from_slice(
        &addr
            .parse::<std::net::Ipv6Addr>()
            .expect("address")
            .octets(),
    );
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aar_by_ipv6_address_on_the_other_node_binds_to_the_gx_session() {
    let c = two_nodes().await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    a.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let pgw = c.pcef(PGW).await;
    let gx = "pgw1.pgw.example.net;bind-v6;1";
    assert_eq!(
        result_of(&ccr_i_ipv6_only(&pgw, A, gx, IMSI).await),
        2001,
        "{}",
        a.log()
    );

    // The AAR names the UE's address inside the session's /64; it goes to B.
    let af = Gateway::af(&c.agent, PCSCF).await;
    let ue = "2001:db8:7:1::99";
    let aaa = aar(&af, B, "pcscf1.pcscf.example.net;v6call;1", |m| {
        m.bytes(avp::FRAMED_IPV6_PREFIX, &address_128(ue));
        audio(m, 1, 48, ue);
    })
    .await;
    assert_eq!(result_of(&aaa), 2001, "{}", b.log());
    assert_eq!(origin_host(&aaa), B);
    assert_eq!(b.taken_over(), 1);
    // B serves the session now: its rule went to the PCEF from B.
    let rar = nth_rar_from(&pgw, B, 1, || b.log());
    assert_eq!(rar.session_id().ok().flatten(), Some(gx));
    let (installed, _) = rule_changes(&rar);
    assert_eq!(installed.len(), 1, "{installed:?}");
    assert!(rars_from(&pgw, A).is_empty());

    // An address outside the prefix binds to nothing, on either node.
    let outside = "2001:db8:7:2::99";
    for node in [A, B] {
        let aaa = aar(&af, node, "pcscf1.pcscf.example.net;v6call;2", |m| {
            m.bytes(avp::FRAMED_IPV6_PREFIX, &address_128(outside));
            audio(m, 1, 48, outside);
        })
        .await;
        assert_eq!(result_of(&aaa), 5065, "{node}");
    }
    af.close().await;
    pgw.close().await;
}

/// An AAR update at the node that opened the Gx session, after another
/// node bound the AF session to it (its copy lacks the AF session), and
/// an STR at a node holding nothing of it, after the node that served the
/// AF session last died: both find the Gx session through the store and
/// reach the PCEF's rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aar_update_and_an_str_on_another_node_reach_the_pcef() {
    const UE: &str = "10.45.0.2";
    let mut c = two_nodes().await;
    c.nodes[0].provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let pgw = c.pcef(PGW).await;
    let af = Gateway::af(&c.agent, PCSCF).await;
    let gx = "pgw1.pgw.example.net;bind-af;1";
    let call = "pcscf1.pcscf.example.net;afcall;1";
    // The Gx session (UE 10.45.0.2) is on A, the AF session is bound on B.
    assert_eq!(result_of(&pgw.ccr_i(A, gx, IMSI).await), 2001);
    let aaa = aar(&af, B, call, |m| {
        m.bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2]);
        audio(m, 1, 48, UE);
    })
    .await;
    assert_eq!(result_of(&aaa), 2001, "{}", c.nodes[1].log());
    let (voice, _) = rule_changes(&nth_rar_from(&pgw, B, 1, || c.nodes[1].log()));
    assert_eq!(voice.len(), 1, "{voice:?}");

    // The AF's update goes to A, whose copy has no AF session.
    let aaa = aar(&af, A, call, |m| {
        m.i32(avp::RX_REQUEST_TYPE, 1);
        audio(m, 2, 64, UE);
    })
    .await;
    assert_eq!(result_of(&aaa), 2001, "{}", c.nodes[0].log());
    assert_eq!(origin_host(&aaa), A);
    let (added, removed) = rule_changes(&nth_rar_from(&pgw, A, 1, || c.nodes[0].log()));
    assert_eq!(added.len(), 1, "{added:?}");
    assert_ne!(added, voice, "the new component's rule");
    assert!(removed.is_empty());
    assert_eq!(c.nodes[0].taken_over(), 1);

    // B restarts and holds nothing (A wrote the session last); then A
    // dies. The AF's STR goes to B.
    c.nodes[1].kill9();
    c.nodes[1].restart();
    c.wait_agent_open(1, Duration::from_secs(30));
    c.nodes[0].kill9();
    let b = &c.nodes[1];
    let sta = str_(&af, B, call).await;
    assert_eq!(result_of(&sta), 2001, "{}", b.log());
    let (none, mut removed) = rule_changes(&nth_rar_from(&pgw, B, 2, || b.log()));
    assert!(none.is_empty());
    removed.sort();
    let mut both = [voice, added].concat();
    both.sort();
    assert_eq!(removed, both, "the STR removes both components' rules");
    let (_, s) = b.http("GET", &format!("/v1/sessions/{gx}"), None);
    assert_eq!(s["af"], serde_json::json!(null), "{s}");
    // Gone: a second STR, or an update, is unknown.
    assert_eq!(result_of(&str_(&af, B, call).await), 5002);
    let aaa = aar(&af, B, call, |m| {
        m.i32(avp::RX_REQUEST_TYPE, 1);
        audio(m, 1, 48, UE);
    })
    .await;
    assert_eq!(result_of(&aaa), 5002);
    af.close().await;
    pgw.close().await;
}

/// The TDF's CCR-U to `node` reporting `app` started.
async fn app_started(tdf: &Gateway, node: &str, session: &str, number: u32, app: &str) -> Message {
    let update = enums::CC_REQUEST_TYPE::UPDATE_REQUEST;
    sd_ccr(tdf, node, session, update, number, |b| {
        b.i32(avp::EVENT_TRIGGER, 39)
            .group(avp::APPLICATION_DETECTION_INFORMATION, |g| {
                g.bytes(avp::TDF_APPLICATION_IDENTIFIER, app.as_bytes());
            });
    })
    .await
}

/// A TDF's CCR-I at a node that does not hold the Gx session (by IPv4
/// address, and by IPv6 prefix), then its CCR-T, or an application report,
/// at the node that opened the Gx session (whose copy has no TDF session);
/// then the Gx session's end releases the TDF session (Sd RAR) through the
/// agent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tdf_session_bound_on_one_node_goes_on_at_the_other() {
    let c = two_nodes().await;
    let (a, b) = (&c.nodes[0], &c.nodes[1]);
    let imsi6 = "001010000000006";
    a.provision(IMSI, r#"{"plan":"basic","services":["video-detect"]}"#);
    a.provision(imsi6, r#"{"plan":"basic","services":["video-detect"]}"#);
    let pgw = c.pcef(PGW).await;
    let tdf = Gateway::tdf(&c.agent, TDF).await;
    let (initial, termination) = (
        enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
        enums::CC_REQUEST_TYPE::TERMINATION_REQUEST,
    );
    // B reads the profiles from the provisioning feed.
    assert!(poll_until(WAIT, || {
        b.http("GET", &format!("/v1/subscribers/{imsi6}"), None).0 == 200
    }));

    // The Gx session (UE 10.45.0.2) is on A; the TDF's CCR-I goes to B.
    let gx = "pgw1.pgw.example.net;bind-sd;1";
    assert_eq!(result_of(&pgw.ccr_i(A, gx, IMSI).await), 2001);
    let sd = "tdf1.tdf.example.net;sd;1";
    let cca = sd_ccr(&tdf, B, sd, initial, 0, |m| {
        m.group(avp::SUBSCRIPTION_ID, |g| {
            g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                .str(avp::SUBSCRIPTION_ID_DATA, IMSI);
        })
        .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2]);
    })
    .await;
    assert_eq!(result_of(&cca), 2001, "{}", b.log());
    assert_eq!(origin_host(&cca), B);
    assert_eq!(b.taken_over(), 1);
    let (_, s) = b.http("GET", &format!("/v1/sessions/{gx}"), None);
    assert_eq!(s["tdf"]["id"], sd, "{s}");
    // Its CCR-T goes to A, whose copy has no TDF session.
    let cca = sd_ccr(&tdf, A, sd, termination, 1, |_| {}).await;
    assert_eq!(result_of(&cca), 2001, "{}", a.log());
    assert_eq!(origin_host(&cca), A);
    let (_, s) = a.http("GET", &format!("/v1/sessions/{gx}"), None);
    assert_eq!(s["tdf"], serde_json::json!(null), "{s}");
    assert_eq!(result_of(&app_started(&tdf, A, sd, 2, "p2p").await), 5002);

    // An IPv6-only Gx session on B; the TDF's CCR-I for its prefix at A.
    let gx6 = "pgw1.pgw.example.net;bind-sd;6";
    assert_eq!(
        result_of(&ccr_i_ipv6_only(&pgw, B, gx6, imsi6).await),
        2001,
        "{}",
        b.log()
    );
    let sd6 = "tdf1.tdf.example.net;sd;6";
    let cca = sd_ccr(&tdf, A, sd6, initial, 0, |m| {
        m.bytes(avp::FRAMED_IPV6_PREFIX, &UE_PREFIX);
    })
    .await;
    assert_eq!(result_of(&cca), 2001, "{}", a.log());
    assert_eq!(a.taken_over(), 2, "the IPv4 session, then this one");
    // Its application report at B (copy without the TDF session): served,
    // and the changed decision reaches the PCEF from B.
    let cca = app_started(&tdf, B, sd6, 1, "video-streaming").await;
    assert_eq!(result_of(&cca), 2001, "{}", b.log());
    let rar = nth_rar_from(&pgw, B, 1, || b.log());
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
    assert!(rars_from(&pgw, A).is_empty());

    // The PCEF ends the Gx session at B: B releases the TDF session, its
    // Sd RAR reaching the TDF through the agent.
    assert_eq!(result_of(&pgw.ccr_t(B, gx6, 1).await), 2001, "{}", b.log());
    let release = nth_rar_from(&tdf, B, 1, || b.log());
    assert_eq!(release.session_id().ok().flatten(), Some(sd6));
    let cause = release.find(avp::SESSION_RELEASE_CAUSE).ok().flatten();
    assert_eq!(cause.map(|c| c.as_enum()), Some(Ok(0)), "{}", b.log());
    assert!(rars_from(&tdf, A).is_empty());
    tdf.close().await;
    pgw.close().await;
}
