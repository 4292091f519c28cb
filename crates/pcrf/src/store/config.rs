//! The `[store]` section of the configuration: which store, where, and how
//! durable a commit is. Embedded by the config module; `open_shards` turns it
//! into a `Store`.

use crate::store::postgres::PostgresOptions;
use crate::store::shard::MAX_SHARDS;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// Which store implementation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// Embedded SQLite in `path` (no database server needed).
    #[default]
    Sqlite,
    /// PostgreSQL (or CockroachDB/YugabyteDB) at `url`.
    Postgres,
}

/// Overrides `store.url` (keeps the password out of the config file).
pub const DATABASE_URL_ENV: &str = "PCRF_DATABASE_URL";

/// How durable an acknowledged change is. The answer to the PCEF always
/// leaves after the commit; this only says what the commit survives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Durability {
    /// Every commit is on stable storage before it is acknowledged
    /// (SQLite `synchronous=FULL`): survives process crash, OS crash and
    /// power loss.
    #[default]
    Full,
    /// Commits reach the OS before they are acknowledged and the disk at
    /// the next checkpoint (SQLite `synchronous=NORMAL` in WAL mode):
    /// survives a process crash (`kill -9`), but an OS crash or power loss
    /// may lose the changes acknowledged since the last checkpoint.
    Relaxed,
}

impl Durability {
    /// What this mode risks, in words for the start-up log.
    pub fn risk(self) -> &'static str {
        match self {
            Durability::Full => {
                "full: acknowledged changes survive process crash, OS crash and power loss"
            }
            Durability::Relaxed => {
                "relaxed: acknowledged changes survive a process crash, but an OS crash or \
                 power loss may lose those acknowledged since the last WAL checkpoint"
            }
        }
    }
}

fn default_path() -> PathBuf {
    PathBuf::from("./pcrf-data")
}

fn default_queue_depth() -> usize {
    crate::store::group_commit::GroupCommitOptions::default().queue_depth
}

/// `[store]`: `kind = "sqlite"`, `path = "./pcrf-data"`, `durability = "full"`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    #[serde(default)]
    pub kind: StoreKind,
    /// Directory of the embedded database (created if missing).
    #[serde(default = "default_path")]
    pub path: PathBuf,
    #[serde(default)]
    pub durability: Durability,
    /// Requests waiting for the writer before `submit` waits too
    /// (backpressure).
    #[serde(default = "default_queue_depth")]
    pub queue_depth: usize,
    /// Cap on the database size: past it writes fail (answered 5012) instead
    /// of filling a disk shared with logs. None: limited by the disk only.
    #[serde(default)]
    pub max_size_mb: Option<u64>,
    /// `kind = "postgres"`: the connection URL (PCRF_DATABASE_URL wins).
    #[serde(default)]
    pub url: Option<String>,
    /// `kind = "postgres"`: each connection is replaced after a random
    /// lifetime in this window, so servers never reconnect together.
    #[serde(default = "default_lifetime_min_secs")]
    pub lifetime_min_secs: u64,
    #[serde(default = "default_lifetime_max_secs")]
    pub lifetime_max_secs: u64,
    /// `kind = "postgres"`: bound on connecting and on each batch; past it
    /// the requests waiting on the write are answered 5012.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Group-commit window, µs: once a change arrives within this long of
    /// the previous commit (under load), the writer waits up to this long
    /// for more before committing (PostgreSQL's commit_delay, on our side);
    /// a change that comes alone is committed at once. 0: commit what is
    /// queued at once. Fewer commits per transaction, for up to this much
    /// more latency per answer. Unset: the kind's default (`commit_window`).
    #[serde(default)]
    pub commit_window_us: Option<u64>,
    /// Shards of the store, each with its own writer (and, for SQLite, its
    /// own database file): durable writes run in parallel. A subscriber's
    /// rows always land in one shard. Unset: the available cores.
    #[serde(default)]
    pub writers: Option<usize>,
    /// `pcrf serve --accept-missing-shards`, never from the file: the
    /// operator knows the embedded store's files are not one whole store
    /// (one deleted, one of another store) and starts on the rows that
    /// remain. A key in the file would go on accepting the next loss too.
    #[serde(skip)]
    pub accept_missing_shards: bool,
}

