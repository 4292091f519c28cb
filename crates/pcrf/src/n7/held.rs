//! What an SMF holds for an N7 session, and what it must be told: the
//! whole decision in force (the session's installed rules with the usage
//! thresholds granted and the revalidation instant), the difference to a
//! new one, and the SMF's rule reports read as a PCEF's. Pure: used by the
//! operations (`sessions`) and the pushes (`notify`) alike.

use super::decision_map::{difference, whole};
use super::model::{Entry, RuleReport, RuleStatus, SmPolicyDecision};
use crate::pcc::reauth_answer::RuleReports;
use crate::pcc::{UsageGrant, UsageInstructions};
use crate::policy::decision::Decision;
use crate::policy::input::RuleFailure;
use crate::session::GxSession;
use crate::usage::SessionMonitoring;

/// The SMF's rule reports as the rule failures a Gx PCEF reports: the
/// status as PCC-Rule-Status, the failure code as Rule-Failure-Code (TS
/// 29.512 FailureCode beside TS 29.212 §5.3.38), so the policy reads one
/// kind of `session.rule_failures` from either.
pub(crate) fn rule_reports(reports: &[RuleReport]) -> RuleReports {
    let mut out = RuleReports::default();
    for r in reports {
        let status = match r.rule_status {
            Some(RuleStatus::Active) => 0,
            _ => 1,
        };
        for rule in &r.pcc_rule_ids {
            if out.kept.len() >= crate::limits::MAX_RULE_REPORTS_PER_REQUEST
                || rule.len() > crate::limits::MAX_RULE_NAME
            {
                out.over_cap += 1;
                continue;
            }
            out.kept.push(RuleFailure {
                rule: rule.clone(),
                status,
                code: r.failure_code.as_deref().and_then(rule_failure_code),
            });
        }
    }
    out
}

/// The Rule-Failure-Code (TS 29.212 §5.3.38) of an N7 FailureCode.
fn rule_failure_code(code: &str) -> Option<u32> {
    Some(match code {
        "UNK_RULE_ID" => 1,
        "RA_GR_ERR" => 2,
        "SER_ID_ERR" => 3,
        "NF_MAL" => 4,
        "RES_LIM" => 5,
        "MAX_NR_QoS_FLOW" => 6,
        "MISS_FLOW_INFO" => 9,
        "RES_ALLO_FAIL" => 10,
        "UNSUCC_QOS_VAL" => 11,
        "INCOR_FLOW_INFO" => 12,
        "PS_TO_CS_HAN" => 13,
        "APP_ID_ERR" => 14,
        "NO_QOS_FLOW_BOUND" => 15,
        "FILTER_RES" => 16,
        "MISS_REDI_SER_ADDR" => 18,
        "CM_END_USER_SER_DENIED" => 19,
        _ => return None,
    })
}

/// The usage thresholds an SMF holds for a session: the grants in force.
pub(crate) fn grants_held(m: &SessionMonitoring) -> UsageInstructions {
    UsageInstructions {
        grants: m
            .keys
            .iter()
            .map(|(k, g)| UsageGrant {
                key: k.clone(),
                level: g.level,
                units: g.granted,
            })
            .collect(),
        ..UsageInstructions::default()
    }
}

/// The whole decision `d` as an SMF holds it, with the thresholds of
/// `monitoring` and the revalidation instant `revalidation_at_ms`.
pub(crate) fn whole_at(
    d: &Decision,
    monitoring: &SessionMonitoring,
    revalidation_at_ms: Option<i64>,
) -> SmPolicyDecision {
    let at_secs = revalidation_at_ms.map_or(0, |ms| ms.div_euclid(1000));
    let secs = d
        .revalidation_secs
        .map_or(0, |s| s.min(crate::policy::decision::MAX_REVALIDATION_SECS));
    // `whole` places the instant `secs` after its `now`.
    let now = at_secs.saturating_sub(i64::try_from(secs).unwrap_or(0));
    whole(d, &grants_held(monitoring), now)
}

/// What the SMF holds for `s` now: the decision installed, as last sent.
pub(crate) fn held_by_smf(s: &GxSession) -> SmPolicyDecision {
    whole_at(&s.installed, &s.monitoring, s.revalidation_at_ms)
}

/// What an SMF holding `before` must be told to hold `after`; a threshold
/// granted afresh (after a report) is sent even when equal to the last
/// one, since the SMF counts it from zero again.
pub(crate) fn changes_for_smf(
    before: &SmPolicyDecision,
    after: &SmPolicyDecision,
    fresh: &UsageInstructions,
) -> SmPolicyDecision {
    let mut out = difference(before, after);
    for g in &fresh.grants {
        if let Some(Entry::Set(um)) = after.um_decs.get(&g.key) {
            out.um_decs.insert(g.key.clone(), Entry::Set(um.clone()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_reports_read_as_gx_rule_failures() {
        let r = rule_reports(&[RuleReport {
            pcc_rule_ids: vec!["video".into(), "voice".into()],
            rule_status: Some(RuleStatus::Inactive),
            failure_code: Some("RES_ALLO_FAIL".into()),
        }]);
        assert_eq!(r.kept.len(), 2);
        assert_eq!((r.kept[0].status, r.kept[0].code), (1, Some(10)));
        let unknown = rule_reports(&[RuleReport {
            pcc_rule_ids: vec!["x".into()],
            rule_status: None,
            failure_code: Some("SOMETHING_NEW".into()),
        }]);
        assert_eq!(unknown.kept[0].code, None);
    }
}
