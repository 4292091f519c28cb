//! `[decision_log]`: which policy decisions are emitted as `decision`
//! events, so that an operator can answer afterwards why a subscriber got
//! what it got (the session keeps only its last decision). The events go
//! through the outbox and its sinks like any other; this file holds the
//! section, its checks and the choice of the decisions logged.

use serde::Deserialize;

/// `[decision_log]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionLogConfig {
    /// Off by default: nothing is built or written.
    #[serde(default)]
    pub enabled: bool,
    /// Share of subscribers whose decisions are logged, 0 to 100. The
    /// choice is per subscriber (a hash of its key), stable across nodes
    /// and restarts: a logged subscriber's history is whole.
    #[serde(default = "every_one")]
    pub sample_percent: u8,
    /// When not empty, only these subscribers (IMSI, or MSISDN when no
    /// IMSI is known) are logged.
    #[serde(default)]
    pub subscribers: Vec<String>,
    /// When not empty, only subscribers on these plans are logged.
    #[serde(default)]
    pub plans: Vec<String>,
    /// Also written to this file, one JSON document a line (off without).
    #[serde(default)]
    pub file: Option<std::path::PathBuf>,
    /// The file is renamed `.1` once it would pass this many bytes.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// Rotated files kept (`.1` newest to `.keep` oldest).
    #[serde(default = "default_keep")]
    pub keep: u32,
}

fn default_max_bytes() -> u64 {
    100 * 1024 * 1024
}

fn default_keep() -> u32 {
    5
}

impl Default for DecisionLogConfig {
    fn default() -> Self {
        DecisionLogConfig {
            enabled: false,
            sample_percent: every_one(),
            subscribers: Vec::new(),
            plans: Vec::new(),
            file: None,
            max_bytes: default_max_bytes(),
            keep: default_keep(),
        }
    }
}

fn every_one() -> u8 {
    100
}

impl DecisionLogConfig {
    /// Every problem, as (key, message).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if self.sample_percent > 100 {
            out.push((
                "[decision_log].sample_percent".into(),
                "must be a percentage from 0 to 100".into(),
            ));
        }
        if self.subscribers.iter().any(String::is_empty) {
            out.push((
                "[decision_log].subscribers".into(),
                "an empty subscriber key matches nothing".into(),
            ));
        }
        if self.plans.iter().any(String::is_empty) {
            out.push((
                "[decision_log].plans".into(),
                "an empty plan name matches nothing".into(),
            ));
        }
        if self.max_bytes < 1024 {
            out.push((
                "[decision_log].max_bytes".into(),
                "must be at least 1024".into(),
            ));
        }
        if !(1..=1000).contains(&self.keep) {
            out.push(("[decision_log].keep".into(), "must be 1 to 1000".into()));
        }
        if let (true, Some(file)) = (self.enabled, &self.file) {
            let dir = match file.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => std::path::Path::new("."),
            };
            if !dir.is_dir() {
                out.push((
                    "[decision_log].file".into(),
                    format!("its directory {} does not exist", dir.display()),
                ));
            }
        }
        out
    }

    /// Whether a decision for `subscriber` (on `plan`) passes the filter;
    /// sampling is [`Self::sampled_in`].
    pub fn selects(&self, subscriber: &str, plan: Option<&str>) -> bool {
        (self.subscribers.is_empty() || self.subscribers.iter().any(|s| s == subscriber))
            && (self.plans.is_empty() || plan.is_some_and(|p| self.plans.iter().any(|x| x == p)))
    }

    /// Whether `subscriber` is in the sampled share.
    pub fn sampled_in(&self, subscriber: &str) -> bool {
        match self.sample_percent {
            0 => false,
            p if p >= 100 => true,
            p => {
                xxhash_rust::xxh3::xxh3_64_with_seed(subscriber.as_bytes(), SAMPLE_SEED) % 100
                    < u64::from(p)
            }
        }
    }
}

/// Seed of the sampling hash: independent of the outbox lanes' and the
/// rollout's, so a sampled share is not also one lane or one canary group.
const SAMPLE_SEED: u64 = 0x6465_6369_7369_6f6e;

