//! The production store on PostgreSQL (or a wire-compatible distributed
//! database). Same data model as the embedded store. A batch is one
//! transaction whose BEGIN and statements are pipelined in one round trip,
//! committed only if a row changed (COMMIT joins that round trip when a row
//! is sure to change: a session or usage write, which is a compare-and-set
//! on the row's version, docs/cluster.md); the single connection is replaced after
//! a randomised lifetime and re-established with backoff, and while the
//! database is down every call fails fast with `Unavailable` (answered
//! 5012) so nothing unacknowledged is ever reported durable.

mod encoded;
mod failure;
mod hosts;
pub mod migrations;
pub mod monitor;
mod pipeline;
pub mod profiler;
pub mod versions;

pub use monitor::ConnectionMonitor;
pub use profiler::{ProfileSnapshot, QueryProfiler, QueryStat};

/// What the API and metrics hold of a PostgreSQL store (both cloneable).
#[derive(Clone, Debug)]
pub struct PostgresHandles {
    pub profiler: QueryProfiler,
    pub connection: ConnectionMonitor,
}

use super::blob::{decode_session, decode_subscriber, decode_usage};
use super::{Change, ChangeKey, Conflicted, OpenSessionsBy, Store, StoreError};
use crate::session::GxSession;
use crate::subscriber::Subscriber;
use crate::usage::SubscriberUsage;
use diameter::peer::{Backoff, Jitter};
use encoded::{encode, Encoded};
use failure::{pg_error, PgFailure};
use pipeline::{run_all, Request};
use std::future::Future;
use std::str::FromStr;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Statement};

/// Rows fetched per page at start-up, so recovery never holds more than a
/// page of blobs in flight.
const PAGE: i64 = 1000;

/// How the store connects and how long it waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostgresOptions {
    /// `postgres://user:password@host:port/database?options=...` (libpq
    /// URL or key=value form).
    pub url: String,
    /// A connection is replaced after a lifetime drawn uniformly from
    /// `lifetime_min..=lifetime_max`, so servers never reconnect together.
    pub lifetime_min: Duration,
    pub lifetime_max: Duration,
    /// Bound on connecting and on each batch or query: past it the call
    /// fails with `Unavailable` (the request is answered 5012).
    pub timeout: Duration,
    /// Ceiling of the reconnect backoff (starts at 50 ms, doubles).
    pub backoff_max: Duration,
}

impl PostgresOptions {
    /// Defaults: lifetime 30..60 min, 2 s bound, backoff up to 5 s.
    pub fn new(url: impl Into<String>) -> Self {
        PostgresOptions {
            url: url.into(),
            lifetime_min: Duration::from_secs(30 * 60),
            lifetime_max: Duration::from_secs(60 * 60),
            timeout: Duration::from_secs(2),
            backoff_max: Duration::from_secs(5),
        }
    }
}

/// Runs a future on the store's runtime. `pcrf serve` opens the store from
/// async code, where blocking the thread on another runtime is refused:
/// there the future runs on a short-lived helper thread.
fn block<F>(rt: &Runtime, f: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    if tokio::runtime::Handle::try_current().is_err() {
        return rt.block_on(f);
    }
    std::thread::scope(|s| match s.spawn(|| rt.block_on(f)).join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

fn runtime() -> Result<Runtime, StoreError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| StoreError::Unavailable(format!("cannot start the database runtime: {e}")))
}

fn parse_url(url: &str, timeout: Duration) -> Result<tokio_postgres::Config, StoreError> {
    let mut cfg = tokio_postgres::Config::from_str(url).map_err(|e| {
        // The URL may hold a password: name the problem, not the URL.
        StoreError::Unavailable(format!("invalid database URL: {e}"))
    })?;
    hosts::settle(&mut cfg)?;
    cfg.connect_timeout(timeout);
    if cfg.get_application_name().is_none() {
        cfg.application_name("pcrf");
    }
    Ok(cfg)
}

/// The settings for a connection of its own beside the store's (cluster
/// heartbeats, the provisioning feed's LISTEN) and the bound on opening
/// it: the store's handling of host lists, so that after a switch-over
/// these connections too end up on the new primary, never on a standby
/// (where a heartbeat cannot write and a LISTEN never hears the primary).
/// TCP keepalives probe after `per_host` idle, three times `per_host`
/// apart: a LISTEN connection sends nothing, and without them it would
/// wait hours on a primary whose machine vanished without closing it.
pub(crate) fn side_connection(
    url: &str,
    per_host: Duration,
) -> Result<(tokio_postgres::Config, Duration), StoreError> {
    let mut cfg = parse_url(url, per_host)?;
    // Whole seconds (the socket option's unit), at least one.
    let probe = Duration::from_secs(per_host.as_secs().max(1));
    cfg.keepalives(true)
        .keepalives_idle(probe)
        .keepalives_interval(probe)
        .keepalives_retries(3);
    let bound = hosts::connect_bound(&cfg, per_host);
    Ok((cfg, bound))
}

/// Applies the migrations to the database `url` names (the first schema of
/// its search path) and returns the schema version: `pcrf db migrate`.
/// Blocking; callable from sync or async code.
pub fn migrate(url: &str) -> Result<i32, StoreError> {
    let timeout = Duration::from_secs(10);
    let cfg = parse_url(url, timeout)?;
    let rt = runtime()?;
    let out = block(&rt, async {
        let (client, conn) = cfg
            .connect(NoTls)
            .await
            .map_err(|e| pg_error("connecting", PgFailure::from(e)))?;
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        let v = migrations::run(&client).await;
        drop(client);
        let _ = task.await;
        v
    });
    rt.shutdown_background();
    out
}

/// The statements every connection prepares once (cached for its life).
struct Statements {
    begin: Statement,
    commit: Statement,
    rollback: Statement,
    upsert_session: Statement,
    delete_session: Statement,
    upsert_subscriber: Statement,
    delete_subscriber: Statement,
    open_sessions: Statement,
    all_subscribers: Statement,
    get_session: Statement,
    get_subscriber: Statement,
    purge_closed: Statement,
    upsert_usage: Statement,
    delete_usage: Statement,
    all_usage: Statement,
    get_usage: Statement,
    insert_events: Statement,
    delete_events: Statement,
}

