//! Registration with the NRF (TS 29.510 §5.2.2.2, §5.2.2.3, §5.2.2.4):
//! the node registers itself as a PCF offering npcf-smpolicycontrol with
//! its `apiPrefix` (`PUT /nnrf-nfm/v1/nf-instances/{id}`), sends a
//! heartbeat (a JSON-Patch `PATCH` of `nfStatus`) at the interval the NRF
//! answers, registers again when the NRF says it forgot us (404) or stops
//! answering (with backoff and jitter, as the Diameter peers reconnect),
//! and deregisters (`DELETE`) on shutdown. Off when `[sbi.nrf]` is absent.
//! HTTP/2 with prior knowledge, as NRFs serve only HTTP/2.

use diameter::peer::{Backoff, Jitter};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::time::Duration;

/// `[sbi.nrf]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NrfConfig {
    /// The NRF's API root, e.g. `http://10.0.0.10:7777` (h2c).
    pub uri: String,
    /// This node's NF instance id, a UUID; keep it across restarts, and
    /// give every node of a cluster its own.
    pub nf_instance_id: String,
    /// Where SMFs reach this node's SBI listener, e.g.
    /// `http://10.0.0.20:7777` (the `apiPrefix` of the registered service).
    pub api_prefix: String,
    /// Heartbeat interval offered at registration, seconds; the NRF's
    /// answer wins.
    #[serde(default = "default_heartbeat")]
    pub heartbeat_secs: u64,
    /// First delay before registering again after a failure, ms; doubles
    /// with jitter up to `retry_max_ms`.
    #[serde(default = "default_retry_initial")]
    pub retry_initial_ms: u64,
    #[serde(default = "default_retry_max")]
    pub retry_max_ms: u64,
    /// One request to the NRF, ms.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
}

fn default_heartbeat() -> u64 {
    10
}
fn default_retry_initial() -> u64 {
    500
}
fn default_retry_max() -> u64 {
    30_000
}
fn default_timeout() -> u64 {
    3_000
}

impl NrfConfig {
    /// Problems with the values, each as (key, message).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if !self.uri.starts_with("http://") || self.uri.len() <= "http://".len() {
            out.push((
                "[sbi.nrf].uri".into(),
                "must be an http:// URI (h2c with prior knowledge)".into(),
            ));
        }
        if !is_uuid(&self.nf_instance_id) {
            out.push((
                "[sbi.nrf].nf_instance_id".into(),
                "must be a UUID (8-4-4-4-12 hex digits)".into(),
            ));
        }
        if !(self.api_prefix.starts_with("http://") || self.api_prefix.starts_with("https://")) {
            out.push((
                "[sbi.nrf].api_prefix".into(),
                "must be an http:// or https:// URI".into(),
            ));
        }
        if self.heartbeat_secs == 0 || self.timeout_ms == 0 || self.retry_initial_ms == 0 {
            out.push((
                "[sbi.nrf]".into(),
                "heartbeat_secs, timeout_ms and retry_initial_ms must be at least 1".into(),
            ));
        }
        out
    }

    /// This node's NFProfile (TS 29.510 §6.1.6.2.2).
    pub fn profile(&self) -> serde_json::Value {
        let scheme = if self.api_prefix.starts_with("https://") {
            "https"
        } else {
            "http"
        };
        let mut service = serde_json::json!({
            "serviceInstanceId": "npcf-smpolicycontrol",
            "serviceName": "npcf-smpolicycontrol",
            "versions": [{"apiVersionInUri": "v1", "apiFullVersion": "1.0.0"}],
            "scheme": scheme,
            "nfServiceStatus": "REGISTERED",
            "apiPrefix": self.api_prefix,
        });
        let mut profile = serde_json::json!({
            "nfInstanceId": self.nf_instance_id,
            "nfType": "PCF",
            "nfStatus": "REGISTERED",
            "heartBeatTimer": self.heartbeat_secs,
            "nfServices": [],
        });
        // An address the SMF can connect to without DNS, when the prefix
        // names one (open5gs reads ipEndPoints).
        if let Some((ip, port)) = host_port(&self.api_prefix) {
            service["ipEndPoints"] = serde_json::json!([{"ipv4Address": ip, "port": port}]);
            profile["ipv4Addresses"] = serde_json::json!([ip]);
        }
        profile["nfServices"] = serde_json::json!([service]);
        profile
    }

    fn instance_uri(&self) -> String {
        format!(
            "{}/nnrf-nfm/v1/nf-instances/{}",
            self.uri.trim_end_matches('/'),
            self.nf_instance_id
        )
    }
}

fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The IPv4 address and port of an `http://a.b.c.d[:port]` prefix.
fn host_port(prefix: &str) -> Option<(String, u16)> {
    let (rest, default_port) = match prefix.strip_prefix("http://") {
        Some(r) => (r, 80),
        None => (prefix.strip_prefix("https://")?, 443),
    };
    let authority = rest.split('/').next()?;
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().ok()?),
        None => (authority, default_port),
    };
    let ip: std::net::Ipv4Addr = host.parse().ok()?;
    Some((ip.to_string(), port))
}

/// Why a registration or heartbeat did not go through.
#[derive(Debug, thiserror::Error)]
enum NrfError {
    #[error("the NRF does not know this instance (404)")]
    Forgotten,
    #[error("the NRF answered {0}")]
    Status(u16),
    #[error("{0}")]
    Transport(#[from] reqwest::Error),
}

/// Registers, keeps the registration alive until `shutdown` resolves,
/// then deregisters. Returns after the deregistration (or its failure).
pub async fn run(config: NrfConfig, shutdown: impl Future<Output = ()>) {
    let client = match reqwest::Client::builder()
        .http2_prior_knowledge()
        .timeout(Duration::from_millis(config.timeout_ms.max(1)))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "NRF client could not be built; not registering");
            return;
        }
    };
    let mut backoff = Backoff::new(
        Duration::from_millis(config.retry_initial_ms),
        Duration::from_millis(config.retry_max_ms),
        None,
        Jitter::from_entropy(),
    );
    tokio::pin!(shutdown);
    let mut registered = false;
    loop {
        // Register (again).
        let heartbeat = tokio::select! {
            r = register(&client, &config) => r,
            () = &mut shutdown => break,
        };
        let mut interval = match heartbeat {
            Ok(secs) => {
                registered = true;
                backoff.reset();
                tracing::info!(nrf = %config.uri, heartbeat_secs = secs, "registered with the NRF");
                Duration::from_secs(secs.max(1))
            }
            Err(e) => {
                let delay = backoff.next_delay();
                tracing::warn!(nrf = %config.uri, error = %e, retry_ms = delay.as_millis() as u64, "NRF registration failed");
                tokio::select! {
                    () = tokio::time::sleep(delay) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        // Heartbeats until the NRF forgets us or stops answering.
        loop {
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = &mut shutdown => {
                    deregister(&client, &config).await;
                    return;
                }
            }
            match heartbeat_once(&client, &config).await {
                Ok(Some(secs)) => interval = Duration::from_secs(secs.max(1)),
                Ok(None) => {}
                Err(NrfError::Forgotten) => {
                    tracing::warn!(nrf = %config.uri, "the NRF forgot this instance; registering again");
                    break;
                }
                Err(e) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(nrf = %config.uri, error = %e, retry_ms = delay.as_millis() as u64, "NRF heartbeat failed; registering again");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => break,
                        () = &mut shutdown => {
                            deregister(&client, &config).await;
                            return;
                        }
                    }
                }
            }
        }
    }
    if registered {
        deregister(&client, &config).await;
    }
}