/// What the decision log did, for the metrics.
#[derive(Default)]
pub struct DecisionLogCounters {
    /// Decisions logged (built for the sinks and/or the file).
    pub logged: std::sync::atomic::AtomicU64,
    /// Decisions the filters took but the sample left out.
    pub sampled_out: std::sync::atomic::AtomicU64,
}

/// The decision log as the node runs it: the section when it is on (read
/// at start-up; `None` costs one check per decision), its file's writer
/// when it names one, and what it did.
pub struct DecisionLog {
    config: Option<DecisionLogConfig>,
    pub file: Option<DecisionFile>,
    counters: DecisionLogCounters,
}

impl DecisionLog {
    /// The log `cfg` describes. A file that cannot be opened is not
    /// written (start-up checks it first; this covers it vanishing since).
    pub fn start(cfg: &DecisionLogConfig) -> DecisionLog {
        let config = cfg.enabled.then(|| cfg.clone());
        let file = match config.as_ref().map(DecisionFile::start) {
            Some(Ok(file)) => file,
            Some(Err(e)) => {
                tracing::error!(error = %e, "decision log: the file cannot be opened; not written");
                None
            }
            None => None,
        };
        DecisionLog {
            config,
            file,
            counters: DecisionLogCounters::default(),
        }
    }

    /// The file the log writes and how many rotated copies it keeps,
    /// when it writes one.
    pub fn file_set(&self) -> Option<(std::path::PathBuf, u32)> {
        let cfg = self.config.as_ref()?;
        self.file.as_ref()?;
        Some((cfg.file.clone()?, cfg.keep))
    }

    /// Whether the log is on at all.
    pub fn is_on(&self) -> bool {
        self.config.is_some()
    }

    /// Whether a decision for `subscriber` (on `plan`) is logged: the log
    /// is on, its filters take the subscriber, the sample holds it, and
    /// something receives it (`to_sinks`: a sink takes `decision` events;
    /// or the file). Counted either way.
    pub fn takes(&self, subscriber: &str, plan: Option<&str>, to_sinks: bool) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let Some(log) = &self.config else {
            return false;
        };
        if !log.selects(subscriber, plan) {
            return false;
        }
        if !log.sampled_in(subscriber) {
            self.counters.sampled_out.fetch_add(1, Relaxed);
            return false;
        }
        if !to_sinks && self.file.is_none() {
            return false;
        }
        self.counters.logged.fetch_add(1, Relaxed);
        true
    }

    /// `pcrf_decision_log_*` (0 while it is off).
    pub fn write_metrics(&self, out: &mut crate::metrics::Exposition) {
        use std::sync::atomic::Ordering::Relaxed;
        out.counter(
            "pcrf_decision_log_logged_total",
            "Policy decisions logged ([decision_log]): as decision events and/or file lines.",
            self.counters.logged.load(Relaxed),
        );
        out.counter(
            "pcrf_decision_log_sampled_out_total",
            "Policy decisions of subscribers outside [decision_log].sample_percent (not logged).",
            self.counters.sampled_out.load(Relaxed),
        );
        out.counter(
            "pcrf_decision_log_dropped_total",
            "Decision log lines dropped because the file writer was behind.",
            self.file.as_ref().map_or(0, |f| f.dropped.load(Relaxed)),
        );
    }
}

/// Lines waiting for the file writer; a decision that finds the queue
/// full is dropped and counted, never waited for.
const FILE_QUEUE: usize = 4096;

/// The decision log's file: lines are handed to a writer thread through a
/// bounded channel, off the request path.
pub struct DecisionFile {
    lines: std::sync::mpsc::SyncSender<Vec<u8>>,
    /// Lines dropped because the writer was behind.
    pub dropped: std::sync::atomic::AtomicU64,
}

