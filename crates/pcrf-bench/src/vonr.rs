//! The VoNR call model (`pcrf-bench vonr`): the 5G twin of `volte`, so a
//! PCF's voice calls over N7 + N5 can be set beside the same calls over
//! Gx + Rx. Calls start open-loop at a rate (the scenario's arrival
//! process), each one a UE registering and calling:
//!
//! 1. the SMF's N7 Create of a PDU session for the UE's IPv4 address, its
//!    notification URI on this generator's own HTTP/2 server (h2c);
//! 2. `call_after` later, the P-CSCF's N5 Create of an application session
//!    with one voice media component for that address; the PCF binds it to
//!    the PDU session and pushes the voice PCC rule to the SMF
//!    (`{notificationUri}/update`);
//! 3. the call's hold time, then the N5 delete, and the push removing the
//!    rule (the rule set to `null`);
//! 4. the SMF's N7 Delete.
//!
//! CALL-SETUP is from the N5 Create's send to the SMF emulator's receipt of
//! the push carrying the voice rule; CALL-RELEASE from the N5 delete's send
//! to the push removing it. Each request's latency is from its send to its
//! answer, except the PDU Create's, from the call's intended time (a
//! stalled server or generator shows). Every call started is measured, as
//! in `volte`; the server's CPU is accounted over the whole run.

use crate::cpu::{CpuReport, CpuSampler};
use crate::latency::{Latency, Percentiles};
use crate::population::Occupancy;
use crate::rx::flow_descriptions;
use crate::scenario::{Scenario, VolteSettings};
use crate::schedule::{offer_calls, Arrivals};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::time::sleep_until;

/// What to offer.
#[derive(Clone, Debug)]
pub struct VonrLoad {
    /// The PCF's SBI address (host:port), N7 and N5 on one listener.
    pub sbi: String,
    pub calls_per_second: f64,
    /// Calls start during this long; the run ends when the last one has.
    pub duration: Duration,
    /// Emulated SMFs (HTTP/2 connections for N7).
    pub smfs: usize,
    pub seed: u64,
    /// The server processes whose CPU is accounted.
    pub server_pids: Vec<u32>,
}

/// The steps of a call, in the order they go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    PduCreate,
    AppCreate,
    CallSetup,
    AppDelete,
    CallRelease,
    PduDelete,
}

impl Step {
    const ALL: [Step; 6] = [
        Step::PduCreate,
        Step::AppCreate,
        Step::CallSetup,
        Step::AppDelete,
        Step::CallRelease,
        Step::PduDelete,
    ];

    fn name(self) -> &'static str {
        match self {
            Step::PduCreate => "N7-CREATE",
            Step::AppCreate => "N5-CREATE",
            Step::CallSetup => "CALL-SETUP",
            Step::AppDelete => "N5-DELETE",
            Step::CallRelease => "CALL-RELEASE",
            Step::PduDelete => "N7-DELETE",
        }
    }
}

#[derive(Default)]
struct StepStats {
    latency: Latency,
    ok: u64,
    failed: u64,
    first_failure: Option<String>,
}

/// One step's figures.
#[derive(Clone, Debug, Serialize)]
pub struct StepReport {
    pub step: String,
    pub ok: u64,
    pub failed: u64,
    pub latency: Option<Percentiles>,
    pub first_failure: Option<String>,
}

/// What happened to the calls.
#[derive(Clone, Debug, Default, Serialize)]
pub struct VonrCalls {
    pub started: u64,
    /// Every step succeeded.
    pub completed: u64,
    pub failed: u64,
    /// Could not start: every subscriber of the population was in a call.
    pub population_exhausted: u64,
}

/// The run's report.
#[derive(Clone, Debug, Serialize)]
pub struct VonrReport {
    pub mode: String,
    pub scenario: String,
    pub sbi: String,
    pub calls_per_second: f64,
    pub duration_s: f64,
    /// From the first call's start to the last one's end.
    pub elapsed_s: f64,
    pub calls: VonrCalls,
    pub steps: Vec<StepReport>,
    /// Requests the SMF emulator's notification server got (every push,
    /// and any AF notification).
    pub notifications_received: u64,
    /// The server's CPU over the run; `cpu_us_per_txn` is per completed call.
    pub server_cpu: Option<CpuReport>,
}

