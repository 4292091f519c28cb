//! What a commit costs and how group commit amortises it: commits/s and
//! changes/s of the SQLite store for batch sizes 1, 16 and 128, on tmpfs
//! and on the real disk, in both durability modes; the group-commit writer
//! end to end with many concurrent submitters; recovery at start-up; and
//! the session blob format (JSON, chosen, against CBOR). Figures go to
//! docs/durability.md.
//!
//! Directories: tmpfs `PCRF_BENCH_TMPFS_DIR` (default /dev/shm), disk
//! `PCRF_BENCH_DISK_DIR` (default the system temp dir).

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
mod shared;
use pcrf::session::GxSession;
use pcrf::store::{Change, Durability, GroupCommit, SqliteStore, Store};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A session as a CCR-U leaves it (benches/shared).
fn session(id: &str, updated_ms: i64) -> GxSession {
    shared::ccr_u_session(id.into(), "001010123456789".into(), updated_ms)
}

fn bench_dirs() -> Vec<(&'static str, PathBuf)> {
    let tmpfs = std::env::var_os("PCRF_BENCH_TMPFS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/dev/shm"));
    let disk = std::env::var_os("PCRF_BENCH_DISK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let mut out = Vec::new();
    for (name, base) in [("tmpfs", tmpfs), ("disk", disk)] {
        if base.is_dir() {
            out.push((
                name,
                base.join(format!("pcrf-bench-{}-{name}", std::process::id())),
            ));
        }
    }
    out
}

