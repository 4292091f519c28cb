//! What a batch of CCR-U writes costs the PostgreSQL server: batches of B
//! changed sessions plus B changed usage rows (what B CCR-Us with usage
//! reports write) applied through `PostgresStore`, reporting the server
//! backend's CPU (utime+stime from /proc of `pg_backend_pid()`) and this
//! process's CPU (encoding, protocol) per row, and the stored blob sizes.
//! Rows are updated in place, as in steady state.
//!
//! Needs `PCRF_TEST_DATABASE_URL` (a database it may create a schema in,
//! on this host); skips without it. `PCRF_BENCH_PG_SIZES` (default
//! "1,4,16,64") and `PCRF_BENCH_PG_ROWS` (session rows per size, default
//! 8000) shape the run; `PCRF_BENCH_PG_SETUP` is SQL run on the fresh
//! tables before they are filled (to try table settings). Figures go to BENCHMARKS.md and docs/postgres.md.

mod shared;
use pcrf::session::GxSession;
use pcrf::store::postgres::{PostgresOptions, PostgresStore};
use pcrf::store::{Change, Store};
use pcrf::usage::{Accumulator, LastReport, ServiceUnits, SubscriberUsage};
use std::time::Instant;

/// Distinct rows cycled through, so every write updates an existing row.
const POOL: usize = 2000;

/// A session as a CCR-U leaves it (benches/shared).
fn session(i: usize, updated_ms: i64) -> GxSession {
    shared::ccr_u_session(
        format!("pgw1.epc.mnc001.mcc001.3gppnetwork.org;1763000000;{i}"),
        format!("0010101{i:08}"),
        updated_ms,
    )
}

fn usage(i: usize, used: u64) -> SubscriberUsage {
    SubscriberUsage {
        subscriber: format!("0010101{i:08}").into(),
        accumulators: [(
            "monthly".into(),
            Accumulator {
                used,
                topup: 0,
                period_start_ms: 1_763_000_000_000,
                period_end_ms: Some(1_765_592_000_000),
            },
        )]
        .into_iter()
        .collect(),
        last_reports: [(
            "video".into(),
            LastReport {
                at_ms: 1_763_000_000_000 + used as i64,
                session: format!("pgw1.epc.mnc001.mcc001.3gppnetwork.org;1763000000;{i}").into(),
                used: ServiceUnits {
                    total: Some(used),
                    input: Some(used / 3),
                    output: Some(used - used / 3),
                    time: None,
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

/// The changes of B CCR-Us (batch `k`): each one's session and usage row.
fn batch(k: usize, size: usize) -> Vec<Change> {
    static LAST: std::sync::OnceLock<shared::LastWritten> = std::sync::OnceLock::new();
    let last = LAST.get_or_init(Default::default);
    (0..size)
        .flat_map(|j| {
            let i = (k * size + j) % POOL;
            let at = 1_763_000_000_000 + k as i64;
            [
                last.session(session(i, at)),
                last.usage(usage(i, k as u64 * 1000 + 1)),
            ]
        })
        .collect()
}

/// utime + stime of a process, in µs.
fn process_cpu_us(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name; utime and stime are the
    // 14th and 15th fields of the whole line.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(ticks * 1_000_000 / hz)
}

fn own_cpu_us() -> u64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

fn admin(url: &str) -> (tokio::runtime::Runtime, tokio_postgres::Client) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client = rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .expect("connect to PCRF_TEST_DATABASE_URL");
        tokio::spawn(conn);
        client
    });
    (rt, client)
}

fn main() {
    let Ok(base) = std::env::var("PCRF_TEST_DATABASE_URL") else {
        eprintln!("postgres_batch: PCRF_TEST_DATABASE_URL not set; skipped");
        return;
    };
    // `cargo bench` passes --bench; nothing else is understood.
    let sizes: Vec<usize> = std::env::var("PCRF_BENCH_PG_SIZES")
        .unwrap_or_else(|_| "1,4,16,64".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .filter(|&b| b > 0)
        .collect();
    let rows: usize = std::env::var("PCRF_BENCH_PG_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8000);
    let schema = format!("bench_pgbatch_{}", std::process::id());
    let (rt, client) = admin(&base);
    rt.block_on(client.batch_execute(&format!("CREATE SCHEMA {schema}")))
        .expect("create schema");
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-csearch_path%3D{schema}");
    let mut store = PostgresStore::open(PostgresOptions::new(url)).expect("open store");
    if let Ok(setup) = std::env::var("PCRF_BENCH_PG_SETUP") {
        rt.block_on(client.batch_execute(&format!(
            "SET search_path TO {schema}; {setup}; RESET search_path"
        )))
        .expect("PCRF_BENCH_PG_SETUP");
    }
    // Every row exists before measuring: updates only.
    for k in 0..POOL.div_ceil(64) {
        store.apply(&batch(k, 64)).expect("fill");
    }
    let q = |sql: &str| -> i64 {
        rt.block_on(client.query_one(&sql.replace("{s}", &schema), &[]))
            .expect("query")
            .get::<_, i64>(0)
    };
    let session_bytes = q("SELECT avg(octet_length(data))::bigint FROM {s}.sessions");
    let session_stored = q("SELECT avg(pg_column_size(data))::bigint FROM {s}.sessions");
    let usage_bytes = q("SELECT avg(octet_length(data))::bigint FROM {s}.usage");
    println!("blob bytes: session {session_bytes} (stored {session_stored}), usage {usage_bytes}");
    let pid = store.backend_pid().expect("backend pid");
    println!("batch_ccru  rows  server_us/row  client_us/row  wall_us/batch");
    let mut k = POOL;
    for &size in &sizes {
        let batches = (rows / size).max(1);
        let (server0, client0, t0) = (process_cpu_us(pid), own_cpu_us(), Instant::now());
        for _ in 0..batches {
            let n = store.apply(&batch(k, size)).expect("apply");
            assert_eq!(n, 2 * size, "every row of batch {k} changed");
            k += 1;
        }
        let wall = t0.elapsed();
        let written = (2 * size * batches) as f64;
        let server = match (server0, process_cpu_us(pid)) {
            (Some(a), Some(b)) => format!("{:.1}", (b - a) as f64 / written),
            _ => "n/a".into(),
        };
        println!(
            "{size:>10}  {:>4}  {server:>13}  {:>13.1}  {:>13.0}",
            2 * size * batches,
            (own_cpu_us() - client0) as f64 / written,
            wall.as_micros() as f64 / batches as f64,
        );
    }
    // A backend reports its table statistics when idle, at most once a second.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let hot = q(
        "SELECT (n_tup_hot_upd * 100 / greatest(n_tup_upd, 1))::bigint \
         FROM pg_stat_user_tables WHERE schemaname = '{s}' AND relname = 'sessions'",
    );
    println!("sessions: {hot}% of updates HOT");
    drop(store);
    rt.block_on(client.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")))
        .expect("drop schema");
}
