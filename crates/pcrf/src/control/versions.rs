//! The operations on the policy's stored versions (over
//! `policy::versions`): the list, one version with its text, a diff
//! between two, a deployment or rollback and which nodes serve it after a
//! short wait. Their shapes are in `version_views.rs`.

use crate::control::version_views::{
    Adoption, Deployed, VersionView, VersionsPage, MAX_VERSIONS_PAGE,
};
use crate::control::{ControlError, DeployFailure};
use crate::node::Node;
use crate::policy::versions::{unified_diff, PolicyVersions};
use crate::store::versions::StoredVersion;
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
