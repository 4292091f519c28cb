//! The peer state machine driven without sockets or clocks: capabilities
//! exchange (accepted, 3010, 5010, 5005, missing M bits), the RFC 3539
//! watchdog with injected time, DPR/DPA both ways, election refusals and
//! the initiator side.

use bytes::{Bytes, BytesMut};
use diameter::codec::{AvpCode, FLAG_E, FLAG_R};
use diameter::dict::{app, avp, cmd};
use diameter::peer::{
    Action, AllowedPeer, Application, CloseReason, DisconnectCause, Inbound, Jitter, LocalNode,
    PeerMachine, PeerSettings, PeerState, WatchdogState,
};
use diameter::{result_code, Message, MessageBuilder};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

const GX: u32 = 16_777_238;
const RX: u32 = 16_777_236;

fn local() -> Arc<LocalNode> {
    Arc::new(
        LocalNode::new("pcrf.test.local", "test.local")
            .with_application(Application::auth_vendor(GX, 10415))
            .with_host_ip("127.0.0.1".parse().expect("ip")),
    )
}

fn remote() -> SocketAddr {
    "127.0.0.9:40000".parse().expect("addr")
}

fn responder(settings: PeerSettings, t0: Instant) -> PeerMachine {
    PeerMachine::responder(
        local(),
        Arc::new(settings),
        Some(remote()),
        Some("127.0.0.1".parse().expect("ip")),
        t0,
        Jitter::seeded(11),
    )
}

/// A CER from `host` advertising `apps`; `m_bit` false drops the M flag
/// from Origin-Host/Origin-Realm as some stacks do.
fn cer(host: &str, apps: &[Application], m_bit: bool) -> Message {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::new(&mut buf, FLAG_R, cmd::CAPABILITIES_EXCHANGE, 0, 7, 8);
    b.str(AvpCode::new(264, 0, m_bit), host)
        .str(AvpCode::new(296, 0, m_bit), "test.local")
        .address(avp::HOST_IP_ADDRESS, "127.0.0.9".parse().expect("ip"))
        .u32(avp::VENDOR_ID, 0)
        .str(avp::PRODUCT_NAME, "peer-test")
        .u32(avp::ORIGIN_STATE_ID, 5);
    for a in apps {
        match *a {
            Application::Auth { id, vendor: None } => {
                b.u32(avp::AUTH_APPLICATION_ID, id);
            }
            Application::Auth {
                id,
                vendor: Some(v),
            } => {
                b.group(avp::VENDOR_SPECIFIC_APPLICATION_ID, |g| {
                    g.u32(avp::VENDOR_ID, v).u32(avp::AUTH_APPLICATION_ID, id);
                });
            }
            Application::Acct { id, .. } => {
                b.u32(avp::ACCT_APPLICATION_ID, id);
            }
        }
    }
    b.finish();
    Message::parse(buf.freeze()).expect("cer")
}

fn request(code: u32, app_id: u32, hbh: u32, f: impl FnOnce(&mut MessageBuilder<'_>)) -> Message {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::new(&mut buf, FLAG_R, code, app_id, hbh, hbh);
    b.origin("pgw.test.local", "test.local");
    f(&mut b);
    b.finish();
    Message::parse(buf.freeze()).expect("request")
}

fn answer_to(req: &Message, rc: u32) -> Message {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::answer(&mut buf, req);
    b.result_code(rc).origin("pgw.test.local", "test.local");
    b.finish();
    Message::parse(buf.freeze()).expect("answer")
}

fn drain(m: &mut PeerMachine) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

fn sent(actions: &[Action]) -> Vec<Message> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send(b) => Some(Message::parse(b.clone()).expect("we send valid messages")),
            _ => None,
        })
        .collect()
}

fn closed(actions: &[Action]) -> Option<CloseReason> {
    actions.iter().find_map(|a| match a {
        Action::Close(r) => Some(*r),
        _ => None,
    })
}

