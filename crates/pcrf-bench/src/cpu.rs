//! CPU accounting of the processes under test (the PCRF, its database, and
//! the generator itself), read from /proc/<pid>/stat.
//!
//! utime + stime cover every thread of a process, in clock ticks
//! (sysconf(_SC_CLK_TCK)). Sampling at the edges of the measurement window
//! gives CPU % of one core and CPU µs per transaction; the samples between
//! give the busiest second. The database may be many processes (PostgreSQL
//! forks a backend per connection), so a group of pids is summed.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Why CPU time could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CpuError {
    #[error("cannot read /proc/{pid}/stat: {source}")]
    Read { pid: u32, source: std::io::Error },
    #[error("/proc/{pid}/stat is not in the expected format")]
    Format { pid: u32 },
    #[error("no running process is named {0:?}")]
    NotFound(String),
    #[error("cannot list /proc: {0}")]
    Proc(std::io::Error),
}

/// Clock ticks per second for utime/stime; 100 on every Linux we know, but asked.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions; it returns -1 on error.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if n > 0 {
        n as u64
    } else {
        100
    }
}

/// utime + stime (ticks) from the text of /proc/<pid>/stat. The command name
/// is in parentheses and may itself contain spaces and parentheses, so
/// fields are counted from the last ')'.
pub fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After the name: field 3 (state) is index 0, so utime (14) is 11, stime (15) is 12.
    let mut f = rest.split_ascii_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

/// The current utime + stime of one process, in ticks.
pub fn read_ticks(pid: u32) -> Result<u64, CpuError> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|source| CpuError::Read { pid, source })?;
    parse_stat_ticks(&s).ok_or(CpuError::Format { pid })
}

/// Every process (other than this one) whose name is `name`: the kernel's
/// comm (first 15 bytes of the executable name) or the file name of argv[0].
pub fn find_pids_by_name(name: &str) -> Result<Vec<u32>, CpuError> {
    let me = std::process::id();
    let comm_name: String = name.chars().take(15).collect();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").map_err(CpuError::Proc)? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        let argv0 = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let argv0 = argv0.split(|b| *b == 0).next().unwrap_or_default();
        let argv0 = String::from_utf8_lossy(argv0);
        let base = argv0.rsplit('/').next().unwrap_or_default();
        if comm.trim_end() == comm_name || base == name {
            pids.push(pid);
        }
    }
    if pids.is_empty() {
        return Err(CpuError::NotFound(name.to_string()));
    }
    pids.sort_unstable();
    Ok(pids)
}

/// CPU % of one core for `ticks` used over `wall`.
pub fn percent_of_core(ticks: u64, ticks_per_second: u64, wall: Duration) -> f64 {
    if wall.is_zero() || ticks_per_second == 0 {
        return 0.0;
    }
    ticks as f64 / ticks_per_second as f64 / wall.as_secs_f64() * 100.0
}

/// CPU microseconds per transaction for `ticks` used over `transactions`.
pub fn micros_per_transaction(ticks: u64, ticks_per_second: u64, transactions: u64) -> Option<f64> {
    (transactions > 0 && ticks_per_second > 0)
        .then(|| ticks as f64 * 1e6 / ticks_per_second as f64 / transactions as f64)
}

/// A named group of processes whose CPU time is summed, sampled over a run.
#[derive(Debug)]
pub struct CpuSampler {
    label: String,
    pids: Vec<u32>,
    ticks_per_second: u64,
    /// Last value read per pid, kept when a process has exited.
    last: HashMap<u32, u64>,
    samples: Vec<(Instant, u64)>,
}

impl CpuSampler {
    /// Starts sampling `pids`; the first sample is taken now so that an
    /// unreadable pid fails before the run, not after it.
    pub fn new(label: &str, pids: Vec<u32>) -> Result<CpuSampler, CpuError> {
        let mut s = CpuSampler {
            label: label.to_string(),
            pids,
            ticks_per_second: clock_ticks_per_second(),
            last: HashMap::new(),
            samples: Vec::new(),
        };
        for &pid in &s.pids {
            s.last.insert(pid, read_ticks(pid)?);
        }
        s.sample();
        Ok(s)
    }

    pub fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// Takes a sample now (a process that has exited keeps its last value).
    pub fn sample(&mut self) {
        self.sample_at(Instant::now());
    }

