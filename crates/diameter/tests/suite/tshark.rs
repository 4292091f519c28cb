//! Wireshark's Diameter dissector, an implementation independent of ours,
//! reads the messages our builder writes: realistic base, Gx, Rx and Sy
//! messages go into a pcap (our `pcap` writer), and tshark must find nothing
//! malformed or worth a warning, decode as many Diameter messages as we
//! wrote, and name every AVP as we meant it, in the same order, with the
//! same values.

use crate::support::{require_tool, TempDir};
use bytes::BytesMut;
use diameter::codec::{AvpIter, FLAG_R};
use diameter::dict::{self, app, avp, cmd};
use diameter::{Message, MessageBuilder};
use diameter_tools::pcap::{read_pcap, Direction, PcapWriter};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Command;

const GX: u32 = 16_777_238;
const TGPP: u32 = 10_415;

/// One message to write, with the AVP names tshark must show for it.
struct Case {
    what: &'static str,
    dir: Direction,
    bytes: Vec<u8>,
    must_show: &'static [&'static str],
}

fn build(f: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
    let mut buf = BytesMut::new();
    f(&mut buf);
    Message::parse(buf.clone().freeze())
        .expect("our own message parses")
        .validate()
        .expect("our own message validates");
    buf.to_vec()
}

fn parse(b: &[u8]) -> Message {
    Message::parse(b.to_vec().into()).expect("parses")
}

fn cer() -> Vec<u8> {
    build(|buf| {
        let mut b = MessageBuilder::new(
            buf,
            FLAG_R,
            cmd::CAPABILITIES_EXCHANGE,
            app::DIAMETER_COMMON_MESSAGES,
            0x1000_0001,
            0x5000_0001,
        );
        b.origin("pcef1.epc.example.net", "epc.example.net")
            .address(avp::HOST_IP_ADDRESS, IpAddr::V4(Ipv4Addr::new(10, 1, 0, 1)))
            .u32(avp::VENDOR_ID, TGPP)
            .str(avp::PRODUCT_NAME, "emulated-pcef")
            .u32(avp::ORIGIN_STATE_ID, 1_767_225_600)
            .u32(avp::SUPPORTED_VENDOR_ID, TGPP)
            .u32(avp::AUTH_APPLICATION_ID, GX)
            .u32(avp::INBAND_SECURITY_ID, 0)
            .group(avp::VENDOR_SPECIFIC_APPLICATION_ID, |g| {
                g.u32(avp::VENDOR_ID, TGPP)
                    .u32(avp::AUTH_APPLICATION_ID, GX);
            })
            .u32(avp::FIRMWARE_REVISION, 1);
        b.finish();
    })
}

fn cea(req: &[u8]) -> Vec<u8> {
    let req = parse(req);
    build(|buf| {
        let mut b = MessageBuilder::answer(buf, &req);
        b.result_code(2001)
            .origin("pcrf1.epc.example.net", "epc.example.net")
            .address(avp::HOST_IP_ADDRESS, IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2)))
            .u32(avp::VENDOR_ID, 0)
            .str(avp::PRODUCT_NAME, "pcrf")
            .u32(avp::ORIGIN_STATE_ID, 1_767_225_601)
            .u32(avp::SUPPORTED_VENDOR_ID, TGPP)
            .group(avp::VENDOR_SPECIFIC_APPLICATION_ID, |g| {
                g.u32(avp::VENDOR_ID, TGPP)
                    .u32(avp::AUTH_APPLICATION_ID, GX);
            });
        b.finish();
    })
}

fn dwr() -> Vec<u8> {
    build(|buf| {
        let mut b = MessageBuilder::new(
            buf,
            FLAG_R,
            cmd::DEVICE_WATCHDOG,
            app::DIAMETER_COMMON_MESSAGES,
            0x1000_0002,
            0x5000_0002,
        );
        b.origin("pcef1.epc.example.net", "epc.example.net")
            .u32(avp::ORIGIN_STATE_ID, 1_767_225_600);
        b.finish();
    })
}

