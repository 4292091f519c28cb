//! The VoLTE call set-up run (`pcrf-bench volte`): calls start open-loop at
//! a rate (uniform or Poisson, from the scenario), and each one is a UE
//! attaching and calling:
//!
//! 1. the PCEF's Gx CCR-I (the UE's IPv4 address in Framed-IP-Address);
//! 2. `call_after` later, the AF's Rx AAR-I for the same address; the PCRF
//!    binds it to the Gx session, pushes the voice rule to the PCEF in a
//!    RAR (the emulated PCEF answers RAA) and answers AAA;
//! 3. the call's hold time (or until an ASR from the PCRF), then STR;
//! 4. the PCEF's CCR-T.
//!
//! Each command's latency is from its send to its answer, except the
//! CCR-I's, measured from its intended time (the call's arrival), so a
//! stalled server shows. The CALL SET-UP time is from the AAR's intended
//! time (`call_after` after the CCA-I) to the AAA: a late Gx answer or a
//! slow generator counts in it; how late the AARs left is reported beside
//! it (`aar_send_lag`). Every call started is measured (no warm-up: a call
//! is the unit, not a steady mix).

use crate::af::{AfCounts, AfOptions, Afs};
use crate::exchange::exchange;
use crate::gx;
use crate::latency::{Latency, Percentiles};
use crate::pcef::{PcefOptions, Pcefs};
use crate::population::Occupancy;
use crate::report::{CommandReport, Machine, RarCounts};
use crate::run_result::run_tag;
use crate::rx::{self, Call};
use crate::scenario::{FlowKind, Scenario, VolteSettings};
use crate::schedule::{offer_calls, Arrivals};
use crate::session::{RequestKind, RequestSpec, SessionIdentity};
use crate::stats::{CommandStats, Outcome, ResultKind};
use diameter::dict::{app, cmd, enums};
use diameter::transport::RequestError;
use diameter::Message;
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::time::sleep_until;

/// The load of a VoLTE run.
#[derive(Clone, Copy, Debug)]
pub struct VolteLoad {
    /// New calls per second.
    pub calls_per_second: f64,
    /// Calls start during this long; the run ends when the last one has.
    pub duration: Duration,
    pub seed: u64,
}

/// The commands of a call, in the order they go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    CcrI,
    Aar,
    Str,
    CcrT,
    CallSetup,
}

impl Step {
    const ALL: [Step; 5] = [
        Step::CcrI,
        Step::Aar,
        Step::Str,
        Step::CcrT,
        Step::CallSetup,
    ];

    fn name(self) -> &'static str {
        match self {
            Step::CcrI => "CCR-I",
            Step::Aar => "AAR",
            Step::Str => "STR",
            Step::CcrT => "CCR-T",
            Step::CallSetup => "CALL-SETUP",
        }
    }
}

/// What happened to the calls.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CallCounts {
    pub started: u64,
    /// Every command of the call answered with success.
    pub completed: u64,
    /// A command failed (error answer, timeout, or not sent).
    pub failed: u64,
    /// Ended early by an ASR from the PCRF (then STR, CCR-T).
    pub aborted_by_pcrf: u64,
    /// Could not start: every subscriber of the population was in a call.
    pub population_exhausted: u64,
}

/// A whole VoLTE run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VolteReport {
    pub tool: String,
    pub version: String,
    pub mode: String,
    pub scenario: String,
    pub target: String,
    pub pcef_peers: usize,
    pub af_peers: usize,
    pub calls_per_second: f64,
    pub duration_s: f64,
    pub started_unix: u64,
    pub machine: Machine,
    /// CCR-I, AAR, STR, CCR-T and CALL-SETUP (AAR intended -> AAA).
    pub commands: Vec<CommandReport>,
    pub calls: CallCounts,
    /// How late the AARs left after their intended times (the generator's
    /// timer and scheduling; part of CALL-SETUP, not of AAR).
    pub aar_send_lag: Option<Percentiles>,
    /// RARs the PCRF pushed to the PCEFs (one per call set-up and release
    /// when the PCRF installs and removes the voice rule).
    pub pcef_rar: RarCounts,
    /// RARs (notifications) and ASRs the PCRF sent to the AFs.
    pub af: AfCounts,
    pub peer_events: Vec<String>,
}

