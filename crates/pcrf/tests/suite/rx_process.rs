//! Rx against the real `pcrf` binary over TCP, with a PCEF (Gx) and a
//! P-CSCF (Rx AF) built on the diameter crate: the VoLTE call (AAR -> RAR
//! to the PCEF -> RAA -> AAA), modification, STR, binding failures, policy
//! refusal, bad media, the PCEF refusing or later failing a rule (the AF is
//! notified), Gx termination aborting the AF session, IPv6 binding, a
//! kill -9 after the AAA, and an AF's call on a 5G (N7) PDU session, whose
//! rules reach the SMF as notifications.

use crate::support;

use bytes::Bytes;
use diameter::codec::{DiameterError, Message, MessageBuilder};
use diameter::dict::{avp, cmd, enums};
use diameter::peer::{Application, DisconnectCause, LocalNode, PeerSettings};
use diameter::transport::{Handler, Initiator, Node, PeerHandle};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

const IMSI: &str = "001010000000001";
const RX: u32 = 16_777_236;
const PCEF: &str = "pgw.test.local";
const AF: &str = "pcscf.test.local";
const UE: [u8; 4] = [10, 45, 0, 2];

const AF_PEER: &str = r#"
[[peers]]
origin_host = "pcscf.test.local"
addresses = ["127.0.0.1"]

[[peers]]
origin_host = "pcscf2.test.local"
addresses = ["127.0.0.1"]
"#;

/// A peer that records the requests it receives (RAR, ASR) and answers
/// them with a configurable Result-Code, optionally reporting one rule as
/// failed (Charging-Rule-Report in the RAA).
struct Recorder {
    app: u32,
    got: Mutex<Vec<Message>>,
    code: AtomicU32,
    failed_rule: Mutex<Option<String>>,
}

impl Handler for Recorder {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        app_id == self.app && (cmd == cmd::RE_AUTH || cmd == cmd::ABORT_SESSION)
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        self.got.lock().expect("lock").push(req.clone());
        let mut buf = bytes::BytesMut::new();
        let mut b = MessageBuilder::answer(&mut buf, &req);
        b.origin(&peer.local().origin_host, &peer.local().origin_realm)
            .result_code(self.code.load(Ordering::Relaxed));
        if let Some(rule) = self.failed_rule.lock().expect("lock").clone() {
            b.group(avp::CHARGING_RULE_REPORT, |g| {
                g.str(avp::CHARGING_RULE_NAME, &rule)
                    .i32(avp::PCC_RULE_STATUS, 1)
                    .i32(avp::RULE_FAILURE_CODE, 4);
            });
        }
        b.finish();
        Ok(buf.freeze())
    }
}

/// A connected test peer (PCEF or AF).
struct Peer {
    rec: Arc<Recorder>,
    initiator: Option<Initiator>,
    peer: PeerHandle,
}

impl Peer {
    async fn connect(p: &Pcrf, host: &str, app: u32) -> Peer {
        let local = LocalNode::new(host, "test.local")
            .with_application(Application::auth_vendor(app, TGPP));
        let rec = Arc::new(Recorder {
            app,
            got: Mutex::new(Vec::new()),
            code: AtomicU32::new(2001),
            failed_rule: Mutex::new(None),
        });
        let settings = PeerSettings {
            request_timeout: Duration::from_secs(10),
            ..PeerSettings::default()
        };
        let node = Node::with_parts(
            Arc::new(local),
            Arc::new(settings),
            rec.clone(),
            diameter::transport::PeerTable::new(),
        );
        let initiator = node.connect(p.diameter, Some("pcrf.test.local"));
        assert!(
            initiator.wait_open(Duration::from_secs(10)).await,
            "{host} could not connect"
        );
        let peer = initiator.handle();
        Peer {
            rec,
            initiator: Some(initiator),
            peer,
        }
    }

    fn received(&self) -> Vec<Message> {
        self.rec.got.lock().expect("lock").clone()
    }

    /// Waits until `n` requests have arrived; returns the n-th.
    async fn nth(&self, n: usize) -> Message {
        let what = format!("request {n} at the peer");
        eventually_async(what, Duration::from_secs(10), || {
            self.received().get(n - 1).cloned()
        })
        .await
    }

    async fn close(mut self) {
        if let Some(i) = self.initiator.take() {
            i.shutdown(DisconnectCause::Rebooting).await;
        }
    }

