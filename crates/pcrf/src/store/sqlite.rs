//! The embedded store: one SQLite file in WAL mode per shard (see
//! `sqlite_layout`), so `pcrf serve` is durable with no database server. Rows are upserted one by one (never a
//! lock wider than a row's page), a transaction commits only if a row really
//! changed (an unchanged session costs no commit and no fsync), and each record is one blob
//! (`blob`: tagged MessagePack; JSON from older builds is still read).

use super::blob::{self, decode_session, decode_subscriber, decode_usage};
use super::checkpointer::{Checkpointer, CHECKPOINT_EVERY};
use super::config::Durability;
use super::{Change, Store, StoreError};
use crate::session::GxSession;
use crate::subscriber::Subscriber;
use crate::usage::SubscriberUsage;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The embedded store's page cache, KiB: one file's when it is opened
/// alone, the whole store's when it is sharded (`open_shards` splits it).
pub(crate) const PAGE_CACHE_KIB: u64 = 65_536;

/// File name of the database inside the store directory (shard 0).
pub const DB_FILE: &str = "pcrf.db";
/// Held with an exclusive flock while a store is open: two servers on one
/// directory would otherwise both believe they own every session.
const LOCK_FILE: &str = "pcrf.lock";

/// The deployed versions' table (`sqlite_versions`), as migration 7
/// creates it.
pub(crate) const VERSIONS_TABLE: &str = "CREATE TABLE deployed_versions (
        artifact TEXT NOT NULL,
        id INTEGER NOT NULL,
        parent INTEGER,
        hash TEXT NOT NULL,
        deployed_by TEXT NOT NULL,
        at_ms INTEGER NOT NULL,
        comment TEXT NOT NULL,
        content BLOB NOT NULL,
        PRIMARY KEY (artifact, id)
    );";

/// Schema migrations, applied in order; `PRAGMA user_version` is the number
/// applied. Append only: a released migration never changes.
const MIGRATIONS: &[&str] = &[
    // 1: subscribers and sessions, each record one blob; the derived columns
    // exist only for the recovery and purge queries and their indexes.
    "CREATE TABLE subscribers (
        imsi TEXT PRIMARY KEY NOT NULL,
        msisdn TEXT,
        data BLOB NOT NULL
    );
    CREATE INDEX subscribers_by_msisdn ON subscribers (msisdn) WHERE msisdn IS NOT NULL;
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY NOT NULL,
        subscriber TEXT NOT NULL,
        state TEXT NOT NULL,
        pcef_host TEXT NOT NULL,
        updated_ms INTEGER NOT NULL,
        closed_ms INTEGER,
        data BLOB NOT NULL
    );
    CREATE INDEX sessions_open ON sessions (subscriber) WHERE state = 'open';
    CREATE INDEX sessions_closed ON sessions (closed_ms) WHERE state = 'closed';",
    // 2: per-subscriber usage accumulators, one blob per subscriber key,
    // written in the same batch as the session whose report changed them.
    "CREATE TABLE usage (
        subscriber TEXT PRIMARY KEY NOT NULL,
        data BLOB NOT NULL
    );",
    // 3: the number of shards the directory's rows are placed for (one row,
    // in shard 0's file only; none: a directory from before shards, which
    // is one shard).
    "CREATE TABLE layout (shards INTEGER NOT NULL);",
    // 4: the notification outbox: one row per event and sink still owed,
    // written in the same batch as the change that caused the event and
    // deleted once the sink has it; seq orders them.
    "CREATE TABLE outbox (
        seq INTEGER NOT NULL,
        sink TEXT NOT NULL,
        subscriber TEXT NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (seq, sink)
    );",
    // 5: every session, subscriber and usage record written as JSON by an
    // older build is rewritten in the binary form (no DDL: the columns are
    // BLOB already; `rewrite_json_records` does it in the same transaction).
    "",
    // 6: which store and which of its shards the file is (one row, stamped
    // by `sqlite_layout` at start): a file of another store copied in, or
    // renamed to another shard's name, is refused instead of read.
    "CREATE TABLE store_identity (store TEXT NOT NULL, shard INTEGER NOT NULL);",
    // 7: the deployed versions of the policy (used in shard 0's file only,
    // see `sqlite_versions`).
    VERSIONS_TABLE,
];

/// The schema version whose migration rewrites JSON records as binary.
const BINARY_RECORDS: usize = 5;

/// Rows read and rewritten at a time by that migration.
const REWRITE_PAGE: i64 = 1000;

/// Rewrites every JSON record of the record tables in the binary form, a
/// page of rows at a time, inside the migration's transaction; a record
/// that cannot be decoded is logged and left as it is (reading skips and
/// counts it, as before). Returns the number rewritten.
fn rewrite_json_records(tx: &rusqlite::Transaction<'_>, ctx: &str) -> Result<u64, StoreError> {
    let mut rewritten = 0;
    for table in blob::RecordTable::ALL {
        let (name, key) = (table.table(), table.key());
        let select =
            format!("SELECT {key}, data FROM {name} WHERE {key} > ?1 ORDER BY {key} LIMIT ?2");
        let update = format!("UPDATE {name} SET data = ?2 WHERE {key} = ?1");
        let mut after = String::new();
        loop {
            let page: Vec<(String, Vec<u8>)> = tx
                .prepare(&select)
                .and_then(|mut st| {
                    st.query_map(params![after, REWRITE_PAGE], |r| {
                        Ok((r.get::<_, String>(0)?, blob_bytes(r.get(1)?)))
                    })?
                    .collect()
                })
                .map_err(|e| db_error(ctx, e))?;
            let Some((last, _)) = page.last() else { break };
            after = last.clone();
            let full = page.len() as i64 == REWRITE_PAGE;
            for (k, data) in page {
                if let Some(binary) = table.rewritten(&k, &data) {
                    tx.execute(&update, params![k, binary])
                        .map_err(|e| db_error(ctx, e))?;
                    rewritten += 1;
                }
            }
            if !full {
                break;
            }
        }
    }
    Ok(rewritten)
}

// The WHERE of each upsert makes an identical record count 0 changes, so a
// batch of no-op writes ends in ROLLBACK, not in a commit and an fsync.
const UPSERT_SESSION: &str = "INSERT INTO sessions
        (id, subscriber, state, pcef_host, updated_ms, closed_ms, data)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
    ON CONFLICT (id) DO UPDATE SET
        subscriber = excluded.subscriber, state = excluded.state,
        pcef_host = excluded.pcef_host, updated_ms = excluded.updated_ms,
        closed_ms = excluded.closed_ms, data = excluded.data
    WHERE sessions.data IS DISTINCT FROM excluded.data";
