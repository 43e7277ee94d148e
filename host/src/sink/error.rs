//! Why a sink operation failed, and which failures are worth waiting for.

use std::time::Duration;

/// Why a sink operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot connect to {url}: {source}")]
    Connect { url: String, source: sqlx::Error },
    #[error("{action} on table {table}: {source}")]
    Database {
        action: &'static str,
        table: String,
        source: sqlx::Error,
    },
    /// The stored offset is no longer the one this batch started from: another task owns
    /// the partition now. The transaction was rolled back.
    #[error(
        "offset conflict on {topic}/{partition}: expected stored next_offset {}, another task has moved it; the batch was rolled back",
        expected.map_or("none".to_string(), |o| o.to_string())
    )]
    OffsetConflict {
        topic: String,
        partition: i32,
        expected: Option<i64>,
    },
    /// The database did not answer in time; what happened to the statement is unknown
    /// (a retried batch is fenced by the compare-and-set if it did commit).
    #[error("{action} on table {table}: no answer from the database within {after:?}")]
    Timeout {
        action: &'static str,
        table: String,
        after: Duration,
    },
    /// The URL's scheme is none of the supported databases.
    #[error("unsupported database URL {url}: use postgres://, mysql://, mariadb:// or sqlite://")]
    UnsupportedUrl { url: String },
    /// The sink table is missing, or lacks a configured column.
    #[error(
        "table {table} is missing or lacks one of the configured columns ({columns}): {source}; set create_table: true or create it"
    )]
    TableMismatch {
        table: String,
        columns: String,
        source: sqlx::Error,
    },
    /// A dead-letter table operation on a connector that has none.
    #[error("connector {connector} has no dead-letter table (errors.dlq.table)")]
    NoDeadLetterTable { connector: String },
    /// sluice broke one of its own rules: a bug, never the user's input.
    #[error("internal error (a bug in sluice, please report it): {0}")]
    Internal(String),
}

impl SinkError {
    /// Lost connections, pool timeouts, serialization failures, deadlocks and busy
    /// databases pass; waiting and retrying is the right answer to them.
    pub fn is_transient(&self) -> bool {
        match self {
            SinkError::Connect { source, .. } | SinkError::Database { source, .. } => {
                is_transient(source)
            }
            SinkError::Timeout { .. } => true,
            SinkError::OffsetConflict { .. }
            | SinkError::UnsupportedUrl { .. }
            | SinkError::TableMismatch { .. }
            | SinkError::NoDeadLetterTable { .. }
            | SinkError::Internal(_) => false,
        }
    }
}

/// Whether the database refused the rows themselves: a constraint (unique, foreign key,
/// check, not null) or a value it cannot store (too long, out of range, bad encoding).
pub(super) fn is_refusal(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = error else {
        return false;
    };
    if let Some(mysql) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        // null, duplicate, out of range, incorrect value, incorrect string, data too long,
        // truncated, foreign keys, CHECK (MySQL 3819, MariaDB 4025)
        return matches!(
            mysql.number(),
            1048 | 1062 | 1264 | 1265 | 1292 | 1366 | 1406 | 1451 | 1452 | 1690 | 3819 | 4025
        );
    }
    let code = db.code().unwrap_or_default();
    if db
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .is_some()
    {
        // Class 22: data exception; class 23: integrity constraint violation.
        return code.starts_with("22") || code.starts_with("23");
    }
    // SQLite: TOOBIG, CONSTRAINT (and its extended codes), MISMATCH.
    code.parse::<i64>()
        .is_ok_and(|c| matches!(c & 0xff, 18..=20))
}

/// A refused row's message: the database's own words.
pub(super) fn refused_message(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(db) => match db.code() {
            Some(code) => format!("{} (code {code})", db.message()),
            None => db.message().to_string(),
        },
        other => other.to_string(),
    }
}

pub(super) fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(db) => {
            // MySQL's own error numbers say more than the SQLSTATEs it shares with others.
            if let Some(mysql) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                // deadlock, lock wait timeout, server gone, lost connection, too many
                // connections, shutdown in progress, read-only during failover, statement
                // time limits (MariaDB, MySQL)
                return matches!(
                    mysql.number(),
                    1213 | 1205 | 2006 | 2013 | 1040 | 1053 | 1290 | 1927 | 1969 | 3024
                );
            }
            let code = db.code().unwrap_or_default();
            matches!(
                code.as_ref(),
                // PostgreSQL: serialization failure, deadlock, lock timeout, statement
                // timeout, shutdown, too many connections, connection exceptions
                "40001" | "40P01" | "55P03" | "57014" | "57P01" | "57P02" | "57P03" | "53300" | "08000" | "08003" | "08006" | "08001" | "08004"
                // SQLite: busy, locked
                | "5" | "6" | "261" | "517"
            )
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_errors() {
        assert!(is_transient(&sqlx::Error::PoolTimedOut));
        assert!(!is_transient(&sqlx::Error::RowNotFound));
    }
}
