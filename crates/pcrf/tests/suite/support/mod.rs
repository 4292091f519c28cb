//! Process-level test support: start the real `pcrf` binary on free
//! loopback ports with its own data directory, talk to its HTTP API, and
//! play a PCEF over Diameter (CER/CEA, CCRs, answering RARs) and an OCS.

#![allow(dead_code)]

use bytes::Bytes;
use diameter::codec::{DiameterError, Message, MessageBuilder};
use diameter::dict::{avp, cmd, enums};
use diameter::peer::{Application, DisconnectCause, LocalNode, PeerSettings};
use diameter::transport::{Handler, Initiator, Node, PeerHandle};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

mod agent;
mod cluster;
mod cluster_node;
mod n7_seam;
mod n7_smf;
/// The notification tests' receivers, proxy and schema check.
pub mod notify;
mod ocs;
mod postgres;
mod wait;

// Each test file uses a part of these.
#[allow(unused_imports)]
pub use {agent::*, cluster::*, n7_seam::*, n7_smf::*, ocs::*, postgres::*, wait::*};

pub const GX: u32 = 16_777_238;
pub const TGPP: u32 = 10_415;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn free_port() -> u16 {
    let [p] = free_ports();
    p
}

/// N distinct free ports: the listeners are held until all are chosen, so
/// the kernel cannot hand the same port out twice (the Diameter and API
/// ports once collided that way).
fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("free port"))
        .collect();
    std::array::from_fn(|i| held[i].local_addr().expect("local addr").port())
}

