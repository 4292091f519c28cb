//! The operations the REST API asks of the PCRF, as one trait, and what
//! each one returns. The HTTP layer only validates, translates and answers;
//! `operations.rs` carries them out over the node and the Gx service.

use crate::control::console::{
    DryRun, PolicyView, RecentDecisions, SubscriberPage, SubscriberQuery, TestView,
};
use crate::control::usage::{UsageChange, UsageView};
use crate::control::version_views::{
    Artifact, Deployed, RolloutStart, RolloutView, VersionView, VersionsPage,
};
pub use crate::pcc::operation::{ControlError, ReauthOutcome};
use crate::policy::versions::DeployError;
use crate::session::GxSession;
use crate::subscriber::Subscriber;
use crate::usage::versions::UsageDeployError;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::Arc;

/// The operations behind the `/v1` routes.
pub trait Control: Send + Sync + 'static {
    /// Creates or replaces a profile (already validated); durable when the
    /// future resolves. `Ok(true)` when it did not exist before.
    fn put_subscriber(
        &self,
        subscriber: Subscriber,
    ) -> impl Future<Output = Result<bool, ControlError>> + Send;

    /// Creates or replaces many profiles (already validated, distinct
    /// IMSIs) in one durable change: all of them are durable when the
    /// future resolves, or none is applied.
    fn put_subscribers(
        &self,
        subscribers: Vec<Subscriber>,
    ) -> impl Future<Output = Result<BatchOutcome, ControlError>> + Send;

    fn subscriber(&self, imsi: &str) -> Option<Arc<Subscriber>>;

    /// `Ok(false)` when there was no such subscriber.
    fn delete_subscriber(
        &self,
        imsi: &str,
    ) -> impl Future<Output = Result<bool, ControlError>> + Send;

    /// Sessions matching every set field of `filter`, at most `filter.limit`.
    fn sessions(&self, filter: &SessionFilter) -> Vec<Arc<GxSession>>;

    /// One session, open or closed (closed ones are read from the store).
    fn session(&self, id: &str) -> impl Future<Output = Option<Arc<GxSession>>> + Send;

    /// Re-decides the session and pushes the difference to its PCEF in a RAR.
    fn reauth(&self, id: &str) -> impl Future<Output = Result<ReauthOutcome, ControlError>> + Send;

    /// Asks the PCEF to end the session: RAR with Session-Release-Cause.
    fn release(
        &self,
        id: &str,
        cause: ReleaseCause,
    ) -> impl Future<Output = Result<ReleaseOutcome, ControlError>> + Send;

    /// Loads, checks and swaps in the policy script; the new version on
    /// success, the old script keeps serving on error.
    fn reload_policy(&self) -> impl Future<Output = Result<u64, ReloadError>> + Send;

    /// Sets the congestion level of a cell (`cell` is 14 lowercase hex
    /// digits: the ECGI as in 3GPP-User-Location-Info); 0 clears it. The
    /// sessions located there are re-decided (spread over time); returns
    /// how many.
    fn set_congestion(&self, cell: &str, level: u32) -> usize;

    /// A subscriber's usage; `None` when the subscriber is not provisioned.
    fn usage(&self, imsi: &str) -> Option<UsageView>;

    /// As `usage`, read from the store where other nodes write it too (a
    /// shared store), so that it includes what they counted.
    fn usage_stored(&self, imsi: &str) -> impl Future<Output = Option<UsageView>> + Send {
        std::future::ready(self.usage(imsi))
    }

    /// The subscriber's last `limit` decisions from this node's decision
    /// log file (`[decision_log].file`), newest first.
    fn recent_decisions(
        &self,
        _imsi: String,
        _limit: usize,
    ) -> impl Future<Output = Result<RecentDecisions, ControlError>> + Send {
        async { Err(ControlError::Unavailable("no decision log here".into())) }
    }

    /// Adds octets to this period's allowance of one accumulator, durably,
    /// then re-decides the subscriber's open sessions.
    fn topup(
        &self,
        imsi: &str,
        accumulator: &str,
        octets: u64,
    ) -> impl Future<Output = Result<UsageChange, ControlError>> + Send;

    /// Starts a new period now for one accumulator (or all), durably, then
    /// re-decides the subscriber's open sessions.
    fn reset_usage(
        &self,
        imsi: &str,
        accumulator: Option<&str>,
    ) -> impl Future<Output = Result<UsageChange, ControlError>> + Send;

    /// Ready to serve: `Err(reason)` when, e.g., the store is not writable.
    fn ready(&self) -> impl Future<Output = Result<(), String>> + Send;

    /// Checksum of the running configuration (hex).
    fn config_checksum(&self) -> String;

    /// The Prometheus scrape (see [`crate::metrics::Metrics::render`]).
    fn render_metrics(&self) -> String;

    /// Subscribers matching a console search, a page at a time.
    fn search_subscribers(&self, _query: &SubscriberQuery) -> SubscriberPage {
        SubscriberPage::default()
    }

    /// The running policy script, its version and history.
    fn policy(&self) -> Option<PolicyView> {
        None
    }

    /// Compiles and checks a draft as a reload would; its version, or
    /// the error with its line.
    fn check_policy(
        &self,
        _source: String,
    ) -> impl Future<Output = Result<u64, ReloadError>> + Send {
        async { Err(not_here()) }
    }

    /// Runs the policy's test cases on a draft, or on the running script
    /// when `source` is `None`.
    fn test_policy(
        &self,
        _source: Option<String>,
    ) -> impl Future<Output = Result<TestView, ReloadError>> + Send {
        async { Err(not_here()) }
    }

    /// Decides with a draft and with the running script on the inputs of
    /// a subscriber's last decision.
    fn dry_run_policy(
        &self,
        _source: String,
        _imsi: String,
    ) -> impl Future<Output = Result<DryRun, ControlError>> + Send {
        async { Err(ControlError::Unavailable("no policy workbench".into())) }
    }

    /// Checks a draft (test cases included), records it as the next
    /// stored version, writes it to the policy file and makes it the
    /// running script; `by` is who, `comment` why.
    fn deploy_policy(
        &self,
        _source: String,
        _by: String,
        _comment: String,
    ) -> impl Future<Output = Result<Deployed, DeployFailure>> + Send {
        async { Err(DeployFailure::Refused(not_here())) }
    }

    /// Deploys stored version `id`'s script again, as the next version.
    fn rollback_policy(
        &self,
        _id: i64,
        _by: String,
    ) -> impl Future<Output = Result<Deployed, DeployFailure>> + Send {
        async { Err(DeployFailure::Refused(not_here())) }
    }

    /// Starts a canary rollout of a script (recorded as the next
    /// version) for a share of the subscribers and those listed.
    fn start_rollout(
        &self,
        _start: RolloutStart,
        _by: String,
    ) -> impl Future<Output = Result<RolloutView, DeployFailure>> + Send {
        async { Err(DeployFailure::Refused(not_here())) }
    }

    /// Widens the running rollout (a larger share, more subscribers).
    fn widen_rollout(
        &self,
        _share_basis_points: Option<u32>,
        _subscribers: Vec<String>,
        _by: String,
    ) -> impl Future<Output = Result<RolloutView, DeployFailure>> + Send {
        async { Err(DeployFailure::Refused(not_here())) }
    }

    /// Promotes the running rollout's canary to everyone.
    fn promote_rollout(
        &self,
        _by: String,
    ) -> impl Future<Output = Result<Deployed, DeployFailure>> + Send {
        async { Err(DeployFailure::Refused(not_here())) }
    }

    /// Withdraws the running rollout's canary: the stable version again.
    fn abort_rollout(
        &self,
        _by: String,
    ) -> impl Future<Output = Result<Deployed, DeployFailure>> + Send {
        async { Err(DeployFailure::Refused(not_here())) }
    }

    /// Checks a usage file (validation, and the grants open sessions
    /// hold), records it as the next stored version, writes it to the
    /// usage file and puts it in force; `by` is who, `comment` why.
    fn deploy_usage(
        &self,
        _text: String,
        _by: String,
        _comment: String,
    ) -> impl Future<Output = Result<Deployed, DeployFailure>> + Send {
        async { Err(DeployFailure::Refused(not_here())) }
    }

    /// Deploys stored usage file version `id` again, as the next version.
    fn rollback_usage(
        &self,
        _id: i64,
        _by: String,
    ) -> impl Future<Output = Result<Deployed, DeployFailure>> + Send {
        async { Err(DeployFailure::Refused(not_here())) }
    }

    /// The stored versions of `artifact` before `before`, newest first.
    fn versions(
        &self,
        _artifact: Artifact,
        _before: Option<i64>,
        _limit: usize,
    ) -> impl Future<Output = Result<VersionsPage, ControlError>> + Send {
        async { Err(ControlError::Unavailable("no stored versions".into())) }
    }

    /// One stored version of `artifact` with its text.
    fn version(
        &self,
        _artifact: Artifact,
        _id: i64,
    ) -> impl Future<Output = Result<VersionView, ControlError>> + Send {
        async { Err(ControlError::Unavailable("no stored versions".into())) }
    }

    /// The unified diff from stored version `a` of `artifact` to `b`.
    fn version_diff(
        &self,
        _artifact: Artifact,
        _a: i64,
        _b: i64,
    ) -> impl Future<Output = Result<String, ControlError>> + Send {
        async { Err(ControlError::Unavailable("no stored versions".into())) }
    }

    /// The store's query profiler; only the PostgreSQL store has one.
    fn query_profiler(&self) -> Option<crate::store::postgres::QueryProfiler> {
        None
    }

    /// The notification outbox: backlog and counters per sink.
    fn notifications(&self) -> crate::notify::OutboxStatus {
        crate::notify::Outbox::disabled().status()
    }

    /// The nodes sharing the store and their liveness; `None` where there
    /// is no node behind the API.
    fn cluster(&self) -> Option<crate::cluster::membership::ClusterView> {
        None
    }
}

