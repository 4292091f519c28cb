//! Bulk provisioning of the subscriber population through the PCRF's public
//! REST API (`PUT /v1/subscribers/{imsi}`), before a run, so that the run
//! measures sessions of known subscribers and not profile misses.
//!
//! Several tasks, each PUTting its share of the population one request at
//! a time over the client's keep-alive pool: the server answers a
//! connection's requests one after another, each after its commit, so the
//! tasks (one connection each) are what keeps its group commit full. PUT
//! is idempotent, so a request whose connection broke is simply re-sent.

use crate::http_client::{ApiClient, BaseUrl, HttpError};
use crate::population::Population;
use crate::scenario::ProvisionProfile;
use reqwest::Method;
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;

/// How many times a request is re-sent after its exchange failed.
const RETRIES: u32 = 3;
/// How many failure messages are kept for the report.
const KEEP_ERRORS: usize = 5;

/// What provisioning did.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ProvisionReport {
    pub subscribers: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// The first few failures, as "IMSI: status body".
    pub first_errors: Vec<String>,
    pub elapsed_s: f64,
    pub per_second: f64,
}

/// The JSON body for one subscriber.
pub fn subscriber_body(population: &Population, profile: &ProvisionProfile, i: u64) -> Vec<u8> {
    #[derive(Serialize)]
    struct Body<'a> {
        msisdn: String,
        plan: &'a str,
        services: &'a [String],
    }
    serde_json::to_vec(&Body {
        msisdn: population.msisdn(i),
        plan: &profile.plan,
        services: &profile.services,
    })
    .unwrap_or_default()
}

/// PUTs every subscriber of `population`, `connections` requests in flight.
pub async fn provision(
    base: &BaseUrl,
    population: &Population,
    profile: &ProvisionProfile,
    connections: usize,
) -> Result<ProvisionReport, String> {
    let started = Instant::now();
    let n = population.count();
    let connections = (connections.max(1) as u64).min(n);
    let api = ApiClient::new(base, None).map_err(|e| e.to_string())?;
    let shared = Arc::new((api, population.clone(), profile.clone()));
    let mut tasks = Vec::new();
    for c in 0..connections {
        let (from, to) = (n * c / connections, n * (c + 1) / connections);
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            let (api, pop, profile) = &*shared;
            provision_range(api, pop, profile, from, to).await
        }));
    }
    let mut report = ProvisionReport {
        subscribers: n,
        ..Default::default()
    };
    let mut first_error = None;
    for t in tasks {
        match t.await {
            Ok(Ok(part)) => {
                report.succeeded += part.succeeded;
                report.failed += part.failed;
                for e in part.first_errors {
                    if report.first_errors.len() < KEEP_ERRORS {
                        report.first_errors.push(e);
                    }
                }
            }
            Ok(Err(e)) => {
                first_error.get_or_insert(e.to_string());
            }
            Err(join) => {
                first_error.get_or_insert(format!("task failed: {join}"));
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    report.elapsed_s = started.elapsed().as_secs_f64();
    report.per_second = n as f64 / report.elapsed_s.max(1e-9);
    Ok(report)
}

async fn provision_range(
    api: &ApiClient,
    pop: &Population,
    profile: &ProvisionProfile,
    from: u64,
    to: u64,
) -> Result<ProvisionReport, HttpError> {
    let mut report = ProvisionReport::default();
    for i in from..to {
        let path = format!("/v1/subscribers/{}", pop.imsi(i));
        let body = subscriber_body(pop, profile, i);
        let mut retries = 0;
        let r = loop {
            match api.send(api.json(Method::PUT, &path, body.clone())).await {
                Ok(r) => break r,
                Err(e) if retries >= RETRIES => return Err(e),
                Err(_) => retries += 1,
            }
        };
        if (200..300).contains(&r.status) {
            report.succeeded += 1;
        } else {
            report.failed += 1;
            if report.first_errors.len() < KEEP_ERRORS {
                let body = String::from_utf8_lossy(&r.body);
                let body: String = body.chars().take(200).collect();
                report
                    .first_errors
                    .push(format!("{}: {} {body}", pop.imsi(i), r.status));
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    use tokio::net::TcpListener;

    /// A loopback REST endpoint that stores what it is PUT, rejects one
    /// IMSI with 422, and closes every connection after 7 requests.
    async fn fake_api() -> (String, Arc<Mutex<HashMap<String, serde_json::Value>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let store = Arc::new(Mutex::new(HashMap::new()));
        let st = store.clone();
        tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    return;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let mut r = BufReader::new(s);
                    for served in 1..=7 {
                        let mut line = String::new();
                        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let path = line.split(' ').nth(1).unwrap_or_default().to_string();
                        let mut len = 0;
                        loop {
                            let mut h = String::new();
                            r.read_line(&mut h).await.expect("header");
                            if h.trim_end().is_empty() {
                                break;
                            }
                            if let Some((name, v)) = h.split_once(':') {
                                if name.eq_ignore_ascii_case("content-length") {
                                    len = v.trim().parse().expect("len");
                                }
                            }
                        }
                        let mut body = vec![0; len];
                        r.read_exact(&mut body).await.expect("body");
                        let imsi = path.rsplit('/').next().unwrap_or_default().to_string();
                        let resp: &[u8] = if imsi.ends_with("005") {
                            b"HTTP/1.1 422 Unprocessable\r\ncontent-length: 3\r\n\r\nbad"
                        } else {
                            let v = serde_json::from_slice(&body).expect("json");
                            st.lock().expect("lock").insert(imsi, v);
                            if served == 7 {
                                b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                            } else {
                                b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
                            }
                        };
                        r.get_mut().write_all(resp).await.expect("write");
                    }
                });
            }
        });
        (url, store)
    }

    #[tokio::test]
    async fn provisions_everyone_across_connection_closes() {
        let (url, store) = fake_api().await;
        let pop = Population::new("001010000000001", "79000000001", 50).expect("pop");
        let profile = ProvisionProfile {
            plan: "gold".into(),
            services: vec!["internet".into(), "volte".into()],
        };
        let base = BaseUrl::parse(&url).expect("url");
        let r = provision(&base, &pop, &profile, 3)
            .await
            .expect("provision");
        assert_eq!((r.subscribers, r.succeeded, r.failed), (50, 49, 1));
        assert!(
            r.first_errors[0].starts_with("001010000000005: 422 bad"),
            "{:?}",
            r.first_errors
        );
        let store = store.lock().expect("lock");
        assert_eq!(store.len(), 49);
        let v = &store["001010000000050"];
        assert_eq!(v["msisdn"], "79000000050");
        assert_eq!(v["plan"], "gold");
        assert_eq!(v["services"][1], "volte");
    }

    #[tokio::test]
    async fn unreachable_api_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        drop(listener);
        let pop = Population::new("001010000000001", "79000000001", 5).expect("pop");
        let profile = ProvisionProfile {
            plan: "p".into(),
            services: vec![],
        };
        let base = BaseUrl::parse(&url).expect("url");
        assert!(provision(&base, &pop, &profile, 2).await.is_err());
    }
}
