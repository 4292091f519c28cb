//! Versioned schema migrations for PostgreSQL, applied at open and by
//! `pcrf db migrate`. `schema_migrations` records each version applied; a
//! version's row is inserted in the same transaction as its DDL, so two
//! servers starting together serialise on that row instead of both
//! applying it (no advisory locks: CockroachDB and YugabyteDB lack them).

use super::encoded::{array_literal, sub_session_ids};
use super::failure::{pg_error, PgFailure};
use crate::session::binding::stored_prefix;
use crate::store::blob::decode_session;
use crate::store::blob::RecordTable;
use crate::store::StoreError;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

/// (version, description, SQL), in order. Append only: a released
/// migration never changes.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "subscribers and sessions, one blob per record",
        // The same model as the embedded store. The record is BYTEA, not JSONB:
        // the database never looks inside it, BYTEA costs no parsing on every
        // upsert, and IS DISTINCT FROM compares bytes (a memcmp), which is what
        // "did this row change" needs.
        "CREATE TABLE subscribers (
        imsi TEXT PRIMARY KEY,
        msisdn TEXT,
        data BYTEA NOT NULL
    );
    CREATE INDEX subscribers_by_msisdn ON subscribers (msisdn) WHERE msisdn IS NOT NULL;
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        subscriber TEXT NOT NULL,
        state TEXT NOT NULL,
        pcef_host TEXT NOT NULL,
        updated_ms BIGINT NOT NULL,
        closed_ms BIGINT,
        data BYTEA NOT NULL
    );
    CREATE INDEX sessions_open ON sessions (subscriber) WHERE state = 'open';
    CREATE INDEX sessions_closed ON sessions (closed_ms) WHERE state = 'closed';",
    ),
    (
        2,
        "per-subscriber usage accumulators, one blob per subscriber",
        // Written in the same batch as the session whose report changed
        // it; BYTEA for the same reasons as the other records.
        "CREATE TABLE usage (
        subscriber TEXT PRIMARY KEY,
        data BYTEA NOT NULL
    );",
    ),
    (
        3,
        "session blobs compressed with lz4 instead of pglz (PostgreSQL only)",
        // A session blob (about 3 KB of JSON) is over the TOAST threshold,
        // so every upsert compresses it and the WHERE decompresses the old
        // one: with pglz that was the largest part of the server's CPU per
        // row (BENCHMARKS.md); lz4 compresses as small for a fraction of
        // the CPU. Values already stored change as their rows are rewritten.
        "ALTER TABLE sessions ALTER COLUMN data SET COMPRESSION lz4;",
    ),
    (
        4,
        "session pages keep room for in-place updates (PostgreSQL only)",
        // A CCR-U rewrites its session row without touching an indexed
        // column; PostgreSQL then updates it in place (HOT: no new index
        // entries, less WAL, less vacuum) only if the row's page has room.
        // Full pages made 41% of session updates HOT in the seed scenario,
        // 70% fill makes 74% (BENCHMARKS.md). Pages written before this
        // take the setting as they are rewritten (VACUUM FULL does it now).
        "ALTER TABLE sessions SET (fillfactor = 70);",
    ),
    (
        5,
        "the notification outbox, one row per event and sink still owed",
        // Written in the same batch as the change that caused the event,
        // deleted once the sink has it; seq orders them.
        "CREATE TABLE outbox (
        seq BIGINT NOT NULL,
        sink TEXT NOT NULL,
        subscriber TEXT NOT NULL,
        data BYTEA NOT NULL,
        PRIMARY KEY (seq, sink)
    );",
    ),
    (
        BINARY_RECORDS,
        "session, subscriber and usage records rewritten from JSON in the binary form",
        // No DDL: the columns are BYTEA already. `rewrite_json_records`
        // rewrites the rows in the same transaction (store/blob.rs).
        "",
    ),
    (
        7,
        "row versions and session owners, for several nodes on one database",
        // Every session and usage write is a compare-and-set on `version`
        // (docs/cluster.md); `owner` is the Origin-Host of the node that
        // last wrote the session, so a node starting loads its own open
        // sessions only. Rows written before this are at version 0 with
        // no owner (every node may load them). The owner changes only
        // when a session moves, so an update of a session that stays put
        // remains a heap-only (HOT) update.
        // `ue_ipv4` finds the session an Rx AAR binds to when the node
        // receiving it does not hold it.
        "ALTER TABLE sessions ADD COLUMN owner TEXT;
    ALTER TABLE sessions ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE sessions ADD COLUMN ue_ipv4 TEXT;
    CREATE INDEX sessions_open_by_ipv4 ON sessions (ue_ipv4) WHERE state = 'open';
    ALTER TABLE usage ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
    CREATE INDEX sessions_open_by_owner ON sessions (owner, id) WHERE state = 'open';",
    ),
    (
        8,
        "cluster membership: one heartbeat row per node",
        // Each node upserts its row every [cluster].heartbeat_interval_ms
        // on a connection of its own; heartbeat_at is the database's
        // clock, so ages never depend on the nodes' clocks.
        "CREATE TABLE cluster_nodes (
        name TEXT PRIMARY KEY,
        api TEXT NOT NULL,
        started_ms BIGINT NOT NULL,
        sessions BIGINT NOT NULL,
        heartbeat_at TIMESTAMPTZ NOT NULL
    );",
    ),
    (
        9,
        "provisioning changes notified to every node (PostgreSQL only)",
        // NOTIFYs sent in the writing transaction, so delivered at its
        // commit: the IMSIs each statement changed, comma-separated, in
        // payloads of at most about 7000 bytes (PostgreSQL's limit is
        // 8000); '*' (compare every profile) for one that would not fit.
        // An upsert that changed nothing notifies nothing.
        "CREATE FUNCTION pcrf_subscribers_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        keys TEXT;
    BEGIN
        IF TG_OP = 'DELETE' THEN
            FOR keys IN
                SELECT string_agg(imsi, ',') FROM (
                    SELECT imsi, sum(length(imsi) + 1) OVER (ORDER BY imsi) / 7000 AS chunk
                    FROM changed_old) AS k
                GROUP BY chunk
            LOOP
                IF length(keys) > 7900 THEN
                    keys := '*';
                END IF;
                PERFORM pg_notify('pcrf_subscribers', keys);
            END LOOP;
        ELSE
            FOR keys IN
                SELECT string_agg(imsi, ',') FROM (
                    SELECT imsi, sum(length(imsi) + 1) OVER (ORDER BY imsi) / 7000 AS chunk
                    FROM changed_new) AS k
                GROUP BY chunk
            LOOP
                IF length(keys) > 7900 THEN
                    keys := '*';
                END IF;
                PERFORM pg_notify('pcrf_subscribers', keys);
            END LOOP;
        END IF;
        RETURN NULL;
    END
    $$;
    CREATE TRIGGER subscribers_inserted AFTER INSERT ON subscribers
        REFERENCING NEW TABLE AS changed_new
        FOR EACH STATEMENT EXECUTE FUNCTION pcrf_subscribers_changed();
    CREATE TRIGGER subscribers_updated AFTER UPDATE ON subscribers
        REFERENCING NEW TABLE AS changed_new
        FOR EACH STATEMENT EXECUTE FUNCTION pcrf_subscribers_changed();
    CREATE TRIGGER subscribers_deleted AFTER DELETE ON subscribers
        REFERENCING OLD TABLE AS changed_old
        FOR EACH STATEMENT EXECUTE FUNCTION pcrf_subscribers_changed();",
    ),
    (
        SUB_SESSION_COLUMNS,
        "UE IPv6 prefixes and Rx/Sd session ids of sessions, for other nodes to find them",
        // Written with the session row in the same upsert. `ue_ipv6` is
        // the prefix as session/binding.rs keys it ("2001:db8::/64"): an
        // AAR or a TDF's CCR-I on a node that does not hold the session
        // looks up every prefix containing its address. `sub_sessions`
        // holds the Rx and Sd Session-Ids bound to the session: an AAR
        // update, an STR or a TDF's CCR-U/T names only those. Neither
        // changes on a CCR-U, so such an update stays heap-only (HOT).
        // Rows without them (most CCR-Is) are not indexed: inserting them
        // touches neither index (no hot spot of NULL entries).
        // Open rows written before this get both from their records here.
        "ALTER TABLE sessions ADD COLUMN ue_ipv6 TEXT;
    ALTER TABLE sessions ADD COLUMN sub_sessions TEXT[];
    CREATE INDEX sessions_open_by_ipv6 ON sessions (ue_ipv6)
        WHERE state = 'open' AND ue_ipv6 IS NOT NULL;
    CREATE INDEX sessions_open_by_sub_session ON sessions USING GIN (sub_sessions)
        WHERE state = 'open' AND sub_sessions IS NOT NULL;",
    ),
    (
        11,
        "deployed versions of the policy, and the version each node serves",
        // The content is BYTEA: the store keeps the bytes it is handed.
        // A node whose check refused the newest version says why in its
        // heartbeat row (`policy_refused`), for `GET /v1/cluster` and the
        // deploying node's answer.
        "CREATE TABLE deployed_versions (
        artifact TEXT NOT NULL,
        id BIGINT NOT NULL,
        parent BIGINT,
        hash TEXT NOT NULL,
        deployed_by TEXT NOT NULL,
        at_ms BIGINT NOT NULL,
        comment TEXT NOT NULL,
        content BYTEA NOT NULL,
        PRIMARY KEY (artifact, id)
    );
    ALTER TABLE cluster_nodes ADD COLUMN policy_version BIGINT;
    ALTER TABLE cluster_nodes ADD COLUMN policy_refused TEXT;",
    ),
    (
        12,
        "deployed versions notified to every node (PostgreSQL only)",
        // In the writing transaction, so delivered at its commit:
        // "artifact:id". Where there is no NOTIFY the nodes find a new
        // version by polling (cluster/version_feed.rs).
        "CREATE FUNCTION pcrf_version_deployed() RETURNS trigger AS $$
    BEGIN
        PERFORM pg_notify('pcrf_versions', NEW.artifact || ':' || NEW.id);
        RETURN NULL;
    END;
    $$ LANGUAGE plpgsql;
    CREATE TRIGGER deployed_versions_inserted AFTER INSERT ON deployed_versions
        FOR EACH ROW EXECUTE FUNCTION pcrf_version_deployed();",
    ),
    (
        13,
        "the usage file version each node counts by",
        // The usage file's versions are rows of deployed_versions
        // (artifact 'usage'); a node whose check refused the newest says
        // why here, as for the policy.
        "ALTER TABLE cluster_nodes ADD COLUMN usage_version BIGINT;
    ALTER TABLE cluster_nodes ADD COLUMN usage_refused TEXT;",
    ),
];

