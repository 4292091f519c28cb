//! The PostgreSQL store against a real server (PCRF_TEST_DATABASE_URL, set
//! by scripts/test.sh): round trip, no commit for unchanged rows, a batch
//! in one round trip, purge, recovery from a killed connection and from a
//! database outage, connection lifetime, and the profiler's counts. Each
//! test works in its own schema, so they run in parallel.

use crate::support;

use pcrf::session::{GxSession, SessionState};
use pcrf::store::postgres::migrations::{latest, MIGRATIONS};
use pcrf::store::postgres::{migrate, PostgresOptions, PostgresStore};
use pcrf::store::{Change, Conflicted, Store, StoreError};
use pcrf::subscriber::Subscriber;
use pcrf::usage::{Accumulator, SubscriberUsage};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::eventually;

fn base_url() -> String {
    std::env::var("PCRF_TEST_DATABASE_URL").unwrap_or_else(|_| {
        panic!(
            "PCRF_TEST_DATABASE_URL is not set: run scripts/test.sh (it starts PostgreSQL \
             and creates the pcrf_test database), or set it to a database you may write"
        )
    })
}

/// A schema of its own, dropped at the end; `url` puts it first on the
/// search path of every connection the store opens.
struct TestSchema {
    rt: tokio::runtime::Runtime,
    admin: tokio_postgres::Client,
    name: String,
    url: String,
}

impl TestSchema {
    fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .subsec_nanos();
        let name = format!(
            "test_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            nanos
        );
        let base = base_url();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let admin = rt.block_on(async {
            let (client, conn) = tokio_postgres::connect(&base, tokio_postgres::NoTls)
                .await
                .expect("connect to PCRF_TEST_DATABASE_URL");
            tokio::spawn(conn);
            client
                .batch_execute(&format!("CREATE SCHEMA {name}"))
                .await
                .expect("create schema");
            client
        });
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-csearch_path%3D{name}");
        TestSchema {
            rt,
            admin,
            name,
            url,
        }
    }

    fn options(&self) -> PostgresOptions {
        PostgresOptions::new(self.url.clone())
    }

    fn open(&self) -> PostgresStore {
        PostgresStore::open(self.options()).expect("open store")
    }

    fn query_i64(&self, sql: &str) -> i64 {
        self.rt.block_on(async {
            self.admin
                .query_one(sql, &[])
                .await
                .expect("query")
                .get::<_, i64>(0)
        })
    }

    /// Runs SQL as the test's administrator (outside the store).
    fn run(&self, sql: &str) {
        self.rt
            .block_on(self.admin.batch_execute(sql))
            .expect("administrator SQL");
    }

    /// Ends the backend `pid` and returns once it is gone from
    /// pg_stat_activity: its process, and so its socket, is closed then.
    fn terminate(&self, pid: i32) {
        self.rt.block_on(async {
            self.admin
                .execute("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .expect("terminate");
        });
        eventually(
            format!("backend {pid} to end"),
            Duration::from_secs(10),
            || {
                (self.query_i64(&format!(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"
                )) == 0)
                    .then_some(())
            },
        );
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        let sql = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name);
        let _ = self.rt.block_on(self.admin.batch_execute(&sql));
    }
}

fn session(id: &str, subscriber: &str, updated_ms: i64) -> GxSession {
    let mut s = GxSession::new(id, subscriber, "pgw1.example", "example", 1_700_000_000_000);
    s.imsi = Some(subscriber.into());
    s.apn = Some("internet".into());
    s.ue_ipv4 = Some(std::net::Ipv4Addr::new(10, 1, 2, 3));
    s.rat_type = Some(1004);
    s.location = Some("8200f110000100f1100001a2b3c4".into());
    s.updated_ms = updated_ms;
    s
}

fn subscriber(imsi: &str) -> Subscriber {
    Subscriber {
        imsi: imsi.into(),
        msisdn: Some("4915112345678".into()),
        plan: Some("basic".into()),
        services: vec!["vip".into()],
        attributes: [("blocked".to_string(), serde_json::json!(false))]
            .into_iter()
            .collect(),
        ..Default::default()
    }
}

fn usage(subscriber: &str, used: u64) -> SubscriberUsage {
    SubscriberUsage {
        subscriber: subscriber.into(),
        accumulators: [(
            "monthly".into(),
            Accumulator {
                used,
                topup: 0,
                period_start_ms: 1_700_000_000_000,
                period_end_ms: Some(1_702_592_000_000),
            },
        )]
        .into_iter()
        .collect(),
        ..Default::default()
    }
}

thread_local! {
    /// The last record each test put per row: a new record of a row takes
    /// its version (which the store moved if it committed), as the
    /// services do when they change the record in memory.
    static LAST_SESSION: std::cell::RefCell<std::collections::HashMap<String, Arc<GxSession>>> =
        Default::default();
    static LAST_USAGE: std::cell::RefCell<std::collections::HashMap<String, Arc<SubscriberUsage>>> =
        Default::default();
}

fn put_usage(u: SubscriberUsage) -> Change {
    LAST_USAGE.with(|m| {
        let mut m = m.borrow_mut();
        if let Some(prev) = m.get(&*u.subscriber) {
            u.version.set(prev.version.get());
        }
        let u = Arc::new(u);
        m.insert(u.subscriber.to_string(), u.clone());
        Change::PutUsage(u)
    })
}

fn put(s: GxSession) -> Change {
    LAST_SESSION.with(|m| {
        let mut m = m.borrow_mut();
        if let Some(prev) = m.get(&*s.id) {
            s.version.set(prev.version.get());
        }
        let s = Arc::new(s);
        m.insert(s.id.to_string(), s.clone());
        Change::PutSession(s)
    })
}

#[test]
fn round_trip_reopen_and_migrate() {
    let db = TestSchema::new();
    let s1 = session("gx;1", "001010000000001", 1);
    let mut s2 = session("gx;2", "001010000000002", 2);
    s2.state = SessionState::Closed;
    s2.closed_ms = Some(5);
    let sub = subscriber("001010000000001");
    {
        let mut st = db.open();
        assert_eq!(st.schema_version().expect("version"), latest());
        let rows = st
            .apply(&[
                put(s1.clone()),
                put(s2.clone()),
                Change::PutSubscriber(Arc::new(sub.clone())),
            ])
            .expect("apply");
        assert_eq!(rows, 3);
    }
    // Migrating again is a no-op at the same version.
    assert_eq!(migrate(&db.url).expect("migrate"), latest());
    assert_eq!(
        db.query_i64(&format!(
            "SELECT count(*) FROM {}.schema_migrations",
            db.name
        )),
        // One row per version applied (the numbers need not be contiguous).
        i64::try_from(MIGRATIONS.len()).expect("few migrations")
    );
    let mut st = db.open();
    assert_eq!(st.open_sessions().expect("load"), vec![s1.clone()]);
    assert_eq!(st.session("gx;2").expect("get"), Some(s2));
    assert_eq!(st.session("gx;3").expect("get"), None);
    assert_eq!(st.subscribers().expect("subs"), vec![sub.clone()]);
    assert_eq!(st.subscriber(&sub.imsi).expect("sub"), Some(sub.clone()));
    let rows = st
        .apply(&[
            Change::delete_session("gx;1", "1"),
            Change::DeleteSubscriber(sub.imsi.clone()),
            Change::delete_session("never-existed", "1"),
        ])
        .expect("delete");
    assert_eq!(rows, 2);
    assert!(st.open_sessions().expect("load").is_empty());
    assert!(st.subscribers().expect("subs").is_empty());
}

#[test]
fn recovery_pages_through_more_than_one_page() {
    let db = TestSchema::new();
    let mut st = db.open();
    let changes: Vec<Change> = (0..2500)
        .map(|i| put(session(&format!("gx;{i:05}"), "001010000000001", i)))
        .collect();
    for chunk in changes.chunks(500) {
        assert_eq!(st.apply(chunk).expect("apply"), 500);
    }
    let open = st.open_sessions().expect("load");
    assert_eq!(open.len(), 2500);
    assert_eq!(&*open[0].id, "gx;00000");
    assert_eq!(&*open[2499].id, "gx;02499");
}

