//! The deployed versions (`versions::VersionStore`) in the PostgreSQL
//! store, on a connection of their own (opened when first needed, opened
//! again after a failure), so that a deployment never queues behind the
//! writers' batches. The insert's trigger NOTIFYs `pcrf_versions` in the
//! writing transaction (schema 12): every node hears of the version when
//! it commits (`cluster::version_feed`).

use super::{block, parse_url, runtime};
use crate::store::versions::{NewVersion, StoredVersion, VersionStore};
use crate::store::StoreError;
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio_postgres::{Client, NoTls, Row};

/// The versions in one PostgreSQL database.
pub struct PostgresVersions {
    rt: Runtime,
    cfg: tokio_postgres::Config,
    timeout: Duration,
    client: Mutex<Option<Arc<Client>>>,
}

const COLUMNS: &str = "id, parent, hash, deployed_by, at_ms, comment";

fn unavailable(ctx: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("{ctx}: {e}"))
}

fn version(r: &Row, with_content: bool) -> Result<StoredVersion, tokio_postgres::Error> {
    Ok(StoredVersion {
        id: r.try_get(0)?,
        parent: r.try_get(1)?,
        hash: r.try_get(2)?,
        by: r.try_get(3)?,
        at_ms: r.try_get(4)?,
        comment: r.try_get(5)?,
        content: if with_content {
            r.try_get(6)?
        } else {
            Vec::new()
        },
    })
}

impl PostgresVersions {
    /// Nothing is connected yet; the schema is the store's (migrated when
    /// the store opened).
    pub fn new(url: &str, timeout: Duration) -> Result<PostgresVersions, StoreError> {
        let mut cfg = parse_url(url, timeout)?;
        cfg.application_name("pcrf-versions");
        Ok(PostgresVersions {
            rt: runtime()?,
            cfg,
            timeout,
            client: Mutex::new(None),
        })
    }

    /// The connection, opened if needed.
    fn connected(&self, ctx: &str) -> Result<Arc<Client>, StoreError> {
        if let Some(c) = self.client.lock().as_ref() {
            return Ok(c.clone());
        }
        let (cfg, timeout) = (&self.cfg, self.timeout);
        let client = block(&self.rt, async {
            let (client, conn) = tokio::time::timeout(timeout, cfg.connect(NoTls))
                .await
                .map_err(|_| unavailable(ctx, "connecting timed out"))?
                .map_err(|e| unavailable(ctx, e))?;
            tokio::spawn(conn);
            Ok::<_, StoreError>(Arc::new(client))
        })?;
        *self.client.lock() = Some(client.clone());
        Ok(client)
    }

    /// Runs the future `f` makes on the connection, within the timeout.
    /// A connection found closed (the database restarted or switched
    /// over, an idle timeout) is replaced and `f` runs once more; any
    /// other failure drops the connection, so the next call opens another.
    fn run<T: Send, F, Fut>(&self, ctx: &str, f: F) -> Result<T, StoreError>
    where
        F: Fn(Arc<Client>) -> Fut,
        Fut: std::future::Future<Output = Result<T, tokio_postgres::Error>> + Send,
    {
        let mut retried = false;
        loop {
            let client = self.connected(ctx)?;
            let fut = f(client);
            let result = block(&self.rt, async {
                tokio::time::timeout(self.timeout, fut).await
            });
            if !matches!(result, Ok(Ok(_))) {
                *self.client.lock() = None;
            }
            match result {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if e.is_closed() && !retried => retried = true,
                Ok(Err(e)) => return Err(unavailable(ctx, e)),
                Err(_) => return Err(unavailable(ctx, "timed out")),
            }
        }
    }
}

impl VersionStore for PostgresVersions {
    fn append(&self, v: &NewVersion<'_>) -> Result<Option<StoredVersion>, StoreError> {
        let (id, parent) = (v.id(), v.parent);
        let ctx = "appending a deployed version";
        let n = self.run(ctx, |c| async move {
            c.execute(
                "INSERT INTO deployed_versions
                        (artifact, id, parent, hash, deployed_by, at_ms, comment, content)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
                &[
                    &v.artifact,
                    &id,
                    &parent,
                    &v.hash,
                    &v.by,
                    &v.at_ms,
                    &v.comment,
                    &v.content,
                ],
            )
            .await
        })?;
        Ok((n == 1).then(|| v.stored()))
    }

    fn list(
        &self,
        artifact: &str,
        before: Option<i64>,
        limit: usize,
    ) -> Result<Vec<StoredVersion>, StoreError> {
        let before = before.unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let ctx = "listing deployed versions";
        self.run(ctx, |c| async move {
            let rows = c
                .query(
                    &format!(
                        "SELECT {COLUMNS} FROM deployed_versions \
                             WHERE artifact = $1 AND id < $2 ORDER BY id DESC LIMIT $3"
                    ),
                    &[&artifact, &before, &limit],
                )
                .await?;
            rows.iter().map(|r| version(r, false)).collect()
        })
    }

    fn get(&self, artifact: &str, id: i64) -> Result<Option<StoredVersion>, StoreError> {
        let ctx = "reading a deployed version";
        self.run(ctx, |c| async move {
            let row = c
                .query_opt(
                    &format!(
                        "SELECT {COLUMNS}, content FROM deployed_versions \
                             WHERE artifact = $1 AND id = $2"
                    ),
                    &[&artifact, &id],
                )
                .await?;
            row.map(|r| version(&r, true)).transpose()
        })
    }

    fn latest(&self, artifact: &str) -> Result<Option<StoredVersion>, StoreError> {
        let ctx = "reading the newest deployed version";
        self.run(ctx, |c| async move {
            let row = c
                .query_opt(
                    &format!(
                        "SELECT {COLUMNS}, content FROM deployed_versions \
                             WHERE artifact = $1 ORDER BY id DESC LIMIT 1"
                    ),
                    &[&artifact],
                )
                .await?;
            row.map(|r| version(&r, true)).transpose()
        })
    }

    fn has_hash(&self, artifact: &str, hash: &str) -> Result<bool, StoreError> {
        let ctx = "looking a deployed version up by hash";
        self.run(ctx, |c| async move {
            c.query_one(
                "SELECT EXISTS (SELECT 1 FROM deployed_versions \
                     WHERE artifact = $1 AND hash = $2)",
                &[&artifact, &hash],
            )
            .await?
            .try_get(0)
        })
    }
}