/// The version that adds `ue_ipv6` and `sub_sessions` (filled in for the
/// open rows already there).
const SUB_SESSION_COLUMNS: i32 = 10;

/// The version whose migration rewrites JSON records in the binary form.
const BINARY_RECORDS: i32 = 6;

/// Rows read and rewritten at a time by that migration.
const REWRITE_PAGE: i64 = 1000;

/// Rewrites every JSON record of the record tables in the binary form, a
/// page of rows at a time, inside the migration's transaction; a record
/// that cannot be decoded is logged and left as it is (reading skips and
/// counts it, as before). Returns the number rewritten.
async fn rewrite_json_records(client: &Client) -> Result<u64, tokio_postgres::Error> {
    let mut rewritten = 0;
    for table in RecordTable::ALL {
        let (name, key) = (table.table(), table.key());
        let select = client
            .prepare(&format!(
                "SELECT {key}, data FROM {name} WHERE {key} > $1 ORDER BY {key} LIMIT $2"
            ))
            .await?;
        let update = client
            .prepare(&format!("UPDATE {name} SET data = $2 WHERE {key} = $1"))
            .await?;
        let mut after = String::new();
        loop {
            let rows = client.query(&select, &[&after, &REWRITE_PAGE]).await?;
            let full = rows.len() as i64 == REWRITE_PAGE;
            for row in &rows {
                let k: &str = row.try_get(0)?;
                let data: &[u8] = row.try_get(1)?;
                if let Some(binary) = table.rewritten(k, data) {
                    client.execute(&update, &[&k, &binary]).await?;
                    rewritten += 1;
                }
            }
            match rows.last() {
                Some(last) if full => after = last.try_get(0)?,
                _ => break,
            }
        }
    }
    Ok(rewritten)
}