#[test]
fn unchanged_rows_do_not_commit_but_a_session_write_always_moves_its_version() {
    let db = TestSchema::new();
    let mut st = db.open();
    let profiler = st.profiler();
    profiler.set_enabled(true);
    let sub = [Change::PutSubscriber(Arc::new(subscriber(
        "001010000000009",
    )))];
    assert_eq!(st.apply(&sub).expect("first"), 1);
    assert_eq!(st.apply(&sub).expect("again"), 0);
    assert_eq!(
        st.apply(&[Change::delete_session("missing", "1")])
            .expect("delete missing"),
        0
    );
    let snap = profiler.snapshot();
    let calls = |name: &str| {
        snap.statements
            .iter()
            .find(|q| q.name == name)
            .map(|q| q.calls)
            .unwrap_or(0)
    };
    // An unchanged profile and a missing delete: checked, rolled back.
    assert_eq!(calls("begin"), 3);
    assert_eq!(calls("commit"), 1);
    assert_eq!(calls("rollback"), 2);
    // A session write is a compare-and-set on the row's version: the same
    // record written again moves the version (its node holds the newest).
    let s = Arc::new(session("gx;u", "001010000000009", 7));
    assert_eq!(
        st.apply(&[Change::PutSession(s.clone())]).expect("insert"),
        1
    );
    assert_eq!(
        st.apply(&[Change::PutSession(s.clone())]).expect("again"),
        1
    );
    assert_eq!(s.version.get(), 2);
    assert_eq!(
        st.session("gx;u").expect("get").map(|r| r.version.get()),
        Some(2)
    );
}

#[test]
fn purge_removes_only_old_closed_sessions_in_chunks() {
    let db = TestSchema::new();
    let mut st = db.open();
    let changes: Vec<Change> = (0..10)
        .map(|i| {
            let mut s = session(&format!("gx;{i}"), "001010000000001", i);
            if i < 7 {
                s.state = SessionState::Closed;
                s.closed_ms = Some(100 + i);
            }
            put(s)
        })
        .collect();
    assert_eq!(st.apply(&changes).expect("apply"), 10);
    assert_eq!(st.purge_closed(105, 3).expect("purge"), 3);
    assert_eq!(st.purge_closed(105, 3).expect("purge"), 2);
    assert_eq!(st.purge_closed(105, 3).expect("purge"), 0);
    assert!(st.session("gx;5").expect("get").is_some());
    assert!(st.session("gx;4").expect("get").is_none());
    assert_eq!(st.open_sessions().expect("load").len(), 3);
}

/// A TCP relay in front of PostgreSQL that delays and counts every chunk
/// the client sends (so round trips are countable) and can play "database
/// down" by cutting every connection and refusing new ones.
struct Relay {
    port: u16,
    down: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    sends: Arc<AtomicU64>,
}

