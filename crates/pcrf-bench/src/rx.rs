//! Rx requests (3GPP TS 29.214) as a P-CSCF (the AF) sends them for a
//! VoLTE call: the AAR-I with the voice Media-Component-Description (audio,
//! AMR-WB bandwidths, an RTP and an RTCP Media-Sub-Component with
//! Flow-Descriptions for the UE's address, optionally the AF_SIGNALLING
//! component), its Specific-Action subscriptions and AF-Charging-Identifier;
//! the STR that ends the call; and the AF's answers to the PCRF's RAR
//! (notifications) and ASR (abort).
//!
//! Sans-IO like [`crate::gx`]: the functions add AVPs to a builder whose
//! header the caller (or `PeerHandle::request`) started.

use bytes::{Bytes, BytesMut};
use diameter::dict::{app, avp, enums};
use diameter::{Message, MessageBuilder};
use std::net::Ipv4Addr;

/// The emulated AF's Diameter identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfIdentity {
    pub origin_host: String,
    pub origin_realm: String,
    pub destination_realm: String,
    pub destination_host: Option<String>,
}

/// The voice medium a call negotiates (TS 29.214 §5.3.7), AMR-WB-like by
/// default: 41 kbit/s each way (23.85 kbit/s of codec plus RTP/UDP/IPv4
/// overhead at 50 packets/s), RTCP at 600 bit/s (RS) and 2000 bit/s (RR).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VoiceMedia {
    pub max_requested_bandwidth_ul: u32,
    pub max_requested_bandwidth_dl: u32,
    pub rr_bandwidth: u32,
    pub rs_bandwidth: u32,
    /// SDP codec name and clock rate for Codec-Data ("AMR-WB/16000").
    pub codec: String,
    /// The remote party's media address (the other UE or an MGW).
    pub remote_ip: Ipv4Addr,
    /// The P-CSCF's SIP address, for the AF_SIGNALLING component; none: not sent.
    pub signalling: Option<Ipv4Addr>,
    /// Specific-Action values the AF subscribes to.
    pub specific_actions: Vec<i32>,
    /// AF-Application-Identifier.
    pub af_application_id: String,
}

impl Default for VoiceMedia {
    fn default() -> Self {
        use enums::SPECIFIC_ACTION as sa;
        VoiceMedia {
            max_requested_bandwidth_ul: 41_000,
            max_requested_bandwidth_dl: 41_000,
            rr_bandwidth: 2_000,
            rs_bandwidth: 600,
            codec: "AMR-WB/16000".into(),
            // Documentation range (RFC 5737): the far end's media.
            remote_ip: Ipv4Addr::new(203, 0, 113, 10),
            signalling: None,
            specific_actions: vec![
                sa::CHARGING_CORRELATION_EXCHANGE,
                sa::INDICATION_OF_LOSS_OF_BEARER,
                sa::INDICATION_OF_RELEASE_OF_BEARER,
                sa::IP_CAN_CHANGE,
                sa::INDICATION_OF_SUCCESSFUL_RESOURCES_ALLOCATION,
                sa::INDICATION_OF_FAILED_RESOURCES_ALLOCATION,
            ],
            af_application_id: "IMS Services".into(),
        }
    }
}

/// One call's AAR: who and where.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    pub session_id: &'a str,
    pub af: &'a AfIdentity,
    /// The UE's address, as its PCEF reported it in the Gx CCR-I (binding).
    pub ue_ip: Ipv4Addr,
    pub msisdn: &'a str,
    /// The UE's RTP port (RTCP is the next one); the remote uses the same pair.
    pub ue_port: u16,
    pub remote_port: u16,
    /// AF-Charging-Identifier (the IMS charging id, ICID).
    pub icid: &'a str,
    pub media: &'a VoiceMedia,
}

fn header_avps(b: &mut MessageBuilder<'_>, session_id: &str, af: &AfIdentity) {
    b.str(avp::SESSION_ID, session_id)
        .u32(avp::AUTH_APPLICATION_ID, app::RX)
        .origin(&af.origin_host, &af.origin_realm)
        .str(avp::DESTINATION_REALM, &af.destination_realm);
    if let Some(h) = &af.destination_host {
        b.str(avp::DESTINATION_HOST, h);
    }
}

