//! The PCRF's fuzzed entry points as plain functions over bytes, shared by
//! the cargo-fuzz targets (`fuzz/fuzz_targets/*.rs`) and the corpus replay
//! test (`tests/suite/fuzz_corpus.rs`), so that every input the fuzzer ever kept
//! is re-checked on the stable toolchain by `cargo test`.
//!
//! Each function panics (a fuzzer finding) only when an invariant the
//! server relies on breaks; bad input itself must come back as an error.
//!
//! - [`gx_handler`]: bytes as one or more Diameter messages through
//!   `Gx::handle_gx` on a real in-process node (embedded SQLite store,
//!   `policies/default.lua`, the shipped usage file). Every answer must
//!   parse and carry a Result-Code; every error must make an RFC 6733 error
//!   answer with a well-formed Failed-AVP where the Result-Code requires one.
//! - [`rx_handler`]: as `gx_handler` on the same node, Rx requests (AAR,
//!   STR) going to `Rx::handle_rx` and Gx ones to `Gx::handle_gx`, so
//!   an input can open a Gx session and then bind AF sessions to it.
//! - [`sy_handler`]: bytes as Diameter messages through `Sy::handle_sy`
//!   (an OCS's SNRs) on the same node: the same checks on answers and
//!   error answers, and an answer is always an SNA.
//! - [`n7_decoder`]: bytes as an SMF's request body through the N7
//!   decoders (Create, Update, Delete). A body accepted has its mandatory
//!   fields and maps to the policy's input; a body refused gets a 400
//!   ProblemDetails with a 3GPP cause whose JSON reads back.
//! - [`n5_decoder`]: bytes as an AF's request body through the N5
//!   decoders (Create, PATCH). A body accepted has its mandatory fields
//!   and every media component maps to the Rx media model; a body refused
//!   gets a 400 ProblemDetails as N7's does.
//! - [`config`], [`usage_file`], [`policy_cases`]: text through the loaders
//!   operators feed files to; Ok or Err, never a panic.
//! - [`policy_script`]: text as a policy script in the sandbox, loaded and
//!   run as the server validates a script, within the instruction and
//!   memory limits and a wall-clock bound.

use crate::config::{Config, UnknownSubscriber};
use crate::control::Control;
use crate::metrics::Metrics;
use crate::node::NodeParts;
use crate::policy::sandbox::Vm;
use crate::policy::{engine, EngineConfig, Limits, PolicyEngine};
use crate::services::Services;
use crate::store::{Durability, ShardedWriter, SqliteStore, Store};
use crate::subscriber::Subscriber;
use crate::usage::config::UsageConfig;
use bytes::{Bytes, BytesMut};
use diameter::codec::{frame_len, AvpIter, DiameterError, Message, MessageBuilder, FLAG_E};
use diameter::dict::{avp, cmd};
use diameter::result_code;
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The shipped example policy and usage file, compiled in so the fuzz
/// binaries run from any directory.
const DEFAULT_POLICY: &str = include_str!("../../../policies/default.lua");
const USAGE_FILE: &str = include_str!("../../../config/usage.toml");

/// The largest message framed; bigger than any input the fuzzer makes.
const MAX_LEN: u32 = 1 << 20;

/// Messages handled per input: enough for CCR-I, CCR-U and CCR-T of one
/// session plus a retransmission, few enough to keep inputs fast.
const MAX_MESSAGES: usize = 8;

/// Inputs after which the node is rebuilt on a fresh store, so that the
/// sessions the fuzzer opens do not grow memory and disk without bound.
const INPUTS_PER_NODE: u64 = 20_000;

/// Subscribers provisioned on every node: the seeds' IMSI with a monthly
/// quota (usage counting, throttling), a VIP one (rule-level key) and a
/// blocked one (reject). Others are unknown and run the default policy.
pub const IMSI_BASIC: &str = "001010000000001";
pub const IMSI_VIP: &str = "001010000000002";
pub const IMSI_BLOCKED: &str = "001010000000003";

/// Wall-clock bound for one script or case file: the instruction budget
/// stops Lua loops within milliseconds, so anything near this is a hang
/// the budget missed (e.g. a C function that loops without a hook).
const SCRIPT_WALL_LIMIT: Duration = Duration::from_secs(10);

struct GxHarness {
    rt: tokio::runtime::Runtime,
    root: PathBuf,
    state: Mutex<GxState>,
}

struct GxState {
    node: Services,
    dir: PathBuf,
    inputs: u64,
}

