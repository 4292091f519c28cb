//! Start-up and shutdown of `pcrf serve`: open the store and load what it
//! holds, load the policy, start the group-commit writer, the Diameter
//! listener and the HTTP API; on SIGTERM or Ctrl-C, send DPR to every peer,
//! let in-flight requests finish, flush the store and stop.

use crate::api;
use crate::certificate_expiry::CertificateExpiry;
use crate::config::Config;
use crate::dispatch::{Dispatcher, PeerCloseLog};
use crate::gx;
use crate::logging::LogHandle;
use crate::metrics::Metrics;
use crate::node::{NodeParts, Policy, Settings, UsageLedger};
use crate::notify::{build_sink, Outbox};
use crate::policy::{EngineConfig, Limits, PolicyEngine};
use crate::services::Services;
use crate::store::group_commit::GroupCommitOptions;
use crate::store::open_shards;
use crate::store::ShardedWriter;
use crate::usage::config::UsageConfig;
use diameter::peer::{AllowedPeer, Application, LocalNode, PeerSettings};
use diameter::transport::{self, PeerTable};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

/// Why the server could not start (printed, exit status 1).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("store: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("policy: {0}")]
    Policy(#[from] crate::policy::PolicyError),
    #[error("cannot listen for Diameter on {addr}: {err}")]
    Diameter {
        addr: std::net::SocketAddr,
        err: std::io::Error,
    },
    #[error("cannot listen for the HTTP API on {addr}: {err}")]
    Api {
        addr: std::net::SocketAddr,
        err: std::io::Error,
    },
    #[error("cannot listen for the SBI (HTTP/2) on {addr}: {err}")]
    Sbi {
        addr: std::net::SocketAddr,
        err: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
    /// Every problem [`check_before_start`] found, one a line.
    #[error("{}", .0.join("\n"))]
    Checks(Vec<String>),
}

/// What `serve` reads and checks before it opens the store or listens,
/// beyond the configuration file itself: the settings that need files
/// (TLS, webhook CAs, the usage file, the policy script) and the time zone.
/// `pcrf check-config` runs this same function, so it refuses whatever
/// start-up would.
pub struct Checked {
    pub usage: UsageConfig,
    pub sinks: Vec<Arc<dyn crate::notify::Sink>>,
    pub tz: jiff::tz::TimeZone,
    pub policy: PolicyEngine,
}

/// Runs every check of [`Checked`]; all problems found, not just the first.
pub fn check_before_start(cfg: &Config) -> Result<Checked, Vec<String>> {
    let mut problems = Vec::new();
    let mut note = |e: String| problems.push(e);
    for r in [
        cfg.api.validate(),
        cfg.sy.validate(),
        cfg.cluster.validate(),
    ] {
        if let Err(e) = r {
            note(e);
        }
    }
    if cfg.sy.chf.is_some() && cfg.sbi.is_none() {
        note("[sy].chf needs [sbi]: the CHF's notifications come in on the SBI listener".into());
    }
    let usage = load_usage_config(cfg).map_err(|e| note(e.to_string())).ok();
    let mut sinks = Vec::new();
    for sink in &cfg.notifications.sinks {
        match build_sink(sink) {
            Ok(s) => sinks.push(s),
            Err(e) => note(format!("[[notifications.sinks]] {:?}: {e}", sink.name)),
        }
    }
    let tz = crate::policy::clock::time_zone(&cfg.policy.time_zone)
        .map_err(|e| note(format!("policy: {e}")))
        .ok();
    let policy = PolicyEngine::load(EngineConfig {
        path: cfg.policy.path.clone(),
        limits: Limits {
            instructions: u64::from(cfg.policy.instruction_limit),
            memory_bytes: cfg.policy.memory_limit_mib * 1024 * 1024,
        },
        fallback: cfg.policy.fallback.clone(),
    })
    .map_err(|e| note(format!("policy: {e}")))
    .ok();
    match (usage, tz, policy) {
        (Some(usage), Some(tz), Some(policy)) if problems.is_empty() => Ok(Checked {
            usage,
            sinks,
            tz,
            policy,
        }),
        _ => Err(problems),
    }
}

/// Runs the PCRF until `shutdown` resolves. With a log handle, SIGHUP
/// reloads the configuration file: the live parts apply at once (see
/// `Settings::apply_config`), the rest is logged as needing a restart.
pub async fn run(
    cfg: Config,
    log: Option<LogHandle>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let cfg = Arc::new(cfg);
    let Checked {
        usage: usage_cfg,
        sinks,
        tz,
        policy,
    } = check_before_start(&cfg).map_err(StartError::Checks)?;
    for w in cfg.api.warnings() {
        tracing::warn!("{w}");
    }
    tracing::info!(
        checksum = %cfg.checksum_hex(),
        source = ?cfg.source,
        "configuration loaded"
    );
    if cfg.zero_config {
        tracing::warn!(
            "no configuration file: zero-config development mode, ANY Diameter peer may connect"
        );
    }

    // Store: read what it holds, then hand it to the writer thread.
    let mut opened = open_shards(&cfg.store)?;
    opened.set_owner(&cfg.node.origin_host);
    // On a shared store: LISTEN for other nodes' provisioning before the
    // subscribers are read, so that no change falls between the two.
    let cluster_url = match cfg.store.kind {
        crate::store::config::StoreKind::Postgres => cfg.store.database_url(),
        crate::store::config::StoreKind::Sqlite => None,
    };
    let cluster_timeout = Duration::from_millis(cfg.store.timeout_ms.max(1));
    let feed = match &cluster_url {
        Some(url) => {
            match crate::cluster::provisioning_feed::Listener::open(
                url,
                cluster_timeout,
                &cfg.node.origin_host,
            )
            .await
            {
                Ok(l) => Some(l),
                Err(e) => {
                    tracing::warn!(error = %e, "provisioning feed: cannot listen yet; retrying after start-up");
                    None
                }
            }
        }
        None => None,
    };
    let recovered = opened.recover()?;
    let (subscribers, sessions, usage_records, corrupt) = (
        recovered.subscribers,
        recovered.sessions,
        recovered.usage,
        recovered.corrupt,
    );
    // Undelivered notifications go back to their sinks before any new one.
    let outbox = Outbox::new(&cfg.notifications);
    let undeliverable = outbox.recover(recovered.events);
    if corrupt > 0 {
        tracing::error!(
            records = corrupt,
            "corrupt store records skipped at start-up (each is logged above with its key)"
        );
    }
    tracing::info!(
        subscribers = subscribers.len(),
        open_sessions = sessions.len(),
        usage_records = usage_records.len(),
        notifications_pending = outbox.backlog(),
        durability = cfg.store.durability.risk(),
        kind = ?cfg.store.kind,
        path = %cfg.store.path.display(),
        commit_window_us = cfg.store.commit_window().as_micros() as u64,
        writers = opened.shards.len(),
        "store opened"
    );
    let pg = opened.pg.take();
    let writer = ShardedWriter::start(
        opened.shards,
        opened.shared,
        GroupCommitOptions {
            queue_depth: cfg.store.queue_depth,
            commit_window: cfg.store.commit_window(),
            ..Default::default()
        },
    )?;
    if !undeliverable.is_empty() {
        writer.submit(undeliverable).await?;
    }
    let policy = Arc::new(policy);
    // The policy's versions live beside the other records, on a
    // connection of their own.
    let version_store: Arc<dyn crate::store::VersionStore> = match &cluster_url {
        Some(url) => Arc::new(crate::store::postgres::versions::PostgresVersions::new(
            url,
            cluster_timeout,
        )?),
        None => Arc::new(crate::store::SqliteVersions::open(&cfg.store.path)?),
    };
    let policy = crate::policy::PolicyVersions::start(policy, version_store.clone())
        .map_err(|e| StartError::Config(format!("policy versions: {e}")))?;
    let (usage_versions, usage_cfg) =
        start_usage_versions(&cfg, version_store, usage_cfg, &sessions)?;
    let _watcher = if cfg.policy.watch {
        Some(policy.clone().watch()?)
    } else {
        None
    };

    let metrics = Arc::new(Metrics::new());
    let peers = PeerTable::new();
    let services = Services::new(NodeParts {
        cfg: cfg.clone(),
        policy,
        store: writer.clone(),
        subscribers,
        sessions,
        usage: usage_records,
        usage_cfg,
        usage_versions,
        peers: peers.clone(),
        metrics: metrics.clone(),
        tz,
        pg,
        notify: outbox.clone(),
    });
    metrics.register(outbox.clone());
    let caps = services.node.clone();
    metrics.register(caps.policy.runner().policy_versions().clone());
    metrics.register(caps.policy.runner().usage_versions().clone());
    let _usage_watcher = watch_usage_file(&caps.policy, &caps.usage);

    let mut local = LocalNode::new(cfg.node.origin_host.clone(), cfg.node.origin_realm.clone())
        .with_application(Application::auth_vendor(
            gx::GX,
            crate::session_message::TGPP,
        ))
        // Rx: any configured peer may be an AF (P-CSCF).
        .with_application(Application::auth_vendor(
            crate::rx::RX,
            crate::session_message::TGPP,
        ))
        .with_application(Application::auth_vendor(
            crate::sd::SD,
            crate::session_message::TGPP,
        ));
    if cfg.sy.uses_ocs() {
        local = local.with_application(Application::auth_vendor(
            crate::sy::SY,
            crate::session_message::TGPP,
        ));
    }
    local.product_name = "pcrf".into();
    let ips: Vec<IpAddr> = if cfg.node.host_ip_addresses.is_empty() {
        let ip = cfg.diameter.listen.ip();
        vec![if ip.is_unspecified() {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        } else {
            ip
        }]
    } else {
        cfg.node.host_ip_addresses.clone()
    };
    local.host_ip_addresses = ips;
    let settings = PeerSettings {
        tw: Duration::from_secs(cfg.diameter.watchdog_secs),
        request_timeout: Duration::from_millis(cfg.diameter.request_timeout_ms),
        max_message_len: cfg.diameter.max_message_bytes,
        max_in_flight: cfg.diameter.max_in_flight,
        max_awaiting_cer: cfg.diameter.max_connections_awaiting_cer,
        max_message_len_awaiting_cer: cfg.diameter.max_message_bytes_awaiting_cer,
        max_buffered_awaiting_cer: cfg.diameter.max_buffered_bytes_awaiting_cer,
        cer_timeout: Duration::from_secs(cfg.diameter.cer_timeout_secs),
        allowed_peers: if cfg.zero_config {
            None
        } else {
            Some(
                cfg.peers
                    .iter()
                    .map(|p| AllowedPeer {
                        origin_host: p.origin_host.clone(),
                        addresses: p.addresses.clone(),
                    })
                    // The OCSs we connect to (their CEA must name them).
                    .chain(cfg.sy.ocs.iter().map(|o| AllowedPeer {
                        origin_host: o.origin_host.clone(),
                        addresses: vec![o.address.ip()],
                    }))
                    .collect(),
            )
        },
        tls_required: cfg
            .peers
            .iter()
            .filter(|p| p.tls)
            .map(|p| p.origin_host.clone())
            .collect(),
        relays: cfg
            .peers
            .iter()
            .filter(|p| p.relay)
            .map(|p| p.origin_host.clone())
            .collect(),
        ..PeerSettings::default()
    };
    // Validated with the configuration; read again here, so what runs is
    // what the files hold now.
    let tls = match &cfg.diameter.tls {
        Some(t) => Some((
            t.listen,
            t.load()
                .map_err(|e| StartError::Config(format!("[diameter.tls]: {e}")))?,
        )),
        None => None,
    };
    let dnode = transport::Node::with_parts(
        Arc::new(local),
        Arc::new(settings),
        Arc::new(Dispatcher {
            services: services.clone(),
            closes: PeerCloseLog::default(),
        }),
        peers,
    );
    services.sy.start_sy(&dnode);
    // SIGHUP's handler is in place before any listener opens: a reload
    // asked for as soon as the node answers reloads it instead of ending
    // it (SIGHUP's default action); one that arrives before the reload
    // task runs waits for it.
    #[cfg(unix)]
    let hup = cfg
        .source
        .is_some()
        .then(|| tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()));
    let server = dnode
        .listen(cfg.diameter.listen)
        .await
        .map_err(|err| StartError::Diameter {
            addr: cfg.diameter.listen,
            err,
        })?;
    let diameter_addr = server.local_addr().unwrap_or(cfg.diameter.listen);
    tracing::info!(addr = %diameter_addr, origin_host = %cfg.node.origin_host, "Diameter listening");
    let tls_server = match &tls {
        Some((addr, tls)) => {
            let s = dnode
                .listen_tls(*addr, tls)
                .await
                .map_err(|err| StartError::Diameter { addr: *addr, err })?;
            tracing::info!(
                addr = %s.local_addr().unwrap_or(*addr),
                client_certificate = if tls.requires_client_certificate() { "required" } else { "optional" },
                "Diameter over TLS listening"
            );
            Some(s)
        }
        None => None,
    };

    let api_listener = tokio::net::TcpListener::bind(cfg.api.listen)
        .await
        .map_err(|err| StartError::Api {
            addr: cfg.api.listen,
            err,
        })?;
    let router = api::router(Arc::new(services.operations()), &cfg.api);
    caps.persistence.membership().set_api(
        api_listener
            .local_addr()
            .map_or_else(|_| cfg.api.listen.to_string(), |a| a.to_string()),
    );
    metrics.register(caps.persistence.membership().clone());

    // One shutdown signal fans out to the Diameter server and the API.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };

    let api_tls = match cfg.api.tls.as_ref().map(|t| t.load("api.tls")).transpose() {
        Ok(t) => t,
        Err(e) => return Err(StartError::Config(e)),
    };
    // The certificates just loaded: when each expires, for /metrics.
    let mut expiry = CertificateExpiry::default();
    if let Some(t) = &cfg.diameter.tls {
        expiry.add("diameter", &t.certificate);
    }
    if let Some(t) = &cfg.api.tls {
        expiry.add("api", &t.certificate);
    }
    if let Some(t) = cfg.sbi.as_ref().and_then(|s| s.tls.as_ref()) {
        expiry.add("sbi", &t.certificate);
    }
    metrics.register(Arc::new(expiry));
    let api_task = tokio::spawn(api::serve_tls(
        api_listener,
        router,
        wait(stop_rx.clone()),
        cfg.api.limits(),
        api_tls,
    ));

    let sbi_tasks = match &cfg.sbi {
        Some(sbi) => start_sbi(sbi, &services, &metrics, &stop_rx).await?,
        None => Vec::new(),
    };

    #[cfg(unix)]
    if let (Some(source), Some(hup)) = (cfg.source.clone(), hup) {
        spawn_reload_on_sighup(
            hup,
            Reloads {
                policy: caps.policy.clone(),
                usage: caps.usage.clone(),
                settings: caps.settings.clone(),
            },
            source,
            cfg.policy_from_command_line.clone(),
            log,
            stop_rx.clone(),
        );
    }

    crate::notify::delivery::start(&outbox, sinks, writer.clone(), stop_rx.clone());

    // On a shared store: this node's heartbeat, and the provisioning done
    // through the other nodes, each on a connection of its own.
    let cluster_tasks = match cluster_url {
        Some(url) => vec![
            tokio::spawn(crate::cluster::heartbeat::run_heartbeats(
                crate::cluster::heartbeat::Heartbeat::new(&caps),
                url.clone(),
                cluster_timeout,
                stop_rx.clone(),
            )),
            tokio::spawn(crate::cluster::provisioning_feed::run(
                crate::cluster::provisioning_feed::Feed::new(&caps),
                url.clone(),
                cluster_timeout,
                feed,
                stop_rx.clone(),
            )),
            tokio::spawn(crate::cluster::version_feed::run(
                crate::control::versions::Deployer::new(&caps),
                url,
                cluster_timeout,
                stop_rx.clone(),
            )),
        ],
        None => Vec::new(),
    };

    // Purge closed sessions past retention, once a minute.
    let schedule_task = tokio::spawn(services.gx.clone().run_schedule(stop_rx.clone()));

    let purge_sessions = caps.sessions.clone();
    let mut purge_stop = stop_rx.clone();
    let purge_task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    if let Err(e) = purge_sessions.purge_closed().await {
                        tracing::warn!(error = %e, "purging closed sessions failed");
                    }
                }
                changed = purge_stop.changed() => {
                    if changed.is_err() || *purge_stop.borrow() {
                        break;
                    }
                }
            }
        }
    });

    let tls_task = tls_server.map(|s| tokio::spawn(s.run(wait(stop_rx.clone()))));
    if let Err(e) = server.run(wait(stop_rx.clone())).await {
        tracing::error!(error = %e, "Diameter server stopped with an error");
    }
    if let Some(t) = tls_task {
        if let Ok(Err(e)) = t.await {
            tracing::error!(error = %e, "Diameter TLS server stopped with an error");
        }
    }
    tracing::info!("Diameter server stopped; flushing the store");
    let _ = api_task.await;
    for t in sbi_tasks {
        let _ = t.await;
    }
    let _ = purge_task.await;
    let _ = schedule_task.await;
    for t in cluster_tasks {
        let _ = t.await;
    }
    match writer.shutdown().await {
        Ok(_) => tracing::info!("store flushed; bye"),
        Err(e) => tracing::error!(error = %e, "store flush failed"),
    }
    Ok(())
}

