//! The emulated TDF against a PCRF's side of Sd built here with the
//! diameter crate (TS 29.212 §5b): the PCRF opens sessions with TSR and
//! changes ADC rules with RAR; it answers the TDF's CCRs with CCA echoing
//! Session-Id and CC-Request-Number, 5002 for a session it does not know,
//! and keeps what the TDF reported (APPLICATION_START, usage per key).

use bytes::{Bytes, BytesMut};
use diameter::dict::{app, avp, cmd, enums};
use diameter::peer::{Application, LocalNode, PeerSettings};
use diameter::transport::{Handler, Node, PeerHandle};
use diameter::{DiameterError, Message, MessageBuilder};
use pcrf_bench::sd::AppUsage;
use pcrf_bench::stats::{Outcome, ResultKind};
use pcrf_bench::tdf::{TdfOptions, Tdfs};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the PCRF keeps per Sd session.
#[derive(Clone, Debug, Default, PartialEq)]
struct Reported {
    numbers: Vec<u32>,
    started: Vec<String>,
    octets: HashMap<String, u64>,
    terminated: bool,
}

#[derive(Default)]
struct SdPcrf {
    sessions: Mutex<HashMap<String, Reported>>,
}

impl Handler for SdPcrf {
    fn serves(&self, app_id: u32, command: u32) -> bool {
        app_id == app::SD && command == cmd::CREDIT_CONTROL
    }

    async fn handle(&self, req: Message, _peer: PeerHandle) -> Result<Bytes, DiameterError> {
        req.validate()
            .map_err(|_| DiameterError::new(5004, "malformed CCR"))?;
        let sid = req
            .session_id()
            .ok()
            .flatten()
            .unwrap_or_default()
            .to_string();
        let [rt, rn] = req
            .pick(&[avp::CC_REQUEST_TYPE, avp::CC_REQUEST_NUMBER])
            .map_err(|_| DiameterError::new(5004, "malformed CCR"))?;
        let rt = rt.and_then(|a| a.as_enum().ok()).unwrap_or(0);
        let rn = rn.and_then(|a| a.as_u32().ok()).unwrap_or(u32::MAX);
        let result = {
            let mut s = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
            if rt == enums::CC_REQUEST_TYPE::INITIAL_REQUEST {
                s.insert(sid.clone(), Reported::default());
            }
            match s.get_mut(&sid) {
                None => 5002,
                Some(r) => {
                    r.numbers.push(rn);
                    for adi in req
                        .avps()
                        .filter_code(avp::APPLICATION_DETECTION_INFORMATION)
                        .flatten()
                    {
                        if let Ok(Some(id)) = adi.grouped().find(avp::TDF_APPLICATION_IDENTIFIER) {
                            r.started
                                .push(String::from_utf8_lossy(id.as_octets()).into_owned());
                        }
                    }
                    for umi in req
                        .avps()
                        .filter_code(avp::USAGE_MONITORING_INFORMATION)
                        .flatten()
                    {
                        let key = umi.grouped().find(avp::MONITORING_KEY).ok().flatten();
                        let total = umi
                            .grouped()
                            .find(avp::USED_SERVICE_UNIT)
                            .ok()
                            .flatten()
                            .and_then(|u| u.grouped().find(avp::CC_TOTAL_OCTETS).ok().flatten())
                            .and_then(|t| t.as_u64().ok());
                        if let (Some(k), Some(t)) = (key, total) {
                            *r.octets
                                .entry(String::from_utf8_lossy(k.as_octets()).into_owned())
                                .or_default() += t;
                        }
                    }
                    r.terminated |= rt == enums::CC_REQUEST_TYPE::TERMINATION_REQUEST;
                    2001
                }
            }
        };
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::answer(&mut buf, &req);
        b.u32(avp::AUTH_APPLICATION_ID, app::SD)
            .origin("pcrf.pcrf.test", "pcrf.test")
            .result_code(result)
            .i32(avp::CC_REQUEST_TYPE, rt)
            .u32(avp::CC_REQUEST_NUMBER, rn);
        b.finish();
        Ok(buf.freeze())
    }
}

