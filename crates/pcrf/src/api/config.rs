//! `[api]` in the configuration file: where the HTTP API listens, its
//! bearer token, its request size limits and its connection limits.

use crate::http_listener::{ConnectionLimits, ServerTls};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Fewest characters an `api.token` may have.
pub const MIN_TOKEN_LEN: usize = 16;
/// Fewest different characters an `api.token` may have: refuses a repeated
/// character or a short pattern repeated (`aaaa...`, `abab...`,
/// `passwordpassword`) that would pass the length rule yet be guessed first.
pub const MIN_TOKEN_DISTINCT: usize = 10;

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
    /// A file holding the token (white space around it ignored), read with
    /// the configuration: the token then stays out of the configuration
    /// file, in a file only the server's user may read. Not with `token`.
    pub token_file: Option<PathBuf>,
    /// Largest request body accepted (413 above).
    pub max_body_bytes: usize,
    /// Largest body of `POST /v1/subscribers/batch` (413 above): bulk
    /// provisioning sends thousands of profiles per request.
    pub max_batch_bytes: usize,
    /// Connections served at once; more wait in the accept backlog.
    pub max_connections: usize,
    /// A connection with nothing read or written for this long is closed.
    pub idle_timeout_secs: u64,
    /// A request's head (request line and headers) must arrive whole within
    /// this long; a client trickling it is closed.
    pub header_read_timeout_secs: u64,
    /// A request's body must arrive whole within this long of its head
    /// (400 otherwise).
    pub body_timeout_secs: u64,
    /// Connections one client address may hold at once. A further one
    /// closes that address's oldest connection with no request in
    /// progress, so clients sharing an address can't lock each other out.
    pub max_connections_per_address: usize,
    /// HTTPS instead of plain HTTP when set.
    pub tls: Option<ApiTls>,
    /// Host names an API without a token answers to, besides IP addresses
    /// and `localhost` (see [`super::browser`]): a `Host` naming anything
    /// else is refused, so a web page cannot reach the API by DNS rebinding.
    pub allowed_hosts: Vec<String>,
}

/// `[api.tls]`: serve the API over HTTPS.
pub type ApiTls = ServerTls;

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            token: None,
            token_file: None,
            max_body_bytes: 64 * 1024,
            max_batch_bytes: 16 * 1024 * 1024,
            max_connections: 256,
            idle_timeout_secs: 60,
            header_read_timeout_secs: 10,
            body_timeout_secs: 30,
            max_connections_per_address: 64,
            tls: None,
            allowed_hosts: Vec::new(),
        }
    }
}

/// Never print the token.
impl std::fmt::Debug for ApiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiConfig")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("token_file", &self.token_file)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("max_batch_bytes", &self.max_batch_bytes)
            .field("max_connections", &self.max_connections)
            .field("idle_timeout_secs", &self.idle_timeout_secs)
            .field("header_read_timeout_secs", &self.header_read_timeout_secs)
            .field("body_timeout_secs", &self.body_timeout_secs)
            .field(
                "max_connections_per_address",
                &self.max_connections_per_address,
            )
            .field("tls", &self.tls)
            .field("allowed_hosts", &self.allowed_hosts)
            .finish()
    }
}

