//! `pcrf subscribers import FILE`: bulk provisioning from a CSV or JSON-lines
//! file through `POST /v1/subscribers/batch`. The file is read twice: a
//! first pass parses and validates every line (as the server will), so a bad
//! file imports nothing and every error names its line; the second pass
//! streams batches to the API, never holding the whole file in memory.

use pcrf::api::subscribers::{batch_entry, SubscriberBody, MAX_BATCH_ENTRIES, NDJSON};
use pcrf::api::BatchOutcome;
use pcrf::subscriber::Subscriber;
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio_rustls::rustls;

/// Errors reported from the first pass; more would only scroll.
const MAX_REPORTED_ERRORS: usize = 20;
/// Bound on one batch request (the server commits it before answering).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// What to import and where to.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    pub file: PathBuf,
    /// Base URL of the API, e.g. `http://127.0.0.1:8080`.
    pub api: String,
    pub token: Option<String>,
    /// CA certificate(s), PEM, that an `https` API's certificate must chain to.
    pub api_ca: Option<PathBuf>,
    /// Profiles per batch request (1..=100,000).
    pub batch: usize,
}

/// What an import did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ImportSummary {
    /// Profiles in the file.
    pub total: u64,
    pub created: u64,
    pub updated: u64,
    pub elapsed: Duration,
}

impl ImportSummary {
    /// Profiles the server acknowledged.
    pub fn imported(&self) -> u64 {
        self.created + self.updated
    }

    pub fn rate(&self) -> f64 {
        self.imported() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Why an import stopped.
#[derive(Debug)]
pub enum ImportError {
    /// The file (or the options) is wrong: nothing was sent.
    Invalid(String),
    /// The API refused a batch or could not be reached; the batches
    /// acknowledged before it stay imported (`done` says how many).
    Failed {
        message: String,
        done: ImportSummary,
    },
}

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImportError::Invalid(m) => write!(f, "{m}\nnothing was imported"),
            ImportError::Failed { message, done } => write!(
                f,
                "{message}\n{} of {} profiles were imported before the failure \
                 ({} created, {} updated); running the import again is safe",
                done.imported(),
                done.total,
                done.created,
                done.updated
            ),
        }
    }
}

// ---------------------------------------------------------------------------
// Reading the file

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Csv,
    JsonLines,
}

fn format_of(path: &Path) -> Result<Format, String> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("csv") => Ok(Format::Csv),
        Some("jsonl" | "ndjson") => Ok(Format::JsonLines),
        _ => Err(format!(
            "{}: unknown file type: the name must end in .csv, .jsonl or .ndjson",
            path.display()
        )),
    }
}

/// One CSV column.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Column {
    Imsi,
    Msisdn,
    Plan,
    Services,
    BillingDay,
    Quota(String),
}

fn parse_header(fields: Vec<String>) -> Result<Vec<Column>, String> {
    let mut columns = Vec::with_capacity(fields.len());
    for (i, name) in fields.into_iter().enumerate() {
        // A byte-order mark some spreadsheets write before the first name.
        let name = if i == 0 {
            name.trim_start_matches('\u{feff}').to_string()
        } else {
            name
        };
        let col = match name.as_str() {
            "imsi" => Column::Imsi,
            "msisdn" => Column::Msisdn,
            "plan" => Column::Plan,
            "services" => Column::Services,
            "billing_day" => Column::BillingDay,
            other => match other.strip_prefix("quota.") {
                Some(acc) if !acc.is_empty() => Column::Quota(acc.to_string()),
                _ => {
                    return Err(format!(
                        "unknown column {name:?} (known: imsi, msisdn, plan, services, \
                         billing_day, quota.<accumulator>)"
                    ))
                }
            },
        };
        if columns.contains(&col) {
            return Err(format!("column {name:?} appears twice"));
        }
        columns.push(col);
    }
    if !columns.contains(&Column::Imsi) {
        return Err("the header has no imsi column".into());
    }
    Ok(columns)
}

/// Splits one CSV line (RFC 4180 quoting, within the line).
fn split_csv(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut quoted = false; // this field started with a quote
    let mut in_quotes = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if in_quotes {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    cur.push('"');
                } else {
                    in_quotes = false;
                }
            } else {
                cur.push(c);
            }
            continue;
        }
        match c {
            ',' => {
                fields.push(std::mem::take(&mut cur));
                quoted = false;
            }
            '"' if cur.is_empty() && !quoted => {
                quoted = true;
                in_quotes = true;
            }
            '"' => return Err("a quote inside an unquoted field (quote the whole field)".into()),
            _ if quoted => return Err("text after a closing quote".into()),
            _ => cur.push(c),
        }
    }
    if in_quotes {
        return Err("unterminated quote (a field may not span lines)".into());
    }
    fields.push(cur);
    Ok(fields)
}