fn dwa(req: &[u8]) -> Vec<u8> {
    let req = parse(req);
    build(|buf| {
        let mut b = MessageBuilder::answer(buf, &req);
        b.result_code(2001)
            .origin("pcrf1.epc.example.net", "epc.example.net")
            .u32(avp::ORIGIN_STATE_ID, 1_767_225_601);
        b.finish();
    })
}

fn dpr() -> Vec<u8> {
    build(|buf| {
        let mut b = MessageBuilder::new(
            buf,
            FLAG_R,
            cmd::DISCONNECT_PEER,
            app::DIAMETER_COMMON_MESSAGES,
            0x1000_0003,
            0x5000_0003,
        );
        b.origin("pcef1.epc.example.net", "epc.example.net")
            .i32(avp::DISCONNECT_CAUSE, 0);
        b.finish();
    })
}

fn dpa(req: &[u8]) -> Vec<u8> {
    let req = parse(req);
    build(|buf| {
        let mut b = MessageBuilder::answer(buf, &req);
        b.result_code(2001)
            .origin("pcrf1.epc.example.net", "epc.example.net");
        b.finish();
    })
}

const SESSION: &str = "pcef1.epc.example.net;1767225600;42";

fn arp(g: &mut MessageBuilder<'_>, level: u32) {
    g.group(avp::ALLOCATION_RETENTION_PRIORITY, |a| {
        a.u32(avp::PRIORITY_LEVEL, level)
            .i32(avp::PRE_EMPTION_CAPABILITY, 1)
            .i32(avp::PRE_EMPTION_VULNERABILITY, 0);
    });
}

/// A CCR-I as a P-GW sends it when a default bearer is created.
fn ccr_i() -> Vec<u8> {
    build(|buf| {
        let mut b =
            MessageBuilder::request(buf, cmd::CREDIT_CONTROL, app::GX, 0x1000_0010, 0x5000_0010);
        b.str(avp::SESSION_ID, SESSION)
            .u32(avp::AUTH_APPLICATION_ID, app::GX)
            .origin("pcef1.epc.example.net", "epc.example.net")
            .str(avp::DESTINATION_REALM, "pcrf.example.net")
            .i32(avp::CC_REQUEST_TYPE, 1)
            .u32(avp::CC_REQUEST_NUMBER, 0)
            .u32(avp::ORIGIN_STATE_ID, 1_767_225_600)
            .group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                    .str(avp::SUBSCRIPTION_ID_DATA, "001010123456789");
            })
            .group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(avp::SUBSCRIPTION_ID_TYPE, 0)
                    .str(avp::SUBSCRIPTION_ID_DATA, "33612345678");
            })
            .group(avp::SUPPORTED_FEATURES, |g| {
                g.u32(avp::VENDOR_ID, TGPP)
                    .u32(avp::FEATURE_LIST_ID, 1)
                    .u32(avp::FEATURE_LIST, 0x0000_000b);
            })
            .i32(avp::NETWORK_REQUEST_SUPPORT, 1)
            .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 7])
            .i32(avp::IP_CAN_TYPE, 5)
            .i32(avp::RAT_TYPE, 1004)
            .group(avp::QOS_INFORMATION, |q| {
                q.u32(avp::APN_AGGREGATE_MAX_BITRATE_UL, 50_000_000)
                    .u32(avp::APN_AGGREGATE_MAX_BITRATE_DL, 150_000_000);
            })
            .group(avp::DEFAULT_EPS_BEARER_QOS, |q| {
                q.i32(avp::QOS_CLASS_IDENTIFIER, 9);
                arp(q, 8);
            })
            // TAI + ECGI (geographic location type 130), MCC 001 MNC 01.
            .bytes(
                avp::_3GPP_USER_LOCATION_INFO,
                &[
                    130, 0x00, 0xf1, 0x10, 0x00, 0x01, 0x00, 0xf1, 0x10, 0x00, 0x00, 0x01, 0x01,
                ],
            )
            .bytes(avp::_3GPP_MS_TIMEZONE, &[0x40, 0x00])
            .str(avp::_3GPP_SGSN_MCC_MNC, "00101")
            .address(avp::AN_GW_ADDRESS, IpAddr::V4(Ipv4Addr::new(10, 1, 1, 1)))
            .group(avp::USER_EQUIPMENT_INFO, |g| {
                g.i32(avp::USER_EQUIPMENT_INFO_TYPE, 0)
                    .bytes(avp::USER_EQUIPMENT_INFO_VALUE, b"3569870123456701");
            })
            .str(avp::CALLED_STATION_ID, "internet")
            .i32(avp::BEARER_USAGE, 0)
            .address(
                avp::ACCESS_NETWORK_CHARGING_ADDRESS,
                IpAddr::V4(Ipv4Addr::new(10, 1, 1, 2)),
            );
        b.finish();
    })
}