impl VolteReport {
    pub fn command(&self, name: &str) -> Option<&CommandReport> {
        self.commands.iter().find(|c| c.command == name)
    }

    /// The human summary.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "pcrf-bench volte: scenario {} against {}, {:.1} calls/s for {:.1} s ({} PCEF, {} AF connections)",
            self.scenario, self.target, self.calls_per_second, self.duration_s, self.pcef_peers, self.af_peers
        );
        let _ = writeln!(
            s,
            "calls: {} started, {} completed, {} failed, {} aborted by the PCRF, {} not started (population exhausted)",
            self.calls.started,
            self.calls.completed,
            self.calls.failed,
            self.calls.aborted_by_pcrf,
            self.calls.population_exhausted
        );
        let _ = writeln!(
            s,
            "{:<11} {:>7} {:>7} {:>8} {:>9} {:>9} {:>9} {:>9}  Apdex (T)",
            "command", "sent", "ok", "failed", "p50 ms", "p90 ms", "p99 ms", "max ms"
        );
        for c in &self.commands {
            let ms = |f: fn(&Percentiles) -> f64| {
                c.latency
                    .as_ref()
                    .map_or_else(|| "-".to_string(), |p| format!("{:.3}", f(p)))
            };
            let _ = writeln!(
                s,
                "{:<11} {:>7} {:>7} {:>8} {:>9} {:>9} {:>9} {:>9}  {} ({} ms, {})",
                c.command,
                c.sent,
                c.succeeded,
                c.failures(),
                ms(|p| p.p50_ms),
                ms(|p| p.p90_ms),
                ms(|p| p.p99_ms),
                ms(|p| p.max_ms),
                c.apdex
                    .score
                    .map_or_else(|| "-".to_string(), |a| format!("{a:.3}")),
                c.apdex.t_ms,
                c.apdex.rating()
            );
        }
        if let Some(l) = &self.aar_send_lag {
            let _ = writeln!(
                s,
                "AAR send lag (in CALL-SETUP): p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
                l.p50_ms, l.p99_ms, l.max_ms
            );
        }
        let _ = writeln!(
            s,
            "PCEF: {} RAR received, {} RAA sent; AF: {} RAR, {} ASR received ({} for no call: 5002)",
            self.pcef_rar.received,
            self.pcef_rar.answered,
            self.af.rar_received,
            self.af.asr_received,
            self.af.unknown_session
        );
        for e in &self.peer_events {
            let _ = writeln!(s, "event: {e}");
        }
        s
    }
}

/// Everything a call needs.
struct Ctx {
    pcefs: Arc<Pcefs>,
    afs: Arc<Afs>,
    scenario: Arc<Scenario>,
    volte: VolteSettings,
    run_tag: u32,
    stats: Mutex<Stats>,
    occupancy: Mutex<Occupancy>,
}

struct Stats {
    steps: Vec<CommandStats>,
    calls: CallCounts,
    aar_send_lag: Latency,
}

impl Ctx {
    fn record(&self, step: Step, outcome: Outcome, latency: Duration) {
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let c = &mut s.steps[step as usize];
        c.sent += 1;
        c.finished(outcome, latency);
    }

    fn count(&self, f: impl FnOnce(&mut CallCounts)) {
        f(&mut self.stats.lock().unwrap_or_else(|e| e.into_inner()).calls);
    }
}

fn succeeded(o: Outcome) -> bool {
    matches!(o, Outcome::Answered(r) if r.is_success())
}

/// An Rx answer's result; a success that names another session counts as
/// [`ResultKind::Mismatched`].
fn rx_outcome(r: Result<Message, RequestError>, session_id: &str) -> Outcome {
    match r {
        Ok(a) => {
            let kind = ResultKind::of(&a);
            if kind.is_success() && a.session_id() != Ok(Some(session_id)) {
                Outcome::Answered(ResultKind::Mismatched)
            } else {
                Outcome::Answered(kind)
            }
        }
        Err(RequestError::Timeout) => Outcome::Timeout,
        Err(_) => Outcome::SendFailed,
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
        ctx.count(|c| c.population_exhausted += 1);
        return;
    };
    ctx.count(|c| c.started += 1);
    let ok = run_call(&ctx, id, sub, hold, intended).await;
    ctx.count(|c| if ok { c.completed += 1 } else { c.failed += 1 });
    ctx.occupancy
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .release(sub);
}

