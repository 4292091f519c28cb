//! The deployed versions (`versions::VersionStore`) in the embedded
//! store: a table of shard 0's file (every shard file has it, from the
//! same migration; only shard 0's is used), on a connection of its own
//! beside the writer's, so a deployment never waits behind a batch of
//! session writes for longer than SQLite's busy timeout.

use super::sqlite::db_error;
use super::versions::{NewVersion, StoredVersion, VersionStore};
use super::StoreError;
use parking_lot::Mutex;
use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;
use std::time::Duration;

/// The versions in one SQLite file.
pub struct SqliteVersions {
    conn: Mutex<Connection>,
}

const COLUMNS: &str = "id, parent, hash, deployed_by, at_ms, comment";

fn row(r: &rusqlite::Row<'_>, with_content: bool) -> rusqlite::Result<StoredVersion> {
    Ok(StoredVersion {
        id: r.get(0)?,
        parent: r.get(1)?,
        hash: r.get(2)?,
        by: r.get(3)?,
        at_ms: r.get(4)?,
        comment: r.get(5)?,
        content: if with_content { r.get(6)? } else { Vec::new() },
    })
}

impl SqliteVersions {
    /// Opens the store directory's shard 0 file, which `open_shards` has
    /// created and migrated.
    pub fn open(dir: &Path) -> Result<SqliteVersions, StoreError> {
        let path = dir.join(super::sqlite::DB_FILE);
        let ctx = format!("opening {} for policy versions", path.display());
        let conn = Connection::open(&path).map_err(|e| db_error(&ctx, e))?;
        conn.busy_timeout(Duration::from_secs(5))
            .map_err(|e| db_error(&ctx, e))?;
        Ok(SqliteVersions {
            conn: Mutex::new(conn),
        })
    }

    /// A store in memory, for a node built without a store directory
    /// (the fuzz targets, in-process tests): its versions end with it.
    pub fn in_memory() -> Result<SqliteVersions, StoreError> {
        let ctx = "opening the in-memory versions";
        let conn = Connection::open_in_memory().map_err(|e| db_error(ctx, e))?;
        conn.execute_batch(super::sqlite::VERSIONS_TABLE)
            .map_err(|e| db_error(ctx, e))?;
        Ok(SqliteVersions {
            conn: Mutex::new(conn),
        })
    }

    fn one(
        &self,
        ctx: &str,
        sql: &str,
        p: impl rusqlite::Params,
    ) -> Result<Option<StoredVersion>, StoreError> {
        self.conn
            .lock()
            .query_row(sql, p, |r| row(r, true))
            .optional()
            .map_err(|e| db_error(ctx, e))
    }
}

impl VersionStore for SqliteVersions {
    fn append(&self, v: &NewVersion<'_>) -> Result<Option<StoredVersion>, StoreError> {
        let ctx = "appending a deployed version";
        let n = self
            .conn
            .lock()
            .execute(
                "INSERT INTO deployed_versions
                    (artifact, id, parent, hash, deployed_by, at_ms, comment, content)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT DO NOTHING",
                params![
                    v.artifact,
                    v.id(),
                    v.parent,
                    v.hash,
                    v.by,
                    v.at_ms,
                    v.comment,
                    v.content
                ],
            )
            .map_err(|e| db_error(ctx, e))?;
        Ok((n == 1).then(|| v.stored()))
    }

    fn list(
        &self,
        artifact: &str,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<StoredVersion>, StoreError> {
        let ctx = "listing deployed versions";
        let conn = self.conn.lock();
        let mut st = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM deployed_versions WHERE artifact = ?1 AND id < ?2 \
                 ORDER BY id DESC LIMIT ?3"
            ))
            .map_err(|e| db_error(ctx, e))?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = st
            .query_map(params![artifact, before.unwrap_or(i64::MAX), limit], |r| {
                row(r, false)
            })
            .map_err(|e| db_error(ctx, e))?;
        rows.collect::<Result<_, _>>().map_err(|e| db_error(ctx, e))
    }

    fn get(&self, artifact: &str, id: i64) -> Result<Option<StoredVersion>, StoreError> {
        self.one(
            "reading a deployed version",
            &format!(
                "SELECT {COLUMNS}, content FROM deployed_versions WHERE artifact = ?1 AND id = ?2"
            ),
            params![artifact, id],
        )
    }

    fn latest(&self, artifact: &str) -> Result<Option<StoredVersion>, StoreError> {
        self.one(
            "reading the newest deployed version",
            &format!(
                "SELECT {COLUMNS}, content FROM deployed_versions WHERE artifact = ?1 \
                 ORDER BY id DESC LIMIT 1"
            ),
            params![artifact],
        )
    }

    fn has_hash(&self, artifact: &str, hash: &str) -> Result<bool, StoreError> {
        self.conn
            .lock()
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM deployed_versions WHERE artifact = ?1 AND hash = ?2)",
                params![artifact, hash],
                |r| r.get(0),
            )
            .map_err(|e| db_error("looking a deployed version up by hash", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::fixtures::TestDir;
    use crate::store::versions::conformance;
    use crate::store::versions::POLICY;

    #[test]
    fn versions_in_the_store_directory_survive_a_reopen() {
        let dir = TestDir::new("versions");
        {
            // The writer's open creates and migrates the file.
            let _store = crate::store::SqliteStore::open(dir.path(), Default::default())
                .expect("open store");
            let v = SqliteVersions::open(dir.path()).expect("open versions");
            conformance::versions_append_in_order_and_refuse_a_stale_parent(&v);
        }
        let _store =
            crate::store::SqliteStore::open(dir.path(), Default::default()).expect("reopen");
        let v = SqliteVersions::open(dir.path()).expect("reopen versions");
        let latest = v.latest(POLICY).expect("latest").expect("kept");
        assert_eq!((latest.id, latest.content.as_slice()), (2, &b"two"[..]));
    }

    #[test]
    fn versions_in_memory_pass_the_same_checks() {
        let v = SqliteVersions::in_memory().expect("open");
        conformance::versions_append_in_order_and_refuse_a_stale_parent(&v);
    }
}