fn rc(m: &Message) -> u32 {
    m.find(avp::RESULT_CODE)
        .expect("ok")
        .expect("Result-Code")
        .as_u32()
        .expect("u32")
}

/// A responder opened with a Gx peer, its actions drained.
fn open_responder(t0: Instant) -> PeerMachine {
    let mut m = responder(PeerSettings::default(), t0);
    m.receive(
        t0,
        cer(
            "pgw.test.local",
            &[Application::auth_vendor(GX, 10415)],
            true,
        ),
    );
    let a = drain(&mut m);
    assert!(matches!(a.as_slice(), [Action::Admit]), "{a:?}");
    m.accept(t0);
    drain(&mut m);
    assert_eq!(m.state(), PeerState::Open);
    m
}

#[test]
fn cer_accepted_answers_cea_with_our_capabilities() {
    let t0 = Instant::now();
    let mut m = responder(PeerSettings::default(), t0);
    assert_eq!(m.state(), PeerState::WaitCer);
    let r = m.receive(
        t0,
        cer(
            "pgw.test.local",
            &[Application::auth_vendor(GX, 10415)],
            true,
        ),
    );
    assert!(matches!(r, Inbound::Consumed));
    assert!(matches!(drain(&mut m).as_slice(), [Action::Admit]));
    assert_eq!(m.state(), PeerState::Admitting);
    m.accept(t0);
    let a = drain(&mut m);
    let out = sent(&a);
    assert_eq!(out.len(), 1);
    let cea = &out[0];
    assert!(!cea.is_request());
    assert_eq!(cea.command_code(), cmd::CAPABILITIES_EXCHANGE);
    assert_eq!((cea.hop_by_hop(), cea.end_to_end()), (7, 8));
    assert_eq!(rc(cea), result_code::DIAMETER_SUCCESS);
    let [host, ip, vendor, product, state, vsa, svi] = cea
        .pick(&[
            avp::ORIGIN_HOST,
            avp::HOST_IP_ADDRESS,
            avp::VENDOR_ID,
            avp::PRODUCT_NAME,
            avp::ORIGIN_STATE_ID,
            avp::VENDOR_SPECIFIC_APPLICATION_ID,
            avp::SUPPORTED_VENDOR_ID,
        ])
        .expect("ok");
    assert_eq!(host.expect("host").as_identity(), Ok("pcrf.test.local"));
    assert_eq!(
        ip.expect("ip").as_address(),
        Ok("127.0.0.1".parse::<IpAddr>().expect("ip"))
    );
    assert!(vendor.is_some() && product.is_some() && state.is_some());
    assert_eq!(svi.expect("svi").as_u32(), Ok(10415));
    let inner = vsa
        .expect("vsa")
        .grouped()
        .find(avp::AUTH_APPLICATION_ID)
        .expect("ok")
        .expect("auth app");
    assert_eq!(inner.as_u32(), Ok(GX));
    assert_eq!(cea.validate().map(|n| n > 0), Ok(true));
    assert!(a.iter().any(|x| matches!(x, Action::Open)));
    assert_eq!(m.state(), PeerState::Open);
    assert!(m.negotiated().contains(GX));
    assert!(!m.negotiated().contains(RX));
    assert_eq!(
        m.peer().map(|p| p.origin_host.as_str()),
        Some("pgw.test.local")
    );
    assert_eq!(m.peer().map(|p| p.origin_state_id), Some(Some(5)));
}

#[test]
fn origin_host_without_m_bit_is_tolerated() {
    let t0 = Instant::now();
    let mut m = responder(PeerSettings::default(), t0);
    m.receive(t0, cer("old.stack", &[Application::auth(GX)], false));
    assert!(matches!(drain(&mut m).as_slice(), [Action::Admit]));
    assert_eq!(m.peer().map(|p| p.origin_host.as_str()), Some("old.stack"));
}

