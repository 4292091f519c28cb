//! Gx Credit-Control requests (3GPP TS 29.212) as a P-GW (PCEF) sends them:
//! CCR-I with the ~30 AVPs of a real EPS attach, CCR-U reporting usage per
//! monitoring key, CCR-T with the termination cause and the final usage.
//!
//! Public so that the PCRF's own tests can send the same realistic
//! messages the benchmark does. The functions add AVPs to a
//! [`MessageBuilder`] whose header the caller (or the transport's
//! `PeerHandle::request`) has started; [`encode`] makes a whole message.

use bytes::{Bytes, BytesMut};
use diameter::dict::{app, avp, cmd, enums};
use diameter::MessageBuilder;
use std::net::{IpAddr, Ipv4Addr};

/// The 3GPP vendor id.
pub const VENDOR_3GPP: u32 = 10415;

/// Supported-Features of Gx (TS 29.212 §5.4.1, Feature-List-ID 1): Rel8,
/// Rel9 and Rel10 (bits 0, 1 and 3).
pub const GX_FEATURE_LIST: u32 = 0b1011;

/// The emulated gateway: its Diameter identity and network addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gateway {
    pub origin_host: String,
    pub origin_realm: String,
    pub destination_realm: String,
    /// The PCRF's host, learnt from the CCA-I; CCR-U/T of the session carry it.
    pub destination_host: Option<String>,
    pub origin_state_id: u32,
    /// The P-GW's address for charging (Access-Network-Charging-Address).
    pub pgw_address: Ipv4Addr,
    /// The S-GW's address (AN-GW-Address).
    pub sgw_address: Ipv4Addr,
    /// MCC and MNC digits ("00101").
    pub mcc_mnc: String,
    pub apn: String,
}

/// One subscriber's identities in a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subscriber {
    pub imsi: String,
    pub msisdn: String,
    pub ue_ip: Ipv4Addr,
    /// 16-digit IMEISV.
    pub imeisv: String,
    /// E-UTRAN cell (28 bits) and tracking area code, for the user location.
    pub cell_id: u32,
    pub tac: u16,
}

/// Usage of one monitoring key since the last report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usage {
    pub monitoring_key: String,
    pub input_octets: u64,
    pub output_octets: u64,
}

/// What differs between the requests of one session.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub session_id: &'a str,
    pub gateway: &'a Gateway,
    /// Destination-Host for this request (CCR-U/T: the PCRF that answered the CCR-I).
    pub destination_host: Option<&'a str>,
    pub subscriber: &'a Subscriber,
    /// CC-Request-Number: 0 for the CCR-I, then 1, 2...
    pub number: u32,
    /// Charging id of the default bearer (Access-Network-Charging-Identifier-Value).
    pub charging_id: u32,
}

/// A Session-Id as RFC 6733 §8.8 builds it: `<host>;<high 32>;<low 32>`.
pub fn session_id(origin_host: &str, high: u32, low: u32) -> String {
    format!("{origin_host};{high};{low}")
}

/// The PLMN (MCC+MNC) in the BCD layout of 3GPP TS 24.008 §10.5.1.3; a
/// 2-digit MNC is padded with F.
pub fn plmn_bcd(mcc_mnc: &str) -> [u8; 3] {
    let d: Vec<u8> = mcc_mnc
        .bytes()
        .map(|b| b.wrapping_sub(b'0') & 0x0f)
        .collect();
    let g = |i: usize| d.get(i).copied().unwrap_or(0);
    let mnc3 = if d.len() >= 6 { g(5) } else { 0x0f };
    [g(1) << 4 | g(0), mnc3 << 4 | g(2), g(4) << 4 | g(3)]
}

