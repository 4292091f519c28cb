//! Pushes to an SMF (TS 29.512 §4.2.3 and §4.2.4): when a decision
//! changes without a request (provisioning, a policy reload, a top-up,
//! time, an OCS status, an AF, an operator's re-auth), the SMF gets an
//! SmPolicyNotification at `{notificationUri}/update` carrying only what
//! changed; when the policy or an operator ends the session, a
//! TerminationNotification at `{notificationUri}/terminate`, after which
//! the SMF deletes the SM policy.
//!
//! The node pushes to every session's enforcement point through one call
//! (`Signalling::send_push`); for an N7 session it lands here, through the N7
//! service's `SmfSignalling` (the node knows no N7 type), and the SMF's
//! answer comes back as what a PCEF's RAA says: success (with any rule
//! reports of a partial success), 5002 for 404 (the SMF has no such
//! session: the node forgets it), or a failure.

use super::held::{changes_for_smf, held_by_smf, rule_reports, whole_at};
use super::model::{RuleReport, SmPolicyNotification};
use crate::metrics::Command;
use crate::node::{BoxFuture, Signalling, SmfSignalling};
use crate::pcc::operation::ControlError;
use crate::pcc::reauth_answer::Raa;
use crate::pcc::UsageInstructions;
use crate::policy::decision::Decision;
use crate::session::GxSession;
use diameter::peer::{Backoff, Jitter};
use diameter::result_code;
use serde::Deserialize;
use std::time::{Duration, Instant};

/// Tries of one push when the SMF cannot be reached or answers 5xx. The
/// push holds the session's lock (as a RAR awaiting its RAA does), so the
/// retries are few and short: a push that still fails is counted and
/// logged, and the next change or Update brings the SMF in step.
const PUSH_ATTEMPTS: u32 = 3;
const RETRY_INITIAL: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_millis(400);

/// The resource URI of the SM policy `id` (what its notifications name).
pub(crate) fn sm_policy_uri(signalling: &Signalling, id: &str) -> String {
    format!(
        "{}{}/sm-policies/{id}",
        signalling.sbi_root(),
        super::service::SERVICE_ROOT
    )
}

impl SmfSignalling for super::sessions::N7 {
    fn push<'a>(
        &'a self,
        s: &'a GxSession,
        after: &'a Decision,
        release: Option<i32>,
        usage: &'a UsageInstructions,
    ) -> BoxFuture<'a, Result<Raa, ControlError>> {
        Box::pin(async move {
            let resource = sm_policy_uri(self.signalling(), &s.id);
            let what = match release {
                Some(cause) => Push::Terminate(cause),
                None => Push::Decision { after, usage },
            };
            let started = Instant::now();
            let answer = push(s, &resource, what).await;
            let code = match &answer {
                Ok(raa) => raa.result_code.unwrap_or(0),
                Err(_) => crate::metrics::NO_ANSWER,
            };
            self.telemetry()
                .metrics()
                .request(Command::N7Notify, code, started.elapsed());
            answer
        })
    }
}

/// What a push asks of the SMF.
pub(crate) enum Push<'a> {
    /// Hold `after` (the whole decision) with these usage thresholds
    /// granted afresh or stopped; the notification carries the difference
    /// from what the session's record says the SMF holds.
    Decision {
        after: &'a Decision,
        usage: &'a UsageInstructions,
    },
    /// End the session, with this Session-Release-Cause (TS 29.212
    /// §5.3.44), told as a PolicyAssociationReleaseCause.
    Terminate(i32),
}

/// The partial-success report an SMF may answer an update notification
/// with (TS 29.512 §5.6.2.26 PartialSuccessReport, inside
/// UeCampingRep's neighbour fields ignored).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartialSuccessReport {
    #[serde(default)]
    rule_reports: Vec<RuleReport>,
}

