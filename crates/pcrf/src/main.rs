//! `pcrf`: the server and its admin commands.

mod import;
mod stored_record;

/// glibc's malloc took about a third of the server's CPU under load (the
/// per-request maps, strings and Lua tables; its consolidation of freed
/// chunks across two worker threads); mimalloc's per-thread free lists
/// make those allocations cheap. BENCHMARKS.md has the side-by-side figures.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::{Parser, Subcommand};
use pcrf::config::Config;
use std::path::PathBuf;
use std::process::ExitCode;

/// A software-only 3GPP PCRF: Gx sessions decided by a hot-reloadable Lua policy.
#[derive(Parser)]
#[command(name = "pcrf", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the PCRF: Diameter (Gx) on 0.0.0.0:3868 and the HTTP API on
    /// 127.0.0.1:8080 by default. Without --config it runs on built-in
    /// defaults (embedded store in ./pcrf-data, policies/default.lua) and
    /// accepts any Diameter peer (development mode).
    Serve {
        /// Configuration file (TOML); see config/pcrf.example.toml.
        #[arg(long, short, env = "PCRF_CONFIG")]
        config: Option<PathBuf>,
        /// The policy script, instead of the configuration's [policy].path
        /// (also across SIGHUP reloads); e.g. a copy to edit and try.
        #[arg(long)]
        policy: Option<PathBuf>,
        /// Start although the embedded store's files are not one whole
        /// store (a shard file missing, one of another store, rows left
        /// past the shards): go on with the rows that remain. Refused
        /// without it; see docs/durability.md.
        #[arg(long)]
        accept_missing_shards: bool,
    },
    /// Validate a configuration file and the policy it names; print every
    /// error with its location. Exit status 0 when valid.
    CheckConfig {
        /// Configuration file (TOML).
        file: PathBuf,
    },
    /// Policy tools.
    Policy {
        #[command(subcommand)]
        command: PolicyCmd,
    },
    /// Subscriber provisioning tools.
    Subscribers {
        #[command(subcommand)]
        command: SubscribersCmd,
    },
    /// Database tools (the PostgreSQL store).
    Db {
        #[command(subcommand)]
        command: DbCmd,
    },
    /// Look inside a PCRF: a running one through its HTTP API, or one
    /// record of its store printed as JSON.
    Debug {
        /// The API's address.
        #[arg(long, default_value = "127.0.0.1:8080", global = true)]
        api: std::net::SocketAddr,
        /// Bearer token, when the API requires one.
        #[arg(long, env = "PCRF_API_TOKEN", global = true)]
        token: Option<String>,
        #[command(subcommand)]
        command: DebugCmd,
    },
    /// Clients for trying a PCRF by hand: a PCEF over Gx, an SMF over N7.
    Client {
        #[command(subcommand)]
        command: ClientCmd,
    },
    /// Decode Diameter messages for humans: a hex string, a file of hex,
    /// or a pcap capture (TCP port any; messages reassembled per stream).
    Decode {
        /// Hex of one message (spaces and newlines allowed).
        #[arg(long, conflicts_with = "file")]
        hex: Option<String>,
        /// A .pcap file, or a text file holding hex.
        file: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum SubscribersCmd {
    /// Provision every profile of a file through the API's batch endpoint:
    /// CSV (header row; columns imsi, msisdn, plan, services separated by
    /// ';', billing_day, quota.<accumulator>) or JSON lines (.jsonl,
    /// .ndjson; one profile per line). The whole file is validated first:
    /// a bad file imports nothing. Exit status 0 when all were imported,
    /// 2 for a bad file, 1 when the API failed midway.
    Import {
        /// The file: .csv, .jsonl or .ndjson.
        file: PathBuf,
        /// The API's base URL.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        api: String,
        /// Bearer token, when the API requires one.
        #[arg(long, env = "PCRF_API_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// For an https --api: the CA certificate(s), PEM, that the API's
        /// certificate must chain to.
        #[arg(long)]
        api_ca: Option<PathBuf>,
        /// Profiles per batch request (one store transaction each).
        #[arg(long, default_value_t = 10_000,
              value_parser = clap::value_parser!(u32).range(1..=100_000))]
        batch: u32,
    },
}

