//! What the operator console asks of the node beyond provisioning and
//! session control: subscriber search with paging, and the policy
//! workbench (the running script and its version, a draft checked,
//! tested or dry-run beside the running script, a deployment). The
//! answers' shapes are here; `operations.rs` fills them in.

use crate::policy::cases::Report;
use crate::policy::Decision;
use serde::{Deserialize, Serialize};

/// `GET /v1/subscribers?q=...`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriberQuery {
    /// An IMSI or MSISDN (exact, or the leading digits), or a UE address
    /// (IPv4 or IPv6) of an open session; empty lists every subscriber.
    #[serde(default)]
    pub q: String,
    /// Paging: the last IMSI of the previous page.
    #[serde(default)]
    pub after: Option<String>,
    #[serde(default = "default_page")]
    pub limit: usize,
}

/// Subscribers per page unless `?limit=` says otherwise.
pub const DEFAULT_PAGE: usize = 20;
/// The largest page.
pub const MAX_PAGE: usize = 200;

fn default_page() -> usize {
    DEFAULT_PAGE
}

/// One subscriber found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SubscriberHit {
    pub imsi: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msisdn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Open Gx sessions.
    pub sessions: usize,
    /// False for a session's subscriber key that no profile provisions.
    pub provisioned: bool,
}

/// A page of subscribers, in IMSI order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SubscriberPage {
    pub subscribers: Vec<SubscriberHit>,
    /// Pass as `after` for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// How the query was read: "imsi", "msisdn", "ue_address" (exact
    /// look-ups in an index), "imsi_prefix" (a range of the ordered IMSI
    /// index) or "msisdn_prefix" (a scan of the table).
    pub matched_by: &'static str,
}

/// The running policy.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyView {
    /// 16 hex digits, as logged.
    pub version: String,
    pub path: String,
    pub source: String,
    /// The test-case file beside the script (`NAME.cases.toml`), when
    /// there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cases: Option<String>,
    /// The stored version serving (`GET /v1/policy/versions` lists them
    /// all, who deployed each, when and why).
    pub id: i64,
    /// The newest stored version, while this node refuses it, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<crate::policy::versions::Refusal>,
    /// The rollout running, while one runs (`id` is its stable version).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout: Option<crate::control::version_views::RolloutView>,
}

/// One test case's result.
#[derive(Clone, Debug, Serialize)]
pub struct CaseView {
    pub name: String,
    pub passed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Fields whose value differs: `field`, `expected`, `actual`.
    pub diffs: Vec<serde_json::Value>,
}

/// The test cases run on a script.
#[derive(Clone, Debug, Serialize)]
pub struct TestView {
    pub script_version: String,
    pub cases_file: String,
    pub passed: usize,
    pub failed: usize,
    pub cases: Vec<CaseView>,
}

impl TestView {
    pub fn of(report: &Report, cases_file: String) -> TestView {
        let cases: Vec<CaseView> = report
            .cases
            .iter()
            .map(|c| CaseView {
                name: c.name.clone(),
                passed: c.passed(),
                error: c.error.clone(),
                diffs: c
                    .diffs
                    .iter()
                    .map(|d| {
                        serde_json::json!({
                            "field": d.field, "expected": d.expected, "actual": d.actual,
                        })
                    })
                    .collect(),
            })
            .collect();
        let failed = report.failed();
        TestView {
            script_version: format!("{:016x}", report.script_version),
            cases_file,
            passed: cases.len() - failed,
            failed,
            cases,
        }
    }
}

/// One script's answer in a dry run.
#[derive(Clone, Debug, Serialize)]
pub struct DryDecision {
    pub script_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A draft and the running script decided on the same inputs.
#[derive(Clone, Debug, Serialize)]
pub struct DryRun {
    pub subscriber: String,
    /// The session whose last decision's inputs were used; absent when
    /// the subscriber has none (the inputs are then the profile on a
    /// sample LTE session).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    pub inputs: serde_json::Value,
    pub running: DryDecision,
    pub draft: DryDecision,
}

/// `GET /v1/subscribers/{imsi}/decisions`: the subscriber's last
/// decisions from this node's decision log file, newest first.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct RecentDecisions {
    pub subscriber: String,
    /// The decision log file read (and its rotated copies).
    pub file: String,
    /// Each as the file holds it: `time`, `name`, `subscriber` and
    /// `payload` (the `decision` event's document: session, interface,
    /// trigger, policy_version, record, installed; docs/notifications.md).
    #[schema(value_type = Vec<Object>)]
    pub decisions: Vec<serde_json::Value>,
    /// Every file was read to its start: there are no older ones.
    pub complete: bool,
}
