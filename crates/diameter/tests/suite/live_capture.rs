//! A real capture of our transport, read back: dumpcap (Wireshark's capture
//! engine) records a loopback exchange between our initiator and our server
//! (CER/CEA, 50 concurrent CCR/CCA, DPR/DPA); our pcap reader must find
//! every message in it, as sent, and tshark must find nothing malformed.
//!
//! This checks the reader on what the kernel really puts on the wire
//! (TCP options, several answers coalesced into one segment, ACK-only
//! packets) rather than on our own writer's output, and our transport's
//! framing as an independent decoder sees it. Capturing needs root or
//! capture rights for dumpcap, as the test command has.

use crate::support::{read_lossy, require_tool, wait_until, ChildGuard, TempDir};
use bytes::{Bytes, BytesMut};
use diameter::dict::{avp, cmd};
use diameter::peer::{Application, DisconnectCause, LocalNode, PeerSettings};
use diameter::transport::{Handler, Node, PeerHandle};
use diameter::{DiameterError, Message, MessageBuilder};
use diameter_tools::pcap::read_pcap;
use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

const GX: u32 = 16_777_238;
const TGPP: u32 = 10_415;
const REQUESTS: u32 = 50;

/// Answers every CCR with 2001.
struct Pcrf;

impl Handler for Pcrf {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        app_id == GX && cmd == cmd::CREDIT_CONTROL
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        let [rtype, rnum] = req.pick(&[avp::CC_REQUEST_TYPE, avp::CC_REQUEST_NUMBER])?;
        let mut out = BytesMut::new();
        let mut b = MessageBuilder::answer(&mut out, &req);
        b.u32(avp::AUTH_APPLICATION_ID, GX)
            .origin(&peer.local().origin_host, &peer.local().origin_realm)
            .result_code(2001);
        for a in [rtype, rnum].into_iter().flatten() {
            b.raw_avp(a.raw());
        }
        b.finish();
        Ok(out.freeze())
    }
}