/// Statement texts with the profiler's names. Portable SQL only. Session
/// and usage writes are compare-and-set on the row's version (see
/// docs/cluster.md): each writes its rows in a data-modifying CTE and then
/// divides by zero unless every row was written, so one stale row aborts
/// the transaction (and the COMMIT pipelined after it) in the same round
/// trip; `conflicting` then finds which rows. Other upserts' WHERE makes an
/// identical record affect 0 rows, so a batch of unchanged records commits nothing.
mod sql {
    pub const BEGIN: (&str, &str) = ("begin", "BEGIN");
    pub const COMMIT: (&str, &str) = ("commit", "COMMIT");
    pub const ROLLBACK: (&str, &str) = ("rollback", "ROLLBACK");
    // One statement per table and operation for the whole batch: the rows
    // travel as one typed array per column (unnest), so the server parses,
    // plans and executes once per batch, not once per row.
    // $8: the version each row is written at (the one read plus one);
    // $9: the UE's IPv4 address; $10: this node; $11: the number of rows;
    // $12: the UE's IPv6 prefix; $13: the Rx and Sd Session-Ids the
    // session holds, one array literal per row (unnest takes no array of
    // arrays of different lengths).
    pub const UPSERT_SESSION: (&str, &str) = (
        "upsert_session",
        "WITH written AS (INSERT INTO sessions \
         (id, subscriber, state, pcef_host, updated_ms, closed_ms, data, version, ue_ipv4, \
         ue_ipv6, sub_sessions, owner) \
         SELECT r.id, r.subscriber, r.state, r.pcef_host, r.updated_ms, r.closed_ms, r.data, \
         r.version, r.ue_ipv4, r.ue_ipv6, r.sub_sessions::TEXT[], $10::TEXT \
         FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], \
         $5::BIGINT[], $6::BIGINT[], $7::BYTEA[], $8::BIGINT[], $9::TEXT[], $12::TEXT[], \
         $13::TEXT[]) AS r(id, subscriber, state, pcef_host, updated_ms, closed_ms, data, \
         version, ue_ipv4, ue_ipv6, sub_sessions) \
         ON CONFLICT (id) DO UPDATE SET subscriber = excluded.subscriber, \
         state = excluded.state, pcef_host = excluded.pcef_host, \
         updated_ms = excluded.updated_ms, closed_ms = excluded.closed_ms, data = excluded.data, \
         version = excluded.version, ue_ipv4 = excluded.ue_ipv4, ue_ipv6 = excluded.ue_ipv6, \
         sub_sessions = excluded.sub_sessions, owner = excluded.owner \
         WHERE sessions.version = excluded.version - 1 RETURNING 1) \
         SELECT 1 / (CASE WHEN count(*) = $11::BIGINT THEN 1 ELSE 0 END) FROM written",
    );
    pub const DELETE_SESSION: (&str, &str) = (
        "delete_session",
        "DELETE FROM sessions WHERE id = ANY($1::TEXT[])",
    );
    pub const UPSERT_SUBSCRIBER: (&str, &str) = (
        "upsert_subscriber",
        "INSERT INTO subscribers (imsi, msisdn, data) \
         SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::BYTEA[]) \
         ON CONFLICT (imsi) DO UPDATE SET msisdn = excluded.msisdn, data = excluded.data \
         WHERE subscribers.data IS DISTINCT FROM excluded.data",
    );
    pub const DELETE_SUBSCRIBER: (&str, &str) = (
        "delete_subscriber",
        "DELETE FROM subscribers WHERE imsi = ANY($1::TEXT[])",
    );
    // Keyset pages: no cursor, no long transaction, portable.
    // $3: this node (NULL: every open session); rows no node wrote yet
    // (before versions) are everyone's.
    pub const OPEN_SESSIONS: (&str, &str) = (
        "load_open_sessions",
        "SELECT id, data, version FROM sessions WHERE state = 'open' \
         AND ($3::TEXT IS NULL OR owner = $3 OR owner IS NULL) \
         AND id > $1 ORDER BY id LIMIT $2",
    );
    pub const ALL_SUBSCRIBERS: (&str, &str) = (
        "load_subscribers",
        "SELECT imsi, data, 0::BIGINT FROM subscribers WHERE imsi > $1 ORDER BY imsi LIMIT $2",
    );
    pub const GET_SESSION: (&str, &str) = (
        "get_session",
        "SELECT data, version FROM sessions WHERE id = $1",
    );
    pub const GET_SUBSCRIBER: (&str, &str) = (
        "get_subscriber",
        "SELECT data, 0::BIGINT FROM subscribers WHERE imsi = $1",
    );
    // SKIP LOCKED: the purge runs on one shard's connection while the
    // others write; it never waits for a row another writer holds (so it
    // can never be part of a deadlock) and leaves that row to the next run.
    pub const PURGE_CLOSED: (&str, &str) = (
        "purge_closed",
        "DELETE FROM sessions WHERE id IN (SELECT id FROM sessions \
         WHERE state = 'closed' AND closed_ms < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)",
    );
    // Compare-and-set like sessions: $3 the versions, $4 the number of rows.
    pub const UPSERT_USAGE: (&str, &str) = (
        "upsert_usage",
        "WITH written AS (INSERT INTO usage (subscriber, data, version) \
         SELECT * FROM unnest($1::TEXT[], $2::BYTEA[], $3::BIGINT[]) \
         ON CONFLICT (subscriber) DO UPDATE SET data = excluded.data, version = excluded.version \
         WHERE usage.version = excluded.version - 1 RETURNING 1) \
         SELECT 1 / (CASE WHEN count(*) = $4::BIGINT THEN 1 ELSE 0 END) FROM written",
    );
    pub const DELETE_USAGE: (&str, &str) = (
        "delete_usage",
        "DELETE FROM usage WHERE subscriber = ANY($1::TEXT[])",
    );
    pub const ALL_USAGE: (&str, &str) = (
        "load_usage",
        "SELECT subscriber, data, version FROM usage WHERE subscriber > $1 \
         ORDER BY subscriber LIMIT $2",
    );
    pub const GET_USAGE: (&str, &str) = (
        "get_usage",
        "SELECT data, version FROM usage WHERE subscriber = $1",
    );
    // After a compare-and-set failed (rare: not prepared): the rows' versions now.
    // The open sessions another node may hold, found by one indexed
    // column each (a request on a node that holds none of them; rare: not
    // prepared): one shape, `open_session_ids` runs them. The inner query
    // (OFFSET 0 keeps the LIMIT out of it) is planned without the limit,
    // so the planner reads the column's index rather than walking the
    // primary key in order and filtering (which a LIMIT with a poor
    // estimate, as for an array's `@>`, can make it choose).
    macro_rules! open_ids {
        ($condition:literal, $limit:literal) => {
            concat!(
                "SELECT id FROM (SELECT id FROM sessions WHERE state = 'open' AND ",
                $condition,
                " OFFSET 0) AS found ORDER BY id LIMIT ",
                $limit
            )
        };
    }
    pub const OPEN_BY_IPV4: &str = open_ids!("ue_ipv4 = $1", 16);
    pub const OPEN_BY_IPV6: &str = open_ids!("ue_ipv6 = ANY($1::TEXT[])", 16);
    pub const OPEN_BY_SUBSCRIBER: &str = open_ids!("subscriber = $1", 256);
    pub const OPEN_BY_SUB_SESSION: &str = open_ids!("sub_sessions @> ARRAY[$1::TEXT]", 16);
    // The record too: after a COMMIT whose answer was lost, a retry that
    // conflicts finds out whether the rows hold its own write.
    pub const SESSION_VERSIONS: &str =
        "SELECT id, version, data FROM sessions WHERE id = ANY($1::TEXT[])";
    pub const USAGE_VERSIONS: &str =
        "SELECT subscriber, version, data FROM usage WHERE subscriber = ANY($1::TEXT[])";
    // A replayed event (same seq and sink) is already there: nothing to do.
    pub const INSERT_EVENTS: (&str, &str) = (
        "insert_events",
        "INSERT INTO outbox (seq, sink, subscriber, data) \
         SELECT * FROM unnest($1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::BYTEA[]) \
         ON CONFLICT (seq, sink) DO NOTHING",
    );
    pub const DELETE_EVENTS: (&str, &str) = (
        "delete_events",
        "DELETE FROM outbox WHERE (seq, sink) IN \
         (SELECT * FROM unnest($1::BIGINT[], $2::TEXT[]))",
    );
    pub const PENDING_EVENTS: (&str, &str) = (
        "load_outbox",
        "SELECT seq, sink, data FROM outbox WHERE (seq, sink) > ($1, $2) \
         ORDER BY seq, sink LIMIT $3",
    );
}