/// A unique scratch directory under the system temp dir.
pub fn scratch_dir(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "pcrf-test-{tag}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A running `pcrf serve`.
pub struct Pcrf {
    child: Option<Child>,
    pub dir: PathBuf,
    pub config: PathBuf,
    pub policy: PathBuf,
    pub diameter: SocketAddr,
    pub api: SocketAddr,
    /// Arguments of `pcrf serve` after `--config FILE`.
    serve_args: Vec<String>,
}

impl Pcrf {
    /// Starts the server with the default policy copied into its own
    /// directory and `extra` appended to the generated configuration.
    pub fn start(extra: &str) -> Pcrf {
        Self::start_with_store(None, extra)
    }

    /// As `start`, with `store` as the `[store]` section's body (default:
    /// the embedded store in the scratch directory).
    pub fn start_with_store(store: Option<&str>, extra: &str) -> Pcrf {
        Self::start_full(store, "", "", extra, &[])
    }

    /// As `start`, with `diameter` added to the `[diameter]` section.
    pub fn start_with_diameter(diameter: &str, extra: &str) -> Pcrf {
        Self::start_full(None, diameter, "", extra, &[])
    }

    /// As `start`, with `api` added to the `[api]` section (after its
    /// `listen`).
    pub fn start_with_api(api: &str, extra: &str) -> Pcrf {
        Self::start_full(None, "", api, extra, &[])
    }

    /// As `start`, with `args` added to `pcrf serve --config FILE`.
    pub fn start_with_serve_args(args: &[&str], extra: &str) -> Pcrf {
        Self::start_full(None, "", "", extra, args)
    }

    fn start_full(
        store: Option<&str>,
        diameter_extra: &str,
        api_extra: &str,
        extra: &str,
        serve_args: &[&str],
    ) -> Pcrf {
        let dir = scratch_dir("pcrf");
        let policy = dir.join("policy.lua");
        std::fs::copy(repo_root().join("policies/default.lua"), &policy).expect("copy policy");
        let [diameter_port, api_port] = free_ports();
        let diameter: SocketAddr = format!("127.0.0.1:{diameter_port}").parse().expect("addr");
        let api: SocketAddr = format!("127.0.0.1:{api_port}").parse().expect("addr");
        let config = dir.join("pcrf.toml");
        let text = format!(
            r#"
[node]
origin_host = "pcrf.test.local"
origin_realm = "test.local"

[diameter]
listen = "{diameter}"
watchdog_secs = 30
request_timeout_ms = 3000
{diameter_extra}

[[peers]]
origin_host = "pgw.test.local"
addresses = ["127.0.0.1"]

[store]
{store}

[policy]
path = "{policy}"
time_zone = "{zone}"

[api]
listen = "{api}"
{api_extra}

[log]
level = "info"
{extra}
"#,
            store = store.map_or_else(
                || format!("path = \"{}\"", dir.join("data").display()),
                str::to_owned
            ),
            policy = policy.display(),
            zone = midday_zone(),
        );
        std::fs::write(&config, text).expect("write config");
        let mut p = Pcrf {
            child: None,
            dir,
            config,
            policy,
            diameter,
            api,
            serve_args: serve_args.iter().map(|a| a.to_string()).collect(),
        };
        p.first_spawn();
        p
    }

    /// The first start. A port `free_ports` chose can be taken by another
    /// process between that choice and the server's bind (the tests run
    /// in parallel, and the kernel hands ports to any of them); the server
    /// then exits saying which address was in use. When that is this
    /// node's own Diameter or API port, which nothing has been told yet,
    /// it is chosen again and the node started again, a few times at most.
    /// Restarts keep their ports: peers know them by then.
    fn first_spawn(&mut self) {
        for _ in 0..3 {
            let Err(log) = self.try_spawn() else {
                return;
            };
            let ours = [self.diameter, self.api]
                .into_iter()
                .find(|a| log.contains(&format!("on {a}: Address already in use")));
            let Some(taken) = ours else {
                panic!("pcrf exited at start-up:\n{log}");
            };
            let [port] = free_ports();
            let again: SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
            let text = std::fs::read_to_string(&self.config).expect("read config");
            let text = text.replace(&format!("\"{taken}\""), &format!("\"{again}\""));
            std::fs::write(&self.config, text).expect("write config");
            if self.diameter == taken {
                self.diameter = again;
            } else {
                self.api = again;
            }
            eprintln!("{taken} was taken before pcrf bound it; starting again on {again}");
            // The next start's log is the node's log.
            let _ = std::fs::remove_file(self.dir.join("pcrf.log"));
        }
        self.spawn();
    }

    fn spawn(&mut self) {
        if let Err(log) = self.try_spawn() {
            panic!("pcrf exited at start-up:\n{log}");
        }
    }

    /// Starts the server and waits until it is healthy; `Err(log)` when it
    /// exited at start-up.
    fn try_spawn(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("pcrf.log"))
            .expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_pcrf"))
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .args(&self.serve_args)
            .current_dir(&self.dir)
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start pcrf");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok((200, _)) = self.try_http("GET", "/v1/health", None) {
                self.wait_for_sbi(deadline);
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(format!("({status}):\n{}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("pcrf did not become healthy:\n{}", self.log());
    }

    /// With `[sbi]` in the configuration: waits until its listener takes
    /// connections too (it starts beside the API, not before it).
    fn wait_for_sbi(&self, deadline: Instant) {
        let text = std::fs::read_to_string(&self.config).unwrap_or_default();
        let Some(listen) = text.split("[sbi]").nth(1).and_then(|sbi| {
            sbi.lines()
                .find_map(|l| l.trim().strip_prefix("listen = \""))
                .and_then(|l| l.split('"').next().map(str::to_owned))
        }) else {
            return;
        };
        while std::net::TcpStream::connect(&listen).is_err() {
            assert!(
                Instant::now() < deadline,
                "the SBI listener {listen} did not start:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pcrf.log")).unwrap_or_default()
    }

    /// `what` a test waits for, shown with the server's log when the wait
    /// fails (the log is read only then).
    pub fn waiting_for<'a>(&'a self, what: &'a str) -> impl std::fmt::Display + 'a {
        struct WithLog<'a>(&'a Pcrf, &'a str);
        impl std::fmt::Display for WithLog<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}; server log:\n{}", self.1, self.0.log())
            }
        }
        WithLog(self, what)
    }

    /// The value of the first metric sample whose line starts with
    /// `name_and_labels` followed by a space (0 when absent).
    pub fn metric_value(&self, name_and_labels: &str) -> f64 {
        self.metrics()
            .lines()
            .find_map(|l| l.strip_prefix(name_and_labels)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }

    /// How many log lines contain `needle`.
    pub fn log_count(&self, needle: &str) -> usize {
        self.log().lines().filter(|l| l.contains(needle)).count()
    }

    /// Waits until the log holds more than `seen` lines with `needle`
    /// (`seen` from `log_count` before the action that logs it); returns
    /// the newest such line.
    pub async fn wait_log(&self, needle: &str, seen: usize, within: Duration) -> String {
        let what = format!("a log line with {needle:?} after the {seen} before");
        eventually_async(self.waiting_for(&what), within, || {
            let log = self.log();
            let lines: Vec<&str> = log.lines().filter(|l| l.contains(needle)).collect();
            (lines.len() > seen).then(|| lines[lines.len() - 1].to_string())
        })
        .await
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        let pid = c.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(st)) = c.try_wait() {
                return st;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("pcrf did not stop on SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends a signal ("-HUP", "-TERM") to the server.
    pub fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let st = Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("kill");
        assert!(st.success());
    }

    /// The arguments after `--config FILE` of the next `restart`.
    pub fn set_serve_args(&mut self, args: &[&str]) {
        self.serve_args = args.iter().map(|a| a.to_string()).collect();
    }

    /// Starts it again on the same configuration and data.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    pub fn try_http(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> Result<(u16, String), String> {
        let method = reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
        let req = http_client()
            .request(method, format!("http://{}{path}", self.api))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.unwrap_or("").to_string());
        let (tx, rx) = std::sync::mpsc::channel();
        http_runtime().spawn(async move {
            let answer = async {
                let r = req.send().await?;
                let status = r.status().as_u16();
                Ok((status, r.text().await?))
            };
            let _ = tx.send(answer.await.map_err(|e: reqwest::Error| format!("{e:?}")));
        });
        rx.recv().map_err(|e| e.to_string())?
    }

    /// An HTTP request to the API; the status and the body parsed as JSON
    /// (Null when empty or not JSON).
    pub fn http(&self, method: &str, path: &str, body: Option<&str>) -> (u16, serde_json::Value) {
        let (status, body) = self.try_http(method, path, body).expect("http");
        (
            status,
            serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
        )
    }

    pub fn provision(&self, imsi: &str, json: &str) {
        let (st, body) = self.http("PUT", &format!("/v1/subscribers/{imsi}"), Some(json));
        assert!(st == 200 || st == 201, "provisioning failed: {st} {body}");
    }

    pub fn metrics(&self) -> String {
        self.try_http("GET", "/metrics", None).expect("metrics").1
    }
}