    fn sample_at(&mut self, at: Instant) {
        let mut total = 0;
        for &pid in &self.pids {
            let t = match read_ticks(pid) {
                Ok(t) => {
                    self.last.insert(pid, t);
                    t
                }
                Err(_) => self.last.get(&pid).copied().unwrap_or(0),
            };
            total += t;
        }
        self.samples.push((at, total));
    }

    /// Drops the samples taken so far except the last, so a window starts now
    /// (a warm-up is not accounted).
    pub fn restart_window(&mut self) {
        self.sample();
        let last = self.samples.pop();
        self.samples.clear();
        self.samples.extend(last);
    }

    /// The report over the samples taken: from the first to the last.
    pub fn report(&self, transactions: u64) -> CpuReport {
        let (first, last) = match (self.samples.first(), self.samples.last()) {
            (Some(f), Some(l)) => (*f, *l),
            _ => ((Instant::now(), 0), (Instant::now(), 0)),
        };
        let ticks = last.1.saturating_sub(first.1);
        let wall = last.0.saturating_duration_since(first.0);
        let peak = self
            .samples
            .windows(2)
            .filter(|w| w[1].0.saturating_duration_since(w[0].0) >= Duration::from_millis(500))
            .map(|w| {
                percent_of_core(
                    w[1].1.saturating_sub(w[0].1),
                    self.ticks_per_second,
                    w[1].0.saturating_duration_since(w[0].0),
                )
            })
            .fold(None, |m: Option<f64>, p| Some(m.map_or(p, |m| m.max(p))));
        CpuReport {
            label: self.label.clone(),
            pids: self.pids.clone(),
            wall_s: wall.as_secs_f64(),
            cpu_s: ticks as f64 / self.ticks_per_second as f64,
            cpu_percent_of_core: percent_of_core(ticks, self.ticks_per_second, wall),
            peak_percent_of_core: peak,
            cpu_us_per_txn: micros_per_transaction(ticks, self.ticks_per_second, transactions),
            ticks_per_second: self.ticks_per_second,
        }
    }
}

/// CPU used by one group of processes over the measurement window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CpuReport {
    pub label: String,
    pub pids: Vec<u32>,
    pub wall_s: f64,
    pub cpu_s: f64,
    /// 100 means one core fully busy.
    pub cpu_percent_of_core: f64,
    /// The busiest sampling interval (about a second).
    pub peak_percent_of_core: Option<f64>,
    pub cpu_us_per_txn: Option<f64>,
    /// The resolution of the figures: one tick is 1/ticks_per_second s.
    pub ticks_per_second: u64,
}

/// The CPU samplers of one run, sampled once a second inside the
/// measurement window only.
#[derive(Debug, Default)]
pub struct CpuWindow {
    samplers: Vec<CpuSampler>,
    /// The server's store counters, read at the window's start and end.
    counters: Option<crate::server_counters::ServerCounters>,
    started: bool,
    ended: bool,
    next: Option<Instant>,
}

impl CpuWindow {
    pub fn new(samplers: Vec<CpuSampler>) -> CpuWindow {
        CpuWindow {
            samplers,
            ..Default::default()
        }
    }

    /// Also reads the server's store counters at the window's edges.
    pub fn with_counters(mut self, c: Option<crate::server_counters::ServerCounters>) -> Self {
        self.counters = c;
        self
    }

    /// Call often; samples at the window's start, every second, and its end.
    pub fn tick(&mut self, now: Instant, window_start: Instant, window_end: Instant) {
        if self.ended || now < window_start {
            return;
        }
        if !self.started {
            self.started = true;
            self.samplers
                .iter_mut()
                .for_each(CpuSampler::restart_window);
            if let Some(c) = &mut self.counters {
                c.start();
            }
            self.next = Some(now + Duration::from_secs(1));
            return;
        }
        if now >= window_end {
            self.ended = true;
            self.samplers.iter_mut().for_each(CpuSampler::sample);
            if let Some(c) = &mut self.counters {
                c.end();
            }
            return;
        }
        if self.next.is_some_and(|n| now >= n) {
            self.samplers.iter_mut().for_each(CpuSampler::sample);
            self.next = Some(now + Duration::from_secs(1));
        }
    }

