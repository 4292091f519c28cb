//! `[notifications]`: the bound on undelivered events and the sinks that
//! receive them, each with the event names routed to it. Parsed with the
//! rest of the configuration file and checked here, so `pcrf check-config`
//! reports a bad sink as start-up would.

use serde::Deserialize;
use std::time::Duration;

/// `[notifications]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationsConfig {
    /// Most deliveries (one event to one sink) waiting at once, all sinks
    /// together. A new event that finds no room is dropped and counted
    /// (`pcrf_notifications_dropped_total`): the Gx answer never waits.
    #[serde(default = "default_max_backlog")]
    pub max_backlog: usize,
    /// Percentages of an allowance whose crossing emits `quota.threshold`
    /// (once per accumulator, threshold and period).
    #[serde(default = "default_thresholds")]
    pub quota_thresholds: Vec<u8>,
    #[serde(default)]
    pub sinks: Vec<SinkConfig>,
}

impl Default for NotificationsConfig {
    fn default() -> Self {
        NotificationsConfig {
            max_backlog: default_max_backlog(),
            quota_thresholds: default_thresholds(),
            sinks: Vec::new(),
        }
    }
}

fn default_thresholds() -> Vec<u8> {
    vec![80, 100]
}

fn default_max_backlog() -> usize {
    100_000
}

/// The kind of receiver a sink delivers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkKind {
    /// HTTP POST of the event's JSON, signed with HMAC-SHA256.
    Webhook,
    /// AMQP 0-9-1 publish (RabbitMQ), persistent, with publisher confirms.
    Amqp,
}

impl SinkKind {
    pub fn label(self) -> &'static str {
        match self {
            SinkKind::Webhook => "webhook",
            SinkKind::Amqp => "amqp",
        }
    }
}

/// `[[notifications.sinks]]`: one receiver.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    /// Names the sink in metrics, logs and the store (keep it stable:
    /// undelivered events are stored under it).
    pub name: String,
    pub kind: SinkKind,
    /// Webhook: the `http://` or `https://` URL posted to. AMQP: the
    /// broker, `amqp://user:password@host:port/vhost`.
    pub url: String,
    /// Event-name patterns routed to this sink; `*` matches any run of
    /// characters (`session.*`, `policy.quota-*`, `*`).
    #[serde(default = "every_event")]
    pub events: Vec<String>,
    /// Webhook: the shared secret of `X-Pcrf-Signature`.
    #[serde(default)]
    pub secret: Option<String>,
    /// Webhook over `https://`: the PEM file of the CA certificates that
    /// may sign the receiver's certificate (the only roots trusted: no
    /// root store is built in).
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    /// AMQP: the exchange published to (declared durable at connect when
    /// `declare_exchange`); empty is the default exchange.
    #[serde(default)]
    pub exchange: String,
    /// AMQP: the exchange's type when declared (`topic`, `direct`, `fanout`).
    #[serde(default = "default_exchange_type")]
    pub exchange_type: String,
    #[serde(default = "yes")]
    pub declare_exchange: bool,
    /// AMQP: the routing key; `{name}` is replaced by the event's name.
    #[serde(default = "default_routing_key")]
    pub routing_key: String,
    /// Deliveries in flight at once (lanes). A subscriber's events always
    /// take the same lane, so they arrive in order.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// One attempt's time limit (request and answer, or publish and confirm).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// First wait after a failed attempt; it doubles (with jitter) up to
    /// `retry_max_ms`. An event is retried until it is delivered.
    #[serde(default = "default_retry_initial_ms")]
    pub retry_initial_ms: u64,
    #[serde(default = "default_retry_max_ms")]
    pub retry_max_ms: u64,
}

fn every_event() -> Vec<String> {
    vec!["*".into()]
}
fn default_exchange_type() -> String {
    "topic".into()
}
fn yes() -> bool {
    true
}
fn default_routing_key() -> String {
    "pcrf.{name}".into()
}
fn default_concurrency() -> usize {
    4
}
fn default_timeout_ms() -> u64 {
    5_000
}
fn default_retry_initial_ms() -> u64 {
    500
}
fn default_retry_max_ms() -> u64 {
    60_000
}

impl SinkConfig {
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// Whether events named `name` go to this sink.
    pub fn routes(&self, name: &str) -> bool {
        self.events.iter().any(|p| glob_match(p, name))
    }
}

/// `*` matches any run of characters (none included); everything else
/// matches itself.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    if !name.ends_with(last) {
        return false;
    }
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// A sink name: it names a metric label and a stored column.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

