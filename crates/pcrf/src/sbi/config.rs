//! `[sbi]` in the configuration file: where the 5G service-based
//! interface (HTTP/2) listens, its TLS, its limits, and the NRF it
//! registers with. Every default is defined here, once.

use super::nrf::NrfConfig;
use crate::n7::decode::DecodeLimits;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
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
    /// HTTP/2 over TLS (ALPN h2) instead of h2c.
    pub tls: Option<SbiTls>,
    /// Registration with an NRF (off when absent).
    pub nrf: Option<NrfConfig>,
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
            tls: None,
            nrf: None,
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
            if let Err(e) = tls.load() {
                out.push(("[sbi.tls]".to_owned(), e));
            }
        }
        if let Some(nrf) = &self.nrf {
            out.extend(nrf.problems());
        }
        out
    }
}

/// `[sbi.tls]`: HTTP/2 over TLS, ALPN h2.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SbiTls {
    /// Our certificate chain, PEM, end-entity first.
    pub certificate: PathBuf,
    /// Its private key, PEM (PKCS#8, PKCS#1 or SEC1).
    pub private_key: PathBuf,
    /// CA certificate(s), PEM, that client certificates must chain to.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// Clients must present a certificate chaining to `ca` (mutual TLS).
    #[serde(default)]
    pub require_client_certificate: bool,
}

impl SbiTls {
    /// Reads and checks the files, loaded the way the API loads its own,
    /// and offers only h2 by ALPN.
    pub fn load(&self) -> Result<Arc<tokio_rustls::rustls::ServerConfig>, String> {
        if self.require_client_certificate && self.ca.is_none() {
            return Err(
                "require_client_certificate needs ca (the CA client certificates must chain to)"
                    .into(),
            );
        }
        let base = diameter::transport::TlsConfig::http_server_from_pem_files(
            &self.certificate,
            &self.private_key,
            self.ca.as_deref(),
            self.require_client_certificate,
        )
        .map_err(|e| e.to_string())?;
        let mut config = (*base).clone();
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(config))
    }
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
