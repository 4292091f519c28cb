//! Wireshark's Diameter dissector, independent of our codec, reads every Sy
//! message the PCRF sends: SLR (initial and intermediate), SNA and STR.
//! tshark must find nothing malformed or worth a warning, count exactly as
//! many AVPs as our own validator visits, and show the values we meant.
//! Needs tshark (scripts/install-test-deps.sh installs it).

use bytes::{Bytes, BytesMut};
use diameter::dict::{avp, cmd};
use diameter::{Message, MessageBuilder};
use diameter_tools::pcap::Direction;
use diameter_tools::tshark::Capture;
use pcrf::session_message::Identity;
use pcrf::sy::{self, SlRequestType, Slr, SY};

fn me() -> Identity {
    Identity {
        origin_host: "pcrf.test.local".into(),
        origin_realm: "test.local".into(),
    }
}

fn slr(hop: u32, request_type: SlRequestType, counters: &[String]) -> Bytes {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::request(&mut buf, cmd::SPENDING_LIMIT, SY, hop, hop);
    sy::encode_slr(
        &mut b,
        &me(),
        &Slr {
            session_id: "pcrf.test.local;sy;1767225600;1",
            request_type,
            destination_host: "ocs1.test.local",
            destination_realm: "test.local",
            imsi: Some("001010000000001"),
            msisdn: Some("491700000001"),
            counters,
        },
    );
    b.finish();
    buf.freeze()
}

fn sna(hop: u32) -> Bytes {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::request(&mut buf, cmd::SPENDING_STATUS_NOTIFICATION, SY, hop, hop);
    b.str(avp::SESSION_ID, "pcrf.test.local;sy;1767225600;1")
        .u32(avp::AUTH_APPLICATION_ID, SY)
        .origin("ocs1.test.local", "test.local")
        .str(avp::DESTINATION_REALM, "test.local")
        .str(avp::DESTINATION_HOST, "pcrf.test.local");
    b.finish();
    let snr = Message::parse(buf.freeze()).expect("snr");
    let mut out = BytesMut::new();
    sy::encode_sna(&mut out, &snr, &me(), 2001);
    out.freeze()
}

fn str_(hop: u32) -> Bytes {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::request(&mut buf, cmd::SESSION_TERMINATION, SY, hop, hop);
    sy::encode_str(
        &mut b,
        &me(),
        "pcrf.test.local;sy;1767225600;1",
        "ocs1.test.local",
        "test.local",
        1,
    );
    b.finish();
    buf.freeze()
}

#[test]
fn tshark_reads_our_slr_sna_and_str() {
    let counters = vec!["monthly-data".to_string(), "roaming".to_string()];
    let messages = [
        (
            Direction::ToServer,
            slr(1, SlRequestType::Initial, &counters),
        ),
        (
            Direction::ToServer,
            slr(2, SlRequestType::Intermediate, &counters[..1]),
        ),
        (Direction::ToClient, sna(3)),
        (Direction::ToServer, str_(4)),
    ];
    let cap = Capture::write("sy", &messages).expect("capture");
    cap.check().expect("tshark reads what we wrote");

    let fields = [
        "diameter.cmd.code",
        "diameter.flags.request",
        "diameter.applicationId",
        "diameter.SL-Request-Type",
        "diameter.Policy-Counter-Identifier",
        "diameter.Subscription-Id-Data",
        "diameter.Result-Code",
        "diameter.Termination-Cause",
    ];
    let got = cap.fields(&fields).expect("tshark fields");
    assert_eq!(
        got,
        vec![
            "8388635|1|16777302|0|monthly-data,roaming|001010000000001,491700000001||",
            "8388635|1|16777302|1|monthly-data|||",
            "8388636|0|16777302||||2001|",
            "275|1|16777302|||||1",
        ]
    );

    let text = cap.verbose().expect("tshark -V");
    for name in [
        "SL-Request-Type: INITIAL_REQUEST (0)",
        "SL-Request-Type: INTERMEDIATE_REQUEST (1)",
        "Policy-Counter-Identifier: monthly-data",
        "Termination-Cause: DIAMETER_LOGOUT (1)",
    ] {
        assert!(text.contains(name), "tshark does not show {name:?}");
    }
}
