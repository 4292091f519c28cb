//! Gx against Erlang/OTP's diameter application, a strict independent stack.
//!
//! OTP, with a Gx dictionary written from the specifications
//! (`interop/gx.dia`), plays the PCEF: it connects, exchanges CER/CEA, and
//! sends a CCR-I that it encodes from known values. We decode that request
//! and check every value; we answer a CCA with Charging-Rule-Install and
//! QoS-Information that OTP must decode without a single error
//! (`interop/gx_client.erl` treats any decode error as a failure); we push a
//! RAR that OTP must also decode without error before answering 2001; then
//! OTP disconnects with DPR/DPA.
//!
//! Our side is the real transport server (`diameter::transport`), so OTP's
//! strict peer state machine also checks our CEA and DPA.

use crate::support::{interop_dir, read_lossy, require_tool, ChildGuard, TempDir};
use bytes::{Bytes, BytesMut};
use diameter::codec::{Avp, AvpCode, FLAG_P, FLAG_R};
use diameter::dict::{avp, cmd};
use diameter::peer::{Application, CloseReason, DisconnectCause, LocalNode, PeerSettings};
use diameter::transport::{Handler, Node, PeerHandle};
use diameter::{DiameterError, Message, MessageBuilder};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

const GX: u32 = 16_777_238;
const TGPP: u32 = 10_415;
const LIMIT: Duration = Duration::from_secs(30);

/// Compiles the Gx dictionary and the client into `dir`.
fn compile_erlang(dir: &TempDir) {
    let src = interop_dir();
    let run = |cmd: &mut Command| {
        let out = cmd.output().expect("run an Erlang tool");
        assert!(
            out.status.success(),
            "{cmd:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(Command::new("diameterc")
        .arg("-o")
        .arg(dir.path())
        .arg("-i")
        .arg(dir.path())
        .arg(src.join("gx.dia")));
    run(Command::new("erlc")
        .arg("-o")
        .arg(dir.path())
        .arg(dir.join("gx.erl")));
    run(Command::new("erlc")
        .arg("-pa")
        .arg(dir.path())
        .arg("-o")
        .arg(dir.path())
        .arg(src.join("gx_client.erl")));
}

fn cca(req: &Message) -> BytesMut {
    let mut out = BytesMut::new();
    let mut b = MessageBuilder::answer(&mut out, req);
    b.u32(avp::AUTH_APPLICATION_ID, GX)
        .origin("pcrf.test", "pcrf.test")
        .i32(avp::CC_REQUEST_TYPE, 1)
        .u32(avp::CC_REQUEST_NUMBER, 0)
        .result_code(2001)
        .group(avp::SUPPORTED_FEATURES, |g| {
            g.u32(avp::VENDOR_ID, TGPP)
                .u32(avp::FEATURE_LIST_ID, 1)
                .u32(avp::FEATURE_LIST, 3);
        })
        .group(avp::CHARGING_RULE_INSTALL, |g| {
            g.group(avp::CHARGING_RULE_DEFINITION, |d| {
                d.str(avp::CHARGING_RULE_NAME, "rule-video")
                    .u32(avp::RATING_GROUP, 100)
                    .group(avp::FLOW_INFORMATION, |f| {
                        f.str(
                            avp::FLOW_DESCRIPTION,
                            "permit out 17 from 198.51.100.0/24 to 10.45.0.7",
                        )
                        .i32(avp::FLOW_DIRECTION, 1);
                    })
                    .group(avp::QOS_INFORMATION, |q| {
                        q.i32(avp::QOS_CLASS_IDENTIFIER, 2)
                            .u32(avp::MAX_REQUESTED_BANDWIDTH_UL, 2_000_000)
                            .u32(avp::MAX_REQUESTED_BANDWIDTH_DL, 8_000_000)
                            .group(avp::ALLOCATION_RETENTION_PRIORITY, |a| {
                                a.u32(avp::PRIORITY_LEVEL, 5)
                                    .i32(avp::PRE_EMPTION_CAPABILITY, 1)
                                    .i32(avp::PRE_EMPTION_VULNERABILITY, 0);
                            });
                    })
                    .i32(avp::ONLINE, 0)
                    .i32(avp::OFFLINE, 1)
                    .u32(avp::PRECEDENCE, 100);
            })
            .str(avp::CHARGING_RULE_NAME, "rule-default");
        })
        .group(avp::QOS_INFORMATION, |q| {
            q.u32(avp::APN_AGGREGATE_MAX_BITRATE_UL, 50_000_000)
                .u32(avp::APN_AGGREGATE_MAX_BITRATE_DL, 150_000_000);
        });
    b.finish();
    out
}

/// The session OTP opened (gx_client.erl).
const SESSION: &str = "pcef.erlang.test;1767225600;1";

/// A RAR for OTP's session: one rule removed, one installed, new APN-AMBR.
fn rar(b: &mut MessageBuilder<'_>) {
    b.str(avp::SESSION_ID, SESSION)
        .u32(avp::AUTH_APPLICATION_ID, GX)
        .origin("pcrf.test", "pcrf.test")
        .str(avp::DESTINATION_REALM, "erlang.test")
        .str(avp::DESTINATION_HOST, "pcef.erlang.test")
        .i32(avp::RE_AUTH_REQUEST_TYPE, 0)
        .group(avp::CHARGING_RULE_REMOVE, |g| {
            g.str(avp::CHARGING_RULE_NAME, "rule-default");
        })
        .group(avp::CHARGING_RULE_INSTALL, |g| {
            g.group(avp::CHARGING_RULE_DEFINITION, |d| {
                d.str(avp::CHARGING_RULE_NAME, "rule-gaming")
                    .u32(avp::RATING_GROUP, 200)
                    .group(avp::QOS_INFORMATION, |q| {
                        q.i32(avp::QOS_CLASS_IDENTIFIER, 3);
                    })
                    .u32(avp::PRECEDENCE, 50);
            });
        })
        .group(avp::QOS_INFORMATION, |q| {
            q.u32(avp::APN_AGGREGATE_MAX_BITRATE_UL, 10_000_000)
                .u32(avp::APN_AGGREGATE_MAX_BITRATE_DL, 20_000_000);
        });
}

/// Our Gx side: answers the CCR with [`cca`] and keeps every request and
/// peer event for the assertions.
#[derive(Default)]
struct GxServer {
    ccrs: Mutex<Vec<Message>>,
    up: Mutex<Vec<String>>,
    down: Mutex<Vec<CloseReason>>,
}

impl Handler for GxServer {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        app_id == GX && cmd == cmd::CREDIT_CONTROL
    }

    async fn handle(&self, req: Message, _peer: PeerHandle) -> Result<Bytes, DiameterError> {
        let ans = cca(&req).freeze();
        self.ccrs.lock().expect("lock").push(req);
        Ok(ans)
    }

    fn peer_up(&self, peer: &PeerHandle) {
        let host = peer
            .origin_host()
            .map(|h| h.to_string())
            .unwrap_or_default();
        self.up.lock().expect("lock").push(host);
    }

    fn peer_down(&self, _peer: &PeerHandle, reason: CloseReason) {
        self.down.lock().expect("lock").push(reason);
    }
}

