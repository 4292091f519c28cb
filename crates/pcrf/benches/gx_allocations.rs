//! How many allocations (and bytes requested) one Gx request costs on the
//! real handling path, counted rather than timed so the figure holds on a
//! shared machine: a counting global allocator wraps the system one, a
//! node is built in-process on the embedded store (as the fuzz harness and
//! tests/suite/usage_reset.rs do), N CCR-I open N sessions and N CCR-U update
//! them through `Gx::handle_gx`; the counts over each phase divided by N
//! are the figures. Everything the request causes is counted, the store
//! writer's thread included.
//!
//!   cargo bench --profile dev -p pcrf --bench gx_allocations
//!   PCRF_BENCH_REQUESTS=5000 cargo bench --profile dev -p pcrf --bench gx_allocations

mod shared;
use bytes::Bytes;
use diameter::codec::Message;
use diameter::transport::PeerTable;
use pcrf::config::Config;
use pcrf::control::Control;
use pcrf::metrics::Metrics;
use pcrf::node::NodeParts;
use pcrf::policy::{EngineConfig, Limits, PolicyEngine};
use pcrf::services::Services;
use pcrf::store::{ShardedWriter, SqliteStore, Store};
use pcrf::subscriber::Subscriber;
use pcrf_bench::gx::{self as bench_gx, Gateway, Request, Usage};
use std::alloc::{GlobalAlloc, Layout, System};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The system allocator, counting calls and bytes requested.
struct Counting;

static CALLS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        CALLS.fetch_add(1, Relaxed);
        BYTES.fetch_add(l.size() as u64, Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        CALLS.fetch_add(1, Relaxed);
        BYTES.fetch_add(new.saturating_sub(l.size()) as u64, Relaxed);
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn counts() -> (u64, u64) {
    (CALLS.load(Relaxed), BYTES.load(Relaxed))
}

const USAGE: &str = r#"
time_zone = "UTC"
billing_day = 1
[keys.total]
chunk = "100 MB"
[accumulators.monthly]
reset = "monthly"
sources = ["total"]
"#;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn node(dir: &Path) -> Services {
    let store: Box<dyn Store> =
        Box::new(SqliteStore::open(&dir.join("data"), Default::default()).expect("store"));
    let policy = Arc::new(
        PolicyEngine::load(EngineConfig {
            path: repo().join("policies/default.lua"),
            limits: Limits {
                instructions: 1_000_000,
                memory_bytes: 16 << 20,
            },
            fallback: Default::default(),
        })
        .expect("policy"),
    );
    let policy = pcrf::policy::PolicyVersions::start(
        policy,
        Arc::new(pcrf::store::SqliteVersions::in_memory().expect("versions")),
    )
    .expect("policy versions");
    let mut store = store;
    let subscribers = store.subscribers().expect("subscribers");
    let sessions = store.open_sessions().expect("sessions");
    let usage = store.usage_records().expect("usage");
    let usage_path = dir.join("usage.toml");
    std::fs::write(&usage_path, USAGE).expect("usage file");
    let (usage_versions, usage_cfg) = pcrf::usage::versions::UsageVersions::start_from_file(
        Arc::new(pcrf::store::SqliteVersions::in_memory().expect("versions")),
        usage_path,
    )
    .expect("usage file");
    Services::new(NodeParts {
        cfg: Arc::new(Config::zero_config()),
        policy,
        store: ShardedWriter::single(store).expect("writer"),
        subscribers,
        sessions,
        usage,
        usage_cfg,
        usage_versions,
        peers: PeerTable::new(),
        metrics: Arc::new(Metrics::new()),
        tz: jiff::tz::TimeZone::UTC,
        pg: None,
        notify: pcrf::notify::Outbox::disabled(),
    })
}

fn imsi(i: u32) -> String {
    format!("00101{:010}", i)
}

/// Request `number` of session `i`, its own subscriber and UE address.
fn request(
    i: u32,
    number: u32,
    build: impl FnOnce(&mut diameter::MessageBuilder<'_>, &Request<'_>),
) -> Message {
    let gw = Gateway {
        origin_host: "pgw.test.local".into(),
        origin_realm: "test.local".into(),
        destination_realm: "test.local".into(),
        destination_host: None,
        origin_state_id: 1,
        pgw_address: Ipv4Addr::new(192, 0, 2, 1),
        sgw_address: Ipv4Addr::new(192, 0, 2, 2),
        mcc_mnc: "00101".into(),
        apn: "internet".into(),
    };
    let sub = bench_gx::Subscriber {
        imsi: imsi(i),
        msisdn: format!("4917{:08}", i),
        ue_ip: Ipv4Addr::from(0x0a00_0000 + i),
        imeisv: "3534900698733190".into(),
        cell_id: 0x101,
        tac: 1,
    };
    let id = format!("pgw.test.local;bench;{i}");
    let r = Request {
        session_id: &id,
        gateway: &gw,
        destination_host: None,
        subscriber: &sub,
        number,
        charging_id: i,
    };
    let bytes: Bytes = bench_gx::encode(i * 8 + number, i * 8 + number, |b| build(b, &r));
    Message::parse(bytes).expect("parse")
}