fn csv_profile(columns: &[Column], fields: Vec<String>) -> Result<Subscriber, String> {
    if fields.len() != columns.len() {
        return Err(format!(
            "{} fields, the header has {}",
            fields.len(),
            columns.len()
        ));
    }
    let mut body = SubscriberBody {
        imsi: None,
        msisdn: None,
        plan: None,
        services: Vec::new(),
        attributes: BTreeMap::new(),
        billing_day: None,
        quotas: BTreeMap::new(),
    };
    for (col, value) in columns.iter().zip(fields) {
        // An empty cell leaves the field out.
        if value.is_empty() {
            continue;
        }
        match col {
            Column::Imsi => body.imsi = Some(value),
            Column::Msisdn => body.msisdn = Some(value),
            Column::Plan => body.plan = Some(value),
            Column::Services => {
                body.services = value.split(';').map(str::to_string).collect();
            }
            Column::BillingDay => {
                body.billing_day =
                    Some(value.parse().map_err(|_| {
                        format!("billing_day must be a number 1 to 28, got {value:?}")
                    })?);
            }
            Column::Quota(acc) => {
                let octets = value.parse().map_err(|_| {
                    format!("quota.{acc} must be a whole number of octets, got {value:?}")
                })?;
                body.quotas.insert(acc.clone(), octets);
            }
        }
    }
    batch_entry(body).map_err(|e| e.message)
}

fn json_profile(line: &str) -> Result<Subscriber, String> {
    let body: SubscriberBody = serde_json::from_str(line).map_err(|e| e.to_string())?;
    batch_entry(body).map_err(|e| e.message)
}

/// The profiles of a file, one at a time, each with its line number.
struct Records {
    name: String,
    /// `None` once a fatal error (unreadable file, bad header) ended it.
    lines: Option<std::io::Lines<std::io::BufReader<std::fs::File>>>,
    format: Format,
    columns: Option<Vec<Column>>,
    line: usize,
}

impl Records {
    fn open(path: &Path) -> Result<Records, String> {
        let format = format_of(path)?;
        let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Records {
            name: path.display().to_string(),
            lines: Some(std::io::BufReader::with_capacity(1 << 16, file).lines()),
            format,
            columns: None,
            line: 0,
        })
    }

    fn error(&self, msg: impl std::fmt::Display) -> String {
        format!("{}:{}: {msg}", self.name, self.line)
    }

    /// The next profile, `Some(Err)` for a bad line (reading goes on after
    /// it), `None` at the end.
    fn next_record(&mut self) -> Option<Result<(usize, Subscriber), String>> {
        loop {
            let text = match self.lines.as_mut()?.next()? {
                Ok(t) => t,
                Err(e) => {
                    self.line += 1;
                    let msg = self.error(format!("cannot read: {e}"));
                    // A read error (or invalid UTF-8) ends the file.
                    self.lines = None;
                    return Some(Err(msg));
                }
            };
            self.line += 1;
            let text = text.strip_suffix('\r').unwrap_or(&text);
            if text.trim().is_empty() {
                continue;
            }
            let parsed = match self.format {
                Format::JsonLines => json_profile(text),
                Format::Csv => match &self.columns {
                    None => match split_csv(text).and_then(parse_header) {
                        Ok(cols) => {
                            self.columns = Some(cols);
                            continue;
                        }
                        Err(e) => {
                            let msg = self.error(format!("header: {e}"));
                            // Without a header no row can be read.
                            self.lines = None;
                            return Some(Err(msg));
                        }
                    },
                    Some(cols) => split_csv(text).and_then(|f| csv_profile(cols, f)),
                },
            };
            return Some(parsed.map(|s| (self.line, s)).map_err(|e| self.error(e)));
        }
    }
}

