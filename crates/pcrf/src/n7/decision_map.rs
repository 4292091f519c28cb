//! The policy's [`Decision`] as an SmPolicyDecision (TS 29.512 §5.6.2.4),
//! whole (Create and Get answers) or as the difference from what the SMF
//! holds (Update answers and notifications). Pure: the usage grants come
//! from the same computation Gx uses, and the time is a parameter.
//!
//! What both client SMFs need to apply a decision in full (each checked by
//! a test below): a session rule with `authSessAmbr` and `authDefQos`;
//! `SE_AMBR_CH` and `DEF_QOS_CH` among the triggers whenever those are
//! set; every dynamic PCC rule with `refQosData` naming a `qosDecs` entry
//! and `flowInfos` with a direction. docs/n7.md has the table, Gx beside N7.

use super::model::{
    Ambr, Arp, AuthorizedDefaultQos, ChargingData, Entry, EntryMap, FlowDirection, FlowInformation,
    FlowStatus, PccRule, PolicyControlRequestTrigger as Trigger, PreemptionCapability,
    PreemptionVulnerability, QosData, SessionRule, SmPolicyDecision, TrafficControlData,
    UsageMonitoringData,
};
use crate::pcc::UsageInstructions;
use crate::policy::decision::{self, Decision, RuleDefinition};
use crate::sbi::body::bit_rate_text;
use crate::sbi::problem::{cause, ProblemDetails};
use crate::usage::MonitoringLevel;

/// The id of the one session rule this PCF installs.
pub const SESSION_RULE_ID: &str = "session";

/// The whole decision for a PDU session. `usage` holds the grants Gx would
/// send (its `disable` list has no meaning in a whole decision: a stopped
/// key is simply absent). `now_unix_secs` places `revalidationTime`.
pub fn whole(d: &Decision, usage: &UsageInstructions, now_unix_secs: i64) -> SmPolicyDecision {
    let mut out = SmPolicyDecision::default();
    let session_key = usage
        .grants
        .iter()
        .find(|g| g.level == MonitoringLevel::Session)
        .map(|g| g.key.clone());

    if d.apn_ambr.is_some() || d.default_bearer_qos.is_some() || session_key.is_some() {
        out.sess_rules.insert(
            SESSION_RULE_ID.to_owned(),
            Entry::Set(SessionRule {
                sess_rule_id: SESSION_RULE_ID.to_owned(),
                auth_sess_ambr: d.apn_ambr.map(|a| Ambr {
                    uplink: bit_rate_text(u64::from(a.ul)),
                    downlink: bit_rate_text(u64::from(a.dl)),
                }),
                auth_def_qos: d.default_bearer_qos.as_ref().map(|q| AuthorizedDefaultQos {
                    five_qi: five_qi(q.qci),
                    arp: arp(&q.arp),
                    priority_level: None,
                }),
                ref_um_data: session_key,
            }),
        );
    }

    // Predefined rules and rule bases: a PccRule holding only its
    // pccRuleId activates the predefined rule, or group of predefined
    // rules, the SMF knows by that id (TS 29.512 PccRule, pccRuleId).
    for name in d.rules.iter().chain(&d.base_names) {
        out.pcc_rules.insert(
            name.clone(),
            Entry::Set(PccRule {
                pcc_rule_id: name.clone(),
                ..PccRule::default()
            }),
        );
    }

    for def in &d.definitions {
        let rule = pcc_rule(def, usage, &mut out);
        out.pcc_rules.insert(def.name.clone(), Entry::Set(rule));
    }

    for grant in &usage.grants {
        out.um_decs
            .insert(grant.key.clone(), Entry::Set(usage_monitoring_data(grant)));
    }

    let triggers = triggers(d, !usage.grants.is_empty());
    if !triggers.is_empty() {
        out.policy_ctrl_req_triggers = Some(Entry::Set(triggers));
    }
    if let Some(secs) = d.revalidation_secs {
        let secs = secs.min(decision::MAX_REVALIDATION_SECS);
        let at = now_unix_secs.saturating_add(i64::try_from(secs).unwrap_or(i64::MAX));
        out.revalidation_time = revalidation_time(at);
    }
    out
}