impl Statements {
    /// Prepares them all in one round trip.
    async fn prepare(client: &Client) -> Result<Self, tokio_postgres::Error> {
        let texts = [
            sql::BEGIN,
            sql::COMMIT,
            sql::ROLLBACK,
            sql::UPSERT_SESSION,
            sql::DELETE_SESSION,
            sql::UPSERT_SUBSCRIBER,
            sql::DELETE_SUBSCRIBER,
            sql::OPEN_SESSIONS,
            sql::ALL_SUBSCRIBERS,
            sql::GET_SESSION,
            sql::GET_SUBSCRIBER,
            sql::PURGE_CLOSED,
            sql::UPSERT_USAGE,
            sql::DELETE_USAGE,
            sql::ALL_USAGE,
            sql::GET_USAGE,
            sql::INSERT_EVENTS,
            sql::DELETE_EVENTS,
        ];
        let requests: Vec<Request<'_, Result<Statement, tokio_postgres::Error>>> = texts
            .iter()
            .map(|(_, text)| {
                Box::pin(client.prepare(text))
                    as Request<'_, Result<Statement, tokio_postgres::Error>>
            })
            .collect();
        let prepared = run_all(requests, false)
            .await
            .into_iter()
            .map(|(r, _)| r)
            .collect::<Result<Vec<Statement>, _>>()?;
        let Ok(
            [begin, commit, rollback, upsert_session, delete_session, upsert_subscriber, delete_subscriber, open_sessions, all_subscribers, get_session, get_subscriber, purge_closed, upsert_usage, delete_usage, all_usage, get_usage, insert_events, delete_events],
        ) = <[Statement; 18]>::try_from(prepared)
        else {
            unreachable!("run_all returns one result per request")
        };
        Ok(Statements {
            begin,
            commit,
            rollback,
            upsert_session,
            delete_session,
            upsert_subscriber,
            delete_subscriber,
            open_sessions,
            all_subscribers,
            get_session,
            get_subscriber,
            purge_closed,
            upsert_usage,
            delete_usage,
            all_usage,
            get_usage,
            insert_events,
            delete_events,
        })
    }
}

/// One open connection.
struct Live {
    client: Client,
    st: Statements,
    task: JoinHandle<()>,
    expires: Instant,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type Sql = (&'static str, &'static str);

/// The last change to each row, sorted by table and key. A set-based
/// statement must not touch a row twice (ON CONFLICT refuses it) and the
/// last change is the one that counts; the fixed order makes writers on
/// one database lock rows in the same order (no deadlock between them).
fn last_per_row(changes: &[Change]) -> Vec<&Change> {
    fn order(c: &Change) -> (u8, &str, u64) {
        match c.key() {
            ChangeKey::Session(k) => (0, k, 0),
            ChangeKey::Subscriber(k) => (1, k, 0),
            ChangeKey::Usage(k) => (2, k, 0),
            ChangeKey::Event(seq) => (3, "", seq),
            ChangeKey::EventDelivery(seq, sink) => (4, sink, seq),
        }
    }
    // Newest first, then a stable sort: of equal keys the newest stays first
    // and dedup keeps it.
    let mut rows: Vec<&Change> = changes.iter().rev().collect();
    rows.sort_by(|a, b| order(a).cmp(&order(b)));
    rows.dedup_by(|later, kept| order(later) == order(kept));
    rows
}

/// A batch's rows by table and operation, one parameter array per column:
/// each non-empty group is one statement.
#[derive(Default)]
struct Columns<'a> {
    session_id: Vec<&'a str>,
    session_subscriber: Vec<&'a str>,
    session_state: Vec<&'static str>,
    session_pcef_host: Vec<&'a str>,
    session_updated_ms: Vec<i64>,
    session_closed_ms: Vec<Option<i64>>,
    session_data: Vec<&'a [u8]>,
    /// The version each session row is written at (read + 1).
    session_version: Vec<i64>,
    session_ipv4: Vec<Option<&'a str>>,
    session_ipv6: Vec<Option<&'a str>>,
    session_sub_sessions: Vec<Option<&'a str>>,
    session_rows: i64,
    /// This node (`owner` of the sessions it writes).
    owner: Option<&'a str>,
    deleted_sessions: Vec<&'a str>,
    subscriber_imsi: Vec<&'a str>,
    subscriber_msisdn: Vec<Option<&'a str>>,
    subscriber_data: Vec<&'a [u8]>,
    deleted_subscribers: Vec<&'a str>,
    usage_subscriber: Vec<&'a str>,
    usage_data: Vec<&'a [u8]>,
    usage_version: Vec<i64>,
    usage_rows: i64,
    deleted_usage: Vec<&'a str>,
    event_seq: Vec<i64>,
    event_sink: Vec<&'a str>,
    event_subscriber: Vec<&'a str>,
    event_data: Vec<&'a [u8]>,
    acked_seq: Vec<i64>,
    acked_sink: Vec<&'a str>,
}

impl<'a> Columns<'a> {
    fn new(batch: &'a [Encoded<'_>], owner: Option<&'a str>) -> Self {
        let mut c = Columns {
            owner,
            ..Columns::default()
        };
        for e in batch {
            match e {
                Encoded::Session {
                    id,
                    subscriber,
                    state,
                    pcef_host,
                    updated_ms,
                    closed_ms,
                    data,
                    version,
                    ue_ipv4,
                    ue_ipv6,
                    sub_sessions,
                } => {
                    c.session_version.push(version + 1);
                    c.session_ipv4.push(ue_ipv4.as_deref());
                    c.session_ipv6.push(ue_ipv6.as_deref());
                    c.session_sub_sessions.push(sub_sessions.as_deref());
                    c.session_id.push(id);
                    c.session_subscriber.push(subscriber);
                    c.session_state.push(state);
                    c.session_pcef_host.push(pcef_host);
                    c.session_updated_ms.push(*updated_ms);
                    c.session_closed_ms.push(*closed_ms);
                    c.session_data.push(data);
                }
                Encoded::DeleteSession(id) => c.deleted_sessions.push(id),
                Encoded::Subscriber { imsi, msisdn, data } => {
                    c.subscriber_imsi.push(imsi);
                    c.subscriber_msisdn.push(*msisdn);
                    c.subscriber_data.push(data);
                }
                Encoded::DeleteSubscriber(imsi) => c.deleted_subscribers.push(imsi),
                Encoded::Usage {
                    subscriber,
                    data,
                    version,
                } => {
                    c.usage_version.push(version + 1);
                    c.usage_subscriber.push(subscriber);
                    c.usage_data.push(data);
                }
                Encoded::DeleteUsage(subscriber) => c.deleted_usage.push(subscriber),
                Encoded::Event {
                    seq,
                    sinks,
                    subscriber,
                    data,
                } => {
                    for sink in sinks.iter() {
                        c.event_seq.push(*seq);
                        c.event_sink.push(sink);
                        c.event_subscriber.push(subscriber);
                        c.event_data.push(data);
                    }
                }
                Encoded::AckEvent { seq, sink } => {
                    c.acked_seq.push(*seq);
                    c.acked_sink.push(sink);
                }
            }
        }
        c.session_rows = c.session_id.len() as i64;
        c.usage_rows = c.usage_subscriber.len() as i64;
        c
    }

    /// Rows a committed batch changed: every versioned row (a conflict
    /// aborts it), and what the other statements reported.
    fn versioned_rows(&self) -> u64 {
        (self.session_rows + self.usage_rows) as u64
    }

    /// One request per non-empty group (not yet sent), with its name.
    fn requests(&'a self, c: &'a Client, st: &'a Statements) -> Vec<(Sql, Request<'a, PgResult>)> {
        fn p<T: ToSql + Sync>(v: &T) -> &(dyn ToSql + Sync) {
            v
        }
        let mut out: Vec<(Sql, Request<'a, PgResult>)> = Vec::with_capacity(6);
        if !self.session_id.is_empty() {
            let params = [
                p(&self.session_id),
                p(&self.session_subscriber),
                p(&self.session_state),
                p(&self.session_pcef_host),
                p(&self.session_updated_ms),
                p(&self.session_closed_ms),
                p(&self.session_data),
                p(&self.session_version),
                p(&self.session_ipv4),
                p(&self.owner),
                p(&self.session_rows),
                p(&self.session_ipv6),
                p(&self.session_sub_sessions),
            ];
            out.push((
                sql::UPSERT_SESSION,
                Box::pin(c.execute_raw(&st.upsert_session, params)),
            ));
        }
        if !self.deleted_sessions.is_empty() {
            out.push((
                sql::DELETE_SESSION,
                Box::pin(c.execute_raw(&st.delete_session, [p(&self.deleted_sessions)])),
            ));
        }
        if !self.subscriber_imsi.is_empty() {
            let params = [
                p(&self.subscriber_imsi),
                p(&self.subscriber_msisdn),
                p(&self.subscriber_data),
            ];
            out.push((
                sql::UPSERT_SUBSCRIBER,
                Box::pin(c.execute_raw(&st.upsert_subscriber, params)),
            ));
        }
        if !self.deleted_subscribers.is_empty() {
            out.push((
                sql::DELETE_SUBSCRIBER,
                Box::pin(c.execute_raw(&st.delete_subscriber, [p(&self.deleted_subscribers)])),
            ));
        }
        if !self.usage_subscriber.is_empty() {
            let params = [
                p(&self.usage_subscriber),
                p(&self.usage_data),
                p(&self.usage_version),
                p(&self.usage_rows),
            ];
            out.push((
                sql::UPSERT_USAGE,
                Box::pin(c.execute_raw(&st.upsert_usage, params)),
            ));
        }
        if !self.deleted_usage.is_empty() {
            out.push((
                sql::DELETE_USAGE,
                Box::pin(c.execute_raw(&st.delete_usage, [p(&self.deleted_usage)])),
            ));
        }
        if !self.event_seq.is_empty() {
            let params = [
                p(&self.event_seq),
                p(&self.event_sink),
                p(&self.event_subscriber),
                p(&self.event_data),
            ];
            out.push((
                sql::INSERT_EVENTS,
                Box::pin(c.execute_raw(&st.insert_events, params)),
            ));
        }
        if !self.acked_seq.is_empty() {
            let params = [p(&self.acked_seq), p(&self.acked_sink)];
            out.push((
                sql::DELETE_EVENTS,
                Box::pin(c.execute_raw(&st.delete_events, params)),
            ));
        }
        out
    }
}

