//! The N7 twin of a Gx scenario (`pcrf-bench n7`): emulated SMFs open,
//! update and close PDU sessions over HTTP/2 (Npcf_SMPolicyControl, TS
//! 29.512) with the same mix as the emulated P-GWs' Gx sessions, so the two
//! interfaces of one PCF can be compared request for request:
//!
//! - a session starts as the scenario's arrival process says, at the rate
//!   that gives `rate` requests per second in all, on an idle subscriber;
//! - Create (the CCR-I's twin), then the flow's number of Updates spread
//!   over its hold time, each reporting the flow's octets per Monitoring-Key
//!   in `accuUsageReports` (the CCR-U's), then Delete with the final usage
//!   (the CCR-T's);
//! - each request's latency is measured from its intended time (no
//!   coordinated omission), and only requests intended inside the measured
//!   window are counted, against the server's CPU over the same window.
//!
//! One HTTP/2 connection per emulated SMF (h2c with prior knowledge, as
//! open5gs's SMF); requests go concurrently on it as streams. Requests that
//! get no 2xx, or none in time, are counted as failed.

use crate::alarm::Alarm;
use crate::cpu::{CpuReport, CpuSampler};
use crate::latency::{Latency, Percentiles};
use crate::population::Occupancy;
use crate::scenario::Scenario;
use crate::schedule::Arrivals;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::time::sleep_until;

/// What to offer.
#[derive(Clone, Debug)]
pub struct N7Load {
    /// The PCF's SBI address (host:port).
    pub sbi: String,
    /// Requests per second, all operations together.
    pub rate: f64,
    /// Sent but not measured first.
    pub warmup: Duration,
    /// The measured window.
    pub duration: Duration,
    /// Emulated SMFs (HTTP/2 connections).
    pub smfs: usize,
    pub seed: u64,
    /// The server processes whose CPU is accounted.
    pub server_pids: Vec<u32>,
}

/// The operations, in a session's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Create,
    Update,
    Delete,
}

impl Op {
    const ALL: [Op; 3] = [Op::Create, Op::Update, Op::Delete];

    fn name(self) -> &'static str {
        match self {
            Op::Create => "CREATE",
            Op::Update => "UPDATE",
            Op::Delete => "DELETE",
        }
    }
}

#[derive(Default)]
struct OpStats {
    latency: Latency,
    sent: u64,
    ok: u64,
    failed: u64,
    first_failure: Option<String>,
}

/// One operation's figures over the measured window.
#[derive(Clone, Debug, Serialize)]
pub struct OpReport {
    pub operation: String,
    pub sent: u64,
    pub ok: u64,
    pub failed: u64,
    pub latency: Option<Percentiles>,
    pub first_failure: Option<String>,
}

/// The run's report.
#[derive(Clone, Debug, Serialize)]
pub struct N7Report {
    pub scenario: String,
    pub offered_rate: f64,
    pub achieved_rate: f64,
    pub window_s: f64,
    pub operations: Vec<OpReport>,
    pub all: Option<Percentiles>,
    pub server_cpu: Option<CpuReport>,
}

impl N7Report {
    /// The summary printed after a run.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "n7 {}: offered {:.0}/s, achieved {:.0}/s over {:.1} s",
            self.scenario, self.offered_rate, self.achieved_rate, self.window_s
        );
        for op in &self.operations {
            let (p50, p99) = op
                .latency
                .as_ref()
                .map_or((0.0, 0.0), |p| (p.p50_ms, p.p99_ms));
            let _ = writeln!(
                s,
                "  {:<7} sent {:>8} ok {:>8} failed {:>6}  p50 {:>7.2} ms  p99 {:>7.2} ms{}",
                op.operation,
                op.sent,
                op.ok,
                op.failed,
                p50,
                p99,
                op.first_failure
                    .as_deref()
                    .map(|f| format!("  first failure: {f}"))
                    .unwrap_or_default()
            );
        }
        if let Some(p) = &self.all {
            let _ = writeln!(
                s,
                "  all     p50 {:.2} ms  p99 {:.2} ms",
                p.p50_ms, p.p99_ms
            );
        }
        if let Some(c) = &self.server_cpu {
            let _ = writeln!(
                s,
                "  server CPU {:.1}% of a core, {} µs per transaction",
                c.cpu_percent_of_core,
                c.cpu_us_per_txn
                    .map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"))
            );
        }
        s
    }
}

