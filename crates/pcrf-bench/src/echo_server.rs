//! `pcrf-bench echo-server`: a Diameter server that answers every Gx CCR
//! at once with the same valid CCA of realistic size (a CCA-I as a PCRF
//! sends it: QoS, event triggers, three Charging-Rule-Install, a usage
//! grant), after a normal CER/CEA and with the watchdog.
//!
//! The same scenario run against it measures the ceiling of the generator
//! and the transport on this machine; the PCRF's figures are reported as a
//! ratio to it.

use bytes::{Bytes, BytesMut};
use diameter::dict::{app, avp, cmd, enums};
use diameter::peer::{Application, LocalNode, PeerSettings};
use diameter::transport::{Handler, Node, PeerHandle};
use diameter::{DiameterError, Message, MessageBuilder};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The echo server's identity and how many CCRs it answered.
#[derive(Debug)]
pub struct EchoHandler {
    origin_host: String,
    origin_realm: String,
    /// The fixed part of every answer, already encoded.
    tail: Bytes,
    pub answered: Arc<AtomicU64>,
}

/// The AVPs every echo answer carries after its per-request ones.
pub fn fixed_cca_avps() -> Bytes {
    let mut buf = BytesMut::with_capacity(2048);
    let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, app::GX, 0, 0);
    b.group(avp::SUPPORTED_FEATURES, |g| {
        g.u32(avp::VENDOR_ID, crate::gx::VENDOR_3GPP)
            .u32(avp::FEATURE_LIST_ID, 1)
            .u32(avp::FEATURE_LIST, crate::gx::GX_FEATURE_LIST);
    })
    .i32(avp::BEARER_CONTROL_MODE, enums::BEARER_CONTROL_MODE::UE_NW);
    for trigger in [
        enums::EVENT_TRIGGER::RAT_CHANGE,
        enums::EVENT_TRIGGER::USAGE_REPORT,
        enums::EVENT_TRIGGER::UE_IP_ADDRESS_RELEASE,
    ] {
        b.i32(avp::EVENT_TRIGGER, trigger);
    }
    b.group(avp::QOS_INFORMATION, |g| {
        g.u32(avp::APN_AGGREGATE_MAX_BITRATE_UL, 50_000_000)
            .u32(avp::APN_AGGREGATE_MAX_BITRATE_DL, 150_000_000);
    })
    .group(avp::DEFAULT_EPS_BEARER_QOS, |g| {
        g.i32(avp::QOS_CLASS_IDENTIFIER, 9)
            .group(avp::ALLOCATION_RETENTION_PRIORITY, |a| {
                a.u32(avp::PRIORITY_LEVEL, 8)
                    .i32(avp::PRE_EMPTION_CAPABILITY, 1)
                    .i32(avp::PRE_EMPTION_VULNERABILITY, 0);
            });
    });
    for (name, rating_group, flows, mbr_dl) in [
        (
            "internet-default",
            10u32,
            [
                "permit out ip from any to assigned",
                "permit in ip from any to assigned",
            ],
            150_000_000u32,
        ),
        (
            "video-streaming",
            20,
            [
                "permit out 6 from 203.0.113.0/24 443 to assigned",
                "permit in 6 from assigned to 203.0.113.0/24 443",
            ],
            8_000_000,
        ),
        (
            "messaging",
            30,
            [
                "permit out 17 from 198.51.100.0/24 5222 to assigned",
                "permit in 17 from assigned to 198.51.100.0/24 5222",
            ],
            2_000_000,
        ),
    ] {
        b.group(avp::CHARGING_RULE_INSTALL, |cri| {
            cri.group(avp::CHARGING_RULE_DEFINITION, |d| {
                d.bytes(avp::CHARGING_RULE_NAME, name.as_bytes())
                    .u32(avp::RATING_GROUP, rating_group);
                for f in flows {
                    d.group(avp::FLOW_INFORMATION, |fi| {
                        fi.str(avp::FLOW_DESCRIPTION, f);
                    });
                }
                d.i32(avp::FLOW_STATUS, 2) // ENABLED
                    .group(avp::QOS_INFORMATION, |q| {
                        q.i32(avp::QOS_CLASS_IDENTIFIER, 9)
                            .u32(avp::MAX_REQUESTED_BANDWIDTH_UL, mbr_dl / 4)
                            .u32(avp::MAX_REQUESTED_BANDWIDTH_DL, mbr_dl);
                    })
                    .u32(avp::PRECEDENCE, rating_group * 10)
                    .i32(avp::ONLINE, enums::ONLINE::DISABLE_ONLINE)
                    .i32(avp::OFFLINE, enums::OFFLINE::ENABLE_OFFLINE)
                    .bytes(avp::MONITORING_KEY, b"mk-internet");
            });
        });
    }
    b.group(avp::USAGE_MONITORING_INFORMATION, |u| {
        u.bytes(avp::MONITORING_KEY, b"mk-internet")
            .group(avp::GRANTED_SERVICE_UNIT, |g| {
                g.u64(avp::CC_TOTAL_OCTETS, 1 << 30);
            })
            .i32(
                avp::USAGE_MONITORING_LEVEL,
                enums::USAGE_MONITORING_LEVEL::SESSION_LEVEL,
            );
    });
    b.finish();
    buf.freeze().slice(diameter::codec::HEADER_LEN..)
}

