//! The usage file (Monitoring-Keys, accumulators, plans) as a versioned
//! artifact of the store, beside the policy's versions
//! (`policy::versions`): every change (through the API, a rollback, an
//! edited file) is checked, recorded as the next version (who, when, why,
//! the version it replaced) and only then put in force. The newest stored
//! version is the one every node counts by: a node on a shared store
//! adopts a newer one after the same check (`cluster::version_feed`), or
//! keeps its own and says why (`refused`).
//!
//! The check is the reload check of `UsageConfig`: the text must parse
//! and validate, and it must not orphan a grant an open session holds (a
//! key removed, or no longer feeding any accumulator, while PCEFs still
//! report it). Each node checks against its own sessions, so one node may
//! refuse what another adopted; it says so until its sessions let go.
//!
//! The usage file stays a way to deploy and is rewritten with each
//! version put in force, so it always holds what counts.

use super::config::UsageConfig;
use crate::metrics::{Exposition, MetricsSource};
use crate::store::versions::{NewVersion, Refusal, StoredVersion, VersionStore, USAGE};
use crate::store::StoreError;
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
use std::sync::Arc;

/// Why a change of the usage file did not happen.
#[derive(Debug, thiserror::Error)]
pub enum UsageDeployError {
    /// The text does not validate, or would orphan running grants.
    #[error("{0}")]
    Refused(String),
    /// Another version was recorded first (on this or another node).
    #[error("usage file version {0} was deployed meanwhile; deploy again on top of it")]
    Conflict(i64),
    #[error("no usage file version {0}")]
    NotFound(i64),
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// What a version is checked against and put in force on: the usage file
/// in force and the grants open sessions hold (the node; a stand-in at
/// start-up, before the node exists).
pub trait UsageHost {
    /// The usage file in force.
    fn in_force(&self) -> Arc<UsageConfig>;
    /// Per Monitoring-Key, the open sessions holding a grant for it.
    fn granted_keys(&self) -> BTreeMap<String, usize>;
    /// Puts a checked usage file in force.
    fn put_in_force(&self, config: UsageConfig);
}

/// The usage file's versions, and which one is in force here.
pub struct UsageVersions {
    store: Arc<dyn VersionStore>,
    /// The usage file (`[usage].path`), rewritten with each version put
    /// in force.
    file: PathBuf,
    /// The stored version in force; 0 while none is (no usage file, and
    /// none deployed).
    serving: AtomicI64,
    refused: RwLock<Option<Refusal>>,
    /// One change or adoption at a time on this node.
    deploying: Mutex<()>,
}

/// The hash a version is recorded with: the usage file's checksum (xxh3
/// of its bytes), as `GET /v1/subscribers/{imsi}/usage` shows it.
fn hash_of(text: &str) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// The host at start-up: the file's configuration, the grants of the
/// sessions recovered from the store.
struct StartUp {
    config: Mutex<Arc<UsageConfig>>,
    granted: BTreeMap<String, usize>,
}

impl UsageHost for StartUp {
    fn in_force(&self) -> Arc<UsageConfig> {
        self.config.lock().clone()
    }
    fn granted_keys(&self) -> BTreeMap<String, usize> {
        self.granted.clone()
    }
    fn put_in_force(&self, config: UsageConfig) {
        *self.config.lock() = Arc::new(config);
    }
}

impl UsageVersions {
    /// Puts the usage file loaded at start-up (`loaded`; `text` is its
    /// content, none when there is no file) in step with the store, and
    /// returns the configuration to count by. An empty store takes the
    /// file as version 1. A file some stored version holds is stale (this
    /// node was stopped while others deployed): the newest version
    /// replaces it. A file no version holds was edited: it becomes the
    /// next version, or, if its check fails, the newest version counts.
    /// `granted` is what the recovered sessions hold.
    pub fn start(
        store: Arc<dyn VersionStore>,
        file: PathBuf,
        loaded: UsageConfig,
        text: Option<String>,
        granted: BTreeMap<String, usize>,
    ) -> Result<(Arc<UsageVersions>, UsageConfig), UsageDeployError> {
        let v = Arc::new(UsageVersions {
            store,
            file,
            serving: AtomicI64::new(0),
            refused: RwLock::new(None),
            deploying: Mutex::new(()),
        });
        let host = StartUp {
            config: Mutex::new(Arc::new(loaded)),
            granted,
        };
        let file_hash = text.as_deref().map(hash_of);
        match (v.store.latest(USAGE)?, text) {
            (None, None) => {}
            (None, Some(text)) => {
                match v.deploy(&host, text, "file", "the usage file at first start-up") {
                    Ok(_) => {}
                    // Another node of a new cluster recorded its file first.
                    Err(UsageDeployError::Conflict(_)) => {
                        if let Some(latest) = v.store.latest(USAGE)? {
                            v.adopt(&host, latest);
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
            (Some(latest), _) if Some(&latest.hash) == file_hash.as_ref() => {
                v.serving.store(latest.id, Relaxed);
            }
            (Some(latest), Some(text))
                if !v
                    .store
                    .has_hash(USAGE, file_hash.as_deref().unwrap_or(""))? =>
            {
                match v.deploy(&host, text, "file", "the usage file edited while stopped") {
                    Ok(_) => {}
                    Err(UsageDeployError::Refused(e)) => {
                        tracing::error!(error = %e, version = latest.id, "the edited usage file is refused; the newest stored version counts");
                        v.adopt(&host, latest);
                    }
                    Err(e) => return Err(e),
                }
            }
            (Some(latest), _) => {
                tracing::info!(
                    version = latest.id,
                    "the usage file is absent or holds an older version; the newest stored version counts"
                );
                if !v.adopt(&host, latest) {
                    // Refused here: the file counts, as the version that
                    // holds it.
                    let held = v
                        .store
                        .list(USAGE, None, usize::MAX)?
                        .into_iter()
                        .find(|s| Some(&s.hash) == file_hash.as_ref());
                    v.serving.store(held.map_or(0, |s| s.id), Relaxed);
                }
            }
        }
        let config = host.config.into_inner();
        Ok((v, Arc::unwrap_or_clone(config)))
    }

    /// `start` with the usage file read here and no session holding a
    /// grant (a node built on an empty store: tests, benchmarks, fuzzing).
    pub fn start_from_file(
        store: Arc<dyn VersionStore>,
        file: PathBuf,
    ) -> Result<(Arc<UsageVersions>, UsageConfig), UsageDeployError> {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| UsageDeployError::Refused(format!("{}: {e}", file.display())))?;
        let loaded = UsageConfig::parse(&text, &file.display().to_string())
            .map_err(|e| UsageDeployError::Refused(e.to_string()))?;
        Self::start(store, file, loaded, Some(text), BTreeMap::new())
    }

    /// The stored version in force here; 0 while none is.
    pub fn serving(&self) -> i64 {
        self.serving.load(Relaxed)
    }

    /// The newest version this node refused, while it is the newest.
    pub fn refused(&self) -> Option<Refusal> {
        self.refused.read().clone()
    }

    /// The usage file this node rewrites.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Parses and validates `text`, and checks it against the grants the
    /// open sessions hold.
    fn check(host: &dyn UsageHost, text: &str, origin: &str) -> Result<UsageConfig, String> {
        let config = UsageConfig::parse(text, origin).map_err(|e| e.to_string())?;
        config.check_reload(&host.in_force(), &host.granted_keys())?;
        Ok(config)
    }

    /// Checks `text`, records it as the version after the newest, and
    /// puts it in force. The text in force already is not recorded again:
    /// its version is returned.
    pub fn deploy(
        &self,
        host: &dyn UsageHost,
        text: String,
        by: &str,
        comment: &str,
    ) -> Result<StoredVersion, UsageDeployError> {
        let _one = self.deploying.lock();
        let hash = hash_of(&text);
        let latest = self.store.latest(USAGE)?;
        if let Some(l) = latest.as_ref().filter(|l| {
            l.hash == hash && l.id == self.serving() && host.in_force().checksum_hex() == hash
        }) {
            return Ok(l.clone());
        }
        let origin = self.file.display().to_string();
        let config = Self::check(host, &text, &origin).map_err(UsageDeployError::Refused)?;
        let new = NewVersion {
            artifact: USAGE,
            parent: latest.map(|l| l.id),
            hash: &hash,
            by,
            at_ms: now_ms(),
            comment,
            content: text.as_bytes(),
        };
        let Some(stored) = self.store.append(&new)? else {
            return Err(UsageDeployError::Conflict(new.id()));
        };
        tracing::info!(
            version = stored.id,
            checksum = hash,
            by,
            comment,
            "usage file version recorded"
        );
        self.install(host, &stored, config);
        Ok(stored)
    }

    /// Deploys version `id`'s text again, as a new version whose parent
    /// is the newest; checked as any deployment.
    pub fn rollback(
        &self,
        host: &dyn UsageHost,
        id: i64,
        by: &str,
    ) -> Result<StoredVersion, UsageDeployError> {
        let old = self
            .store
            .get(USAGE, id)?
            .ok_or(UsageDeployError::NotFound(id))?;
        let text = String::from_utf8(old.content).map_err(|_| {
            UsageDeployError::Refused(format!("usage file version {id} is not UTF-8 text"))
        })?;
        self.deploy(host, text, by, &format!("rollback to version {id}"))
    }

    /// Deploys the usage file's text if it differs from what is in force
    /// (the file watcher, SIGHUP). Returns the version in force.
    pub fn reload_file(&self, host: &dyn UsageHost) -> Result<i64, UsageDeployError> {
        if self.serving() == 0 && !self.file.exists() {
            // Usage monitoring is off: no file, none deployed.
            return Ok(0);
        }
        let text = std::fs::read(&self.file)
            .map_err(|e| format!("{}: cannot read: {e}", self.file.display()))
            .and_then(|b| {
                String::from_utf8(b)
                    .map_err(|e| format!("{}: not valid UTF-8: {e}", self.file.display()))
            })
            .map_err(UsageDeployError::Refused)?;
        if hash_of(&text) == host.in_force().checksum_hex() {
            // Unchanged (or this node's own rewrite of it).
            return Ok(self.serving());
        }
        match self.deploy(host, text, "file", "the usage file changed") {
            Ok(v) => Ok(v.id),
            Err(e) => {
                tracing::error!(file = %self.file.display(), "usage file reload refused, the running one stays:\n{e}");
                Err(e)
            }
        }
    }

    /// Adopts the newest stored version if it is not in force here yet
    /// (another node deployed it): checked as a deployment, put in force,
    /// or refused with the reason kept for `GET /v1/cluster` (a refused
    /// version is checked again only when a newer one comes). Returns
    /// whether what counts changed.
    pub fn adopt_newest(&self, host: &dyn UsageHost) -> Result<bool, StoreError> {
        let _one = self.deploying.lock();
        let Some(latest) = self.store.latest(USAGE)? else {
            return Ok(false);
        };
        if latest.id == self.serving() || self.refused().is_some_and(|r| r.version == latest.id) {
            return Ok(false);
        }
        Ok(self.adopt_locked(host, latest))
    }

    fn adopt(&self, host: &dyn UsageHost, latest: StoredVersion) -> bool {
        let _one = self.deploying.lock();
        self.adopt_locked(host, latest)
    }

    /// `adopt`, with `deploying` held.
    fn adopt_locked(&self, host: &dyn UsageHost, latest: StoredVersion) -> bool {
        let id = latest.id;
        let text = String::from_utf8_lossy(&latest.content).into_owned();
        match Self::check(host, &text, &format!("usage file version {id}")) {
            Ok(config) => {
                self.install(host, &latest, config);
                tracing::info!(version = id, "usage file version adopted");
                true
            }
            Err(reason) => {
                tracing::error!(version = id, serving = self.serving(), error = %reason, "usage file version refused here; this node keeps its version");
                *self.refused.write() = Some(Refusal {
                    version: id,
                    reason,
                });
                false
            }
        }
    }

    /// Puts `v` (checked: `config`) in force and rewrites the usage file.
    fn install(&self, host: &dyn UsageHost, v: &StoredVersion, config: UsageConfig) {
        host.put_in_force(config);
        self.serving.store(v.id, Relaxed);
        *self.refused.write() = None;
        self.write_file(&v.content);
    }

    /// Replaces the usage file's content by `content` (written beside it,
    /// then renamed over it) when it differs. A failure is logged: the
    /// store holds the version, the file only mirrors it.
    fn write_file(&self, content: &[u8]) {
        if std::fs::read(&self.file).is_ok_and(|old| old == content) {
            return;
        }
        let mut part = self.file.clone().into_os_string();
        part.push(".part");
        let part = PathBuf::from(part);
        let written =
            std::fs::write(&part, content).and_then(|()| std::fs::rename(&part, &self.file));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&part);
            tracing::warn!(file = %self.file.display(), error = %e, "cannot rewrite the usage file with the version in force; the store keeps it");
        }
    }

    /// Up to `limit` versions before `before`, newest first, without text.
    pub fn list(
        &self,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<StoredVersion>, StoreError> {
        self.store.list(USAGE, before, limit)
    }

    /// One version with its text.
    pub fn get(&self, id: i64) -> Result<Option<StoredVersion>, StoreError> {
        self.store.get(USAGE, id)
    }
}

impl MetricsSource for UsageVersions {
    fn write(&self, out: &mut Exposition) {
        out.gauge(
            "pcrf_usage_version",
            "The stored usage file version this node counts by (GET /v1/usage/versions); 0 when none.",
            u64::try_from(self.serving()).unwrap_or(0),
        );
        out.gauge(
            "pcrf_usage_version_refused",
            "1 while this node refuses the newest stored usage file version (it keeps its own; GET /v1/cluster says why).",
            u64::from(self.refused.read().is_some()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SqliteVersions;

    const V1: &str = "[keys.web]\nlevel = \"session\"\nchunk = \"10 MB\"\n\
        [accumulators.monthly]\nreset = \"monthly\"\nsources = [\"web\"]\n";
    const V2: &str = "[keys.web]\nlevel = \"session\"\nchunk = \"10 MB\"\n\
        [keys.video]\nlevel = \"rule\"\nchunk = \"10 MB\"\n\
        [accumulators.monthly]\nreset = \"monthly\"\nsources = [\"web\", \"video\"]\n";
    /// V2 without the key "web".
    const NO_WEB: &str = "[keys.video]\nlevel = \"rule\"\nchunk = \"10 MB\"\n\
        [accumulators.monthly]\nreset = \"monthly\"\nsources = [\"video\"]\n";

    struct Host {
        config: Mutex<Arc<UsageConfig>>,
        granted: Mutex<BTreeMap<String, usize>>,
    }

    impl UsageHost for Host {
        fn in_force(&self) -> Arc<UsageConfig> {
            self.config.lock().clone()
        }
        fn granted_keys(&self) -> BTreeMap<String, usize> {
            self.granted.lock().clone()
        }
        fn put_in_force(&self, config: UsageConfig) {
            *self.config.lock() = Arc::new(config);
        }
    }

    fn host(config: UsageConfig) -> Host {
        Host {
            config: Mutex::new(Arc::new(config)),
            granted: Mutex::new(BTreeMap::new()),
        }
    }

    fn parse(text: &str) -> UsageConfig {
        UsageConfig::parse(text, "test").expect("valid usage file")
    }

    struct Dir(PathBuf);
    impl Dir {
        fn new(tag: &str) -> Dir {
            let d = std::env::temp_dir()
                .join(format!("pcrf-usage-versions-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).expect("dir");
            Dir(d)
        }
        fn file(&self) -> PathBuf {
            self.0.join("usage.toml")
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn start(
        store: &Arc<SqliteVersions>,
        d: &Dir,
        granted: BTreeMap<String, usize>,
    ) -> (Arc<UsageVersions>, UsageConfig) {
        let text = std::fs::read_to_string(d.file()).ok();
        let loaded = text.as_deref().map_or_else(UsageConfig::empty, parse);
        UsageVersions::start(store.clone(), d.file(), loaded, text, granted).expect("start")
    }

    #[test]
    fn changes_are_numbered_checked_against_grants_and_rolled_back() {
        let d = Dir::new("deploy");
        std::fs::write(d.file(), V1).expect("file");
        let store = Arc::new(SqliteVersions::in_memory().expect("store"));
        let (v, config) = start(&store, &d, BTreeMap::new());
        assert_eq!(v.serving(), 1, "the file is version 1");
        let h = host(config);
        let two = v.deploy(&h, V2.into(), "token", "video").expect("deploy");
        assert_eq!((two.id, two.parent), (2, Some(1)));
        assert!(h.in_force().key("video").is_some(), "in force at once");
        assert_eq!(
            std::fs::read_to_string(d.file()).expect("file"),
            V2,
            "the file follows"
        );
        // The same text again records nothing.
        assert_eq!(v.deploy(&h, V2.into(), "token", "").expect("same").id, 2);

        // A session holds a grant for "web": removing it is refused.
        h.granted.lock().insert("web".into(), 1);
        let e = v
            .deploy(&h, NO_WEB.into(), "token", "drop web")
            .expect_err("orphans a grant");
        assert!(
            matches!(&e, UsageDeployError::Refused(m) if m.contains("\"web\"")),
            "{e}"
        );
        assert_eq!(v.serving(), 2);
        let e = v
            .deploy(&h, "[keys.web\n".into(), "token", "")
            .expect_err("syntax");
        assert!(matches!(e, UsageDeployError::Refused(_)));
        assert_eq!(
            store.list(USAGE, None, 10).expect("list").len(),
            2,
            "refusals are not recorded"
        );

        h.granted.lock().clear();
        let back = v.rollback(&h, 1, "token").expect("rollback");
        assert_eq!(
            (back.id, back.parent, back.hash.as_str()),
            (3, Some(2), hash_of(V1).as_str())
        );
        assert!(h.in_force().key("video").is_none());
        assert_eq!(std::fs::read_to_string(d.file()).expect("file"), V1);
        assert!(matches!(
            v.rollback(&h, 9, "token"),
            Err(UsageDeployError::NotFound(9))
        ));
    }

    #[test]
    fn start_up_takes_the_newest_for_a_stale_or_absent_file_and_records_an_edited_one() {
        let d = Dir::new("start");
        std::fs::write(d.file(), V1).expect("file");
        let store = Arc::new(SqliteVersions::in_memory().expect("store"));
        let (v, config) = start(&store, &d, BTreeMap::new());
        v.deploy(&host(config), V2.into(), "token", "").expect("v2");
        // Stopped while the file still held version 1.
        std::fs::write(d.file(), V1).expect("stale");
        let (v, config) = start(&store, &d, BTreeMap::new());
        assert_eq!(v.serving(), 2);
        assert!(config.key("video").is_some());
        assert_eq!(std::fs::read_to_string(d.file()).expect("file"), V2);
        // No file at all: the newest version counts, and the file is written.
        std::fs::remove_file(d.file()).expect("rm");
        let (v, config) = start(&store, &d, BTreeMap::new());
        assert_eq!((v.serving(), config.checksum_hex()), (2, hash_of(V2)));
        assert_eq!(std::fs::read_to_string(d.file()).expect("file"), V2);
        // Edited while stopped: the next version, by "file".
        std::fs::write(d.file(), NO_WEB).expect("edit");
        let (v, _) = start(&store, &d, BTreeMap::new());
        let newest = store.latest(USAGE).expect("latest").expect("some");
        assert_eq!((v.serving(), newest.by.as_str()), (3, "file"));
        // Edited again, but recovered sessions hold "video", which it drops:
        // refused, and version 3 counts.
        std::fs::write(d.file(), V1).expect("edit");
        let granted = BTreeMap::from([("video".to_string(), 2)]);
        let (v, config) = start(&store, &d, granted);
        assert_eq!(v.serving(), 3);
        assert!(config.key("video").is_some());
    }

    #[test]
    fn a_node_adopts_another_nodes_version_or_says_why_not() {
        let (da, db) = (Dir::new("node-a"), Dir::new("node-b"));
        std::fs::write(da.file(), V2).expect("file");
        std::fs::write(db.file(), V2).expect("file");
        let store = Arc::new(SqliteVersions::in_memory().expect("store"));
        let (a, config_a) = start(&store, &da, BTreeMap::new());
        let (b, config_b) = start(&store, &db, BTreeMap::new());
        let (ha, hb) = (host(config_a), host(config_b));
        assert_eq!((a.serving(), b.serving()), (1, 1));
        assert!(!b.adopt_newest(&hb).expect("nothing new"));

        // B's sessions hold "web"; A drops it.
        hb.granted.lock().insert("web".into(), 3);
        a.deploy(&ha, NO_WEB.into(), "token", "drop web")
            .expect("deploy on a");
        assert!(!b.adopt_newest(&hb).expect("refused"));
        let refusal = b.refused().expect("says why");
        assert_eq!(refusal.version, 2);
        assert!(
            refusal.reason.contains("3 sessions hold a grant"),
            "{}",
            refusal.reason
        );
        assert_eq!(b.serving(), 1);
        assert!(hb.in_force().key("web").is_some(), "B keeps its own");

        // A newer version B can take.
        a.deploy(&ha, V2.into(), "token", "web again").expect("v3");
        assert!(b.adopt_newest(&hb).expect("adopted"));
        assert_eq!((b.serving(), b.refused()), (3, None));
        assert_eq!(std::fs::read_to_string(db.file()).expect("file"), V2);
    }
}