const DELETE_SESSION: &str = "DELETE FROM sessions WHERE id = ?1";
const UPSERT_SUBSCRIBER: &str = "INSERT INTO subscribers (imsi, msisdn, data)
    VALUES (?1, ?2, ?3)
    ON CONFLICT (imsi) DO UPDATE SET msisdn = excluded.msisdn, data = excluded.data
    WHERE subscribers.data IS DISTINCT FROM excluded.data";
const DELETE_SUBSCRIBER: &str = "DELETE FROM subscribers WHERE imsi = ?1";
const UPSERT_USAGE: &str = "INSERT INTO usage (subscriber, data) VALUES (?1, ?2)
    ON CONFLICT (subscriber) DO UPDATE SET data = excluded.data
    WHERE usage.data IS DISTINCT FROM excluded.data";
const DELETE_USAGE: &str = "DELETE FROM usage WHERE subscriber = ?1";
// A replayed event (same seq and sink) is already there: nothing to do.
const INSERT_EVENT: &str = "INSERT INTO outbox (seq, sink, subscriber, data)
    VALUES (?1, ?2, ?3, ?4) ON CONFLICT (seq, sink) DO NOTHING";
const DELETE_EVENT: &str = "DELETE FROM outbox WHERE seq = ?1 AND sink = ?2";
const PURGE_CLOSED: &str = "DELETE FROM sessions WHERE id IN (
        SELECT id FROM sessions WHERE state = 'closed' AND closed_ms < ?1 LIMIT ?2)";

/// The embedded SQLite store (one writer connection).
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    skipped_corrupt: u64,
    // (device, inode) of the file opened: if the file or its directory is
    // removed or replaced, SQLite would go on writing into an unlinked file
    // and every acknowledged change would vanish at the next start. Checked
    // before every commit (one stat, against a commit's fsync): checked
    // once a second, the requests of that second were acknowledged and lost.
    identity: (u64, u64),
    // Checkpoints the WAL off the writer's path; stops with the store.
    checkpointer: Checkpointer,
    // Keeps the directory's flock for as long as the store is open (shared
    // by the shards of one directory).
    _lock: Arc<File>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish()
    }
}

/// Turns a SQLite error into the store's error, keeping SQLite's message
/// and saying what we were doing; disk full and corruption are named.
pub(crate) fn db_error(context: &str, e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => StoreError::Unavailable(format!("{context}: disk full: {e}")),
        Some(ErrorCode::DatabaseCorrupt) | Some(ErrorCode::NotADatabase) => {
            StoreError::Corrupt(format!("{context}: {e}"))
        }
        Some(ErrorCode::ReadOnly)
        | Some(ErrorCode::CannotOpen)
        | Some(ErrorCode::PermissionDenied) => {
            StoreError::Unavailable(format!("{context}: not writable: {e}"))
        }
        _ => StoreError::Unavailable(format!("{context}: {e}")),
    }
}

/// The bytes of a record column whatever its storage class, so a damaged
/// row is one undecodable record (skipped, named), not a failed load.
fn blob_bytes(v: rusqlite::types::Value) -> Vec<u8> {
    use rusqlite::types::Value;
    match v {
        Value::Blob(b) => b,
        Value::Text(t) => t.into_bytes(),
        Value::Null | Value::Integer(_) | Value::Real(_) => Vec::new(),
    }
}

fn file_identity(path: &Path) -> Result<(u64, u64), StoreError> {
    std::fs::metadata(path)
        .map(|m| (m.dev(), m.ino()))
        .map_err(|e| {
            StoreError::Unavailable(format!(
                "database file {} is gone (removed with its directory?): {e}; \
                 restart pcrf to recreate it",
                path.display()
            ))
        })
}

/// Takes the directory's exclusive lock (creating the directory), held
/// until the returned file is dropped.
pub(crate) fn lock_directory(dir: &Path) -> Result<Arc<File>, StoreError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        StoreError::Unavailable(format!(
            "cannot create store directory {}: {e}",
            dir.display()
        ))
    })?;
    let path = dir.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| {
            StoreError::Unavailable(format!(
                "store directory {} not writable: {e}",
                dir.display()
            ))
        })?;
    // SAFETY: flock on a descriptor we own; it has no memory effects.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = std::io::Error::last_os_error();
        return Err(StoreError::Unavailable(format!(
            "store directory {} is in use by another pcrf process ({}): {err}",
            dir.display(),
            path.display()
        )));
    }
    Ok(Arc::new(file))
}

impl SqliteStore {
    /// Opens (creating if needed) `dir/pcrf.db` alone, as one store: sets
    /// WAL and the durability, and applies pending schema migrations.
    /// A server opens every shard of the directory with `sqlite_layout`.
    pub fn open(dir: &Path, durability: Durability) -> Result<Self, StoreError> {
        let lock = lock_directory(dir)?;
        Self::open_file(dir.join(DB_FILE), durability, lock)
    }

