//! The shard files of the embedded store's directory: `pcrf.db` is shard 0
//! (so a directory from before shards is a one-shard directory as it
//! stands), `pcrf-shard-<i>.db` shard i. SQLite allows one writer per file,
//! so each shard is its own file with its own writer.
//!
//! The number of shards may change between starts (`[store] writers`, or
//! its default, the cores of the machine). Shard 0 records the number its
//! directory is laid out for; when it differs (or files of higher shards
//! are left), opening moves every row to the file of its shard under the
//! new number before the server reads anything, then records it. A row is
//! copied into its new file in a synced transaction before it is deleted
//! from the old one, so a crash at any point leaves it in its old file, or
//! in both (identical: the move is redone at the next start); never in none.
//! The new number is recorded before the emptied files past it are
//! removed, so a file missing below the recorded number was never removed
//! by a move.
//!
//! Before moving anything, opening checks that the files are one whole
//! store: a file missing while others remain (`pcrf.db` deleted by hand,
//! a shard file lost in a copy), a file past both the recorded and the
//! configured number that holds rows (left behind), or a file stamped with
//! another store's id or another shard's index (copied or renamed in) would
//! otherwise start a node without those rows, answering as if the
//! subscribers and sessions had never existed. Such a start is refused,
//! naming the files, unless the operator says the loss is known
//! (`pcrf serve --accept-missing-shards`); then the files are stamped as
//! they are, and the next start is a plain one.

use super::config::Durability;
use super::shard;
use super::sqlite::{lock_directory, SqliteStore, DB_FILE};
use super::StoreError;
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const SHARD_PREFIX: &str = "pcrf-shard-";
const SHARD_SUFFIX: &str = ".db";

/// The file name of shard `index`.
pub fn shard_file(index: usize) -> String {
    if index == 0 {
        DB_FILE.to_string()
    } else {
        format!("{SHARD_PREFIX}{index}{SHARD_SUFFIX}")
    }
}

/// The shard indexes whose files exist in `dir`.
fn shards_present(dir: &Path) -> Result<Vec<usize>, StoreError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        StoreError::Unavailable(format!(
            "cannot list store directory {}: {e}",
            dir.display()
        ))
    })?;
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name == DB_FILE {
            out.push(0);
        } else if let Some(i) = name
            .strip_prefix(SHARD_PREFIX)
            .and_then(|r| r.strip_suffix(SHARD_SUFFIX))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&i| i > 0)
        {
            out.push(i);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// What opening had to move to lay the directory out for its shards.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resharded {
    /// The number the directory was laid out for (1 before shards).
    pub from: usize,
    pub sessions_moved: u64,
    pub usage_moved: u64,
    /// Files of shards past the new number, emptied and removed.
    pub files_removed: usize,
}

/// Opens the `shards` database files of `dir` (at least one), moving rows
/// first when the directory was laid out for another number. Returns the
/// stores, shard i at index i, and what was moved (None: nothing to do).
/// Files that are not one whole store are refused (see the module's
/// comment) unless `accept_missing_shards`.
pub fn open_shards(
    dir: &Path,
    shards: usize,
    durability: Durability,
    accept_missing_shards: bool,
) -> Result<(Vec<SqliteStore>, Option<Resharded>), StoreError> {
    let shards = shards.clamp(1, shard::MAX_SHARDS);
    let lock = lock_directory(dir)?;
    let present = shards_present(dir)?;
    let mut open: BTreeMap<usize, SqliteStore> = BTreeMap::new();
    // The files there first: nothing is created before they are checked.
    for &i in &present {
        open.insert(
            i,
            SqliteStore::open_file(dir.join(shard_file(i)), durability, lock.clone())?,
        );
    }
    let recorded = open
        .get(&0)
        .map(|s| recorded_shards(s.connection()))
        .transpose()?
        .flatten();
    let problems = disagreements(&open, recorded, shards)?;
    if !problems.is_empty() {
        let list = problems.join("; ");
        if !accept_missing_shards {
            return Err(StoreError::Unavailable(format!(
                "store directory {} is not one whole store: {list}. Its rows would be \
                 missing. Put the files back, or start once with `pcrf serve \
                 --accept-missing-shards` to go on with the rows that remain",
                dir.display()
            )));
        }
        tracing::warn!(dir = %dir.display(), problems = %list,
            "store files that disagree accepted (--accept-missing-shards): \
             going on with the rows that remain");
    }
    for i in 0..shards {
        if let std::collections::btree_map::Entry::Vacant(slot) = open.entry(i) {
            slot.insert(SqliteStore::open_file(
                dir.join(shard_file(i)),
                durability,
                lock.clone(),
            )?);
        }
    }
    stamp(&open)?;
    let extra = present.iter().any(|&i| i >= shards);
    let mut report = None;
    if recorded != Some(shards) || extra {
        let mut r = Resharded {
            from: recorded.unwrap_or(1),
            ..Default::default()
        };
        for (&index, store) in &open {
            let (s, u) = move_misplaced(store.connection(), index, shards, dir)?;
            r.sessions_moved += s;
            r.usage_moved += u;
        }
        let gone: Vec<usize> = open.keys().copied().filter(|&i| i >= shards).collect();
        for i in &gone {
            if let Some(store) = open.get(i) {
                ensure_empty(store.connection(), &store.path().display().to_string())?;
            }
        }
        // Recorded before the emptied files go: a file missing below the
        // recorded number is then always one lost, never one removed here.
        if let Some(first) = open.get(&0) {
            record_shards(first.connection(), shards)?;
        }
        for i in gone {
            if let Some(store) = open.remove(&i) {
                drop(store);
                remove_database(&dir.join(shard_file(i)))?;
                r.files_removed += 1;
            }
        }
        if r.from != shards || r.sessions_moved + r.usage_moved > 0 || r.files_removed > 0 {
            tracing::info!(dir = %dir.display(), from = r.from, to = shards,
                sessions_moved = r.sessions_moved, usage_moved = r.usage_moved,
                files_removed = r.files_removed, "store directory laid out for its shards");
            report = Some(r);
        }
    }
    Ok((open.into_values().collect(), report))
}

