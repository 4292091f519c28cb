//! `pcrf-bench verify`: compares the generator's answer log (what the
//! server acknowledged) with what the server has stored, read back through
//! its REST API, after a chaos run (`kill -9` cycles, store outages). Per
//! subscriber the usage accumulator must hold exactly the octets of the
//! requests answered with success when every request was answered with
//! success; otherwise at least those and at most those plus the octets of
//! the requests whose fate is unknown (no answer, or an error answer). Per
//! session, the last acknowledged request must be reflected: closed if its
//! CCR-T was acknowledged, else open at that CC-Request-Number (or later,
//! when a later request got no answer). A 5002 answer to a session whose
//! CCR-I was acknowledged means the server forgot it.

use crate::delivery::AnswerRecord;
use crate::http_client::{ApiClient, BaseUrl, HttpError, Response};
use reqwest::Method;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

/// DIAMETER_UNKNOWN_SESSION_ID.
const UNKNOWN_SESSION: u32 = 5002;

/// What the log says about one subscriber's usage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SubscriberExpect {
    /// Octets of requests answered with success.
    pub acked: u64,
    /// Octets of requests with no success answer (maybe applied, maybe not).
    pub unsure: u64,
    pub requests: u64,
    pub unsure_requests: u64,
}

/// What the log says about one session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionExpect {
    pub imsi: String,
    /// The highest CC-Request-Number answered with success.
    pub last_acked: Option<u32>,
    pub ccr_i_acked: bool,
    pub ccr_t_acked: bool,
    /// A request after `last_acked` got no success answer (it may have been applied).
    pub unsure_tail: bool,
    /// Answered 5002 although its CCR-I was acknowledged (and not as below).
    pub forgotten: bool,
    /// A retransmitted CCR-T answered 5002: its first copy was applied
    /// (the session closed) but the answer was lost, and the server no
    /// longer had the closed session to replay the stored answer from.
    pub ccr_t_replay_refused: bool,
}

/// Everything the answer log says.
#[derive(Clone, Debug, Default)]
pub struct Expectations {
    pub subscribers: BTreeMap<String, SubscriberExpect>,
    pub sessions: BTreeMap<String, SessionExpect>,
    pub requests: u64,
    pub acknowledged: u64,
    /// Timeouts and send failures (after every retransmission).
    pub unanswered: u64,
    /// Answers that were not success (codes, mismatched, malformed).
    pub error_answers: u64,
    pub tries: u64,
    /// The same (session, request number) logged twice: a generator bug.
    pub duplicates: u64,
}

impl Expectations {
    pub fn from_records<'a>(records: impl IntoIterator<Item = &'a AnswerRecord>) -> Self {
        let mut e = Expectations::default();
        let mut seen: BTreeMap<(String, u32), ()> = BTreeMap::new();
        let mut per_session: BTreeMap<String, Vec<&AnswerRecord>> = BTreeMap::new();
        for r in records {
            e.requests += 1;
            e.tries += u64::from(r.tries);
            if seen.insert((r.session.clone(), r.number), ()).is_some() {
                e.duplicates += 1;
            }
            let sub = e.subscribers.entry(r.imsi.clone()).or_default();
            sub.requests += 1;
            if r.acknowledged() {
                e.acknowledged += 1;
                sub.acked = sub.acked.saturating_add(r.octets);
            } else {
                if r.outcome == "timeout" || r.outcome == "send_failed" {
                    e.unanswered += 1;
                } else {
                    e.error_answers += 1;
                }
                sub.unsure = sub.unsure.saturating_add(r.octets);
                sub.unsure_requests += 1;
            }
            per_session.entry(r.session.clone()).or_default().push(r);
        }
        for (id, rs) in per_session {
            let mut s = SessionExpect {
                imsi: rs.first().map(|r| r.imsi.clone()).unwrap_or_default(),
                ..Default::default()
            };
            for r in &rs {
                if r.acknowledged() {
                    s.last_acked = Some(s.last_acked.map_or(r.number, |n| n.max(r.number)));
                    s.ccr_i_acked |= r.command == "CCR-I";
                    s.ccr_t_acked |= r.command == "CCR-T";
                }
            }
            for r in &rs {
                let after = s.last_acked.is_none_or(|n| r.number > n);
                if !r.acknowledged() && after && r.result != Some(UNKNOWN_SESSION) {
                    s.unsure_tail = true;
                }
                if s.ccr_i_acked && r.result == Some(UNKNOWN_SESSION) {
                    if r.command == "CCR-T" && r.tries > 1 {
                        s.ccr_t_replay_refused = true;
                    } else {
                        s.forgotten = true;
                    }
                }
            }
            e.sessions.insert(id, s);
        }
        e
    }
}

