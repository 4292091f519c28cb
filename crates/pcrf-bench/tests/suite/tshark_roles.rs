//! Wireshark's Diameter dissector reads every message the AF and OCS roles
//! send, taken off real connections where the role answers: the AF's AAR
//! (with the signalling component) and STR, its RAA and ASA to a PCRF's
//! RAR and ASR; the OCS's SLA (success and 5570), SNR and STA; the TDF's
//! TSA to a TSR and its Sd CCR-I, CCR-U (APPLICATION_START, usage per
//! application) and CCR-T. tshark must
//! find nothing malformed or worth a warning, decode every message, and
//! count exactly as many AVPs as our own validator visits.
//! Needs tshark (scripts/install-test-deps.sh installs it).

use bytes::{Bytes, BytesMut};
use diameter::dict::{app, avp, cmd};
use diameter::peer::{Application, LocalNode, PeerSettings};
use diameter::transport::{Handler, Node, PeerHandle, PeerTable};
use diameter::{DiameterError, Message, MessageBuilder};
use diameter_tools::pcap::Direction;
use diameter_tools::tshark::Capture;
use pcrf_bench::af::{AfOptions, Afs};
use pcrf_bench::ocs::{self, CounterTable};
use pcrf_bench::rx::{self, AfIdentity, Call, VoiceMedia};
use pcrf_bench::sd::{self, AppUsage, TdfIdentity};
use pcrf_bench::tdf::{TdfOptions, Tdfs};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A node that serves nothing; the test sends its requests by hand.
struct Silent;

impl Handler for Silent {
    fn serves(&self, _: u32, _: u32) -> bool {
        false
    }
    async fn handle(&self, _req: Message, _peer: PeerHandle) -> Result<Bytes, DiameterError> {
        Err(DiameterError::new(3001, "unused"))
    }
}

/// A PCRF's side of `app_id` that serves nothing (the test sends its
/// requests by hand): where to connect, and its table of peers.
async fn silent_pcrf(app_id: u32) -> (std::net::SocketAddr, PeerTable) {
    let local = LocalNode::new("pcrf.pcrf.test", "pcrf.test")
        .with_application(Application::auth_vendor(app_id, 10415));
    let node = Node::new(local, PeerSettings::default(), Silent);
    let server = node.listen("127.0.0.1:0").await.expect("listen");
    let target = server.local_addr().expect("addr");
    let table = server.peer_table();
    tokio::spawn(server.run(std::future::pending()));
    (target, table)
}

/// The PCRF's side of Sy: keeps the SNRs it receives (answering 2001).
#[derive(Default)]
struct SnrSink {
    got: Mutex<Vec<Bytes>>,
}

impl Handler for SnrSink {
    fn serves(&self, app_id: u32, command: u32) -> bool {
        app_id == app::SY && command == cmd::SPENDING_STATUS_NOTIFICATION
    }
    async fn handle(&self, req: Message, _peer: PeerHandle) -> Result<Bytes, DiameterError> {
        self.got
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(req.bytes().clone());
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::answer(&mut buf, &req);
        b.result_code(2001).origin("pcrf.pcrf.test", "pcrf.test");
        b.finish();
        Ok(buf.freeze())
    }
}

