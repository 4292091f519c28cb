//! N28 (Nchf_SpendingLimitControl, TS 29.594) as data, without IO: the
//! JSON the PCF sends a CHF (SpendingLimitContext) and reads from it
//! (SpendingLimitStatus, SubscriptionTerminationInfo), their mapping to
//! the counter reports a Sy SLA or SNR carries, and the callback URI the
//! CHF notifies. Kept apart from the client (`chf.rs`) and the service so
//! that the SBI routes can decode a notification and hand it over through
//! [`SpendingNotifications`] without depending on either.

use crate::session::spending::{CounterReport, PendingStatus};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

/// The API below a CHF's `{apiRoot}`.
pub const API: &str = "/nchf-spendinglimitcontrol/v1";
/// The subscriptions collection below [`API`].
pub const SUBSCRIPTIONS: &str = "/subscriptions";
/// The 400 cause of a subscribe naming counters the CHF does not know.
pub const UNKNOWN_POLICY_COUNTERS: &str = "UNKNOWN_POLICY_COUNTERS";
/// Where on the node's SBI listener the CHF notifies; below it, one
/// segment names the subscriber's spending-limit session (our Sy
/// Session-Id, percent-encoded: it carries the subscriber, so any node of
/// a cluster finds the subscriber's sessions in the store), then
/// `/notify` or `/terminate`.
pub const CALLBACK_ROOT: &str = "/npcf-callback/v1/n28";
/// The longest session id a callback path may carry, decoded.
pub const MAX_CALLBACK_ID_BYTES: usize = 512;

/// SpendingLimitContext (TS 29.594 §6.1.6.2.2): what a subscribe (POST)
/// and a modify (PUT, the whole list replaces) send.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpendingLimitContext<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supi: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpsi: Option<String>,
    pub policy_counter_ids: &'a [String],
    pub notif_uri: &'a str,
}

/// SpendingLimitStatus (§6.1.6.2.3): the CHF's answer to a subscribe or
/// modify, and the body of its notification.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpendingLimitStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supi: Option<String>,
    /// By policy counter id; a null entry is skipped.
    #[serde(default)]
    pub status_infos: BTreeMap<String, Option<PolicyCounterInfo>>,
}

/// PolicyCounterInfo (§6.1.6.2.4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyCounterInfo {
    pub policy_counter_id: String,
    pub current_status: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pen_pol_counter_statuses: Vec<PendingPolicyCounterStatus>,
}

/// PendingPolicyCounterStatus (§6.1.6.2.5): a status from a given time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingPolicyCounterStatus {
    pub policy_counter_status: String,
    /// RFC 3339 date-time.
    pub activation_time: String,
}

/// SubscriptionTerminationInfo (§6.1.6.2.6): the CHF ended the
/// subscription.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionTerminationInfo {
    pub supi: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term_cause: Option<String>,
}

impl SpendingLimitStatus {
    /// The statuses as counter reports (as an SLA or SNR carries them):
    /// one per non-null entry, its pending statuses with their activation
    /// times as Unix ms. A status or id that is empty, or a time that is
    /// not RFC 3339, makes the whole body wrong (named in the error).
    pub fn reports(&self) -> Result<Vec<CounterReport>, String> {
        let mut out = Vec::with_capacity(self.status_infos.len());
        for (key, info) in &self.status_infos {
            let Some(info) = info else { continue };
            let id = if info.policy_counter_id.is_empty() {
                key.clone()
            } else {
                info.policy_counter_id.clone()
            };
            if id.is_empty() {
                return Err("statusInfos: an empty policyCounterId".into());
            }
            if info.current_status.is_empty() {
                return Err(format!("statusInfos/{id}/currentStatus: empty"));
            }
            let mut pending = Vec::with_capacity(info.pen_pol_counter_statuses.len());
            for (i, p) in info.pen_pol_counter_statuses.iter().enumerate() {
                let at: jiff::Timestamp = p.activation_time.parse().map_err(|e| {
                    format!(
                        "statusInfos/{id}/penPolCounterStatuses/{i}/activationTime: not an RFC 3339 date-time: {e}"
                    )
                })?;
                if p.policy_counter_status.is_empty() {
                    return Err(format!(
                        "statusInfos/{id}/penPolCounterStatuses/{i}/policyCounterStatus: empty"
                    ));
                }
                pending.push(PendingStatus {
                    status: p.policy_counter_status.clone(),
                    at_ms: at.as_millisecond(),
                });
            }
            out.push(CounterReport {
                id,
                status: info.current_status.clone(),
                pending,
            });
        }
        Ok(out)
    }
}

/// The path of the callback of session `session_id` below the node's SBI
/// root (the notifUri sent to the CHF).
pub fn callback_path(session_id: &str) -> String {
    format!("{CALLBACK_ROOT}/{}", percent_encode(session_id))
}

/// What a notification path below [`CALLBACK_ROOT`] names: the session id
/// and the action (`notify` or `terminate`, or another word), or none when
/// it is not such a path.
pub fn parse_callback(rest: &str) -> Option<(String, &str)> {
    let rest = rest.strip_prefix('/')?;
    let (id, action) = rest.split_once('/')?;
    if action.contains('/') || id.is_empty() {
        return None;
    }
    let id = percent_decode(id)?;
    (id.len() <= MAX_CALLBACK_ID_BYTES).then_some((id, action))
}