impl Relay {
    fn start(delay: Duration) -> Self {
        let cfg = tokio_postgres::Config::from_str(&base_url()).expect("url");
        let host = match cfg.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".into(),
        };
        let upstream = (host, cfg.get_ports().first().copied().unwrap_or(5432));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let down = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let sends = Arc::new(AtomicU64::new(0));
        let (d, c, n) = (down.clone(), conns.clone(), sends.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if d.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect((upstream.0.as_str(), upstream.1)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut all = c.lock().expect("relay list");
                    all.push(client.try_clone().expect("clone"));
                    all.push(server.try_clone().expect("clone"));
                }
                let (c2, s2) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                let n = n.clone();
                std::thread::spawn(move || pump(client, server, delay, Some(n)));
                std::thread::spawn(move || pump(s2, c2, Duration::ZERO, None));
            }
        });
        Relay {
            port,
            down,
            conns,
            sends,
        }
    }

    /// Chunks read from clients so far.
    fn sends(&self) -> u64 {
        self.sends.load(Ordering::SeqCst)
    }

    fn url(&self, db: &TestSchema) -> String {
        let cfg = tokio_postgres::Config::from_str(&db.url).expect("url");
        let user = cfg.get_user().unwrap_or("pcrf_test");
        let password = cfg
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .unwrap_or_default();
        let dbname = cfg.get_dbname().unwrap_or("pcrf_test");
        format!(
            "postgres://{user}:{password}@127.0.0.1:{}/{dbname}?options=-csearch_path%3D{}",
            self.port, db.name
        )
    }

    fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
        if down {
            for s in self.conns.lock().expect("relay list").drain(..) {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, delay: Duration, count: Option<Arc<AtomicU64>>) {
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(c) = &count {
            c.fetch_add(1, Ordering::SeqCst);
        }
        if !delay.is_zero() {
            // The relay's added latency, when a test asks for a slow link.
            std::thread::sleep(delay);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

#[test]
fn a_batch_of_100_changes_is_one_round_trip() {
    let db = TestSchema::new();
    // Schema first, directly (the relay makes the migration slow).
    drop(db.open());
    let delay = Duration::from_millis(40);
    let relay = Relay::start(delay);
    let mut opts = PostgresOptions::new(relay.url(&db));
    opts.timeout = Duration::from_secs(30);
    let mut st = PostgresStore::open(opts).expect("open through relay");
    let batch: Vec<Change> = (0..100)
        .map(|i| put(session(&format!("gx;rt{i}"), "001010000000001", i)))
        .collect();
    let t = Instant::now();
    assert_eq!(st.apply(&batch).expect("apply"), 100);
    let took = t.elapsed();
    // BEGIN + 100 statements in one flight, then COMMIT: a few delayed
    // chunks, where one round trip per statement would be 100 or more.
    assert!(
        took < delay * 12,
        "100 changes took {took:?} with {delay:?} per client send: not pipelined"
    );
    assert_eq!(
        db.query_i64(&format!("SELECT count(*) FROM {}.sessions", db.name)),
        100
    );
}

#[test]
fn a_batch_sure_to_change_a_row_sends_commit_with_its_statements() {
    let db = TestSchema::new();
    drop(db.open());
    let relay = Relay::start(Duration::from_millis(5));
    let mut opts = PostgresOptions::new(relay.url(&db));
    opts.timeout = Duration::from_secs(30);
    let mut st = PostgresStore::open(opts).expect("open through relay");
    let updated = || {
        db.query_i64(&format!(
            "SELECT updated_ms FROM {}.sessions WHERE id = 'gx;c'",
            db.name
        ))
    };
    // Writes session gx;c as of `updated_ms`: (rows changed, client sends).
    let mut write = |updated_ms: i64| {
        let before = relay.sends();
        let rows = st
            .apply(&[put(session("gx;c", "001010000000001", updated_ms))])
            .expect("apply");
        (rows, relay.sends() - before)
    };
    // A session write changes its row or aborts the transaction (a
    // compare-and-set): COMMIT always travels with the statements, one
    // send, for a new session, a changed one and the same bytes again.
    assert_eq!(write(1), (1, 1));
    assert_eq!(write(2), (1, 1));
    assert_eq!(updated(), 2);
    assert_eq!(write(2), (1, 1));
    assert_eq!(write(3), (1, 1));
    assert_eq!(updated(), 3);
}

/// Makes the database refuse any usage row of subscriber "poison".
fn refuse_usage_of_poison(db: &TestSchema) {
    db.run(&format!(
        "ALTER TABLE {}.usage ADD CONSTRAINT no_poison CHECK (subscriber <> 'poison')",
        db.name
    ));
}

#[test]
fn a_batch_committed_with_its_statements_is_still_all_or_nothing() {
    let db = TestSchema::new();
    let mut st = db.open();
    refuse_usage_of_poison(&db);
    assert_eq!(
        st.apply(&[put(session("gx;p", "poison", 1))])
            .expect("first"),
        1
    );
    // Certain (the session changes), so COMMIT is pipelined; the usage row
    // is refused, and the server must turn that COMMIT into a rollback.
    let r = st.apply(&[
        put(session("gx;p", "poison", 2)),
        put_usage(usage("poison", 10)),
    ]);
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
    let kept = st.session("gx;p").expect("get").expect("still there");
    assert_eq!(kept.updated_ms, 1);
    assert_eq!(st.usage("poison").expect("get"), None);
    // After a failed batch the store no longer claims to know the row, and
    // the next change lands.
    assert_eq!(
        st.apply(&[put(session("gx;p", "poison", 3))])
            .expect("next"),
        1
    );
    assert_eq!(st.session("gx;p").expect("get").expect("row").updated_ms, 3);
}

#[test]
fn reconnects_after_its_connection_is_terminated() {
    let db = TestSchema::new();
    let mut st = db.open();
    st.apply(&[put(session("gx;a", "1", 1))])
        .expect("before termination");
    let pid = st.backend_pid().expect("pid");
    db.terminate(pid);
    assert_eq!(
        st.apply(&[put(session("gx;b", "1", 2))])
            .expect("after termination, on a new connection"),
        1
    );
    assert!(st.reconnects() >= 1);
    assert_ne!(st.backend_pid().expect("pid"), pid);
    assert_eq!(st.open_sessions().expect("load").len(), 2);
}

/// A COMMIT whose answer was lost with the connection: the store's one
/// retry finds the rows one version on. When they hold exactly what the
/// batch wrote (the lost COMMIT went through) the batch is committed once
/// and reported committed, not a conflict: a conflict would make the node
/// handle its requests again on top of their own effects. When another
/// writer got there first, it stays a conflict.
#[test]
fn a_retry_after_a_lost_commit_recognises_its_own_write() {
    let db = TestSchema::new();
    let mut a = db.open();
    a.set_owner("pcrf-a");
    // The lost COMMIT is played by a second connection of the same node
    // writing the same records at the same versions.
    let mut lost = db.open();
    lost.set_owner("pcrf-a");
    let s = Arc::new(session("gx;lost", "001010000000009", 1));
    let u = Arc::new(usage("001010000000009", 10));
    a.apply(&[Change::PutSession(s.clone()), Change::PutUsage(u.clone())])
        .expect("first write");
    assert_eq!((s.version.get(), u.version.get()), (1, 1));

    let next = |updated_ms: i64, used: u64| {
        let mut s2 = (*s).clone();
        s2.updated_ms = updated_ms;
        s2.last_request_number = 1;
        let mut u2 = (*u).clone();
        u2.accumulators.get_mut("monthly").expect("monthly").used = used;
        (Arc::new(s2), Arc::new(u2))
    };
    let (s2, u2) = next(2, 30);
    let (s2_lost, u2_lost) = ((*s2).clone(), (*u2).clone());
    lost.apply(&[
        Change::PutSession(Arc::new(s2_lost)),
        Change::PutUsage(Arc::new(u2_lost)),
    ])
    .expect("the COMMIT that went through");
    // A's connection dies before it hears the answer.
    let pid = a.backend_pid().expect("pid");
    db.terminate(pid);
    assert_eq!(
        a.apply(&[Change::PutSession(s2.clone()), Change::PutUsage(u2.clone())])
            .expect("its own committed write is recognised, not a conflict"),
        2
    );
    assert!(
        a.reconnects() >= 1,
        "the batch was retried on a new connection"
    );
    assert_eq!((s2.version.get(), u2.version.get()), (2, 2));
    let stored = a.usage("001010000000009").expect("read").expect("stored");
    assert_eq!(stored.version.get(), 2, "written once, not twice");
    assert_eq!(
        stored.accumulators.get("monthly").expect("monthly").used,
        30
    );
    // The records go on from there: the next write is at version 2.
    let (s3, u3) = {
        let mut s3 = (*s2).clone();
        s3.updated_ms = 3;
        let mut u3 = (*u2).clone();
        u3.accumulators.get_mut("monthly").expect("monthly").used = 40;
        (Arc::new(s3), Arc::new(u3))
    };
    a.apply(&[Change::PutSession(s3.clone()), Change::PutUsage(u3.clone())])
        .expect("the next write follows on");
    assert_eq!((s3.version.get(), u3.version.get()), (3, 3));

    // Another writer's row at the next version is not mistaken for ours.
    let mut other = (*s3).clone();
    other.updated_ms = 4;
    let mut other_usage = (*u3).clone();
    other_usage
        .accumulators
        .get_mut("monthly")
        .expect("monthly")
        .used = 45;
    lost.set_owner("pcrf-b");
    lost.apply(&[
        Change::PutSession(Arc::new(other)),
        Change::PutUsage(Arc::new(other_usage)),
    ])
    .expect("the other node's write");
    let mut mine = (*s3).clone();
    mine.updated_ms = 5;
    let mut mine_usage = (*u3).clone();
    mine_usage
        .accumulators
        .get_mut("monthly")
        .expect("monthly")
        .used = 50;
    let pid = a.backend_pid().expect("pid");
    db.terminate(pid);
    match a.apply(&[
        Change::PutSession(Arc::new(mine)),
        Change::PutUsage(Arc::new(mine_usage)),
    ]) {
        Err(StoreError::Conflict(rows)) => assert_eq!(rows.len(), 2, "{rows:?}"),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let stored = a.usage("001010000000009").expect("read").expect("stored");
    assert_eq!(
        stored.accumulators.get("monthly").expect("monthly").used,
        45,
        "the other write stands"
    );
}

#[test]
fn database_outage_fails_fast_then_recovers_without_loss() {
    let db = TestSchema::new();
    drop(db.open());
    let relay = Relay::start(Duration::ZERO);
    let mut opts = PostgresOptions::new(relay.url(&db));
    opts.timeout = Duration::from_millis(500);
    opts.backoff_max = Duration::from_millis(200);
    let mut st = PostgresStore::open(opts).expect("open through relay");
    assert_eq!(
        st.apply(&[put(session("gx;acked", "1", 1))]).expect("up"),
        1
    );
    relay.set_down(true);
    for i in 0..5 {
        let t = Instant::now();
        match st.apply(&[put(session(&format!("gx;down{i}"), "1", 1))]) {
            Err(StoreError::Unavailable(_)) => {}
            other => panic!("expected unavailable while down, got {other:?}"),
        }
        assert!(
            t.elapsed() < Duration::from_millis(1500),
            "a call while down took {:?}",
            t.elapsed()
        );
        assert!(!st.is_connected());
    }
    relay.set_down(false);
    let t = Instant::now();
    loop {
        match st.apply(&[put(session("gx;after", "1", 2))]) {
            Ok(n) => {
                assert_eq!(n, 1);
                break;
            }
            Err(StoreError::Unavailable(_)) if t.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("did not recover: {e}"),
        }
    }
    let mut ids: Vec<String> = st
        .open_sessions()
        .expect("load")
        .into_iter()
        .map(|s| s.id.to_string())
        .collect();
    ids.sort();
    assert_eq!(ids, vec!["gx;acked".to_string(), "gx;after".to_string()]);
}

#[test]
fn connection_is_replaced_after_its_lifetime() {
    let db = TestSchema::new();
    let mut opts = db.options();
    opts.lifetime_min = Duration::from_millis(300);
    opts.lifetime_max = Duration::from_millis(400);
    let mut st = PostgresStore::open(opts).expect("open");
    let first = st.backend_pid().expect("pid");
    assert_eq!(st.reconnects(), 0);
    // Deliberate: the connection's lifetime (300..400 ms) elapses.
    std::thread::sleep(Duration::from_millis(450));
    assert_eq!(st.apply(&[put(session("gx;l", "1", 1))]).expect("apply"), 1);
    // At least once (a slow machine may age the new one too).
    assert!(st.reconnects() >= 1);
    assert_ne!(st.backend_pid().expect("pid"), first);
}

#[test]
fn profiler_counts_each_statement_only_when_on() {
    let db = TestSchema::new();
    let mut st = db.open();
    let profiler = st.profiler();
    let api_handle = profiler.clone();
    st.apply(&[put(session("gx;p0", "1", 1))]).expect("apply");
    assert!(
        profiler.snapshot().statements.is_empty(),
        "off records nothing"
    );
    api_handle.set_enabled(true);
    let batch: Vec<Change> = (0..5)
        .map(|i| put(session(&format!("gx;p{i}"), "1", 2)))
        .collect();
    assert_eq!(st.apply(&batch).expect("apply"), 5);
    assert_eq!(st.open_sessions().expect("load").len(), 5);
    assert!(st.session("gx;p1").expect("get").is_some());
    st.purge_closed(0, 10).expect("purge");
    let snap = profiler.snapshot();
    assert!(snap.enabled);
    let stat = |name: &str| {
        snap.statements
            .iter()
            .find(|q| q.name == name)
            .unwrap_or_else(|| panic!("{name} not profiled: {snap:?}"))
    };
    // One set-based statement for the batch's five sessions.
    assert_eq!(stat("upsert_session").calls, 1);
    assert_eq!(stat("upsert_session").rows, 5);
    assert_eq!(stat("begin").calls, 1);
    assert_eq!(stat("commit").calls, 1);
    assert_eq!(stat("load_open_sessions").calls, 1);
    assert_eq!(stat("load_open_sessions").rows, 5);
    assert_eq!(stat("get_session").calls, 1);
    assert_eq!(stat("purge_closed").calls, 1);
    assert!(stat("commit").sql.contains("COMMIT"));
    // Sorted by total time, shares add up to the whole.
    let totals: Vec<u64> = snap
        .statements
        .iter()
        .map(|q| q.exec_us_total + q.fetch_us_total)
        .collect();
    assert!(totals.windows(2).all(|w| w[0] >= w[1]), "{totals:?}");
    let share: f64 = snap.statements.iter().map(|q| q.share_pct).sum();
    assert!(
        snap.total_us == 0 || (share - 100.0).abs() < 0.01,
        "{share}"
    );
    api_handle.set_enabled(false);
    st.apply(&[put(session("gx;p9", "1", 3))]).expect("apply");
    let calls = |s: &pcrf::store::postgres::ProfileSnapshot| -> Vec<(&'static str, u64)> {
        s.statements.iter().map(|q| (q.name, q.calls)).collect()
    };
    assert_eq!(calls(&profiler.snapshot()), calls(&snap));
}

#[test]
fn newer_schema_is_refused() {
    let db = TestSchema::new();
    drop(db.open());
    db.rt.block_on(async {
        db.admin
            .execute(
                &format!(
                    "INSERT INTO {}.schema_migrations (version, description) VALUES (99, 'future')",
                    db.name
                ),
                &[],
            )
            .await
            .expect("bump");
    });
    match PostgresStore::open(db.options()) {
        Err(StoreError::Unavailable(m)) => assert!(m.contains("newer"), "{m}"),
        other => panic!("expected refusal, got {other:?}"),
    }
}

/// The way `pcrf serve` uses it: opened from async code through the
/// configuration, driven by the group-commit writer; while the database is
/// down requests fail within the bound, and every request that was
/// acknowledged is in the database afterwards.
#[test]
fn behind_group_commit_nothing_acknowledged_is_lost_across_an_outage() {
    use pcrf::store::group_commit::GroupCommitOptions;
    use pcrf::store::{open_shards, ShardedWriter, StoreConfig, StoreKind};
    let db = TestSchema::new();
    drop(db.open());
    let relay = Relay::start(Duration::ZERO);
    let cfg = StoreConfig {
        kind: StoreKind::Postgres,
        url: Some(relay.url(&db)),
        timeout_ms: 500,
        // Several connections, as on a server with cores: the outage and
        // the recovery are every shard's.
        writers: Some(3),
        ..StoreConfig::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let opened = open_shards(&cfg).expect("open in async code");
        assert_eq!(opened.shards.len(), 3);
        let health = opened.pg.expect("postgres has handles").connection;
        assert!(health.is_up());
        let gc = Arc::new(
            ShardedWriter::start(opened.shards, opened.shared, GroupCommitOptions::default())
                .expect("start writers"),
        );
        let acked = Arc::new(Mutex::new(Vec::<String>::new()));
        let wave = |tag: &'static str, n: usize| {
            let (gc, acked) = (gc.clone(), acked.clone());
            async move {
                let tasks: Vec<_> = (0..n)
                    .map(|i| {
                        let (gc, acked) = (gc.clone(), acked.clone());
                        tokio::spawn(async move {
                            let id = format!("gx;{tag}{i}");
                            // Its own subscriber: spread over the shards.
                            let r = gc.submit(vec![put(session(&id, &id, 1))]).await;
                            if r.is_ok() {
                                acked.lock().expect("acked").push(id);
                            }
                            r
                        })
                    })
                    .collect();
                let mut ok = 0;
                for t in tasks {
                    match t.await.expect("task") {
                        Ok(()) => ok += 1,
                        Err(StoreError::Unavailable(_)) => {}
                        Err(e) => panic!("unexpected error {e}"),
                    }
                }
                ok
            }
        };
        assert_eq!(wave("up", 50).await, 50);
        let commits = gc.stats().commits;
        assert!(
            commits < 50,
            "{commits} commits for 50 requests: not grouped"
        );
        relay.set_down(true);
        let t = Instant::now();
        assert_eq!(wave("down", 20).await, 0, "nothing acknowledged while down");
        assert!(!health.is_up(), "readiness must see the outage");
        assert!(health.failures() >= 1);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        relay.set_down(false);
        let t = Instant::now();
        while wave("back", 1).await == 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "did not recover");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(wave("again", 20).await, 20);
        assert!(health.is_up());
        assert!(health.reconnects() >= 1);
        let gc = Arc::try_unwrap(gc).unwrap_or_else(|_| panic!("writer still shared"));
        let mut stores = gc.shutdown().await.expect("shutdown");
        let store = &mut stores[0];
        let stored: std::collections::HashSet<String> = store
            .open_sessions()
            .expect("load")
            .into_iter()
            .map(|s| s.id.to_string())
            .collect();
        let acked = acked.lock().expect("acked").clone();
        assert!(acked.len() >= 71, "{}", acked.len());
        for id in &acked {
            assert!(stored.contains(id), "acknowledged {id} lost");
        }
        drop(stores);
    });
}

/// Writers of several shards on one database, with the purge running
/// meanwhile: every request commits (no deadlock between the connections,
/// no lock wait past the timeout), a subscriber's session and usage stay
/// together, and recovery reads each row once.
#[test]
fn shard_writers_on_one_database_never_deadlock() {
    use pcrf::store::group_commit::GroupCommitOptions;
    use pcrf::store::{open_shards, ShardedWriter, StoreConfig, StoreKind};
    let db = TestSchema::new();
    drop(db.open());
    let cfg = StoreConfig {
        kind: StoreKind::Postgres,
        url: Some(db.url.clone()),
        writers: Some(4),
        ..StoreConfig::default()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let opened = open_shards(&cfg).expect("open");
        assert!(opened.shared);
        let w = ShardedWriter::start(opened.shards, true, GroupCommitOptions::default())
            .expect("start");
        const SUBSCRIBERS: usize = 40;
        const ROUNDS: i64 = 15;
        let mut tasks = Vec::new();
        for t in 0..SUBSCRIBERS {
            let w = w.clone();
            tasks.push(tokio::spawn(async move {
                let key = format!("0010100000{t:05}");
                // What this task last wrote per row, as a node holds it.
                let mut sessions: std::collections::HashMap<String, Arc<GxSession>> =
                    Default::default();
                let mut last_usage: Option<Arc<SubscriberUsage>> = None;
                for i in 1..=ROUNDS {
                    let mut s = session(&format!("gx;{t}-{}", i % 3), &key, i);
                    if i % 5 == 0 {
                        // Closed long ago: the purge's prey, written while
                        // it runs.
                        s.state = SessionState::Closed;
                        s.closed_ms = Some(1);
                    }
                    if let Some(prev) = sessions.get(&*s.id) {
                        s.version.set(prev.version.get());
                    }
                    let s = Arc::new(s);
                    sessions.insert(s.id.to_string(), s.clone());
                    let u = usage(&key, i as u64);
                    if let Some(prev) = &last_usage {
                        u.version.set(prev.version.get());
                    }
                    let u = Arc::new(u);
                    last_usage = Some(u.clone());
                    w.submit(vec![Change::PutSession(s), Change::PutUsage(u)])
                        .await
                        .expect("every write commits");
                }
            }));
        }
        let purger = {
            let w = w.clone();
            tokio::spawn(async move {
                let mut purged = 0;
                for _ in 0..20 {
                    purged += w.purge_closed(1_000).await.expect("purge");
                    // Paces the purges so they interleave with the writers.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                purged
            })
        };
        for t in tasks {
            t.await.expect("task");
        }
        purger.await.expect("purger");
        let st = w.stats();
        assert_eq!(st.errors, 0, "{st:?}");
        let busy = (0..4)
            .filter(|&i| w.shard(i).is_some_and(|g| g.stats().commits > 0))
            .count();
        assert!(busy >= 3, "the subscribers spread over the shards: {busy}");
        let mut stores = w.shutdown().await.expect("shutdown");
        let usage_rows = stores[0].usage_records().expect("usage");
        assert_eq!(usage_rows.len(), SUBSCRIBERS);
        assert!(usage_rows
            .iter()
            .all(|u| u.accumulators.get("monthly").expect("monthly").used == ROUNDS as u64));
    });
}

#[test]
fn usage_round_trip_pages_and_delete() {
    let db = TestSchema::new();
    let mut st = db.open();
    // More than one recovery page (1000 rows).
    let all: Vec<SubscriberUsage> = (0..1203)
        .map(|i| usage(&format!("0010100{i:08}"), i))
        .collect();
    for chunk in all.chunks(500) {
        let changes: Vec<Change> = chunk.iter().cloned().map(put_usage).collect();
        assert_eq!(st.apply(&changes).expect("apply"), chunk.len());
    }
    let mut st = db.open();
    assert_eq!(st.usage_records().expect("load"), all);
    assert_eq!(st.skipped_corrupt(), 0);
    assert_eq!(
        st.usage(&all[7].subscriber).expect("get"),
        Some(all[7].clone())
    );
    assert_eq!(st.usage("nobody").expect("get"), None);
    assert_eq!(
        st.apply(&[
            Change::DeleteUsage(all[7].subscriber.to_string()),
            Change::DeleteUsage("nobody".into()),
        ])
        .expect("delete"),
        1
    );
    assert_eq!(st.usage(&all[7].subscriber).expect("get"), None);
}

#[test]
fn usage_writes_are_compare_and_set_on_the_row_version() {
    let db = TestSchema::new();
    let mut st = db.open();
    let first = Arc::new(usage("001010000000009", 42));
    assert_eq!(
        st.apply(&[Change::PutUsage(first.clone())]).expect("first"),
        1
    );
    assert_eq!(first.version.get(), 1);
    let mut next = (*first).clone();
    next.accumulators.get_mut("monthly").expect("monthly").used = 43;
    let next = Arc::new(next);
    assert_eq!(
        st.apply(&[Change::PutUsage(next.clone())]).expect("next"),
        1
    );
    assert_eq!(next.version.get(), 2);
    // The first copy is stale now: refused, nothing written.
    assert!(matches!(
        st.apply(&[Change::PutUsage(Arc::new((*first).clone()))]),
        Err(StoreError::Conflict(_))
    ));
    let stored = st.usage("001010000000009").expect("get").expect("row");
    assert_eq!(stored, usage("001010000000009", 43));
    assert_eq!(stored.version.get(), 2);
}

#[test]
fn session_and_usage_of_one_batch_commit_together() {
    let db = TestSchema::new();
    let mut st = db.open();
    // The database refuses one usage row: the session written before it in
    // the same batch must not be committed either.
    refuse_usage_of_poison(&db);
    let r = st.apply(&[
        put(session("gx;a", "poison", 1)),
        put_usage(usage("poison", 10)),
    ]);
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "{r:?}");
    assert_eq!(st.session("gx;a").expect("get"), None);
    assert_eq!(st.usage("poison").expect("get"), None);
    // The store goes on; a good pair lands as one.
    assert_eq!(
        st.apply(&[
            put(session("gx;b", "001010000000001", 1)),
            put_usage(usage("001010000000001", 10)),
        ])
        .expect("good batch"),
        2
    );
    assert!(st.session("gx;b").expect("get").is_some());
    assert!(st.usage("001010000000001").expect("get").is_some());
}