    /// When `tick` next has something to do.
    pub fn next_due(&self, window_start: Instant, window_end: Instant) -> Option<Instant> {
        if (self.samplers.is_empty() && self.counters.is_none()) || self.ended {
            return None;
        }
        if !self.started {
            return Some(window_start);
        }
        Some(self.next.map_or(window_end, |n| n.min(window_end)))
    }

    /// One report per sampler, in the order given.
    pub fn reports(&self, transactions: u64) -> Vec<CpuReport> {
        self.samplers
            .iter()
            .map(|s| s.report(transactions))
            .collect()
    }

    /// The store's commits over the window, when counters were read.
    pub fn store_report(&self, transactions: u64) -> Option<crate::server_counters::StoreReport> {
        self.counters.as_ref()?.report(transactions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_awkward_command_names() {
        let line = "4242 (pcrf (worker) 1) S 1 4242 4242 0 -1 4194560 1234 0 0 0 \
                    250 75 0 0 20 0 9 0 1000 123456 789 18446744073709551615";
        assert_eq!(parse_stat_ticks(line), Some(325));
        assert_eq!(parse_stat_ticks("12 (x) S 1 2"), None);
        assert_eq!(parse_stat_ticks("no parenthesis"), None);
    }

    #[test]
    fn arithmetic() {
        // 27 ticks at 100 Hz over 1 s: 27% of a core.
        assert!((percent_of_core(27, 100, Duration::from_secs(1)) - 27.0).abs() < 1e-9);
        assert_eq!(percent_of_core(5, 100, Duration::ZERO), 0.0);
        // 0.27 s over 3000 transactions: 90 µs each.
        let us = micros_per_transaction(27, 100, 3000).expect("some");
        assert!((us - 90.0).abs() < 1e-9);
        assert_eq!(micros_per_transaction(27, 100, 0), None);
    }

    #[test]
    fn samples_this_process_while_it_burns_cpu() {
        let me = std::process::id();
        let mut s = CpuSampler::new("self", vec![me]).expect("own stat readable");
        let start = read_ticks(me).expect("ticks");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut x = 0u64;
        // Burn until the kernel has charged at least 3 ticks to us.
        while read_ticks(me).expect("ticks") < start + 3 && Instant::now() < deadline {
            for i in 0..100_000u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
            }
        }
        std::hint::black_box(x);
        s.sample();
        let r = s.report(3);
        assert!(r.cpu_s >= 3.0 / r.ticks_per_second as f64, "{r:?}");
        assert!(r.cpu_percent_of_core > 0.0);
        assert!(r.cpu_us_per_txn.expect("txns") > 0.0);
        assert_eq!(r.pids, vec![me]);
    }

    #[test]
    fn finds_a_child_by_name_and_rejects_unknown() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn sleep");
        // Until the child has exec'd, /proc shows it under the parent's name.
        let deadline = Instant::now() + Duration::from_secs(5);
        let found = loop {
            let found = find_pids_by_name("sleep").unwrap_or_default();
            if found.contains(&child.id()) || Instant::now() > deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(found.contains(&child.id()), "{found:?}");
        assert!(matches!(
            find_pids_by_name("no-such-process-xyz"),
            Err(CpuError::NotFound(_))
        ));
        child.kill().expect("kill");
        child.wait().expect("wait");
    }

    #[test]
    fn window_samples_only_inside() {
        let me = std::process::id();
        let s = CpuSampler::new("self", vec![me]).expect("sampler");
        let mut w = CpuWindow::new(vec![s]);
        let t0 = Instant::now();
        let (ws, we) = (
            t0 + Duration::from_millis(10),
            t0 + Duration::from_millis(2500),
        );
        assert_eq!(w.next_due(ws, we), Some(ws));
        w.tick(t0, ws, we);
        assert!(!w.started);
        w.tick(ws, ws, we);
        assert_eq!(w.next_due(ws, we), Some(ws + Duration::from_secs(1)));
        w.tick(ws + Duration::from_secs(1), ws, we);
        w.tick(we, ws, we);
        assert!(w.ended);
        assert_eq!(w.next_due(ws, we), None);
        // restart + 1 s sample + end sample.
        assert_eq!(w.samplers[0].samples.len(), 3);
        assert_eq!(w.reports(10).len(), 1);
    }

    #[test]
    fn unreadable_pid_fails_up_front() {
        // Pid numbers above pid_max never exist.
        assert!(CpuSampler::new("db", vec![u32::MAX - 1]).is_err());
    }
}