/// The rule a PCRF installs for a video service.
fn rule_definition(b: &mut MessageBuilder<'_>, name: &str) {
    b.group(avp::CHARGING_RULE_DEFINITION, |d| {
        d.bytes(avp::CHARGING_RULE_NAME, name.as_bytes())
            .u32(avp::SERVICE_IDENTIFIER, 1001)
            .u32(avp::RATING_GROUP, 100)
            .group(avp::FLOW_INFORMATION, |f| {
                f.str(
                    avp::FLOW_DESCRIPTION,
                    "permit out 17 from 198.51.100.0/24 to 10.45.0.7",
                )
                .i32(avp::FLOW_DIRECTION, 1);
            })
            .group(avp::FLOW_INFORMATION, |f| {
                f.str(
                    avp::FLOW_DESCRIPTION,
                    "permit out 17 from 10.45.0.7 to 198.51.100.0/24",
                )
                .i32(avp::FLOW_DIRECTION, 2);
            })
            .i32(avp::FLOW_STATUS, 2)
            .group(avp::QOS_INFORMATION, |q| {
                q.i32(avp::QOS_CLASS_IDENTIFIER, 2)
                    .u32(avp::MAX_REQUESTED_BANDWIDTH_UL, 2_000_000)
                    .u32(avp::MAX_REQUESTED_BANDWIDTH_DL, 8_000_000)
                    .u32(avp::GUARANTEED_BITRATE_UL, 1_000_000)
                    .u32(avp::GUARANTEED_BITRATE_DL, 4_000_000);
                arp(q, 5);
            })
            .i32(avp::ONLINE, 0)
            .i32(avp::OFFLINE, 1)
            .i32(avp::METERING_METHOD, 1)
            .u32(avp::PRECEDENCE, 100)
            .bytes(avp::MONITORING_KEY, b"mk-video");
    });
}

fn cca_i(req: &[u8]) -> Vec<u8> {
    let req = parse(req);
    build(|buf| {
        let mut b = MessageBuilder::answer(buf, &req);
        b.u32(avp::AUTH_APPLICATION_ID, app::GX)
            .origin("pcrf1.epc.example.net", "epc.example.net")
            .result_code(2001)
            .i32(avp::CC_REQUEST_TYPE, 1)
            .u32(avp::CC_REQUEST_NUMBER, 0)
            .group(avp::SUPPORTED_FEATURES, |g| {
                g.u32(avp::VENDOR_ID, TGPP)
                    .u32(avp::FEATURE_LIST_ID, 1)
                    .u32(avp::FEATURE_LIST, 0x0000_000b);
            })
            .i32(avp::BEARER_CONTROL_MODE, 2)
            .i32(avp::EVENT_TRIGGER, 2)
            .i32(avp::EVENT_TRIGGER, 13)
            .i32(avp::EVENT_TRIGGER, 33)
            .group(avp::CHARGING_RULE_INSTALL, |g| {
                rule_definition(g, "rule-video");
                g.bytes(avp::CHARGING_RULE_NAME, b"rule-default")
                    .str(avp::CHARGING_RULE_BASE_NAME, "base-internet");
            })
            .group(avp::QOS_INFORMATION, |q| {
                q.u32(avp::APN_AGGREGATE_MAX_BITRATE_UL, 50_000_000)
                    .u32(avp::APN_AGGREGATE_MAX_BITRATE_DL, 150_000_000);
            })
            .group(avp::DEFAULT_EPS_BEARER_QOS, |q| {
                q.i32(avp::QOS_CLASS_IDENTIFIER, 9);
                arp(q, 8);
            })
            .group(avp::USAGE_MONITORING_INFORMATION, |u| {
                u.bytes(avp::MONITORING_KEY, b"mk-video")
                    .group(avp::GRANTED_SERVICE_UNIT, |g| {
                        g.u64(avp::CC_TOTAL_OCTETS, 10_000_000_000);
                    })
                    .i32(avp::USAGE_MONITORING_LEVEL, 1);
            })
            .time(
                avp::REVALIDATION_TIME,
                std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_767_229_200),
            );
        b.finish();
    })
}