/// The window PostgreSQL gets unless configured: a commit there is a round
/// trip and a WAL flush in another process, ~0.4 ms of the server's CPU
/// each at 3000 TPS; 2 ms cut commits per 100 transactions from 43 to
/// 9.5 and PCRF + PostgreSQL CPU per transaction by about half, for up to
/// 2 ms per answer, with no less zero-loss throughput (BENCHMARKS.md).
pub const POSTGRES_COMMIT_WINDOW_US: u64 = 2_000;

/// The window the embedded store gets unless configured. Its commit is
/// in-process, but each is an fsync per shard: at 3000 TPS on the seed
/// scenario 500 µs took commits per 100 transactions from 88 to 60 and
/// the server's CPU per transaction down 5-13%, for +0.45 ms of median
/// (p99 unchanged), and the zero-loss rate up by a median 10% over three
/// alternated searches (bench/notes/2026-11-29-embedded-commit-window.md).
/// Under light load it costs nothing: the window opens only when changes
/// come close together.
pub const SQLITE_COMMIT_WINDOW_US: u64 = 500;

/// The longest group-commit window accepted: past it answers would wait
/// longer than a PCEF's usual Tx timer allows.
pub const MAX_COMMIT_WINDOW_US: u64 = 100_000;

// The connection's defaults are PostgresOptions' own, written once there.
fn default_lifetime_min_secs() -> u64 {
    PostgresOptions::new("").lifetime_min.as_secs()
}

fn default_lifetime_max_secs() -> u64 {
    PostgresOptions::new("").lifetime_max.as_secs()
}

fn default_timeout_ms() -> u64 {
    u64::try_from(PostgresOptions::new("").timeout.as_millis()).unwrap_or(u64::MAX)
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::default(),
            path: default_path(),
            durability: Durability::default(),
            queue_depth: default_queue_depth(),
            max_size_mb: None,
            url: None,
            lifetime_min_secs: default_lifetime_min_secs(),
            lifetime_max_secs: default_lifetime_max_secs(),
            timeout_ms: default_timeout_ms(),
            commit_window_us: None,
            writers: None,
            accept_missing_shards: false,
        }
    }
}

impl StoreConfig {
    /// Checks values serde cannot; the config module reports the message.
    pub fn validate(&self) -> Result<(), String> {
        if self.queue_depth == 0 {
            return Err("store.queue_depth must be at least 1".into());
        }
        if self.path.as_os_str().is_empty() {
            return Err("store.path must not be empty".into());
        }
        if self.commit_window_us.unwrap_or(0) > MAX_COMMIT_WINDOW_US {
            return Err(format!(
                "store.commit_window_us must be at most {MAX_COMMIT_WINDOW_US} (100 ms)"
            ));
        }
        if let Some(n) = self.writers {
            if !(1..=MAX_SHARDS).contains(&n) {
                return Err(format!("store.writers must be from 1 to {MAX_SHARDS}"));
            }
        }
        if self.kind == StoreKind::Postgres {
            self.postgres_options().map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// The number of shards and writers: the configured one, else the
    /// available cores (at least 1, at most `MAX_SHARDS`).
    pub fn writers(&self) -> usize {
        self.writers
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(1)
            })
            .clamp(1, MAX_SHARDS)
    }

    /// The group-commit window: the configured one, else the kind's.
    pub fn commit_window(&self) -> Duration {
        Duration::from_micros(self.commit_window_us.unwrap_or(match self.kind {
            StoreKind::Postgres => POSTGRES_COMMIT_WINDOW_US,
            StoreKind::Sqlite => SQLITE_COMMIT_WINDOW_US,
        }))
    }