/// The first pass: every line parsed and validated, IMSIs distinct;
/// returns the number of profiles or every error (up to a limit).
fn validate_file(path: &Path) -> Result<u64, String> {
    let mut records = Records::open(path)?;
    let mut errors = Vec::new();
    let mut more = 0usize;
    // IMSI (5..15 digits) packed with its length: 8 bytes each, so a
    // million subscribers cost a few tens of MB, not a string each.
    let mut seen: HashMap<u64, usize> = HashMap::new();
    let mut count = 0u64;
    while let Some(r) = records.next_record() {
        let problem = match r {
            Ok((line, s)) => {
                count += 1;
                let key = s
                    .imsi
                    .parse::<u64>()
                    .map(|v| v * 16 + s.imsi.len() as u64)
                    .unwrap_or(u64::MAX);
                match seen.insert(key, line) {
                    Some(first) => Some(format!(
                        "{}:{line}: imsi {} repeats line {first}",
                        records.name, s.imsi
                    )),
                    None => None,
                }
            }
            Err(e) => Some(e),
        };
        if let Some(p) = problem {
            if errors.len() < MAX_REPORTED_ERRORS {
                errors.push(p);
            } else {
                more += 1;
            }
        }
    }
    if records.format == Format::Csv && records.columns.is_none() && errors.is_empty() {
        errors.push(format!("{}: no header row", records.name));
    }
    if errors.is_empty() {
        return Ok(count);
    }
    if more > 0 {
        errors.push(format!("... and {more} more errors"));
    }
    Err(errors.join("\n"))
}

// ---------------------------------------------------------------------------
// Talking to the API: one reqwest client, its keep-alive pool reused batch
// after batch.

/// Largest answer read from the API.
const MAX_ANSWER: usize = 1 << 20;

struct Api {
    http: reqwest::Client,
    /// The base URL without a trailing slash.
    base: String,
    /// host:port, for messages.
    authority: String,
    token: Option<String>,
}

/// What went wrong, from an error's causes: reqwest's own message only
/// names the step and the URL ("error sending request for url ..."), its
/// causes say why. Also used for the CLI's other API calls.
pub fn error_chain(e: &reqwest::Error) -> String {
    let mut causes = Vec::new();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        causes.push(c.to_string());
        cause = c.source();
    }
    if causes.is_empty() {
        e.to_string()
    } else {
        causes.join(": ")
    }
}

/// Whether a failed exchange failed in the TLS handshake: rustls' error
/// travels inside (nested) I/O errors, which do not list it as a source.
fn is_tls_failure(e: &reqwest::Error) -> bool {
    fn is_rustls(e: &(dyn std::error::Error + 'static)) -> bool {
        e.is::<rustls::Error>()
            || e.downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .is_some_and(|inner| is_rustls(inner))
    }
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if is_rustls(c) {
            return true;
        }
        cause = c.source();
    }
    false
}

impl Api {
    fn new(url: &str, token: Option<String>, ca: Option<&Path>) -> Result<Api, String> {
        if !url.contains("://") {
            return Err(format!(
                "--api {url:?}: give a URL like http://127.0.0.1:8080"
            ));
        }
        let uri =
            reqwest::Url::parse(url).map_err(|e| format!("--api {url:?} is not a URL: {e}"))?;
        let https = match uri.scheme() {
            "http" => false,
            "https" => true,
            other => {
                return Err(format!(
                    "--api {url:?}: only http and https are supported, not {other}"
                ))
            }
        };
        let (Some(host), Some(port)) = (uri.host_str(), uri.port_or_known_default()) else {
            return Err(format!("--api {url:?} has no host"));
        };
        if let Some(t) = &token {
            if reqwest::header::HeaderValue::from_str(&format!("Bearer {t}")).is_err() {
                return Err("the token contains characters not allowed in a header".into());
            }
        }
        // Never through a proxy named in the environment: the address given
        // is the API's.
        let builder = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .timeout(REQUEST_TIMEOUT);
        let builder = match (https, ca) {
            (false, None) => builder,
            (false, Some(_)) => return Err("--api-ca is for an https --api URL".into()),
            (true, None) => {
                return Err(format!(
                    "--api {url:?}: https needs --api-ca (the CA that signed the API's certificate)"
                ))
            }
            (true, Some(ca)) => {
                let bad = |e: String| format!("--api-ca {}: {e}", ca.display());
                let pem = std::fs::read(ca).map_err(|e| bad(e.to_string()))?;
                let certs = reqwest::Certificate::from_pem_bundle(&pem)
                    .map_err(|e| bad(error_chain(&e)))?;
                if certs.is_empty() {
                    return Err(bad("no PEM certificate found".into()));
                }
                // Only these: no other roots are built in.
                certs
                    .into_iter()
                    .fold(builder.use_rustls_tls(), |b, c| b.add_root_certificate(c))
            }
        };
        Ok(Api {
            http: builder
                .build()
                .map_err(|e| format!("--api {url:?}: {}", error_chain(&e)))?,
            authority: format!("{host}:{port}"),
            base: uri.as_str().trim_end_matches('/').to_string(),
            token,
        })
    }