/// A usage grant as the thresholds an SMF counts to (TS 29.512 §5.6.2.12).
pub fn usage_monitoring_data(grant: &crate::pcc::UsageGrant) -> UsageMonitoringData {
    let u = &grant.units;
    UsageMonitoringData {
        um_id: grant.key.clone(),
        volume_threshold: u.total,
        volume_threshold_uplink: u.input,
        volume_threshold_downlink: u.output,
        time_threshold: u.time,
    }
}

/// The revalidation instant (`revalidationTime`) of Unix seconds `at`.
pub fn revalidation_time(at: i64) -> Option<String> {
    jiff::Timestamp::from_second(at).ok().map(|t| t.to_string())
}

/// One dynamic rule, with its QoS, gate and charging data added to `out`.
fn pcc_rule(
    def: &RuleDefinition,
    usage: &UsageInstructions,
    out: &mut SmPolicyDecision,
) -> PccRule {
    let mut rule = PccRule {
        pcc_rule_id: def.name.clone(),
        precedence: def.precedence,
        flow_infos: def
            .flows
            .iter()
            .map(|f| FlowInformation {
                flow_description: f.clone(),
                flow_direction: flow_direction(f),
            })
            .collect(),
        ..PccRule::default()
    };
    if let Some(q) = &def.qos {
        out.qos_decs.insert(
            def.name.clone(),
            Entry::Set(QosData {
                qos_id: def.name.clone(),
                five_qi: five_qi(q.qci),
                arp: q.arp.as_ref().map(arp),
                maxbr_ul: q.mbr_ul.map(|v| bit_rate_text(u64::from(v))),
                maxbr_dl: q.mbr_dl.map(|v| bit_rate_text(u64::from(v))),
                gbr_ul: q.gbr_ul.map(|v| bit_rate_text(u64::from(v))),
                gbr_dl: q.gbr_dl.map(|v| bit_rate_text(u64::from(v))),
            }),
        );
        rule.ref_qos_data.push(def.name.clone());
    }
    // Gx Flow-Status (0 ENABLED-UPLINK, 1 ENABLED-DOWNLINK, 2 ENABLED,
    // 3 DISABLED) is the gate of a TrafficControlData; ENABLED, the
    // default, needs none.
    let gate = match def.flow_status {
        Some(0) => Some(FlowStatus::EnabledUplink),
        Some(1) => Some(FlowStatus::EnabledDownlink),
        Some(3) => Some(FlowStatus::Disabled),
        _ => None,
    };
    if let Some(flow_status) = gate {
        out.traff_cont_decs.insert(
            def.name.clone(),
            Entry::Set(TrafficControlData {
                tc_id: def.name.clone(),
                flow_status,
            }),
        );
        rule.ref_tc_data.push(def.name.clone());
    }
    if def.rating_group.is_some()
        || def.service_identifier.is_some()
        || def.online.is_some()
        || def.offline.is_some()
    {
        out.chg_decs.insert(
            def.name.clone(),
            Entry::Set(ChargingData {
                chg_id: def.name.clone(),
                online: def.online,
                offline: def.offline,
                rating_group: def.rating_group,
                service_id: def.service_identifier,
            }),
        );
        rule.ref_chg_data.push(def.name.clone());
    }
    if let Some(key) = &def.monitoring_key {
        let granted_at_rule = usage
            .grants
            .iter()
            .any(|g| &g.key == key && g.level == MonitoringLevel::Rule);
        if granted_at_rule {
            rule.ref_um_data.push(key.clone());
        }
    }
    rule
}

/// A Gx IPFilterRule's direction: `permit in` is uplink (TS 29.212
/// §5.3.8); `permit out` matches the downlink packets and, reversed, the
/// uplink ones, as a Gx PCEF without Flow-Direction applies it.
fn flow_direction(flow: &str) -> FlowDirection {
    let mut words = flow.split_ascii_whitespace();
    match (words.next(), words.next()) {
        (Some("permit"), Some("in")) => FlowDirection::Uplink,
        _ => FlowDirection::Bidirectional,
    }
}

