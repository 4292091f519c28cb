//! Counts what each candidate record format costs on a real session and
//! usage row: bytes, and (run under callgrind) instructions per encode and
//! decode. `record_format OP N` runs OP N times; without arguments it
//! prints the sizes.

use pcrf::session::GxSession;
use pcrf::usage::{Accumulator, LastReport, ServiceUnits, SubscriberUsage};
use std::hint::black_box;

const SESSION: &str = r#"{"id":"pgw-2.bench.test;82540084;199","state":"closed","subscriber":"001010000000200","imsi":"001010000000200","msisdn":"79000000200","pcef_host":"pgw-2.bench.test","pcef_realm":"bench.test","apn":"internet","ue_ipv4":"10.0.0.200","ue_ipv6_prefix":null,"rat_type":1004,"ip_can_type":5,"location":"8200f11000c800f1100d1f9897","ms_timezone":"2100","device":"3534900600019901","supported_features":[[1,11]],"installed":{"rules":["internet"],"base_names":["consumer"],"definitions":[],"apn_ambr":{"ul":20000000,"dl":75000000},"default_bearer_qos":{"qci":9,"arp":{"priority":9,"may_preempt":false,"preemptable":true}},"event_triggers":[2,13,17,18,19,33],"revalidation_secs":16740,"monitoring":["total"],"spending_counters":["monthly-data"]},"rule_failures":[],"monitoring":{"keys":{"total":{"granted":{"total":100000000},"level":"session","granted_ms":1795378888572,"reported_octets":4410615}}},"last_request_number":1,"revalidation_at_ms":1795395628572,"last_decision":{"input_hash":"9845eed09d4aa82f","script_version":"483467ac3a870d66","decision":{"rules":["internet"],"base_names":["consumer"],"definitions":[],"apn_ambr":{"ul":20000000,"dl":75000000},"default_bearer_qos":{"qci":9,"arp":{"priority":9,"may_preempt":false,"preemptable":true}},"event_triggers":[2,13,17,18,19],"revalidation_secs":16740,"monitoring":["total"],"spending_counters":["monthly-data"]},"inputs":{"applications":[],"network":{"congestion":0},"session":{"apn":"internet","device":"3534900600019901","installed":[],"ip_can_type":"3GPP-EPS","location":"8200f11000c800f1100d1f9897","ms_timezone":"2100","pcef":"pgw-2.bench.test","rat":"EUTRAN","rule_failures":[],"ue_ipv4":"10.0.0.200","ue_ipv6_prefix":null},"subscriber":{"attributes":{},"imsi":"001010000000200","known":true,"msisdn":"79000000200","plan":"plus","services":["internet"]},"time":{"date":"2026-11-22","hour":20,"minute":21,"weekday":7},"usage":{"accumulators":{"daily":{"exhausted":false,"used_mb":0},"monthly":{"exhausted":false,"percent":0,"quota_mb":50000,"used_mb":0},"night":{"exhausted":false,"used_mb":0},"vip-video":{"exhausted":false,"used_mb":0}}}},"at_ms":1795378888572},"last_answer":"010000984000011001000016bf58983beb5f59de00000107400000257067772d322e62656e63682e746573743b38323534303038343b313939000000000001024000000c010000160000010840000016706372662e706372662e7465737400000000012840000011706372662e746573740000000000010c4000000c000007d1000001a04000000c000000030000019f4000000c00000001","created_ms":1795378888572,"updated_ms":1795378889856,"closed_ms":1795378889856}"#;

fn session() -> GxSession {
    let mut s: GxSession = serde_json::from_str(SESSION).expect("sample");
    if let Some(d) = s.last_decision.as_mut() {
        std::sync::Arc::make_mut(d).inputs = pcrf::session::record::DecisionInputs::none();
    }
    s.state = pcrf::session::SessionState::Open;
    s.closed_ms = None;
    s
}

fn usage() -> SubscriberUsage {
    let acc = |used: u64, end: Option<i64>| Accumulator {
        used,
        topup: 0,
        period_start_ms: 1_795_305_600_000,
        period_end_ms: end,
    };
    SubscriberUsage {
        subscriber: "001010000000200".into(),
        accumulators: [
            ("daily".into(), acc(4_410_615, Some(1_795_392_000_000))),
            ("monthly".into(), acc(4_410_615, Some(1_797_897_600_000))),
            ("night".into(), acc(0, Some(1_795_392_000_000))),
            ("vip-video".into(), acc(0, None)),
        ]
        .into_iter()
        .collect(),
        last_reports: [(
            "total".into(),
            LastReport {
                at_ms: 1_795_378_889_856,
                session: "pgw-2.bench.test;82540084;199".into(),
                used: ServiceUnits {
                    total: Some(4_410_615),
                    input: Some(441_061),
                    output: Some(3_969_554),
                    ..Default::default()
                },
            },
        )]
        .into_iter()
        .collect(),
        unknown_key_reports: 0,
        notified: Default::default(),
        version: Default::default(),
    }
}