fn encode(code: u32, app_id: u32, f: impl FnOnce(&mut MessageBuilder<'_>)) -> Bytes {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::request(&mut buf, code, app_id, 7, 7);
    f(&mut b);
    b.finish();
    buf.freeze()
}

/// The AF's messages: AAR and STR as it builds them, RAA and ASA as it
/// answered a PCRF's RAR and ASR on a live connection.
async fn af_messages() -> Vec<(Direction, Bytes)> {
    let (target, table) = silent_pcrf(app::RX).await;
    let afs = Afs::connect(&AfOptions {
        target,
        peers: 1,
        origin_realm: "ims.test".into(),
        destination_realm: "pcrf.test".into(),
        destination_host: None,
        request_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(5),
    })
    .await
    .expect("AF open");
    let sid = "pcscf-1.ims.test;1767225600;1";
    let af = AfIdentity {
        origin_host: "pcscf-1.ims.test".into(),
        origin_realm: "ims.test".into(),
        destination_realm: "pcrf.test".into(),
        destination_host: None,
    };
    let media = VoiceMedia {
        signalling: Some(Ipv4Addr::new(192, 0, 2, 200)),
        ..VoiceMedia::default()
    };
    let aar = encode(cmd::AA, app::RX, |b| {
        rx::aar_initial(
            b,
            &Call {
                session_id: sid,
                af: &af,
                ue_ip: Ipv4Addr::new(10, 0, 0, 7),
                msisdn: "79000000007",
                ue_port: 50_000,
                remote_port: 40_000,
                icid: "icid.1767225600.1",
                media: &media,
            },
        )
    });
    let str_ = encode(cmd::SESSION_TERMINATION, app::RX, |b| {
        rx::str_request(b, sid, &af, 1)
    });

    let pcscf = table.get("pcscf-1.ims.test").expect("AF connected");
    // A call in progress: the AF answers its RAR and ASR with success.
    let _call = afs.counters.watch(sid);
    let header = |b: &mut MessageBuilder<'_>| {
        b.str(avp::SESSION_ID, sid)
            .u32(avp::AUTH_APPLICATION_ID, app::RX)
            .origin("pcrf.pcrf.test", "pcrf.test")
            .str(avp::DESTINATION_REALM, "ims.test")
            .str(avp::DESTINATION_HOST, "pcscf-1.ims.test");
    };
    let rar = encode(cmd::RE_AUTH, app::RX, |b| {
        header(b);
        b.i32(avp::RE_AUTH_REQUEST_TYPE, 0)
            .i32(avp::SPECIFIC_ACTION, 8);
    });
    let raa = pcscf
        .request(app::RX, cmd::RE_AUTH, |b| {
            header(b);
            b.i32(avp::RE_AUTH_REQUEST_TYPE, 0)
                .i32(avp::SPECIFIC_ACTION, 8);
        })
        .await
        .expect("RAA");
    let asr = encode(cmd::ABORT_SESSION, app::RX, |b| {
        header(b);
        b.i32(avp::ABORT_CAUSE, 0);
    });
    let asa = pcscf
        .request(app::RX, cmd::ABORT_SESSION, |b| {
            header(b);
            b.i32(avp::ABORT_CAUSE, 0);
        })
        .await
        .expect("ASA");
    afs.shutdown().await;
    vec![
        (Direction::ToServer, aar),
        (Direction::ToServer, str_),
        (Direction::ToClient, rar),
        (Direction::ToServer, raa.bytes().clone()),
        (Direction::ToClient, asr),
        (Direction::ToServer, asa.bytes().clone()),
    ]
}