impl VonrReport {
    pub fn step(&self, name: &str) -> Option<&StepReport> {
        self.steps.iter().find(|s| s.step == name)
    }

    /// The summary printed after a run.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "pcrf-bench vonr: scenario {} against {}, {:.1} calls/s for {:.1} s (run {:.1} s)",
            self.scenario, self.sbi, self.calls_per_second, self.duration_s, self.elapsed_s
        );
        let c = &self.calls;
        let _ = writeln!(
            s,
            "calls: {} started, {} completed, {} failed, {} not started (population exhausted)",
            c.started, c.completed, c.failed, c.population_exhausted
        );
        for st in &self.steps {
            let (p50, p99) = st
                .latency
                .as_ref()
                .map_or((0.0, 0.0), |p| (p.p50_ms, p.p99_ms));
            let _ = writeln!(
                s,
                "  {:<12} ok {:>7} failed {:>5}  p50 {:>8.3} ms  p99 {:>8.3} ms{}",
                st.step,
                st.ok,
                st.failed,
                p50,
                p99,
                st.first_failure
                    .as_deref()
                    .map(|f| format!("  first failure: {f}"))
                    .unwrap_or_default()
            );
        }
        let _ = writeln!(
            s,
            "  notifications received by the SMF emulator: {}",
            self.notifications_received
        );
        if let Some(c) = &self.server_cpu {
            let _ = writeln!(
                s,
                "  server CPU {:.1}% of a core, {} µs per call",
                c.cpu_percent_of_core,
                c.cpu_us_per_txn
                    .map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"))
            );
        }
        s
    }
}

/// The path prefix of the SMF emulator's notification URIs; a call's id
/// follows it.
const NOTIFY: &str = "/nsmf-callback/v1/sm-policy-notify/";

/// What a call waits for from the notification server.
#[derive(Default)]
struct Waiter {
    installed: Option<oneshot::Sender<Instant>>,
    removed: Option<oneshot::Sender<Instant>>,
}

/// The SMF emulator's notification side: every request answered 204; a
/// push for a call that waits tells it when its rule came or went.
#[derive(Default)]
struct Notifications {
    waiters: Mutex<HashMap<u64, Waiter>>,
    received: AtomicU64,
}

impl Notifications {
    fn waiters(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Waiter>> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn handle(&self, req: Request<Incoming>) -> Response<Empty<Bytes>> {
        let path = req.uri().path().to_owned();
        let body = match req.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => Bytes::new(),
        };
        self.settle(&path, &body, Instant::now());
        let mut r = Response::new(Empty::new());
        *r.status_mut() = StatusCode::NO_CONTENT;
        r
    }

    /// A request for `path` with `body` received `at`: tells the call it
    /// names that its voice rule came (a rule in `pccRules`) or went (a
    /// rule set to `null`).
    fn settle(&self, path: &str, body: &[u8], at: Instant) {
        self.received.fetch_add(1, Relaxed);
        let call = path
            .strip_prefix(NOTIFY)
            .and_then(|r| r.strip_suffix("/update"))
            .and_then(|id| id.parse::<u64>().ok());
        if let Some(call) = call {
            let value: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            if let Some(rules) = value["smPolicyDecision"]["pccRules"].as_object() {
                let mut waiters = self.waiters();
                if let Some(w) = waiters.get_mut(&call) {
                    if rules.values().any(|r| !r.is_null()) {
                        if let Some(tx) = w.installed.take() {
                            let _ = tx.send(at);
                        }
                    }
                    if rules.values().any(Value::is_null) {
                        if let Some(tx) = w.removed.take() {
                            let _ = tx.send(at);
                        }
                    }
                }
            }
        }
    }
}

/// Serves `hub` on `listener` (h2c with prior knowledge, as the PCF's
/// client speaks) until the task is dropped.
async fn serve(listener: TcpListener, hub: Arc<Notifications>) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                // Out of descriptors, most likely: wait, do not spin.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let hub = hub.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let hub = hub.clone();
                async move { Ok::<_, Infallible>(hub.handle(req).await) }
            });
            let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                .max_concurrent_streams(1024)
                .serve_connection(TokioIo::new(stream), svc)
                .await;
        });
    }
}

#[derive(Default)]
struct Stats {
    steps: [StepStats; 6],
    calls: VonrCalls,
}

