//! The `[store]` section of the configuration: which store, where, and how
//! durable a commit is. Embedded by the config module; `open_store` turns it
//! into a `Store`.

use serde::Deserialize;
use std::path::PathBuf;

/// Which store implementation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// Embedded SQLite in `path` (no database server needed).
    #[default]
    Sqlite,
}

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
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::default(),
            path: default_path(),
            durability: Durability::default(),
            queue_depth: default_queue_depth(),
            max_size_mb: None,
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
        Ok(())
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
    fn refuses_unknown_values() {
        assert!(toml::from_str::<StoreConfig>("durability = \"fast\"").is_err());
        assert!(toml::from_str::<StoreConfig>("kind = \"oracle\"").is_err());
        assert!(toml::from_str::<StoreConfig>("paht = \"x\"").is_err());
        let c: StoreConfig = toml::from_str("queue_depth = 0").expect("parses");
        assert!(c.validate().is_err());
    }
}
