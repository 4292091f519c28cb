//! The HTTP layer of the API over a real loopback socket: status codes,
//! JSON errors for every kind of bad input, the bearer token, and the
//! OpenAPI document agreeing with the router. The node behind it is an
//! in-test implementation of `Control` over plain maps (the process-level
//! tests drive the real node).

use pcrf::api::{
    self, openapi, ApiConfig, BatchOutcome, Control, ControlError, ReauthOutcome, ReleaseCause,
    ReleaseOutcome, ReloadError, SessionFilter,
};
use pcrf::control::usage::{AccumulatorView, UsageChange, UsageView};
use pcrf::metrics::{Command, Metrics};
use pcrf::policy::Decision;
use pcrf::session::{GxSession, SessionState};
use pcrf::subscriber::Subscriber;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

// ---------------------------------------------------------------------------
// An in-memory node

#[derive(Default)]
struct MapNode {
    subscribers: Mutex<HashMap<String, Arc<Subscriber>>>,
    sessions: Mutex<BTreeMap<String, Arc<GxSession>>>,
    cells: Mutex<HashMap<String, u32>>,
    releases: Mutex<Vec<(String, u32)>>,
    /// What the next reload does.
    next_reload: Mutex<Option<ReloadError>>,
    version: Mutex<u64>,
    not_ready: Mutex<Option<String>>,
    metrics: Metrics,
    /// (used, topup) octets of "monthly" by IMSI.
    usage: Mutex<HashMap<String, (u64, u64)>>,
    /// When set, each policy check waits for a permit of it.
    hold_checks: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
    /// Policy checks running now, and the most at once.
    checks_running: AtomicUsize,
    checks_most: AtomicUsize,
}

impl MapNode {
    fn usage_change(&self, imsi: &str) -> Result<UsageChange, ControlError> {
        let usage = self
            .usage(imsi)
            .ok_or_else(|| ControlError::NotFound(imsi.to_string()))?;
        Ok(UsageChange {
            usage,
            sessions: 2,
            rar_sent: 1,
            rar_failed: 0,
        })
    }
}

impl Control for MapNode {
    async fn put_subscriber(&self, s: Subscriber) -> Result<bool, ControlError> {
        let mut t = self.subscribers.lock().expect("lock");
        Ok(t.insert(s.imsi.clone(), Arc::new(s)).is_none())
    }

    async fn put_subscribers(&self, batch: Vec<Subscriber>) -> Result<BatchOutcome, ControlError> {
        let mut t = self.subscribers.lock().expect("lock");
        let mut out = BatchOutcome::default();
        for s in batch {
            match t.insert(s.imsi.clone(), Arc::new(s)) {
                None => out.created += 1,
                Some(_) => out.updated += 1,
            }
        }
        Ok(out)
    }

    fn subscriber(&self, imsi: &str) -> Option<Arc<Subscriber>> {
        self.subscribers.lock().expect("lock").get(imsi).cloned()
    }

    async fn delete_subscriber(&self, imsi: &str) -> Result<bool, ControlError> {
        Ok(self
            .subscribers
            .lock()
            .expect("lock")
            .remove(imsi)
            .is_some())
    }

    fn sessions(&self, filter: &SessionFilter) -> Vec<Arc<GxSession>> {
        let t = self.sessions.lock().expect("lock");
        t.values()
            .filter(|s| filter.matches(s))
            .take(filter.limit)
            .cloned()
            .collect()
    }

    async fn session(&self, id: &str) -> Option<Arc<GxSession>> {
        self.sessions.lock().expect("lock").get(id).cloned()
    }

    async fn reauth(&self, id: &str) -> Result<ReauthOutcome, ControlError> {
        let s = self
            .session(id)
            .await
            .ok_or_else(|| ControlError::NotFound(format!("no session {id}")))?;
        if s.state == SessionState::Closed {
            return Err(ControlError::Conflict(format!("session {id} is closed")));
        }
        Ok(ReauthOutcome {
            rar_sent: true,
            result_code: Some(2001),
            installed: vec!["video".into()],
            removed: s.installed.rules.clone(),
            script_version: *self.version.lock().expect("lock"),
        })
    }

    async fn release(&self, id: &str, cause: ReleaseCause) -> Result<ReleaseOutcome, ControlError> {
        if self.session(id).await.is_none() {
            return Err(ControlError::NotFound(format!("no session {id}")));
        }
        self.releases
            .lock()
            .expect("lock")
            .push((id.to_string(), cause.code()));
        Ok(ReleaseOutcome {
            result_code: Some(2001),
        })
    }

    async fn reload_policy(&self) -> Result<u64, ReloadError> {
        if let Some(e) = self.next_reload.lock().expect("lock").take() {
            return Err(e);
        }
        let mut v = self.version.lock().expect("lock");
        *v += 1;
        Ok(*v)
    }

    async fn check_policy(&self, source: String) -> Result<u64, ReloadError> {
        let now = self.checks_running.fetch_add(1, Ordering::SeqCst) + 1;
        self.checks_most.fetch_max(now, Ordering::SeqCst);
        let hold = self.hold_checks.lock().expect("lock").clone();
        if let Some(hold) = hold {
            hold.acquire().await.expect("open").forget();
        }
        self.checks_running.fetch_sub(1, Ordering::SeqCst);
        Ok(source.len() as u64)
    }

    fn set_congestion(&self, cell: &str, level: u32) -> usize {
        self.cells
            .lock()
            .expect("lock")
            .insert(cell.to_string(), level);
        7
    }

