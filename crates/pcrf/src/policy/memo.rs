//! The checksum memo, which spares Lua for most requests: one xxh3 hash
//! over a canonical serialization of every input the policy can see. With
//! the script version it decides whether Lua must run again. A decision
//! that states its validity (validity.rs) is also reused on inputs that
//! differ only within it: the `Bounds` kept with it hash every input but
//! those it covers, and hold the ranges and the time it covers them for.

use super::input::{AccumulatorInput, PolicyInput, SessionInput, UsageInput};
use super::validity::{UsageValidity, Validity};
use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};
use std::cell::RefCell;
use std::collections::BTreeMap;
use xxhash_rust::xxh3::xxh3_64;

thread_local! {
    /// Reused serialization buffer: one allocation per thread, not per call.
    static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// xxh3 of `value` in MessagePack with field names (a struct as a map),
/// written into this thread's buffer and hashed in one pass. Canonical
/// because struct fields serialize in declaration order and every map is
/// ordered by key (BTreeMap; serde_json objects are BTreeMaps too, and a
/// test guards against that changing). Field names keep it unambiguous
/// where a field is skipped when empty (an accumulator's `quota_mb` and
/// `percent`). MessagePack, not JSON: no escaping or number formatting
/// on the request path (callgrind, BENCHMARKS.md).
fn hash_of<T: Serialize + ?Sized>(value: &T) -> u64 {
    hashed(value, |hash, _| hash)
}

/// `then` with the hash of `value` and the serialization it hashed.
fn hashed<T: Serialize + ?Sized, R>(value: &T, then: impl FnOnce(u64, &[u8]) -> R) -> R {
    BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        buf.clear();
        // Cannot fail: Vec writes never fail and every value serializes.
        let _ = value.serialize(&mut rmp_serde::Serializer::new(&mut *buf).with_struct_map());
        then(xxh3_64(&buf), &buf)
    })
}

/// Hash of the whole input (the exact memo's key).
pub fn input_hash(input: &PolicyInput) -> u64 {
    hash_of(input)
}

/// `then` with the hash of the whole input and the serialization it
/// hashed, which a decision made by Lua keeps as its inputs
/// (`DecisionInputs`) without writing them out a second time.
pub fn hash_input<R>(input: &PolicyInput, then: impl FnOnce(u64, &[u8]) -> R) -> R {
    hashed(input, then)
}

/// The script version of `source`: a content hash, never 0 (0 marks a
/// fallback decision). Content, not a counter, so a decision persisted
/// before a restart is only reused if the same script is loaded again.
pub fn script_version(source: &str) -> u64 {
    match xxh3_64(source.as_bytes()) {
        0 => 1,
        v => v,
    }
}

/// Where a decision holds beyond identical inputs: made from the
/// `valid` the script returned with it, kept with the decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Bounds {
    /// xxh3 of every input except what `usage` and `time` cover.
    key: u64,
    /// The accumulators whose used amounts (`used_mb`, `percent`) may
    /// change, and within which range; `None`: all in the key.
    usage: Option<UsageValidity>,
    /// `[from, until)` Unix ms, over which `input.time` may change; `None`:
    /// the time is in the key.
    time: Option<(i64, i64)>,
    /// The installed rules are left out of the key (`installed = "any"`).
    any_installed: bool,
    /// When the decision's inputs were read, Unix ms: its
    /// `revalidation_secs` counted from here.
    made_ms: i64,
}