#[test]
fn peer_not_on_allow_list_gets_3010_and_close() {
    let t0 = Instant::now();
    let allow = |host: &str, ip: &str| PeerSettings {
        allowed_peers: Some(vec![AllowedPeer {
            origin_host: host.into(),
            addresses: vec![ip.parse().expect("ip")],
        }]),
        ..PeerSettings::default()
    };
    // Wrong host.
    let mut m = responder(allow("other.host", "127.0.0.9"), t0);
    m.receive(t0, cer("pgw.test.local", &[Application::auth(GX)], true));
    let a = drain(&mut m);
    let cea = &sent(&a)[0];
    assert_eq!(rc(cea), result_code::DIAMETER_UNKNOWN_PEER);
    assert_eq!(cea.flags() & FLAG_E, FLAG_E, "3xxx carries the E bit");
    assert_eq!(closed(&a), Some(CloseReason::Refused(3010)));
    assert_eq!(m.state(), PeerState::Closed);
    // Right host, wrong source address.
    let mut m = responder(allow("pgw.test.local", "127.0.0.10"), t0);
    m.receive(t0, cer("pgw.test.local", &[Application::auth(GX)], true));
    assert_eq!(closed(&drain(&mut m)), Some(CloseReason::Refused(3010)));
    // Both right.
    let mut m = responder(allow("PGW.test.local", "127.0.0.9"), t0);
    m.receive(t0, cer("pgw.test.local", &[Application::auth(GX)], true));
    assert!(matches!(drain(&mut m).as_slice(), [Action::Admit]));
}

#[test]
fn no_common_application_is_5010() {
    let t0 = Instant::now();
    let mut m = responder(PeerSettings::default(), t0);
    m.receive(
        t0,
        cer(
            "af.test.local",
            &[Application::auth_vendor(RX, 10415)],
            true,
        ),
    );
    let a = drain(&mut m);
    let cea = &sent(&a)[0];
    assert_eq!(rc(cea), result_code::DIAMETER_NO_COMMON_APPLICATION);
    assert_eq!(cea.flags() & FLAG_E, 0, "5xxx has no E bit");
    assert_eq!(closed(&a), Some(CloseReason::Refused(5010)));
    // Relay matches everything.
    let mut m = responder(PeerSettings::default(), t0);
    m.receive(
        t0,
        cer("dra.test.local", &[Application::auth(app::RELAY)], true),
    );
    assert!(matches!(drain(&mut m).as_slice(), [Action::Admit]));
    assert!(m.negotiated().contains(GX));
}

#[test]
fn cer_without_origin_host_is_5005_with_failed_avp() {
    let t0 = Instant::now();
    let mut m = responder(PeerSettings::default(), t0);
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::new(&mut buf, FLAG_R, cmd::CAPABILITIES_EXCHANGE, 0, 1, 1);
    b.str(avp::ORIGIN_REALM, "test.local")
        .u32(avp::AUTH_APPLICATION_ID, GX);
    b.finish();
    m.receive(t0, Message::parse(buf.freeze()).expect("cer"));
    let a = drain(&mut m);
    let cea = &sent(&a)[0];
    assert_eq!(rc(cea), result_code::DIAMETER_MISSING_AVP);
    let failed = cea.find(avp::FAILED_AVP).expect("ok").expect("Failed-AVP");
    let inner = failed.grouped().next().expect("inner").expect("ok");
    assert_eq!(inner.code(), avp::ORIGIN_HOST.code);
    assert_eq!(closed(&a), Some(CloseReason::Refused(5005)));
}

