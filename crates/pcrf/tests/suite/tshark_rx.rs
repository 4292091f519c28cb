//! Wireshark's Diameter dissector, independent of our codec, reads every
//! Rx message the PCRF sends (AAA success and 5065, STA, the RAR notifying
//! the AF, ASR) and the Gx RAR carrying the rules the default media hook
//! derives from a voice call. tshark must find nothing malformed or worth a
//! warning, count as many AVPs as our validator visits, and show the values
//! we meant. Needs tshark (scripts/install-test-deps.sh installs it).

use bytes::{Bytes, BytesMut};
use diameter::dict::{avp, cmd, enums};
use diameter::{Message, MessageBuilder};
use diameter_tools::pcap::Direction;
use diameter_tools::tshark::Capture;
use pcrf::gx;
use pcrf::pcc::UsageInstructions;
use pcrf::policy::decision::Decision;
use pcrf::policy::media::{af_tag, AfInput, MediaInput};
use pcrf::policy::media::{MediaComponent, MediaSubComponent};
use pcrf::policy::{EngineConfig, Limits, PolicyEngine};
use pcrf::rx::{self, AaaExtras, AfNotice, RX};
use pcrf::session::RuleDiff;
use pcrf::session_message::{Identity, Outcome};

fn request(command: u32, app: u32, hop: u32, f: impl FnOnce(&mut MessageBuilder<'_>)) -> Bytes {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::request(&mut buf, command, app, hop, hop);
    f(&mut b);
    b.finish();
    buf.freeze()
}

fn parse(b: &Bytes) -> Message {
    Message::parse(b.clone()).expect("parse")
}

#[test]
fn tshark_reads_every_rx_message_we_send_and_the_gx_rar_with_rx_rules() {
    let me = Identity {
        origin_host: "pcrf.test".into(),
        origin_realm: "test".into(),
    };
    let aar = request(cmd::AA, RX, 1, |b| {
        b.str(avp::SESSION_ID, "pcscf.test;call;1")
            .u32(avp::AUTH_APPLICATION_ID, RX)
            .origin("pcscf.test", "test")
            .str(avp::DESTINATION_REALM, "test")
            .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2])
            .i32(avp::SPECIFIC_ACTION, 9)
            .group(avp::MEDIA_COMPONENT_DESCRIPTION, |m| {
                m.u32(avp::MEDIA_COMPONENT_NUMBER, 1)
                    .i32(avp::MEDIA_TYPE, 0)
                    .u32(avp::MAX_REQUESTED_BANDWIDTH_UL, 64_000)
                    .u32(avp::MAX_REQUESTED_BANDWIDTH_DL, 64_000)
                    .group(avp::MEDIA_SUB_COMPONENT, |s| {
                        s.u32(avp::FLOW_NUMBER, 1).str(
                            avp::FLOW_DESCRIPTION,
                            "permit out 17 from 192.0.2.9 5000 to 10.45.0.2 4000",
                        );
                    });
            });
    });
    let aar_msg = parse(&aar);
    let decoded = rx::decode_aar(&aar_msg).expect("decode AAR");

    // The Gx RAR with the rules the built-in hook derives.
    let dir = std::env::temp_dir().join(format!("pcrf-tshark-rx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let policy = dir.join("policy.lua");
    std::fs::write(&policy, "function decide(input) return {} end").expect("policy");
    let engine = PolicyEngine::load(EngineConfig {
        path: policy,
        limits: Limits::default(),
        fallback: Decision::default(),
    })
    .expect("engine");
    let media: Vec<MediaComponent> = decoded.media.clone();
    assert_eq!(
        media[0].sub_components[0],
        MediaSubComponent {
            flow_number: 1,
            flows: vec!["permit out 17 from 192.0.2.9 5000 to 10.45.0.2 4000".into()],
            ..Default::default()
        }
    );
    let rules = engine
        .authorize_media(&MediaInput {
            af: AfInput {
                session: decoded.session_id.into(),
                tag: af_tag(decoded.session_id),
                ..Default::default()
            },
            media,
            ..Default::default()
        })
        .expect("hook")
        .rules;
    let installed = Decision {
        definitions: rules,
        ..Default::default()
    };
    let before = Decision::default();
    // The Gx RAR that pushes a diff to the PCEF.
    let gx_rar_of = |hop: u32, diff: &RuleDiff<'_>| {
        request(cmd::RE_AUTH, gx::GX, hop, |b| {
            gx::encode_rar(
                b,
                "pgw.test;1;1",
                &me,
                "pgw.test",
                "test",
                Some(diff),
                None,
                &UsageInstructions::default(),
            )
        })
    };
    let gx_rar = gx_rar_of(2, &RuleDiff::between(&before, &installed));
    let removal = Decision::default();
    let gx_rar_remove = gx_rar_of(3, &RuleDiff::between(&installed, &removal));

    let mut out = BytesMut::new();
    rx::encode_aaa(
        &mut out,
        &aar_msg,
        &me,
        Outcome::Result(2001),
        &AaaExtras {
            ip_can_type: Some(5),
            rat_type: Some(1004),
        },
        None,
    );
    let aaa = out.freeze();
    let mut out = BytesMut::new();
    rx::encode_aaa(
        &mut out,
        &aar_msg,
        &me,
        Outcome::Experimental(5065),
        &AaaExtras::default(),
        Some("no IP-CAN session for the UE address"),
    );
    let aaa_5065 = out.freeze();
    let af_rar = request(cmd::RE_AUTH, RX, 4, |b| {
        rx::encode_af_rar(
            b,
            "pcscf.test;call;1",
            &me,
            "pcscf.test",
            "test",
            &AfNotice {
                actions: vec![enums::SPECIFIC_ACTION::INDICATION_OF_FAILED_RESOURCES_ALLOCATION],
                flows: vec![(1, vec![1])],
                ip_can_type: Some(5),
                rat_type: Some(1004),
                charging_id: Some(b"pgw-charging-1"),
            },
        )
    });
    let asr = request(cmd::ABORT_SESSION, RX, 5, |b| {
        rx::encode_asr(
            b,
            "pcscf.test;call;1",
            &me,
            "pcscf.test",
            "test",
            enums::ABORT_CAUSE::BEARER_RELEASED,
        )
    });
    let str_req = request(cmd::SESSION_TERMINATION, RX, 6, |b| {
        b.str(avp::SESSION_ID, "pcscf.test;call;1")
            .origin("pcscf.test", "test")
            .str(avp::DESTINATION_REALM, "test")
            .u32(avp::AUTH_APPLICATION_ID, RX)
            .i32(avp::TERMINATION_CAUSE, 1);
    });
    let str_msg = parse(&str_req);
    let mut out = BytesMut::new();
    rx::encode_sta(&mut out, &str_msg, &me, 2001);
    let sta = out.freeze();

    let messages = [
        (Direction::ToServer, aar),
        (Direction::ToClient, gx_rar),
        (Direction::ToClient, aaa),
        (Direction::ToClient, aaa_5065),
        (Direction::ToClient, af_rar),
        (Direction::ToClient, asr),
        (Direction::ToServer, str_req),
        (Direction::ToClient, gx_rar_remove),
        (Direction::ToClient, sta),
    ];
    let cap = Capture::write("rx", &messages).expect("capture");
    cap.check().expect("tshark reads what we wrote");

    let fields = [
        "diameter.cmd.code",
        "diameter.flags.request",
        "diameter.applicationId",
        "diameter.Result-Code",
        "diameter.Experimental-Result-Code",
        "diameter.QoS-Class-Identifier",
        "diameter.Guaranteed-Bitrate-DL",
        "diameter.Specific-Action",
        "diameter.Abort-Cause",
    ];
    let got = cap.fields(&fields).expect("tshark fields");
    assert_eq!(
        got,
        vec![
            "265|1|16777236|||||9|",
            "258|1|16777238|||1|64000||",
            "265|0|16777236|2001|||||",
            "265|0|16777236||5065||||",
            "258|1|16777236|||||9|",
            "274|1|16777236||||||0",
            "275|1|16777236||||||",
            "258|1|16777238||||||",
            "275|0|16777236|2001|||||",
        ]
    );
    let text = cap.verbose().expect("tshark -V");
    for name in [
        "Specific-Action: INDICATION_OF_FAILED_RESOURCES_ALLOCATION (9)",
        "Abort-Cause: BEARER_RELEASED (0)",
        "Charging-Rule-Definition",
        "Flow-Description: permit out 17 from 192.0.2.9 5000 to 10.45.0.2 4000",
    ] {
        assert!(text.contains(name), "tshark does not show {name:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
