//! `pcrf client n7`: a small SMF for operators and the README tour, the
//! 5G counterpart of `pcrf client gx`. It creates an SM policy
//! (Npcf_SMPolicyControl Create, TS 29.512) over HTTP/2 with prior
//! knowledge as an SMF would, prints every answer (status, `Location`, the
//! SmPolicyDecision as pretty JSON), sends Updates (with accumulated usage
//! per usage monitoring key when asked), and deletes the SM policy: after
//! its hold time, or at once when interrupted (Ctrl-C, SIGTERM). It also
//! plays the SMF's notification side: an h2c server whose URI it gives as
//! `notificationUri`, which prints every notification (`/update`,
//! `/terminate`) and answers 204; a `/terminate` ends the client (with the
//! Delete an SMF then sends). Not a load generator: that is `pcrf-bench`.

use crate::client::UsageToReport;
use crate::sbi::routes::full_body::FullBody;
use bytes::{Bytes, BytesMut};
use http_body::Body as _;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;
use tokio::sync::mpsc;

/// Where the notifications go, under our listener's address.
pub const NOTIFY_PATH: &str = "/nsmf-callback/sm-policies/1";
/// The API root of Npcf_SMPolicyControl.
const API_ROOT: &str = "/npcf-smpolicycontrol/v1/sm-policies";
/// Largest notification body read.
const MAX_NOTIFICATION_BYTES: usize = 1 << 20;

/// What to send.
#[derive(Debug, Clone)]
pub struct N7ClientOptions {
    /// The PCF's SBI address (`host:port`, or an `http://` URI root; h2c).
    pub server: String,
    pub supi: String,
    pub gpsi: Option<String>,
    pub dnn: String,
    pub ue_ip: Ipv4Addr,
    pub sst: u8,
    pub sd: Option<String>,
    pub rat: String,
    /// Updates to send after the Create (each one second apart).
    pub updates: u32,
    /// Usage each Update reports, per usage monitoring key.
    pub reports: Vec<UsageToReport>,
    /// Stay this long before the Delete, printing notifications.
    pub hold: Duration,
    /// Exit without a Delete: the PCF keeps the SM policy.
    pub keep_session: bool,
    /// Where the notification server listens (port 0: any free one).
    pub notify_listen: SocketAddr,
}

/// How a run ended when no request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum N7ClientEnd {
    /// The hold time passed (the SM policy was deleted unless kept).
    Done,
    /// Interrupted (Ctrl-C, SIGTERM): deleted unless kept.
    Interrupted,
    /// The PCF sent a TerminationNotification; the SM policy was deleted.
    Terminated,
}

/// Checks an S-NSSAI's SD: six hex digits (TS 29.571).
pub fn parse_sd(s: &str) -> Result<String, String> {
    if s.len() == 6 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(s.to_string())
    } else {
        Err(format!("{s:?} is not six hex digits (e.g. 000001)"))
    }
}

/// The Create body (SmPolicyContextData).
pub fn create_body(opts: &N7ClientOptions, notification_uri: &str) -> Value {
    let mut slice = json!({ "sst": opts.sst });
    if let Some(sd) = &opts.sd {
        slice["sd"] = json!(sd);
    }
    let mut body = json!({
        "supi": opts.supi,
        "pduSessionId": 1,
        "pduSessionType": "IPV4",
        "dnn": opts.dnn,
        "notificationUri": notification_uri,
        "sliceInfo": slice,
        "accessType": "3GPP_ACCESS",
        "ratType": opts.rat,
        "ipv4Address": opts.ue_ip.to_string(),
    });
    if let Some(gpsi) = &opts.gpsi {
        body["gpsi"] = json!(gpsi);
    }
    body
}

/// An Update body (SmPolicyUpdateContextData): the usage reports as
/// AccuUsageReports (volUsage SIZE, a tenth uplink, the rest downlink)
/// with the US_RE trigger, or a plain revalidation (RE_TIMEOUT).
pub fn update_body(reports: &[UsageToReport]) -> Value {
    if reports.is_empty() {
        return json!({ "repPolicyCtrlReqTriggers": ["RE_TIMEOUT"] });
    }
    let accu: Vec<Value> = reports
        .iter()
        .map(|r| {
            let (up, down) = r.split();
            json!({
                "refUmIds": r.key,
                "volUsage": r.octets,
                "volUsageUplink": up,
                "volUsageDownlink": down,
            })
        })
        .collect();
    json!({
        "repPolicyCtrlReqTriggers": ["US_RE"],
        "accuUsageReports": accu,
    })
}