/// 3GPP-User-Location-Info (TS 29.061 §16.4.7.2) of type 130: TAI and ECGI.
pub fn user_location_info(mcc_mnc: &str, tac: u16, cell_id: u32) -> [u8; 13] {
    let plmn = plmn_bcd(mcc_mnc);
    let mut v = [0u8; 13];
    v[0] = 130;
    v[1..4].copy_from_slice(&plmn);
    v[4..6].copy_from_slice(&tac.to_be_bytes());
    v[6..9].copy_from_slice(&plmn);
    v[9..13].copy_from_slice(&(cell_id & 0x0fff_ffff).to_be_bytes());
    v
}

/// 3GPP-MS-TimeZone (TS 29.061 §16.4.7.2, TS 24.008 §10.5.3.8): UTC+3, no DST.
pub const MS_TIMEZONE_UTC_PLUS_3: [u8; 2] = [0x21, 0x00];

fn header_avps(b: &mut MessageBuilder<'_>, r: &Request<'_>, request_type: i32) {
    b.str(avp::SESSION_ID, r.session_id)
        .u32(avp::AUTH_APPLICATION_ID, app::GX)
        .origin(&r.gateway.origin_host, &r.gateway.origin_realm)
        .str(avp::DESTINATION_REALM, &r.gateway.destination_realm);
    if let Some(h) = r.destination_host.or(r.gateway.destination_host.as_deref()) {
        b.str(avp::DESTINATION_HOST, h);
    }
    b.i32(avp::CC_REQUEST_TYPE, request_type)
        .u32(avp::CC_REQUEST_NUMBER, r.number)
        .u32(avp::ORIGIN_STATE_ID, r.gateway.origin_state_id);
}

/// Usage-Monitoring-Information per monitoring key, at `level` (session
/// level on Gx, ADC rule level on Sd).
pub(crate) fn usage_avps(b: &mut MessageBuilder<'_>, usage: &[Usage], level: i32) {
    for u in usage {
        b.group(avp::USAGE_MONITORING_INFORMATION, |g| {
            g.bytes(avp::MONITORING_KEY, u.monitoring_key.as_bytes())
                .group(avp::USED_SERVICE_UNIT, |s| {
                    s.u64(avp::CC_TOTAL_OCTETS, u.input_octets + u.output_octets)
                        .u64(avp::CC_INPUT_OCTETS, u.input_octets)
                        .u64(avp::CC_OUTPUT_OCTETS, u.output_octets);
                })
                .i32(avp::USAGE_MONITORING_LEVEL, level);
        });
    }
}

fn location_avps(b: &mut MessageBuilder<'_>, r: &Request<'_>) {
    let s = r.subscriber;
    b.bytes(
        avp::_3GPP_USER_LOCATION_INFO,
        &user_location_info(&r.gateway.mcc_mnc, s.tac, s.cell_id),
    )
    .bytes(avp::_3GPP_MS_TIMEZONE, &MS_TIMEZONE_UTC_PLUS_3);
}