#[test]
fn corrupt_usage_rows_are_skipped_and_counted() {
    let db = TestSchema::new();
    let mut st = db.open();
    st.apply(&[put_usage(usage("good", 1)), put_usage(usage("bad", 1))])
        .expect("apply");
    db.run(&format!(
        "UPDATE {}.usage SET data = '\\x7b'::bytea WHERE subscriber = 'bad'",
        db.name
    ));
    assert_eq!(st.usage_records().expect("load"), vec![usage("good", 1)]);
    assert_eq!(st.skipped_corrupt(), 1);
    assert!(matches!(st.usage("bad"), Err(StoreError::Corrupt(_))));
}

#[test]
fn a_schema_1_database_is_upgraded_in_place() {
    let db = TestSchema::new();
    // The database as the previous release left it: migration 1 only, with
    // a subscriber and sessions in it.
    let (version, description, sql) = pcrf::store::postgres::migrations::MIGRATIONS[0];
    // A session as an older build stored it: JSON.
    let old = session("gx;old", "001010000000001", 1);
    let old_json = serde_json::to_string(&old).expect("json");
    assert!(!old_json.contains('\''));
    db.rt.block_on(async {
        let n = &db.name;
        db.admin
            .batch_execute(&format!(
                "SET search_path TO {n};
                 CREATE TABLE schema_migrations (version INT PRIMARY KEY,
                     description TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now());
                 {sql}
                 INSERT INTO schema_migrations (version, description) VALUES ({version}, '{description}');
                 INSERT INTO subscribers (imsi, data) VALUES ('001010000000001',
                     convert_to('{{\"imsi\":\"001010000000001\"}}', 'UTF8'));
                 INSERT INTO sessions (id, subscriber, state, pcef_host, updated_ms, data)
                     VALUES ('gx;old', '001010000000001', 'open', 'pgw', 1,
                     convert_to('{old_json}', 'UTF8'));
                 INSERT INTO sessions (id, subscriber, state, pcef_host, updated_ms, data)
                     VALUES ('gx;bad', '001010000000001', 'open', 'pgw', 1,
                     convert_to('not json', 'UTF8'));
                 SET search_path TO DEFAULT;"
            ))
            .await
            .expect("schema 1");
    });
    let mut st = db.open();
    assert_eq!(st.schema_version().expect("version"), latest());
    // The JSON records were rewritten in the binary form (tag byte 1); the
    // one that is not a record was left as it was, and is still skipped.
    assert_eq!(
        db.query_i64(&format!(
            "SELECT count(*) FROM {n}.sessions WHERE get_byte(data, 0) = 1 AND id = 'gx;old'",
            n = db.name
        )) + db.query_i64(&format!(
            "SELECT count(*) FROM {n}.subscribers WHERE get_byte(data, 0) = 1",
            n = db.name
        )),
        2
    );
    assert_eq!(st.session("gx;old").expect("read"), Some(old.clone()));
    assert_eq!(st.open_sessions().expect("load"), vec![old]);
    assert_eq!(st.skipped_corrupt(), 1);
    assert_eq!(st.subscribers().expect("kept").len(), 1);
    assert!(st.usage_records().expect("empty").is_empty());
    assert_eq!(
        st.apply(&[put_usage(usage("001010000000001", 5))])
            .expect("write"),
        1
    );
}

