//! Codec benchmarks on realistic Gx messages (a P-GW's CCR-I, the PCRF's
//! CCA-I with three Charging-Rule-Install), each measured side by side, in
//! the same run, with the crates.io `diameter` 0.7 crate as the outside
//! reference. Method and figures: `BENCHMARKS.md`.
//!
//! Run: `cargo bench -p pcrf-diameter --bench codec -- --warm-up-time 1 --measurement-time 3`

#[path = "messages/gx.rs"]
mod gx;

use bytes::{Bytes, BytesMut};
use criterion::Criterion;
use diameter::dict::{self, avp, AvpType};
use diameter::{AvpCode, AvpIter, Message};
use diameter_ref::avp::flags::M;
use diameter_ref::avp::{
    Avp as RefAvp, AvpType as RefAvpType, AvpValue, Enumerated, Grouped, Identity, OctetString,
    Time, UTF8String, Unsigned32,
};
use diameter_ref::dictionary::{AvpDefinition, Dictionary, DEFAULT_DICT_XML};
use diameter_ref::{flags, ApplicationId, CommandCode, DiameterMessage};
use std::hint::black_box;
use std::io::Cursor;
use std::sync::Arc;

/// What a Gx handler reads first from a CCR: the selective-decode set.
#[derive(Debug, PartialEq, Eq)]
struct Selected<'a> {
    session_id: &'a str,
    request_type: i32,
    request_number: u32,
    origin_host: &'a str,
    subscription_type: i32,
    subscription_data: &'a str,
}

/// Ours: one pass over the top-level AVPs that stops once all five are
/// found, then the first Subscription-Id's members. Nothing is copied.
fn select_ours(m: &Message) -> Option<Selected<'_>> {
    let [sid, rt, rn, oh, sub] = m
        .pick(&[
            avp::SESSION_ID,
            avp::CC_REQUEST_TYPE,
            avp::CC_REQUEST_NUMBER,
            avp::ORIGIN_HOST,
            avp::SUBSCRIPTION_ID,
        ])
        .ok()?;
    let mut subscription_type = None;
    let mut subscription_data = None;
    for a in sub?.grouped() {
        let a = a.ok()?;
        if a.is(avp::SUBSCRIPTION_ID_TYPE) {
            subscription_type = Some(a.as_enum().ok()?);
        } else if a.is(avp::SUBSCRIPTION_ID_DATA) {
            subscription_data = Some(a.as_str().ok()?);
        }
    }
    Some(Selected {
        session_id: sid?.as_str().ok()?,
        request_type: rt?.as_enum().ok()?,
        request_number: rn?.as_u32().ok()?,
        origin_host: oh?.as_identity().ok()?,
        subscription_type: subscription_type?,
        subscription_data: subscription_data?,
    })
}

/// Reference: the crate has no selective decode, so the closest is what its
/// users do: decode the whole message, then look the AVPs up.
fn select_ref(m: &DiameterMessage) -> Option<Selected<'_>> {
    let sub = m.get_avp(avp::SUBSCRIPTION_ID.code)?.get_grouped()?;
    let mut subscription_type = None;
    let mut subscription_data = None;
    for a in sub.avps() {
        if a.get_code() == avp::SUBSCRIPTION_ID_TYPE.code {
            subscription_type = Some(a.get_enumerated()?.value());
        } else if a.get_code() == avp::SUBSCRIPTION_ID_DATA.code {
            subscription_data = Some(a.get_utf8string()?.value());
        }
    }
    Some(Selected {
        session_id: m.get_avp(avp::SESSION_ID.code)?.get_utf8string()?.value(),
        request_type: m
            .get_avp(avp::CC_REQUEST_TYPE.code)?
            .get_enumerated()?
            .value(),
        request_number: m.get_avp(avp::CC_REQUEST_NUMBER.code)?.get_unsigned32()?,
        origin_host: m.get_avp(avp::ORIGIN_HOST.code)?.get_identity()?.value(),
        subscription_type: subscription_type?,
        subscription_data: subscription_data?,
    })
}

