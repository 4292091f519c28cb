//! The embedded store's files against a careless operator, with the real
//! binary: a start whose shard files disagree (one deleted while the
//! others hold rows, a file of another store copied in) is refused with a
//! message naming the file, unless `--accept-missing-shards` says the loss
//! is known; database files deleted while the node runs fail every later
//! write (503 on the API, 5012 on Gx) and `/v1/ready` instead of being
//! acknowledged into unlinked files. And `/v1/ready` on a PostgreSQL
//! database turned read-only: 503 while writes are refused, 200 again once
//! they commit.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

fn store_section(data: &Path) -> String {
    format!("path = \"{}\"\nwriters = 2", data.display())
}

fn imsi(i: usize) -> String {
    format!("0010100000003{i:02}")
}

fn remove_database_files(data: &Path, file: &str) {
    for suffix in ["", "-wal", "-shm"] {
        let p = data.join(format!("{file}{suffix}"));
        if p.exists() {
            std::fs::remove_file(&p).expect("remove database file");
        }
    }
}

/// Copies a database file with its WAL (which may hold its last commits).
fn copy_database_files(from: &Path, to: &Path, file: &str) {
    for suffix in ["", "-wal"] {
        let p = from.join(format!("{file}{suffix}"));
        if p.exists() {
            std::fs::copy(&p, to.join(format!("{file}{suffix}"))).expect("copy database file");
        }
    }
}