    /// The PostgreSQL URL: PCRF_DATABASE_URL if set, else `store.url`.
    pub fn database_url(&self) -> Option<String> {
        std::env::var(DATABASE_URL_ENV)
            .ok()
            .filter(|u| !u.is_empty())
            .or_else(|| self.url.clone())
    }

    /// The PostgreSQL store's options from this section.
    pub fn postgres_options(
        &self,
    ) -> Result<crate::store::postgres::PostgresOptions, crate::store::StoreError> {
        use crate::store::StoreError;
        use std::time::Duration;
        let url = self.database_url().ok_or_else(|| {
            StoreError::Unavailable(format!(
                "store.kind = \"postgres\" needs store.url or {DATABASE_URL_ENV}"
            ))
        })?;
        if self.lifetime_min_secs == 0 || self.lifetime_max_secs < self.lifetime_min_secs {
            return Err(StoreError::Unavailable(
                "store.lifetime_min_secs must be at least 1 and at most store.lifetime_max_secs"
                    .into(),
            ));
        }
        if self.timeout_ms == 0 {
            return Err(StoreError::Unavailable(
                "store.timeout_ms must be at least 1".into(),
            ));
        }
        let mut o = PostgresOptions::new(url);
        o.lifetime_min = Duration::from_secs(self.lifetime_min_secs);
        o.lifetime_max = Duration::from_secs(self.lifetime_max_secs);
        o.timeout = Duration::from_millis(self.timeout_ms);
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_parsing() {
        let c: StoreConfig = toml::from_str("").expect("empty section");
        assert_eq!(c, StoreConfig::default());
        assert_eq!(c.path, PathBuf::from("./pcrf-data"));
        assert_eq!(c.durability, Durability::Full);
        let c: StoreConfig =
            toml::from_str("kind = \"sqlite\"\npath = \"/var/lib/pcrf\"\ndurability = \"relaxed\"")
                .expect("full section");
        assert_eq!(c.durability, Durability::Relaxed);
        assert_eq!(c.path, PathBuf::from("/var/lib/pcrf"));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn the_commit_window_defaults_by_kind_and_yields_to_the_file() {
        let window = |toml_text: &str| {
            toml::from_str::<StoreConfig>(toml_text)
                .expect("parses")
                .commit_window()
        };
        assert_eq!(window(""), Duration::from_micros(500));
        assert_eq!(
            window("kind = \"sqlite\"\ncommit_window_us = 0"),
            Duration::ZERO
        );
        assert_eq!(window("kind = \"postgres\""), Duration::from_millis(2));
        assert_eq!(
            window("kind = \"postgres\"\ncommit_window_us = 0"),
            Duration::ZERO
        );
        assert_eq!(
            window("kind = \"sqlite\"\ncommit_window_us = 500"),
            Duration::from_micros(500)
        );
        let c: StoreConfig = toml::from_str("commit_window_us = 100001").expect("parses");
        assert!(c.validate().is_err());
    }

    #[test]
    fn refuses_unknown_values() {
        assert!(toml::from_str::<StoreConfig>("durability = \"fast\"").is_err());
        assert!(toml::from_str::<StoreConfig>("kind = \"oracle\"").is_err());
        assert!(toml::from_str::<StoreConfig>("paht = \"x\"").is_err());
        let c: StoreConfig = toml::from_str("queue_depth = 0").expect("parses");
        assert!(c.validate().is_err());
        let c: StoreConfig = toml::from_str("writers = 0").expect("parses");
        assert!(c.validate().is_err());
        let c: StoreConfig = toml::from_str("writers = 65").expect("parses");
        assert!(c.validate().is_err());
    }

    #[test]
    fn writers_default_to_the_cores_and_yield_to_the_file() {
        let c: StoreConfig = toml::from_str("writers = 3").expect("parses");
        assert!(c.validate().is_ok());
        assert_eq!(c.writers(), 3);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert_eq!(StoreConfig::default().writers(), cores.clamp(1, MAX_SHARDS));
    }
}