type PgResult = Result<u64, tokio_postgres::Error>;

/// Records each pipelined statement's share of the round trip: the time
/// from the previous answer (or the send) to its own.
fn profile_pipeline(
    profiler: &QueryProfiler,
    start: Instant,
    names: &[Sql],
    results: &[(PgResult, Option<Instant>)],
    columns: &Columns<'_>,
) {
    let mut prev = start;
    for (name, (r, at)) in names.iter().zip(results) {
        let at = at.unwrap_or(prev);
        // A versioned write answers its check's one row: its rows are the batch's.
        let rows = match r {
            Ok(_) if *name == sql::UPSERT_SESSION => columns.session_rows as u64,
            Ok(_) if *name == sql::UPSERT_USAGE => columns.usage_rows as u64,
            Ok(n) => *n,
            Err(_) => 0,
        };
        profiler.record(
            name.0,
            name.1,
            at.saturating_duration_since(prev),
            Duration::ZERO,
            rows,
        );
        prev = at;
    }
}

/// One batch: BEGIN and one statement per table and operation in one round
/// trip, then COMMIT if a row changed, ROLLBACK otherwise. When a row is
/// sure to change (the batch writes a session or usage row: those writes
/// change their row or abort the transaction) COMMIT goes in the same
/// round trip; if a statement fails, the server turns it into a rollback.
async fn apply_batch(
    live: &Live,
    batch: &[Encoded<'_>],
    owner: Option<&str>,
    profiler: &QueryProfiler,
) -> Result<usize, PgFailure> {
    let timed = profiler.is_enabled();
    let (c, st) = (&live.client, &live.st);
    let columns = Columns::new(batch, owner);
    let certain = columns.versioned_rows() > 0;
    let mut names: Vec<Sql> = Vec::with_capacity(7);
    let mut requests: Vec<Request<'_, PgResult>> = Vec::with_capacity(7);
    names.push(sql::BEGIN);
    requests.push(Box::pin(c.execute(&st.begin, &[])));
    for (name, req) in columns.requests(c, st) {
        names.push(name);
        requests.push(req);
    }
    if certain {
        names.push(sql::COMMIT);
        requests.push(Box::pin(c.execute(&st.commit, &[])));
    }
    let start = timed.then(Instant::now);
    let results = run_all(requests, timed).await;
    if let Some(start) = start {
        profile_pipeline(profiler, start, &names, &results, &columns);
    }
    let mut rows: u64 = columns.versioned_rows();
    let mut failure = None;
    for ((r, _), name) in results.into_iter().zip(&names) {
        match r {
            // A versioned write answers one row (its check), not its count.
            Ok(_) if *name == sql::UPSERT_SESSION || *name == sql::UPSERT_USAGE => {}
            Ok(n) => rows += n,
            Err(e) => {
                // The first error is the cause; later ones only say the
                // transaction was aborted.
                if failure.is_none() {
                    failure = Some(PgFailure::from(e));
                }
            }
        }
    }
    if certain {
        return match failure {
            Some(f) => Err(f),
            None => Ok(usize::try_from(rows).unwrap_or(usize::MAX)),
        };
    }
    let end = if failure.is_some() || rows == 0 {
        sql::ROLLBACK
    } else {
        sql::COMMIT
    };
    let t = timed.then(Instant::now);
    let stmt = if end == sql::COMMIT {
        &st.commit
    } else {
        &st.rollback
    };
    let ended = c.execute(stmt, &[]).await;
    if let Some(t) = t {
        profiler.record(end.0, end.1, t.elapsed(), Duration::ZERO, 0);
    }
    if let Some(f) = failure {
        return Err(f);
    }
    ended.map_err(PgFailure::from)?;
    Ok(usize::try_from(rows).unwrap_or(usize::MAX))
}

/// The PostgreSQL store: one connection, driven on the writer thread by a
/// current-thread runtime the store owns.
pub struct PostgresStore {
    // Option only so Drop can shut it down from any context.
    rt: Option<Runtime>,
    cfg: tokio_postgres::Config,
    opts: PostgresOptions,
    live: Option<Live>,
    retry_at: Instant,
    /// The wait before the next connection attempt after a failed one.
    backoff: Backoff,
    /// Draws each connection's lifetime from its window.
    jitter: Jitter,
    last_error: String,
    monitor: ConnectionMonitor,
    profiler: QueryProfiler,
    skipped_corrupt: u64,
    /// This node's name, written as the owner of its sessions; `None`
    /// (tools, tests): no owner, and start-up loads every open session.
    owner: Option<String>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("connected", &self.live.is_some())
            .field("reconnects", &self.monitor.reconnects())
            .finish()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.live = None;
        self.monitor.closed();
        if let Some(rt) = self.rt.take() {
            // Never blocks, so dropping the store in async code is safe.
            rt.shutdown_background();
        }
    }
}

const BACKOFF_MIN: Duration = Duration::from_millis(50);