/// Starts the SBI listener serving N7 from the node's sessions, the NRF
/// registration when `[sbi.nrf]` is set, and the sweep that keeps the
/// BSF's bindings (`n7::bsf_binding`); all stop (the NRF registration
/// removed) when `stop` turns true.
async fn start_sbi(
    sbi: &crate::sbi::SbiConfig,
    services: &Services,
    metrics: &Arc<crate::metrics::Metrics>,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Result<Vec<tokio::task::JoinHandle<()>>, StartError> {
    let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let tls = sbi
        .tls
        .as_ref()
        .map(crate::sbi::config::h2_tls)
        .transpose()
        .map_err(StartError::Config)?;
    let listener = tokio::net::TcpListener::bind(sbi.listen)
        .await
        .map_err(|err| StartError::Sbi {
            addr: sbi.listen,
            err,
        })?;
    let addr = listener.local_addr().unwrap_or(sbi.listen);
    let stats = Arc::new(crate::sbi::stats::SbiStats::new());
    metrics.register(stats.clone());
    let routes = crate::sbi::routes::Routes {
        service: services.n7.clone(),
        app_sessions: Some(services.n5.clone()),
        // The N28 callback only where a CHF is the spending-limit peer.
        spending: services
            .node
            .settings
            .live()
            .cfg
            .sy
            .chf
            .is_some()
            .then(|| services.sy.clone() as Arc<dyn crate::sy::n28::SpendingNotifications>),
        stats,
        max_body_bytes: sbi.max_body_bytes,
        decode_limits: sbi.decode_limits(),
        request_timeout: sbi.request_timeout(),
        scheme: if tls.is_some() { "https" } else { "http" },
        fallback_authority: addr.to_string(),
    };
    let config = sbi.clone();
    let shutdown = wait(stop.clone());
    let mut tasks = vec![tokio::spawn(async move {
        if let Err(e) = crate::sbi::server::serve(listener, routes, &config, tls, shutdown).await {
            tracing::error!(error = %e, "SBI listener stopped with an error");
        }
    })];
    if let Some(nrf) = sbi.nrf.clone() {
        tasks.push(tokio::spawn(crate::sbi::nrf::run(nrf, wait(stop.clone()))));
    }
    // The sessions recovered are held by now: those a crash left without
    // a PCF binding get one.
    tasks.push(tokio::spawn(services.n7.bindings().run(stop.clone())));
    Ok(tasks)
}

/// On SIGHUP, re-reads the configuration file; a bad file changes nothing.
/// The usage file `[usage].path` names; monitoring is off when the
/// default file is absent (an explicit path must exist).
pub fn load_usage_config(cfg: &Config) -> Result<UsageConfig, StartError> {
    let path = &cfg.usage.path;
    if cfg.usage.is_default_path() && !path.exists() {
        tracing::warn!(path = %path.display(), "no usage file: usage monitoring is off");
        return Ok(UsageConfig::empty());
    }
    let u = UsageConfig::load(path).map_err(|e| StartError::Config(format!("usage file: {e}")))?;
    tracing::info!(path = %path.display(), checksum = %u.checksum_hex(), "usage file loaded");
    Ok(u)
}

/// Puts the usage file loaded by the checks in step with its stored
/// versions (`usage::versions`), checked against the grants the recovered
/// sessions hold; returns the versions and the configuration to count by.
fn start_usage_versions(
    cfg: &Config,
    store: Arc<dyn crate::store::VersionStore>,
    loaded: UsageConfig,
    sessions: &[crate::session::GxSession],
) -> Result<(Arc<crate::usage::versions::UsageVersions>, UsageConfig), StartError> {
    // The checks read the file a moment ago; an absent default file is
    // usage monitoring off, not an error.
    let text = if loaded.is_empty() && !cfg.usage.path.exists() {
        None
    } else {
        let bytes = std::fs::read(&cfg.usage.path).map_err(|e| {
            StartError::Config(format!("usage file {}: {e}", cfg.usage.path.display()))
        })?;
        Some(String::from_utf8(bytes).map_err(|e| {
            StartError::Config(format!("usage file {}: {e}", cfg.usage.path.display()))
        })?)
    };
    let mut granted = std::collections::BTreeMap::new();
    for s in sessions
        .iter()
        .filter(|s| s.state == crate::session::SessionState::Open)
    {
        for k in s.monitoring.keys.keys() {
            *granted.entry(k.to_string()).or_insert(0) += 1;
        }
    }
    crate::usage::versions::UsageVersions::start(
        store,
        cfg.usage.path.clone(),
        loaded,
        text,
        granted,
    )
    .map_err(|e| StartError::Config(format!("usage file versions: {e}")))
}

/// Deploys the usage file as the next version when it changes (refused
/// with its reasons when it fails to load or would orphan running
/// grants: the version in force stays).
fn watch_usage_file(
    policy: &Policy,
    usage: &UsageLedger,
) -> Option<crate::file_watch::WatcherGuard> {
    let versions = policy.runner().usage_versions().clone();
    let path = versions.file().to_path_buf();
    if !path.exists() {
        return None;
    }
    let watched = usage.clone();
    let reload = move || {
        // reload_file() logs a refusal.
        let _ = versions.reload_file(&watched);
    };
    match crate::file_watch::watch_file(&path, "usage-watch", reload) {
        Ok(g) => Some(g),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot watch the usage file; reload it with SIGHUP");
            None
        }
    }
}

