//! `pcrf-bench misbehave`: a Diameter peer that misbehaves on purpose, for
//! the chaos suite (`chaos/peers.sh`), which runs it next to a well-behaved
//! `pcrf-bench run` and checks that the server keeps serving the good peer.
//! Raw TCP, not the transport, because the transport would behave.
//!
//! - `flap`: connect, CER, CEA, drop the connection; again, as fast as the
//!   server allows.
//! - `stall`: open sessions (CCR-I), then stop reading while the server is
//!   made to send RARs to them (DELETE /v1/sessions/{id} through the API).
//! - `half`: connections that send a header promising more bytes than
//!   follow, then nothing (some after CER, some instead of it).
//! - `flood`: pipelined CCR-Is far beyond the server's in-flight cap,
//!   answers read and counted by Result-Code.
//!
//! Every loop is bounded by `--duration` (and flood also by a request count).

use crate::gx::{self, Gateway, Subscriber};
use crate::http_client::{ApiClient, BaseUrl};
use crate::population::Population;
use crate::session::subscriber;
use crate::verify::encode_segment;
use bytes::{Buf, BytesMut};
use diameter::codec::frame_len;
use diameter::dict::{app, avp, cmd};
use diameter::peer::{encode_capabilities, Application, LocalNode};
use diameter::{Message, MessageBuilder};
use reqwest::Method;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The misbehaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Flap,
    Stall,
    Half,
    Flood,
}

/// What to misbehave against.
#[derive(Clone, Debug)]
pub struct Options {
    pub target: SocketAddr,
    pub mode: Mode,
    pub duration: Duration,
    /// Origin-Host of the (first) misbehaving peer; more are numbered on.
    pub origin_host: String,
    pub origin_realm: String,
    pub destination_realm: String,
    pub population: Population,
    /// The REST API (stall: to make the server send RARs).
    pub api: Option<BaseUrl>,
    /// Connections (half) or sessions (stall).
    pub count: usize,
    /// Flood: the most requests sent.
    pub max_requests: u64,
}

/// What happened.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MisbehaveReport {
    pub mode: String,
    pub elapsed_s: f64,
    /// Flap: connect-CER-CEA-drop cycles completed.
    pub cycles: u64,
    pub connections: u64,
    /// Connections the server closed on us before the end.
    pub closed_by_server: u64,
    pub requests_sent: u64,
    /// Answers by Result-Code.
    pub answers: BTreeMap<String, u64>,
    /// Stall: RARs asked for through the API, and the API's statuses.
    pub rar_asked: u64,
    pub api_status: BTreeMap<String, u64>,
    pub errors: Vec<String>,
}

impl MisbehaveReport {
    fn error(&mut self, e: String) {
        if self.errors.len() < 10 {
            self.errors.push(e);
        }
    }
}

const MAX_MESSAGE: u32 = 1 << 20;

/// One raw connection.
struct Raw {
    stream: TcpStream,
    buf: BytesMut,
    hbh: u32,
}

impl Raw {
    async fn connect(target: SocketAddr) -> Result<Raw, String> {
        let stream = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(target))
            .await
            .map_err(|_| format!("connect to {target}: timed out"))?
            .map_err(|e| format!("connect to {target}: {e}"))?;
        let _ = stream.set_nodelay(true);
        Ok(Raw {
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
            hbh: 1,
        })
    }

    fn next_ids(&mut self) -> (u32, u32) {
        self.hbh = self.hbh.wrapping_add(1);
        (self.hbh, self.hbh ^ 0x5a5a_0000)
    }

    /// CER then CEA; the CEA's Result-Code.
    async fn handshake(&mut self, host: &str, realm: &str) -> Result<u32, String> {
        let local = LocalNode::new(host, realm)
            .with_application(Application::auth_vendor(app::GX, gx::VENDOR_3GPP));
        let (h, e) = self.next_ids();
        let mut out = BytesMut::with_capacity(256);
        let mut b = MessageBuilder::request(&mut out, cmd::CAPABILITIES_EXCHANGE, 0, h, e);
        encode_capabilities(&mut b, &local, Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        b.finish();
        self.send(&out).await?;
        let cea = tokio::time::timeout(Duration::from_secs(5), self.read_message())
            .await
            .map_err(|_| "no CEA within 5 s".to_string())??;
        Ok(result_code(&cea))
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream
            .write_all(bytes)
            .await
            .map_err(|e| format!("write: {e}"))
    }

    /// The next whole message; Err when the server closed the connection.
    async fn read_message(&mut self) -> Result<Message, String> {
        loop {
            if let Some(n) = whole(&self.buf)? {
                let m = self.buf.split_to(n).freeze();
                return Message::parse(m).map_err(|e| format!("parse: {e}"));
            }
            let n = self
                .stream
                .read_buf(&mut self.buf)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("closed by the server".into());
            }
        }
    }
}

