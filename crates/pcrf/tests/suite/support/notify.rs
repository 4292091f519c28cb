//! Real receivers for the notification tests: an HTTP (or HTTPS, with a
//! throwaway certificate) webhook receiver that checks each request's HMAC
//! signature itself (with the hmac crate, not the server's code), a TCP proxy the tests cut and restore in front
//! of a receiver or the broker, and the check of an event against
//! docs/notifications.schema.json.

#![allow(dead_code)]

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::task::JoinHandle;

/// What the receiver's handler holds: the requests so far and the secret.
type ReceiverState = (Arc<Mutex<Vec<Received>>>, Arc<Vec<u8>>);
/// The proxy's accept task and its connections.
type Running = (JoinHandle<()>, Arc<Mutex<Vec<JoinHandle<()>>>>);

/// One POST the receiver got.
#[derive(Clone, Debug)]
pub struct Received {
    pub body: Value,
    /// The X-Pcrf-Signature header matched the body under the secret.
    pub signed: bool,
    pub event_header: Option<String>,
}

/// An HTTP server on 127.0.0.1 that records every POST and answers 200.
pub struct WebhookReceiver {
    pub addr: SocketAddr,
    pub got: Arc<Mutex<Vec<Received>>>,
    task: JoinHandle<()>,
    https: bool,
}

/// Accepts TLS connections for the HTTPS receiver (a failed handshake
/// drops that connection only).
struct TlsListener {
    tcp: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// A throwaway CA and a certificate it signed for 127.0.0.1.
pub struct TestPki {
    pub ca_pem: String,
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
}

impl TestPki {
    pub fn new(ca_name: &str) -> TestPki {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, ca_name);
        let ca = params.self_signed(&key).expect("ca");
        let issuer = rcgen::Issuer::new(params, key);
        let leaf_key = rcgen::KeyPair::generate().expect("key");
        let mut leaf = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        leaf.subject_alt_names = vec![rcgen::SanType::IpAddress(std::net::IpAddr::V4(
            std::net::Ipv4Addr::LOCALHOST,
        ))];
        let cert = leaf.signed_by(&leaf_key, &issuer).expect("leaf");
        TestPki {
            ca_pem: ca.pem(),
            cert_der: cert.der().to_vec(),
            key_der: leaf_key.serialize_der(),
        }
    }
}

fn expected_signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

impl WebhookReceiver {
    pub async fn start(secret: &str) -> WebhookReceiver {
        Self::start_with(secret, None).await
    }

    /// The same receiver over HTTPS, serving `pki`'s certificate.
    pub async fn start_https(secret: &str, pki: &TestPki) -> WebhookReceiver {
        use tokio_rustls::rustls;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![rustls::pki_types::CertificateDer::from(
                    pki.cert_der.clone(),
                )],
                rustls::pki_types::PrivateKeyDer::Pkcs8(pki.key_der.clone().into()),
            )
            .expect("server certificate");
        Self::start_with(
            secret,
            Some(tokio_rustls::TlsAcceptor::from(Arc::new(config))),
        )
        .await
    }

    async fn start_with(secret: &str, tls: Option<tokio_rustls::TlsAcceptor>) -> WebhookReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let secret = secret.as_bytes().to_vec();
        let state = (got.clone(), Arc::new(secret));
        let app = axum::Router::new()
            .route(
                "/hook",
                axum::routing::post(
                    |axum::extract::State((got, secret)): axum::extract::State<ReceiverState>,
                     headers: axum::http::HeaderMap,
                     body: axum::body::Bytes| async move {
                        let sig = headers
                            .get("x-pcrf-signature")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("");
                        let signed = sig == expected_signature(&secret, &body);
                        let event_header = headers
                            .get("x-pcrf-event")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                        got.lock().unwrap().push(Received {
                            body,
                            signed,
                            event_header,
                        });
                        axum::http::StatusCode::OK
                    },
                ),
            )
            .with_state(state);
        let https = tls.is_some();
        let task = tokio::spawn(async move {
            let _ = match tls {
                None => axum::serve(listener, app).await,
                Some(acceptor) => {
                    axum::serve(
                        TlsListener {
                            tcp: listener,
                            acceptor,
                        },
                        app,
                    )
                    .await
                }
            };
        });
        WebhookReceiver {
            addr,
            got,
            task,
            https,
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}/hook", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.got.lock().unwrap().clone()
    }
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A TCP proxy on a fixed 127.0.0.1 port in front of `target`; `cut`
/// closes the port and every connection through it (the receiver seems
/// down), `restore` opens it again.
pub struct Proxy {
    pub addr: SocketAddr,
    target: SocketAddr,
    running: Mutex<Option<Running>>,
}

fn listen(addr: SocketAddr) -> TcpListener {
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_reuseaddr(true).expect("reuseaddr");
    socket.bind(addr).expect("bind proxy port");
    socket.listen(128).expect("listen")
}

impl Proxy {
    pub async fn start(target: SocketAddr) -> Proxy {
        // A free port, then bound again by `listen` (as on every restore).
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("free port")
            .local_addr()
            .expect("addr");
        let p = Proxy {
            addr: port,
            target,
            running: Mutex::new(None),
        };
        p.restore();
        p
    }

    pub fn restore(&self) {
        let mut running = self.running.lock().unwrap();
        if running.is_some() {
            return;
        }
        let listener = listen(self.addr);
        let target = self.target;
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let conns2 = conns.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                conns2.lock().unwrap().push(task);
            }
        });
        *running = Some((accept, conns));
    }

    pub fn cut(&self) {
        if let Some((accept, conns)) = self.running.lock().unwrap().take() {
            accept.abort();
            for c in conns.lock().unwrap().drain(..) {
                c.abort();
            }
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Checks `event` against docs/notifications.schema.json; panics with the
/// errors.
pub fn assert_matches_schema(event: &Value) {
    static SCHEMA: std::sync::OnceLock<jsonschema::Validator> = std::sync::OnceLock::new();
    let validator = SCHEMA.get_or_init(|| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs/notifications.schema.json");
        let text = std::fs::read_to_string(&path).expect("schema file");
        let schema: Value = serde_json::from_str(&text).expect("schema is JSON");
        jsonschema::validator_for(&schema).expect("schema compiles")
    });
    let errors: Vec<String> = validator
        .iter_errors(event)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "event {event} breaks the schema: {errors:?}"
    );
}