/// The error text of a reqwest error with its causes.
fn error_chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A body as pretty JSON, or as text when it is not JSON.
fn pretty(body: &[u8]) -> String {
    if body.is_empty() {
        return "(no body)".to_string();
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => serde_json::to_string_pretty(&v)
            .unwrap_or_else(|_| String::from_utf8_lossy(body).into_owned()),
        Err(_) => String::from_utf8_lossy(body).into_owned(),
    }
}

/// The PCF's side: its SBI root and the HTTP/2 client.
struct Pcf {
    client: reqwest::Client,
    root: String,
    server: String,
}

/// One answer: its status, `Location` and body.
struct Answer {
    status: StatusCode,
    location: Option<String>,
    body: Bytes,
}

impl Pcf {
    fn new(server: &str) -> Result<Pcf, String> {
        let client = reqwest::Client::builder()
            .http2_prior_knowledge()
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("starting the HTTP/2 client: {}", error_chain(&e)))?;
        let base = match server.strip_prefix("http://") {
            Some(rest) => format!("http://{}", rest.trim_end_matches('/')),
            None => format!("http://{server}"),
        };
        Ok(Pcf {
            client,
            root: format!("{base}{API_ROOT}"),
            server: server.to_string(),
        })
    }

    /// POSTs `body` (JSON) to the root plus `path`, printing the request.
    async fn post(&self, what: &str, path: &str, body: &Value) -> Result<Answer, String> {
        let url = format!("{}{path}", self.root);
        let shown = serde_json::to_string_pretty(body).unwrap_or_else(|_| body.to_string());
        println!(">>> {what}: POST {url}\n{shown}");
        let sent = self
            .client
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| self.failed(what, &e))?;
        let status = sent.status();
        let location = sent
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = sent.bytes().await.map_err(|e| self.failed(what, &e))?;
        Ok(Answer {
            status,
            location,
            body,
        })
    }

    fn failed(&self, what: &str, e: &reqwest::Error) -> String {
        let how = if e.is_connect() {
            "cannot reach the PCF at"
        } else if e.is_timeout() {
            "no answer in time from the PCF at"
        } else {
            "no answer from the PCF at"
        };
        format!("{what}: {how} {}: {}", self.server, error_chain(e))
    }
}

/// Prints an answer; an error naming `what` unless it is a success.
fn show(what: &str, a: &Answer) -> Result<(), String> {
    let reason = a.status.canonical_reason().unwrap_or("");
    println!("<<< {what}: {} {reason}", a.status.as_u16());
    if let Some(l) = &a.location {
        println!("Location: {l}");
    }
    if !a.body.is_empty() {
        println!("{}", pretty(&a.body));
    }
    if a.status.is_success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed: HTTP {} {reason}",
            a.status.as_u16()
        ))
    }
}

/// The notification server: binds `addr`, serves h2c in the background,
/// and tells `terminated` when a TerminationNotification arrives. Returns
/// the address bound.
async fn start_notification_server(
    addr: SocketAddr,
    terminated: mpsc::UnboundedSender<()>,
) -> Result<SocketAddr, String> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen for notifications on {addr}: {e}"))?;
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot listen for notifications on {addr}: {e}"))?;
    tokio::spawn(async move {
        let builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        loop {
            let io = match listener.accept().await {
                Ok((io, _)) => io,
                Err(e) => {
                    // Out of descriptors, say: wait rather than spin.
                    eprintln!("notification server: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let terminated = terminated.clone();
            let builder = builder.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let terminated = terminated.clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(notification(req, &terminated).await)
                    }
                });
                if let Err(e) = builder.serve_connection(TokioIo::new(io), service).await {
                    eprintln!("notification connection ended: {e}");
                }
            });
        }
    });
    Ok(bound)
}

/// One notification: printed, answered 204 (404 for another path, 405
/// for another method).
async fn notification(
    req: Request<Incoming>,
    terminated: &mpsc::UnboundedSender<()>,
) -> Response<FullBody> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let mut body = req.into_body();
    let mut buf = BytesMut::new();
    while let Some(frame) =
        std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await
    {
        let Ok(frame) = frame else { break };
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > MAX_NOTIFICATION_BYTES {
                break;
            }
            buf.extend_from_slice(&data);
        }
    }
    println!(
        "<<< notification from the PCF: {method} {path}\n{}",
        pretty(&buf)
    );
    let kind = path
        .strip_prefix(NOTIFY_PATH)
        .filter(|rest| *rest == "/update" || *rest == "/terminate");
    let status = match (method, kind) {
        (Method::POST, Some("/terminate")) => {
            let _ = terminated.send(());
            StatusCode::NO_CONTENT
        }
        (Method::POST, Some(_)) => StatusCode::NO_CONTENT,
        (_, Some(_)) => StatusCode::METHOD_NOT_ALLOWED,
        (_, None) => StatusCode::NOT_FOUND,
    };
    println!(">>> answered {}", status.as_u16());
    let mut r = Response::new(FullBody::new(Bytes::new()));
    *r.status_mut() = status;
    r
}