/// Fills `ue_ipv6` and `sub_sessions` of the open sessions from their
/// records, a page at a time, inside the migration's transaction, so that
/// sessions written before the columns existed are found by other nodes
/// too. A record that cannot be decoded is left as it is. Returns the
/// number of rows filled.
async fn fill_sub_session_columns(client: &Client) -> Result<u64, tokio_postgres::Error> {
    let select = client
        .prepare(
            "SELECT id, data FROM sessions WHERE state = 'open' AND id > $1 \
             ORDER BY id LIMIT $2",
        )
        .await?;
    let update = client
        .prepare("UPDATE sessions SET ue_ipv6 = $2, sub_sessions = $3::TEXT::TEXT[] WHERE id = $1")
        .await?;
    let (mut filled, mut skipped) = (0, 0);
    let mut after = String::new();
    loop {
        let rows = client.query(&select, &[&after, &REWRITE_PAGE]).await?;
        let full = rows.len() as i64 == REWRITE_PAGE;
        for row in &rows {
            let id: &str = row.try_get(0)?;
            let data: &[u8] = row.try_get(1)?;
            let Some(s) = decode_session(&mut skipped, id, data) else {
                continue;
            };
            let ipv6 = stored_prefix(&s);
            let subs = array_literal(sub_session_ids(&s));
            if ipv6.is_some() || subs.is_some() {
                client.execute(&update, &[&id, &ipv6, &subs]).await?;
                filled += 1;
            }
        }
        match rows.last() {
            Some(last) if full => after = last.try_get(0)?,
            _ => break,
        }
    }
    Ok(filled)
}