#[test]
fn cer_with_a_v_bit_and_vendor_id_zero_is_refused_3009() {
    let t0 = Instant::now();
    let mut m = responder(PeerSettings::default(), t0);
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::new(&mut buf, FLAG_R, cmd::CAPABILITIES_EXCHANGE, 0, 1, 1);
    b.origin("pgw.test.local", "test.local")
        .u32(avp::AUTH_APPLICATION_ID, GX);
    // Product-Name (269) with the V bit and a Vendor-ID of 0.
    b.raw_avp(&[0, 0, 1, 13, 0x80, 0, 0, 15, 0, 0, 0, 0, b'p', b'g', b'w']);
    b.finish();
    m.receive(t0, Message::parse(buf.freeze()).expect("cer"));
    let a = drain(&mut m);
    let cea = &sent(&a)[0];
    assert_eq!(rc(cea), result_code::DIAMETER_INVALID_AVP_BITS);
    assert_eq!(cea.flags() & FLAG_E, FLAG_E, "a protocol error");
    let failed = cea.find(avp::FAILED_AVP).expect("ok").expect("Failed-AVP");
    let inner = failed.grouped().next().expect("inner").expect("ok");
    assert_eq!((inner.code(), inner.vendor()), (269, 0));
    assert_eq!(closed(&a), Some(CloseReason::Refused(3009)));
}

#[test]
fn anything_but_cer_first_closes_without_answer() {
    let t0 = Instant::now();
    let mut m = responder(PeerSettings::default(), t0);
    let ccr = request(272, GX, 1, |_| {});
    assert!(matches!(m.receive(t0, ccr), Inbound::Consumed));
    let a = drain(&mut m);
    assert!(sent(&a).is_empty());
    assert_eq!(closed(&a), Some(CloseReason::ProtocolViolation));
    let mut m = responder(PeerSettings::default(), t0);
    m.receive(t0, request(cmd::DEVICE_WATCHDOG, 0, 1, |_| {}));
    assert_eq!(closed(&drain(&mut m)), Some(CloseReason::ProtocolViolation));
}

#[test]
fn no_cer_in_time_closes() {
    let t0 = Instant::now();
    let mut m = responder(PeerSettings::default(), t0);
    let d = m.next_deadline().expect("cer deadline");
    assert_eq!(d - t0, PeerSettings::default().cer_timeout);
    m.on_timer(d - Duration::from_millis(1));
    assert!(drain(&mut m).is_empty());
    m.on_timer(d);
    assert_eq!(
        closed(&drain(&mut m)),
        Some(CloseReason::CapabilitiesTimeout)
    );
}

#[test]
fn election_or_duplicate_refusal_answers_and_closes() {
    let t0 = Instant::now();
    let mut m = responder(PeerSettings::default(), t0);
    m.receive(t0, cer("pgw.test.local", &[Application::auth(GX)], true));
    drain(&mut m);
    m.refuse(result_code::ELECTION_LOST, "election lost");
    let a = drain(&mut m);
    assert_eq!(rc(&sent(&a)[0]), result_code::ELECTION_LOST);
    assert_eq!(closed(&a), Some(CloseReason::Refused(4003)));
}

#[test]
fn application_messages_are_routed_once_open() {
    let t0 = Instant::now();
    let mut m = open_responder(t0);
    let ccr = request(272, GX, 42, |_| {});
    match m.receive(t0, ccr) {
        Inbound::Application(msg) => assert_eq!(msg.hop_by_hop(), 42),
        other => panic!("expected routing, got {other:?}"),
    }
    // A second CER on an open connection: CEA again, still open.
    m.receive(t0, cer("pgw.test.local", &[Application::auth(GX)], true));
    let a = drain(&mut m);
    assert_eq!(rc(&sent(&a)[0]), result_code::DIAMETER_SUCCESS);
    assert_eq!(m.state(), PeerState::Open);
}

