//! The store alone: rows per second committed against the number of store
//! writers (shards). Many concurrent "requests", each a CCR-U's changes (its
//! session and its subscriber's usage row, updated in place), go through
//! `ShardedWriter` exactly as the services submit them, for a fixed time
//! per writer count; printed per count: requests/s, rows/s, commits per
//! 100 requests, and the p50/p99 wait for the commit.
//!
//! `cargo bench -p pcrf --bench store_writers`. Environment:
//! `PCRF_BENCH_WRITERS` (default "1,2,4"), `PCRF_BENCH_SECS` (per count,
//! default 3), `PCRF_BENCH_CLIENTS` (requests in flight, default 256),
//! `PCRF_BENCH_DURABILITY` ("full", default, or "relaxed"),
//! `PCRF_BENCH_STORE_DIR` (default the system temp dir: a real disk, where
//! fsync costs what it costs), `PCRF_BENCH_STORE=postgres` with
//! `PCRF_TEST_DATABASE_URL` for PostgreSQL instead of SQLite. Figures go
//! to BENCHMARKS.md and bench/notes/.

mod shared;
use pcrf::store::group_commit::GroupCommitOptions;
use pcrf::store::{open_shards, Change, Durability, ShardedWriter, StoreConfig, StoreKind};
use pcrf::usage::{Accumulator, SubscriberUsage};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Subscribers (each one session and one usage row), cycled through.
const POOL: usize = 20_000;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn imsi(i: usize) -> String {
    format!("0010101{i:08}")
}

fn changes(i: usize, tick: u64) -> Vec<Change> {
    let s = shared::ccr_u_session(
        format!("pgw1.epc.mnc001.mcc001.3gppnetwork.org;1763000000;{i}"),
        imsi(i),
        1_763_000_000_000 + tick as i64,
    );
    let u = SubscriberUsage {
        subscriber: imsi(i).into(),
        accumulators: litemap::LiteMap::from_iter([(
            "monthly".into(),
            Accumulator {
                used: tick * 1000,
                topup: 0,
                period_start_ms: 1_763_000_000_000,
                period_end_ms: Some(1_765_592_000_000),
            },
        )]),
        ..Default::default()
    };
    static LAST: std::sync::OnceLock<shared::LastWritten> = std::sync::OnceLock::new();
    let last = LAST.get_or_init(Default::default);
    vec![last.session(s), last.usage(u)]
}

struct Run {
    requests: u64,
    commits: u64,
    secs: f64,
    p50_us: u64,
    p99_us: u64,
}

fn run(config: &StoreConfig, clients: usize, secs: u64, rt: &tokio::runtime::Runtime) -> Run {
    let opened = open_shards(config).expect("open the store");
    let writer = ShardedWriter::start(
        opened.shards,
        opened.shared,
        GroupCommitOptions {
            commit_window: config.commit_window(),
            ..Default::default()
        },
    )
    .expect("start the writers");
    rt.block_on(async {
        // Every row exists first: the measured writes are updates.
        for chunk in (0..POOL).collect::<Vec<_>>().chunks(500) {
            let mut batch = Vec::new();
            for &i in chunk {
                batch.extend(changes(i, 0));
            }
            // One request per shard's part (a span of subscribers).
            writer.submit(batch).await.expect("seed");
        }
        let before = writer.stats();
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..clients {
            let (writer, stop) = (writer.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut waits = Vec::new();
                let mut tick = 1;
                let mut i = c;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    writer.submit(changes(i, tick)).await.expect("submit");
                    waits.push(t.elapsed().as_micros() as u64);
                    i = (i + clients) % POOL;
                    tick += 1;
                }
                waits
            }));
        }
        tokio::time::sleep(Duration::from_secs(secs)).await;
        stop.store(true, Ordering::Relaxed);
        let mut waits = Vec::new();
        for t in tasks {
            waits.extend(t.await.expect("client"));
        }
        let secs = started.elapsed().as_secs_f64();
        let after = writer.stats();
        drop(writer.shutdown().await.expect("shutdown"));
        waits.sort_unstable();
        let pct = |p: f64| {
            waits
                .get(((waits.len() as f64 * p) as usize).min(waits.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0)
        };
        Run {
            requests: after.requests - before.requests,
            commits: after.commits - before.commits,
            secs,
            p50_us: pct(0.50),
            p99_us: pct(0.99),
        }
    })
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is taken.
    let writers: Vec<usize> = std::env::var("PCRF_BENCH_WRITERS")
        .unwrap_or_else(|_| "1,2,4".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    let secs = env_or("PCRF_BENCH_SECS", 3u64);
    let clients = env_or("PCRF_BENCH_CLIENTS", 256usize);
    let durability = match std::env::var("PCRF_BENCH_DURABILITY").as_deref() {
        Ok("relaxed") => Durability::Relaxed,
        _ => Durability::Full,
    };
    let postgres = std::env::var("PCRF_BENCH_STORE").as_deref() == Ok("postgres");
    let base = std::env::var_os("PCRF_BENCH_STORE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
        .join(format!("pcrf-bench-writers-{}", std::process::id()));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .enable_all()
        .build()
        .expect("runtime");
    println!(
        "store_writers: {} {durability:?}, {clients} requests in flight, {secs} s each, {cores} cores; \
         a request = 1 session + 1 usage row",
        if postgres { "postgres" } else { "sqlite" }
    );
    println!("writers  requests/s      rows/s  commits/100req  p50_us  p99_us");
    for n in writers {
        let path = base.join(format!("w{n}"));
        let _ = std::fs::remove_dir_all(&path);
        let mut config = StoreConfig {
            path: path.clone(),
            durability,
            writers: Some(n),
            ..StoreConfig::default()
        };
        if postgres {
            config.kind = StoreKind::Postgres;
            config.url = std::env::var("PCRF_TEST_DATABASE_URL").ok();
        }
        let r = run(&config, clients, secs, &rt);
        let rps = r.requests as f64 / r.secs;
        println!(
            "{n:>7}  {rps:>10.0}  {:>10.0}  {:>14.1}  {:>6}  {:>6}",
            rps * 2.0,
            100.0 * r.commits as f64 / r.requests.max(1) as f64,
            r.p50_us,
            r.p99_us
        );
        let _ = std::fs::remove_dir_all(&path);
    }
    let _ = std::fs::remove_dir_all(&base);
}