/// What every call shares.
struct Ctx {
    scenario: Arc<Scenario>,
    volte: VolteSettings,
    smfs: Vec<reqwest::Client>,
    afs: Vec<reqwest::Client>,
    /// http://host:port of the PCF.
    base: String,
    /// http://127.0.0.1:port of the notification server.
    notify_base: String,
    hub: Arc<Notifications>,
    occupancy: Mutex<Occupancy>,
    stats: Mutex<Stats>,
}

impl Ctx {
    fn stats(&self) -> std::sync::MutexGuard<'_, Stats> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, step: Step, result: Result<Duration, String>) -> bool {
        let mut stats = self.stats();
        let s = &mut stats.steps[step as usize];
        match result {
            Ok(d) => {
                s.ok += 1;
                s.latency.record(d);
                true
            }
            Err(e) => {
                s.failed += 1;
                s.first_failure.get_or_insert(e);
                false
            }
        }
    }

    /// POSTs `body` (none: an empty body) to `path`; the Location when the
    /// status is `want`.
    async fn post(
        &self,
        client: &reqwest::Client,
        path: &str,
        body: Option<&Value>,
        want: u16,
    ) -> Result<String, String> {
        let mut req = client
            .post(format!("{}{path}", self.base))
            .timeout(self.scenario.timeout);
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let r = req.send().await.map_err(|e| format!("{path}: {e}"))?;
        let status = r.status().as_u16();
        let location = r
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = r.text().await.map_err(|e| format!("{path}: {e}"))?;
        if status != want {
            let mut end = text.len().min(160);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            return Err(format!("{path}: {status} {}", &text[..end]));
        }
        Ok(location)
    }
}

const SM_POLICIES: &str = "/npcf-smpolicycontrol/v1/sm-policies";
const APP_SESSIONS: &str = "/npcf-policyauthorization/v1/app-sessions";

fn last_segment(location: &str) -> String {
    location.rsplit('/').next().unwrap_or("").to_owned()
}

/// The N7 Create of call `id`'s PDU session for subscriber `sub`.
fn pdu_create(ctx: &Ctx, id: u64, sub: u64) -> Value {
    let pop = &ctx.scenario.population;
    json!({
        "supi": format!("imsi-{}", pop.imsi(sub)),
        "gpsi": format!("msisdn-{}", pop.msisdn(sub)),
        "pduSessionId": 1,
        "pduSessionType": "IPV4",
        "dnn": ctx.scenario.gx.apn,
        "notificationUri": format!("{}{NOTIFY}{id}", ctx.notify_base),
        "sliceInfo": {"sst": 1, "sd": "000001"},
        "accessType": "3GPP_ACCESS",
        "ratType": "NR",
        "ipv4Address": pop.ue_ip(sub).to_string(),
        "servingNetwork": {"mcc": "001", "mnc": "01"},
        "subsDefQos": {"5qi": 9, "arp": {"priorityLevel": 8, "preemptCap": "NOT_PREEMPT", "preemptVuln": "NOT_PREEMPTABLE"}},
        "suppFeat": "4000000",
    })
}

/// The P-CSCF's N5 Create of call `id`: one voice component (RTP and
/// RTCP) as the VoLTE AAR's, at the same bandwidths.
fn app_create(ctx: &Ctx, id: u64, sub: u64, ue: Ipv4Addr) -> Value {
    let v = &ctx.volte;
    let m = &v.media;
    let rtp = flow_descriptions(ue, v.ue_port, m.remote_ip, v.remote_port);
    let rtcp = flow_descriptions(
        ue,
        v.ue_port.saturating_add(1),
        m.remote_ip,
        v.remote_port.saturating_add(1),
    );
    json!({"ascReqData": {
        "afAppId": m.af_application_id,
        "notifUri": format!("{}/af/{id}", ctx.notify_base),
        "ueIpv4": ue.to_string(),
        "dnn": ctx.scenario.gx.apn,
        "supi": format!("imsi-{}", ctx.scenario.population.imsi(sub)),
        "suppFeat": "0",
        "medComponents": {"1": {
            "medCompN": 1,
            "medType": "AUDIO",
            "marBwUl": format!("{} bps", m.max_requested_bandwidth_ul),
            "marBwDl": format!("{} bps", m.max_requested_bandwidth_dl),
            "rrBw": format!("{} bps", m.rr_bandwidth),
            "rsBw": format!("{} bps", m.rs_bandwidth),
            "fStatus": "ENABLED",
            "codecs": [format!("downlink\noffer\nm=audio {} RTP/AVP 116\r\na=rtpmap:116 {}\r\n", v.ue_port, m.codec)],
            "medSubComps": {
                "1": {"fNum": 1, "fDescs": rtp},
                "2": {"fNum": 2, "fDescs": rtcp, "flowUsage": "RTCP"},
            },
        }},
    }})
}

