//! The stored form of a record: every store keeps a session, a subscriber
//! or a subscriber's usage as one blob, a tag byte and the record in
//! MessagePack with named fields (see docs/durability.md for why this
//! format). Records written as JSON by older builds are still read, and the
//! stores' schema migrations rewrite them (`rewritten`). Decoding is shared
//! so that both stores treat a corrupt record the same way: logged with its
//! key, counted, skipped; one bad row costs one record, not the node.
//! Encoding is shared so both write the same bytes.

use super::StoreError;
use crate::policy::record::InputsLeftOut;
use crate::session::GxSession;
use crate::subscriber::Subscriber;
use crate::usage::SubscriberUsage;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// First byte of a binary record: MessagePack, struct fields by name,
/// version 1. A JSON record (older builds) starts with `{`; any other
/// first byte is a corrupt record. A later format takes another tag.
pub const MSGPACK_V1: u8 = 0x01;

/// Room for a typical blob (a session is about 1 KB, usage a few hundred
/// bytes): growing an empty buffer to that size reallocated and copied it
/// several times per write.
const SESSION_BYTES: usize = 1536;
const SMALL_BYTES: usize = 512;

fn encode<T: Serialize>(
    value: &T,
    room: usize,
    what: impl FnOnce() -> String,
) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::with_capacity(room);
    out.push(MSGPACK_V1);
    value
        .serialize(&mut rmp_serde::Serializer::new(&mut out).with_struct_map())
        .map_err(|e| StoreError::Corrupt(format!("encoding {}: {e}", what())))?;
    Ok(out)
}

/// Why a blob could not be read.
#[derive(Debug)]
enum DecodeError {
    Binary(rmp_serde::decode::Error),
    Json(serde_json::Error),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Binary(e) => write!(f, "binary record: {e}"),
            DecodeError::Json(e) => write!(f, "JSON record: {e}"),
        }
    }
}

/// Reads a blob of either form: tagged binary, or JSON.
fn decode<T: DeserializeOwned>(data: &[u8]) -> Result<T, DecodeError> {
    match data.split_first() {
        Some((&MSGPACK_V1, record)) => rmp_serde::from_slice(record).map_err(DecodeError::Binary),
        _ => serde_json::from_slice(data).map_err(DecodeError::Json),
    }
}

/// The blob of a session, as both stores write it: everything but the
/// last decision's inputs, which only the API shows (see `DecisionInputs`).
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
    match decode::<GxSession>(data) {
        Ok(mut s) if *s.id == *id => {
            s.share_identity();
            Some(s)
        }
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
    match decode::<Subscriber>(data) {
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
    match decode::<SubscriberUsage>(data) {
        Ok(u) if *u.subscriber == *subscriber => Some(u),
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

/// A table of records, as the schema migration that rewrites JSON records
/// in the binary form walks them (the same in both stores).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecordTable {
    Sessions,
    Subscribers,
    Usage,
}

impl RecordTable {
    pub(crate) const ALL: [RecordTable; 3] = [
        RecordTable::Sessions,
        RecordTable::Subscribers,
        RecordTable::Usage,
    ];

    /// The table's name.
    pub(crate) fn table(self) -> &'static str {
        match self {
            RecordTable::Sessions => "sessions",
            RecordTable::Subscribers => "subscribers",
            RecordTable::Usage => "usage",
        }
    }

    /// Its key column (the primary key).
    pub(crate) fn key(self) -> &'static str {
        match self {
            RecordTable::Sessions => "id",
            RecordTable::Subscribers => "imsi",
            RecordTable::Usage => "subscriber",
        }
    }

    /// The binary form of a JSON record of this table; `None` when the
    /// record is binary already, or is not a record at all (logged and
    /// left as it is: reading skips and counts it, as before).
    pub(crate) fn rewritten(self, key: &str, data: &[u8]) -> Option<Vec<u8>> {
        if data.first() == Some(&MSGPACK_V1) {
            return None;
        }
        let out = match self {
            RecordTable::Sessions => decode::<GxSession>(data).map(|s| encode_session(&s)),
            RecordTable::Subscribers => decode::<Subscriber>(data).map(|s| encode_subscriber(&s)),
            RecordTable::Usage => decode::<SubscriberUsage>(data).map(|u| encode_usage(&u)),
        };
        match out {
            Ok(Ok(binary)) => Some(binary),
            Ok(Err(e)) => {
                tracing::error!(table = self.table(), key, error = %e,
                    "stored record cannot be written in the binary form; left as it is");
                None
            }
            Err(e) => {
                tracing::error!(table = self.table(), key, error = %e,
                    "stored record cannot be decoded; left as it is");
                None
            }
        }
    }
}

