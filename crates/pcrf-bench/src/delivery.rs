//! Delivering a request as a real PCEF does, and keeping a record of it:
//! a request that timed out, whose connection dropped, or that a routing
//! agent could not deliver (3002 DIAMETER_UNABLE_TO_DELIVER: no node of the
//! realm open) is sent again with the T flag, the same End-to-End
//! Identifier and the same CC-Request-Number once the gateway's connection
//! is open again (the transport's initiator reconnects by itself), up to a
//! bounded number of tries; and every request's final outcome can be
//! written as one JSON line to an answer log, which `pcrf-bench verify`
//! later compares with what the server stored. Both exist for the chaos
//! suite (`chaos/`), where the server is killed, starved of its store or
//! disturbed while the load runs.

use crate::exchange::{send_once, Exchanged};
use crate::session::{RequestKind, RequestSpec};
use crate::stats::{Command, Outcome, ResultKind};

use diameter::peer::PeerState;
use diameter::transport::PeerHandle;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often and how patiently a request is sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retransmit {
    /// Sends after the first one (0: never retransmit, the benchmark's default).
    pub max_retries: u32,
    /// The longest wait for the connection to be open again before a resend.
    pub wait_open: Duration,
}

impl Retransmit {
    pub const OFF: Retransmit = Retransmit {
        max_retries: 0,
        wait_open: Duration::ZERO,
    };

    pub fn enabled(&self) -> bool {
        self.max_retries > 0
    }

    /// The longest one request can take from its first send to its final
    /// outcome, given the answer timeout of one try.
    pub fn worst_case(&self, timeout: Duration) -> Duration {
        let tries = self.max_retries.saturating_add(1);
        (timeout + self.wait_open + Duration::from_millis(50)) * tries
    }
}

/// DIAMETER_UNABLE_TO_DELIVER: a routing agent found no open node for the
/// request (RFC 6733 §7.1.3); another try may find one.
const UNABLE_TO_DELIVER: u32 = diameter::result_code::DIAMETER_UNABLE_TO_DELIVER;

/// The pause before resending a request the agent could not deliver.
const UNDELIVERED_PAUSE: Duration = Duration::from_millis(100);

/// Whether a PCEF sends the request again after this outcome: no answer
/// (timeout, connection lost) or 3002 from an agent. Any other answer is
/// final, a refusal included.
pub fn worth_resending(outcome: Outcome) -> bool {
    match outcome {
        Outcome::Timeout | Outcome::SendFailed => true,
        Outcome::Answered(r) => r == ResultKind::Code(UNABLE_TO_DELIVER),
    }
}

/// One request's final outcome, as the answer log holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerRecord {
    /// Session-Id.
    pub session: String,
    pub imsi: String,
    /// "CCR-I", "CCR-U" or "CCR-T".
    pub command: String,
    /// CC-Request-Number.
    pub number: u32,
    /// "answered", "mismatched" (a success answer for another request),
    /// "malformed" (no result in the answer), "timeout" or "send_failed"
    /// (the last try's failure; the request may or may not have been applied).
    pub outcome: String,
    /// Result-Code, or the Experimental-Result-Code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<u32>,
    /// Octets reported in the request (CC-Total-Octets over every key).
    pub octets: u64,
    /// Sends (1 when the first was answered).
    pub tries: u32,
    /// When the final outcome came (Unix milliseconds).
    #[serde(default)]
    pub at_ms: u64,
}

impl AnswerRecord {
    pub fn of(spec: &RequestSpec, ex: &Exchanged) -> AnswerRecord {
        let (command, octets) = match &spec.kind {
            RequestKind::Initial => (Command::CcrI, 0),
            RequestKind::Update(u) => (Command::CcrU, total_octets(u)),
            RequestKind::Terminate(u) => (Command::CcrT, total_octets(u)),
        };
        let (outcome, result) = match ex.outcome {
            Outcome::Answered(ResultKind::Code(c))
            | Outcome::Answered(ResultKind::Experimental(_, c)) => ("answered", Some(c)),
            Outcome::Answered(ResultKind::Mismatched) => ("mismatched", None),
            Outcome::Answered(ResultKind::Missing) => ("malformed", None),
            Outcome::Timeout => ("timeout", None),
            Outcome::SendFailed => ("send_failed", None),
        };
        AnswerRecord {
            session: spec.identity.session_id.clone(),
            imsi: spec.identity.subscriber.imsi.clone(),
            command: command.name().to_string(),
            number: spec.number,
            outcome: outcome.to_string(),
            result,
            octets,
            tries: ex.tries,
            at_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        }
    }