    fn usage(&self, imsi: &str) -> Option<UsageView> {
        self.subscriber(imsi)?;
        let (used, topup) = self
            .usage
            .lock()
            .expect("lock")
            .get(imsi)
            .copied()
            .unwrap_or((0, 0));
        let allowance = 1000 + topup;
        Some(UsageView {
            subscriber: imsi.to_string(),
            billing_day: 1,
            accumulators: BTreeMap::from([(
                "monthly".to_string(),
                AccumulatorView {
                    reset: "monthly".into(),
                    used,
                    topup,
                    quota: Some(1000),
                    allowance: Some(allowance),
                    remaining: Some(allowance.saturating_sub(used)),
                    exhausted: used >= allowance,
                    period_start: "2026-11-01T00:00:00Z".into(),
                    period_end: Some("2026-12-01T00:00:00Z".into()),
                },
            )]),
            last_reports: BTreeMap::new(),
            unknown_key_reports: 0,
            usage_config: "0011223344556677".into(),
        })
    }

    async fn topup(
        &self,
        imsi: &str,
        accumulator: &str,
        octets: u64,
    ) -> Result<UsageChange, ControlError> {
        if self.subscriber(imsi).is_none() {
            return Err(ControlError::NotFound(format!("no subscriber {imsi}")));
        }
        if accumulator != "monthly" {
            return Err(ControlError::Invalid(format!(
                "no accumulator {accumulator:?}"
            )));
        }
        self.usage
            .lock()
            .expect("lock")
            .entry(imsi.to_string())
            .or_default()
            .1 += octets;
        self.usage_change(imsi)
    }

    async fn reset_usage(
        &self,
        imsi: &str,
        accumulator: Option<&str>,
    ) -> Result<UsageChange, ControlError> {
        if self.subscriber(imsi).is_none() {
            return Err(ControlError::NotFound(format!("no subscriber {imsi}")));
        }
        if accumulator.is_some_and(|a| a != "monthly") {
            return Err(ControlError::Invalid("no such accumulator".into()));
        }
        self.usage.lock().expect("lock").remove(imsi);
        self.usage_change(imsi)
    }

    async fn ready(&self) -> Result<(), String> {
        match self.not_ready.lock().expect("lock").clone() {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }

    fn config_checksum(&self) -> String {
        "00112233aabbccdd".into()
    }

    fn render_metrics(&self) -> String {
        self.metrics.render()
    }
}

fn session(id: &str, imsi: &str, apn: &str, pcef: &str, state: SessionState) -> GxSession {
    let mut s = GxSession::new(id, imsi, pcef, "lab", 1);
    s.state = state;
    s.imsi = Some(imsi.into());
    s.apn = Some(apn.into());
    s.ue_ipv4 = Some([10, 0, 0, 1].into());
    s.rat_type = Some(1004);
    s.installed = Decision {
        rules: vec!["internet".into()],
        ..Default::default()
    }
    .into();
    s
}

// ---------------------------------------------------------------------------
// A real server on loopback and an HTTP client

struct Server {
    addr: SocketAddr,
    http: reqwest::Client,
    node: Arc<MapNode>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(cfg: ApiConfig) -> Server {
        let node = Arc::new(MapNode::default());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let router = api::router(node.clone(), &cfg);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(api::serve(listener, router, async {
            let _ = stopped.await;
        }));
        Server {
            addr,
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(5))
                .build()
                .expect("HTTP client"),
            node,
            stop: Some(stop),
            task,
        }
    }

    async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let r = tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("graceful shutdown in time");
        r.expect("join").expect("serve");
    }

    /// Sends one request; returns status, headers (lowercase names) and body.
    async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> (u16, HashMap<String, String>, Vec<u8>) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = self
            .http
            .request(method, format!("http://{}{path}", self.addr));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some(b) = body {
            req = req.body(b.to_vec());
        }
        let resp = req.send().await.expect("answer");
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                let v = v.to_str().expect("ascii header");
                (k.as_str().to_string(), v.to_string())
            })
            .collect();
        let body = resp.bytes().await.expect("body").to_vec();
        (status, headers, body)
    }

    async fn json(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Value>,
    ) -> (u16, Value) {
        let bytes = body.map(|b| serde_json::to_vec(&b).expect("json"));
        let mut h = headers.to_vec();
        // As every client does: a request that changes something says
        // JSON, also without a body (what a cross-site form cannot send).
        if bytes.is_some() || !matches!(method, "GET" | "HEAD") {
            h.push(("Content-Type", "application/json"));
        }
        let (status, headers, body) = self.call(method, path, &h, bytes.as_deref()).await;
        if status == 204 {
            assert!(body.is_empty());
            return (status, Value::Null);
        }
        assert_eq!(
            headers.get("content-type").map(String::as_str),
            Some("application/json"),
            "{method} {path} -> {status} not JSON: {}",
            String::from_utf8_lossy(&body)
        );
        let v = serde_json::from_slice(&body).expect("JSON body");
        (status, v)
    }
}

/// A JSON error: the status, and a non-empty message.
fn assert_error(got: &(u16, Value), status: u16) {
    assert_eq!(got.0, status, "body {}", got.1);
    let msg = got.1["error"].as_str().unwrap_or_default();
    assert!(!msg.is_empty(), "no error message in {}", got.1);
}

// ---------------------------------------------------------------------------

#[tokio::test]
async fn subscriber_lifecycle() {
    let s = Server::start(ApiConfig::default()).await;
    let path = "/v1/subscribers/001010000000001";
    let body = json!({"msisdn": "491700000001", "plan": "basic", "services": ["vip", "vip", "tv"], "attributes": {"blocked": false}});

    let (status, headers, raw) = s
        .call(
            "PUT",
            path,
            &[("Content-Type", "application/json")],
            Some(body.to_string().as_bytes()),
        )
        .await;
    assert_eq!(status, 201);
    assert_eq!(headers.get("location").map(String::as_str), Some(path));
    let created: Value = serde_json::from_slice(&raw).expect("json");
    assert_eq!(created["imsi"], "001010000000001");
    assert_eq!(created["services"], json!(["tv", "vip"]));

    let (status, _) = s
        .json("PUT", path, &[], Some(json!({"plan": "gold"})))
        .await;
    assert_eq!(status, 200);
    let (status, got) = s.json("GET", path, &[], None).await;
    assert_eq!(status, 200);
    assert_eq!(got["plan"], "gold");
    assert!(got.get("msisdn").is_none(), "replace, not merge: {got}");

    let (status, _) = s.json("DELETE", path, &[], None).await;
    assert_eq!(status, 204);
    assert_error(&s.json("GET", path, &[], None).await, 404);
    assert_error(&s.json("DELETE", path, &[], None).await, 404);
    assert!(s.node.subscribers.lock().expect("lock").is_empty());
    s.shutdown().await;
}