/// The next whole message's length, once all of it is in `buf`.
fn whole(buf: &[u8]) -> Result<Option<usize>, String> {
    match frame_len(buf, MAX_MESSAGE) {
        Ok(Some(n)) if n <= buf.len() => Ok(Some(n)),
        Ok(_) => Ok(None),
        Err(e) => Err(format!("framing: {e}")),
    }
}

fn result_code(m: &Message) -> u32 {
    m.find(avp::RESULT_CODE)
        .ok()
        .flatten()
        .and_then(|a| a.as_u32().ok())
        .unwrap_or(0)
}

fn gateway(o: &Options, host: &str) -> Gateway {
    Gateway {
        origin_host: host.to_string(),
        origin_realm: o.origin_realm.clone(),
        destination_realm: o.destination_realm.clone(),
        destination_host: None,
        origin_state_id: 1,
        pgw_address: Ipv4Addr::new(192, 0, 2, 200),
        sgw_address: Ipv4Addr::new(198, 51, 100, 200),
        mcc_mnc: "00101".into(),
        apn: "internet".into(),
    }
}

/// A CCR-I of session `n` on gateway `g` for subscriber `s`.
fn ccr_i(g: &Gateway, s: &Subscriber, tag: u32, n: u32, hbh: u32) -> bytes::Bytes {
    let sid = gx::session_id(&g.origin_host, tag, n);
    let r = gx::Request {
        session_id: &sid,
        gateway: g,
        destination_host: None,
        subscriber: s,
        number: 0,
        charging_id: n,
    };
    let mut buf = BytesMut::with_capacity(1024);
    let mut b = MessageBuilder::request(&mut buf, cmd::CREDIT_CONTROL, app::GX, hbh, hbh);
    gx::ccr_initial(&mut b, &r);
    b.finish();
    buf.freeze()
}

/// Runs the misbehaviour until `duration` has passed.
pub async fn run(o: &Options) -> MisbehaveReport {
    let started = Instant::now();
    let deadline = started + o.duration;
    let mut r = MisbehaveReport {
        mode: format!("{:?}", o.mode).to_lowercase(),
        ..Default::default()
    };
    match o.mode {
        Mode::Flap => flap(o, deadline, &mut r).await,
        Mode::Half => half(o, deadline, &mut r).await,
        Mode::Flood => flood(o, deadline, &mut r).await,
        Mode::Stall => stall(o, deadline, &mut r).await,
    }
    r.elapsed_s = started.elapsed().as_secs_f64();
    r
}

