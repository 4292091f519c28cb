//! A database of its own on the test PostgreSQL server for each test that
//! runs `pcrf serve` on the PostgreSQL store: the one way the process tests
//! create it and name it in a URL. A database rather than a schema, so that
//! what is database-wide stays within the test: the provisioning feed's
//! `NOTIFY`, and the connections a test may look up or end in
//! `pg_stat_activity` (other tests, other checkouts, use the same server).

use std::sync::atomic::{AtomicU32, Ordering};

/// The test server's URL: PCRF_TEST_DATABASE_URL.
pub fn test_server_url() -> String {
    std::env::var("PCRF_TEST_DATABASE_URL").expect(
        "PCRF_TEST_DATABASE_URL is not set: run scripts/test.sh, which starts PostgreSQL and sets it",
    )
}

/// A fresh database on the test server, dropped when the value is (kept
/// when the test failed, or with PCRF_KEEP_TEST_DIRS set, for inspection).
pub struct TestDatabase {
    /// The URL of the new database, for `[store] url`.
    pub url: String,
    server: String,
    name: String,
}

/// Creates a database named after `tag`, this process and a counter.
pub async fn test_database(tag: &str) -> TestDatabase {
    static N: AtomicU32 = AtomicU32::new(0);
    let server = test_server_url();
    let name = format!(
        "{tag}_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
    );
    run_sql(&server, &format!("CREATE DATABASE {name}")).await;
    TestDatabase {
        url: with_database(&server, &name),
        server,
        name,
    }
}

impl TestDatabase {
    /// A client of this database (its connection runs on the caller's
    /// runtime).
    pub async fn client(&self) -> tokio_postgres::Client {
        connect(&self.url).await
    }

    /// The `[store]` section's body for a `pcrf serve` on this database.
    pub fn store_section(&self) -> String {
        format!("kind = \"postgres\"\nurl = \"{}\"", self.url)
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("PCRF_KEEP_TEST_DIRS").is_some() {
            return;
        }
        // Dropped inside a test's runtime, which cannot block on itself: a
        // thread of its own runs the statement.
        let (server, sql) = (
            self.server.clone(),
            format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(run_sql(&server, &sql))
        })
        .join();
    }
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(conn);
    client
}

async fn run_sql(url: &str, sql: &str) {
    connect(url).await.batch_execute(sql).await.expect(sql);
}

/// `server` (postgres://user@host:port/db?opts) naming database `name`.
pub fn with_database(server: &str, name: &str) -> String {
    let (url, query) = server
        .split_once('?')
        .map_or((server, None), |(u, q)| (u, Some(q)));
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let root = match url[scheme_end..].find('/') {
        Some(i) => &url[..scheme_end + i],
        None => url,
    };
    match query {
        Some(q) => format!("{root}/{name}?{q}"),
        None => format!("{root}/{name}"),
    }
}