    /// What went wrong in an exchange, in words.
    fn describe(&self, e: &reqwest::Error) -> String {
        let detail = error_chain(e);
        if e.is_timeout() {
            format!(
                "no answer from {} within {} s",
                self.authority,
                REQUEST_TIMEOUT.as_secs()
            )
        } else if is_tls_failure(e) {
            format!("TLS handshake with {}: {detail}", self.authority)
        } else if e.is_connect() {
            format!("cannot reach the API at {}: {detail}", self.authority)
        } else {
            format!("request to {}: {detail}", self.authority)
        }
    }

    /// POSTs `body` to `path`; the status and the answer's body.
    async fn post(
        &self,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<(u16, Vec<u8>), String> {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let mut resp = req.send().await.map_err(|e| self.describe(&e))?;
        let status = resp.status().as_u16();
        let mut answer = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.describe(&e))? {
            if answer.len() + chunk.len() > MAX_ANSWER {
                return Err(format!(
                    "the answer from {} is longer than {MAX_ANSWER} bytes",
                    self.authority
                ));
            }
            answer.extend_from_slice(&chunk);
        }
        Ok((status, answer))
    }
}

/// Turns the server's "entry N ..." back into the file's line.
fn refusal(file: &str, lines: &[usize], status: u16, body: &[u8]) -> String {
    let msg = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    let line = msg
        .strip_prefix("entry ")
        .and_then(|rest| rest.split([' ', ':']).next())
        .and_then(|n| n.parse::<usize>().ok())
        .and_then(|i| lines.get(i));
    match line {
        Some(l) => format!("{file}:{l}: the API refused it (HTTP {status}): {msg}"),
        None => format!("the API refused a batch (HTTP {status}): {msg}"),
    }
}

