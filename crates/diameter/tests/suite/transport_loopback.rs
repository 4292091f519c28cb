//! The tokio transport over loopback TCP, a server and clients in one
//! process: CER/CEA, concurrent requests, answer coalescing, the in-flight
//! cap, request timeouts, malformed input, DPR on shutdown, the allow-list,
//! and requests the server originates towards a connected client.

use bytes::{Bytes, BytesMut};
use diameter::codec::{DiameterError, FLAG_E, FLAG_R};
use diameter::dict::{avp, cmd};
use diameter::peer::{
    AllowedPeer, Application, CloseReason, DisconnectCause, LocalNode, PeerSettings, PeerState,
};
use diameter::transport::{
    ErrorAwaitingCer, Handler, Node, PeerHandle, RequestError, Server, ServesNothing,
};
use diameter::{result_code, Message, MessageBuilder};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

const GX: u32 = 16_777_238;
const RX: u32 = 16_777_236;
const CCR: u32 = 272;
const WAIT: Duration = Duration::from_secs(5);

/// Answers CCR after `delay`, counting how many run at once.
#[derive(Default)]
struct Gx {
    delay: Duration,
    running: AtomicUsize,
    max_running: AtomicUsize,
    ups: Mutex<Vec<String>>,
    downs: Mutex<Vec<CloseReason>>,
}

impl Handler for Gx {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        app_id == GX && cmd == CCR
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        if !self.delay.is_zero() {
            // The slow handler under test.
            tokio::time::sleep(self.delay).await;
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        // A handler error becomes the RFC error answer.
        let [_, rtype] = req.pick(&[avp::SESSION_ID, avp::CC_REQUEST_TYPE])?;
        let mut out = BytesMut::new();
        let mut b = MessageBuilder::answer(&mut out, &req);
        b.result_code(result_code::DIAMETER_SUCCESS)
            .origin(&peer.local().origin_host, &peer.local().origin_realm)
            .u32(avp::AUTH_APPLICATION_ID, GX);
        if let Some(t) = rtype {
            b.raw_avp(t.raw());
        }
        b.finish();
        Ok(out.freeze())
    }

    fn peer_up(&self, peer: &PeerHandle) {
        let host = peer
            .origin_host()
            .map(|h| h.to_string())
            .unwrap_or_default();
        self.ups.lock().expect("lock").push(host);
    }

    fn peer_down(&self, _peer: &PeerHandle, reason: CloseReason) {
        self.downs.lock().expect("lock").push(reason);
    }
}

/// Defaults, but a short wait for DPA so a test's shutdown does not sit out 5 s.
fn quick() -> PeerSettings {
    PeerSettings {
        dpa_timeout: Duration::from_millis(500),
        ..PeerSettings::default()
    }
}

fn server_node(host: &str) -> LocalNode {
    LocalNode::new(host, "test.local").with_application(Application::auth_vendor(GX, 10415))
}

struct Running {
    addr: SocketAddr,
    node: Node<Gx>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("server stops in time")
            .expect("task")
            .expect("run");
    }
}

async fn start(settings: PeerSettings, handler: Gx) -> Running {
    let server = Server::bind(
        "127.0.0.1:0",
        server_node("pcrf.test.local"),
        settings,
        handler,
    )
    .await
    .expect("bind");
    let addr = server.local_addr().expect("addr");
    let node = server.node().clone();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = rx.await;
    }));
    Running {
        addr,
        node,
        stop: Some(tx),
        task,
    }
}

/// A CCR from client.test.local: the peer that sends it must be that
/// node (a request naming another Origin-Host is refused 3010).
fn ccr(b: &mut MessageBuilder<'_>, n: u32) {
    ccr_from(b, n, "client.test.local")
}

fn ccr_from(b: &mut MessageBuilder<'_>, n: u32, origin: &str) {
    let sid = format!("{origin};1;{n}");
    b.str(avp::SESSION_ID, &sid)
        .origin(origin, "test.local")
        .str(avp::DESTINATION_REALM, "test.local")
        .u32(avp::AUTH_APPLICATION_ID, GX)
        .u32(avp::CC_REQUEST_TYPE, 1)
        .u32(avp::CC_REQUEST_NUMBER, n);
}

fn rc(m: &Message) -> u32 {
    m.find(avp::RESULT_CODE)
        .expect("ok")
        .expect("Result-Code")
        .as_u32()
        .expect("u32")
}

// ---- a raw client that speaks bytes, to send what our stack never would ----

struct Raw {
    s: TcpStream,
    buf: BytesMut,
}

fn encode(f: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut b = BytesMut::new();
    f(&mut b);
    b.freeze()
}