/// One subscriber's accumulator against the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UsageCheck {
    /// Every request acknowledged, and the store has exactly their octets.
    Exact,
    /// Some requests unanswered; the store is within [acked, acked + unsure].
    WithinBounds,
    /// Acknowledged octets missing from the store.
    Lost(u64),
    /// More octets stored than could have been reported.
    DoubleCounted(u64),
}

pub fn check_usage(e: &SubscriberExpect, used: u64) -> UsageCheck {
    if used < e.acked {
        return UsageCheck::Lost(e.acked - used);
    }
    let most = e.acked.saturating_add(e.unsure);
    if used > most {
        return UsageCheck::DoubleCounted(used - most);
    }
    if e.unsure_requests == 0 {
        UsageCheck::Exact
    } else {
        UsageCheck::WithinBounds
    }
}

/// What the API shows of a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSession {
    pub state: String,
    pub last_request_number: u32,
}

/// `Ok` when the stored session reflects the last acknowledged request;
/// `None` stored means the API answered 404.
pub fn check_session(e: &SessionExpect, stored: Option<&StoredSession>) -> Result<(), String> {
    let Some(last) = e.last_acked else {
        return Ok(());
    };
    let ended = e.ccr_t_acked || e.ccr_t_replay_refused;
    let Some(s) = stored else {
        // Closed sessions are not loaded again at start-up (only open ones
        // are recovered), so after a restart the API no longer has them.
        return if ended {
            Ok(())
        } else {
            Err(format!("missing, although request {last} was acknowledged"))
        };
    };
    if ended {
        return if s.state == "closed" {
            Ok(())
        } else {
            Err(format!("{}, although its CCR-T was applied", s.state))
        };
    }
    if s.last_request_number < last {
        return Err(format!(
            "at request {}, although request {last} was acknowledged",
            s.last_request_number
        ));
    }
    if e.unsure_tail {
        return Ok(());
    }
    if s.state != "open" {
        return Err(format!(
            "{}, although no CCR-T was sent after request {last}",
            s.state
        ));
    }
    if s.last_request_number != last {
        return Err(format!(
            "at request {}, although the last request sent was {last}",
            s.last_request_number
        ));
    }
    Ok(())
}

/// Reads an answer log.
pub fn load_log(path: &Path) -> Result<Vec<AnswerRecord>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let r: AnswerRecord = serde_json::from_str(&line)
            .map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
        out.push(r);
    }
    Ok(out)
}

/// Percent-encodes a path segment (RFC 3986 unreserved characters pass).
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The verdict.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Verdict {
    pub requests: u64,
    pub acknowledged: u64,
    pub unanswered: u64,
    pub error_answers: u64,
    pub retransmissions: u64,
    pub duplicate_log_lines: u64,
    pub subscribers: u64,
    pub usage_exact: u64,
    pub usage_within_bounds: u64,
    /// Subscribers with acknowledged octets missing.
    pub usage_lost: u64,
    pub octets_lost: u64,
    /// Subscribers with more octets than reported.
    pub usage_double_counted: u64,
    pub octets_double_counted: u64,
    pub sessions: u64,
    pub sessions_checked: u64,
    pub sessions_inconsistent: u64,
    /// Sessions answered 5002 after their CCR-I was acknowledged.
    pub sessions_forgotten: u64,
    /// Retransmitted CCR-Ts answered 5002 instead of their stored answer
    /// (a server finding, not a loss: the usage bounds still apply).
    pub ccr_t_replays_refused: u64,
    pub acknowledged_octets: u64,
    pub stored_octets: u64,
    /// The first problems found, for a human.
    pub problems: Vec<String>,
}

