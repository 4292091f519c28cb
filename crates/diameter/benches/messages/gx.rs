//! Realistic Gx messages for the codec benchmarks and the zero-allocation
//! test: a CCR-I as a P-GW sends it (32 top-level AVPs, 54 in all) and the
//! PCRF's CCA-I with three Charging-Rule-Install (18 top-level, 55 in all). Shared by
//! `benches/codec.rs` and `tests/zero_alloc.rs` (`#[path]`-included) so both
//! measure the same bytes.

use bytes::{Bytes, BytesMut};
use diameter::dict::{app, avp, cmd, enums, vendor};
use diameter::{Message, MessageBuilder};
use std::net::{IpAddr, Ipv4Addr};

pub const SESSION_ID: &str = "pgw01.epc.mnc001.mcc001.3gppnetwork.org;1732240000;42;apn=internet";
pub const PGW_HOST: &str = "pgw01.epc.mnc001.mcc001.3gppnetwork.org";
pub const PGW_REALM: &str = "epc.mnc001.mcc001.3gppnetwork.org";
pub const PCRF_HOST: &str = "pcrf01.epc.mnc001.mcc001.3gppnetwork.org";
pub const IMSI: &str = "001010123456789";
pub const MSISDN: &str = "15551234567";
pub const CC_REQUEST_NUMBER: u32 = 0;
pub const HOP_BY_HOP: u32 = 0x5a1e_0001;
pub const END_TO_END: u32 = 0x7c00_4242;
/// Revalidation-Time as NTP seconds (2026-11-22T06:00:00Z), fixed so the
/// encoded bytes are the same on every run.
pub const REVALIDATION_NTP: u32 = 4_004_316_000;

/// Gx feature list 1 as a Rel-12 P-GW advertises it (Rel8, Rel9, ... bits).
const FEATURE_LIST: u32 = 0x0000_03ff;
/// 3GPP-User-Location-Info, TAI and ECGI (type 130), MCC 001 MNC 01.
const ULI_TAI_ECGI: [u8; 13] = [
    130, 0x00, 0xf1, 0x10, 0x00, 0x01, 0x00, 0xf1, 0x10, 0x00, 0x12, 0x34, 0x01,
];
/// 3GPP-MS-TimeZone: UTC+1 (one quarter-hour unit times 4), no DST.
const MS_TIMEZONE: [u8; 2] = [0x40, 0x00];
/// IMEISV as 16 BCD digits in ASCII, as P-GWs send it.
const IMEISV: &[u8] = b"3534900698733119";