/// What a storage-only version needs of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// PostgreSQL itself (any supported version).
    Postgres,
    /// PostgreSQL 14+ built with lz4.
    Lz4Toast,
}

/// Versions that only tune PostgreSQL's own storage, or use what only
/// PostgreSQL has (triggers that NOTIFY). CockroachDB and
/// YugabyteDB store rows differently and reject (or ignore) the syntax, and
/// PostgreSQL before 14 (or built without lz4) lacks lz4: where a version's
/// need is not met it is recorded with nothing done, so the schema stays
/// the same everywhere.
pub const POSTGRES_STORAGE_ONLY: &[(i32, Needs)] = &[
    (3, Needs::Lz4Toast),
    (4, Needs::Postgres),
    // LISTEN/NOTIFY: the other databases have no notifications to send.
    (9, Needs::Postgres),
    (12, Needs::Postgres),
];

/// Whether the server is PostgreSQL itself.
async fn is_postgres(client: &Client) -> Result<bool, tokio_postgres::Error> {
    let version: String = client
        .query_one("SELECT version()", &[])
        .await?
        .try_get(0)?;
    // YugabyteDB reports "PostgreSQL 11.2-YB-...", CockroachDB "CockroachDB ...".
    Ok(version.starts_with("PostgreSQL ") && !version.contains("-YB-"))
}

/// Whether the server is PostgreSQL itself with lz4 TOAST compression
/// (14+, built with lz4).
async fn has_lz4_toast(client: &Client) -> Result<bool, tokio_postgres::Error> {
    if !is_postgres(client).await? {
        return Ok(false);
    }
    client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_settings \
             WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals))",
            &[],
        )
        .await?
        .try_get(0)
}

/// The newest schema version this build knows.
pub fn latest() -> i32 {
    MIGRATIONS.last().map(|m| m.0).unwrap_or(0)
}