/// Runs the import; `progress` is called after each acknowledged batch.
pub async fn run(
    opts: &ImportOptions,
    mut progress: impl FnMut(&ImportSummary),
) -> Result<ImportSummary, ImportError> {
    if !(1..=MAX_BATCH_ENTRIES).contains(&opts.batch) {
        return Err(ImportError::Invalid(format!(
            "--batch must be 1 to {MAX_BATCH_ENTRIES}"
        )));
    }
    let api = Api::new(&opts.api, opts.token.clone(), opts.api_ca.as_deref())
        .map_err(ImportError::Invalid)?;
    let started = Instant::now();
    let path = opts.file.clone();
    // Parsing is blocking work; keep it off the runtime's thread.
    let total = tokio::task::spawn_blocking(move || validate_file(&path))
        .await
        .map_err(|e| ImportError::Invalid(format!("validating the file: {e}")))?
        .map_err(ImportError::Invalid)?;
    let mut done = ImportSummary {
        total,
        ..Default::default()
    };
    let fail = |message: String, done: &ImportSummary| ImportError::Failed {
        message,
        done: ImportSummary {
            elapsed: started.elapsed(),
            ..*done
        },
    };
    let mut records = Records::open(&opts.file).map_err(ImportError::Invalid)?;
    let mut body = Vec::new();
    let mut lines = Vec::with_capacity(opts.batch);
    let mut finished = false;
    while !finished {
        body.clear();
        lines.clear();
        while lines.len() < opts.batch {
            match records.next_record() {
                None => {
                    finished = true;
                    break;
                }
                Some(Ok((line, s))) => {
                    serde_json::to_writer(&mut body, &s)
                        .map_err(|e| fail(format!("encoding line {line}: {e}"), &done))?;
                    body.push(b'\n');
                    lines.push(line);
                }
                // The file changed since it was validated.
                Some(Err(e)) => return Err(fail(e, &done)),
            }
        }
        if lines.is_empty() {
            break;
        }
        let (status, answer) = api
            .post("/v1/subscribers/batch", NDJSON, std::mem::take(&mut body))
            .await
            .map_err(|e| fail(e, &done))?;
        if status != 200 {
            return Err(fail(refusal(&records.name, &lines, status, &answer), &done));
        }
        let outcome: BatchOutcome = serde_json::from_slice(&answer).map_err(|e| {
            fail(
                format!("the API's answer to a batch is not a batch outcome: {e}"),
                &done,
            )
        })?;
        done.created += outcome.created;
        done.updated += outcome.updated;
        done.elapsed = started.elapsed();
        progress(&done);
    }
    done.elapsed = started.elapsed();
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_split_with_quotes() {
        assert_eq!(split_csv("a,b,,c").expect("plain"), ["a", "b", "", "c"]);
        assert_eq!(
            split_csv(r#""a,b","say ""hi""",x"#).expect("quoted"),
            ["a,b", r#"say "hi""#, "x"]
        );
        assert!(split_csv(r#""open"#).is_err());
        assert!(split_csv(r#"a"b"#).is_err());
        assert!(split_csv(r#""a"b"#).is_err());
    }

    #[test]
    fn csv_header_and_rows_become_profiles() {
        let cols = parse_header(
            split_csv("\u{feff}imsi,msisdn,plan,services,billing_day,quota.monthly")
                .expect("split"),
        )
        .expect("header");
        let s = csv_profile(
            &cols,
            split_csv("001010000000001,491700000001,basic,vip;tv;vip,15,5000").expect("split"),
        )
        .expect("row");
        assert_eq!(s.imsi, "001010000000001");
        assert_eq!(s.msisdn.as_deref(), Some("491700000001"));
        assert_eq!(s.services, ["tv", "vip"]);
        assert_eq!(s.billing_day, Some(15));
        assert_eq!(s.quotas.get("monthly"), Some(&5000));
        let bare = csv_profile(&cols, split_csv("001010000000002,,,,,").expect("split"))
            .expect("empty cells");
        assert_eq!(bare.msisdn, None);
        assert!(bare.services.is_empty() && bare.quotas.is_empty());
        let e = csv_profile(&cols, split_csv("001010000000002,,,,40,").expect("split"))
            .expect_err("bad day");
        assert!(e.contains("billing_day"), "{e}");
        let e = csv_profile(&cols, split_csv("001010000000002,,,,,lots").expect("split"))
            .expect_err("bad quota");
        assert!(e.contains("quota.monthly"), "{e}");
        let e = csv_profile(&cols, split_csv("001010000000002").expect("split"))
            .expect_err("short row");
        assert!(e.contains("1 fields, the header has 6"), "{e}");
        let e = parse_header(split_csv("imsi,colour").expect("split")).expect_err("unknown");
        assert!(e.contains("colour"), "{e}");
        assert!(parse_header(split_csv("plan").expect("split")).is_err());
        assert!(parse_header(split_csv("imsi,imsi").expect("split")).is_err());
    }

    #[test]
    fn refusals_name_the_file_line() {
        let body = br#"{"error":"entry 2 (line 3): imsi must be 5 to 15 digits"}"#;
        let m = refusal("f.csv", &[2, 3, 9], 400, body);
        assert!(m.starts_with("f.csv:9: "), "{m}");
        let m = refusal("f.csv", &[2], 503, br#"{"error":"store unavailable"}"#);
        assert!(
            m.contains("HTTP 503") && m.contains("store unavailable"),
            "{m}"
        );
    }

    #[test]
    fn api_urls() {
        let a = Api::new("http://127.0.0.1:8080", None, None).expect("url");
        assert_eq!(
            (a.authority.as_str(), a.base.as_str()),
            ("127.0.0.1:8080", "http://127.0.0.1:8080")
        );
        let a = Api::new("http://[::1]:9000/pcrf/", None, None).expect("v6");
        assert_eq!(
            (a.authority.as_str(), a.base.as_str()),
            ("[::1]:9000", "http://[::1]:9000/pcrf")
        );
        let e = Api::new("https://x", None, None).err().unwrap_or_default();
        assert!(e.contains("--api-ca"), "{e}");
        assert!(Api::new("http://x", None, Some(Path::new("ca.pem"))).is_err());
        let e = Api::new("https://x", None, Some(Path::new("/nonexistent/ca.pem")))
            .err()
            .unwrap_or_default();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
        assert!(Api::new("ftp://x", None, None).is_err());
        assert!(Api::new("127.0.0.1:8080", None, None).is_err());
    }
}