/// What makes the open files of a directory not one whole store, each in
/// words naming the file; empty when they are.
fn disagreements(
    open: &BTreeMap<usize, SqliteStore>,
    recorded: Option<usize>,
    shards: usize,
) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::new();
    if open.is_empty() {
        return Ok(out);
    }
    // Shard 0 holds the layout: the others say a store was here.
    let expected = if open.contains_key(&0) {
        recorded.unwrap_or(1)
    } else {
        1
    };
    for i in (0..expected).filter(|i| !open.contains_key(i)) {
        let others: Vec<String> = open.keys().map(|&j| shard_file(j)).collect();
        out.push(format!(
            "{} is missing while {} remain",
            shard_file(i),
            others.join(", ")
        ));
    }
    let laid_out = expected.max(shards);
    for (&i, store) in open.range(laid_out..) {
        let rows = row_count(store.connection())?;
        if rows > 0 {
            out.push(format!(
                "{} holds {rows} rows but the directory is laid out for {expected} \
                 shard(s) and [store] writers is {shards}: left behind by another layout",
                shard_file(i)
            ));
        }
    }
    let ids: BTreeMap<usize, Option<(String, usize)>> = open
        .iter()
        .map(|(&i, s)| Ok((i, stamped(s.connection())?)))
        .collect::<Result<_, StoreError>>()?;
    let first = ids.get(&0).cloned().flatten();
    for (&i, id) in &ids {
        match (id, &first) {
            (Some((_, index)), _) if *index != i => out.push(format!(
                "{} is shard {index} of its store (renamed?)",
                shard_file(i)
            )),
            (Some((store, _)), Some((first_store, _))) if store != first_store => {
                out.push(format!(
                    "{} belongs to another store (id {store}, not {first_store})",
                    shard_file(i)
                ))
            }
            (Some((store, _)), None) if open.contains_key(&0) => out.push(format!(
                "{} belongs to store {store} but {} carries no store id \
                 (replaced by a new or older file?)",
                shard_file(i),
                shard_file(0)
            )),
            _ => {}
        }
    }
    Ok(out)
}

/// Rows of the record tables of one file.
fn row_count(conn: &Connection) -> Result<i64, StoreError> {
    let count = |table: &str| {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
            r.get::<_, i64>(0)
        })
        .map_err(|e| ctx_error("counting rows of a shard file", e))
    };
    Ok(count("sessions")? + count("usage")? + count("subscribers")? + count("outbox")?)
}

/// The store id and shard index a file is stamped with (None: a file
/// from before stamps, or new).
fn stamped(conn: &Connection) -> Result<Option<(String, usize)>, StoreError> {
    conn.query_row("SELECT store, shard FROM store_identity LIMIT 1", [], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
    })
    .optional()
    .map(|v| v.and_then(|(s, i)| usize::try_from(i).ok().map(|i| (s, i))))
    .map_err(|e| ctx_error("reading the store identity", e))
}

