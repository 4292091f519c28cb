//! The record of one policy decision as a session keeps it: the memo key
//! (hash of the inputs and script version), the decision, when it was made,
//! and the inputs as JSON for the API. The policy makes these records and
//! its memo reads them back (`unchanged`, here beside the record, so that
//! the record, which keeps the memo's `Bounds`, is the one that imports);
//! the session holds the last one.

use crate::policy::memo::Bounds;
use crate::policy::shared_decision::SharedDecision;
use serde::{Deserialize, Serialize};

/// The last decision: hash of its inputs and script version (the memo key),
/// the decision itself, and the inputs as JSON for `GET /v1/sessions/{id}`.
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
    pub inputs: InputsJson,
    /// Unix milliseconds.
    pub at_ms: i64,
    /// Where the decision holds beyond identical inputs, when the script
    /// said (`valid`). In memory only: after a restart the memo falls back
    /// to the exact match once, as it does for the inputs.
    #[serde(skip)]
    pub bounds: Option<Box<Bounds>>,
}

/// The inputs of a decision as JSON text (written only when Lua runs; the
/// memo hashes a MessagePack form, memo.rs): one allocation, where a
/// `serde_json::Value` tree took dozens per decision and stayed in memory
/// with every open session. Reads the
/// object of records written before it the same way.
///
/// Kept in memory only: the store writes `null` in its place (see
/// `InputsLeftOut`), so a session recovered after a restart shows no
/// inputs until its next decision. They are ~750 bytes that nothing reads
/// back; without them a session row stays under PostgreSQL's TOAST
/// threshold (no LZ4 compression at every update, 8% less PostgreSQL CPU
/// per transaction, BENCHMARKS.md).
///
/// In JSON (the API) the inputs are the JSON value itself; in a binary
/// record (`store/blob.rs`) they are their JSON text as a string, or nil.
#[derive(Clone, Debug)]
pub struct InputsJson(Box<serde_json::value::RawValue>);

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

impl Serialize for InputsJson {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if INPUTS_LEFT_OUT.get() {
            return serializer.serialize_unit();
        }
        if !serializer.is_human_readable() {
            return serializer.serialize_str(self.get());
        }
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for InputsJson {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<InputsJson, D::Error> {
        if deserializer.is_human_readable() {
            return Box::<serde_json::value::RawValue>::deserialize(deserializer).map(InputsJson);
        }
        match Option::<String>::deserialize(deserializer)? {
            None => Ok(InputsJson::null()),
            Some(text) => serde_json::value::RawValue::from_string(text)
                .map(InputsJson)
                .map_err(serde::de::Error::custom),
        }
    }
}

impl InputsJson {
    /// JSON `null`: no inputs known.
    pub fn null() -> InputsJson {
        InputsJson(serde_json::value::RawValue::NULL.to_owned())
    }

    /// Serializes `value`; `null` if it cannot be.
    pub fn of<T: Serialize>(value: &T) -> InputsJson {
        serde_json::value::to_raw_value(value)
            .map(InputsJson)
            .unwrap_or_else(|_| InputsJson::null())
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for InputsJson {
    fn eq(&self, other: &InputsJson) -> bool {
        self.get() == other.get()
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
