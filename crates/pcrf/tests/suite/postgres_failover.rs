//! A PostgreSQL switch-over under load: `pcrf serve` on a primary with a
//! synchronous standby, the connection string naming both; the primary is
//! stopped hard in the middle of a stream of usage reports and the standby
//! promoted. Nothing acknowledged may be lost or counted twice, and the
//! node must find the new primary by itself within 10 s of the promotion,
//! its cluster heartbeat and provisioning feed too (the string names the
//! standby first: they must pick the primary before and after).
//! Starts its own two PostgreSQL servers with the machine's binaries
//! (initdb, pg_basebackup, pg_ctl), as the postgres user when run as root.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::*;

/// One report's size: 1 MB, as the PCEF reports it.
const REPORT: u64 = 1_000_000;
/// Subscribers, one session each, each its own stream of reports.
const SUBSCRIBERS: usize = 6;
/// The goal: service back within this long after the promotion.
const RESUME_WITHIN: Duration = Duration::from_secs(10);
/// How long there is no primary. Patroni promotes once the dead primary's
/// leader key expires (up to `ttl`, 20 s in deploy/cluster/patroni/); 8 s
/// of retried reports is long enough for the store's reconnect backoff to
/// reach its ceiling (5 s), so the measured resumption includes the
/// longest wait it adds.
const WITHOUT_PRIMARY: Duration = Duration::from_secs(8);

/// The newest PostgreSQL server binaries installed, if any.
fn server_binaries() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin)
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Two free loopback ports (held together so they differ).
fn two_free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    let b = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    (
        a.local_addr().expect("addr").port(),
        b.local_addr().expect("addr").port(),
    )
}

/// A primary and its standby in a scratch directory, stopped on drop.
struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    as_postgres: bool,
    primary_port: u16,
    standby_port: u16,
}

impl Cluster {
    fn data(&self, which: &str) -> PathBuf {
        self.dir.join(which)
    }

    /// Runs a server binary (as postgres when we are root); panics with its
    /// output when it fails.
    fn run(&self, tool: &str, args: &[&str]) {
        let exe = self.bin.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let out = cmd
            .args(args)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {tool}: {e}"));
        assert!(
            out.status.success(),
            "{tool} {args:?} failed ({}):\n{}{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
    }

    fn logs(&self) -> String {
        ["primary.log", "standby.log"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
                format!("--- {f} ---\n{text}")
            })
            .collect()
    }