/// The call's commands; whether every one succeeded.
async fn run_call(ctx: &Ctx, id: u64, sub: u64, hold: Duration, intended: Instant) -> bool {
    let peer = (id % ctx.pcefs.len() as u64) as usize;
    let identity = Arc::new(SessionIdentity::new(
        ctx.pcefs.gateway(peer),
        ctx.run_tag,
        id,
        &ctx.scenario.population,
        sub,
    ));
    let gx_request = |kind, number, destination_host| RequestSpec {
        gateway: ctx.pcefs.gateway(peer).clone(),
        identity: identity.clone(),
        kind,
        number,
        destination_host,
    };
    let ccr_i = exchange(
        ctx.pcefs.handle(peer),
        &gx_request(RequestKind::Initial, 0, None),
    )
    .await;
    ctx.record(
        Step::CcrI,
        ccr_i.outcome,
        ccr_i.done_at.saturating_duration_since(intended),
    );
    if !succeeded(ccr_i.outcome) {
        return false;
    }

    // The AF: its own connection, bound by the address the PCEF reported.
    let a = (id % ctx.afs.len() as u64) as usize;
    let af = ctx.afs.identity(a).clone();
    let rx_sid = gx::session_id(&af.origin_host, ctx.run_tag, id as u32);
    let icid = format!("icid.{}.{}", ctx.run_tag, id);
    let msisdn = identity.subscriber.msisdn.clone();
    let aar_intended = ccr_i.done_at + ctx.volte.call_after;
    sleep_until(aar_intended.into()).await;
    let abort = ctx.afs.counters.watch(&rx_sid);
    let c = Call {
        session_id: &rx_sid,
        af: &af,
        ue_ip: identity.subscriber.ue_ip,
        msisdn: &msisdn,
        ue_port: ctx.volte.ue_port,
        remote_port: ctx.volte.remote_port,
        icid: &icid,
        media: &ctx.volte.media,
    };
    let sent = Instant::now();
    ctx.stats
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .aar_send_lag
        .record(sent.saturating_duration_since(aar_intended));
    let aaa = ctx
        .afs
        .handle(a)
        .request(app::RX, cmd::AA, |b| rx::aar_initial(b, &c))
        .await;
    let done = Instant::now();
    let aar = rx_outcome(aaa, &rx_sid);
    ctx.record(Step::Aar, aar, done.saturating_duration_since(sent));
    ctx.record(
        Step::CallSetup,
        aar,
        done.saturating_duration_since(aar_intended),
    );
    let mut ok = succeeded(aar);

    if ok {
        let hung_up = tokio::select! {
            _ = tokio::time::sleep_until((done + hold).into()) => false,
            _ = abort.notified() => true,
        };
        if hung_up {
            ctx.count(|c| c.aborted_by_pcrf += 1);
        }
        let sent = Instant::now();
        let sta = ctx
            .afs
            .handle(a)
            .request(app::RX, cmd::SESSION_TERMINATION, |b| {
                rx::str_request(b, &rx_sid, &af, enums::TERMINATION_CAUSE::DIAMETER_LOGOUT)
            })
            .await;
        let st = rx_outcome(sta, &rx_sid);
        ctx.record(Step::Str, st, sent.elapsed());
        ok &= succeeded(st);
    }
    ctx.afs.counters.unwatch(&rx_sid);

    // The UE detaches whatever happened to the call.
    let ccr_t = exchange(
        ctx.pcefs.handle(peer),
        &gx_request(RequestKind::Terminate(Vec::new()), 1, ccr_i.origin_host),
    )
    .await;
    ctx.record(
        Step::CcrT,
        ccr_t.outcome,
        ccr_t.done_at.saturating_duration_since(ccr_t.sent_at),
    );
    ok && succeeded(ccr_t.outcome)
}

