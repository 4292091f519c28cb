//! The OCS peers of Sy (`[sy]` in the configuration): the PCRF connects to
//! each (reconnecting with backoff), and sends each request to the first
//! OCS in priority order that is up, failing over to the next when it
//! fails or does not answer in time (the retry carries the T flag, RFC 6733
//! §5.5.4). A recovered OCS is used again as soon as it is up. The whole
//! exchange is bounded by `timeout_ms`, so a dead OCS cannot hold Gx.

use diameter::codec::{Message, MessageBuilder};
use diameter::peer::WatchdogState;
use diameter::transport::{self, Handler, Initiator, RequestError};
use serde::Deserialize;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::time::Instant;

/// One OCS, in priority order in `[sy].ocs`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OcsConfig {
    /// The Origin-Host its CEA must carry.
    pub origin_host: String,
    /// Destination-Realm of requests to it (default: our own realm).
    #[serde(default)]
    pub origin_realm: Option<String>,
    /// Where to connect.
    pub address: SocketAddr,
}

/// `[sy]`: spending limits are off when neither an OCS nor a CHF is
/// configured.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyConfig {
    #[serde(default)]
    pub ocs: Vec<OcsConfig>,
    /// A CHF instead of the OCSs (N28, TS 29.594): its `{apiRoot}`, e.g.
    /// `http://chf.example:8000`. Exclusive with `ocs`; needs `[sbi]`,
    /// where the CHF's notifications come in.
    #[serde(default)]
    pub chf: Option<String>,
    /// The bound on one Sy or N28 exchange, failover included (ms).
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// After an SLR got no usable answer, the subscriber's CCRs do not ask
    /// again for this long (seconds): a hung OCS costs each subscriber one
    /// `timeout_ms` per `retry_secs`, not one per CCR.
    #[serde(default = "default_retry")]
    pub retry_secs: u64,
}

fn default_retry() -> u64 {
    30
}

fn default_timeout() -> u64 {
    1000
}

impl Default for SyConfig {
    fn default() -> Self {
        SyConfig {
            ocs: Vec::new(),
            chf: None,
            timeout_ms: default_timeout(),
            retry_secs: default_retry(),
        }
    }
}

impl SyConfig {
    /// Whether spending limits are on (an OCS or a CHF is configured).
    pub fn enabled(&self) -> bool {
        self.uses_ocs() || self.chf.is_some()
    }

    /// Whether the peers are OCSs over Sy (Diameter).
    pub fn uses_ocs(&self) -> bool {
        !self.ocs.is_empty()
    }

    /// Problems that make the section unusable.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(chf) = &self.chf {
            if self.uses_ocs() {
                return Err(
                    "[sy]: set either ocs (Sy towards OCSs) or chf (N28 towards a CHF), not both"
                        .into(),
                );
            }
            let host = chf
                .strip_prefix("http://")
                .or_else(|| chf.strip_prefix("https://"))
                .map(|rest| rest.split('/').next().unwrap_or(""));
            if host.is_none_or(str::is_empty) {
                return Err(format!(
                    "[sy].chf {chf:?} is not an http:// or https:// URI with a host"
                ));
            }
        }
        if self.enabled() && !(10..=60_000).contains(&self.timeout_ms) {
            return Err("[sy].timeout_ms must be 10..=60000".into());
        }
        for (i, o) in self.ocs.iter().enumerate() {
            if o.origin_host.trim().is_empty() {
                return Err(format!("[sy].ocs[{i}].origin_host is empty"));
            }
            if self.ocs[..i]
                .iter()
                .any(|p| p.origin_host.eq_ignore_ascii_case(&o.origin_host))
            {
                return Err(format!(
                    "[sy].ocs[{i}].origin_host {} is listed twice",
                    o.origin_host
                ));
            }
        }
        Ok(())
    }
}

/// Why a Sy request got no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OcsError {
    #[error("no OCS is up")]
    NoneUp,
    #[error("no OCS answered within {0} ms")]
    Timeout(u64),
    #[error("OCS request failed: {0}")]
    Failed(RequestError),
}

struct Ocs {
    host: String,
    realm: String,
    initiator: Initiator,
}

/// An answer and the OCS that gave it.
pub struct OcsAnswer {
    pub msg: Message,
    pub host: String,
}

/// The connections to the configured OCSs.
pub struct OcsPool {
    peers: Vec<Ocs>,
    timeout: Duration,
}

