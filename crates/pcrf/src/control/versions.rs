//! The operations on the stored versions of the policy (over
//! `policy::versions`) and of the usage file (over `usage::versions`): the
//! list, one version with its text, a diff between two, a deployment or
//! rollback and which nodes serve it after a short wait. Their shapes are
//! in `version_views.rs`.

use crate::control::version_views::{
    Adoption, Artifact, Deployed, RolloutStart, RolloutView, VersionView, VersionsPage,
    MAX_VERSIONS_PAGE,
};
use crate::control::{ControlError, DeployFailure};
use crate::node::{Capabilities, Persistence, Policy, Sessions, Signalling, UsageLedger};
use crate::pcc::PushReason;
use crate::policy::versions::{unified_diff, DeployError, PolicyVersions};
use crate::session::SessionState;
use crate::store::versions::StoredVersion;
use crate::store::StoreError;
use crate::usage::versions::UsageVersions;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a deployment's answer waits, at most, for the other live
/// nodes to serve the new version or refuse it (their heartbeat rows say
/// which); past it they are listed as "pending".
pub const ADOPTION_WAIT: Duration = Duration::from_secs(5);

/// Runs a blocking versions task off the async workers.
async fn blocking<T: Send + 'static, E: Send + 'static>(
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, ControlError>
where
    ControlError: From<E>,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(ControlError::from),
        Err(e) => Err(ControlError::Internal(format!("versions task failed: {e}"))),
    }
}

/// What the listing, reading and diffing read of one artifact's versions.
trait StoredVersions: Send + Sync + 'static {
    fn serving(&self) -> i64;
    fn list(&self, before: Option<i64>, limit: usize) -> Result<Vec<StoredVersion>, StoreError>;
    fn get(&self, id: i64) -> Result<Option<StoredVersion>, StoreError>;
}

impl StoredVersions for PolicyVersions {
    fn serving(&self) -> i64 {
        PolicyVersions::serving(self)
    }
    fn list(&self, before: Option<i64>, limit: usize) -> Result<Vec<StoredVersion>, StoreError> {
        PolicyVersions::list(self, before, limit)
    }
    fn get(&self, id: i64) -> Result<Option<StoredVersion>, StoreError> {
        PolicyVersions::get(self, id)
    }
}

impl StoredVersions for UsageVersions {
    fn serving(&self) -> i64 {
        UsageVersions::serving(self)
    }
    fn list(&self, before: Option<i64>, limit: usize) -> Result<Vec<StoredVersion>, StoreError> {
        UsageVersions::list(self, before, limit)
    }
    fn get(&self, id: i64) -> Result<Option<StoredVersion>, StoreError> {
        UsageVersions::get(self, id)
    }
}

/// What the version operations reach: the policy's and the usage file's
/// versions, the usage ledger a usage file is checked against, the
/// sessions a rollout re-decides and the push that does it, and the
/// cluster view other nodes' adoption is read from.
#[derive(Clone)]
pub struct Deployer {
    pub(crate) policy: Policy,
    pub(crate) usage: UsageLedger,
    pub(crate) sessions: Sessions,
    pub(crate) signalling: Signalling,
    pub(crate) persistence: Persistence,
}

impl Deployer {
    pub fn new(caps: &Capabilities) -> Deployer {
        Deployer {
            policy: caps.policy.clone(),
            usage: caps.usage.clone(),
            sessions: caps.sessions.clone(),
            signalling: caps.signalling.clone(),
            persistence: caps.persistence.clone(),
        }
    }
}

fn stored_versions(deployer: &Deployer, artifact: Artifact) -> Arc<dyn StoredVersions> {
    match artifact {
        Artifact::Policy => deployer.policy.runner().policy_versions().clone(),
        Artifact::Usage => deployer.policy.runner().usage_versions().clone(),
    }
}

pub async fn list(
    deployer: &Deployer,
    artifact: Artifact,
    before: Option<i64>,
    limit: usize,
) -> Result<VersionsPage, ControlError> {
    let versions = stored_versions(deployer, artifact);
    let serving = versions.serving();
    let limit = limit.clamp(1, MAX_VERSIONS_PAGE);
    let page = blocking(move || versions.list(before, limit)).await?;
    let next = (page.len() == limit)
        .then(|| page.last().map(|v| v.id))
        .flatten();
    Ok(VersionsPage {
        versions: page
            .into_iter()
            .map(|v| VersionView::of(v, serving, false))
            .collect(),
        serving,
        next,
    })
}