static GX: OnceLock<GxHarness> = OnceLock::new();
static SCRATCH: AtomicU64 = AtomicU64::new(0);

/// A directory of its own under the system temp dir, for this process.
fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "pcrf-fuzz-{tag}-{}-{}",
        std::process::id(),
        SCRATCH.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).expect("fuzz scratch dir");
    d
}

fn gx_harness() -> &'static GxHarness {
    GX.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let root = scratch("gx");
        std::fs::write(root.join("default.lua"), DEFAULT_POLICY).expect("write policy");
        std::fs::write(root.join("usage.toml"), USAGE_FILE).expect("write usage file");
        let dir = root.join("node-0");
        let node = rt.block_on(build_node(&root, &dir));
        GxHarness {
            rt,
            root,
            state: Mutex::new(GxState {
                node,
                dir,
                inputs: 0,
            }),
        }
    })
}

async fn build_node(root: &Path, dir: &Path) -> Services {
    let mut cfg = Config::zero_config();
    // Unknown subscribers run the policy too: more of the handler is reached.
    cfg.policy.unknown_subscriber = UnknownSubscriber::DefaultPolicy;
    let policy = PolicyEngine::load(EngineConfig {
        path: root.join("default.lua"),
        limits: Limits::default(),
        fallback: cfg.policy.fallback.clone(),
    })
    .expect("default policy loads");
    // Relaxed: the fuzzer needs no fsync per commit; the SQL is the same.
    let mut store = SqliteStore::open(dir, Durability::Relaxed).expect("sqlite store");
    let subscribers = store.subscribers().expect("subscribers");
    let sessions = store.open_sessions().expect("sessions");
    let usage = store.usage_records().expect("usage");
    let (usage_versions, usage_cfg) = crate::usage::versions::UsageVersions::start_from_file(
        Arc::new(crate::store::SqliteVersions::in_memory().expect("versions")),
        root.join("usage.toml"),
    )
    .expect("usage file");
    let node = Services::new(NodeParts {
        cfg: Arc::new(cfg),
        policy: crate::policy::PolicyVersions::start(
            Arc::new(policy),
            Arc::new(crate::store::SqliteVersions::in_memory().expect("versions")),
        )
        .expect("policy versions"),
        store: ShardedWriter::single(Box::new(store)).expect("group commit"),
        subscribers,
        sessions,
        usage,
        usage_cfg,
        usage_versions,
        peers: diameter::transport::PeerTable::new(),
        metrics: Arc::new(Metrics::new()),
        tz: jiff::tz::TimeZone::get("Europe/Berlin").expect("time zone"),
        pg: None,
        notify: crate::notify::Outbox::disabled(),
    });
    let profiles = [
        Subscriber {
            imsi: IMSI_BASIC.into(),
            msisdn: Some("491700000001".into()),
            plan: Some("basic".into()),
            quotas: [("monthly".to_string(), 50_000_000)].into_iter().collect(),
            ..Default::default()
        },
        Subscriber {
            imsi: IMSI_VIP.into(),
            plan: Some("unlimited".into()),
            services: vec!["vip".into()],
            ..Default::default()
        },
        Subscriber {
            imsi: IMSI_BLOCKED.into(),
            attributes: [("blocked".to_string(), serde_json::Value::Bool(true))]
                .into_iter()
                .collect(),
            ..Default::default()
        },
    ];
    let operations = node.operations();
    for s in profiles {
        operations.put_subscriber(s).await.expect("provision");
    }
    node
}

/// A node on a fresh embedded store, with the shipped policy and usage
/// file and the subscribers above provisioned, for the unit tests of the
/// layers it is built from. `rt` runs its set-up only.
#[cfg(test)]
pub(crate) fn node_for_unit_tests(rt: &tokio::runtime::Runtime) -> Services {
    let root = scratch("unit");
    std::fs::write(root.join("default.lua"), DEFAULT_POLICY).expect("write policy");
    std::fs::write(root.join("usage.toml"), USAGE_FILE).expect("write usage file");
    rt.block_on(build_node(&root, &root.join("node")))
}

