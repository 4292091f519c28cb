//! The `pcrf-bench` command line: `run` (open loop at a rate, or closed loop
//! with `--max`), `zero-loss` (bisection search), `volte` (call set-up
//! with emulated AFs), `vonr` (its twin over N7 and N5), `echo-server`
//! (the ceiling) and `provision` (the population through the REST API).

use clap::{Args, Parser, Subcommand};
use pcrf_bench::closed_loop::ClosedLoop;
use pcrf_bench::delivery::{AnswerLog, Delivery, Retransmit};
use pcrf_bench::duration::parse_duration;
use pcrf_bench::echo_server;
use pcrf_bench::failover;
use pcrf_bench::http_client::BaseUrl;
use pcrf_bench::open_loop::OpenLoop;
use pcrf_bench::pcef::PcefOptions;
use pcrf_bench::provision::provision;
use pcrf_bench::runner::{measure_with, CpuTargets, Load, RunExtras, RunSetup};
use pcrf_bench::scenario::Scenario;
use pcrf_bench::series::SeriesSpec;
use pcrf_bench::verify::{self, load_log, Api};
use pcrf_bench::volte::VolteLoad;
use pcrf_bench::zero_loss::Criteria;
use pcrf_bench::zero_loss_run::{search, SearchSettings};
use serde::Serialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// The generator shares the machine with the server it measures: every
/// cycle it saves is left to the server (glibc's malloc was the server's
/// largest cost before it moved to mimalloc; the generator allocates alike).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "pcrf-bench",
    version,
    about = "Load generator for Diameter PCRFs: emulated P-GWs, open-loop rate or closed-loop max, zero-loss search, latency from intended send times, Apdex, server CPU per transaction"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Offer a scenario's load: `--rate R` (open loop) or `--max` (closed loop).
    Run(RunArgs),
    /// Find the highest rate held with zero loss and p99 under a bound.
    ZeroLoss(ZeroLossArgs),
    /// VoLTE calls at a rate: Gx CCR-I, Rx AAR (RAR to the PCEF, AAA),
    /// hold, STR, CCR-T; latency per command and call set-up, Apdex.
    Volte(VolteArgs),
    /// The N7 twin of a scenario: emulated SMFs Create, Update (with
    /// usage) and Delete SM policies over HTTP/2 at a rate, with the
    /// scenario's mix; latency per operation, server CPU per transaction.
    N7(N7Args),
    /// VoNR calls at a rate: N7 Create of a PDU session, N5 Create of a
    /// voice app session (CALL-SETUP: until the SMF gets the voice rule
    /// pushed), hold, N5 delete (CALL-RELEASE: until the rule's removal is
    /// pushed), N7 Delete; server CPU per call.
    Vonr(VonrArgs),
    /// Answer every Gx CCR at once with a fixed CCA: the generator's ceiling.
    EchoServer(EchoArgs),
    /// An OCS on Sy: answers SLR from a counter table, sends SNRs at a
    /// rate, answers STR; prints what it saw as JSON when stopped.
    Ocs(OcsArgs),
    /// PUT the scenario's subscribers through the REST API, then exit.
    Provision(ProvisionArgs),
    /// Compare an answer log (`--answer-log`) with what the server stored:
    /// usage per subscriber and the state of each session. Exits non-zero
    /// on any acknowledged change lost or any usage counted twice.
    Verify(VerifyArgs),
    /// Misbehave as a Diameter peer (flap, stall, half messages, flood) for
    /// --duration, then print what happened as JSON: the chaos suite runs it
    /// beside a well-behaved `run`.
    Misbehave(MisbehaveArgs),
}

