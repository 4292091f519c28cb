//! Who may speak over a connection, against the real `pcrf` binary: a
//! peer's requests must name the peer itself as Origin-Host (a relay is the
//! configured exception), a gateway whose old connection went silently
//! dead is served again at once on reconnecting, and a second connection
//! claiming a live gateway's identity does not push it off.
//!
//! The gateway on a raw socket is there because the test needs what a
//! well-behaved stack never does: a CER without Origin-State-Id, and a
//! connection that stays up but never answers again.

use crate::support;

use bytes::{Bytes, BytesMut};
use diameter::codec::{Message, MessageBuilder, FLAG_E, FLAG_R};
use diameter::dict::{avp, cmd, enums};
use std::time::{Duration, Instant};
use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const IMSI: &str = "001010000000001";

fn basic(p: &Pcrf) {
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
}

/// A CER from `host` for Gx, with Origin-State-Id only when `state` is set.
fn raw_cer(host: &str, state: Option<u32>) -> Bytes {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::new(&mut buf, FLAG_R, cmd::CAPABILITIES_EXCHANGE, 0, 1, 1);
    b.origin(host, "test.local")
        .address(avp::HOST_IP_ADDRESS, "127.0.0.1".parse().expect("ip"))
        .u32(avp::VENDOR_ID, 0)
        .str(avp::PRODUCT_NAME, "raw-gateway");
    if let Some(s) = state {
        b.u32(avp::ORIGIN_STATE_ID, s);
    }
    b.group(avp::VENDOR_SPECIFIC_APPLICATION_ID, |g| {
        g.u32(avp::VENDOR_ID, TGPP)
            .u32(avp::AUTH_APPLICATION_ID, GX);
    });
    b.finish();
    buf.freeze()
}

/// A CCR-I from `host` for `session`.
fn raw_ccr_i(host: &str, session: &str) -> Bytes {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::new(&mut buf, FLAG_R, cmd::CREDIT_CONTROL, GX, 2, 2);
    b.str(avp::SESSION_ID, session)
        .u32(avp::AUTH_APPLICATION_ID, GX)
        .origin(host, "test.local")
        .str(avp::DESTINATION_REALM, "test.local")
        .i32(
            avp::CC_REQUEST_TYPE,
            enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
        )
        .u32(avp::CC_REQUEST_NUMBER, 0);
    initial_avps(&mut b, IMSI);
    b.finish();
    buf.freeze()
}

