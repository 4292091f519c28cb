//! Why a PostgreSQL call failed, sorted into what the store does about it:
//! a lost connection (replaced, the batch retried) or a refused statement.

use crate::store::StoreError;
use tokio_postgres::error::SqlState;

/// Why a database call failed: the connection (dropped and replaced; the
/// batch may be retried, every change being an idempotent row write) or
/// the database refusing a statement.
#[derive(Debug)]
pub(crate) enum PgFailure {
    Connection(String),
    Refused(String),
    /// A compare-and-set write found a row at another version (its
    /// statement divides by zero to abort the transaction, see `sql`).
    Conflict,
}

impl From<tokio_postgres::Error> for PgFailure {
    fn from(e: tokio_postgres::Error) -> Self {
        let msg = match e.as_db_error() {
            Some(db) => format!("{}: {}", db.code().code(), db.message()),
            None => e.to_string(),
        };
        match e.code() {
            // No SQLSTATE: I/O, protocol or a closed connection.
            None => PgFailure::Connection(msg),
            // The server is going away or the transaction lost a conflict
            // (CockroachDB/YugabyteDB report contention this way): retryable.
            Some(c)
                if *c == SqlState::ADMIN_SHUTDOWN
                    || *c == SqlState::CRASH_SHUTDOWN
                    || *c == SqlState::CANNOT_CONNECT_NOW
                    || *c == SqlState::T_R_SERIALIZATION_FAILURE
                    || *c == SqlState::T_R_DEADLOCK_DETECTED =>
            {
                PgFailure::Connection(msg)
            }
            Some(c) if *c == SqlState::DIVISION_BY_ZERO => PgFailure::Conflict,
            Some(_) => PgFailure::Refused(msg),
        }
    }
}

pub(crate) fn pg_error(context: &str, f: PgFailure) -> StoreError {
    match f {
        PgFailure::Connection(m) => {
            StoreError::Unavailable(format!("{context}: database connection: {m}"))
        }
        PgFailure::Refused(m) => StoreError::Unavailable(format!("{context}: {m}")),
        PgFailure::Conflict => {
            StoreError::Unavailable(format!("{context}: a row was written by another node"))
        }
    }
}