/// CCR-I: the default bearer of an EPS attach on E-UTRAN.
pub fn ccr_initial(b: &mut MessageBuilder<'_>, r: &Request<'_>) {
    let s = r.subscriber;
    let gw = r.gateway;
    header_avps(b, r, enums::CC_REQUEST_TYPE::INITIAL_REQUEST);
    b.group(avp::SUBSCRIPTION_ID, |g| {
        g.i32(
            avp::SUBSCRIPTION_ID_TYPE,
            enums::SUBSCRIPTION_ID_TYPE::END_USER_IMSI,
        )
        .str(avp::SUBSCRIPTION_ID_DATA, &s.imsi);
    })
    .group(avp::SUBSCRIPTION_ID, |g| {
        g.i32(
            avp::SUBSCRIPTION_ID_TYPE,
            enums::SUBSCRIPTION_ID_TYPE::END_USER_E164,
        )
        .str(avp::SUBSCRIPTION_ID_DATA, &s.msisdn);
    })
    .group(avp::SUPPORTED_FEATURES, |g| {
        g.u32(avp::VENDOR_ID, VENDOR_3GPP)
            .u32(avp::FEATURE_LIST_ID, 1)
            .u32(avp::FEATURE_LIST, GX_FEATURE_LIST);
    })
    .i32(
        avp::NETWORK_REQUEST_SUPPORT,
        enums::NETWORK_REQUEST_SUPPORT::NETWORK_REQUEST_SUPPORTED,
    )
    .bytes(avp::FRAMED_IP_ADDRESS, &s.ue_ip.octets())
    .i32(avp::IP_CAN_TYPE, enums::IP_CAN_TYPE::_3GPP_EPS)
    .i32(avp::RAT_TYPE, enums::RAT_TYPE::EUTRAN)
    .group(avp::QOS_INFORMATION, |g| {
        g.u32(avp::APN_AGGREGATE_MAX_BITRATE_UL, 50_000_000)
            .u32(avp::APN_AGGREGATE_MAX_BITRATE_DL, 150_000_000);
    })
    .group(avp::DEFAULT_EPS_BEARER_QOS, |g| {
        g.i32(avp::QOS_CLASS_IDENTIFIER, 9)
            .group(avp::ALLOCATION_RETENTION_PRIORITY, |a| {
                a.u32(avp::PRIORITY_LEVEL, 8)
                    .i32(
                        avp::PRE_EMPTION_CAPABILITY,
                        enums::PRE_EMPTION_CAPABILITY::PRE_EMPTION_CAPABILITY_DISABLED,
                    )
                    .i32(
                        avp::PRE_EMPTION_VULNERABILITY,
                        enums::PRE_EMPTION_VULNERABILITY::PRE_EMPTION_VULNERABILITY_ENABLED,
                    );
            });
    });
    location_avps(b, r);
    b.str(avp::_3GPP_SGSN_MCC_MNC, &gw.mcc_mnc)
        .str(avp::CALLED_STATION_ID, &gw.apn)
        .group(avp::USER_EQUIPMENT_INFO, |g| {
            g.i32(
                avp::USER_EQUIPMENT_INFO_TYPE,
                enums::USER_EQUIPMENT_INFO_TYPE::IMEISV,
            )
            .bytes(avp::USER_EQUIPMENT_INFO_VALUE, s.imeisv.as_bytes());
        })
        .address(
            avp::ACCESS_NETWORK_CHARGING_ADDRESS,
            IpAddr::V4(gw.pgw_address),
        )
        .group(avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_GX, |g| {
            g.bytes(
                avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_VALUE,
                &r.charging_id.to_be_bytes(),
            );
        })
        .address(avp::AN_GW_ADDRESS, IpAddr::V4(gw.sgw_address))
        .i32(avp::BEARER_USAGE, enums::BEARER_USAGE::GENERAL)
        .i32(avp::ONLINE, enums::ONLINE::DISABLE_ONLINE)
        .i32(avp::OFFLINE, enums::OFFLINE::ENABLE_OFFLINE);
}

/// CCR-U: a usage report (Event-Trigger USAGE_REPORT) for each monitoring
/// key; without usage, a plain update (a PCEF sets the trigger only when it
/// reports).
pub fn ccr_update(b: &mut MessageBuilder<'_>, r: &Request<'_>, usage: &[Usage]) {
    header_avps(b, r, enums::CC_REQUEST_TYPE::UPDATE_REQUEST);
    if !usage.is_empty() {
        b.i32(avp::EVENT_TRIGGER, enums::EVENT_TRIGGER::USAGE_REPORT);
    }
    usage_avps(b, usage, enums::USAGE_MONITORING_LEVEL::SESSION_LEVEL);
    location_avps(b, r);
}

/// CCR-T: the session ends (`cause` is a Termination-Cause), with the final usage.
pub fn ccr_terminate(b: &mut MessageBuilder<'_>, r: &Request<'_>, usage: &[Usage], cause: i32) {
    header_avps(b, r, enums::CC_REQUEST_TYPE::TERMINATION_REQUEST);
    b.i32(avp::TERMINATION_CAUSE, cause);
    usage_avps(b, usage, enums::USAGE_MONITORING_LEVEL::SESSION_LEVEL);
    location_avps(b, r);
}