/// What every session task shares.
struct Shared {
    scenario: Arc<Scenario>,
    clients: Vec<reqwest::Client>,
    root: String,
    stats: Mutex<[OpStats; 3]>,
    occupancy: Mutex<Occupancy>,
    window: (Instant, Instant),
    timeout: Duration,
    /// Wakes each request at its intended time, to the microsecond.
    alarm: Alarm,
}

impl Shared {
    fn record(&self, op: Op, intended: Instant, result: Result<(), String>) {
        if intended < self.window.0 || intended >= self.window.1 {
            return;
        }
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let s = &mut stats[op as usize];
        s.sent += 1;
        match result {
            Ok(()) => {
                s.ok += 1;
                s.latency.record(intended.elapsed());
            }
            Err(e) => {
                s.failed += 1;
                s.first_failure.get_or_insert(e);
            }
        }
    }

    /// Sends one request; the answer's `Location` (empty without one)
    /// when the status is `want`. The answer's body is read but not
    /// parsed: the generator's CPU is the server's competition here.
    async fn send(
        &self,
        client: &reqwest::Client,
        path: &str,
        body: &Value,
        want: u16,
    ) -> Result<String, String> {
        let url = format!("{}{path}", self.root);
        let r = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|e| format!("{path}: {e}"))?;
        let status = r.status().as_u16();
        let location = r
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let text = r.text().await.map_err(|e| e.to_string())?;
        if status != want {
            return Err(format!("{path}: {status} {}", truncate(&text)));
        }
        Ok(location)
    }
}