fn not_here() -> ReloadError {
    ReloadError {
        error: "no policy workbench".into(),
        line: None,
    }
}

/// A refused policy reload: the message and the script line Lua blamed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{error}")]
pub struct ReloadError {
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// `GET /v1/sessions` query; unset fields match everything.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionFilter {
    /// IMSI or MSISDN.
    #[serde(default)]
    pub subscriber: Option<String>,
    /// Called-Station-Id.
    #[serde(default)]
    pub apn: Option<String>,
    /// The PCEF's Origin-Host.
    #[serde(default)]
    pub peer: Option<String>,
    #[serde(default = "default_limit")]
    pub limit: usize,
}

/// Sessions per listing unless `?limit=` says otherwise.
pub const DEFAULT_SESSION_LIMIT: usize = 1000;
/// The largest `?limit=` accepted: a listing is built in memory.
pub const MAX_SESSION_LIMIT: usize = 100_000;

fn default_limit() -> usize {
    DEFAULT_SESSION_LIMIT
}

impl Default for SessionFilter {
    fn default() -> Self {
        SessionFilter {
            subscriber: None,
            apn: None,
            peer: None,
            limit: DEFAULT_SESSION_LIMIT,
        }
    }
}

impl SessionFilter {
    /// Whether `s` passes the filter (the limit aside); implementors may
    /// use it or an index of their own.
    pub fn matches(&self, s: &GxSession) -> bool {
        let subscriber_ok = self.subscriber.as_deref().is_none_or(|want| {
            *s.subscriber == *want
                || s.imsi.as_deref() == Some(want)
                || s.msisdn.as_deref() == Some(want)
        });
        subscriber_ok
            && self
                .apn
                .as_deref()
                .is_none_or(|want| s.apn.as_deref() == Some(want))
            && self
                .peer
                .as_deref()
                .is_none_or(|want| *s.pcef_host == *want)
    }
}

