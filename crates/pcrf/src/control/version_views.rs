//! What the API and the console see of the stored versions of the policy
//! and of the usage file: a version, a page of them, a deployment's answer
//! with each node's word on it (filled by `versions.rs`).

use crate::store::versions::StoredVersion;
use serde::Serialize;

/// Versions per page unless `?limit=` says otherwise.
pub const DEFAULT_VERSIONS_PAGE: usize = 50;
/// The largest page.
pub const MAX_VERSIONS_PAGE: usize = 500;

/// Which deployed file: the Lua policy or the usage file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Artifact {
    Policy,
    Usage,
}

impl Artifact {
    /// As messages name it.
    pub fn name(self) -> &'static str {
        match self {
            Artifact::Policy => "policy",
            Artifact::Usage => "usage file",
        }
    }
}

/// One stored version.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct VersionView {
    /// 1, 2, 3... in the order deployed; decisions name it
    /// (`last_decision.policy_version`).
    pub id: i64,
    /// The newest version when this one was deployed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<i64>,
    /// The text's hash, 16 hex digits: for the policy `script_version` in
    /// logs and decisions, for the usage file its checksum
    /// (`usage_config` in a subscriber's usage).
    pub hash: String,
    /// "file" (the file: at first start-up, edited, reloaded),
    /// "token" (the API with a token) or "local" (without one).
    pub by: String,
    /// Unix milliseconds.
    pub at_ms: i64,
    pub comment: String,
    /// This node serves it.
    pub serving: bool,
    /// The text: the Lua script or the usage file's TOML (one version
    /// only, not in lists).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl VersionView {
    pub(crate) fn of(v: StoredVersion, serving: i64, with_source: bool) -> VersionView {
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

/// `GET /v1/policy/versions`, `GET /v1/usage/versions`.
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

/// A rollout running: which version decides for whom.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct RolloutView {
    /// The version everyone else stays on.
    pub stable: i64,
    /// The version on trial (the newest stored version).
    pub canary: i64,
    /// The share of subscribers the canary decides for, 0 to 100.
    pub share_percent: f64,
    /// Subscribers (IMSI or MSISDN) on the canary whatever the share.
    pub subscribers: Vec<String>,
}

impl RolloutView {
    pub(crate) fn of(r: &crate::policy::rollout::Rollout) -> RolloutView {
        RolloutView {
            stable: r.stable,
            canary: r.canary,
            share_percent: f64::from(r.share_basis_points) / 100.0,
            subscribers: r.subscribers.clone(),
        }
    }
}

/// What to start a rollout with: a script or a stored version's script,
/// and who gets it.
#[derive(Clone, Debug)]
pub struct RolloutStart {
    pub source: Option<String>,
    pub version: Option<i64>,
    pub share_basis_points: u32,
    pub subscribers: Vec<String>,
    pub comment: String,
}