    /// Opens (creating if needed) one database file of a directory whose
    /// lock the caller holds.
    pub(crate) fn open_file(
        path: PathBuf,
        durability: Durability,
        lock: Arc<File>,
    ) -> Result<Self, StoreError> {
        let ctx = format!("opening {}", path.display());
        let conn = Connection::open(&path).map_err(|e| db_error(&ctx, e))?;
        // Another process (an operator's sqlite3 shell) may hold the lock
        // briefly; wait rather than fail the batch.
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(|e| db_error(&ctx, e))?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
            .map_err(|e| db_error(&ctx, e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Unavailable(format!(
                "{ctx}: the file system refused WAL mode (got {mode})"
            )));
        }
        let synchronous = match durability {
            Durability::Full => "FULL",
            Durability::Relaxed => "NORMAL",
        };
        // No checkpoint inside a commit: the checkpointer thread runs them.
        conn.execute_batch(&format!(
            "PRAGMA synchronous = {synchronous};
             PRAGMA journal_size_limit = 67108864;
             PRAGMA cache_size = -{PAGE_CACHE_KIB};
             PRAGMA wal_autocheckpoint = 0;"
        ))
        .map_err(|e| db_error(&ctx, e))?;
        let identity = file_identity(&path)?;
        let checkpointer = Checkpointer::start(&path, synchronous, CHECKPOINT_EVERY)?;
        let mut store = SqliteStore {
            conn,
            path,
            skipped_corrupt: 0,
            identity,
            checkpointer,
            _lock: lock,
        };
        store.migrate()?;
        Ok(store)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// WAL checkpoints the background thread ran (the writer only catches
    /// up after them).
    pub fn checkpoints(&self) -> u64 {
        self.checkpointer.checkpoints()
    }

    /// The connection, for moving rows between shard files at start-up.
    pub(crate) fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Schema version the database is at (the number of migrations applied).
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        self.conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| db_error("reading schema version", e))
    }

    /// Caps the database size: past it a write fails with
    /// `Unavailable("... disk full ...")` (answered 5012) instead of filling
    /// a disk shared with logs. Never below the current size.
    /// Sets this file's page cache to `kib` KiB (SQLite's `cache_size`).
    /// A sharded store gives each file its share of one budget, so that
    /// the cache's total does not grow with the number of writers (each
    /// file holds only its shard's rows).
    pub fn set_page_cache_kib(&mut self, kib: u64) -> Result<(), StoreError> {
        self.conn
            .execute_batch(&format!("PRAGMA cache_size = -{};", kib.max(1)))
            .map_err(|e| db_error("setting cache_size", e))
    }

    pub fn limit_size(&mut self, max_bytes: u64) -> Result<(), StoreError> {
        let page: i64 = self
            .conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .map_err(|e| db_error("reading page size", e))?;
        // 0 would mean "query only" to SQLite; 1 is raised to the current size.
        let pages = (max_bytes / u64::try_from(page).unwrap_or(4096).max(1)).max(1);
        self.conn
            .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
            .map_err(|e| db_error("setting max_page_count", e))
    }

    /// Whether the database file at the path is still the one opened.
    fn check_identity(&self) -> Result<(), StoreError> {
        let now = file_identity(&self.path)?;
        if now != self.identity {
            return Err(StoreError::Unavailable(format!(
                "database file {} was replaced while open; restart pcrf",
                self.path.display()
            )));
        }
        Ok(())
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let current = self.schema_version()? as usize;
        if current > MIGRATIONS.len() {
            return Err(StoreError::Unavailable(format!(
                "{}: schema version {current} is newer than this pcrf knows ({}); upgrade pcrf",
                self.path.display(),
                MIGRATIONS.len()
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(current) {
            let version = i + 1;
            let ctx = format!("migrating {} to schema {version}", self.path.display());
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| db_error(&ctx, e))?;
            tx.execute_batch(sql).map_err(|e| db_error(&ctx, e))?;
            if version == BINARY_RECORDS {
                let rewritten = rewrite_json_records(&tx, &ctx)?;
                tracing::info!(path = %self.path.display(), rewritten,
                    "JSON records rewritten in the binary form");
            }
            tx.execute_batch(&format!("PRAGMA user_version = {version}"))
                .map_err(|e| db_error(&ctx, e))?;
            tx.commit().map_err(|e| db_error(&ctx, e))?;
            tracing::info!(path = %self.path.display(), version, "store schema migrated");
        }
        Ok(())
    }

    fn apply_one(tx: &rusqlite::Transaction<'_>, change: &Change) -> Result<usize, StoreError> {
        let ctx = "writing a batch";
        match change {
            Change::PutSession(s) => {
                let data = blob::encode_session(s)?;
                let state = match s.state {
                    crate::session::SessionState::Open => "open",
                    crate::session::SessionState::Closed => "closed",
                };
                tx.prepare_cached(UPSERT_SESSION)
                    .and_then(|mut st| {
                        st.execute(params![
                            s.id,
                            s.subscriber,
                            state,
                            s.pcef_host,
                            s.updated_ms,
                            s.closed_ms,
                            data
                        ])
                    })
                    .map_err(|e| db_error(ctx, e))
            }
            Change::DeleteSession { id, .. } => tx
                .prepare_cached(DELETE_SESSION)
                .and_then(|mut st| st.execute(params![id]))
                .map_err(|e| db_error(ctx, e)),
            Change::PutSubscriber(s) => {
                let data = blob::encode_subscriber(s)?;
                tx.prepare_cached(UPSERT_SUBSCRIBER)
                    .and_then(|mut st| st.execute(params![s.imsi, s.msisdn, data]))
                    .map_err(|e| db_error(ctx, e))
            }
            Change::DeleteSubscriber(imsi) => tx
                .prepare_cached(DELETE_SUBSCRIBER)
                .and_then(|mut st| st.execute(params![imsi]))
                .map_err(|e| db_error(ctx, e)),
            Change::PutUsage(u) => {
                let data = blob::encode_usage(u)?;
                tx.prepare_cached(UPSERT_USAGE)
                    .and_then(|mut st| st.execute(params![u.subscriber, data]))
                    .map_err(|e| db_error(ctx, e))
            }
            Change::DeleteUsage(subscriber) => tx
                .prepare_cached(DELETE_USAGE)
                .and_then(|mut st| st.execute(params![subscriber]))
                .map_err(|e| db_error(ctx, e)),
            Change::PutEvent(e) => {
                let mut rows = 0;
                let mut st = tx
                    .prepare_cached(INSERT_EVENT)
                    .map_err(|err| db_error(ctx, err))?;
                for sink in &e.sinks {
                    rows += st
                        .execute(params![
                            e.seq as i64,
                            &**sink,
                            e.subscriber_key(),
                            &e.body[..]
                        ])
                        .map_err(|err| db_error(ctx, err))?;
                }
                Ok(rows)
            }
            Change::AckEvent { seq, sink, .. } => tx
                .prepare_cached(DELETE_EVENT)
                .and_then(|mut st| st.execute(params![*seq as i64, &**sink]))
                .map_err(|e| db_error(ctx, e)),
        }
    }
}

/// The bytes of a record column without copying; empty (so: undecodable)
/// for a value that is neither blob nor text.
fn column_bytes<'a>(v: rusqlite::types::ValueRef<'a>) -> &'a [u8] {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Blob(b) | ValueRef::Text(b) => b,
        ValueRef::Null | ValueRef::Integer(_) | ValueRef::Real(_) => &[],
    }
}

/// Rows handed to a decoding thread at a time during recovery.
const DECODE_CHUNK: usize = 512;