/// Splits `data` into the Diameter messages it frames as, back to back (at
/// most [`MAX_MESSAGES`]). When the first does not frame, the whole input
/// is tried as one message, as a test or a datagram would send it.
fn messages(data: &[u8]) -> Vec<Message> {
    let mut out = Vec::new();
    let mut rest = data;
    while out.len() < MAX_MESSAGES && !rest.is_empty() {
        let n = match frame_len(rest, MAX_LEN) {
            Ok(Some(n)) if n <= rest.len() => n,
            _ if out.is_empty() => rest.len(),
            _ => break,
        };
        let Ok(m) = Message::parse(Bytes::copy_from_slice(&rest[..n])) else {
            break;
        };
        out.push(m);
        rest = &rest[n..];
    }
    out
}

/// Hands each request framed in `data` to `Gx::handle_gx`, in order, on
/// the process's node, and checks each answer.
#[doc(hidden)]
pub fn gx_handler(data: &[u8]) {
    run_handler(data, false);
}

/// As [`gx_handler`], with Rx requests handed to `Rx::handle_rx`.
#[doc(hidden)]
pub fn rx_handler(data: &[u8]) {
    run_handler(data, true);
}

fn run_handler(data: &[u8], rx: bool) {
    let h = gx_harness();
    let mut state = h.state.lock();
    state.inputs += 1;
    if state.inputs % INPUTS_PER_NODE == 0 {
        let dir = h.root.join(format!("node-{}", state.inputs));
        let old = std::mem::replace(&mut state.dir, dir.clone());
        let _ =
            h.rt.block_on(state.node.node.persistence.store().shutdown());
        state.node = h.rt.block_on(build_node(&h.root, &dir));
        let _ = std::fs::remove_dir_all(old);
    }
    for req in messages(data) {
        if !req.is_request() {
            // The transport matches answers to our own requests; they never
            // reach the handler.
            continue;
        }
        // The PCRF's one Diameter handler also takes Sd (TDF) and, for
        // the rx_handler target, Rx (AF) requests.
        let result = if rx && req.application_id() == crate::rx::RX {
            h.rt.block_on(state.node.rx.handle_rx(req.clone()))
        } else if req.application_id() == crate::sd::SD {
            h.rt.block_on(state.node.sd.handle_sd(req.clone()))
        } else {
            h.rt.block_on(state.node.gx.handle_gx(req.clone()))
        };
        match result {
            Ok(answer) => check_answer(&req, answer),
            Err(e) => check_error_answer(&req, &e),
        }
    }
}

/// Bytes as one or more Diameter messages through the Sy handler (SNR
/// from an OCS). The node knows no Sy session, so a well-formed SNR gets
/// 5002; anything malformed must come back as an RFC 6733 error.
pub fn sy_handler(data: &[u8]) {
    let h = gx_harness();
    let state = h.state.lock();
    for req in messages(data) {
        if !req.is_request() {
            continue;
        }
        match h.rt.block_on(state.node.sy.handle_sy(req.clone())) {
            Ok(answer) => {
                let ans = match Message::parse(answer) {
                    Ok(a) => a,
                    Err(e) => panic!("SNA does not parse: {e}"),
                };
                assert!(!ans.is_request(), "handler answered with a request");
                assert_eq!(ans.command_code(), cmd::SPENDING_STATUS_NOTIFICATION);
                assert_eq!(
                    (ans.hop_by_hop(), ans.end_to_end()),
                    (req.hop_by_hop(), req.end_to_end()),
                    "answer ids differ from the request's"
                );
                if let Err(e) = ans.validate() {
                    panic!("SNA does not validate against the dictionary: {e}");
                }
                let rc = ans
                    .find(avp::RESULT_CODE)
                    .ok()
                    .flatten()
                    .and_then(|a| a.as_u32().ok());
                assert!(rc.is_some(), "SNA without a readable Result-Code");
            }
            Err(e) => check_error_answer(&req, &e),
        }
    }
}