impl EchoHandler {
    pub fn new(origin_host: &str, origin_realm: &str) -> EchoHandler {
        EchoHandler {
            origin_host: origin_host.to_string(),
            origin_realm: origin_realm.to_string(),
            tail: fixed_cca_avps(),
            answered: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The answer to one CCR: its Session-Id, ids, request type and number,
    /// then the fixed AVPs.
    pub fn answer(&self, req: &Message) -> Result<Bytes, DiameterError> {
        let [rt, rn] = req.pick(&[avp::CC_REQUEST_TYPE, avp::CC_REQUEST_NUMBER])?;
        let (Some(rt), Some(rn)) = (rt, rn) else {
            return Err(diameter::codec::missing_avp(
                avp::CC_REQUEST_TYPE,
                "CC-Request-Type",
            ));
        };
        let mut buf = BytesMut::with_capacity(self.tail.len() + 160);
        let mut b = MessageBuilder::answer(&mut buf, req);
        b.u32(avp::AUTH_APPLICATION_ID, app::GX)
            .origin(&self.origin_host, &self.origin_realm)
            .result_code(diameter::result_code::DIAMETER_SUCCESS)
            .raw_avp(rt.raw())
            .raw_avp(rn.raw())
            .raw_avp(&self.tail);
        b.finish();
        Ok(buf.freeze())
    }
}

impl Handler for EchoHandler {
    fn serves(&self, app_id: u32, command: u32) -> bool {
        app_id == app::GX && command == cmd::CREDIT_CONTROL
    }

    fn handle(
        &self,
        req: Message,
        _peer: PeerHandle,
    ) -> impl Future<Output = Result<Bytes, DiameterError>> + Send {
        let r = self.answer(&req);
        if r.is_ok() {
            self.answered.fetch_add(1, Relaxed);
        }
        std::future::ready(r)
    }
}

/// The echo server's node: Gx advertised, any peer accepted.
pub fn node(origin_host: &str, origin_realm: &str) -> Node<EchoHandler> {
    let local = LocalNode::new(origin_host, origin_realm)
        .with_application(Application::auth_vendor(app::GX, crate::gx::VENDOR_3GPP));
    let settings = PeerSettings {
        max_in_flight: 65_536,
        ..PeerSettings::default()
    };
    Node::new(local, settings, EchoHandler::new(origin_host, origin_realm))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gx;
    use std::net::Ipv4Addr;

    #[test]
    fn answers_are_valid_ccas_of_realistic_size() {
        let h = EchoHandler::new("echo.pcrf.test", "pcrf.test");
        let gw = gx::Gateway {
            origin_host: "pgw-1.bench.test".into(),
            origin_realm: "bench.test".into(),
            destination_realm: "pcrf.test".into(),
            destination_host: None,
            origin_state_id: 1,
            pgw_address: Ipv4Addr::LOCALHOST,
            sgw_address: Ipv4Addr::LOCALHOST,
            mcc_mnc: "00101".into(),
            apn: "internet".into(),
        };
        let sub = gx::Subscriber {
            imsi: "001010000000001".into(),
            msisdn: "79000000001".into(),
            ue_ip: Ipv4Addr::new(10, 0, 0, 1),
            imeisv: "3534900698733101".into(),
            cell_id: 1,
            tac: 1,
        };
        let r = gx::Request {
            session_id: "pgw-1.bench.test;1;9",
            gateway: &gw,
            destination_host: None,
            subscriber: &sub,
            number: 4,
            charging_id: 1,
        };
        let req = Message::parse(gx::encode(11, 12, |b| {
            gx::ccr_update(b, &r, &[]);
        }))
        .expect("request");
        let ans = Message::parse(h.answer(&req).expect("answer")).expect("parse");
        ans.validate().expect("valid answer");
        assert!(!ans.is_request());
        assert_eq!((ans.hop_by_hop(), ans.end_to_end()), (11, 12));
        assert_eq!(ans.session_id(), Ok(Some("pgw-1.bench.test;1;9")));
        let [rc, rt, rn] = ans
            .pick(&[
                avp::RESULT_CODE,
                avp::CC_REQUEST_TYPE,
                avp::CC_REQUEST_NUMBER,
            ])
            .expect("pick");
        assert_eq!(rc.map(|a| a.as_u32()), Some(Ok(2001)));
        assert_eq!(rt.map(|a| a.as_enum()), Some(Ok(2)));
        assert_eq!(rn.map(|a| a.as_u32()), Some(Ok(4)));
        assert_eq!(
            ans.avps().filter_code(avp::CHARGING_RULE_INSTALL).count(),
            3
        );
        // A CCA-I with three rules is over a kilobyte (1,516 bytes here).
        assert!(ans.len() > 1000, "{}", ans.len());
    }

    #[test]
    fn a_ccr_without_request_type_gets_5005() {
        let h = EchoHandler::new("echo.pcrf.test", "pcrf.test");
        let req = Message::parse(gx::encode(1, 1, |b| {
            b.str(avp::SESSION_ID, "x;1;1");
        }))
        .expect("request");
        let e = h.answer(&req).expect_err("missing AVP");
        assert_eq!(e.result_code, 5005);
    }
}