/// The bounds `valid` states for a decision made on `input` (with its
/// `revalidation_secs`), or `None` when they add nothing to the exact memo
/// or do not contain the input they were made on (a script mistake, which
/// then only costs the reuse).
pub fn bounds(
    input: &PolicyInput,
    valid: &Validity,
    revalidation_secs: Option<u64>,
) -> Option<Bounds> {
    let time = match valid.secs {
        Some(secs) if input.time.at_ms > 0 => {
            let secs = i64::try_from(secs).unwrap_or(i64::MAX);
            let mut until = input
                .time
                .minute_ms
                .saturating_add(secs.saturating_mul(1000));
            // A decision never outlives its own revalidation: the PCEF
            // comes back then to have the policy run again.
            if let Some(r) = revalidation_secs {
                let r = i64::try_from(r).unwrap_or(i64::MAX);
                until = until.min(input.time.at_ms.saturating_add(r.saturating_mul(1000)));
            }
            (until > input.time.at_ms).then_some((input.time.minute_ms, until))
        }
        _ => None,
    };
    let usage = valid.usage.clone();
    if let Some(u) = &usage {
        if !amounts_within(u, &input.usage) {
            return None;
        }
    }
    let any_installed = valid.installed.is_some();
    if time.is_none() && usage.is_none() && !any_installed {
        return None;
    }
    let leave_out = LeftOut {
        usage: usage.as_ref(),
        time: time.is_some(),
        installed: any_installed,
    };
    Some(Bounds {
        key: key_hash(input, leave_out),
        usage,
        time,
        any_installed,
        made_ms: input.time.at_ms,
    })
}

impl Bounds {
    /// True when a decision kept with these bounds holds for `input` (made
    /// by the same script version: the caller checks that).
    pub fn hold_for(&self, input: &PolicyInput) -> bool {
        if let Some((from, until)) = self.time {
            if !(from..until).contains(&input.time.at_ms) {
                return false;
            }
        }
        if let Some(u) = &self.usage {
            if !amounts_within(u, &input.usage) {
                return false;
            }
        }
        let leave_out = LeftOut {
            usage: self.usage.as_ref(),
            time: self.time.is_some(),
            installed: self.any_installed,
        };
        key_hash(input, leave_out) == self.key
    }

    /// Seconds of a reused decision's revalidation spent by `input`'s
    /// time: a revalidation it asks for is the same instant, so fewer
    /// seconds from now when the time was left out of the key (within one
    /// minute, as with the exact memo, it is left as it is). The decision
    /// itself stays shared; `Outcome::decision` applies these.
    pub fn spent_secs(&self, input: &PolicyInput) -> u64 {
        match self.time {
            Some(_) => ((input.time.at_ms - self.made_ms).max(0) / 1000).unsigned_abs(),
            None => 0,
        }
    }
}

/// Every accumulator whose amount `u` covers is within its range.
fn amounts_within(u: &UsageValidity, usage: &UsageInput) -> bool {
    usage
        .accumulators
        .iter()
        .all(|(name, a)| u.range_of(name).is_none_or(|r| r.contains(a.used_mb)))
}

/// What a bounds key leaves out of the input.
#[derive(Clone, Copy)]
struct LeftOut<'a> {
    /// The used amounts these cover.
    usage: Option<&'a UsageValidity>,
    /// The time.
    time: bool,
    /// The installed rules.
    installed: bool,
}

/// xxh3 of the canonical serialization of `input` without what `leave_out`
/// names.
fn key_hash(input: &PolicyInput, leave_out: LeftOut<'_>) -> u64 {
    hash_of(&Keyed { input, leave_out })
}

/// `PolicyInput` as the bounds key sees it.
struct Keyed<'a> {
    input: &'a PolicyInput,
    leave_out: LeftOut<'a>,
}

impl Serialize for Keyed<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Every field named, so that a new input cannot be left out of the
        // key unnoticed: it must be added here to compile.
        let PolicyInput {
            subscriber,
            session,
            time,
            network,
            usage,
            applications,
            spending,
        } = self.input;
        let UsageInput {
            accumulators,
            unknown_keys,
        } = usage;
        let mut st = s.serialize_struct("Keyed", 8)?;
        st.serialize_field("subscriber", subscriber)?;
        st.serialize_field(
            "session",
            &KeyedSession {
                session,
                installed: !self.leave_out.installed,
            },
        )?;
        st.serialize_field("time", &(!self.leave_out.time).then_some(time))?;
        st.serialize_field("network", network)?;
        st.serialize_field(
            "accumulators",
            &Accumulators {
                all: accumulators,
                covered: self.leave_out.usage,
            },
        )?;
        st.serialize_field("unknown_keys", unknown_keys)?;
        st.serialize_field("applications", applications)?;
        st.serialize_field("spending", spending)?;
        st.end()
    }
}