/// Runs the client: Create, Updates, hold, Delete. `interrupt` resolves
/// on Ctrl-C/SIGTERM. An error when the PCF cannot be reached or a
/// request was not answered with success (the SM policy is still deleted
/// when it was created, unless kept).
pub async fn run(
    opts: N7ClientOptions,
    interrupt: impl Future<Output = ()>,
) -> Result<N7ClientEnd, String> {
    let pcf = Pcf::new(&opts.server)?;
    let (term_tx, mut term_rx) = mpsc::unbounded_channel();
    let bound = start_notification_server(opts.notify_listen, term_tx).await?;
    let notification_uri = format!("http://{bound}{NOTIFY_PATH}");
    println!("listening for notifications at {notification_uri}");
    tokio::pin!(interrupt);

    let create = create_body(&opts, &notification_uri);
    let answer = tokio::select! {
        a = pcf.post("Create", "", &create) => a?,
        () = &mut interrupt => {
            println!("interrupted before the Create was answered");
            return Ok(N7ClientEnd::Interrupted);
        }
    };
    show("Create", &answer)?;
    let id = answer
        .location
        .as_deref()
        .and_then(|l| l.trim_end_matches('/').rsplit('/').next())
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| "Create: the answer has no Location with the SM policy's id".to_string())?;
    println!("SM policy {id} created");

    let mut failure: Option<String> = None;
    let steps = async {
        for n in 1..=opts.updates {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let what = format!("Update {n}/{}", opts.updates);
            let a = pcf
                .post(&what, &format!("/{id}/update"), &update_body(&opts.reports))
                .await?;
            show(&what, &a)?;
        }
        if !opts.hold.is_zero() {
            println!("holding for {} s", opts.hold.as_secs());
            tokio::time::sleep(opts.hold).await;
        }
        Ok::<(), String>(())
    };
    let end = tokio::select! {
        r = steps => {
            if let Err(e) = r {
                eprintln!("error: {e}");
                failure = Some(e);
            }
            N7ClientEnd::Done
        }
        () = &mut interrupt => {
            println!("interrupted");
            N7ClientEnd::Interrupted
        }
        Some(()) = term_rx.recv() => {
            println!("the PCF terminated the SM policy");
            N7ClientEnd::Terminated
        }
    };

    if opts.keep_session && end != N7ClientEnd::Terminated {
        println!("leaving the SM policy {id} in the PCF (--keep-session)");
    } else {
        // Another Ctrl-C does not cut the Delete short; the timeout of
        // the client bounds it.
        let what = "Delete";
        let a = pcf.post(what, &format!("/{id}/delete"), &json!({})).await?;
        show(what, &a)?;
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(end),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> N7ClientOptions {
        N7ClientOptions {
            server: "127.0.0.1:7777".into(),
            supi: "imsi-001010000000001".into(),
            gpsi: None,
            dnn: "internet".into(),
            ue_ip: Ipv4Addr::new(10, 45, 0, 2),
            sst: 1,
            sd: Some("000001".into()),
            rat: "NR".into(),
            updates: 0,
            reports: vec![],
            hold: Duration::ZERO,
            keep_session: false,
            notify_listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }

    #[test]
    fn the_bodies_decode_as_the_pcf_decodes_them() {
        let limits = crate::sbi::body::DecodeLimits::default();
        let body = create_body(&opts(), "http://127.0.0.1:1/nsmf-callback/sm-policies/1");
        let ctx = crate::n7::decode::decode_create(body.to_string().as_bytes(), &limits)
            .expect("a valid Create");
        assert_eq!(ctx.supi.as_deref(), Some("imsi-001010000000001"));
        assert!(ctx.gpsi.is_none());

        let reports: Vec<UsageToReport> = vec!["total=10MB".parse().expect("report")];
        let up =
            crate::n7::decode::decode_update(update_body(&reports).to_string().as_bytes(), &limits)
                .expect("a valid Update");
        let r = &up.accu_usage_reports[0];
        assert_eq!(r.ref_um_ids.as_deref(), Some("total"));
        assert_eq!(r.vol_usage, Some(10_000_000));
        assert_eq!(r.vol_usage_uplink, Some(1_000_000));
        assert_eq!(r.vol_usage_downlink, Some(9_000_000));
    }

    #[test]
    fn an_sd_is_six_hex_digits() {
        assert!(parse_sd("00000a").is_ok());
        assert!(parse_sd("0001").is_err());
        assert!(parse_sd("00000g").is_err());
    }
}
