//! Sd (TS 29.212 §5b) against the real `pcrf` binary: a PCEF on Gx and a
//! TDF on Sd, both built with the diameter crate. Solicited (the Gx CCR-I
//! makes the PCRF send a TSR with the ADC rule), unsolicited (the TDF's
//! CCR-I binds by UE address, or gets 5140 when nothing holds it),
//! APPLICATION_START/STOP changing the Gx decision (RAR to the PCEF), Sd
//! usage summed with Gx usage in one accumulator, exactly once, Gx CCR-T
//! releasing the TDF session, and reports for unknown sessions (5002).

use crate::support;

use bytes::Bytes;
use diameter::codec::{DiameterError, Message, MessageBuilder};
use diameter::dict::{avp, cmd, enums};
use diameter::peer::{Application, DisconnectCause, LocalNode, PeerSettings};
use diameter::transport::{Handler, Initiator, Node, PeerHandle};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::*;

const SD: u32 = 16_777_303;
const IMSI: &str = "001010000000001";
const TDF_PEER: &str =
    "\n[[peers]]\norigin_host = \"tdf.test.local\"\naddresses = [\"127.0.0.1\"]\n";
const SOLICITED: &str = "\n[sd]\ntdf = \"tdf.test.local\"\n";
const MB: u64 = 1_000_000;

/// The TDF side: records TSRs and Sd RARs, answers them 2001.
struct TdfHandler {
    requests: Mutex<Vec<Message>>,
}

impl Handler for TdfHandler {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        app_id == SD
            && (cmd == diameter::dict::cmd::TDF_SESSION || cmd == diameter::dict::cmd::RE_AUTH)
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        self.requests.lock().expect("lock").push(req.clone());
        let mut buf = bytes::BytesMut::new();
        let mut b = MessageBuilder::answer(&mut buf, &req);
        b.origin(&peer.local().origin_host, &peer.local().origin_realm)
            .result_code(2001);
        b.finish();
        Ok(buf.freeze())
    }
}

struct Tdf {
    handler: Arc<TdfHandler>,
    initiator: Option<Initiator>,
    peer: PeerHandle,
}

impl Tdf {
    async fn connect(p: &Pcrf) -> Tdf {
        let local = LocalNode::new("tdf.test.local", "test.local")
            .with_application(Application::auth_vendor(SD, TGPP));
        let handler = Arc::new(TdfHandler {
            requests: Mutex::new(Vec::new()),
        });
        let node = Node::with_parts(
            Arc::new(local),
            Arc::new(PeerSettings {
                request_timeout: Duration::from_secs(10),
                ..PeerSettings::default()
            }),
            handler.clone(),
            diameter::transport::PeerTable::new(),
        );
        let initiator = node.connect(p.diameter, Some("pcrf.test.local"));
        assert!(
            initiator.wait_open(Duration::from_secs(10)).await,
            "TDF could not open a Diameter connection"
        );
        let peer = initiator.handle();
        Tdf {
            handler,
            initiator: Some(initiator),
            peer,
        }
    }

    fn requests(&self) -> Vec<Message> {
        self.handler.requests.lock().expect("lock").clone()
    }

    /// Waits for the `n`th request (1-based) from the PCRF.
    async fn nth_request(&self, n: usize) -> Message {
        let what = format!("request {n} from the PCRF at the TDF");
        eventually_async(what, Duration::from_secs(10), || {
            self.requests().get(n - 1).cloned()
        })
        .await
    }