const KEEP_PROBLEMS: usize = 20;

impl Verdict {
    pub fn passed(&self) -> bool {
        self.usage_lost == 0
            && self.usage_double_counted == 0
            && self.sessions_inconsistent == 0
            && self.sessions_forgotten == 0
            && self.duplicate_log_lines == 0
    }

    fn problem(&mut self, p: String) {
        if self.problems.len() < KEEP_PROBLEMS {
            self.problems.push(p);
        }
    }

    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "requests: {} logged, {} acknowledged, {} unanswered after retransmission, {} error answers, {} retransmissions",
            self.requests, self.acknowledged, self.unanswered, self.error_answers, self.retransmissions
        );
        let _ = writeln!(
            s,
            "usage: {} subscribers, {} exact, {} within bounds (some requests unanswered), lost: {} ({} octets), double counted: {} ({} octets); {} octets acknowledged, {} stored",
            self.subscribers,
            self.usage_exact,
            self.usage_within_bounds,
            self.usage_lost,
            self.octets_lost,
            self.usage_double_counted,
            self.octets_double_counted,
            self.acknowledged_octets,
            self.stored_octets
        );
        let _ = writeln!(
            s,
            "sessions: {} in the log, {} checked, inconsistent: {}, forgotten (5002 after an acknowledged CCR-I): {}",
            self.sessions, self.sessions_checked, self.sessions_inconsistent, self.sessions_forgotten
        );
        if self.ccr_t_replays_refused > 0 {
            let _ = writeln!(
                s,
                "warning: {} retransmitted CCR-Ts were answered 5002 instead of their stored answer (the first copy had closed the session before the kill; closed sessions are not recovered, so the answer cannot be replayed)",
                self.ccr_t_replays_refused
            );
        }
        if self.duplicate_log_lines > 0 {
            let _ = writeln!(s, "duplicate log lines: {}", self.duplicate_log_lines);
        }
        for p in &self.problems {
            let _ = writeln!(s, "  {p}");
        }
        let _ = writeln!(
            s,
            "verdict: {}",
            if self.passed() { "PASS" } else { "FAIL" }
        );
        s
    }
}

/// How to reach the API.
#[derive(Clone, Debug)]
pub struct Api {
    pub base: BaseUrl,
    pub token: Option<String>,
    pub connections: usize,
    /// The accumulator compared (the seed scenario's key `total` feeds `monthly`).
    pub accumulator: String,
}

/// GETs every path, `connections` requests in flight over the client's
/// keep-alive pool; answers in the order of `paths`.
async fn get_all(api: &Api, paths: Vec<String>) -> Result<Vec<Response>, String> {
    let n = paths.len();
    let conns = api.connections.clamp(1, 64).min(n.max(1));
    let client = ApiClient::new(&api.base, api.token.as_deref()).map_err(|e| e.to_string())?;
    let paths = Arc::new(paths);
    let mut tasks = Vec::new();
    for c in 0..conns {
        let (from, to) = (n * c / conns, n * (c + 1) / conns);
        let (paths, client) = (paths.clone(), client.clone());
        tasks.push(tokio::spawn(async move {
            get_range(&client, &paths[from..to]).await
        }));
    }
    let mut out = Vec::with_capacity(n);
    for t in tasks {
        let part = t
            .await
            .map_err(|e| format!("API task failed: {e}"))?
            .map_err(|e| e.to_string())?;
        out.extend(part);
    }
    Ok(out)
}

/// GETs `paths` one after another, each tried up to three times.
async fn get_range(client: &ApiClient, paths: &[String]) -> Result<Vec<Response>, HttpError> {
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match client.send(client.request(Method::GET, p)).await {
                Ok(r) => break out.push(r),
                Err(e) if attempt >= 3 => return Err(e),
                Err(_) => {}
            }
        }
    }
    Ok(out)
}

fn json_of(r: &Response, what: &str) -> Result<serde_json::Value, String> {
    serde_json::from_slice(&r.body).map_err(|e| format!("{what}: not JSON ({e})"))
}