/// Ours, the plain walk: every AVP, descending into the Grouped ones (the
/// dictionary says which), touching each value's bytes. Returns a checksum
/// so nothing can be optimised away.
fn walk_ours(iter: AvpIter<'_>) -> Option<u64> {
    let mut sum = 0u64;
    for a in iter {
        let a = a.ok()?;
        let grouped = dict::avp(a.code(), a.vendor()).is_some_and(|d| d.ty == AvpType::Grouped);
        sum = sum.wrapping_add(u64::from(a.code()));
        if grouped {
            sum = sum.wrapping_add(walk_ours(a.grouped())?);
        } else {
            let d = a.data();
            sum = sum
                .wrapping_add(d.len() as u64)
                .wrapping_add(u64::from(d.first().copied().unwrap_or(0)));
        }
    }
    Some(sum)
}

fn decode_ref(bytes: &[u8], dict: &Arc<Dictionary>) -> DiameterMessage {
    DiameterMessage::decode_from(&mut Cursor::new(bytes), Arc::clone(dict))
        .expect("the reference decodes the message")
}

/// The reference's own dictionary (base + RFC 4006) plus, taken from ours,
/// every AVP the benchmark messages carry that it lacks: without them it
/// refuses the message (`UnknownAvpCode`). Returns the names added.
fn reference_dictionary(messages: &[&Bytes]) -> (Arc<Dictionary>, Vec<&'static str>) {
    fn add(d: &mut Dictionary, added: &mut Vec<&'static str>, iter: AvpIter<'_>) {
        for a in iter {
            let a = a.expect("well-formed");
            let def = dict::avp(a.code(), a.vendor()).expect("our dictionary knows it");
            let vendor = (a.vendor() != 0).then_some(a.vendor());
            if d.get_avp(a.code(), vendor).is_none() {
                d.add_avp(AvpDefinition {
                    code: def.code,
                    vendor_id: vendor,
                    name: def.name.to_owned(),
                    avp_type: ref_type(def.ty),
                    m_flag: def.m,
                });
                added.push(def.name);
            }
            if def.ty == AvpType::Grouped {
                add(d, added, a.grouped());
            }
        }
    }
    let mut d = Dictionary::new(&[&DEFAULT_DICT_XML]);
    let mut added = Vec::new();
    for bytes in messages {
        let m = Message::parse((*bytes).clone()).expect("well-formed");
        add(&mut d, &mut added, m.avps());
    }
    (Arc::new(d), added)
}

/// Our type names to the reference's. It has no IPFilterRule: UTF8String
/// does the same work (a UTF-8 check), as our validate() does for it.
fn ref_type(t: AvpType) -> RefAvpType {
    match t {
        AvpType::OctetString => RefAvpType::OctetString,
        AvpType::Integer32 => RefAvpType::Integer32,
        AvpType::Integer64 => RefAvpType::Integer64,
        AvpType::Unsigned32 => RefAvpType::Unsigned32,
        AvpType::Unsigned64 => RefAvpType::Unsigned64,
        AvpType::Float32 => RefAvpType::Float32,
        AvpType::Float64 => RefAvpType::Float64,
        AvpType::Grouped => RefAvpType::Grouped,
        AvpType::Address => RefAvpType::Address,
        AvpType::Time => RefAvpType::Time,
        AvpType::UTF8String | AvpType::IPFilterRule | AvpType::QoSFilterRule => {
            RefAvpType::UTF8String
        }
        AvpType::DiameterIdentity => RefAvpType::Identity,
        AvpType::DiameterURI => RefAvpType::DiameterURI,
        AvpType::Enumerated => RefAvpType::Enumerated,
    }
}

/// Builds reference AVPs with the same code, vendor and M flag as ours.
struct RefBuilder<'d>(&'d Arc<Dictionary>);

