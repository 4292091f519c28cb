//! Real receivers for the notification tests: an HTTP webhook receiver
//! that checks each request's HMAC signature itself (with the hmac crate,
//! not the server's code), a TCP proxy the tests cut and restore in front
//! of a receiver or the broker, and the check of an event against
//! docs/notifications.schema.json.

#![allow(dead_code)]

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
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
}

fn expected_signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

impl WebhookReceiver {
    pub async fn start(secret: &str) -> WebhookReceiver {
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
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        WebhookReceiver { addr, got, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}/hook", self.addr)
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

/// Polls `f` every 50 ms until it returns true or `limit` passes.
pub async fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    f()
}

/// A `[store]` body for the PostgreSQL store in a fresh schema of
/// PCRF_TEST_DATABASE_URL (scripts/test.sh sets it up).
pub async fn postgres_store() -> String {
    let base = std::env::var("PCRF_TEST_DATABASE_URL").expect(
        "PCRF_TEST_DATABASE_URL is not set: run scripts/test.sh, which starts PostgreSQL and sets it",
    );
    let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(conn);
    let name = format!(
        "notify_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    );
    client
        .batch_execute(&format!("CREATE SCHEMA {name}"))
        .await
        .expect("create schema");
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("kind = \"postgres\"\nurl = \"{base}{sep}options=-csearch_path%3D{name}\"")
}
