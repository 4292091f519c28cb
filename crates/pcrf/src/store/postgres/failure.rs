//! Why a PostgreSQL call failed, sorted into what the store does about it:
//! a lost connection (replaced, the batch retried) or a refused statement.
//! A server that has become read-only counts as lost: the store's server
//! is whichever of the hosts named accepts writes.

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
            Some(c) if connection_to_blame(c) => PgFailure::Connection(msg),
            Some(c) if *c == SqlState::DIVISION_BY_ZERO => PgFailure::Conflict,
            Some(_) => PgFailure::Refused(msg),
        }
    }
}

/// Whether a database error means "use another connection": the server is
/// going away, or the transaction lost a conflict (CockroachDB/YugabyteDB
/// report contention this way), or the server refuses writes because it is
/// a standby now (demoted in a switch-over, or reached through an address
/// that moved): a new connection finds the primary among the hosts named.
fn connection_to_blame(c: &SqlState) -> bool {
    [
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
        SqlState::T_R_SERIALIZATION_FAILURE,
        SqlState::T_R_DEADLOCK_DETECTED,
        SqlState::READ_ONLY_SQL_TRANSACTION,
    ]
    .contains(c)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_only_server_is_left_for_another_and_bad_sql_is_not() {
        // What a standby or a demoted primary answers to a write.
        assert!(connection_to_blame(&SqlState::READ_ONLY_SQL_TRANSACTION));
        assert!(connection_to_blame(&SqlState::ADMIN_SHUTDOWN));
        assert!(!connection_to_blame(&SqlState::UNIQUE_VIOLATION));
        assert!(!connection_to_blame(&SqlState::SYNTAX_ERROR));
    }
}
