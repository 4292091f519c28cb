//! The difference between what the PCEF has installed and what the policy
//! now decides: only this goes on the wire in a CCA-U or RAR (TS 29.212
//! §4.5.2: install new or changed rules, remove dropped ones), never the
//! whole set again.

use crate::policy::decision::{Ambr, BearerQos, Decision, RuleDefinition};
use std::collections::BTreeMap;

/// What to send to move the PCEF from `installed` to `decided`.
#[derive(Debug, Default, PartialEq)]
pub struct RuleDiff<'a> {
    pub install_names: Vec<&'a str>,
    pub install_base_names: Vec<&'a str>,
    /// New or changed dynamic rules (a changed definition is re-installed
    /// under the same name, which replaces it at the PCEF).
    pub install_definitions: Vec<&'a RuleDefinition>,
    /// Dropped predefined and dynamic rule names.
    pub remove_names: Vec<&'a str>,
    pub remove_base_names: Vec<&'a str>,
    pub apn_ambr: Option<&'a Ambr>,
    pub default_bearer_qos: Option<&'a BearerQos>,
    /// The full new set of event triggers when it changed (a CCA's
    /// Event-Trigger list replaces the previous one; empty means "send
    /// NO_EVENT_TRIGGERS").
    pub event_triggers: Option<&'a [u32]>,
    pub revalidation_secs: Option<u64>,
}

impl<'a> RuleDiff<'a> {
    /// Computes the difference. Against an empty `installed` (a CCR-I) it
    /// is the whole decision.
    pub fn between(installed: &'a Decision, decided: &'a Decision) -> RuleDiff<'a> {
        let mut d = RuleDiff::default();
        for n in &decided.rules {
            if !installed.rules.contains(n) {
                d.install_names.push(n);
            }
        }
        for n in &installed.rules {
            if !decided.rules.contains(n) {
                d.remove_names.push(n);
            }
        }
        for n in &decided.base_names {
            if !installed.base_names.contains(n) {
                d.install_base_names.push(n);
            }
        }
        for n in &installed.base_names {
            if !decided.base_names.contains(n) {
                d.remove_base_names.push(n);
            }
        }
        let old: BTreeMap<&str, &RuleDefinition> = installed
            .definitions
            .iter()
            .map(|r| (r.name.as_str(), r))
            .collect();
        let new: BTreeMap<&str, &RuleDefinition> = decided
            .definitions
            .iter()
            .map(|r| (r.name.as_str(), r))
            .collect();
        for (name, rule) in &new {
            if old.get(name) != Some(rule) {
                d.install_definitions.push(rule);
            }
        }
        for name in old.keys() {
            if !new.contains_key(name) {
                d.remove_names.push(name);
            }
        }
        if decided.apn_ambr != installed.apn_ambr {
            d.apn_ambr = decided.apn_ambr.as_ref();
        }
        if decided.default_bearer_qos != installed.default_bearer_qos {
            d.default_bearer_qos = decided.default_bearer_qos.as_ref();
        }
        let mut a = installed.event_triggers.clone();
        let mut b = decided.event_triggers.clone();
        a.sort_unstable();
        b.sort_unstable();
        if a != b {
            d.event_triggers = Some(&decided.event_triggers);
        }
        if decided.revalidation_secs != installed.revalidation_secs {
            d.revalidation_secs = decided.revalidation_secs;
        }
        d
    }

    /// The names of the rules it installs: predefined, base, dynamic.
    pub fn installed_names(&self) -> Vec<String> {
        let names = self.install_names.iter().chain(&self.install_base_names);
        let dynamic = self.install_definitions.iter().map(|d| d.name.as_str());
        names.copied().chain(dynamic).map(str::to_owned).collect()
    }

    /// The names of the rules it removes: predefined and dynamic, base.
    pub fn removed_names(&self) -> Vec<String> {
        let names = self.remove_names.iter().chain(&self.remove_base_names);
        names.map(|n| n.to_string()).collect()
    }

    /// Whether nothing needs to be sent (a RAR would be pointless).
    pub fn is_empty(&self) -> bool {
        self.install_names.is_empty()
            && self.install_base_names.is_empty()
            && self.install_definitions.is_empty()
            && self.remove_names.is_empty()
            && self.remove_base_names.is_empty()
            && self.apn_ambr.is_none()
            && self.default_bearer_qos.is_none()
            && self.event_triggers.is_none()
            && self.revalidation_secs.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, qci: u32) -> RuleDefinition {
        RuleDefinition {
            name: name.into(),
            flows: vec!["permit out ip from any to assigned".into()],
            flow_status: None,
            qos: Some(crate::policy::decision::RuleQos {
                qci,
                arp: None,
                mbr_ul: None,
                mbr_dl: None,
                gbr_ul: None,
                gbr_dl: None,
            }),
            precedence: Some(10),
            rating_group: None,
            service_identifier: None,
            online: None,
            offline: None,
            monitoring_key: None,
        }
    }

    #[test]
    fn initial_is_everything() {
        let empty = Decision::default();
        let d = Decision {
            rules: vec!["internet".into()],
            base_names: vec!["base".into()],
            definitions: vec![rule("vip", 6)],
            apn_ambr: Some(Ambr { ul: 1, dl: 2 }),
            event_triggers: vec![2, 13],
            ..Default::default()
        };
        let diff = RuleDiff::between(&empty, &d);
        assert_eq!(diff.install_names, vec!["internet"]);
        assert_eq!(diff.install_base_names, vec!["base"]);
        assert_eq!(diff.install_definitions.len(), 1);
        assert!(diff.remove_names.is_empty());
        assert_eq!(diff.apn_ambr, Some(&Ambr { ul: 1, dl: 2 }));
        assert_eq!(diff.event_triggers, Some(&[2u32, 13][..]));
        assert!(!diff.is_empty());
    }

    #[test]
    fn update_sends_only_changes() {
        let old = Decision {
            rules: vec!["internet".into(), "video".into()],
            definitions: vec![rule("vip", 6), rule("gone", 8)],
            apn_ambr: Some(Ambr { ul: 1, dl: 2 }),
            event_triggers: vec![13, 2],
            ..Default::default()
        };
        let new = Decision {
            rules: vec!["internet".into(), "throttled".into()],
            definitions: vec![rule("vip", 7)],
            apn_ambr: Some(Ambr { ul: 1, dl: 2 }),
            event_triggers: vec![2, 13],
            ..Default::default()
        };
        let diff = RuleDiff::between(&old, &new);
        assert_eq!(diff.install_names, vec!["throttled"]);
        assert_eq!(diff.remove_names, vec!["video", "gone"]);
        assert_eq!(
            diff.install_definitions
                .iter()
                .map(|r| r.qos.as_ref().map(|q| q.qci))
                .collect::<Vec<_>>(),
            vec![Some(7)]
        );
        assert_eq!(diff.apn_ambr, None);
        assert_eq!(
            diff.event_triggers, None,
            "same set in another order is no change"
        );
        assert!(RuleDiff::between(&new, &new).is_empty());
    }
}
