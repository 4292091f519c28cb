//! `[decision_log]`: which policy decisions are emitted as `decision`
//! events, so that an operator can answer afterwards why a subscriber got
//! what it got (the session keeps only its last decision). The events go
//! through the outbox and its sinks like any other; this file holds the
//! section, its checks and the choice of the decisions logged.

use serde::Deserialize;

/// `[decision_log]`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionLogConfig {
    /// Off by default: nothing is built or written.
    #[serde(default)]
    pub enabled: bool,
    /// Share of subscribers whose decisions are logged, 0 to 100. The
    /// choice is per subscriber (a hash of its key), stable across nodes
    /// and restarts: a logged subscriber's history is whole.
    #[serde(default = "every_one")]
    pub sample_percent: u8,
    /// When not empty, only these subscribers (IMSI, or MSISDN when no
    /// IMSI is known) are logged.
    #[serde(default)]
    pub subscribers: Vec<String>,
    /// When not empty, only subscribers on these plans are logged.
    #[serde(default)]
    pub plans: Vec<String>,
}

fn every_one() -> u8 {
    100
}

impl DecisionLogConfig {
    /// Every problem, as (key, message).
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if self.sample_percent > 100 {
            out.push((
                "[decision_log].sample_percent".into(),
                "must be a percentage from 0 to 100".into(),
            ));
        }
        if self.subscribers.iter().any(String::is_empty) {
            out.push((
                "[decision_log].subscribers".into(),
                "an empty subscriber key matches nothing".into(),
            ));
        }
        if self.plans.iter().any(String::is_empty) {
            out.push((
                "[decision_log].plans".into(),
                "an empty plan name matches nothing".into(),
            ));
        }
        out
    }

    /// Whether a decision for `subscriber` (on `plan`) passes the filter;
    /// sampling is [`Self::sampled_in`].
    pub fn selects(&self, subscriber: &str, plan: Option<&str>) -> bool {
        (self.subscribers.is_empty() || self.subscribers.iter().any(|s| s == subscriber))
            && (self.plans.is_empty() || plan.is_some_and(|p| self.plans.iter().any(|x| x == p)))
    }

    /// Whether `subscriber` is in the sampled share.
    pub fn sampled_in(&self, subscriber: &str) -> bool {
        match self.sample_percent {
            0 => false,
            p if p >= 100 => true,
            p => {
                xxhash_rust::xxh3::xxh3_64_with_seed(subscriber.as_bytes(), SAMPLE_SEED) % 100
                    < u64::from(p)
            }
        }
    }
}

/// Seed of the sampling hash: independent of the outbox lanes' and the
/// rollout's, so a sampled share is not also one lane or one canary group.
const SAMPLE_SEED: u64 = 0x6465_6369_7369_6f6e;

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> DecisionLogConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn off_by_default_and_every_decision_once_on() {
        let c = cfg("");
        assert!(!c.enabled);
        assert_eq!(c.sample_percent, 100);
        assert!(c.problems().is_empty());
        assert!(c.selects("001010000000001", None));
        assert!(c.sampled_in("001010000000001"));
    }

    #[test]
    fn filters_by_subscriber_and_plan() {
        let c = cfg("enabled = true\nsubscribers = [\"a\", \"b\"]\nplans = [\"gold\"]");
        assert!(c.selects("a", Some("gold")));
        assert!(!c.selects("a", Some("basic")));
        assert!(!c.selects("a", None));
        assert!(!c.selects("c", Some("gold")));
    }

    #[test]
    fn sampling_is_stable_and_near_its_share() {
        let c = cfg("sample_percent = 30");
        let keys: Vec<String> = (0..10_000).map(|i| format!("00101{i:010}")).collect();
        let n = keys.iter().filter(|k| c.sampled_in(k)).count();
        assert!((2_500..3_500).contains(&n), "{n}");
        assert!(keys.iter().all(|k| c.sampled_in(k) == c.sampled_in(k)));
        let none = cfg("sample_percent = 0");
        assert!(keys.iter().all(|k| !none.sampled_in(k)));
    }

    #[test]
    fn problems_are_named() {
        let p = cfg("sample_percent = 101\nsubscribers = [\"\"]\nplans = [\"\"]").problems();
        let text = format!("{p:?}");
        assert!(text.contains("sample_percent"), "{text}");
        assert!(text.contains("subscribers"), "{text}");
        assert!(text.contains("plans"), "{text}");
    }
}