/// The OCS's messages on a live Sy connection: SLA (success, unknown
/// counter), SNR, STA. Here the OCS is the server (ToClient is the OCS).
async fn ocs_messages() -> Vec<(Direction, Bytes)> {
    let mut counters = CounterTable::default();
    counters
        .add("data-cap=valid,limit-reached")
        .expect("counter");
    let node = ocs::node("ocs.bench.test", "bench.test", counters);
    let server = node.listen("127.0.0.1:0").await.expect("listen");
    let target = server.local_addr().expect("addr");
    tokio::spawn(server.run(std::future::pending()));
    let ocs = node.handler().clone();
    let sink = Arc::new(SnrSink::default());
    let client = Node::with_parts(
        Arc::new(
            LocalNode::new("pcrf.pcrf.test", "pcrf.test")
                .with_application(Application::auth_vendor(app::SY, 10415)),
        ),
        Arc::new(PeerSettings::default()),
        sink.clone(),
        PeerTable::new(),
    );
    let init = client.connect(target, None);
    assert!(init.wait_open(Duration::from_secs(5)).await);
    let peer = init.handle();
    let sid = "pcrf.pcrf.test;1767225600;sy1";
    let slr_avps = |b: &mut MessageBuilder<'_>, counter: &str| {
        b.str(avp::SESSION_ID, sid)
            .u32(avp::AUTH_APPLICATION_ID, app::SY)
            .origin("pcrf.pcrf.test", "pcrf.test")
            .str(avp::DESTINATION_REALM, "bench.test")
            .i32(avp::SL_REQUEST_TYPE, 0)
            .group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                    .str(avp::SUBSCRIPTION_ID_DATA, "001010000000001");
            })
            .str(avp::POLICY_COUNTER_IDENTIFIER, counter);
    };
    let mut out = Vec::new();
    for counter in ["data-cap", "no-such-counter"] {
        out.push((
            Direction::ToServer,
            encode(cmd::SPENDING_LIMIT, app::SY, |b| slr_avps(b, counter)),
        ));
        let sla = peer
            .request(app::SY, cmd::SPENDING_LIMIT, |b| slr_avps(b, counter))
            .await
            .expect("SLA");
        out.push((Direction::ToClient, sla.bytes().clone()));
    }
    assert!(ocs.notify_next().await);
    let snr = sink
        .got
        .lock()
        .expect("lock")
        .first()
        .cloned()
        .expect("SNR");
    out.push((Direction::ToClient, snr));
    let str_avps = |b: &mut MessageBuilder<'_>| {
        b.str(avp::SESSION_ID, sid)
            .u32(avp::AUTH_APPLICATION_ID, app::SY)
            .origin("pcrf.pcrf.test", "pcrf.test")
            .str(avp::DESTINATION_REALM, "bench.test")
            .i32(avp::TERMINATION_CAUSE, 1);
    };
    out.push((
        Direction::ToServer,
        encode(cmd::SESSION_TERMINATION, app::SY, str_avps),
    ));
    let sta = peer
        .request(app::SY, cmd::SESSION_TERMINATION, str_avps)
        .await
        .expect("STA");
    out.push((Direction::ToClient, sta.bytes().clone()));
    init.shutdown(diameter::peer::DisconnectCause::Rebooting)
        .await;
    out
}

/// The TDF's messages: the TSA it answered on a live connection, and its
/// Sd CCRs as it builds them.
async fn tdf_messages() -> Vec<(Direction, Bytes)> {
    let (target, table) = silent_pcrf(app::SD).await;
    let tdfs = Tdfs::connect(&TdfOptions {
        target,
        peers: 1,
        origin_realm: "bench.test".into(),
        destination_realm: "pcrf.test".into(),
        request_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(5),
    })
    .await
    .expect("TDF open");
    let sid = "pcrf.pcrf.test;1767225600;sd1";
    let tsr_avps = |b: &mut MessageBuilder<'_>| {
        b.str(avp::SESSION_ID, sid)
            .u32(avp::AUTH_APPLICATION_ID, app::SD)
            .origin("pcrf.pcrf.test", "pcrf.test")
            .str(avp::DESTINATION_REALM, "bench.test")
            .str(avp::DESTINATION_HOST, "tdf-1.bench.test")
            .bytes(avp::FRAMED_IP_ADDRESS, &[10, 0, 0, 5])
            .group(avp::ADC_RULE_INSTALL, |i| {
                i.group(avp::ADC_RULE_DEFINITION, |d| {
                    d.bytes(avp::ADC_RULE_NAME, b"adc-video")
                        .bytes(avp::TDF_APPLICATION_IDENTIFIER, b"youtube");
                });
            });
    };
    let tsr = encode(cmd::TDF_SESSION, app::SD, tsr_avps);
    let tsa = table
        .get("tdf-1.bench.test")
        .expect("TDF connected")
        .request(app::SD, cmd::TDF_SESSION, tsr_avps)
        .await
        .expect("TSA");
    tdfs.shutdown().await;
    let tdf = TdfIdentity {
        origin_host: "tdf-1.bench.test".into(),
        origin_realm: "bench.test".into(),
        destination_realm: "pcrf.test".into(),
        origin_state_id: 1_767_225_600,
    };
    let r = |number| sd::Request {
        session_id: sid,
        tdf: &tdf,
        destination_host: (number > 0).then_some("pcrf.pcrf.test"),
        number,
    };
    let usage = [AppUsage {
        monitoring_key: "mk-video".into(),
        input_octets: 1_000,
        output_octets: 250_000,
    }];
    vec![
        (Direction::ToClient, tsr),
        (Direction::ToServer, tsa.bytes().clone()),
        (
            Direction::ToServer,
            encode(cmd::CREDIT_CONTROL, app::SD, |b| {
                sd::ccr_initial(b, &r(0), Ipv4Addr::new(10, 0, 0, 9), "001010000000009")
            }),
        ),
        (
            Direction::ToServer,
            encode(cmd::CREDIT_CONTROL, app::SD, |b| {
                sd::ccr_update(b, &r(1), &[("youtube", 1)], &usage)
            }),
        ),
        (
            Direction::ToServer,
            encode(cmd::CREDIT_CONTROL, app::SD, |b| {
                sd::ccr_terminate(b, &r(2), &usage)
            }),
        ),
    ]
}