#[derive(Args, Clone)]
struct Common {
    /// Scenario file (TOML).
    #[arg(long, default_value = "bench/scenarios/seed.toml")]
    scenario: PathBuf,
    /// The server's Diameter address.
    #[arg(long, default_value = "127.0.0.1:3868")]
    target: String,
    /// Emulated P-GWs (one Diameter connection each).
    #[arg(long, default_value_t = 4)]
    peers: usize,
    /// Measured time.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    duration: Duration,
    /// Sent but not measured first (default: the scenario's longest hold
    /// time in open loop, so the mix is steady; 1s in closed loop).
    #[arg(long, value_parser = parse_duration)]
    warmup: Option<Duration>,
    /// Answer timeout (default: the scenario's).
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Apdex T for a command, e.g. --apdex CCR-I=5ms (repeatable).
    #[arg(long = "apdex", value_name = "CMD=T")]
    apdex: Vec<String>,
    /// Subscribers in the population (default: the scenario's).
    #[arg(long)]
    subscribers: Option<u64>,
    /// Account this server process's CPU (repeatable: the nodes of a
    /// cluster are accounted together).
    #[arg(long)]
    server_pid: Vec<u32>,
    /// Account the CPU of the processes with this name (when no --server-pid).
    #[arg(long)]
    server_name: Option<String>,
    /// Account these database processes' CPU (repeatable).
    #[arg(long)]
    db_pid: Vec<u32>,
    /// Account the CPU of database processes with this name (e.g. postgres).
    #[arg(long)]
    db_name: Option<String>,
    /// Count the server's store commits over the measured window from its
    /// metrics (http://host:port/metrics of `pcrf serve`).
    #[arg(long, value_name = "URL")]
    server_metrics: Option<String>,
    /// Provision the population through this REST API first (http://host:port).
    #[arg(long, value_name = "URL")]
    provision: Option<String>,
    /// RFC 3539 watchdog interval of the emulated gateways.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    watchdog: Duration,
    /// Seed of the session mix, hold times and volumes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON on stdout (the summary goes to stderr).
    #[arg(long)]
    json: bool,
    /// Also write the JSON report to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Resend a request that timed out, lost its connection or got 3002
    /// (DIAMETER_UNABLE_TO_DELIVER, from a routing agent), with the T flag
    /// and the same End-to-End Identifier and CC-Request-Number, up to this
    /// many times, as a PCEF does; gateways then also reconnect fast
    /// (100 ms, at most 2 s apart). 0: never (the benchmark's default).
    #[arg(long, default_value_t = 0)]
    retransmit: u32,
    /// With --retransmit: the longest wait for the connection to be open
    /// again before a resend.
    #[arg(long, value_parser = parse_duration, default_value = "5s")]
    retransmit_wait: Duration,
    /// Write every request's final outcome as a JSON line here (session,
    /// IMSI, command, request number, result, octets, tries), for `verify`.
    #[arg(long, value_name = "FILE")]
    answer_log: Option<PathBuf>,
    /// Open loop: write a CSV row every --series-every (requests finished,
    /// latency percentiles of that interval, the RSS of the first
    /// --server-pid), for soaks.
    #[arg(long, value_name = "FILE")]
    series: Option<PathBuf>,
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    series_every: Duration,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    common: Common,
    /// Open loop: requests per second (all commands together).
    #[arg(long, conflicts_with = "max", required_unless_present = "max")]
    rate: Option<f64>,
    /// Closed loop: as fast as answers come, --concurrency sessions at once.
    #[arg(long)]
    max: bool,
    /// Closed loop: sessions (= requests in flight) at once.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// With a scenario that kills a node (`[cluster]`): also write what the
    /// gateways saw around the kill as JSON here.
    #[arg(long, value_name = "FILE")]
    failover_out: Option<PathBuf>,
}

#[derive(Args)]
struct VolteArgs {
    #[command(flatten)]
    common: Common,
    /// New calls per second (open loop).
    #[arg(long)]
    calls_per_second: f64,
}

#[derive(Args)]
struct N7Args {
    #[command(flatten)]
    common: Common,
    /// The PCF's SBI (HTTP/2, h2c) address.
    #[arg(long, default_value = "127.0.0.1:7777")]
    sbi: String,
    /// Open loop: requests per second (Create, Update, Delete together).
    #[arg(long)]
    rate: f64,
}

#[derive(Args)]
struct VonrArgs {
    #[command(flatten)]
    common: Common,
    /// The PCF's SBI (HTTP/2, h2c) address: N7 and N5.
    #[arg(long, default_value = "127.0.0.1:7777")]
    sbi: String,
    /// New calls per second (open loop).
    #[arg(long)]
    calls_per_second: f64,
}