/// An answer the handler made must be a valid answer to `req` with a
/// Result-Code (or an Experimental-Result, TS 29.212 §5.6, TS 29.214 §5.6).
fn check_answer(req: &Message, answer: Bytes) {
    let ans = match Message::parse(answer) {
        Ok(a) => a,
        Err(e) => panic!("handler answer does not parse: {e}"),
    };
    assert!(!ans.is_request(), "handler answered with a request");
    assert_eq!(ans.command_code(), req.command_code());
    assert!(
        [cmd::CREDIT_CONTROL, cmd::AA, cmd::SESSION_TERMINATION].contains(&ans.command_code()),
        "answer to a command the PCRF does not serve"
    );
    assert_eq!(
        (ans.hop_by_hop(), ans.end_to_end()),
        (req.hop_by_hop(), req.end_to_end()),
        "answer ids differ from the request's"
    );
    if let Err(e) = ans.validate() {
        panic!("handler answer does not validate against the dictionary: {e}");
    }
    let rc = ans
        .find(avp::RESULT_CODE)
        .ok()
        .flatten()
        .and_then(|a| a.as_u32().ok());
    let experimental = ans
        .find(avp::EXPERIMENTAL_RESULT)
        .ok()
        .flatten()
        .and_then(|g| {
            g.grouped()
                .find(avp::EXPERIMENTAL_RESULT_CODE)
                .ok()
                .flatten()
        })
        .and_then(|a| a.as_u32().ok());
    assert!(
        rc.is_some() || experimental.is_some(),
        "answer without a readable Result-Code or Experimental-Result-Code"
    );
    if let (Ok(Some(sid)), Ok(Some(asid))) = (req.session_id(), ans.session_id()) {
        assert_eq!(sid, asid, "answer for another session");
    }
}

/// Result-Codes whose answer must carry the offending AVP (RFC 6733 §7.1.5).
const NEEDS_FAILED_AVP: [u32; 4] = [
    result_code::DIAMETER_AVP_UNSUPPORTED,
    result_code::DIAMETER_INVALID_AVP_VALUE,
    result_code::DIAMETER_MISSING_AVP,
    result_code::DIAMETER_INVALID_AVP_LENGTH,
];

/// An error from the handler becomes the transport's error answer
/// (`MessageBuilder::error_answer`): it must parse back, say the same
/// Result-Code, set the E bit exactly for protocol errors and hold a
/// Failed-AVP of exactly one well-formed AVP where the code requires it.
fn check_error_answer(req: &Message, e: &DiameterError) {
    if NEEDS_FAILED_AVP.contains(&e.result_code) {
        assert!(
            e.failed_avp.is_some(),
            "Result-Code {} without a Failed-AVP: {e}",
            e.result_code
        );
    }
    if let Some(f) = &e.failed_avp {
        match AvpIter::new(f).next() {
            Some(Ok(a)) => assert_eq!(a.raw().len(), f.len(), "Failed-AVP has trailing bytes"),
            other => panic!("Failed-AVP is not an AVP: {other:?} for {e}"),
        }
    }
    let mut out = BytesMut::new();
    MessageBuilder::error_answer(&mut out, req, "pcrf.fuzz", "fuzz", e);
    let ans = match Message::parse(out.freeze()) {
        Ok(a) => a,
        Err(err) => panic!("error answer for {e} does not parse: {err}"),
    };
    assert_eq!(ans.flags() & FLAG_E != 0, e.is_protocol_error());
    match ans.find(avp::RESULT_CODE) {
        Ok(Some(rc)) => assert_eq!(rc.as_u32().ok(), Some(e.result_code)),
        other => panic!("error answer without a readable Result-Code: {other:?}"),
    }
    for a in ans.avps() {
        let a = match a {
            Ok(a) => a,
            Err(err) => panic!("error answer has a malformed AVP: {err}"),
        };
        if a.is(avp::FAILED_AVP) {
            for inner in a.grouped() {
                if let Err(err) = inner {
                    panic!("Failed-AVP content is malformed: {err}");
                }
            }
        }
    }
}

/// A body a decoder refused: a 400 with a 3GPP cause, JSON-pointer
/// `invalidParams`, and JSON that reads back.
fn refused(p: crate::sbi::problem::ProblemDetails) {
    use crate::sbi::problem::ProblemDetails;
    assert_eq!(p.status, 400, "{p:?}");
    assert!(p.cause.is_some(), "no cause: {p:?}");
    for param in &p.invalid_params {
        assert!(param.param.starts_with('/'), "{p:?}");
    }
    let back: ProblemDetails = serde_json::from_slice(&p.to_json()).expect("problem reads back");
    assert_eq!(back, p);
}

/// An SMF's request body through the N7 decoders.
pub fn n7_decoder(data: &[u8]) {
    use crate::n7::decode::{decode_create, decode_delete, decode_update};
    use crate::sbi::body::DecodeLimits;
    let limits = DecodeLimits::default();
    match decode_create(data, &limits) {
        Ok(ctx) => {
            assert!(ctx.supi.is_some() && ctx.dnn.is_some() && ctx.slice_info.is_some());
            assert!(ctx.notification_uri.is_some() && ctx.pdu_session_type.is_some());
            let session = crate::n7::session_input::session_input(&ctx);
            assert_eq!(session.apn.as_deref(), ctx.dnn.as_deref());
            if let Ok(up) = decode_update(data, &limits) {
                let mut ctx = ctx;
                crate::n7::session_input::apply_update(&mut ctx, &up);
                crate::n7::session_input::session_input(&ctx);
            }
        }
        Err(p) => refused(p),
    }
    if let Err(p) = decode_update(data, &limits) {
        refused(p);
    }
    if let Err(p) = decode_delete(data, &limits) {
        refused(p);
    }
}