fn check(name: &str, messages: &[(Direction, Bytes)], expect: &[&str]) {
    let cap = Capture::write(name, messages).expect("capture");
    if let Err(e) = cap.check() {
        panic!("{name}: {e}");
    }
    let text = cap.verbose().expect("tshark -V");
    for s in expect {
        assert!(text.contains(s), "tshark does not show {s:?} in {name}");
    }
}

#[tokio::test]
async fn tshark_reads_the_af_messages() {
    let m = af_messages().await;
    check(
        "rx",
        &m,
        &[
            "Media-Component-Description",
            "Media-Sub-Component",
            "Flow-Description: permit out 17 from 203.0.113.10 40000 to 10.0.0.7 50000",
            "Flow-Usage: RTCP",
            "Flow-Usage: AF_SIGNALLING",
            "Media-Type: AUDIO",
            "Max-Requested-Bandwidth-DL: 41000",
            "Codec-Data",
            "AF-Charging-Identifier",
            "Specific-Action: INDICATION_OF_FAILED_RESOURCES_ALLOCATION",
            "Rx-Request-Type: INITIAL_REQUEST",
            "Termination-Cause: DIAMETER_LOGOUT",
            "Result-Code: DIAMETER_SUCCESS",
        ],
    );
}

#[tokio::test]
async fn tshark_reads_the_ocs_messages() {
    let m = ocs_messages().await;
    check(
        "sy",
        &m,
        &[
            "Policy-Counter-Status-Report",
            "Policy-Counter-Identifier: data-cap",
            "Policy-Counter-Status: valid",
            "Policy-Counter-Status: limit-reached",
            "Experimental-Result-Code: DIAMETER_ERROR_UNKNOWN_POLICY_COUNTERS",
        ],
    );
}

#[tokio::test]
async fn tshark_reads_the_tdf_messages() {
    let m = tdf_messages().await;
    check(
        "sd",
        &m,
        &[
            "TDF-Application-Identifier",
            "Application-Detection-Information",
            "APPLICATION_START",
            "USAGE_REPORT",
            // ADC_RULE_LEVEL (2, TS 29.212 §5.3.60) is newer than
            // Wireshark's dictionary, which shows it as "Unknown (2)".
            "Usage-Monitoring-Level: Unknown (2)",
            "CC-Output-Octets: 250000",
            "Termination-Cause: DIAMETER_LOGOUT",
            "Result-Code: DIAMETER_SUCCESS",
        ],
    );
}