/// Brings the connected schema (the first of `search_path`) to the latest
/// version; returns the version it is at.
pub(super) async fn run(client: &Client) -> Result<i32, StoreError> {
    let fail = |ctx: &str, e: tokio_postgres::Error| pg_error(ctx, PgFailure::from(e));
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                version INT PRIMARY KEY,
                description TEXT NOT NULL,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
            )",
        )
        .await
        .map_err(|e| fail("creating schema_migrations", e))?;
    let current = current(client).await?;
    if current > latest() {
        return Err(StoreError::Unavailable(format!(
            "database schema version {current} is newer than this pcrf knows ({}); upgrade pcrf",
            latest()
        )));
    }
    for &(version, description, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        let ctx = format!("migrating to schema {version} ({description})");
        client
            .batch_execute("BEGIN")
            .await
            .map_err(|e| fail(&ctx, e))?;
        let claimed = client
            .execute(
                "INSERT INTO schema_migrations (version, description) VALUES ($1, $2)",
                &[&version, &description],
            )
            .await;
        match claimed {
            Ok(_) => {}
            // Another server applied it while we waited on its row.
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
                client
                    .batch_execute("ROLLBACK")
                    .await
                    .map_err(|e| fail(&ctx, e))?;
                continue;
            }
            Err(e) => {
                let _ = client.batch_execute("ROLLBACK").await;
                return Err(fail(&ctx, e));
            }
        }
        if let Some(&(_, needs)) = POSTGRES_STORAGE_ONLY.iter().find(|m| m.0 == version) {
            let applies = match needs {
                Needs::Postgres => is_postgres(client).await,
                Needs::Lz4Toast => has_lz4_toast(client).await,
            };
            match applies {
                Ok(true) => {}
                Ok(false) => {
                    tracing::info!(
                        version,
                        description,
                        ?needs,
                        "storage tuning for PostgreSQL skipped here, version recorded"
                    );
                    client
                        .batch_execute("COMMIT")
                        .await
                        .map_err(|e| fail(&ctx, e))?;
                    continue;
                }
                Err(e) => {
                    let _ = client.batch_execute("ROLLBACK").await;
                    return Err(fail(&ctx, e));
                }
            }
        }
        if let Err(e) = client.batch_execute(sql).await {
            let _ = client.batch_execute("ROLLBACK").await;
            return Err(fail(&ctx, e));
        }
        if version == SUB_SESSION_COLUMNS {
            match fill_sub_session_columns(client).await {
                Ok(filled) => tracing::info!(filled, "open sessions' look-up columns filled"),
                Err(e) => {
                    let _ = client.batch_execute("ROLLBACK").await;
                    return Err(fail(&ctx, e));
                }
            }
        }
        if version == BINARY_RECORDS {
            match rewrite_json_records(client).await {
                Ok(rewritten) => {
                    tracing::info!(rewritten, "JSON records rewritten in the binary form")
                }
                Err(e) => {
                    let _ = client.batch_execute("ROLLBACK").await;
                    return Err(fail(&ctx, e));
                }
            }
        }
        client
            .batch_execute("COMMIT")
            .await
            .map_err(|e| fail(&ctx, e))?;
        tracing::info!(version, description, "database schema migrated");
    }
    current_at_most_latest(client).await
}

async fn current(client: &Client) -> Result<i32, StoreError> {
    let row = client
        .query_one(
            "SELECT COALESCE(MAX(version), 0)::INT FROM schema_migrations",
            &[],
        )
        .await
        .map_err(|e| pg_error("reading the schema version", PgFailure::from(e)))?;
    row.try_get::<_, i32>(0)
        .map_err(|e| pg_error("reading the schema version", PgFailure::from(e)))
}

async fn current_at_most_latest(client: &Client) -> Result<i32, StoreError> {
    let v = current(client).await?;
    if v < latest() {
        return Err(StoreError::Unavailable(format!(
            "database schema is at version {v} after migrating to {}",
            latest()
        )));
    }
    Ok(v)
}