/// Waits for a push (`rx`) within the scenario's timeout; the time from
/// `sent` to its receipt.
async fn pushed(
    ctx: &Ctx,
    rx: oneshot::Receiver<Instant>,
    sent: Instant,
    what: &str,
) -> Result<Duration, String> {
    match tokio::time::timeout(ctx.scenario.timeout, rx).await {
        Ok(Ok(at)) => Ok(at.saturating_duration_since(sent)),
        _ => Err(format!("no push {what} within {:?}", ctx.scenario.timeout)),
    }
}

/// One call, from its intended start.
async fn call(ctx: Arc<Ctx>, id: u64, hold: Duration, intended: Instant) {
    sleep_until(intended.into()).await;
    let Some(sub) = ctx
        .occupancy
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .acquire()
    else {
        ctx.stats().calls.population_exhausted += 1;
        return;
    };
    ctx.stats().calls.started += 1;
    let ok = run_call(&ctx, id, sub, hold, intended).await;
    ctx.hub.waiters().remove(&id);
    {
        let mut s = ctx.stats();
        if ok {
            s.calls.completed += 1;
        } else {
            s.calls.failed += 1;
        }
    }
    ctx.occupancy
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .release(sub);
}

/// The call's steps; whether every one succeeded. What was created is
/// deleted even after a failure, so the node is left as it was.
async fn run_call(ctx: &Ctx, id: u64, sub: u64, hold: Duration, intended: Instant) -> bool {
    let smf = &ctx.smfs[(id % ctx.smfs.len() as u64) as usize];
    let af = &ctx.afs[(id % ctx.afs.len() as u64) as usize];
    let ue = ctx.scenario.population.ue_ip(sub);
    let created = ctx
        .post(smf, SM_POLICIES, Some(&pdu_create(ctx, id, sub)), 201)
        .await
        .map(|l| last_segment(&l));
    let pdu = match created {
        Ok(p) => {
            ctx.record(Step::PduCreate, Ok(intended.elapsed()));
            p
        }
        Err(e) => return ctx.record(Step::PduCreate, Err(e)),
    };
    let mut ok = true;
    sleep_until((Instant::now() + ctx.volte.call_after).into()).await;
    let (installed_tx, installed) = oneshot::channel();
    let (removed_tx, removed) = oneshot::channel();
    ctx.hub.waiters().insert(
        id,
        Waiter {
            installed: Some(installed_tx),
            removed: Some(removed_tx),
        },
    );
    let sent = Instant::now();
    let app = ctx
        .post(af, APP_SESSIONS, Some(&app_create(ctx, id, sub, ue)), 201)
        .await
        .map(|l| last_segment(&l));
    let app = match app {
        Ok(a) => {
            ctx.record(Step::AppCreate, Ok(sent.elapsed()));
            ok &= ctx.record(
                Step::CallSetup,
                pushed(ctx, installed, sent, "installing the voice rule").await,
            );
            Some(a)
        }
        Err(e) => {
            ok = ctx.record(Step::AppCreate, Err(e));
            None
        }
    };
    if let Some(app) = app {
        sleep_until((Instant::now() + hold).into()).await;
        let sent = Instant::now();
        let deleted = ctx
            .post(af, &format!("{APP_SESSIONS}/{app}/delete"), None, 204)
            .await;
        match deleted {
            Ok(_) => {
                ctx.record(Step::AppDelete, Ok(sent.elapsed()));
                ok &= ctx.record(
                    Step::CallRelease,
                    pushed(ctx, removed, sent, "removing the voice rule").await,
                );
            }
            Err(e) => ok = ctx.record(Step::AppDelete, Err(e)),
        }
    }
    let sent = Instant::now();
    let path = format!("{SM_POLICIES}/{pdu}/delete");
    let result = ctx
        .post(smf, &path, Some(&json!({})), 204)
        .await
        .map(|_| sent.elapsed());
    ok &= ctx.record(Step::PduDelete, result);
    ok
}