    async fn ccr(
        &self,
        session: &str,
        request_type: i32,
        number: u32,
        retransmit: bool,
        extra: impl FnOnce(&mut MessageBuilder<'_>),
    ) -> Message {
        self.peer
            .request(SD, cmd::CREDIT_CONTROL, |b| {
                if retransmit {
                    b.set_retransmit();
                }
                b.str(avp::SESSION_ID, session)
                    .u32(avp::AUTH_APPLICATION_ID, SD)
                    .origin("tdf.test.local", "test.local")
                    .str(avp::DESTINATION_REALM, "test.local")
                    .i32(avp::CC_REQUEST_TYPE, request_type)
                    .u32(avp::CC_REQUEST_NUMBER, number);
                extra(b);
            })
            .await
            .expect("Sd CCA")
    }

    async fn ccr_i(&self, session: &str, ip: [u8; 4]) -> Message {
        self.ccr(
            session,
            enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
            0,
            false,
            |b| {
                b.group(avp::SUBSCRIPTION_ID, |g| {
                    g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                        .str(avp::SUBSCRIPTION_ID_DATA, IMSI);
                })
                .bytes(avp::FRAMED_IP_ADDRESS, &ip);
            },
        )
        .await
    }

    /// A CCR-U reporting one application started or stopped.
    async fn application(&self, session: &str, number: u32, app: &str, start: bool) -> Message {
        self.ccr(
            session,
            enums::CC_REQUEST_TYPE::UPDATE_REQUEST,
            number,
            false,
            |b| {
                b.i32(avp::EVENT_TRIGGER, if start { 39 } else { 40 })
                    .group(avp::APPLICATION_DETECTION_INFORMATION, |g| {
                        g.bytes(avp::TDF_APPLICATION_IDENTIFIER, app.as_bytes());
                    });
            },
        )
        .await
    }

    /// A CCR-U (a retransmission with `retransmit`) reporting `octets`
    /// used under the video ADC rule's Monitoring-Key.
    async fn video_usage(
        &self,
        session: &str,
        number: u32,
        retransmit: bool,
        octets: u64,
    ) -> Message {
        self.ccr(
            session,
            enums::CC_REQUEST_TYPE::UPDATE_REQUEST,
            number,
            retransmit,
            |b| used_report(b, "video", octets),
        )
        .await
    }

    async fn close(mut self) {
        if let Some(i) = self.initiator.take() {
            i.shutdown(DisconnectCause::Rebooting).await;
        }
    }
}

/// ADC rule names (definitions and plain names) installed, and removed.
fn adc_changes(m: &Message) -> (Vec<String>, Vec<String>) {
    let mut installed = Vec::new();
    let mut removed = Vec::new();
    for a in m.avps() {
        let a = a.expect("avp");
        let into = if a.is(avp::ADC_RULE_INSTALL) {
            &mut installed
        } else if a.is(avp::ADC_RULE_REMOVE) {
            &mut removed
        } else {
            continue;
        };
        for g in a.grouped() {
            let g = g.expect("avp");
            if g.is(avp::ADC_RULE_NAME) {
                into.push(String::from_utf8_lossy(g.as_octets()).into_owned());
            } else if g.is(avp::ADC_RULE_DEFINITION) {
                let name = g
                    .grouped()
                    .find(avp::ADC_RULE_NAME)
                    .expect("g")
                    .expect("name");
                let app = g
                    .grouped()
                    .find(avp::TDF_APPLICATION_IDENTIFIER)
                    .expect("g")
                    .expect("app");
                into.push(format!(
                    "{}={}",
                    String::from_utf8_lossy(name.as_octets()),
                    String::from_utf8_lossy(app.as_octets())
                ));
            }
        }
    }
    (installed, removed)
}

/// A Gx session with the "video-detect" service at 10.45.0.2.
async fn gx_session(p: &Pcrf, pcef: &Pcef, session: &str) {
    p.provision(IMSI, r#"{"plan":"basic","services":["video-detect"]}"#);
    let cca = pcef.ccr_i(session, IMSI).await;
    assert_eq!(result_of(&cca), 2001);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn solicited_gx_ccr_i_sends_a_tsr_with_the_adc_rule() {
    let p = Pcrf::start(&format!("{TDF_PEER}{SOLICITED}"));
    let tdf = Tdf::connect(&p).await;
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    gx_session(&p, &pcef, "pgw;sol;1").await;

    let tsr = tdf.nth_request(1).await;
    assert_eq!(tsr.command_code(), cmd::TDF_SESSION);
    assert_eq!(tsr.application_id(), SD);
    tsr.validate().expect("a TSR valid against the dictionary");
    assert_eq!(
        adc_changes(&tsr).0,
        vec!["video=video-streaming".to_string()]
    );
    let ip = tsr
        .find(avp::FRAMED_IP_ADDRESS)
        .expect("avps")
        .expect("UE address");
    assert_eq!(ip.as_octets(), &[10, 45, 0, 2]);
    let sub = tsr
        .find(avp::SUBSCRIPTION_ID)
        .expect("avps")
        .expect("subscriber");
    let data = sub
        .grouped()
        .find(avp::SUBSCRIPTION_ID_DATA)
        .expect("g")
        .expect("data");
    assert_eq!(data.as_str(), Ok(IMSI));
    let dest = tsr
        .find(avp::DESTINATION_HOST)
        .expect("avps")
        .expect("dest");
    assert_eq!(dest.as_str(), Ok("tdf.test.local"));

    // On the TSA the TDF session is recorded inside the Gx session.
    let sd_id = tsr
        .session_id()
        .expect("avps")
        .expect("Session-Id")
        .to_owned();
    let v = eventually_async(
        p.waiting_for("the TDF session recorded in the Gx session"),
        Duration::from_secs(5),
        || {
            let (st, v) = p.http("GET", "/v1/sessions/pgw;sol;1", None);
            assert_eq!(st, 200);
            (v["tdf"]["id"] == sd_id.as_str()).then_some(v)
        },
    )
    .await;
    assert_eq!(v["tdf"]["mode"], "solicited");
    assert_eq!(v["tdf"]["installed"][0]["application"], "video-streaming");
    assert!(
        p.metrics().contains("command=\"TSR\",result_code=\"2001\""),
        "{}",
        p.metrics()
    );

    // No second TSR for a CCR-U that changes nothing for the TDF.
    let cca = pcef.ccr_u("pgw;sol;1", 1, |_| {}).await;
    assert_eq!(result_of(&cca), 2001);
    never_within(
        "a second request at the TDF after a CCR-U that changes nothing for it",
        Duration::from_millis(300),
        || tdf.requests().len() > 1,
    )
    .await;

    // The TDF's reports on the solicited session are accepted.
    let cca = tdf.application(&sd_id, 1, "video-streaming", true).await;
    assert_eq!(result_of(&cca), 2001);
    pcef.close().await;
    tdf.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsolicited_tdf_ccr_i_binds_by_ue_address() {
    let p = Pcrf::start(TDF_PEER);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let tdf = Tdf::connect(&p).await;
    // Before any Gx session holds the address: 5140, nothing recorded.
    let cca = tdf.ccr_i("tdf;early", [10, 45, 0, 2]).await;
    assert_eq!(result_of(&cca), 5140);

    gx_session(&p, &pcef, "pgw;uns;1").await;
    // No [sd].tdf: no TSR.
    never_within("a TSR without [sd].tdf", Duration::from_millis(300), || {
        !tdf.requests().is_empty()
    })
    .await;

    let cca = tdf.ccr_i("tdf;uns;1", [10, 45, 0, 2]).await;
    assert_eq!(result_of(&cca), 2001);
    cca.validate().expect("a valid CCA");
    assert_eq!(
        adc_changes(&cca).0,
        vec!["video=video-streaming".to_string()]
    );
    let (_, v) = p.http("GET", "/v1/sessions/pgw;uns;1", None);
    assert_eq!(v["tdf"]["id"], "tdf;uns;1");
    assert_eq!(v["tdf"]["mode"], "unsolicited");

    // Another address: no binding.
    let cca = tdf.ccr_i("tdf;uns;2", [10, 99, 0, 9]).await;
    assert_eq!(result_of(&cca), 5140);
    // No address at all: 5005 with Failed-AVP.
    let cca = tdf
        .ccr(
            "tdf;uns;3",
            enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
            0,
            false,
            |_| {},
        )
        .await;
    assert_eq!(result_of(&cca), 5005);
    assert!(cca.find(avp::FAILED_AVP).expect("avps").is_some());
    assert!(
        p.metrics().contains("pcrf_sd_unbound_total 2"),
        "{}",
        p.metrics()
    );

    // An IPv6-only session: the TDF's Framed-IPv6-Prefix binds to it.
    let imsi6 = "001010000000006";
    p.provision(imsi6, r#"{"plan":"basic"}"#);
    let prefix = [0u8, 64, 0x20, 0x01, 0x0d, 0xb8, 0, 6, 0, 0];
    let cca = pcef
        .ccr(
            "pgw;uns;6",
            enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
            0,
            |b| {
                b.group(avp::SUBSCRIPTION_ID, |g| {
                    g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                        .str(avp::SUBSCRIPTION_ID_DATA, imsi6);
                })
                .bytes(avp::FRAMED_IPV6_PREFIX, &prefix);
            },
        )
        .await;
    assert_eq!(result_of(&cca), 2001);
    let cca = tdf
        .ccr(
            "tdf;uns;6",
            enums::CC_REQUEST_TYPE::INITIAL_REQUEST,
            0,
            false,
            |b| {
                b.bytes(avp::FRAMED_IPV6_PREFIX, &prefix);
            },
        )
        .await;
    assert_eq!(result_of(&cca), 2001);
    let (_, v) = p.http("GET", "/v1/sessions/pgw;uns;6", None);
    assert_eq!(v["tdf"]["id"], "tdf;uns;6");
    pcef.close().await;
    tdf.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn application_start_and_stop_change_the_gx_decision() {
    let p = Pcrf::start(TDF_PEER);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let tdf = Tdf::connect(&p).await;
    gx_session(&p, &pcef, "pgw;app;1").await;
    assert_eq!(
        result_of(&tdf.ccr_i("tdf;app;1", [10, 45, 0, 2]).await),
        2001
    );

    let cca = tdf
        .application("tdf;app;1", 1, "video-streaming", true)
        .await;
    assert_eq!(result_of(&cca), 2001);
    let rars = pcef.wait_rars(1).await;
    assert_eq!(
        rule_changes(&rars[0]),
        (vec!["video-optimized".to_string()], vec![])
    );
    let (_, v) = p.http("GET", "/v1/sessions/pgw;app;1", None);
    assert_eq!(v["tdf"]["running"], serde_json::json!(["video-streaming"]));
    // The push records its decision once the PCEF's RAA is in.
    eventually_async(
        p.waiting_for("the pushed decision recorded with the application"),
        Duration::from_secs(5),
        || {
            let (_, v) = p.http("GET", "/v1/sessions/pgw;app;1", None);
            (v["last_decision"]["inputs"]["applications"] == serde_json::json!(["video-streaming"]))
                .then_some(())
        },
    )
    .await;

    // An application the policy does not care about: no RAR. The report
    // re-decides the session on a task of its own that leaves no trace
    // when nothing changes, so the PCEF is watched for a while.
    let cca = tdf.application("tdf;app;1", 2, "p2p", true).await;
    assert_eq!(result_of(&cca), 2001);
    never_within(
        "a RAR after a report of an application the policy ignores",
        Duration::from_millis(400),
        || pcef.rars().len() > 1,
    )
    .await;

    let cca = tdf
        .application("tdf;app;1", 3, "video-streaming", false)
        .await;
    assert_eq!(result_of(&cca), 2001);
    let rars = pcef.wait_rars(2).await;
    assert_eq!(
        rule_changes(&rars[1]),
        (vec![], vec!["video-optimized".to_string()])
    );
    assert!(p.metrics().contains("pcrf_sd_application_reports_total 3"));
    pcef.close().await;
    tdf.close().await;
}

const SUMMED_USAGE: &str = r#"
time_zone = "UTC"
billing_day = 1

[keys.total]
level = "session"
chunk = "100 MB"

[keys.video]
level = "rule"
chunk = "20 MB"

[accumulators.all]
reset = "monthly"
sources = ["gx:total", "sd:video"]

[plans.basic]
all = "10 GB"
"#;

fn used_report(b: &mut MessageBuilder<'_>, key: &str, octets: u64) {
    b.i32(avp::EVENT_TRIGGER, 33)
        .group(avp::USAGE_MONITORING_INFORMATION, |g| {
            g.bytes(avp::MONITORING_KEY, key.as_bytes())
                .group(avp::USED_SERVICE_UNIT, |u| {
                    u.u64(avp::CC_TOTAL_OCTETS, octets);
                });
        });
}

fn used(p: &Pcrf) -> u64 {
    let (st, v) = p.http("GET", &format!("/v1/subscribers/{IMSI}/usage"), None);
    assert_eq!(st, 200, "{v}");
    v["accumulators"]["all"]["used"].as_u64().expect("used")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sd_usage_is_summed_with_gx_usage_exactly_once() {
    let (p, _) = Pcrf::start_with_usage_file(SUMMED_USAGE, TDF_PEER);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    let tdf = Tdf::connect(&p).await;
    gx_session(&p, &pcef, "pgw;use;1").await;
    let cca = tdf.ccr_i("tdf;use;1", [10, 45, 0, 2]).await;
    assert_eq!(result_of(&cca), 2001);
    // The ADC rule's Monitoring-Key is granted to the TDF.
    let grant = cca
        .find(avp::USAGE_MONITORING_INFORMATION)
        .expect("avps")
        .expect("a grant for the video key");
    let key = grant
        .grouped()
        .find(avp::MONITORING_KEY)
        .expect("g")
        .expect("key");
    assert_eq!(key.as_octets(), b"video");

    let cca = pcef
        .ccr_u("pgw;use;1", 1, |b| used_report(b, "total", 10 * MB))
        .await;
    assert_eq!(result_of(&cca), 2001);
    let cca = tdf.video_usage("tdf;use;1", 1, false, 5 * MB).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(used(&p), 15 * MB);
    // Reported keys are granted again in the answer.
    assert!(cca
        .find(avp::USAGE_MONITORING_INFORMATION)
        .expect("avps")
        .is_some());

    // A retransmission is answered again, not counted again.
    let again = tdf.video_usage("tdf;use;1", 1, true, 5 * MB).await;
    assert_eq!(result_of(&again), 2001);
    assert_eq!(used(&p), 15 * MB);

    // ...also after kill -9: the record and its answer were one commit.
    drop(pcef);
    drop(tdf);
    let mut p = p;
    p.kill9();
    p.restart();
    let tdf = Tdf::connect(&p).await;
    let again = tdf.video_usage("tdf;use;1", 1, true, 5 * MB).await;
    assert_eq!(result_of(&again), 2001);
    assert_eq!(used(&p), 15 * MB);
    // The Sd index came back with the records: a new report counts.
    let cca = tdf.video_usage("tdf;use;1", 2, false, MB).await;
    assert_eq!(result_of(&cca), 2001);
    assert_eq!(used(&p), 16 * MB);
    tdf.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gx_ccr_t_releases_the_tdf_session() {
    let p = Pcrf::start(&format!("{TDF_PEER}{SOLICITED}"));
    let tdf = Tdf::connect(&p).await;
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    gx_session(&p, &pcef, "pgw;end;1").await;
    let tsr = tdf.nth_request(1).await;
    let sd_id = tsr.session_id().expect("avps").expect("id").to_owned();
    // Wait until the TSA is recorded.
    eventually_async(
        p.waiting_for("the TDF session recorded in the Gx session"),
        Duration::from_secs(5),
        || {
            (p.http("GET", "/v1/sessions/pgw;end;1", None).1["tdf"]["id"] == sd_id.as_str())
                .then_some(())
        },
    )
    .await;

    let cca = pcef.ccr_t("pgw;end;1", 1).await;
    assert_eq!(result_of(&cca), 2001);
    let rar = tdf.nth_request(2).await;
    assert_eq!(rar.command_code(), cmd::RE_AUTH);
    assert_eq!(rar.session_id().expect("avps"), Some(sd_id.as_str()));
    let cause = rar
        .find(avp::SESSION_RELEASE_CAUSE)
        .expect("avps")
        .expect("Session-Release-Cause");
    assert_eq!(cause.as_enum(), Ok(0));
    rar.validate().expect("a valid Sd RAR");

    // The TDF then ends its session: answered 2001, once.
    let cca = tdf
        .ccr(
            &sd_id,
            enums::CC_REQUEST_TYPE::TERMINATION_REQUEST,
            1,
            false,
            |_| {},
        )
        .await;
    assert_eq!(result_of(&cca), 2001);
    let cca = tdf
        .ccr(
            &sd_id,
            enums::CC_REQUEST_TYPE::UPDATE_REQUEST,
            2,
            false,
            |_| {},
        )
        .await;
    assert_eq!(result_of(&cca), 5002);
    assert!(p.metrics().contains("pcrf_sd_released_total 1"));
    assert!(p
        .metrics()
        .contains("command=\"SD-RAR\",result_code=\"2001\""));
    pcef.close().await;
    tdf.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tdf_reports_for_unknown_sessions_get_5002_and_are_counted() {
    let p = Pcrf::start(TDF_PEER);
    let tdf = Tdf::connect(&p).await;
    let cca = tdf
        .application("tdf;nobody", 1, "video-streaming", true)
        .await;
    assert_eq!(result_of(&cca), 5002);
    assert_eq!(cca.session_id().expect("avps"), Some("tdf;nobody"));
    let cca = tdf
        .ccr(
            "tdf;nobody",
            enums::CC_REQUEST_TYPE::TERMINATION_REQUEST,
            2,
            false,
            |_| {},
        )
        .await;
    assert_eq!(result_of(&cca), 5002);
    let m = p.metrics();
    assert!(m.contains("pcrf_sd_unknown_sessions_total 2"), "{m}");
    assert!(m.contains("command=\"SD-CCR\",result_code=\"5002\""), "{m}");
    tdf.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_that_only_adds_adc_rules_opens_the_tdf_session() {
    let p = Pcrf::start(&format!("{TDF_PEER}{SOLICITED}"));
    let tdf = Tdf::connect(&p).await;
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    assert_eq!(result_of(&pcef.ccr_i("pgw;prov;1", IMSI).await), 2001);
    never_within(
        "a TSR for a session without ADC rules",
        Duration::from_millis(300),
        || !tdf.requests().is_empty(),
    )
    .await;

    // The new service changes nothing at the PCEF: no Gx RAR, but a TSR.
    p.provision(IMSI, r#"{"plan":"basic","services":["video-detect"]}"#);
    let tsr = tdf.nth_request(1).await;
    assert_eq!(tsr.command_code(), cmd::TDF_SESSION);
    assert_eq!(
        adc_changes(&tsr).0,
        vec!["video=video-streaming".to_string()]
    );
    assert!(pcef.rars().is_empty());

    // Taking the service away removes the rule at the TDF (Sd RAR).
    eventually_async(
        p.waiting_for("the TDF session recorded in the Gx session"),
        Duration::from_secs(5),
        || (!p.http("GET", "/v1/sessions/pgw;prov;1", None).1["tdf"].is_null()).then_some(()),
    )
    .await;
    p.provision(IMSI, r#"{"plan":"basic"}"#);
    let rar = tdf.nth_request(2).await;
    assert_eq!(rar.command_code(), cmd::RE_AUTH);
    assert_eq!(adc_changes(&rar), (vec![], vec!["video".to_string()]));
    pcef.close().await;
    tdf.close().await;
}