#[test]
fn watchdog_with_injected_time() {
    let t0 = Instant::now();
    let mut m = open_responder(t0);
    let tw = PeerSettings::default().tw;
    // The first DWR after Tw ±2 s of silence.
    let d = m.next_deadline().expect("watchdog");
    assert!(d - t0 >= tw - Duration::from_secs(2) && d - t0 <= tw + Duration::from_secs(2));
    // Traffic resets the timer.
    let t1 = t0 + Duration::from_secs(20);
    m.receive(t1, request(272, GX, 1, |_| {}));
    assert!(m.next_deadline().expect("rearmed") >= t1 + tw - Duration::from_secs(2));
    let d = m.next_deadline().expect("deadline");
    m.on_timer(d);
    let a = drain(&mut m);
    let dwr = &sent(&a)[0];
    assert!(dwr.is_request());
    assert_eq!(dwr.command_code(), cmd::DEVICE_WATCHDOG);
    assert!(dwr.find(avp::ORIGIN_HOST).expect("ok").is_some());
    // DWA clears it; silence again sends another DWR.
    m.receive(d + Duration::from_secs(1), answer_to(dwr, 2001));
    assert!(drain(&mut m).is_empty());
    let d = m.next_deadline().expect("deadline");
    m.on_timer(d);
    let a = drain(&mut m);
    assert_eq!(sent(&a)[0].command_code(), cmd::DEVICE_WATCHDOG);
    // No DWA within Tw: SUSPECT; another Tw: DOWN and close.
    let d = m.next_deadline().expect("deadline");
    m.on_timer(d);
    let a = drain(&mut m);
    assert!(a
        .iter()
        .any(|x| matches!(x, Action::Watchdog(WatchdogState::Suspect))));
    assert_eq!(m.watchdog_state(), WatchdogState::Suspect);
    let d = m.next_deadline().expect("deadline");
    m.on_timer(d);
    let a = drain(&mut m);
    assert_eq!(closed(&a), Some(CloseReason::WatchdogDown));
    assert_eq!(m.state(), PeerState::Closed);
    assert_eq!(m.next_deadline(), None);
}

#[test]
fn suspect_peer_recovers_on_any_message() {
    let t0 = Instant::now();
    let mut m = open_responder(t0);
    let d = m.next_deadline().expect("deadline");
    m.on_timer(d);
    let d = m.next_deadline().expect("deadline");
    m.on_timer(d);
    drain(&mut m);
    assert_eq!(m.watchdog_state(), WatchdogState::Suspect);
    m.receive(d, request(272, GX, 3, |_| {}));
    let a = drain(&mut m);
    assert!(a
        .iter()
        .any(|x| matches!(x, Action::Watchdog(WatchdogState::Okay))));
}

#[test]
fn dwr_is_answered_with_dwa() {
    let t0 = Instant::now();
    let mut m = open_responder(t0);
    m.receive(t0, request(cmd::DEVICE_WATCHDOG, 0, 77, |_| {}));
    let a = drain(&mut m);
    let dwa = &sent(&a)[0];
    assert!(!dwa.is_request());
    assert_eq!(dwa.hop_by_hop(), 77);
    assert_eq!(rc(dwa), 2001);
    assert!(dwa.find(avp::ORIGIN_STATE_ID).expect("ok").is_some());
}

#[test]
fn peer_dpr_is_answered_and_closes_with_its_cause() {
    let t0 = Instant::now();
    let mut m = open_responder(t0);
    m.receive(
        t0,
        request(cmd::DISCONNECT_PEER, 0, 9, |b| {
            b.i32(avp::DISCONNECT_CAUSE, DisconnectCause::Busy.value());
        }),
    );
    let a = drain(&mut m);
    let dpa = &sent(&a)[0];
    assert_eq!(dpa.command_code(), cmd::DISCONNECT_PEER);
    assert_eq!(rc(dpa), 2001);
    assert_eq!(
        closed(&a),
        Some(CloseReason::PeerDisconnect(Some(DisconnectCause::Busy)))
    );
}

