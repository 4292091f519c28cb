//! The configuration file (TOML), its defaults and its validation.
//!
//! `pcrf serve` with no file runs on the built-in defaults (zero-config dev
//! mode: any peer may connect). With a file, every error is reported with
//! its location, all at once, before anything starts; `pcrf check-config`
//! prints the same. The checksum of the running file is logged and shown by
//! the API so an operator can tell which configuration a node runs.

#[cfg(test)]
mod example_defaults;
mod overload;
mod problem;

pub use overload::OverloadConfig;
pub use problem::ConfigProblem;

use crate::api::ApiConfig;
use crate::logging::LogConfig;
use crate::policy::decision::Decision;
use crate::store::config::StoreConfig;
use diameter::peer::PeerSettings;
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

/// `[node]`: who we are on the wire.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    #[serde(default = "default_host")]
    pub origin_host: String,
    #[serde(default = "default_realm")]
    pub origin_realm: String,
    /// Host-IP-Address values to advertise in CER/CEA (default: the listen
    /// address, or 127.0.0.1 when listening on all addresses).
    #[serde(default)]
    pub host_ip_addresses: Vec<IpAddr>,
}

fn default_host() -> String {
    "pcrf.localdomain".into()
}
fn default_realm() -> String {
    "localdomain".into()
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            origin_host: default_host(),
            origin_realm: default_realm(),
            host_ip_addresses: Vec::new(),
        }
    }
}

/// `[diameter]`: the listener and its limits.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiameterConfig {
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Tw, the watchdog interval (RFC 3539), seconds.
    #[serde(default = "default_watchdog")]
    pub watchdog_secs: u64,
    /// How long we wait for an answer to our own requests (RAR), ms.
    #[serde(default = "default_request_timeout")]
    pub request_timeout_ms: u64,
    /// Larger messages close the connection.
    #[serde(default = "default_max_message")]
    pub max_message_bytes: u32,
    /// Requests in flight per connection before DIAMETER_TOO_BUSY: a memory
    /// cap, half the node-wide one, so that one flooding peer cannot take
    /// all of it. Overload itself is shed by queueing delay (`[overload]`).
    #[serde(default = "default_in_flight")]
    pub max_in_flight: usize,
    /// Gx and Sd requests being worked on across the node before
    /// DIAMETER_TOO_BUSY: the hard memory cap, a last resort far above any
    /// burst (overload is shed earlier, by queueing delay: `[overload]`);
    /// new sessions (CCR-I) are refused from 80% of it, so CCR-U/T go first.
    #[serde(default = "default_pending")]
    pub max_pending_requests: usize,
    /// Connections accepted and not yet past CER, at most; a further one
    /// closes the oldest of them.
    #[serde(default = "default_awaiting_cer")]
    pub max_connections_awaiting_cer: usize,
    /// The largest message a connection may send before its CER is
    /// accepted; a longer one closes it before any of it is buffered.
    #[serde(default = "default_message_awaiting_cer")]
    pub max_message_bytes_awaiting_cer: u32,
    /// The bytes all connections awaiting CER may hold together in partly
    /// received messages; a connection that would pass it is closed.
    #[serde(default = "default_buffered_awaiting_cer")]
    pub max_buffered_bytes_awaiting_cer: usize,
    /// A connection must complete CER within this long, seconds.
    #[serde(default = "default_cer_timeout")]
    pub cer_timeout_secs: u64,
    /// `[diameter.tls]`: a second listener where peers start with a TLS
    /// handshake (RFC 6733 §13); absent, there is none.
    #[serde(default)]
    pub tls: Option<TlsSection>,
}

/// `[diameter.tls]`: Diameter over TLS "on connect" (see docs/tls.md).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// Where TLS peers connect (the IANA port for Diameter over TLS is 5658).
    #[serde(default = "default_listen_tls")]
    pub listen: SocketAddr,
    /// Our certificate chain, PEM, end-entity first; it must name
    /// `[node].origin_host` (subjectAltName dNSName).
    pub certificate: PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub private_key: PathBuf,
    /// The CA certificate(s), PEM, that peers' certificates must chain to.
    pub ca: PathBuf,
    /// Peers must present a certificate (mutual TLS). Default true.
    #[serde(default = "yes")]
    pub require_client_certificate: bool,
}

fn default_listen_tls() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 5658))
}

impl TlsSection {
    /// Reads and checks the files: readable, PEM, the key matching the
    /// certificate.
    pub fn load(&self) -> Result<diameter::transport::TlsConfig, diameter::transport::TlsError> {
        diameter::transport::TlsConfig::from_pem_files(
            &self.certificate,
            &self.private_key,
            &self.ca,
            self.require_client_certificate,
        )
    }
}

