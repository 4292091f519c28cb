//! What a decision may say about how long, and over which usage, it holds:
//! the `valid` field of the table `decide` returns. The memo (memo.rs)
//! reuses a decision without running Lua while every other input is
//! unchanged, the time has not reached the stated end and each used amount
//! stays within its stated range. Without it a decision is reused only on
//! identical inputs, as always.

use litemap::LiteMap;
use serde::{Deserialize, Serialize};

/// The accumulator name that stands for every accumulator not named.
pub const OTHER_ACCUMULATORS: &str = "*";

/// `valid = { secs = N, usage = ..., installed = "any" }`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Validity {
    /// The decision holds whatever `input.time` says for this many seconds
    /// from the start of the minute `input.time` gives (and at most until
    /// its own revalidation). Absent: it holds within that minute only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secs: Option<u64>,
    /// The used amounts (`used_mb`, `percent`) the decision holds over.
    /// Absent: every used amount must stay as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageValidity>,
    /// `installed = "any"`: the decision does not read
    /// `input.session.installed`, so it holds whatever rules the PCEF has
    /// installed (most often the ones it itself installed a moment ago).
    /// Absent: the installed rules must stay as they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installed: Option<AnyWord>,
}

/// `usage = "any"` or `usage = { monthly = { below = 8000 }, ["*"] = "any" }`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum UsageValidity {
    /// `"any"`: every accumulator's used amount may change.
    All(AnyWord),
    /// By accumulator name; `"*"` for every accumulator not named. An
    /// accumulator neither named nor covered by `"*"` must stay as it was.
    /// A sorted vector, not a `BTreeMap`: a decision names one accumulator
    /// or two, and its memo keeps this with every open session, where a
    /// `BTreeMap` allocates a node for eleven.
    Each(#[serde(serialize_with = "as_map")] LiteMap<String, UsageRange>),
}

/// One accumulator's range: `"any"` or `{ at_least = MB, below = MB }`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum UsageRange {
    Any(AnyWord),
    Mb(MbRange),
}

/// `at_least <= used_mb < below`, either end open when absent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MbRange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_least: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below: Option<u64>,
}

/// The word `"any"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnyWord {
    Any,
}

impl UsageRange {
    /// The range as bounds (`"any"` is the whole range).
    pub fn mb(&self) -> MbRange {
        match self {
            UsageRange::Any(_) => MbRange::default(),
            UsageRange::Mb(r) => *r,
        }
    }
}

impl MbRange {
    pub fn contains(&self, used_mb: u64) -> bool {
        self.at_least.is_none_or(|lo| used_mb >= lo) && self.below.is_none_or(|hi| used_mb < hi)
    }
}

/// The ranges as a map in every format (LiteMap writes an empty map as a
/// sequence in JSON).
fn as_map<S: serde::Serializer>(
    by_name: &LiteMap<String, UsageRange>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(by_name.iter())
}

impl UsageValidity {
    /// The range the decision states for accumulator `name`, if any.
    pub fn range_of(&self, name: &str) -> Option<MbRange> {
        match self {
            UsageValidity::All(_) => Some(MbRange::default()),
            UsageValidity::Each(by_name) => by_name
                .get(name)
                .or_else(|| by_name.get(OTHER_ACCUMULATORS))
                .map(UsageRange::mb),
        }
    }

    /// Accumulators named (for the limits check).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        let named = match self {
            UsageValidity::All(_) => None,
            UsageValidity::Each(by_name) => Some(by_name.keys().map(String::as_str)),
        };
        named.into_iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Validity {
        serde_json::from_str(json).expect("parses")
    }

    #[test]
    fn shapes_parse() {
        let v = parse(r#"{"secs": 60, "usage": "any"}"#);
        assert_eq!(v.secs, Some(60));
        assert_eq!(v.usage, Some(UsageValidity::All(AnyWord::Any)));
        assert_eq!(v.installed, None);
        let v = parse(r#"{"installed": "any"}"#);
        assert_eq!(v.installed, Some(AnyWord::Any));
        let v = parse(r#"{"usage": {"monthly": {"below": 8000}, "*": "any", "daily": {}}}"#);
        let u = v.usage.expect("usage");
        assert_eq!(
            u.range_of("monthly"),
            Some(MbRange {
                at_least: None,
                below: Some(8000)
            })
        );
        assert_eq!(u.range_of("night"), Some(MbRange::default()));
        assert_eq!(u.range_of("daily"), Some(MbRange::default()));
        let v = parse(r#"{"usage": {"monthly": {"at_least": 10}}}"#);
        assert_eq!(v.usage.expect("usage").range_of("night"), None);
        for bad in [
            r#"{"usage": "all"}"#,
            r#"{"usage": {"monthly": {"under": 1}}}"#,
            r#"{"until": 5}"#,
            r#"{"usage": {"monthly": "some"}}"#,
            r#"{"installed": true}"#,
        ] {
            assert!(serde_json::from_str::<Validity>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ranges_are_half_open() {
        let r = MbRange {
            at_least: Some(10),
            below: Some(20),
        };
        assert!(!r.contains(9) && r.contains(10) && r.contains(19) && !r.contains(20));
        assert!(MbRange::default().contains(u64::MAX));
    }
}