#[test]
fn local_close_sends_dpr_and_waits_for_dpa_bounded() {
    let t0 = Instant::now();
    let mut m = open_responder(t0);
    m.close(t0, DisconnectCause::Rebooting);
    let a = drain(&mut m);
    let dpr = sent(&a)[0].clone();
    assert!(dpr.is_request());
    assert_eq!(dpr.command_code(), cmd::DISCONNECT_PEER);
    let cause = dpr.find(avp::DISCONNECT_CAUSE).expect("ok").expect("cause");
    assert_eq!(cause.as_enum(), Ok(0));
    assert_eq!(m.state(), PeerState::Closing);
    // Requests still arriving while closing are routed (in-flight work finishes).
    assert!(matches!(
        m.receive(t0, request(272, GX, 5, |_| {})),
        Inbound::Application(_)
    ));
    m.receive(t0, answer_to(&dpr, 2001));
    assert_eq!(
        closed(&drain(&mut m)),
        Some(CloseReason::LocalDisconnect(DisconnectCause::Rebooting))
    );

    // Without a DPA the wait ends at dpa_timeout.
    let mut m = open_responder(t0);
    m.close(t0, DisconnectCause::DoNotWantToTalkToYou);
    drain(&mut m);
    let d = m.next_deadline().expect("dpa deadline");
    assert_eq!(d - t0, PeerSettings::default().dpa_timeout);
    m.on_timer(d);
    assert_eq!(
        closed(&drain(&mut m)),
        Some(CloseReason::LocalDisconnect(
            DisconnectCause::DoNotWantToTalkToYou
        ))
    );
}

fn initiator(t0: Instant) -> (PeerMachine, Message) {
    let mut m = PeerMachine::initiator(
        local(),
        Arc::new(PeerSettings::default()),
        Some(remote()),
        None,
        t0,
        Jitter::seeded(5),
    );
    assert_eq!(m.state(), PeerState::WaitCea);
    let a = drain(&mut m);
    let out = sent(&a);
    assert_eq!(out.len(), 1);
    let cer = out[0].clone();
    assert!(cer.is_request());
    assert_eq!(cer.command_code(), cmd::CAPABILITIES_EXCHANGE);
    (m, cer)
}

fn cea(cer: &Message, rc: u32, apps: &[Application]) -> Message {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::answer(&mut buf, cer);
    b.result_code(rc).origin("pgw.test.local", "test.local");
    for a in apps {
        b.u32(avp::AUTH_APPLICATION_ID, a.id());
    }
    b.finish();
    Message::parse(buf.freeze()).expect("cea")
}

#[test]
fn initiator_opens_on_successful_cea() {
    let t0 = Instant::now();
    let (mut m, cer) = initiator(t0);
    assert!(cer
        .find(avp::VENDOR_SPECIFIC_APPLICATION_ID)
        .expect("ok")
        .is_some());
    m.receive(t0, cea(&cer, 2001, &[Application::auth(GX)]));
    let a = drain(&mut m);
    assert!(a.iter().any(|x| matches!(x, Action::Open)));
    assert_eq!(m.state(), PeerState::Open);
    assert!(m.negotiated().contains(GX));
}

#[test]
fn initiator_closes_on_failed_cea_or_no_common_application() {
    let t0 = Instant::now();
    let (mut m, cer) = initiator(t0);
    m.receive(t0, cea(&cer, 3010, &[Application::auth(GX)]));
    assert_eq!(closed(&drain(&mut m)), Some(CloseReason::Rejected(3010)));
    let (mut m, cer) = initiator(t0);
    m.receive(t0, cea(&cer, 2001, &[Application::auth(RX)]));
    assert_eq!(closed(&drain(&mut m)), Some(CloseReason::Rejected(5010)));
    let (mut m, _) = initiator(t0);
    m.receive(t0, request(272, GX, 1, |_| {}));
    assert_eq!(closed(&drain(&mut m)), Some(CloseReason::ProtocolViolation));
    let (mut m, _) = initiator(t0);
    let d = m.next_deadline().expect("cea deadline");
    m.on_timer(d);
    assert_eq!(
        closed(&drain(&mut m)),
        Some(CloseReason::CapabilitiesTimeout)
    );
}

#[test]
fn transport_loss_closes_once() {
    let t0 = Instant::now();
    let mut m = open_responder(t0);
    m.transport_closed();
    m.transport_closed();
    let a = drain(&mut m);
    assert_eq!(a.len(), 1);
    assert_eq!(closed(&a), Some(CloseReason::TransportClosed));
}