fn one<'a>(it: impl IntoIterator<Item = Result<Avp<'a>, diameter::DiameterError>>) -> Avp<'a> {
    let v: Vec<Avp<'a>> = it
        .into_iter()
        .collect::<Result<_, _>>()
        .expect("well-formed");
    assert_eq!(v.len(), 1, "expected exactly one, got {v:?}");
    v[0]
}

fn child<'a>(group: &Avp<'a>, code: AvpCode) -> Avp<'a> {
    one(group.grouped().filter_code(code))
}

fn top<'a>(m: &'a Message, code: AvpCode) -> Avp<'a> {
    one(m.avps().filter_code(code))
}

/// Every value OTP was given in gx_client.erl, as we decode it.
fn check_ccr(ccr: &Message) {
    assert_eq!(ccr.application_id(), GX);
    assert_eq!(ccr.flags() & (FLAG_R | FLAG_P), FLAG_R | FLAG_P);
    let visited = ccr
        .validate()
        .expect("every AVP valid and known to our dictionary");
    assert!(visited >= 25, "only {visited} AVPs");

    let first = ccr.avps().next().expect("an AVP").expect("ok");
    assert!(first.is(avp::SESSION_ID), "Session-Id comes first");
    assert_eq!(ccr.session_id(), Ok(Some(SESSION)));
    let s = |c| top(ccr, c).as_str().expect("string").to_owned();
    let u = |c| top(ccr, c).as_u32().expect("u32");
    let e = |c| top(ccr, c).as_enum().expect("enum");
    assert_eq!(s(avp::ORIGIN_HOST), "pcef.erlang.test");
    assert_eq!(s(avp::ORIGIN_REALM), "erlang.test");
    assert_eq!(s(avp::DESTINATION_REALM), "pcrf.test");
    assert_eq!(u(avp::AUTH_APPLICATION_ID), GX);
    assert_eq!(e(avp::CC_REQUEST_TYPE), 1);
    assert_eq!(u(avp::CC_REQUEST_NUMBER), 0);
    assert_eq!(e(avp::IP_CAN_TYPE), 5);
    assert_eq!(e(avp::RAT_TYPE), 1004);
    assert_eq!(s(avp::CALLED_STATION_ID), "internet.apn");
    assert_eq!(
        top(ccr, avp::FRAMED_IP_ADDRESS).as_octets(),
        &[10, 45, 0, 7]
    );

    let subs: Vec<(i32, String)> = ccr
        .avps()
        .filter_code(avp::SUBSCRIPTION_ID)
        .map(|a| {
            let a = a.expect("ok");
            (
                child(&a, avp::SUBSCRIPTION_ID_TYPE)
                    .as_enum()
                    .expect("type"),
                child(&a, avp::SUBSCRIPTION_ID_DATA)
                    .as_str()
                    .expect("data")
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(
        subs,
        vec![
            (1, "001010123456789".to_owned()),
            (0, "33612345678".to_owned())
        ]
    );

    let ue = top(ccr, avp::USER_EQUIPMENT_INFO);
    assert_eq!(child(&ue, avp::USER_EQUIPMENT_INFO_TYPE).as_enum(), Ok(0));
    assert_eq!(
        child(&ue, avp::USER_EQUIPMENT_INFO_VALUE).as_octets(),
        b"3569870123456701"
    );

    let qos = top(ccr, avp::QOS_INFORMATION);
    assert_eq!(qos.vendor(), TGPP);
    assert_eq!(
        child(&qos, avp::APN_AGGREGATE_MAX_BITRATE_UL).as_u32(),
        Ok(50_000_000)
    );
    assert_eq!(
        child(&qos, avp::APN_AGGREGATE_MAX_BITRATE_DL).as_u32(),
        Ok(150_000_000)
    );

    let sf = top(ccr, avp::SUPPORTED_FEATURES);
    assert_eq!(sf.vendor(), TGPP);
    assert_eq!(child(&sf, avp::VENDOR_ID).as_u32(), Ok(TGPP));
    assert_eq!(child(&sf, avp::FEATURE_LIST_ID).as_u32(), Ok(1));
    assert_eq!(child(&sf, avp::FEATURE_LIST).as_u32(), Ok(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otp_pcef_and_our_pcrf_exchange_ccr_cca_and_rar_raa_strictly() {
    for tool in ["erl", "erlc", "diameterc"] {
        require_tool(tool);
    }
    let dir = TempDir::new("erlang-gx");
    compile_erlang(&dir);

    let local = LocalNode::new("pcrf.test", "pcrf.test")
        .with_host_ip("127.0.0.1".parse().expect("ip"))
        .with_application(Application::auth_vendor(GX, TGPP));
    let node = Node::new(local, PeerSettings::default(), GxServer::default());
    let server = node.listen("127.0.0.1:0").await.expect("bind");
    let port = server.local_addr().expect("addr").port();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async {
        let _ = stop_rx.await;
    }));

    let log_path = dir.join("gx_client.out");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut erl = ChildGuard::spawn(
        "erl",
        Command::new("erl")
            .arg("-noshell")
            .arg("-pa")
            .arg(dir.path())
            .arg("-eval")
            .arg(format!("gx_client:main([\"127.0.0.1\", \"{port}\"])"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup"))
            .stderr(log),
    );
    // Once OTP has decoded our CCA, we push a RAR; OTP answers 2001 only
    // if it decoded the RAR without error.
    let decoded_cca = {
        let deadline = std::time::Instant::now() + LIMIT;
        loop {
            let out = read_lossy(&log_path);
            if out.lines().any(|l| l == "RULE rule-video") || out.contains("FAIL") {
                break out.lines().any(|l| l == "RULE rule-video");
            }
            if std::time::Instant::now() >= deadline {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    assert!(
        decoded_cca,
        "OTP did not decode our CCA:\n{}",
        read_lossy(&log_path)
    );
    let pcef = node
        .peer_table()
        .get("pcef.erlang.test")
        .expect("OTP is an open peer");
    let raa = pcef
        .request(GX, cmd::RE_AUTH, rar)
        .await
        .unwrap_or_else(|e| panic!("RAR to OTP: {e}\n{}", read_lossy(&log_path)));
    assert_eq!(raa.session_id(), Ok(Some(SESSION)));
    assert_eq!(
        raa.find(avp::RESULT_CODE).expect("ok").map(|a| a.as_u32()),
        Some(Ok(2001)),
        "OTP's verdict on our RAR:\n{}",
        read_lossy(&log_path)
    );

    let (status, erl) = tokio::task::spawn_blocking(move || (erl.wait_timeout(LIMIT), erl))
        .await
        .expect("wait for erl");
    drop(erl);
    let out = read_lossy(&log_path);
    assert!(
        status.is_some_and(|s| s.success()),
        "OTP client failed or timed out ({status:?}):\n{out}"
    );

    let lines: Vec<&str> = out.lines().collect();
    for want in [
        "PEER-UP",
        "RESULT-CODE 2001",
        "RULE rule-video",
        "RULE-QCI 2",
        "PREDEFINED rule-default",
        "AMBR 50000000 150000000",
        "RAR-REMOVE rule-default",
        "RAR-INSTALL rule-gaming",
        "DONE",
    ] {
        assert!(lines.contains(&want), "OTP did not print {want:?}:\n{out}");
    }

    let h = node.handler();
    assert_eq!(h.up.lock().expect("lock").as_slice(), ["pcef.erlang.test"]);
    let ccrs = h.ccrs.lock().expect("lock").clone();
    assert_eq!(ccrs.len(), 1);
    check_ccr(&ccrs[0]);
    // OTP closed with DPR (remove_transport sends DO_NOT_WANT_TO_TALK_TO_YOU),
    // which we answered.
    let mut down = Vec::new();
    for _ in 0..50 {
        down = h.down.lock().expect("lock").clone();
        if !down.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        matches!(
            down.as_slice(),
            [CloseReason::PeerDisconnect(Some(
                DisconnectCause::DoNotWantToTalkToYou
            ))]
        ),
        "{down:?}"
    );

    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;
}