/// A RAR pushing a policy change: one rule removed, three installed. It is
/// longer than one TCP segment, so tshark must reassemble it.
fn rar() -> Vec<u8> {
    build(|buf| {
        let mut b = MessageBuilder::request(buf, cmd::RE_AUTH, app::GX, 0x2000_0001, 0x6000_0001);
        b.str(avp::SESSION_ID, SESSION)
            .u32(avp::AUTH_APPLICATION_ID, app::GX)
            .origin("pcrf1.epc.example.net", "epc.example.net")
            .str(avp::DESTINATION_REALM, "epc.example.net")
            .str(avp::DESTINATION_HOST, "pcef1.epc.example.net")
            .i32(avp::RE_AUTH_REQUEST_TYPE, 0)
            .i32(avp::EVENT_TRIGGER, 33)
            .group(avp::CHARGING_RULE_REMOVE, |g| {
                g.bytes(avp::CHARGING_RULE_NAME, b"rule-default");
            })
            .group(avp::CHARGING_RULE_INSTALL, |g| {
                for name in ["rule-video", "rule-voice", "rule-gaming"] {
                    rule_definition(g, name);
                }
            })
            .group(avp::QOS_INFORMATION, |q| {
                q.u32(avp::APN_AGGREGATE_MAX_BITRATE_UL, 10_000_000)
                    .u32(avp::APN_AGGREGATE_MAX_BITRATE_DL, 20_000_000);
            });
        b.finish();
    })
}

fn raa(req: &[u8]) -> Vec<u8> {
    let req = parse(req);
    build(|buf| {
        let mut b = MessageBuilder::answer(buf, &req);
        b.origin("pcef1.epc.example.net", "epc.example.net")
            .result_code(2001)
            .u32(avp::ORIGIN_STATE_ID, 1_767_225_600);
        b.finish();
    })
}

/// An Rx AAR from a P-CSCF for a voice call, and its AAA.
fn aar() -> Vec<u8> {
    build(|buf| {
        let mut b = MessageBuilder::request(buf, cmd::AA, app::RX, 0x3000_0001, 0x7000_0001);
        b.str(avp::SESSION_ID, "pcscf1.ims.example.net;1767225600;9")
            .u32(avp::AUTH_APPLICATION_ID, app::RX)
            .origin("pcscf1.ims.example.net", "ims.example.net")
            .str(avp::DESTINATION_REALM, "pcrf.example.net")
            .bytes(avp::AF_APPLICATION_IDENTIFIER, b"IMS Services")
            .group(avp::MEDIA_COMPONENT_DESCRIPTION, |m| {
                m.u32(avp::MEDIA_COMPONENT_NUMBER, 1)
                    .group(avp::MEDIA_SUB_COMPONENT, |s| {
                        s.u32(avp::FLOW_NUMBER, 1)
                            .str(
                                avp::FLOW_DESCRIPTION,
                                "permit out 17 from 192.0.2.10 49152 to 10.45.0.7 50000",
                            )
                            .str(
                                avp::FLOW_DESCRIPTION,
                                "permit in 17 from 10.45.0.7 50000 to 192.0.2.10 49152",
                            )
                            .i32(avp::FLOW_USAGE, 0);
                    })
                    .i32(avp::MEDIA_TYPE, 0)
                    .u32(avp::MAX_REQUESTED_BANDWIDTH_UL, 64_000)
                    .u32(avp::MAX_REQUESTED_BANDWIDTH_DL, 64_000)
                    .bytes(
                        avp::CODEC_DATA,
                        b"uplink\noffer\nm=audio 49152 RTP/AVP 96\n",
                    );
            })
            .i32(avp::SPECIFIC_ACTION, 1)
            .i32(avp::SPECIFIC_ACTION, 2)
            .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 7])
            .group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(avp::SUBSCRIPTION_ID_TYPE, 0)
                    .str(avp::SUBSCRIPTION_ID_DATA, "33612345678");
            })
            .i32(avp::SERVICE_INFO_STATUS, 0)
            .i32(avp::RX_REQUEST_TYPE, 0);
        b.finish();
    })
}