fn truncate(s: &str) -> &str {
    let mut end = s.len().min(160);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The usage reports of one interval of `flow`, one per Monitoring-Key.
fn reports(flow: &crate::scenario::Flow, rng: &mut StdRng) -> Value {
    let reports: Vec<Value> = flow
        .monitoring_keys
        .iter()
        .map(|k| {
            let up = flow.input_octets.sample(rng);
            let down = flow.output_octets.sample(rng);
            json!({
                "refUmIds": k,
                "volUsage": up + down,
                "volUsageUplink": up,
                "volUsageDownlink": down,
            })
        })
        .collect();
    Value::Array(reports)
}

/// One PDU session from Create to Delete.
async fn session(shared: Arc<Shared>, start: Instant, seed: u64, client: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let scenario = &shared.scenario;
    let flow = &scenario.flows[scenario.pick_flow(&mut rng)];
    let Some(sub) = shared
        .occupancy
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .acquire()
    else {
        shared.record(Op::Create, start, Err("no idle subscriber".into()));
        return;
    };
    let pop = &scenario.population;
    let client = &shared.clients[client];
    let create = json!({
        "supi": format!("imsi-{}", pop.imsi(sub)),
        "gpsi": format!("msisdn-{}", pop.msisdn(sub)),
        "pduSessionId": 1,
        "pduSessionType": "IPV4",
        "dnn": scenario.gx.apn,
        "notificationUri": "http://127.0.0.1:9/nsmf-callback/v1/sm-policy-notify/1",
        "sliceInfo": {"sst": 1, "sd": "000001"},
        "accessType": "3GPP_ACCESS",
        "ratType": "NR",
        "ipv4Address": pop.ue_ip(sub).to_string(),
        "servingNetwork": {"mcc": "001", "mnc": "01"},
        "subsDefQos": {"5qi": 9, "arp": {"priorityLevel": 8, "preemptCap": "NOT_PREEMPT", "preemptVuln": "NOT_PREEMPTABLE"}},
        "suppFeat": "4000000",
    });
    shared.alarm.until(start).await;
    let created = shared.send(client, "", &create, 201).await;
    let id = match &created {
        Ok(location) => location.rsplit('/').next().unwrap_or("").to_owned(),
        Err(_) => String::new(),
    };
    shared.record(Op::Create, start, created.map(|_| ()));
    if id.is_empty() {
        release(&shared, sub);
        return;
    }
    let updates = flow.updates.sample(&mut rng);
    let hold = flow.hold.sample(&mut rng);
    let step = hold / u32::try_from(updates + 1).unwrap_or(u32::MAX);
    for i in 0..updates {
        let at = start + step * u32::try_from(i + 1).unwrap_or(u32::MAX);
        shared.alarm.until(at).await;
        let body = json!({
            "repPolicyCtrlReqTriggers": ["US_RE"],
            "accuUsageReports": reports(flow, &mut rng),
        });
        let r = shared
            .send(client, &format!("/{id}/update"), &body, 200)
            .await;
        shared.record(Op::Update, at, r.map(|_| ()));
    }
    let at = start + hold;
    shared.alarm.until(at).await;
    let body = json!({ "accuUsageReports": reports(flow, &mut rng) });
    let r = shared
        .send(client, &format!("/{id}/delete"), &body, 204)
        .await;
    shared.record(Op::Delete, at, r.map(|_| ()));
    release(&shared, sub);
}

fn release(shared: &Shared, sub: u64) {
    shared
        .occupancy
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .release(sub);
}

/// Offers `load` and reports.
pub async fn run(scenario: Arc<Scenario>, load: &N7Load) -> Result<N7Report, String> {
    // Requests per session, on average: Create, the updates, Delete.
    let total_weight: f64 = scenario.flows.iter().map(|f| f64::from(f.weight)).sum();
    if total_weight <= 0.0 {
        return Err("the scenario has no flows".into());
    }
    let per_session: f64 = scenario
        .flows
        .iter()
        .map(|f| f64::from(f.weight) / total_weight * (2.0 + f.updates.mean()))
        .sum();
    let sessions_per_second = load.rate / per_session;
    let mut arrivals = Arrivals::new(scenario.arrivals, sessions_per_second, load.seed)?;
    let clients = (0..load.smfs.max(1))
        .map(|_| {
            reqwest::Client::builder()
                .http2_prior_knowledge()
                .pool_max_idle_per_host(1)
                .build()
                .map_err(|e| format!("HTTP/2 client: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut cpu = if load.server_pids.is_empty() {
        None
    } else {
        Some(CpuSampler::new("server", load.server_pids.clone()).map_err(|e| e.to_string())?)
    };
    let t0 = Instant::now() + Duration::from_millis(200);
    let window = (t0 + load.warmup, t0 + load.warmup + load.duration);
    let shared = Arc::new(Shared {
        clients,
        root: format!("http://{}/npcf-smpolicycontrol/v1/sm-policies", load.sbi),
        stats: Mutex::new(Default::default()),
        occupancy: Mutex::new(Occupancy::new(scenario.population.count())),
        window,
        timeout: scenario.timeout,
        scenario: scenario.clone(),
        alarm: Alarm::start()?,
    });
    let mut seeds = StdRng::seed_from_u64(load.seed ^ 0x6e37);
    let mut tasks = Vec::new();
    let mut n = 0usize;
    let mut window_started = false;
    loop {
        let at = t0 + arrivals.next_time();
        if at >= window.1 {
            break;
        }
        if !window_started && at >= window.0 {
            sleep_until(window.0.into()).await;
            if let Some(c) = cpu.as_mut() {
                c.restart_window();
            }
            window_started = true;
        }
        let seed = seeds.random::<u64>();
        tasks.push(tokio::spawn(session(
            shared.clone(),
            at,
            seed,
            n % shared.clients.len(),
        )));
        n += 1;
        // Spawn a little ahead of time, not the whole run at once.
        if at > Instant::now() + Duration::from_millis(50) {
            sleep_until((at - Duration::from_millis(50)).into()).await;
        }
    }
    sleep_until(window.1.into()).await;
    if let Some(c) = cpu.as_mut() {
        c.sample();
    }
    for t in tasks {
        let _ = t.await;
    }
    let stats = shared.stats.lock().unwrap_or_else(|e| e.into_inner());
    let mut all = Latency::new();
    let mut ok = 0;
    let operations = Op::ALL
        .iter()
        .map(|op| {
            let s = &stats[*op as usize];
            all.merge(&s.latency);
            ok += s.ok;
            OpReport {
                operation: op.name().to_owned(),
                sent: s.sent,
                ok: s.ok,
                failed: s.failed,
                latency: s.latency.percentiles(),
                first_failure: s.first_failure.clone(),
            }
        })
        .collect();
    let window_s = load.duration.as_secs_f64();
    Ok(N7Report {
        scenario: scenario.name.clone(),
        offered_rate: load.rate,
        achieved_rate: if window_s > 0.0 {
            ok as f64 / window_s
        } else {
            0.0
        },
        window_s,
        operations,
        all: all.percentiles(),
        server_cpu: cpu.map(|c| c.report(ok)),
    })
}