/// The client of the tests' API calls: a fresh connection each time (a
/// restarted server must not meet a connection of its predecessor), no
/// proxy from the environment.
fn http_client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .connect_timeout(Duration::from_secs(2))
            .read_timeout(Duration::from_secs(10))
            .build()
            .expect("HTTP client")
    })
}

/// The runtime the API calls run on: they are made from plain tests and
/// from inside the tests' own runtimes alike, which cannot block on
/// themselves.
fn http_runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("HTTP client runtime")
    })
}

/// A fixed-offset IANA zone in which it is about noon now. The default
/// policy gives more bandwidth between 01:00 and 06:00 local time; with
/// "UTC" the tests that check the day-time AMBR failed when CI ran at night.
pub fn midday_zone() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    let utc_hour = ((secs / 3600) % 24) as i64;
    // UTC+offset is noon; -11..=12 are all valid Etc/GMT zones, whose
    // sign is inverted (Etc/GMT-3 is UTC+3).
    match 12 - utc_hour {
        0 => "Etc/GMT".to_string(),
        o if o > 0 => format!("Etc/GMT-{o}"),
        o => format!("Etc/GMT+{}", -o),
    }
}

/// A usage file for tests: a session-level key "total" (100 MB chunks) and
/// a rule-level key "vip" (50 MB), both summed into "monthly"; "vip-video"
/// counts the VIP key alone; the basic plan has 10 GB a month.
pub const USAGE_FILE: &str = r#"
time_zone = "UTC"
billing_day = 1