/// Streams `sql` (key, data) rows and decodes them on every core while
/// this thread reads on: decoding, not reading, dominates start-up (about
/// 30 µs per session on one core). At most a few chunks of raw rows are
/// held at once; the result keeps the row order.
fn load_all<T: Send>(
    conn: &Connection,
    sql: &str,
    ctx: &str,
    skipped: &mut u64,
    decode: fn(&mut u64, &str, &[u8]) -> Option<T>,
) -> Result<Vec<T>, StoreError> {
    type Chunk = (usize, Vec<(String, Vec<u8>)>);
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8);
    let (job_tx, job_rx) = std::sync::mpsc::sync_channel::<Chunk>(workers * 2);
    let job_rx = std::sync::Mutex::new(job_rx);
    std::thread::scope(|scope| {
        let (out_tx, out_rx) = std::sync::mpsc::channel::<(usize, Vec<T>, u64)>();
        for _ in 0..workers {
            let (job_rx, out_tx) = (&job_rx, out_tx.clone());
            scope.spawn(move || loop {
                let job = match job_rx.lock() {
                    Ok(rx) => rx.recv(),
                    Err(_) => return,
                };
                let Ok((index, rows)) = job else { return };
                let mut bad = 0;
                let decoded = rows
                    .iter()
                    .filter_map(|(key, data)| decode(&mut bad, key, data))
                    .collect();
                if out_tx.send((index, decoded, bad)).is_err() {
                    return;
                }
            });
        }
        drop(out_tx);
        let read = (|| {
            let mut st = conn.prepare_cached(sql).map_err(|e| db_error(ctx, e))?;
            let mut rows = st.query([]).map_err(|e| db_error(ctx, e))?;
            let mut chunk = Vec::with_capacity(DECODE_CHUNK);
            let mut index = 0;
            while let Some(row) = rows.next().map_err(|e| db_error(ctx, e))? {
                let key = row.get_ref(0).map_err(|e| db_error(ctx, e))?;
                let key = String::from_utf8_lossy(column_bytes(key)).into_owned();
                let data = column_bytes(row.get_ref(1).map_err(|e| db_error(ctx, e))?).to_vec();
                chunk.push((key, data));
                if chunk.len() == DECODE_CHUNK {
                    let full = std::mem::replace(&mut chunk, Vec::with_capacity(DECODE_CHUNK));
                    if job_tx.send((index, full)).is_err() {
                        break;
                    }
                    index += 1;
                }
            }
            if !chunk.is_empty() {
                let _ = job_tx.send((index, chunk));
            }
            Ok::<(), StoreError>(())
        })();
        drop(job_tx);
        let mut parts: Vec<(usize, Vec<T>, u64)> = out_rx.iter().collect();
        read?;
        parts.sort_unstable_by_key(|(index, _, _)| *index);
        let mut out = Vec::with_capacity(parts.iter().map(|(_, v, _)| v.len()).sum());
        for (_, decoded, bad) in parts {
            *skipped += bad;
            out.extend(decoded);
        }
        Ok(out)
    })
}

