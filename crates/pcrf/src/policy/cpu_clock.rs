//! The calling thread's CPU clock, which the sandbox's time limit reads: a
//! call is stopped for the CPU time it used, not for the wall-clock time
//! it spent waiting for a core on a busy machine (the watchdog that arms
//! the budget hook counts the same clock).

use std::time::Duration;

/// CPU time this thread has used (`CLOCK_THREAD_CPUTIME_ID`). Where that
/// clock cannot be read, monotonic wall-clock time since the first call,
/// which only ever stops a call earlier: never weaker.
pub(super) fn thread_cpu() -> Duration {
    #[cfg(unix)]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime writes the timespec it is given and has no
        // other effect.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
            return Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        }
    }
    wall_since_start()
}

fn wall_since_start() -> Duration {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock advances with work done on this thread, and not while the
    /// thread sleeps.
    #[test]
    fn counts_this_threads_work_not_its_sleep() {
        let before = thread_cpu();
        std::thread::sleep(Duration::from_millis(200));
        let slept = thread_cpu() - before;
        assert!(slept < Duration::from_millis(100), "{slept:?}");
        let start = thread_cpu();
        let mut x = 0u64;
        while thread_cpu() - start < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(x > 0);
    }
}