/// Counts of what the profiler saw, by statement name.
fn profiled(profiler: &pcrf::store::postgres::QueryProfiler) -> impl Fn(&str) -> (u64, u64) {
    let snap = profiler.snapshot();
    move |name: &str| {
        snap.statements
            .iter()
            .find(|q| q.name == name)
            .map(|q| (q.calls, q.rows))
            .unwrap_or((0, 0))
    }
}

#[test]
fn a_mixed_batch_is_one_statement_per_table_and_operation() {
    let db = TestSchema::new();
    let mut st = db.open();
    let setup = [
        put(session("gx;keep", "001010000000001", 1)),
        put(session("gx;gone", "001010000000002", 1)),
        Change::PutSubscriber(Arc::new(subscriber("001010000000001"))),
        Change::PutSubscriber(Arc::new(subscriber("001010000000002"))),
        put_usage(usage("001010000000001", 1)),
        put_usage(usage("001010000000002", 1)),
    ];
    assert_eq!(st.apply(&setup).expect("setup"), 6);
    let profiler = st.profiler();
    profiler.set_enabled(true);
    // Every table gets puts and deletes; some rows are unchanged, some
    // deletes miss: only real changes count.
    let mut newer = subscriber("001010000000001");
    newer.plan = Some("gold".into());
    let mixed = [
        setup[0].clone(),                                   // 1 (version moves)
        Change::delete_session("gx;gone", "1"),             // 1
        put(session("gx;new", "001010000000003", 2)),       // 1
        Change::delete_session("gx;never", "1"),            // 0
        Change::PutSubscriber(Arc::new(newer.clone())),     // 1
        Change::DeleteSubscriber("001010000000002".into()), // 1
        put_usage(usage("001010000000001", 1)),             // 1 (version moves)
        put_usage(usage("001010000000003", 5)),             // 1
        Change::DeleteUsage("001010000000002".into()),      // 1
    ];
    assert_eq!(st.apply(&mixed).expect("mixed"), 8);
    let seen = profiled(&profiler);
    for name in [
        "upsert_session",
        "delete_session",
        "upsert_subscriber",
        "delete_subscriber",
        "upsert_usage",
        "delete_usage",
    ] {
        assert_eq!(seen(name).0, 1, "{name}: one statement for the batch");
    }
    assert_eq!(seen("upsert_session"), (1, 2));
    assert_eq!(seen("delete_session"), (1, 1));
    assert_eq!(seen("upsert_usage"), (1, 2));
    assert_eq!(seen("commit").0, 1);
    let mut open: Vec<String> = st
        .open_sessions()
        .expect("load")
        .into_iter()
        .map(|s| s.id.to_string())
        .collect();
    open.sort();
    assert_eq!(open, ["gx;keep", "gx;new"]);
    assert_eq!(st.subscribers().expect("subs"), vec![newer]);
    let usage_keys: Vec<String> = st
        .usage_records()
        .expect("usage")
        .into_iter()
        .map(|u| u.subscriber.to_string())
        .collect();
    assert_eq!(usage_keys, ["001010000000001", "001010000000003"]);
    // The same batch again: the deletes miss and the profile is identical
    // (nothing), but the session and usage records are written again, at
    // their next version (a compare-and-set always moves it).
    assert_eq!(st.apply(&mixed).expect("again"), 4);
    let seen = profiled(&profiler);
    assert_eq!(seen("commit").0, 2);
}