fn node(host: &str) -> LocalNode {
    LocalNode::new(host, "test.local")
        .with_host_ip("127.0.0.1".parse().expect("ip"))
        .with_application(Application::auth_vendor(GX, TGPP))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_reader_and_tshark_read_a_real_capture_of_our_transport() {
    require_tool("dumpcap");
    require_tool("tshark");
    let dir = TempDir::new("live-capture");
    let pcap = dir.join("live.pcap");

    let server = Node::new(node("pcrf.test.local"), PeerSettings::default(), Pcrf)
        .listen("127.0.0.1:0")
        .await
        .expect("bind");
    let port = server.local_addr().expect("addr").port();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.run(async {
        let _ = stop_rx.await;
    }));

    // -P: classic pcap, not pcapng.
    let err_path = dir.join("dumpcap.err");
    let mut dumpcap = ChildGuard::spawn(
        "dumpcap",
        Command::new("dumpcap")
            .args([
                "-i",
                "lo",
                "-f",
                &format!("tcp port {port}"),
                "-P",
                "-q",
                "-w",
            ])
            .arg(&pcap)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err_path).expect("stderr file")),
    );
    assert!(
        wait_until(Duration::from_secs(10), || read_lossy(&err_path)
            .contains("Capturing on")),
        "dumpcap did not start capturing (needs root or capture rights): {}",
        read_lossy(&err_path)
    );
    // "Capturing on" comes before the interface is opened; "File:" comes
    // once the filter is set and the file is open, so every packet from
    // here on is recorded.
    assert!(
        wait_until(Duration::from_secs(10), || read_lossy(&err_path)
            .contains("\nFile: ")),
        "dumpcap did not open its capture file: {}",
        read_lossy(&err_path)
    );

    let client = Node::new(node("pcef.test.local"), PeerSettings::default(), Pcrf);
    let initiator = client.connect(([127, 0, 0, 1], port).into(), Some("pcrf.test.local"));
    assert!(initiator.wait_open(Duration::from_secs(10)).await);
    let peer = initiator.handle();
    let calls: Vec<_> = (0..REQUESTS)
        .map(|i| {
            let peer = peer.clone();
            tokio::spawn(async move {
                peer.request(GX, cmd::CREDIT_CONTROL, |b| {
                    b.str(avp::SESSION_ID, &format!("pcef.test.local;1;{i}"))
                        .u32(avp::AUTH_APPLICATION_ID, GX)
                        .origin("pcef.test.local", "test.local")
                        .str(avp::DESTINATION_REALM, "test.local")
                        .i32(avp::CC_REQUEST_TYPE, 1)
                        .u32(avp::CC_REQUEST_NUMBER, 0);
                })
                .await
            })
        })
        .collect();
    for c in calls {
        let ans = c.await.expect("task").expect("answer");
        assert_eq!(
            ans.find(avp::RESULT_CODE).expect("ok").map(|a| a.as_u32()),
            Some(Ok(2001))
        );
    }
    initiator.shutdown(DisconnectCause::Rebooting).await;
    let _ = stop_tx.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;

    // Stop the capture once the file holds every message: dumpcap writes
    // what it has every few hundred ms, and stopping it earlier could lose
    // the last packets.
    let all = 2 * (REQUESTS as usize + 2);
    let written = wait_until(Duration::from_secs(10), || {
        std::fs::read(&pcap)
            .ok()
            .and_then(|d| read_pcap(&d).ok())
            .is_some_and(|cap| cap.messages.len() >= all)
    });
    assert!(written, "the capture file never held all {all} messages");
    dumpcap.signal("INT");
    assert!(
        dumpcap.wait_timeout(Duration::from_secs(10)).is_some(),
        "dumpcap did not stop"
    );

    let data = std::fs::read(&pcap).expect("capture file");
    let cap = read_pcap(&data).expect("a pcap file");
    assert!(cap.problems.is_empty(), "{:?}", cap.problems);
    let mut by_kind: HashMap<(u32, bool, bool), u32> = HashMap::new();
    for m in &cap.messages {
        let msg = Message::parse(m.bytes.clone()).expect("captured message parses");
        msg.validate().expect("captured message validates");
        let to_server = m.flow.dst.port() == port;
        *by_kind
            .entry((msg.command_code(), msg.is_request(), to_server))
            .or_default() += 1;
    }
    let expect = [
        ((cmd::CAPABILITIES_EXCHANGE, true, true), 1),
        ((cmd::CAPABILITIES_EXCHANGE, false, false), 1),
        ((cmd::CREDIT_CONTROL, true, true), REQUESTS),
        ((cmd::CREDIT_CONTROL, false, false), REQUESTS),
        ((cmd::DISCONNECT_PEER, true, true), 1),
        ((cmd::DISCONNECT_PEER, false, false), 1),
    ];
    assert_eq!(by_kind, HashMap::from(expect), "messages per kind");

    // tshark agrees on the count and finds nothing wrong. The port is not
    // 3868, so it is told to decode it as Diameter. Checksums are not
    // checked: loopback packets are captured before the kernel fills them.
    let decode_as = format!("tcp.port=={port},diameter");
    let run = |args: &[&str]| {
        let out = Command::new("tshark")
            .args(["-n", "-d", &decode_as])
            .arg("-r")
            .arg(&pcap)
            .args(args)
            .output()
            .expect("run tshark");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let bad = run(&["-Y", "_ws.malformed || _ws.expert.severity >= 0x00600000"]);
    assert!(bad.trim().is_empty(), "tshark reports:\n{bad}");
    let codes = run(&[
        "-Y",
        "diameter",
        "-T",
        "fields",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
        "-e",
        "diameter.cmd.code",
    ]);
    let pdus = codes
        .lines()
        .flat_map(|l| l.split(','))
        .filter(|c| !c.is_empty())
        .count();
    assert_eq!(pdus, cap.messages.len(), "tshark's Diameter PDU count");
}