fn raw_cer(host: &str, hbh: u32) -> Bytes {
    encode(|buf| {
        let mut b = MessageBuilder::new(buf, FLAG_R, cmd::CAPABILITIES_EXCHANGE, 0, hbh, hbh);
        b.origin(host, "test.local")
            .address(avp::HOST_IP_ADDRESS, "127.0.0.1".parse().expect("ip"))
            .u32(avp::VENDOR_ID, 0)
            .str(avp::PRODUCT_NAME, "raw")
            .group(avp::VENDOR_SPECIFIC_APPLICATION_ID, |g| {
                g.u32(avp::VENDOR_ID, 10415)
                    .u32(avp::AUTH_APPLICATION_ID, GX);
            });
        b.finish();
    })
}

fn raw_ccr(hbh: u32, app_id: u32, code: u32) -> Bytes {
    encode(|buf| {
        let mut b = MessageBuilder::request(buf, code, app_id, hbh, hbh);
        ccr(&mut b, hbh);
        b.finish();
    })
}

impl Raw {
    async fn connect(addr: SocketAddr) -> Raw {
        let s = TcpStream::connect(addr).await.expect("connect");
        s.set_nodelay(true).expect("nodelay");
        Raw {
            s,
            buf: BytesMut::new(),
        }
    }

    /// Connects and completes CER/CEA as `host`.
    async fn open(addr: SocketAddr, host: &str) -> Raw {
        let mut r = Raw::connect(addr).await;
        r.send(&raw_cer(host, 1)).await;
        let cea = r.recv().await.expect("CEA");
        assert_eq!(rc(&cea), 2001);
        r
    }

    async fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).await.expect("write");
    }

    /// The next message, or `None` when the server closed the connection.
    async fn recv(&mut self) -> Option<Message> {
        loop {
            if self.buf.len() >= 4 {
                let len = u32::from_be_bytes([0, self.buf[1], self.buf[2], self.buf[3]]) as usize;
                if self.buf.len() >= len {
                    let m = self.buf.split_to(len).freeze();
                    return Some(Message::parse(m).expect("server sends valid messages"));
                }
            }
            let n = tokio::time::timeout(WAIT, self.s.read_buf(&mut self.buf))
                .await
                .expect("no answer in time")
                .unwrap_or(0);
            if n == 0 {
                return None;
            }
        }
    }
}

// ---- tests ----