// The Diameter defaults are the Diameter crate's own (PeerSettings),
// written once there; the node-wide cap below is this server's.
fn default_awaiting_cer() -> usize {
    PeerSettings::default().max_awaiting_cer
}

fn default_message_awaiting_cer() -> u32 {
    // A CER is a few hundred bytes; this leaves room for long lists of
    // addresses and applications.
    16 << 10
}

fn default_buffered_awaiting_cer() -> usize {
    // The default 256 connections awaiting CER, each with a whole message.
    (default_awaiting_cer() * default_message_awaiting_cer() as usize).max(1 << 20)
}

fn default_cer_timeout() -> u64 {
    PeerSettings::default().cer_timeout.as_secs()
}

fn default_pending() -> usize {
    // A memory bound, not a load bound: a request in flight holds its
    // message and its task (~10 KB), so 50,000 is about 0.5 GB.
    50_000
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 3868))
}
fn default_watchdog() -> u64 {
    PeerSettings::default().tw.as_secs()
}
fn default_request_timeout() -> u64 {
    u64::try_from(PeerSettings::default().request_timeout.as_millis()).unwrap_or(u64::MAX)
}
fn default_max_message() -> u32 {
    PeerSettings::default().max_message_len
}
fn default_in_flight() -> usize {
    // Half the default node-wide cap (a test holds them to it): one
    // connection alone stays below the 80% at which CCR-I are refused for
    // everyone.
    PeerSettings::default().max_in_flight
}

impl Default for DiameterConfig {
    fn default() -> Self {
        DiameterConfig {
            listen: default_listen(),
            watchdog_secs: default_watchdog(),
            request_timeout_ms: default_request_timeout(),
            max_message_bytes: default_max_message(),
            max_in_flight: default_in_flight(),
            max_pending_requests: default_pending(),
            max_connections_awaiting_cer: default_awaiting_cer(),
            max_message_bytes_awaiting_cer: default_message_awaiting_cer(),
            max_buffered_bytes_awaiting_cer: default_buffered_awaiting_cer(),
            cer_timeout_secs: default_cer_timeout(),
            tls: None,
        }
    }
}

/// `[[peers]]`: a PCEF (or other node) allowed to connect.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    pub origin_host: String,
    /// Source addresses it may connect from; empty means any.
    #[serde(default)]
    pub addresses: Vec<IpAddr>,
    /// The peer must connect over TLS (to `[diameter.tls].listen`); over
    /// plain TCP its CER is refused with 3010 DIAMETER_UNKNOWN_PEER.
    #[serde(default)]
    pub tls: bool,
    /// A relay (DRA) forwards requests of other nodes: its requests may
    /// name any Origin-Host. Any other peer's request must name the peer
    /// itself, else it is answered 3010 DIAMETER_UNKNOWN_PEER. Default
    /// false. A relay speaks for everyone, so it must be pinned to its
    /// `addresses` or to `tls`.
    #[serde(default)]
    pub relay: bool,
    /// Peers with the same `failover_group` (a gateway pair) may carry on
    /// each other's Gx, Sd and Rx sessions: a request on a session from a
    /// member of its peer's group is served, and the session's requests
    /// (RARs) go to that member from then on. A request on a session from
    /// any other peer is answered 5002 DIAMETER_UNKNOWN_SESSION_ID.
    /// Default: none (only the session's own peer). Applies on SIGHUP.
    #[serde(default)]
    pub failover_group: Option<String>,
}

/// What to do with a CCR-I for a subscriber nobody provisioned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownSubscriber {
    /// Answer Result-Code DIAMETER_USER_UNKNOWN (5030, RFC 4006, as TS 29.212 uses it).
    #[default]
    Reject,
    /// Run the policy with `subscriber.known = false`.
    DefaultPolicy,
}

/// `[policy]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySection {
    #[serde(default = "default_policy_path")]
    pub path: PathBuf,
    /// IANA time zone for the policy's local time (e.g. "Europe/Berlin").
    #[serde(default = "default_tz")]
    pub time_zone: String,
    #[serde(default)]
    pub unknown_subscriber: UnknownSubscriber,
    /// Lua VM instructions allowed per decision.
    #[serde(default = "default_instructions")]
    pub instruction_limit: u32,
    /// Memory per Lua VM, MiB.
    #[serde(default = "default_memory")]
    pub memory_limit_mib: usize,
    /// Decision applied when the script fails at run time.
    #[serde(default = "default_fallback")]
    pub fallback: Decision,
    /// Watch the file and reload on change.
    #[serde(default = "yes")]
    pub watch: bool,
}

