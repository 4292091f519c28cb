//! `[sbi]` in the configuration file: where the 5G service-based
//! interface (HTTP/2) listens, its TLS, its limits, and the NRF it
//! registers with. Every default is defined here, once.

use super::nrf::NrfConfig;
use crate::http_listener::ServerTls;
use crate::sbi::body::DecodeLimits;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The SBI listener's settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SbiConfig {
    /// h2c with prior knowledge, or TLS with ALPN h2 when `[sbi.tls]` is set.
    pub listen: SocketAddr,
    /// Largest request body (413 above).
    pub max_body_bytes: usize,
    /// Deepest nesting of objects and arrays in a JSON body (400 above).
    pub max_json_depth: usize,
    /// Longest string in a JSON body, bytes (400 above).
    pub max_json_string_bytes: usize,
    /// Most elements of one JSON array or members of one object (400 above).
    pub max_json_items: usize,
    /// Streams one connection may have open at once (SETTINGS).
    pub max_concurrent_streams: u32,
    /// Largest header list of one request, bytes (SETTINGS); a larger
    /// one, however it is split into CONTINUATION frames, is refused.
    pub max_header_list_bytes: u32,
    /// Connections served at once; more wait in the accept backlog.
    pub max_connections: usize,
    /// A request must be answered within this long (504 otherwise).
    pub request_timeout_secs: u64,
    /// A connection with nothing read or written for this long is closed.
    pub idle_timeout_secs: u64,
    /// Streams a client may reset before their answer before the
    /// connection is closed with GOAWAY (rapid reset, CVE-2023-44487).
    pub max_pending_reset_streams: usize,
    /// Stream errors the client may cause (malformed frames, bad
    /// headers) before the connection is closed with GOAWAY.
    pub max_local_error_reset_streams: usize,
    /// An Update equal to the last one applied to its SM policy within
    /// this long (ms) is taken for the SMF sending it again after losing
    /// the answer: answered again, its usage not counted twice (0: off).
    pub repeat_window_ms: u64,
    /// HTTP/2 over TLS (ALPN h2) instead of h2c.
    pub tls: Option<SbiTls>,
    /// Registration with an NRF (off when absent).
    pub nrf: Option<NrfConfig>,
    /// PCF bindings at a BSF for each N7 session (off when absent).
    pub bsf: Option<super::bsf::BsfConfig>,
}

impl Default for SbiConfig {
    fn default() -> Self {
        SbiConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 7777)),
            max_body_bytes: 64 * 1024,
            max_json_depth: 16,
            max_json_string_bytes: 2048,
            max_json_items: 256,
            max_concurrent_streams: 128,
            max_header_list_bytes: 16 * 1024,
            max_connections: 256,
            request_timeout_secs: 10,
            idle_timeout_secs: 60,
            max_pending_reset_streams: 20,
            max_local_error_reset_streams: 64,
            repeat_window_ms: 10_000,
            tls: None,
            nrf: None,
            bsf: None,
        }
    }
}

impl SbiConfig {
    /// The decoder's bounds.
    pub fn decode_limits(&self) -> DecodeLimits {
        DecodeLimits {
            max_depth: self.max_json_depth,
            max_string_bytes: self.max_json_string_bytes,
            max_items: self.max_json_items,
        }
    }

    /// The BSF to register bindings at, with `[sbi.bsf]`.
    pub fn bsf(&self) -> Option<super::bsf::Bsf> {
        let cfg = self.bsf.clone()?;
        Some(super::bsf::Bsf::new(cfg, self.nrf.clone()))
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs.max(1))
    }

    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_secs.max(1))
    }

    /// Problems with the values, each as (key, message).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut positive = |key: &str, v: u64| {
            if v == 0 {
                out.push((format!("[sbi].{key}"), "must be at least 1".to_owned()));
            }
        };
        positive("max_body_bytes", self.max_body_bytes as u64);
        positive("max_json_depth", self.max_json_depth as u64);
        positive("max_json_string_bytes", self.max_json_string_bytes as u64);
        positive("max_json_items", self.max_json_items as u64);
        positive(
            "max_concurrent_streams",
            u64::from(self.max_concurrent_streams),
        );
        positive(
            "max_header_list_bytes",
            u64::from(self.max_header_list_bytes),
        );
        positive("max_connections", self.max_connections as u64);
        positive("request_timeout_secs", self.request_timeout_secs);
        positive("idle_timeout_secs", self.idle_timeout_secs);
        if let Some(tls) = &self.tls {
            if let Err(e) = h2_tls(tls) {
                out.push(("[sbi.tls]".to_owned(), e));
            }
        }
        if let Some(nrf) = &self.nrf {
            out.extend(nrf.problems());
        }
        if let Some(bsf) = &self.bsf {
            out.extend(bsf.problems(self.nrf.as_ref()));
        }
        out
    }
}

/// `[sbi.tls]`: the SBI over TLS, its files as `[api.tls]`'s.
pub type SbiTls = ServerTls;

/// The SBI's TLS configuration: the files loaded as the API loads its
/// own, offering only h2 by ALPN.
pub fn h2_tls(tls: &ServerTls) -> Result<Arc<tokio_rustls::rustls::ServerConfig>, String> {
    let base = tls.load("sbi.tls")?;
    let mut config = (*base).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn bad_values_are_reported_with_their_key() {
        let text = "[sbi]\nlisten = \"127.0.0.1:7777\"\nmax_body_bytes = 0\nmax_json_depth = 0\n\
                    [sbi.nrf]\nuri = \"https://nrf\"\nnf_instance_id = \"x\"\napi_prefix = \"http://10.0.0.1:7777\"\n\
                    [sbi.tls]\ncertificate = \"/nonexistent/sbi.pem\"\nprivate_key = \"/nonexistent/sbi.key\"\n";
        let e = Config::parse(text, "c.toml").expect_err("invalid");
        let locations: Vec<&str> = e.problems.iter().map(|p| p.location.as_str()).collect();
        for want in [
            "c.toml: [sbi].max_body_bytes",
            "c.toml: [sbi].max_json_depth",
            "c.toml: [sbi.tls]",
            "c.toml: [sbi.nrf].uri",
            "c.toml: [sbi.nrf].nf_instance_id",
        ] {
            assert!(locations.contains(&want), "{want} in {locations:?}");
        }
        // The SBI listener may not share the API's port.
        let e = Config::parse("[sbi]\nlisten = \"127.0.0.1:8080\"\n", "c.toml").expect_err("clash");
        assert!(
            e.problems
                .iter()
                .any(|p| p.location.contains("[sbi].listen")),
            "{:?}",
            e.problems
        );
        // Unknown keys are refused, as everywhere in the file.
        assert!(Config::parse("[sbi]\nlisten_on = 1\n", "c.toml").is_err());
        assert!(Config::parse("[sbi]\n", "c.toml").is_ok());
    }
}