async fn stored(
    deployer: &Deployer,
    artifact: Artifact,
    id: i64,
) -> Result<StoredVersion, ControlError> {
    let v = stored_versions(deployer, artifact);
    blocking(move || v.get(id))
        .await?
        .ok_or_else(|| ControlError::NotFound(format!("no {} version {id}", artifact.name())))
}

pub async fn get(
    deployer: &Deployer,
    artifact: Artifact,
    id: i64,
) -> Result<VersionView, ControlError> {
    let v = stored(deployer, artifact, id).await?;
    Ok(VersionView::of(
        v,
        stored_versions(deployer, artifact).serving(),
        true,
    ))
}

/// The unified diff from version `a` to version `b`.
pub async fn diff(
    deployer: &Deployer,
    artifact: Artifact,
    a: i64,
    b: i64,
) -> Result<String, ControlError> {
    let old = stored(deployer, artifact, a).await?;
    let new = stored(deployer, artifact, b).await?;
    Ok(unified_diff(
        &String::from_utf8_lossy(&old.content),
        &String::from_utf8_lossy(&new.content),
        &format!("version {a}"),
        &format!("version {b}"),
    ))
}

/// A usage file to deploy, or an older version's file again.
pub enum UsageDeploy {
    Text { text: String, comment: String },
    Rollback(i64),
}

/// Deploys a usage file version here (checked against this node's open
/// sessions' grants) and waits for the other nodes' word on it. Sessions
/// are not pushed: the file's checksum is part of each decision's memo
/// key, so every session's next request is decided under it.
pub async fn deploy_usage(
    deployer: &Deployer,
    what: UsageDeploy,
    by: String,
) -> Result<Deployed, DeployFailure> {
    let host = deployer.usage.clone();
    let usage = deployer.policy.runner().usage_versions().clone();
    let done = tokio::task::spawn_blocking(move || match what {
        UsageDeploy::Text { text, comment } => usage.deploy(&host, text, &by, &comment),
        UsageDeploy::Rollback(id) => usage.rollback(&host, id, &by),
    })
    .await
    .map_err(|e| {
        DeployFailure::Failed(ControlError::Internal(format!("deploy task failed: {e}")))
    })??;
    let nodes = adoption(deployer, Artifact::Usage, done.id).await;
    let serving = deployer.policy.runner().usage_versions().serving();
    Ok(Deployed {
        version: done.hash.clone(),
        deployed: VersionView::of(done, serving, false),
        nodes,
    })
}

/// What to deploy: a script, or an older version's script again, or
/// the end of a rollout.
pub enum Deploy {
    Source {
        source: String,
        comment: String,
    },
    Rollback(i64),
    /// The running rollout's canary for everyone.
    Promote,
    /// The running rollout's stable script for everyone, as a new version.
    Abort,
}

/// Runs a blocking deployment task off the async workers.
async fn deploying<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, DeployError> + Send + 'static,
) -> Result<T, DeployFailure> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| {
            DeployFailure::Failed(ControlError::Internal(format!("deploy task failed: {e}")))
        })?
        .map_err(DeployFailure::from)
}

pub async fn deploy(
    deployer: &Deployer,
    what: Deploy,
    by: String,
) -> Result<Deployed, DeployFailure> {
    let versions = deployer.policy.runner().policy_versions().clone();
    let ends_rollout = versions.rollout().is_some();
    let (done, withdraws) = deploying(move || {
        let done = match what {
            Deploy::Source { source, comment } => versions.deploy(source, &by, &comment),
            Deploy::Rollback(id) => versions.rollback(id, &by),
            Deploy::Promote => versions.promote_rollout(&by),
            Deploy::Abort => versions.abort_rollout(&by),
        }?;
        Ok((done, versions.serving_withdraws()?))
    })
    .await?;
    if ends_rollout || withdraws {
        redecide_reassigned(deployer);
    }
    let nodes = adoption(deployer, Artifact::Policy, done.id).await;
    let serving = deployer.policy.runner().policy_versions().serving();
    Ok(Deployed {
        version: done.hash.clone(),
        deployed: VersionView::of(done, serving, false),
        nodes,
    })
}