    /// Answered with success (2xxx): the server acknowledged the request.
    pub fn acknowledged(&self) -> bool {
        self.outcome == "answered" && self.result.is_some_and(|c| (2000..3000).contains(&c))
    }
}

fn total_octets(u: &[crate::gx::Usage]) -> u64 {
    u.iter()
        .map(|u| u.input_octets.saturating_add(u.output_octets))
        .fold(0u64, u64::saturating_add)
}

/// JSON lines of every request's final outcome.
pub struct AnswerLog {
    out: Mutex<AnswerLogState>,
}

struct AnswerLogState {
    w: Option<BufWriter<File>>,
    lines: u64,
    error: Option<String>,
}

impl AnswerLog {
    pub fn create(path: &Path) -> Result<AnswerLog, String> {
        let f = File::create(path).map_err(|e| format!("--answer-log {}: {e}", path.display()))?;
        Ok(AnswerLog {
            out: Mutex::new(AnswerLogState {
                w: Some(BufWriter::with_capacity(1 << 16, f)),
                lines: 0,
                error: None,
            }),
        })
    }

    pub fn write(&self, r: &AnswerRecord) {
        let mut st = self.out.lock().unwrap_or_else(|e| e.into_inner());
        let AnswerLogState { w, lines, error } = &mut *st;
        let Some(w) = w.as_mut() else { return };
        let res = serde_json::to_writer(&mut *w, r)
            .map_err(|e| e.to_string())
            .and_then(|()| w.write_all(b"\n").map_err(|e| e.to_string()));
        match res {
            Ok(()) => *lines += 1,
            Err(e) => {
                error.get_or_insert(e);
            }
        }
    }

    /// Flushes and closes; the first write error, if any.
    pub fn finish(&self) -> Result<u64, String> {
        let mut st = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut w) = st.w.take() {
            if let Err(e) = w.flush() {
                st.error.get_or_insert(e.to_string());
            }
        }
        match &st.error {
            Some(e) => Err(format!("answer log: {e}")),
            None => Ok(st.lines),
        }
    }
}

/// What every request of a run goes through: retransmission and the log.
pub struct Delivery {
    pub retransmit: Retransmit,
    pub log: Option<AnswerLog>,
    /// Resends (each T-flagged send after the first).
    pub retransmissions: AtomicU64,
    /// Requests answered only after at least one resend.
    pub recovered: AtomicU64,
    /// Requests between their first send and their final outcome.
    in_flight: AtomicU64,
}

impl std::fmt::Debug for Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivery")
            .field("retransmit", &self.retransmit)
            .field("log", &self.log.is_some())
            .field("counts", &self.counts())
            .finish()
    }
}

impl Default for Delivery {
    fn default() -> Self {
        Delivery::new(Retransmit::OFF, None)
    }
}

impl Delivery {
    pub fn new(retransmit: Retransmit, log: Option<AnswerLog>) -> Delivery {
        Delivery {
            retransmit,
            log,
            retransmissions: AtomicU64::new(0),
            recovered: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
        }
    }