fn msgpack<T: serde::Serialize>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(1536);
    v.serialize(&mut rmp_serde::Serializer::new(&mut out).with_struct_map())
        .expect("msgpack");
    out
}

fn cbor<T: serde::Serialize>(v: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(1536);
    ciborium::into_writer(v, &mut out).expect("cbor");
    out
}

fn main() {
    let s = session();
    let u = usage();
    let sj = serde_json::to_vec(&s).expect("json");
    let uj = serde_json::to_vec(&u).expect("json");
    let sm = msgpack(&s);
    let um = msgpack(&u);
    let sc = cbor(&s);
    let uc = cbor(&u);
    let sp = postcard::to_allocvec(&s).expect("postcard");
    let up = postcard::to_allocvec(&u).expect("postcard");
    let args: Vec<String> = std::env::args().collect();
    let (op, n) = match (args.get(1), args.get(2)) {
        (Some(op), Some(n)) => (op.as_str(), n.parse::<u64>().expect("N")),
        _ => {
            println!(
                "session: json {} msgpack {} cbor {} postcard {}",
                sj.len(),
                sm.len(),
                sc.len(),
                sp.len()
            );
            println!(
                "usage:   json {} msgpack {} cbor {} postcard {}",
                uj.len(),
                um.len(),
                uc.len(),
                up.len()
            );
            let back: GxSession = rmp_serde::from_slice(&sm).expect("msgpack decodes");
            assert_eq!(back, s);
            let back: SubscriberUsage = rmp_serde::from_slice(&um).expect("msgpack decodes");
            assert_eq!(back, u);
            let back: GxSession = ciborium::from_reader(&sc[..]).expect("cbor decodes");
            assert_eq!(back, s);
            println!(
                "postcard decodes the session: {}",
                postcard::from_bytes::<GxSession>(&sp).is_ok()
            );
            return;
        }
    };
    for _ in 0..n {
        match op {
            "none" => {}
            "session-json-encode" => drop(black_box(serde_json::to_vec(black_box(&s)).expect("x"))),
            "session-json-decode" => drop(black_box(
                serde_json::from_slice::<GxSession>(black_box(&sj)).expect("x"),
            )),
            "session-msgpack-encode" => drop(black_box(msgpack(black_box(&s)))),
            "session-msgpack-decode" => drop(black_box(
                rmp_serde::from_slice::<GxSession>(black_box(&sm)).expect("x"),
            )),
            "session-cbor-encode" => drop(black_box(cbor(black_box(&s)))),
            "session-cbor-decode" => drop(black_box(
                ciborium::from_reader::<GxSession, _>(black_box(&sc[..])).expect("x"),
            )),
            "session-postcard-encode" => {
                drop(black_box(postcard::to_allocvec(black_box(&s)).expect("x")))
            }
            "usage-json-encode" => drop(black_box(serde_json::to_vec(black_box(&u)).expect("x"))),
            "usage-json-decode" => drop(black_box(
                serde_json::from_slice::<SubscriberUsage>(black_box(&uj)).expect("x"),
            )),
            "usage-msgpack-encode" => drop(black_box(msgpack(black_box(&u)))),
            "usage-msgpack-decode" => drop(black_box(
                rmp_serde::from_slice::<SubscriberUsage>(black_box(&um)).expect("x"),
            )),
            "usage-cbor-encode" => drop(black_box(cbor(black_box(&u)))),
            "usage-cbor-decode" => drop(black_box(
                ciborium::from_reader::<SubscriberUsage, _>(black_box(&uc[..])).expect("x"),
            )),
            "usage-postcard-encode" => {
                drop(black_box(postcard::to_allocvec(black_box(&u)).expect("x")))
            }
            "usage-postcard-decode" => drop(black_box(
                postcard::from_bytes::<SubscriberUsage>(black_box(&up)).expect("x"),
            )),
            other => panic!("unknown op {other}"),
        }
    }
}