fn main() {
    let n: u32 = std::env::var("PCRF_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let dir = std::env::temp_dir().join(format!("pcrf-gx-allocations-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let node = node(&dir);
        for i in 0..n {
            node.operations()
                .put_subscriber(Subscriber {
                    imsi: imsi(i),
                    plan: Some("basic".into()),
                    quotas: [("monthly".to_string(), 50_000_000_000)]
                        .into_iter()
                        .collect(),
                    ..Default::default()
                })
                .await
                .expect("provision");
        }
        // Requests are built before counting: the load generator's work
        // is not the server's.
        let initial: Vec<Message> = (0..n)
            .map(|i| request(i, 0, bench_gx::ccr_initial))
            .collect();
        let usage = vec![Usage {
            monitoring_key: "total".into(),
            input_octets: 1_000_000,
            output_octets: 5_000_000,
        }];
        let update: Vec<Message> = (0..n)
            .map(|i| request(i, 1, |b, r| bench_gx::ccr_update(b, r, &usage)))
            .collect();

        // Answers are kept (room reserved beforehand) and checked after
        // counting: a request that failed would count as cheap.
        let mut answers = Vec::with_capacity(2 * n as usize);
        let policy = node.node.policy.engine().clone();
        let ran = |s: pcrf::policy::StatsSnapshot| (s.runs, s.skips, s.skips_within_bounds);
        let stats_before = ran(policy.stats());
        let before = counts();
        for req in initial {
            answers.push(node.gx.handle_gx(req).await.expect("CCA-I"));
        }
        let after_i = counts();
        let stats_i = ran(policy.stats());
        for req in update {
            answers.push(node.gx.handle_gx(req).await.expect("CCA-U"));
        }
        let after_u = counts();
        let stats_u = ran(policy.stats());
        // The answers' sizes: the last one is what a session keeps to
        // answer a retransmission (benches/session_memory.rs counts it).
        let size = |a: &[Bytes]| a.iter().map(Bytes::len).sum::<usize>() / a.len().max(1);
        let (cca_i, cca_u) = answers.split_at(n as usize);
        println!(
            "CCA-I {} bytes, CCA-U {} bytes on the wire",
            size(cca_i),
            size(cca_u)
        );
        for a in answers {
            let m = Message::parse(a).expect("answer");
            let code = m
                .find(diameter::dict::avp::RESULT_CODE)
                .expect("avp")
                .expect("Result-Code")
                .as_u32()
                .expect("u32");
            assert_eq!(code, 2001, "every request succeeds");
        }
        let per = |a: (u64, u64), b: (u64, u64)| {
            (
                (b.0 - a.0) as f64 / f64::from(n),
                (b.1 - a.1) as f64 / f64::from(n),
            )
        };
        let (ci, bi) = per(before, after_i);
        let (cu, bu) = per(after_i, after_u);
        println!("requests per phase: {n}");
        println!("CCR-I: {ci:.1} allocations, {bi:.0} bytes per request");
        println!("CCR-U: {cu:.1} allocations, {bu:.0} bytes per request");
        // The memo's share: decisions where Lua did not run.
        let phase = |a: (u64, u64, u64), b: (u64, u64, u64)| (b.0 - a.0, b.1 - a.1, b.2 - a.2);
        for (name, (runs, skips, within)) in [
            ("CCR-I", phase(stats_before, stats_i)),
            ("CCR-U", phase(stats_i, stats_u)),
        ] {
            println!("{name}: Lua ran {runs}, memo {skips} (of which within bounds {within})");
        }
        // Of that, the copy a request makes of its session before changing
        // it: one clone of a session of the shape a CCR-U leaves.
        let s = shared::ccr_u_session("pgw.test.local;bench;0".into(), imsi(0), 1_763_000_000_000);
        let a = counts();
        let copy = s.clone();
        let b = counts();
        drop(copy);
        println!(
            "  of which one GxSession clone: {} allocations, {} bytes",
            b.0 - a.0,
            b.1 - a.1
        );
        let _ = node.node.persistence.store().shutdown().await;
    });
    let _ = std::fs::remove_dir_all(&dir);
}
