//! The PCF binding at the BSF (Nbsf_Management, TS 29.521 §5.2.2): an AF
//! (or the SCP) finds the PCF serving a UE's PDU session through the BSF,
//! so on each N7 Create the node registers a binding (SUPI, GPSI, UE
//! address, DNN, S-NSSAI, and where this PCF is reached), keeps the
//! binding's id in the session's record, and removes the binding when the
//! session ends. Off without `[sbi.bsf]`.
//!
//! Registration runs after the Create is answered (an SMF is not kept
//! waiting for the BSF), tried again with backoff a few times; the id is
//! written to the session under its lock, so a restart still knows which
//! binding to remove.
//!
//! The BSF is the one `[sbi.bsf].uri` names or, without one, the one the
//! NRF of `[sbi.nrf]` offers (Nnrf_NFDiscovery, TS 29.510 §5.3: target
//! BSF, service nbsf-management), the instance of best priority; what was
//! found is kept for the validity period the NRF gives, and looked up
//! again as soon as that BSF fails.

use super::nrf::NrfConfig;
use crate::n7::model::SmPolicyContextData;
use diameter::peer::{Backoff, Jitter};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `[sbi.bsf]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BsfConfig {
    /// The BSF's API root, e.g. `http://10.0.0.11:7777` (h2c, or https);
    /// without one, the BSF is discovered through `[sbi.nrf]`.
    #[serde(default)]
    pub uri: Option<String>,
    /// This PCF's FQDN as bindings name it (optional).
    #[serde(default)]
    pub pcf_fqdn: Option<String>,
    /// Where AFs reach this node's SBI listener (the binding's
    /// `pcfIpEndPoints`); default `[sbi].listen`. Give each node of a
    /// cluster its own: the binding names the node that registered it.
    #[serde(default)]
    pub pcf_address: Option<SocketAddr>,
    /// One request to the BSF, ms.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
}

fn default_timeout() -> u64 {
    3_000
}

/// Tries of one registration or removal.
const ATTEMPTS: u32 = 3;

impl BsfConfig {
    /// Problems with the values, each as (key, message).
    pub fn problems(&self, nrf: Option<&NrfConfig>) -> Vec<(String, String)> {
        let Some(uri) = &self.uri else {
            if nrf.is_none() {
                return vec![(
                    "[sbi.bsf].uri".into(),
                    "no BSF: give its uri, or an [sbi.nrf] to discover one through".into(),
                )];
            }
            return Vec::new();
        };
        let rest = uri
            .strip_prefix("http://")
            .or_else(|| uri.strip_prefix("https://"));
        if rest.is_none_or(str::is_empty) {
            return vec![(
                "[sbi.bsf].uri".into(),
                format!("{uri:?} is not an http:// or https:// URI"),
            )];
        }
        Vec::new()
    }
}

/// The BSF this node registers bindings at: `[sbi.bsf]`, with the NRF to
/// find it through when it names none.
#[derive(Clone, Debug)]
pub struct Bsf {
    pub cfg: BsfConfig,
    nrf: Option<NrfConfig>,
}

impl Bsf {
    /// The BSF `cfg` names, or that `nrf` is asked for.
    pub fn new(cfg: BsfConfig, nrf: Option<NrfConfig>) -> Bsf {
        Bsf { cfg, nrf }
    }

    /// The bindings collection of the BSF: configured, or discovered.
    async fn collection(&self) -> Result<String, String> {
        let root = match (&self.cfg.uri, &self.nrf) {
            (Some(uri), _) => uri.trim_end_matches('/').to_owned(),
            (None, Some(nrf)) => discovered_root(nrf).await?,
            (None, None) => return Err("no BSF configured, and no NRF to discover one".into()),
        };
        Ok(format!("{root}/nbsf-management/v1/pcfBindings"))
    }

    /// Sends what `request` builds to `url`, as [`with_retries`]; a BSF
    /// that fails is looked up again next time.
    async fn exchange(
        &self,
        request: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, String> {
        let r = with_retries(&self.cfg, request).await;
        if r.is_err() && self.cfg.uri.is_none() {
            forget_discovered();
        }
        r
    }

    /// Registers `body`; the binding's id (the last segment of the
    /// answer's `Location`).
    pub async fn register(&self, body: &Value) -> Result<String, String> {
        let url = self.collection().await?;
        let r = self
            .exchange(|c| {
                c.post(&url)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string())
            })
            .await?;
        if r.status() != reqwest::StatusCode::CREATED {
            // 403 EXISTING_BINDING_INFO_FOUND and other 4xx: the BSF's word.
            return Err(format!("the BSF answered {}", r.status().as_u16()));
        }
        r.headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|l| l.rsplit('/').next())
            .filter(|id| !id.is_empty() && id.len() <= 128)
            .map(str::to_owned)
            .ok_or_else(|| "the BSF answered 201 without a usable Location".into())
    }

    /// Removes the binding `id` (a 404 means it is gone already).
    pub async fn deregister(&self, id: &str) -> Result<(), String> {
        let url = format!("{}/{id}", self.collection().await?);
        let r = self.exchange(|c| c.delete(&url)).await?;
        if r.status().is_success() || r.status() == reqwest::StatusCode::NOT_FOUND {
            Ok(())
        } else {
            Err(format!("the BSF answered {}", r.status().as_u16()))
        }
    }
}