impl RefBuilder<'_> {
    fn avp(&self, c: AvpCode, v: impl Into<AvpValue>) -> RefAvp {
        let vendor = (c.vendor != 0).then_some(c.vendor);
        RefAvp::new(
            c.code,
            vendor,
            if c.mandatory { M } else { 0 },
            v.into(),
            Arc::clone(self.0),
        )
    }
    fn u32(&self, c: AvpCode, v: u32) -> RefAvp {
        self.avp(c, Unsigned32::new(v))
    }
    fn en(&self, c: AvpCode, v: i32) -> RefAvp {
        self.avp(c, Enumerated::new(v))
    }
    fn str(&self, c: AvpCode, v: &str) -> RefAvp {
        self.avp(c, UTF8String::new(v))
    }
    fn id(&self, c: AvpCode, v: &str) -> RefAvp {
        self.avp(c, Identity::new(v))
    }
    fn oct(&self, c: AvpCode, v: &[u8]) -> RefAvp {
        self.avp(c, OctetString::new(v.to_vec()))
    }
    fn group(&self, c: AvpCode, members: Vec<RefAvp>) -> RefAvp {
        self.avp(c, Grouped::new(members, Arc::clone(self.0)))
    }
    fn arp(&self, level: u32) -> RefAvp {
        self.group(
            avp::ALLOCATION_RETENTION_PRIORITY,
            vec![
                self.u32(avp::PRIORITY_LEVEL, level),
                self.en(avp::PRE_EMPTION_CAPABILITY, 1),
                self.en(avp::PRE_EMPTION_VULNERABILITY, 0),
            ],
        )
    }
}

/// The same CCA-I as `gx::encode_cca_initial`, built with the reference's
/// API (a tree of owned values, encoded afterwards).
fn reference_cca(dict: &Arc<Dictionary>) -> DiameterMessage {
    let r = RefBuilder(dict);
    let mut m = DiameterMessage::new(
        CommandCode::CreditControl,
        ApplicationId::Gx,
        flags::PROXYABLE,
        gx::HOP_BY_HOP,
        gx::END_TO_END,
        Arc::clone(dict),
    );
    let revalidation =
        Time::decode_from(&mut &gx::REVALIDATION_NTP.to_be_bytes()[..]).expect("a valid NTP time");
    let features = || {
        r.group(
            avp::SUPPORTED_FEATURES,
            vec![
                r.u32(avp::VENDOR_ID, 10415),
                r.u32(avp::FEATURE_LIST_ID, 1),
                r.u32(avp::FEATURE_LIST, 0x3ff),
            ],
        )
    };
    for a in [
        r.str(avp::SESSION_ID, gx::SESSION_ID),
        r.u32(avp::AUTH_APPLICATION_ID, dict::app::GX),
        r.id(avp::ORIGIN_HOST, gx::PCRF_HOST),
        r.id(avp::ORIGIN_REALM, gx::PGW_REALM),
        r.u32(avp::RESULT_CODE, 2001),
        r.en(avp::CC_REQUEST_TYPE, 1),
        r.u32(avp::CC_REQUEST_NUMBER, gx::CC_REQUEST_NUMBER),
        features(),
        r.en(avp::BEARER_CONTROL_MODE, 2),
        r.en(avp::EVENT_TRIGGER, 2),
        r.en(avp::EVENT_TRIGGER, 13),
        r.en(avp::EVENT_TRIGGER, 33),
        r.group(
            avp::CHARGING_RULE_INSTALL,
            vec![r.group(
                avp::CHARGING_RULE_DEFINITION,
                vec![
                    r.oct(avp::CHARGING_RULE_NAME, b"video-gold"),
                    r.u32(avp::RATING_GROUP, 100),
                    r.group(
                        avp::FLOW_INFORMATION,
                        vec![
                            r.str(
                                avp::FLOW_DESCRIPTION,
                                "permit out 17 from 198.51.100.0/24 to any",
                            ),
                            r.en(avp::FLOW_DIRECTION, 1),
                        ],
                    ),
                    r.group(
                        avp::FLOW_INFORMATION,
                        vec![
                            r.str(
                                avp::FLOW_DESCRIPTION,
                                "permit out 17 from any to 198.51.100.0/24",
                            ),
                            r.en(avp::FLOW_DIRECTION, 2),
                        ],
                    ),
                    r.en(avp::FLOW_STATUS, 2),
                    r.group(
                        avp::QOS_INFORMATION,
                        vec![
                            r.en(avp::QOS_CLASS_IDENTIFIER, 2),
                            r.u32(avp::MAX_REQUESTED_BANDWIDTH_UL, 2_000_000),
                            r.u32(avp::MAX_REQUESTED_BANDWIDTH_DL, 8_000_000),
                            r.u32(avp::GUARANTEED_BITRATE_UL, 1_000_000),
                            r.u32(avp::GUARANTEED_BITRATE_DL, 4_000_000),
                            r.arp(5),
                        ],
                    ),
                    r.u32(avp::PRECEDENCE, 100),
                    r.oct(avp::MONITORING_KEY, b"mk-video"),
                    r.en(avp::ONLINE, 0),
                    r.en(avp::OFFLINE, 1),
                    r.en(avp::METERING_METHOD, 1),
                ],
            )],
        ),
        r.group(
            avp::CHARGING_RULE_INSTALL,
            vec![r.oct(avp::CHARGING_RULE_NAME, b"default-internet")],
        ),
        r.group(
            avp::CHARGING_RULE_INSTALL,
            vec![r.str(avp::CHARGING_RULE_BASE_NAME, "zero-rated-apps")],
        ),
        r.group(
            avp::QOS_INFORMATION,
            vec![
                r.u32(avp::APN_AGGREGATE_MAX_BITRATE_UL, 50_000_000),
                r.u32(avp::APN_AGGREGATE_MAX_BITRATE_DL, 150_000_000),
            ],
        ),
        r.group(
            avp::DEFAULT_EPS_BEARER_QOS,
            vec![r.en(avp::QOS_CLASS_IDENTIFIER, 9), r.arp(8)],
        ),
        r.avp(avp::REVALIDATION_TIME, revalidation),
    ] {
        m.add(a);
    }
    m
}

