//! `pcrf-bench volte` against a PCRF built here with the diameter crate
//! that behaves as TS 29.214 and TS 29.212 have a PCRF behave: it keeps the
//! Gx sessions by the UE address of their CCR-I; binds an AAR by its
//! Framed-IP-Address (Experimental-Result 5065 when nothing is bound);
//! reads the voice component and pushes a QCI 1 GBR rule to the PCEF in a
//! Gx RAR, answering AAA only after the PCEF's RAA; removes the rule on STR;
//! and, when told to, notifies the AF (RAR) or aborts its session (ASR).
//! The emulated PCEFs and AFs of pcrf-bench are the clients.

use bytes::{Bytes, BytesMut};
use diameter::dict::{app, avp, cmd, enums};
use diameter::peer::{Application, LocalNode, PeerSettings};
use diameter::transport::{Handler, Node, PeerHandle};
use diameter::{DiameterError, Message, MessageBuilder};
use pcrf_bench::echo_server::EchoHandler;
use pcrf_bench::pcef::PcefOptions;
use pcrf_bench::scenario::Scenario;
use pcrf_bench::volte::{self, VolteLoad, VolteReport};
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const VENDOR: u32 = 10415;
const IP_CAN_SESSION_NOT_AVAILABLE: u32 = 5065;
const UNKNOWN_SESSION_ID: u32 = 5002;

/// What the PCRF does besides the normal flow.
#[derive(Clone, Copy, Debug, Default)]
struct Behaviour {
    /// Keeps no binding: every AAR finds no IP-CAN session.
    forget_bindings: bool,
    /// After the AAA, notifies the AF of successful resource allocation.
    notify_af: bool,
    /// After the AAA, aborts the AF session (ASR, bearer released).
    abort_af: bool,
}

struct GxSession {
    session_id: String,
    pcef: PeerHandle,
}

struct RxSession {
    gx_session: String,
    pcef: PeerHandle,
    rule: String,
}

#[derive(Default)]
struct Seen {
    aar_bound: AtomicU64,
    aar_unbound: AtomicU64,
    raa_ok: AtomicU64,
    str_ok: AtomicU64,
    /// AARs whose Flow-Descriptions did not name the bound UE address.
    bad_flows: AtomicU64,
}

