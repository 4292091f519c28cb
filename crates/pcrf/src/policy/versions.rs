//! The policy as a versioned artifact of the store: every deployment
//! (through the API, a rollback, an edited policy file) is checked —
//! compiled, the built-in sample inputs, the test cases beside the script
//! — then recorded as the next version (who, when, why, the version it
//! replaced) and only then installed. The newest stored version is the
//! one every node serves: a node on a shared store adopts a newer one
//! after the same checks (`cluster::version_feed`), or keeps its own and
//! says why (`refused`). The policy file stays a way to deploy and is
//! rewritten with each version installed, so the file always holds what
//! serves.

use super::cases;
use super::engine::PolicyEngine;
use super::error::PolicyError;
use super::rollout::{Rollout, ROLLOUT};
use crate::file_watch::{watch_file, WatcherGuard};
use crate::metrics::{Exposition, Kind, MetricsSource};
pub use crate::store::versions::Refusal;
use crate::store::versions::{NewVersion, StoredVersion, VersionStore, POLICY};
use crate::store::StoreError;
use parking_lot::{Mutex, RwLock};
use std::sync::Arc;

/// Why a deployment did not happen.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The script does not load, or fails its sample inputs or test cases.
    #[error("{0}")]
    Refused(PolicyError),
    /// Another deployment was recorded first (on this or another node).
    #[error("version {0} was deployed meanwhile; deploy again on top of it")]
    Conflict(i64),
    /// No such version.
    #[error("no policy version {0}")]
    NotFound(i64),
    /// The request itself is wrong (a share outside 0..100, ...).
    #[error("{0}")]
    Invalid(String),
    /// A rollout runs already: promote or abort it first.
    #[error("the rollout of version {0} is running; promote or abort it first")]
    RolloutRunning(i64),
    /// Widen, promote or abort without a rollout.
    #[error("no policy rollout is running")]
    NoRollout,
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// The policy's versions and the engine that serves one of them.
pub struct PolicyVersions {
    engine: Arc<PolicyEngine>,
    store: Arc<dyn VersionStore>,
    /// One deployment, file reload or adoption at a time on this node.
    deploying: Mutex<()>,
    refused: RwLock<Option<Refusal>>,
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

fn hash_of(source: &str) -> String {
    format!("{:016x}", super::memo::script_version(source))
}

impl PolicyVersions {
    /// Puts the engine (loaded from the policy file) in step with the
    /// store. An empty store takes the file as version 1. A file whose
    /// text some stored version holds is stale (this node was stopped
    /// while others deployed): the newest version replaces it. A file no
    /// version holds was edited: it is deployed as the next version (by
    /// "file"), or, if its checks fail, the newest version serves.
    pub fn start(
        engine: Arc<PolicyEngine>,
        store: Arc<dyn VersionStore>,
    ) -> Result<Arc<PolicyVersions>, DeployError> {
        let v = Arc::new(PolicyVersions {
            engine,
            store,
            deploying: Mutex::new(()),
            refused: RwLock::new(None),
        });
        let source = v.engine.source().to_string();
        let hash = hash_of(&source);
        let newest = match v.store.latest(POLICY)? {
            None => match v.deploy(source.clone(), "file", "the policy file at first start-up") {
                Ok(_) => return Ok(v),
                // Another node of a new cluster recorded its file first.
                Err(DeployError::Conflict(_)) => v.store.latest(POLICY)?,
                Err(e) => return Err(e),
            },
            some => some,
        };
        // While a rollout runs the newest version is its canary: the
        // stable one is what the file holds and everyone else is served.
        let newest = match v.running_rollout()? {
            Some(r) => v.store.get(POLICY, r.stable)?,
            None => newest,
        };
        match newest {
            None => return Err(DeployError::Conflict(1)),
            Some(latest) if latest.hash == hash => {
                v.install(latest)?;
            }
            Some(latest) => {
                if v.store.has_hash(POLICY, &hash)? {
                    tracing::info!(
                        version = latest.id,
                        "the policy file holds an older version; the newest stored version serves"
                    );
                    v.adopt(latest);
                } else {
                    match v.deploy(source, "file", "the policy file edited while stopped") {
                        Ok(_) => {}
                        Err(DeployError::Refused(e)) => {
                            tracing::error!(error = %e, version = latest.id, "the edited policy file is refused; the newest stored version serves");
                            v.adopt(latest);
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        if let Some(r) = v.running_rollout()? {
            if r.stable == v.serving() {
                let _one = v.deploying.lock();
                v.adopt_canary(r);
            }
        }
        Ok(v)
    }

    /// The rollout the store says runs: the newest rollout record, while
    /// it runs and its canary is the newest version.
    fn running_rollout(&self) -> Result<Option<Rollout>, StoreError> {
        let Some(record) = self.store.latest(ROLLOUT)? else {
            return Ok(None);
        };
        let rollout = match serde_json::from_slice::<Rollout>(&record.content) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(record = record.id, error = %e, "unreadable policy rollout record; no rollout serves");
                return Ok(None);
            }
        };
        if !rollout.running {
            return Ok(None);
        }
        let newest = self.store.latest(POLICY)?.map(|l| l.id);
        Ok((newest == Some(rollout.canary)).then_some(rollout))
    }

    /// Appends `rollout` as the next rollout record.
    fn record_rollout(
        &self,
        rollout: &Rollout,
        by: &str,
        comment: &str,
    ) -> Result<(), DeployError> {
        let content = serde_json::to_vec(rollout)
            .map_err(|e| DeployError::Invalid(format!("rollout record: {e}")))?;
        let parent = self.store.latest(ROLLOUT)?.map(|r| r.id);
        let hash = hash_of(&String::from_utf8_lossy(&content));
        let new = NewVersion {
            artifact: ROLLOUT,
            parent,
            hash: &hash,
            by,
            at_ms: now_ms(),
            comment,
            content: &content,
        };
        match self.store.append(&new)? {
            Some(_) => Ok(()),
            None => Err(DeployError::Conflict(new.id())),
        }
    }

    /// The rollout serving here, if one runs.
    pub fn rollout(&self) -> Option<Rollout> {
        self.engine.rollout()
    }

    /// Starts a rollout: `source` is checked as any deployment, recorded
    /// as the next version, and decides for `share_basis_points` of the
    /// subscribers and those `subscribers` lists; the version serving now
    /// stays for the rest. Refused while another rollout runs.
    pub fn start_rollout(
        &self,
        source: String,
        share_basis_points: u32,
        subscribers: Vec<String>,
        by: &str,
        comment: &str,
    ) -> Result<(StoredVersion, Rollout), DeployError> {
        let _one = self.deploying.lock();
        if let Some(r) = self.running_rollout()? {
            return Err(DeployError::RolloutRunning(r.canary));
        }
        let Some(stable) = self.store.latest(POLICY)? else {
            return Err(DeployError::NoRollout);
        };
        if stable.id != self.serving() {
            return Err(DeployError::Conflict(stable.id));
        }
        let hash = hash_of(&source);
        if hash == stable.hash {
            return Err(DeployError::Invalid(format!(
                "the canary is the script of version {} serving already",
                stable.id
            )));
        }
        if let Err(e) = self.check(&source) {
            self.engine.count_refusal();
            return Err(DeployError::Refused(e));
        }
        let rollout = Rollout {
            stable: stable.id,
            canary: stable.id + 1,
            share_basis_points,
            subscribers,
            running: true,
        };
        // The record first: until the version follows it, the record's
        // canary is not the newest version and nothing changes anywhere.
        self.record_rollout(&rollout, by, comment)?;
        let new = NewVersion {
            artifact: POLICY,
            parent: Some(stable.id),
            hash: &hash,
            by,
            at_ms: now_ms(),
            comment,
            content: source.as_bytes(),
        };
        let Some(canary) = self.store.append(&new)? else {
            return Err(DeployError::Conflict(new.id()));
        };
        tracing::info!(
            version = canary.id,
            stable = stable.id,
            share_basis_points,
            by,
            comment,
            "policy rollout started"
        );
        self.engine
            .install_canary(source, rollout.clone())
            .map_err(DeployError::Refused)?;
        Ok((canary, rollout))
    }

    /// Widens the running rollout: the share may only grow, and the
    /// subscribers listed join those listed already.
    pub fn widen_rollout(
        &self,
        share_basis_points: Option<u32>,
        subscribers: Vec<String>,
        by: &str,
    ) -> Result<Rollout, DeployError> {
        let _one = self.deploying.lock();
        let mut rollout = self.running_rollout()?.ok_or(DeployError::NoRollout)?;
        if let Some(bp) = share_basis_points {
            if bp < rollout.share_basis_points {
                return Err(DeployError::Invalid(format!(
                    "the share may only grow (it is {}%); abort the rollout to withdraw the canary",
                    f64::from(rollout.share_basis_points) / 100.0
                )));
            }
            rollout.share_basis_points = bp;
        }
        for s in subscribers {
            if !rollout.subscribers.contains(&s) {
                rollout.subscribers.push(s);
            }
        }
        let source = self.canary_text(rollout.canary)?;
        self.record_rollout(&rollout, by, "widened")?;
        tracing::info!(
            version = rollout.canary,
            share_basis_points = rollout.share_basis_points,
            listed = rollout.subscribers.len(),
            by,
            "policy rollout widened"
        );
        self.engine
            .install_canary(source, rollout.clone())
            .map_err(DeployError::Refused)?;
        Ok(rollout)
    }

    /// Promotes the running rollout: its canary decides for everyone (no
    /// new version: the canary is the newest already).
    pub fn promote_rollout(&self, by: &str) -> Result<StoredVersion, DeployError> {
        let _one = self.deploying.lock();
        let mut rollout = self.running_rollout()?.ok_or(DeployError::NoRollout)?;
        let canary = self
            .store
            .get(POLICY, rollout.canary)?
            .ok_or(DeployError::NotFound(rollout.canary))?;
        rollout.running = false;
        self.record_rollout(&rollout, by, "promoted")?;
        tracing::info!(version = canary.id, by, "policy rollout promoted");
        self.install(canary)
    }

    /// Aborts the running rollout: the stable version's script is deployed
    /// again as the next version (as a rollback is), which ends the
    /// rollout, and decides for everyone.
    pub fn abort_rollout(&self, by: &str) -> Result<StoredVersion, DeployError> {
        let rollout = {
            let _one = self.deploying.lock();
            self.running_rollout()?.ok_or(DeployError::NoRollout)?
        };
        let stable = self
            .store
            .get(POLICY, rollout.stable)?
            .ok_or(DeployError::NotFound(rollout.stable))?;
        let source = String::from_utf8(stable.content).map_err(|_| {
            DeployError::Invalid(format!("version {} is not UTF-8 text", rollout.stable))
        })?;
        let comment = format!(
            "rollout of version {} aborted: version {} again",
            rollout.canary, rollout.stable
        );
        let done = self.deploy(source, by, &comment)?;
        let _one = self.deploying.lock();
        let ended = Rollout {
            running: false,
            ..rollout
        };
        // The new version ended the rollout already; this record says so
        // in the history.
        if let Err(e) = self.record_rollout(&ended, by, "aborted") {
            tracing::warn!(error = %e, "the aborted rollout's record was not written");
        }
        tracing::info!(version = done.id, by, "policy rollout aborted");
        Ok(done)
    }

    fn canary_text(&self, id: i64) -> Result<String, DeployError> {
        let v = self
            .store
            .get(POLICY, id)?
            .ok_or(DeployError::NotFound(id))?;
        String::from_utf8(v.content)
            .map_err(|_| DeployError::Invalid(format!("version {id} is not UTF-8 text")))
    }

    /// Installs the canary of `rollout` (the stable version serves here
    /// already), checked as an adopted version is; refused with its reason
    /// otherwise. Returns whether it serves. Called with `deploying` held.
    fn adopt_canary(&self, rollout: Rollout) -> bool {
        let id = rollout.canary;
        let same_script = self.engine.rollout().is_some_and(|r| r.canary == id);
        let result = self.canary_text(id).and_then(|text| {
            if !same_script {
                self.check(&text).map_err(DeployError::Refused)?;
            }
            self.engine
                .install_canary(text, rollout)
                .map_err(DeployError::Refused)
        });
        match result {
            Ok(()) => {
                tracing::info!(version = id, "policy rollout adopted");
                true
            }
            Err(e) => {
                let reason = e.to_string();
                tracing::error!(version = id, serving = self.serving(), error = %reason, "policy canary refused here; this node serves its version to everyone");
                self.engine.count_refusal();
                self.engine.clear_canary();
                *self.refused.write() = Some(Refusal {
                    version: id,
                    reason,
                });
                false
            }
        }
    }

    pub fn engine(&self) -> &Arc<PolicyEngine> {
        &self.engine
    }

    /// The stored version serving here; 0 before the first.
    pub fn serving(&self) -> i64 {
        i64::try_from(self.engine.id()).unwrap_or(0)
    }

    /// Whether the version serving holds an older version's text again (a
    /// rollback, a rollout aborted, an old script deployed anew): the
    /// versions deployed between are withdrawn, and the open sessions they
    /// decided must be decided again rather than wait for their next
    /// request.
    pub fn serving_withdraws(&self) -> Result<bool, StoreError> {
        let serving = self.serving();
        let hash = hash_of(&self.engine.source());
        Ok(self
            .store
            .list(POLICY, Some(serving), usize::MAX)?
            .iter()
            .any(|older| older.hash == hash))
    }

    /// The newest version this node refused, while it is the newest.
    pub fn refused(&self) -> Option<Refusal> {
        self.refused.read().clone()
    }

    /// Compiles `source`, runs it on the sample inputs, then on the test
    /// cases beside the policy file (when there are any): every case must
    /// pass.
    fn check(&self, source: &str) -> Result<(), PolicyError> {
        let draft = self.engine.draft(source.to_owned())?;
        let file = cases::file_of(self.engine.path());
        if !file.exists() {
            return Ok(());
        }
        let report = cases::run_on(&draft, &file)?;
        let failed: Vec<&str> = report
            .cases
            .iter()
            .filter(|c| !c.passed())
            .map(|c| c.name.as_str())
            .collect();
        if failed.is_empty() {
            return Ok(());
        }
        Err(PolicyError::Invalid {
            message: format!(
                "{} of {} test cases in {} fail: {}",
                failed.len(),
                report.cases.len(),
                file.display(),
                failed.join(", ")
            ),
            line: None,
        })
    }

    /// Checks `source`, records it as the version after the newest, and
    /// installs it. The script serving already is not recorded again: its
    /// version is returned.
    pub fn deploy(
        &self,
        source: String,
        by: &str,
        comment: &str,
    ) -> Result<StoredVersion, DeployError> {
        let _one = self.deploying.lock();
        let hash = hash_of(&source);
        let latest = self.store.latest(POLICY)?;
        if let Some(l) = latest.as_ref().filter(|l| {
            l.hash == hash && l.id == self.serving() && hash_of(&self.engine.source()) == hash
        }) {
            return Ok(l.clone());
        }
        self.deploy_new(source, hash, by, comment)
    }

    /// `deploy` past the same-script shortcut, with `deploying` held.
    fn deploy_new(
        &self,
        source: String,
        hash: String,
        by: &str,
        comment: &str,
    ) -> Result<StoredVersion, DeployError> {
        if let Err(e) = self.check(&source) {
            self.engine.count_refusal();
            return Err(DeployError::Refused(e));
        }
        let parent = self.store.latest(POLICY)?.map(|l| l.id);
        let new = NewVersion {
            artifact: POLICY,
            parent,
            hash: &hash,
            by,
            at_ms: now_ms(),
            comment,
            content: source.as_bytes(),
        };
        let Some(stored) = self.store.append(&new)? else {
            return Err(DeployError::Conflict(new.id()));
        };
        tracing::info!(
            version = stored.id,
            hash,
            by,
            comment,
            "policy version recorded"
        );
        self.install(stored)
    }

    /// Makes `v` serve here (it passed its checks).
    fn install(&self, mut v: StoredVersion) -> Result<StoredVersion, DeployError> {
        let content = std::mem::take(&mut v.content);
        let source = String::from_utf8(content).map_err(|_| {
            DeployError::Refused(PolicyError::Invalid {
                message: format!("version {} is not UTF-8 text", v.id),
                line: None,
            })
        })?;
        self.engine
            .install(source.clone(), u64::try_from(v.id).unwrap_or(0))
            .map_err(DeployError::Refused)?;
        // A version installed so serves everyone: any rollout has ended.
        self.engine.clear_canary();
        *self.refused.write() = None;
        v.content = source.into_bytes();
        Ok(v)
    }

    /// Deploys the policy file's text if it differs from what serves (the
    /// file watcher, SIGHUP, `POST /v1/policy/reload`). Returns the
    /// version serving.
    pub fn reload_file(&self) -> Result<StoredVersion, DeployError> {
        let source = self.engine.read_file().map_err(DeployError::Refused)?;
        if hash_of(&source) == hash_of(&self.engine.source()) {
            // Unchanged. Where this node refuses the newest version, its
            // file holds its own older one: deploying that would undo
            // the cluster's version.
            let serving = self.serving();
            return self
                .store
                .get(POLICY, serving)?
                .ok_or(DeployError::NotFound(serving));
        }
        let res = self.deploy(source, "file", "the policy file changed");
        if let Err(e) = &res {
            tracing::error!(path = %self.engine.path().display(), error = %e, "policy file refused, the running version keeps serving");
        }
        res
    }

    /// Deploys version `id`'s text again, as a new version whose parent is
    /// the newest; checked as any deployment.
    pub fn rollback(&self, id: i64, by: &str) -> Result<StoredVersion, DeployError> {
        let old = self
            .store
            .get(POLICY, id)?
            .ok_or(DeployError::NotFound(id))?;
        let source = String::from_utf8(old.content).map_err(|_| {
            DeployError::Refused(PolicyError::Invalid {
                message: format!("version {id} is not UTF-8 text"),
                line: None,
            })
        })?;
        self.deploy(source, by, &format!("rollback to version {id}"))
    }

    /// Adopts the newest stored version if it is not serving here yet
    /// (another node deployed it): checked as a deployment, installed, or
    /// refused with the reason kept for `GET /v1/cluster` (a refused
    /// version is not checked again). Returns whether what serves changed.
    pub fn adopt_newest(&self) -> Result<bool, StoreError> {
        // Read under the lock, so a deployment through this node's API
        // cannot slip between the read and the install.
        let _one = self.deploying.lock();
        let Some(latest) = self.store.latest(POLICY)? else {
            return Ok(false);
        };
        if let Some(rollout) = self.running_rollout()? {
            // A rollout: the stable version for everyone else, its canary
            // for its share.
            if self.engine.rollout().as_ref() == Some(&rollout)
                || self
                    .refused()
                    .is_some_and(|r| r.version == rollout.canary || r.version == rollout.stable)
            {
                return Ok(false);
            }
            // What served changes unless this node refuses the canary
            // and served no other before.
            let mut changed = self.engine.rollout().is_some();
            if self.serving() != rollout.stable {
                let Some(stable) = self.store.get(POLICY, rollout.stable)? else {
                    return Ok(false);
                };
                if !self.adopt_locked(stable) {
                    return Ok(changed);
                }
                changed = true;
            }
            return Ok(self.adopt_canary(rollout) || changed);
        }
        if (latest.id == self.serving() && self.engine.rollout().is_none())
            || self.refused().is_some_and(|r| r.version == latest.id)
        {
            return Ok(false);
        }
        Ok(self.adopt_locked(latest))
    }

    fn adopt(&self, latest: StoredVersion) -> bool {
        let _one = self.deploying.lock();
        self.adopt_locked(latest)
    }

    /// `adopt`, with `deploying` held.
    fn adopt_locked(&self, latest: StoredVersion) -> bool {
        let id = latest.id;
        let text = String::from_utf8_lossy(&latest.content).into_owned();
        let checked = if latest.hash == hash_of(&self.engine.source()) {
            Ok(())
        } else {
            self.check(&text)
        };
        let result = checked
            .map_err(DeployError::Refused)
            .and_then(|()| self.install(latest));
        match result {
            Ok(_) => {
                tracing::info!(version = id, "policy version adopted");
                true
            }
            Err(e) => {
                let reason = e.to_string();
                tracing::error!(version = id, serving = self.serving(), error = %reason, "policy version refused here; this node keeps its version");
                self.engine.count_refusal();
                *self.refused.write() = Some(Refusal {
                    version: id,
                    reason,
                });
                false
            }
        }
    }

    /// Up to `limit` versions before `before`, newest first, without text.
    pub fn list(
        &self,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<StoredVersion>, StoreError> {
        self.store.list(POLICY, before, limit)
    }

    /// One version with its text.
    pub fn get(&self, id: i64) -> Result<Option<StoredVersion>, StoreError> {
        self.store.get(POLICY, id)
    }

    /// Reloads the policy file whenever it changes.
    pub fn watch(self: Arc<Self>) -> Result<WatcherGuard, PolicyError> {
        let path = self.engine.path().to_path_buf();
        watch_file(&path, "policy-watch", move || {
            // reload_file() logs a refusal.
            let _ = self.reload_file();
        })
        .map_err(|message| PolicyError::Watch { path, message })
    }
}

impl MetricsSource for PolicyVersions {
    fn write(&self, out: &mut Exposition) {
        out.gauge(
            "pcrf_policy_version",
            "The stored policy version this node serves (GET /v1/policy/versions).",
            u64::try_from(self.serving()).unwrap_or(0),
        );
        out.gauge(
            "pcrf_policy_version_refused",
            "1 while this node refuses the newest stored policy version (it keeps its own; GET /v1/cluster says why).",
            u64::from(self.refused.read().is_some()),
        );
        out.gauge(
            "pcrf_policy_canary_version",
            "The stored policy version on trial while a rollout runs here; 0 when none.",
            u64::try_from(self.rollout().map_or(0, |r| r.canary)).unwrap_or(0),
        );
        let by_version = self.engine.version_stats();
        let labels: Vec<String> = by_version.iter().map(|v| v.id.to_string()).collect();
        let mut decisions = out.family(
            "pcrf_policy_version_decisions_total",
            "Policy decisions by the stored version that made them (Lua, memo or fallback); compares a rollout's canary with its stable version.",
            Kind::Counter,
        );
        for (v, label) in by_version.iter().zip(&labels) {
            decisions.sample(&[("version", label)], v.decisions);
        }
        let mut fallbacks = out.family(
            "pcrf_policy_version_fallbacks_total",
            "Policy script errors by stored version, each answered with the fallback decision.",
            Kind::Counter,
        );
        for (v, label) in by_version.iter().zip(&labels) {
            fallbacks.sample(&[("version", label)], v.fallbacks);
        }
        let mut errors = out.family(
            "pcrf_policy_version_errors_total",
            "Gx requests decided by a stored version and answered with an error (a rejection, an answer too large), by version.",
            Kind::Counter,
        );
        for (v, label) in by_version.iter().zip(&labels) {
            errors.sample(&[("version", label)], v.errors);
        }
        let mut latency = out.family(
            "pcrf_policy_version_request_duration_seconds",
            "Time from reading a Gx CCR-I or CCR-U to writing its answer, by the stored policy version that decided it; compares a rollout's canary with its stable version (Apdex on the console's dashboard).",
            Kind::Histogram,
        );
        for (v, label) in by_version.iter().zip(&labels) {
            if v.latency.count() > 0 {
                latency.histogram(&[("version", label)], &v.latency);
            }
        }
    }
}

/// A unified diff of two texts (`---`/`+++` headers, hunks with three
/// lines of context), as `diff -u` prints it.
pub fn unified_diff(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(old_name, new_name)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::rollout::ALL_BASIS_POINTS;
    use crate::policy::{EngineConfig, Limits};
    use crate::store::SqliteVersions;
    use std::path::PathBuf;

    /// A policy file and its test cases in a temp dir, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            let d =
                std::env::temp_dir().join(format!("pcrf-versions-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).expect("dir");
            std::fs::write(d.join("policy.lua"), rule_is("a")).expect("policy");
            Dir(d)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn rule_is(name: &str) -> String {
        format!("function decide(input)\n  return {{ rules = {{ '{name}' }} }}\nend\n")
    }

    fn engine(d: &Dir) -> Arc<PolicyEngine> {
        Arc::new(
            PolicyEngine::load(EngineConfig {
                path: d.0.join("policy.lua"),
                limits: Limits::default(),
                fallback: Default::default(),
            })
            .expect("loads"),
        )
    }

    fn cases(d: &Dir, expect_rule: &str) {
        std::fs::write(
            d.0.join("policy.cases.toml"),
            format!("[[case]]\nname = \"the rule\"\nexpect.rules = [\"{expect_rule}\"]\n"),
        )
        .expect("cases");
    }

    #[test]
    fn deployments_are_numbered_checked_on_their_cases_and_rolled_back() {
        let d = Dir::new("deploy");
        cases(&d, "a");
        let store: Arc<dyn VersionStore> = Arc::new(SqliteVersions::in_memory().expect("store"));
        let v = PolicyVersions::start(engine(&d), store.clone()).expect("start");
        assert_eq!(v.serving(), 1, "the file seeds version 1");
        let first = store.get(POLICY, 1).expect("get").expect("v1");
        assert_eq!((first.by.as_str(), first.parent), ("file", None));

        // A script failing its test case is refused; nothing recorded.
        let err = v
            .deploy(rule_is("b"), "token", "try b")
            .expect_err("refused");
        assert!(err.to_string().contains("the rule"), "{err}");
        assert_eq!(v.serving(), 1);
        assert_eq!(store.latest(POLICY).expect("latest").map(|l| l.id), Some(1));

        // The cases now ask for b: deployed as version 2, its parent 1.
        cases(&d, "b");
        let two = v.deploy(rule_is("b"), "token", "b now").expect("deploy");
        assert_eq!(
            (two.id, two.parent, two.comment.as_str()),
            (2, Some(1), "b now")
        );
        assert_eq!(v.serving(), 2);
        assert_eq!(
            std::fs::read_to_string(d.0.join("policy.lua")).expect("file"),
            rule_is("b"),
            "the file holds what serves"
        );
        let out = v
            .engine()
            .decide(&crate::policy::engine::sample_inputs().remove(0).1, None);
        assert_eq!(
            (out.decision.rules[0].as_str(), out.policy_version),
            ("b", 2)
        );
        // The same script again records nothing.
        assert_eq!(v.deploy(rule_is("b"), "token", "").expect("same").id, 2);

        // Rolling back to 1 is checked like a deployment: its case fails.
        assert!(matches!(
            v.rollback(1, "token"),
            Err(DeployError::Refused(_))
        ));
        cases(&d, "a");
        let three = v.rollback(1, "local").expect("rollback");
        assert_eq!((three.id, three.parent), (3, Some(2)));
        assert_eq!(three.comment, "rollback to version 1");
        assert_eq!(three.hash, first.hash);
        assert!(matches!(
            v.rollback(9, "local"),
            Err(DeployError::NotFound(9))
        ));

        // An edited file becomes the next version, by "file".
        std::fs::write(d.0.join("policy.lua"), rule_is("a") + "-- edited\n").expect("edit");
        let four = v.reload_file().expect("reload");
        assert_eq!((four.id, four.by.as_str()), (4, "file"));
        assert_eq!(
            store.list(POLICY, None, 10).expect("list").len(),
            4,
            "the history is the store's"
        );
    }

    #[test]
    fn start_up_adopts_the_newest_for_a_stale_file_and_deploys_an_edited_one() {
        let d = Dir::new("start");
        cases(&d, "a");
        let store: Arc<dyn VersionStore> = Arc::new(SqliteVersions::in_memory().expect("store"));
        let v = PolicyVersions::start(engine(&d), store.clone()).expect("start");
        v.deploy(rule_is("a") + "-- 2\n", "token", "").expect("v2");
        drop(v);
        // This node's file still holds version 1 (another node deployed 2).
        std::fs::write(d.0.join("policy.lua"), rule_is("a")).expect("old file");
        let v = PolicyVersions::start(engine(&d), store.clone()).expect("restart");
        assert_eq!(v.serving(), 2, "a stale file yields to the newest version");
        assert_eq!(
            std::fs::read_to_string(d.0.join("policy.lua")).expect("file"),
            rule_is("a") + "-- 2\n"
        );
        drop(v);
        // Edited while stopped: the next version.
        std::fs::write(d.0.join("policy.lua"), rule_is("a") + "-- 3\n").expect("edit");
        let v = PolicyVersions::start(engine(&d), store.clone()).expect("restart");
        assert_eq!(v.serving(), 3);
        drop(v);
        // Edited, but failing its case: the newest version serves.
        std::fs::write(d.0.join("policy.lua"), rule_is("z")).expect("bad edit");
        let v = PolicyVersions::start(engine(&d), store.clone()).expect("restart");
        assert_eq!(v.serving(), 3);
        assert_eq!(v.engine().source().as_ref(), rule_is("a") + "-- 3\n");
    }

    #[test]
    fn a_version_failing_here_is_refused_with_its_reason_and_not_retried() {
        let d = Dir::new("adopt");
        cases(&d, "a");
        let store: Arc<dyn VersionStore> = Arc::new(SqliteVersions::in_memory().expect("store"));
        let v = PolicyVersions::start(engine(&d), store.clone()).expect("start");
        // Another node, whose cases differ, deployed a script failing ours.
        let other = rule_is("b");
        let hash = hash_of(&other);
        store
            .append(&NewVersion {
                artifact: POLICY,
                parent: Some(1),
                hash: &hash,
                by: "token",
                at_ms: 0,
                comment: "",
                content: other.as_bytes(),
            })
            .expect("append")
            .expect("v2");
        assert!(!v.adopt_newest().expect("adopt"));
        assert_eq!(v.serving(), 1, "keeps its version");
        let r = v.refused().expect("refused");
        assert_eq!(r.version, 2);
        assert!(r.reason.contains("the rule"), "{}", r.reason);
        // Polled again: not checked again.
        let failures = v.engine().stats().reload_failures;
        assert!(!v.adopt_newest().expect("adopt"));
        assert_eq!(v.engine().stats().reload_failures, failures);
        // Its file, unchanged, is no new version (a SIGHUP here must not
        // deploy this node's older script over the cluster's).
        assert_eq!(v.reload_file().expect("unchanged").id, 1);
        assert_eq!(store.latest(POLICY).expect("latest").map(|l| l.id), Some(2));
        // A version this node can load is adopted and clears the refusal.
        let good = rule_is("a") + "-- 3\n";
        let hash = hash_of(&good);
        store
            .append(&NewVersion {
                artifact: POLICY,
                parent: Some(2),
                hash: &hash,
                by: "token",
                at_ms: 0,
                comment: "",
                content: good.as_bytes(),
            })
            .expect("append")
            .expect("v3");
        assert!(v.adopt_newest().expect("adopt"));
        assert_eq!((v.serving(), v.refused()), (3, None));
    }

    /// The first rule decided for `imsi`, and the version that decided.
    fn decided(v: &PolicyVersions, imsi: &str) -> (String, u64) {
        let mut input = crate::policy::engine::sample_inputs().remove(0).1;
        input.subscriber.fields_mut().imsi = Some(imsi.to_owned());
        let out = v.engine().decide(&input, None);
        (out.decision.rules[0].clone(), out.policy_version)
    }

    fn imsi(i: u32) -> String {
        format!("0010100{i:08}")
    }

    #[test]
    fn a_rollout_decides_its_share_by_the_canary_until_promoted() {
        let d = Dir::new("rollout");
        let store: Arc<dyn VersionStore> = Arc::new(SqliteVersions::in_memory().expect("store"));
        let v = PolicyVersions::start(engine(&d), store.clone()).expect("start");
        assert!(matches!(
            v.promote_rollout("t"),
            Err(DeployError::NoRollout)
        ));
        assert!(matches!(v.abort_rollout("t"), Err(DeployError::NoRollout)));
        assert!(matches!(
            v.widen_rollout(Some(100), vec![], "t"),
            Err(DeployError::NoRollout)
        ));

        let listed = "001010999999999";
        let (canary, r) = v
            .start_rollout(rule_is("b"), 500, vec![listed.into()], "token", "try b")
            .expect("rollout");
        assert_eq!(
            (canary.id, canary.parent, r.stable, r.canary),
            (2, Some(1), 1, 2)
        );
        assert_eq!(v.serving(), 1, "the stable version serves the rest");
        assert_eq!(
            std::fs::read_to_string(d.0.join("policy.lua")).expect("file"),
            rule_is("a"),
            "the file holds the stable version"
        );
        assert_eq!(decided(&v, listed), ("b".into(), 2));
        let sides: Vec<(String, u64)> = (0..10_000).map(|i| decided(&v, &imsi(i))).collect();
        let on_canary = sides.iter().filter(|s| s.0 == "b").count();
        assert!((400..=600).contains(&on_canary), "{on_canary} of 10000");
        assert!(sides
            .iter()
            .all(|s| *s == ("b".into(), 2) || *s == ("a".into(), 1)));
        let by_version = v.engine().version_stats();
        let count = |id| {
            by_version
                .iter()
                .find(|s| s.id == id)
                .map_or(0, |s| s.decisions)
        };
        assert_eq!(count(2), on_canary as u64 + 1, "decisions by the canary");
        assert_eq!(
            count(1),
            10_000 - on_canary as u64,
            "decisions by the stable one"
        );
        // Answers are counted against the version that decided them: the
        // canary's, the stable one's, and one of a version no longer
        // serving (a request decided before a deployment).
        let served = v.engine();
        served.count_answer(2, true, std::time::Duration::from_millis(1));
        served.count_answer(2, false, std::time::Duration::from_millis(30));
        served.count_answer(1, true, std::time::Duration::from_millis(2));
        served.count_answer(7, true, std::time::Duration::from_millis(2));
        let answers = |id| {
            served
                .version_stats()
                .iter()
                .find(|s| s.id == id)
                .map(|s| (s.latency.count(), s.errors))
        };
        assert_eq!(
            (answers(2), answers(1), answers(7)),
            (Some((2, 1)), Some((1, 0)), Some((1, 0)))
        );
        for i in (0..10_000).step_by(97) {
            assert_eq!(
                decided(&v, &imsi(i)),
                sides[i as usize],
                "always the same side"
            );
        }

        assert!(matches!(
            v.start_rollout(rule_is("c"), 500, vec![], "t", ""),
            Err(DeployError::RolloutRunning(2))
        ));
        assert!(matches!(
            v.widen_rollout(Some(100), vec![], "t"),
            Err(DeployError::Invalid(_))
        ));

        // Another node (or this one restarted) serves the same rollout.
        let other = PolicyVersions::start(engine(&d), store.clone()).expect("restart");
        assert_eq!((other.serving(), other.rollout()), (1, Some(r.clone())));
        for i in (0..10_000).step_by(97) {
            assert_eq!(decided(&other, &imsi(i)), sides[i as usize]);
        }

        // Widened: every canary subscriber stays, more join; the other
        // node adopts it.
        let wide = v.widen_rollout(Some(2_000), vec![], "t").expect("widen");
        assert_eq!(
            (wide.share_basis_points, wide.subscribers.len()),
            (2_000, 1)
        );
        let widened: Vec<(String, u64)> = (0..10_000).map(|i| decided(&v, &imsi(i))).collect();
        assert!(sides
            .iter()
            .zip(&widened)
            .all(|(before, after)| before.0 == "a" || after.0 == "b"));
        let now_on = widened.iter().filter(|s| s.0 == "b").count();
        assert!((1_900..=2_100).contains(&now_on), "{now_on}");
        assert!(other.adopt_newest().expect("adopt"));
        assert_eq!(other.rollout(), Some(wide));
        assert!(!other.adopt_newest().expect("adopt again"), "nothing new");
        // A subscriber listed when widening joins the canary; the share stays.
        let stays = (0..10_000)
            .map(imsi)
            .find(|k| decided(&v, k).0 == "a")
            .expect("one on the stable version");
        let listed_too = v
            .widen_rollout(None, vec![stays.clone()], "t")
            .expect("widen by list");
        assert_eq!(listed_too.share_basis_points, 2_000);
        assert_eq!(
            listed_too.subscribers,
            vec![listed.to_string(), stays.clone()]
        );
        assert_eq!(decided(&v, &stays), ("b".into(), 2));

        // Promoted: the canary for everyone, in the file, no new version.
        let promoted = v.promote_rollout("t").expect("promote");
        assert_eq!((promoted.id, v.serving(), v.rollout()), (2, 2, None));
        assert_eq!(decided(&v, &imsi(1)), ("b".into(), 2));
        assert_eq!(
            std::fs::read_to_string(d.0.join("policy.lua")).expect("file"),
            rule_is("b")
        );
        assert!(other.adopt_newest().expect("adopt"));
        assert_eq!((other.serving(), other.rollout()), (2, None));
        assert!(matches!(
            v.promote_rollout("t"),
            Err(DeployError::NoRollout)
        ));
    }

    #[test]
    fn an_aborted_rollout_puts_everyone_back_on_the_stable_script() {
        let d = Dir::new("abort");
        let store: Arc<dyn VersionStore> = Arc::new(SqliteVersions::in_memory().expect("store"));
        let v = PolicyVersions::start(engine(&d), store.clone()).expect("start");
        let other = PolicyVersions::start(engine(&d), store.clone()).expect("other node");
        let (_, r) = v
            .start_rollout(rule_is("b"), ALL_BASIS_POINTS, vec![], "t", "everyone")
            .expect("rollout");
        assert_eq!(decided(&v, &imsi(7)), ("b".into(), 2));
        assert!(other.adopt_newest().expect("adopt"));
        assert_eq!(other.rollout(), Some(r));
        assert_eq!(decided(&other, &imsi(7)), ("b".into(), 2));

        let back = v.abort_rollout("t").expect("abort");
        assert_eq!((back.id, back.parent), (3, Some(2)));
        assert_eq!(
            back.comment,
            "rollout of version 2 aborted: version 1 again"
        );
        assert_eq!(back.hash, hash_of(&rule_is("a")));
        assert_eq!((v.serving(), v.rollout()), (3, None));
        assert_eq!(decided(&v, &imsi(7)), ("a".into(), 3));
        assert!(other.adopt_newest().expect("adopt"));
        assert_eq!((other.serving(), other.rollout()), (3, None));
        assert_eq!(decided(&other, &imsi(7)), ("a".into(), 3));
        // A restart finds no rollout.
        drop(other);
        let again = PolicyVersions::start(engine(&d), store).expect("restart");
        assert_eq!((again.serving(), again.rollout()), (3, None));
    }

    #[test]
    fn a_node_whose_cases_refuse_the_canary_serves_the_stable_version_to_everyone() {
        let d = Dir::new("canary-here");
        let strict = Dir::new("canary-strict");
        cases(&strict, "a");
        let store: Arc<dyn VersionStore> = Arc::new(SqliteVersions::in_memory().expect("store"));
        let v = PolicyVersions::start(engine(&d), store.clone()).expect("start");
        let other = PolicyVersions::start(engine(&strict), store.clone()).expect("other node");
        let listed = "001010999999999";
        v.start_rollout(rule_is("b"), 0, vec![listed.into()], "t", "")
            .expect("rollout");
        assert_eq!(decided(&v, listed), ("b".into(), 2));
        assert!(!other.adopt_newest().expect("adopt"));
        let refusal = other.refused().expect("refused");
        assert_eq!(refusal.version, 2);
        assert!(refusal.reason.contains("the rule"), "{}", refusal.reason);
        assert_eq!((other.serving(), other.rollout()), (1, None));
        assert_eq!(decided(&other, listed), ("a".into(), 1));
        // Not checked again while the rollout runs.
        let failures = other.engine().stats().reload_failures;
        assert!(!other.adopt_newest().expect("adopt"));
        assert_eq!(other.engine().stats().reload_failures, failures);
    }

    #[test]
    fn a_plain_deployment_ends_a_running_rollout() {
        let d = Dir::new("supersede");
        let store: Arc<dyn VersionStore> = Arc::new(SqliteVersions::in_memory().expect("store"));
        let v = PolicyVersions::start(engine(&d), store.clone()).expect("start");
        v.start_rollout(rule_is("b"), 5_000, vec![], "t", "")
            .expect("rollout");
        let c = v.deploy(rule_is("c"), "t", "c for all").expect("deploy");
        assert_eq!((c.id, v.serving(), v.rollout()), (3, 3, None));
        assert_eq!(decided(&v, &imsi(1)), ("c".into(), 3));
        let again = PolicyVersions::start(engine(&d), store).expect("restart");
        assert_eq!((again.serving(), again.rollout()), (3, None));
    }

    #[test]
    fn the_diff_is_unified() {
        let d = unified_diff("a\nb\nc\n", "a\nB\nc\n", "version 1", "version 2");
        assert_eq!(
            d,
            "--- version 1\n+++ version 2\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
        );
    }
}
