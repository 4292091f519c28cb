//! Wireshark's Diameter dissector, independent of our codec, reads every Sd
//! message the PCRF sends: a TSR opening a solicited TDF session, the CCA to
//! a TDF's CCR-I (ADC rules and a usage grant), an Sd RAR changing ADC
//! rules and one releasing the session. tshark must find nothing malformed
//! or worth a warning, count exactly as many AVPs as our validator visits,
//! and show the AVPs by name. Needs tshark (scripts/install-test-deps.sh).

use bytes::{Bytes, BytesMut};
use diameter::dict::{avp, cmd};
use diameter::{Message, MessageBuilder};
use diameter_tools::pcap::Direction;
use diameter_tools::tshark::Capture;
use pcrf::pcc::{UsageGrant, UsageInstructions};
use pcrf::policy::decision::AdcRule;
use pcrf::sd::{self, AdcChanges, TsrSubject, SD};
use pcrf::session_message::{Identity, Outcome};
use pcrf::usage::{MonitoringLevel, ServiceUnits};
use std::net::Ipv4Addr;

fn rule(name: &str, app: Option<&str>, key: Option<&str>) -> AdcRule {
    AdcRule {
        name: Some(name.into()),
        base: None,
        application: app.map(str::to_owned),
        monitoring_key: key.map(str::to_owned),
    }
}

#[test]
fn tshark_reads_tsr_sd_cca_and_sd_rar() {
    let me = Identity {
        origin_host: "pcrf.test".into(),
        origin_realm: "test".into(),
    };
    let video = rule("video", Some("video-streaming"), Some("video"));
    let block = rule("p2p-block", None, None);
    let base = AdcRule {
        name: None,
        base: Some("dpi-default".into()),
        application: None,
        monitoring_key: None,
    };
    let grants = UsageInstructions {
        grants: vec![UsageGrant {
            key: "video".into(),
            level: MonitoringLevel::Rule,
            units: ServiceUnits {
                total: Some(20_000_000),
                ..Default::default()
            },
        }],
        ..Default::default()
    };
    let install_all = AdcChanges {
        install: vec![&video, &block, &base],
        remove: vec![],
    };

    // TSR (solicited).
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::request(&mut buf, cmd::TDF_SESSION, SD, 1, 1);
    sd::encode_tsr(
        &mut b,
        "pcrf.test;sd;1",
        &me,
        "tdf.test",
        "test",
        &TsrSubject {
            imsi: Some("001010000000001"),
            msisdn: Some("491700000001"),
            ue_ipv4: Some(Ipv4Addr::new(10, 45, 0, 2)),
            ue_ipv6_prefix: Some(&[0, 64, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1]),
            apn: Some("internet"),
        },
        &install_all,
        &grants,
    );
    b.finish();
    let tsr = buf.freeze();

    // A TDF's CCR-I (unsolicited) and our CCA.
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, SD, 2, 2);
    b.str(avp::SESSION_ID, "tdf.test;1")
        .u32(avp::AUTH_APPLICATION_ID, SD)
        .origin("tdf.test", "test")
        .str(avp::DESTINATION_REALM, "test")
        .i32(avp::CC_REQUEST_TYPE, 1)
        .u32(avp::CC_REQUEST_NUMBER, 0)
        .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2]);
    b.finish();
    let ccr = buf.freeze();
    let req = Message::parse(ccr.clone()).expect("CCR");
    let c = sd::decode_ccr(&req).expect("decodes");
    let mut buf = BytesMut::new();
    sd::encode_cca(
        &mut buf,
        &req,
        &me,
        &c,
        Outcome::Result(2001),
        &install_all,
        &grants,
    );
    let cca = buf.freeze();

    let rar = |hop: u32, release: Option<i32>, changes: &AdcChanges<'_>| -> Bytes {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::RE_AUTH, SD, hop, hop);
        sd::encode_rar(
            &mut b,
            "tdf.test;1",
            &me,
            "tdf.test",
            "test",
            release,
            changes,
            &UsageInstructions::default(),
        );
        b.finish();
        buf.freeze()
    };
    let rar_change = rar(
        3,
        None,
        &AdcChanges {
            install: vec![&video],
            remove: vec!["p2p-block".into()],
        },
    );
    let rar_release = rar(4, Some(0), &AdcChanges::default());

    let messages = [
        (Direction::ToClient, tsr),
        (Direction::ToServer, ccr),
        (Direction::ToClient, cca),
        (Direction::ToClient, rar_change),
        (Direction::ToClient, rar_release),
    ];
    let cap = Capture::write("sd", &messages).expect("capture");
    cap.check().expect("tshark reads what we wrote");

    let got = cap
        .fields(&[
            "diameter.cmd.code",
            "diameter.applicationId",
            "diameter.flags.request",
        ])
        .expect("tshark fields");
    assert_eq!(
        got,
        vec![
            "8388637|16777303|1",
            "272|16777303|1",
            "272|16777303|0",
            "258|16777303|1",
            "258|16777303|1",
        ]
    );

    let text = cap.verbose().expect("tshark -V");
    for name in [
        "ADC-Rule-Install",
        "ADC-Rule-Definition",
        "ADC-Rule-Remove",
        "ADC-Rule-Base-Name: dpi-default",
        "TDF-Application-Identifier",
        "Session-Release-Cause: UNSPECIFIED_REASON (0)",
        "Granted-Service-Unit",
        "Event-Trigger: USAGE_REPORT (33)",
    ] {
        assert!(text.contains(name), "tshark does not show {name:?}");
    }
}