struct Pcrf {
    echo: EchoHandler,
    behaviour: Behaviour,
    by_ip: Mutex<HashMap<Ipv4Addr, GxSession>>,
    rx: Mutex<HashMap<String, RxSession>>,
    seen: Arc<Seen>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn answer(req: &Message, f: impl FnOnce(&mut MessageBuilder<'_>)) -> Bytes {
    let mut buf = BytesMut::new();
    let mut b = MessageBuilder::answer(&mut buf, req);
    b.u32(avp::AUTH_APPLICATION_ID, app::RX)
        .origin("pcrf.pcrf.test", "pcrf.test");
    f(&mut b);
    b.finish();
    buf.freeze()
}

/// The voice component's GBR (its Max-Requested-Bandwidth) and whether
/// every Flow-Description names `ue`.
fn voice(req: &Message, ue: Ipv4Addr) -> Result<(u32, u32, bool), DiameterError> {
    let bad = |m: &str| DiameterError::new(5004, m.to_string());
    let mcd = req
        .find(avp::MEDIA_COMPONENT_DESCRIPTION)
        .map_err(|_| bad("malformed"))?
        .ok_or_else(|| DiameterError::new(5005, "no Media-Component-Description"))?;
    let g = || mcd.grouped();
    let u32_of = |code| {
        g().find(code)
            .ok()
            .flatten()
            .and_then(|a| a.as_u32().ok())
            .ok_or_else(|| bad("bandwidth"))
    };
    let media_type = g()
        .find(avp::MEDIA_TYPE)
        .ok()
        .flatten()
        .and_then(|a| a.as_enum().ok());
    if media_type != Some(enums::MEDIA_TYPE::AUDIO) {
        return Err(bad("not audio"));
    }
    let (ul, dl) = (
        u32_of(avp::MAX_REQUESTED_BANDWIDTH_UL)?,
        u32_of(avp::MAX_REQUESTED_BANDWIDTH_DL)?,
    );
    let ue = ue.to_string();
    let mut flows_ok = true;
    let mut n = 0;
    for sub in g().filter_code(avp::MEDIA_SUB_COMPONENT).flatten() {
        for fd in sub.grouped().filter_code(avp::FLOW_DESCRIPTION).flatten() {
            let text = fd.as_str().map_err(|_| bad("flow"))?;
            let words: Vec<&str> = text.split_whitespace().collect();
            // permit out 17 from R p to UE p / permit in 17 from UE p to R p
            let ue_at = match words.get(1) {
                Some(&"out") => 7,
                Some(&"in") => 4,
                _ => return Err(bad("flow direction")),
            };
            flows_ok &= words.len() == 9 && words[ue_at] == ue;
            n += 1;
        }
    }
    Ok((ul, dl, flows_ok && n == 4))
}

impl Pcrf {
    async fn aar(&self, req: Message) -> Result<Bytes, DiameterError> {
        req.validate()
            .map_err(|_| DiameterError::new(5004, "malformed AAR"))?;
        let sid = req
            .session_id()
            .ok()
            .flatten()
            .ok_or_else(|| DiameterError::new(5005, "no Session-Id"))?
            .to_string();
        let ip = req
            .find(avp::FRAMED_IP_ADDRESS)
            .ok()
            .flatten()
            .and_then(|a| <[u8; 4]>::try_from(a.as_octets()).ok())
            .map(Ipv4Addr::from);
        let bound = ip.and_then(|ip| {
            lock(&self.by_ip)
                .get(&ip)
                .map(|g| (ip, g.session_id.clone(), g.pcef.clone()))
        });
        let Some((ip, gx_sid, pcef)) = bound else {
            self.seen.aar_unbound.fetch_add(1, Relaxed);
            return Ok(answer(&req, |b| {
                b.experimental_result(VENDOR, IP_CAN_SESSION_NOT_AVAILABLE);
            }));
        };
        self.seen.aar_bound.fetch_add(1, Relaxed);
        let (ul, dl, flows_ok) = voice(&req, ip)?;
        if !flows_ok {
            self.seen.bad_flows.fetch_add(1, Relaxed);
        }
        let rule = format!("volte-{}", sid.rsplit(';').next().unwrap_or("0"));
        // TS 29.213: conversational voice, QCI 1, GBR = MBR = the request.
        let raa = pcef
            .request(app::GX, cmd::RE_AUTH, |b| {
                b.str(avp::SESSION_ID, &gx_sid)
                    .u32(avp::AUTH_APPLICATION_ID, app::GX)
                    .origin("pcrf.pcrf.test", "pcrf.test")
                    .str(avp::DESTINATION_REALM, "bench.test")
                    .i32(avp::RE_AUTH_REQUEST_TYPE, 0)
                    .group(avp::CHARGING_RULE_INSTALL, |i| {
                        i.group(avp::CHARGING_RULE_DEFINITION, |d| {
                            d.bytes(avp::CHARGING_RULE_NAME, rule.as_bytes()).group(
                                avp::QOS_INFORMATION,
                                |q| {
                                    q.i32(avp::QOS_CLASS_IDENTIFIER, 1)
                                        .u32(avp::MAX_REQUESTED_BANDWIDTH_UL, ul)
                                        .u32(avp::MAX_REQUESTED_BANDWIDTH_DL, dl)
                                        .u32(avp::GUARANTEED_BITRATE_UL, ul)
                                        .u32(avp::GUARANTEED_BITRATE_DL, dl);
                                },
                            );
                        });
                    });
            })
            .await
            .map_err(|_| DiameterError::new(3002, "PCEF did not answer"))?;
        if raa
            .find(avp::RESULT_CODE)
            .ok()
            .flatten()
            .and_then(|a| a.as_u32().ok())
            != Some(2001)
        {
            return Ok(answer(&req, |b| {
                b.experimental_result(VENDOR, 5063);
            }));
        }
        self.seen.raa_ok.fetch_add(1, Relaxed);
        lock(&self.rx).insert(
            sid.clone(),
            RxSession {
                gx_session: gx_sid,
                pcef,
                rule,
            },
        );
        Ok(answer(&req, |b| {
            b.result_code(2001);
        }))
    }

    async fn str_(&self, req: Message) -> Result<Bytes, DiameterError> {
        let sid = req
            .session_id()
            .ok()
            .flatten()
            .unwrap_or_default()
            .to_string();
        let Some(s) = lock(&self.rx).remove(&sid) else {
            return Ok(answer(&req, |b| {
                b.result_code(UNKNOWN_SESSION_ID);
            }));
        };
        let _ = s
            .pcef
            .request(app::GX, cmd::RE_AUTH, |b| {
                b.str(avp::SESSION_ID, &s.gx_session)
                    .u32(avp::AUTH_APPLICATION_ID, app::GX)
                    .origin("pcrf.pcrf.test", "pcrf.test")
                    .str(avp::DESTINATION_REALM, "bench.test")
                    .i32(avp::RE_AUTH_REQUEST_TYPE, 0)
                    .group(avp::CHARGING_RULE_REMOVE, |r| {
                        r.bytes(avp::CHARGING_RULE_NAME, s.rule.as_bytes());
                    });
            })
            .await;
        self.seen.str_ok.fetch_add(1, Relaxed);
        Ok(answer(&req, |b| {
            b.result_code(2001);
        }))
    }

    /// After the AAA: the notification or abort this PCRF was told to send.
    fn after_aaa(&self, af: PeerHandle, sid: String) {
        let b = self.behaviour;
        if !(b.notify_af || b.abort_af) {
            return;
        }
        tokio::spawn(async move {
            // The emulated PCRF notifies a moment after the AAA, as a real one
            // would (deliberate, not a wait).
            tokio::time::sleep(Duration::from_millis(30)).await;
            let host = af.origin_host().map(|h| h.to_string()).unwrap_or_default();
            let command = if b.abort_af {
                cmd::ABORT_SESSION
            } else {
                cmd::RE_AUTH
            };
            let _ = af
                .request(app::RX, command, |m| {
                    m.str(avp::SESSION_ID, &sid)
                        .u32(avp::AUTH_APPLICATION_ID, app::RX)
                        .origin("pcrf.pcrf.test", "pcrf.test")
                        .str(avp::DESTINATION_REALM, "ims.test")
                        .str(avp::DESTINATION_HOST, &host);
                    if b.abort_af {
                        m.i32(avp::ABORT_CAUSE, enums::ABORT_CAUSE::BEARER_RELEASED);
                    } else {
                        m.i32(avp::RE_AUTH_REQUEST_TYPE, 0).i32(
                            avp::SPECIFIC_ACTION,
                            enums::SPECIFIC_ACTION::INDICATION_OF_SUCCESSFUL_RESOURCES_ALLOCATION,
                        );
                    }
                })
                .await;
        });
    }
}

impl Handler for Pcrf {
    fn serves(&self, app_id: u32, command: u32) -> bool {
        (app_id == app::GX && command == cmd::CREDIT_CONTROL)
            || (app_id == app::RX && (command == cmd::AA || command == cmd::SESSION_TERMINATION))
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        if req.application_id() == app::GX {
            let kind = req
                .find(avp::CC_REQUEST_TYPE)
                .ok()
                .flatten()
                .and_then(|a| a.as_enum().ok());
            let ip = req
                .find(avp::FRAMED_IP_ADDRESS)
                .ok()
                .flatten()
                .and_then(|a| <[u8; 4]>::try_from(a.as_octets()).ok())
                .map(Ipv4Addr::from);
            let sid = req
                .session_id()
                .ok()
                .flatten()
                .unwrap_or_default()
                .to_string();
            match (kind, ip) {
                (Some(1), Some(ip)) if !self.behaviour.forget_bindings => {
                    lock(&self.by_ip).insert(
                        ip,
                        GxSession {
                            session_id: sid,
                            pcef: peer,
                        },
                    );
                }
                (Some(3), _) => lock(&self.by_ip).retain(|_, g| g.session_id != sid),
                _ => {}
            }
            return self.echo.answer(&req);
        }
        if req.command_code() == cmd::AA {
            let sid = req
                .session_id()
                .ok()
                .flatten()
                .unwrap_or_default()
                .to_string();
            let a = self.aar(req).await?;
            if Message::parse(a.clone()).ok().and_then(|m| {
                m.find(avp::RESULT_CODE)
                    .ok()
                    .flatten()
                    .and_then(|r| r.as_u32().ok())
            }) == Some(2001)
            {
                self.after_aaa(peer, sid);
            }
            return Ok(a);
        }
        self.str_(req).await
    }
}

async fn pcrf(behaviour: Behaviour) -> (SocketAddr, Arc<Seen>) {
    let local = LocalNode::new("pcrf.pcrf.test", "pcrf.test")
        .with_application(Application::auth_vendor(app::GX, VENDOR))
        .with_application(Application::auth_vendor(app::RX, VENDOR));
    let seen = Arc::new(Seen::default());
    let node = Node::new(
        local,
        PeerSettings::default(),
        Pcrf {
            echo: EchoHandler::new("pcrf.pcrf.test", "pcrf.test"),
            behaviour,
            by_ip: Mutex::default(),
            rx: Mutex::default(),
            seen: seen.clone(),
        },
    );
    let server = node.listen("127.0.0.1:0").await.expect("listen");
    let addr = server.local_addr().expect("addr");
    tokio::spawn(server.run(std::future::pending()));
    (addr, seen)
}

fn scenario(hold: &str) -> Arc<Scenario> {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/scenarios/volte.toml");
    let text = std::fs::read_to_string(path).expect("volte.toml");
    // The shipped scenario with short calls and a short set-up gap.
    let text = text
        .replace(
            "hold = { dist = \"exponential\", mean = \"2s\", max = \"10s\" }",
            &format!("hold = {{ dist = \"fixed\", value = \"{hold}\" }}"),
        )
        .replace("call_after = \"50ms\"", "call_after = \"10ms\"")
        .replace("# signalling_address", "signalling_address");
    Arc::new(Scenario::parse(&text, "volte.toml").expect("scenario"))
}

async fn run(behaviour: Behaviour, hold: &str, calls_per_second: f64) -> (VolteReport, Arc<Seen>) {
    let (target, seen) = pcrf(behaviour).await;
    let r = volte::run(
        scenario(hold),
        &PcefOptions {
            target,
            peers: 2,
            request_timeout: Duration::from_secs(2),
            watchdog: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        },
        VolteLoad {
            calls_per_second,
            duration: Duration::from_secs(1),
            seed: 5,
        },
    )
    .await
    .expect("volte run");
    (r, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_bind_push_the_voice_rule_and_end_cleanly() {
    let (r, seen) = run(Behaviour::default(), "200ms", 30.0).await;
    let n = r.calls.started;
    assert!(n >= 20, "{n} calls");
    assert_eq!(r.calls.completed, n, "{}", r.summary());
    assert_eq!(r.calls.failed + r.calls.population_exhausted, 0);
    for name in ["CCR-I", "AAR", "STR", "CCR-T", "CALL-SETUP"] {
        let c = r.command(name).expect(name);
        assert_eq!((c.sent, c.succeeded), (n, n), "{name}");
        assert!(c.latency.is_some() && c.apdex.score.is_some(), "{name}");
    }
    // Every AAR was bound by the address of its CCR-I, and its flows named it.
    assert_eq!(seen.aar_bound.load(Relaxed), n);
    assert_eq!(seen.bad_flows.load(Relaxed), 0);
    assert_eq!(seen.raa_ok.load(Relaxed), n);
    assert_eq!(seen.str_ok.load(Relaxed), n);
    // The PCEFs got the install and the removal of each call's rule.
    assert_eq!(r.pcef_rar.received, 2 * n);
    assert_eq!(r.pcef_rar.answered, 2 * n);
    // The set-up includes the PCEF's round trip, so it is no faster than it.
    let setup = r
        .command("CALL-SETUP")
        .and_then(|c| c.latency.clone())
        .expect("setup");
    let aar = r
        .command("AAR")
        .and_then(|c| c.latency.clone())
        .expect("aar");
    assert!(setup.p50_ms + 0.001 >= aar.p50_ms, "{setup:?} {aar:?}");
    assert_eq!(r.command("CALL-SETUP").map(|c| c.apdex.t_ms), Some(20.0));
    assert_eq!(r.aar_send_lag.as_ref().map(|l| l.count), Some(n));
    let json = serde_json::to_string(&r).expect("json");
    let back: VolteReport = serde_json::from_str(&json).expect("round trip");
    assert_eq!((back.calls, back.commands.len()), (r.calls, 5));
    assert!(r.peer_events.is_empty(), "{:?}", r.peer_events);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbound_aar_fails_the_call_without_str_and_the_ue_still_detaches() {
    let forget = Behaviour {
        forget_bindings: true,
        ..Behaviour::default()
    };
    let (r, seen) = run(forget, "200ms", 20.0).await;
    let n = r.calls.started;
    assert!(n >= 10, "{n}");
    assert_eq!(r.calls.failed, n);
    let aar = r.command("AAR").expect("AAR");
    assert_eq!(aar.sent, n);
    assert_eq!(aar.succeeded, 0);
    assert_eq!(aar.results.get("10415:5065"), Some(&n), "{:?}", aar.results);
    assert_eq!(r.command("STR").map(|c| c.sent), Some(0));
    assert_eq!(r.command("CCR-T").map(|c| c.succeeded), Some(n));
    assert_eq!(
        r.command("CALL-SETUP").and_then(|c| c.apdex.score),
        Some(0.0)
    );
    assert_eq!(seen.aar_unbound.load(Relaxed), n);
    assert_eq!(r.pcef_rar.received, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_af_answers_notifications_and_ends_aborted_calls_at_once() {
    let notify = Behaviour {
        notify_af: true,
        ..Behaviour::default()
    };
    let (r, _) = run(notify, "300ms", 20.0).await;
    let n = r.calls.started;
    assert_eq!(r.calls.completed, n, "{}", r.summary());
    assert_eq!(r.af.rar_received, n);
    assert_eq!(r.af.notified.get("8"), Some(&n));
    assert_eq!(r.af.unknown_session, 0);

    let abort = Behaviour {
        abort_af: true,
        ..Behaviour::default()
    };
    // Calls would hold 30 s: an ASR ends them right after the set-up.
    let t = Instant::now();
    let (r, seen) = run(abort, "30s", 20.0).await;
    let n = r.calls.started;
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    assert_eq!(r.af.asr_received, n);
    assert_eq!(r.calls.aborted_by_pcrf, n);
    assert_eq!(r.calls.completed, n, "STR after the ASA: {}", r.summary());
    assert_eq!(seen.str_ok.load(Relaxed), n);
}
