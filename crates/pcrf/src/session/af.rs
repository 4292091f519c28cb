//! An Rx (AF) session as the PCRF keeps it: the media the AF described and
//! the dynamic PCC rules derived from them. It lives inside the Gx session
//! record it is bound to (`GxSession::af`), so an Rx change and the rules it
//! installed are one blob, written in one commit under the Gx session's lock,
//! and recovered with the Gx session after a restart.

use crate::policy::decision::{Decision, RuleDefinition};
pub use crate::policy::media::{MediaComponent, MediaSubComponent};
use serde::{Deserialize, Serialize};

/// An AF session bound to a Gx session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AfSession {
    /// The Rx Session-Id.
    pub id: String,
    /// The AF's Origin-Host and Origin-Realm (where RAR and ASR go).
    pub af_host: String,
    pub af_realm: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub application: Option<String>,
    /// AF-Charging-Identifier, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charging_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_urn: Option<String>,
    /// Specific-Action values the AF subscribed to.
    #[serde(default)]
    pub specific_actions: Vec<u32>,
    #[serde(default)]
    pub media: Vec<MediaComponent>,
    /// The dynamic PCC rules installed for this AF session.
    #[serde(default)]
    pub rules: Vec<RuleDefinition>,
    /// For an AF that came over N5: where its notifications and its
    /// termination go (`notifUri`); `None` for an Rx AF, which is told
    /// over Diameter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notification_uri: Option<String>,
    pub created_ms: i64,
    pub updated_ms: i64,
}

impl AfSession {
    /// Whether the AF subscribed to a Specific-Action.
    pub fn subscribed(&self, action: i32) -> bool {
        action >= 0 && self.specific_actions.contains(&(action as u32))
    }

    /// Whether a rule name is one of this AF session's rules.
    pub fn owns(&self, rule: &str) -> bool {
        self.rules.iter().any(|r| r.name == rule)
    }

    /// The media flows (Media-Component-Number, Flow-Numbers) the named
    /// rules carry, for the Flows AVP of a notification: a sub-component
    /// belongs to a rule that holds one of its Flow-Descriptions, whatever
    /// the hook named the rule.
    pub fn flows_of(&self, rule_names: &[&str]) -> Vec<(u32, Vec<u32>)> {
        let rules: Vec<&RuleDefinition> = self
            .rules
            .iter()
            .filter(|r| rule_names.contains(&r.name.as_str()))
            .collect();
        self.media
            .iter()
            .filter_map(|mc| {
                let flows: Vec<u32> = mc
                    .sub_components
                    .iter()
                    .filter(|sc| {
                        sc.flows
                            .iter()
                            .any(|f| rules.iter().any(|r| r.flows.contains(f)))
                    })
                    .map(|sc| sc.flow_number)
                    .collect();
                (!flows.is_empty()).then_some((mc.number, flows))
            })
            .collect()
    }
}

/// Media of an AAR modification merged into what the AF described before:
/// a component with a known Media-Component-Number replaces the old one,
/// a new number is added, and a component whose Flow-Status is REMOVED is
/// dropped (TS 29.214 §4.4.2).
pub fn merge_media(old: &[MediaComponent], new: &[MediaComponent]) -> Vec<MediaComponent> {
    const REMOVED: u32 = 4;
    let mut out: Vec<MediaComponent> = old.to_vec();
    for m in new {
        out.retain(|o| o.number != m.number);
        if m.flow_status != Some(REMOVED) {
            out.push(m.clone());
        }
    }
    out.sort_by_key(|m| m.number);
    out
}

/// Adds the rules of every AF session to a Gx decision, so that a Gx
/// re-decision keeps what the AFs asked for (a rule the policy also names
/// is left as the policy defines it), and the Event-Triggers the AFs'
/// Specific-Actions need.
pub fn add_af_rules(af: &[AfSession], d: &mut Decision) {
    for s in af {
        for r in &s.rules {
            if !d.definitions.iter().any(|x| x.name == r.name) {
                d.definitions.push(r.clone());
            }
        }
    }
    add_af_triggers(af, d);
}