impl DecisionFile {
    /// Opens (appending) `cfg.file` and starts its writer.
    pub fn start(cfg: &DecisionLogConfig) -> Result<Option<DecisionFile>, String> {
        let Some(path) = cfg.file.clone() else {
            return Ok(None);
        };
        let mut file = RotatingFile::open(path, cfg.max_bytes, cfg.keep)?;
        let (lines, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(FILE_QUEUE);
        std::thread::Builder::new()
            .name("decision-log".into())
            .spawn(move || {
                for line in rx {
                    if let Err(e) = file.write_line(&line) {
                        tracing::warn!(error = %e, path = %file.path.display(), "decision log: write failed");
                    }
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(Some(DecisionFile {
            lines,
            dropped: Default::default(),
        }))
    }

    /// Queues one line (a newline is added); drops it when the writer is behind.
    pub fn write(&self, mut line: Vec<u8>) {
        line.push(b'\n');
        if self.lines.try_send(line).is_err() {
            self.dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

/// A file that is renamed `.1` (`.1` to `.2` and so on, the oldest past
/// `keep` overwritten) when the next line would take it past `max_bytes`.
struct RotatingFile {
    path: std::path::PathBuf,
    max_bytes: u64,
    keep: u32,
    file: std::fs::File,
    size: u64,
}

impl RotatingFile {
    fn open(path: std::path::PathBuf, max_bytes: u64, keep: u32) -> Result<RotatingFile, String> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(RotatingFile {
            path,
            max_bytes,
            keep,
            file,
            size,
        })
    }

    fn numbered(&self, n: u32) -> std::path::PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push(format!(".{n}"));
        name.into()
    }

    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        if self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        for n in (1..self.keep).rev() {
            let from = self.numbered(n);
            if from.exists() {
                std::fs::rename(&from, self.numbered(n + 1))?;
            }
        }
        std::fs::rename(&self.path, self.numbered(1))?;
        self.file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        self.size = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> DecisionLogConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn off_by_default_and_every_decision_once_on() {
        let c = cfg("");
        assert!(!c.enabled);
        assert_eq!(c.sample_percent, 100);
        assert!(c.problems().is_empty());
        assert!(c.selects("001010000000001", None));
        assert!(c.sampled_in("001010000000001"));
    }

    #[test]
    fn filters_by_subscriber_and_plan() {
        let c = cfg("enabled = true\nsubscribers = [\"a\", \"b\"]\nplans = [\"gold\"]");
        assert!(c.selects("a", Some("gold")));
        assert!(!c.selects("a", Some("basic")));
        assert!(!c.selects("a", None));
        assert!(!c.selects("c", Some("gold")));
    }

    #[test]
    fn sampling_is_stable_and_near_its_share() {
        let c = cfg("sample_percent = 30");
        let keys: Vec<String> = (0..10_000).map(|i| format!("00101{i:010}")).collect();
        let n = keys.iter().filter(|k| c.sampled_in(k)).count();
        assert!((2_500..3_500).contains(&n), "{n}");
        assert!(keys.iter().all(|k| c.sampled_in(k) == c.sampled_in(k)));
        let none = cfg("sample_percent = 0");
        assert!(keys.iter().all(|k| !none.sampled_in(k)));
    }

    #[test]
    fn problems_are_named() {
        let p = cfg(
            "enabled = true\nsample_percent = 101\nsubscribers = [\"\"]\nplans = [\"\"]\n\
             file = \"/nonexistent-pcrf-dir/decisions.jsonl\"",
        )
        .problems();
        let text = format!("{p:?}");
        assert!(text.contains("sample_percent"), "{text}");
        assert!(text.contains("subscribers"), "{text}");
        assert!(text.contains("plans"), "{text}");
        assert!(text.contains("[decision_log].file"), "{text}");
    }

    #[test]
    fn rotation_keeps_keep_files() {
        let dir = std::env::temp_dir().join(format!("pcrf-declog-rot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("decisions.jsonl");
        let mut f = RotatingFile::open(path.clone(), 100, 2).unwrap();
        for i in 0..10u8 {
            // 50 bytes a line: two a file.
            let mut line = vec![b'0' + i; 49];
            line.push(b'\n');
            f.write_line(&line).unwrap();
        }
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["decisions.jsonl", "decisions.jsonl.1", "decisions.jsonl.2"]
        );
        let text = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
        assert!(text(&path).starts_with("8"), "newest in the file");
        assert!(text(&dir.join("decisions.jsonl.1")).starts_with("6"));
        assert!(text(&dir.join("decisions.jsonl.2")).starts_with("4"));
        assert_eq!(text(&path).len(), 100);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
