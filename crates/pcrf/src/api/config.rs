//! `[api]` in the configuration file: where the HTTP API listens, its
//! bearer token, its request size limits and its connection limits.

use super::listener::ConnectionLimits;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

/// Ceiling of `api.max_batch_bytes` (256 MiB).
pub const MAX_BATCH_BYTES: usize = 256 * 1024 * 1024;

/// The HTTP API's settings.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiConfig {
    pub listen: SocketAddr,
    /// When set, every route but `GET /v1/health` requires
    /// `Authorization: Bearer <token>`.
    pub token: Option<String>,
    /// Largest request body accepted (413 above).
    pub max_body_bytes: usize,
    /// Largest body of `POST /v1/subscribers/batch` (413 above): bulk
    /// provisioning sends thousands of profiles per request.
    pub max_batch_bytes: usize,
    /// Connections served at once; more wait in the accept backlog.
    pub max_connections: usize,
    /// A connection with nothing read or written for this long is closed.
    pub idle_timeout_secs: u64,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            token: None,
            max_body_bytes: 64 * 1024,
            max_batch_bytes: 16 * 1024 * 1024,
            max_connections: 256,
            idle_timeout_secs: 60,
        }
    }
}

/// Never print the token.
impl std::fmt::Debug for ApiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiConfig")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_batch_bytes", &self.max_batch_bytes)
            .field("max_connections", &self.max_connections)
            .field("idle_timeout_secs", &self.idle_timeout_secs)
            .finish()
    }
}

impl ApiConfig {
    /// Errors that must stop start-up.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(t) = &self.token {
            if t.len() < 16 {
                return Err("api.token must be at least 16 characters".into());
            }
            // RFC 6750 b64token characters, so any HTTP client can send it.
            let ok = t.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
            });
            if !ok {
                return Err("api.token may contain only letters, digits and - . _ ~ + /".into());
            }
        }
        if self.max_body_bytes < 1024 {
            return Err("api.max_body_bytes must be at least 1024".into());
        }
        // A batch of one profile must fit wherever a single PUT does; the
        // ceiling keeps one request's parsed profiles far below a node's memory.
        if self.max_batch_bytes < self.max_body_bytes || self.max_batch_bytes > MAX_BATCH_BYTES {
            return Err(format!(
                "api.max_batch_bytes must be between api.max_body_bytes ({}) and {MAX_BATCH_BYTES}",
                self.max_body_bytes
            ));
        }
        if self.max_connections == 0 {
            return Err("api.max_connections must be at least 1".into());
        }
        if !(1..=86_400).contains(&self.idle_timeout_secs) {
            return Err("api.idle_timeout_secs must be 1 to 86400".into());
        }
        Ok(())
    }

    /// The listener limits for [`super::serve_with`].
    pub fn limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.max_connections,
            idle_timeout: Duration::from_secs(self.idle_timeout_secs),
        }
    }

    /// Things worth a warning at start-up.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.token.is_none() && !self.listen.ip().is_loopback() {
            w.push(format!(
                "HTTP API listens on {} without api.token: anyone who can reach it can provision subscribers and release sessions",
                self.listen
            ));
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_checks() {
        let c: ApiConfig = toml::from_str("").expect("empty");
        assert_eq!(c, ApiConfig::default());
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert!(c.validate().is_ok() && c.warnings().is_empty());
        assert!(toml::from_str::<ApiConfig>("port = 1").is_err());

        let open: ApiConfig = toml::from_str("listen = \"0.0.0.0:8080\"").expect("listen");
        assert_eq!(open.warnings().len(), 1);
        let short: ApiConfig = toml::from_str("token = \"abc\"").expect("token");
        assert!(short.validate().is_err());
        let spaced: ApiConfig = toml::from_str("token = \"0123456789abcdef 0\"").expect("token");
        assert!(spaced.validate().is_err());
        let good: ApiConfig =
            toml::from_str("listen = \"0.0.0.0:8080\"\ntoken = \"0123456789abcdef\"")
                .expect("token");
        assert!(good.validate().is_ok() && good.warnings().is_empty());
        assert_eq!(c.limits(), ConnectionLimits::default());
        let zero: ApiConfig = toml::from_str("max_connections = 0").expect("parse");
        assert!(zero.validate().is_err());
        let idle: ApiConfig = toml::from_str("idle_timeout_secs = 0").expect("parse");
        assert!(idle.validate().is_err());
        assert_eq!(c.max_batch_bytes, 16 * 1024 * 1024);
        let small: ApiConfig = toml::from_str("max_batch_bytes = 1000").expect("parse");
        assert!(small.validate().is_err());
        let huge: ApiConfig = toml::from_str("max_batch_bytes = 1000000000").expect("parse");
        assert!(huge.validate().is_err());
        let fits: ApiConfig = toml::from_str("max_batch_bytes = 65536").expect("parse");
        assert!(fits.validate().is_ok());
        assert!(!format!("{good:?}").contains("0123456789abcdef"));
    }
}
