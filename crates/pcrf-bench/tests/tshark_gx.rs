//! Wireshark's Diameter dissector, independent of our codec, reads what the
//! generator sends (CCR-I/U/T) and what the echo server answers: tshark
//! must find nothing malformed or worth a warning, decode every message,
//! show the AVPs a P-GW's requests are judged by, and count exactly as
//! many AVPs as our own validator visits.
//! Needs tshark (scripts/install-test-deps.sh installs it).

use diameter::pcap::{Direction, PcapWriter};
use diameter::Message;
use pcrf_bench::echo_server::EchoHandler;
use pcrf_bench::gx::{self, Gateway, Request, Subscriber, Usage};
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

fn tshark(pcap: &Path, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(pcap)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run tshark ({e}); run scripts/install-test-deps.sh"));
    assert!(
        out.status.success(),
        "tshark {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn tshark_reads_the_generators_requests_and_the_echo_answer() {
    let gw = Gateway {
        origin_host: "pgw-1.bench.test".into(),
        origin_realm: "bench.test".into(),
        destination_realm: "pcrf.test".into(),
        destination_host: None,
        origin_state_id: 1_767_225_600,
        pgw_address: Ipv4Addr::new(192, 0, 2, 1),
        sgw_address: Ipv4Addr::new(198, 51, 100, 1),
        mcc_mnc: "00101".into(),
        apn: "internet".into(),
    };
    let sub = pcrf_bench::session::subscriber(
        &pcrf_bench::population::Population::new("001010000000001", "79000000001", 10)
            .expect("population"),
        3,
    );
    let sub: Subscriber = sub;
    let usage = [Usage {
        monitoring_key: "mk-internet".into(),
        input_octets: 123_456,
        output_octets: 7_654_321,
    }];
    let r = |number| Request {
        session_id: "pgw-1.bench.test;1767225600;42",
        gateway: &gw,
        destination_host: (number > 0).then_some("echo.pcrf.test"),
        subscriber: &sub,
        number,
        charging_id: 99,
    };
    let ccr_i = gx::encode(1, 1, |b| gx::ccr_initial(b, &r(0)));
    let ccr_u = gx::encode(2, 2, |b| gx::ccr_update(b, &r(1), &usage));
    let ccr_t = gx::encode(3, 3, |b| gx::ccr_terminate(b, &r(2), &usage, 1));
    let echo = EchoHandler::new("echo.pcrf.test", "pcrf.test");
    let cca = echo
        .answer(&Message::parse(ccr_i.clone()).expect("parse"))
        .expect("answer");

    let messages = [
        (Direction::ToServer, ccr_i),
        (Direction::ToClient, cca),
        (Direction::ToServer, ccr_u),
        (Direction::ToServer, ccr_t),
    ];
    let mut w = PcapWriter::loopback(Vec::new()).expect("pcap header");
    for (dir, m) in &messages {
        w.message(*dir, m).expect("write");
    }
    let dir = std::env::temp_dir().join(format!("pcrf-bench-tshark-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pcap = dir.join("gx.pcap");
    std::fs::write(&pcap, w.finish().expect("finish")).expect("write pcap");

    let bad = tshark(
        &pcap,
        &["-Y", "_ws.malformed || _ws.expert.severity >= 0x00600000"],
    );
    assert!(bad.trim().is_empty(), "tshark complains:\n{bad}");

    let codes = tshark(
        &pcap,
        &[
            "-Y",
            "diameter",
            "-T",
            "fields",
            "-e",
            "diameter.cmd.code",
            "-e",
            "diameter.flags.request",
        ],
    );
    let codes: Vec<&str> = codes.lines().collect();
    assert_eq!(codes.len(), 4, "{codes:?}");
    assert!(codes.iter().all(|l| l.starts_with("272")), "{codes:?}");

    // Every AVP we wrote (nested ones too) is one tshark decodes.
    let pdml = tshark(&pcap, &["-Y", "diameter", "-T", "pdml"]);
    let per_packet: Vec<usize> = pdml
        .split("<packet>")
        .skip(1)
        .map(|p| p.matches("<field name=\"diameter.avp\" ").count())
        .collect();
    let ours: Vec<usize> = messages
        .iter()
        .map(|(_, m)| {
            Message::parse(m.clone())
                .expect("parse")
                .validate()
                .expect("valid")
        })
        .collect();
    assert_eq!(per_packet, ours);

    let text = tshark(&pcap, &["-V", "-Y", "diameter"]);
    for name in [
        "Subscription-Id-Data: 001010000000004",
        "Subscription-Id-Data: 79000000004",
        "Framed-IP-Address",
        "3GPP-User-Location-Info",
        "Default-EPS-Bearer-QoS",
        "User-Equipment-Info",
        "Charging-Rule-Install",
        "Usage-Monitoring-Information",
        "CC-Output-Octets: 7654321",
        "Termination-Cause: DIAMETER_LOGOUT",
        "USAGE_REPORT",
    ] {
        assert!(text.contains(name), "tshark does not show {name:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