/// Starts a rollout and re-decides the sessions of the subscribers it
/// moves to the canary.
pub async fn start_rollout(
    deployer: &Deployer,
    start: RolloutStart,
    by: String,
) -> Result<RolloutView, DeployFailure> {
    let versions = deployer.policy.runner().policy_versions().clone();
    let (_, rollout) = deploying(move || {
        let source = match (start.source, start.version) {
            (Some(source), None) => source,
            (None, Some(id)) => {
                let v = versions.get(id)?.ok_or(DeployError::NotFound(id))?;
                String::from_utf8(v.content)
                    .map_err(|_| DeployError::Invalid(format!("version {id} is not UTF-8 text")))?
            }
            _ => {
                return Err(DeployError::Invalid(
                    "give either source (a script) or version (a stored version's id)".into(),
                ))
            }
        };
        versions.start_rollout(
            source,
            start.share_basis_points,
            start.subscribers,
            &by,
            &start.comment,
        )
    })
    .await?;
    redecide_reassigned(deployer);
    Ok(RolloutView::of(&rollout))
}

/// Widens the running rollout and re-decides the sessions it moves.
pub async fn widen_rollout(
    deployer: &Deployer,
    share_basis_points: Option<u32>,
    subscribers: Vec<String>,
    by: String,
) -> Result<RolloutView, DeployFailure> {
    let versions = deployer.policy.runner().policy_versions().clone();
    let rollout =
        deploying(move || versions.widen_rollout(share_basis_points, subscribers, &by)).await?;
    redecide_reassigned(deployer);
    Ok(RolloutView::of(&rollout))
}

/// Re-decides, in the background, the open sessions here whose last
/// decision was not made by the version their subscriber is assigned now
/// (a rollout started, widened, promoted or aborted; a version withdrawn
/// by a rollback), through the push: a RAR or an SMF notification only
/// where the decision differs.
pub(crate) fn redecide_reassigned(deployer: &Deployer) {
    let engine = &deployer.policy.engine();
    let mut keys: Vec<String> = deployer
        .sessions
        .table()
        .list(
            None,
            |s| {
                s.state == SessionState::Open
                    && s.last_decision.as_ref().is_some_and(|d| {
                        d.policy_version
                            != engine.assigned_id(s.imsi.as_deref(), s.msisdn.as_deref())
                    })
            },
            usize::MAX,
        )
        .into_iter()
        .map(|s| s.subscriber.to_string())
        .collect();
    keys.sort();
    keys.dedup();
    if keys.is_empty() {
        return;
    }
    tracing::info!(
        subscribers = keys.len(),
        "re-deciding the sessions a policy rollout moved"
    );
    let signalling = deployer.signalling.clone();
    tokio::spawn(async move {
        for key in keys {
            signalling.push_subscriber(&key, PushReason::Rollout).await;
        }
    });
}

/// Waits (at most `ADOPTION_WAIT`) until every other live node's
/// heartbeat says it serves version `id` of `artifact` or refused it.
async fn adoption(deployer: &Deployer, artifact: Artifact, id: i64) -> Vec<Adoption> {
    let started = Instant::now();
    loop {
        let view = deployer.persistence.cluster_view();
        let others: Vec<Adoption> = view
            .nodes
            .iter()
            .filter(|n| n.alive && !n.this_node)
            .map(|n| {
                let (refused, version) = match artifact {
                    Artifact::Policy => (&n.policy_refused, n.policy_version),
                    Artifact::Usage => (&n.usage_refused, n.usage_version),
                };
                (n, refused, version)
            })
            .map(|(n, refused, version)| match (refused, version) {
                (Some(r), _) if r.version == id => Adoption {
                    node: n.name.clone(),
                    state: "refused",
                    reason: Some(r.reason.clone()),
                },
                (_, Some(v)) if v >= id => Adoption {
                    node: n.name.clone(),
                    state: "serving",
                    reason: None,
                },
                _ => Adoption {
                    node: n.name.clone(),
                    state: "pending",
                    reason: None,
                },
            })
            .collect();
        if others.iter().all(|a| a.state != "pending") || started.elapsed() >= ADOPTION_WAIT {
            return others;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