/// PUT the profile; the heartbeat interval the NRF answers (or ours).
async fn register(client: &reqwest::Client, config: &NrfConfig) -> Result<u64, NrfError> {
    let r = client
        .put(config.instance_uri())
        .header("content-type", "application/json")
        .body(config.profile().to_string())
        .send()
        .await?;
    let status = r.status().as_u16();
    if status != 200 && status != 201 {
        return Err(NrfError::Status(status));
    }
    Ok(heartbeat_of(&r.bytes().await.unwrap_or_default()).unwrap_or(config.heartbeat_secs))
}

/// One heartbeat; `Some` when the NRF answered a new interval.
async fn heartbeat_once(
    client: &reqwest::Client,
    config: &NrfConfig,
) -> Result<Option<u64>, NrfError> {
    let patch = r#"[{"op":"replace","path":"/nfStatus","value":"REGISTERED"}]"#;
    let r = client
        .patch(config.instance_uri())
        .header("content-type", "application/json-patch+json")
        .body(patch)
        .send()
        .await?;
    match r.status().as_u16() {
        204 => Ok(None),
        200 => Ok(heartbeat_of(&r.bytes().await.unwrap_or_default())),
        404 => Err(NrfError::Forgotten),
        s => Err(NrfError::Status(s)),
    }
}

async fn deregister(client: &reqwest::Client, config: &NrfConfig) {
    match client.delete(config.instance_uri()).send().await {
        Ok(r) if r.status().is_success() || r.status().as_u16() == 404 => {
            tracing::info!(nrf = %config.uri, "deregistered from the NRF");
        }
        Ok(r) => {
            tracing::warn!(nrf = %config.uri, status = r.status().as_u16(), "NRF deregistration refused")
        }
        Err(e) => tracing::warn!(nrf = %config.uri, error = %e, "NRF deregistration failed"),
    }
}

/// `heartBeatTimer` of an NFProfile answer, when present and sane.
fn heartbeat_of(body: &[u8]) -> Option<u64> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    v.get("heartBeatTimer")?
        .as_u64()
        .filter(|&s| (1..=3600).contains(&s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> NrfConfig {
        NrfConfig {
            uri: "http://127.0.0.10:7777".into(),
            nf_instance_id: "6f1f3c2e-8d0b-4a51-9c1e-2b7f6d9a0e11".into(),
            api_prefix: "http://10.0.0.20:7777".into(),
            heartbeat_secs: default_heartbeat(),
            retry_initial_ms: default_retry_initial(),
            retry_max_ms: default_retry_max(),
            timeout_ms: default_timeout(),
        }
    }

    #[test]
    fn the_profile_names_the_pcf_and_its_service() {
        let p = config().profile();
        assert_eq!(p["nfType"], "PCF");
        assert_eq!(p["nfStatus"], "REGISTERED");
        assert_eq!(p["nfInstanceId"], "6f1f3c2e-8d0b-4a51-9c1e-2b7f6d9a0e11");
        let s = &p["nfServices"][0];
        assert_eq!(s["serviceName"], "npcf-smpolicycontrol");
        assert_eq!(s["apiPrefix"], "http://10.0.0.20:7777");
        assert_eq!(s["versions"][0]["apiVersionInUri"], "v1");
        assert_eq!(s["ipEndPoints"][0]["port"], 7777);
        assert!(config().problems().is_empty());
        let bad = NrfConfig {
            nf_instance_id: "not-a-uuid".into(),
            uri: "ftp://x".into(),
            ..config()
        };
        assert_eq!(bad.problems().len(), 2);
    }

    #[test]
    fn the_heartbeat_interval_comes_from_the_answer() {
        assert_eq!(heartbeat_of(br#"{"heartBeatTimer": 3}"#), Some(3));
        assert_eq!(heartbeat_of(br#"{"heartBeatTimer": 0}"#), None);
        assert_eq!(heartbeat_of(b"nonsense"), None);
    }
}