/// Compares the log with the server.
pub async fn verify(records: &[AnswerRecord], api: &Api) -> Result<Verdict, String> {
    let e = Expectations::from_records(records);
    let mut v = Verdict {
        requests: e.requests,
        acknowledged: e.acknowledged,
        unanswered: e.unanswered,
        error_answers: e.error_answers,
        retransmissions: e.tries.saturating_sub(e.requests),
        duplicate_log_lines: e.duplicates,
        subscribers: e.subscribers.len() as u64,
        sessions: e.sessions.len() as u64,
        ..Default::default()
    };

    let imsis: Vec<&String> = e.subscribers.keys().collect();
    let paths = imsis
        .iter()
        .map(|i| format!("/v1/subscribers/{}/usage", encode_segment(i)))
        .collect();
    let answers = get_all(api, paths).await?;
    for (imsi, r) in imsis.into_iter().zip(answers) {
        let Some(exp) = e.subscribers.get(imsi) else {
            continue;
        };
        v.acknowledged_octets = v.acknowledged_octets.saturating_add(exp.acked);
        let used = match r.status {
            200 => {
                let j = json_of(&r, imsi)?;
                // No accumulator yet: nothing counted.
                j["accumulators"][&api.accumulator]["used"]
                    .as_u64()
                    .unwrap_or(0)
            }
            401 => return Err("the API refused the token (401); give --token".into()),
            404 => {
                v.problem(format!("subscriber {imsi}: not provisioned (404)"));
                0
            }
            s => {
                return Err(format!(
                    "GET usage of {imsi}: HTTP {s}: {}",
                    String::from_utf8_lossy(&r.body)
                ))
            }
        };
        v.stored_octets = v.stored_octets.saturating_add(used);
        match check_usage(exp, used) {
            UsageCheck::Exact => v.usage_exact += 1,
            UsageCheck::WithinBounds => v.usage_within_bounds += 1,
            UsageCheck::Lost(n) => {
                v.usage_lost += 1;
                v.octets_lost += n;
                v.problem(format!(
                    "subscriber {imsi}: {used} octets stored, {} acknowledged: {n} lost",
                    exp.acked
                ));
            }
            UsageCheck::DoubleCounted(n) => {
                v.usage_double_counted += 1;
                v.octets_double_counted += n;
                v.problem(format!(
                    "subscriber {imsi}: {used} octets stored, at most {} reported: {n} counted twice",
                    exp.acked.saturating_add(exp.unsure)
                ));
            }
        }
    }

    let checked: Vec<(&String, &SessionExpect)> = e
        .sessions
        .iter()
        .filter(|(_, s)| s.last_acked.is_some())
        .collect();
    v.sessions_checked = checked.len() as u64;
    let paths = checked
        .iter()
        .map(|(id, _)| format!("/v1/sessions/{}", encode_segment(id)))
        .collect();
    let answers = get_all(api, paths).await?;
    for ((id, exp), r) in checked.into_iter().zip(answers) {
        if exp.ccr_t_replay_refused {
            v.ccr_t_replays_refused += 1;
            if v.ccr_t_replays_refused <= 3 {
                v.problem(format!(
                    "session {id}: retransmitted CCR-T answered 5002 instead of the stored answer"
                ));
            }
        }
        if exp.forgotten {
            v.sessions_forgotten += 1;
            v.problem(format!(
                "session {id}: answered 5002 (unknown session) after its CCR-I was acknowledged"
            ));
        }
        let stored = match r.status {
            200 => {
                let j = json_of(&r, id)?;
                Some(StoredSession {
                    state: j["state"].as_str().unwrap_or("?").to_string(),
                    last_request_number: j["last_request_number"]
                        .as_u64()
                        .and_then(|n| u32::try_from(n).ok())
                        .unwrap_or(0),
                })
            }
            404 => None,
            s => {
                return Err(format!(
                    "GET session {id}: HTTP {s}: {}",
                    String::from_utf8_lossy(&r.body)
                ))
            }
        };
        if let Err(why) = check_session(exp, stored.as_ref()) {
            v.sessions_inconsistent += 1;
            v.problem(format!("session {id}: {why}"));
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(
        session: &str,
        imsi: &str,
        command: &str,
        number: u32,
        result: Option<u32>,
        octets: u64,
    ) -> AnswerRecord {
        AnswerRecord {
            session: session.into(),
            imsi: imsi.into(),
            command: command.into(),
            number,
            outcome: if result.is_some() {
                "answered"
            } else {
                "timeout"
            }
            .into(),
            result,
            octets,
            tries: 1,
            at_ms: 0,
        }
    }

    #[test]
    fn usage_exact_lost_double_and_bounds() {
        let all_acked = SubscriberExpect {
            acked: 100,
            unsure: 0,
            requests: 3,
            unsure_requests: 0,
        };
        assert_eq!(check_usage(&all_acked, 100), UsageCheck::Exact);
        assert_eq!(check_usage(&all_acked, 90), UsageCheck::Lost(10));
        assert_eq!(check_usage(&all_acked, 130), UsageCheck::DoubleCounted(30));
        let some_unsure = SubscriberExpect {
            acked: 100,
            unsure: 50,
            requests: 4,
            unsure_requests: 1,
        };
        assert_eq!(check_usage(&some_unsure, 100), UsageCheck::WithinBounds);
        assert_eq!(check_usage(&some_unsure, 150), UsageCheck::WithinBounds);
        assert_eq!(check_usage(&some_unsure, 151), UsageCheck::DoubleCounted(1));
        assert_eq!(check_usage(&some_unsure, 99), UsageCheck::Lost(1));
    }

    #[test]
    fn expectations_from_a_log() {
        let log = vec![
            rec("a", "1", "CCR-I", 0, Some(2001), 0),
            rec("a", "1", "CCR-U", 1, Some(2001), 10),
            rec("a", "1", "CCR-T", 2, Some(2001), 5),
            rec("b", "1", "CCR-I", 0, Some(2001), 0),
            rec("b", "1", "CCR-U", 1, None, 7),
            rec("c", "2", "CCR-I", 0, Some(5012), 0),
            rec("d", "2", "CCR-I", 0, Some(2001), 0),
            rec("d", "2", "CCR-U", 1, Some(5002), 3),
        ];
        let e = Expectations::from_records(&log);
        assert_eq!(e.requests, 8);
        assert_eq!(e.acknowledged, 5);
        assert_eq!(e.unanswered, 1);
        assert_eq!(e.error_answers, 2);
        assert_eq!(e.duplicates, 0);
        let s1 = &e.subscribers["1"];
        assert_eq!((s1.acked, s1.unsure, s1.unsure_requests), (15, 7, 1));
        let a = &e.sessions["a"];
        assert_eq!(
            (a.last_acked, a.ccr_t_acked, a.unsure_tail),
            (Some(2), true, false)
        );
        let b = &e.sessions["b"];
        assert_eq!(
            (b.last_acked, b.ccr_t_acked, b.unsure_tail),
            (Some(0), false, true)
        );
        assert_eq!(e.sessions["c"].last_acked, None);
        assert!(e.sessions["d"].forgotten);
        assert!(!e.sessions["a"].forgotten);

        // A CCR-T resent after a kill and answered 5002: not a forgotten session.
        let mut t = rec("e", "3", "CCR-T", 2, Some(5002), 9);
        t.tries = 2;
        let log = vec![
            rec("e", "3", "CCR-I", 0, Some(2001), 0),
            rec("e", "3", "CCR-U", 1, Some(2001), 4),
            t,
        ];
        let e = Expectations::from_records(&log);
        assert!(e.sessions["e"].ccr_t_replay_refused);
        assert!(!e.sessions["e"].forgotten);

        let dup = vec![
            rec("a", "1", "CCR-I", 0, Some(2001), 0),
            rec("a", "1", "CCR-I", 0, Some(2001), 0),
        ];
        assert_eq!(Expectations::from_records(&dup).duplicates, 1);
    }

    #[test]
    fn session_states_against_the_log() {
        let open = |n| StoredSession {
            state: "open".into(),
            last_request_number: n,
        };
        let closed = |n| StoredSession {
            state: "closed".into(),
            last_request_number: n,
        };
        let ended = SessionExpect {
            last_acked: Some(3),
            ccr_i_acked: true,
            ccr_t_acked: true,
            ..Default::default()
        };
        assert!(check_session(&ended, Some(&closed(3))).is_ok());
        assert!(check_session(&ended, Some(&open(2))).is_err());
        // Closed sessions are not recovered at start-up.
        assert!(check_session(&ended, None).is_ok());
        let refused = SessionExpect {
            last_acked: Some(2),
            ccr_i_acked: true,
            ccr_t_replay_refused: true,
            ..Default::default()
        };
        assert!(check_session(&refused, None).is_ok());
        assert!(check_session(&refused, Some(&open(2))).is_err());

        let running = SessionExpect {
            last_acked: Some(2),
            ccr_i_acked: true,
            ..Default::default()
        };
        assert!(check_session(&running, None).is_err());
        assert!(check_session(&running, Some(&open(2))).is_ok());
        assert!(check_session(&running, Some(&open(1))).is_err());
        assert!(check_session(&running, Some(&open(3))).is_err());
        assert!(check_session(&running, Some(&closed(2))).is_err());

        let tail = SessionExpect {
            unsure_tail: true,
            ..running.clone()
        };
        assert!(check_session(&tail, Some(&open(2))).is_ok());
        assert!(check_session(&tail, Some(&closed(3))).is_ok());
        assert!(check_session(&tail, Some(&open(1))).is_err());

        let never = SessionExpect::default();
        assert!(check_session(&never, None).is_ok());
    }

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(
            encode_segment("pgw-1.bench.test;17;4"),
            "pgw-1.bench.test%3B17%3B4"
        );
        assert_eq!(encode_segment("a/b c"), "a%2Fb%20c");
    }

    #[tokio::test]
    async fn verify_against_a_stub_api() {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
        // A stub API: subscriber 1 stored 15 octets, 2 stored 20 (5 too many);
        // sessions: a closed, b open at 0.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (r, mut w) = s.into_split();
                    let mut r = BufReader::new(r);
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let path = line.split(' ').nth(1).unwrap_or("").to_string();
                        let mut h = String::new();
                        loop {
                            h.clear();
                            if r.read_line(&mut h).await.unwrap_or(0) == 0 || h.trim().is_empty() {
                                break;
                            }
                        }
                        let body = match path.as_str() {
                            "/v1/subscribers/1/usage" => {
                                r#"{"accumulators":{"monthly":{"used":15}}}"#
                            }
                            "/v1/subscribers/2/usage" => {
                                r#"{"accumulators":{"monthly":{"used":20}}}"#
                            }
                            "/v1/sessions/a" => r#"{"state":"closed","last_request_number":2}"#,
                            "/v1/sessions/b" => r#"{"state":"open","last_request_number":0}"#,
                            "/v1/sessions/c" => r#"{"state":"open","last_request_number":1}"#,
                            _ => "{}",
                        };
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if w.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let api = Api {
            base: BaseUrl::parse(&format!("http://{addr}")).expect("url"),
            token: Some("verify-test-token-4f9a2c".into()),
            connections: 2,
            accumulator: "monthly".into(),
        };
        let good = vec![
            rec("a", "1", "CCR-I", 0, Some(2001), 0),
            rec("a", "1", "CCR-U", 1, Some(2001), 10),
            rec("a", "1", "CCR-T", 2, Some(2001), 5),
            rec("b", "1", "CCR-I", 0, Some(2001), 0),
        ];
        let v = verify(&good, &api).await.expect("verify");
        assert!(v.passed(), "{}", v.summary());
        assert_eq!((v.usage_exact, v.sessions_checked), (1, 2));

        let mut bad = good.clone();
        bad.push(rec("c", "2", "CCR-I", 0, Some(2001), 0));
        bad.push(rec("c", "2", "CCR-U", 1, Some(2001), 15));
        let v = verify(&bad, &api).await.expect("verify");
        assert!(!v.passed());
        assert_eq!((v.usage_double_counted, v.octets_double_counted), (1, 5));
        assert!(v.summary().contains("verdict: FAIL"));
    }
}