#[derive(Subcommand)]
enum DbCmd {
    /// Create or upgrade the PostgreSQL schema to this version's, then exit.
    /// The URL comes from PCRF_DATABASE_URL or the config's [store].url.
    Migrate {
        #[arg(long, short, env = "PCRF_CONFIG")]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum DebugCmd {
    /// The query profiler's table: per statement calls, calls/s, execution
    /// and fetch time, rows and share of database time (PostgreSQL store).
    Queries {
        #[arg(long, default_value_t = 15)]
        top: usize,
    },
    /// Switch the query profiler on (a new window) or off.
    QueryProfiler {
        #[arg(value_parser = ["on", "off"])]
        state: String,
    },
    /// Print a stored session record as JSON, read from the store the
    /// configuration names (not through the API; the embedded store only
    /// while no pcrf has it open). Exit status 1 when there is none.
    Session {
        /// The Session-Id.
        id: String,
        #[arg(long, short, env = "PCRF_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Print a subscriber's stored usage record as JSON (as `session`).
    Usage {
        /// The subscriber key (IMSI, or MSISDN when no IMSI is known).
        subscriber: String,
        #[arg(long, short, env = "PCRF_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Print a stored subscriber profile as JSON (as `session`).
    Subscriber {
        imsi: String,
        #[arg(long, short, env = "PCRF_CONFIG")]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ClientCmd {
    /// Open a Gx session as a PCEF would (CCR-I), print the CCA decoded,
    /// send CCR-Us (with usage reports when asked), answer and print RARs
    /// while holding, then end the session with a CCR-T. Ctrl-C or SIGTERM
    /// ends it at once (CCR-T, then exit); a DPR from the PCRF is answered
    /// with DPA and ends the client. Exit status 0 unless a request failed.
    Gx {
        /// The PCRF's Diameter address.
        #[arg(long, default_value = "127.0.0.1:3868")]
        server: std::net::SocketAddr,
        /// Our Origin-Host (must be an allowed peer when the PCRF has a config).
        #[arg(long, default_value = "pgw.localdomain")]
        origin_host: String,
        #[arg(long, default_value = "localdomain")]
        origin_realm: String,
        #[arg(long)]
        imsi: String,
        #[arg(long)]
        msisdn: Option<String>,
        #[arg(long, default_value = "internet")]
        apn: String,
        #[arg(long, default_value = "10.45.0.2")]
        ue_ip: std::net::Ipv4Addr,
        /// CCR-U messages to send after the CCR-I, one a second.
        #[arg(long, default_value_t = 0)]
        updates: u32,
        /// Usage each CCR-U reports for a Monitoring-Key, as KEY=SIZE
        /// (e.g. total=100MB; SIZE as in the usage file: kB, MB, GB, TB
        /// powers of 1000, KiB, MiB, GiB, TiB of 1024, or octets).
        /// Repeatable. Sent as Used-Service-Unit: CC-Total-Octets SIZE, a
        /// tenth uplink (CC-Input-Octets), the rest downlink
        /// (CC-Output-Octets); with the Usage-Monitoring-Level the PCRF
        /// granted the key at. Needs --updates.
        #[arg(long = "report", value_name = "KEY=SIZE")]
        reports: Vec<pcrf::client::UsageToReport>,
        /// Seconds to stay connected (RARs are answered and shown) before
        /// the CCR-T.
        #[arg(long, default_value_t = 0)]
        hold: u64,
        /// Exit without a CCR-T, leaving the session open in the PCRF (end
        /// it with DELETE /v1/sessions/ID); Ctrl-C then only disconnects.
        #[arg(long)]
        keep_session: bool,
        /// Connect over TLS (RFC 6733 TLS on connect) with this certificate
        /// chain (PEM); needs --tls-key and --tls-ca.
        #[arg(long, requires_all = ["tls_key", "tls_ca"])]
        tls_cert: Option<std::path::PathBuf>,
        /// The certificate's private key (PEM).
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<std::path::PathBuf>,
        /// The CA (PEM) the PCRF's certificate must chain to.
        #[arg(long, requires = "tls_cert")]
        tls_ca: Option<std::path::PathBuf>,
        /// The name the PCRF's certificate must carry (its Origin-Host).
        #[arg(long, default_value = "pcrf.localdomain")]
        tls_server_host: String,
    },
    /// Create an SM policy as a 5G SMF would (Npcf_SMPolicyControl
    /// Create over HTTP/2, TS 29.512), print the decision, send Updates
    /// (with usage reports when asked), print the PCF's notifications
    /// (answered 204) while holding, then Delete it. The notifications
    /// come to our own h2c server, named in the Create's notificationUri;
    /// a TerminationNotification ends the client (with the Delete).
    /// Ctrl-C or SIGTERM deletes at once, then exits. Exit status 0 unless
    /// a request failed or the PCF could not be reached.
    N7 {
        /// The PCF's SBI address (host:port; [sbi].listen of its config).
        #[arg(long, default_value = "127.0.0.1:7777")]
        server: String,
        /// The subscriber, e.g. imsi-001010000000001.
        #[arg(long)]
        supi: String,
        /// e.g. msisdn-491700000001.
        #[arg(long)]
        gpsi: Option<String>,
        #[arg(long, default_value = "internet")]
        dnn: String,
        #[arg(long, default_value = "10.45.0.2")]
        ue_ip: std::net::Ipv4Addr,
        /// The slice's SST.
        #[arg(long, default_value_t = 1)]
        sst: u8,
        /// The slice's SD, six hex digits.
        #[arg(long, value_parser = pcrf::client_n7::parse_sd)]
        sd: Option<String>,
        /// The RAT type (NR, EUTRA, ...).
        #[arg(long, default_value = "NR")]
        rat: String,
        /// Updates to send after the Create, one a second.
        #[arg(long, default_value_t = 0)]
        updates: u32,
        /// Usage each Update reports for a usage monitoring key, as
        /// KEY=SIZE (e.g. total=100MB; SIZE as for `client gx`).
        /// Repeatable. Sent as an AccuUsageReport: refUmIds KEY, volUsage
        /// SIZE, a tenth uplink, the rest downlink. Needs --updates.
        #[arg(long = "report", value_name = "KEY=SIZE")]
        reports: Vec<pcrf::client::UsageToReport>,
        /// Seconds to wait (notifications are answered and shown) before
        /// the Delete.
        #[arg(long, default_value_t = 0)]
        hold: u64,
        /// Exit without a Delete, leaving the SM policy in the PCF;
        /// Ctrl-C then only exits.
        #[arg(long)]
        keep_session: bool,
        /// Where our notification server listens; its address is sent as
        /// the notificationUri, so the PCF must reach it.
        #[arg(long, default_value = "127.0.0.1:0")]
        notify_listen: std::net::SocketAddr,
    },
}

#[derive(Subcommand)]
enum PolicyCmd {
    /// Run a policy against test cases offline; print pass/fail per case.
    /// Exit status 0 when every case passes.
    Test {
        /// The Lua policy script.
        policy: PathBuf,
        /// The cases (TOML); see policies/default.cases.toml.
        cases: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Serve {
            config,
            policy,
            accept_missing_shards,
        } => serve(config, policy, accept_missing_shards),
        Cmd::CheckConfig { file } => check_config(&file),
        Cmd::Policy {
            command: PolicyCmd::Test { policy, cases },
        } => match pcrf::policy::cases::run(&policy, &cases) {
            Ok(report) => {
                println!("{report}");
                if report.passed() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Cmd::Decode { hex, file } => decode(hex, file),
        Cmd::Db {
            command: DbCmd::Migrate { config },
        } => db_migrate(config),
        Cmd::Subscribers {
            command:
                SubscribersCmd::Import {
                    file,
                    api,
                    token,
                    api_ca,
                    batch,
                },
        } => import_subscribers(import::ImportOptions {
            file,
            api,
            token,
            api_ca,
            batch: batch as usize,
        }),
        Cmd::Debug {
            api,
            token,
            command,
        } => debug(api, token.as_deref(), command),
        Cmd::Client {
            command:
                ClientCmd::Gx {
                    server,
                    origin_host,
                    origin_realm,
                    imsi,
                    msisdn,
                    apn,
                    ue_ip,
                    updates,
                    reports,
                    hold,
                    keep_session,
                    tls_cert,
                    tls_key,
                    tls_ca,
                    tls_server_host,
                },
        } => {
            if !reports.is_empty() && updates == 0 {
                eprintln!("error: --report is sent in CCR-U: give --updates N too");
                return ExitCode::from(2);
            }
            let tls = match (tls_cert, tls_key, tls_ca) {
                (Some(certificate), Some(private_key), Some(ca)) => {
                    Some(pcrf::client::GxClientTls {
                        certificate,
                        private_key,
                        ca,
                        server_host: tls_server_host,
                    })
                }
                _ => None,
            };
            let opts = pcrf::client::GxClientOptions {
                server,
                origin_host,
                origin_realm,
                imsi,
                msisdn,
                apn,
                ue_ip,
                updates,
                reports,
                hold: std::time::Duration::from_secs(hold),
                keep_session,
            };
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match rt.block_on(async {
                let interrupt = client_interrupt()?;
                pcrf::client::run(opts, tls, interrupt).await
            }) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::Client {
            command:
                ClientCmd::N7 {
                    server,
                    supi,
                    gpsi,
                    dnn,
                    ue_ip,
                    sst,
                    sd,
                    rat,
                    updates,
                    reports,
                    hold,
                    keep_session,
                    notify_listen,
                },
        } => {
            if !reports.is_empty() && updates == 0 {
                eprintln!("error: --report is sent in Updates: give --updates N too");
                return ExitCode::from(2);
            }
            let opts = pcrf::client_n7::N7ClientOptions {
                server,
                supi,
                gpsi,
                dnn,
                ue_ip,
                sst,
                sd,
                rat,
                updates,
                reports,
                hold: std::time::Duration::from_secs(hold),
                keep_session,
                notify_listen,
            };
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match rt.block_on(async {
                let interrupt = client_interrupt()?;
                pcrf::client_n7::run(opts, interrupt).await
            }) {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM, for `client gx` and `client n7`.
/// The handlers are installed now, so a signal arriving before the client
/// waits is not lost (nor does it kill the client without its CCR-T or
/// Delete).
#[cfg(unix)]
fn client_interrupt() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let listen = |kind: SignalKind| signal(kind).map_err(|e| format!("cannot catch signals: {e}"));
    let mut int = listen(SignalKind::interrupt())?;
    let mut term = listen(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    })
}

#[cfg(not(unix))]
fn client_interrupt() -> Result<impl std::future::Future<Output = ()>, String> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

fn serve(path: Option<PathBuf>, policy: Option<PathBuf>, accept_missing_shards: bool) -> ExitCode {
    let cfg = match &path {
        Some(p) => match Config::load(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: invalid configuration:\n{e}");
                return ExitCode::from(2);
            }
        },
        None => Config::zero_config(),
    };
    let mut cfg = match policy {
        Some(p) => cfg.with_policy_path(p),
        None => cfg,
    };
    cfg.store.accept_missing_shards = accept_missing_shards;
    let log = match pcrf::logging::init(&cfg.log) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: logging: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(pcrf::server::run(
        cfg,
        Some(log),
        pcrf::server::shutdown_signal(),
    )) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "cannot start");
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn check_config(file: &std::path::Path) -> ExitCode {
    let cfg = match Config::load(file) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    // The same checks `serve` makes before it listens. Paths in the file
    // are relative to the working directory, as `serve` reads them.
    let checked = pcrf::server::check_before_start(&cfg);
    for w in cfg.api.warnings() {
        eprintln!("warning: {w}");
    }
    match checked {
        Ok(_) => {
            println!(
                "{}: valid (checksum {})",
                file.display(),
                cfg.checksum_hex()
            );
            ExitCode::SUCCESS
        }
        Err(problems) => {
            for p in problems {
                eprintln!("{}: {p}", file.display());
            }
            ExitCode::FAILURE
        }
    }
}

fn decode(hex: Option<String>, file: Option<PathBuf>) -> ExitCode {
    let messages: Vec<bytes::Bytes> = match (hex, file) {
        (Some(h), _) => match parse_hex(&h) {
            Ok(b) => vec![b.into()],
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
        (None, Some(path)) => {
            let data = match std::fs::read(&path) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("error: {}: {e}", path.display());
                    return ExitCode::from(2);
                }
            };
            match diameter_tools::pcap::read_pcap(&data) {
                Ok(cap) => {
                    for p in &cap.problems {
                        eprintln!("warning: {p:?}");
                    }
                    cap.messages.into_iter().map(|m| m.bytes).collect()
                }
                Err(pcap_err) => match std::str::from_utf8(&data)
                    .map_err(|e| e.to_string())
                    .and_then(parse_hex)
                {
                    Ok(b) => vec![b.into()],
                    Err(_) => {
                        eprintln!(
                            "error: {}: neither a pcap ({pcap_err}) nor hex text",
                            path.display()
                        );
                        return ExitCode::from(2);
                    }
                },
            }
        }
        (None, None) => {
            eprintln!("error: give --hex HEX or a FILE (pcap or hex text)");
            return ExitCode::from(2);
        }
    };
    let mut status = ExitCode::SUCCESS;
    for bytes in messages {
        match diameter::Message::parse(bytes) {
            Ok(m) => println!("{}", diameter_tools::dump::dump(&m)),
            Err(e) => {
                eprintln!("error: not a valid Diameter message: {e}");
                status = ExitCode::FAILURE;
            }
        }
    }
    status
}

fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    hex::decode(digits).map_err(|e| format!("not hex: {e}"))
}

fn import_subscribers(opts: import::ImportOptions) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let name = opts.file.display().to_string();
    let result = rt.block_on(import::run(&opts, |p| {
        eprintln!(
            "{name}: {}/{} ({:.0}%), {:.0} profiles/s",
            p.imported(),
            p.total,
            100.0 * p.imported() as f64 / (p.total.max(1) as f64),
            p.rate()
        );
    }));
    match result {
        Ok(s) => {
            println!(
                "{name}: imported {} profiles ({} created, {} updated) in {:.1} s, {:.0} profiles/s",
                s.imported(),
                s.created,
                s.updated,
                s.elapsed.as_secs_f64(),
                s.rate()
            );
            ExitCode::SUCCESS
        }
        Err(e @ import::ImportError::Invalid(_)) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn db_migrate(config: Option<PathBuf>) -> ExitCode {
    let cfg = match &config {
        Some(p) => match Config::load(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: invalid configuration:\n{e}");
                return ExitCode::from(2);
            }
        },
        None => Config::zero_config(),
    };
    let Some(url) = cfg.store.database_url() else {
        eprintln!("error: no database URL: set PCRF_DATABASE_URL or [store].url (with kind = \"postgres\")");
        return ExitCode::from(2);
    };
    match pcrf::store::postgres::migrate(&url) {
        Ok(version) => {
            println!("schema at version {version}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One HTTP/1.1 request to the API; the status and the body.
fn api_call(
    api: std::net::SocketAddr,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: &str,
) -> Result<(u16, String), String> {
    let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the HTTP client: {e}"))?;
    let client = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(std::time::Duration::from_secs(5))
        .read_timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| format!("starting the HTTP client: {}", import::error_chain(&e)))?;
    let mut req = client
        .request(method, format!("http://{api}{path}"))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string());
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let failed = |e: reqwest::Error| {
        let what = if e.is_connect() {
            "cannot reach the API at"
        } else {
            "no answer from the API at"
        };
        format!("{what} {api}: {}", import::error_chain(&e))
    };
    rt.block_on(async {
        let resp = req.send().await.map_err(failed)?;
        let status = resp.status().as_u16();
        Ok((status, resp.text().await.map_err(failed)?))
    })
}

fn debug(api: std::net::SocketAddr, token: Option<&str>, command: DebugCmd) -> ExitCode {
    use stored_record::Which;
    let res = match &command {
        DebugCmd::Session { id, config } => {
            return stored_record::print(config.as_deref(), Which::Session, id)
        }
        DebugCmd::Usage { subscriber, config } => {
            return stored_record::print(config.as_deref(), Which::Usage, subscriber)
        }
        DebugCmd::Subscriber { imsi, config } => {
            return stored_record::print(config.as_deref(), Which::Subscriber, imsi)
        }
        DebugCmd::Queries { top } => api_call(
            api,
            token,
            "GET",
            &format!("/v1/debug/queries?top={top}"),
            "",
        ),
        DebugCmd::QueryProfiler { state } => api_call(
            api,
            token,
            "POST",
            "/v1/debug/query-profiler",
            &format!("{{\"enabled\":{}}}", state == "on"),
        ),
    };
    let (status, body) = match res {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    if status != 200 {
        eprintln!(
            "error: HTTP {status}: {}",
            json["error"].as_str().unwrap_or(&body)
        );
        return ExitCode::FAILURE;
    }
    match command {
        DebugCmd::Session { .. } | DebugCmd::Usage { .. } | DebugCmd::Subscriber { .. } => {}
        DebugCmd::QueryProfiler { .. } => println!(
            "query profiler {}",
            if json["enabled"] == true { "on" } else { "off" }
        ),
        DebugCmd::Queries { .. } => print_profile(&json),
    }
    ExitCode::SUCCESS
}

fn print_profile(p: &serde_json::Value) {
    println!(
        "profiler {} | window {:.1} s | database time {} µs",
        if p["enabled"] == true { "on" } else { "off" },
        p["window_secs"].as_f64().unwrap_or(0.0),
        p["total_us"].as_u64().unwrap_or(0)
    );
    println!(
        "{:<28} {:>10} {:>9} {:>12} {:>9} {:>12} {:>9} {:>10} {:>7}",
        "statement", "calls", "calls/s", "exec µs", "mean", "fetch µs", "mean", "rows", "share"
    );
    for q in p["statements"].as_array().into_iter().flatten() {
        println!(
            "{:<28} {:>10} {:>9.1} {:>12} {:>9.1} {:>12} {:>9.1} {:>10} {:>6.1}%",
            q["name"].as_str().unwrap_or("?"),
            q["calls"].as_u64().unwrap_or(0),
            q["calls_per_sec"].as_f64().unwrap_or(0.0),
            q["exec_us_total"].as_u64().unwrap_or(0),
            q["exec_us_mean"].as_f64().unwrap_or(0.0),
            q["fetch_us_total"].as_u64().unwrap_or(0),
            q["fetch_us_mean"].as_f64().unwrap_or(0.0),
            q["rows"].as_u64().unwrap_or(0),
            q["share_pct"].as_f64().unwrap_or(0.0)
        );
    }
}
