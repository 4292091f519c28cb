//! Store commits counted over exactly the measurement window, from the
//! server's Prometheus `/metrics`: "commits per 100 transactions" must not
//! include the provisioning phase, the warm-up or the drain, so the
//! counters are read when the CPU samplers start and end their window.
//! The readings at the window's edges are made on the scheduler's (or the
//! sampler's) own thread, which blocks on the generator's runtime for them.

use crate::http_client::error_chain;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The counters read (names as `pcrf serve` exports them).
const COMMITS: &str = "pcrf_store_commits_total";
const BATCHES: &str = "pcrf_store_batches_total";
const ROWS: &str = "pcrf_store_rows_total";

/// Bound on one scrape: a server too busy to answer in this time costs the
/// figure, not the run.
const TIMEOUT: Duration = Duration::from_secs(2);

/// What the store did during the window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoreReport {
    pub commits: u64,
    /// Transactions attempted (a batch where no row changed is not committed).
    pub batches: u64,
    pub rows_changed: u64,
    /// Diameter transactions answered in the same window.
    pub transactions: u64,
    pub commits_per_100_transactions: Option<f64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Reading {
    commits: u64,
    batches: u64,
    rows: u64,
}

/// Reads the store counters at the window's start and end.
#[derive(Debug)]
pub struct ServerCounters {
    http: reqwest::Client,
    url: reqwest::Url,
    /// The runtime the readings run on.
    rt: tokio::runtime::Handle,
    start: Option<Reading>,
    end: Option<Reading>,
    error: Option<String>,
}

impl ServerCounters {
    /// `url`: the server's metrics URL, `http://host:port/metrics` (the
    /// path defaults to /metrics). Call it on the runtime that is to run
    /// the readings.
    pub async fn new(url: &str) -> Result<ServerCounters, String> {
        let mut parsed = reqwest::Url::parse(url)
            .ok()
            .filter(|u| u.scheme() == "http" && u.has_host())
            .ok_or_else(|| format!("--server-metrics {url:?}: give an http://host:port URL"))?;
        if parsed.path() == "/" {
            parsed.set_path("/metrics");
        }
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(TIMEOUT)
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| format!("--server-metrics: {}", error_chain(&e)))?;
        let c = ServerCounters {
            http,
            url: parsed,
            rt: tokio::runtime::Handle::current(),
            start: None,
            end: None,
            error: None,
        };
        // Fail before any traffic when the URL is wrong.
        c.read().await?;
        Ok(c)
    }

    /// Reads the counters at the window's start; called from a thread
    /// outside the runtime (it blocks on it).
    pub fn start(&mut self) {
        match self.rt.block_on(self.read()) {
            Ok(r) => self.start = Some(r),
            Err(e) => self.error = Some(e),
        }
    }

    /// [`start`](Self::start) at the window's end.
    pub fn end(&mut self) {
        match self.rt.block_on(self.read()) {
            Ok(r) => self.end = Some(r),
            Err(e) => self.error = Some(e),
        }
    }
    /// The window's figures; None (with a warning) if a scrape failed.
    pub fn report(&self, transactions: u64) -> Option<StoreReport> {
        if let Some(e) = &self.error {
            eprintln!("pcrf-bench: store counters not reported: {e}");
        }
        let (a, b) = (self.start?, self.end?);
        let commits = b.commits.saturating_sub(a.commits);
        Some(StoreReport {
            commits,
            batches: b.batches.saturating_sub(a.batches),
            rows_changed: b.rows.saturating_sub(a.rows),
            transactions,
            commits_per_100_transactions: (transactions > 0)
                .then(|| commits as f64 * 100.0 / transactions as f64),
        })
    }

    async fn read(&self) -> Result<Reading, String> {
        let failed = |e: reqwest::Error| format!("reading {}: {}", self.url, error_chain(&e));
        let r = self
            .http
            .get(self.url.clone())
            .send()
            .await
            .map_err(failed)?;
        if r.status() != reqwest::StatusCode::OK {
            return Err(format!("reading {}: answered {}", self.url, r.status()));
        }
        parse(&r.text().await.map_err(failed)?)
    }
}

/// The three counters out of a Prometheus text exposition.
fn parse(body: &str) -> Result<Reading, String> {
    let value = |name: &str| -> Result<u64, String> {
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                let (n, v) = l.split_once(' ')?;
                (n == name).then(|| v.trim().parse::<f64>().ok()).flatten()
            })
            .map(|v| v as u64)
            .ok_or_else(|| format!("{name} not found in the metrics (is this a pcrf?)"))
    };
    Ok(Reading {
        commits: value(COMMITS)?,
        batches: value(BATCHES)?,
        rows: value(ROWS)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;

    #[test]
    fn parses_the_store_counters_and_refuses_other_servers() {
        let body = "# HELP pcrf_store_commits_total x\n# TYPE pcrf_store_commits_total counter\n\
                    pcrf_store_commits_total 1234\npcrf_store_commits_skipped_total 9\n\
                    pcrf_store_batches_total 1300\npcrf_store_rows_total 5000\n";
        assert_eq!(
            parse(body),
            Ok(Reading {
                commits: 1234,
                batches: 1300,
                rows: 5000
            })
        );
        assert!(parse("up 1\n").is_err());
    }

    /// Reads a request up to the end of its headers, as a server must
    /// before answering (closing with unread data resets the connection).
    fn read_request(c: &mut TcpStream) {
        let mut req = Vec::new();
        let mut byte = [0u8; 1];
        while !req.ends_with(b"\r\n\r\n") {
            match c.read(&mut byte) {
                Ok(1) => req.push(byte[0]),
                _ => break,
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn counts_only_between_start_and_end() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = server.local_addr().expect("addr");
        let serve = std::thread::spawn(move || {
            // The constructor's check, then start and end.
            for commits in [10u64, 100, 130] {
                let (mut c, _) = server.accept().expect("accept");
                read_request(&mut c);
                let body = format!(
                    "pcrf_store_commits_total {commits}\npcrf_store_batches_total {}\npcrf_store_rows_total {}\n",
                    commits + 5,
                    commits * 3
                );
                write!(
                    c,
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n{body}"
                )
                .expect("write");
            }
        });
        let c = ServerCounters::new(&format!("http://{addr}/metrics"))
            .await
            .expect("reachable");
        // As the scheduler does: from a thread that blocks on the runtime.
        let c = tokio::task::spawn_blocking(move || {
            let mut c = c;
            c.start();
            c.end();
            c
        })
        .await
        .expect("sampler thread");
        serve.join().expect("server thread");
        let r = c.report(1500).expect("both readings");
        assert_eq!(r.commits, 30);
        assert_eq!(r.batches, 30);
        assert_eq!(r.rows_changed, 90);
        assert_eq!(r.commits_per_100_transactions, Some(2.0));
    }

    #[tokio::test]
    async fn a_refusing_server_is_an_error_before_the_run() {
        let server = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = server.local_addr().expect("addr");
        let serve = std::thread::spawn(move || {
            let (mut c, _) = server.accept().expect("accept");
            read_request(&mut c);
            write!(c, "HTTP/1.0 401 Unauthorized\r\n\r\nno token").expect("write");
        });
        let e = ServerCounters::new(&format!("http://{addr}/metrics"))
            .await
            .expect_err("401");
        serve.join().expect("server thread");
        assert!(e.contains("401"), "{e}");
        assert!(ServerCounters::new("https://x/metrics").await.is_err());
    }
}