/// Every byte but the RFC 3986 unreserved ones as `%XX`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The inverse of [`percent_encode`] (any `%XX` decoded); none for a bad
/// escape or bytes that are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// How the node took a CHF's notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotifyOutcome {
    /// Applied (stored; the subscriber's sessions are decided again).
    Applied,
    /// No such subscription here (404).
    Unknown,
    /// Shed by admission control (503).
    Busy,
    /// Not stored (500), with why.
    Failed(String),
}

/// A notification being handled.
pub type NotifyFuture<'a> = Pin<Box<dyn Future<Output = NotifyOutcome> + Send + 'a>>;

/// What the SBI routes hand a CHF's notifications to (the Sy service, which
/// applies them as it applies an SNR).
pub trait SpendingNotifications: Send + Sync + 'static {
    /// `POST {notifUri}/notify`: new statuses for session `session_id`.
    fn notify(&self, session_id: String, status: SpendingLimitStatus) -> NotifyFuture<'_>;
    /// `POST {notifUri}/terminate`: the CHF ended the subscription.
    fn terminate(&self, session_id: String, info: SubscriptionTerminationInfo) -> NotifyFuture<'_>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_with_pending_changes_maps_to_reports() {
        let body = r#"{
            "supi": "imsi-001010000000001",
            "statusInfos": {
                "monthly-data": {
                    "policyCounterId": "monthly-data",
                    "currentStatus": "valid",
                    "penPolCounterStatuses": [
                        {"policyCounterStatus": "exhausted", "activationTime": "2026-12-01T00:00:00Z"},
                        {"policyCounterStatus": "valid", "activationTime": "2027-01-01T01:00:00+01:00"}
                    ]
                },
                "roaming": {"policyCounterId": "roaming", "currentStatus": "blocked"},
                "gone": null
            }
        }"#;
        let st: SpendingLimitStatus = serde_json::from_str(body).expect("parse");
        let r = st.reports().expect("valid");
        assert_eq!(r.len(), 2, "the null entry is skipped");
        assert_eq!(r[0].id, "monthly-data");
        assert_eq!(r[0].status, "valid");
        assert_eq!(
            r[0].pending,
            [
                PendingStatus {
                    status: "exhausted".into(),
                    at_ms: 1_796_083_200_000
                },
                PendingStatus {
                    status: "valid".into(),
                    at_ms: 1_798_761_600_000
                },
            ]
        );
        assert_eq!(r[1].id, "roaming");
        assert_eq!(r[1].status, "blocked");
        assert!(r[1].pending.is_empty());
    }

    #[test]
    fn a_bad_time_or_an_empty_status_is_refused() {
        let bad_time = r#"{"statusInfos": {"c": {"policyCounterId": "c", "currentStatus": "valid",
            "penPolCounterStatuses": [{"policyCounterStatus": "x", "activationTime": "tomorrow"}]}}}"#;
        let st: SpendingLimitStatus = serde_json::from_str(bad_time).expect("parse");
        let e = st.reports().expect_err("bad time");
        assert!(e.contains("activationTime"), "{e}");
        let empty = r#"{"statusInfos": {"c": {"policyCounterId": "c", "currentStatus": ""}}}"#;
        let st: SpendingLimitStatus = serde_json::from_str(empty).expect("parse");
        assert!(st.reports().is_err());
        assert!(serde_json::from_str::<SpendingLimitStatus>(r#"{"statusInfos": 3}"#).is_err());
    }

    #[test]
    fn the_context_is_written_as_ts_29_594_names_it() {
        let counters = vec!["a".to_owned(), "b".to_owned()];
        let ctx = SpendingLimitContext {
            supi: Some("imsi-001010000000001".into()),
            gpsi: None,
            policy_counter_ids: &counters,
            notif_uri: "http://pcf/npcf-callback/v1/n28/x",
        };
        let v = serde_json::to_value(&ctx).expect("json");
        assert_eq!(
            v,
            serde_json::json!({
                "supi": "imsi-001010000000001",
                "policyCounterIds": ["a", "b"],
                "notifUri": "http://pcf/npcf-callback/v1/n28/x",
            })
        );
    }

    #[test]
    fn the_callback_path_carries_the_session_id_both_ways() {
        let id = "pcrf1.example;sy;1764165600;7;001010000000001";
        let path = callback_path(id);
        assert_eq!(
            path,
            "/npcf-callback/v1/n28/pcrf1.example%3Bsy%3B1764165600%3B7%3B001010000000001"
        );
        let rest = path.strip_prefix(CALLBACK_ROOT).expect("below the root");
        assert_eq!(
            parse_callback(&format!("{rest}/notify")),
            Some((id.to_owned(), "notify"))
        );
        assert_eq!(parse_callback(rest), None, "no action");
        assert_eq!(parse_callback("/a/notify/x"), None);
        assert_eq!(parse_callback("/%zz/notify"), None);
        assert_eq!(parse_callback("/%FF/notify"), None, "not UTF-8");
        let long = "a".repeat(MAX_CALLBACK_ID_BYTES + 1);
        assert_eq!(parse_callback(&format!("/{long}/notify")), None);
    }
}
