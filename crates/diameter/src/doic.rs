//! DOIC, RFC 7683, on the reporting node's side: when this node sheds load
//! it tells the peers that asked for it (requests carrying
//! OC-Supported-Features) to send less, with an OC-OLR in their answers,
//! instead of only answering 3004 to what they send anyway.
//!
//! Only the loss algorithm (OLR_DEFAULT_ALGO, §5) and host reports
//! (OC-Report-Type HOST_REPORT: "send less to this host") are offered.
//! The application decides when it is overloaded and calls
//! [`OverloadReporter::report`] / [`OverloadReporter::end`]; its answer
//! encoders call [`OverloadReporter::append_to_answer`].

use crate::codec::{Message, MessageBuilder};
use crate::dict::{avp, enums};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// OC-Feature-Vector bit of the loss algorithm (RFC 7683 §7.2).
pub const OLR_DEFAULT_ALGO: u64 = 1;

/// The longest OC-Validity-Duration allowed (RFC 7683 §7.4: 86,400 s).
pub const MAX_VALIDITY: Duration = Duration::from_secs(86_400);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Report {
    sequence: u64,
    reduction: u32,
    /// Sent as OC-Validity-Duration: what remains is computed per answer.
    until: Instant,
    /// An ended condition: sent with validity 0 until `until`, so reacting
    /// nodes that cached the last report drop it at once (§5.5.2).
    ended: bool,
}

/// The OC-OLR answers carry at one moment (an ended report: reduction 0,
/// validity 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportSent {
    pub sequence: u64,
    pub reduction_percentage: u32,
    /// What remains of OC-Validity-Duration.
    pub validity: Duration,
}

/// The overload state this node reports, shared by every connection.
#[derive(Debug)]
pub struct OverloadReporter {
    current: Mutex<Option<Report>>,
    last_sequence: AtomicU64,
    /// The monotonic clock validity is measured on (a stepped one in the
    /// unit tests, so that they wait for no report to expire).
    clock: fn() -> Instant,
}

impl Default for OverloadReporter {
    fn default() -> Self {
        Self::new()
    }
}