impl ApiConfig {
    /// Reads `token_file` into `token`; the error names the file (the
    /// caller names the key). The token's own rules are checked by [`Self::validate`].
    pub fn read_token_file(&mut self) -> Result<(), String> {
        let Some(path) = &self.token_file else {
            return Ok(());
        };
        if self.token.is_some() {
            return Err("set api.token or api.token_file, not both".into());
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let token = text.trim();
        if token.is_empty() {
            return Err(format!("{} is empty", path.display()));
        }
        self.token = Some(token.to_string());
        Ok(())
    }

    /// Errors that must stop start-up.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(t) = &self.token {
            if t.len() < MIN_TOKEN_LEN {
                return Err(format!(
                    "api.token must be at least {MIN_TOKEN_LEN} characters, got {}",
                    t.len()
                ));
            }
            // RFC 6750 b64token characters, so any HTTP client can send it.
            let ok = t.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'+' | b'/')
            });
            if !ok {
                return Err("api.token may contain only letters, digits and - . _ ~ + /".into());
            }
            let distinct = t.bytes().collect::<std::collections::BTreeSet<u8>>().len();
            if distinct < MIN_TOKEN_DISTINCT {
                return Err(format!(
                    "api.token is too easy to guess: it has {distinct} different characters, at least {MIN_TOKEN_DISTINCT} are required (use a random one, e.g. `openssl rand -hex 24`)"
                ));
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
        if !(1..=3_600).contains(&self.header_read_timeout_secs) {
            return Err("api.header_read_timeout_secs must be 1 to 3600".into());
        }
        if !(1..=3_600).contains(&self.body_timeout_secs) {
            return Err("api.body_timeout_secs must be 1 to 3600".into());
        }
        // Above api.max_connections it acts as api.max_connections, so a
        // configuration lowering only the total stays valid.
        if self.max_connections_per_address == 0 {
            return Err("api.max_connections_per_address must be at least 1".into());
        }
        for name in &self.allowed_hosts {
            let ok = !name.is_empty()
                && name.len() <= 253
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
            if !ok {
                return Err(format!(
                    "api.allowed_hosts: {name:?} is not a host name (no port, scheme or address: any port and every IP address are allowed already)"
                ));
            }
        }
        if let Some(tls) = &self.tls {
            tls.load("api.tls")?;
        }
        Ok(())
    }

    /// What [`super::browser::guard`] checks requests against.
    pub fn browser_rules(&self) -> super::browser::BrowserRules {
        super::browser::BrowserRules {
            token: self.token.is_some(),
            allowed_hosts: self
                .allowed_hosts
                .iter()
                .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
                .collect(),
        }
    }

    /// The listener limits for [`super::serve_with`].
    pub fn limits(&self) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: self.max_connections,
            idle_timeout: Duration::from_secs(self.idle_timeout_secs),
            header_read_timeout: Duration::from_secs(self.header_read_timeout_secs),
            body_timeout: Duration::from_secs(self.body_timeout_secs),
            max_connections_per_address: self.max_connections_per_address,
        }
    }

    /// A warning when other users may read or change `token_file`, or its
    /// group may change it: the token is all that guards the API. Mode 640
    /// with the server's group (as the packages install it) is fine.
    #[cfg(unix)]
    fn token_file_exposed(&self) -> Option<String> {
        use std::os::unix::fs::PermissionsExt;
        let path = self.token_file.as_ref()?;
        let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
        (mode & 0o026 != 0).then(|| {
            format!(
                "api.token_file {} may be read or changed by other users (mode {mode:03o}): chmod 600 it, or 640 with the server's group",
                path.display()
            )
        })
    }

    #[cfg(not(unix))]
    fn token_file_exposed(&self) -> Option<String> {
        None
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
        if let Some(exposed) = self.token_file_exposed() {
            w.push(exposed);
        }
        if self.tls.is_none() && !self.listen.ip().is_loopback() {
            w.push(format!(
                "HTTP API listens on {} without [api.tls]: requests, and the bearer token in them, travel in clear",
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
        assert_eq!(open.warnings().len(), 2);
        let short: ApiConfig = toml::from_str("token = \"abc\"").expect("token");
        assert!(short.validate().is_err());
        let spaced: ApiConfig = toml::from_str("token = \"0123456789abcdef 0\"").expect("token");
        assert!(spaced.validate().is_err());
        for weak in [
            "aaaaaaaaaaaaaaaaaaaa",
            "abababababababababab",
            "passwordpassword",
        ] {
            let c: ApiConfig = toml::from_str(&format!("token = {weak:?}")).expect("token");
            let e = c.validate().expect_err(weak);
            assert!(e.contains("api.token is too easy to guess"), "{e}");
        }
        let good: ApiConfig =
            toml::from_str("listen = \"0.0.0.0:8080\"\ntoken = \"0123456789abcdef\"")
                .expect("token");
        assert!(good.validate().is_ok());
        let w = good.warnings();
        assert!(w.len() == 1 && w[0].contains("in clear"), "{w:?}");
        assert_eq!(c.limits(), ConnectionLimits::default());
        let zero: ApiConfig = toml::from_str("max_connections = 0").expect("parse");
        assert!(zero.validate().is_err());
        let idle: ApiConfig = toml::from_str("idle_timeout_secs = 0").expect("parse");
        assert!(idle.validate().is_err());
        for bad in [
            "header_read_timeout_secs = 0",
            "body_timeout_secs = 0",
            "max_connections_per_address = 0",
        ] {
            let c: ApiConfig = toml::from_str(bad).expect("parse");
            assert!(c.validate().is_err(), "{bad}");
        }
        assert_eq!(c.max_batch_bytes, 16 * 1024 * 1024);
        let small: ApiConfig = toml::from_str("max_batch_bytes = 1000").expect("parse");
        assert!(small.validate().is_err());
        let huge: ApiConfig = toml::from_str("max_batch_bytes = 1000000000").expect("parse");
        assert!(huge.validate().is_err());
        let fits: ApiConfig = toml::from_str("max_batch_bytes = 65536").expect("parse");
        assert!(fits.validate().is_ok());
        assert!(!format!("{good:?}").contains("0123456789abcdef"));
        let named: ApiConfig =
            toml::from_str("allowed_hosts = [\"PCRF-1.example.net.\"]").expect("parse");
        assert!(named.validate().is_ok());
        assert_eq!(
            &*named.browser_rules().allowed_hosts,
            ["pcrf-1.example.net"]
        );
        for bad in ["pcrf:8080", "http://pcrf", "", "[::1]"] {
            let c: ApiConfig =
                toml::from_str(&format!("allowed_hosts = [{bad:?}]")).expect("parse");
            assert!(c.validate().is_err(), "{bad}");
        }
    }

    fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p.display().to_string()
    }

    #[test]
    fn tls_files_are_checked_and_errors_name_key_and_file() {
        let dir = std::env::temp_dir().join(format!("pcrf-api-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_cert = ca_params.self_signed(&ca_key).expect("ca");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let leaf = || {
            let k = rcgen::KeyPair::generate().expect("key");
            let c = rcgen::CertificateParams::new(vec!["localhost".to_string()])
                .expect("params")
                .signed_by(&k, &issuer)
                .expect("leaf");
            (c.pem(), k.serialize_pem())
        };
        let (cert, key) = leaf();
        let (_, other_key) = leaf();
        let cert = write(&dir, "cert.pem", &cert);
        let key = write(&dir, "key.pem", &key);
        let other_key = write(&dir, "other.key", &other_key);
        let ca = write(&dir, "ca.pem", &ca_cert.pem());
        let junk = write(&dir, "junk.pem", "not PEM at all\n");
        let missing = dir.join("missing.pem").display().to_string();
        let parse =
            |tls: &str| -> ApiConfig { toml::from_str(&format!("[tls]\n{tls}")).expect("parse") };
        let err = |tls: &str| parse(tls).validate().expect_err("must fail");

        let ok = parse(&format!("certificate = {cert:?}\nprivate_key = {key:?}"));
        assert!(ok.validate().is_ok());
        let t = ok.tls.as_ref().expect("tls");
        assert!(
            t.ca.is_none() && !t.require_client_certificate,
            "no client certificates by default"
        );
        let mutual = parse(&format!(
            "certificate = {cert:?}\nprivate_key = {key:?}\nca = {ca:?}\nrequire_client_certificate = true"
        ));
        assert!(mutual.validate().is_ok());
        // Exposed with TLS and a token: no warning.
        let exposed: ApiConfig = toml::from_str(&format!(
            "listen = \"0.0.0.0:8443\"\ntoken = \"0123456789abcdef\"\n[tls]\ncertificate = {cert:?}\nprivate_key = {key:?}"
        ))
        .expect("parse");
        assert!(exposed.warnings().is_empty(), "{:?}", exposed.warnings());

        let e = err(&format!("certificate = {missing:?}\nprivate_key = {key:?}"));
        assert!(
            e.starts_with("api.tls.certificate: cannot read") && e.contains(&missing),
            "{e}"
        );
        let e = err(&format!(
            "certificate = {cert:?}\nprivate_key = {missing:?}"
        ));
        assert!(
            e.starts_with("api.tls.private_key: cannot read") && e.contains(&missing),
            "{e}"
        );
        let e = err(&format!(
            "certificate = {cert:?}\nprivate_key = {key:?}\nca = {missing:?}"
        ));
        assert!(
            e.starts_with("api.tls.ca: cannot read") && e.contains(&missing),
            "{e}"
        );
        let e = err(&format!("certificate = {junk:?}\nprivate_key = {key:?}"));
        assert!(
            e.starts_with("api.tls.certificate: ") && e.contains(&junk),
            "{e}"
        );
        let e = err(&format!("certificate = {cert:?}\nprivate_key = {junk:?}"));
        assert!(
            e.starts_with("api.tls.private_key: ") && e.contains(&junk),
            "{e}"
        );
        let e = err(&format!(
            "certificate = {cert:?}\nprivate_key = {key:?}\nca = {junk:?}"
        ));
        assert!(e.starts_with("api.tls.ca: ") && e.contains(&junk), "{e}");
        let e = err(&format!(
            "certificate = {cert:?}\nprivate_key = {other_key:?}"
        ));
        assert!(
            e.starts_with("api.tls.private_key: the private key does not match the certificate")
                && e.contains(&other_key)
                && e.contains(&cert),
            "{e}"
        );
        let e = err(&format!(
            "certificate = {cert:?}\nprivate_key = {key:?}\nrequire_client_certificate = true"
        ));
        assert!(e.contains("needs api.tls.ca"), "{e}");
        assert!(
            toml::from_str::<ApiConfig>("[tls]\ncertificate = \"a\"").is_err(),
            "private_key is required"
        );
        assert!(toml::from_str::<ApiConfig>(
            "[tls]\ncertificate = \"a\"\nprivate_key = \"b\"\ncert = \"c\""
        )
        .is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
