//! A bound on how many lines one kind of log message may write per second.
//!
//! Some warnings are caused by whoever can open a connection: a client
//! that connects and sends garbage makes one line per connection, and it
//! can open thousands of connections a second. Logged one for one, it
//! fills the disk and buries everything else in the log. A [`LogLimiter`]
//! lets the first few lines of each one-second window through and counts
//! the rest; the first line let through after a suppression says how many
//! were left out (the exact totals are in the metrics).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long one window lasts.
const WINDOW: Duration = Duration::from_secs(1);

/// Lets at most `per_second` lines of one kind through per second.
pub struct LogLimiter {
    per_second: u32,
    state: Mutex<Window>,
}

struct Window {
    started: Option<Instant>,
    written: u32,
    /// Lines left out since the last line written.
    suppressed: u64,
}

impl LogLimiter {
    /// A limiter letting `per_second` lines through per second (at least 1).
    pub const fn new(per_second: u32) -> LogLimiter {
        LogLimiter {
            per_second: if per_second == 0 { 1 } else { per_second },
            state: Mutex::new(Window {
                started: None,
                written: 0,
                suppressed: 0,
            }),
        }
    }

    /// Whether a line may be written now: `Some(n)` where `n` lines were
    /// left out since the last one written (say so in the line when it is
    /// not 0), `None` when this one must be left out (it is counted).
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut w = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if w.started
            .is_none_or(|s| now.saturating_duration_since(s) >= WINDOW)
        {
            w.started = Some(now);
            w.written = 0;
        }
        if w.written < self.per_second {
            w.written += 1;
            Some(std::mem::take(&mut w.suppressed))
        } else {
            w.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lets_a_few_through_per_second_and_counts_the_rest() {
        let l = LogLimiter::new(3);
        let t0 = Instant::now();
        let first: Vec<_> = (0..1000).map(|_| l.admit_at(t0)).collect();
        assert_eq!(&first[..3], &[Some(0), Some(0), Some(0)]);
        assert!(first[3..].iter().all(Option::is_none));
        // Still the same second: nothing more.
        assert_eq!(l.admit_at(t0 + Duration::from_millis(999)), None);
        // The next second's first line tells how many were left out.
        let t1 = t0 + WINDOW;
        assert_eq!(l.admit_at(t1), Some(998));
        assert_eq!(l.admit_at(t1), Some(0));
        assert_eq!(l.admit_at(t1), Some(0));
        assert_eq!(l.admit_at(t1), None);
        assert_eq!(l.admit_at(t1 + WINDOW * 5), Some(1));
    }
}
