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

use crate::n7::model::SmPolicyContextData;
use diameter::peer::{Backoff, Jitter};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::time::Duration;

/// `[sbi.bsf]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BsfConfig {
    /// The BSF's API root, e.g. `http://10.0.0.11:7777` (h2c, or https).
    pub uri: String,
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
    pub fn problems(&self) -> Vec<(String, String)> {
        let rest = self
            .uri
            .strip_prefix("http://")
            .or_else(|| self.uri.strip_prefix("https://"));
        if rest.is_none_or(str::is_empty) {
            return vec![(
                "[sbi.bsf].uri".into(),
                format!("{:?} is not an http:// or https:// URI", self.uri),
            )];
        }
        Vec::new()
    }

    fn collection(&self) -> String {
        format!(
            "{}/nbsf-management/v1/pcfBindings",
            self.uri.trim_end_matches('/')
        )
    }
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

/// Registers `body`; the binding's id (the last segment of the answer's
/// `Location`).
pub async fn register(cfg: &BsfConfig, body: &Value) -> Result<String, String> {
    let url = cfg.collection();
    let r = with_retries(cfg, |c| {
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
pub async fn deregister(cfg: &BsfConfig, id: &str) -> Result<(), String> {
    let url = format!("{}/{id}", cfg.collection());
    let r = with_retries(cfg, |c| c.delete(&url)).await?;
    if r.status().is_success() || r.status() == reqwest::StatusCode::NOT_FOUND {
        Ok(())
    } else {
        Err(format!("the BSF answered {}", r.status().as_u16()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_names_the_ue_the_session_and_this_pcf() {
        let ctx = crate::n7::decode::decode_create(
            include_bytes!("../../tests/n7/open5gs-create.json"),
            &crate::n7::decode::DecodeLimits::default(),
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
            uri: "bsf:7777".into(),
            pcf_fqdn: None,
            pcf_address: None,
            timeout_ms: 1,
        };
        assert_eq!(bad.problems().len(), 1);
    }
}