[keys.total]
level = "session"
chunk = "100 MB"

[keys.vip]
level = "rule"
chunk = "50 MB"

[accumulators.monthly]
reset = "monthly"
sources = ["total", "vip"]

[accumulators.vip-video]
reset = "monthly"
sources = ["vip"]

[plans.basic]
monthly = "10 GB"
"#;

/// Writes `text` as a usage file in a scratch directory; returns the
/// configuration's `[usage]` section naming it (pushes spread over 2 s) and
/// the file's path.
pub fn usage_section(text: &str) -> (String, PathBuf) {
    let dir = scratch_dir("usage-file");
    let path = dir.join("usage.toml");
    std::fs::write(&path, text).expect("write usage file");
    (
        format!("[usage]\npath = \"{}\"\nspread_secs = 2\n", path.display()),
        path,
    )
}

impl Pcrf {
    /// As `start`, with `USAGE_FILE` as the usage file and pushes spread
    /// over 2 s; `extra` follows the `[usage]` section.
    pub fn start_with_usage(extra: &str) -> Pcrf {
        Self::start_with_usage_file(USAGE_FILE, extra).0
    }

    /// As `start_with_usage` with `text` as the usage file; also returns
    /// the file's path (for reload tests).
    pub fn start_with_usage_file(text: &str, extra: &str) -> (Pcrf, PathBuf) {
        let (section, path) = usage_section(text);
        (Pcrf::start(&format!("{section}{extra}")), path)
    }
}