#[tokio::test]
async fn usage_top_up_and_reset() {
    let s = Server::start(ApiConfig::default()).await;
    let imsi = "001010000000001";
    let usage = format!("/v1/subscribers/{imsi}/usage");
    let topup = format!("/v1/subscribers/{imsi}/topup");
    let reset = format!("/v1/subscribers/{imsi}/usage/reset");
    assert_error(&s.json("GET", &usage, &[], None).await, 404);
    assert_error(
        &s.json("GET", "/v1/subscribers/12ab/usage", &[], None).await,
        400,
    );
    let (status, _) = s
        .json(
            "PUT",
            &format!("/v1/subscribers/{imsi}"),
            &[],
            Some(json!({"plan": "basic", "billing_day": 15, "quotas": {"monthly": 1000}})),
        )
        .await;
    assert_eq!(status, 201);
    let (status, v) = s.json("GET", &usage, &[], None).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["accumulators"]["monthly"]["allowance"], 1000);

    let (status, v) = s
        .json(
            "POST",
            &topup,
            &[],
            Some(json!({"accumulator": "monthly", "octets": 500})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["accumulators"]["monthly"]["allowance"], 1500);
    assert_eq!(
        (v["sessions"].as_u64(), v["rar_sent"].as_u64()),
        (Some(2), Some(1))
    );
    for bad in [
        json!({"accumulator": "monthly", "octets": 0}),
        json!({"accumulator": "monthly", "octets": 1_000_000_000_000_000_001_u64}),
        json!({"accumulator": "nope", "octets": 5}),
    ] {
        assert_error(&s.json("POST", &topup, &[], Some(bad)).await, 400);
    }
    assert_error(
        &s.json("POST", &topup, &[], Some(json!({"accumulator": "monthly"})))
            .await,
        422,
    );
    assert_error(
        &s.json(
            "POST",
            "/v1/subscribers/001010000000009/topup",
            &[],
            Some(json!({"accumulator": "monthly", "octets": 5})),
        )
        .await,
        404,
    );

    let (status, v) = s.json("POST", &reset, &[], Some(json!({}))).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["usage"]["accumulators"]["monthly"]["topup"], 0);
    assert_error(
        &s.json("POST", &reset, &[], Some(json!({"accumulator": "nope"})))
            .await,
        400,
    );
    assert_error(
        &s.json("POST", &reset, &[], Some(json!({"bogus": 1}))).await,
        422,
    );
    s.shutdown().await;
}

#[tokio::test]
async fn bad_subscriber_input_is_a_json_error() {
    let cfg = ApiConfig {
        max_body_bytes: 4096,
        ..Default::default()
    };
    let s = Server::start(cfg).await;
    let path = "/v1/subscribers/001010000000002";
    let ok_body = json!({"plan": "basic"});

    assert_error(
        &s.json("PUT", "/v1/subscribers/12ab", &[], Some(ok_body.clone()))
            .await,
        400,
    );
    assert_error(&s.json("GET", "/v1/subscribers/123", &[], None).await, 400);
    assert_error(
        &s.json("PUT", path, &[], Some(json!({"msisdn": "+49 170"})))
            .await,
        400,
    );
    assert_error(
        &s.json("PUT", path, &[], Some(json!({"imsi": "001010000000009"})))
            .await,
        400,
    );
    assert_error(
        &s.json("PUT", path, &[], Some(json!({"services": [""]})))
            .await,
        400,
    );
    // Unknown field and wrong type: axum's 422, as JSON.
    assert_error(
        &s.json("PUT", path, &[], Some(json!({"plna": "x"}))).await,
        422,
    );
    assert_error(
        &s.json("PUT", path, &[], Some(json!({"services": "vip"})))
            .await,
        422,
    );

    let raw = |ct: &'static str, body: &'static [u8]| {
        let s = &s;
        async move {
            let (status, headers, body) = s
                .call("PUT", path, &[("Content-Type", ct)], Some(body))
                .await;
            assert_eq!(
                headers.get("content-type").map(String::as_str),
                Some("application/json")
            );
            let v: Value = serde_json::from_slice(&body).expect("json error body");
            (status, v)
        }
    };
    assert_error(&raw("application/json", b"{\"plan\": ").await, 400);
    assert_error(&raw("text/plain", b"{}").await, 415);
    let big = format!("{{\"plan\": \"{}\"}}", "x".repeat(5000)).into_bytes();
    let (status, headers, body) = s
        .call(
            "PUT",
            path,
            &[("Content-Type", "application/json")],
            Some(&big),
        )
        .await;
    assert_eq!(status, 413);
    assert_eq!(
        headers.get("content-type").map(String::as_str),
        Some("application/json")
    );
    assert!(serde_json::from_slice::<Value>(&body).is_ok());

    assert!(s.node.subscribers.lock().expect("lock").is_empty());
    s.shutdown().await;
}