/// Connects the PCEFs and AFs, runs the calls, reports.
pub async fn run(
    scenario: Arc<Scenario>,
    pcef: &PcefOptions,
    load: VolteLoad,
) -> Result<VolteReport, String> {
    let volte = scenario
        .volte
        .clone()
        .ok_or("the scenario has no flow of kind \"volte\"")?;
    if scenario.flows.iter().any(|f| f.kind != FlowKind::Volte) {
        return Err("pcrf-bench volte runs scenarios whose flows are all of kind \"volte\"".into());
    }
    let arrivals = Arrivals::new(scenario.arrivals, load.calls_per_second, load.seed)
        .map_err(|e| format!("calls per second: {e}"))?;
    let pcefs = Arc::new(Pcefs::connect(pcef, &scenario.gx).await?);
    let afs = match Afs::connect(&AfOptions {
        target: pcef.target,
        peers: volte.af_peers,
        origin_realm: volte.af_realm.clone(),
        destination_realm: scenario.gx.destination_realm.clone(),
        destination_host: scenario.gx.destination_host.clone(),
        request_timeout: scenario.timeout,
        connect_timeout: pcef.connect_timeout,
    })
    .await
    {
        Ok(a) => Arc::new(a),
        Err(e) => {
            pcefs.shutdown().await;
            return Err(e);
        }
    };
    let (tag, started_unix) = run_tag();
    let a = &scenario.apdex;
    let targets = [a.ccr_i, a.aar, a.str, a.ccr_t, a.call_setup];
    let ctx = Arc::new(Ctx {
        pcefs: pcefs.clone(),
        afs: afs.clone(),
        occupancy: Mutex::new(Occupancy::new(scenario.population.count())),
        scenario: scenario.clone(),
        volte,
        run_tag: tag,
        stats: Mutex::new(Stats {
            steps: targets.iter().map(|t| CommandStats::new(*t)).collect(),
            calls: CallCounts::default(),
            aar_send_lag: Latency::new(),
        }),
    });
    let rng = StdRng::seed_from_u64(load.seed ^ 0x5bd1_e995);
    let start = Instant::now();
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
    // Before the shutdown, whose own disconnections are no event.
    let mut peer_events = pcefs.events();
    peer_events.extend(afs.events());
    pcefs.shutdown().await;
    afs.shutdown().await;

    let stats = ctx.stats.lock().unwrap_or_else(|e| e.into_inner());
    let window_s = load.duration.as_secs_f64();
    let commands = Step::ALL
        .iter()
        .map(|s| CommandReport::from_stats(s.name(), &stats.steps[*s as usize], window_s))
        .collect();
    Ok(VolteReport {
        tool: "pcrf-bench".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        mode: "volte".into(),
        scenario: scenario.name.clone(),
        target: pcef.target.to_string(),
        pcef_peers: pcefs.len(),
        af_peers: afs.len(),
        calls_per_second: load.calls_per_second,
        duration_s: elapsed.as_secs_f64(),
        started_unix,
        machine: Machine::detect(),
        commands,
        calls: stats.calls.clone(),
        aar_send_lag: stats.aar_send_lag.percentiles(),
        pcef_rar: RarCounts {
            received: pcefs.counters.rar_received.load(Relaxed),
            answered: pcefs.counters.raa_sent.load(Relaxed),
            release_requests: pcefs.counters.release_requests.load(Relaxed),
        },
        af: afs.counters.counts(),
        peer_events,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use diameter::dict::avp;

    #[test]
    fn rx_outcomes_classify_answers() {
        let mut buf = bytes::BytesMut::new();
        let mut b = diameter::MessageBuilder::request(&mut buf, cmd::AA, app::RX, 1, 2);
        b.str(avp::SESSION_ID, "af;1;1");
        b.finish();
        let req = Message::parse(buf.freeze()).expect("parse");
        let ok = Message::parse(rx::answer(&req, "pcrf", "pcrf.test", 2001)).expect("parse");
        assert_eq!(
            rx_outcome(Ok(ok.clone()), "af;1;1"),
            Outcome::Answered(ResultKind::Code(2001))
        );
        assert_eq!(
            rx_outcome(Ok(ok), "af;1;2"),
            Outcome::Answered(ResultKind::Mismatched)
        );
        assert_eq!(
            rx_outcome(Err(RequestError::Timeout), "af;1;1"),
            Outcome::Timeout
        );
    }
}