fn aaa(req: &[u8]) -> Vec<u8> {
    let req = parse(req);
    build(|buf| {
        let mut b = MessageBuilder::answer(buf, &req);
        b.u32(avp::AUTH_APPLICATION_ID, app::RX)
            .origin("pcrf1.epc.example.net", "epc.example.net")
            .result_code(2001)
            .i32(avp::IP_CAN_TYPE, 5)
            .i32(avp::RAT_TYPE, 1004);
        b.finish();
    })
}

/// An Sy SLR subscribing to two policy counters at an OCS, and its SLA.
fn slr() -> Vec<u8> {
    build(|buf| {
        let mut b =
            MessageBuilder::request(buf, cmd::SPENDING_LIMIT, app::SY, 0x4000_0001, 0x8000_0001);
        b.str(avp::SESSION_ID, "pcrf1.epc.example.net;1767225600;sy1")
            .u32(avp::AUTH_APPLICATION_ID, app::SY)
            .origin("pcrf1.epc.example.net", "epc.example.net")
            .str(avp::DESTINATION_REALM, "ocs.example.net")
            .i32(avp::SL_REQUEST_TYPE, 0)
            .group(avp::SUBSCRIPTION_ID, |g| {
                g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                    .str(avp::SUBSCRIPTION_ID_DATA, "001010123456789");
            })
            .str(avp::POLICY_COUNTER_IDENTIFIER, "monthly-volume")
            .str(avp::POLICY_COUNTER_IDENTIFIER, "roaming-volume");
        b.finish();
    })
}

fn sla(req: &[u8]) -> Vec<u8> {
    let req = parse(req);
    build(|buf| {
        let mut b = MessageBuilder::answer(buf, &req);
        b.u32(avp::AUTH_APPLICATION_ID, app::SY)
            .origin("ocs1.ocs.example.net", "ocs.example.net")
            .result_code(2001)
            .group(avp::POLICY_COUNTER_STATUS_REPORT, |p| {
                p.str(avp::POLICY_COUNTER_IDENTIFIER, "monthly-volume")
                    .str(avp::POLICY_COUNTER_STATUS, "normal");
            })
            .group(avp::POLICY_COUNTER_STATUS_REPORT, |p| {
                p.str(avp::POLICY_COUNTER_IDENTIFIER, "roaming-volume")
                    .str(avp::POLICY_COUNTER_STATUS, "exhausted");
            });
        b.finish();
    })
}

