//! Diameter over TLS "on connect" (RFC 6733 §13): the TLS handshake runs
//! right after the TCP connection and before CER; the deprecated
//! Inband-Security-Id upgrade is not offered. This module holds the TLS
//! material of a node (its certificate, key and the CA it trusts) as
//! rustls configurations, and the identity check RFC 6733 §13.1 asks for:
//! the peer's certificate must name the DiameterIdentity (Origin-Host) the
//! peer sends in its CER or CEA (a `subjectAltName` dNSName, as for HTTPS).
//!
//! The crypto provider is rustls' `ring` one, chosen explicitly so that no
//! process-wide default needs installing. TLS 1.2 and 1.3 are both enabled:
//! deployed Diameter peers (freeDiameter among them) still speak 1.2.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::path::Path;
use std::sync::Arc;

/// Why the TLS material cannot be used. Each message names the file (or
/// the part) at fault, for start-up errors an operator can act on.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("{what}: no PEM certificate found")]
    NoCertificate { what: String },
    #[error("{what}: not valid PEM: {message}")]
    BadPem { what: String, message: String },
    #[error("{what}: no PEM private key found (PKCS#8, PKCS#1 or SEC1)")]
    NoPrivateKey { what: String },
    #[error("the private key cannot be used: {0}")]
    BadKey(String),
    #[error("the private key does not match the certificate")]
    KeyMismatch,
    #[error("CA certificates: {0}")]
    BadCa(String),
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// A node's TLS material and policy, ready for both roles: accepting
/// (listener) and connecting (initiator). Cheap to clone.
#[derive(Clone)]
pub struct TlsConfig {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    require_client_certificate: bool,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConfig")
            .field(
                "require_client_certificate",
                &self.require_client_certificate,
            )
            .finish_non_exhaustive()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.display().to_string(),
        source,
    })
}

fn certs(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem {
            what: what.to_owned(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            what: what.to_owned(),
        });
    }
    Ok(certs)
}

fn key(pem: &[u8], what: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoPrivateKey {
            what: what.to_owned(),
        },
        e => TlsError::BadPem {
            what: what.to_owned(),
            message: e.to_string(),
        },
    })
}

fn key_error(e: rustls::Error) -> TlsError {
    match e {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => {
            TlsError::KeyMismatch
        }
        e => TlsError::BadKey(e.to_string()),
    }
}

impl TlsConfig {
    /// Reads PEM files: our certificate chain (end-entity first), its
    /// private key, and the CA certificates that peers' certificates must
    /// chain to. With `require_client_certificate`, a peer connecting to us
    /// must present a certificate (mutual TLS); without, one that presents
    /// none is accepted and identified by the allow-list alone.
    pub fn from_pem_files(
        certificate: &Path,
        private_key: &Path,
        ca: &Path,
        require_client_certificate: bool,
    ) -> Result<TlsConfig, TlsError> {
        let cert_pem = read("the certificate file", certificate)?;
        let key_pem = read("the private key file", private_key)?;
        let ca_pem = read("the CA file", ca)?;
        Self::build(
            &cert_pem,
            &certificate.display().to_string(),
            &key_pem,
            &private_key.display().to_string(),
            &ca_pem,
            &ca.display().to_string(),
            require_client_certificate,
        )
    }

    /// As [`from_pem_files`](Self::from_pem_files), from PEM text in memory.
    pub fn from_pem(
        certificate: &[u8],
        private_key: &[u8],
        ca: &[u8],
        require_client_certificate: bool,
    ) -> Result<TlsConfig, TlsError> {
        Self::build(
            certificate,
            "certificate",
            private_key,
            "private key",
            ca,
            "CA",
            require_client_certificate,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        cert_pem: &[u8],
        cert_name: &str,
        key_pem: &[u8],
        key_name: &str,
        ca_pem: &[u8],
        ca_name: &str,
        require_client_certificate: bool,
    ) -> Result<TlsConfig, TlsError> {
        let chain = certs(cert_pem, cert_name)?;
        let key = key(key_pem, key_name)?;
        let mut roots = RootCertStore::empty();
        for ca in certs(ca_pem, ca_name)? {
            roots
                .add(ca)
                .map_err(|e| TlsError::BadCa(format!("{ca_name}: {e}")))?;
        }
        let roots = Arc::new(roots);
        let provider = provider();
        let versions = &[&rustls::version::TLS13, &rustls::version::TLS12];

        // Checks that the key parses and matches the certificate, with a
        // message of its own (rustls' with_single_cert would say it too,
        // less plainly).
        rustls::sign::CertifiedKey::from_der(chain.clone(), key.clone_key(), &provider)
            .map_err(key_error)?;

        let mut verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
        if !require_client_certificate {
            verifier = verifier.allow_unauthenticated();
        }
        let verifier = verifier
            .build()
            .map_err(|e| TlsError::BadCa(format!("{ca_name}: {e}")))?;
        let mut server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())
            .map_err(key_error)?;
        // Diameter connections live for days: resumption buys nothing, and
        // TLS 1.3 tickets sent after the handshake make freeDiameter
        // (GnuTLS) log a spurious "Resource temporarily unavailable" error.
        server.send_tls13_tickets = 0;
        let client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(key_error)?;
        Ok(TlsConfig {
            server: Arc::new(server),
            client: Arc::new(client),
            require_client_certificate,
        })
    }