impl PostgresStore {
    /// Connects, applies pending migrations and prepares the statements.
    /// Fails (`Unavailable`) if the database cannot be reached within
    /// `opts.timeout`: a server must not start on a store it cannot read.
    pub fn open(opts: PostgresOptions) -> Result<Self, StoreError> {
        Self::open_with_profiler(opts, QueryProfiler::new())
    }

    /// Opens like `open`, recording into `profiler` (the shards of one
    /// server share one).
    pub fn open_with_profiler(
        opts: PostgresOptions,
        profiler: QueryProfiler,
    ) -> Result<Self, StoreError> {
        if opts.lifetime_min.is_zero() || opts.lifetime_max < opts.lifetime_min {
            return Err(StoreError::Unavailable(
                "connection lifetime window must be non-empty and positive".into(),
            ));
        }
        let cfg = parse_url(&opts.url, opts.timeout)?;
        let opts_backoff_max = opts.backoff_max.max(BACKOFF_MIN);
        let mut store = PostgresStore {
            rt: Some(runtime()?),
            cfg,
            opts,
            live: None,
            retry_at: Instant::now(),
            backoff: Backoff::new(BACKOFF_MIN, opts_backoff_max, None, Jitter::from_entropy()),
            jitter: Jitter::from_entropy(),
            last_error: String::new(),
            monitor: ConnectionMonitor::default(),
            profiler,
            skipped_corrupt: 0,
            owner: None,
        };
        let live = store.connect(true)?;
        store.live = Some(live);
        store.monitor.connected(true);
        Ok(store)
    }

    /// The profiler handle (clone it for the API).
    pub fn profiler(&self) -> QueryProfiler {
        self.profiler.clone()
    }

    /// The handles the API and metrics hold (clones share state).
    pub fn handles(&self) -> PostgresHandles {
        PostgresHandles {
            profiler: self.profiler.clone(),
            connection: self.monitor.clone(),
        }
    }

    /// Connections opened after the first (lifetime replacements and
    /// reconnects after failures).
    pub fn reconnects(&self) -> u64 {
        self.monitor.reconnects()
    }

    /// Drops the connection after a failure (the server rolls back what it
    /// had open) and records why.
    fn lose(&mut self, why: String) {
        if self.live.take().is_some() {
            self.monitor.lost();
        }
        self.last_error = why;
    }

    /// Whether a connection is up now (as last seen; for readiness).
    pub fn is_connected(&self) -> bool {
        self.live.as_ref().is_some_and(|l| !l.client.is_closed())
    }

    /// The server process id of the current connection (operators and
    /// tests use it with `pg_terminate_backend`).
    pub fn backend_pid(&mut self) -> Result<i32, StoreError> {
        self.ensure_live()?;
        let (rt, live) = self.parts()?;
        let timeout = self.opts.timeout;
        let r = block(rt, async {
            tokio::time::timeout(
                timeout,
                live.client.query_one("SELECT pg_backend_pid()", &[]),
            )
            .await
        });
        match r {
            Ok(Ok(row)) => row
                .try_get::<_, i32>(0)
                .map_err(|e| pg_error("reading the backend pid", PgFailure::from(e))),
            Ok(Err(e)) => Err(self.failed("reading the backend pid", PgFailure::from(e))),
            Err(_) => Err(self.timed_out("reading the backend pid")),
        }
    }

    /// The schema version of the connected database.
    pub fn schema_version(&mut self) -> Result<i32, StoreError> {
        self.ensure_live()?;
        let (rt, live) = self.parts()?;
        let r = block(rt, async {
            live.client
                .query_one(
                    "SELECT COALESCE(MAX(version), 0)::INT FROM schema_migrations",
                    &[],
                )
                .await
        });
        match r {
            Ok(row) => row
                .try_get::<_, i32>(0)
                .map_err(|e| pg_error("reading the schema version", PgFailure::from(e))),
            Err(e) => Err(self.failed("reading the schema version", PgFailure::from(e))),
        }
    }