fn http2_clients(n: usize) -> Result<Vec<reqwest::Client>, String> {
    (0..n.max(1))
        .map(|_| {
            reqwest::Client::builder()
                .http2_prior_knowledge()
                .pool_max_idle_per_host(1)
                .build()
                .map_err(|e| format!("HTTP/2 client: {e}"))
        })
        .collect()
}

/// Offers `load` and reports.
pub async fn run(scenario: Arc<Scenario>, load: &VonrLoad) -> Result<VonrReport, String> {
    let volte = scenario
        .volte
        .clone()
        .ok_or("the scenario has no flow of kind \"volte\" (its [volte] section is the call's)")?;
    let arrivals = Arrivals::new(scenario.arrivals, load.calls_per_second, load.seed)
        .map_err(|e| format!("calls per second: {e}"))?;
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .map_err(|e| format!("the SMF emulator's notification server: {e}"))?;
    let notify_addr = listener.local_addr().map_err(|e| e.to_string())?;
    let hub = Arc::new(Notifications::default());
    let server = tokio::spawn(serve(listener, hub.clone()));
    let mut cpu = if load.server_pids.is_empty() {
        None
    } else {
        Some(CpuSampler::new("server", load.server_pids.clone()).map_err(|e| e.to_string())?)
    };
    let ctx = Arc::new(Ctx {
        smfs: http2_clients(load.smfs)?,
        afs: http2_clients(volte.af_peers)?,
        base: format!("http://{}", load.sbi),
        notify_base: format!("http://{notify_addr}"),
        hub: hub.clone(),
        occupancy: Mutex::new(Occupancy::new(scenario.population.count())),
        stats: Mutex::new(Stats::default()),
        scenario: scenario.clone(),
        volte,
    });
    let rng = StdRng::seed_from_u64(load.seed ^ 0x5bd1_e995);
    let start = Instant::now();
    if let Some(c) = cpu.as_mut() {
        c.restart_window();
    }
    offer_calls(
        &scenario,
        arrivals,
        rng,
        start,
        load.duration,
        |id, hold, intended| call(ctx.clone(), id, hold, intended),
    )
    .await;
    let elapsed = start.elapsed();
    if let Some(c) = cpu.as_mut() {
        c.sample();
    }
    server.abort();
    let stats = ctx.stats();
    let steps = Step::ALL
        .iter()
        .map(|s| {
            let st = &stats.steps[*s as usize];
            StepReport {
                step: s.name().to_owned(),
                ok: st.ok,
                failed: st.failed,
                latency: st.latency.percentiles(),
                first_failure: st.first_failure.clone(),
            }
        })
        .collect();
    Ok(VonrReport {
        mode: "vonr".into(),
        scenario: scenario.name.clone(),
        sbi: load.sbi.clone(),
        calls_per_second: load.calls_per_second,
        duration_s: load.duration.as_secs_f64(),
        elapsed_s: elapsed.as_secs_f64(),
        calls: stats.calls.clone(),
        steps,
        notifications_received: hub.received.load(Relaxed),
        server_cpu: cpu.map(|c| c.report(stats.calls.completed)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_settles_its_own_call_only() {
        let hub = Notifications::default();
        let (itx, mut installed) = oneshot::channel();
        let (rtx, mut removed) = oneshot::channel();
        hub.waiters().insert(
            7,
            Waiter {
                installed: Some(itx),
                removed: Some(rtx),
            },
        );
        let at = Instant::now();
        let rule = br#"{"smPolicyDecision": {"pccRules": {"af-1": {"pccRuleId": "af-1"}}}}"#;
        hub.settle(&format!("{NOTIFY}8/update"), rule, at);
        assert!(installed.try_recv().is_err(), "another call's push");
        hub.settle(&format!("{NOTIFY}7/update"), rule, at);
        assert_eq!(installed.try_recv().ok(), Some(at));
        assert!(removed.try_recv().is_err());
        let gone = br#"{"smPolicyDecision": {"pccRules": {"af-1": null}}}"#;
        hub.settle(&format!("{NOTIFY}7/update"), gone, at);
        assert_eq!(removed.try_recv().ok(), Some(at));
        hub.settle("/af/7/notify", b"{}", at);
        assert_eq!(hub.received.load(Relaxed), 4);
    }
}