/// Sends `push` for the N7 session `s`, whose resource URI is
/// `resource_uri`, and reads the SMF's answer as an RAA.
pub(crate) async fn push(
    s: &GxSession,
    resource_uri: &str,
    push: Push<'_>,
) -> Result<Raa, ControlError> {
    let Some(ctx) = s.n7.as_deref() else {
        return Err(ControlError::Peer(format!("{} is not an N7 session", s.id)));
    };
    let base = ctx.notification_uri.as_deref().unwrap_or("");
    let base = base.strip_suffix('/').unwrap_or(base);
    let (url, body) = match push {
        Push::Decision { after, usage } => {
            let mut monitoring = s.monitoring.clone();
            for k in &usage.disable {
                monitoring.keys.remove(k.as_str());
            }
            for g in &usage.grants {
                if let Some(held) = monitoring.keys.get_mut(g.key.as_str()) {
                    held.granted = g.units;
                    held.level = g.level;
                } else {
                    monitoring.keys.insert(
                        crate::session::shared_text::shared(&g.key),
                        crate::usage::KeyGrant {
                            granted: g.units,
                            level: g.level,
                            granted_ms: 0,
                            reported_octets: 0,
                        },
                    );
                }
            }
            let at = s.revalidation_at_ms;
            let changed =
                changes_for_smf(&held_by_smf(s), &whole_at(after, &monitoring, at), usage);
            let note = SmPolicyNotification {
                resource_uri: resource_uri.to_owned(),
                sm_policy_decision: changed,
            };
            (format!("{base}/update"), serde_json::to_vec(&note))
        }
        Push::Terminate(cause) => {
            let note = serde_json::json!({
                "resourceUri": resource_uri,
                "cause": release_cause(cause),
            });
            (format!("{base}/terminate"), serde_json::to_vec(&note))
        }
    };
    let body = body.map_err(|e| ControlError::Peer(format!("notification not encoded: {e}")))?;
    let client = crate::sbi::client::client().map_err(ControlError::Unavailable)?;
    // A refused connection, a reset or a 5xx is tried again, at most
    // PUSH_ATTEMPTS times in all, waiting a jittered, doubling delay; a 4xx
    // is the SMF's answer and is not.
    let mut backoff = Backoff::new(RETRY_INITIAL, RETRY_MAX, None, Jitter::from_entropy());
    let mut attempt = 1;
    let answer = loop {
        let sent = client
            .post(&url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.clone())
            .send()
            .await;
        let retry = match &sent {
            Ok(a) => a.status().is_server_error(),
            Err(e) => !e.is_timeout(),
        };
        if !retry || attempt >= PUSH_ATTEMPTS {
            break sent;
        }
        attempt += 1;
        tokio::time::sleep(backoff.next_delay()).await;
    };
    let answer = match answer {
        Ok(a) => a,
        Err(e) if e.is_timeout() => {
            return Err(ControlError::Timeout(format!(
                "no answer from SMF {url} in time"
            )))
        }
        Err(e) => return Err(ControlError::Peer(format!("push to SMF {url} failed: {e}"))),
    };
    let status = answer.status();
    let mut raa = Raa::default();
    if status.is_success() {
        raa.result_code = Some(result_code::DIAMETER_SUCCESS);
        if status == reqwest::StatusCode::OK {
            // A body past a small bound is not read: rule reports are few.
            if let Ok(bytes) = answer.bytes().await {
                if bytes.len() <= 64 * 1024 {
                    if let Ok(report) = serde_json::from_slice::<PartialSuccessReport>(&bytes) {
                        raa.rule_reports = rule_reports(&report.rule_reports);
                    }
                }
            }
        }
    } else if status == reqwest::StatusCode::NOT_FOUND {
        raa.result_code = Some(result_code::DIAMETER_UNKNOWN_SESSION_ID);
    } else {
        tracing::warn!(session = %s.id, url, status = status.as_u16(), attempts = attempt, "SMF refused a push");
        raa.result_code = Some(result_code::DIAMETER_UNABLE_TO_COMPLY);
    }
    Ok(raa)
}

/// The PolicyAssociationReleaseCause (TS 29.512 §5.6.3.6) of a Gx
/// Session-Release-Cause.
fn release_cause(cause: i32) -> &'static str {
    match cause {
        1 => "UE_SUBSCRIPTION",
        2 => "INSUFFICENT_RES",
        _ => "UNSPECIFIED",
    }
}
