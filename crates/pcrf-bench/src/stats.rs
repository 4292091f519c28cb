//! What a run counts, per command: requests sent, answers by Result-Code
//! (Experimental-Result included), timeouts, send failures, requests never
//! sent because their session had already failed, latency and Apdex.
//!
//! Owned by one thread or task and merged at the end, so recording takes no
//! lock.

use crate::apdex::Apdex;
use crate::latency::Latency;
use crate::plan::Step;
use crate::scenario::ApdexTargets;
use diameter::dict::avp;
use diameter::Message;
use std::collections::BTreeMap;
use std::time::Duration;

/// The commands the emulated PCEF sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Command {
    CcrI,
    CcrU,
    CcrT,
}

impl Command {
    pub const ALL: [Command; 3] = [Command::CcrI, Command::CcrU, Command::CcrT];

    pub fn name(self) -> &'static str {
        match self {
            Command::CcrI => "CCR-I",
            Command::CcrU => "CCR-U",
            Command::CcrT => "CCR-T",
        }
    }

    pub fn of_step(step: Step) -> Command {
        match step {
            Step::Initial => Command::CcrI,
            Step::Update(_) => Command::CcrU,
            Step::Terminate => Command::CcrT,
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    fn apdex_t(self, t: &ApdexTargets) -> Duration {
        match self {
            Command::CcrI => t.ccr_i,
            Command::CcrU => t.ccr_u,
            Command::CcrT => t.ccr_t,
        }
    }
}

/// The result an answer carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResultKind {
    /// Result-Code.
    Code(u32),
    /// Experimental-Result: vendor and code.
    Experimental(u32, u32),
    /// Neither was present (a malformed answer).
    Missing,
    /// A success answer for another request: its Session-Id or
    /// CC-Request-Number differs from the request's (RFC 4006 §8.2).
    Mismatched,
}

impl ResultKind {
    /// Reads Result-Code or Experimental-Result from an answer.
    pub fn of(answer: &Message) -> ResultKind {
        let Ok([rc, er]) = answer.pick(&[avp::RESULT_CODE, avp::EXPERIMENTAL_RESULT]) else {
            return ResultKind::Missing;
        };
        if let Some(Ok(code)) = rc.map(|a| a.as_u32()) {
            return ResultKind::Code(code);
        }
        if let Some(er) = er {
            let mut vendor = 0;
            let mut code = None;
            for a in er.grouped().flatten() {
                if a.is(avp::VENDOR_ID) {
                    vendor = a.as_u32().unwrap_or(0);
                } else if a.is(avp::EXPERIMENTAL_RESULT_CODE) {
                    code = a.as_u32().ok();
                }
            }
            if let Some(code) = code {
                return ResultKind::Experimental(vendor, code);
            }
        }
        ResultKind::Missing
    }

    /// 2xxx: the request was served.
    pub fn is_success(self) -> bool {
        match self {
            ResultKind::Code(c) | ResultKind::Experimental(_, c) => (2000..3000).contains(&c),
            ResultKind::Missing | ResultKind::Mismatched => false,
        }
    }

    /// The key in reports: "2001", or "10415:5030" for an Experimental-Result.
    pub fn key(self) -> String {
        match self {
            ResultKind::Code(c) => c.to_string(),
            ResultKind::Experimental(v, c) => format!("{v}:{c}"),
            ResultKind::Missing => "none".to_string(),
            ResultKind::Mismatched => "mismatched".to_string(),
        }
    }
}

/// How one request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Answered(ResultKind),
    Timeout,
    /// Not connected, connection lost before the answer, or refused locally.
    SendFailed,
}

/// Counters of one command.
#[derive(Clone, Debug)]
pub struct CommandStats {
    pub sent: u64,
    pub answered: u64,
    pub succeeded: u64,
    pub timeouts: u64,
    pub send_failures: u64,
    /// Due but not sent: an earlier request of the session failed.
    pub skipped: u64,
    pub results: BTreeMap<ResultKind, u64>,
    /// Latency of answered requests (successes and error answers alike).
    pub latency: Latency,
    pub apdex: Apdex,
}

impl CommandStats {
    pub fn new(t: Duration) -> CommandStats {
        CommandStats {
            sent: 0,
            answered: 0,
            succeeded: 0,
            timeouts: 0,
            send_failures: 0,
            skipped: 0,
            results: BTreeMap::new(),
            latency: Latency::new(),
            apdex: Apdex::new(t),
        }
    }

    /// Everything that is not a success answer.
    pub fn failures(&self) -> u64 {
        (self.answered - self.succeeded) + self.timeouts + self.send_failures + self.skipped
    }

    /// Records how a sent request ended, `latency` after its intended send time.
    pub fn finished(&mut self, outcome: Outcome, latency: Duration) {
        match outcome {
            Outcome::Answered(r) => {
                self.answered += 1;
                *self.results.entry(r).or_default() += 1;
                self.latency.record(latency);
                if r.is_success() {
                    self.succeeded += 1;
                    self.apdex.record(latency);
                } else {
                    self.apdex.record_failure();
                }
            }
            Outcome::Timeout => {
                self.timeouts += 1;
                self.apdex.record_failure();
            }
            Outcome::SendFailed => {
                self.send_failures += 1;
                self.apdex.record_failure();
            }
        }
    }