/// Checks, before timing anything, that both sides decode the same values
/// and encode the same bytes: the comparison is of equal work.
fn check_equivalence(ccr: &Bytes, cca: &Bytes, dict: &Arc<Dictionary>) {
    let expected = Selected {
        session_id: gx::SESSION_ID,
        request_type: 1,
        request_number: gx::CC_REQUEST_NUMBER,
        origin_host: gx::PGW_HOST,
        subscription_type: 1,
        subscription_data: gx::IMSI,
    };
    let ours = Message::parse(ccr.clone()).expect("parse");
    assert_eq!(select_ours(&ours), Some(expected));
    let theirs = decode_ref(ccr, dict);
    assert_eq!(select_ref(&theirs), select_ours(&ours));
    assert_eq!(
        ours.validate(),
        Ok(54),
        "CCR-I AVP count (top level and nested)"
    );
    assert!(walk_ours(ours.avps()).is_some());
    // The reference re-encodes what it decoded to the same bytes.
    let mut out = Vec::new();
    theirs.encode_to(&mut out).expect("encode");
    assert_eq!(&out[..], &ccr[..], "reference round trip of the CCR-I");
    // Both builders produce the same CCA-I, byte for byte.
    let mut out = Vec::new();
    reference_cca(dict).encode_to(&mut out).expect("encode");
    assert_eq!(&out[..], &cca[..], "reference CCA-I differs from ours");
    let cca_ours = Message::parse(cca.clone()).expect("parse");
    assert_eq!(cca_ours.validate(), Ok(55), "CCA-I AVP count");
}

/// The messages, the reference's dictionary and the parsed request the
/// CCA-I answers: everything the cases read, built once.
struct Fixture {
    ccr: Bytes,
    cca: Bytes,
    dict: Arc<Dictionary>,
    req: Message,
}

impl Fixture {
    fn new() -> Fixture {
        let ccr = gx::ccr_initial();
        let cca = gx::cca_initial();
        let (dict, added) = reference_dictionary(&[&ccr, &cca]);
        eprintln!(
            "CCR-I {} bytes, CCA-I {} bytes; added to the reference dictionary ({}): {}",
            ccr.len(),
            cca.len(),
            added.len(),
            added.join(", ")
        );
        check_equivalence(&ccr, &cca, &dict);
        let req = Message::parse(ccr.clone()).expect("parse");
        Fixture {
            ccr,
            cca,
            dict,
            req,
        }
    }
}

/// Reusable output buffers for the encode cases.
struct Buffers {
    ours: BytesMut,
    theirs: Vec<u8>,
    prebuilt: Option<DiameterMessage>,
}

/// Every case: (criterion group, name, one operation). Each returns a value
/// derived from its work so the optimiser cannot drop it.
type Case = (
    &'static str,
    &'static str,
    fn(&Fixture, &mut Buffers) -> u64,
);