/// The triggers: the Gx Event-Triggers that have an N7 twin, plus those
/// without which an SMF does not apply what was decided (SE_AMBR_CH,
/// DEF_QOS_CH), or report usage (US_RE), or come back (RE_TIMEOUT).
fn triggers(d: &Decision, monitoring: bool) -> Vec<Trigger> {
    let mut out: Vec<Trigger> = d
        .event_triggers
        .iter()
        .filter_map(|&t| gx_event_trigger(t))
        .collect();
    if d.apn_ambr.is_some() {
        out.push(Trigger::SeAmbrCh);
    }
    if d.default_bearer_qos.is_some() {
        out.push(Trigger::DefQosCh);
    }
    if monitoring {
        out.push(Trigger::UsRe);
    }
    if d.revalidation_secs.is_some() {
        out.push(Trigger::ReTimeout);
    }
    out.sort();
    out.dedup();
    out
}

/// The N7 trigger of a Gx Event-Trigger (TS 29.212 §5.3.7), if it has one.
pub fn gx_event_trigger(t: u32) -> Option<Trigger> {
    Some(match t {
        2 => Trigger::RatTyCh,
        4 => Trigger::PlmnCh,
        7 => Trigger::AcTyCh,
        13 | 26 | 27 => Trigger::UserLocationCh,
        15 => Trigger::NoCredit,
        17 => Trigger::ReTimeout,
        18 | 19 => Trigger::UeIpCh,
        20 => Trigger::DefQosCh,
        22 => Trigger::SuccResAllo,
        23 => Trigger::ResMoRe,
        25 => Trigger::UeTzCh,
        33 => Trigger::UsRe,
        _ => return None,
    })
}

/// What an SMF holding `old` must be told to hold `new`: changed and added
/// entries whole, removed ones as `null` (TS 29.512 §4.2.6.1), the
/// triggers when they changed, the revalidation time when it changed.
pub fn difference(old: &SmPolicyDecision, new: &SmPolicyDecision) -> SmPolicyDecision {
    let revalidation_time = if old.revalidation_time != new.revalidation_time {
        new.revalidation_time.clone()
    } else {
        None
    };
    SmPolicyDecision {
        sess_rules: map_difference(&old.sess_rules, &new.sess_rules),
        pcc_rules: map_difference(&old.pcc_rules, &new.pcc_rules),
        qos_decs: map_difference(&old.qos_decs, &new.qos_decs),
        traff_cont_decs: map_difference(&old.traff_cont_decs, &new.traff_cont_decs),
        chg_decs: map_difference(&old.chg_decs, &new.chg_decs),
        um_decs: map_difference(&old.um_decs, &new.um_decs),
        policy_ctrl_req_triggers: match (
            &old.policy_ctrl_req_triggers,
            &new.policy_ctrl_req_triggers,
        ) {
            (a, b) if a == b => None,
            (Some(_), None) => Some(Entry::Remove),
            (_, b) => b.clone(),
        },
        revalidation_time,
        online: (old.online != new.online).then_some(new.online).flatten(),
        offline: (old.offline != new.offline)
            .then_some(new.offline)
            .flatten(),
        supp_feat: None,
    }
}

fn map_difference<T: Clone + PartialEq>(old: &EntryMap<T>, new: &EntryMap<T>) -> EntryMap<T> {
    let mut out = EntryMap::new();
    for (k, v) in new {
        if old.get(k) != Some(v) {
            out.insert(k.clone(), v.clone());
        }
    }
    for (k, v) in old {
        if !new.contains_key(k) && *v != Entry::Remove {
            out.insert(k.clone(), Entry::Remove);
        }
    }
    out
}

/// The answer to a Create the policy refuses (`reject`): 403
/// POLICY_CONTEXT_DENIED (TS 29.512 Table 5.7.3-1), the policy's reason
/// and code in the detail.
pub fn refusal(reject: &decision::Reject) -> ProblemDetails {
    let reason = reject.reason.as_deref().unwrap_or("refused by the policy");
    ProblemDetails::new(
        403,
        "Forbidden",
        cause::POLICY_CONTEXT_DENIED,
        format!("{reason} (code {})", reject.code),
    )
}

fn five_qi(qci: u32) -> u16 {
    // A QCI is 1..=254 after Decision::check; a 5QI is 0..=255.
    u16::try_from(qci.min(255)).unwrap_or(255)
}