/// A store id no other directory has: std's randomly keyed hasher over
/// the time and the process id (no generator needed for 64 bits that only
/// tell stores apart).
fn new_store_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// Stamps every file with shard 0's store id (made now if it has none)
/// and its own index, where it is not already.
fn stamp(open: &BTreeMap<usize, SqliteStore>) -> Result<(), StoreError> {
    let Some(first) = open.get(&0) else {
        return Ok(());
    };
    let store = match stamped(first.connection())? {
        Some((store, _)) => store,
        None => new_store_id(),
    };
    for (&i, s) in open {
        if stamped(s.connection())? == Some((store.clone(), i)) {
            continue;
        }
        let conn = s.connection();
        let n = i64::try_from(i).unwrap_or(i64::MAX);
        conn.execute_batch("BEGIN IMMEDIATE")
            .and_then(|()| conn.execute("DELETE FROM store_identity", []))
            .and_then(|_| {
                conn.execute(
                    "INSERT INTO store_identity (store, shard) VALUES (?1, ?2)",
                    params![store, n],
                )
            })
            .and_then(|_| conn.execute_batch("COMMIT"))
            .map_err(|e| {
                let _ = conn.execute_batch("ROLLBACK");
                ctx_error("stamping the store identity", e)
            })?;
    }
    Ok(())
}

fn ctx_error(ctx: &str, e: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(format!("{ctx}: {e}"))
}

fn recorded_shards(conn: &Connection) -> Result<Option<usize>, StoreError> {
    conn.query_row("SELECT shards FROM layout LIMIT 1", [], |r| {
        r.get::<_, i64>(0)
    })
    .optional()
    .map(|v| v.and_then(|n| usize::try_from(n).ok()))
    .map_err(|e| ctx_error("reading the store layout", e))
}

fn record_shards(conn: &Connection, shards: usize) -> Result<(), StoreError> {
    let n = i64::try_from(shards).unwrap_or(i64::MAX);
    conn.execute_batch("BEGIN IMMEDIATE")
        .and_then(|()| conn.execute("DELETE FROM layout", []))
        .and_then(|_| conn.execute("INSERT INTO layout (shards) VALUES (?1)", params![n]))
        .and_then(|_| conn.execute_batch("COMMIT"))
        .map_err(|e| {
            let _ = conn.execute_batch("ROLLBACK");
            ctx_error("recording the store layout", e)
        })
}

/// Moves the session and usage rows of `conn` (shard `index`) that belong
/// to another shard into that shard's file; returns how many of each.
fn move_misplaced(
    conn: &Connection,
    index: usize,
    shards: usize,
    dir: &Path,
) -> Result<(u64, u64), StoreError> {
    let ctx = "moving rows to their shard";
    let mut sessions: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut usage: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    {
        let mut st = conn
            .prepare("SELECT id, subscriber FROM sessions")
            .map_err(|e| ctx_error(ctx, e))?;
        let mut rows = st.query([]).map_err(|e| ctx_error(ctx, e))?;
        while let Some(row) = rows.next().map_err(|e| ctx_error(ctx, e))? {
            let id: String = row.get(0).map_err(|e| ctx_error(ctx, e))?;
            let subscriber: String = row.get(1).map_err(|e| ctx_error(ctx, e))?;
            let to = shard::of_subscriber(&subscriber, shards);
            if to != index {
                sessions.entry(to).or_default().push(id);
            }
        }
        let mut st = conn
            .prepare("SELECT subscriber FROM usage")
            .map_err(|e| ctx_error(ctx, e))?;
        let mut rows = st.query([]).map_err(|e| ctx_error(ctx, e))?;
        while let Some(row) = rows.next().map_err(|e| ctx_error(ctx, e))? {
            let key: String = row.get(0).map_err(|e| ctx_error(ctx, e))?;
            let to = shard::of_subscriber(&key, shards);
            if to != index {
                usage.entry(to).or_default().push(key);
            }
        }
    }
    let (mut moved_sessions, mut moved_usage) = (0, 0);
    for to in sessions
        .keys()
        .chain(usage.keys())
        .copied()
        .collect::<std::collections::BTreeSet<_>>()
    {
        let ids = sessions.get(&to).map(Vec::as_slice).unwrap_or(&[]);
        let keys = usage.get(&to).map(Vec::as_slice).unwrap_or(&[]);
        copy_rows(conn, &dir.join(shard_file(to)), ids, keys)?;
        delete_rows(conn, ids, keys)?;
        moved_sessions += ids.len() as u64;
        moved_usage += keys.len() as u64;
    }
    Ok((moved_sessions, moved_usage))
}