    /// A server-only rustls configuration from PEM files, for other TLS
    /// listeners of the node (the HTTP API): our certificate chain, its
    /// key, and optionally the CA certificates clients must chain to. With
    /// no `ca`, clients are not asked for a certificate; with one, a client
    /// certificate is checked when presented and, with
    /// `require_client_certificate`, required. Same checks and messages as
    /// [`from_pem_files`](Self::from_pem_files). ALPN offers HTTP/1.1.
    pub fn http_server_from_pem_files(
        certificate: &Path,
        private_key: &Path,
        ca: Option<&Path>,
        require_client_certificate: bool,
    ) -> Result<Arc<ServerConfig>, TlsError> {
        let cert_name = certificate.display().to_string();
        let key_name = private_key.display().to_string();
        let chain = certs(&read("the certificate file", certificate)?, &cert_name)?;
        let key = key(&read("the private key file", private_key)?, &key_name)?;
        let provider = provider();
        rustls::sign::CertifiedKey::from_der(chain.clone(), key.clone_key(), &provider)
            .map_err(key_error)?;
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let ca_name = ca.display().to_string();
                let mut roots = RootCertStore::empty();
                for c in certs(&read("the CA file", ca)?, &ca_name)? {
                    roots
                        .add(c)
                        .map_err(|e| TlsError::BadCa(format!("{ca_name}: {e}")))?;
                }
                let mut verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                if !require_client_certificate {
                    verifier = verifier.allow_unauthenticated();
                }
                let verifier = verifier
                    .build()
                    .map_err(|e| TlsError::BadCa(format!("{ca_name}: {e}")))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut server = builder.with_single_cert(chain, key).map_err(key_error)?;
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(server))
    }

    /// Whether peers connecting to us must present a certificate.
    pub fn requires_client_certificate(&self) -> bool {
        self.require_client_certificate
    }

    pub(crate) fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.server.clone())
    }

    pub(crate) fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.client.clone())
    }
}

/// What a TLS handshake established about the peer, kept by its connection.
#[derive(Clone, Debug)]
pub(crate) struct TlsPeer {
    /// The peer's end-entity certificate, if it presented one (a server
    /// always does; a client only when asked).
    pub(crate) certificate: Option<CertificateDer<'static>>,
}

impl TlsPeer {
    pub(crate) fn from_connection(conn: &rustls::CommonState) -> TlsPeer {
        TlsPeer {
            certificate: conn
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.clone().into_owned()),
        }
    }

    /// `Err` with a reason when the peer's certificate does not name
    /// `origin_host` in its subjectAltName dNSNames (the common name is not
    /// looked at, as for HTTPS). No certificate names nobody.
    pub(crate) fn check_identity(&self, origin_host: &str) -> Result<(), String> {
        let Some(cert) = &self.certificate else {
            return Err("the peer presented no certificate".into());
        };
        certificate_names(cert, origin_host)
    }
}

/// Whether the DER certificate is valid for the DNS name `host`.
pub(crate) fn certificate_names(cert: &CertificateDer<'_>, host: &str) -> Result<(), String> {
    let name = ServerName::try_from(host)
        .map_err(|_| format!("Origin-Host {host:?} is not a DNS name"))?;
    let parsed =
        ParsedCertificate::try_from(cert).map_err(|e| format!("unreadable certificate: {e}"))?;
    rustls::client::verify_server_name(&parsed, &name)
        .map_err(|e| format!("certificate not valid for Origin-Host {host}: {e}"))
}

/// The DNS name to verify a server's certificate against when connecting:
/// the Origin-Host we expect there.
pub(crate) fn server_name(host: &str) -> std::io::Result<ServerName<'static>> {
    ServerName::try_from(host.to_owned()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{host:?} is not a DNS name usable for TLS"),
        )
    })
}
