//! The stored form of a record: every store keeps a session, a subscriber
//! or a subscriber's usage as one JSON blob (see docs/durability.md for why
//! JSON). Decoding is shared so that both stores treat a corrupt record the
//! same way: logged with its key, counted, skipped; one bad row costs one
//! record, not the node. Encoding is shared so both write the same bytes.

use super::StoreError;
use crate::policy::record::InputsLeftOut;
use crate::session::GxSession;
use crate::subscriber::Subscriber;
use crate::usage::SubscriberUsage;
use serde::Serialize;

/// Room for a typical blob (a session is 2-5 KB, usage under 1 KB):
/// growing an empty buffer to that size reallocated and copied it about
/// ten times per write.
const SESSION_BYTES: usize = 4096;
const SMALL_BYTES: usize = 1024;

fn encode<T: Serialize>(
    value: &T,
    room: usize,
    what: impl FnOnce() -> String,
) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::with_capacity(room);
    super::json_writer::encode(&mut out, value)
        .map_err(|e| StoreError::Corrupt(format!("encoding {}: {e}", what())))?;
    Ok(out)
}

/// The blob of a session, as both stores write it: everything but the
/// last decision's inputs, which only the API shows (see `InputsJson`).
pub fn encode_session(s: &GxSession) -> Result<Vec<u8>, StoreError> {
    let _in_memory_only = InputsLeftOut::new();
    encode(s, SESSION_BYTES, || format!("session {:?}", s.id))
}

/// The blob of a subscriber.
pub(crate) fn encode_subscriber(s: &Subscriber) -> Result<Vec<u8>, StoreError> {
    encode(s, SMALL_BYTES, || format!("subscriber {:?}", s.imsi))
}

/// The blob of a subscriber's usage.
pub(crate) fn encode_usage(u: &SubscriberUsage) -> Result<Vec<u8>, StoreError> {
    encode(u, SMALL_BYTES, || format!("usage of {:?}", u.subscriber))
}

/// Decodes a session blob; `None` (logged, counted) when it is corrupt.
pub(crate) fn decode_session(skipped: &mut u64, id: &str, data: &[u8]) -> Option<GxSession> {
    match serde_json::from_slice::<GxSession>(data) {
        Ok(s) if s.id == id => Some(s),
        Ok(s) => {
            *skipped += 1;
            tracing::error!(session_id = %id, blob_id = %s.id,
                "stored session record names another Session-Id; skipped");
            None
        }
        Err(e) => {
            *skipped += 1;
            tracing::error!(session_id = %id, error = %e,
                "stored session record cannot be decoded; skipped");
            None
        }
    }
}

/// Decodes a subscriber blob; `None` (logged, counted) when it is corrupt.
pub(crate) fn decode_subscriber(skipped: &mut u64, imsi: &str, data: &[u8]) -> Option<Subscriber> {
    match serde_json::from_slice::<Subscriber>(data) {
        Ok(s) if s.imsi == imsi => Some(s),
        Ok(_) | Err(_) => {
            *skipped += 1;
            tracing::error!(imsi = %imsi, "stored subscriber record cannot be decoded; skipped");
            None
        }
    }
}

/// Decodes a usage blob; `None` (logged, counted) when it is corrupt or
/// names another subscriber than its row.
pub(crate) fn decode_usage(
    skipped: &mut u64,
    subscriber: &str,
    data: &[u8],
) -> Option<SubscriberUsage> {
    match serde_json::from_slice::<SubscriberUsage>(data) {
        Ok(u) if u.subscriber == subscriber => Some(u),
        Ok(u) => {
            *skipped += 1;
            tracing::error!(subscriber = %subscriber, blob_subscriber = %u.subscriber,
                "stored usage record names another subscriber; skipped");
            None
        }
        Err(e) => {
            *skipped += 1;
            tracing::error!(subscriber = %subscriber, error = %e,
                "stored usage record cannot be decoded; skipped");
            None
        }
    }
}

#[cfg(test)]
pub(in crate::store) mod tests {
    use super::*;