    pub fn merge(&mut self, o: &CommandStats) {
        self.sent += o.sent;
        self.answered += o.answered;
        self.succeeded += o.succeeded;
        self.timeouts += o.timeouts;
        self.send_failures += o.send_failures;
        self.skipped += o.skipped;
        for (k, n) in &o.results {
            *self.results.entry(*k).or_default() += n;
        }
        self.latency.merge(&o.latency);
        self.apdex.merge(&o.apdex);
    }
}

/// The counters of a run (or of one worker of it).
#[derive(Clone, Debug)]
pub struct RunStats {
    commands: [CommandStats; 3],
}

impl RunStats {
    pub fn new(t: &ApdexTargets) -> RunStats {
        RunStats {
            commands: Command::ALL.map(|c| CommandStats::new(c.apdex_t(t))),
        }
    }

    pub fn command(&self, c: Command) -> &CommandStats {
        &self.commands[c.index()]
    }

    pub fn sent(&mut self, c: Command) {
        self.commands[c.index()].sent += 1;
    }

    pub fn skipped(&mut self, c: Command) {
        self.commands[c.index()].skipped += 1;
        self.commands[c.index()].apdex.record_failure();
    }

    /// Records how a sent request ended, `latency` after its intended send time.
    pub fn finished(&mut self, c: Command, outcome: Outcome, latency: Duration) {
        self.commands[c.index()].finished(outcome, latency);
    }

    pub fn merge(&mut self, o: &RunStats) {
        for (a, b) in self.commands.iter_mut().zip(&o.commands) {
            a.merge(b);
        }
    }

    /// All commands together (Apdex T of CCR-I for the total).
    pub fn total(&self) -> CommandStats {
        let mut t = CommandStats::new(self.commands[0].apdex.target());
        for c in &self.commands {
            t.merge(c);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use diameter::MessageBuilder;

    fn targets() -> ApdexTargets {
        ApdexTargets {
            ccr_i: Duration::from_millis(5),
            ccr_u: Duration::from_millis(10),
            ccr_t: Duration::from_millis(5),
            aar: Duration::from_millis(10),
            str: Duration::from_millis(10),
            call_setup: Duration::from_millis(20),
        }
    }

    fn answer(f: impl FnOnce(&mut MessageBuilder<'_>)) -> Message {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::new(&mut buf, 0x40, 272, 16_777_238, 1, 2);
        b.str(avp::SESSION_ID, "s;1;2");
        f(&mut b);
        b.finish();
        Message::parse(buf.freeze()).expect("answer")
    }

    #[test]
    fn result_kinds() {
        let a = answer(|b| {
            b.result_code(2001);
        });
        assert_eq!(ResultKind::of(&a), ResultKind::Code(2001));
        assert!(ResultKind::of(&a).is_success());
        let e = answer(|b| {
            b.experimental_result(10415, 5030);
        });
        assert_eq!(ResultKind::of(&e), ResultKind::Experimental(10415, 5030));
        assert!(!ResultKind::of(&e).is_success());
        assert_eq!(ResultKind::of(&e).key(), "10415:5030");
        let m = answer(|_| {});
        assert_eq!(ResultKind::of(&m), ResultKind::Missing);
        assert!(!ResultKind::Missing.is_success());
    }

    #[test]
    fn counting_and_merging() {
        let mut a = RunStats::new(&targets());
        a.sent(Command::CcrI);
        a.finished(
            Command::CcrI,
            Outcome::Answered(ResultKind::Code(2001)),
            Duration::from_millis(1),
        );
        a.sent(Command::CcrU);
        a.finished(
            Command::CcrU,
            Outcome::Answered(ResultKind::Code(5002)),
            Duration::from_millis(1),
        );
        let mut b = RunStats::new(&targets());
        b.sent(Command::CcrU);
        b.finished(Command::CcrU, Outcome::Timeout, Duration::from_secs(2));
        b.skipped(Command::CcrT);
        b.sent(Command::CcrT);
        b.finished(Command::CcrT, Outcome::SendFailed, Duration::ZERO);
        a.merge(&b);
        let u = a.command(Command::CcrU);
        assert_eq!((u.sent, u.answered, u.succeeded, u.timeouts), (2, 1, 0, 1));
        assert_eq!(u.results[&ResultKind::Code(5002)], 1);
        assert_eq!(u.failures(), 2);
        assert_eq!(u.latency.count(), 1);
        assert_eq!(u.apdex.target(), Duration::from_millis(10));
        assert_eq!(u.apdex.score(), Some(0.0));
        let t = a.command(Command::CcrT);
        assert_eq!((t.skipped, t.send_failures, t.failures()), (1, 1, 2));
        let total = a.total();
        assert_eq!((total.sent, total.succeeded, total.failures()), (4, 1, 4));
        assert_eq!(a.command(Command::CcrI).apdex.score(), Some(1.0));
    }
}
