//! Wireshark's Diameter dissector, independent of our codec, reads the
//! usage-monitoring AVPs the PCRF writes: a CCA-U granting thresholds and
//! disabling a key, and RARs asking for reports of every key and of one.
//! tshark must find nothing malformed or worth a warning, count exactly as
//! many AVPs as our own validator visits, and show the values we meant.
//! Needs tshark (scripts/install-test-deps.sh installs it).

use bytes::BytesMut;
use diameter::dict::cmd;
use diameter::{Message, MessageBuilder};
use diameter_tools::pcap::Direction;
use diameter_tools::tshark::Capture;
use pcrf::gx::{self, CcaExtras, GX};
use pcrf::pcc::{UsageGrant, UsageInstructions};
use pcrf::policy::decision::Decision;
use pcrf::session::RuleDiff;
use pcrf::session_message::{Identity, Outcome};
use pcrf::usage::{MonitoringLevel, ServiceUnits};
use pcrf_bench::gx::{self as bench, Gateway, Request, Subscriber, Usage};
use std::net::Ipv4Addr;

fn rar(me: &Identity, hop: u32, usage: &UsageInstructions) -> bytes::Bytes {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::request(&mut buf, cmd::RE_AUTH, GX, hop, hop);
    gx::encode_rar(
        &mut b,
        "pgw-1.bench.test;1767225600;42",
        me,
        "pgw-1.bench.test",
        "bench.test",
        None,
        None,
        usage,
    );
    b.finish();
    buf.freeze()
}

#[test]
fn tshark_reads_our_usage_monitoring_grants_and_report_requests() {
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
    let sub = Subscriber {
        imsi: "001010000000001".into(),
        msisdn: "79000000001".into(),
        ue_ip: Ipv4Addr::new(10, 0, 0, 1),
        imeisv: "3534900698733101".into(),
        cell_id: 1,
        tac: 1,
    };
    let usage = [Usage {
        monitoring_key: "mk-internet".into(),
        input_octets: 123_456,
        output_octets: 7_654_321,
    }];
    let r = Request {
        session_id: "pgw-1.bench.test;1767225600;42",
        gateway: &gw,
        destination_host: Some("pcrf.test"),
        subscriber: &sub,
        number: 1,
        charging_id: 99,
    };
    let ccr_u = bench::encode(2, 2, |b| bench::ccr_update(b, &r, &usage));
    let req = Message::parse(ccr_u.clone()).expect("parse CCR-U");
    let ccr = gx::decode_ccr(&req).expect("decode CCR-U");

    let me = Identity {
        origin_host: "pcrf.test".into(),
        origin_realm: "pcrf.test".into(),
    };
    let extras = CcaExtras {
        usage: UsageInstructions {
            grants: vec![
                UsageGrant {
                    key: "mk-internet".into(),
                    level: MonitoringLevel::Session,
                    units: ServiceUnits {
                        total: Some(50_000_000),
                        ..Default::default()
                    },
                },
                UsageGrant {
                    key: "hex:ff01".into(),
                    level: MonitoringLevel::Rule,
                    units: ServiceUnits {
                        total: None,
                        input: Some(1_000),
                        output: Some(2_000),
                        time: Some(3_600),
                    },
                },
            ],
            disable: vec!["mk-video".into()],
            report: None,
        },
        ..Default::default()
    };
    let new = Decision {
        rules: vec!["internet".into()],
        ..Default::default()
    };
    let before = Decision::default();
    let diff = RuleDiff::between(&before, &new);
    let mut out = BytesMut::new();
    gx::encode_cca(
        &mut out,
        &req,
        &me,
        &ccr,
        Outcome::Result(2001),
        &extras,
        Some(&diff),
        None,
    )
    .expect("fits");
    let cca_u = out.freeze();
    let rar_all = rar(
        &me,
        10,
        &UsageInstructions {
            report: Some(vec![]),
            ..Default::default()
        },
    );
    let rar_one = rar(
        &me,
        11,
        &UsageInstructions {
            report: Some(vec!["mk-internet".into()]),
            ..Default::default()
        },
    );

    let messages = [
        (Direction::ToServer, ccr_u),
        (Direction::ToClient, cca_u),
        (Direction::ToClient, rar_all),
        (Direction::ToClient, rar_one),
    ];
    let cap = Capture::write("gx-usage", &messages).expect("capture");
    cap.check().expect("tshark reads what we wrote");

    // The values, per message, in the order written (occurrences joined
    // by ',', fields by '|').
    let fields = [
        "diameter.cmd.code",
        "diameter.flags.request",
        "diameter.Monitoring-Key",
        "diameter.CC-Total-Octets",
        "diameter.CC-Input-Octets",
        "diameter.CC-Output-Octets",
        "diameter.CC-Time",
        "diameter.Usage-Monitoring-Level",
        "diameter.Usage-Monitoring-Support",
        "diameter.Usage-Monitoring-Report",
    ];
    let got = cap.fields(&fields).expect("tshark fields");
    let (internet, video) = (hex::encode("mk-internet"), hex::encode("mk-video"));
    assert_eq!(
        got,
        vec![
            // CCR-U from the generator: its report.
            format!("272|1|{internet}|7777777|123456|7654321||0||"),
            // CCA-U: two grants, then the disabled key.
            format!("272|0|{internet},ff01,{video}|50000000|1000|2000|3600|0,1|0|"),
            // RAR for every key: no Monitoring-Key.
            "258|1||||||||0".to_string(),
            // RAR for one key.
            format!("258|1|{internet}|||||||0"),
        ]
    );

    let text = cap.verbose().expect("tshark -V");
    for name in [
        "Usage-Monitoring-Level: PCC_RULE_LEVEL (1)",
        "Usage-Monitoring-Level: SESSION_LEVEL (0)",
        "Usage-Monitoring-Support: USAGE_MONITORING_DISABLED (0)",
        "Usage-Monitoring-Report: USAGE_MONITORING_REPORT_REQUIRED (0)",
        "Granted-Service-Unit",
        "CC-Total-Octets: 50000000",
    ] {
        assert!(text.contains(name), "tshark does not show {name:?}");
    }
}