#[cfg(test)]
pub(in crate::store) mod tests {
    use super::*;
    use crate::session::SessionState;

    /// A session as builds that stored the decision inputs wrote it (inputs
    /// as a JSON object with sorted keys), taken from a seed-scenario
    /// database.
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
        assert!(kept.inputs.is_none());
        // Everything else comes back as it was.
        let mut expected = s.clone();
        if let Some(d) = expected.last_decision.as_mut() {
            std::sync::Arc::make_mut(d).inputs = crate::policy::record::DecisionInputs::none();
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
        let inputs = d.inputs.to_json();
        assert_eq!(inputs["session"]["rat"], "EUTRAN");
        assert_eq!(
            inputs["usage"]["accumulators"]["monthly"]["quota_mb"],
            50000
        );
        let answer = s.last_answer.as_deref().expect("has an answer");
        // A Diameter message of the length its header says (0x98).
        assert_eq!(answer.len(), 0x98);
        assert_eq!(answer[..4], [1, 0, 0, 0x98]);
        // JSON as this build still writes it for the API reads back too.
        let again = serde_json::to_vec(&s).expect("encodes");
        let back = decode_session(&mut skipped, id, &again).expect("decodes again");
        assert_eq!(back, s);
        assert_eq!(skipped, 0);
    }

    /// The sample with every optional part of a session filled in.
    fn full_session() -> GxSession {
        use crate::policy::decision::{AdcRule, RuleDefinition};
        use crate::session::af::AfSession;
        use crate::session::spending::{CounterStatus, SySession};
        use crate::session::tdf::{TdfMode, TdfSession};
        let mut skipped = 0;
        let id = "pgw-2.bench.test;82540084;199";
        let mut s =
            decode_session(&mut skipped, id, BEFORE_RAW_INPUTS.as_bytes()).expect("decodes");
        let mut tdf = TdfSession::new("sd;1".into(), TdfMode::Solicited, "tdf".into(), "r".into());
        tdf.installed = vec![AdcRule {
            name: Some("video".into()),
            base: None,
            application: Some("youtube".into()),
            monitoring_key: Some("video".into()),
        }];
        tdf.running = ["video".to_string()].into_iter().collect();
        tdf.last_answer = Some(vec![1, 0, 0, 20, 0xff]);
        s.tdf = Some(Box::new(tdf));
        let mut sy = SySession::new("sy;1".into(), 5);
        sy.ocs_host = Some("ocs".into());
        sy.counters.insert(
            "monthly-data".into(),
            CounterStatus {
                status: "valid".into(),
                pending: Vec::new(),
            },
        );
        sy.refused.insert("gone".into());
        s.sy = Some(Box::new(sy));
        s.af = vec![AfSession {
            id: "rx;1".into(),
            af_host: "pcscf".into(),
            af_realm: "ims".into(),
            application: Some("ims".into()),
            charging_id: None,
            service_urn: Some("urn:service:sos".into()),
            specific_actions: vec![1, 2],
            media: Vec::new(),
            rules: vec![RuleDefinition {
                name: "af-voice".into(),
                flows: vec!["permit out 17 from any to assigned".into()],
                precedence: Some(100),
                ..Default::default()
            }],
            notification_uri: Some("http://127.0.0.9:8000/af/1".into()),
            created_ms: 7,
            updated_ms: 8,
        }];
        s.notified.insert("quota-80".into());
        // An N7 session's context, with its nested location (JSON kept as is).
        s.n7 = Some(Box::new(
            crate::n7::decode::decode_create(
                include_bytes!("../../tests/n7/open5gs-create.json"),
                &crate::sbi::body::DecodeLimits::default(),
            )
            .expect("decodes"),
        ));
        s.ue_ipv6_prefix = Some("0040200100db8".into());
        s.revalidation_at_ms = Some(i64::MAX);
        s.state = SessionState::Open;
        s.closed_ms = None;
        if let Some(d) = s.last_decision.as_mut() {
            let d = std::sync::Arc::make_mut(d);
            d.input_hash = u64::MAX;
            d.inputs = crate::policy::record::DecisionInputs::none();
            // Untagged enums need a self-describing format.
            use crate::policy::validity::{AnyWord, MbRange, UsageRange, UsageValidity, Validity};
            d.decision.valid = Some(Validity {
                secs: Some(60),
                usage: Some(UsageValidity::Each(
                    [
                        (
                            "monthly".to_string(),
                            UsageRange::Mb(MbRange {
                                at_least: Some(1),
                                below: Some(8000),
                            }),
                        ),
                        ("*".to_string(), UsageRange::Any(AnyWord::Any)),
                    ]
                    .into_iter()
                    .collect(),
                )),
                installed: Some(AnyWord::Any),
            });
        }
        s
    }