const CASES: &[Case] = &[
    ("ccr_i_full_decode", "ours_parse_validate", |f, _| {
        let m = Message::parse(black_box(&f.ccr).clone()).expect("parse");
        m.validate().expect("valid") as u64
    }),
    ("ccr_i_full_decode", "ours_parse_walk", |f, _| {
        let m = Message::parse(black_box(&f.ccr).clone()).expect("parse");
        walk_ours(m.avps()).expect("valid")
    }),
    ("ccr_i_full_decode", "reference_decode", |f, _| {
        let m = decode_ref(black_box(&f.ccr), &f.dict);
        m.get_avps().len() as u64
    }),
    ("ccr_i_selective_decode", "ours_parse_pick", |f, _| {
        let m = Message::parse(black_box(&f.ccr).clone()).expect("parse");
        let s = select_ours(&m).expect("selected");
        black_box(&s);
        s.request_number.into()
    }),
    (
        "ccr_i_selective_decode",
        "reference_decode_lookup",
        |f, _| {
            let m = decode_ref(black_box(&f.ccr), &f.dict);
            let s = select_ref(&m).expect("selected");
            black_box(&s);
            s.request_number.into()
        },
    ),
    ("cca_i_full_decode", "ours_parse_validate", |f, _| {
        let m = Message::parse(black_box(&f.cca).clone()).expect("parse");
        m.validate().expect("valid") as u64
    }),
    ("cca_i_full_decode", "reference_decode", |f, _| {
        let m = decode_ref(black_box(&f.cca), &f.dict);
        m.get_avps().len() as u64
    }),
    ("cca_i_encode", "ours_build", |f, b| {
        b.ours.clear();
        gx::encode_cca_initial(&mut b.ours, black_box(&f.req)) as u64
    }),
    ("cca_i_encode", "reference_build_encode", |f, b| {
        b.theirs.clear();
        let m = reference_cca(black_box(&f.dict));
        m.encode_to(&mut b.theirs).expect("encode");
        b.theirs.len() as u64
    }),
    ("cca_i_encode", "reference_encode_prebuilt", |f, b| {
        b.theirs.clear();
        let m = b.prebuilt.get_or_insert_with(|| reference_cca(&f.dict));
        black_box(&*m).encode_to(&mut b.theirs).expect("encode");
        b.theirs.len() as u64
    }),
];

fn buffers() -> Buffers {
    Buffers {
        ours: BytesMut::with_capacity(4096),
        theirs: Vec::with_capacity(4096),
        prebuilt: None,
    }
}

fn codec(c: &mut Criterion, f: &Fixture) {
    let mut groups = CASES.iter().map(|c| c.0).collect::<Vec<_>>();
    groups.dedup();
    for group in groups {
        let mut g = c.benchmark_group(group);
        for (_, name, op) in CASES.iter().filter(|c| c.0 == group) {
            let mut b = buffers();
            g.bench_function(*name, |bench| bench.iter(|| black_box(op(f, &mut b))));
        }
        g.finish();
    }
}

/// `CODEC_BENCH_CASE=<group>/<name> CODEC_BENCH_ITERATIONS=<n>` runs one case
/// n times without criterion, for `valgrind --tool=callgrind`: the
/// instruction count, minus that of `CODEC_BENCH_CASE=none` (the setup), is
/// deterministic where times on a shared machine are not.
fn run_for_instruction_count(case: &str, f: &Fixture) {
    let n: u64 = std::env::var("CODEC_BENCH_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    if case == "none" {
        return;
    }
    let (_, _, op) = CASES
        .iter()
        .find(|c| format!("{}/{}", c.0, c.1) == case)
        .unwrap_or_else(|| panic!("no case {case}"));
    let mut b = buffers();
    // The prebuilt reference message is part of the setup, not the work.
    b.prebuilt = Some(reference_cca(&f.dict));
    let mut sum = 0u64;
    for _ in 0..n {
        sum = sum.wrapping_add(op(f, &mut b));
    }
    eprintln!("{case}: {n} iterations, checksum {sum}");
}

fn main() {
    let f = Fixture::new();
    if let Ok(case) = std::env::var("CODEC_BENCH_CASE") {
        run_for_instruction_count(&case, &f);
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    codec(&mut c, &f);
    c.final_summary();
}