#[test]
fn changes_to_one_row_in_a_batch_keep_the_last() {
    let db = TestSchema::new();
    let mut st = db.open();
    // Not coalesced by a group-commit writer: the store must not hand a
    // set-based upsert the same row twice, and the last change wins.
    let rows = st
        .apply(&[
            put(session("gx;a", "1", 1)),
            put(session("gx;a", "1", 2)),
            put(session("gx;b", "1", 1)),
            Change::delete_session("gx;b", "1"),
            Change::DeleteUsage("1".into()),
            put_usage(usage("1", 9)),
        ])
        .expect("apply");
    assert_eq!(rows, 2);
    assert_eq!(
        st.session("gx;a").expect("get").map(|s| s.updated_ms),
        Some(2)
    );
    assert_eq!(st.session("gx;b").expect("get"), None);
    assert_eq!(st.usage("1").expect("get"), Some(usage("1", 9)));
}

#[test]
fn a_batch_of_more_than_1000_rows_per_table() {
    let db = TestSchema::new();
    let mut st = db.open();
    let profiler = st.profiler();
    profiler.set_enabled(true);
    let n = 1500;
    let key = |i: usize| format!("0010100{i:08}");
    let first: Vec<Change> = (0..n)
        .flat_map(|i| {
            [
                put(session(&format!("gx;big{i:05}"), &key(i), 1)),
                put_usage(usage(&key(i), 1)),
            ]
        })
        .collect();
    assert_eq!(st.apply(&first).expect("insert"), 2 * n);
    // A third of the sessions move, a third are deleted, the rest are
    // written unchanged (their versions move all the same); every usage
    // row moves.
    let second: Vec<Change> = (0..n)
        .flat_map(|i| {
            let s = match i % 3 {
                0 => put(session(&format!("gx;big{i:05}"), &key(i), 2)),
                1 => Change::delete_session(format!("gx;big{i:05}"), "1"),
                _ => put(session(&format!("gx;big{i:05}"), &key(i), 1)),
            };
            [s, put_usage(usage(&key(i), 2))]
        })
        .collect();
    assert_eq!(st.apply(&second).expect("update"), 2 * n);
    let seen = profiled(&profiler);
    assert_eq!(seen("upsert_session"), (2, n as u64 + 2 * (n as u64 / 3)));
    assert_eq!(seen("delete_session"), (1, n as u64 / 3));
    assert_eq!(seen("upsert_usage"), (2, 2 * n as u64));
    assert_eq!(seen("commit").0, 2);
    let open = st.open_sessions().expect("load");
    assert_eq!(open.len(), n - n / 3);
    for s in &open {
        let i: usize = s.id["gx;big".len()..].parse().expect("index");
        assert_ne!(i % 3, 1, "{} was deleted", s.id);
        assert_eq!(s.updated_ms, if i % 3 == 0 { 2 } else { 1 }, "{}", s.id);
    }
    let moved = open.iter().filter(|s| s.updated_ms == 2).count();
    assert_eq!(moved, n / 3);
    assert_eq!(
        st.usage(&key(n - 1)).expect("get"),
        Some(usage(&key(n - 1), 2))
    );
}

#[test]
fn session_pages_keep_room_for_in_place_updates() {
    let db = TestSchema::new();
    let _st = db.open();
    let options = db.rt.block_on(async {
        db.admin
            .query_one(
                &format!(
                    "SELECT COALESCE(array_to_string(reloptions, ','), '') FROM pg_class \
                     WHERE oid = '{}.sessions'::regclass",
                    db.name
                ),
                &[],
            )
            .await
            .expect("query")
            .get::<_, String>(0)
    });
    assert_eq!(options, "fillfactor=70");
}

#[test]
fn session_blobs_are_lz4_compressed_where_the_server_has_it() {
    let db = TestSchema::new();
    let mut st = db.open();
    let has_lz4 = db.query_i64(
        "SELECT count(*) FROM pg_settings \
         WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)",
    ) == 1;
    let method = |db: &TestSchema| {
        db.rt.block_on(async {
            db.admin
                .query_one(
                    &format!(
                        "SELECT attcompression::text FROM pg_attribute \
                         WHERE attrelid = '{}.sessions'::regclass AND attname = 'data'",
                        db.name
                    ),
                    &[],
                )
                .await
                .expect("query")
                .get::<_, String>(0)
        })
    };
    assert_eq!(method(&db), if has_lz4 { "l" } else { "" });
    // A session blob over the TOAST threshold is stored compressed, and
    // reads back whole.
    let mut s = session("gx;big", "1", 1);
    s.last_answer = Some(vec![0x5a; 3000].into());
    assert_eq!(st.apply(&[put(s.clone())]).expect("apply"), 1);
    assert!(
        db.query_i64(&format!(
            "SELECT pg_column_size(data)::bigint - octet_length(data) FROM {}.sessions",
            db.name
        )) < 0,
        "stored uncompressed"
    );
    assert_eq!(st.session("gx;big").expect("get"), Some(s));
}

fn event(seq: u64, subscriber: &str, sinks: &[&str]) -> Arc<pcrf::notify::Event> {
    Arc::new(pcrf::notify::Event::new(
        seq,
        1_795_000_000_000,
        "session.started",
        Some(subscriber),
        format!("session.started:gx;{seq}"),
        serde_json::json!({ "session": format!("gx;{seq}") }),
        sinks.iter().map(|s| Arc::from(*s)).collect(),
    ))
}

#[test]
fn outbox_rows_are_written_with_the_batch_acked_per_sink_and_reloaded_in_order() {
    let db = TestSchema::new();
    let mut st = db.open();
    let e1 = event(10, "001010000000001", &["crm", "bus"]);
    let e2 = event(11, "001010000000001", &["bus"]);
    let rows = st
        .apply(&[
            put(session("gx;10", "001010000000001", 1)),
            Change::PutEvent(e1.clone()),
            Change::PutEvent(e2.clone()),
        ])
        .expect("apply");
    assert_eq!(rows, 4, "the session and one row per event and sink");
    // Written again (a replay after a restart): nothing changes.
    assert_eq!(st.apply(&[Change::PutEvent(e1.clone())]).expect("again"), 0);
    let ack = |seq, sink: &str| Change::AckEvent {
        seq,
        sink: Arc::from(sink),
        subscriber: "001010000000001".into(),
        provisioning: false,
    };
    assert_eq!(st.apply(&[ack(10, "bus")]).expect("ack"), 1);
    drop(st);
    let mut st = db.open();
    let pending = st.pending_events().expect("outbox");
    let got: Vec<(u64, Vec<String>)> = pending
        .iter()
        .map(|e| (e.seq, e.sinks.iter().map(|s| s.to_string()).collect()))
        .collect();
    assert_eq!(
        got,
        vec![(10, vec!["crm".to_string()]), (11, vec!["bus".to_string()])]
    );
    assert_eq!(pending[0].body, e1.body, "the document, byte for byte");
    assert_eq!(
        st.apply(&[ack(10, "crm"), ack(11, "bus")]).expect("acks"),
        2
    );
    assert!(st.pending_events().expect("outbox").is_empty());
}