#[derive(Args)]
struct ZeroLossArgs {
    #[command(flatten)]
    common: Common,
    /// The lowest rate tried.
    #[arg(long)]
    min: f64,
    /// The highest rate tried (the search starts at --min and doubles the
    /// rate after every trial that passes, up to this, until one fails).
    #[arg(long)]
    max: f64,
    /// A trial fails when its p99 latency is above this.
    #[arg(long, value_parser = parse_duration, default_value = "10ms")]
    p99_bound: Duration,
    /// A trial fails when it answers (with success) less than this share
    /// of the rate it offered.
    #[arg(long, default_value_t = 0.99)]
    min_achieved: f64,
    /// Stop when the bracket is narrower than this share of its low end.
    #[arg(long, default_value_t = 0.02)]
    resolution: f64,
    /// At most this many trials.
    #[arg(long, default_value_t = 12)]
    max_trials: usize,
    /// Quiet time between trials.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    pause: Duration,
    /// Quiet time after a failed trial (an overload leaves the server and
    /// its database work to catch up on: queues, checkpoints, vacuum).
    #[arg(long, value_parser = parse_duration, default_value = "15s")]
    recovery: Duration,
}

#[derive(Args)]
struct EchoArgs {
    /// Address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:3868")]
    listen: String,
    #[arg(long, default_value = "echo.pcrf.test")]
    origin_host: String,
    #[arg(long, default_value = "pcrf.test")]
    origin_realm: String,
}

#[derive(Args)]
struct OcsArgs {
    /// Address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:3870")]
    listen: String,
    #[arg(long, default_value = "ocs.bench.test")]
    origin_host: String,
    #[arg(long, default_value = "bench.test")]
    origin_realm: String,
    /// A policy counter: ID=STATUS[,STATUS...] (repeatable). SLAs report
    /// the first status; SNRs move through the others.
    #[arg(
        long = "counter",
        value_name = "ID=STATUSES",
        default_value = "data-cap=valid,limit-reached"
    )]
    counters: Vec<String>,
    /// SNRs per second, spread over the open sessions (0: none).
    #[arg(long, default_value_t = 0.0)]
    snr_rate: f64,
    /// Stop after this long (default: at SIGINT or SIGTERM).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
}

#[derive(Args)]
struct MisbehaveArgs {
    #[arg(long, value_enum)]
    mode: pcrf_bench::misbehave::Mode,
    /// The server's Diameter address.
    #[arg(long, default_value = "127.0.0.1:3868")]
    target: String,
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    duration: Duration,
    /// Our Origin-Host (the server must allow it as a peer).
    #[arg(long, default_value = "bad-1.bench.test")]
    origin_host: String,
    #[arg(long, default_value = "bench.test")]
    origin_realm: String,
    #[arg(long, default_value = "pcrf.test")]
    destination_realm: String,
    /// Subscribers (the seed scenario's population) used in CCR-Is.
    #[arg(long, default_value = "bench/scenarios/seed.toml")]
    scenario: PathBuf,
    #[arg(long)]
    subscribers: Option<u64>,
    /// The REST API (stall: asks the server for RARs through it).
    #[arg(long, value_name = "URL")]
    api: Option<String>,
    /// Half: connections; stall: sessions.
    #[arg(long, default_value_t = 20)]
    count: usize,
    /// Flood: at most this many requests.
    #[arg(long, default_value_t = 1_000_000)]
    max_requests: u64,
}