/// Every message, in one capture: interfaces that would use separate
/// connections share this one, which changes nothing for the dissector.
fn cases() -> Vec<Case> {
    let cer = cer();
    let dwr = dwr();
    let dpr = dpr();
    let ccr = ccr_i();
    let rar = rar();
    let aar = aar();
    let slr = slr();
    vec![
        Case {
            what: "CER",
            dir: Direction::ToServer,
            bytes: cer.clone(),
            must_show: &[
                "Origin-Host",
                "Origin-Realm",
                "Host-IP-Address",
                "Vendor-Id",
                "Product-Name",
                "Origin-State-Id",
                "Supported-Vendor-Id",
                "Auth-Application-Id",
                "Inband-Security-Id",
                "Vendor-Specific-Application-Id",
                "Firmware-Revision",
            ],
        },
        Case {
            what: "CEA",
            dir: Direction::ToClient,
            bytes: cea(&cer),
            must_show: &[
                "Result-Code",
                "Origin-Host",
                "Origin-Realm",
                "Host-IP-Address",
                "Product-Name",
                "Vendor-Specific-Application-Id",
                "Auth-Application-Id",
            ],
        },
        Case {
            what: "DWR",
            dir: Direction::ToServer,
            bytes: dwr.clone(),
            must_show: &["Origin-Host", "Origin-Realm", "Origin-State-Id"],
        },
        Case {
            what: "DWA",
            dir: Direction::ToClient,
            bytes: dwa(&dwr),
            must_show: &["Result-Code", "Origin-Host", "Origin-Realm"],
        },
        Case {
            what: "CCR-I",
            dir: Direction::ToServer,
            bytes: ccr.clone(),
            must_show: &[
                "Session-Id",
                "Auth-Application-Id",
                "Destination-Realm",
                "CC-Request-Type",
                "CC-Request-Number",
                "Subscription-Id",
                "Subscription-Id-Type",
                "Subscription-Id-Data",
                "Supported-Features",
                "Feature-List-ID",
                "Feature-List",
                "Network-Request-Support",
                "Framed-IP-Address",
                "IP-CAN-Type",
                "RAT-Type",
                "QoS-Information",
                "APN-Aggregate-Max-Bitrate-UL",
                "APN-Aggregate-Max-Bitrate-DL",
                "Default-EPS-Bearer-QoS",
                "QoS-Class-Identifier",
                "Allocation-Retention-Priority",
                "Priority-Level",
                "Pre-emption-Capability",
                "Pre-emption-Vulnerability",
                "3GPP-User-Location-Info",
                "3GPP-MS-TimeZone",
                "3GPP-SGSN-MCC-MNC",
                "AN-GW-Address",
                "User-Equipment-Info",
                "User-Equipment-Info-Type",
                "User-Equipment-Info-Value",
                "Called-Station-Id",
                "Bearer-Usage",
                "Access-Network-Charging-Address",
            ],
        },
        Case {
            what: "CCA-I",
            dir: Direction::ToClient,
            bytes: cca_i(&ccr),
            must_show: &[
                "Session-Id",
                "Result-Code",
                "CC-Request-Type",
                "Bearer-Control-Mode",
                "Event-Trigger",
                "Charging-Rule-Install",
                "Charging-Rule-Definition",
                "Charging-Rule-Name",
                "Service-Identifier",
                "Rating-Group",
                "Flow-Information",
                "Flow-Description",
                "Flow-Direction",
                "Flow-Status",
                "Max-Requested-Bandwidth-UL",
                "Guaranteed-Bitrate-DL",
                "Online",
                "Offline",
                "Metering-Method",
                "Precedence",
                "Monitoring-Key",
                "Charging-Rule-Base-Name",
                "Usage-Monitoring-Information",
                "Granted-Service-Unit",
                "CC-Total-Octets",
                "Usage-Monitoring-Level",
                "Revalidation-Time",
            ],
        },
        Case {
            what: "RAR",
            dir: Direction::ToClient,
            bytes: rar.clone(),
            must_show: &[
                "Destination-Host",
                "Re-Auth-Request-Type",
                "Event-Trigger",
                "Charging-Rule-Remove",
                "Charging-Rule-Install",
                "Charging-Rule-Definition",
                "QoS-Information",
            ],
        },
        Case {
            what: "RAA",
            dir: Direction::ToServer,
            bytes: raa(&rar),
            must_show: &["Session-Id", "Result-Code", "Origin-State-Id"],
        },
        Case {
            what: "AAR",
            dir: Direction::ToServer,
            bytes: aar.clone(),
            must_show: &[
                "AF-Application-Identifier",
                "Media-Component-Description",
                "Media-Component-Number",
                "Media-Sub-Component",
                "Flow-Number",
                "Flow-Description",
                "Flow-Usage",
                "Media-Type",
                "Codec-Data",
                "Specific-Action",
                "Service-Info-Status",
                "Rx-Request-Type",
            ],
        },
        Case {
            what: "AAA",
            dir: Direction::ToClient,
            bytes: aaa(&aar),
            must_show: &["Result-Code", "IP-CAN-Type", "RAT-Type"],
        },
        Case {
            what: "SLR",
            dir: Direction::ToClient,
            bytes: slr.clone(),
            must_show: &[
                "SL-Request-Type",
                "Subscription-Id",
                "Policy-Counter-Identifier",
            ],
        },
        Case {
            what: "SLA",
            dir: Direction::ToServer,
            bytes: sla(&slr),
            must_show: &[
                "Policy-Counter-Status-Report",
                "Policy-Counter-Identifier",
                "Policy-Counter-Status",
            ],
        },
        Case {
            what: "DPR",
            dir: Direction::ToServer,
            bytes: dpr.clone(),
            must_show: &["Origin-Host", "Origin-Realm", "Disconnect-Cause"],
        },
        Case {
            what: "DPA",
            dir: Direction::ToClient,
            bytes: dpa(&dpr),
            must_show: &["Result-Code", "Origin-Host", "Origin-Realm"],
        },
    ]
}