    /// Waits until every request has its final outcome (and its log line),
    /// at most `bound`; the requests still unfinished then.
    pub async fn wait_idle(&self, bound: Duration) -> u64 {
        let deadline = Instant::now() + bound;
        loop {
            let n = self.in_flight.load(Relaxed);
            if n == 0 || Instant::now() >= deadline {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends `spec` until it is answered or the tries are used up; logs it.
    pub async fn exchange(&self, peer: &PeerHandle, spec: &RequestSpec) -> Exchanged {
        self.exchange_within(peer, spec, None).await
    }

    /// As [`exchange`](Self::exchange), each try waiting `timeout` for its
    /// answer instead of the transport's request timeout when given.
    pub async fn exchange_within(
        &self,
        peer: &PeerHandle,
        spec: &RequestSpec,
        timeout: Option<Duration>,
    ) -> Exchanged {
        let sent_at = Instant::now();
        self.in_flight.fetch_add(1, Relaxed);
        let mut tries = 0u32;
        let mut end_to_end = None;
        let (outcome, origin_host) = loop {
            tries += 1;
            let sent = send_once(peer, spec, &mut end_to_end, timeout).await;
            if !worth_resending(sent.0) || tries > self.retransmit.max_retries {
                break sent;
            }
            self.retransmissions.fetch_add(1, Relaxed);
            if sent.0 == Outcome::Answered(ResultKind::Code(UNABLE_TO_DELIVER)) {
                // The agent has no node open right now: give the nodes a
                // moment (an agent reconnects every Tc) instead of spinning.
                tokio::time::sleep(UNDELIVERED_PAUSE).await;
            }
            // The initiator reconnects by itself; resend once it is open
            // (or after the bound, when the resend fails fast and counts as
            // one more try).
            if !peer.is_open() {
                let _ = tokio::time::timeout(
                    self.retransmit.wait_open,
                    peer.wait_state(|s| s == PeerState::Open),
                )
                .await;
            }
            if !peer.is_open() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        if tries > 1 && !worth_resending(outcome) {
            self.recovered.fetch_add(1, Relaxed);
        }
        let ex = Exchanged {
            outcome,
            sent_at,
            done_at: Instant::now(),
            origin_host,
            tries,
        };
        if let Some(log) = &self.log {
            log.write(&AnswerRecord::of(spec, &ex));
        }
        self.in_flight.fetch_sub(1, Relaxed);
        ex
    }

    /// What the report says about delivery.
    pub fn counts(&self) -> DeliveryCounts {
        DeliveryCounts {
            max_retries: self.retransmit.max_retries,
            retransmissions: self.retransmissions.load(Relaxed),
            answered_after_retransmission: self.recovered.load(Relaxed),
        }
    }
}

/// Retransmission figures of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeliveryCounts {
    pub max_retries: u32,
    pub retransmissions: u64,
    pub answered_after_retransmission: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gx::{Gateway, Usage};
    use crate::population::Population;
    use crate::session::SessionIdentity;
    use diameter::dict::{app, cmd};
    use std::net::Ipv4Addr;
    use std::sync::Arc;

    fn spec(kind: RequestKind, number: u32) -> RequestSpec {
        let gateway = Arc::new(Gateway {
            origin_host: "pgw-1.bench.test".into(),
            origin_realm: "bench.test".into(),
            destination_realm: "pcrf.test".into(),
            destination_host: None,
            origin_state_id: 1,
            pgw_address: Ipv4Addr::LOCALHOST,
            sgw_address: Ipv4Addr::LOCALHOST,
            mcc_mnc: "00101".into(),
            apn: "internet".into(),
        });
        let pop = Population::new("001010000000001", "79000000001", 5).expect("pop");
        RequestSpec {
            identity: Arc::new(SessionIdentity::new(&gateway, 7, 3, &pop, 2)),
            gateway,
            kind,
            number,
            destination_host: None,
        }
    }

    fn ex(outcome: Outcome, tries: u32) -> Exchanged {
        let now = Instant::now();
        Exchanged {
            outcome,
            sent_at: now,
            done_at: now,
            origin_host: None,
            tries,
        }
    }

    #[test]
    fn record_carries_identity_octets_and_result() {
        let u = vec![
            Usage {
                monitoring_key: "total".into(),
                input_octets: 10,
                output_octets: 20,
            },
            Usage {
                monitoring_key: "vip".into(),
                input_octets: 1,
                output_octets: 2,
            },
        ];
        let s = spec(RequestKind::Update(u), 3);
        let r = AnswerRecord::of(&s, &ex(Outcome::Answered(ResultKind::Code(2001)), 2));
        assert_eq!(r.session, "pgw-1.bench.test;7;3");
        assert_eq!(r.imsi, "001010000000003");
        assert_eq!(r.command, "CCR-U");
        assert_eq!(r.number, 3);
        assert_eq!(r.octets, 33);
        assert_eq!(r.result, Some(2001));
        assert_eq!(r.tries, 2);
        assert!(r.acknowledged());

        let t = AnswerRecord::of(
            &spec(RequestKind::Terminate(vec![]), 4),
            &ex(Outcome::Timeout, 5),
        );
        assert_eq!(
            (t.command.as_str(), t.outcome.as_str(), t.result),
            ("CCR-T", "timeout", None)
        );
        assert!(!t.acknowledged());
        let e = AnswerRecord::of(
            &spec(RequestKind::Initial, 0),
            &ex(Outcome::Answered(ResultKind::Code(5012)), 1),
        );
        assert!(!e.acknowledged());
        let m = AnswerRecord::of(
            &spec(RequestKind::Initial, 0),
            &ex(Outcome::Answered(ResultKind::Mismatched), 1),
        );
        assert_eq!(m.outcome, "mismatched");
        assert!(!m.acknowledged());
    }

    #[test]
    fn log_lines_round_trip() {
        let dir = std::env::temp_dir().join(format!("pcrf-bench-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("answers.jsonl");
        let log = AnswerLog::create(&path).expect("create");
        let r = AnswerRecord::of(
            &spec(RequestKind::Initial, 0),
            &ex(Outcome::Answered(ResultKind::Code(2001)), 1),
        );
        log.write(&r);
        log.write(&r);
        assert_eq!(log.finish(), Ok(2));
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<AnswerRecord> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("json line"))
            .collect();
        assert!(r.at_ms > 1_600_000_000_000);
        assert_eq!(lines, vec![r.clone(), r]);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn worst_case_bounds_every_try() {
        let r = Retransmit {
            max_retries: 3,
            wait_open: Duration::from_secs(2),
        };
        assert!(r.enabled());
        assert!(!Retransmit::OFF.enabled());
        assert!(r.worst_case(Duration::from_secs(1)) >= Duration::from_secs(12));
    }

    /// Fails the first copy of every request, by leaving it unanswered
    /// (`undeliverable` false) or by answering 3002 as an agent with no node
    /// open does; answers the rest with the echo server's CCA. Remembers
    /// each copy's T flag and End-to-End Identifier.
    struct FailsFirst {
        echo: crate::echo_server::EchoHandler,
        undeliverable: bool,
        seen: Mutex<Vec<(bool, u32)>>,
    }

    impl diameter::transport::Handler for FailsFirst {
        fn serves(&self, app_id: u32, command: u32) -> bool {
            app_id == app::GX && command == cmd::CREDIT_CONTROL
        }

        fn handle(
            &self,
            req: diameter::Message,
            _peer: PeerHandle,
        ) -> impl std::future::Future<Output = Result<bytes::Bytes, diameter::DiameterError>> + Send
        {
            let retransmitted = req.header().is_retransmit();
            let first = {
                let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
                seen.push((retransmitted, req.end_to_end()));
                seen.len() == 1
            };
            let answer = if first && self.undeliverable {
                let mut buf = bytes::BytesMut::new();
                let err = diameter::DiameterError::new(UNABLE_TO_DELIVER, "no node");
                diameter::MessageBuilder::error_answer(
                    &mut buf,
                    &req,
                    "dra.bench.test",
                    "bench.test",
                    &err,
                );
                Ok(buf.freeze())
            } else {
                self.echo.answer(&req)
            };
            let stall = first && !self.undeliverable;
            async move {
                if stall {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                }
                answer
            }
        }
    }

    /// Sends one CCR-U through a [`FailsFirst`] server with two retries
    /// allowed: the T flag and End-to-End Identifier of each copy seen.
    async fn resent_after_first_failure(undeliverable: bool) -> Vec<(bool, u32)> {
        use diameter::peer::{Application, LocalNode, PeerSettings};
        use diameter::transport::Node;
        let local = LocalNode::new("echo.pcrf.test", "pcrf.test")
            .with_application(Application::auth_vendor(app::GX, crate::gx::VENDOR_3GPP));
        let handler = FailsFirst {
            echo: crate::echo_server::EchoHandler::new("echo.pcrf.test", "pcrf.test"),
            undeliverable,
            seen: Mutex::new(Vec::new()),
        };
        let node = Node::new(local, PeerSettings::default(), handler);
        let server = node.listen("127.0.0.1:0").await.expect("listen");
        let addr = server.local_addr().expect("addr");
        let handler = server.node().handler().clone();
        tokio::spawn(server.run(std::future::pending()));

        let gx = crate::scenario::GxSettings {
            origin_realm: "bench.test".into(),
            destination_realm: "pcrf.test".into(),
            destination_host: None,
            apn: "internet".into(),
            mcc_mnc: "00101".into(),
        };
        let opts = crate::pcef::PcefOptions {
            target: addr,
            peers: 1,
            request_timeout: Duration::from_millis(300),
            watchdog: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        };
        let pcefs = crate::pcef::Pcefs::connect_tuned(&opts, &gx, true)
            .await
            .expect("open");
        let dir = std::env::temp_dir().join(format!(
            "pcrf-bench-rtx-{}-{undeliverable}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("answers.jsonl");
        let delivery = Delivery::new(
            Retransmit {
                max_retries: 2,
                wait_open: Duration::from_secs(1),
            },
            Some(AnswerLog::create(&path).expect("log")),
        );
        let mut s = spec(
            RequestKind::Update(vec![Usage {
                monitoring_key: "total".into(),
                input_octets: 1,
                output_octets: 2,
            }]),
            1,
        );
        s.gateway = pcefs.gateway(0).clone();
        let ex = delivery.exchange(pcefs.handle(0), &s).await;
        assert_eq!(ex.outcome, Outcome::Answered(ResultKind::Code(2001)));
        assert_eq!(ex.origin_host.as_deref(), Some("echo.pcrf.test"));
        assert_eq!(ex.tries, 2);
        assert_eq!(delivery.counts().retransmissions, 1);
        assert_eq!(delivery.counts().answered_after_retransmission, 1);
        assert_eq!(delivery.wait_idle(Duration::from_secs(1)).await, 0);
        assert_eq!(delivery.log.as_ref().expect("log").finish(), Ok(1));
        let line = std::fs::read_to_string(&path).expect("read");
        let r: AnswerRecord = serde_json::from_str(line.trim()).expect("json");
        assert_eq!(
            (r.number, r.tries, r.octets, r.result),
            (1, 2, 3, Some(2001))
        );
        pcefs.shutdown().await;
        std::fs::remove_dir_all(&dir).expect("cleanup");
        let seen = handler.seen.lock().expect("seen").clone();
        seen
    }

    #[tokio::test]
    async fn a_timed_out_request_is_resent_with_the_t_flag_and_logged_once() {
        let seen = resent_after_first_failure(false).await;
        assert_eq!(
            seen.iter().map(|s| s.0).collect::<Vec<_>>(),
            vec![false, true],
            "the resend carries the T flag, the first send does not"
        );
        assert_eq!(seen[0].1, seen[1].1, "the resend keeps the End-to-End id");
    }

    #[tokio::test]
    async fn a_request_the_agent_could_not_deliver_is_resent() {
        let seen = resent_after_first_failure(true).await;
        assert_eq!(
            seen.iter().map(|s| s.0).collect::<Vec<_>>(),
            vec![false, true],
            "3002, then the resend with the T flag"
        );
        assert_eq!(seen[0].1, seen[1].1, "the resend keeps the End-to-End id");
    }

    #[test]
    fn only_no_answer_and_3002_are_resent() {
        assert!(worth_resending(Outcome::Timeout));
        assert!(worth_resending(Outcome::SendFailed));
        assert!(worth_resending(Outcome::Answered(ResultKind::Code(3002))));
        for r in [
            ResultKind::Code(2001),
            ResultKind::Code(3004),
            ResultKind::Code(5002),
            ResultKind::Experimental(10415, 5065),
            ResultKind::Mismatched,
        ] {
            assert!(!worth_resending(Outcome::Answered(r)), "{r:?}");
        }
    }
}