fn yes() -> bool {
    true
}
fn default_policy_path() -> PathBuf {
    PathBuf::from("policies/default.lua")
}
fn default_tz() -> String {
    "UTC".into()
}
fn default_instructions() -> u32 {
    1_000_000
}
fn default_memory() -> usize {
    16
}
fn default_fallback() -> Decision {
    Decision {
        rules: vec!["internet".into()],
        ..Default::default()
    }
}

impl Default for PolicySection {
    fn default() -> Self {
        PolicySection {
            path: default_policy_path(),
            time_zone: default_tz(),
            unknown_subscriber: UnknownSubscriber::default(),
            instruction_limit: default_instructions(),
            memory_limit_mib: default_memory(),
            fallback: default_fallback(),
            watch: true,
        }
    }
}

/// `[rules]`: the predefined rules and rule bases the PCEFs know. When
/// non-empty, a decision naming anything else is corrected (the unknown
/// name dropped, logged and counted) rather than sent to fail at the PCEF.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleCatalog {
    #[serde(default)]
    pub predefined: Vec<String>,
    #[serde(default)]
    pub base_names: Vec<String>,
}

/// `[sessions]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsConfig {
    /// How long a closed session's record is kept, seconds.
    #[serde(default = "default_retention")]
    pub retention_secs: u64,
}

fn default_retention() -> u64 {
    86_400
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            retention_secs: default_retention(),
        }
    }
}

/// `[rx]`: how AF (Rx) requests are answered (docs/rx.md).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RxSection {
    /// Answer the AAR only after the PCEF accepted the rules (RAA). False:
    /// answer first, push after; a PCEF refusal then reaches the AF as a
    /// RAR with INDICATION_OF_FAILED_RESOURCES_ALLOCATION.
    #[serde(default = "default_answer_after_raa")]
    pub answer_after_raa: bool,
}

fn default_answer_after_raa() -> bool {
    true
}

impl Default for RxSection {
    fn default() -> Self {
        RxSection {
            answer_after_raa: default_answer_after_raa(),
        }
    }
}

/// `[usage]`: usage monitoring and the pushes that follow inputs changing
/// outside a CCR.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSection {
    /// The usage file (monitoring keys, accumulators, quotas; see
    /// docs/usage.md). When the default file does not exist, usage
    /// monitoring is off; a path set explicitly must exist.
    #[serde(default = "default_usage_path")]
    pub path: PathBuf,
    /// Pushes caused by one event (a reset instant, a time-of-day boundary,
    /// a congested cell) are spread evenly over this many seconds, so a
    /// million sessions do not get their RAR in the same second.
    #[serde(default = "default_spread")]
    pub spread_secs: u64,
    /// Local times ("HH:MM", in [policy].time_zone) at which every open
    /// session is re-decided, e.g. the policy's night-boost boundaries.
    #[serde(default)]
    pub time_boundaries: Vec<String>,
}

fn default_usage_path() -> PathBuf {
    PathBuf::from("config/usage.toml")
}
fn default_spread() -> u64 {
    60
}

impl Default for UsageSection {
    fn default() -> Self {
        UsageSection {
            path: default_usage_path(),
            spread_secs: default_spread(),
            time_boundaries: Vec::new(),
        }
    }
}

impl UsageSection {
    /// Whether `path` is the default one (whose absence turns monitoring off).
    pub fn is_default_path(&self) -> bool {
        self.path == default_usage_path()
    }

    /// The time boundaries as (hour, minute); bad entries are reported by
    /// `Config::validate`, so they are skipped here.
    pub fn boundaries(&self) -> Vec<(u8, u8)> {
        self.time_boundaries
            .iter()
            .filter_map(|t| parse_hh_mm(t))
            .collect()
    }
}

/// "HH:MM" with HH 0..=23 and MM 0..=59.
pub fn parse_hh_mm(t: &str) -> Option<(u8, u8)> {
    let (h, m) = t.split_once(':')?;
    if h.len() != 2 || m.len() != 2 {
        return None;
    }
    let h: u8 = h.parse().ok()?;
    let m: u8 = m.parse().ok()?;
    (h < 24 && m < 60).then_some((h, m))
}

