//! Waiting in tests on what the server does, not on the clock: a fixed
//! sleep either wastes time or, on a loaded machine, passes an assertion
//! only because the server had not got round to the change yet. Every
//! test polls through `eventually`, which fails with the name of what it
//! waited for, and reads process figures (`rss_kib`) from here.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// How often a condition is polled.
const POLL: Duration = Duration::from_millis(20);

/// Polls `probe` until it yields a value or `within` passes, and returns
/// the value; past the deadline the test fails naming `what`. For tests
/// that are not async (it blocks the thread between polls).
pub fn eventually<T>(
    what: impl Display,
    within: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(POLL);
    }
}

/// `eventually` for async tests: yields to the runtime between polls, so
/// the tasks the test itself runs (a PCEF answering RARs) go on.
pub async fn eventually_async<T>(
    what: impl Display,
    within: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// Polls `check` until it holds or `within` passes; whether it held, and
/// its last value (for a test that reports the last value itself).
pub fn poll_for<T>(within: Duration, mut check: impl FnMut() -> (bool, T)) -> (bool, T) {
    let deadline = Instant::now() + within;
    loop {
        let (ok, v) = check();
        if ok || Instant::now() > deadline {
            return (ok, v);
        }
        std::thread::sleep(POLL);
    }
}

/// As `poll_for`, for a plain condition.
pub fn poll_until(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    poll_for(within, || (check(), ())).0
}

/// `poll_until` for async tests: yields to the runtime between polls.
pub async fn poll_until_async(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A process's resident set size in KiB, from /proc (0 once it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Watches `happened` for all of `window` and fails the moment it holds,
/// naming `what`. Only for "this never happens" where nothing observable
/// proves that the work which could do it is over (a task the server
/// spawned after answering); where such a proof exists, wait for it with
/// `eventually` and assert once instead.
pub async fn never_within(
    what: impl Display,
    window: Duration,
    mut happened: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + window;
    while Instant::now() < deadline {
        assert!(!happened(), "within {window:?}: {what}");
        tokio::time::sleep(POLL).await;
    }
    assert!(!happened(), "within {window:?}: {what}");
}