impl NotificationsConfig {
    /// Every problem, as (key, message).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if self.max_backlog == 0 {
            out.push((
                "[notifications].max_backlog".into(),
                "must be at least 1".into(),
            ));
        }
        if self.quota_thresholds.iter().any(|t| !(1..=100).contains(t)) {
            out.push((
                "[notifications].quota_thresholds".into(),
                "each threshold is a percentage from 1 to 100".into(),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, s) in self.sinks.iter().enumerate() {
            let at = |field: &str| format!("[[notifications.sinks]] #{}.{field}", i + 1);
            let mut bad = |field: &str, m: String| out.push((at(field), m));
            if !valid_name(&s.name) {
                bad(
                    "name",
                    "must be 1 to 64 letters, digits, '-', '_' or '.'".into(),
                );
            }
            if !seen.insert(s.name.clone()) {
                bad("name", format!("{:?} is used twice", s.name));
            }
            if s.events.is_empty() {
                bad(
                    "events",
                    "routes no event; list at least one pattern".into(),
                );
            }
            if s.concurrency == 0 || s.concurrency > 256 {
                bad("concurrency", "must be 1 to 256".into());
            }
            if s.timeout_ms == 0 {
                bad("timeout_ms", "must be at least 1".into());
            }
            if s.retry_initial_ms == 0 || s.retry_max_ms < s.retry_initial_ms {
                bad(
                    "retry_max_ms",
                    "retry_initial_ms must be at least 1 and retry_max_ms at least retry_initial_ms"
                        .into(),
                );
            }
            match s.kind {
                SinkKind::Webhook => {
                    let https = s.url.starts_with("https://");
                    if !s.url.starts_with("http://") && !https {
                        bad(
                            "url",
                            "a webhook URL starts with http:// or https://".into(),
                        );
                    } else if reqwest::Url::parse(&s.url).is_err() {
                        bad("url", "is not a valid URL".into());
                    } else if https && s.ca_file.is_none() {
                        bad(
                            "ca_file",
                            "an https:// webhook needs the CA that signed the receiver's certificate"
                                .into(),
                        );
                    } else if !https && s.ca_file.is_some() {
                        bad("ca_file", "is for an https:// webhook".into());
                    }
                    if s.secret.as_deref().is_none_or(str::is_empty) {
                        bad(
                            "secret",
                            "a webhook needs the shared secret its receiver checks the signature with"
                                .into(),
                        );
                    }
                }
                SinkKind::Amqp => {
                    if s.ca_file.is_some() {
                        bad("ca_file", "is for an https:// webhook".into());
                    }
                    if !s.url.starts_with("amqp://") {
                        bad("url", "an AMQP URL starts with amqp://".into());
                    } else if s.url.parse::<lapin::uri::AMQPUri>().is_err() {
                        bad("url", "is not a valid AMQP URL".into());
                    }
                    if !["topic", "direct", "fanout", "headers"].contains(&s.exchange_type.as_str())
                    {
                        bad(
                            "exchange_type",
                            "must be topic, direct, fanout or headers".into(),
                        );
                    }
                    if s.routing_key.len() > 255 {
                        bad("routing_key", "must be at most 255 bytes".into());
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(glob_match("*", "session.started"));
        assert!(glob_match("session.*", "session.started"));
        assert!(!glob_match("session.*", "peer.up"));
        assert!(glob_match("policy.quota-*", "policy.quota-80"));
        assert!(glob_match("*.up", "peer.up"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "acb"));
        assert!(glob_match("peer.up", "peer.up"));
        assert!(!glob_match("peer.up", "peer.upx"));
        assert!(!glob_match("ab*ba", "aba"));
    }

    #[test]
    fn problems_are_named() {
        let cfg: NotificationsConfig = toml::from_str(
            r#"
            max_backlog = 0
            [[sinks]]
            name = "a b"
            kind = "webhook"
            url = "ftp://x"
            [[sinks]]
            name = "bus"
            kind = "amqp"
            url = "amqp://guest:guest@127.0.0.1:5672/%2f"
            concurrency = 0
            "#,
        )
        .unwrap();
        let p = cfg.problems();
        let text = format!("{p:?}");
        assert!(text.contains("max_backlog"), "{text}");
        assert!(text.contains("#1.name"), "{text}");
        assert!(text.contains("#1.url"), "{text}");
        assert!(text.contains("#1.secret"), "{text}");
        assert!(text.contains("#2.concurrency"), "{text}");
        assert_eq!(p.len(), 5, "{text}");
    }

    #[test]
    fn https_webhooks_need_their_ca() {
        let cfg = |url: &str, ca: &str| -> NotificationsConfig {
            toml::from_str(&format!(
                "[[sinks]]\nname = \"crm\"\nkind = \"webhook\"\nurl = \"{url}\"\nsecret = \"s\"\n{ca}"
            ))
            .unwrap()
        };
        let ca = "ca_file = \"/etc/pcrf/crm-ca.pem\"";
        assert!(cfg("https://127.0.0.1:9443/hook", ca).problems().is_empty());
        assert!(cfg("http://127.0.0.1:9000/hook", "").problems().is_empty());
        let p = format!("{:?}", cfg("https://127.0.0.1:9443/hook", "").problems());
        assert!(p.contains("#1.ca_file"), "{p}");
        let p = format!("{:?}", cfg("http://127.0.0.1:9000/hook", ca).problems());
        assert!(p.contains("#1.ca_file"), "{p}");
    }
}