/// An Sd RAR from the PCRF to tdf-2 for `sid`; `changes` adds the ADC rule
/// changes. Returns the RAA.
async fn sd_rar(
    tdf2: &PeerHandle,
    sid: &str,
    changes: impl FnOnce(&mut MessageBuilder<'_>),
) -> Message {
    tdf2.request(app::SD, cmd::RE_AUTH, |b| {
        b.str(avp::SESSION_ID, sid)
            .u32(avp::AUTH_APPLICATION_ID, app::SD)
            .origin("pcrf.pcrf.test", "pcrf.test")
            .str(avp::DESTINATION_REALM, "bench.test")
            .str(avp::DESTINATION_HOST, "tdf-2.bench.test")
            .i32(avp::RE_AUTH_REQUEST_TYPE, 0);
        changes(b);
    })
    .await
    .expect("RAA")
}

fn ok(o: Option<Outcome>) -> bool {
    matches!(o, Some(Outcome::Answered(ResultKind::Code(2001))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn solicited_and_unsolicited_sessions_report_applications_and_usage() {
    let local = LocalNode::new("pcrf.pcrf.test", "pcrf.test")
        .with_application(Application::auth_vendor(app::SD, 10415));
    let pcrf = Arc::new(SdPcrf::default());
    let node = Node::with_parts(
        Arc::new(local),
        Arc::new(PeerSettings::default()),
        pcrf.clone(),
        diameter::transport::PeerTable::new(),
    );
    let server = node.listen("127.0.0.1:0").await.expect("listen");
    let target = server.local_addr().expect("addr");
    let table = server.peer_table();
    tokio::spawn(server.run(std::future::pending()));
    let tdfs = Tdfs::connect(&TdfOptions {
        target,
        peers: 2,
        origin_realm: "bench.test".into(),
        destination_realm: "pcrf.test".into(),
        request_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(5),
    })
    .await
    .expect("TDFs open");
    let tdf2 = table.get("tdf-2.bench.test").expect("tdf-2 connected");

    // Solicited: the PCRF opens the session with a TSR and one ADC rule.
    let sid = "pcrf.pcrf.test;1;sd1";
    let tsa = tdf2
        .request(app::SD, cmd::TDF_SESSION, |b| {
            b.str(avp::SESSION_ID, sid)
                .u32(avp::AUTH_APPLICATION_ID, app::SD)
                .origin("pcrf.pcrf.test", "pcrf.test")
                .str(avp::DESTINATION_REALM, "bench.test")
                .str(avp::DESTINATION_HOST, "tdf-2.bench.test")
                .group(avp::SUBSCRIPTION_ID, |g| {
                    g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
                        .str(avp::SUBSCRIPTION_ID_DATA, "001010000000005");
                })
                .bytes(avp::FRAMED_IP_ADDRESS, &[10, 0, 0, 5])
                .group(avp::ADC_RULE_INSTALL, |i| {
                    i.group(avp::ADC_RULE_DEFINITION, |d| {
                        d.bytes(avp::ADC_RULE_NAME, b"adc-video")
                            .bytes(avp::TDF_APPLICATION_IDENTIFIER, b"youtube")
                            .bytes(avp::MONITORING_KEY, b"mk-video");
                    });
                });
        })
        .await
        .expect("TSA");
    tsa.validate().expect("valid TSA");
    assert_eq!(ResultKind::of(&tsa), ResultKind::Code(2001));
    assert_eq!(tsa.session_id(), Ok(Some(sid)));
    let s = tdfs.sessions().remove(sid).expect("TDF keeps the session");
    assert_eq!(s.tdf, 1);
    assert_eq!(s.ue_ip, Some(Ipv4Addr::new(10, 0, 0, 5)));
    assert_eq!(s.pcrf_host.as_deref(), Some("pcrf.pcrf.test"));
    assert_eq!(s.adc_rules, ["adc-video"]);

    // An Sd RAR adds a predefined rule base.
    let raa = sd_rar(&tdf2, sid, |b| {
        b.group(avp::ADC_RULE_INSTALL, |i| {
            i.str(avp::ADC_RULE_BASE_NAME, "social");
        });
    })
    .await;
    assert_eq!(ResultKind::of(&raa), ResultKind::Code(2001));
    assert_eq!(
        tdfs.sessions().get(sid).map(|s| s.adc_rules.clone()),
        Some(vec!["adc-video".into(), "social".into()])
    );

    // An Sd RAR for a session the TDF does not hold.
    let raa = sd_rar(&tdf2, "pcrf.pcrf.test;1;nope", |_| {}).await;
    assert_eq!(ResultKind::of(&raa), ResultKind::Code(5002));

    // The PCRF has not registered the TSR's session: 5002 for its CCR-U.
    let usage = |n| AppUsage {
        monitoring_key: "mk-video".into(),
        input_octets: n,
        output_octets: 9 * n,
    };
    assert_eq!(
        tdfs.report(sid, &[("youtube", 1)], &[usage(100)]).await,
        Some(Outcome::Answered(ResultKind::Code(5002)))
    );
    pcrf.sessions
        .lock()
        .expect("lock")
        .insert(sid.into(), Reported::default());
    assert!(ok(tdfs.report(sid, &[("youtube", 1)], &[usage(100)]).await));
    assert!(ok(tdfs.report(sid, &[], &[usage(10)]).await));
    assert!(ok(tdfs.terminate(sid, &[usage(1)]).await));
    assert!(tdfs.report(sid, &[], &[]).await.is_none(), "forgotten");
    let r = pcrf.sessions.lock().expect("lock")[sid].clone();
    assert_eq!(r.numbers, [1, 2, 3]);
    assert_eq!(r.started, ["youtube"]);
    assert_eq!(r.octets["mk-video"], 1110);
    assert!(r.terminated);

    // Unsolicited: the TDF opens the session with the UE's address.
    let sid = "tdf-1.bench.test;1;9";
    assert_eq!(
        tdfs.start_unsolicited(0, sid, Ipv4Addr::new(10, 0, 0, 9), "001010000000009")
            .await,
        Outcome::Answered(ResultKind::Code(2001))
    );
    assert!(ok(tdfs.report(sid, &[("netflix", 7)], &[]).await));
    assert!(ok(tdfs.terminate(sid, &[]).await));
    let r = pcrf.sessions.lock().expect("lock")[sid].clone();
    assert_eq!(r.numbers, [0, 1, 2]);
    assert_eq!(r.started, ["netflix"]);

    let c = tdfs.counts();
    assert_eq!((c.tsr_received, c.rar_received, c.sessions), (1, 2, 0));
    assert!(tdfs.events().is_empty());
    tdfs.shutdown().await;
}
