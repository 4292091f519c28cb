//! A time series of one long open-loop run (`--series FILE`): every
//! interval, one CSV row with the requests finished in it, their latency
//! percentiles (from intended send times) and the server's resident
//! memory. A soak (`chaos/soak.sh`) needs the figures over time: a whole
//! run's percentiles would hide a slow drift or a leak in the average.

use crate::latency::Latency;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What `--series` asked for.
#[derive(Clone, Debug)]
pub struct SeriesSpec {
    pub path: PathBuf,
    pub every: Duration,
    /// The server whose RSS is sampled.
    pub rss_pid: Option<u32>,
}

/// The CSV header.
pub const HEADER: &str =
    "t_s,finished,succeeded,failed,timeouts,tps,p50_ms,p90_ms,p99_ms,p999_ms,max_ms,rss_kb";

/// Resident set size of a process in kB (VmRSS), if readable.
pub fn rss_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_vmrss(&s)
}

fn parse_vmrss(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The series being written.
pub struct Series {
    out: BufWriter<File>,
    spec: SeriesSpec,
    start: Instant,
    next: Instant,
    latency: Latency,
    finished: u64,
    succeeded: u64,
    timeouts: u64,
    rows: u64,
    error: Option<String>,
}

impl Series {
    pub fn create(spec: SeriesSpec, start: Instant) -> Result<Series, String> {
        if spec.every < Duration::from_millis(100) {
            return Err("--series-every must be at least 100ms".into());
        }
        let f = File::create(&spec.path)
            .map_err(|e| format!("--series {}: {e}", spec.path.display()))?;
        let mut out = BufWriter::new(f);
        writeln!(out, "{HEADER}").map_err(|e| format!("--series: {e}"))?;
        Ok(Series {
            out,
            next: start + spec.every,
            spec,
            start,
            latency: Latency::new(),
            finished: 0,
            succeeded: 0,
            timeouts: 0,
            rows: 0,
            error: None,
        })
    }

    pub fn path(&self) -> &Path {
        &self.spec.path
    }

    /// One finished request.
    pub fn record(&mut self, latency: Duration, success: bool, timeout: bool) {
        self.finished += 1;
        if success {
            self.succeeded += 1;
            self.latency.record(latency);
        }
        if timeout {
            self.timeouts += 1;
        }
    }

    /// When the next row is due.
    pub fn next_due(&self) -> Instant {
        self.next
    }

    /// Writes the rows due by `now`.
    pub fn tick(&mut self, now: Instant) {
        while now >= self.next {
            let t = self
                .next
                .saturating_duration_since(self.start)
                .as_secs_f64();
            self.row(t, self.spec.every.as_secs_f64());
            self.next += self.spec.every;
        }
    }

    fn row(&mut self, t: f64, span_s: f64) {
        let ms = |q: f64| {
            if self.latency.count() == 0 {
                0.0
            } else {
                self.latency.quantile(q).as_secs_f64() * 1e3
            }
        };
        let rss = self.spec.rss_pid.and_then(rss_kb).unwrap_or(0);
        let line = format!(
            "{t:.1},{},{},{},{},{:.1},{:.3},{:.3},{:.3},{:.3},{:.3},{rss}",
            self.finished,
            self.succeeded,
            self.finished - self.succeeded - self.timeouts,
            self.timeouts,
            self.succeeded as f64 / span_s.max(1e-9),
            ms(0.5),
            ms(0.9),
            ms(0.99),
            ms(0.999),
            ms(1.0),
        );
        if let Err(e) = writeln!(self.out, "{line}").and_then(|()| self.out.flush()) {
            self.error.get_or_insert(e.to_string());
        }
        self.rows += 1;
        self.latency = Latency::new();
        self.finished = 0;
        self.succeeded = 0;
        self.timeouts = 0;
    }

    /// Writes the last partial interval; the rows written, or the first error.
    pub fn finish(mut self, now: Instant) -> Result<u64, String> {
        self.tick(now);
        if self.finished > 0 {
            let t = now.saturating_duration_since(self.start).as_secs_f64();
            let span = now
                .saturating_duration_since(self.next - self.spec.every)
                .as_secs_f64();
            self.row(t, span);
        }
        match self.error {
            Some(e) => Err(format!("--series {}: {e}", self.spec.path.display())),
            None => Ok(self.rows),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vmrss_is_read_from_proc_status() {
        assert_eq!(
            parse_vmrss("Name:\tx\nVmRSS:\t  12345 kB\nVmSwap: 0 kB\n"),
            Some(12345)
        );
        assert_eq!(parse_vmrss("Name:\tx\n"), None);
        assert!(rss_kb(std::process::id()).is_some_and(|k| k > 0));
    }

    #[test]
    fn one_row_per_interval_with_that_interval_only() {
        let dir = std::env::temp_dir().join(format!("pcrf-bench-series-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("s.csv");
        let start = Instant::now();
        let every = Duration::from_secs(10);
        let mut s = Series::create(
            SeriesSpec {
                path: path.clone(),
                every,
                rss_pid: Some(std::process::id()),
            },
            start,
        )
        .expect("create");
        for _ in 0..100 {
            s.record(Duration::from_millis(2), true, false);
        }
        s.record(Duration::from_secs(2), false, true);
        s.tick(start + Duration::from_secs(11));
        // The second interval: slower answers only.
        for _ in 0..10 {
            s.record(Duration::from_millis(50), true, false);
        }
        s.tick(start + Duration::from_secs(25));
        s.record(Duration::from_millis(1), true, false);
        assert_eq!(s.finish(start + Duration::from_secs(26)), Ok(3));
        let text = std::fs::read_to_string(&path).expect("read");
        let rows: Vec<Vec<String>> = text
            .lines()
            .skip(1)
            .map(|l| l.split(',').map(str::to_string).collect())
            .collect();
        assert_eq!(text.lines().next(), Some(HEADER));
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0][0], "10.0");
        assert_eq!(
            (
                rows[0][1].as_str(),
                rows[0][2].as_str(),
                rows[0][4].as_str()
            ),
            ("101", "100", "1")
        );
        let p99 = |r: &Vec<String>| r[8].parse::<f64>().expect("p99");
        assert!((p99(&rows[0]) - 2.0).abs() < 0.1, "{rows:?}");
        assert!((p99(&rows[1]) - 50.0).abs() < 1.0, "{rows:?}");
        assert!(rows[1][11].parse::<u64>().expect("rss") > 0);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