/// Mutated messages in every state never panic the machine, and it only
/// ever emits messages that parse.
#[test]
fn mutated_input_never_panics() {
    let t0 = Instant::now();
    let seeds: Vec<Bytes> = vec![
        cer(
            "pgw.test.local",
            &[Application::auth_vendor(GX, 10415)],
            true,
        )
        .bytes()
        .clone(),
        request(cmd::DEVICE_WATCHDOG, 0, 1, |_| {}).bytes().clone(),
        request(cmd::DISCONNECT_PEER, 0, 2, |b| {
            b.i32(avp::DISCONNECT_CAUSE, 1);
        })
        .bytes()
        .clone(),
        request(272, GX, 3, |b| {
            b.str(avp::SESSION_ID, "s;1");
        })
        .bytes()
        .clone(),
    ];
    let mut rng = Jitter::seeded(99);
    for round in 0..3000u32 {
        let mut m = if round % 2 == 0 {
            responder(PeerSettings::default(), t0)
        } else {
            open_responder(t0)
        };
        for step in 0..4u32 {
            let seed = &seeds[(rng.next_u64() as usize) % seeds.len()];
            let mut v = seed.to_vec();
            for _ in 0..(1 + rng.next_u64() % 4) {
                let i = 20 + (rng.next_u64() as usize) % (v.len() - 20);
                v[i] = rng.next_u64() as u8;
            }
            if let Ok(msg) = Message::parse(Bytes::from(v)) {
                let _ = m.receive(t0 + Duration::from_secs(u64::from(step)), msg);
            }
            if m.state() == PeerState::Admitting {
                m.accept(t0);
            }
            for a in drain(&mut m) {
                if let Action::Send(b) = a {
                    let out = Message::parse(b).expect("we send valid messages");
                    // Top-level framing of what we build is always sound.
                    assert!(out.avps().all(|a| a.is_ok()));
                }
            }
        }
    }
}

#[test]
fn probe_sends_a_dwr_and_any_message_back_says_alive() {
    let t0 = Instant::now();
    let mut m = open_responder(t0);
    assert!(m.probe(), "an open connection can be probed");
    let a = drain(&mut m);
    let out = sent(&a);
    assert_eq!(out.len(), 1, "{a:?}");
    assert_eq!(out[0].command_code(), cmd::DEVICE_WATCHDOG);
    assert!(out[0].is_request());
    // A second probe while one is pending sends nothing more.
    assert!(m.probe());
    assert!(sent(&drain(&mut m)).is_empty());
    // The DWA comes back: alive, once.
    let dwa = answer_to(&out[0], result_code::DIAMETER_SUCCESS);
    assert!(matches!(m.receive(t0, dwa), Inbound::Consumed));
    let a = drain(&mut m);
    assert!(a.iter().any(|x| matches!(x, Action::Alive)), "{a:?}");
    assert_eq!(m.state(), PeerState::Open);
    let dwr = request(cmd::DEVICE_WATCHDOG, 0, 40, |_| {});
    m.receive(t0, dwr);
    let a = drain(&mut m);
    assert!(!a.iter().any(|x| matches!(x, Action::Alive)), "{a:?}");
}

#[test]
fn probe_of_a_silent_peer_says_nothing() {
    let t0 = Instant::now();
    let mut m = open_responder(t0);
    assert!(m.probe());
    drain(&mut m);
    // Time passes without a word from the peer: no Alive ever comes (the
    // transport bounds its wait), and the watchdog goes its own way.
    m.on_timer(t0 + Duration::from_secs(2));
    let a = drain(&mut m);
    assert!(!a.iter().any(|x| matches!(x, Action::Alive)), "{a:?}");
}

#[test]
fn only_an_open_connection_can_be_probed() {
    let t0 = Instant::now();
    let mut m = responder(PeerSettings::default(), t0);
    assert!(!m.probe(), "waiting for CER: nothing to vouch for");
    assert!(drain(&mut m).is_empty());
    let mut m = open_responder(t0);
    m.close(t0, DisconnectCause::Rebooting);
    drain(&mut m);
    assert!(!m.probe(), "closing: it is going away");
}