    /// After a compare-and-set failed (the transaction rolled back): the
    /// rows of `batch` now at another version than the one it read, as a
    /// `Conflict`. `uncertain`: an earlier try of this batch lost its
    /// connection while its COMMIT may have been in flight; if every
    /// versioned row now holds exactly what the batch wrote, one version
    /// on, that COMMIT went through, and `None` says so: the batch is
    /// committed, and reporting a conflict would make the services handle
    /// its requests again on top of their own effects (a REST top-up,
    /// which carries no request number to recognise it by, applied twice).
    fn conflicting(&mut self, batch: &[Encoded<'_>], uncertain: bool) -> Option<StoreError> {
        let ctx = "locating a write conflict";
        let mut sessions: Vec<(&str, i64, &[u8])> = Vec::new();
        let mut usage: Vec<(&str, i64, &[u8])> = Vec::new();
        for e in batch {
            match e {
                Encoded::Session {
                    id, version, data, ..
                } => sessions.push((id, *version, data)),
                Encoded::Usage {
                    subscriber,
                    version,
                    data,
                } => usage.push((subscriber, *version, data)),
                _ => {}
            }
        }
        let (rt, live) = match self.parts() {
            Ok(p) => p,
            Err(e) => return Some(e),
        };
        let timeout = self.opts.timeout;
        let ids: Vec<&str> = sessions.iter().map(|(k, ..)| *k).collect();
        let subs: Vec<&str> = usage.iter().map(|(k, ..)| *k).collect();
        let r = block(rt, async {
            tokio::time::timeout(timeout, async {
                let a = live.client.query(sql::SESSION_VERSIONS, &[&ids]).await?;
                let b = live.client.query(sql::USAGE_VERSIONS, &[&subs]).await?;
                Ok::<_, tokio_postgres::Error>((a, b))
            })
            .await
        });
        let (a, b) = match r {
            Ok(Ok(rows)) => rows,
            Ok(Err(e)) => return Some(self.failed(ctx, PgFailure::from(e))),
            Err(_) => return Some(self.timed_out(ctx)),
        };
        // Every row written by this batch, one version on: its own COMMIT.
        // (The batch is one transaction: all of it committed or none.)
        let mine = |rows: &[tokio_postgres::Row], wrote: &[(&str, i64, &[u8])]| -> bool {
            wrote.iter().all(|(key, was, data)| {
                rows.iter().any(|row| {
                    row.try_get::<_, &str>(0).ok() == Some(*key)
                        && row.try_get::<_, i64>(1).ok() == Some(*was + 1)
                        && row.try_get::<_, &[u8]>(2).ok() == Some(*data)
                })
            })
        };
        if uncertain && mine(&a, &sessions) && mine(&b, &usage) {
            tracing::info!(
                rows = sessions.len() + usage.len(),
                "the batch whose connection was lost had committed; not applied again"
            );
            return None;
        }
        let stale = |rows: &[tokio_postgres::Row], read: &[(&str, i64, &[u8])]| -> Vec<String> {
            rows.iter()
                .filter_map(|row| {
                    let key: &str = row.try_get(0).ok()?;
                    let now: i64 = row.try_get(1).ok()?;
                    let (_, was, _) = read.iter().find(|(k, ..)| *k == key)?;
                    (now != *was).then(|| key.to_owned())
                })
                .collect()
        };
        let mut out: Vec<Conflicted> = stale(&a, &sessions)
            .into_iter()
            .map(Conflicted::Session)
            .collect();
        out.extend(stale(&b, &usage).into_iter().map(Conflicted::Usage));
        if out.is_empty() {
            // Written back meanwhile? Versions only grow: should not
            // happen; the batch fails as a whole rather than loop.
            return Some(StoreError::Unavailable(format!(
                "{ctx}: no row found at another version"
            )));
        }
        tracing::info!(
            rows = out.len(),
            "rows written by another node; their requests are retried"
        );
        Some(StoreError::Conflict(out))
    }

    fn parts(&self) -> Result<(&Runtime, &Live), StoreError> {
        match (&self.rt, &self.live) {
            (Some(rt), Some(live)) => Ok((rt, live)),
            _ => Err(self.down()),
        }
    }

    fn down(&self) -> StoreError {
        let wait = self.retry_at.saturating_duration_since(Instant::now());
        StoreError::Unavailable(format!(
            "database unavailable ({}); next connection attempt in {} ms",
            self.last_error,
            wait.as_millis()
        ))
    }

    /// Opens a connection (migrating first when asked) within the bound.
    fn connect(&mut self, migrate: bool) -> Result<Live, StoreError> {
        let rt = self
            .rt
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable("store closed".into()))?;
        let cfg = &self.cfg;
        let timeout = hosts::connect_bound(cfg, self.opts.timeout);
        let expires = Instant::now()
            + self
                .jitter
                .between(self.opts.lifetime_min, self.opts.lifetime_max);
        let r = block(rt, async {
            let attempt = async {
                let (client, conn) = cfg
                    .connect(NoTls)
                    .await
                    .map_err(|e| pg_error("connecting", PgFailure::from(e)))?;
                let task = tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::warn!(error = %e, "database connection closed");
                    }
                });
                if migrate {
                    migrations::run(&client).await?;
                }
                let st = Statements::prepare(&client)
                    .await
                    .map_err(|e| pg_error("preparing statements", PgFailure::from(e)))?;
                Ok::<_, StoreError>(Live {
                    client,
                    st,
                    task,
                    expires,
                })
            };
            match tokio::time::timeout(timeout, attempt).await {
                Ok(r) => r,
                Err(_) => Err(StoreError::Unavailable(format!(
                    "connecting: no answer within {} ms",
                    timeout.as_millis()
                ))),
            }
        });
        match &r {
            Ok(_) => {
                self.backoff.reset();
                self.last_error.clear();
            }
            Err(e) => {
                self.monitor.attempt_failed();
                self.last_error = match e {
                    StoreError::Unavailable(m) | StoreError::Corrupt(m) => m.clone(),
                    other => other.to_string(),
                };
                self.retry_at = Instant::now() + self.backoff.next_delay();
            }
        }
        r
    }

    /// Makes sure a usable connection is in `live`: notices one the server
    /// closed, replaces one past its lifetime, reconnects (honouring the
    /// backoff) when there is none.
    fn ensure_live(&mut self) -> Result<(), StoreError> {
        if let (Some(rt), Some(_)) = (&self.rt, &self.live) {
            // Let the connection task read what arrived while idle (a
            // termination notice, EOF) so a dead connection is seen now.
            block(rt, tokio::task::yield_now());
        }
        if self.live.as_ref().is_some_and(|l| l.client.is_closed()) {
            tracing::warn!("database connection lost; reconnecting");
            self.lose("connection lost".into());
        }
        let now = Instant::now();
        match &self.live {
            Some(l) if now < l.expires => Ok(()),
            Some(_) => {
                // Lifetime over: replace it between batches; if the new
                // one cannot be had, keep the old one a while longer.
                match self.connect(false) {
                    Ok(new) => {
                        self.live = Some(new);
                        self.monitor.connected(false);
                        tracing::debug!("database connection replaced after its lifetime");
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot replace an aged database connection");
                        if let Some(l) = self.live.as_mut() {
                            l.expires = self.retry_at;
                        }
                    }
                }
                Ok(())
            }
            None if now < self.retry_at => Err(self.down()),
            None => {
                let new = self.connect(false).map_err(|e| {
                    tracing::warn!(error = %e, "database connection failed");
                    e
                })?;
                self.live = Some(new);
                self.monitor.connected(false);
                tracing::info!("database connection established");
                Ok(())
            }
        }
    }

    /// Maps a failure, dropping the connection when it is to blame.
    fn failed(&mut self, context: &str, f: PgFailure) -> StoreError {
        if let PgFailure::Connection(m) = &f {
            self.lose(m.clone());
        }
        pg_error(context, f)
    }

    /// A call that outlived the bound: the connection's state is unknown,
    /// so it is dropped (the server rolls back what it had open).
    fn timed_out(&mut self, context: &str) -> StoreError {
        self.lose(format!(
            "{context}: no answer within {} ms",
            self.opts.timeout.as_millis()
        ));
        StoreError::Unavailable(self.last_error.clone())
    }

    /// Streams `(key, data)` rows page by page through `decode`.
    fn load_all<T>(
        &mut self,
        which: Sql,
        ctx: &str,
        decode: fn(&mut u64, &str, &[u8], i64) -> Option<T>,
    ) -> Result<Vec<T>, StoreError> {
        self.ensure_live()?;
        let mut out = Vec::new();
        let mut skipped = 0;
        let mut after = String::new();
        loop {
            let (rt, live) = self.parts()?;
            let stmt = if which == sql::OPEN_SESSIONS {
                &live.st.open_sessions
            } else if which == sql::ALL_USAGE {
                &live.st.all_usage
            } else {
                &live.st.all_subscribers
            };
            let timed = self.profiler.is_enabled();
            let t = timed.then(Instant::now);
            let timeout = self.opts.timeout;
            let owner = self.owner.as_deref();
            let mut params: Vec<&(dyn ToSql + Sync)> = vec![&after, &PAGE];
            if which == sql::OPEN_SESSIONS {
                params.push(&owner);
            }
            let r = block(rt, async {
                tokio::time::timeout(timeout, live.client.query(stmt, &params)).await
            });
            let rows = match r {
                Ok(Ok(rows)) => rows,
                Ok(Err(e)) => return Err(self.failed(ctx, PgFailure::from(e))),
                Err(_) => return Err(self.timed_out(ctx)),
            };
            let fetched = timed.then(Instant::now);
            let n = rows.len();
            for row in &rows {
                let key: &str = row
                    .try_get(0)
                    .map_err(|e| pg_error(ctx, PgFailure::from(e)))?;
                let data: &[u8] = row
                    .try_get(1)
                    .map_err(|e| pg_error(ctx, PgFailure::from(e)))?;
                let version: i64 = row
                    .try_get(2)
                    .map_err(|e| pg_error(ctx, PgFailure::from(e)))?;
                if let Some(v) = decode(&mut skipped, key, data, version) {
                    out.push(v);
                }
            }
            if let (Some(t), Some(f)) = (t, fetched) {
                self.profiler
                    .record(which.0, which.1, f - t, f.elapsed(), n as u64);
            }
            match rows.last() {
                Some(last) if n as i64 == PAGE => {
                    after = last
                        .try_get::<_, String>(0)
                        .map_err(|e| pg_error(ctx, PgFailure::from(e)))?;
                }
                _ => break,
            }
        }
        self.skipped_corrupt = skipped;
        Ok(out)
    }

    /// One blob by key.
    fn get_one(
        &mut self,
        which: Sql,
        key: &str,
        ctx: &str,
    ) -> Result<Option<(Vec<u8>, i64)>, StoreError> {
        self.ensure_live()?;
        let (rt, live) = self.parts()?;
        let stmt = if which == sql::GET_SESSION {
            &live.st.get_session
        } else if which == sql::GET_USAGE {
            &live.st.get_usage
        } else {
            &live.st.get_subscriber
        };
        let t = self.profiler.is_enabled().then(Instant::now);
        let timeout = self.opts.timeout;
        let r = block(rt, async {
            tokio::time::timeout(timeout, live.client.query_opt(stmt, &[&key])).await
        });
        let row = match r {
            Ok(Ok(row)) => row,
            Ok(Err(e)) => return Err(self.failed(ctx, PgFailure::from(e))),
            Err(_) => return Err(self.timed_out(ctx)),
        };
        let f = t.map(|_| Instant::now());
        let data = match row {
            None => None,
            Some(row) => Some((
                row.try_get::<_, Vec<u8>>(0)
                    .map_err(|e| pg_error(ctx, PgFailure::from(e)))?,
                row.try_get::<_, i64>(1)
                    .map_err(|e| pg_error(ctx, PgFailure::from(e)))?,
            )),
        };
        if let (Some(t), Some(f)) = (t, f) {
            self.profiler.record(
                which.0,
                which.1,
                f - t,
                f.elapsed(),
                u64::from(data.is_some()),
            );
        }
        Ok(data)
    }
}