/// IPFilterRules of one UDP flow (TS 29.214 §5.3.8): "out" is downlink
/// (remote to UE), "in" is uplink (UE to remote).
pub fn flow_descriptions(
    ue: Ipv4Addr,
    ue_port: u16,
    remote: Ipv4Addr,
    remote_port: u16,
) -> [String; 2] {
    [
        format!("permit out 17 from {remote} {remote_port} to {ue} {ue_port}"),
        format!("permit in 17 from {ue} {ue_port} to {remote} {remote_port}"),
    ]
}

/// The SDP lines of one direction (TS 29.214 §5.3.23: direction, offer or
/// answer, then the media description).
fn codec_data(direction: &str, kind: &str, port: u16, codec: &str) -> String {
    format!(
        "{direction}\n{kind}\nm=audio {port} RTP/AVP 116\r\na=rtpmap:116 {codec}\r\na=fmtp:116 mode-change-capability=2;max-red=0\r\na=ptime:20\r\na=maxptime:240\r\n"
    )
}

/// The AAR-I of a voice call (TS 29.214 §5.6.1).
pub fn aar_initial(b: &mut MessageBuilder<'_>, c: &Call<'_>) {
    let m = c.media;
    header_avps(b, c.session_id, c.af);
    b.bytes(
        avp::AF_APPLICATION_IDENTIFIER,
        m.af_application_id.as_bytes(),
    );
    b.group(avp::MEDIA_COMPONENT_DESCRIPTION, |d| {
        d.u32(avp::MEDIA_COMPONENT_NUMBER, 1);
        let [down, up] = flow_descriptions(c.ue_ip, c.ue_port, m.remote_ip, c.remote_port);
        d.group(avp::MEDIA_SUB_COMPONENT, |s| {
            s.u32(avp::FLOW_NUMBER, 1)
                .str(avp::FLOW_DESCRIPTION, &down)
                .str(avp::FLOW_DESCRIPTION, &up)
                .i32(avp::FLOW_USAGE, enums::FLOW_USAGE::NO_INFORMATION);
        });
        let [down, up] = flow_descriptions(
            c.ue_ip,
            c.ue_port.wrapping_add(1),
            m.remote_ip,
            c.remote_port.wrapping_add(1),
        );
        d.group(avp::MEDIA_SUB_COMPONENT, |s| {
            s.u32(avp::FLOW_NUMBER, 2)
                .str(avp::FLOW_DESCRIPTION, &down)
                .str(avp::FLOW_DESCRIPTION, &up)
                .i32(avp::FLOW_USAGE, enums::FLOW_USAGE::RTCP);
        });
        d.i32(avp::MEDIA_TYPE, enums::MEDIA_TYPE::AUDIO)
            .u32(
                avp::MAX_REQUESTED_BANDWIDTH_UL,
                m.max_requested_bandwidth_ul,
            )
            .u32(
                avp::MAX_REQUESTED_BANDWIDTH_DL,
                m.max_requested_bandwidth_dl,
            )
            .i32(avp::FLOW_STATUS, enums::FLOW_STATUS::ENABLED)
            .u32(avp::RR_BANDWIDTH, m.rr_bandwidth)
            .u32(avp::RS_BANDWIDTH, m.rs_bandwidth)
            .bytes(
                avp::CODEC_DATA,
                codec_data("uplink", "offer", c.ue_port, &m.codec).as_bytes(),
            )
            .bytes(
                avp::CODEC_DATA,
                codec_data("downlink", "answer", c.remote_port, &m.codec).as_bytes(),
            );
    });
    if let Some(pcscf) = m.signalling {
        // Media-Component-Number 0: the SIP signalling between UE and P-CSCF.
        let [down, up] = flow_descriptions(c.ue_ip, 5060, pcscf, 5060);
        b.group(avp::MEDIA_COMPONENT_DESCRIPTION, |d| {
            d.u32(avp::MEDIA_COMPONENT_NUMBER, 0)
                .group(avp::MEDIA_SUB_COMPONENT, |s| {
                    s.u32(avp::FLOW_NUMBER, 1)
                        .str(avp::FLOW_DESCRIPTION, &down)
                        .str(avp::FLOW_DESCRIPTION, &up)
                        .i32(avp::FLOW_USAGE, enums::FLOW_USAGE::AF_SIGNALLING)
                        .i32(
                            avp::AF_SIGNALLING_PROTOCOL,
                            enums::AF_SIGNALLING_PROTOCOL::SIP,
                        );
                })
                .i32(avp::FLOW_STATUS, enums::FLOW_STATUS::ENABLED);
        });
    }
    b.i32(
        avp::SERVICE_INFO_STATUS,
        enums::SERVICE_INFO_STATUS::FINAL_SERVICE_INFORMATION,
    )
    .bytes(avp::AF_CHARGING_IDENTIFIER, c.icid.as_bytes())
    .i32(
        avp::SIP_FORKING_INDICATION,
        enums::SIP_FORKING_INDICATION::SINGLE_DIALOGUE,
    );
    for a in &m.specific_actions {
        b.i32(avp::SPECIFIC_ACTION, *a);
    }
    b.group(avp::SUBSCRIPTION_ID, |g| {
        g.i32(
            avp::SUBSCRIPTION_ID_TYPE,
            enums::SUBSCRIPTION_ID_TYPE::END_USER_E164,
        )
        .str(avp::SUBSCRIPTION_ID_DATA, c.msisdn);
    })
    .bytes(avp::FRAMED_IP_ADDRESS, &c.ue_ip.octets())
    .i32(
        avp::RX_REQUEST_TYPE,
        enums::RX_REQUEST_TYPE::INITIAL_REQUEST,
    );
}