fn write_pcap(path: &Path, cases: &[Case]) {
    assert!(
        cases.iter().any(|c| c.bytes.len() > 1460),
        "one message must span TCP segments"
    );
    let mut w = PcapWriter::loopback(Vec::new()).expect("pcap header");
    for c in cases {
        w.message(c.dir, &c.bytes).expect("write message");
    }
    let file = w.finish().expect("finish");
    std::fs::write(path, &file).expect("write pcap");
    // Our reader must give back exactly what was written.
    let cap = read_pcap(&file).expect("read back");
    assert!(cap.problems.is_empty(), "{:?}", cap.problems);
    let back: Vec<&[u8]> = cap.messages.iter().map(|m| &m.bytes[..]).collect();
    let want: Vec<&[u8]> = cases.iter().map(|c| &c.bytes[..]).collect();
    assert_eq!(back, want, "pcap reader disagrees with the writer");
}

/// Runs tshark on the capture with checksum validation on (so a wrong IPv4
/// or TCP checksum is an expert error too).
fn tshark(pcap: &Path, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .args([
            "-n",
            "-o",
            "ip.check_checksum:TRUE",
            "-o",
            "tcp.check_checksum:TRUE",
        ])
        .arg("-r")
        .arg(pcap)
        .args(args)
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "tshark {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One AVP as tshark shows it: its name and, for a leaf, the value text.
#[derive(Debug, PartialEq)]
struct Shown {
    name: String,
    val: Option<String>,
}

/// The AVPs tshark shows, packet by packet, depth first, from PDML.
fn tshark_avps(pdml: &str) -> Vec<Vec<Shown>> {
    pdml.split("<packet>")
        .skip(1)
        .map(|pkt| {
            pkt.lines()
                .filter_map(|l| {
                    let l = l.trim_start();
                    if !l.starts_with("<field name=\"diameter.avp\"") {
                        return None;
                    }
                    // showname="AVP: Origin-Host(264) l=29 f=-M- val=pcef1..."
                    let s = l.split("showname=\"AVP: ").nth(1)?;
                    let s = &s[..s.find('"')?];
                    let name = s.split('(').next()?.to_owned();
                    let val = s.split_once(" val=").map(|(_, v)| unescape(v));
                    Some(Shown { name, val })
                })
                .collect::<Vec<_>>()
        })
        .filter(|avps| !avps.is_empty())
        .collect()
}

fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// Our dictionary's view of every AVP of a message, depth first: the name,
/// and the value text tshark should show for the types whose text is
/// unambiguous (strings, integers, addresses; enumerations end in "(n)").
fn our_avps(msg: &[u8]) -> Vec<(String, Option<String>)> {
    fn walk(it: AvpIter<'_>, out: &mut Vec<(String, Option<String>)>) {
        for a in it {
            let a = a.expect("well-formed");
            let d = dict::avp(a.code(), a.vendor()).expect("AVP in our dictionary");
            use dict::AvpType as T;
            let val = match d.ty {
                T::UTF8String | T::DiameterIdentity | T::DiameterURI => {
                    Some(a.as_str().expect("string").to_owned())
                }
                T::Unsigned32 => Some(a.as_u32().expect("u32").to_string()),
                T::Integer32 => Some(a.as_i32().expect("i32").to_string()),
                T::Unsigned64 => Some(a.as_u64().expect("u64").to_string()),
                T::Integer64 => Some(a.as_i64().expect("i64").to_string()),
                T::Enumerated => Some(format!("({})", a.as_enum().expect("enum"))),
                T::Address => Some(a.as_address().expect("address").to_string()),
                _ => None,
            };
            out.push((d.name.to_owned(), val));
            if d.ty == T::Grouped {
                walk(a.grouped(), out);
            }
        }
    }
    let m = parse(msg);
    let mut v = Vec::new();
    walk(m.avps(), &mut v);
    v
}

/// Whether tshark's value text shows our value. Numbers it has a name for
/// (enumerations, application ids) appear as "NAME (n)".
fn same_value(shown: &str, ours: &str) -> bool {
    if ours.starts_with('(') {
        shown.ends_with(&format!(" {ours}")) || shown == ours.trim_matches(['(', ')'])
    } else {
        shown == ours || (ours.parse::<i64>().is_ok() && shown.ends_with(&format!(" ({ours})")))
    }
}

#[test]
fn tshark_decodes_our_messages_cleanly_and_names_every_avp() {
    require_tool("tshark");
    let dir = TempDir::new("tshark");
    let pcap = dir.join("messages.pcap");
    let cases = cases();
    write_pcap(&pcap, &cases);

    let bad = tshark(
        &pcap,
        &["-Y", "_ws.malformed || _ws.expert.severity >= 0x00600000"],
    );
    assert!(
        bad.trim().is_empty(),
        "tshark reports malformed or warning packets:\n{bad}\n{}",
        tshark(&pcap, &["-V", "-Y", "_ws.expert"])
    );

    // One Diameter PDU per message, with our command codes and R bits.
    let fields = tshark(
        &pcap,
        &[
            "-Y",
            "diameter",
            "-T",
            "fields",
            "-E",
            "occurrence=a",
            "-e",
            "diameter.cmd.code",
            "-e",
            "diameter.flags.request",
        ],
    );
    let got: Vec<String> = fields.lines().map(|l| l.replace('\t', " ")).collect();
    let want: Vec<String> = cases
        .iter()
        .map(|c| {
            let m = parse(&c.bytes);
            let r = if m.is_request() { "True" } else { "False" };
            format!("{} {r}", m.command_code())
        })
        .collect();
    assert_eq!(got.len(), want.len(), "tshark saw: {got:?}");
    for (g, w) in got.iter().zip(&want) {
        assert!(
            g.eq_ignore_ascii_case(w) || g == &w.replace("True", "1").replace("False", "0"),
            "tshark saw {g}, we wrote {w}"
        );
    }

    let pdml = tshark(&pcap, &["-Y", "diameter", "-T", "pdml"]);
    let seen = tshark_avps(&pdml);
    assert_eq!(seen.len(), cases.len(), "one packet per message");
    for (c, shown) in cases.iter().zip(&seen) {
        for n in c.must_show {
            assert!(
                shown.iter().any(|s| s.name == *n),
                "{}: tshark does not show {n}; it shows {shown:?}",
                c.what
            );
        }
        let ours = our_avps(&c.bytes);
        let names: Vec<&str> = shown.iter().map(|s| s.name.as_str()).collect();
        let our_names: Vec<&str> = ours.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names, our_names,
            "{}: tshark names the AVPs differently from our dictionary",
            c.what
        );
        for (s, (name, val)) in shown.iter().zip(&ours) {
            if let Some(v) = val {
                let sv = s.val.as_deref().unwrap_or("");
                assert!(
                    same_value(sv, v),
                    "{}: {name} is {v} for us, tshark shows {sv}",
                    c.what
                );
            }
        }
    }
}