#[tokio::test]
async fn sessions_list_get_reauth_release() {
    let s = Server::start(ApiConfig::default()).await;
    {
        let mut t = s.node.sessions.lock().expect("lock");
        for (id, imsi, apn, pcef, st) in [
            (
                "pgw1;1;1",
                "001010000000001",
                "internet",
                "pgw1",
                SessionState::Open,
            ),
            (
                "pgw1;1;2",
                "001010000000001",
                "ims",
                "pgw1",
                SessionState::Open,
            ),
            (
                "pgw2;1;3",
                "001010000000002",
                "internet",
                "pgw2",
                SessionState::Open,
            ),
            (
                "pgw2;1;4",
                "001010000000003",
                "internet",
                "pgw2",
                SessionState::Closed,
            ),
        ] {
            t.insert(id.into(), Arc::new(session(id, imsi, apn, pcef, st)));
        }
    }
    let ids = |v: &Value| -> Vec<String> {
        v["sessions"]
            .as_array()
            .expect("array")
            .iter()
            .map(|s| s["id"].as_str().expect("id").to_string())
            .collect()
    };
    let (status, all) = s.json("GET", "/v1/sessions", &[], None).await;
    assert_eq!(status, 200);
    assert_eq!(ids(&all).len(), 4);
    assert_eq!(all["truncated"], false);
    let (_, v) = s
        .json("GET", "/v1/sessions?subscriber=001010000000001", &[], None)
        .await;
    assert_eq!(ids(&v), vec!["pgw1;1;1", "pgw1;1;2"]);
    let (_, v) = s
        .json("GET", "/v1/sessions?apn=internet&peer=pgw2", &[], None)
        .await;
    assert_eq!(ids(&v), vec!["pgw2;1;3", "pgw2;1;4"]);
    let (_, v) = s.json("GET", "/v1/sessions?limit=3", &[], None).await;
    assert_eq!(ids(&v).len(), 3);
    assert_eq!(v["truncated"], true);
    assert_error(&s.json("GET", "/v1/sessions?limit=0", &[], None).await, 400);
    assert_error(&s.json("GET", "/v1/sessions?limit=x", &[], None).await, 400);
    assert_error(&s.json("GET", "/v1/sessions?imsi=1", &[], None).await, 400);

    // Session-Ids carry ';' (and may carry '/'): percent-encoded in the path.
    let (status, one) = s.json("GET", "/v1/sessions/pgw1%3B1%3B2", &[], None).await;
    assert_eq!(status, 200);
    assert_eq!(one["apn"], "ims");
    assert_eq!(one["installed"]["rules"], json!(["internet"]));
    assert_error(&s.json("GET", "/v1/sessions/nope", &[], None).await, 404);

    let (status, out) = s
        .json("POST", "/v1/sessions/pgw1%3B1%3B1/reauth", &[], None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(out["rar_sent"], true);
    assert_eq!(out["removed"], json!(["internet"]));
    assert_eq!(out["script_version"], "0000000000000000");
    assert_error(
        &s.json("POST", "/v1/sessions/pgw2%3B1%3B4/reauth", &[], None)
            .await,
        409,
    );
    assert_error(
        &s.json("POST", "/v1/sessions/nope/reauth", &[], None).await,
        404,
    );

    let (status, out) = s
        .json(
            "DELETE",
            "/v1/sessions/pgw2%3B1%3B3?cause=UE_SUBSCRIPTION_REASON",
            &[],
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(out["result_code"], 2001);
    let (status, _) = s
        .json("DELETE", "/v1/sessions/pgw1%3B1%3B1", &[], None)
        .await;
    assert_eq!(status, 200);
    assert_error(
        &s.json("DELETE", "/v1/sessions/pgw1%3B1%3B1?cause=BOGUS", &[], None)
            .await,
        400,
    );
    assert_error(&s.json("DELETE", "/v1/sessions/nope", &[], None).await, 404);
    assert_eq!(
        *s.node.releases.lock().expect("lock"),
        vec![("pgw2;1;3".to_string(), 1), ("pgw1;1;1".to_string(), 0)]
    );
    s.shutdown().await;
}

#[tokio::test]
async fn policy_cells_health_ready_config_metrics() {
    let s = Server::start(ApiConfig::default()).await;

    // What holds the process's memory: the kernel's figures and each holder.
    let (status, v) = s.json("GET", "/v1/debug/memory", &[], None).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["resident_bytes"].as_u64().is_some_and(|b| b > 0), "{v}");
    assert!(v["peak_resident_bytes"].as_u64() >= v["resident_bytes"].as_u64());
    let names: Vec<&str> = v["holders"]
        .as_array()
        .map(|h| h.iter().filter_map(|h| h["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(names.contains(&"sqlite"), "{v}");
    assert!(names.contains(&"shared_decisions_table"), "{v}");

    let (status, v) = s.json("POST", "/v1/policy/reload", &[], None).await;
    assert_eq!(
        (status, v["version"].as_str()),
        (200, Some("0000000000000001"))
    );
    *s.node.next_reload.lock().expect("lock") = Some(ReloadError {
        error: "default.lua:12: unexpected symbol near 'end'".into(),
        line: Some(12),
    });
    let got = s.json("POST", "/v1/policy/reload", &[], None).await;
    assert_error(&got, 422);
    assert_eq!(got.1["line"], 12);
    let (status, v) = s.json("POST", "/v1/policy/reload", &[], None).await;
    assert_eq!(
        (status, v["version"].as_str()),
        (200, Some("0000000000000002"))
    );

    let (status, v) = s
        .json(
            "PUT",
            "/v1/cells/00F1102A3B4C5D/congestion",
            &[],
            Some(json!({"congestion": 3})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        v,
        json!({"cell": "00f1102a3b4c5d", "congestion": 3, "sessions": 7})
    );
    assert_eq!(
        s.node.cells.lock().expect("lock").get("00f1102a3b4c5d"),
        Some(&3)
    );
    assert_error(
        &s.json(
            "PUT",
            "/v1/cells/00f110/congestion",
            &[],
            Some(json!({"congestion": 1})),
        )
        .await,
        400,
    );
    assert_error(
        &s.json(
            "PUT",
            "/v1/cells/00f1102a3b4c5z/congestion",
            &[],
            Some(json!({"congestion": 1})),
        )
        .await,
        400,
    );
    assert_error(
        &s.json(
            "PUT",
            "/v1/cells/00f1102a3b4c5d/congestion",
            &[],
            Some(json!({"congestion": 101})),
        )
        .await,
        400,
    );
    assert_error(
        &s.json(
            "PUT",
            "/v1/cells/00f1102a3b4c5d/congestion",
            &[],
            Some(json!({"congestion": -1})),
        )
        .await,
        422,
    );

    assert_eq!(
        s.json("GET", "/v1/health", &[], None).await,
        (200, json!({"status": "ok"}))
    );
    assert_eq!(
        s.json("GET", "/v1/ready", &[], None).await,
        (200, json!({"ready": true}))
    );
    *s.node.not_ready.lock().expect("lock") = Some("store not writable: disk full".into());
    let (status, v) = s.json("GET", "/v1/ready", &[], None).await;
    assert_eq!(status, 503);
    assert_eq!(v["error"], "store not writable: disk full");
    assert_eq!(
        s.json("GET", "/v1/config", &[], None).await,
        (200, json!({"checksum": "00112233aabbccdd"}))
    );

    s.node
        .metrics
        .request(Command::CcrInitial, 2001, Duration::from_micros(400));
    let (status, headers, body) = s.call("GET", "/metrics", &[], None).await;
    assert_eq!(status, 200);
    assert_eq!(
        headers.get("content-type").map(String::as_str),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = String::from_utf8(body).expect("utf8");
    assert!(text.contains("pcrf_requests_total{command=\"CCR-I\",result_code=\"2001\"} 1\n"));

    // Unknown route and wrong method: JSON too.
    assert_error(&s.json("GET", "/v1/nothing", &[], None).await, 404);
    assert_error(&s.json("POST", "/v1/health", &[], None).await, 405);

    // The API counts its own requests by route template and status.
    let (_, _, body) = s.call("GET", "/metrics", &[], None).await;
    let text = String::from_utf8(body).expect("utf8");
    for line in [
        "pcrf_api_requests_total{route=\"/v1/policy/reload\",method=\"POST\",status=\"422\"} 1\n",
        "pcrf_api_requests_total{route=\"/v1/policy/reload\",method=\"POST\",status=\"200\"} 2\n",
        "pcrf_api_requests_total{route=\"/v1/cells/{cell}/congestion\",method=\"PUT\",status=\"400\"} 3\n",
        "pcrf_api_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1\n",
        "pcrf_api_requests_total{route=\"/metrics\",method=\"GET\",status=\"200\"} 1\n",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    s.shutdown().await;
}

#[tokio::test]
async fn bearer_token_guards_everything_but_health() {
    let token = "0123456789abcdef-token";
    let s = Server::start(ApiConfig {
        token: Some(token.into()),
        ..Default::default()
    })
    .await;
    let good = format!("Bearer {token}");
    let wrong = format!("Bearer {token}x");
    let prefix_only = format!("Bearer {}", &token[..10]);

    assert_eq!(s.json("GET", "/v1/health", &[], None).await.0, 200);
    for (method, path, _) in api::route_table::<MapNode>() {
        if path == "/v1/health" {
            continue;
        }
        let path = path
            .replace("{imsi}", "001010000000001")
            .replace("{id}", "x")
            .replace("{cell}", "00f1102a3b4c5d")
            // Refused (400) once past the token, rather than sampling 10 s.
            .replace("/v1/debug/profile", "/v1/debug/profile?seconds=0");
        for auth in [
            None,
            Some(wrong.as_str()),
            Some(prefix_only.as_str()),
            Some(token),
        ] {
            let headers: Vec<(&str, &str)> =
                auth.map(|a| ("Authorization", a)).into_iter().collect();
            let (status, h, body) = s.call(method.as_str(), &path, &headers, None).await;
            assert_eq!(status, 401, "{method} {path} with {auth:?}");
            assert_eq!(
                h.get("www-authenticate").map(String::as_str),
                Some("Bearer")
            );
            let v: Value = serde_json::from_slice(&body).expect("json");
            assert!(v["error"].is_string());
        }
        // The scheme name is case-insensitive (RFC 7235).
        for scheme in ["Bearer", "bearer", "BEARER"] {
            let auth = format!("{scheme} {token}");
            let (status, _, _) = s
                .call(method.as_str(), &path, &[("Authorization", &auth)], None)
                .await;
            assert_ne!(status, 401, "{method} {path} with {auth:?}");
        }
    }
    let (_, _, body) = s
        .call("GET", "/metrics", &[("Authorization", &good)], None)
        .await;
    let text = String::from_utf8(body).expect("utf8");
    assert!(
        text.contains("pcrf_api_requests_total{route=\"/v1/sessions/{id}/reauth\",method=\"POST\",status=\"401\"} 4\n"),
        "{text}"
    );
    s.shutdown().await;
}

// ---------------------------------------------------------------------------
// What a web page could make a browser send

/// Creates a subscriber through the API.
async fn provision(s: &Server, path: &str) {
    let (status, _) = s
        .json("PUT", path, &[], Some(json!({"plan": "basic"})))
        .await;
    assert_eq!(status, 201);
}

/// A request with extra headers and a JSON body (or none), the status and
/// the JSON error's message.
async fn refused(
    s: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> (u16, String) {
    let (status, h, body) = s.call(method, path, headers, body).await;
    assert_eq!(
        h.get("content-type").map(String::as_str),
        Some("application/json")
    );
    let v: Value = serde_json::from_slice(&body).expect("json");
    (status, v["error"].as_str().unwrap_or_default().to_string())
}

#[tokio::test]
async fn a_tokenless_api_answers_only_its_own_names() {
    let cfg: ApiConfig =
        toml::from_str("allowed_hosts = [\"PCRF.example.net\"]").expect("allowed_hosts");
    let s = Server::start(cfg).await;
    let port = s.addr.port();
    let imsi = "001010000000001";
    let sub = format!("/v1/subscribers/{imsi}");
    provision(&s, &sub).await;
    let json = [("Content-Type", "application/json")];

    // DNS rebinding: the attacker's name in Host. Nothing is read or done.
    for host in [
        "attacker.example".to_string(),
        format!("attacker.example:{port}"),
        format!("localhost.attacker.example:{port}"),
        format!("127.0.0.1.nip.io:{port}"),
    ] {
        let draft = br#"{"source": "return {}"}"#;
        for (method, path, body) in [
            ("GET", "/v1/subscribers", None),
            ("GET", sub.as_str(), None),
            ("PUT", "/v1/policy", Some(&draft[..])),
            ("POST", "/v1/policy/reload", None),
            ("DELETE", sub.as_str(), None),
        ] {
            let headers = [json[0], ("Host", host.as_str())];
            let (status, msg) = refused(&s, method, path, &headers, body).await;
            assert_eq!(status, 421, "{method} {path} Host {host}");
            assert!(msg.contains("api.allowed_hosts"), "{msg}");
        }
    }
    assert!(
        s.node.subscriber(imsi).is_some(),
        "deleted through a foreign Host"
    );
    assert_eq!(*s.node.version.lock().expect("lock"), 0, "reloaded");

    // Its addresses, localhost and the configured name, any port (an SSH
    // tunnel forwards another one).
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "localhost:18080".to_string(),
        "[::1]:18080".to_string(),
        format!("pcrf.example.net:{port}"),
    ] {
        let (status, _, _) = s.call("GET", &sub, &[("Host", &host)], None).await;
        assert_eq!(status, 200, "Host {host}");
    }
    s.shutdown().await;

    // With a token a page cannot get, a name is served.
    let token = "0123456789abcdef-token";
    let s = Server::start(ApiConfig {
        token: Some(token.into()),
        ..Default::default()
    })
    .await;
    let auth = format!("Bearer {token}");
    let headers = [
        ("Host", "pcrf-1.example.net:8080"),
        ("Authorization", &auth),
    ];
    assert_eq!(s.call("GET", &sub, &headers, None).await.0, 404);
    let headers = [
        ("Origin", "http://pcrf-1.example.net:8080"),
        ("Authorization", &auth),
    ];
    assert_eq!(s.call("GET", &sub, &headers, None).await.0, 403);
    s.shutdown().await;
}

#[tokio::test]
async fn cross_origin_and_form_requests_are_refused() {
    let s = Server::start(ApiConfig::default()).await;
    let port = s.addr.port();
    let imsi = "001010000000001";
    let sub = format!("/v1/subscribers/{imsi}");
    provision(&s, &sub).await;
    let json = ("Content-Type", "application/json");

    // A foreign Origin, also another port of the same address and a
    // sandboxed page's "null": refused, reads as well as changes.
    let other_port = format!("http://127.0.0.1:{}", port.wrapping_add(1));
    for origin in ["http://attacker.example", "null", other_port.as_str()] {
        for (method, path) in [
            ("GET", "/v1/subscribers"),
            ("POST", "/v1/policy/reload"),
            ("DELETE", sub.as_str()),
        ] {
            let (status, msg) = refused(&s, method, path, &[json, ("Origin", origin)], None).await;
            assert_eq!(status, 403, "{method} {path} Origin {origin}");
            assert!(msg.contains("cross-origin"), "{msg}");
        }
    }

    // What a form can send: no content type, text/plain, form encodings.
    for ct in [
        None,
        Some("text/plain"),
        Some("text/plain; charset=utf-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
    ] {
        let headers: Vec<(&str, &str)> = ct.map(|c| ("Content-Type", c)).into_iter().collect();
        for (method, path) in [("POST", "/v1/policy/reload"), ("DELETE", sub.as_str())] {
            let (status, msg) = refused(&s, method, path, &headers, None).await;
            assert_eq!(status, 415, "{method} {path} with {ct:?}");
            assert!(msg.contains("application/json"), "{msg}");
        }
    }
    assert!(s.node.subscriber(imsi).is_some(), "deleted by a form");
    assert_eq!(
        *s.node.version.lock().expect("lock"),
        0,
        "reloaded by a form"
    );

    // The console's own requests: same origin, JSON, also without a body.
    let own = format!("http://127.0.0.1:{port}");
    let (status, _, _) = s
        .call("POST", "/v1/policy/reload", &[json, ("Origin", &own)], None)
        .await;
    assert_eq!(status, 200);
    let (status, _, _) = s.call("DELETE", &sub, &[json], None).await;
    assert_eq!(status, 204);
    s.shutdown().await;
}

#[tokio::test]
async fn answers_are_neither_cached_nor_sniffed() {
    let s = Server::start(ApiConfig::default()).await;
    for (method, path) in [
        ("GET", "/v1/health"),
        ("GET", "/v1/subscribers"),
        ("GET", "/v1/nope"),
        ("GET", "/metrics"),
        ("POST", "/v1/health"),
    ] {
        let (_, h, _) = s.call(method, path, &[], None).await;
        assert_eq!(
            h.get("cache-control").map(String::as_str),
            Some("no-store"),
            "{method} {path}"
        );
        assert_eq!(
            h.get("x-content-type-options").map(String::as_str),
            Some("nosniff"),
            "{method} {path}"
        );
    }
    s.shutdown().await;
}

// Threads as in the server, where a handler may finish while the
// connection's task reads on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_all_answered_in_order() {
    let s = Server::start(ApiConfig::default()).await;
    let mut requests = Vec::new();
    for (i, level) in [(1, 5), (2, 6), (3, 7)] {
        let body = format!("{{\"congestion\": {level}}}");
        requests.extend_from_slice(
            format!(
                "PUT /v1/cells/00f1102a3b4c5{i}/congestion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    }
    let mut c = TcpStream::connect(s.addr).await.expect("connect");
    c.write_all(&requests).await.expect("write");
    // Read until the third answer's body (the connection stays open).
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&answer).contains("00f1102a3b4c53") {
        let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut chunk))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "not all three answered: {}",
                    String::from_utf8_lossy(&answer)
                )
            })
            .expect("read");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&answer);
    let heads: Vec<&str> = text.matches("HTTP/1.1 200 OK").collect();
    assert_eq!(heads.len(), 3, "{text}");
    let order: Vec<usize> = ["00f1102a3b4c51", "00f1102a3b4c52", "00f1102a3b4c53"]
        .iter()
        .map(|cell| text.find(cell).expect(cell))
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert_eq!(s.node.cells.lock().expect("lock").len(), 3);

    // A client that sends its requests and then closes its side (as
    // `printf ... | nc` does) still gets every answer before the close.
    for round in 0..50 {
        let mut c = TcpStream::connect(s.addr).await.expect("connect");
        c.write_all(&requests).await.expect("write");
        c.shutdown().await.expect("close the sending side");
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut answer))
            .await
            .expect("answered and closed in time")
            .expect("read");
        let text = String::from_utf8_lossy(&answer);
        assert_eq!(
            text.matches("HTTP/1.1 200 OK").count(),
            3,
            "round {round}: {text}"
        );
    }
    s.shutdown().await;
}

#[tokio::test]
async fn policy_checks_at_once_are_bounded() {
    let s = Server::start(ApiConfig::default()).await;
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    *s.node.hold_checks.lock().expect("lock") = Some(hold.clone());
    let s = Arc::new(s);
    let draft = json!({"source": "return {}"});
    // More checks than may compile at once; the surplus is answered 503
    // at once, the others wait for the held ones.
    let asked = api::policy::DRAFTS_AT_ONCE * 3;
    let mut tasks = Vec::new();
    for _ in 0..asked {
        let (s, draft) = (s.clone(), draft.clone());
        tasks.push(tokio::spawn(async move {
            let (status, h, _) = s
                .call(
                    "POST",
                    "/v1/policy/check",
                    &[("Content-Type", "application/json")],
                    Some(&serde_json::to_vec(&draft).expect("json")),
                )
                .await;
            (status, h.get("retry-after").cloned())
        }));
    }
    // Wait until the node holds as many checks as it will (no timing: the
    // refused ones are answered while the others are held).
    let mut answered = Vec::new();
    let mut pending = Vec::new();
    for t in tasks {
        if t.is_finished() {
            answered.push(t.await.expect("join"));
        } else {
            pending.push(t);
        }
    }
    while answered.len() + s.node.checks_running.load(Ordering::SeqCst) < asked {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let mut still = Vec::new();
        for t in pending {
            if t.is_finished() {
                answered.push(t.await.expect("join"));
            } else {
                still.push(t);
            }
        }
        pending = still;
    }
    assert_eq!(
        s.node.checks_running.load(Ordering::SeqCst),
        api::policy::DRAFTS_AT_ONCE
    );
    assert_eq!(answered.len(), asked - api::policy::DRAFTS_AT_ONCE);
    for (status, retry) in &answered {
        assert_eq!(*status, 503);
        assert_eq!(retry.as_deref(), Some("1"));
    }
    hold.add_permits(asked);
    for t in pending {
        assert_eq!(t.await.expect("join").0, 200);
    }
    assert_eq!(
        s.node.checks_most.load(Ordering::SeqCst),
        api::policy::DRAFTS_AT_ONCE
    );
    // Permits come back: the next check runs.
    let (status, _) = s.json("POST", "/v1/policy/check", &[], Some(draft)).await;
    assert_eq!(status, 200);
}

// ---------------------------------------------------------------------------
// Connection limits

#[tokio::test]
async fn idle_connections_are_closed_and_the_connection_cap_holds() {
    let node = Arc::new(MapNode::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let limits = api::ConnectionLimits {
        max_connections: 1,
        idle_timeout: Duration::from_millis(300),
        ..api::ConnectionLimits::default()
    };
    let router = api::router(node, &ApiConfig::default());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(api::serve_with(
        listener,
        router,
        async {
            let _ = stopped.await;
        },
        limits,
    ));

    // A silent client holds the only slot until its idle timeout.
    let started = std::time::Instant::now();
    let mut idle = TcpStream::connect(addr).await.expect("connect");
    // The kernel queues connections in the order their handshakes
    // completed: the server accepts `idle` before `second`, no pause needed.
    let mut second = TcpStream::connect(addr).await.expect("connect");
    second
        .write_all(b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), second.read_to_end(&mut answer))
        .await
        .expect("answered once the idle client is dropped")
        .expect("read");
    let waited = started.elapsed();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert!(
        waited >= Duration::from_millis(250),
        "second client served after {waited:?}, before the first one's idle timeout"
    );

    // The idle client was closed by the server (EOF or reset, no response).
    let mut rest = Vec::new();
    let r = tokio::time::timeout(Duration::from_secs(2), idle.read_to_end(&mut rest))
        .await
        .expect("closed in time");
    assert!(
        r.is_err() || rest.is_empty(),
        "{}",
        String::from_utf8_lossy(&rest)
    );

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("shutdown")
        .expect("join")
        .expect("serve");
}

// ---------------------------------------------------------------------------
// The OpenAPI document against the router

#[tokio::test]
async fn openapi_document_matches_the_router() {
    let doc = openapi::document();
    assert!(doc["openapi"]
        .as_str()
        .is_some_and(|v| v.starts_with("3.1.")));
    assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());

    let mut documented = Vec::new();
    let paths = doc["paths"].as_object().expect("paths");
    for (path, item) in paths {
        for (key, op) in item.as_object().expect("path item") {
            if key == "parameters" {
                continue;
            }
            assert!(
                ["get", "put", "post", "delete", "patch", "head", "options"]
                    .contains(&key.as_str()),
                "{path}: unexpected key {key}"
            );
            documented.push((key.to_ascii_uppercase(), path.clone()));
            // Every template parameter declared as a path parameter.
            let declared: Vec<&str> = item["parameters"]
                .as_array()
                .into_iter()
                .chain(op["parameters"].as_array())
                .flatten()
                .filter(|p| p["in"] == "path")
                .filter_map(|p| p["name"].as_str())
                .collect();
            for seg in path.split('/') {
                if let Some(name) = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                    assert!(declared.contains(&name), "{key} {path}: {name} undeclared");
                }
            }
            assert!(
                op["operationId"].is_string(),
                "{key} {path}: no operationId"
            );
            assert!(op["responses"].as_object().is_some_and(|r| !r.is_empty()));
        }
    }
    let mut routed: Vec<(String, String)> = api::route_table::<MapNode>()
        .into_iter()
        .map(|(m, p, _)| (m.as_str().to_string(), p.to_string()))
        .collect();
    documented.sort();
    routed.sort();
    assert_eq!(documented, routed, "OpenAPI paths and router routes differ");

    // Public routes are exactly those the document exempts from security.
    for (method, path, public) in api::route_table::<MapNode>() {
        let op = &doc["paths"][path][method.as_str().to_ascii_lowercase()];
        assert_eq!(op["security"] == json!([]), public, "{method} {path}");
    }

    // Every $ref resolves.
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    if k == "$ref" {
                        out.push(x.as_str().expect("ref string").to_string());
                    } else {
                        refs(x, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        let ptr = r.strip_prefix('#').expect("local ref");
        assert!(doc.pointer(ptr).is_some(), "unresolved {r}");
    }

    // And the router really serves each documented operation: a request to
    // it is not answered by the no-route or wrong-method fallbacks.
    let s = Server::start(ApiConfig::default()).await;
    let (status, served) = s.json("GET", "/v1/openapi.json", &[], None).await;
    assert_eq!(status, 200);
    assert_eq!(served, doc);
    for (method, path) in &documented {
        let concrete = path
            .replace("{imsi}", "001010000000001")
            .replace("{id}", "probe")
            .replace("{cell}", "00f1102a3b4c5d")
            // Refused (400) by the handler itself, rather than sampling 10 s.
            .replace("/v1/debug/profile", "/v1/debug/profile?seconds=0");
        let (status, _, body) = s.call(method, &concrete, &[], None).await;
        let text = String::from_utf8_lossy(&body);
        assert!(
            status != 405 && !text.contains("no such route"),
            "{method} {path} documented but not routed ({status} {text})"
        );
    }
    s.shutdown().await;
}

#[tokio::test]
async fn subscriber_batch_all_or_nothing_with_its_own_body_limit() {
    let cfg = ApiConfig {
        max_body_bytes: 2048,
        max_batch_bytes: 64 * 1024,
        ..Default::default()
    };
    let s = Server::start(cfg).await;
    let path = "/v1/subscribers/batch";
    // 200 profiles: far above the single-request limit, within the batch one.
    let many: Vec<Value> = (0..200)
        .map(|i| json!({"imsi": format!("0010100{i:08}"), "plan": "basic", "quotas": {"monthly": 1000}}))
        .collect();
    let body = serde_json::to_vec(&many).expect("json");
    assert!(body.len() > 2048);
    let (status, got) = s.json("POST", path, &[], Some(Value::Array(many))).await;
    assert_eq!(status, 200, "{got}");
    assert_eq!(got, json!({"created": 200, "updated": 0}));
    let (status, got) = s
        .json("GET", "/v1/subscribers/001010000000007", &[], None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(got["quotas"]["monthly"], 1000);

    // JSON lines: one existing, one new.
    let lines =
        "{\"imsi\":\"001010000000007\",\"plan\":\"gold\"}\n\n{\"imsi\":\"001010000009999\"}\n";
    let (status, _, raw) = s
        .call(
            "POST",
            path,
            &[("Content-Type", "application/x-ndjson")],
            Some(lines.as_bytes()),
        )
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&raw));
    let got: Value = serde_json::from_slice(&raw).expect("json");
    assert_eq!(got, json!({"created": 1, "updated": 1}));

    // A bad entry refuses the whole batch, named by its index.
    let before = s.node.subscribers.lock().expect("lock").len();
    let bad = json!([{"imsi": "001010000100001"}, {"imsi": "001010000100002", "billing_day": 40}]);
    let got = s.json("POST", path, &[], Some(bad)).await;
    assert_error(&got, 400);
    let msg = got.1["error"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("entry 1: ") && msg.contains("billing_day"),
        "{msg}"
    );
    let bad_line = "{\"imsi\":\"001010000100001\"}\n{\"imsi\":\"001010000100002\",\"colour\":1}\n";
    let (status, _, raw) = s
        .call(
            "POST",
            path,
            &[("Content-Type", "application/x-ndjson")],
            Some(bad_line.as_bytes()),
        )
        .await;
    assert_eq!(status, 400);
    let v: Value = serde_json::from_slice(&raw).expect("json");
    let msg = v["error"].as_str().unwrap_or_default();
    assert!(
        msg.starts_with("entry 1 (line 2): ") && msg.contains("colour"),
        "{msg}"
    );
    assert_eq!(s.node.subscribers.lock().expect("lock").len(), before);

    // Wrong content type, and a body above the batch limit.
    let (status, _, _) = s
        .call(
            "POST",
            path,
            &[("Content-Type", "text/csv")],
            Some(b"imsi\n1"),
        )
        .await;
    assert_eq!(status, 415);
    let huge = vec![b' '; 65 * 1024];
    let (status, _, raw) = s
        .call(
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(&huge),
        )
        .await;
    assert_eq!(status, 413, "{}", String::from_utf8_lossy(&raw));
    // The single-profile route keeps its own, smaller limit.
    let big_put = json!({"plan": "x".repeat(100), "attributes": {"note": "y".repeat(3000)}});
    assert_error(
        &s.json("PUT", "/v1/subscribers/001010000000001", &[], Some(big_put))
            .await,
        413,
    );
    s.shutdown().await;
}
