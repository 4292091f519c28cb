//! The policy's stored versions as the API and the console see them: the
//! list, one version with its text, a diff between two, a deployment or
//! rollback and which nodes serve it after a short wait. The shapes are
//! here with the operations that fill them (over `policy::versions`).

use crate::control::{ControlError, ReloadError};
use crate::node::Node;
use crate::policy::versions::{unified_diff, DeployError, PolicyVersions};
use crate::store::versions::StoredVersion;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Versions per page unless `?limit=` says otherwise.
pub const DEFAULT_VERSIONS_PAGE: usize = 50;
/// The largest page.
pub const MAX_VERSIONS_PAGE: usize = 500;

/// How long a deployment's answer waits, at most, for the other live
/// nodes to serve the new version or refuse it (their heartbeat rows say
/// which); past it they are listed as "pending".
pub const ADOPTION_WAIT: Duration = Duration::from_secs(5);

/// One stored version.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct VersionView {
    /// 1, 2, 3... in the order deployed; decisions name it
    /// (`last_decision.policy_version`).
    pub id: i64,
    /// The newest version when this one was deployed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<i64>,
    /// The script's hash, 16 hex digits (`script_version` in logs and
    /// decisions).
    pub hash: String,
    /// "file" (the policy file: at first start-up, edited, reloaded),
    /// "token" (the API with a token) or "local" (without one).
    pub by: String,
    /// Unix milliseconds.
    pub at_ms: i64,
    pub comment: String,
    /// This node serves it.
    pub serving: bool,
    /// The script (one version only, not in lists).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl VersionView {
    fn of(v: StoredVersion, serving: i64, with_source: bool) -> VersionView {
        VersionView {
            serving: v.id == serving,
            source: with_source.then(|| String::from_utf8_lossy(&v.content).into_owned()),
            id: v.id,
            parent: v.parent,
            hash: v.hash,
            by: v.by,
            at_ms: v.at_ms,
            comment: v.comment,
        }
    }
}

/// `GET /v1/policy/versions`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct VersionsPage {
    /// Newest first.
    pub versions: Vec<VersionView>,
    /// The version this node serves.
    pub serving: i64,
    /// Pass as `?before=` for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<i64>,
}

/// One node's answer to a deployment.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Adoption {
    pub node: String,
    /// "serving", "refused" (with `reason`; it keeps its version) or
    /// "pending" (no word within the wait).
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A deployment or rollback: the version now serving here, and what the
/// other live nodes said of it within `ADOPTION_WAIT`.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Deployed {
    /// Its hash, 16 hex digits (as `PUT /v1/policy` always answered).
    pub version: String,
    pub deployed: VersionView,
    /// Every live node but this one (none on the embedded store).
    pub nodes: Vec<Adoption>,
}

/// Why a deployment was not made: refused (422, with the script line) or
/// failed (the store, a conflict, no such version).
#[derive(Debug)]
pub enum DeployFailure {
    Refused(ReloadError),
    Failed(ControlError),
}

impl From<DeployError> for DeployFailure {
    fn from(e: DeployError) -> DeployFailure {
        match e {
            DeployError::Refused(p) => DeployFailure::Refused(ReloadError {
                line: p.line(),
                error: p.to_string(),
            }),
            e @ DeployError::Conflict(_) => {
                DeployFailure::Failed(ControlError::Conflict(e.to_string()))
            }
            e @ DeployError::NotFound(_) => {
                DeployFailure::Failed(ControlError::NotFound(e.to_string()))
            }
            DeployError::Store(e) => {
                DeployFailure::Failed(ControlError::Unavailable(e.to_string()))
            }
        }
    }
}

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

impl From<crate::store::StoreError> for ControlError {
    fn from(e: crate::store::StoreError) -> ControlError {
        ControlError::Unavailable(e.to_string())
    }
}

pub async fn list(
    node: &Node,
    before: Option<i64>,
    limit: usize,
) -> Result<VersionsPage, ControlError> {
    let versions = node.policy_versions.clone();
    let limit = limit.clamp(1, MAX_VERSIONS_PAGE);
    let page = blocking(move || versions.list(before, limit)).await?;
    let serving = node.policy_versions.serving();
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

async fn stored(versions: &Arc<PolicyVersions>, id: i64) -> Result<StoredVersion, ControlError> {
    let v = versions.clone();
    blocking(move || v.get(id))
        .await?
        .ok_or_else(|| ControlError::NotFound(format!("no policy version {id}")))
}

pub async fn get(node: &Node, id: i64) -> Result<VersionView, ControlError> {
    let v = stored(&node.policy_versions, id).await?;
    Ok(VersionView::of(v, node.policy_versions.serving(), true))
}

/// The unified diff from version `a` to version `b`.
pub async fn diff(node: &Node, a: i64, b: i64) -> Result<String, ControlError> {
    let old = stored(&node.policy_versions, a).await?;
    let new = stored(&node.policy_versions, b).await?;
    Ok(unified_diff(
        &String::from_utf8_lossy(&old.content),
        &String::from_utf8_lossy(&new.content),
        &format!("version {a}"),
        &format!("version {b}"),
    ))
}

/// What to deploy: a script, or an older version's script again.
pub enum Deploy {
    Source { source: String, comment: String },
    Rollback(i64),
}

pub async fn deploy(node: &Node, what: Deploy, by: String) -> Result<Deployed, DeployFailure> {
    let versions = node.policy_versions.clone();
    let done = tokio::task::spawn_blocking(move || match what {
        Deploy::Source { source, comment } => versions.deploy(source, &by, &comment),
        Deploy::Rollback(id) => versions.rollback(id, &by),
    })
    .await
    .map_err(|e| {
        DeployFailure::Failed(ControlError::Internal(format!("deploy task failed: {e}")))
    })??;
    let nodes = adoption(node, done.id).await;
    let serving = node.policy_versions.serving();
    Ok(Deployed {
        version: done.hash.clone(),
        deployed: VersionView::of(done, serving, false),
        nodes,
    })
}

/// Waits (at most `ADOPTION_WAIT`) until every other live node's
/// heartbeat says it serves version `id` or refused it.
async fn adoption(node: &Node, id: i64) -> Vec<Adoption> {
    let started = Instant::now();
    loop {
        let view = node.cluster_view();
        let others: Vec<Adoption> = view
            .nodes
            .iter()
            .filter(|n| n.alive && !n.this_node)
            .map(|n| match (&n.policy_refused, n.policy_version) {
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