/// Copies rows into the file at `to` in one synced transaction (FULL:
/// the copy is on disk before the originals are deleted).
fn copy_rows(
    conn: &Connection,
    to: &Path,
    ids: &[String],
    keys: &[String],
) -> Result<(), StoreError> {
    let ctx = format!("copying rows into {}", to.display());
    let target = to.to_string_lossy();
    conn.execute("ATTACH DATABASE ?1 AS moving", params![target])
        .map_err(|e| ctx_error(&ctx, e))?;
    let copied = (|| {
        conn.execute_batch("PRAGMA moving.synchronous = FULL; BEGIN")?;
        {
            let mut s = conn.prepare(
                "INSERT OR REPLACE INTO moving.sessions
                     (id, subscriber, state, pcef_host, updated_ms, closed_ms, data)
                 SELECT id, subscriber, state, pcef_host, updated_ms, closed_ms, data
                 FROM main.sessions WHERE id = ?1",
            )?;
            for id in ids {
                s.execute(params![id])?;
            }
            let mut u = conn.prepare(
                "INSERT OR REPLACE INTO moving.usage (subscriber, data)
                 SELECT subscriber, data FROM main.usage WHERE subscriber = ?1",
            )?;
            for key in keys {
                u.execute(params![key])?;
            }
        }
        conn.execute_batch("COMMIT")
    })();
    if copied.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    let detached = conn.execute_batch("DETACH DATABASE moving");
    copied.map_err(|e| ctx_error(&ctx, e))?;
    detached.map_err(|e| ctx_error(&ctx, e))
}

fn delete_rows(conn: &Connection, ids: &[String], keys: &[String]) -> Result<(), StoreError> {
    let ctx = "deleting rows moved to their shard";
    let deleted = (|| {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        {
            let mut s = conn.prepare_cached("DELETE FROM sessions WHERE id = ?1")?;
            for id in ids {
                s.execute(params![id])?;
            }
            let mut u = conn.prepare_cached("DELETE FROM usage WHERE subscriber = ?1")?;
            for key in keys {
                u.execute(params![key])?;
            }
        }
        conn.execute_batch("COMMIT")
    })();
    if deleted.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    deleted.map_err(|e| ctx_error(ctx, e))
}

/// Refuses to remove a shard file that still holds rows (a profile in a
/// file other than shard 0's, which this build never writes).
fn ensure_empty(conn: &Connection, name: &str) -> Result<(), StoreError> {
    let count = |table: &str| {
        conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
            r.get::<_, i64>(0)
        })
        .map_err(|e| ctx_error("counting rows of a shard file", e))
    };
    let left = count("sessions")? + count("usage")? + count("subscribers")?;
    if left != 0 {
        return Err(StoreError::Unavailable(format!(
            "{name} is past the configured shards but still holds {left} rows; \
             start with the previous [store] writers, or move them by hand"
        )));
    }
    Ok(())
}

