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
                key: k.to_string(),
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

/// What an SMF must be told when the decision it holds is the one decided
/// again, with the same keys monitored: only the thresholds granted afresh
/// and the revalidation instant if it moved to another second. The same
/// answer `changes_for_smf` would give, without building two whole
/// decisions: the common Update, a usage report answered from the memo.
/// `None` when more than that changed.
pub(crate) fn unchanged_but_usage(
    cur: &GxSession,
    next: &GxSession,
    decision: &Decision,
    fresh: &UsageInstructions,
) -> Option<SmPolicyDecision> {
    let same_keys = cur.monitoring.keys.len() == next.monitoring.keys.len()
        && cur
            .monitoring
            .keys
            .iter()
            .zip(&next.monitoring.keys)
            .all(|((a, ga), (b, gb))| {
                a == b
                    && ga.level == gb.level
                    && (ga.granted == gb.granted || fresh.grants.iter().any(|g| *g.key == **a))
            });
    if *cur.installed != *decision || !same_keys || !fresh.disable.is_empty() {
        return None;
    }
    let mut out = SmPolicyDecision::default();
    for g in &fresh.grants {
        out.um_decs.insert(
            g.key.clone(),
            Entry::Set(super::decision_map::usage_monitoring_data(g)),
        );
    }
    let second = |ms: Option<i64>| ms.map(|m| m.div_euclid(1000));
    let (before, after) = (
        second(cur.revalidation_at_ms),
        second(next.revalidation_at_ms),
    );
    if before != after && decision.revalidation_secs.is_some() {
        out.revalidation_time = after.and_then(super::decision_map::revalidation_time);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::decision::{Ambr, RuleDefinition};
    use crate::usage::{KeyGrant, MonitoringLevel, ServiceUnits};

    fn grant(total: u64) -> KeyGrant {
        KeyGrant {
            granted: ServiceUnits {
                total: Some(total),
                ..ServiceUnits::default()
            },
            level: MonitoringLevel::Session,
            granted_ms: 1,
            reported_octets: 0,
        }
    }

    /// The shortcut answers what the whole computation answers, and
    /// declines when the decision changed.
    #[test]
    fn an_unchanged_decision_tells_only_the_fresh_thresholds() {
        let decision = Decision {
            rules: vec!["internet".into()],
            definitions: vec![RuleDefinition {
                name: "vip".into(),
                flows: vec!["permit out 17 from any to assigned".into()],
                ..RuleDefinition::default()
            }],
            apn_ambr: Some(Ambr { ul: 1000, dl: 2000 }),
            revalidation_secs: Some(600),
            monitoring: vec!["total".into(), "vip".into()],
            ..Decision::default()
        };
        let mut cur = GxSession::new("p", "s", "smf", "5gc", 0);
        cur.installed = decision.clone().into();
        cur.monitoring.keys.insert("total".into(), grant(100));
        cur.monitoring.keys.insert("vip".into(), grant(50));
        cur.revalidation_at_ms = Some(1_800_000_000_000);
        let mut next = cur.clone();
        next.monitoring.keys.insert("total".into(), grant(100));
        next.revalidation_at_ms = Some(1_800_000_000_900);
        let fresh = UsageInstructions {
            grants: vec![UsageGrant {
                key: "total".into(),
                level: MonitoringLevel::Session,
                units: grant(100).granted,
            }],
            ..UsageInstructions::default()
        };
        let whole_way = changes_for_smf(
            &held_by_smf(&cur),
            &whole_at(&decision, &next.monitoring, next.revalidation_at_ms),
            &fresh,
        );
        let short = unchanged_but_usage(&cur, &next, &decision, &fresh).expect("unchanged");
        assert_eq!(short, whole_way);
        assert_eq!(short.um_decs.len(), 1);
        // In another second: the instant is told, both ways.
        next.revalidation_at_ms = Some(1_800_000_001_000);
        let whole_way = changes_for_smf(
            &held_by_smf(&cur),
            &whole_at(&decision, &next.monitoring, next.revalidation_at_ms),
            &fresh,
        );
        let short = unchanged_but_usage(&cur, &next, &decision, &fresh).expect("unchanged");
        assert_eq!(short, whole_way);
        assert!(short.revalidation_time.is_some());
        let mut other = decision.clone();
        other.rules.push("video".into());
        assert!(unchanged_but_usage(&cur, &next, &other, &fresh).is_none());
    }

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