/// An AF's request body through the N5 decoders (Create, PATCH).
pub fn n5_decoder(data: &[u8]) {
    use crate::n5::decode::{
        decode_create, decode_delete, decode_patch, rx_media, specific_actions,
    };
    use crate::sbi::body::DecodeLimits;
    let limits = DecodeLimits::default();
    match decode_create(data, &limits) {
        Ok(req) => {
            assert!(req.notif_uri.is_some() && req.supp_feat.is_some());
            assert!(req.ue_ipv4.is_some() || req.ue_ipv6.is_some());
            for (key, m) in &req.med_components {
                let media = rx_media(key, m).expect("an accepted component maps");
                assert_eq!(Some(media.number), m.med_comp_n);
            }
            let actions = specific_actions(req.ev_subsc.as_ref());
            assert!(actions.windows(2).all(|w| w[0] < w[1]), "{actions:?}");
        }
        Err(p) => refused(p),
    }
    match decode_patch(data, &limits) {
        Ok(up) => {
            for (key, m) in &up.med_components {
                match m {
                    Some(m) => {
                        rx_media(key, m).expect("an accepted component maps");
                    }
                    None => assert!(key.parse::<u32>().is_ok(), "{key:?} removed"),
                }
            }
        }
        Err(p) => refused(p),
    }
    if let Err(p) = decode_delete(data, &limits) {
        refused(p);
    }
}

/// The main configuration file loader (`pcrf.toml`).
#[doc(hidden)]
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(text, "fuzz.toml") {
        Ok(cfg) => {
            // What start-up derives from a valid file must not panic either.
            let _ = cfg.checksum_hex();
            let _ = cfg.usage.boundaries();
        }
        Err(e) => assert!(!e.problems.is_empty(), "an error with no problem"),
    }
}

/// The usage file loader (`usage.toml`).
#[doc(hidden)]
pub fn usage_file(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match UsageConfig::parse(text, "fuzz-usage.toml") {
        Ok(cfg) => {
            let _ = cfg.checksum_hex();
        }
        Err(e) => assert!(!e.problems.is_empty(), "an error with no problem"),
    }
}

struct CasesHarness {
    policy: PathBuf,
    cases: PathBuf,
}

static CASES: OnceLock<CasesHarness> = OnceLock::new();

/// The policy test-case runner (`pcrf policy test`) on the default policy:
/// the case file is parsed, each case run and compared, the report printed.
#[doc(hidden)]
pub fn policy_cases(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let h = CASES.get_or_init(|| {
        let dir = scratch("cases");
        let policy = dir.join("default.lua");
        std::fs::write(&policy, DEFAULT_POLICY).expect("write policy");
        CasesHarness {
            policy,
            cases: dir.join("cases.toml"),
        }
    });
    std::fs::write(&h.cases, text).expect("write case file");
    let started = Instant::now();
    if let Ok(report) = crate::policy::cases::run(&h.policy, &h.cases) {
        let text = report.to_string();
        assert!(text.contains("total"), "report without a summary");
    }
    assert!(
        started.elapsed() < SCRIPT_WALL_LIMIT,
        "case file took {:?}",
        started.elapsed()
    );
}

/// `data` as a policy script, loaded into the sandbox with the default
/// limits and, if it loads, `decide` run on the sample inputs the server
/// validates every script with.
#[doc(hidden)]
pub fn policy_script(data: &[u8]) {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let started = Instant::now();
    if let Ok(vm) = Vm::build(source, "fuzz.lua", Limits::default(), 1) {
        for (_, input) in engine::sample_inputs() {
            let _ = vm.decide(&input);
        }
        // The VM's memory stays under its limit (plus what Rust converted).
        assert!(
            vm.used_memory() < 2 * Limits::default().memory_bytes,
            "VM holds {} bytes",
            vm.used_memory()
        );
    }
    assert!(
        started.elapsed() < SCRIPT_WALL_LIMIT,
        "script took {:?}: a limit did not stop it",
        started.elapsed()
    );
}
