//! Proof of the durability promise against a process crash: a child process
//! (this test binary, re-run on one ignored test) writes through the
//! group-commit writer and prints each change once it is acknowledged; the
//! parent kills it with SIGKILL at a random point, reopens the store and
//! checks that every acknowledged change is there. With usage, each batch
//! is a session and its subscriber's usage row carrying the same counter:
//! after the kill both rows must hold the same value (both or neither).
//! With several shards (one writer and one file each), every shard's
//! acknowledged changes survive, each row in its subscriber's shard.

use super::config::Durability;
use super::fixtures::{session, usage, TestDir};
use super::group_commit::GroupCommitOptions;
use super::sqlite_layout::open_shards;
use super::{shard, Change, ShardedWriter, Store};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const DIR_ENV: &str = "PCRF_STORE_CRASH_CHILD_DIR";
const MODE_ENV: &str = "PCRF_STORE_CRASH_CHILD_MODE";
/// Set: each batch also writes the usage row of the session's key.
const PAIRS_ENV: &str = "PCRF_STORE_CRASH_CHILD_PAIRS";
/// The number of shards (writers) the child and the parent open.
const SHARDS_ENV: &str = "PCRF_STORE_CRASH_CHILD_SHARDS";
const TASKS: usize = 8;
/// Each task rewrites a small set of rows, so updates (not only inserts)
/// must survive too.
const KEYS_PER_TASK: i64 = 16;

/// The child: writes until killed. Ignored in normal runs; the parent runs
/// it with `--ignored --exact`.
#[test]
#[ignore = "child process of acknowledged_changes_survive_kill_9"]
fn crash_child() {
    let dir = std::env::var(DIR_ENV).expect("run by the crash test with a directory");
    let durability = match std::env::var(MODE_ENV).as_deref() {
        Ok("relaxed") => Durability::Relaxed,
        _ => Durability::Full,
    };
    let pairs = std::env::var_os(PAIRS_ENV).is_some();
    let shards = std::env::var(SHARDS_ENV)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let (stores, _) =
        open_shards(std::path::Path::new(&dir), shards, durability, false).expect("open");
    let stores = stores
        .into_iter()
        .map(|s| Box::new(s) as Box<dyn Store>)
        .collect();
    let gc = ShardedWriter::start(stores, false, GroupCommitOptions::default()).expect("start");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let gc = gc.clone();
            tasks.push(tokio::spawn(async move {
                for i in 1_i64.. {
                    let id = format!("t{t}-k{}", i % KEYS_PER_TASK);
                    // Each key its own subscriber: spread over the shards.
                    let s = session(&id, &id, i);
                    let mut batch = vec![Change::PutSession(Arc::new(s))];
                    if pairs {
                        // The usage row is keyed like the session, so the
                        // parent can pair them; the counter is the same.
                        batch.push(Change::PutUsage(Arc::new(usage(&id, i as u64))));
                    }
                    gc.submit(batch).await.expect("submit");
                    // Written straight to the pipe (not the test harness's
                    // captured output), one whole line per acknowledgement.
                    let mut out = std::io::stdout().lock();
                    writeln!(out, "ACK {id} {i}").expect("stdout");
                    out.flush().expect("flush");
                }
            }));
        }
        for t in tasks {
            t.await.expect("task");
        }
    });
}

/// A number that differs between runs, to kill the child at a different
/// point each time (no RNG dependency needed for this).
fn run_entropy() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (std::process::id() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn crash_and_check(durability: Durability, mode: &str, pairs: bool, shards: usize) {
    let dir = TestDir::new(&format!("crash-{mode}-{pairs}-{shards}"));
    let exe = std::env::current_exe().expect("test binary path");
    let mut command = Command::new(exe);
    if pairs {
        command.env(PAIRS_ENV, "1");
    }
    let mut child = command
        .args([
            "store::crash_test::crash_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_ENV, dir.path())
        .env(SHARDS_ENV, shards.to_string())
        .env(MODE_ENV, mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Kill after a random number of acknowledgements (at least a few
    // batches in), then wait a random fraction of a millisecond more.
    let entropy = run_entropy();
    let kill_after = 50 + (entropy % 2000) as usize;
    let mut acked: HashMap<String, i64> = HashMap::new();
    let mut seen = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while seen < kill_after && Instant::now() < deadline {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
            if record_ack(&line, &mut acked) {
                seen += 1;
            }
        }
    }
    std::thread::sleep(Duration::from_micros((entropy >> 20) % 1000));
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    // Lines written before the kill are still in the pipe.
    for line in rx.iter() {
        record_ack(&line, &mut acked);
    }
    reader.join().expect("reader thread");
    assert!(
        acked.len() >= 50.min(TASKS * KEYS_PER_TASK as usize),
        "child acknowledged too little before the deadline: {}",
        acked.len()
    );
    let (mut stores, moved) =
        open_shards(dir.path(), shards, durability, false).expect("reopen after kill -9");
    assert_eq!(moved, None, "every row was written to its shard");
    assert_eq!(stores.len(), shards);
    for (id, i) in &acked {
        // In the shard of its subscriber (its own id here).
        let store = &mut stores[shard::of_subscriber(id, shards)];
        let stored = store.session(id).expect("read").map(|s| s.updated_ms);
        assert!(
            stored.is_some_and(|s| s >= *i),
            "{mode}/{shards}: {id} acknowledged at #{i}, stored {stored:?}"
        );
    }
    let (mut open, mut usage_rows) = (Vec::new(), Vec::new());
    for store in &mut stores {
        open.extend(store.open_sessions().expect("recovery load"));
        assert_eq!(store.skipped_corrupt(), 0);
        usage_rows.extend(store.usage_records().expect("usage load"));
        assert_eq!(store.skipped_corrupt(), 0);
    }
    assert!(open.len() >= acked.len());
    if !pairs {
        assert!(usage_rows.is_empty());
        return;
    }
    // Every session has its usage row at the same counter, and no usage
    // row exists without its session: the batch was all or nothing, also
    // for the batch the kill interrupted.
    let sessions: HashMap<&str, i64> = open.iter().map(|s| (&*s.id, s.updated_ms)).collect();
    let used: HashMap<&str, i64> = usage_rows
        .iter()
        .map(|u| {
            let used = u.accumulators.get("monthly").map(|a| a.used).unwrap_or(0);
            (&*u.subscriber, i64::try_from(used).unwrap_or(-1))
        })
        .collect();
    assert_eq!(sessions, used, "{mode}: session and usage rows disagree");
}

/// Parses "ACK <id> <n>", keeping the highest n per id; false for any
/// other line (harness output, a line cut by the kill).
fn record_ack(line: &str, acked: &mut HashMap<String, i64>) -> bool {
    let mut parts = line.split(' ');
    let (Some("ACK"), Some(id), Some(n), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let Ok(n) = n.parse::<i64>() else {
        return false;
    };
    let e = acked.entry(id.to_string()).or_insert(n);
    *e = (*e).max(n);
    true
}

#[test]
fn acknowledged_changes_survive_kill_9() {
    crash_and_check(Durability::Full, "full", false, 1);
    crash_and_check(Durability::Relaxed, "relaxed", false, 1);
}

#[test]
fn session_and_usage_of_one_batch_survive_kill_9_together() {
    crash_and_check(Durability::Full, "full", true, 1);
    crash_and_check(Durability::Relaxed, "relaxed", true, 1);
}

#[test]
fn acknowledged_changes_of_every_shard_survive_kill_9() {
    crash_and_check(Durability::Full, "full", true, 4);
    crash_and_check(Durability::Relaxed, "relaxed", true, 3);
}