/// The CCR-I bytes.
pub fn ccr_initial() -> Bytes {
    let mut buf = BytesMut::with_capacity(1024);
    let mut b = MessageBuilder::request(
        &mut buf,
        cmd::CREDIT_CONTROL,
        app::GX,
        HOP_BY_HOP,
        END_TO_END,
    );
    b.str(avp::SESSION_ID, SESSION_ID)
        .u32(avp::AUTH_APPLICATION_ID, app::GX)
        .str(avp::ORIGIN_HOST, PGW_HOST)
        .str(avp::ORIGIN_REALM, PGW_REALM)
        .str(avp::DESTINATION_REALM, PGW_REALM)
        .i32(
            avp::CC_REQUEST_TYPE,
            enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
        )
        .u32(avp::CC_REQUEST_NUMBER, CC_REQUEST_NUMBER)
        .u32(avp::ORIGIN_STATE_ID, 1_732_239_000)
        .group(avp::SUBSCRIPTION_ID, |g| {
            g.i32(
                avp::SUBSCRIPTION_ID_TYPE,
                enums::SUBSCRIPTION_ID_TYPE::END_USER_IMSI,
            )
            .str(avp::SUBSCRIPTION_ID_DATA, IMSI);
        })
        .group(avp::SUBSCRIPTION_ID, |g| {
            g.i32(
                avp::SUBSCRIPTION_ID_TYPE,
                enums::SUBSCRIPTION_ID_TYPE::END_USER_E164,
            )
            .str(avp::SUBSCRIPTION_ID_DATA, MSISDN);
        })
        .group(avp::SUPPORTED_FEATURES, |g| {
            g.u32(avp::VENDOR_ID, vendor::_3GPP)
                .u32(avp::FEATURE_LIST_ID, 1)
                .u32(avp::FEATURE_LIST, FEATURE_LIST);
        })
        .i32(
            avp::NETWORK_REQUEST_SUPPORT,
            enums::NETWORK_REQUEST_SUPPORT::NETWORK_REQUEST_SUPPORTED,
        )
        .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 17])
        .i32(avp::IP_CAN_TYPE, enums::IP_CAN_TYPE::_3GPP_EPS)
        .i32(avp::RAT_TYPE, enums::RAT_TYPE::EUTRAN)
        .group(avp::QOS_INFORMATION, |g| {
            g.i32(
                avp::QOS_CLASS_IDENTIFIER,
                enums::QOS_CLASS_IDENTIFIER::QCI_9,
            )
            .group(avp::ALLOCATION_RETENTION_PRIORITY, arp(8))
            .u32(avp::APN_AGGREGATE_MAX_BITRATE_UL, 50_000_000)
            .u32(avp::APN_AGGREGATE_MAX_BITRATE_DL, 150_000_000);
        })
        .group(avp::DEFAULT_EPS_BEARER_QOS, |g| {
            g.i32(
                avp::QOS_CLASS_IDENTIFIER,
                enums::QOS_CLASS_IDENTIFIER::QCI_9,
            )
            .group(avp::ALLOCATION_RETENTION_PRIORITY, arp(8));
        })
        .bytes(avp::_3GPP_USER_LOCATION_INFO, &ULI_TAI_ECGI)
        .bytes(avp::_3GPP_MS_TIMEZONE, &MS_TIMEZONE)
        .str(avp::_3GPP_SGSN_MCC_MNC, "00101")
        .str(avp::_3GPP_CHARGING_CHARACTERISTICS, "0800")
        .str(avp::_3GPP_SELECTION_MODE, "0")
        .bytes(avp::_3GPP_SGSN_ADDRESS, &[192, 0, 2, 10])
        .str(avp::CALLED_STATION_ID, "internet")
        .group(avp::USER_EQUIPMENT_INFO, |g| {
            g.i32(
                avp::USER_EQUIPMENT_INFO_TYPE,
                enums::USER_EQUIPMENT_INFO_TYPE::IMEISV,
            )
            .bytes(avp::USER_EQUIPMENT_INFO_VALUE, IMEISV);
        })
        .address(avp::AN_GW_ADDRESS, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10)))
        .address(
            avp::ACCESS_NETWORK_CHARGING_ADDRESS,
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 20)),
        )
        .group(avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_GX, |g| {
            g.bytes(
                avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_VALUE,
                &[0x0a, 0x2d, 0x00, 0x11],
            );
        })
        .i32(avp::BEARER_USAGE, enums::BEARER_USAGE::GENERAL)
        .i32(avp::ONLINE, enums::ONLINE::DISABLE_ONLINE)
        .i32(avp::OFFLINE, enums::OFFLINE::ENABLE_OFFLINE)
        .i32(
            avp::EVENT_TRIGGER,
            enums::EVENT_TRIGGER::UE_IP_ADDRESS_ALLOCATE,
        );
    b.finish();
    buf.freeze()
}

/// Allocation-Retention-Priority with this priority level, pre-emption off
/// for capability and on for vulnerability (the usual default bearer).
fn arp(level: u32) -> impl FnOnce(&mut MessageBuilder<'_>) {
    move |g| {
        g.u32(avp::PRIORITY_LEVEL, level)
            .i32(
                avp::PRE_EMPTION_CAPABILITY,
                enums::PRE_EMPTION_CAPABILITY::PRE_EMPTION_CAPABILITY_DISABLED,
            )
            .i32(
                avp::PRE_EMPTION_VULNERABILITY,
                enums::PRE_EMPTION_VULNERABILITY::PRE_EMPTION_VULNERABILITY_ENABLED,
            );
    }
}

