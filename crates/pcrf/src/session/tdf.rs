//! The Sd (TDF) session bound to a Gx session (TS 29.212 §5b). It lives
//! inside the Gx session's record, so an Sd change is one blob and one
//! commit under the Gx session's lock, and it goes away with the Gx record.

use crate::policy::decision::AdcRule;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// How the Sd session came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TdfMode {
    /// The PCRF opened it with a TSR (the policy asked for detection).
    Solicited,
    /// The TDF opened it with a CCR-I for the UE's address.
    Unsolicited,
}

/// One TDF session.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TdfSession {
    /// The Sd Session-Id.
    pub id: String,
    pub mode: TdfMode,
    /// The TDF's Origin-Host and Origin-Realm (where TSR and Sd RAR go).
    pub host: String,
    pub realm: String,
    /// The ADC rules the TDF has now (our view after its last answer).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub installed: Vec<AdcRule>,
    /// TDF-Application-Identifiers reported started and not yet stopped.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub running: BTreeSet<String>,
    /// CC-Request-Number of the TDF's last CCR (retransmission detection).
    #[serde(default)]
    pub last_request_number: u32,
    /// The encoded answer to the TDF's last CCR, replayed on retransmission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_answer: Option<Vec<u8>>,
}

impl TdfSession {
    pub fn new(id: String, mode: TdfMode, host: String, realm: String) -> TdfSession {
        TdfSession {
            id,
            mode,
            host,
            realm,
            installed: Vec::new(),
            running: BTreeSet::new(),
            last_request_number: 0,
            last_answer: None,
        }
    }

    /// Running applications, sorted (what the policy sees).
    pub fn applications(&self) -> Vec<String> {
        self.running.iter().cloned().collect()
    }

    /// Equal in what the store must keep (the last request number and
    /// answer are bookkeeping, as for the Gx session).
    pub fn durably_equal(&self, other: &TdfSession) -> bool {
        self.id == other.id
            && self.mode == other.mode
            && self.host == other.host
            && self.realm == other.realm
            && self.installed == other.installed
            && self.running == other.running
    }
}

/// What changes at the TDF to go from `installed` to `wanted`: rules to
/// install (new, or a definition that changed) and keys to remove.
pub fn adc_diff<'a>(
    installed: &[AdcRule],
    wanted: &'a [AdcRule],
) -> (Vec<&'a AdcRule>, Vec<String>) {
    let install = wanted
        .iter()
        .filter(|w| !installed.contains(w))
        .collect::<Vec<_>>();
    let remove = installed
        .iter()
        .filter(|i| {
            !wanted
                .iter()
                .any(|w| w.key() == i.key() && w.base.is_some() == i.base.is_some())
        })
        .map(|i| i.key().to_owned())
        .collect();
    (install, remove)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(n: &str, app: Option<&str>) -> AdcRule {
        AdcRule {
            name: Some(n.into()),
            base: None,
            application: app.map(str::to_owned),
            monitoring_key: None,
        }
    }

    #[test]
    fn diff_installs_new_and_changed_and_removes_dropped() {
        let old = vec![
            named("a", None),
            named("v", Some("video")),
            named("gone", None),
        ];
        let new = vec![
            named("a", None),
            named("v", Some("video-hd")),
            named("n", None),
        ];
        let (install, remove) = adc_diff(&old, &new);
        let keys: Vec<&str> = install.iter().map(|r| r.key()).collect();
        assert_eq!(keys, vec!["v", "n"]);
        assert_eq!(remove, vec!["gone".to_string()]);
        let (i, r) = adc_diff(&new, &new);
        assert!(i.is_empty() && r.is_empty());
    }

    #[test]
    fn an_adc_rule_is_a_name_a_base_or_a_definition() {
        assert!(named("a", None).check().is_ok());
        assert!(named("v", Some("video")).check().is_ok());
        let base = AdcRule {
            name: None,
            base: Some("dpi".into()),
            application: None,
            monitoring_key: None,
        };
        assert!(base.check().is_ok());
        assert_eq!(base.key(), "dpi");
        let both = AdcRule {
            name: Some("a".into()),
            ..base.clone()
        };
        assert!(both.check().is_err());
        let based_app = AdcRule {
            application: Some("video".into()),
            ..base
        };
        assert!(based_app.check().is_err());
        assert!(named("", None).check().is_err());
        let nothing = AdcRule {
            name: None,
            base: None,
            application: Some("video".into()),
            monitoring_key: None,
        };
        assert!(nothing.check().is_err());
    }

    #[test]
    fn bookkeeping_is_not_durable_and_old_blobs_load() {
        let a = TdfSession::new("sd;1".into(), TdfMode::Solicited, "tdf".into(), "r".into());
        let mut b = a.clone();
        b.last_request_number = 4;
        b.last_answer = Some(vec![1]);
        assert!(a.durably_equal(&b));
        b.running.insert("video".into());
        assert!(!a.durably_equal(&b));
        let json = r#"{"id":"sd;1","mode":"unsolicited","host":"tdf","realm":"r"}"#;
        let back: TdfSession = serde_json::from_str(json).expect("minimal record loads");
        assert_eq!(back.mode, TdfMode::Unsolicited);
    }
}