/// One transaction of `size` changed sessions per iteration.
fn store_apply(c: &mut Criterion) {
    let mut group = c.benchmark_group("store_apply");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for (fs, dir) in bench_dirs() {
        for (mode, durability) in [("full", Durability::Full), ("relaxed", Durability::Relaxed)] {
            if fs == "tmpfs" && durability == Durability::Relaxed {
                // fsync is free on tmpfs: relaxed would measure the same.
                continue;
            }
            let path = dir.join(mode);
            let _ = std::fs::remove_dir_all(&path);
            let mut store = SqliteStore::open(&path, durability).expect("open bench store");
            // A warm table: updates of existing rows, like CCR-Us.
            let pool: Vec<String> = (0..4096).map(|i| format!("pgw1;{i};bench")).collect();
            let seed: Vec<Change> = pool
                .iter()
                .map(|id| Change::PutSession(Arc::new(session(id, 0))))
                .collect();
            store.apply(&seed).expect("seed");
            let mut tick: i64 = 0;
            for size in [1usize, 16, 128] {
                group.throughput(Throughput::Elements(size as u64));
                group.bench_function(BenchmarkId::new(format!("{fs}/{mode}"), size), |b| {
                    b.iter_batched(
                        || {
                            tick += 1;
                            (0..size)
                                .map(|i| {
                                    let id = &pool[(tick as usize * size + i) % pool.len()];
                                    Change::PutSession(Arc::new(session(id, tick)))
                                })
                                .collect::<Vec<_>>()
                        },
                        |changes| {
                            let rows = store.apply(&changes).expect("apply");
                            assert_eq!(rows, changes.len());
                        },
                        BatchSize::SmallInput,
                    )
                });
            }
            drop(store);
            let _ = std::fs::remove_dir_all(&path);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    group.finish();
}

/// End to end through the writer: `n` tasks each submit one change and
/// wait for its commit; one iteration is one such round.
fn writer_round(c: &mut Criterion) {
    let mut group = c.benchmark_group("group_commit_round");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    for (fs, dir) in bench_dirs() {
        let path = dir.join("writer");
        let _ = std::fs::remove_dir_all(&path);
        let store = SqliteStore::open(&path, Durability::Full).expect("open");
        let gc = GroupCommit::start(Box::new(store)).expect("start");
        let mut tick: i64 = 0;
        for submitters in [1usize, 16, 128] {
            group.throughput(Throughput::Elements(submitters as u64));
            group.bench_function(BenchmarkId::new(fs, submitters), |b| {
                b.iter(|| {
                    tick += 1;
                    let t = tick;
                    rt.block_on(async {
                        let mut tasks = Vec::with_capacity(submitters);
                        for i in 0..submitters {
                            let gc = gc.clone();
                            tasks.push(tokio::spawn(async move {
                                let s = session(&format!("w;{i}"), t);
                                gc.submit(vec![Change::PutSession(Arc::new(s))]).await
                            }));
                        }
                        for task in tasks {
                            task.await.expect("task").expect("submit");
                        }
                    })
                })
            });
        }
        let st = gc.stats();
        eprintln!(
            "group_commit_round/{fs}: {} requests in {} commits ({:.1} requests per commit)",
            st.requests,
            st.commits,
            st.requests as f64 / st.commits.max(1) as f64
        );
        drop(rt.block_on(gc.shutdown()));
        let _ = std::fs::remove_dir_all(&dir);
    }
    group.finish();
}

/// Start-up: loading every open session back (rows read and blobs
/// decoded); sessions/s extrapolates to the time to recover a million.
fn recovery(c: &mut Criterion) {
    const SESSIONS: usize = 10_000;
    let mut group = c.benchmark_group("recovery");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::Elements(SESSIONS as u64));
    for (fs, dir) in bench_dirs() {
        let path = dir.join("recovery");
        let _ = std::fs::remove_dir_all(&path);
        let mut store = SqliteStore::open(&path, Durability::Relaxed).expect("open");
        let all: Vec<Change> = (0..SESSIONS)
            .map(|i| Change::PutSession(Arc::new(session(&format!("pgw1;{i};rec"), 1))))
            .collect();
        for chunk in all.chunks(1000) {
            store.apply(chunk).expect("seed");
        }
        group.bench_function(BenchmarkId::new(fs, SESSIONS), |b| {
            b.iter(|| {
                let open = store.open_sessions().expect("load");
                assert_eq!(open.len(), SESSIONS);
                open
            })
        });
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
    group.finish();
}

/// The blob: what the stores write (tagged MessagePack, store/blob.rs)
/// against the JSON they wrote before and CBOR, encode and decode.
/// Formats that are not self-describing (bincode, postcard) cannot decode
/// the records (untagged enums, `serde_json::Value` attributes, optional
/// fields left out), so they are not candidates. The record_format bench
/// counts the same under callgrind.
fn blob_format(c: &mut Criterion) {
    let mut s = session("pgw1;1;bench", 1_763_000_000_123);
    if let Some(d) = s.last_decision.as_mut() {
        Arc::make_mut(d).inputs = pcrf::session::record::DecisionInputs::none();
    }
    let json = serde_json::to_vec(&s).expect("json");
    let stored = pcrf::store::encode_session(&s).expect("binary");
    let mut cbor = Vec::new();
    ciborium::into_writer(&s, &mut cbor).expect("cbor");
    eprintln!(
        "blob size: json {} bytes, stored {} bytes, cbor {} bytes",
        json.len(),
        stored.len(),
        cbor.len()
    );
    let mut group = c.benchmark_group("blob");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    group.bench_function("json_encode", |b| {
        b.iter(|| serde_json::to_vec(&s).expect("json"))
    });
    group.bench_function("stored_encode", |b| {
        b.iter(|| pcrf::store::encode_session(&s).expect("binary"))
    });
    group.bench_function("json_decode", |b| {
        b.iter(|| serde_json::from_slice::<GxSession>(&json).expect("json"))
    });
    group.bench_function("stored_decode", |b| {
        b.iter(|| rmp_serde::from_slice::<GxSession>(&stored[1..]).expect("binary"))
    });
    group.bench_function("cbor_encode", |b| {
        b.iter(|| {
            let mut out = Vec::with_capacity(cbor.len());
            ciborium::into_writer(&s, &mut out).expect("cbor");
            out
        })
    });
    group.bench_function("cbor_decode", |b| {
        b.iter(|| ciborium::from_reader::<GxSession, _>(&cbor[..]).expect("cbor"))
    });
    group.finish();
}

criterion_group!(benches, store_apply, writer_round, recovery, blob_format);
criterion_main!(benches);