/// A BSF the NRF offered: its API root, until when, and which NRF said so.
struct Discovered {
    nrf: String,
    root: String,
    until: Instant,
}

static DISCOVERED: Mutex<Option<Discovered>> = Mutex::new(None);

/// How long a discovery holds when the NRF gives no validity period.
const DEFAULT_VALIDITY: Duration = Duration::from_secs(3600);

fn forget_discovered() {
    *DISCOVERED.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

/// The API root of the BSF `nrf` offers (kept while valid).
async fn discovered_root(nrf: &NrfConfig) -> Result<String, String> {
    {
        let found = DISCOVERED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = found.as_ref() {
            if d.nrf == nrf.uri && Instant::now() < d.until {
                return Ok(d.root.clone());
            }
        }
    }
    let url = format!(
        "{}/nnrf-disc/v1/nf-instances?target-nf-type=BSF&requester-nf-type=PCF&service-names=nbsf-management",
        nrf.uri.trim_end_matches('/')
    );
    let r = super::client::client()?
        .get(&url)
        .timeout(Duration::from_millis(nrf.timeout_ms.max(1)))
        .send()
        .await
        .map_err(|e| format!("BSF discovery at the NRF: {e}"))?;
    if !r.status().is_success() {
        return Err(format!(
            "BSF discovery: the NRF answered {}",
            r.status().as_u16()
        ));
    }
    let body = r
        .bytes()
        .await
        .map_err(|e| format!("BSF discovery at the NRF: {e}"))?;
    let result: Value = serde_json::from_slice(&body)
        .map_err(|e| format!("BSF discovery: the NRF's answer is not JSON: {e}"))?;
    let (root, validity) =
        best_bsf(&result).ok_or("BSF discovery: the NRF offers no BSF with nbsf-management")?;
    tracing::info!(bsf = %root, validity_secs = validity.as_secs(), "BSF discovered through the NRF");
    *DISCOVERED.lock().unwrap_or_else(|e| e.into_inner()) = Some(Discovered {
        nrf: nrf.uri.clone(),
        root: root.clone(),
        until: Instant::now() + validity,
    });
    Ok(root)
}

/// From a SearchResult (TS 29.510 §6.2.6.2.2): the API root of the
/// nbsf-management service of the registered instance of best (lowest)
/// priority, and how long the result holds.
fn best_bsf(result: &Value) -> Option<(String, Duration)> {
    let validity = result["validityPeriod"]
        .as_u64()
        .map_or(DEFAULT_VALIDITY, |s| {
            Duration::from_secs(s.clamp(1, 86_400))
        });
    let mut instances: Vec<&Value> = result["nfInstances"]
        .as_array()?
        .iter()
        .filter(|p| p["nfStatus"].as_str().is_none_or(|s| s == "REGISTERED"))
        .collect();
    instances.sort_by_key(|p| p["priority"].as_u64().unwrap_or(u64::MAX));
    instances
        .into_iter()
        .find_map(service_root)
        .map(|root| (root, validity))
}

/// Where an NFProfile's nbsf-management service is reached: its
/// apiPrefix, or scheme and first IP endpoint, or the profile's FQDN or
/// first IPv4 address. Services come as a list (`nfServices`) or, from
/// Rel-16 NRFs, as a map (`nfServiceList`).
fn service_root(profile: &Value) -> Option<String> {
    let listed = profile["nfServices"].as_array().into_iter().flatten();
    let mapped = profile["nfServiceList"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values());
    let service = listed
        .chain(mapped)
        .find(|s| s["serviceName"] == "nbsf-management")?;
    if let Some(prefix) = service["apiPrefix"].as_str() {
        return Some(prefix.trim_end_matches('/').to_owned());
    }
    let scheme = service["scheme"].as_str().unwrap_or("http");
    let default_port = if scheme == "https" { 443 } else { 80 };
    if let Some(ep) = service["ipEndPoints"].as_array().and_then(|e| e.first()) {
        let port = ep["port"].as_u64().unwrap_or(default_port);
        if let Some(v4) = ep["ipv4Address"].as_str() {
            return Some(format!("{scheme}://{v4}:{port}"));
        }
        if let Some(v6) = ep["ipv6Address"].as_str() {
            return Some(format!("{scheme}://[{v6}]:{port}"));
        }
    }
    let host = service["fqdn"]
        .as_str()
        .or_else(|| profile["fqdn"].as_str())
        .or_else(|| profile["ipv4Addresses"].as_array()?.first()?.as_str())?;
    Some(format!("{scheme}://{host}"))
}

/// The PcfBinding (TS 29.521 §5.6.2.2) of a PDU session with `ctx`,
/// served at `pcf` (and `fqdn`).
pub fn binding(ctx: &SmPolicyContextData, pcf: SocketAddr, fqdn: Option<&str>) -> Value {
    let mut b = json!({
        "dnn": ctx.dnn,
        "snssai": ctx.slice_info,
        "pcfIpEndPoints": [match pcf {
            SocketAddr::V4(a) => json!({"ipv4Address": a.ip().to_string(), "transport": "TCP", "port": a.port()}),
            SocketAddr::V6(a) => json!({"ipv6Address": a.ip().to_string(), "transport": "TCP", "port": a.port()}),
        }],
    });
    let fields = [
        ("supi", ctx.supi.as_deref()),
        ("gpsi", ctx.gpsi.as_deref()),
        ("ipv4Addr", ctx.ipv4_address.as_deref()),
        ("ipv6Prefix", ctx.ipv6_address_prefix.as_deref()),
        ("pcfFqdn", fqdn),
    ];
    for (k, v) in fields {
        if let Some(v) = v {
            b[k] = Value::from(v);
        }
    }
    b
}

use super::client::client;

/// Sends what `request` builds, at most ATTEMPTS times with a jittered,
/// doubling wait between, until an answer is not a 5xx; the last answer,
/// or why there was none.
async fn with_retries(
    cfg: &BsfConfig,
    request: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
) -> Result<reqwest::Response, String> {
    let client = client()?;
    let mut backoff = Backoff::new(
        Duration::from_millis(200),
        Duration::from_secs(2),
        None,
        Jitter::from_entropy(),
    );
    let mut attempt = 1;
    loop {
        let sent = request(client)
            .timeout(Duration::from_millis(cfg.timeout_ms.max(1)))
            .send()
            .await;
        let last = match sent {
            Ok(r) if !r.status().is_server_error() => return Ok(r),
            Ok(r) => format!("the BSF answered {}", r.status().as_u16()),
            Err(e) => e.to_string(),
        };
        if attempt >= ATTEMPTS {
            return Err(last);
        }
        attempt += 1;
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_names_the_ue_the_session_and_this_pcf() {
        let ctx = crate::n7::decode::decode_create(
            include_bytes!("../../tests/n7/open5gs-create.json"),
            &crate::sbi::body::DecodeLimits::default(),
        )
        .expect("decodes");
        let b = binding(
            &ctx,
            "10.0.0.20:7777".parse().expect("addr"),
            Some("pcf.5gc"),
        );
        assert_eq!(b["supi"], "imsi-001010000000001");
        assert_eq!(b["ipv4Addr"], "10.45.0.2");
        assert_eq!(b["dnn"], "internet");
        assert_eq!(b["snssai"]["sst"], 1);
        assert_eq!(b["pcfFqdn"], "pcf.5gc");
        assert_eq!(b["pcfIpEndPoints"][0]["port"], 7777);
        let bad = BsfConfig {
            uri: Some("bsf:7777".into()),
            pcf_fqdn: None,
            pcf_address: None,
            timeout_ms: 1,
        };
        assert_eq!(bad.problems(None).len(), 1);
        // No uri and no NRF to discover one through.
        let none = BsfConfig { uri: None, ..bad };
        assert_eq!(none.problems(None).len(), 1);
    }

    #[test]
    fn discovery_picks_the_registered_bsf_of_best_priority() {
        let result = json!({
            "validityPeriod": 60,
            "nfInstances": [
                {"nfInstanceId": "a", "nfType": "BSF", "nfStatus": "SUSPENDED", "priority": 0,
                 "nfServices": [{"serviceName": "nbsf-management", "apiPrefix": "http://suspended"}]},
                {"nfInstanceId": "b", "nfType": "BSF", "nfStatus": "REGISTERED", "priority": 20,
                 "nfServices": [{"serviceName": "nbsf-management", "scheme": "http",
                                 "ipEndPoints": [{"ipv4Address": "10.0.0.12", "port": 8000}]}]},
                {"nfInstanceId": "c", "nfType": "BSF", "nfStatus": "REGISTERED", "priority": 10,
                 "nfServiceList": {"s1": {"serviceName": "nbsf-management", "scheme": "https",
                                          "ipEndPoints": [{"ipv6Address": "2001:db8::1"}]}}},
            ]
        });
        let (root, validity) = best_bsf(&result).expect("a BSF");
        assert_eq!(root, "https://[2001:db8::1]:443");
        assert_eq!(validity, Duration::from_secs(60));
        // Without services of the right name: none.
        let other = json!({"nfInstances": [{"nfServices": [{"serviceName": "nbsf-other"}]}]});
        assert_eq!(best_bsf(&other), None);
        // An FQDN when nothing else says where.
        let fqdn = json!({"nfInstances": [{"fqdn": "bsf.5gc", "nfServices": [{"serviceName": "nbsf-management"}]}]});
        assert_eq!(best_bsf(&fqdn).map(|r| r.0), Some("http://bsf.5gc".into()));
    }
}