impl Drop for Pcrf {
    fn drop(&mut self) {
        self.kill9();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A RAR the PCEF received.
#[derive(Clone)]
pub struct ReceivedRar(pub Message, pub Instant);

/// The PCEF side (or that of an AF or a TDF behind the routing agent):
/// answers the RARs of its application with a configurable Result-Code.
pub struct PcefHandler {
    pub rars: Mutex<Vec<ReceivedRar>>,
    pub raa_code: AtomicU32,
    /// Gx for a PCEF, Rx for an AF, Sd for a TDF.
    app: u32,
}

impl Handler for PcefHandler {
    fn serves(&self, app_id: u32, cmd: u32) -> bool {
        app_id == self.app && cmd == diameter::dict::cmd::RE_AUTH
    }

    async fn handle(&self, req: Message, peer: PeerHandle) -> Result<Bytes, DiameterError> {
        self.rars
            .lock()
            .expect("lock")
            .push(ReceivedRar(req.clone(), Instant::now()));
        let mut buf = bytes::BytesMut::new();
        let mut b = MessageBuilder::answer(&mut buf, &req);
        b.origin(&peer.local().origin_host, &peer.local().origin_realm)
            .result_code(self.raa_code.load(Ordering::Relaxed));
        b.finish();
        Ok(buf.freeze())
    }
}

/// Sends a Gx CCR from `peer` (its own origin, realm test.local) built by
/// `extra` after the common AVPs, with the T flag when `retransmit`;
/// returns the CCA.
pub async fn send_gx_ccr(
    peer: &PeerHandle,
    retransmit: bool,
    session: &str,
    request_type: i32,
    number: u32,
    extra: impl FnOnce(&mut MessageBuilder<'_>),
) -> Message {
    let to = Destination {
        realm: "test.local",
        host: None,
    };
    send_gx_request(peer, to, retransmit, session, request_type, number, extra)
        .await
        .expect("CCA")
}

/// Where a request is addressed: Destination-Realm, and Destination-Host
/// when it names a node.
#[derive(Clone, Copy)]
pub struct Destination<'a> {
    pub realm: &'a str,
    pub host: Option<&'a str>,
}

/// As `send_gx_ccr`, to `to`; the CCA or why none came.
pub async fn send_gx_request(
    peer: &PeerHandle,
    to: Destination<'_>,
    retransmit: bool,
    session: &str,
    request_type: i32,
    number: u32,
    extra: impl FnOnce(&mut MessageBuilder<'_>),
) -> Result<Message, diameter::transport::RequestError> {
    let local = peer.local().clone();
    peer.request(GX, cmd::CREDIT_CONTROL, |b| {
        if retransmit {
            b.set_retransmit();
        }
        b.str(avp::SESSION_ID, session)
            .u32(avp::AUTH_APPLICATION_ID, GX)
            .origin(&local.origin_host, &local.origin_realm)
            .str(avp::DESTINATION_REALM, to.realm);
        if let Some(host) = to.host {
            b.str(avp::DESTINATION_HOST, host);
        }
        b.i32(avp::CC_REQUEST_TYPE, request_type)
            .u32(avp::CC_REQUEST_NUMBER, number);
        extra(b);
    })
    .await
}

/// An emulated PCEF connected to the PCRF.
pub struct Pcef {
    pub handler: Arc<PcefHandler>,
    initiator: Option<Initiator>,
    pub peer: PeerHandle,
}

impl Pcef {
    pub async fn connect(addr: SocketAddr, origin_host: &str) -> Pcef {
        match Self::try_connect(addr, origin_host).await {
            Some(p) => p,
            None => panic!("PCEF could not open a Diameter connection to the PCRF"),
        }
    }

    /// As `connect`, `None` when no connection opened within 10 s.
    pub async fn try_connect(addr: SocketAddr, origin_host: &str) -> Option<Pcef> {
        Self::try_connect_to(addr, origin_host, "pcrf.test.local").await
    }

    /// A peer of application `app` (an AF on Rx, a TDF on Sd) named
    /// `origin_host`, answering the PCRF's RARs of that application.
    pub async fn connect_app(addr: SocketAddr, origin_host: &str, app: u32) -> Pcef {
        let local = LocalNode::new(origin_host, "test.local")
            .with_application(Application::auth_vendor(app, TGPP));
        let settings = PeerSettings {
            request_timeout: Duration::from_secs(10),
            ..PeerSettings::default()
        };
        match Self::open(addr, local, app, settings, "pcrf.test.local").await {
            Some(p) => p,
            None => panic!("{origin_host} could not open a Diameter connection to the PCRF"),
        }
    }

    /// As `connect`, to a PCRF whose Origin-Host is `pcrf_host` (a node of
    /// a cluster).
    pub async fn connect_to(addr: SocketAddr, origin_host: &str, pcrf_host: &str) -> Pcef {
        match Self::try_connect_to(addr, origin_host, pcrf_host).await {
            Some(p) => p,
            None => panic!("PCEF could not open a Diameter connection to {pcrf_host}"),
        }
    }

    async fn try_connect_to(addr: SocketAddr, origin_host: &str, pcrf_host: &str) -> Option<Pcef> {
        let local = LocalNode::new(origin_host, "test.local")
            .with_application(Application::auth_vendor(GX, TGPP));
        let settings = PeerSettings {
            request_timeout: Duration::from_secs(10),
            ..PeerSettings::default()
        };
        Self::open(addr, local, GX, settings, pcrf_host).await
    }

    /// Opens a Diameter connection from `local`, answering the RARs of
    /// application `app`, to `peer_host` at `addr`; `None` when it did not
    /// open within 10 s.
    async fn open(
        addr: SocketAddr,
        local: LocalNode,
        app: u32,
        settings: PeerSettings,
        peer_host: &str,
    ) -> Option<Pcef> {
        let handler = Arc::new(PcefHandler {
            rars: Mutex::new(Vec::new()),
            raa_code: AtomicU32::new(2001),
            app,
        });
        let node = Node::with_parts(
            Arc::new(local),
            Arc::new(settings),
            handler.clone(),
            diameter::transport::PeerTable::new(),
        );
        let initiator = node.connect(addr, Some(peer_host));
        if !initiator.wait_open(Duration::from_secs(10)).await {
            return None;
        }
        let peer = initiator.handle();
        Some(Pcef {
            handler,
            initiator: Some(initiator),
            peer,
        })
    }

    pub async fn close(mut self) {
        if let Some(i) = self.initiator.take() {
            i.shutdown(DisconnectCause::Rebooting).await;
        }
    }

    /// Waits until this PCEF has received `n` RARs (10 s at most);
    /// returns all it received.
    pub async fn wait_rars(&self, n: usize) -> Vec<Message> {
        let what = format!("{n} RARs at the PCEF");
        eventually_async(what, Duration::from_secs(10), || {
            let rars = self.rars();
            (rars.len() >= n).then_some(rars)
        })
        .await
    }

    pub fn rars(&self) -> Vec<Message> {
        self.handler
            .rars
            .lock()
            .expect("lock")
            .iter()
            .map(|r| r.0.clone())
            .collect()
    }

    /// As `ccr`, sent again: the T flag set, as a PCEF retransmits a
    /// request whose answer it did not get.
    pub async fn ccr_again(
        &self,
        session: &str,
        request_type: i32,
        number: u32,
        extra: impl FnOnce(&mut MessageBuilder<'_>),
    ) -> Message {
        self.send_ccr(true, session, request_type, number, extra)
            .await
    }

    /// Sends a CCR built by `extra` after the common AVPs; returns the CCA.
    pub async fn ccr(
        &self,
        session: &str,
        request_type: i32,
        number: u32,
        extra: impl FnOnce(&mut MessageBuilder<'_>),
    ) -> Message {
        self.send_ccr(false, session, request_type, number, extra)
            .await
    }

    async fn send_ccr(
        &self,
        retransmit: bool,
        session: &str,
        request_type: i32,
        number: u32,
        extra: impl FnOnce(&mut MessageBuilder<'_>),
    ) -> Message {
        send_gx_ccr(&self.peer, retransmit, session, request_type, number, extra).await
    }

    /// A CCR-I as a P-GW sends it for `imsi` on APN "internet".
    pub async fn ccr_i(&self, session: &str, imsi: &str) -> Message {
        self.ccr(session, enums::CC_REQUEST_TYPE::INITIAL_REQUEST, 0, |b| {
            initial_avps(b, imsi)
        })
        .await
    }

    pub async fn ccr_u(
        &self,
        session: &str,
        number: u32,
        extra: impl FnOnce(&mut MessageBuilder<'_>),
    ) -> Message {
        self.ccr(
            session,
            enums::CC_REQUEST_TYPE::UPDATE_REQUEST,
            number,
            extra,
        )
        .await
    }

    pub async fn ccr_t(&self, session: &str, number: u32) -> Message {
        self.ccr(
            session,
            enums::CC_REQUEST_TYPE::TERMINATION_REQUEST,
            number,
            |b| {
                b.i32(avp::TERMINATION_CAUSE, 1);
            },
        )
        .await
    }
}

/// The AVPs of a CCR-I after the common ones.
pub fn initial_avps(b: &mut MessageBuilder<'_>, imsi: &str) {
    initial_avps_with(b, imsi, "491700000001")
}

/// A CCR-I's AVPs with a given MSISDN.
pub fn initial_avps_with(b: &mut MessageBuilder<'_>, imsi: &str, msisdn: &str) {
    b.group(avp::SUBSCRIPTION_ID, |g| {
        g.i32(avp::SUBSCRIPTION_ID_TYPE, 1)
            .str(avp::SUBSCRIPTION_ID_DATA, imsi);
    })
    .group(avp::SUBSCRIPTION_ID, |g| {
        g.i32(avp::SUBSCRIPTION_ID_TYPE, 0)
            .str(avp::SUBSCRIPTION_ID_DATA, msisdn);
    })
    .group(avp::SUPPORTED_FEATURES, |g| {
        g.u32(avp::VENDOR_ID, TGPP)
            .u32(avp::FEATURE_LIST_ID, 1)
            .u32(avp::FEATURE_LIST, 0b11);
    })
    .i32(avp::NETWORK_REQUEST_SUPPORT, 1)
    .bytes(avp::FRAMED_IP_ADDRESS, &[10, 45, 0, 2])
    .i32(avp::IP_CAN_TYPE, 5)
    .i32(avp::RAT_TYPE, 1004)
    .bytes(
        avp::_3GPP_USER_LOCATION_INFO,
        &[130, 0, 0xf1, 0x10, 0, 1, 0, 0xf1, 0x10, 0, 0, 1, 1],
    )
    .str(avp::CALLED_STATION_ID, "internet")
    .group(avp::USER_EQUIPMENT_INFO, |g| {
        g.i32(avp::USER_EQUIPMENT_INFO_TYPE, 0)
            .bytes(avp::USER_EQUIPMENT_INFO_VALUE, b"3534900698733190");
    });
}

/// Result-Code, or Experimental-Result-Code, of an answer.
pub fn result_of(m: &Message) -> u32 {
    if let Ok(Some(rc)) = m.find(avp::RESULT_CODE) {
        return rc.as_u32().expect("Result-Code");
    }
    let er = m
        .find(avp::EXPERIMENTAL_RESULT)
        .expect("avps")
        .expect("Result-Code or Experimental-Result");
    er.grouped()
        .find(avp::EXPERIMENTAL_RESULT_CODE)
        .expect("grouped")
        .expect("Experimental-Result-Code")
        .as_u32()
        .expect("u32")
}

/// Names installed (Charging-Rule-Name, -Base-Name and dynamic definitions'
/// names) and removed in an answer or RAR.
pub fn rule_changes(m: &Message) -> (Vec<String>, Vec<String>) {
    let mut installed = Vec::new();
    let mut removed = Vec::new();
    for a in m.avps() {
        let a = a.expect("avp");
        let into = if a.is(avp::CHARGING_RULE_INSTALL) {
            &mut installed
        } else if a.is(avp::CHARGING_RULE_REMOVE) {
            &mut removed
        } else {
            continue;
        };
        for g in a.grouped() {
            let g = g.expect("avp");
            if g.is(avp::CHARGING_RULE_NAME) || g.is(avp::CHARGING_RULE_BASE_NAME) {
                into.push(g.as_str().expect("name").to_string());
            } else if g.is(avp::CHARGING_RULE_DEFINITION) {
                let name = g
                    .grouped()
                    .find(avp::CHARGING_RULE_NAME)
                    .expect("g")
                    .expect("name");
                into.push(name.as_str().expect("str").to_string());
            }
        }
    }
    installed.sort();
    removed.sort();
    (installed, removed)
}

/// The APN-AMBR (UL, DL) of an answer's top-level QoS-Information.
pub fn apn_ambr(m: &Message) -> Option<(u32, u32)> {
    let q = m.find(avp::QOS_INFORMATION).expect("avps")?;
    let ul = q
        .grouped()
        .find(avp::APN_AGGREGATE_MAX_BITRATE_UL)
        .expect("g")?
        .as_u32()
        .ok()?;
    let dl = q
        .grouped()
        .find(avp::APN_AGGREGATE_MAX_BITRATE_DL)
        .expect("g")?
        .as_u32()
        .ok()?;
    Some((ul, dl))
}