/// The whole configuration.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub node: NodeConfig,
    #[serde(default)]
    pub diameter: DiameterConfig,
    #[serde(default)]
    pub overload: OverloadConfig,
    #[serde(default)]
    pub peers: Vec<PeerConfig>,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub policy: PolicySection,
    #[serde(default)]
    pub rules: RuleCatalog,
    #[serde(default)]
    pub sessions: SessionsConfig,
    #[serde(default)]
    pub usage: UsageSection,
    #[serde(default)]
    pub rx: RxSection,
    #[serde(default)]
    pub sd: SdSection,
    #[serde(default)]
    pub api: ApiConfig,
    /// The 5G service-based interface (HTTP/2) and its NRF registration;
    /// served only when the section is present (a 4G-only node opens no
    /// port for it).
    #[serde(default)]
    pub sbi: Option<crate::sbi::SbiConfig>,
    #[serde(default)]
    pub log: LogConfig,
    /// Sy towards the OCS (off without OCSs).
    #[serde(default)]
    pub sy: crate::sy::ocs::SyConfig,
    /// Events to webhooks and AMQP brokers (off without sinks).
    #[serde(default)]
    pub notifications: crate::notify::NotificationsConfig,
    /// Policy decisions emitted as `decision` events (off by default).
    #[serde(default)]
    pub decision_log: crate::notify::DecisionLogConfig,
    /// Heartbeats of the nodes sharing a PostgreSQL store.
    #[serde(default)]
    pub cluster: crate::cluster::config::ClusterConfig,
    /// Set when no file was given: any peer may connect.
    #[serde(skip)]
    pub zero_config: bool,
    /// xxh3 of the file's bytes (0 for built-in defaults).
    #[serde(skip)]
    pub checksum: u64,
    /// Where it came from, for messages.
    #[serde(skip)]
    pub source: Option<PathBuf>,
    /// The policy script named on the command line (`serve --policy`),
    /// which wins over `[policy].path` in this file and in reloads of it.
    #[serde(skip)]
    pub policy_from_command_line: Option<PathBuf>,
}