fn arp(a: &decision::Arp) -> Arp {
    Arp {
        priority_level: u8::try_from(a.priority.clamp(1, 15)).ok(),
        preempt_cap: if a.may_preempt {
            PreemptionCapability::MayPreempt
        } else {
            PreemptionCapability::NotPreempt
        },
        preempt_vuln: if a.preemptable {
            PreemptionVulnerability::Preemptable
        } else {
            PreemptionVulnerability::NotPreemptable
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcc::UsageGrant;
    use crate::policy::decision::{Ambr as GxAmbr, Arp as GxArp, BearerQos, RuleQos};
    use crate::usage::ServiceUnits;

    fn vip() -> RuleDefinition {
        RuleDefinition {
            name: "vip-video".into(),
            flows: vec![
                "permit out 17 from 198.51.100.0/24 to any".into(),
                "permit in 17 from any to 198.51.100.0/24".into(),
            ],
            flow_status: Some(2),
            qos: Some(RuleQos {
                qci: 4,
                arp: Some(GxArp {
                    priority: 5,
                    may_preempt: false,
                    preemptable: true,
                }),
                mbr_ul: Some(2_000_000),
                mbr_dl: Some(8_000_000),
                gbr_ul: Some(1_000_000),
                gbr_dl: Some(4_000_000),
            }),
            precedence: Some(100),
            rating_group: Some(10),
            monitoring_key: Some("video".into()),
            ..RuleDefinition::default()
        }
    }

    fn decision() -> Decision {
        Decision {
            rules: vec!["internet".into()],
            base_names: vec!["basic-group".into()],
            definitions: vec![vip()],
            apn_ambr: Some(GxAmbr {
                ul: 50_000_000,
                dl: 100_000_000,
            }),
            default_bearer_qos: Some(BearerQos {
                qci: 9,
                arp: GxArp {
                    priority: 8,
                    may_preempt: false,
                    preemptable: true,
                },
            }),
            event_triggers: vec![2, 13, 99],
            revalidation_secs: Some(3600),
            ..Decision::default()
        }
    }

    fn usage() -> UsageInstructions {
        UsageInstructions {
            grants: vec![
                UsageGrant {
                    key: "monthly".into(),
                    level: MonitoringLevel::Session,
                    units: ServiceUnits {
                        total: Some(5_000_000),
                        ..ServiceUnits::default()
                    },
                },
                UsageGrant {
                    key: "video".into(),
                    level: MonitoringLevel::Rule,
                    units: ServiceUnits {
                        input: Some(1000),
                        output: Some(2000),
                        ..ServiceUnits::default()
                    },
                },
            ],
            ..UsageInstructions::default()
        }
    }

    #[test]
    fn a_decision_is_what_both_smfs_apply_in_full() {
        let out = whole(&decision(), &usage(), 1_700_000_000);
        let json = serde_json::to_value(&out).expect("json");
        // free5gc: a session rule with authSessAmbr and authDefQos.
        let sess = &json["sessRules"][SESSION_RULE_ID];
        assert_eq!(sess["authSessAmbr"]["uplink"], "50000000 bps");
        assert_eq!(sess["authSessAmbr"]["downlink"], "100000000 bps");
        assert_eq!(sess["authDefQos"]["5qi"], 9);
        assert_eq!(sess["authDefQos"]["arp"]["priorityLevel"], 8);
        assert_eq!(sess["authDefQos"]["arp"]["preemptVuln"], "PREEMPTABLE");
        assert_eq!(sess["refUmData"], "monthly");
        // open5gs: the triggers that make it apply AMBR and default QoS.
        let triggers: Vec<&str> = json["policyCtrlReqTriggers"]
            .as_array()
            .expect("triggers")
            .iter()
            .filter_map(|t| t.as_str())
            .collect();
        for t in [
            "SE_AMBR_CH",
            "DEF_QOS_CH",
            "US_RE",
            "RE_TIMEOUT",
            "RAT_TY_CH",
            "USER_LOCATION_CH",
        ] {
            assert!(triggers.contains(&t), "{t} in {triggers:?}");
        }
        // open5gs: every dynamic rule names a qosDecs entry and has flows.
        let rule = &json["pccRules"]["vip-video"];
        let qos_id = rule["refQosData"][0].as_str().expect("refQosData");
        let qos = &json["qosDecs"][qos_id];
        assert_eq!(qos["5qi"], 4);
        assert_eq!(qos["gbrDl"], "4000000 bps");
        assert_eq!(qos["arp"]["priorityLevel"], 5);
        assert_eq!(rule["flowInfos"][0]["flowDirection"], "BIDIRECTIONAL");
        assert_eq!(rule["flowInfos"][1]["flowDirection"], "UPLINK");
        assert_eq!(rule["precedence"], 100);
        assert_eq!(rule["refUmData"][0], "video");
        assert_eq!(
            json["chgDecs"][rule["refChgData"][0].as_str().expect("chg")]["ratingGroup"],
            10
        );
        // Predefined rules and bases: the id alone.
        assert_eq!(
            json["pccRules"]["internet"],
            serde_json::json!({"pccRuleId": "internet"})
        );
        assert_eq!(
            json["pccRules"]["basic-group"],
            serde_json::json!({"pccRuleId": "basic-group"})
        );
        // Usage thresholds per key, as the Gx grants.
        assert_eq!(json["umDecs"]["monthly"]["volumeThreshold"], 5_000_000);
        assert_eq!(json["umDecs"]["video"]["volumeThresholdUplink"], 1000);
        assert_eq!(json["umDecs"]["video"]["volumeThresholdDownlink"], 2000);
        assert_eq!(json["revalidationTime"], "2023-11-14T23:13:20Z");
        // And it reads back as the same decision.
        let back: SmPolicyDecision = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, out);
    }

    #[test]
    fn a_gate_other_than_enabled_is_traffic_control() {
        let mut d = decision();
        d.definitions[0].flow_status = Some(3);
        let out = whole(&d, &UsageInstructions::default(), 0);
        let json = serde_json::to_value(&out).expect("json");
        assert_eq!(json["pccRules"]["vip-video"]["refTcData"][0], "vip-video");
        assert_eq!(json["traffContDecs"]["vip-video"]["flowStatus"], "DISABLED");
        assert!(json.get("umDecs").is_none());
    }

    #[test]
    fn the_difference_holds_only_what_changed_and_nulls_what_went() {
        let old = whole(&decision(), &usage(), 1_700_000_000);
        assert!(difference(&old, &old).is_empty());
        let mut d = decision();
        d.definitions.clear();
        d.apn_ambr = Some(GxAmbr {
            ul: 1_000_000,
            dl: 2_000_000,
        });
        let mut u = usage();
        u.grants.truncate(1);
        let new = whole(&d, &u, 1_700_000_000);
        let diff = serde_json::to_value(difference(&old, &new)).expect("json");
        assert_eq!(diff["pccRules"], serde_json::json!({"vip-video": null}));
        assert_eq!(diff["qosDecs"], serde_json::json!({"vip-video": null}));
        assert_eq!(diff["chgDecs"], serde_json::json!({"vip-video": null}));
        assert_eq!(diff["umDecs"], serde_json::json!({"video": null}));
        assert_eq!(
            diff["sessRules"][SESSION_RULE_ID]["authSessAmbr"]["uplink"],
            "1000000 bps"
        );
        assert!(diff.get("policyCtrlReqTriggers").is_none(), "{diff}");
        assert!(diff.get("revalidationTime").is_none());
        // Triggers all gone: null.
        let bare = whole(&Decision::default(), &UsageInstructions::default(), 0);
        let diff = serde_json::to_value(difference(&old, &bare)).expect("json");
        assert_eq!(diff["policyCtrlReqTriggers"], Value::Null);
        assert!(diff
            .as_object()
            .expect("object")
            .contains_key("policyCtrlReqTriggers"));
    }

    use serde_json::Value;

    #[test]
    fn a_refusal_is_403_policy_context_denied() {
        let p = refusal(&decision::Reject {
            code: 5003,
            vendor: None,
            reason: Some("barred".into()),
        });
        assert_eq!(p.status, 403);
        assert_eq!(p.cause.as_deref(), Some("POLICY_CONTEXT_DENIED"));
        assert_eq!(p.detail.as_deref(), Some("barred (code 5003)"));
    }
}
