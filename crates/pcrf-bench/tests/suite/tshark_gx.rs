//! Wireshark's Diameter dissector, independent of our codec, reads what the
//! generator sends (CCR-I/U/T) and what the echo server answers: tshark
//! must find nothing malformed or worth a warning, decode every message,
//! show the AVPs a P-GW's requests are judged by, and count exactly as
//! many AVPs as our own validator visits.
//! Needs tshark (scripts/install-test-deps.sh installs it).

use diameter::Message;
use diameter_tools::pcap::Direction;
use diameter_tools::tshark::Capture;
use pcrf_bench::echo_server::EchoHandler;
use pcrf_bench::gx::{self, Gateway, Request, Subscriber, Usage};
use std::net::Ipv4Addr;

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
    let cap = Capture::write("bench-gx", &messages).expect("capture");
    cap.check().expect("tshark reads what we wrote");

    let codes = cap
        .fields(&["diameter.cmd.code", "diameter.flags.request"])
        .expect("tshark fields");
    assert_eq!(codes.len(), 4, "{codes:?}");
    assert!(codes.iter().all(|l| l.starts_with("272")), "{codes:?}");

    let text = cap.verbose().expect("tshark -V");
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
}
