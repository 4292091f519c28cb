//! Who may act on a session, against the real `pcrf` binary over TCP: any
//! admitted peer can name any Session-Id, so a Gx, Sd or Rx request on a
//! session is served only when it comes from the peer that holds the
//! session or from a peer the operator declared its fail-over partner
//! (`failover_group` on both `[[peers]]` entries). Another peer's request
//! is answered 5002 DIAMETER_UNKNOWN_SESSION_ID, exactly as for a
//! Session-Id that does not exist: nothing is applied, replayed or moved.
//! Through a relay (a routing agent keeps the originator's Origin-Host)
//! the same rule holds.

use crate::support;

use diameter::codec::{Message, MessageBuilder};
use diameter::dict::{avp, cmd, enums};
use support::*;

const IMSI: &str = "001010000000001";
const OTHER_IMSI: &str = "001010000000002";
const RX: u32 = 16_777_236;
const SD: u32 = 16_777_303;
const PCEF_A: &str = "pgw.test.local";
const PCEF_B: &str = "pgw2.test.local";
const GB: u64 = 1_000_000_000;
const UNKNOWN_SESSION: u32 = 5002;

/// pgw2 is admitted, as an unrelated gateway.
const PCEF_B_PEER: &str =
    "[[peers]]\norigin_host = \"pgw2.test.local\"\naddresses = [\"127.0.0.1\"]\n";