/// The Gx Event-Triggers (TS 29.212 §5.3.7) the PCEF must be subscribed
/// to for the PCRF to learn what a Specific-Action (TS 29.214 §5.3.13)
/// reports; failed rules are always reported, so they need none.
fn triggers_for(action: u32) -> &'static [u32] {
    match action {
        1 => &[28],   // CHARGING_CORRELATION_EXCHANGE
        2 => &[5],    // INDICATION_OF_LOSS_OF_BEARER -> LOSS_OF_BEARER
        3 => &[6],    // INDICATION_OF_RECOVERY_OF_BEARER -> RECOVERY_OF_BEARER
        6 => &[2, 7], // IP-CAN_CHANGE -> RAT_CHANGE, IP-CAN_CHANGE
        8 => &[22],   // INDICATION_OF_SUCCESSFUL_RESOURCES_ALLOCATION
        _ => &[],
    }
}

/// Adds the Event-Triggers the AF sessions' subscriptions need.
pub fn add_af_triggers<'a>(af: impl IntoIterator<Item = &'a AfSession>, d: &mut Decision) {
    for s in af {
        for a in &s.specific_actions {
            for t in triggers_for(*a) {
                if !d.event_triggers.contains(t) {
                    d.event_triggers.push(*t);
                }
            }
        }
    }
}

/// `installed` with one AF session's old rules replaced by its new ones.
pub fn replace_af_rules(
    installed: &Decision,
    old: &[RuleDefinition],
    new: &[RuleDefinition],
) -> Decision {
    let mut d = installed.clone();
    d.definitions
        .retain(|r| !old.iter().any(|o| o.name == r.name));
    d.definitions.extend(new.iter().cloned());
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mc(number: u32, status: Option<u32>) -> MediaComponent {
        MediaComponent {
            number,
            media_type: Some("AUDIO".into()),
            flow_status: status,
            ..Default::default()
        }
    }

    fn rule(name: &str) -> RuleDefinition {
        RuleDefinition {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn modification_replaces_adds_and_removes_components() {
        let old = vec![mc(1, None), mc(2, None)];
        let mut changed = mc(1, Some(2));
        changed.max_dl = Some(64_000);
        let merged = merge_media(&old, &[changed.clone(), mc(2, Some(4)), mc(3, None)]);
        assert_eq!(merged, vec![changed, mc(3, None)]);
    }

    #[test]
    fn af_rules_join_a_decision_once() {
        let mut af = AfSession {
            id: "pcscf;1".into(),
            af_host: "pcscf".into(),
            af_realm: "r".into(),
            application: None,
            charging_id: None,
            service_urn: None,
            specific_actions: vec![9],
            media: vec![],
            rules: vec![rule("a"), rule("b")],
            notification_uri: None,
            created_ms: 0,
            updated_ms: 0,
        };
        let mut d = Decision {
            definitions: vec![rule("b")],
            event_triggers: vec![2, 13],
            ..Default::default()
        };
        af.specific_actions = vec![9, 6, 8];
        add_af_rules(std::slice::from_ref(&af), &mut d);
        assert_eq!(d.event_triggers, vec![2, 13, 7, 22]);
        let names: Vec<&str> = d.definitions.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, vec!["b", "a"]);
        assert!(af.subscribed(9) && !af.subscribed(2) && !af.subscribed(-1));
        assert!(af.owns("a") && !af.owns("c"));
        af.rules[0].flows = vec!["permit out 17 from any to assigned 4000".into()];
        af.media = vec![MediaComponent {
            number: 1,
            sub_components: vec![
                MediaSubComponent {
                    flow_number: 1,
                    flows: vec!["permit out 17 from any to assigned 4000".into()],
                    ..Default::default()
                },
                MediaSubComponent {
                    flow_number: 2,
                    flows: vec!["permit out 17 from any to assigned 4001".into()],
                    ..Default::default()
                },
            ],
            ..Default::default()
        }];
        assert_eq!(af.flows_of(&["a"]), vec![(1, vec![1])]);
        assert!(af.flows_of(&["b"]).is_empty());
        let replaced = replace_af_rules(&d, &af.rules, &[rule("c")]);
        let names: Vec<&str> = replaced
            .definitions
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(names, vec!["c"]);
    }
}