/// Removes a database file and its WAL and shared-memory files.
fn remove_database(path: &Path) -> Result<(), StoreError> {
    let mut files = vec![path.to_path_buf()];
    for suffix in ["-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        files.push(PathBuf::from(p));
    }
    for f in files {
        match std::fs::remove_file(&f) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(StoreError::Unavailable(format!(
                    "cannot remove emptied shard file {}: {e}",
                    f.display()
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::fixtures::{session, subscriber, usage, TestDir};
    use crate::store::{Change, Store};
    use std::sync::Arc;

    fn key(i: usize) -> String {
        format!("0010100000{i:05}")
    }

    /// A session and a usage row for each of `n` subscribers, and a profile.
    fn rows(n: usize, at: i64) -> Vec<Change> {
        let mut out = Vec::new();
        for i in 0..n {
            out.push(Change::PutSession(Arc::new(session(
                &format!("gx;{i}"),
                &key(i),
                at,
            ))));
            out.push(Change::PutUsage(Arc::new(usage(&key(i), at as u64))));
        }
        out.push(Change::PutSubscriber(Arc::new(subscriber(&key(0)))));
        out
    }

    /// Every row in the file of its shard, none twice; returns the number
    /// of sessions found.
    fn check_placement(stores: &mut [SqliteStore], n: usize, at: i64) {
        let shards = stores.len();
        let mut sessions = 0;
        for (index, store) in stores.iter_mut().enumerate() {
            for s in store.open_sessions().expect("load") {
                assert_eq!(
                    shard::of_subscriber(&s.subscriber, shards),
                    index,
                    "{}",
                    s.id
                );
                assert_eq!(s.updated_ms, at);
                sessions += 1;
            }
            for u in store.usage_records().expect("load") {
                assert_eq!(shard::of_subscriber(&u.subscriber, shards), index);
            }
            let profiles = store.subscribers().expect("load").len();
            assert_eq!(
                profiles,
                usize::from(index == 0),
                "profiles stay in shard 0"
            );
        }
        assert_eq!(sessions, n, "every session once");
    }

    #[test]
    fn a_single_file_directory_is_split_into_shards_on_first_start() {
        let dir = TestDir::new("layout-split");
        {
            // As a build before shards left it: everything in pcrf.db,
            // schema 2, no layout row.
            let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open");
            st.apply(&rows(60, 7)).expect("seed");
            st.connection()
                .execute_batch("DELETE FROM layout")
                .expect("old");
        }
        let (mut stores, moved) =
            open_shards(dir.path(), 4, Durability::Full, false).expect("split");
        let moved = moved.expect("rows moved");
        assert_eq!(moved.from, 1);
        assert!(
            moved.sessions_moved > 20 && moved.sessions_moved < 60,
            "{moved:?}"
        );
        assert_eq!(moved.sessions_moved, moved.usage_moved);
        assert_eq!(stores.len(), 4);
        check_placement(&mut stores, 60, 7);
        drop(stores);
        for i in 1..4 {
            assert!(dir.path().join(shard_file(i)).exists());
        }
        // Laid out: the next start moves nothing.
        let (mut stores, moved) =
            open_shards(dir.path(), 4, Durability::Full, false).expect("again");
        assert_eq!(moved, None);
        check_placement(&mut stores, 60, 7);
    }

    #[test]
    fn fewer_shards_merge_back_and_remove_the_emptied_files() {
        let dir = TestDir::new("layout-merge");
        {
            let (mut stores, _) =
                open_shards(dir.path(), 3, Durability::Full, false).expect("open");
            let shards = stores.len();
            for c in rows(40, 9) {
                let i = shard::of_change(&c, shards);
                stores[i].apply(&[c]).expect("write");
            }
        }
        let (mut stores, moved) =
            open_shards(dir.path(), 2, Durability::Full, false).expect("merge");
        let moved = moved.expect("merged");
        assert_eq!((moved.from, moved.files_removed), (3, 1));
        check_placement(&mut stores, 40, 9);
        drop(stores);
        assert!(!dir.path().join(shard_file(2)).exists());
        assert!(!dir.path().join(format!("{}-wal", shard_file(2))).exists());
        // Back to one file: the layout before shards.
        let (mut stores, _) = open_shards(dir.path(), 1, Durability::Full, false).expect("one");
        check_placement(&mut stores, 40, 9);
        drop(stores);
        let mut single = SqliteStore::open(dir.path(), Durability::Full).expect("single");
        assert_eq!(single.open_sessions().expect("load").len(), 40);
    }

    #[test]
    fn a_move_interrupted_after_the_copy_is_finished_at_the_next_start() {
        let dir = TestDir::new("layout-interrupted");
        {
            let mut st = SqliteStore::open(dir.path(), Durability::Full).expect("open");
            st.apply(&rows(30, 5)).expect("seed");
        }
        // The crash: shard 1's rows were copied into its file, the
        // originals not yet deleted, the layout not yet recorded.
        {
            let lock = lock_directory(dir.path()).expect("lock");
            let first =
                SqliteStore::open_file(dir.path().join(DB_FILE), Durability::Full, lock.clone())
                    .expect("shard 0");
            let _second =
                SqliteStore::open_file(dir.path().join(shard_file(1)), Durability::Full, lock)
                    .expect("shard 1");
            let ids: Vec<String> = (0..30)
                .filter(|&i| shard::of_subscriber(&key(i), 2) == 1)
                .map(|i| format!("gx;{i}"))
                .collect();
            let keys: Vec<String> = (0..30)
                .filter(|&i| shard::of_subscriber(&key(i), 2) == 1)
                .map(key)
                .collect();
            assert!(!ids.is_empty());
            copy_rows(
                first.connection(),
                &dir.path().join(shard_file(1)),
                &ids,
                &keys,
            )
            .expect("copy");
        }
        let (mut stores, moved) =
            open_shards(dir.path(), 2, Durability::Full, false).expect("finish");
        assert!(moved.is_some());
        check_placement(&mut stores, 30, 5);
    }

    #[test]
    fn a_file_past_the_shards_with_a_profile_is_refused_not_removed() {
        let dir = TestDir::new("layout-refuse");
        {
            let (mut stores, _) =
                open_shards(dir.path(), 2, Durability::Full, false).expect("open");
            stores[1]
                .apply(&[Change::PutSubscriber(Arc::new(subscriber("x")))])
                .expect("a profile where this build never writes one");
        }
        match open_shards(dir.path(), 1, Durability::Full, false) {
            Err(StoreError::Unavailable(m)) => assert!(m.contains("still holds 1 rows"), "{m}"),
            other => panic!("expected a refusal, got {:?}", other.map(|(s, _)| s.len())),
        }
        assert!(dir.path().join(shard_file(1)).exists());
    }

    /// Puts a copy of the database file `from` (with its WAL) at `to`.
    fn copy_database(from: &Path, to: &Path) {
        remove_database(to).expect("remove");
        std::fs::copy(from, to).expect("copy");
        let wal = |p: &Path| PathBuf::from(format!("{}-wal", p.display()));
        if wal(from).exists() {
            std::fs::copy(wal(from), wal(to)).expect("copy WAL");
        }
    }

    fn refused(dir: &Path, shards: usize) -> String {
        match open_shards(dir, shards, Durability::Full, false) {
            Err(StoreError::Unavailable(m)) => m,
            other => panic!("expected a refusal, got {:?}", other.map(|(s, _)| s.len())),
        }
    }

    #[test]
    fn a_missing_shard_file_is_refused_until_accepted() {
        let dir = TestDir::new("layout-missing");
        {
            let (mut stores, _) =
                open_shards(dir.path(), 2, Durability::Full, false).expect("open");
            for c in rows(20, 3) {
                let i = shard::of_change(&c, 2);
                stores[i].apply(&[c]).expect("write");
            }
        }
        remove_database(&dir.path().join(shard_file(1))).expect("lose shard 1");
        let m = refused(dir.path(), 2);
        assert!(m.contains("pcrf-shard-1.db is missing"), "{m}");
        assert!(m.contains("--accept-missing-shards"), "{m}");
        let (stores, _) = open_shards(dir.path(), 2, Durability::Full, true).expect("accepted");
        drop(stores);
        // Whole again: a plain open works.
        open_shards(dir.path(), 2, Durability::Full, false).expect("plain");

        remove_database(&dir.path().join(shard_file(0))).expect("lose shard 0");
        let m = refused(dir.path(), 2);
        assert!(m.contains("pcrf.db is missing"), "{m}");
        assert!(
            !dir.path().join(shard_file(0)).exists(),
            "nothing created before the check"
        );
    }

    #[test]
    fn a_file_left_past_the_layout_with_rows_is_refused() {
        let dir = TestDir::new("layout-left");
        drop(open_shards(dir.path(), 2, Durability::Full, false).expect("open"));
        {
            let lock = lock_directory(dir.path()).expect("lock");
            let mut stray =
                SqliteStore::open_file(dir.path().join(shard_file(3)), Durability::Full, lock)
                    .expect("stray");
            stray.apply(&rows(1, 1)[..1]).expect("a row");
        }
        let m = refused(dir.path(), 2);
        assert!(m.contains("pcrf-shard-3.db holds 1 rows"), "{m}");
    }

    #[test]
    fn a_file_of_another_store_or_of_another_shard_is_refused() {
        let dir = TestDir::new("layout-foreign");
        let other = TestDir::new("layout-foreign-other");
        drop(open_shards(dir.path(), 3, Durability::Full, false).expect("open"));
        drop(open_shards(other.path(), 3, Durability::Full, false).expect("open other"));
        let one = dir.path().join(shard_file(1));
        let two = dir.path().join(shard_file(2));
        let kept = dir.path().join("kept");
        copy_database(&two, &kept);
        copy_database(&other.path().join(shard_file(2)), &two);
        let m = refused(dir.path(), 3);
        assert!(
            m.contains("pcrf-shard-2.db belongs to another store"),
            "{m}"
        );
        copy_database(&one, &two);
        let m = refused(dir.path(), 3);
        assert!(m.contains("pcrf-shard-2.db is shard 1"), "{m}");
        copy_database(&kept, &two);
        open_shards(dir.path(), 3, Durability::Full, false).expect("whole again");
    }
}