#[tokio::test]
async fn initiator_and_server_exchange_capabilities_and_requests() {
    let srv = start(quick(), Gx::default()).await;
    let client = Node::new(
        server_node("client.test.local"),
        PeerSettings::default(),
        ServesNothing,
    );
    let init = client.connect(srv.addr, Some("pcrf.test.local"));
    assert!(init.wait_open(WAIT).await, "connection opens");
    let peer = init.handle();
    assert_eq!(peer.origin_host().as_deref(), Some("pcrf.test.local"));
    assert!(peer.supports(GX) && !peer.supports(RX));
    assert_eq!(
        client
            .peer_table()
            .get("PCRF.test.local")
            .map(|p| p.same(&peer)),
        Some(true)
    );

    let ans = peer.request(GX, CCR, |b| ccr(b, 1)).await.expect("answer");
    assert_eq!(rc(&ans), 2001);
    assert_eq!(ans.session_id(), Ok(Some("client.test.local;1;1")));

    // The server knows the client by Origin-Host and saw it come up.
    let on_server = srv
        .node
        .peer_table()
        .get("client.test.local")
        .expect("registered");
    assert_eq!(on_server.state(), PeerState::Open);
    assert_eq!(
        srv.node.handler().ups.lock().expect("lock").as_slice(),
        ["client.test.local"]
    );
    assert_eq!(
        peer.request(RX, 265, |_| {}).await.err(),
        Some(RequestError::ApplicationNotNegotiated(RX))
    );

    init.shutdown(DisconnectCause::DoNotWantToTalkToYou).await;
    // The server saw our DPR.
    tokio::time::timeout(WAIT, async {
        while srv.node.peer_table().get("client.test.local").is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("server forgets the client");
    assert_eq!(
        srv.node.handler().downs.lock().expect("lock").as_slice(),
        [CloseReason::PeerDisconnect(Some(
            DisconnectCause::DoNotWantToTalkToYou
        ))]
    );
    srv.stop().await;
}

#[tokio::test]
async fn many_requests_run_concurrently_on_one_connection() {
    let handler = Gx {
        delay: Duration::from_millis(50),
        ..Gx::default()
    };
    let srv = start(quick(), handler).await;
    let client = Node::new(
        server_node("client.test.local"),
        PeerSettings::default(),
        ServesNothing,
    );
    let init = client.connect(srv.addr, None);
    assert!(init.wait_open(WAIT).await);
    let peer = init.handle();
    let started = std::time::Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for n in 0..400u32 {
        let p = peer.clone();
        set.spawn(async move { p.request(GX, CCR, |b| ccr(b, n)).await });
    }
    let mut ok = 0;
    while let Some(r) = set.join_next().await {
        let ans = r.expect("task").expect("answer");
        assert_eq!(rc(&ans), 2001);
        ok += 1;
    }
    assert_eq!(ok, 400);
    // One at a time would take 400 * 50 ms = 20 s.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(srv.node.handler().max_running.load(Ordering::SeqCst) > 50);
    let c = peer.counters().snapshot();
    assert_eq!(c.requests_out, 400);
    assert_eq!(c.answers_in, 400);
    init.shutdown(DisconnectCause::Rebooting).await;
    srv.stop().await;
}

#[tokio::test]
async fn answers_ready_together_leave_in_few_writes() {
    let srv = start(quick(), Gx::default()).await;
    let mut raw = Raw::open(srv.addr, "client.test.local").await;
    let mut burst = BytesMut::new();
    for n in 0..200 {
        burst.extend_from_slice(&raw_ccr(100 + n, GX, CCR));
    }
    raw.send(&burst).await;
    for _ in 0..200 {
        assert_eq!(rc(&raw.recv().await.expect("answer")), 2001);
    }
    let c = srv
        .node
        .peer_table()
        .get("client.test.local")
        .expect("open")
        .counters()
        .snapshot();
    assert_eq!(c.requests_in, 200);
    assert_eq!(c.messages_out, 201, "CEA + 200 answers");
    eprintln!(
        "coalescing: {} writes for {} messages",
        c.writes, c.messages_out
    );
    assert!(
        c.writes < 60,
        "answers coalesced: {} writes for {} messages",
        c.writes,
        c.messages_out
    );
    srv.stop().await;
}

#[tokio::test]
async fn requests_beyond_the_in_flight_cap_get_3004() {
    let settings = PeerSettings {
        max_in_flight: 3,
        ..quick()
    };
    let handler = Gx {
        delay: Duration::from_millis(300),
        ..Gx::default()
    };
    let srv = start(settings, handler).await;
    let mut raw = Raw::open(srv.addr, "client.test.local").await;
    let mut burst = BytesMut::new();
    for n in 0..10 {
        burst.extend_from_slice(&raw_ccr(n, GX, CCR));
    }
    raw.send(&burst).await;
    let mut busy = 0;
    let mut ok = 0;
    for _ in 0..10 {
        let m = raw.recv().await.expect("answer");
        match rc(&m) {
            3004 => {
                assert_eq!(m.flags() & FLAG_E, FLAG_E);
                busy += 1;
            }
            2001 => ok += 1,
            other => panic!("unexpected Result-Code {other}"),
        }
    }
    assert_eq!((ok, busy), (3, 7));
    let c = srv
        .node
        .peer_table()
        .get("client.test.local")
        .expect("open")
        .counters()
        .snapshot();
    assert_eq!(c.too_busy, 7);
    let last = srv
        .node
        .peer_table()
        .get("client.test.local")
        .expect("open")
        .counters()
        .last_error()
        .expect("the shedding is the last error");
    assert!(
        last.text
            .contains("answered 3004: too many requests in flight"),
        "{last:?}"
    );
    assert!(last.at_ms > 1_600_000_000_000, "{last:?}");
    srv.stop().await;
}

#[tokio::test]
async fn request_without_answer_times_out() {
    let handler = Gx {
        delay: Duration::from_secs(3),
        ..Gx::default()
    };
    let srv = start(quick(), handler).await;
    let settings = PeerSettings {
        request_timeout: Duration::from_millis(200),
        ..PeerSettings::default()
    };
    let client = Node::new(server_node("client.test.local"), settings, ServesNothing);
    let init = client.connect(srv.addr, None);
    assert!(init.wait_open(WAIT).await);
    let started = std::time::Instant::now();
    let r = init.handle().request(GX, CCR, |b| ccr(b, 1)).await;
    assert_eq!(r.err(), Some(RequestError::Timeout));
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(init.handle().counters().snapshot().request_timeouts, 1);
    init.shutdown(DisconnectCause::Rebooting).await;
    srv.stop().await;
}

#[tokio::test]
async fn server_sends_requests_to_a_connected_client() {
    // The client serves Gx CCR too, standing in for a PCEF answering RAR.
    let srv = start(quick(), Gx::default()).await;
    let client = Node::new(
        server_node("pgw.test.local"),
        PeerSettings::default(),
        Gx::default(),
    );
    let init = client.connect(srv.addr, None);
    assert!(init.wait_open(WAIT).await);
    let pgw = tokio::time::timeout(WAIT, async {
        loop {
            if let Some(p) = srv.node.peer_table().get("pgw.test.local") {
                return p;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("registered");
    let ans = pgw
        .request(GX, CCR, |b| ccr_from(b, 9, "pcrf.test.local"))
        .await
        .expect("answer");
    assert_eq!(rc(&ans), 2001);
    assert_eq!(client.handler().max_running.load(Ordering::SeqCst), 1);
    init.shutdown(DisconnectCause::Rebooting).await;
    srv.stop().await;
}

#[tokio::test]
async fn malformed_input_gets_rfc_answers_or_a_clean_close() {
    let srv = start(quick(), Gx::default()).await;
    let mut raw = Raw::open(srv.addr, "client.test.local").await;

    // An AVP whose length runs past the message: 5014 with Failed-AVP.
    let mut bad = BytesMut::from(&raw_ccr(10, GX, CCR)[..]);
    let last = bad.len();
    bad.extend_from_slice(&[0, 0, 1, 0x07, 0x40, 0, 0, 0x40]); // Session-Id? code 263, length 64
    let len = bad.len() as u32;
    bad[1..4].copy_from_slice(&len.to_be_bytes()[1..]);
    assert!(last < bad.len());
    raw.send(&bad).await;
    let m = raw.recv().await.expect("answer");
    assert_eq!(m.hop_by_hop(), 10);
    assert_eq!(rc(&m), result_code::DIAMETER_INVALID_AVP_LENGTH);
    assert!(m.find(avp::FAILED_AVP).expect("ok").is_some());

    // An unknown command of a negotiated application: 3001, E bit.
    raw.send(&raw_ccr(11, GX, 999)).await;
    let m = raw.recv().await.expect("answer");
    assert_eq!(rc(&m), result_code::DIAMETER_COMMAND_UNSUPPORTED);
    assert_eq!(m.flags() & FLAG_E, FLAG_E);

    // An application not negotiated: 3007.
    raw.send(&raw_ccr(12, RX, 265)).await;
    assert_eq!(
        rc(&raw.recv().await.expect("answer")),
        result_code::DIAMETER_APPLICATION_UNSUPPORTED
    );

    // A request with the E bit: 3008, Session-Id kept.
    let mut e = BytesMut::from(&raw_ccr(13, GX, CCR)[..]);
    e[4] |= FLAG_E;
    raw.send(&e).await;
    let m = raw.recv().await.expect("answer");
    assert_eq!(rc(&m), result_code::DIAMETER_INVALID_HDR_BITS);
    assert_eq!(m.hop_by_hop(), 13);
    assert_eq!(m.session_id(), Ok(Some("client.test.local;1;13")));

    // Still usable after all that.
    raw.send(&raw_ccr(14, GX, CCR)).await;
    assert_eq!(rc(&raw.recv().await.expect("answer")), 2001);
    let c = srv
        .node
        .peer_table()
        .get("client.test.local")
        .expect("open")
        .counters()
        .snapshot();
    assert_eq!(c.error_answers_out, 4);

    // A length that cannot be trusted: the connection closes.
    raw.send(&[1, 0, 0, 13, 0x80, 0, 1, 16]).await;
    assert!(raw.recv().await.is_none(), "closed");

    // Longer than max_message_len: closes too.
    let mut raw = Raw::open(srv.addr, "raw2.test.local").await;
    raw.send(&[1, 0x20, 0, 0, 0x80, 0, 1, 16]).await;
    assert!(raw.recv().await.is_none(), "closed");

    // Anything but CER first: closed without an answer.
    let mut raw = Raw::connect(srv.addr).await;
    raw.send(&raw_ccr(1, GX, CCR)).await;
    assert!(raw.recv().await.is_none(), "closed");
    srv.stop().await;
}

#[tokio::test]
async fn shutdown_sends_dpr_and_waits_for_dpa() {
    let srv = start(PeerSettings::default(), Gx::default()).await;
    let mut raw = Raw::open(srv.addr, "raw.test.local").await;
    let stop = srv.stop;
    let task = srv.task;
    stop.expect("stop").send(()).expect("signal");
    let dpr = raw.recv().await.expect("DPR");
    assert!(dpr.is_request());
    assert_eq!(dpr.command_code(), cmd::DISCONNECT_PEER);
    let cause = dpr.find(avp::DISCONNECT_CAUSE).expect("ok").expect("cause");
    assert_eq!(cause.as_enum(), Ok(DisconnectCause::Rebooting.value()));
    let dpa = encode(|buf| {
        let mut b = MessageBuilder::answer(buf, &dpr);
        b.result_code(2001).origin("raw.test.local", "test.local");
        b.finish();
    });
    let sent_at = std::time::Instant::now();
    raw.send(&dpa).await;
    assert!(raw.recv().await.is_none(), "server closes after the DPA");
    tokio::time::timeout(WAIT, task)
        .await
        .expect("run returns")
        .expect("task")
        .expect("ok");
    // It did not sit out the whole DPA timeout.
    assert!(sent_at.elapsed() < PeerSettings::default().dpa_timeout);
}

#[tokio::test]
async fn peer_not_on_the_allow_list_gets_3010_and_is_closed() {
    let settings = PeerSettings {
        allowed_peers: Some(vec![AllowedPeer {
            origin_host: "pgw.test.local".into(),
            addresses: vec!["127.0.0.1".parse().expect("ip")],
        }]),
        ..quick()
    };
    let srv = start(settings, Gx::default()).await;
    let mut raw = Raw::connect(srv.addr).await;
    raw.send(&raw_cer("intruder.test.local", 1)).await;
    let cea = raw.recv().await.expect("CEA");
    assert_eq!(rc(&cea), result_code::DIAMETER_UNKNOWN_PEER);
    assert_eq!(cea.flags() & FLAG_E, FLAG_E);
    assert!(raw.recv().await.is_none(), "closed");
    // The listed peer from the listed address gets in.
    let _ok = Raw::open(srv.addr, "pgw.test.local").await;
    srv.stop().await;
}

#[tokio::test]
async fn initiator_refuses_a_cea_from_another_origin_host_or_one_not_allowed() {
    // The server calls itself pcrf.test.local; we expect someone else there.
    let srv = start(quick(), Gx::default()).await;
    let client = Node::new(
        server_node("client.test.local"),
        PeerSettings::default(),
        ServesNothing,
    );
    let init = client.connect(srv.addr, Some("ocs.test.local"));
    assert!(
        !init.wait_open(Duration::from_millis(700)).await,
        "not opened"
    );
    assert!(client.peer_table().get("pcrf.test.local").is_none());
    init.shutdown(diameter::peer::DisconnectCause::Rebooting)
        .await;

    // Expected right, but an allow-list that does not admit it from there.
    let strict = PeerSettings {
        allowed_peers: Some(vec![diameter::peer::AllowedPeer {
            origin_host: "pcrf.test.local".into(),
            addresses: vec!["192.0.2.1".parse().expect("ip")],
        }]),
        ..PeerSettings::default()
    };
    let client = Node::new(server_node("client2.test.local"), strict, ServesNothing);
    let init = client.connect(srv.addr, Some("pcrf.test.local"));
    assert!(
        !init.wait_open(Duration::from_millis(700)).await,
        "not opened"
    );
    init.shutdown(diameter::peer::DisconnectCause::Rebooting)
        .await;
}

#[tokio::test]
async fn duplicate_connection_from_an_open_peer_is_refused() {
    let srv = start(quick(), Gx::default()).await;
    let mut first = Raw::open(srv.addr, "client.test.local").await;
    let mut second = Raw::connect(srv.addr).await;
    second.send(&raw_cer("client.test.local", 1)).await;
    // The open connection is asked whether it is alive, and answers.
    let dwr = first.recv().await.expect("probe DWR");
    assert_eq!(dwr.command_code(), cmd::DEVICE_WATCHDOG);
    assert!(dwr.is_request());
    let dwa = encode(|buf| {
        let mut b = MessageBuilder::answer(buf, &dwr);
        b.result_code(2001)
            .origin("client.test.local", "test.local");
        b.finish();
    });
    first.send(&dwa).await;
    let cea = second.recv().await.expect("CEA");
    assert_eq!(rc(&cea), result_code::DIAMETER_UNABLE_TO_COMPLY);
    assert!(second.recv().await.is_none());
    // The live one stays, and is served.
    first.send(&raw_ccr(5, GX, CCR)).await;
    assert_eq!(rc(&first.recv().await.expect("answer")), 2001);
    srv.stop().await;
}

#[tokio::test]
async fn a_silent_open_peer_is_replaced_by_its_new_connection() {
    let settings = PeerSettings {
        replace_probe: Duration::from_millis(300),
        ..quick()
    };
    let srv = start(settings, Gx::default()).await;
    // Open, then silent: it never answers again and never closes.
    let mut first = Raw::open(srv.addr, "client.test.local").await;
    let started = std::time::Instant::now();
    let mut second = Raw::connect(srv.addr).await;
    second.send(&raw_cer("client.test.local", 1)).await;
    let cea = second.recv().await.expect("CEA");
    let waited = started.elapsed();
    assert_eq!(rc(&cea), 2001, "the new connection replaces the dead one");
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    second.send(&raw_ccr(6, GX, CCR)).await;
    assert_eq!(rc(&second.recv().await.expect("answer")), 2001);
    // The old one got the probe, then was dropped.
    let dwr = first.recv().await.expect("probe DWR");
    assert_eq!(dwr.command_code(), cmd::DEVICE_WATCHDOG);
    assert!(first.recv().await.is_none(), "the old connection is closed");
    srv.stop().await;
}

#[tokio::test]
async fn initiator_reconnects_after_the_server_restarts() {
    let srv = start(quick(), Gx::default()).await;
    let addr = srv.addr;
    let settings = PeerSettings {
        reconnect_initial: Duration::from_millis(50),
        tc: Duration::from_millis(200),
        ..PeerSettings::default()
    };
    let client = Node::new(server_node("client.test.local"), settings, ServesNothing);
    let init = client.connect(addr, Some("pcrf.test.local"));
    assert!(init.wait_open(WAIT).await);
    // The server goes away with DPR REBOOTING; we answer and reconnect.
    srv.stop().await;
    let peer = init.handle();
    tokio::time::timeout(WAIT, peer.wait_state(|s| s != PeerState::Open))
        .await
        .expect("noticed");
    assert_eq!(
        peer.request(GX, CCR, |b| ccr(b, 1)).await.err(),
        Some(RequestError::NotConnected)
    );
    let server = Server::bind(
        addr,
        server_node("pcrf.test.local"),
        PeerSettings::default(),
        Gx::default(),
    )
    .await
    .expect("rebind");
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(server.run(async {
        let _ = rx.await;
    }));
    assert!(init.wait_open(WAIT).await, "reconnected");
    assert_eq!(
        rc(&peer.request(GX, CCR, |b| ccr(b, 2)).await.expect("answer")),
        2001
    );
    assert!(peer.counters().snapshot().connects >= 2);
    init.shutdown(DisconnectCause::Rebooting).await;
    let _ = tx.send(());
    task.await.expect("task").expect("run");
}

#[tokio::test]
async fn silent_peer_is_dropped_by_the_watchdog() {
    let settings = PeerSettings {
        tw: Duration::from_millis(300),
        ..quick()
    };
    let srv = start(settings, Gx::default()).await;
    let mut raw = Raw::open(srv.addr, "mute.test.local").await;
    let started = std::time::Instant::now();
    // The server sends DWRs we never answer: DWR, then SUSPECT, then DOWN.
    let dwr = raw.recv().await.expect("DWR");
    assert_eq!(dwr.command_code(), cmd::DEVICE_WATCHDOG);
    assert!(dwr.is_request());
    assert!(
        raw.recv().await.is_none(),
        "closed after the watchdog gave up"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(600) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert_eq!(
        srv.node.handler().downs.lock().expect("lock").as_slice(),
        [CloseReason::WatchdogDown]
    );
    srv.stop().await;
}

#[tokio::test]
async fn answered_watchdogs_keep_the_connection() {
    let settings = PeerSettings {
        tw: Duration::from_millis(200),
        ..quick()
    };
    let srv = start(settings, Gx::default()).await;
    let mut raw = Raw::open(srv.addr, "alive.test.local").await;
    for _ in 0..5 {
        let dwr = raw.recv().await.expect("DWR");
        assert_eq!(dwr.command_code(), cmd::DEVICE_WATCHDOG);
        let dwa = encode(|buf| {
            let mut b = MessageBuilder::answer(buf, &dwr);
            b.result_code(2001).origin("alive.test.local", "test.local");
            b.finish();
        });
        raw.send(&dwa).await;
    }
    assert!(srv.node.peer_table().get("alive.test.local").is_some());
    srv.stop().await;
}

#[tokio::test]
async fn dpr_busy_holds_the_initiator_off_and_rebooting_does_not() {
    let srv = start(quick(), Gx::default()).await;
    let settings = PeerSettings {
        reconnect_initial: Duration::from_millis(20),
        tc: Duration::from_millis(100),
        refused_holdoff: Some(Duration::from_secs(30)),
        ..quick()
    };
    let client = Node::new(server_node("client.test.local"), settings, ServesNothing);
    let init = client.connect(srv.addr, None);
    assert!(init.wait_open(WAIT).await);
    let peer = init.handle();
    let on_server = |srv: &Running| {
        let t = srv.node.peer_table().clone();
        async move {
            tokio::time::timeout(WAIT, async {
                loop {
                    if let Some(p) = t.get("client.test.local") {
                        return p;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await
            .expect("client registered")
        }
    };

    // REBOOTING: the client comes back at once.
    on_server(&srv).await.close(DisconnectCause::Rebooting);
    tokio::time::timeout(WAIT, peer.wait_state(|s| s != PeerState::Open))
        .await
        .expect("closed");
    assert!(init.wait_open(WAIT).await, "reconnected after REBOOTING");

    // BUSY: the client must not come back within the hold-off.
    on_server(&srv).await.close(DisconnectCause::Busy);
    tokio::time::timeout(WAIT, peer.wait_state(|s| s != PeerState::Open))
        .await
        .expect("closed");
    assert!(
        !init.wait_open(Duration::from_millis(700)).await,
        "no reconnection after BUSY"
    );
    assert_eq!(peer.counters().snapshot().connects, 2);
    init.shutdown(DisconnectCause::Rebooting).await;
    srv.stop().await;
}

#[tokio::test]
async fn garbage_from_one_peer_does_not_disturb_another() {
    let srv = start(quick(), Gx::default()).await;
    let mut good = Raw::open(srv.addr, "client.test.local").await;
    let mut rng = diameter::peer::Jitter::seeded(1234);
    let mut attackers = Vec::new();
    for i in 0..20u32 {
        let addr = srv.addr;
        let mut junk: Vec<u8> = (0..512).map(|_| rng.next_u64() as u8).collect();
        if i % 2 == 0 {
            // A believable header first, then junk AVPs.
            junk[..4].copy_from_slice(&[1, 0, 2, 0]);
            junk[4] = 0x80;
        }
        attackers.push(tokio::spawn(async move {
            let mut r = Raw::connect(addr).await;
            if i % 3 == 0 {
                r.send(&raw_cer(&format!("junk{i}.test.local"), 1)).await;
            }
            let _ = r.s.write_all(&junk).await;
            let mut sink = [0u8; 4096];
            // Drain until the server closes us.
            let _ = tokio::time::timeout(WAIT, async {
                while let Ok(n) = r.s.read(&mut sink).await {
                    if n == 0 {
                        break;
                    }
                }
            })
            .await;
        }));
        good.send(&raw_ccr(1000 + i, GX, CCR)).await;
        assert_eq!(rc(&good.recv().await.expect("answer")), 2001);
    }
    for a in attackers {
        a.await.expect("attacker task");
    }
    good.send(&raw_ccr(5000, GX, CCR)).await;
    assert_eq!(rc(&good.recv().await.expect("answer")), 2001);
    assert_eq!(srv.node.peer_table().len(), 1, "only the good peer is open");
    srv.stop().await;
}

#[tokio::test]
async fn request_pipelined_right_behind_the_cer_is_served() {
    let srv = start(quick(), Gx::default()).await;
    let mut raw = Raw::connect(srv.addr).await;
    let mut both = BytesMut::from(&raw_cer("client.test.local", 1)[..]);
    both.extend_from_slice(&raw_ccr(2, GX, CCR));
    raw.send(&both).await;
    let cea = raw.recv().await.expect("CEA");
    assert_eq!(cea.command_code(), cmd::CAPABILITIES_EXCHANGE);
    assert_eq!(rc(&cea), 2001);
    let cca = raw.recv().await.expect("CCA");
    assert_eq!((cca.hop_by_hop(), rc(&cca)), (2, 2001));
    srv.stop().await;
}

#[tokio::test]
async fn a_long_message_arriving_in_pieces_is_reassembled() {
    let srv = start(quick(), Gx::default()).await;
    let mut raw = Raw::open(srv.addr, "client.test.local").await;
    let big = encode(|buf| {
        let mut b = MessageBuilder::request(buf, CCR, GX, 77, 77);
        ccr(&mut b, 77);
        // An AVP we do not know, without the M bit: carried, ignored.
        b.bytes(
            diameter::codec::AvpCode::new(999_999, 0, false),
            &vec![0xab; 300_000],
        );
        b.finish();
    });
    for chunk in big.chunks(7_001) {
        raw.send(chunk).await;
        tokio::task::yield_now().await;
    }
    let m = raw.recv().await.expect("answer");
    assert_eq!((m.hop_by_hop(), rc(&m)), (77, 2001));
    srv.stop().await;
}

#[tokio::test]
async fn an_abandoned_request_leaves_no_waiter_behind() {
    let handler = Gx {
        delay: Duration::from_millis(200),
        ..Gx::default()
    };
    let srv = start(quick(), handler).await;
    let client = Node::new(server_node("client.test.local"), quick(), ServesNothing);
    let init = client.connect(srv.addr, None);
    assert!(init.wait_open(WAIT).await);
    let peer = init.handle();
    // The caller gives up after 20 ms; the answer comes at 200 ms and finds nobody.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(20),
        peer.request(GX, CCR, |b| ccr(b, 1)),
    )
    .await;
    assert!(gave_up.is_err());
    tokio::time::timeout(WAIT, async {
        while peer.counters().snapshot().unmatched_answers == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("late answer counted as unmatched");
    assert_eq!(peer.counters().snapshot().answers_in, 0);
    // The connection is fine.
    assert_eq!(
        rc(&peer.request(GX, CCR, |b| ccr(b, 2)).await.expect("answer")),
        2001
    );
    init.shutdown(DisconnectCause::Rebooting).await;
    srv.stop().await;
}

/// A message header of a CER announcing `len` bytes, then `body` bytes of
/// filler: the start of a message that is never finished.
fn announced(len: u32, body: usize) -> Vec<u8> {
    let mut v = len.to_be_bytes().to_vec();
    v[0] = 1;
    v.extend_from_slice(&[0x80, 0, 1, 1]);
    v.extend_from_slice(&[0; 12]);
    v.resize(20 + body, 7);
    v
}

fn errors_awaiting_cer(node: &Node<Gx>, kind: ErrorAwaitingCer) -> u64 {
    node.peer_table()
        .errors_awaiting_cer()
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or(0, |(_, n)| *n)
}

#[tokio::test]
async fn a_connection_awaiting_cer_may_only_send_a_short_message() {
    let srv = start(quick(), Gx::default()).await;
    // Announcing 64 KiB before CER: closed at the header, nothing buffered.
    let mut raw = Raw::connect(srv.addr).await;
    raw.send(&announced(64 << 10, 1000)).await;
    assert!(raw.recv().await.is_none(), "closed");
    assert_eq!(errors_awaiting_cer(&srv.node, ErrorAwaitingCer::TooLong), 1);

    // A CER of 15 KiB (an unknown AVP without the M bit makes it long) is
    // within the bound, and once open the peer may send long messages.
    let long_cer = encode(|buf| {
        let mut b = MessageBuilder::new(buf, FLAG_R, cmd::CAPABILITIES_EXCHANGE, 0, 1, 1);
        b.origin("client.test.local", "test.local")
            .address(avp::HOST_IP_ADDRESS, "127.0.0.1".parse().expect("ip"))
            .u32(avp::VENDOR_ID, 0)
            .str(avp::PRODUCT_NAME, "raw")
            .group(avp::VENDOR_SPECIFIC_APPLICATION_ID, |g| {
                g.u32(avp::VENDOR_ID, 10415)
                    .u32(avp::AUTH_APPLICATION_ID, GX);
            })
            .bytes(
                diameter::codec::AvpCode::new(999_999, 0, false),
                &[0; 15 << 10],
            );
        b.finish();
    });
    let mut raw = Raw::connect(srv.addr).await;
    raw.send(&long_cer).await;
    assert_eq!(rc(&raw.recv().await.expect("CEA")), 2001);
    let big = encode(|buf| {
        let mut b = MessageBuilder::request(buf, CCR, GX, 9, 9);
        ccr(&mut b, 9);
        b.bytes(
            diameter::codec::AvpCode::new(999_999, 0, false),
            &[0; 100_000],
        );
        b.finish();
    });
    raw.send(&big).await;
    assert_eq!(rc(&raw.recv().await.expect("answer")), 2001);
    assert_eq!(srv.node.peer_table().buffered_awaiting_cer(), 0);
    srv.stop().await;
}

#[tokio::test]
async fn connections_awaiting_cer_share_one_byte_budget() {
    const BUDGET: usize = 64 << 10;
    let settings = PeerSettings {
        max_buffered_awaiting_cer: BUDGET,
        ..quick()
    };
    let srv = start(settings, Gx::default()).await;
    let table = srv.node.peer_table().clone();
    // Eight connections, each with 12 KiB of a 16 KiB message: 96 KiB.
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut raw = Raw::connect(srv.addr).await;
        raw.send(&announced(16 << 10, 12 << 10)).await;
        held.push(raw);
    }
    // Each is either closed or holds its whole 12 KiB.
    const EACH: usize = 20 + (12 << 10);
    let settled = || {
        let closed = errors_awaiting_cer(&srv.node, ErrorAwaitingCer::BufferBudget) as usize;
        let buffered = table.buffered_awaiting_cer() as usize;
        (
            closed,
            buffered,
            buffered % EACH == 0 && closed + buffered / EACH == 8,
        )
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while !settled().2 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (closed, buffered, done) = settled();
    assert!(done, "{closed} closed, {buffered} bytes held");
    assert!(buffered <= BUDGET, "{buffered} bytes held");
    assert!(closed >= 3, "only {closed} closed");
    // A real peer still gets in: its CER arrives whole.
    let good = Raw::open(srv.addr, "client.test.local").await;
    drop(held);
    let deadline = tokio::time::Instant::now() + WAIT;
    while table.buffered_awaiting_cer() != 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(table.buffered_awaiting_cer(), 0, "released when they close");
    drop(good);
    srv.stop().await;
}