/// Session-Release-Cause (TS 29.212 §5.3.33), spelled as the spec does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ReleaseCause {
    #[default]
    UnspecifiedReason,
    UeSubscriptionReason,
    InsufficientServerResources,
    IpCanChange,
    InsufficientBearerResources,
}

impl ReleaseCause {
    /// The AVP's Enumerated value.
    pub fn code(self) -> u32 {
        match self {
            ReleaseCause::UnspecifiedReason => 0,
            ReleaseCause::UeSubscriptionReason => 1,
            ReleaseCause::InsufficientServerResources => 2,
            ReleaseCause::IpCanChange => 3,
            ReleaseCause::InsufficientBearerResources => 4,
        }
    }
}

/// What a release did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReleaseOutcome {
    /// The RAA's Result-Code or Experimental-Result-Code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_code: Option<u32>,
}

/// What a batch of profiles did (`POST /v1/subscribers/batch`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BatchOutcome {
    /// Profiles that did not exist before.
    pub created: u64,
    /// Profiles that existed and were replaced (possibly by the same
    /// profile: an unchanged row is not rewritten by the store).
    pub updated: u64,
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
            DeployError::Invalid(e) => DeployFailure::Failed(ControlError::Invalid(e)),
            e @ (DeployError::RolloutRunning(_) | DeployError::NoRollout) => {
                DeployFailure::Failed(ControlError::Conflict(e.to_string()))
            }
            DeployError::Store(e) => {
                DeployFailure::Failed(ControlError::Unavailable(e.to_string()))
            }
        }
    }
}

impl From<UsageDeployError> for DeployFailure {
    fn from(e: UsageDeployError) -> DeployFailure {
        match e {
            UsageDeployError::Refused(error) => {
                DeployFailure::Refused(ReloadError { line: None, error })
            }
            e @ UsageDeployError::Conflict(_) => {
                DeployFailure::Failed(ControlError::Conflict(e.to_string()))
            }
            e @ UsageDeployError::NotFound(_) => {
                DeployFailure::Failed(ControlError::NotFound(e.to_string()))
            }
            UsageDeployError::Store(e) => {
                DeployFailure::Failed(ControlError::Unavailable(e.to_string()))
            }
        }
    }
}

impl From<crate::store::StoreError> for ControlError {
    fn from(e: crate::store::StoreError) -> ControlError {
        ControlError::Unavailable(e.to_string())
    }
}