impl Store for PostgresStore {
    fn apply(&mut self, changes: &[Change]) -> Result<usize, StoreError> {
        if changes.is_empty() {
            return Ok(0);
        }
        let kept = last_per_row(changes);
        let batch = kept
            .iter()
            .map(|c| encode(c))
            .collect::<Result<Vec<_>, _>>()?;
        // One retry on a fresh connection: a connection that died while
        // idle (terminated, failed over) must not fail a batch the
        // database can take. A COMMIT without an answer has an unknown
        // outcome: if it went through, the retry's compare-and-set finds
        // the rows one version on, holding what this batch wrote, and
        // `conflicting` recognises the batch's own write: it is committed
        // once, acknowledged once. Otherwise the retry commits it (maybe on
        // the new primary after a switch-over) or it fails, its requests
        // are answered 5012 and the node keeps the state from before them;
        // if the database holds them after all, the next write of those
        // rows conflicts and the services read them back, with the answer
        // a retransmission then gets (deploy/cluster/postgresql.md, "Why
        // nothing acknowledged is lost").
        let mut retried = false;
        loop {
            self.ensure_live()?;
            let (rt, live) = self.parts()?;
            let timeout = self.opts.timeout;
            let profiler = &self.profiler;
            let owner = self.owner.as_deref();
            let r = block(rt, async {
                tokio::time::timeout(timeout, apply_batch(live, &batch, owner, profiler)).await
            });
            let changed = match r {
                Ok(Ok(changed)) => changed,
                Ok(Err(PgFailure::Conflict)) => match self.conflicting(&batch, retried) {
                    Some(e) => return Err(e),
                    // The lost COMMIT's rows: what a successful try counts.
                    None => batch
                        .iter()
                        .filter(|e| matches!(e, Encoded::Session { .. } | Encoded::Usage { .. }))
                        .count(),
                },
                Ok(Err(PgFailure::Connection(m))) if !retried => {
                    // If the COMMIT was in flight and went through, the
                    // retry finds its own rows a version ahead and says so.
                    tracing::warn!(error = %m, "database connection failed mid-batch; retrying once");
                    self.lose(m);
                    self.retry_at = Instant::now();
                    retried = true;
                    continue;
                }
                Ok(Err(f)) => {
                    return Err(self.failed("writing a batch", f));
                }
                Err(_) => {
                    // It may have committed after all: the next write of
                    // these rows then conflicts, and they are read again.
                    return Err(self.timed_out("writing a batch"));
                }
            };
            // The records now stand at the versions written.
            for c in &kept {
                match c {
                    Change::PutSession(s) => s.version.set(s.version.get() + 1),
                    Change::PutUsage(u) => u.version.set(u.version.get() + 1),
                    _ => {}
                }
            }
            return Ok(changed);
        }
    }

    fn open_sessions(&mut self) -> Result<Vec<GxSession>, StoreError> {
        self.load_all(sql::OPEN_SESSIONS, "loading open sessions", |n, k, d, v| {
            decode_session(n, k, d).inspect(|s| s.version.set(v as u64))
        })
    }

    fn subscribers(&mut self) -> Result<Vec<Subscriber>, StoreError> {
        self.load_all(sql::ALL_SUBSCRIBERS, "loading subscribers", |n, k, d, _| {
            decode_subscriber(n, k, d)
        })
    }

    fn session(&mut self, id: &str) -> Result<Option<GxSession>, StoreError> {
        match self.get_one(sql::GET_SESSION, id, "reading a session")? {
            None => Ok(None),
            Some((d, v)) => match decode_session(&mut self.skipped_corrupt, id, &d) {
                Some(s) => {
                    s.version.set(v as u64);
                    Ok(Some(s))
                }
                None => Err(StoreError::Corrupt(format!(
                    "session {id:?}: stored record cannot be decoded"
                ))),
            },
        }
    }

    fn subscriber(&mut self, imsi: &str) -> Result<Option<Subscriber>, StoreError> {
        match self.get_one(sql::GET_SUBSCRIBER, imsi, "reading a subscriber")? {
            None => Ok(None),
            Some((d, _)) => match decode_subscriber(&mut self.skipped_corrupt, imsi, &d) {
                Some(s) => Ok(Some(s)),
                None => Err(StoreError::Corrupt(format!(
                    "subscriber {imsi:?}: stored record cannot be decoded"
                ))),
            },
        }
    }

    fn usage_records(&mut self) -> Result<Vec<SubscriberUsage>, StoreError> {
        self.load_all(sql::ALL_USAGE, "loading usage", |n, k, d, v| {
            decode_usage(n, k, d).inspect(|u| u.version.set(v as u64))
        })
    }

    fn usage(&mut self, subscriber: &str) -> Result<Option<SubscriberUsage>, StoreError> {
        match self.get_one(sql::GET_USAGE, subscriber, "reading a usage record")? {
            None => Ok(None),
            Some((d, v)) => match decode_usage(&mut self.skipped_corrupt, subscriber, &d) {
                Some(u) => {
                    u.version.set(v as u64);
                    Ok(Some(u))
                }
                None => Err(StoreError::Corrupt(format!(
                    "usage of {subscriber:?}: stored record cannot be decoded"
                ))),
            },
        }
    }

    fn pending_events(&mut self) -> Result<Vec<crate::notify::Event>, StoreError> {
        let ctx = "loading the notification outbox";
        self.ensure_live()?;
        let mut out = Vec::new();
        let mut skipped = 0;
        let (mut after_seq, mut after_sink) = (i64::MIN, String::new());
        loop {
            let (rt, live) = self.parts()?;
            let timeout = self.opts.timeout;
            let r = block(rt, async {
                tokio::time::timeout(
                    timeout,
                    live.client
                        .query(sql::PENDING_EVENTS.1, &[&after_seq, &after_sink, &PAGE]),
                )
                .await
            });
            let rows = match r {
                Ok(Ok(rows)) => rows,
                Ok(Err(e)) => return Err(self.failed(ctx, PgFailure::from(e))),
                Err(_) => return Err(self.timed_out(ctx)),
            };
            for row in &rows {
                let seq: i64 = row
                    .try_get(0)
                    .map_err(|e| pg_error(ctx, PgFailure::from(e)))?;
                let sink: String = row
                    .try_get(1)
                    .map_err(|e| pg_error(ctx, PgFailure::from(e)))?;
                let data: &[u8] = row
                    .try_get(2)
                    .map_err(|e| pg_error(ctx, PgFailure::from(e)))?;
                match crate::notify::Event::from_stored(seq as u64, &sink, data) {
                    Ok(e) => out.push(e),
                    Err(e) => {
                        skipped += 1;
                        tracing::error!(seq, sink, error = %e,
                            "stored notification cannot be decoded; skipped");
                    }
                }
                (after_seq, after_sink) = (seq, sink);
            }
            if (rows.len() as i64) < PAGE {
                break;
            }
        }
        self.skipped_corrupt = skipped;
        Ok(out)
    }