    #[test]
    fn a_full_session_round_trips_through_the_binary_form() {
        let s = full_session();
        let stored = encode_session(&s).expect("encodes");
        assert_eq!(stored[0], MSGPACK_V1);
        let mut skipped = 0;
        let back = decode_session(&mut skipped, &s.id, &stored).expect("decodes");
        assert_eq!(skipped, 0);
        assert_eq!(back, s);
        assert_eq!(back.last_answer.as_deref(), s.last_answer.as_deref());
        // Smaller than the JSON the previous build stored for it.
        let json = {
            let _left_out = InputsLeftOut::new();
            serde_json::to_vec(&s).expect("json")
        };
        assert!(
            stored.len() * 10 < json.len() * 8,
            "{} against {}",
            stored.len(),
            json.len()
        );
    }

    #[test]
    fn usage_and_subscribers_round_trip_and_old_json_still_reads() {
        let mut u = crate::store::fixtures::usage("001010000000200", 4_410_615);
        u.notified
            .insert("quota-80:monthly".into(), 1_795_378_888_572);
        u.unknown_key_reports = 3;
        let mut skipped = 0;
        let stored = encode_usage(&u).expect("encodes");
        assert_eq!(stored[0], MSGPACK_V1);
        assert_eq!(
            decode_usage(&mut skipped, &u.subscriber, &stored),
            Some(u.clone())
        );
        let json = serde_json::to_vec(&u).expect("json");
        assert_eq!(
            decode_usage(&mut skipped, &u.subscriber, &json),
            Some(u.clone())
        );
        let mut p = crate::store::fixtures::subscriber("001010000000200");
        p.attributes.insert(
            "speed".into(),
            serde_json::json!({"ul": 1.5, "dl": [1, -2, null]}),
        );
        p.billing_day = Some(3);
        p.quotas.insert("monthly".into(), u64::MAX);
        let stored = encode_subscriber(&p).expect("encodes");
        assert_eq!(
            decode_subscriber(&mut skipped, &p.imsi, &stored),
            Some(p.clone())
        );
        let json = serde_json::to_vec(&p).expect("json");
        assert_eq!(
            decode_subscriber(&mut skipped, &p.imsi, &json),
            Some(p.clone())
        );
        assert_eq!(skipped, 0);
        // A record under another key, and a damaged one, are skipped and counted.
        assert_eq!(
            decode_usage(&mut skipped, "other", &encode_usage(&u).expect("encodes")),
            None
        );
        let mut cut = encode_usage(&u).expect("encodes");
        cut.truncate(cut.len() / 2);
        assert_eq!(decode_usage(&mut skipped, &u.subscriber, &cut), None);
        assert_eq!(
            decode_subscriber(&mut skipped, &p.imsi, &[MSGPACK_V1, 0xc1]),
            None
        );
        assert_eq!(
            decode_subscriber(&mut skipped, &p.imsi, &[0x02, b'{', b'}']),
            None
        );
        assert_eq!(skipped, 4);
    }

    #[test]
    fn the_migration_rewrites_json_records_and_leaves_the_rest() {
        let id = "pgw-2.bench.test;82540084;199";
        let binary = RecordTable::Sessions
            .rewritten(id, BEFORE_RAW_INPUTS.as_bytes())
            .expect("rewritten");
        assert_eq!(binary[0], MSGPACK_V1);
        let mut skipped = 0;
        let s = decode_session(&mut skipped, id, &binary).expect("decodes");
        let mut expected =
            decode_session(&mut skipped, id, BEFORE_RAW_INPUTS.as_bytes()).expect("decodes");
        if let Some(d) = expected.last_decision.as_mut() {
            std::sync::Arc::make_mut(d).inputs = crate::policy::record::DecisionInputs::none();
        }
        assert_eq!(s, expected);
        assert!(binary.len() < BEFORE_RAW_INPUTS.len());
        // Binary already, or not a record: left alone.
        assert_eq!(RecordTable::Sessions.rewritten(id, &binary), None);
        assert_eq!(RecordTable::Usage.rewritten("x", b"not json"), None);
        let u = crate::store::fixtures::usage("x", 1);
        let json = serde_json::to_vec(&u).expect("json");
        let rewritten = RecordTable::Usage.rewritten("x", &json).expect("rewritten");
        assert_eq!(decode_usage(&mut skipped, "x", &rewritten), Some(u));
        assert_eq!(skipped, 0);
    }
}
