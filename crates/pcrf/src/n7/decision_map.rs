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
                    uplink: bit_rate(u64::from(a.ul)),
                    downlink: bit_rate(u64::from(a.dl)),
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
        let u = &grant.units;
        out.um_decs.insert(
            grant.key.clone(),
            Entry::Set(UsageMonitoringData {
                um_id: grant.key.clone(),
                volume_threshold: u.total,
                volume_threshold_uplink: u.input,
                volume_threshold_downlink: u.output,
                time_threshold: u.time,
            }),
        );
    }

    let triggers = triggers(d, !usage.grants.is_empty());
    if !triggers.is_empty() {
        out.policy_ctrl_req_triggers = Some(Entry::Set(triggers));
    }
    if let Some(secs) = d.revalidation_secs {
        let secs = secs.min(decision::MAX_REVALIDATION_SECS);
        let at = now_unix_secs.saturating_add(i64::try_from(secs).unwrap_or(i64::MAX));
        out.revalidation_time = jiff::Timestamp::from_second(at).ok().map(|t| t.to_string());
    }
    out
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
                maxbr_ul: q.mbr_ul.map(|v| bit_rate(u64::from(v))),
                maxbr_dl: q.mbr_dl.map(|v| bit_rate(u64::from(v))),
                gbr_ul: q.gbr_ul.map(|v| bit_rate(u64::from(v))),
                gbr_dl: q.gbr_dl.map(|v| bit_rate(u64::from(v))),
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

/// A bit rate as TS 29.571 BitRate text, exact.
pub fn bit_rate(bps: u64) -> String {
    format!("{bps} bps")
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