/// Runs `pcrf serve` on `config` with `args`; the exit status and output if
/// it exits within 20 s, None (after killing it) if it is still serving.
fn serve_expecting_exit(config: &Path, args: &[&str]) -> Option<(bool, String)> {
    let out = scratch_dir("serve-out").join("out.log");
    let log = std::fs::File::create(&out).expect("log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pcrf"))
        .arg("serve")
        .arg("--config")
        .arg(config)
        .args(args)
        .stdout(Stdio::from(log.try_clone().expect("log")))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("start pcrf");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some((
                status.success(),
                std::fs::read_to_string(&out).unwrap_or_default(),
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

fn subscribers_found(p: &Pcrf, n: usize) -> usize {
    (0..n)
        .filter(|&i| {
            p.http("GET", &format!("/v1/subscribers/{}", imsi(i)), None)
                .0
                == 200
        })
        .count()
}

#[test]
fn a_start_with_shard_files_that_disagree_is_refused_unless_accepted() {
    let data = scratch_dir("shards").join("data");
    let mut p = Pcrf::start_with_store(Some(&store_section(&data)), "");
    for i in 0..30 {
        p.provision(&imsi(i), r#"{"plan":"basic"}"#);
    }
    assert_eq!(subscribers_found(&p, 30), 30);
    p.terminate();
    let shard1 = data.join("pcrf-shard-1.db");
    assert!(shard1.exists(), "two writers make two files");

    // pcrf.db deleted, pcrf-shard-1.db left: refused, naming the file.
    let saved = scratch_dir("shard0-copy");
    copy_database_files(&data, &saved, "pcrf.db");
    remove_database_files(&data, "pcrf.db");
    match serve_expecting_exit(&p.config, &[]) {
        Some((false, out)) => {
            assert!(out.contains("pcrf.db"), "{out}");
            assert!(out.contains("--accept-missing-shards"), "{out}");
        }
        Some((true, out)) => panic!("exited 0:\n{out}"),
        None => panic!("started with a shard file missing"),
    }
    assert!(
        !data.join("pcrf.db").exists(),
        "a refused start leaves the directory as it found it"
    );

    // Put back: it starts, everything there.
    copy_database_files(&saved, &data, "pcrf.db");
    p.restart();
    assert_eq!(subscribers_found(&p, 30), 30);
    p.terminate();

    // A shard file of another store copied in: refused.
    let other = scratch_dir("other").join("data");
    let mut q = Pcrf::start_with_store(Some(&store_section(&other)), "");
    q.provision(&imsi(99), r#"{"plan":"basic"}"#);
    q.terminate();
    remove_database_files(&data, "pcrf-shard-1.db");
    copy_database_files(&other, &data, "pcrf-shard-1.db");
    match serve_expecting_exit(&p.config, &[]) {
        Some((false, out)) => assert!(out.contains("another store"), "{out}"),
        Some((true, out)) => panic!("exited 0:\n{out}"),
        None => panic!("started with a shard file of another store"),
    }

    // pcrf-shard-1.db deleted (it held no profile: those are all in
    // shard 0): refused all the same, then accepted by the operator.
    remove_database_files(&data, "pcrf-shard-1.db");
    match serve_expecting_exit(&p.config, &[]) {
        Some((false, out)) => assert!(out.contains("pcrf-shard-1.db is missing"), "{out}"),
        Some((true, out)) => panic!("exited 0:\n{out}"),
        None => panic!("started with pcrf-shard-1.db missing"),
    }
    p.set_serve_args(&["--accept-missing-shards"]);
    p.restart();
    assert_eq!(subscribers_found(&p, 30), 30);
    assert!(p.log().contains("accept-missing-shards"), "{}", p.log());
    p.terminate();
    // Once accepted, the directory is whole again: a plain start works.
    p.set_serve_args(&[]);
    p.restart();
    assert_eq!(subscribers_found(&p, 30), 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_files_deleted_while_running_fail_writes_and_readiness() {
    let data = scratch_dir("deleted").join("data");
    let mut p = Pcrf::start_with_store(Some(&store_section(&data)), "");
    for i in 0..10 {
        p.provision(&imsi(i), r#"{"plan":"basic"}"#);
    }
    assert_eq!(p.http("GET", "/v1/ready", None).0, 200);
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;

    let files: Vec<PathBuf> = std::fs::read_dir(&data)
        .expect("list")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".db"))
        .collect();
    assert!(files.len() >= 2, "{files:?}");
    for f in &files {
        std::fs::remove_file(f).expect("remove");
    }

    // Every write from now on is refused, none acknowledged.
    let mut acknowledged = Vec::new();
    for i in 10..20 {
        let (st, body) = p.http(
            "PUT",
            &format!("/v1/subscribers/{}", imsi(i)),
            Some(r#"{"plan":"basic"}"#),
        );
        if st == 200 || st == 201 {
            acknowledged.push(imsi(i));
        } else {
            assert_eq!(st, 503, "{body}");
        }
    }
    for i in 0..10 {
        let sid = format!("pgw.test.local;deleted;{i}");
        let r = result_of(&pcef.ccr_i(&sid, &imsi(i)).await);
        if r == 2001 {
            acknowledged.push(sid);
        } else {
            assert_eq!(r, 5012);
        }
    }
    assert!(
        acknowledged.is_empty(),
        "acknowledged into deleted files: {acknowledged:?}"
    );
    let (st, body) = p.http("GET", "/v1/ready", None);
    assert_eq!(st, 503, "{body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("pcrf"),
        "{body}"
    );
    pcef.close().await;
    p.terminate();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_is_503_while_postgres_refuses_writes_and_200_once_they_commit() {
    let db = test_database("ready_readonly").await;
    let p = Pcrf::start_with_store(Some(&db.store_section()), "");
    p.provision(&imsi(0), r#"{"plan":"basic"}"#);
    assert_eq!(p.http("GET", "/v1/ready", None).0, 200);
    let admin = db.client().await;
    let name: String = admin
        .query_one("SELECT current_database()", &[])
        .await
        .expect("name")
        .get(0);
    let kick = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                WHERE datname = current_database() AND pid <> pg_backend_pid()";
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {name} SET default_transaction_read_only = on"
        ))
        .await
        .expect("read-only");
    admin.batch_execute(kick).await.expect("kick");

    // Reconnected read-only: writes refused, and ready says so (it may
    // answer 503 meanwhile for the reconnection itself).
    let refused = |p: &Pcrf| {
        let (st, _) = p.http(
            "PUT",
            &format!("/v1/subscribers/{}", imsi(1)),
            Some(r#"{"plan":"basic"}"#),
        );
        st
    };
    eventually_async(
        p.waiting_for("/v1/ready to answer 503 naming the read-only store"),
        Duration::from_secs(20),
        || {
            let (st, body) = p.http("GET", "/v1/ready", None);
            (st == 503 && body["error"].as_str().unwrap_or("").contains("read-only")).then_some(())
        },
    )
    .await;
    assert_eq!(refused(&p), 503);
    assert_eq!(p.http("GET", "/v1/ready", None).0, 503);

    admin
        .batch_execute(&format!(
            "ALTER DATABASE {name} RESET default_transaction_read_only"
        ))
        .await
        .expect("writable");
    admin.batch_execute(kick).await.expect("kick");
    eventually_async(
        p.waiting_for("/v1/ready to answer 200 once the store is writable"),
        Duration::from_secs(20),
        || (p.http("GET", "/v1/ready", None).0 == 200).then_some(()),
    )
    .await;
    let st = refused(&p);
    assert!(st == 200 || st == 201, "{st}");
}

#[test]
fn ready_is_503_while_the_embedded_store_is_full_and_200_once_a_write_commits() {
    let data = scratch_dir("full").join("data");
    let store = format!(
        "path = \"{}\"\nwriters = 1\nmax_size_mb = 1",
        data.display()
    );
    let p = Pcrf::start_with_store(Some(&store), "");
    assert_eq!(p.http("GET", "/v1/ready", None).0, 200);
    // 50 KB profiles until the 1 MB cap refuses one.
    let blob = "x".repeat(50_000);
    let mut stored = 0;
    let mut refused = None;
    for i in 0..60 {
        let (st, body) = p.http(
            "PUT",
            &format!("/v1/subscribers/{}", imsi(i)),
            Some(&format!(r#"{{"attributes":{{"blob":"{blob}"}}}}"#)),
        );
        if st == 503 {
            refused = Some(body);
            break;
        }
        assert!(st == 200 || st == 201, "{st} {body}");
        stored += 1;
    }
    let refused = refused.expect("the cap refused a write");
    assert!(stored > 0, "{refused}");
    let (st, body) = p.http("GET", "/v1/ready", None);
    assert_eq!(st, 503, "ready while writes fail: {body}");
    assert!(
        body["error"].as_str().unwrap_or("").contains("disk full"),
        "{body}"
    );
    // Room made: the delete commits, and the node is ready again.
    let (st, body) = p.http("DELETE", &format!("/v1/subscribers/{}", imsi(0)), None);
    assert!(st == 200 || st == 204, "{st} {body}");
    let (st, body) = p.http("GET", "/v1/ready", None);
    assert_eq!(st, 200, "{body}");
}