impl Store for SqliteStore {
    fn apply(&mut self, changes: &[Change]) -> Result<usize, StoreError> {
        if changes.is_empty() {
            return Ok(0);
        }
        self.check_identity()?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| db_error("starting a transaction", e))?;
        let mut rows = 0;
        for change in changes {
            // On error the transaction rolls back when dropped.
            rows += Self::apply_one(&tx, change)?;
        }
        if rows == 0 {
            tx.rollback()
                .map_err(|e| db_error("rolling back an unchanged batch", e))?;
        } else {
            tx.commit().map_err(|e| db_error("committing a batch", e))?;
        }
        Ok(rows)
    }

    fn open_sessions(&mut self) -> Result<Vec<GxSession>, StoreError> {
        let mut skipped = 0;
        let out = load_all(
            &self.conn,
            "SELECT id, data FROM sessions WHERE state = 'open'",
            "loading open sessions",
            &mut skipped,
            decode_session,
        );
        self.skipped_corrupt = skipped;
        out
    }

    fn subscribers(&mut self) -> Result<Vec<Subscriber>, StoreError> {
        let mut skipped = 0;
        let out = load_all(
            &self.conn,
            "SELECT imsi, data FROM subscribers",
            "loading subscribers",
            &mut skipped,
            decode_subscriber,
        );
        self.skipped_corrupt = skipped;
        out
    }

    fn session(&mut self, id: &str) -> Result<Option<GxSession>, StoreError> {
        let data: Option<Vec<u8>> = self
            .conn
            .prepare_cached("SELECT data FROM sessions WHERE id = ?1")
            .and_then(|mut st| {
                st.query_row(params![id], |r| Ok(blob_bytes(r.get(0)?)))
                    .optional()
            })
            .map_err(|e| db_error("reading a session", e))?;
        match data {
            None => Ok(None),
            Some(d) => match decode_session(&mut self.skipped_corrupt, id, &d) {
                Some(s) => Ok(Some(s)),
                None => Err(StoreError::Corrupt(format!(
                    "session {id:?}: stored record cannot be decoded"
                ))),
            },
        }
    }

    fn subscriber(&mut self, imsi: &str) -> Result<Option<Subscriber>, StoreError> {
        let data: Option<Vec<u8>> = self
            .conn
            .prepare_cached("SELECT data FROM subscribers WHERE imsi = ?1")
            .and_then(|mut st| {
                st.query_row(params![imsi], |r| Ok(blob_bytes(r.get(0)?)))
                    .optional()
            })
            .map_err(|e| db_error("reading a subscriber", e))?;
        match data {
            None => Ok(None),
            Some(d) => match decode_subscriber(&mut self.skipped_corrupt, imsi, &d) {
                Some(s) => Ok(Some(s)),
                None => Err(StoreError::Corrupt(format!(
                    "subscriber {imsi:?}: stored record cannot be decoded"
                ))),
            },
        }
    }

    fn usage_records(&mut self) -> Result<Vec<SubscriberUsage>, StoreError> {
        let mut skipped = 0;
        let out = load_all(
            &self.conn,
            "SELECT subscriber, data FROM usage",
            "loading usage",
            &mut skipped,
            decode_usage,
        );
        self.skipped_corrupt = skipped;
        out
    }

    fn usage(&mut self, subscriber: &str) -> Result<Option<SubscriberUsage>, StoreError> {
        let data: Option<Vec<u8>> = self
            .conn
            .prepare_cached("SELECT data FROM usage WHERE subscriber = ?1")
            .and_then(|mut st| {
                st.query_row(params![subscriber], |r| Ok(blob_bytes(r.get(0)?)))
                    .optional()
            })
            .map_err(|e| db_error("reading a usage record", e))?;
        match data {
            None => Ok(None),
            Some(d) => match decode_usage(&mut self.skipped_corrupt, subscriber, &d) {
                Some(u) => Ok(Some(u)),
                None => Err(StoreError::Corrupt(format!(
                    "usage of {subscriber:?}: stored record cannot be decoded"
                ))),
            },
        }
    }

    fn pending_events(&mut self) -> Result<Vec<crate::notify::Event>, StoreError> {
        let ctx = "loading the notification outbox";
        let mut st = self
            .conn
            .prepare_cached("SELECT seq, sink, data FROM outbox ORDER BY seq, sink")
            .map_err(|e| db_error(ctx, e))?;
        let mut rows = st.query([]).map_err(|e| db_error(ctx, e))?;
        let mut out = Vec::new();
        let mut skipped = 0;
        while let Some(row) = rows.next().map_err(|e| db_error(ctx, e))? {
            let seq: i64 = row.get(0).map_err(|e| db_error(ctx, e))?;
            let sink: String = row.get(1).map_err(|e| db_error(ctx, e))?;
            let data = column_bytes(row.get_ref(2).map_err(|e| db_error(ctx, e))?);
            match crate::notify::Event::from_stored(seq as u64, &sink, data) {
                Ok(e) => out.push(e),
                Err(e) => {
                    skipped += 1;
                    tracing::error!(seq, sink, error = %e,
                        "stored notification cannot be decoded; skipped");
                }
            }
        }
        self.skipped_corrupt = skipped;
        Ok(out)
    }

    /// The file is still the one opened, and takes a commit: the schema
    /// version written again as it is (one page through the WAL and a
    /// sync, which a read-only file system or a removed WAL refuses).
    fn probe(&mut self) -> Result<(), StoreError> {
        self.check_identity()?;
        let version = self.schema_version()?;
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| db_error("probing a write", e))?;
        tx.execute_batch(&format!("PRAGMA user_version = {version}"))
            .map_err(|e| db_error("probing a write", e))?;
        tx.commit().map_err(|e| db_error("probing a write", e))
    }

    fn purge_closed(&mut self, before_ms: i64, limit: usize) -> Result<usize, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.conn
            .prepare_cached(PURGE_CLOSED)
            .and_then(|mut st| st.execute(params![before_ms, limit]))
            .map_err(|e| db_error("purging closed sessions", e))
    }

    fn skipped_corrupt(&self) -> u64 {
        self.skipped_corrupt
    }

    fn after_batch(&mut self) {
        if !self.checkpointer.take_catch_up() {
            return;
        }
        // Copies only the frames committed while the background checkpoint
        // ran; PASSIVE returns at once if that checkpoint is running again.
        if let Err(e) = self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
        {
            tracing::debug!(error = %e, path = %self.path.display(), "catching up the WAL checkpoint failed");
        }
    }

    fn release_memory(&mut self) {
        if let Err(e) = self.conn.release_memory() {
            tracing::debug!(error = %e, path = %self.path.display(), "releasing the page cache failed");
        }
    }

    fn cache_bytes(&self) -> u64 {
        let (mut now, mut high) = (0, 0);
        // SAFETY: the handle is this store's open connection, used on this
        // thread only; SQLite writes the two integers and reads nothing else.
        let rc = unsafe {
            rusqlite::ffi::sqlite3_db_status(
                self.conn.handle(),
                rusqlite::ffi::SQLITE_DBSTATUS_CACHE_USED,
                &mut now,
                &mut high,
                0,
            )
        };
        if rc == rusqlite::ffi::SQLITE_OK {
            u64::try_from(now).unwrap_or(0)
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionState;
    use crate::store::fixtures::{session, subscriber, usage, TestDir};
    use std::sync::Arc;
    use std::time::Instant;

    fn event(seq: u64, sinks: &[&str]) -> Arc<crate::notify::Event> {
        Arc::new(crate::notify::Event::new(
            seq,
            1_795_000_000_000,
            "session.started",
            Some("001010000000001"),
            format!("session.started:gx;{seq}"),
            serde_json::json!({ "session": format!("gx;{seq}") }),
            sinks.iter().map(|s| Arc::from(*s)).collect(),
        ))
    }

    #[test]
    fn outbox_rows_are_written_with_the_batch_acked_per_sink_and_reloaded_in_order() {
        let dir = TestDir::new("outbox");
        let e1 = event(10, &["crm", "bus"]);
        let e2 = event(11, &["bus"]);
        let ack = |seq, sink: &str| Change::AckEvent {
            seq,
            sink: Arc::from(sink),
            subscriber: "001010000000001".into(),
            provisioning: false,
        };
        {
            let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open");
            let rows = st
                .apply(&[
                    Change::PutSession(Arc::new(session("gx;10", "001010000000001", 1))),
                    Change::PutEvent(e1.clone()),
                    Change::PutEvent(e2.clone()),
                ])
                .expect("apply");
            assert_eq!(rows, 4, "the session and one row per event and sink");
            assert_eq!(st.apply(&[Change::PutEvent(e1.clone())]).expect("again"), 0);
            assert_eq!(st.apply(&[ack(10, "bus")]).expect("ack"), 1);
        }
        let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("reopen");
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

    #[test]
    fn round_trip_and_reopen() {
        let dir = TestDir::new("round-trip");
        let s1 = session("gx;1", "001010000000001", 1);
        let mut s2 = session("gx;2", "001010000000002", 2);
        s2.state = SessionState::Closed;
        s2.closed_ms = Some(5);
        let sub = subscriber("001010000000001");
        {
            let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open");
            assert_eq!(
                st.schema_version().expect("version"),
                MIGRATIONS.len() as u32
            );
            let rows = st
                .apply(&[
                    Change::PutSession(Arc::new(s1.clone())),
                    Change::PutSession(Arc::new(s2.clone())),
                    Change::PutSubscriber(Arc::new(sub.clone())),
                ])
                .expect("apply");
            assert_eq!(rows, 3);
        }
        let mut st = SqliteStore::open(dir.path(), Durability::Relaxed).expect("reopen");
        assert_eq!(
            st.schema_version().expect("version"),
            MIGRATIONS.len() as u32
        );
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
    fn usage_round_trip_reopen_and_delete() {
        let dir = TestDir::new("usage");
        let a = usage("001010000000001", 1000);
        let b = usage("4915112345678", 2000);
        {
            let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open");
            let rows = st
                .apply(&[
                    Change::PutUsage(Arc::new(a.clone())),
                    Change::PutUsage(Arc::new(b.clone())),
                ])
                .expect("apply");
            assert_eq!(rows, 2);
        }
        let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("reopen");
        let mut all = st.usage_records().expect("load");
        all.sort_by(|x, y| x.subscriber.cmp(&y.subscriber));
        assert_eq!(all, vec![a.clone(), b.clone()]);
        assert_eq!(st.skipped_corrupt(), 0);
        assert_eq!(st.usage(&a.subscriber).expect("get"), Some(a.clone()));
        assert_eq!(st.usage("nobody").expect("get"), None);
        // A changed accumulator replaces the row.
        let a2 = usage(&a.subscriber, 1500);
        assert_eq!(
            st.apply(&[Change::PutUsage(Arc::new(a2.clone()))])
                .expect("update"),
            1
        );
        assert_eq!(st.usage(&a.subscriber).expect("get"), Some(a2));
        assert_eq!(
            st.apply(&[
                Change::DeleteUsage(b.subscriber.to_string()),
                Change::DeleteUsage("nobody".into()),
            ])
            .expect("delete"),
            1
        );
        assert_eq!(st.usage_records().expect("load").len(), 1);
    }

    #[test]
    fn identical_usage_put_does_not_commit() {
        let dir = TestDir::new("usage-unchanged");
        let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open");
        let s = Arc::new(session("gx;u", "001010000000009", 7));
        let u = Arc::new(usage("001010000000009", 42));
        let batch = [Change::PutSession(s), Change::PutUsage(u.clone())];
        assert_eq!(st.apply(&batch).expect("first"), 2);
        let wal_before = wal_frames(dir.path());
        let changes_before = total_changes(&st);
        assert_eq!(st.apply(&batch).expect("again"), 0);
        assert_eq!(st.apply(&[Change::PutUsage(u)]).expect("usage only"), 0);
        assert_eq!(total_changes(&st), changes_before);
        assert_eq!(wal_frames(dir.path()), wal_before);
        // The accumulator moved: one row, committed.
        let moved = Arc::new(usage("001010000000009", 43));
        assert_eq!(
            st.apply(&[batch[0].clone(), Change::PutUsage(moved)])
                .expect("changed"),
            1
        );
        assert!(wal_frames(dir.path()) > wal_before);
    }

    #[test]
    fn corrupt_usage_rows_are_skipped_and_counted() {
        let dir = TestDir::new("usage-corrupt");
        let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open");
        st.apply(&[
            Change::PutUsage(Arc::new(usage("good", 1))),
            Change::PutUsage(Arc::new(usage("bad", 1))),
            Change::PutUsage(Arc::new(usage("moved", 1))),
        ])
        .expect("apply");
        // One undecodable blob, one blob that names another subscriber.
        st.conn
            .execute_batch(
                "UPDATE usage SET data = x'7b' WHERE subscriber = 'bad';
                 UPDATE usage SET data = (SELECT data FROM usage WHERE subscriber = 'good')
                     WHERE subscriber = 'moved';",
            )
            .expect("damage");
        let all = st.usage_records().expect("load despite bad rows");
        assert_eq!(all, vec![usage("good", 1)]);
        assert_eq!(st.skipped_corrupt(), 2);
        match st.usage("bad") {
            Err(StoreError::Corrupt(m)) => assert!(m.contains("\"bad\""), "{m}"),
            other => panic!("expected a corrupt error, got {other:?}"),
        }
    }

    #[test]
    fn schema_1_database_is_migrated_to_usage() {
        let dir = TestDir::new("usage-migrate");
        let sub = subscriber("001010000000001");
        {
            // A database as the previous release left it: schema 1 only.
            let conn = Connection::open(dir.path().join(DB_FILE)).expect("create");
            conn.execute_batch(MIGRATIONS[0]).expect("schema 1");
            conn.execute_batch("PRAGMA user_version = 1")
                .expect("version");
            let data = serde_json::to_vec(&sub).expect("encode");
            conn.execute(
                "INSERT INTO subscribers (imsi, msisdn, data) VALUES (?1, ?2, ?3)",
                params![sub.imsi, sub.msisdn, data],
            )
            .expect("row");
        }
        let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open migrates");
        assert_eq!(
            st.schema_version().expect("version"),
            MIGRATIONS.len() as u32
        );
        assert_eq!(st.subscribers().expect("kept"), vec![sub]);
        assert!(st.usage_records().expect("empty table").is_empty());
        assert_eq!(
            st.apply(&[Change::PutUsage(Arc::new(usage("001010000000001", 5)))])
                .expect("write"),
            1
        );
    }

    #[test]
    fn schema_4_json_records_are_rewritten_in_the_binary_form() {
        let dir = TestDir::new("binary-migrate");
        let id = "pgw-2.bench.test;82540084;199";
        let sub = subscriber("001010000000200");
        let u = usage("001010000000200", 4_410_615);
        {
            // A database as the previous release left it: schema 4, JSON
            // records (the session as an older build wrote it).
            let conn = Connection::open(dir.path().join(DB_FILE)).expect("create");
            for sql in &MIGRATIONS[..4] {
                conn.execute_batch(sql).expect("schema");
            }
            conn.execute_batch("PRAGMA user_version = 4")
                .expect("version");
            conn.execute(
                "INSERT INTO sessions (id, subscriber, state, pcef_host, updated_ms, closed_ms, data)
                 VALUES (?1, '001010000000200', 'closed', 'pgw-2.bench.test', 1, 1, ?2)",
                params![id, crate::store::blob::tests::BEFORE_RAW_INPUTS.as_bytes()],
            )
            .expect("session row");
            conn.execute(
                "INSERT INTO sessions (id, subscriber, state, pcef_host, updated_ms, closed_ms, data)
                 VALUES ('bad', '001010000000200', 'open', 'pgw', 1, NULL, 'not json')",
                [],
            )
            .expect("bad row");
            conn.execute(
                "INSERT INTO subscribers (imsi, msisdn, data) VALUES (?1, ?2, ?3)",
                params![
                    sub.imsi,
                    sub.msisdn,
                    serde_json::to_vec(&sub).expect("json")
                ],
            )
            .expect("subscriber row");
            conn.execute(
                "INSERT INTO usage (subscriber, data) VALUES (?1, ?2)",
                params![u.subscriber, serde_json::to_vec(&u).expect("json")],
            )
            .expect("usage row");
        }
        let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open migrates");
        assert_eq!(
            st.schema_version().expect("version") as usize,
            MIGRATIONS.len()
        );
        let first_bytes: Vec<(String, Vec<u8>)> = st
            .conn
            .prepare(
                "SELECT id, substr(data, 1, 1) FROM sessions
                 UNION ALL SELECT imsi, substr(data, 1, 1) FROM subscribers
                 UNION ALL SELECT subscriber, substr(data, 1, 1) FROM usage ORDER BY 1",
            )
            .and_then(|mut q| {
                q.query_map([], |r| Ok((r.get(0)?, blob_bytes(r.get(1)?))))?
                    .collect()
            })
            .expect("rows");
        let tag = vec![crate::store::blob::MSGPACK_V1];
        assert_eq!(
            first_bytes,
            vec![
                ("001010000000200".into(), tag.clone()),
                ("001010000000200".into(), tag.clone()),
                ("bad".into(), b"n".to_vec()),
                (id.into(), tag),
            ]
        );
        let s = st.session(id).expect("read").expect("there");
        assert_eq!(s.installed.rules, vec!["internet".to_string()]);
        assert_eq!(s.last_answer.as_deref().map(|a| a.len()), Some(0x98));
        assert_eq!(st.subscribers().expect("read"), vec![sub]);
        assert_eq!(st.usage_records().expect("read"), vec![u]);
        // The record that was not JSON is still there, still skipped and counted.
        assert!(st.open_sessions().expect("load").is_empty());
        assert_eq!(st.skipped_corrupt(), 1);
    }

    fn total_changes(st: &SqliteStore) -> u64 {
        st.conn.total_changes()
    }

    fn wal_frames(dir: &Path) -> u64 {
        std::fs::metadata(dir.join("pcrf.db-wal"))
            .map(|m| m.len())
            .unwrap_or(0)
    }

    #[test]
    fn checkpoints_run_on_their_own_thread_never_in_a_commit() {
        let dir = TestDir::new("checkpoints");
        let mut st = SqliteStore::open(dir.path(), Durability::Relaxed).expect("open");
        let auto: i64 = st
            .conn
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
            .expect("pragma");
        assert_eq!(auto, 0, "a commit would checkpoint");
        let db_before = std::fs::metadata(st.path()).expect("db").len();
        // Past SQLite's 1000-page automatic checkpoint.
        for chunk in 0..12 {
            let changes: Vec<Change> = (0..200)
                .map(|i| {
                    let id = format!("s{chunk}-{i}");
                    Change::PutSession(Arc::new(session(&id, "1", i)))
                })
                .collect();
            st.apply(&changes).expect("apply");
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while st.checkpoints() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(st.checkpoints() > 0, "no background checkpoint");
        // Copied into the database file, which the writer never did.
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::fs::metadata(st.path()).expect("db").len() < db_before + 1_000_000
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(std::fs::metadata(st.path()).expect("db").len() > db_before + 1_000_000);
        // Once checkpointed, the next commit starts the WAL over: wait for a
        // checkpoint pass to finish after the copy was seen.
        wait_for_checkpoint_after(&st, st.checkpoints());
        st.apply(&[Change::PutSession(Arc::new(session("after", "1", 1)))])
            .expect("apply");
        assert_eq!(st.open_sessions().expect("load").len(), 2401);
    }

    /// Frames in the WAL now, read with a PASSIVE checkpoint from a
    /// connection of the test's own (it copies what it can, as the
    /// background thread would).
    fn wal_log_frames(path: &Path) -> i64 {
        let conn = Connection::open(path).expect("open");
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get(1))
            .expect("checkpoint")
    }

    fn wait_for_checkpoint_after(st: &SqliteStore, seen: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while st.checkpoints() <= seen && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(st.checkpoints() > seen, "no background checkpoint");
    }

    #[test]
    fn the_writer_catches_up_a_checkpoint_raced_by_commits_so_the_wal_starts_over() {
        let dir = TestDir::new("catch-up");
        let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open");
        let batch = |tag: &str, n: i64| -> Vec<Change> {
            (0..n)
                .map(|i| Change::PutSession(Arc::new(session(&format!("{tag}-{i}"), "1", i))))
                .collect()
        };
        st.apply(&batch("a", 50)).expect("apply");
        // A reader holding the first snapshot stands for the commits that
        // race a background checkpoint: that checkpoint copies only up to
        // it, so the WAL is not wholly copied when the writer next commits.
        let reader = Connection::open(st.path()).expect("reader");
        reader.execute_batch("BEGIN").expect("begin");
        let _: i64 = reader
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .expect("read");
        let seen = st.checkpoints();
        st.apply(&batch("b", 200)).expect("apply");
        wait_for_checkpoint_after(&st, seen);
        reader.execute_batch("COMMIT").expect("end the read");
        drop(reader);

        st.after_batch();
        st.apply(&batch("c", 1)).expect("apply");
        let frames = wal_log_frames(st.path());
        assert!(
            frames < 10,
            "the commit after the catch-up starts the WAL over: {frames} frames in it"
        );
        assert_eq!(st.open_sessions().expect("load").len(), 251);
    }

    #[test]
    fn unchanged_put_changes_nothing_and_does_not_commit() {
        let dir = TestDir::new("unchanged");
        let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open");
        let s = Arc::new(session("gx;u", "001010000000009", 7));
        let sub = Arc::new(subscriber("001010000000009"));
        let batch = [Change::PutSession(s.clone()), Change::PutSubscriber(sub)];
        assert_eq!(st.apply(&batch).expect("first"), 2);
        let wal_before = wal_frames(dir.path());
        let changes_before = total_changes(&st);
        // Same records again: no row changes, the transaction is rolled
        // back, nothing reaches the WAL.
        assert_eq!(st.apply(&batch).expect("again"), 0);
        assert_eq!(total_changes(&st), changes_before);
        assert_eq!(wal_frames(dir.path()), wal_before);
        assert!(st.conn.is_autocommit(), "no transaction left open");
        // A deletion of a missing row is no change either.
        assert_eq!(
            st.apply(&[Change::delete_session("missing", "1")])
                .expect("delete missing"),
            0
        );
        // One real difference among unchanged rows is one row.
        let mut s2 = (*s).clone();
        s2.updated_ms = 8;
        assert_eq!(
            st.apply(&[batch[0].clone(), Change::PutSession(Arc::new(s2.clone()))])
                .expect("changed"),
            1
        );
        assert!(wal_frames(dir.path()) > wal_before);
        assert_eq!(st.session("gx;u").expect("get"), Some(s2));
    }

    #[test]
    fn purge_removes_only_old_closed_sessions_in_chunks() {
        let dir = TestDir::new("purge");
        let mut st = SqliteStore::open(dir.path(), Durability::Relaxed).expect("open");
        let mut changes = Vec::new();
        for i in 0..10 {
            let mut s = session(&format!("gx;{i}"), "001010000000001", i);
            if i < 7 {
                s.state = SessionState::Closed;
                s.closed_ms = Some(100 + i);
            }
            changes.push(Change::PutSession(Arc::new(s)));
        }
        st.apply(&changes).expect("apply");
        // Closed before 105: gx;0..gx;4, removed 3 then 2.
        assert_eq!(st.purge_closed(105, 3).expect("purge"), 3);
        assert_eq!(st.purge_closed(105, 3).expect("purge"), 2);
        assert_eq!(st.purge_closed(105, 3).expect("purge"), 0);
        assert!(st.session("gx;5").expect("get").is_some());
        assert!(st.session("gx;4").expect("get").is_none());
        assert_eq!(st.open_sessions().expect("load").len(), 3);
    }

    #[test]
    fn corrupt_records_are_skipped_counted_and_named() {
        let dir = TestDir::new("corrupt");
        {
            let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open");
            st.apply(&[
                Change::PutSession(Arc::new(session("good", "001010000000001", 1))),
                Change::PutSession(Arc::new(session("bad", "001010000000001", 1))),
                Change::PutSession(Arc::new(session("cut", "001010000000001", 1))),
                Change::PutSubscriber(Arc::new(subscriber("001010000000001"))),
            ])
            .expect("apply");
            // A damaged JSON record, a binary one cut short, a subscriber
            // that is neither.
            st.conn
                .execute_batch(
                    "UPDATE sessions SET data = x'7b2269' WHERE id = 'bad';
                     UPDATE sessions SET data = substr(data, 1, 60) WHERE id = 'cut';
                     UPDATE subscribers SET data = 'not json';",
                )
                .expect("damage");
        }
        let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("reopen");
        let open = st.open_sessions().expect("load despite a bad record");
        assert_eq!(open.len(), 1);
        assert_eq!(&*open[0].id, "good");
        assert_eq!(st.skipped_corrupt(), 2);
        for id in ["bad", "cut"] {
            match st.session(id) {
                Err(StoreError::Corrupt(m)) => assert!(m.contains(&format!("{id:?}")), "{m}"),
                other => panic!("expected a corrupt error, got {other:?}"),
            }
        }
        assert!(st.subscribers().expect("load").is_empty());
        assert_eq!(st.skipped_corrupt(), 1);
    }

    #[test]
    fn recovery_decodes_many_chunks_in_parallel_and_keeps_every_record() {
        let dir = TestDir::new("many");
        let mut st = SqliteStore::open(dir.path(), Durability::Relaxed).expect("open");
        let n = DECODE_CHUNK * 3 + 17;
        let changes: Vec<Change> = (0..n)
            .map(|i| Change::PutSession(Arc::new(session(&format!("s{i:05}"), "1", i as i64))))
            .collect();
        assert_eq!(st.apply(&changes).expect("apply"), n);
        st.conn
            .execute_batch(
                "UPDATE sessions SET data = x'00' WHERE id IN ('s00003', 's00600', 's01500')",
            )
            .expect("damage three in different chunks");
        let open = st.open_sessions().expect("load");
        assert_eq!(st.skipped_corrupt(), 3);
        assert_eq!(open.len(), n - 3);
        let mut ids: Vec<&str> = open.iter().map(|s| &*s.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n - 3);
        assert!(!ids.contains(&"s00600"));
        assert!(open
            .iter()
            .all(|s| s.id[1..].parse::<i64>().ok() == Some(s.updated_ms)));
    }

    #[test]
    fn not_a_directory_is_a_clear_error() {
        let dir = TestDir::new("not-dir");
        let file = dir.path().join("plain-file");
        std::fs::write(&file, b"x").expect("write");
        match SqliteStore::open(&file.join("data"), Durability::Full) {
            Err(StoreError::Unavailable(m)) => {
                assert!(m.contains("cannot create store directory"), "{m}");
                assert!(m.contains("plain-file"), "{m}");
            }
            other => panic!("expected unavailable, got {other:?}"),
        }
    }

    #[test]
    fn garbage_database_file_is_reported_corrupt() {
        let dir = TestDir::new("garbage-db");
        std::fs::write(dir.path().join(DB_FILE), vec![0x5a; 8192]).expect("write");
        match SqliteStore::open(dir.path(), Durability::Full) {
            Err(StoreError::Corrupt(m)) => assert!(m.contains(DB_FILE), "{m}"),
            other => panic!("expected corrupt, got {other:?}"),
        }
    }

    #[test]
    fn second_open_of_one_directory_is_refused() {
        let dir = TestDir::new("locked");
        let _first = SqliteStore::open(dir.path(), Durability::Full).expect("open");
        match SqliteStore::open(dir.path(), Durability::Full) {
            Err(StoreError::Unavailable(m)) => assert!(m.contains("in use"), "{m}"),
            other => panic!("expected in-use error, got {other:?}"),
        }
    }

    #[test]
    fn removed_directory_fails_writes_instead_of_losing_them() {
        let dir = TestDir::new("removed");
        let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open");
        st.apply(&[Change::PutSession(Arc::new(session("a", "1", 1)))])
            .expect("before removal");
        std::fs::remove_dir_all(dir.path()).expect("remove");
        match st.apply(&[Change::PutSession(Arc::new(session("b", "1", 1)))]) {
            Err(StoreError::Unavailable(m)) => assert!(m.contains("is gone"), "{m}"),
            other => panic!("expected unavailable, got {other:?}"),
        }
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = TestDir::new("newer-schema");
        {
            let st = SqliteStore::open(dir.path(), Durability::Full).expect("open");
            st.conn
                .execute_batch("PRAGMA user_version = 99")
                .expect("bump");
        }
        match SqliteStore::open(dir.path(), Durability::Full) {
            Err(StoreError::Unavailable(m)) => assert!(m.contains("newer"), "{m}"),
            other => panic!("expected refusal, got {other:?}"),
        }
    }

    #[test]
    fn full_database_is_unavailable_and_recovers() {
        let dir = TestDir::new("full");
        let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open");
        st.apply(&[Change::PutSession(Arc::new(session("a", "1", 1)))])
            .expect("first");
        st.limit_size(0).expect("cap at current size");
        let big: Vec<Change> = (0..200)
            .map(|i| Change::PutSession(Arc::new(session(&format!("big{i}"), "1", i))))
            .collect();
        match st.apply(&big) {
            Err(StoreError::Unavailable(m)) => assert!(m.contains("disk full"), "{m}"),
            other => panic!("expected disk full, got {other:?}"),
        }
        // Nothing of the failed batch is visible; the store still works.
        assert!(st.session("big0").expect("get").is_none());
        assert_eq!(
            st.apply(&[Change::delete_session("a", "1")])
                .expect("delete fits"),
            1
        );
        st.limit_size(1 << 30).expect("raise");
        assert_eq!(st.apply(&big).expect("fits now"), 200);
    }

    #[test]
    fn the_page_cache_is_the_budget_alone_and_a_share_when_set() {
        let dir = TestDir::new("cache");
        let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open");
        let cache = |st: &SqliteStore| -> i64 {
            st.conn
                .query_row("PRAGMA cache_size", [], |r| r.get(0))
                .expect("cache_size")
        };
        assert_eq!(cache(&st), -(PAGE_CACHE_KIB as i64));
        st.set_page_cache_kib(PAGE_CACHE_KIB / 4).expect("share");
        assert_eq!(cache(&st), -(PAGE_CACHE_KIB as i64 / 4));
    }
}