#[derive(Args)]
struct VerifyArgs {
    /// The answer log written by `run --answer-log`.
    #[arg(long, value_name = "FILE")]
    answer_log: PathBuf,
    /// The server's REST API (http://host:port).
    #[arg(long, value_name = "URL")]
    api: String,
    /// Bearer token of the API (when `[api] token` is set).
    #[arg(long, env = "PCRF_API_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The accumulator that sums the reported octets.
    #[arg(long, default_value = "monthly")]
    accumulator: String,
    /// API connections used at once.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Also write the verdict as JSON here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args)]
struct ProvisionArgs {
    #[arg(long, default_value = "bench/scenarios/seed.toml")]
    scenario: PathBuf,
    /// The REST API (http://host:port).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    api: String,
    #[arg(long)]
    subscribers: Option<u64>,
    /// Connections used at once.
    #[arg(long, default_value_t = PROVISION_CONNECTIONS)]
    connections: usize,
}

/// The server answers a connection's PUTs one after another, each
/// after its commit: with a group-commit window (20 ms on PostgreSQL) four
/// connections provisioned 177 subscribers a second; 32 keep the window full.
const PROVISION_CONNECTIONS: usize = 32;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pcrf-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(dispatch(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pcrf-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(cmd: Cmd) -> Result<(), String> {
    match cmd {
        Cmd::Run(a) => run(a).await,
        Cmd::ZeroLoss(a) => zero_loss(a).await,
        Cmd::Volte(a) => volte(a).await,
        Cmd::N7(a) => n7(a).await,
        Cmd::Vonr(a) => vonr(a).await,
        Cmd::EchoServer(a) => echo(a).await,
        Cmd::Ocs(a) => ocs(a).await,
        Cmd::Provision(a) => provision_only(a).await,
        Cmd::Verify(a) => verify(a).await,
        Cmd::Misbehave(a) => misbehave(a).await,
    }
}

fn load_scenario(path: &Path, subscribers: Option<u64>) -> Result<Scenario, String> {
    let mut s = Scenario::load(path).map_err(|e| e.to_string())?;
    if let Some(n) = subscribers {
        s.population = s
            .population
            .with_count(n)
            .map_err(|e| format!("--subscribers: {e}"))?;
    }
    Ok(s)
}

/// The scenario with the command line's overrides, the gateways' options
/// and the CPU targets; provisions first when asked.
async fn setup(c: &Common) -> Result<RunSetup, String> {
    let scenario = load_scenario(&c.scenario, c.subscribers)?;
    if scenario.has_volte() {
        return Err(format!(
            "{} has VoLTE flows: run it with `pcrf-bench volte`",
            c.scenario.display()
        ));
    }
    setup_scenario(c, scenario).await
}

/// [`setup`] for a scenario already loaded.
async fn setup_scenario(c: &Common, mut scenario: Scenario) -> Result<RunSetup, String> {
    if let Some(t) = c.timeout {
        scenario.timeout = t;
    }
    for a in &c.apdex {
        let (cmd, t) = a
            .split_once('=')
            .ok_or_else(|| format!("--apdex {a:?}: write CMD=T, e.g. CCR-I=5ms"))?;
        let t = parse_duration(t).map_err(|e| format!("--apdex {a:?}: {e}"))?;
        if t.is_zero() {
            return Err(format!("--apdex {a:?}: T must be above zero"));
        }
        match cmd {
            "CCR-I" => scenario.apdex.ccr_i = t,
            "CCR-U" => scenario.apdex.ccr_u = t,
            "CCR-T" => scenario.apdex.ccr_t = t,
            "AAR" => scenario.apdex.aar = t,
            "STR" => scenario.apdex.str = t,
            "CALL-SETUP" => scenario.apdex.call_setup = t,
            _ => {
                return Err(format!(
                    "--apdex {a:?}: unknown command (CCR-I, CCR-U, CCR-T, AAR, STR, CALL-SETUP)"
                ))
            }
        }
    }
    let target = resolve(&c.target).await?;
    if let Some(url) = &c.provision {
        let base = BaseUrl::parse(url).map_err(|e| e.to_string())?;
        let r = provision(
            &base,
            &scenario.population,
            &scenario.provision,
            PROVISION_CONNECTIONS,
        )
        .await
        .map_err(|e| format!("provisioning through {url}: {e}"))?;
        eprintln!(
            "provisioned {} of {} subscribers in {:.1} s ({:.0}/s){}",
            r.succeeded,
            r.subscribers,
            r.elapsed_s,
            r.per_second,
            if r.failed > 0 {
                format!("; {} failed, first: {:?}", r.failed, r.first_errors)
            } else {
                String::new()
            }
        );
        if r.failed > 0 {
            return Err("provisioning failed for some subscribers".into());
        }
    }
    Ok(RunSetup {
        pcef: PcefOptions {
            target,
            peers: c.peers,
            request_timeout: scenario.timeout,
            watchdog: c.watchdog,
            connect_timeout: Duration::from_secs(5),
        },
        scenario: Arc::new(scenario),
        cpu: CpuTargets {
            server_pids: c.server_pid.clone(),
            server_name: c.server_name.clone(),
            db_pids: c.db_pid.clone(),
            db_name: c.db_name.clone(),
            server_metrics: c.server_metrics.clone(),
        },
        progress: !c.json,
    })
}

async fn resolve(target: &str) -> Result<SocketAddr, String> {
    tokio::net::lookup_host(target)
        .await
        .map_err(|e| format!("--target {target}: {e}"))?
        .next()
        .ok_or_else(|| format!("--target {target}: no address"))
}

/// Prints the report: JSON on stdout with `--json` (summary on stderr),
/// the summary on stdout otherwise; `--out` also writes the JSON.
fn emit<T: Serialize>(c: &Common, report: &T, summary: &str) -> Result<(), String> {
    let json = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
    if let Some(path) = &c.out {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::write(path, format!("{json}\n"))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if c.json {
        eprint!("{summary}");
        println!("{json}");
    } else {
        print!("{summary}");
    }
    Ok(())
}

/// Retransmission, answer log and series from the command line.
fn extras(c: &Common) -> Result<RunExtras, String> {
    Ok(RunExtras {
        delivery: Arc::new(Delivery::new(
            Retransmit {
                max_retries: c.retransmit,
                wait_open: c.retransmit_wait,
            },
            match &c.answer_log {
                Some(p) => Some(AnswerLog::create(p)?),
                None => None,
            },
        )),
        series: c.series.as_ref().map(|p| SeriesSpec {
            path: p.clone(),
            every: c.series_every,
            // The first server process's memory.
            rss_pid: c.server_pid.first().copied(),
        }),
    })
}

async fn run(a: RunArgs) -> Result<(), String> {
    let setup = setup(&a.common).await?;
    let extras = extras(&a.common)?;
    let c = &a.common;
    let load = match a.rate {
        Some(rate) if !(rate.is_finite() && rate > 0.0) => {
            return Err(format!("--rate must be above zero, not {rate}"))
        }
        Some(rate) => Load::Open(OpenLoop {
            rate,
            warmup: c.warmup.unwrap_or_else(|| setup.scenario.max_hold()),
            duration: c.duration,
            seed: c.seed,
        }),
        None => Load::Closed(ClosedLoop {
            concurrency: a.concurrency,
            warmup: c.warmup.unwrap_or(Duration::from_secs(1)),
            duration: c.duration,
            seed: c.seed,
        }),
    };
    // The cluster scenario kills a node during the run; the answer log
    // says what the gateways saw around it.
    let kill = match (&setup.scenario.node_kill, &c.answer_log) {
        (None, _) => None,
        (Some(_), None) => return Err("the scenario's [cluster] section needs --answer-log".into()),
        (Some(k), Some(log)) => Some((
            k.command.clone(),
            log.clone(),
            tokio::spawn(failover::kill_at(k.clone(), std::time::Instant::now())),
        )),
    };
    let report = measure_with(&setup, load, &extras).await;
    let logged = finish_log(&extras);
    let report = report?;
    emit(c, &report, &report.summary())?;
    logged?;
    let Some((command, log, task)) = kill else {
        return Ok(());
    };
    if !task.is_finished() {
        task.abort();
        return Err("the run ended before the scenario's [cluster] kill_at".into());
    }
    let killed_at = task.await.map_err(|e| e.to_string())??;
    let f = failover::FailoverReport::of(&load_log(&log)?, killed_at, &command);
    if c.json {
        eprint!("{}", f.summary());
    } else {
        print!("{}", f.summary());
    }
    if let Some(path) = &a.failover_out {
        let json = serde_json::to_string_pretty(&f).map_err(|e| e.to_string())?;
        std::fs::write(path, format!("{json}\n"))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Closes the answer log; says how many lines it has.
fn finish_log(extras: &RunExtras) -> Result<(), String> {
    if let Some(log) = &extras.delivery.log {
        let n = log.finish()?;
        eprintln!("answer log: {n} requests");
    }
    Ok(())
}

async fn misbehave(a: MisbehaveArgs) -> Result<(), String> {
    let scenario = load_scenario(&a.scenario, a.subscribers)?;
    let opts = pcrf_bench::misbehave::Options {
        target: resolve(&a.target).await?,
        mode: a.mode,
        duration: a.duration,
        origin_host: a.origin_host,
        origin_realm: a.origin_realm,
        destination_realm: a.destination_realm,
        population: scenario.population.clone(),
        api: match &a.api {
            Some(u) => Some(BaseUrl::parse(u).map_err(|e| e.to_string())?),
            None => None,
        },
        count: a.count,
        max_requests: a.max_requests,
    };
    let r = pcrf_bench::misbehave::run(&opts).await;
    println!(
        "{}",
        serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?
    );
    Ok(())
}

async fn verify(a: VerifyArgs) -> Result<(), String> {
    let records = load_log(&a.answer_log)?;
    let api = Api {
        base: BaseUrl::parse(&a.api).map_err(|e| e.to_string())?,
        token: a.token.clone(),
        connections: a.connections,
        accumulator: a.accumulator.clone(),
    };
    let v = verify::verify(&records, &api).await?;
    print!("{}", v.summary());
    if let Some(path) = &a.out {
        let json = serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?;
        std::fs::write(path, format!("{json}\n"))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if v.passed() {
        Ok(())
    } else {
        Err("verify: acknowledged changes lost or usage counted twice (see above)".into())
    }
}

async fn zero_loss(a: ZeroLossArgs) -> Result<(), String> {
    if !(a.min_achieved > 0.0 && a.min_achieved <= 1.0) {
        return Err(format!(
            "--min-achieved must be in (0, 1], not {}",
            a.min_achieved
        ));
    }
    let c = &a.common;
    if c.retransmit > 0 || c.answer_log.is_some() || c.series.is_some() {
        return Err("--retransmit, --answer-log and --series are for `run`, not zero-loss".into());
    }
    let setup = setup(c).await?;
    let settings = SearchSettings {
        min: a.min,
        max: a.max,
        warmup: c.warmup.unwrap_or_else(|| setup.scenario.max_hold()),
        duration: c.duration,
        criteria: Criteria {
            p99_bound: a.p99_bound,
            min_achieved_ratio: a.min_achieved,
        },
        resolution: a.resolution,
        max_trials: a.max_trials,
        pause: a.pause,
        recovery: a.recovery,
        seed: c.seed,
    };
    let report = search(&setup, settings, |line| eprintln!("{line}")).await?;
    emit(c, &report, &report.summary())
}

async fn volte(a: VolteArgs) -> Result<(), String> {
    let c = &a.common;
    if c.retransmit > 0 || c.answer_log.is_some() || c.series.is_some() {
        return Err("--retransmit, --answer-log and --series are for `run`, not volte".into());
    }
    if !c.server_pid.is_empty()
        || c.server_name.is_some()
        || !c.db_pid.is_empty()
        || c.db_name.is_some()
        || c.server_metrics.is_some()
    {
        return Err("volte does not account CPU or commits; measure them with `run`".into());
    }
    if c.warmup.is_some() {
        return Err("volte measures every call it starts: no --warmup".into());
    }
    let scenario = load_scenario(&c.scenario, c.subscribers)?;
    let setup = setup_scenario(c, scenario).await?;
    let report = pcrf_bench::volte::run(
        setup.scenario.clone(),
        &setup.pcef,
        VolteLoad {
            calls_per_second: a.calls_per_second,
            duration: c.duration,
            seed: c.seed,
        },
    )
    .await?;
    emit(c, &report, &report.summary())
}

async fn n7(a: N7Args) -> Result<(), String> {
    let c = &a.common;
    if c.retransmit > 0 || c.answer_log.is_some() || c.series.is_some() {
        return Err("--retransmit, --answer-log and --series are for `run`, not n7".into());
    }
    if !c.db_pid.is_empty() || c.db_name.is_some() || c.server_metrics.is_some() {
        return Err("n7 accounts the server's CPU only (--server-pid, --server-name)".into());
    }
    let scenario = load_scenario(&c.scenario, c.subscribers)?;
    if scenario.has_volte() {
        return Err(format!(
            "{} has VoLTE flows; n7 runs data sessions",
            c.scenario.display()
        ));
    }
    let setup = setup_scenario(c, scenario).await?;
    let mut server_pids = c.server_pid.clone();
    if server_pids.is_empty() {
        if let Some(name) = &c.server_name {
            server_pids = pcrf_bench::cpu::find_pids_by_name(name).map_err(|e| e.to_string())?;
        }
    }
    let load = pcrf_bench::smf::N7Load {
        sbi: a.sbi.clone(),
        rate: a.rate,
        warmup: c.warmup.unwrap_or_else(|| setup.scenario.max_hold()),
        duration: c.duration,
        smfs: c.peers,
        seed: c.seed,
        server_pids,
    };
    let report = pcrf_bench::smf::run(setup.scenario.clone(), &load).await?;
    emit(c, &report, &report.summary())
}

async fn vonr(a: VonrArgs) -> Result<(), String> {
    let c = &a.common;
    if c.retransmit > 0 || c.answer_log.is_some() || c.series.is_some() {
        return Err("--retransmit, --answer-log and --series are for `run`, not vonr".into());
    }
    if !c.db_pid.is_empty() || c.db_name.is_some() || c.server_metrics.is_some() {
        return Err("vonr accounts the server's CPU only (--server-pid, --server-name)".into());
    }
    if c.warmup.is_some() {
        return Err("vonr measures every call it starts: no --warmup".into());
    }
    let scenario = load_scenario(&c.scenario, c.subscribers)?;
    let setup = setup_scenario(c, scenario).await?;
    let mut server_pids = c.server_pid.clone();
    if server_pids.is_empty() {
        if let Some(name) = &c.server_name {
            server_pids = pcrf_bench::cpu::find_pids_by_name(name).map_err(|e| e.to_string())?;
        }
    }
    let load = pcrf_bench::vonr::VonrLoad {
        sbi: a.sbi.clone(),
        calls_per_second: a.calls_per_second,
        duration: c.duration,
        smfs: c.peers,
        seed: c.seed,
        server_pids,
    };
    let report = pcrf_bench::vonr::run(setup.scenario.clone(), &load).await?;
    emit(c, &report, &report.summary())
}

async fn ocs(a: OcsArgs) -> Result<(), String> {
    let mut table = pcrf_bench::ocs::CounterTable::default();
    for c in &a.counters {
        table.add(c)?;
    }
    if !(a.snr_rate.is_finite() && a.snr_rate >= 0.0) {
        return Err(format!("--snr-rate must be 0 or above, not {}", a.snr_rate));
    }
    let node = pcrf_bench::ocs::node(&a.origin_host, &a.origin_realm, table);
    let server = node
        .listen(&a.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", a.listen))?;
    let addr = server.local_addr().map_err(|e| e.to_string())?;
    println!("listening on {addr}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let ocs = node.handler().clone();
    let stop = async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let until = async {
            match a.duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let signalled = async {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = until => {}
                _ = async {
                    match term.as_mut() {
                        Some(t) => { t.recv().await; }
                        None => std::future::pending::<()>().await,
                    }
                } => {}
            }
        };
        ocs.notify_until(a.snr_rate, signalled).await;
    };
    server.run(stop).await.map_err(|e| e.to_string())?;
    let counts = node.handler().counts();
    println!(
        "{}",
        serde_json::to_string_pretty(&counts).map_err(|e| e.to_string())?
    );
    Ok(())
}

async fn echo(a: EchoArgs) -> Result<(), String> {
    let node = echo_server::node(&a.origin_host, &a.origin_realm);
    let server = node
        .listen(&a.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", a.listen))?;
    let addr = server.local_addr().map_err(|e| e.to_string())?;
    // Scripts and tests read this line to learn the port.
    println!("listening on {addr}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let shutdown = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async {
                match term.as_mut() {
                    Some(t) => { t.recv().await; }
                    None => std::future::pending::<()>().await,
                }
            } => {}
        }
    };
    server.run(shutdown).await.map_err(|e| e.to_string())?;
    eprintln!(
        "echo-server: answered {} CCRs",
        node.handler()
            .answered
            .load(std::sync::atomic::Ordering::Relaxed)
    );
    Ok(())
}

async fn provision_only(a: ProvisionArgs) -> Result<(), String> {
    let scenario = load_scenario(&a.scenario, a.subscribers)?;
    let base = BaseUrl::parse(&a.api).map_err(|e| e.to_string())?;
    let r = provision(
        &base,
        &scenario.population,
        &scenario.provision,
        a.connections,
    )
    .await
    .map_err(|e| format!("provisioning through {}: {e}", a.api))?;
    println!(
        "{}",
        serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?
    );
    if r.failed > 0 {
        return Err(format!("{} subscribers failed", r.failed));
    }
    Ok(())
}