/// Two nodes on one database: a write from a copy older than the row is
/// refused as a conflict naming the row, and writes nothing; the node that
/// read the current row writes on top of it.
#[test]
fn a_write_from_a_stale_copy_is_a_conflict_and_writes_nothing() {
    let db = TestSchema::new();
    let mut a = db.open();
    a.set_owner("pcrf-a");
    let mut b = db.open();
    b.set_owner("pcrf-b");
    let first = Arc::new(session("gx;race", "001010000000001", 1));
    a.apply(&[Change::PutSession(first.clone())])
        .expect("create on A");
    assert_eq!(
        first.version.get(),
        1,
        "the committed record carries its version"
    );
    let u = Arc::new(usage("001010000000001", 10));
    a.apply(&[Change::PutUsage(u.clone())]).expect("usage on A");

    // B takes both over (reads the rows) and writes on top of them.
    let taken = b.session("gx;race").expect("read").expect("stored");
    assert_eq!(taken.version.get(), 1);
    let mut on_b = taken.clone();
    on_b.updated_ms = 2;
    let mut used_b = b.usage("001010000000001").expect("read").expect("stored");
    used_b
        .accumulators
        .get_mut("monthly")
        .expect("monthly")
        .used = 30;
    b.apply(&[
        Change::PutSession(Arc::new(on_b)),
        Change::PutUsage(Arc::new(used_b)),
    ])
    .expect("B writes on the current rows");

    // A, still holding version 1, writes: refused, both rows named, nothing written.
    let mut stale = (*first).clone();
    stale.updated_ms = 3;
    let mut stale_usage = (*u).clone();
    stale_usage
        .accumulators
        .get_mut("monthly")
        .expect("monthly")
        .used = 20;
    match a.apply(&[
        Change::PutSession(Arc::new(stale)),
        Change::PutUsage(Arc::new(stale_usage)),
        put(session("gx;innocent", "001010000000002", 1)),
    ]) {
        Err(StoreError::Conflict(rows)) => {
            assert_eq!(rows.len(), 2, "{rows:?}");
            assert!(rows.contains(&Conflicted::Session("gx;race".into())));
            assert!(rows.contains(&Conflicted::Usage("001010000000001".into())));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let stored = b.session("gx;race").expect("read").expect("stored");
    assert_eq!(stored.updated_ms, 2, "B's write stands");
    assert_eq!(
        b.usage("001010000000001")
            .expect("read")
            .expect("stored")
            .accumulators
            .get("monthly")
            .expect("monthly")
            .used,
        30
    );
    assert_eq!(
        b.session("gx;innocent").expect("read"),
        None,
        "the batch rolled back"
    );
    // The owner column says who wrote last; A loads only its own sessions.
    assert_eq!(
        db.query_i64(&format!(
            "SELECT count(*) FROM {}.sessions WHERE owner = 'pcrf-b' AND id = 'gx;race'",
            db.name
        )),
        1
    );
    assert!(a.open_sessions().expect("load").is_empty());
    assert_eq!(b.open_sessions().expect("load").len(), 1);
}

/// The group-commit writer fails only the request whose row conflicted;
/// the other requests of its batch are committed.
#[test]
fn a_conflict_fails_only_its_own_request_of_the_batch() {
    use pcrf::store::group_commit::{GroupCommit, GroupCommitOptions};
    let db = TestSchema::new();
    let mut other = db.open();
    other.set_owner("pcrf-b");
    // A row another node wrote twice: a copy at version 0 is stale.
    let s = session("gx;theirs", "001010000000001", 1);
    other
        .apply(&[Change::PutSession(Arc::new(s.clone()))])
        .expect("b");
    s.version.set(1);
    other
        .apply(&[Change::PutSession(Arc::new(s.clone()))])
        .expect("b again");
    let mut mine = db.open();
    mine.set_owner("pcrf-a");
    let gc = GroupCommit::start_with(
        Box::new(mine),
        GroupCommitOptions {
            commit_window: Duration::from_millis(300),
            ..GroupCommitOptions::default()
        },
    )
    .expect("writer");
    let stale = session("gx;theirs", "001010000000001", 5);
    stale.version.set(0);
    let innocent = Arc::new(session("gx;mine", "001010000000002", 5));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (a, b) = rt.block_on(async {
        let a = gc
            .reserve()
            .await
            .expect("slot")
            .send(vec![Change::PutSession(Arc::new(stale))]);
        let b = gc
            .reserve()
            .await
            .expect("slot")
            .send(vec![Change::PutSession(innocent.clone())]);
        tokio::join!(a, b)
    });
    assert_eq!(
        a,
        Err(StoreError::Conflict(vec![Conflicted::Session(
            "gx;theirs".into()
        )]))
    );
    assert_eq!(b, Ok(()));
    assert_eq!(innocent.version.get(), 1);
    assert_eq!(gc.stats().conflicts, 1);
    assert_eq!(gc.stats().batches, 1, "both were one batch");
    let mut check = db.open();
    assert_eq!(
        check
            .session("gx;theirs")
            .expect("read")
            .expect("row")
            .updated_ms,
        1
    );
    assert!(check.session("gx;mine").expect("read").is_some());
}

/// Two requests writing one usage row in one batch (a stale copy met a
/// fresh one after a conflict): only the fresher write stays, the other
/// request fails with a conflict instead of being dropped unseen.
#[test]
fn two_writes_of_one_row_in_a_batch_keep_the_fresher_and_fail_the_other() {
    use pcrf::store::group_commit::{GroupCommit, GroupCommitOptions};
    let db = TestSchema::new();
    let mut seed = db.open();
    let first = Arc::new(usage("001010000000001", 1));
    seed.apply(&[Change::PutUsage(first.clone())])
        .expect("seed");
    let mut store = db.open();
    store.set_owner("pcrf-a");
    let gc = GroupCommit::start_with(
        Box::new(store),
        GroupCommitOptions {
            commit_window: Duration::from_millis(300),
            ..GroupCommitOptions::default()
        },
    )
    .expect("writer");
    let fresh = usage("001010000000001", 3);
    fresh.version.set(1);
    let stale = usage("001010000000001", 2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (f, s) = rt.block_on(async {
        let f = gc
            .reserve()
            .await
            .expect("slot")
            .send(vec![Change::PutUsage(Arc::new(fresh))]);
        let s = gc
            .reserve()
            .await
            .expect("slot")
            .send(vec![Change::PutUsage(Arc::new(stale))]);
        tokio::join!(f, s)
    });
    assert_eq!(f, Ok(()));
    assert_eq!(
        s,
        Err(StoreError::Conflict(vec![Conflicted::Usage(
            "001010000000001".into()
        )]))
    );
    assert_eq!(
        seed.usage("001010000000001")
            .expect("read")
            .expect("row")
            .accumulators
            .get("monthly")
            .expect("monthly")
            .used,
        3
    );
}

/// An AF session `id` as an Rx AAR binds it.
fn af_session(id: &str) -> pcrf::session::af::AfSession {
    pcrf::session::af::AfSession {
        id: id.into(),
        af_host: "pcscf.example".into(),
        af_realm: "example".into(),
        application: None,
        charging_id: None,
        service_urn: None,
        specific_actions: Vec::new(),
        media: Vec::new(),
        rules: Vec::new(),
        notification_uri: None,
        created_ms: 1,
        updated_ms: 1,
    }
}

/// Framed-IPv6-Prefix data of `addr`/`len`.
fn framed_ipv6(addr: &str, len: u8) -> Vec<u8> {
    let mut d = vec![0u8, len];
    let octets = addr
        .parse::<std::net::Ipv6Addr>()
        .expect("address")
        .octets();
    d.extend_from_slice(&octets[..usize::from(len).div_ceil(8)]);
    d
}

#[test]
fn open_sessions_are_found_by_address_prefix_subscriber_and_bound_session() {
    use pcrf::session::binding::stored_prefixes_containing;
    use pcrf::session::tdf::{TdfMode, TdfSession};
    use pcrf::store::OpenSessionsBy;
    let db = TestSchema::new();
    let mut st = db.open();
    let mut a = session("gx;a", "001010000000001", 1);
    a.ue_ipv6_prefix = Some(hex::encode(framed_ipv6("2001:db8:1:2::", 64)).into());
    a.af = vec![
        af_session("pcscf;call;1"),
        af_session(r#"pcscf;"odd"\id,{x}"#),
    ];
    let mut b = session("gx;b", "001010000000002", 1);
    b.ue_ipv4 = Some(std::net::Ipv4Addr::new(10, 9, 9, 9));
    // A /40 delegated: shorter prefixes are found too.
    b.ue_ipv6_prefix = Some(hex::encode(framed_ipv6("2001:db8:100::", 40)).into());
    b.tdf = Some(Box::new(TdfSession::new(
        "pcrf;sd;1".into(),
        TdfMode::Unsolicited,
        "tdf.example".into(),
        "example".into(),
    )));
    st.apply(&[put(a.clone()), put(b.clone())]).expect("write");
    let mut find = |by: OpenSessionsBy| st.open_session_ids(&by).expect("look-up");
    let v6 = |addr: &str, len: u8| {
        OpenSessionsBy::Ipv6Prefixes(stored_prefixes_containing(&framed_ipv6(addr, len)))
    };
    assert_eq!(find(OpenSessionsBy::Ipv4("10.1.2.3".into())), vec!["gx;a"]);
    assert_eq!(find(OpenSessionsBy::Ipv4("10.9.9.9".into())), vec!["gx;b"]);
    assert_eq!(find(v6("2001:db8:1:2::77", 128)), vec!["gx;a"]);
    assert_eq!(find(v6("2001:db8:1:2::", 64)), vec!["gx;a"]);
    assert!(find(v6("2001:db8:1:3::77", 128)).is_empty());
    assert_eq!(find(v6("2001:db8:1ff:ffff::1", 128)), vec!["gx;b"]);
    assert!(find(v6("2001:db8:200::1", 128)).is_empty());
    assert_eq!(
        find(OpenSessionsBy::Subscriber("001010000000002".into())),
        vec!["gx;b"]
    );
    assert_eq!(
        find(OpenSessionsBy::SubSession("pcscf;call;1".into())),
        vec!["gx;a"]
    );
    assert_eq!(
        find(OpenSessionsBy::SubSession(r#"pcscf;"odd"\id,{x}"#.into())),
        vec!["gx;a"]
    );
    assert_eq!(
        find(OpenSessionsBy::SubSession("pcrf;sd;1".into())),
        vec!["gx;b"]
    );
    assert!(find(OpenSessionsBy::SubSession("pcscf;call".into())).is_empty());

    // The columns follow the record: the AF session ends, the prefix
    // changes, the session closes.
    let mut a2 = a.clone();
    a2.af.remove(0);
    a2.ue_ipv6_prefix = Some(hex::encode(framed_ipv6("2001:db8:5::", 48)).into());
    let mut b2 = b.clone();
    b2.state = SessionState::Closed;
    b2.closed_ms = Some(2);
    st.apply(&[put(a2), put(b2)]).expect("write");
    let mut find = |by: OpenSessionsBy| st.open_session_ids(&by).expect("look-up");
    assert!(find(OpenSessionsBy::SubSession("pcscf;call;1".into())).is_empty());
    assert_eq!(
        find(OpenSessionsBy::SubSession(r#"pcscf;"odd"\id,{x}"#.into())),
        vec!["gx;a"]
    );
    assert!(find(v6("2001:db8:1:2::77", 128)).is_empty());
    assert_eq!(find(v6("2001:db8:5:1::1", 128)), vec!["gx;a"]);
    assert!(find(OpenSessionsBy::SubSession("pcrf;sd;1".into())).is_empty());
    assert!(find(OpenSessionsBy::Ipv4("10.9.9.9".into())).is_empty());
    // Each is an index look-up of the open rows.
    for (column, index) in [
        ("ue_ipv6", "sessions_open_by_ipv6"),
        ("sub_sessions", "sessions_open_by_sub_session"),
    ] {
        assert_eq!(
            db.query_i64(&format!(
                "SELECT count(*) FROM (SELECT pg_get_indexdef('{n}.{index}'::regclass) AS d) x \
                 WHERE d LIKE '%({column})%' \
                 AND d LIKE '%WHERE ((state = ''open''::text) AND ({column} IS NOT NULL))'",
                n = db.name
            )),
            1,
            "{index}"
        );
    }
}

#[test]
fn open_sessions_written_before_schema_10_are_found_after_the_upgrade() {
    use pcrf::store::OpenSessionsBy;
    let db = TestSchema::new();
    let mut st = db.open();
    let mut a = session("gx;old", "001010000000001", 1);
    a.ue_ipv6_prefix = Some(hex::encode(framed_ipv6("2001:db8:1:2::", 64)).into());
    a.af = vec![af_session("pcscf;call;old")];
    st.apply(&[put(a)]).expect("write");
    drop(st);
    // As a build before schema 10 left it.
    db.run(&format!(
        "SET search_path TO {n};
         DROP INDEX sessions_open_by_ipv6; DROP INDEX sessions_open_by_sub_session;
         ALTER TABLE sessions DROP COLUMN ue_ipv6, DROP COLUMN sub_sessions;
         DROP TABLE deployed_versions; DROP FUNCTION pcrf_version_deployed();
         ALTER TABLE cluster_nodes DROP COLUMN policy_version, DROP COLUMN policy_refused,
             DROP COLUMN usage_version, DROP COLUMN usage_refused;
         DELETE FROM schema_migrations WHERE version >= 10;
         SET search_path TO DEFAULT;",
        n = db.name
    ));
    let mut st = db.open();
    assert_eq!(st.schema_version().expect("version"), latest());
    assert_eq!(
        st.open_session_ids(&OpenSessionsBy::SubSession("pcscf;call;old".into()))
            .expect("look-up"),
        vec!["gx;old"]
    );
    let keys =
        pcrf::session::binding::stored_prefixes_containing(&framed_ipv6("2001:db8:1:2::1", 128));
    assert_eq!(
        st.open_session_ids(&OpenSessionsBy::Ipv6Prefixes(keys))
            .expect("look-up"),
        vec!["gx;old"]
    );
}

#[test]
fn deployed_versions_append_in_order_notify_and_refuse_a_stale_parent() {
    use pcrf::store::postgres::versions::PostgresVersions;
    use pcrf::store::versions::{conformance, VersionStore, POLICY};
    // A database of its own, not a schema beside the other tests': NOTIFY
    // is database-wide, and their versions would be heard here too.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let db = rt.block_on(support::test_database("versions_notify"));
    let _store = PostgresStore::open(PostgresOptions::new(db.url.clone())).expect("open store");
    // Another node's LISTEN hears each version at its commit.
    let (listener, mut conn) = rt
        .block_on(tokio_postgres::connect(&db.url, tokio_postgres::NoTls))
        .expect("connect");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    rt.spawn(async move {
        while let Some(Ok(m)) = std::future::poll_fn(|cx| conn.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().to_owned());
            }
        }
    });
    rt.block_on(listener.batch_execute("LISTEN pcrf_versions"))
        .expect("listen");
    let v = PostgresVersions::new(&db.url, Duration::from_secs(5)).expect("versions");
    conformance::versions_append_in_order_and_refuse_a_stale_parent(&v);
    // The notifications are driven by rt: let it run a moment.
    let mut heard = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while heard.len() < 2 && Instant::now() < deadline {
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(20)).await });
        heard.extend(rx.try_iter());
    }
    assert_eq!(heard, vec!["policy:1".to_string(), "policy:2".to_string()]);
    assert_eq!(v.latest(POLICY).expect("latest").map(|l| l.id), Some(2));
}

#[test]
fn deployed_versions_survive_a_lost_connection() {
    use pcrf::store::postgres::versions::PostgresVersions;
    use pcrf::store::versions::{NewVersion, VersionStore, POLICY};
    let db = TestSchema::new();
    let _store = db.open();
    let v = PostgresVersions::new(&db.url, Duration::from_secs(5)).expect("versions");
    let first = NewVersion {
        artifact: POLICY,
        parent: None,
        hash: "h1",
        by: "file",
        at_ms: 1,
        comment: "",
        content: b"one",
    };
    v.append(&first).expect("append").expect("v1");
    // Its connection ends (a restart or switch-over of the database, an
    // idle timeout): the next call opens another instead of failing.
    let pid = db.query_i64(
        "SELECT pid::BIGINT FROM pg_stat_activity \
         WHERE application_name = 'pcrf-versions' AND datname = current_database() \
         ORDER BY backend_start DESC LIMIT 1",
    );
    db.terminate(i32::try_from(pid).expect("pid"));
    assert_eq!(
        v.latest(POLICY).expect("read after the loss").map(|l| l.id),
        Some(1)
    );
}