/// Appends the CCA-I answering `req` to `buf`: one dynamic rule with a full
/// Charging-Rule-Definition, one predefined rule, one rule base, session
/// QoS and event triggers. Returns the encoded length.
pub fn encode_cca_initial(buf: &mut BytesMut, req: &Message) -> usize {
    let mut b = MessageBuilder::answer(buf, req);
    b.u32(avp::AUTH_APPLICATION_ID, app::GX)
        .origin(PCRF_HOST, PGW_REALM)
        .result_code(diameter::result_code::DIAMETER_SUCCESS)
        .i32(
            avp::CC_REQUEST_TYPE,
            enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
        )
        .u32(avp::CC_REQUEST_NUMBER, CC_REQUEST_NUMBER)
        .group(avp::SUPPORTED_FEATURES, |g| {
            g.u32(avp::VENDOR_ID, vendor::_3GPP)
                .u32(avp::FEATURE_LIST_ID, 1)
                .u32(avp::FEATURE_LIST, FEATURE_LIST);
        })
        .i32(avp::BEARER_CONTROL_MODE, enums::BEARER_CONTROL_MODE::UE_NW)
        .i32(avp::EVENT_TRIGGER, enums::EVENT_TRIGGER::RAT_CHANGE)
        .i32(
            avp::EVENT_TRIGGER,
            enums::EVENT_TRIGGER::USER_LOCATION_CHANGE,
        )
        .i32(avp::EVENT_TRIGGER, enums::EVENT_TRIGGER::USAGE_REPORT)
        .group(avp::CHARGING_RULE_INSTALL, |g| {
            g.group(avp::CHARGING_RULE_DEFINITION, |d| {
                d.bytes(avp::CHARGING_RULE_NAME, b"video-gold")
                    .u32(avp::RATING_GROUP, 100)
                    .group(avp::FLOW_INFORMATION, |f| {
                        f.str(
                            avp::FLOW_DESCRIPTION,
                            "permit out 17 from 198.51.100.0/24 to any",
                        )
                        .i32(avp::FLOW_DIRECTION, enums::FLOW_DIRECTION::DOWNLINK);
                    })
                    .group(avp::FLOW_INFORMATION, |f| {
                        f.str(
                            avp::FLOW_DESCRIPTION,
                            "permit out 17 from any to 198.51.100.0/24",
                        )
                        .i32(avp::FLOW_DIRECTION, enums::FLOW_DIRECTION::UPLINK);
                    })
                    .i32(avp::FLOW_STATUS, enums::FLOW_STATUS::ENABLED)
                    .group(avp::QOS_INFORMATION, |q| {
                        q.i32(
                            avp::QOS_CLASS_IDENTIFIER,
                            enums::QOS_CLASS_IDENTIFIER::QCI_2,
                        )
                        .u32(avp::MAX_REQUESTED_BANDWIDTH_UL, 2_000_000)
                        .u32(avp::MAX_REQUESTED_BANDWIDTH_DL, 8_000_000)
                        .u32(avp::GUARANTEED_BITRATE_UL, 1_000_000)
                        .u32(avp::GUARANTEED_BITRATE_DL, 4_000_000)
                        .group(avp::ALLOCATION_RETENTION_PRIORITY, arp(5));
                    })
                    .u32(avp::PRECEDENCE, 100)
                    .bytes(avp::MONITORING_KEY, b"mk-video")
                    .i32(avp::ONLINE, enums::ONLINE::DISABLE_ONLINE)
                    .i32(avp::OFFLINE, enums::OFFLINE::ENABLE_OFFLINE)
                    .i32(avp::METERING_METHOD, enums::METERING_METHOD::VOLUME);
            });
        })
        .group(avp::CHARGING_RULE_INSTALL, |g| {
            g.bytes(avp::CHARGING_RULE_NAME, b"default-internet");
        })
        .group(avp::CHARGING_RULE_INSTALL, |g| {
            g.str(avp::CHARGING_RULE_BASE_NAME, "zero-rated-apps");
        })
        .group(avp::QOS_INFORMATION, |g| {
            g.u32(avp::APN_AGGREGATE_MAX_BITRATE_UL, 50_000_000)
                .u32(avp::APN_AGGREGATE_MAX_BITRATE_DL, 150_000_000);
        })
        .group(avp::DEFAULT_EPS_BEARER_QOS, |g| {
            g.i32(
                avp::QOS_CLASS_IDENTIFIER,
                enums::QOS_CLASS_IDENTIFIER::QCI_9,
            )
            .group(avp::ALLOCATION_RETENTION_PRIORITY, arp(8));
        })
        .u32(avp::REVALIDATION_TIME, REVALIDATION_NTP);
    b.finish()
}

/// The CCA-I bytes (built once; the decode benchmarks read them).
pub fn cca_initial() -> Bytes {
    let req = Message::parse(ccr_initial()).expect("the CCR-I is well-formed");
    let mut buf = BytesMut::with_capacity(1024);
    encode_cca_initial(&mut buf, &req);
    buf.freeze()
}