    async fn ccr(
        &self,
        session: &str,
        request_type: i32,
        number: u32,
        extra: impl FnOnce(&mut MessageBuilder<'_>),
    ) -> Message {
        send_gx_ccr(&self.peer, false, session, request_type, number, extra).await
    }

    async fn ccr_i(&self, session: &str) -> Message {
        self.ccr(session, 1, 0, |b| initial_avps(b, IMSI)).await
    }

    /// An AAR for the Rx session `session`; `extra` adds the binding and media.
    async fn aar(&self, session: &str, extra: impl FnOnce(&mut MessageBuilder<'_>)) -> Message {
        let local = self.peer.local().clone();
        self.peer
            .request(RX, cmd::AA, |b| {
                b.str(avp::SESSION_ID, session)
                    .u32(avp::AUTH_APPLICATION_ID, RX)
                    .origin(&local.origin_host, &local.origin_realm)
                    .str(avp::DESTINATION_REALM, "test.local");
                extra(b);
            })
            .await
            .expect("AAA")
    }

    async fn str_(&self, session: &str) -> Message {
        let local = self.peer.local().clone();
        self.peer
            .request(RX, cmd::SESSION_TERMINATION, |b| {
                b.str(avp::SESSION_ID, session)
                    .origin(&local.origin_host, &local.origin_realm)
                    .str(avp::DESTINATION_REALM, "test.local")
                    .u32(avp::AUTH_APPLICATION_ID, RX)
                    .i32(avp::TERMINATION_CAUSE, 1);
            })
            .await
            .expect("STA")
    }
}

/// One audio component with one RTP flow, as a P-CSCF sends for a call.
fn voice(b: &mut MessageBuilder<'_>, number: u32, media_type: i32, flow: &str) {
    b.group(avp::MEDIA_COMPONENT_DESCRIPTION, |m| {
        m.u32(avp::MEDIA_COMPONENT_NUMBER, number)
            .i32(avp::MEDIA_TYPE, media_type)
            .u32(avp::MAX_REQUESTED_BANDWIDTH_UL, 64_000)
            .u32(avp::MAX_REQUESTED_BANDWIDTH_DL, 48_000)
            .i32(avp::FLOW_STATUS, 2)
            .group(avp::MEDIA_SUB_COMPONENT, |s| {
                s.u32(avp::FLOW_NUMBER, 1)
                    .str(avp::FLOW_DESCRIPTION, flow)
                    .str(
                        avp::FLOW_DESCRIPTION,
                        "permit in 17 from 10.45.0.2 4000 to 192.0.2.9 5000",
                    );
            });
    });
}

const DOWNLINK: &str = "permit out 17 from 192.0.2.9 5000 to 10.45.0.2 4000";

fn call(b: &mut MessageBuilder<'_>) {
    b.bytes(avp::FRAMED_IP_ADDRESS, &UE)
        .i32(
            avp::SPECIFIC_ACTION,
            enums::SPECIFIC_ACTION::INDICATION_OF_FAILED_RESOURCES_ALLOCATION,
        )
        .i32(
            avp::SPECIFIC_ACTION,
            enums::SPECIFIC_ACTION::INDICATION_OF_LOSS_OF_BEARER,
        );
    voice(b, 1, enums::MEDIA_TYPE::AUDIO, DOWNLINK);
}

/// The Charging-Rule-Definitions of a RAR: (name, QCI, GBR-DL).
fn definitions(m: &Message) -> Vec<(String, i32, Option<u32>)> {
    let mut out = Vec::new();
    for a in m
        .avps()
        .flatten()
        .filter(|a| a.is(avp::CHARGING_RULE_INSTALL))
    {
        for d in a
            .grouped()
            .flatten()
            .filter(|g| g.is(avp::CHARGING_RULE_DEFINITION))
        {
            let mut name = String::new();
            let (mut qci, mut gbr) = (0, None);
            for f in d.grouped().flatten() {
                if f.is(avp::CHARGING_RULE_NAME) {
                    name = f.as_str().expect("name").to_owned();
                } else if f.is(avp::QOS_INFORMATION) {
                    for q in f.grouped().flatten() {
                        if q.is(avp::QOS_CLASS_IDENTIFIER) {
                            qci = q.as_i32().expect("qci");
                        } else if q.is(avp::GUARANTEED_BITRATE_DL) {
                            gbr = Some(q.as_u32().expect("gbr"));
                        }
                    }
                }
            }
            out.push((name, qci, gbr));
        }
    }
    out
}

/// The first Specific-Action of a RAR to the AF.
fn specific_action(m: &Message) -> Option<i32> {
    m.find(avp::SPECIFIC_ACTION)
        .expect("avps")
        .map(|a| a.as_i32().expect("Specific-Action"))
}

/// Appends `lua` to the running node's policy and reloads it.
fn append_to_policy(p: &Pcrf, lua: &str) {
    let mut script = std::fs::read_to_string(&p.policy).expect("policy");
    script.push_str(lua);
    std::fs::write(&p.policy, script).expect("write policy");
    let (st, body) = p.http("POST", "/v1/policy/reload", None);
    assert_eq!(st, 200, "{body}");
}

fn failed_avp_code(m: &Message) -> Option<u32> {
    let f = m.find(avp::FAILED_AVP).ok()??;
    let inner = f.grouped().next()?.ok()?;
    Some(inner.code())
}

fn metric(p: &Pcrf, line_start: &str) -> Option<f64> {
    p.metrics()
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn attach(p: &Pcrf, gx_session: &str) -> (Peer, Peer) {
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let pcef = Peer::connect(p, PCEF, GX).await;
    let af = Peer::connect(p, AF, RX).await;
    assert_eq!(result_of(&pcef.ccr_i(gx_session).await), 2001);
    (pcef, af)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volte_call_installs_a_gbr_rule_modifies_it_and_str_removes_it() {
    let p = Pcrf::start(AF_PEER);
    let gx_sid = "pgw.test.local;rx;1";
    let (pcef, af) = attach(&p, gx_sid).await;

    let aaa = af.aar("pcscf.test.local;call;1", call).await;
    assert_eq!(result_of(&aaa), 2001);
    assert_eq!(aaa.command_code(), cmd::AA);
    // The rule reached the PCEF before the AAA: a GBR QCI 1 rule.
    let rar = pcef.nth(1).await;
    assert_eq!(rar.command_code(), cmd::RE_AUTH);
    assert_eq!(rar.session_id().ok().flatten(), Some(gx_sid));
    let defs = definitions(&rar);
    assert_eq!(defs.len(), 1, "{defs:?}");
    let voice_rule = defs[0].0.clone();
    assert!(voice_rule.starts_with("af-") && voice_rule.ends_with("-1-1"));
    assert_eq!((defs[0].1, defs[0].2), (1, Some(48_000)));

    // The API shows the AF session inside the Gx session.
    let (st, s) = p.http("GET", &format!("/v1/sessions/{gx_sid}"), None);
    assert_eq!(st, 200, "{s}");
    assert_eq!(s["af"][0]["id"], "pcscf.test.local;call;1");
    assert_eq!(s["af"][0]["media"][0]["media_type"], "AUDIO");
    let (st, s) = p.http("GET", &format!("/v1/subscribers/{IMSI}/sessions"), None);
    assert_eq!(st, 200, "{s}");
    assert_eq!(s["subscriber"], IMSI);
    assert_eq!(s["sessions"][0]["id"], gx_sid);
    assert_eq!(s["sessions"][0]["af"][0]["af_host"], AF);
    assert_eq!(
        s["sessions"][0]["af"][0]["rules"][0]["name"],
        voice_rule.as_str()
    );
    let (st, _) = p.http("GET", "/v1/subscribers/001019999999999/sessions", None);
    assert_eq!(st, 404);

    // Modification: a video component joins; only its rule is pushed.
    let aaa = af
        .aar("pcscf.test.local;call;1", |b| {
            b.i32(avp::RX_REQUEST_TYPE, 1);
            voice(
                b,
                2,
                enums::MEDIA_TYPE::VIDEO,
                "permit out 17 from 192.0.2.9 6000 to 10.45.0.2 6000",
            );
        })
        .await;
    assert_eq!(result_of(&aaa), 2001);
    let defs = definitions(&pcef.nth(2).await);
    assert_eq!(defs.len(), 1, "{defs:?}");
    assert!(defs[0].0.ends_with("-2-1"));
    assert_eq!(defs[0].1, 2, "video: QCI 2");

    // A Gx CCR-U re-decides; the AF rules stay (nothing removed).
    let cca = pcef.ccr(gx_sid, 2, 1, |_| {}).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(rule_changes(&cca), (vec![], vec![]));

    // The video is dropped (Flow-Status REMOVED): only its rule goes.
    let aaa = af
        .aar("pcscf.test.local;call;1", |b| {
            b.i32(avp::RX_REQUEST_TYPE, 1)
                .group(avp::MEDIA_COMPONENT_DESCRIPTION, |m| {
                    m.u32(avp::MEDIA_COMPONENT_NUMBER, 2)
                        .i32(avp::FLOW_STATUS, enums::FLOW_STATUS::REMOVED);
                });
        })
        .await;
    assert_eq!(result_of(&aaa), 2001);
    let (installed, removed) = rule_changes(&pcef.nth(3).await);
    assert!(installed.is_empty());
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert!(removed[0].ends_with("-2-1"));

    // STR: the voice rule is removed at the PCEF, then STA.
    let sta = af.str_("pcscf.test.local;call;1").await;
    assert_eq!(result_of(&sta), 2001);
    let (installed, removed) = rule_changes(&pcef.nth(4).await);
    assert!(installed.is_empty());
    assert_eq!(removed, vec![voice_rule.clone()]);
    // A second STR for it: unknown.
    assert_eq!(result_of(&af.str_("pcscf.test.local;call;1").await), 5002);
    assert_eq!(metric(&p, "pcrf_rx_sessions "), Some(0.0));
    assert!(p
        .metrics()
        .contains("pcrf_requests_total{command=\"AAR\",result_code=\"2001\"} 3"));
    af.close().await;
    pcef.close().await;
}

/// Rx into a 5G session: the AAR binds to the N7 session holding the UE
/// address, the media's rule reaches the SMF in an SmPolicyNotification
/// (a GBR 5QI 1 rule with its flows and QoS), the STR removes it there,
/// and when the SMF releases the PDU session the AF gets an ASR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aar_binds_to_a_5g_session_and_its_rules_reach_the_smf() {
    let sbi = free_port();
    let p = Pcrf::start(&format!("{AF_PEER}[sbi]\nlisten = \"127.0.0.1:{sbi}\"\n"));
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let callback = Callback::start();
    let smf = Smf::in_runtime(sbi);
    let notify = "/nsmf-callback/v1/sm-policy-notify/rx";
    let (st, location, body) = smf
        .send(true, "", Some(&create_body(&callback, notify)))
        .await;
    assert_eq!(st, 201, "{body}");
    let pdu = location.rsplit('/').next().expect("id").to_owned();
    let af = Peer::connect(&p, AF, RX).await;
    // The open5gs Create's UE address is the call's (10.45.0.2).
    let aaa = af.aar("pcscf.test.local;5g;1", call).await;
    assert_eq!(result_of(&aaa), 2001);
    let update = format!("{notify}/update");
    let pushed = |n: usize| {
        callback
            .requests()
            .into_iter()
            .filter(|r| r["path"] == update.as_str())
            .nth(n)
    };
    let note = eventually_async(
        "the call's rule at the SMF",
        Duration::from_secs(10),
        || pushed(0),
    )
    .await;
    let decision = &note["body"]["smPolicyDecision"];
    let rules = decision["pccRules"].as_object().expect("pccRules");
    assert_eq!(rules.len(), 1, "{decision}");
    let (name, rule) = rules.iter().next().expect("a rule");
    assert!(name.starts_with("af-"), "{decision}");
    assert!(
        rule["flowInfos"][0]["flowDescription"].is_string(),
        "{decision}"
    );
    let qos = rule["refQosData"][0].as_str().expect("refQosData");
    assert_eq!(decision["qosDecs"][qos]["5qi"], 1, "{decision}");
    assert_eq!(decision["qosDecs"][qos]["gbrDl"], "48000 bps", "{decision}");

    assert_eq!(result_of(&af.str_("pcscf.test.local;5g;1").await), 2001);
    let note = eventually_async(
        "the rule's removal at the SMF",
        Duration::from_secs(10),
        || pushed(1),
    )
    .await;
    let decision = &note["body"]["smPolicyDecision"];
    assert!(decision["pccRules"][name].is_null(), "{decision}");
    assert!(
        decision["pccRules"].get(name).is_some(),
        "removed, not absent: {decision}"
    );

    // A second call; then the SMF releases the PDU session: the AF is
    // told with an ASR, as when a Gx session ends.
    assert_eq!(
        result_of(&af.aar("pcscf.test.local;5g;2", call).await),
        2001
    );
    let (st, _, _) = smf.send(true, &format!("/{pdu}/delete"), None).await;
    assert_eq!(st, 204);
    let asr = af.nth(1).await;
    assert_eq!(asr.command_code(), cmd::ABORT_SESSION);
    assert_eq!(
        asr.session_id().ok().flatten(),
        Some("pcscf.test.local;5g;2")
    );
    af.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_failures_and_rx_before_gx_are_5065() {
    let p = Pcrf::start(AF_PEER);
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let pcef = Peer::connect(&p, PCEF, GX).await;
    let af = Peer::connect(&p, AF, RX).await;

    // Rx before Gx: no session holds the address yet.
    let aaa = af.aar("pcscf.test.local;early", call).await;
    assert_eq!(result_of(&aaa), 5065);
    assert!(pcef.received().is_empty(), "nothing pushed");

    assert_eq!(result_of(&pcef.ccr_i("pgw.test.local;rx;2").await), 2001);
    // An address no session holds.
    let aaa = af
        .aar("pcscf.test.local;other", |b| {
            b.bytes(avp::FRAMED_IP_ADDRESS, &[10, 99, 0, 1]);
            voice(b, 1, 0, DOWNLINK);
        })
        .await;
    assert_eq!(result_of(&aaa), 5065);
    // The right address on another APN.
    let aaa = af
        .aar("pcscf.test.local;apn", |b| {
            b.str(avp::CALLED_STATION_ID, "ims");
            call(b);
        })
        .await;
    assert_eq!(result_of(&aaa), 5065);
    // An update for an Rx session never bound: unknown session.
    let aaa = af
        .aar("pcscf.test.local;nobody", |b| {
            b.i32(avp::RX_REQUEST_TYPE, 1);
            call(b);
        })
        .await;
    assert_eq!(result_of(&aaa), 5002);
    // Now the early AF retries and binds.
    assert_eq!(
        result_of(&af.aar("pcscf.test.local;early", call).await),
        2001
    );
    assert_eq!(metric(&p, "pcrf_rx_binding_failures_total "), Some(3.0));
    assert!(p
        .metrics()
        .contains("pcrf_requests_total{command=\"AAR\",result_code=\"5065\"} 3"));
    af.close().await;
    pcef.close().await;
}

/// A Subscription-Id of an AAR.
fn subscription(b: &mut MessageBuilder<'_>, kind: i32, data: &str) {
    b.group(avp::SUBSCRIPTION_ID, |g| {
        g.i32(avp::SUBSCRIPTION_ID_TYPE, kind)
            .str(avp::SUBSCRIPTION_ID_DATA, data);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aar_naming_the_provisioned_msisdn_binds_when_the_pcef_sent_only_the_imsi() {
    let p = Pcrf::start(AF_PEER);
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let pcef = Peer::connect(&p, PCEF, GX).await;
    let af = Peer::connect(&p, AF, RX).await;
    // A CCR-I with the IMSI alone (END_USER_IMSI).
    let cca = pcef
        .ccr("pgw.test.local;rx;imsi-only", 1, 0, |b| {
            subscription(b, 1, IMSI);
            b.bytes(avp::FRAMED_IP_ADDRESS, &UE)
                .i32(avp::IP_CAN_TYPE, 5)
                .i32(avp::RAT_TYPE, 1004)
                .str(avp::CALLED_STATION_ID, "internet");
        })
        .await;
    assert_eq!(result_of(&cca), 2001);

    // Another subscriber's MSISDN at this address: refused, and the log
    // says why rather than that no session holds the address.
    let aaa = af
        .aar("pcscf.test.local;stranger", |b| {
            subscription(b, 0, "491700009999");
            call(b);
        })
        .await;
    assert_eq!(result_of(&aaa), 5065);
    let log = p.log();
    assert!(
        log.contains("belongs to another subscriber"),
        "the refusal names its cause:\n{log}"
    );
    assert!(
        !log.contains("no IP-CAN session holds the UE address"),
        "{log}"
    );

    // The P-CSCF names the provisioned MSISDN (END_USER_E164), and the
    // IMSI too: both are the profile's.
    let aaa = af
        .aar("pcscf.test.local;call;e164", |b| {
            subscription(b, 0, "491700000001");
            subscription(b, 1, IMSI);
            call(b);
        })
        .await;
    assert_eq!(result_of(&aaa), 2001);
    assert_eq!(pcef.nth(1).await.command_code(), cmd::RE_AUTH);
    assert_eq!(metric(&p, "pcrf_rx_binding_failures_total "), Some(1.0));
    af.close().await;
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_media_is_5004_with_failed_avp_and_policy_refusal_is_5063() {
    let p = Pcrf::start(AF_PEER);
    let (pcef, af) = attach(&p, "pgw.test.local;rx;3").await;

    let aaa = af
        .aar("pcscf.test.local;bad", |b| {
            b.bytes(avp::FRAMED_IP_ADDRESS, &UE);
            voice(b, 1, 0, "permit out 17 from 192.0.2.9 to");
        })
        .await;
    assert_eq!(result_of(&aaa), 5004);
    assert_eq!(failed_avp_code(&aaa), Some(507), "Flow-Description");
    let aaa = af
        .aar("pcscf.test.local;bad", |b| {
            b.bytes(avp::FRAMED_IP_ADDRESS, &UE);
            voice(b, 1, 77, DOWNLINK);
        })
        .await;
    assert_eq!(result_of(&aaa), 5004);
    assert_eq!(failed_avp_code(&aaa), Some(520), "Media-Type");

    // The operator's hook refuses emergency-less video calls.
    append_to_policy(
        &p,
        r#"
function authorize_media(input)
  for _, mc in ipairs(input.media) do
    if mc.media_type == "VIDEO" then return { reject = "no video on this plan" } end
  end
  return default_authorize_media(input)
end
"#,
    );
    let aaa = af
        .aar("pcscf.test.local;video", |b| {
            b.bytes(avp::FRAMED_IP_ADDRESS, &UE);
            voice(b, 1, enums::MEDIA_TYPE::VIDEO, DOWNLINK);
        })
        .await;
    assert_eq!(result_of(&aaa), 5063);
    assert_eq!(
        result_of(&af.aar("pcscf.test.local;audio", call).await),
        2001
    );
    assert_eq!(
        pcef.received().len(),
        1,
        "only the accepted call was pushed"
    );

    // A hook naming its rule as the session's predefined rule is refused
    // (5012, counted), not allowed to replace it at the PCEF.
    append_to_policy(
        &p,
        r#"
function authorize_media(input)
  return { rules = { { name = "internet", qos = { qci = 1 } } } }
end
"#,
    );
    assert_eq!(
        result_of(&af.aar("pcscf.test.local;clash", call).await),
        5012
    );
    assert_eq!(metric(&p, "pcrf_rx_policy_errors_total "), Some(1.0));
    assert_eq!(pcef.received().len(), 1);
    af.close().await;
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pcef_refusal_fails_the_aar_and_a_failed_rule_is_notified_to_the_af() {
    let p = Pcrf::start(AF_PEER);
    let gx_sid = "pgw.test.local;rx;4";
    let (pcef, af) = attach(&p, gx_sid).await;

    // The PCEF refuses the RAR: AAA with an error, nothing stored.
    pcef.rec.code.store(5012, Ordering::Relaxed);
    let aaa = af.aar("pcscf.test.local;call;4", call).await;
    assert_eq!(result_of(&aaa), 5012);
    let (_, s) = p.http("GET", &format!("/v1/sessions/{gx_sid}"), None);
    assert!(s["af"].is_null(), "no AF session stored: {s}");
    pcef.rec.code.store(2001, Ordering::Relaxed);

    assert_eq!(
        result_of(&af.aar("pcscf.test.local;call;4", call).await),
        2001
    );
    let rule = definitions(&pcef.nth(2).await)[0].0.clone();
    // Later the PCEF reports the rule failed (bearer not established).
    let cca = pcef
        .ccr(gx_sid, 2, 1, |b| {
            b.group(avp::CHARGING_RULE_REPORT, |g| {
                g.str(avp::CHARGING_RULE_NAME, &rule)
                    .i32(avp::PCC_RULE_STATUS, 1)
                    .i32(avp::RULE_FAILURE_CODE, 4);
            });
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(
        rule_changes(&cca),
        (vec![], vec![]),
        "the failed rule is not pushed again"
    );
    let note = af.nth(1).await;
    assert_eq!(note.command_code(), cmd::RE_AUTH);
    assert_eq!(note.application_id(), RX);
    assert_eq!(
        note.session_id().ok().flatten(),
        Some("pcscf.test.local;call;4")
    );
    assert_eq!(
        specific_action(&note),
        Some(enums::SPECIFIC_ACTION::INDICATION_OF_FAILED_RESOURCES_ALLOCATION)
    );
    // Which flow failed: media component 1, flow 1.
    let flows = note.find(avp::FLOWS).expect("avps").expect("Flows");
    let numbers: Vec<(bool, u32)> = flows
        .grouped()
        .flatten()
        .map(|a| (a.is(avp::MEDIA_COMPONENT_NUMBER), a.as_u32().expect("u32")))
        .collect();
    assert_eq!(numbers, vec![(true, 1), (false, 1)]);

    // A second call whose bearer is lost (TEMPORARILY_INACTIVE): the AF,
    // subscribed to both, hears of the loss of bearer.
    assert_eq!(
        result_of(&af.aar("pcscf.test.local;call;4b", call).await),
        2001
    );
    let rule = definitions(&pcef.nth(3).await)[0].0.clone();
    let cca = pcef
        .ccr(gx_sid, 2, 2, |b| {
            b.i32(avp::EVENT_TRIGGER, enums::EVENT_TRIGGER::LOSS_OF_BEARER)
                .group(avp::CHARGING_RULE_REPORT, |g| {
                    g.str(avp::CHARGING_RULE_NAME, &rule)
                        .i32(avp::PCC_RULE_STATUS, 2);
                });
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    let note = af.nth(2).await;
    assert_eq!(
        note.session_id().ok().flatten(),
        Some("pcscf.test.local;call;4b")
    );
    assert_eq!(
        specific_action(&note),
        Some(enums::SPECIFIC_ACTION::INDICATION_OF_LOSS_OF_BEARER)
    );
    af.close().await;
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gx_termination_aborts_every_af_session_of_every_af() {
    let p = Pcrf::start(AF_PEER);
    let gx_sid = "pgw.test.local;rx;5";
    let (pcef, af) = attach(&p, gx_sid).await;
    assert_eq!(
        result_of(&af.aar("pcscf.test.local;call;5", call).await),
        2001
    );
    // A second AF node with its own Rx session on the same Gx session.
    let af2 = Peer::connect(&p, "pcscf2.test.local", RX).await;
    assert_eq!(
        result_of(&af2.aar("pcscf2.test.local;call;5", call).await),
        2001
    );
    let (_, s) = p.http("GET", &format!("/v1/sessions/{gx_sid}"), None);
    assert_eq!(s["af"].as_array().map(Vec::len), Some(2), "{s}");
    assert_eq!(pcef.received().len(), 2, "one RAR per AF session");

    let cca = pcef
        .ccr(gx_sid, 3, 1, |b| {
            b.i32(avp::TERMINATION_CAUSE, 1);
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    let asr = af.nth(1).await;
    assert_eq!(asr.command_code(), cmd::ABORT_SESSION);
    assert_eq!(
        asr.session_id().ok().flatten(),
        Some("pcscf.test.local;call;5")
    );
    let cause = asr
        .find(avp::ABORT_CAUSE)
        .expect("avps")
        .expect("Abort-Cause");
    assert_eq!(cause.as_i32(), Ok(enums::ABORT_CAUSE::BEARER_RELEASED));
    let asr2 = af2.nth(1).await;
    assert_eq!(asr2.command_code(), cmd::ABORT_SESSION);
    assert_eq!(
        asr2.session_id().ok().flatten(),
        Some("pcscf2.test.local;call;5")
    );
    assert_eq!(
        af.received().len(),
        1,
        "each AF hears of its own session only"
    );
    // The AFs close their side with STR, answered success.
    assert_eq!(result_of(&af.str_("pcscf.test.local;call;5").await), 2001);
    assert_eq!(result_of(&af2.str_("pcscf2.test.local;call;5").await), 2001);
    eventually_async(
        p.waiting_for("both ASRs counted as answered 2001"),
        Duration::from_secs(5),
        || {
            p.metrics()
                .contains("pcrf_requests_total{command=\"ASR\",result_code=\"2001\"} 2")
                .then_some(())
        },
    )
    .await;
    af2.close().await;
    af.close().await;
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_binding_by_the_ue_address_in_the_prefix() {
    let p = Pcrf::start(AF_PEER);
    p.provision(IMSI, r#"{"msisdn":"491700000001","plan":"basic"}"#);
    let pcef = Peer::connect(&p, PCEF, GX).await;
    let af = Peer::connect(&p, AF, RX).await;
    let cca = pcef
        .ccr("pgw.test.local;rx;6", 1, 0, |b| {
            initial_avps(b, IMSI);
            // 2001:db8:0:7::/64
            b.bytes(
                avp::FRAMED_IPV6_PREFIX,
                &[0, 64, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 7],
            );
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    let aaa = af
        .aar("pcscf.test.local;v6", |b| {
            // The UE's full address, 2001:db8:0:7::5/128.
            let mut data = vec![0, 128, 0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 7];
            data.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 5]);
            b.bytes(avp::FRAMED_IPV6_PREFIX, &data);
            voice(
                b,
                1,
                0,
                "permit out 17 from 2001:db8::9 5000 to 2001:db8:0:7::5 4000",
            );
        })
        .await;
    assert_eq!(result_of(&aaa), 2001);
    assert_eq!(definitions(&pcef.nth(1).await)[0].1, 1);
    af.close().await;
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_the_rx_session_is_still_bound() {
    let mut p = Pcrf::start(AF_PEER);
    let gx_sid = "pgw.test.local;rx;7";
    let (pcef, af) = attach(&p, gx_sid).await;
    assert_eq!(
        result_of(&af.aar("pcscf.test.local;call;7", call).await),
        2001
    );
    let rule = definitions(&pcef.nth(1).await)[0].0.clone();
    af.close().await;
    pcef.close().await;

    p.restart();
    let pcef = Peer::connect(&p, PCEF, GX).await;
    let af = Peer::connect(&p, AF, RX).await;
    assert_eq!(result_of(&af.str_("pcscf.test.local;call;7").await), 2001);
    let (installed, removed) = rule_changes(&pcef.nth(1).await);
    assert!(installed.is_empty());
    assert_eq!(removed, vec![rule]);
    af.close().await;
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answer_first_then_a_pcef_refusal_is_undone_and_notified() {
    let p = Pcrf::start(&format!("{AF_PEER}\n[rx]\nanswer_after_raa = false\n"));
    let gx_sid = "pgw.test.local;rx;8";
    let (pcef, af) = attach(&p, gx_sid).await;
    pcef.rec.code.store(5012, Ordering::Relaxed);
    // Answered before the PCEF was asked.
    assert_eq!(
        result_of(&af.aar("pcscf.test.local;call;8", call).await),
        2001
    );
    assert_eq!(definitions(&pcef.nth(1).await)[0].1, 1);
    let note = af.nth(1).await;
    assert_eq!(note.command_code(), cmd::RE_AUTH);
    assert_eq!(
        specific_action(&note),
        Some(enums::SPECIFIC_ACTION::INDICATION_OF_FAILED_RESOURCES_ALLOCATION)
    );
    // Undone: the AF session holds no rules, the Gx session installed none.
    let (_, s) = p.http("GET", &format!("/v1/sessions/{gx_sid}"), None);
    assert_eq!(s["af"][0]["rules"], serde_json::json!([]), "{s}");
    assert_eq!(s["installed"]["definitions"], serde_json::json!([]), "{s}");
    af.close().await;
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rat_change_is_notified_to_an_af_that_asked_for_ip_can_change() {
    let p = Pcrf::start(AF_PEER);
    let gx_sid = "pgw.test.local;rx;9";
    let (pcef, af) = attach(&p, gx_sid).await;
    let aaa = af
        .aar("pcscf.test.local;call;9", |b| {
            b.bytes(avp::FRAMED_IP_ADDRESS, &UE)
                .i32(avp::SPECIFIC_ACTION, enums::SPECIFIC_ACTION::IP_CAN_CHANGE);
            voice(b, 1, 0, DOWNLINK);
        })
        .await;
    assert_eq!(result_of(&aaa), 2001);
    let [rat] = aaa.pick(&[avp::RAT_TYPE]).expect("avps");
    assert_eq!(rat.map(|a| a.as_i32()), Some(Ok(1004)), "AAA names the RAT");
    // Same RAT: nothing to say.
    assert_eq!(
        result_of(
            &pcef
                .ccr(gx_sid, 2, 1, |b| {
                    b.i32(avp::RAT_TYPE, 1004);
                })
                .await
        ),
        2001
    );
    // EUTRAN -> UTRAN.
    let cca = pcef
        .ccr(gx_sid, 2, 2, |b| {
            b.i32(avp::EVENT_TRIGGER, enums::EVENT_TRIGGER::RAT_CHANGE)
                .i32(avp::RAT_TYPE, 1000);
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    let note = af.nth(1).await;
    let [action, rat] = note
        .pick(&[avp::SPECIFIC_ACTION, avp::RAT_TYPE])
        .expect("avps");
    assert_eq!(
        action.map(|a| a.as_i32()),
        Some(Ok(enums::SPECIFIC_ACTION::IP_CAN_CHANGE))
    );
    assert_eq!(rat.map(|a| a.as_i32()), Some(Ok(1000)));
    never_within(
        "a second notification for one RAT change",
        Duration::from_millis(200),
        || af.received().len() > 1,
    )
    .await;
    af.close().await;
    pcef.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charging_ids_from_the_pcef_reach_an_af_that_asked_for_correlation() {
    let p = Pcrf::start(AF_PEER);
    let gx_sid = "pgw.test.local;rx;10";
    let (pcef, af) = attach(&p, gx_sid).await;
    let aaa = af
        .aar("pcscf.test.local;call;10", |b| {
            b.bytes(avp::FRAMED_IP_ADDRESS, &UE)
                .i32(
                    avp::SPECIFIC_ACTION,
                    enums::SPECIFIC_ACTION::CHARGING_CORRELATION_EXCHANGE,
                )
                .i32(
                    avp::SPECIFIC_ACTION,
                    enums::SPECIFIC_ACTION::INDICATION_OF_SUCCESSFUL_RESOURCES_ALLOCATION,
                );
            voice(b, 1, 0, DOWNLINK);
        })
        .await;
    assert_eq!(result_of(&aaa), 2001);
    let rar = pcef.nth(1).await;
    let rule = definitions(&rar)[0].0.clone();
    // The PCEF is asked for what these Specific-Actions need.
    let triggers: Vec<i32> = rar
        .avps()
        .flatten()
        .filter(|a| a.is(avp::EVENT_TRIGGER))
        .map(|a| a.as_i32().expect("enum"))
        .collect();
    for t in [
        enums::EVENT_TRIGGER::CHARGING_CORRELATION_EXCHANGE,
        enums::EVENT_TRIGGER::SUCCESSFUL_RESOURCE_ALLOCATION,
        enums::EVENT_TRIGGER::RAT_CHANGE,
    ] {
        assert!(triggers.contains(&t), "{t} missing in {triggers:?}");
    }
    // The dedicated bearer got its charging id.
    let cca = pcef
        .ccr(gx_sid, 2, 1, |b| {
            b.group(avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_GX, |g| {
                g.bytes(
                    avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_VALUE,
                    &[0, 0, 0, 77],
                )
                .str(avp::CHARGING_RULE_NAME, &rule);
            });
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    let note = af.nth(1).await;
    let [action, anci] = note
        .pick(&[
            avp::SPECIFIC_ACTION,
            avp::ACCESS_NETWORK_CHARGING_IDENTIFIER,
        ])
        .expect("avps");
    assert_eq!(
        action.map(|a| a.as_i32()),
        Some(Ok(enums::SPECIFIC_ACTION::CHARGING_CORRELATION_EXCHANGE))
    );
    let value = anci
        .expect("Access-Network-Charging-Identifier")
        .grouped()
        .find(avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_VALUE)
        .expect("grouped")
        .expect("value");
    assert_eq!(value.as_octets(), &[0, 0, 0, 77]);
    // A charging id for another rule is not this AF's business.
    let cca = pcef
        .ccr(gx_sid, 2, 2, |b| {
            b.group(avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_GX, |g| {
                g.bytes(avp::ACCESS_NETWORK_CHARGING_IDENTIFIER_VALUE, &[1])
                    .str(avp::CHARGING_RULE_NAME, "internet");
            });
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    never_within(
        "a notification for another rule's charging id",
        Duration::from_millis(200),
        || af.received().len() > 1,
    )
    .await;
    // The bearer is up: the rule is reported active.
    let cca = pcef
        .ccr(gx_sid, 2, 3, |b| {
            b.group(avp::CHARGING_RULE_REPORT, |g| {
                g.str(avp::CHARGING_RULE_NAME, &rule)
                    .i32(avp::PCC_RULE_STATUS, 0);
            });
        })
        .await;
    assert_eq!(result_of(&cca), 2001);
    let note = af.nth(2).await;
    assert_eq!(
        specific_action(&note),
        Some(enums::SPECIFIC_ACTION::INDICATION_OF_SUCCESSFUL_RESOURCES_ALLOCATION)
    );
    // A Gx re-decision keeps the triggers the AF needs: nothing re-sent.
    assert_eq!(rule_changes(&cca), (vec![], vec![]));
    assert!(cca.find(avp::EVENT_TRIGGER).expect("avps").is_none());
    af.close().await;
    pcef.close().await;
}