/// `[sd]`: the TDF that solicited application detection goes to (TS
/// 29.212 §5b). Without `tdf`, TDF sessions are only opened by the TDF
/// (unsolicited). See docs/sd.md.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SdSection {
    /// Origin-Host of the TDF that gets the TSR (it must be a connected peer).
    #[serde(default)]
    pub tdf: Option<String>,
    /// Its realm (Destination-Realm); default: [node].origin_realm.
    #[serde(default)]
    pub realm: Option<String>,
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("{}", problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct ConfigError {
    pub problems: Vec<ConfigProblem>,
}

impl Config {
    /// The built-in defaults (zero-config dev mode).
    pub fn zero_config() -> Config {
        Config {
            zero_config: true,
            ..Default::default()
        }
    }

    /// This configuration with `path` as the policy script, instead of
    /// `[policy].path`, now and after reloads (see
    /// [`policy_from_command_line`](Self::policy_from_command_line)).
    pub fn with_policy_path(mut self, path: PathBuf) -> Config {
        self.policy.path = path.clone();
        self.policy_from_command_line = Some(path);
        self
    }

    /// Reads, parses and validates a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            problems: vec![ConfigProblem {
                location: name.clone(),
                message: format!("cannot read: {e}"),
            }],
        })?;
        Self::parse(&text, &name).map(|mut c| {
            c.source = Some(path.to_path_buf());
            c
        })
    }

    /// Parses and validates TOML text; `name` is used in messages.
    pub fn parse(text: &str, name: &str) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| {
            let location = match e.span() {
                Some(span) => {
                    let (line, col) = line_col(text, span.start);
                    format!("{name}:{line}:{col}")
                }
                None => name.to_string(),
            };
            ConfigError {
                problems: vec![ConfigProblem {
                    location,
                    message: e.message().to_string(),
                }],
            }
        })?;
        cfg.checksum = xxhash_rust::xxh3::xxh3_64(text.as_bytes());
        // Read now, so that `pcrf check-config`, start-up and a SIGHUP
        // reload all see the token the file holds.
        let mut problems: Vec<ConfigProblem> = cfg
            .api
            .read_token_file()
            .err()
            .map(|message| ConfigProblem {
                location: format!("{name}: [api].token_file"),
                message,
            })
            .into_iter()
            .collect();
        problems.extend(cfg.validate(name));
        if problems.is_empty() {
            Ok(cfg)
        } else {
            Err(ConfigError { problems })
        }
    }

    /// Checks what types alone cannot; returns every problem found.
    pub fn validate(&self, name: &str) -> Vec<ConfigProblem> {
        let mut p = Vec::new();
        let mut bad = |key: &str, message: String| {
            p.push(ConfigProblem {
                location: format!("{name}: {key}"),
                message,
            })
        };
        if !is_fqdn(&self.node.origin_host) {
            bad("[node].origin_host", "must be a host name (FQDN)".into());
        }
        if !is_fqdn(&self.node.origin_realm) {
            bad(
                "[node].origin_realm",
                "must be a realm (domain name)".into(),
            );
        }
        if !(6..=3600).contains(&self.diameter.watchdog_secs) {
            bad(
                "[diameter].watchdog_secs",
                "must be between 6 and 3600 (RFC 3539)".into(),
            );
        }
        // The length field is 24 bits, and an error answer may copy parts of
        // the request (Failed-AVP, Proxy-Info): keep room for both.
        if !(4096..=8 << 20).contains(&self.diameter.max_message_bytes) {
            bad(
                "[diameter].max_message_bytes",
                "must be between 4096 and 8388608 (8 MiB)".into(),
            );
        }
        // The fallback answers when the script's decision is unusable: it
        // must itself be one the encoders can send.
        if let Err(e) = self.policy.fallback.check() {
            bad("[policy.fallback]", e.to_string());
        }
        if self.diameter.max_in_flight == 0 {
            bad("[diameter].max_in_flight", "must be at least 1".into());
        }
        if self.diameter.max_pending_requests < 10 {
            bad(
                "[diameter].max_pending_requests",
                "must be at least 10".into(),
            );
        }
        for (key, message) in self.overload.problems() {
            bad(key, message);
        }
        if self.diameter.max_connections_awaiting_cer == 0 {
            bad(
                "[diameter].max_connections_awaiting_cer",
                "must be at least 1".into(),
            );
        }
        if !(1024..=self.diameter.max_message_bytes)
            .contains(&self.diameter.max_message_bytes_awaiting_cer)
        {
            bad(
                "[diameter].max_message_bytes_awaiting_cer",
                "must be between 1024 and [diameter].max_message_bytes".into(),
            );
        }
        if self.diameter.max_buffered_bytes_awaiting_cer
            < self.diameter.max_message_bytes_awaiting_cer as usize
        {
            bad(
                "[diameter].max_buffered_bytes_awaiting_cer",
                "must be at least [diameter].max_message_bytes_awaiting_cer".into(),
            );
        }
        if !(1..=300).contains(&self.diameter.cer_timeout_secs) {
            bad("[diameter].cer_timeout_secs", "must be 1 to 300".into());
        }
        if self.diameter.request_timeout_ms == 0 {
            bad("[diameter].request_timeout_ms", "must be at least 1".into());
        }
        if let Some(tls) = &self.diameter.tls {
            // The files are read now, so that `pcrf check-config` and a
            // SIGHUP reload report them as start-up would.
            if let Err(e) = tls.load() {
                bad("[diameter.tls]", e.to_string());
            }
        }
        let mut seen = std::collections::HashSet::new();
        for (i, peer) in self.peers.iter().enumerate() {
            if peer.tls && self.diameter.tls.is_none() {
                bad(
                    &format!("[[peers]] #{}.tls", i + 1),
                    "needs a [diameter.tls] section (there is no TLS listener)".into(),
                );
            }
            if peer.relay && peer.addresses.is_empty() && !peer.tls {
                bad(
                    &format!("[[peers]] #{}.relay", i + 1),
                    "a relay may speak for any node: pin it with `addresses` or `tls = true`"
                        .into(),
                );
            }
            if !is_fqdn(&peer.origin_host) {
                bad(
                    &format!("[[peers]] #{}.origin_host", i + 1),
                    "must be a host name (FQDN)".into(),
                );
            }
            if let Some(group) = &peer.failover_group {
                let partners = self
                    .peers
                    .iter()
                    .filter(|p| p.failover_group.as_ref() == Some(group))
                    .count();
                if partners < 2 {
                    bad(
                        &format!("[[peers]] #{}.failover_group", i + 1),
                        format!("no other peer is in failover group {group:?}"),
                    );
                }
            }
            if !seen.insert(peer.origin_host.to_ascii_lowercase()) {
                bad(
                    &format!("[[peers]] #{}.origin_host", i + 1),
                    format!("{} is listed twice", peer.origin_host),
                );
            }
        }
        if let Err(e) = crate::logging::check_level(&self.log.level) {
            bad("[log].level", e.to_string());
        }
        for (a, b) in self.listeners_on_one_port() {
            bad(
                a,
                format!("shares its port with {b}: two listeners cannot bind one socket"),
            );
        }
        if jiff::tz::TimeZone::get(&self.policy.time_zone).is_err() {
            bad(
                "[policy].time_zone",
                format!("unknown IANA time zone {:?}", self.policy.time_zone),
            );
        }
        if self.policy.instruction_limit < 1000 {
            bad("[policy].instruction_limit", "must be at least 1000".into());
        }
        if self.policy.memory_limit_mib == 0 {
            bad("[policy].memory_limit_mib", "must be at least 1".into());
        }
        if self.sessions.retention_secs == 0 {
            bad("[sessions].retention_secs", "must be at least 1".into());
        }
        for (key, message) in self.notifications.problems() {
            bad(&key, message);
        }
        for (key, message) in self.decision_log.problems() {
            bad(&key, message);
        }
        if self.usage.spread_secs > 86_400 {
            bad(
                "[usage].spread_secs",
                "must be at most 86400 (one day)".into(),
            );
        }
        for t in &self.usage.time_boundaries {
            if parse_hh_mm(t).is_none() {
                bad(
                    "[usage].time_boundaries",
                    format!("{t:?} is not a local time \"HH:MM\""),
                );
            }
        }
        if let Some(sbi) = &self.sbi {
            for (key, message) in sbi.problems() {
                bad(&key, message);
            }
        }
        p
    }

    /// Pairs of listeners (by key) that would bind the same port on
    /// overlapping addresses: the second bind would fail at start-up. An
    /// unspecified address (0.0.0.0, ::) overlaps every address; port 0
    /// (any free port) never clashes.
    fn listeners_on_one_port(&self) -> Vec<(&'static str, &'static str)> {
        let mut listeners = vec![
            ("[diameter].listen", self.diameter.listen),
            ("[api].listen", self.api.listen),
        ];
        if let Some(sbi) = &self.sbi {
            listeners.push(("[sbi].listen", sbi.listen));
        }
        if let Some(tls) = &self.diameter.tls {
            listeners.push(("[diameter.tls].listen", tls.listen));
        }
        let mut clashes = Vec::new();
        for (i, (key_a, a)) in listeners.iter().enumerate() {
            for (key_b, b) in &listeners[i + 1..] {
                let overlap =
                    a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified();
                if a.port() != 0 && a.port() == b.port() && overlap {
                    clashes.push((*key_b, *key_a));
                }
            }
        }
        clashes
    }

    /// The checksum as the API and logs show it.
    pub fn checksum_hex(&self) -> String {
        format!("{:016x}", self.checksum)
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// A DiameterIdentity: dot-separated labels of letters, digits and hyphens.
fn is_fqdn(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diameter_defaults_are_the_diameter_crates_and_fit_the_node_cap() {
        let d = DiameterConfig::default();
        let peer = PeerSettings::default();
        assert_eq!(std::time::Duration::from_secs(d.watchdog_secs), peer.tw);
        assert_eq!(
            std::time::Duration::from_millis(d.request_timeout_ms),
            peer.request_timeout
        );
        assert_eq!(d.max_message_bytes, peer.max_message_len);
        assert_eq!(d.max_in_flight, peer.max_in_flight);
        assert_eq!(d.max_connections_awaiting_cer, peer.max_awaiting_cer);
        assert_eq!(
            std::time::Duration::from_secs(d.cer_timeout_secs),
            peer.cer_timeout
        );
        // One connection alone stays below the 80% of the node-wide cap at
        // which CCR-I are refused for everyone.
        assert_eq!(d.max_in_flight * 2, d.max_pending_requests);
    }

    #[test]
    fn defaults_match_the_documented_zero_config() {
        let c = Config::zero_config();
        assert!(c.zero_config);
        assert_eq!(c.node.origin_host, "pcrf.localdomain");
        assert_eq!(c.diameter.listen, "0.0.0.0:3868".parse().expect("addr"));
        assert_eq!(c.policy.path, PathBuf::from("policies/default.lua"));
        assert!(c.validate("x").is_empty());
    }

    #[test]
    fn syntax_errors_have_line_and_column() {
        let e = Config::parse("[node]\norigin_host = \n", "pcrf.toml").expect_err("bad");
        assert!(e.problems[0].location.starts_with("pcrf.toml:2:"), "{e}");
        let e = Config::parse("[node]\nbogus = 1\n", "pcrf.toml").expect_err("unknown key");
        assert!(e.to_string().contains("bogus"), "{e}");
    }

    #[test]
    fn every_semantic_problem_is_reported_at_once() {
        let text = r#"
[node]
origin_host = "not a host"
[diameter]
watchdog_secs = 1
[policy]
time_zone = "Mars/Olympus"
[[peers]]
origin_host = "pgw.example"
[[peers]]
origin_host = "PGW.example"
"#;
        let e = Config::parse(text, "c.toml").expect_err("bad");
        let keys: Vec<&str> = e.problems.iter().map(|p| p.location.as_str()).collect();
        assert_eq!(
            keys,
            vec![
                "c.toml: [node].origin_host",
                "c.toml: [diameter].watchdog_secs",
                "c.toml: [[peers]] #2.origin_host",
                "c.toml: [policy].time_zone",
            ]
        );
    }

    #[test]
    fn limits_before_cer_are_checked_against_each_other() {
        let c = Config::parse("[diameter]\n", "c.toml").expect("defaults");
        assert_eq!(c.diameter.max_message_bytes_awaiting_cer, 16 << 10);
        assert_eq!(c.diameter.max_buffered_bytes_awaiting_cer, 4 << 20);
        for (text, key) in [
            (
                "max_message_bytes_awaiting_cer = 100",
                "max_message_bytes_awaiting_cer",
            ),
            (
                "max_message_bytes = 8192\nmax_message_bytes_awaiting_cer = 16384",
                "max_message_bytes_awaiting_cer",
            ),
            (
                "max_buffered_bytes_awaiting_cer = 4096",
                "max_buffered_bytes_awaiting_cer",
            ),
        ] {
            let e = Config::parse(&format!("[diameter]\n{text}\n"), "c.toml").expect_err(text);
            assert_eq!(e.problems.len(), 1, "{text}: {e}");
            assert!(e.problems[0].location.ends_with(key), "{text}: {e}");
        }
    }

    #[test]
    fn usage_section_checks_times_and_window() {
        let e = Config::parse(
            "[usage]\nspread_secs = 100000\ntime_boundaries = [\"01:00\", \"25:00\", \"6:00\"]\n",
            "c.toml",
        )
        .expect_err("bad");
        assert_eq!(e.problems.len(), 3, "{e}");
        let c = Config::parse(
            "[usage]\ntime_boundaries = [\"01:00\", \"06:30\"]\n",
            "c.toml",
        )
        .expect("valid");
        assert_eq!(c.usage.boundaries(), vec![(1, 0), (6, 30)]);
        assert!(c.usage.is_default_path());
    }

    /// Writes PEM text to a scratch file (the TLS checks read files).
    fn pem_file(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write pem");
        p
    }

    fn tls_config(cert: &Path, key: &Path, ca: &Path) -> String {
        format!(
            "[diameter]\nlisten = \"127.0.0.1:3868\"\n[diameter.tls]\nlisten = \"127.0.0.1:5658\"\n\
             certificate = {cert:?}\nprivate_key = {key:?}\nca = {ca:?}\n\
             [[peers]]\norigin_host = \"pgw.example\"\ntls = true\n"
        )
    }

    #[test]
    fn tls_section_is_loaded_and_its_files_checked() {
        let dir = std::env::temp_dir().join(format!("pcrf-config-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).expect("ca");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let leaf = |name: &str| {
            let k = rcgen::KeyPair::generate().expect("key");
            let c = rcgen::CertificateParams::new(vec![name.to_string()])
                .expect("params")
                .signed_by(&k, &issuer)
                .expect("leaf");
            (c.pem(), k.serialize_pem())
        };
        let (cert, key) = leaf("pcrf.localdomain");
        let (_, other_key) = leaf("pcrf.localdomain");
        let cert = pem_file(&dir, "cert.pem", &cert);
        let key = pem_file(&dir, "key.pem", &key);
        let other_key = pem_file(&dir, "other.key", &other_key);
        let ca = pem_file(&dir, "ca.pem", &ca_cert.pem());

        let c = Config::parse(&tls_config(&cert, &key, &ca), "c.toml").expect("valid");
        let t = c.diameter.tls.as_ref().expect("tls section");
        assert!(t.require_client_certificate, "mutual TLS by default");
        assert_eq!(t.listen, "127.0.0.1:5658".parse().expect("addr"));
        assert!(c.peers[0].tls);

        // A key of another certificate.
        let e = Config::parse(&tls_config(&cert, &other_key, &ca), "c.toml").expect_err("mismatch");
        assert_eq!(
            e.to_string(),
            "c.toml: [diameter.tls]: the private key does not match the certificate"
        );
        // A missing file names itself.
        let gone = dir.join("missing.pem");
        let e = Config::parse(&tls_config(&cert, &gone, &ca), "c.toml").expect_err("gone");
        assert!(
            e.to_string().contains(&format!(
                "cannot read the private key file {}",
                gone.display()
            )),
            "{e}"
        );
        // Not a key at all.
        let e = Config::parse(&tls_config(&cert, &cert, &ca), "c.toml").expect_err("cert");
        assert!(e.to_string().contains("no PEM private key found"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_tls_peer_needs_a_tls_listener_on_another_port() {
        let e = Config::parse(
            "[[peers]]\norigin_host = \"pgw.example\"\ntls = true\n",
            "c.toml",
        )
        .expect_err("no listener");
        assert_eq!(
            e.to_string(),
            "c.toml: [[peers]] #1.tls: needs a [diameter.tls] section (there is no TLS listener)"
        );
        let e = Config::parse(
            "[diameter]\nlisten = \"0.0.0.0:3868\"\n[diameter.tls]\nlisten = \"0.0.0.0:3868\"\n\
             certificate = \"/nonexistent/c\"\nprivate_key = \"/nonexistent/k\"\nca = \"/nonexistent/ca\"\n",
            "c.toml",
        )
        .expect_err("same port");
        let keys: Vec<&str> = e.problems.iter().map(|p| p.location.as_str()).collect();
        assert_eq!(
            keys,
            vec!["c.toml: [diameter.tls]", "c.toml: [diameter.tls].listen"]
        );
        assert!(
            e.to_string()
                .contains("shares its port with [diameter].listen"),
            "{e}"
        );
    }

    #[test]
    fn listeners_may_not_share_a_port() {
        let parse = |api: &str, diameter: &str| {
            Config::parse(
                &format!("[diameter]\nlisten = {diameter:?}\n[api]\nlisten = {api:?}\n"),
                "c.toml",
            )
        };
        for (api, diameter) in [
            ("127.0.0.1:3868", "127.0.0.1:3868"),
            ("127.0.0.1:3868", "0.0.0.0:3868"),
            ("[::]:3868", "127.0.0.1:3868"),
        ] {
            let e = parse(api, diameter).expect_err(api);
            assert_eq!(
                e.to_string(),
                "c.toml: [api].listen: shares its port with [diameter].listen: two listeners cannot bind one socket"
            );
        }
        for (api, diameter) in [
            ("127.0.0.2:3868", "127.0.0.1:3868"),
            ("127.0.0.1:8080", "0.0.0.0:3868"),
            ("127.0.0.1:0", "127.0.0.1:0"),
        ] {
            assert!(parse(api, diameter).is_ok(), "{api} {diameter}");
        }
    }

    #[test]
    fn a_relay_must_be_pinned_to_addresses_or_tls() {
        let e = Config::parse(
            "[[peers]]\norigin_host = \"dra.example\"\nrelay = true\n",
            "c.toml",
        )
        .expect_err("unpinned relay");
        assert_eq!(
            e.to_string(),
            "c.toml: [[peers]] #1.relay: a relay may speak for any node: pin it with `addresses` or `tls = true`"
        );
        let c = Config::parse(
            "[[peers]]\norigin_host = \"dra.example\"\nrelay = true\naddresses = [\"192.0.2.1\"]\n\
             [[peers]]\norigin_host = \"pgw.example\"\n",
            "c.toml",
        )
        .expect("pinned relay");
        assert!(c.peers[0].relay);
        assert!(!c.peers[1].relay, "relay defaults to false");
    }

    #[test]
    fn a_failover_group_needs_two_peers() {
        let e = Config::parse(
            "[[peers]]\norigin_host = \"pgw1.example\"\nfailover_group = \"pair\"\n\
             [[peers]]\norigin_host = \"pgw2.example\"\nfailover_group = \"piar\"\n",
            "c.toml",
        )
        .expect_err("a group of one");
        assert!(
            e.to_string().contains(
                "[[peers]] #1.failover_group: no other peer is in failover group \"pair\""
            ),
            "{e}"
        );
        let c = Config::parse(
            "[[peers]]\norigin_host = \"pgw1.example\"\nfailover_group = \"pair\"\n\
             [[peers]]\norigin_host = \"pgw2.example\"\nfailover_group = \"pair\"\n\
             [[peers]]\norigin_host = \"pgw3.example\"\n",
            "c.toml",
        )
        .expect("a pair");
        assert_eq!(c.peers[1].failover_group.as_deref(), Some("pair"));
        assert_eq!(c.peers[2].failover_group, None, "none by default");
    }

    #[test]
    fn the_api_token_can_come_from_a_file() {
        let dir = std::env::temp_dir().join(format!("pcrf-token-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("api-token");
        std::fs::write(&file, "  0123456789abcdef-token\n").expect("write");
        let text = format!("[api]\ntoken_file = {:?}\n", file.display().to_string());
        let c = Config::parse(&text, "c.toml").expect("token file");
        assert_eq!(c.api.token.as_deref(), Some("0123456789abcdef-token"));
        assert!(c.api.validate().is_ok());

        let both = format!("[api]\ntoken = \"0123456789abcdef-token\"\n{}", &text[6..]);
        let e = Config::parse(&both, "c.toml").expect_err("token and token_file");
        assert_eq!(
            e.to_string(),
            "c.toml: [api].token_file: set api.token or api.token_file, not both"
        );

        std::fs::write(&file, "\n").expect("write");
        let e = Config::parse(&text, "c.toml").expect_err("empty file");
        assert!(e.to_string().ends_with("is empty"), "{e}");

        std::fs::remove_file(&file).expect("remove");
        let e = Config::parse(&text, "c.toml").expect_err("missing file");
        assert!(
            e.to_string()
                .contains("c.toml: [api].token_file: cannot read"),
            "{e}"
        );
        let _ = std::fs::remove_dir(&dir);
    }

    #[test]
    fn the_example_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/pcrf.example.toml");
        let c = Config::load(&path).expect("example config must load");
        assert!(!c.zero_config);
        assert_ne!(c.checksum, 0);
    }
}