/// Reads one whole message (header length first), within 10 s.
async fn read_msg(s: &mut TcpStream) -> Message {
    let read = async {
        let mut head = [0u8; 4];
        s.read_exact(&mut head).await.expect("header");
        let len = u32::from_be_bytes([0, head[1], head[2], head[3]]) as usize;
        let mut buf = vec![0u8; len];
        buf[..4].copy_from_slice(&head);
        s.read_exact(&mut buf[4..]).await.expect("body");
        Message::parse(Bytes::from(buf)).expect("message")
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("a message within 10 s")
}

/// Connects, sends a CER and returns the socket, the CEA's Result-Code
/// and how long the CEA took.
async fn raw_connect(
    addr: std::net::SocketAddr,
    host: &str,
    state: Option<u32>,
) -> (TcpStream, u32, Duration) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let t0 = Instant::now();
    s.write_all(&raw_cer(host, state)).await.expect("CER");
    let cea = read_msg(&mut s).await;
    assert_eq!(cea.command_code(), cmd::CAPABILITIES_EXCHANGE);
    (s, result_of(&cea), t0.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_naming_another_origin_host_is_refused_and_not_applied() {
    let p =
        Pcrf::start("[[peers]]\norigin_host = \"pgw2.test.local\"\naddresses = [\"127.0.0.1\"]\n");
    basic(&p);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    // pgw.test.local's connection carries a CCR-I naming pgw2.test.local.
    let cca = pcef
        .peer
        .request(GX, cmd::CREDIT_CONTROL, |b| {
            b.str(avp::SESSION_ID, "spoofed-1")
                .u32(avp::AUTH_APPLICATION_ID, GX)
                .origin("pgw2.test.local", "test.local")
                .str(avp::DESTINATION_REALM, "test.local")
                .i32(
                    avp::CC_REQUEST_TYPE,
                    enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
                )
                .u32(avp::CC_REQUEST_NUMBER, 0);
            initial_avps(b, IMSI);
        })
        .await
        .expect("an answer");
    assert_eq!(result_of(&cca), 3010, "DIAMETER_UNKNOWN_PEER");
    assert_ne!(cca.flags() & FLAG_E, 0, "a protocol error has the E bit");
    let (status, body) = p.http("GET", "/v1/sessions/spoofed-1", None);
    assert_eq!(status, 404, "the refused CCR-I made no session: {body}");
    // The peer's own requests go on being served on the same connection.
    assert_eq!(
        result_of(&pcef.ccr_i("pgw.test.local;1;1", IMSI).await),
        2001
    );
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_forwards_requests_of_other_gateways() {
    let p = Pcrf::start(
        "[[peers]]\norigin_host = \"dra.test.local\"\naddresses = [\"127.0.0.1\"]\nrelay = true\n",
    );
    basic(&p);
    let dra = Pcef::connect(p.diameter, "dra.test.local").await;
    let cca = dra
        .peer
        .request(GX, cmd::CREDIT_CONTROL, |b| {
            b.str(avp::SESSION_ID, "relayed-1")
                .u32(avp::AUTH_APPLICATION_ID, GX)
                .origin("pgw.test.local", "test.local")
                .str(avp::DESTINATION_REALM, "test.local")
                .i32(
                    avp::CC_REQUEST_TYPE,
                    enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
                )
                .u32(avp::CC_REQUEST_NUMBER, 0);
            initial_avps(b, IMSI);
        })
        .await
        .expect("an answer");
    assert_eq!(result_of(&cca), 2001);
    let (status, body) = p.http("GET", "/v1/sessions/relayed-1", None);
    assert_eq!(status, 200, "{body}");
    dra.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_whose_old_connection_went_silent_is_served_again_at_once() {
    let p = Pcrf::start("");
    basic(&p);
    // The gateway's first life: open, then silent (it never reads or
    // answers again, and no FIN ever comes: the socket stays open here).
    let (old, rc, _) = raw_connect(p.diameter, "pgw.test.local", Some(1)).await;
    assert_eq!(rc, 2001);
    // Restarted, it comes back without Origin-State-Id.
    let (mut new, rc, took) = raw_connect(p.diameter, "pgw.test.local", None).await;
    assert_eq!(rc, 2001, "the reconnecting gateway must be admitted");
    assert!(
        took < Duration::from_secs(4),
        "admitted after {took:?}, not once the old connection's watchdog gives up"
    );
    new.write_all(&raw_ccr_i("pgw.test.local", "pgw.test.local;9;1"))
        .await
        .expect("CCR");
    let cca = read_msg(&mut new).await;
    assert!(cca.flags() & FLAG_R == 0 && cca.command_code() == cmd::CREDIT_CONTROL);
    assert_eq!(result_of(&cca), 2001);
    eprintln!("reconnecting gateway admitted in {took:?}");
    drop(old);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_connection_claiming_a_live_gateway_does_not_push_it_off() {
    let p = Pcrf::start("");
    basic(&p);
    // The live gateway answers watchdogs (its stack does).
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    // Anyone from an allowed address claims its name with a new
    // Origin-State-Id over plain TCP.
    let (_intruder, rc, took) = raw_connect(p.diameter, "pgw.test.local", Some(999_999)).await;
    assert_eq!(rc, 5012, "DIAMETER_UNABLE_TO_COMPLY: the peer is open");
    eprintln!("claim refused in {took:?}");
    assert!(pcef.peer.is_open(), "the live gateway keeps its connection");
    assert_eq!(
        result_of(&pcef.ccr_i("pgw.test.local;2;1", IMSI).await),
        2001
    );
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_relay_on_sighup_is_logged_as_needing_a_restart() {
    let p = Pcrf::start(
        "[[peers]]\norigin_host = \"dra.test.local\"\naddresses = [\"127.0.0.1\"]\nrelay = true\n",
    );
    let text = std::fs::read_to_string(&p.config).expect("config");
    std::fs::write(&p.config, text.replace("relay = true", "relay = false")).expect("write");
    p.signal("-HUP");
    p.wait_log("configuration reloaded", 0, Duration::from_secs(5))
        .await;
    let log = p.log();
    assert!(
        log.contains("changed settings that apply only after a restart")
            && log.contains("[[peers]]"),
        "the running transport keeps its relays until a restart:\n{log}"
    );
}
