//! The live progress line: a running count of requests, answers and
//! failures, redrawn once a second on the terminal, never in a pipe or a
//! file (scripts read the report, not this).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counters the runners bump as they go.
#[derive(Debug, Default)]
pub struct Progress {
    pub sent: AtomicU64,
    pub succeeded: AtomicU64,
    pub failed: AtomicU64,
    pub timeouts: AtomicU64,
    stop: AtomicBool,
}

impl Progress {
    pub fn new() -> Arc<Progress> {
        Arc::new(Progress::default())
    }

    /// The line as printed.
    pub fn line(&self, elapsed: Duration, last_sent: u64, interval: Duration) -> String {
        let sent = self.sent.load(Relaxed);
        let rate = (sent - last_sent.min(sent)) as f64 / interval.as_secs_f64().max(1e-9);
        format!(
            "[{:>6.1} s] sent {sent}  ok {}  failed {}  timeouts {}  ({rate:.0}/s)",
            elapsed.as_secs_f64(),
            self.succeeded.load(Relaxed),
            self.failed.load(Relaxed),
            self.timeouts.load(Relaxed),
        )
    }

    /// Redraws the line every second on stderr while stdout is a terminal,
    /// until [`stop`](Self::stop). Returns at once otherwise.
    pub fn spawn_printer(self: &Arc<Progress>) -> Option<std::thread::JoinHandle<()>> {
        if !std::io::stdout().is_terminal() {
            return None;
        }
        let p = self.clone();
        std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || {
                let start = Instant::now();
                let mut last = 0;
                let tick = Duration::from_secs(1);
                let mut next = start + tick;
                while !p.stop.load(Relaxed) {
                    // Short sleeps so that stop() is noticed quickly.
                    std::thread::sleep(Duration::from_millis(100));
                    let now = Instant::now();
                    if now >= next {
                        next += tick;
                        let line = p.line(now - start, last, tick);
                        last = p.sent.load(Relaxed);
                        let mut err = std::io::stderr().lock();
                        let _ = write!(err, "\r{line}\x1b[K");
                        let _ = err.flush();
                    }
                }
                let _ = write!(std::io::stderr().lock(), "\r\x1b[K");
            })
            .ok()
    }

    pub fn stop(&self) {
        self.stop.store(true, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_shows_counts_and_rate() {
        let p = Progress::new();
        p.sent.store(3000, Relaxed);
        p.succeeded.store(2990, Relaxed);
        p.failed.store(4, Relaxed);
        p.timeouts.store(1, Relaxed);
        let l = p.line(Duration::from_secs(2), 1000, Duration::from_secs(1));
        assert_eq!(
            l,
            "[   2.0 s] sent 3000  ok 2990  failed 4  timeouts 1  (2000/s)"
        );
    }
}