/// `SessionInput` as the bounds key sees it: whole, or without the
/// installed rules.
struct KeyedSession<'a> {
    session: &'a SessionInput,
    installed: bool,
}

impl Serialize for KeyedSession<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Every field named, as in `Keyed`.
        let SessionInput {
            apn,
            rat,
            ip_can_type,
            ue_ipv4,
            ue_ipv6_prefix,
            location,
            ms_timezone,
            device,
            pcef,
            installed,
            rule_failures,
            n7,
        } = self.session;
        let mut st = s.serialize_struct("KeyedSession", 12)?;
        st.serialize_field("apn", apn)?;
        st.serialize_field("rat", rat)?;
        st.serialize_field("ip_can_type", ip_can_type)?;
        st.serialize_field("ue_ipv4", ue_ipv4)?;
        st.serialize_field("ue_ipv6_prefix", ue_ipv6_prefix)?;
        st.serialize_field("location", location)?;
        st.serialize_field("ms_timezone", ms_timezone)?;
        st.serialize_field("device", device)?;
        st.serialize_field("pcef", pcef)?;
        st.serialize_field("installed", &self.installed.then_some(installed))?;
        st.serialize_field("rule_failures", rule_failures)?;
        st.serialize_field("n7", n7)?;
        st.end()
    }
}

struct Accumulators<'a> {
    all: &'a BTreeMap<std::sync::Arc<str>, AccumulatorInput>,
    covered: Option<&'a UsageValidity>,
}

impl Serialize for Accumulators<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.all.len()))?;
        for (name, a) in self.all {
            let AccumulatorInput {
                used_mb,
                quota_mb,
                percent,
                exhausted,
            } = a;
            let covered = self.covered.is_some_and(|u| u.range_of(name).is_some());
            // The amounts follow `used_mb`; the allowance and whether it is
            // used up stay in the key.
            let amounts = (!covered).then_some((used_mb, percent));
            m.serialize_entry(name, &(amounts, quota_mb, exhausted))?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_changes_the_hash() {
        let base = PolicyInput::default();
        let h = input_hash(&base);
        let mut a = base.clone();
        a.time.minute = 1;
        let mut b = base.clone();
        b.session.installed = b
            .session
            .installed
            .with_names(|names| {
                names
                    .iter()
                    .map(|n| n.to_string())
                    .chain(["x".to_owned()])
                    .collect::<Vec<_>>()
            })
            .into();
        let mut c = base.clone();
        c.network.congestion = 2;
        let mut d = base.clone();
        d.subscriber
            .fields_mut()
            .attributes
            .insert("blocked".into(), true.into());
        let mut e = base.clone();
        e.usage.accumulators.insert(
            "monthly".into(),
            crate::policy::input::AccumulatorInput {
                used_mb: 1,
                ..Default::default()
            },
        );
        let mut f = base.clone();
        f.session.n7 = Some(crate::policy::input::N7SessionInput {
            dnn: "internet".into(),
            ..Default::default()
        });
        for other in [a, b, c, d, e, f] {
            assert_ne!(input_hash(&other), h);
        }
        assert_eq!(input_hash(&base.clone()), h);
    }

    #[test]
    fn nested_attribute_order_does_not_matter() {
        let one: serde_json::Value =
            serde_json::from_str(r#"{"a":1,"b":{"x":1,"y":2}}"#).expect("json");
        let two: serde_json::Value =
            serde_json::from_str(r#"{"b":{"y":2,"x":1},"a":1}"#).expect("json");
        let mut p = PolicyInput::default();
        let mut q = PolicyInput::default();
        p.subscriber.fields_mut().attributes.insert("k".into(), one);
        q.subscriber.fields_mut().attributes.insert("k".into(), two);
        assert_eq!(input_hash(&p), input_hash(&q));
    }

    #[test]
    fn version_is_content_and_never_zero() {
        assert_eq!(script_version("a"), script_version("a"));
        assert_ne!(script_version("a"), script_version("b"));
        assert_ne!(script_version(""), 0);
    }
}
