//! The record of one policy decision as a session keeps it: the memo key
//! (hash of the inputs and script version), the decision, when it was made,
//! and the inputs, for the API. The policy makes these records and
//! its memo reads them back (`unchanged`, here beside the record, so that
//! the record, which keeps the memo's `Bounds`, is the one that imports);
//! the session holds the last one.

use crate::policy::memo::Bounds;
use crate::policy::shared_decision::SharedDecision;
use serde::{Deserialize, Serialize};

/// The last decision: hash of its inputs and script version (the memo key),
/// the decision itself, and the inputs for `GET /v1/sessions/{id}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DecisionRecord {
    /// Hex in JSON: 64-bit hashes lose precision as JSON numbers in most tools.
    #[serde(with = "hex_u64")]
    pub input_hash: u64,
    #[serde(with = "hex_u64")]
    pub script_version: u64,
    /// The deployed version serving when it was decided (the store's
    /// number, `GET /v1/policy/versions/{id}`); 0 in records made before
    /// versions were stored.
    #[serde(default)]
    pub policy_version: u64,
    /// Shared with every equal decision alive (the session's installed
    /// one, most often, and other sessions' of the same plan).
    pub decision: SharedDecision,
    pub inputs: DecisionInputs,
    /// Unix milliseconds.
    pub at_ms: i64,
    /// Where the decision holds beyond identical inputs, when the script
    /// said (`valid`). In memory only: after a restart the memo falls back
    /// to the exact match once, as it does for the inputs.
    #[serde(skip)]
    pub bounds: Option<Box<Bounds>>,
}

/// The inputs of a decision in the form the memo hashed them
/// (MessagePack with field names, `memo::hash_input`), kept when Lua ran:
/// a copy of bytes already written, where JSON text cost a second
/// serialization (escaping, number formatting) on every Lua run, 1.9% of
/// the instructions of a Gx request (callgrind, BENCHMARKS.md). Turned
/// into JSON only when something reads them as JSON: `GET
/// /v1/sessions/{id}`, the decision log, a dry run.
///
/// Kept in memory only: the store writes `null` in its place (see
/// `InputsLeftOut`), so a session recovered after a restart shows no
/// inputs until its next decision. They are ~600 bytes that nothing reads
/// back; without them a session row stays under PostgreSQL's TOAST
/// threshold (no LZ4 compression at every update, 8% less PostgreSQL CPU
/// per transaction, BENCHMARKS.md).
///
/// In JSON (the API) the inputs are the JSON value itself, `null` when
/// none are known; in a binary record (`store/blob.rs`) they are their
/// MessagePack as bytes, or nil. Both read back, and so does the JSON text
/// as a string that binary records of earlier builds hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecisionInputs(Option<Box<[u8]>>);