    /// A session as the build before `InputsJson` stored it (inputs as a
    /// JSON object with sorted keys), taken from a seed-scenario database.
    pub(in crate::store) const BEFORE_RAW_INPUTS: &str = r#"{"id":"pgw-2.bench.test;82540084;199","state":"closed","subscriber":"001010000000200","imsi":"001010000000200","msisdn":"79000000200","pcef_host":"pgw-2.bench.test","pcef_realm":"bench.test","apn":"internet","ue_ipv4":"10.0.0.200","ue_ipv6_prefix":null,"rat_type":1004,"ip_can_type":5,"location":"8200f11000c800f1100d1f9897","ms_timezone":"2100","device":"3534900600019901","supported_features":[[1,11]],"installed":{"rules":["internet"],"base_names":["consumer"],"definitions":[],"apn_ambr":{"ul":20000000,"dl":75000000},"default_bearer_qos":{"qci":9,"arp":{"priority":9,"may_preempt":false,"preemptable":true}},"event_triggers":[2,13,17,18,19,33],"revalidation_secs":16740,"monitoring":["total"],"spending_counters":["monthly-data"]},"rule_failures":[],"monitoring":{"keys":{"total":{"granted":{"total":100000000},"level":"session","granted_ms":1795378888572,"reported_octets":4410615}}},"last_request_number":1,"revalidation_at_ms":1795395628572,"last_decision":{"input_hash":"9845eed09d4aa82f","script_version":"483467ac3a870d66","decision":{"rules":["internet"],"base_names":["consumer"],"definitions":[],"apn_ambr":{"ul":20000000,"dl":75000000},"default_bearer_qos":{"qci":9,"arp":{"priority":9,"may_preempt":false,"preemptable":true}},"event_triggers":[2,13,17,18,19],"revalidation_secs":16740,"monitoring":["total"],"spending_counters":["monthly-data"]},"inputs":{"applications":[],"network":{"congestion":0},"session":{"apn":"internet","device":"3534900600019901","installed":[],"ip_can_type":"3GPP-EPS","location":"8200f11000c800f1100d1f9897","ms_timezone":"2100","pcef":"pgw-2.bench.test","rat":"EUTRAN","rule_failures":[],"ue_ipv4":"10.0.0.200","ue_ipv6_prefix":null},"subscriber":{"attributes":{},"imsi":"001010000000200","known":true,"msisdn":"79000000200","plan":"plus","services":["internet"]},"time":{"date":"2026-11-22","hour":20,"minute":21,"weekday":7},"usage":{"accumulators":{"daily":{"exhausted":false,"used_mb":0},"monthly":{"exhausted":false,"percent":0,"quota_mb":50000,"used_mb":0},"night":{"exhausted":false,"used_mb":0},"vip-video":{"exhausted":false,"used_mb":0}}}},"at_ms":1795378888572},"last_answer":"010000984000011001000016bf58983beb5f59de00000107400000257067772d322e62656e63682e746573743b38323534303038343b313939000000000001024000000c010000160000010840000016706372662e706372662e7465737400000000012840000011706372662e746573740000000000010c4000000c000007d1000001a04000000c000000030000019f4000000c00000001","created_ms":1795378888572,"updated_ms":1795378889856,"closed_ms":1795378889856}"#;

    #[test]
    fn the_stored_session_leaves_out_the_decision_inputs_and_only_them() {
        let mut skipped = 0;
        let id = "pgw-2.bench.test;82540084;199";
        let s = decode_session(&mut skipped, id, BEFORE_RAW_INPUTS.as_bytes()).expect("decodes");
        let stored = encode_session(&s).expect("encodes");
        let back = decode_session(&mut skipped, id, &stored).expect("decodes again");
        assert_eq!(skipped, 0);
        let kept = back.last_decision.as_ref().expect("the decision is kept");
        assert_eq!(kept.inputs.get(), "null");
        // Everything else comes back as it was.
        let mut expected = s.clone();
        if let Some(d) = expected.last_decision.as_mut() {
            std::sync::Arc::make_mut(d).inputs = crate::policy::record::InputsJson::null();
        }
        assert_eq!(back, expected);
        // The API's form (plain serde_json, here and after the store wrote)
        // still has them.
        let shown: serde_json::Value = serde_json::to_value(&s).expect("serializes");
        assert_eq!(shown["last_decision"]["inputs"]["session"]["rat"], "EUTRAN");
        assert!(stored.len() + 500 < serde_json::to_vec(&s).expect("serializes").len());
    }

    #[test]
    fn reads_a_session_the_previous_build_wrote() {
        let mut skipped = 0;
        let id = "pgw-2.bench.test;82540084;199";
        let s = decode_session(&mut skipped, id, BEFORE_RAW_INPUTS.as_bytes()).expect("decodes");
        assert_eq!(skipped, 0);
        let d = s.last_decision.as_ref().expect("has a decision");
        let inputs: serde_json::Value =
            serde_json::from_str(d.inputs.get()).expect("inputs are JSON");
        assert_eq!(inputs["session"]["rat"], "EUTRAN");
        assert_eq!(
            inputs["usage"]["accumulators"]["monthly"]["quota_mb"],
            50000
        );
        let answer = s.last_answer.as_deref().expect("has an answer");
        // A Diameter message of the length its header says (0x98).
        assert_eq!(answer.len(), 0x98);
        assert_eq!(answer[..4], [1, 0, 0, 0x98]);
        // Written in the current format and read back: the same record.
        let again = serde_json::to_vec(&s).expect("encodes");
        let back = decode_session(&mut skipped, id, &again).expect("decodes again");
        assert_eq!(back, s);
        assert_eq!(skipped, 0);
    }
}