/// The STR that ends the call (TS 29.214 §5.6.5): the AF's session ends.
pub fn str_request(b: &mut MessageBuilder<'_>, session_id: &str, af: &AfIdentity, cause: i32) {
    header_avps(b, session_id, af);
    b.i32(avp::TERMINATION_CAUSE, cause);
}

/// The AF's answer to the PCRF's RAR or ASR with `result_code`, and the
/// request's Session-Id (TS 29.214 §5.6.4, §5.6.7).
pub fn answer(req: &Message, origin_host: &str, origin_realm: &str, result_code: u32) -> Bytes {
    let mut buf = BytesMut::with_capacity(256);
    let mut b = MessageBuilder::answer(&mut buf, req);
    b.result_code(result_code).origin(origin_host, origin_realm);
    b.finish();
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;
    use diameter::dict::cmd;

    fn af() -> AfIdentity {
        AfIdentity {
            origin_host: "pcscf-1.ims.test".into(),
            origin_realm: "ims.test".into(),
            destination_realm: "pcrf.test".into(),
            destination_host: None,
        }
    }

    fn call<'a>(af: &'a AfIdentity, media: &'a VoiceMedia) -> Call<'a> {
        Call {
            session_id: "pcscf-1.ims.test;1;7",
            af,
            ue_ip: Ipv4Addr::new(10, 0, 0, 7),
            msisdn: "79000000007",
            ue_port: 50_000,
            remote_port: 40_000,
            icid: "icid-1-7",
            media,
        }
    }

    fn encode(f: impl FnOnce(&mut MessageBuilder<'_>)) -> Message {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, cmd::AA, app::RX, 1, 2);
        f(&mut b);
        b.finish();
        Message::parse(buf.freeze()).expect("parse")
    }

    fn count(m: &Message, code: diameter::AvpCode) -> usize {
        m.avps().filter_code(code).count()
    }

    #[test]
    fn aar_carries_a_voice_component_bound_by_the_ue_address() {
        let (af, media) = (af(), VoiceMedia::default());
        let m = encode(|b| aar_initial(b, &call(&af, &media)));
        m.validate().expect("every AVP known and well-formed");
        assert_eq!(m.session_id(), Ok(Some("pcscf-1.ims.test;1;7")));
        let [fip, app_id, icid, rt] = m
            .pick(&[
                avp::FRAMED_IP_ADDRESS,
                avp::AUTH_APPLICATION_ID,
                avp::AF_CHARGING_IDENTIFIER,
                avp::RX_REQUEST_TYPE,
            ])
            .expect("pick");
        assert_eq!(fip.map(|a| a.as_octets()), Some(&[10, 0, 0, 7][..]));
        assert_eq!(app_id.map(|a| a.as_u32()), Some(Ok(app::RX)));
        assert_eq!(icid.map(|a| a.as_octets()), Some(&b"icid-1-7"[..]));
        assert_eq!(rt.map(|a| a.as_enum()), Some(Ok(0)));
        assert_eq!(count(&m, avp::SPECIFIC_ACTION), 6);
        assert_eq!(count(&m, avp::MEDIA_COMPONENT_DESCRIPTION), 1);
        let mcd = m
            .find(avp::MEDIA_COMPONENT_DESCRIPTION)
            .expect("ok")
            .expect("present");
        let subs: Vec<_> = mcd
            .grouped()
            .filter_code(avp::MEDIA_SUB_COMPONENT)
            .collect::<Result<_, _>>()
            .expect("ok");
        assert_eq!(subs.len(), 2);
        let flows: Vec<String> = subs[1]
            .grouped()
            .filter_code(avp::FLOW_DESCRIPTION)
            .map(|a| a.expect("ok").as_str().expect("utf8").to_string())
            .collect();
        assert_eq!(
            flows,
            [
                "permit out 17 from 203.0.113.10 40001 to 10.0.0.7 50001",
                "permit in 17 from 10.0.0.7 50001 to 203.0.113.10 40001"
            ]
        );
        let usage = subs[1]
            .grouped()
            .find(avp::FLOW_USAGE)
            .expect("ok")
            .expect("present");
        assert_eq!(usage.as_enum(), Ok(enums::FLOW_USAGE::RTCP));
        let bw = mcd
            .grouped()
            .find(avp::MAX_REQUESTED_BANDWIDTH_DL)
            .expect("ok")
            .expect("present");
        assert_eq!(bw.as_u32(), Ok(41_000));
    }

    #[test]
    fn signalling_component_only_when_asked() {
        let af = af();
        let media = VoiceMedia {
            signalling: Some(Ipv4Addr::new(192, 0, 2, 200)),
            specific_actions: vec![],
            ..VoiceMedia::default()
        };
        let m = encode(|b| aar_initial(b, &call(&af, &media)));
        m.validate().expect("valid");
        assert_eq!(count(&m, avp::MEDIA_COMPONENT_DESCRIPTION), 2);
        assert_eq!(count(&m, avp::SPECIFIC_ACTION), 0);
        let sig = m
            .avps()
            .filter_code(avp::MEDIA_COMPONENT_DESCRIPTION)
            .nth(1)
            .expect("second")
            .expect("ok");
        let n = sig
            .grouped()
            .find(avp::MEDIA_COMPONENT_NUMBER)
            .expect("ok")
            .expect("present");
        assert_eq!(n.as_u32(), Ok(0));
    }

    #[test]
    fn str_and_answers() {
        let af = af();
        let m = encode(|b| str_request(b, "pcscf-1.ims.test;1;7", &af, 1));
        m.validate().expect("valid");
        let [tc, dh] = m
            .pick(&[avp::TERMINATION_CAUSE, avp::DESTINATION_HOST])
            .expect("pick");
        assert_eq!(tc.map(|a| a.as_enum()), Some(Ok(1)));
        assert!(dh.is_none());

        let ans = Message::parse(answer(&m, "pcscf-1.ims.test", "ims.test", 2001)).expect("parse");
        ans.validate().expect("valid");
        assert!(!ans.is_request());
        assert_eq!(ans.session_id(), Ok(Some("pcscf-1.ims.test;1;7")));
        assert_eq!(
            ans.find(avp::RESULT_CODE).expect("ok").map(|a| a.as_u32()),
            Some(Ok(2001))
        );
    }
}