    /// Starts the servers: the primary waits for the standby's flush
    /// before each commit returns (synchronous_commit = on with the
    /// standby named in synchronous_standby_names).
    fn start(bin: PathBuf) -> Cluster {
        let dir = scratch_dir("pg-failover");
        let as_postgres = running_as_root();
        if as_postgres {
            let st = Command::new("chown")
                .args(["postgres"])
                .arg(&dir)
                .status()
                .expect("chown");
            assert!(st.success(), "cannot hand {} to postgres", dir.display());
        }
        let (primary_port, standby_port) = two_free_ports();
        let c = Cluster {
            bin,
            dir,
            as_postgres,
            primary_port,
            standby_port,
        };
        let primary = c.data("primary");
        let primary_s = primary.to_str().expect("utf-8 path");
        c.run(
            "initdb",
            &["-D", primary_s, "-U", "pcrf", "--auth=trust", "-E", "UTF8"],
        );
        // fsync off: the test stops processes, never the machine, so the
        // OS keeps what was written; the shared test machine's disk is
        // spared. What is tested is the replication, not the disk.
        append(
            &primary.join("postgresql.conf"),
            &format!(
                "listen_addresses = '127.0.0.1'\nport = {primary_port}\n\
                 unix_socket_directories = '{dir}'\nwal_level = replica\n\
                 max_wal_senders = 4\nsynchronous_commit = on\n\
                 synchronous_standby_names = 'standby1'\nfsync = off\n",
                dir = c.dir.display()
            ),
        );
        c.run(
            "pg_ctl",
            &[
                "-D",
                primary_s,
                "-l",
                "primary.log",
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        let standby = c.data("standby");
        let standby_s = standby.to_str().expect("utf-8 path");
        let port = primary_port.to_string();
        c.run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "pcrf",
                "-D",
                standby_s,
                "-R",
                "-X",
                "stream",
                "--checkpoint=fast",
            ],
        );
        // The standby reports itself as standby1 (the walreceiver's
        // application_name is the cluster_name). Once promoted it has no
        // standby of its own, so it must not wait for one.
        append(
            &standby.join("postgresql.conf"),
            &format!(
                "port = {standby_port}\ncluster_name = 'standby1'\n\
                 synchronous_standby_names = ''\n"
            ),
        );
        c.run(
            "pg_ctl",
            &[
                "-D",
                standby_s,
                "-l",
                "standby.log",
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
        c
    }

    /// A connection string naming the standby first: the store must pick
    /// the server that accepts writes, not the first one.
    fn both_hosts(&self) -> String {
        format!(
            "host=127.0.0.1,127.0.0.1 port={},{} user=pcrf dbname=postgres",
            self.standby_port, self.primary_port
        )
    }

    async fn query_primary(&self, sql: &str) -> Vec<String> {
        query_at(self.primary_port, sql).await
    }

    /// Runs `sql` on the promoted standby, the new primary.
    async fn query_new_primary(&self, sql: &str) -> Vec<String> {
        query_at(self.standby_port, sql).await
    }

    /// The standby streams and is synchronous (commits wait for it).
    async fn wait_synchronous(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let states = self
                .query_primary(
                    "SELECT application_name || ':' || sync_state FROM pg_stat_replication",
                )
                .await;
            if states.iter().any(|s| s == "standby1:sync") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the standby never became synchronous: {states:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Each subscriber's monthly usage as stored on the promoted standby,
    /// read with the PCRF's own store.
    async fn stored_usage(&self) -> Vec<u64> {
        use pcrf::store::postgres::{PostgresOptions, PostgresStore};
        use pcrf::store::Store;
        let url = format!(
            "host=127.0.0.1 port={} user=pcrf dbname=postgres",
            self.standby_port
        );
        tokio::task::spawn_blocking(move || {
            let mut store = PostgresStore::open(PostgresOptions::new(url))
                .expect("open the store on the new primary");
            (0..SUBSCRIBERS)
                .map(|i| {
                    store
                        .usage(&imsi(i))
                        .expect("read usage")
                        .map_or(0, |u| u.used("monthly"))
                })
                .collect()
        })
        .await
        .expect("reader")
    }

    fn stop_primary_hard(&self) {
        let d = self.data("primary");
        self.run(
            "pg_ctl",
            &["-D", d.to_str().expect("utf-8"), "-m", "immediate", "stop"],
        );
    }

    fn promote_standby(&self) {
        let d = self.data("standby");
        self.run(
            "pg_ctl",
            &[
                "-D",
                d.to_str().expect("utf-8"),
                "-w",
                "-t",
                "60",
                "promote",
            ],
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for which in ["primary", "standby"] {
            let d = self.data(which);
            if d.join("postmaster.pid").exists() {
                let exe = self.bin.join("pg_ctl");
                let d = d.display().to_string();
                let args = ["-D", d.as_str(), "-m", "immediate", "stop"];
                let _ = if self.as_postgres {
                    Command::new("runuser")
                        .args(["-u", "postgres", "--"])
                        .arg(&exe)
                        .args(args)
                        .output()
                } else {
                    Command::new(&exe).args(args).output()
                };
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn append(file: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(file)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    f.write_all(text.as_bytes()).expect("append");
}

/// The first column (text) of each row `sql` returns on the server at
/// `port`.
async fn query_at(port: u16, sql: &str) -> Vec<String> {
    let url = format!("host=127.0.0.1 port={port} user=pcrf dbname=postgres");
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect to the server");
    tokio::spawn(conn);
    client
        .query(sql, &[])
        .await
        .expect("query")
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect()
}

/// Whether `GET /v1/cluster` shows the node alive.
fn alive_in_cluster(p: &Pcrf) -> bool {
    let (st, c) = p.http("GET", "/v1/cluster", None);
    st == 200
        && c["nodes"].as_array().is_some_and(|nodes| {
            nodes
                .iter()
                .any(|n| n["name"] == "pcrf.test.local" && n["alive"] == true)
        })
}

/// A profile provisioned through the node, then deleted on the database
/// `delete_on` names (as another node would): the node drops it only if
/// its provisioning feed listens on the server that takes the writes.
async fn feed_follows(p: &Pcrf, imsi: &str, delete_on: u16) -> bool {
    p.provision(imsi, r#"{"plan":"basic"}"#);
    query_at(
        delete_on,
        &format!("WITH d AS (DELETE FROM subscribers WHERE imsi = '{imsi}' RETURNING imsi) SELECT imsi FROM d"),
    )
    .await;
    poll_until_async(Duration::from_secs(10), || {
        p.http("GET", &format!("/v1/subscribers/{imsi}"), None).0 == 404
    })
    .await
}

fn imsi(i: usize) -> String {
    format!("00101000000{i:04}")
}

/// What one subscriber's stream of reports saw.
#[derive(Default)]
struct Stream {
    acknowledged: u64,
    refused: u64,
    /// When each acknowledged answer arrived.
    acked_at: Vec<Instant>,
    /// Paused by `hold`, with no report in flight.
    parked: bool,
}

/// One usage report of `REPORT` octets as CCR-U number `number`.
async fn report(pcef: &Pcef, session: &str, number: u32) -> u32 {
    let cca = pcef
        .ccr_u(session, number, |b| {
            b.i32(diameter::dict::avp::EVENT_TRIGGER, 33).group(
                diameter::dict::avp::USAGE_MONITORING_INFORMATION,
                |g| {
                    g.bytes(diameter::dict::avp::MONITORING_KEY, b"total")
                        .group(diameter::dict::avp::USED_SERVICE_UNIT, |u| {
                            u.u64(diameter::dict::avp::CC_TOTAL_OCTETS, REPORT);
                        });
                },
            );
        })
        .await;
    result_of(&cca)
}

/// Sends reports on `session` one after another until `stop`, each one
/// again (as a PCEF does after an error answer, once `hold` is clear) until
/// it is acknowledged. `stop` only keeps the next report from being sent:
/// the one in flight is never abandoned, so the store must end up holding
/// exactly the acknowledged ones. Gives up (the test then fails) only at
/// `give_up`.
async fn report_stream(
    pcef: Arc<Pcef>,
    session: String,
    stop: Arc<AtomicBool>,
    hold: Arc<AtomicBool>,
    give_up: Instant,
    seen: Arc<Mutex<Stream>>,
) {
    let mut number = 1;
    while !stop.load(Ordering::Relaxed) {
        loop {
            if Instant::now() > give_up {
                return;
            }
            let code = report(&pcef, &session, number).await;
            {
                let mut s = seen.lock().expect("lock");
                if code == 2001 {
                    s.acknowledged += 1;
                    s.acked_at.push(Instant::now());
                } else {
                    s.refused += 1;
                }
            }
            if code == 2001 {
                break;
            }
            assert_eq!(code, 5012, "session {session}: unexpected answer");
            // The PCEF's pause before sending a refused report again (pacing).
            tokio::time::sleep(Duration::from_millis(50)).await;
            if hold.load(Ordering::Relaxed) {
                seen.lock().expect("lock").parked = true;
                while hold.load(Ordering::Relaxed) && Instant::now() < give_up {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                seen.lock().expect("lock").parked = false;
            }
        }
        number += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promoting_the_standby_under_load_loses_nothing_acknowledged() {
    let Some(bin) = server_binaries() else {
        eprintln!(
            "SKIPPED: no PostgreSQL server binaries under /usr/lib/postgresql \
             (scripts/install-test-deps.sh installs them)"
        );
        return;
    };
    let cluster = Cluster::start(bin);
    cluster.wait_synchronous().await;

    let (usage, _) = usage_section(USAGE_FILE);
    let mut p = Pcrf::start_with_store(
        Some(&format!(
            "kind = \"postgres\"\nurl = \"{}\"\nwriters = 2",
            cluster.both_hosts()
        )),
        &usage,
    );
    let (st, ready) = p.http("GET", "/v1/ready", None);
    assert_eq!(st, 200, "{ready}\n{}", p.log());
    // The node's heartbeat and provisioning feed, on connections of their
    // own, find the primary although the string names the standby first.
    assert!(
        poll_until_async(Duration::from_secs(10), || alive_in_cluster(&p)).await,
        "the node's heartbeat is not written on the primary:\n{}",
        p.log()
    );
    assert!(
        feed_follows(&p, "001019999999901", cluster.primary_port).await,
        "the provisioning feed does not listen on the primary:\n{}",
        p.log()
    );
    let pcef = Arc::new(Pcef::connect(p.diameter, "pgw.test.local").await);
    let mut sessions = Vec::new();
    for i in 0..SUBSCRIBERS {
        p.provision(&imsi(i), r#"{"plan":"basic"}"#);
        let sid = format!("pgw.test.local;failover;{i}");
        assert_eq!(result_of(&pcef.ccr_i(&sid, &imsi(i)).await), 2001);
        sessions.push(sid);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let hold = Arc::new(AtomicBool::new(false));
    let give_up = Instant::now() + Duration::from_secs(90);
    let streams: Vec<Arc<Mutex<Stream>>> = (0..SUBSCRIBERS).map(|_| Arc::default()).collect();
    let tasks: Vec<_> = sessions
        .iter()
        .zip(&streams)
        .map(|(sid, seen)| {
            tokio::spawn(report_stream(
                pcef.clone(),
                sid.clone(),
                stop.clone(),
                hold.clone(),
                give_up,
                seen.clone(),
            ))
        })
        .collect();
    let acknowledged = |streams: &[Arc<Mutex<Stream>>]| -> u64 {
        streams
            .iter()
            .map(|s| s.lock().expect("lock").acknowledged)
            .sum()
    };

    // Load on the primary first.
    let deadline = Instant::now() + Duration::from_secs(30);
    while acknowledged(&streams) < 100 {
        assert!(
            Instant::now() < deadline,
            "no load before the switch-over:\n{}",
            p.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The primary dies with reports in flight (each stream sends the next
    // as soon as the last is answered); the refused ones are sent again
    // and again while there is no primary, and no new one follows (stop).
    // Later the standby is promoted, as Patroni does once the leader key
    // expires. Just before, the retries pause (hold) and those in flight
    // are answered, so nothing is written between the promotion and the
    // look at the new primary below.
    let stopped_at = Instant::now();
    cluster.stop_primary_hard();
    stop.store(true, Ordering::Relaxed);
    tokio::time::sleep(WITHOUT_PRIMARY).await;
    hold.store(true, Ordering::Relaxed);
    // Every stream either paused by the hold or done (stop): none has a
    // report in flight.
    eventually_async(
        "every report stream paused or done",
        Duration::from_secs(30),
        || {
            streams
                .iter()
                .zip(&tasks)
                .all(|(s, t)| t.is_finished() || s.lock().expect("lock").parked)
                .then_some(())
        },
    )
    .await;
    cluster.promote_standby();
    let promoted_at = Instant::now();

    // What the new primary holds before the node writes again: every
    // report acknowledged so far, plus at most the one each stream has
    // waiting (its COMMIT may have reached the standby without an answer).
    // A change acknowledged but not committed would show here, before a
    // later write of the same row could cover it up.
    let acked_so_far: Vec<u64> = streams
        .iter()
        .map(|s| s.lock().expect("lock").acknowledged)
        .collect();
    let stored = cluster.stored_usage().await;
    for (i, acked) in acked_so_far.iter().enumerate() {
        let held = stored[i];
        assert!(
            held >= acked * REPORT && held <= (acked + 1) * REPORT,
            "subscriber {i}: the new primary holds {held} octets, {acked} reports of {REPORT} \
             were acknowledged"
        );
    }
    hold.store(false, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("report stream");
    }
    let refused: u64 = streams
        .iter()
        .map(|s| s.lock().expect("lock").refused)
        .sum();
    assert!(
        refused > 0,
        "no report was in flight when the primary died: the load did not cross the switch-over"
    );
    let all_acks: Vec<Instant> = streams
        .iter()
        .flat_map(|s| s.lock().expect("lock").acked_at.clone())
        .collect();
    let Some(first_after) = all_acks.iter().filter(|t| **t > promoted_at).min().copied() else {
        panic!(
            "no report acknowledged after the promotion:\n{}\n{}",
            p.log(),
            cluster.logs()
        );
    };
    let last_before = all_acks
        .iter()
        .filter(|t| **t <= stopped_at)
        .max()
        .copied()
        .expect("acknowledged before the stop");
    let resumed = first_after - promoted_at;
    eprintln!(
        "switch-over: service resumed {} ms after the promotion; no acknowledgement for {} ms \
         (primary stopped {} ms before the promotion); {} reports acknowledged, {} answered 5012 \
         and sent again",
        resumed.as_millis(),
        (first_after - last_before).as_millis(),
        (promoted_at - stopped_at).as_millis(),
        acknowledged(&streams),
        refused
    );
    assert!(
        resumed <= RESUME_WITHIN,
        "service resumed {} ms after the promotion (goal: within {} s):\n{}",
        resumed.as_millis(),
        RESUME_WITHIN.as_secs(),
        p.log()
    );

    // The heartbeat and the provisioning feed moved to the new primary by
    // themselves: a heartbeat written there since the promotion, the node
    // alive again, and a change made there seen by the node.
    let mut heartbeat_after = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !heartbeat_after && Instant::now() < deadline {
        let since = promoted_at.elapsed().as_millis();
        let ages = cluster
            .query_new_primary(
                "SELECT (EXTRACT(EPOCH FROM (now() - heartbeat_at)) * 1000)::BIGINT::TEXT \
                 FROM cluster_nodes WHERE name = 'pcrf.test.local'",
            )
            .await;
        heartbeat_after = ages
            .iter()
            .any(|a| a.parse::<u128>().is_ok_and(|age| age < since));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        heartbeat_after,
        "no heartbeat on the new primary:\n{}",
        p.log()
    );
    assert!(
        poll_until_async(Duration::from_secs(10), || alive_in_cluster(&p)).await,
        "the node is not alive again after the promotion:\n{}",
        p.log()
    );
    assert!(
        feed_follows(&p, "001019999999902", cluster.standby_port).await,
        "the provisioning feed does not follow the promotion:\n{}",
        p.log()
    );

    // Every acknowledged report is counted, once: in the node's memory,
    // and in the new primary's store (a restarted node reads it back).
    let used = |p: &Pcrf, i: usize| {
        let (st, v) = p.http("GET", &format!("/v1/subscribers/{}/usage", imsi(i)), None);
        assert_eq!(st, 200, "{v}");
        v["accumulators"]["monthly"]["used"].as_u64()
    };
    let acked: Vec<u64> = streams
        .iter()
        .map(|s| s.lock().expect("lock").acknowledged)
        .collect();
    for (i, n) in acked.iter().enumerate() {
        assert_eq!(used(&p, i), Some(n * REPORT), "subscriber {i} in memory");
    }
    match Arc::try_unwrap(pcef) {
        Ok(pcef) => pcef.close().await,
        Err(_) => panic!("a report stream still holds the PCEF"),
    }
    p.restart();
    for (i, n) in acked.iter().enumerate() {
        assert_eq!(
            used(&p, i),
            Some(n * REPORT),
            "subscriber {i} as stored on the new primary:\n{}",
            p.log()
        );
    }
    let (st, ready) = p.http("GET", "/v1/ready", None);
    assert_eq!(st, 200, "{ready}");

    // The sessions go on from the new primary.
    let pcef = Pcef::connect(p.diameter, "pgw.test.local").await;
    for (i, sid) in sessions.iter().enumerate() {
        let next = u32::try_from(acked[i] + 1).expect("few reports");
        assert_eq!(report(&pcef, sid, next).await, 2001, "{}", p.log());
        assert_eq!(used(&p, i), Some((acked[i] + 1) * REPORT));
    }
    pcef.close().await;
}