async fn flap(o: &Options, deadline: Instant, r: &mut MisbehaveReport) {
    while Instant::now() < deadline {
        let attempt = async {
            let mut c = Raw::connect(o.target).await?;
            let rc = c.handshake(&o.origin_host, &o.origin_realm).await?;
            // Dropped without DPR: the abrupt end of a flapping link.
            Ok::<u32, String>(rc)
        };
        r.connections += 1;
        match attempt.await {
            Ok(rc) => {
                r.cycles += 1;
                *r.answers.entry(format!("CEA {rc}")).or_default() += 1;
            }
            Err(e) => {
                r.error(e);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn half(o: &Options, deadline: Instant, r: &mut MisbehaveReport) {
    let closed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..o.count.max(1) {
        let (o, closed) = (o.clone(), closed.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Raw::connect(o.target).await?;
            // Every other connection first completes its CER, the rest
            // send the half message instead of one.
            if i % 2 == 0 {
                c.handshake(&o.origin_host, &o.origin_realm).await?;
            }
            // Version 1, length 2000, then 100 bytes of it.
            let mut half = vec![0u8; 120];
            half[0] = 1;
            half[1..4].copy_from_slice(&2000u32.to_be_bytes()[1..]);
            half[4] = 0x80;
            half[5..8].copy_from_slice(&cmd::CREDIT_CONTROL.to_be_bytes()[1..]);
            half[8..12].copy_from_slice(&app::GX.to_be_bytes());
            c.send(&half).await?;
            // Silence; note whether the server gives up on us first.
            let wait = deadline.saturating_duration_since(Instant::now());
            let mut sink = [0u8; 4096];
            let ended = tokio::time::timeout(wait, async {
                loop {
                    match c.stream.read(&mut sink).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {} // DWRs, unanswered
                    }
                }
            })
            .await;
            if ended.is_ok() {
                closed.fetch_add(1, Relaxed);
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        r.connections += 1;
        match t.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => r.error(e),
            Err(e) => r.error(e.to_string()),
        }
    }
    r.closed_by_server = closed.load(Relaxed);
}

async fn flood(o: &Options, deadline: Instant, r: &mut MisbehaveReport) {
    let mut c = match Raw::connect(o.target).await {
        Ok(c) => c,
        Err(e) => return r.error(e),
    };
    r.connections = 1;
    match c.handshake(&o.origin_host, &o.origin_realm).await {
        Ok(2001) => {}
        Ok(rc) => return r.error(format!("CEA {rc}")),
        Err(e) => return r.error(e),
    }
    let Raw {
        stream, mut buf, ..
    } = c;
    let (mut rd, mut wr) = stream.into_split();
    let g = gateway(o, &o.origin_host);
    let pop = o.population.clone();
    let (max, tag) = (o.max_requests, crate::run_result::run_tag().0);
    let writer = tokio::spawn(async move {
        let mut sent = 0u64;
        let mut out = BytesMut::with_capacity(1 << 20);
        while sent < max && Instant::now() < deadline {
            out.clear();
            // 1000 requests per write: far beyond any sane in-flight cap.
            for _ in 0..1000 {
                let n = sent as u32;
                let s = subscriber(&pop, sent % pop.count());
                out.extend_from_slice(&ccr_i(&g, &s, tag, n, n));
                sent += 1;
            }
            let w = tokio::time::timeout(
                deadline.saturating_duration_since(Instant::now()),
                wr.write_all(&out),
            )
            .await;
            if !matches!(w, Ok(Ok(()))) {
                break;
            }
        }
        (sent, wr)
    });
    let mut answers: BTreeMap<String, u64> = BTreeMap::new();
    let mut closed = false;
    let read_until = deadline + Duration::from_secs(2);
    loop {
        match whole(&buf) {
            Ok(Some(n)) => {
                let m = buf.split_to(n).freeze();
                if let Ok(m) = Message::parse(m) {
                    if !m.is_request() {
                        *answers.entry(result_code(&m).to_string()).or_default() += 1;
                    }
                }
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                r.error(e);
                break;
            }
        }
        let left = read_until.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rd.read_buf(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(_)) => {}
            Err(_) => break,
        }
        if buf.remaining() > (64 << 20) {
            r.error("answers backing up beyond 64 MiB".into());
            break;
        }
    }
    if let Ok((sent, _wr)) = writer.await {
        r.requests_sent = sent;
    }
    r.closed_by_server = u64::from(closed);
    r.answers = answers;
}

async fn stall(o: &Options, deadline: Instant, r: &mut MisbehaveReport) {
    let Some(api) = &o.api else {
        return r.error("stall needs --api (to make the server send RARs)".into());
    };
    let client = match ApiClient::new(api, None) {
        Ok(c) => c,
        Err(e) => return r.error(e.to_string()),
    };
    let mut c = match Raw::connect(o.target).await {
        Ok(c) => c,
        Err(e) => return r.error(e),
    };
    r.connections = 1;
    match c.handshake(&o.origin_host, &o.origin_realm).await {
        Ok(2001) => {}
        Ok(rc) => return r.error(format!("CEA {rc}")),
        Err(e) => return r.error(e),
    }
    let g = gateway(o, &o.origin_host);
    let tag = crate::run_result::run_tag().0;
    let mut sessions = Vec::new();
    for n in 0..o.count.max(1) as u32 {
        // The last subscribers of the population: the good peer starts at the first.
        let i = o.population.count() - 1 - u64::from(n) % o.population.count();
        let s = subscriber(&o.population, i);
        let (h, _) = c.next_ids();
        if let Err(e) = c.send(&ccr_i(&g, &s, tag, n, h)).await {
            return r.error(e);
        }
        r.requests_sent += 1;
        // Answers, skipping the server's own requests (DWR) unanswered.
        loop {
            match tokio::time::timeout(Duration::from_secs(5), c.read_message()).await {
                Ok(Ok(m)) if m.is_request() => continue,
                Ok(Ok(m)) => {
                    let rc = result_code(&m);
                    *r.answers.entry(rc.to_string()).or_default() += 1;
                    if rc == 2001 {
                        sessions.push(gx::session_id(&g.origin_host, tag, n));
                    }
                    break;
                }
                Ok(Err(e)) => return r.error(e),
                Err(_) => return r.error("no CCA within 5 s".into()),
            }
        }
    }
    // From now on nothing is read: RARs (and DWRs) pile up unanswered.
    let sessions = Arc::new(sessions);
    let statuses = Arc::new(std::sync::Mutex::new(BTreeMap::<String, u64>::new()));
    let mut tasks = Vec::new();
    for w in 0..4usize {
        let (client, sessions, statuses) = (client.clone(), sessions.clone(), statuses.clone());
        tasks.push(tokio::spawn(async move {
            let mut asked = 0u64;
            let mut i = w;
            while Instant::now() < deadline && !sessions.is_empty() {
                let id = encode_segment(&sessions[i % sessions.len()]);
                i += 4;
                // A reauth, and also a release: a RAR every time (reauth
                // sends one only on a change).
                for (method, path) in [
                    (Method::POST, format!("/v1/sessions/{id}/reauth")),
                    (Method::DELETE, format!("/v1/sessions/{id}")),
                ] {
                    let left = deadline.saturating_duration_since(Instant::now())
                        + Duration::from_secs(15);
                    let status = client
                        // No body, but the JSON type a change must carry.
                        .send(client.json(method, &path, Vec::new()).timeout(left))
                        .await;
                    asked += 1;
                    let key = status.map_or("no answer".to_string(), |s| s.status.to_string());
                    *statuses
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(key)
                        .or_default() += 1;
                }
            }
            asked
        }));
    }
    for t in tasks {
        if let Ok(n) = t.await {
            r.rar_asked += n;
        }
    }
    // Did the server drop the stalled connection (watchdog) meanwhile?
    let mut sink = [0u8; 65536];
    let mut closed = false;
    for _ in 0..10_000 {
        match tokio::time::timeout(Duration::from_millis(200), c.stream.read(&mut sink)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(_)) => {}
            Err(_) => break,
        }
    }
    r.closed_by_server = u64::from(closed);
    r.api_status = std::mem::take(&mut *statuses.lock().unwrap_or_else(|e| e.into_inner()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::echo_server;

    fn options(target: SocketAddr, mode: Mode) -> Options {
        Options {
            target,
            mode,
            duration: Duration::from_millis(500),
            origin_host: "bad-1.bench.test".into(),
            origin_realm: "bench.test".into(),
            destination_realm: "pcrf.test".into(),
            population: Population::new("001010000000001", "79000000001", 10).expect("pop"),
            api: None,
            count: 4,
            max_requests: 5000,
        }
    }

    async fn echo() -> SocketAddr {
        let node = echo_server::node("echo.pcrf.test", "pcrf.test");
        let server = node.listen("127.0.0.1:0").await.expect("listen");
        let addr = server.local_addr().expect("addr");
        tokio::spawn(server.run(std::future::pending()));
        addr
    }

    #[tokio::test]
    async fn flap_cycles_through_cer_and_drop() {
        let r = run(&options(echo().await, Mode::Flap)).await;
        assert!(r.cycles >= 2, "{r:?}");
        assert_eq!(r.answers.get("CEA 2001"), Some(&r.cycles));
    }

    #[tokio::test]
    async fn flood_counts_every_answer() {
        let r = run(&options(echo().await, Mode::Flood)).await;
        assert_eq!(r.requests_sent, 5000, "{r:?}");
        let answered: u64 = r.answers.values().sum();
        assert_eq!(answered, 5000, "{r:?}");
    }

    #[tokio::test]
    async fn half_messages_hold_their_connections() {
        let r = run(&options(echo().await, Mode::Half)).await;
        assert_eq!(r.connections, 4, "{r:?}");
        assert!(r.errors.is_empty(), "{r:?}");
    }

    #[tokio::test]
    async fn stall_without_api_says_so() {
        let r = run(&options(echo().await, Mode::Stall)).await;
        assert!(r.errors[0].contains("--api"), "{r:?}");
    }
}