impl OcsPool {
    /// Starts connecting to every OCS of `cfg` from `node` (whose handler
    /// then also receives the OCSs' SNRs).
    pub fn start<H: Handler>(
        node: &transport::Node<H>,
        cfg: &SyConfig,
        own_realm: &str,
    ) -> OcsPool {
        let peers = cfg
            .ocs
            .iter()
            .map(|o| Ocs {
                host: o.origin_host.clone(),
                realm: o
                    .origin_realm
                    .clone()
                    .unwrap_or_else(|| own_realm.to_owned()),
                initiator: node.connect(o.address, Some(&o.origin_host)),
            })
            .collect();
        OcsPool {
            peers,
            timeout: Duration::from_millis(cfg.timeout_ms),
        }
    }

    /// Each OCS (priority order) and whether it is up now.
    pub fn status(&self) -> Vec<(String, bool)> {
        self.peers
            .iter()
            .map(|o| (o.host.clone(), is_up(&o.initiator)))
            .collect()
    }

    /// Sends a request built by `build(builder, destination_host,
    /// destination_realm)` to the first OCS up, then to the next ones on
    /// failure, all within the timeout.
    pub async fn request(
        &self,
        app_id: u32,
        cmd: u32,
        build: impl Fn(&mut MessageBuilder<'_>, &str, &str),
    ) -> Result<OcsAnswer, OcsError> {
        let deadline = Instant::now() + self.timeout;
        let up: Vec<&Ocs> = self.peers.iter().filter(|o| is_up(&o.initiator)).collect();
        if up.is_empty() {
            return Err(OcsError::NoneUp);
        }
        let mut last = OcsError::NoneUp;
        let mut retransmit = false;
        for (i, ocs) in up.iter().enumerate() {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                break;
            }
            // Leave the next OCS half of what is left.
            let budget = if i + 1 < up.len() {
                remaining / 2
            } else {
                remaining
            };
            let handle = ocs.initiator.handle();
            let again = retransmit;
            let sent = handle.request(app_id, cmd, |b| {
                if again {
                    b.set_retransmit();
                }
                build(b, &ocs.host, &ocs.realm);
            });
            match tokio::time::timeout(budget, sent).await {
                Ok(Ok(msg)) => {
                    return Ok(OcsAnswer {
                        msg,
                        host: ocs.host.clone(),
                    })
                }
                Ok(Err(e)) => {
                    tracing::warn!(ocs = %ocs.host, error = %e, "Sy request failed; trying the next OCS");
                    // Sent but unanswered: the retry is a retransmission.
                    retransmit |= matches!(e, RequestError::Timeout | RequestError::Disconnected);
                    last = OcsError::Failed(e);
                }
                Err(_) => {
                    tracing::warn!(ocs = %ocs.host, "no Sy answer in time; trying the next OCS");
                    retransmit = true;
                    last = OcsError::Timeout(self.timeout.as_millis() as u64);
                }
            }
        }
        if last == OcsError::NoneUp {
            last = OcsError::Timeout(self.timeout.as_millis() as u64);
        }
        Err(last)
    }
}

fn is_up(i: &Initiator) -> bool {
    let h = i.handle();
    h.is_open() && h.watchdog() == WatchdogState::Okay
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_checks() {
        let c: SyConfig = toml::from_str("").expect("empty");
        assert!(!c.enabled());
        assert_eq!(c.timeout_ms, 1000);
        assert_eq!(c.retry_secs, 30);
        let c: SyConfig = toml::from_str(
            r#"
timeout_ms = 500
ocs = [ { origin_host = "ocs1", address = "127.0.0.1:3870" },
        { origin_host = "ocs2", origin_realm = "b", address = "127.0.0.1:3871" } ]
"#,
        )
        .expect("parse");
        assert!(c.enabled());
        assert_eq!(c.validate(), Ok(()));
        let mut twice = c.clone();
        twice.ocs[1].origin_host = "OCS1".into();
        assert!(twice.validate().is_err());
        let mut slow = c;
        slow.timeout_ms = 0;
        assert!(slow.validate().is_err());
        assert!(toml::from_str::<SyConfig>("bogus = 1").is_err());
    }

    #[test]
    fn a_chf_instead_of_the_ocss() {
        let c: SyConfig = toml::from_str(r#"chf = "http://127.0.0.1:9000""#).expect("parse");
        assert!(c.enabled());
        assert!(!c.uses_ocs());
        assert_eq!(c.validate(), Ok(()));
        let both: SyConfig = toml::from_str(
            r#"
chf = "http://127.0.0.1:9000"
ocs = [ { origin_host = "ocs1", address = "127.0.0.1:3870" } ]
"#,
        )
        .expect("parse");
        let e = both.validate().expect_err("both");
        assert!(e.contains("not both"), "{e}");
        for bad in ["127.0.0.1:9000", "ftp://chf", "http://", "http:///x"] {
            let c = SyConfig {
                chf: Some(bad.into()),
                ..SyConfig::default()
            };
            assert!(c.validate().is_err(), "{bad}");
        }
    }
}