impl OverloadReporter {
    /// No overload reported.
    pub fn new() -> OverloadReporter {
        OverloadReporter {
            current: Mutex::new(None),
            last_sequence: AtomicU64::new(0),
            clock: Instant::now,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, Option<Report>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// OC-Sequence-Number must grow whenever the report changes (§5.5),
    /// across restarts too: milliseconds since the epoch, or one more than
    /// the last when the clock has not moved on.
    fn next_sequence(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut last = self.last_sequence.load(Relaxed);
        loop {
            let next = now.max(last + 1);
            match self
                .last_sequence
                .compare_exchange(last, next, Relaxed, Relaxed)
            {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    /// Asks reacting peers to cut the traffic they send us by
    /// `reduction_percentage` (capped at 100) for `validity` (capped at
    /// 24 h). Calling it again with the same values changes nothing (same
    /// sequence number, validity not extended); different values make a new
    /// report.
    pub fn report(&self, reduction_percentage: u32, validity: Duration) {
        let reduction = reduction_percentage.min(100);
        let validity = validity.min(MAX_VALIDITY);
        let mut cur = self.state();
        if let Some(r) = *cur {
            if !r.ended && r.reduction == reduction && r.until > (self.clock)() {
                return;
            }
        }
        *cur = Some(Report {
            sequence: self.next_sequence(),
            reduction,
            until: (self.clock)() + validity,
            ended: false,
        });
    }

    /// The overload is over: the next answers carry an OC-OLR with
    /// OC-Validity-Duration 0 (until the last report would have expired),
    /// then none.
    pub fn end(&self) {
        let mut cur = self.state();
        if let Some(r) = *cur {
            if !r.ended && r.until > (self.clock)() {
                *cur = Some(Report {
                    sequence: self.next_sequence(),
                    reduction: 0,
                    until: r.until,
                    ended: true,
                });
            } else {
                *cur = None;
            }
        }
    }

    /// The reduction currently reported (0 when none).
    pub fn reduction_percentage(&self) -> u32 {
        match *self.state() {
            Some(r) if !r.ended && r.until > (self.clock)() => r.reduction,
            _ => 0,
        }
    }

    /// The report answers carry now, if any: what an operator is shown
    /// of the overload state sent to DOIC peers.
    pub fn current(&self) -> Option<ReportSent> {
        let now = (self.clock)();
        match *self.state() {
            Some(r) if r.until > now => Some(ReportSent {
                sequence: r.sequence,
                reduction_percentage: r.reduction,
                validity: if r.ended {
                    Duration::ZERO
                } else {
                    r.until - now
                },
            }),
            _ => None,
        }
    }

    /// For the answer to `req`: when the request carried
    /// OC-Supported-Features offering the loss algorithm (or no feature
    /// vector, which means it, §7.2), appends our OC-Supported-Features and,
    /// while a report is active or just ended, an OC-OLR. Returns whether it
    /// appended anything. A request without it gets nothing (§5.2: DOIC is
    /// only spoken to nodes that advertised it).
    pub fn append_to_answer(&self, req: &Message, b: &mut MessageBuilder<'_>) -> bool {
        if !requests_doic(req) {
            return false;
        }
        b.group(avp::OC_SUPPORTED_FEATURES, |g| {
            g.u64(avp::OC_FEATURE_VECTOR, OLR_DEFAULT_ALGO);
        });
        let now = (self.clock)();
        let report = {
            let mut cur = self.state();
            match *cur {
                Some(r) if r.until > now => Some(r),
                Some(_) => {
                    *cur = None;
                    None
                }
                None => None,
            }
        };
        if let Some(r) = report {
            let remaining = if r.ended {
                0
            } else {
                // Rounded up: a report must not lapse before it was meant to.
                let left = r.until - now;
                (left.as_secs() + u64::from(left.subsec_nanos() > 0)).min(86_400) as u32
            };
            b.group(avp::OC_OLR, |g| {
                g.u64(avp::OC_SEQUENCE_NUMBER, r.sequence)
                    .i32(avp::OC_REPORT_TYPE, enums::OC_REPORT_TYPE::HOST_REPORT)
                    .u32(avp::OC_REDUCTION_PERCENTAGE, r.reduction)
                    .u32(avp::OC_VALIDITY_DURATION, remaining);
            });
        }
        true
    }
}

/// Whether `req` advertises DOIC with the loss algorithm.
pub fn requests_doic(req: &Message) -> bool {
    let Ok(Some(osf)) = req.find(avp::OC_SUPPORTED_FEATURES) else {
        return false;
    };
    match osf.grouped().find(avp::OC_FEATURE_VECTOR) {
        Ok(Some(v)) => v.as_u64().is_ok_and(|v| v & OLR_DEFAULT_ALGO != 0),
        Ok(None) => true,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use std::cell::Cell;

    thread_local! {
        /// The stepped clock of this test's thread: its start, and how far
        /// it has been moved on.
        static START: Instant = Instant::now();
        static STEPPED: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    }

    fn stepped_now() -> Instant {
        START.with(|s| *s) + STEPPED.with(Cell::get)
    }

    /// Moves this thread's clock on by `d`.
    fn step(d: Duration) {
        STEPPED.with(|c| c.set(c.get() + d));
    }

    /// A reporter on this thread's stepped clock.
    fn reporter() -> OverloadReporter {
        OverloadReporter {
            clock: stepped_now,
            ..OverloadReporter::new()
        }
    }

    fn request(with_osf: Option<Option<u64>>) -> Message {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::request(&mut buf, 272, 16_777_238, 1, 1);
        b.str(avp::SESSION_ID, "pgw;1");
        if let Some(vector) = with_osf {
            b.group(avp::OC_SUPPORTED_FEATURES, |g| {
                if let Some(v) = vector {
                    g.u64(avp::OC_FEATURE_VECTOR, v);
                }
            });
        }
        b.finish();
        Message::parse(buf.freeze()).expect("request")
    }

    /// The answer's (OC-Supported-Features present, OC-OLR fields).
    fn answer(r: &OverloadReporter, req: &Message) -> (bool, Option<(u64, i32, u32, u32)>) {
        let mut buf = BytesMut::new();
        let mut b = MessageBuilder::answer(&mut buf, req);
        b.result_code(2001);
        r.append_to_answer(req, &mut b);
        b.finish();
        let m = Message::parse(buf.freeze()).expect("answer");
        let osf = m.find(avp::OC_SUPPORTED_FEATURES).expect("ok").is_some();
        let olr = m.find(avp::OC_OLR).expect("ok").map(|g| {
            let get = |c| g.grouped().find(c).expect("ok").expect("member");
            (
                get(avp::OC_SEQUENCE_NUMBER).as_u64().expect("u64"),
                get(avp::OC_REPORT_TYPE).as_enum().expect("enum"),
                get(avp::OC_REDUCTION_PERCENTAGE).as_u32().expect("u32"),
                get(avp::OC_VALIDITY_DURATION).as_u32().expect("u32"),
            )
        });
        (osf, olr)
    }

    #[test]
    fn only_peers_that_advertised_doic_get_reports() {
        let r = reporter();
        r.report(40, Duration::from_secs(30));
        assert_eq!(answer(&r, &request(None)), (false, None));
        // Another algorithm only: not for us.
        assert_eq!(answer(&r, &request(Some(Some(2)))), (false, None));
        for req in [request(Some(None)), request(Some(Some(3)))] {
            let (osf, olr) = answer(&r, &req);
            assert!(osf);
            let (_, kind, pct, validity) = olr.expect("OC-OLR");
            assert_eq!(kind, enums::OC_REPORT_TYPE::HOST_REPORT);
            assert_eq!(pct, 40);
            assert_eq!(validity, 30);
        }
    }

    #[test]
    fn no_overload_advertises_support_without_a_report() {
        let r = reporter();
        assert_eq!(answer(&r, &request(Some(None))), (true, None));
        assert_eq!(r.reduction_percentage(), 0);
    }

    #[test]
    fn a_changed_report_gets_a_higher_sequence_and_the_same_one_does_not() {
        let r = reporter();
        let req = request(Some(None));
        r.report(20, Duration::from_secs(60));
        let (_, a) = answer(&r, &req);
        r.report(20, Duration::from_secs(60));
        let (_, b) = answer(&r, &req);
        assert_eq!(a.expect("olr").0, b.expect("olr").0, "unchanged report");
        r.report(150, Duration::from_secs(100_000));
        let (_, c) = answer(&r, &req);
        let c = c.expect("olr");
        assert!(c.0 > a.expect("olr").0);
        assert_eq!(c.2, 100, "capped at 100 %");
        assert!(c.3 <= 86_400, "capped at a day");
        assert_eq!(r.reduction_percentage(), 100);
    }

    #[test]
    fn the_current_report_is_what_answers_carry() {
        let r = reporter();
        let req = request(Some(None));
        assert_eq!(r.current(), None);
        r.report(30, Duration::from_secs(10));
        let now = r.current().expect("a report");
        let (_, sent) = answer(&r, &req);
        let sent = sent.expect("olr");
        assert_eq!((now.sequence, now.reduction_percentage), (sent.0, sent.2));
        assert_eq!(now.validity, Duration::from_secs(10));
        step(Duration::from_secs(4));
        let later = r.current().expect("still reported");
        assert_eq!(later.validity, Duration::from_secs(6), "what remains");
        assert_eq!(answer(&r, &req).1.expect("olr").3, 6);
        assert_eq!(later.sequence, now.sequence);
        r.end();
        let ended = r.current().expect("ended, not yet expired");
        assert!(ended.sequence > now.sequence);
        assert_eq!(
            (ended.reduction_percentage, ended.validity),
            (0, Duration::ZERO)
        );
    }

    #[test]
    fn ending_sends_validity_zero_then_nothing() {
        let r = reporter();
        let req = request(Some(None));
        r.report(50, Duration::from_millis(300));
        let (_, before) = answer(&r, &req);
        r.end();
        let (_, ended) = answer(&r, &req);
        let ended = ended.expect("an OLR ending the condition");
        assert!(ended.0 > before.expect("olr").0);
        assert_eq!((ended.2, ended.3), (0, 0));
        assert_eq!(r.reduction_percentage(), 0);
        step(Duration::from_millis(350));
        assert_eq!(answer(&r, &req), (true, None));
    }

    #[test]
    fn an_expired_report_is_no_longer_sent() {
        let r = reporter();
        let req = request(Some(None));
        r.report(10, Duration::from_millis(50));
        step(Duration::from_millis(80));
        assert_eq!(answer(&r, &req), (true, None));
        assert_eq!(r.reduction_percentage(), 0);
    }
}
