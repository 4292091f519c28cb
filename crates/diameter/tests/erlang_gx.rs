//! Gx against Erlang/OTP's diameter application, a strict independent stack.
//!
//! OTP, with a Gx dictionary written from the specifications
//! (`interop/gx.dia`), plays the PCEF: it connects, exchanges CER/CEA, and
//! sends a CCR-I that it encodes from known values. We decode that request
//! and check every value; we answer a CCA with Charging-Rule-Install and
//! QoS-Information that OTP must decode without a single error
//! (`interop/gx_client.erl` treats any decode error as a failure); then OTP
//! disconnects with DPR/DPA.
//!
//! Our side is a plain blocking loop over the codec (framing, parse,
//! builder): the subject here is the message encoding, not the transport,
//! which `freediameter.rs` exercises.

#[path = "interop/support.rs"]
mod support;

use bytes::BytesMut;
use diameter::codec::{frame_len, Avp, AvpCode, FLAG_P, FLAG_R};
use diameter::dict::{avp, cmd};
use diameter::{Message, MessageBuilder};
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;
use support::{interop_dir, read_lossy, require_tool, ChildGuard, TempDir};

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

/// Reads one whole message, or `None` when the peer closed the connection.
fn read_message(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Message> {
    loop {
        if let Ok(Some(n)) = frame_len(buf, 1 << 20) {
            if buf.len() >= n {
                let rest = buf.split_off(n);
                let msg = std::mem::replace(buf, rest);
                return Some(Message::parse(msg.into()).expect("OTP sent a parseable message"));
            }
        }
        let mut chunk = [0u8; 4096];
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn cea(req: &Message) -> BytesMut {
    let mut out = BytesMut::new();
    let mut b = MessageBuilder::answer(&mut out, req);
    b.result_code(2001)
        .origin("pcrf.test", "pcrf.test")
        .address(avp::HOST_IP_ADDRESS, IpAddr::V4(Ipv4Addr::LOCALHOST))
        .u32(avp::VENDOR_ID, 0)
        .str(avp::PRODUCT_NAME, "pcrf")
        .u32(avp::SUPPORTED_VENDOR_ID, TGPP)
        .u32(avp::AUTH_APPLICATION_ID, GX);
    b.finish();
    out
}

fn simple_answer(req: &Message) -> BytesMut {
    let mut out = BytesMut::new();
    let mut b = MessageBuilder::answer(&mut out, req);
    b.result_code(2001).origin("pcrf.test", "pcrf.test");
    b.finish();
    out
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

/// Serves one connection: answers CER, CCR, DWR and DPR; returns every
/// request received, in order.
fn serve(listener: TcpListener) -> Vec<Message> {
    let (mut s, _) = listener.accept().expect("OTP connects");
    s.set_read_timeout(Some(LIMIT)).expect("timeout");
    let mut buf = Vec::new();
    let mut got = Vec::new();
    while let Some(req) = read_message(&mut s, &mut buf) {
        assert!(req.is_request(), "unexpected answer {req:?}");
        let ans = match req.command_code() {
            cmd::CAPABILITIES_EXCHANGE => cea(&req),
            cmd::CREDIT_CONTROL => cca(&req),
            cmd::DEVICE_WATCHDOG | cmd::DISCONNECT_PEER => simple_answer(&req),
            other => panic!("unexpected command {other}"),
        };
        s.write_all(&ans).expect("write answer");
        let done = req.command_code() == cmd::DISCONNECT_PEER;
        got.push(req);
        if done {
            break;
        }
    }
    got
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
    assert_eq!(ccr.session_id(), Ok(Some("pcef.erlang.test;1767225600;1")));
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

#[test]
fn otp_pcef_sends_ccr_i_and_decodes_our_cca_strictly() {
    for tool in ["erl", "erlc", "diameterc"] {
        require_tool(tool);
    }
    let dir = TempDir::new("erlang-gx");
    compile_erlang(&dir);

    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || serve(listener));

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
    let status = erl.wait_timeout(LIMIT);
    let out = read_lossy(&log_path);
    assert!(
        status.is_some_and(|s| s.success()),
        "OTP client failed or timed out ({status:?}):\n{out}"
    );
    let requests = server.join().expect("server thread");

    let commands: Vec<u32> = requests.iter().map(Message::command_code).collect();
    assert_eq!(
        commands.first(),
        Some(&cmd::CAPABILITIES_EXCHANGE),
        "{commands:?}"
    );
    assert_eq!(commands.last(), Some(&cmd::DISCONNECT_PEER), "{commands:?}");
    let ccrs: Vec<&Message> = requests
        .iter()
        .filter(|m| m.command_code() == cmd::CREDIT_CONTROL)
        .collect();
    assert_eq!(ccrs.len(), 1, "{commands:?}");
    check_ccr(ccrs[0]);

    let lines: Vec<&str> = out.lines().collect();
    for want in [
        "PEER-UP",
        "RESULT-CODE 2001",
        "RULE rule-video",
        "RULE-QCI 2",
        "PREDEFINED rule-default",
        "AMBR 50000000 150000000",
        "DONE",
    ] {
        assert!(lines.contains(&want), "OTP did not print {want:?}:\n{out}");
    }
}