thread_local! {
    static INPUTS_LEFT_OUT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// While one is alive, decision inputs serialize as `null` on this thread:
/// the store holds one while it encodes a session.
pub(crate) struct InputsLeftOut {
    before: bool,
}

impl InputsLeftOut {
    pub(crate) fn new() -> InputsLeftOut {
        InputsLeftOut {
            before: INPUTS_LEFT_OUT.replace(true),
        }
    }
}

impl Drop for InputsLeftOut {
    fn drop(&mut self) {
        INPUTS_LEFT_OUT.set(self.before);
    }
}

impl Serialize for DecisionInputs {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let packed = match &self.0 {
            Some(packed) if !INPUTS_LEFT_OUT.get() => packed,
            _ => return serializer.serialize_unit(),
        };
        if !serializer.is_human_readable() {
            return serializer.serialize_bytes(packed);
        }
        self.to_json().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for DecisionInputs {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<DecisionInputs, D::Error> {
        if deserializer.is_human_readable() {
            let value = serde_json::Value::deserialize(deserializer)?;
            return Ok(DecisionInputs::of_json(&value));
        }
        deserializer.deserialize_any(BinaryInputs)
    }
}

/// The inputs in a binary record: MessagePack bytes, nil, or (written by
/// earlier builds) JSON text.
struct BinaryInputs;

impl<'de> serde::de::Visitor<'de> for BinaryInputs {
    type Value = DecisionInputs;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("decision inputs as MessagePack bytes, JSON text or nil")
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<DecisionInputs, E> {
        Ok(DecisionInputs::none())
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<DecisionInputs, E> {
        Ok(DecisionInputs::none())
    }

    fn visit_bytes<E: serde::de::Error>(self, packed: &[u8]) -> Result<DecisionInputs, E> {
        Ok(DecisionInputs::packed(packed))
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<DecisionInputs, E> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(E::custom)?;
        Ok(DecisionInputs::of_json(&value))
    }
}

impl DecisionInputs {
    /// No inputs known (`null` to the API).
    pub fn none() -> DecisionInputs {
        DecisionInputs(None)
    }

    /// Inputs the memo has already serialized.
    pub fn packed(packed: &[u8]) -> DecisionInputs {
        DecisionInputs(Some(packed.into()))
    }

    /// Serializes `value` as the memo would; none if it cannot be.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> DecisionInputs {
        let mut packed = Vec::new();
        match value.serialize(&mut rmp_serde::Serializer::new(&mut packed).with_struct_map()) {
            Ok(()) => DecisionInputs(Some(packed.into_boxed_slice())),
            Err(_) => DecisionInputs::none(),
        }
    }

    /// From their JSON form; none for `null`.
    fn of_json(value: &serde_json::Value) -> DecisionInputs {
        match value {
            serde_json::Value::Null => DecisionInputs::none(),
            value => DecisionInputs::of(value),
        }
    }

    /// As JSON: `null` when none are known (or, never written by this
    /// build, bytes that do not read back).
    pub fn to_json(&self) -> serde_json::Value {
        self.0
            .as_deref()
            .and_then(|packed| rmp_serde::from_slice(packed).ok())
            .unwrap_or(serde_json::Value::Null)
    }

    /// As a policy input (a dry run decides again on a session's last one).
    pub fn to_input(&self) -> Option<crate::policy::input::PolicyInput> {
        rmp_serde::from_slice(self.0.as_deref()?).ok()
    }

    /// True when none are known.
    pub fn is_none(&self) -> bool {
        self.0.is_none()
    }

    /// Bytes held.
    pub fn bytes_held(&self) -> usize {
        self.0.as_deref().map_or(0, <[u8]>::len)
    }
}

/// True when `prev` was decided by this script version on identical inputs.
pub fn unchanged(prev: &DecisionRecord, hash: u64, version: u64) -> bool {
    prev.input_hash == hash && prev.script_version == version
}

/// A u64 as 16 hex digits, as the logs and the reload answer show it
/// (JSON numbers above 2^53 lose precision in JavaScript and jq); a plain
/// integer in a binary record.
pub(crate) mod hex_u64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        if !s.is_human_readable() {
            return s.serialize_u64(*v);
        }
        s.serialize_str(&format!("{v:016x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        if !d.is_human_readable() {
            return u64::deserialize(d);
        }
        let text = String::deserialize(d)?;
        u64::from_str_radix(&text, 16).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::engine::sample_inputs;
    use crate::policy::input::tests::every_field_filled;
    use crate::policy::memo;

    fn inputs() -> Vec<crate::policy::input::PolicyInput> {
        let mut all: Vec<_> = sample_inputs().into_iter().map(|(_, i)| i).collect();
        all.push(every_field_filled());
        all
    }

    #[test]
    fn kept_as_hashed_and_shown_as_the_inputs_json() {
        for input in inputs() {
            let kept = memo::hash_input(&input, |_, packed| DecisionInputs::packed(packed));
            assert_eq!(kept, DecisionInputs::of(&input));
            let json = serde_json::to_value(&input).expect("serializes");
            assert_eq!(kept.to_json(), json);
            assert_eq!(serde_json::to_value(&kept).expect("serializes"), json);
            assert_eq!(kept.to_input().as_ref(), Some(&input));
            // Read back from the API's form.
            let back: DecisionInputs = serde_json::from_value(json).expect("reads");
            assert_eq!(back.to_input().as_ref(), Some(&input));
        }
        assert_eq!(DecisionInputs::none().to_json(), serde_json::Value::Null);
        let none: DecisionInputs = serde_json::from_str("null").expect("reads");
        assert!(none.is_none());
    }

    #[test]
    fn a_binary_record_holds_the_bytes_and_reads_the_older_json_text() {
        #[derive(Serialize, Deserialize)]
        struct Record {
            inputs: DecisionInputs,
        }
        let input = every_field_filled();
        let record = Record {
            inputs: DecisionInputs::of(&input),
        };
        let bytes = rmp_serde::to_vec_named(&record).expect("encodes");
        let back: Record = rmp_serde::from_slice(&bytes).expect("decodes");
        assert_eq!(back.inputs, record.inputs);
        // What earlier builds wrote: the JSON text as a string, or nil.
        #[derive(Serialize)]
        struct Older {
            inputs: Option<String>,
        }
        let text = serde_json::to_string(&input).expect("serializes");
        let older = rmp_serde::to_vec_named(&Older { inputs: Some(text) }).expect("encodes");
        let back: Record = rmp_serde::from_slice(&older).expect("decodes");
        assert_eq!(back.inputs.to_input(), Some(input));
        let older = rmp_serde::to_vec_named(&Older { inputs: None }).expect("encodes");
        let back: Record = rmp_serde::from_slice(&older).expect("decodes");
        assert!(back.inputs.is_none());
        // Left out while the store encodes.
        let _left_out = InputsLeftOut::new();
        let bytes = rmp_serde::to_vec_named(&record).expect("encodes");
        let back: Record = rmp_serde::from_slice(&bytes).expect("decodes");
        assert!(back.inputs.is_none());
    }
}