/// What a configuration reload puts in force: the settings, and the next
/// versions of the policy and the usage file.
#[cfg(unix)]
struct Reloads {
    policy: Policy,
    usage: UsageLedger,
    settings: Settings,
}

#[cfg(unix)]
fn spawn_reload_on_sighup(
    hup: std::io::Result<tokio::signal::unix::Signal>,
    reloads: Reloads,
    source: std::path::PathBuf,
    policy_path: Option<std::path::PathBuf>,
    log: Option<LogHandle>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut hup = match hup {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; configuration reload disabled");
            return;
        }
    };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                got = hup.recv() => {
                    if got.is_none() {
                        break;
                    }
                }
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        break;
                    }
                    continue;
                }
            }
            let new = match Config::load(&source) {
                Ok(c) => match &policy_path {
                    Some(p) => c.with_policy_path(p.clone()),
                    None => c,
                },
                Err(e) => {
                    tracing::error!(file = %source.display(), "configuration reload refused, the running one stays:\n{e}");
                    continue;
                }
            };
            if let Some(log) = &log {
                if let Err(e) = log.set_level(&new.log.level) {
                    tracing::error!(error = %e, "log level not changed");
                }
            }
            let checksum = new.checksum_hex();
            // An edited policy file becomes the next version (refusals are
            // logged by reload_file).
            let versions = reloads.policy.runner().policy_versions().clone();
            let _ = tokio::task::spawn_blocking(move || versions.reload_file()).await;
            // An edited usage file becomes the next version; refused, the
            // version in force stays (reload_file logs why).
            let host = reloads.usage.clone();
            let usage = reloads.policy.runner().usage_versions().clone();
            let _ = tokio::task::spawn_blocking(move || usage.reload_file(&host)).await;
            let restart = reloads.settings.apply_config(new);
            tracing::info!(%checksum, "configuration reloaded");
            if !restart.is_empty() {
                tracing::warn!(sections = ?restart, "changed settings that apply only after a restart");
            }
        }
    });
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for SIGTERM; Ctrl-C only");
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = tokio::signal::ctrl_c() => tracing::info!("Ctrl-C: shutting down"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