fn provision(p: &Pcrf) {
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    p.provision(OTHER_IMSI, r#"{"msisdn":"491700000002","plan":"basic"}"#);
}

/// A Usage-Monitoring-Information report of `octets` on the session-level
/// key "total" of the test usage file.
fn usage_report(b: &mut MessageBuilder<'_>, octets: u64) {
    b.i32(avp::EVENT_TRIGGER, 33)
        .group(avp::USAGE_MONITORING_INFORMATION, |g| {
            g.bytes(avp::MONITORING_KEY, b"total")
                .group(avp::USED_SERVICE_UNIT, |u| {
                    u.u64(avp::CC_TOTAL_OCTETS, octets);
                })
                .i32(avp::USAGE_MONITORING_LEVEL, 0);
        });
}

fn monthly_used(p: &Pcrf) -> u64 {
    let (st, v) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(st, 200, "{v}");
    v["accumulators"]["monthly"]["used"]
        .as_u64()
        .expect("monthly used")
}

fn session(p: &Pcrf, id: &str) -> serde_json::Value {
    let (st, v) = p.http(
        "GET",
        &format!("/v1/sessions/{}", id.replace(';', "%3B")),
        None,
    );
    assert_eq!(st, 200, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_pcef_can_neither_update_nor_end_a_pcefs_session() {
    let p = Pcrf::start_with_usage(PCEF_B_PEER);
    provision(&p);
    let a = Pcef::connect(p.diameter, PCEF_A).await;
    let b = Pcef::connect(p.diameter, PCEF_B).await;
    let sid = "pgw.test.local;owned;1";
    assert_eq!(result_of(&a.ccr_i(sid, IMSI).await), 2001);

    // B reports 5 GB on A's session, on its own connection.
    let cca = b.ccr_u(sid, 1, |m| usage_report(m, 5 * GB)).await;
    assert_eq!(result_of(&cca), UNKNOWN_SESSION);
    assert_eq!(monthly_used(&p), 0, "nothing counted for A's subscriber");
    assert_eq!(
        session(&p, sid)["pcef_host"],
        PCEF_A,
        "the session stays A's"
    );
    // RARs still go to A.
    let (st, v) = p.http(
        "DELETE",
        &format!("/v1/sessions/{}", sid.replace(';', "%3B")),
        None,
    );
    assert_eq!(st, 200, "{v}");
    a.wait_rars(1).await;
    assert!(b.rars().is_empty(), "B got no RAR for A's session");

    // B's CCR-T does not end it: A goes on.
    let sid = "pgw.test.local;owned;2";
    assert_eq!(result_of(&a.ccr_i(sid, IMSI).await), 2001);
    assert_eq!(result_of(&b.ccr_t(sid, 1).await), UNKNOWN_SESSION);
    assert_eq!(session(&p, sid)["state"], "open");
    let cca = a.ccr_u(sid, 1, |m| usage_report(m, GB)).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(monthly_used(&p), GB);
    // B retransmitting (T flag) A's last request gets no replay of it.
    let again = b
        .ccr_again(sid, enums::CC_REQUEST_TYPE::UPDATE_REQUEST, 1, |m| {
            usage_report(m, GB)
        })
        .await;
    assert_eq!(result_of(&again), UNKNOWN_SESSION);
    assert_eq!(monthly_used(&p), GB);
    assert_eq!(result_of(&a.ccr_t(sid, 2).await), 2001);
    // Nor of A's kept CCA-T once the session is closed.
    let again = b
        .ccr_again(sid, enums::CC_REQUEST_TYPE::TERMINATION_REQUEST, 2, |m| {
            m.i32(avp::TERMINATION_CAUSE, 1);
        })
        .await;
    assert_eq!(result_of(&again), UNKNOWN_SESSION);
    assert!(
        p.metrics()
            .contains("pcrf_foreign_session_requests_total 4"),
        "{}",
        p.metrics()
    );
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ccr_i_reusing_another_pcefs_open_session_id_neither_replays_nor_replaces_it() {
    let p = Pcrf::start(PCEF_B_PEER);
    provision(&p);
    let a = Pcef::connect(p.diameter, PCEF_A).await;
    let b = Pcef::connect(p.diameter, PCEF_B).await;
    let sid = "pgw.test.local;reused;1";
    let first = a.ccr_i(sid, IMSI).await;
    assert_eq!(result_of(&first), 2001);

    // Number 0, as A's: A's kept CCA is not handed out.
    let replayed = b.ccr_i(sid, OTHER_IMSI).await;
    assert_eq!(result_of(&replayed), UNKNOWN_SESSION);
    // Another number: A's session is not replaced by B's subscriber.
    let cca = b
        .ccr(sid, enums::CC_REQUEST_TYPE::INITIAL_REQUEST, 7, |m| {
            initial_avps_with(m, OTHER_IMSI, "491700000002")
        })
        .await;
    assert_eq!(result_of(&cca), UNKNOWN_SESSION);
    let s = session(&p, sid);
    assert_eq!(s["pcef_host"], PCEF_A, "{s}");
    assert_eq!(s["subscriber"], IMSI, "{s}");
    // A retransmitting its own CCR-I still gets its answer again.
    let again = a
        .ccr_again(sid, enums::CC_REQUEST_TYPE::INITIAL_REQUEST, 0, |m| {
            initial_avps(m, IMSI)
        })
        .await;
    assert_eq!(again.bytes().len(), first.bytes().len());
    assert_eq!(result_of(&again), 2001);
    assert_eq!(result_of(&a.ccr_u(sid, 1, |_| {}).await), 2001);
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_failover_partner_is_served_and_gets_the_rars() {
    let p = Pcrf::start(
        "[[peers]]\norigin_host = \"pgw-a.test.local\"\naddresses = [\"127.0.0.1\"]\n\
         failover_group = \"pgw-pair\"\n\
         [[peers]]\norigin_host = \"pgw-b.test.local\"\naddresses = [\"127.0.0.1\"]\n\
         failover_group = \"pgw-pair\"\n",
    );
    provision(&p);
    let a = Pcef::connect(p.diameter, "pgw-a.test.local").await;
    let sid = "pgw-a.test.local;pair;1";
    assert_eq!(result_of(&a.ccr_i(sid, IMSI).await), 2001);
    // A fails; its partner goes on with the session.
    a.close().await;
    let b = Pcef::connect(p.diameter, "pgw-b.test.local").await;
    assert_eq!(result_of(&b.ccr_u(sid, 1, |_| {}).await), 2001);
    assert_eq!(session(&p, sid)["pcef_host"], "pgw-b.test.local");
    let (st, v) = p.http(
        "DELETE",
        &format!("/v1/sessions/{}", sid.replace(';', "%3B")),
        None,
    );
    assert_eq!(st, 200, "{v}");
    let rars = b.wait_rars(1).await;
    assert_eq!(rars[0].session_id().ok().flatten(), Some(sid));
    // A peer outside the group is still refused.
    let c = Pcef::connect(p.diameter, PCEF_A).await;
    assert_eq!(result_of(&c.ccr_u(sid, 2, |_| {}).await), UNKNOWN_SESSION);
    assert_eq!(result_of(&b.ccr_t(sid, 2).await), 2001);
    b.close().await;
    c.close().await;
}

/// A CCR-U for `session` over `relay`'s connection, naming `origin` as
/// its originator (a routing agent forwarding a gateway's request).
async fn relayed_ccr_u(relay: &Pcef, origin: &str, session: &str, number: u32) -> Message {
    relay
        .peer
        .request(GX, cmd::CREDIT_CONTROL, |b| {
            b.str(avp::SESSION_ID, session)
                .u32(avp::AUTH_APPLICATION_ID, GX)
                .origin(origin, "test.local")
                .str(avp::DESTINATION_REALM, "test.local")
                .i32(avp::CC_REQUEST_TYPE, enums::CC_REQUEST_TYPE::UPDATE_REQUEST)
                .u32(avp::CC_REQUEST_NUMBER, number);
        })
        .await
        .expect("CCA")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_relay_the_sessions_own_origin_host_is_served_and_another_is_not() {
    let p = Pcrf::start(
        "[[peers]]\norigin_host = \"dra.test.local\"\naddresses = [\"127.0.0.1\"]\nrelay = true\n",
    );
    provision(&p);
    let a = Pcef::connect(p.diameter, PCEF_A).await;
    let sid = "pgw.test.local;relayed;1";
    assert_eq!(result_of(&a.ccr_i(sid, IMSI).await), 2001);
    a.close().await;
    // A now reaches the PCRF through the routing agent, which keeps its
    // Origin-Host; the agent also forwards another gateway's request.
    let dra = Pcef::connect(p.diameter, "dra.test.local").await;
    assert_eq!(result_of(&relayed_ccr_u(&dra, PCEF_A, sid, 1).await), 2001);
    assert_eq!(
        result_of(&relayed_ccr_u(&dra, PCEF_B, sid, 2).await),
        UNKNOWN_SESSION
    );
    assert_eq!(session(&p, sid)["pcef_host"], PCEF_A);
    assert_eq!(result_of(&relayed_ccr_u(&dra, PCEF_A, sid, 2).await), 2001);
    dra.close().await;
}

/// An AAR from `af` for the Rx session `session` on the UE's address,
/// with one audio flow; `update` makes it an UPDATE_REQUEST.
async fn aar(af: &Pcef, session: &str, update: bool) -> Message {
    let local = af.peer.local().clone();
    af.peer
        .request(RX, cmd::AA, |b| {
            b.str(avp::SESSION_ID, session)
                .u32(avp::AUTH_APPLICATION_ID, RX)
                .origin(&local.origin_host, &local.origin_realm)
                .str(avp::DESTINATION_REALM, "test.local")
                .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2]);
            if update {
                b.i32(avp::RX_REQUEST_TYPE, 1);
            }
            b.group(avp::MEDIA_COMPONENT_DESCRIPTION, |m| {
                m.u32(avp::MEDIA_COMPONENT_NUMBER, if update { 2 } else { 1 })
                    .i32(avp::MEDIA_TYPE, enums::MEDIA_TYPE::AUDIO)
                    .u32(avp::MAX_REQUESTED_BANDWIDTH_UL, 64_000)
                    .u32(avp::MAX_REQUESTED_BANDWIDTH_DL, 48_000)
                    .i32(avp::FLOW_STATUS, 2)
                    .group(avp::MEDIA_SUB_COMPONENT, |s| {
                        s.u32(avp::FLOW_NUMBER, 1).str(
                            avp::FLOW_DESCRIPTION,
                            "permit out 17 from 192.0.2.9 5000 to 10.45.0.2 4000",
                        );
                    });
            });
        })
        .await
        .expect("AAA")
}

async fn rx_str(af: &Pcef, session: &str) -> Message {
    let local = af.peer.local().clone();
    af.peer
        .request(RX, cmd::SESSION_TERMINATION, |b| {
            b.str(avp::SESSION_ID, session)
                .origin(&local.origin_host, &local.origin_realm)
                .str(avp::DESTINATION_REALM, "test.local")
                .u32(avp::AUTH_APPLICATION_ID, RX)
                .i32(avp::TERMINATION_CAUSE, 1);
        })
        .await
        .expect("STA")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_af_can_neither_update_nor_end_an_afs_rx_session() {
    let p = Pcrf::start(
        "[[peers]]\norigin_host = \"pcscf.test.local\"\naddresses = [\"127.0.0.1\"]\n\
         [[peers]]\norigin_host = \"pcscf2.test.local\"\naddresses = [\"127.0.0.1\"]\n",
    );
    provision(&p);
    let pcef = Pcef::connect(p.diameter, PCEF_A).await;
    let af1 = Pcef::connect_app(p.diameter, "pcscf.test.local", RX).await;
    let af2 = Pcef::connect_app(p.diameter, "pcscf2.test.local", RX).await;
    let gx = "pgw.test.local;rx-owned;1";
    assert_eq!(result_of(&pcef.ccr_i(gx, IMSI).await), 2001);
    let rx = "pcscf.test.local;call;1";
    assert_eq!(result_of(&aar(&af1, rx, false).await), 2001);
    let pushed = pcef.wait_rars(1).await.len();

    assert_eq!(result_of(&aar(&af2, rx, true).await), UNKNOWN_SESSION);
    assert_eq!(result_of(&aar(&af2, rx, false).await), UNKNOWN_SESSION);
    assert_eq!(result_of(&rx_str(&af2, rx).await), UNKNOWN_SESSION);
    let s = session(&p, gx);
    assert_eq!(s["af"].as_array().map(Vec::len), Some(1), "{s}");
    assert_eq!(s["af"][0]["af_host"], "pcscf.test.local", "{s}");
    assert_eq!(s["af"][0]["media"].as_array().map(Vec::len), Some(1), "{s}");
    // AF 1 still owns its sessions: it ends one itself.
    let rx2 = "pcscf.test.local;call;2";
    assert_eq!(result_of(&aar(&af1, rx2, false).await), 2001);
    // Its new media is pushed; a push for AF 2's refused requests would
    // have come before it, so exactly one RAR more proves there was none.
    let rars = pcef.wait_rars(pushed + 1).await;
    assert_eq!(rars.len(), pushed + 1, "nothing pushed for AF 2");
    assert_eq!(result_of(&rx_str(&af1, rx2).await), 2001);
    // The Gx session ends and aborts the other: only AF 1's STR after the
    // abort is answered 2001.
    assert_eq!(result_of(&pcef.ccr_t(gx, 1).await), 2001);
    assert_eq!(result_of(&rx_str(&af2, rx).await), UNKNOWN_SESSION);
    assert_eq!(result_of(&rx_str(&af1, rx).await), 2001);
    af1.close().await;
    af2.close().await;
    pcef.close().await;
}

/// A TDF's CCR on Sd.
async fn sd_ccr(
    tdf: &Pcef,
    session: &str,
    request_type: i32,
    number: u32,
    extra: impl FnOnce(&mut MessageBuilder<'_>),
) -> Message {
    let local = tdf.peer.local().clone();
    tdf.peer
        .request(SD, cmd::CREDIT_CONTROL, |b| {
            b.str(avp::SESSION_ID, session)
                .u32(avp::AUTH_APPLICATION_ID, SD)
                .origin(&local.origin_host, &local.origin_realm)
                .str(avp::DESTINATION_REALM, "test.local")
                .i32(avp::CC_REQUEST_TYPE, request_type)
                .u32(avp::CC_REQUEST_NUMBER, number);
            extra(b);
        })
        .await
        .expect("Sd CCA")
}

fn tdf_binding(b: &mut MessageBuilder<'_>) {
    b.group(avp::SUBSCRIPTION_ID, |g| {
        g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
            .str(avp::SUBSCRIPTION_ID_DATA, IMSI);
    })
    .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2]);
}

fn app_started(b: &mut MessageBuilder<'_>) {
    b.i32(avp::EVENT_TRIGGER, 39)
        .group(avp::APPLICATION_DETECTION_INFORMATION, |g| {
            g.bytes(avp::TDF_APPLICATION_IDENTIFIER, b"video");
        });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tdf_can_neither_update_nor_end_a_tdfs_sd_session() {
    let p = Pcrf::start(
        "[[peers]]\norigin_host = \"tdf.test.local\"\naddresses = [\"127.0.0.1\"]\n\
         [[peers]]\norigin_host = \"tdf2.test.local\"\naddresses = [\"127.0.0.1\"]\n",
    );
    provision(&p);
    let pcef = Pcef::connect(p.diameter, PCEF_A).await;
    let tdf_a = Pcef::connect_app(p.diameter, "tdf.test.local", SD).await;
    let tdf_b = Pcef::connect_app(p.diameter, "tdf2.test.local", SD).await;
    let gx = "pgw.test.local;sd-owned;1";
    assert_eq!(result_of(&pcef.ccr_i(gx, IMSI).await), 2001);
    let sd = "tdf.test.local;sd;1";
    let (i, u, t) = (
        enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
        enums::CC_REQUEST_TYPE::UPDATE_REQUEST,
        enums::CC_REQUEST_TYPE::TERMINATION_REQUEST,
    );
    let first = sd_ccr(&tdf_a, sd, i, 0, tdf_binding).await;
    assert_eq!(result_of(&first), 2001);

    assert_eq!(
        result_of(&sd_ccr(&tdf_b, sd, u, 1, app_started).await),
        UNKNOWN_SESSION
    );
    let s = session(&p, gx);
    assert_eq!(s["tdf"]["host"], "tdf.test.local", "{s}");
    assert!(
        s["tdf"]["running"].as_array().is_none_or(Vec::is_empty),
        "B's report was not applied: {s}"
    );
    assert_eq!(
        result_of(&sd_ccr(&tdf_b, sd, t, 1, |_| {}).await),
        UNKNOWN_SESSION
    );
    let replayed = sd_ccr(&tdf_b, sd, i, 0, tdf_binding).await;
    assert_eq!(
        result_of(&replayed),
        UNKNOWN_SESSION,
        "A's CCA is not replayed"
    );
    assert_eq!(session(&p, gx)["tdf"]["id"], sd);
    // A goes on with its session.
    assert_eq!(
        result_of(&sd_ccr(&tdf_a, sd, u, 1, app_started).await),
        2001
    );
    // The Gx session ends and releases the TDF session (Sd RAR to A):
    // only A's CCR-T after the release is answered 2001.
    assert_eq!(result_of(&pcef.ccr_t(gx, 1).await), 2001);
    tdf_a.wait_rars(1).await;
    assert_eq!(
        result_of(&sd_ccr(&tdf_b, sd, t, 2, |_| {}).await),
        UNKNOWN_SESSION
    );
    assert_eq!(result_of(&sd_ccr(&tdf_a, sd, t, 2, |_| {}).await), 2001);
    assert!(tdf_b.rars().is_empty(), "nothing sent to B");
    tdf_a.close().await;
    tdf_b.close().await;
    pcef.close().await;
}
