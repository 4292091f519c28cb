//! The operations on the policy's stored versions (over
//! `policy::versions`): the list, one version with its text, a diff
//! between two, a deployment or rollback and which nodes serve it after a
//! short wait. Their shapes are in `version_views.rs`.

use crate::control::version_views::{
    Adoption, Deployed, RolloutStart, RolloutView, VersionView, VersionsPage, MAX_VERSIONS_PAGE,
};
use crate::control::{ControlError, DeployFailure};
use crate::node::Node;
use crate::pcc::PushReason;
use crate::policy::versions::{unified_diff, DeployError, PolicyVersions};
use crate::session::SessionState;
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

pub async fn deploy(node: &Arc<Node>, what: Deploy, by: String) -> Result<Deployed, DeployFailure> {
    let versions = node.policy_versions.clone();
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
        redecide_reassigned(node);
    }
    let nodes = adoption(node, done.id).await;
    let serving = node.policy_versions.serving();
    Ok(Deployed {
        version: done.hash.clone(),
        deployed: VersionView::of(done, serving, false),
        nodes,
    })
}

/// Starts a rollout and re-decides the sessions of the subscribers it
/// moves to the canary.
pub async fn start_rollout(
    node: &Arc<Node>,
    start: RolloutStart,
    by: String,
) -> Result<RolloutView, DeployFailure> {
    let versions = node.policy_versions.clone();
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
    redecide_reassigned(node);
    Ok(RolloutView::of(&rollout))
}

/// Widens the running rollout and re-decides the sessions it moves.
pub async fn widen_rollout(
    node: &Arc<Node>,
    share_basis_points: Option<u32>,
    subscribers: Vec<String>,
    by: String,
) -> Result<RolloutView, DeployFailure> {
    let versions = node.policy_versions.clone();
    let rollout =
        deploying(move || versions.widen_rollout(share_basis_points, subscribers, &by)).await?;
    redecide_reassigned(node);
    Ok(RolloutView::of(&rollout))
}

/// Re-decides, in the background, the open sessions here whose last
/// decision was not made by the version their subscriber is assigned now
/// (a rollout started, widened, promoted or aborted; a version withdrawn
/// by a rollback), through the push: a RAR or an SMF notification only
/// where the decision differs.
pub(crate) fn redecide_reassigned(node: &Arc<Node>) {
    let engine = &node.policy;
    let mut keys: Vec<String> = node
        .sessions
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
        .map(|s| s.subscriber.clone())
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
    let node = node.clone();
    tokio::spawn(async move {
        for key in keys {
            node.push_subscriber(&key, PushReason::Rollout).await;
        }
    });
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