/// A whole request (header included) with the given ids, e.g. for a test
/// that writes bytes to a socket itself.
pub fn encode(
    hop_by_hop: u32,
    end_to_end: u32,
    build: impl FnOnce(&mut MessageBuilder<'_>),
) -> Bytes {
    let mut buf = BytesMut::with_capacity(768);
    let mut b = MessageBuilder::request(
        &mut buf,
        cmd::CREDIT_CONTROL,
        app::GX,
        hop_by_hop,
        end_to_end,
    );
    build(&mut b);
    b.finish();
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use diameter::Message;

    fn gateway() -> Gateway {
        Gateway {
            origin_host: "pgw-1.bench.test".into(),
            origin_realm: "bench.test".into(),
            destination_realm: "pcrf.test".into(),
            destination_host: None,
            origin_state_id: 1_700_000_000,
            pgw_address: Ipv4Addr::new(192, 0, 2, 1),
            sgw_address: Ipv4Addr::new(192, 0, 2, 2),
            mcc_mnc: "00101".into(),
            apn: "internet".into(),
        }
    }

    fn subscriber() -> Subscriber {
        Subscriber {
            imsi: "001010000000001".into(),
            msisdn: "79000000001".into(),
            ue_ip: Ipv4Addr::new(10, 0, 0, 1),
            imeisv: "3534900698733101".into(),
            cell_id: 0x0123_4567,
            tac: 0x1a2b,
        }
    }

    fn count_avps(it: diameter::AvpIter<'_>) -> usize {
        it.map(|a| {
            let a = a.expect("valid AVP");
            let nested = diameter::dict::avp(a.code(), a.vendor())
                .filter(|d| d.ty == diameter::dict::AvpType::Grouped)
                .map_or(0, |_| count_avps(a.grouped()));
            1 + nested
        })
        .sum()
    }

    #[test]
    fn plmn_and_location_encoding() {
        assert_eq!(plmn_bcd("00101"), [0x00, 0xf1, 0x10]);
        assert_eq!(plmn_bcd("310410"), [0x13, 0x00, 0x14]);
        let uli = user_location_info("25001", 0x1a2b, 0xf123_4567);
        assert_eq!(uli[0], 130);
        assert_eq!(&uli[1..4], &[0x52, 0xf0, 0x10]);
        assert_eq!(&uli[4..6], &[0x1a, 0x2b]);
        assert_eq!(&uli[9..13], &[0x01, 0x23, 0x45, 0x67]);
    }

    #[test]
    fn ccr_initial_is_valid_and_complete() {
        let gw = gateway();
        let sub = subscriber();
        let sid = session_id(&gw.origin_host, 1, 2);
        let r = Request {
            session_id: &sid,
            gateway: &gw,
            destination_host: None,
            subscriber: &sub,
            number: 0,
            charging_id: 77,
        };
        let m = Message::parse(encode(5, 6, |b| ccr_initial(b, &r))).expect("parse");
        // Every AVP is known to the dictionary and well-formed.
        let visited = m.validate().expect("valid");
        assert_eq!(visited, count_avps(m.avps()));
        assert!(visited >= 30, "{visited} AVPs");
        assert_eq!(m.session_id(), Ok(Some("pgw-1.bench.test;1;2")));
        assert_eq!(m.command_code(), cmd::CREDIT_CONTROL);
        assert_eq!(m.application_id(), app::GX);
        assert!(m.is_request());
        let [rt, rn, fip, called, dh] = m
            .pick(&[
                avp::CC_REQUEST_TYPE,
                avp::CC_REQUEST_NUMBER,
                avp::FRAMED_IP_ADDRESS,
                avp::CALLED_STATION_ID,
                avp::DESTINATION_HOST,
            ])
            .expect("pick");
        assert_eq!(rt.map(|a| a.as_enum()), Some(Ok(1)));
        assert_eq!(rn.map(|a| a.as_u32()), Some(Ok(0)));
        assert_eq!(fip.map(|a| a.as_octets()), Some(&[10, 0, 0, 1][..]));
        assert_eq!(called.map(|a| a.as_str()), Some(Ok("internet")));
        assert!(dh.is_none());
        let ids: Vec<(i32, String)> = m
            .avps()
            .filter_code(avp::SUBSCRIPTION_ID)
            .map(|a| {
                let a = a.expect("ok");
                let [t, d] = [avp::SUBSCRIPTION_ID_TYPE, avp::SUBSCRIPTION_ID_DATA]
                    .map(|c| a.grouped().find(c).expect("ok").expect("present"));
                (
                    t.as_enum().expect("int"),
                    d.as_str().expect("str").to_string(),
                )
            })
            .collect();
        assert_eq!(
            ids,
            vec![(1, "001010000000001".into()), (0, "79000000001".into())]
        );
    }

    #[test]
    fn ccr_update_and_terminate_report_usage() {
        let gw = gateway();
        let sub = subscriber();
        let usage = [
            Usage {
                monitoring_key: "mk-internet".into(),
                input_octets: 1_000,
                output_octets: 20_000,
            },
            Usage {
                monitoring_key: "mk-video".into(),
                input_octets: 5,
                output_octets: 6,
            },
        ];
        let r = Request {
            session_id: "s;1;1",
            gateway: &gw,
            destination_host: Some("pcrf-1.pcrf.test"),
            subscriber: &sub,
            number: 3,
            charging_id: 1,
        };
        let u = Message::parse(encode(1, 1, |b| ccr_update(b, &r, &usage))).expect("parse");
        u.validate().expect("valid");
        let [rt, rn, et, dh] = u
            .pick(&[
                avp::CC_REQUEST_TYPE,
                avp::CC_REQUEST_NUMBER,
                avp::EVENT_TRIGGER,
                avp::DESTINATION_HOST,
            ])
            .expect("pick");
        assert_eq!(rt.map(|a| a.as_enum()), Some(Ok(2)));
        assert_eq!(rn.map(|a| a.as_u32()), Some(Ok(3)));
        assert_eq!(et.map(|a| a.as_enum()), Some(Ok(33)));
        assert_eq!(dh.map(|a| a.as_str()), Some(Ok("pcrf-1.pcrf.test")));
        let umi: Vec<_> = u
            .avps()
            .filter_code(avp::USAGE_MONITORING_INFORMATION)
            .collect::<Result<_, _>>()
            .expect("ok");
        assert_eq!(umi.len(), 2);
        let key = umi[0]
            .grouped()
            .find(avp::MONITORING_KEY)
            .expect("ok")
            .expect("key");
        assert_eq!(key.as_octets(), b"mk-internet");
        let usu = umi[0]
            .grouped()
            .find(avp::USED_SERVICE_UNIT)
            .expect("ok")
            .expect("usu");
        let total = usu
            .grouped()
            .find(avp::CC_TOTAL_OCTETS)
            .expect("ok")
            .expect("total");
        assert_eq!(total.as_u64(), Ok(21_000));
        let out = usu
            .grouped()
            .find(avp::CC_OUTPUT_OCTETS)
            .expect("ok")
            .expect("out");
        assert_eq!(out.as_u64(), Ok(20_000));

        let t = Message::parse(encode(2, 2, |b| {
            ccr_terminate(
                b,
                &r,
                &usage[..1],
                enums::TERMINATION_CAUSE::DIAMETER_LOGOUT,
            )
        }))
        .expect("parse");
        t.validate().expect("valid");
        let [rt, tc] = t
            .pick(&[avp::CC_REQUEST_TYPE, avp::TERMINATION_CAUSE])
            .expect("pick");
        assert_eq!(rt.map(|a| a.as_enum()), Some(Ok(3)));
        assert_eq!(tc.map(|a| a.as_enum()), Some(Ok(1)));
        assert_eq!(
            t.avps()
                .filter_code(avp::USAGE_MONITORING_INFORMATION)
                .count(),
            1
        );
    }
}
