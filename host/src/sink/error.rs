//! Why a sink operation failed, and which failures are worth waiting for.

use std::time::Duration;

use super::db;
pub use super::db::ErrorClass;

/// Why a sink operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot connect to {url}: {}", shown(source))]
    Connect { url: String, source: sqlx::Error },
    #[error("{action} on table {table}: {}", shown(source))]
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
    /// A dead letter this redrive was writing back is gone: another redrive took it. The
    /// transaction was rolled back; the redrive reads its page again.
    #[error(
        "dead letter {topic}/{partition}@{offset} was redriven by someone else meanwhile; the batch was rolled back"
    )]
    RedriveConflict {
        topic: String,
        partition: i32,
        offset: i64,
    },
    /// Another transaction stored one of this batch's `delivery.dedup` ids at the same
    /// time (two partitions carrying copies of one message). The transaction was rolled
    /// back; written again, it finds the id and skips the copy (transient).
    #[error(
        "another transaction stored one of this batch's {ids} new producer ids at the same time (delivery.dedup); the batch was rolled back"
    )]
    DedupConflict { ids: usize },
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
    /// With derived columns: records of this schema cannot be written to the table (a
    /// field it lacks under `evolve: none`, a type change, a new required field, another
    /// key). Their records fail alone, class `schema_incompatible`.
    #[error("table {table}: {message}")]
    SchemaIncompatible { table: String, message: String },
    /// The database refused sluice the privilege to create or alter a table (PostgreSQL
    /// 42501, MySQL 1142): a permanent task failure, not a record's.
    #[error(
        "{action} on table {table}: the database refused the privilege ({source}); grant it, or create the table yourself"
    )]
    NotPermitted {
        action: &'static str,
        table: String,
        source: sqlx::Error,
    },
    /// A dead-letter table operation on a connector that has none.
    #[error("connector {connector} has no dead-letter table (errors.dlq.table)")]
    NoDeadLetterTable { connector: String },
    /// The database's sluice tables are at a newer schema version than this binary knows.
    #[error(
        "sluice's tables in this database are at schema version {found}, newer than this sluice knows ({known}): run a newer sluice, or a fresh database"
    )]
    SchemaTooNew { found: i64, known: i64 },
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
            SinkError::Timeout { .. } | SinkError::DedupConflict { .. } => true,
            SinkError::OffsetConflict { .. }
            | SinkError::RedriveConflict { .. }
            | SinkError::UnsupportedUrl { .. }
            | SinkError::TableMismatch { .. }
            | SinkError::SchemaIncompatible { .. }
            | SinkError::NotPermitted { .. }
            | SinkError::NoDeadLetterTable { .. }
            | SinkError::SchemaTooNew { .. }
            | SinkError::Internal(_) => false,
        }
    }
}

/// Whether the database refused a statement for want of a privilege (PostgreSQL 42501,
/// MySQL and MariaDB 1142 and 1044).
pub(super) fn is_not_permitted(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => db::read_error(db.as_ref()).not_permitted,
        _ => false,
    }
}

/// Whether the database refused to add a column that is already there (PostgreSQL 42701,
/// MySQL and MariaDB 1060, SQLite's "duplicate column name").
pub(super) fn is_duplicate_column(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Database(db) => db::read_error(db.as_ref()).duplicate_column,
        _ => false,
    }
}

/// Classifies a database error by the database's own codes (`db/`): SQLSTATE for
/// PostgreSQL, the error number for MySQL and MariaDB, the result code for SQLite.
pub fn classify(error: &sqlx::Error) -> ErrorClass {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Tls(_) => ErrorClass::Transient,
        sqlx::Error::Database(db) => {
            // A patch with no stored row to keep its left-out columns from.
            if db
                .try_downcast_ref::<super::patch::UnavailableRow>()
                .is_some()
            {
                return ErrorClass::Refused;
            }
            db::read_error(db.as_ref()).class
        }
        _ => ErrorClass::Permanent,
    }
}

/// Whether the database refused the rows themselves.
pub(super) fn is_refusal(error: &sqlx::Error) -> bool {
    classify(error) == ErrorClass::Refused
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
    classify(error) == ErrorClass::Transient
}

/// A database error as a user reads it: in its database's words where sqlx's are not
/// right for a user (PostgreSQL's, without data values or sqlx's line of PostgreSQL's
/// source: `db/postgres/errors.rs`); other errors as sqlx writes them.
pub fn shown(error: &sqlx::Error) -> Shown<'_> {
    Shown(error)
}

/// See [`shown`].
pub struct Shown<'a>(&'a sqlx::Error);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            sqlx::Error::Database(db) => db::write_error(db.as_ref(), f),
            other => write!(f, "{other}"),
        }
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