    fn purge_closed(&mut self, before_ms: i64, limit: usize) -> Result<usize, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.ensure_live()?;
        let (rt, live) = self.parts()?;
        let t = self.profiler.is_enabled().then(Instant::now);
        let timeout = self.opts.timeout;
        let r = block(rt, async {
            tokio::time::timeout(
                timeout,
                live.client
                    .execute(&live.st.purge_closed, &[&before_ms, &limit]),
            )
            .await
        });
        match r {
            Ok(Ok(n)) => {
                if let Some(t) = t {
                    let (name, text) = sql::PURGE_CLOSED;
                    self.profiler
                        .record(name, text, t.elapsed(), Duration::ZERO, n);
                }
                Ok(usize::try_from(n).unwrap_or(usize::MAX))
            }
            Ok(Err(e)) => Err(self.failed("purging closed sessions", PgFailure::from(e))),
            Err(_) => Err(self.timed_out("purging closed sessions")),
        }
    }

    fn skipped_corrupt(&self) -> u64 {
        self.skipped_corrupt
    }

    /// An UPDATE that matches no row: refused as a write is by a database
    /// or session set read-only, a revoked privilege, a standby.
    fn probe(&mut self) -> Result<(), StoreError> {
        self.ensure_live()?;
        let (rt, live) = self.parts()?;
        let timeout = self.opts.timeout;
        let r = block(rt, async {
            tokio::time::timeout(
                timeout,
                live.client
                    .execute("UPDATE subscribers SET imsi = imsi WHERE false", &[]),
            )
            .await
        });
        match r {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(self.failed("probing a write", PgFailure::from(e))),
            Err(_) => Err(self.timed_out("probing a write")),
        }
    }

    fn set_owner(&mut self, node: &str) {
        self.owner = Some(node.to_owned());
    }

    fn compare_and_set(&self) -> bool {
        true
    }

    fn open_session_ids(&mut self, by: &OpenSessionsBy) -> Result<Vec<String>, StoreError> {
        fn p<T: ToSql + Sync>(v: &T) -> &(dyn ToSql + Sync) {
            v
        }
        let (ctx, query, param) = match by {
            OpenSessionsBy::Ipv4(a) => (
                "finding the sessions of a UE address",
                sql::OPEN_BY_IPV4,
                p(a),
            ),
            OpenSessionsBy::Ipv6Prefixes(keys) => (
                "finding the sessions of a UE prefix",
                sql::OPEN_BY_IPV6,
                p(keys),
            ),
            OpenSessionsBy::Subscriber(key) => (
                "finding a subscriber's sessions",
                sql::OPEN_BY_SUBSCRIBER,
                p(key),
            ),
            OpenSessionsBy::SubSession(id) => (
                "finding the session holding an Rx or Sd session",
                sql::OPEN_BY_SUB_SESSION,
                p(id),
            ),
        };
        self.ensure_live()?;
        let (rt, live) = self.parts()?;
        let timeout = self.opts.timeout;
        let r = block(rt, async {
            tokio::time::timeout(timeout, live.client.query(query, &[param])).await
        });
        match r {
            Ok(Ok(rows)) => rows
                .iter()
                .map(|row| {
                    row.try_get::<_, String>(0)
                        .map_err(|e| pg_error(ctx, PgFailure::from(e)))
                })
                .collect(),
            Ok(Err(e)) => Err(self.failed(ctx, PgFailure::from(e))),
            Err(_) => Err(self.timed_out(ctx)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_connections_ask_for_the_primary_of_a_host_list() {
        use tokio_postgres::config::TargetSessionAttrs;
        let (cfg, bound) = side_connection(
            "host=db1,db2 port=5432,5433 user=pcrf dbname=pcrf",
            Duration::from_secs(2),
        )
        .expect("settles");
        assert_eq!(
            cfg.get_target_session_attrs(),
            TargetSessionAttrs::ReadWrite
        );
        assert_eq!(bound, Duration::from_secs(4), "time to try each host");
        assert_eq!(cfg.get_keepalives_idle(), Duration::from_secs(2));
        assert_eq!(cfg.get_keepalives_retries(), Some(3));
        let (cfg, _) = side_connection("postgres://pcrf@db1/pcrf", Duration::from_millis(300))
            .expect("settles");
        assert_eq!(cfg.get_target_session_attrs(), TargetSessionAttrs::Any);
        assert_eq!(cfg.get_keepalives_idle(), Duration::from_secs(1));
    }

    #[test]
    fn lifetimes_fall_in_the_window() {
        let lo = Duration::from_secs(1800);
        let hi = Duration::from_secs(3600);
        let mut jitter = Jitter::from_entropy();
        let draws: Vec<Duration> = (0..200).map(|_| jitter.between(lo, hi)).collect();
        assert!(draws.iter().all(|d| *d >= lo && *d <= hi));
        // Spread, not one value: servers must not reconnect together.
        let distinct: std::collections::HashSet<_> = draws.iter().collect();
        assert!(distinct.len() > 150, "{}", distinct.len());
        assert_eq!(jitter.between(hi, lo), hi);
    }

    #[test]
    fn configuration_section_maps_to_options() {
        use crate::store::config::{StoreConfig, StoreKind, DATABASE_URL_ENV};
        let c: StoreConfig = toml::from_str(
            "kind = \"postgres\"\nurl = \"postgres://pcrf@127.0.0.1/pcrf\"\n\
             lifetime_min_secs = 60\nlifetime_max_secs = 120\ntimeout_ms = 750",
        )
        .expect("parses");
        assert_eq!(c.kind, StoreKind::Postgres);
        assert!(c.validate().is_ok());
        let o = c.postgres_options().expect("options");
        assert_eq!(o.lifetime_min, Duration::from_secs(60));
        assert_eq!(o.lifetime_max, Duration::from_secs(120));
        assert_eq!(o.timeout, Duration::from_millis(750));
        if std::env::var_os(DATABASE_URL_ENV).is_none() {
            assert_eq!(o.url, "postgres://pcrf@127.0.0.1/pcrf");
            let no_url: StoreConfig = toml::from_str("kind = \"postgres\"").expect("parses");
            let e = no_url.validate().expect_err("needs a URL");
            assert!(e.contains(DATABASE_URL_ENV), "{e}");
        }
        let defaults: StoreConfig =
            toml::from_str("kind = \"postgres\"\nurl = \"postgres://x@127.0.0.1/y\"")
                .expect("parses");
        let o = defaults.postgres_options().expect("options");
        assert_eq!(o.lifetime_min, Duration::from_secs(1800));
        assert_eq!(o.lifetime_max, Duration::from_secs(3600));
        for bad in [
            "lifetime_min_secs = 0",
            "lifetime_min_secs = 100\nlifetime_max_secs = 50",
            "timeout_ms = 0",
        ] {
            let c: StoreConfig = toml::from_str(&format!(
                "kind = \"postgres\"\nurl = \"postgres://x@127.0.0.1/y\"\n{bad}"
            ))
            .expect("parses");
            assert!(c.validate().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn bad_url_is_named_without_echoing_it() {
        match PostgresStore::open(PostgresOptions::new("postgres://u:secret@host:notaport/db")) {
            Err(StoreError::Unavailable(m)) => {
                assert!(m.contains("invalid database URL"), "{m}");
                assert!(!m.contains("secret"), "{m}");
            }
            other => panic!("expected refusal, got {other:?}"),
        }
    }
}
