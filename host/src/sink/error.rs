//! Why a sink operation failed, and which failures are worth waiting for.

use std::time::Duration;

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
    let sqlx::Error::Database(db) = error else {
        return false;
    };
    if let Some(mysql) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return matches!(mysql.number(), 1142 | 1044);
    }
    db.code().as_deref() == Some("42501")
}

/// Whether the database refused to add a column that is already there (PostgreSQL 42701,
/// MySQL and MariaDB 1060, SQLite's "duplicate column name").
pub(super) fn is_duplicate_column(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = error else {
        return false;
    };
    if let Some(mysql) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return mysql.number() == 1060;
    }
    db.code().as_deref() == Some("42701") || db.message().contains("duplicate column name")
}

/// What a database error means for the batch that met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Worth waiting for: the connection, the server or a lock will come back (lost
    /// connections, pool timeouts, deadlocks, serialization failures, lock and statement
    /// timeouts, a server shutting down or read-only during a failover, resources
    /// exhausted).
    Transient,
    /// The database refused the rows themselves: a constraint (unique, foreign key, check,
    /// not null), a value it cannot store (too long, out of range, bad encoding), bytes its
    /// protocol cannot carry (a NUL), or a limit a value or a row can pass (an index entry
    /// or a row too large, a name too long, too many columns). Never transient: the same
    /// rows fail again. The refused rows are isolated and handled by the error policy.
    Refused,
    /// Anything else (a missing table, a privilege, a syntax error): retrying cannot help.
    Permanent,
}

/// Classifies a database error by the database's own codes: SQLSTATE for PostgreSQL, the
/// error number for MySQL and MariaDB, the result code for SQLite.
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
            if let Some(mysql) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                // MySQL's own error numbers say more than the SQLSTATEs it shares.
                return classify_mysql(mysql.number());
            }
            let code = db.code().unwrap_or_default();
            if let Some(pg) = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
                let ends_session = matches!(
                    pg.severity(),
                    sqlx::postgres::PgSeverity::Fatal | sqlx::postgres::PgSeverity::Panic
                );
                return classify_postgres(&code, ends_session);
            }
            code.parse::<i64>()
                .map_or(ErrorClass::Permanent, classify_sqlite)
        }
        _ => ErrorClass::Permanent,
    }
}

/// PostgreSQL SQLSTATEs (appendix A of its manual); `ends_session` for an error of
/// severity FATAL or PANIC, after which the server closes the connection.
fn classify_postgres(sqlstate: &str, ends_session: bool) -> ErrorClass {
    let class = sqlstate.get(..2).unwrap_or_default();
    match (class, sqlstate) {
        // A protocol violation the session outlives (severity ERROR): the bytes of the
        // statement, such as a NUL in an identifier or in text, which the protocol's
        // strings cannot hold; the same rows fail again. A FATAL one ends the connection
        // (PgBouncer says 08P01 when it drops a client: query_wait_timeout, server conn
        // crashed) and is waited out with the rest of class 08.
        (_, "08P01") if !ends_session => ErrorClass::Refused,
        // connection exceptions; insufficient resources (too many connections, disk full,
        // out of memory)
        ("08" | "53", _)
        // serialization failure, deadlock, lock not available, query canceled (statement
        // timeout), admin or crash shutdown, cannot connect now, idle session timeout,
        // read-only transaction (a standby after a failover), I/O error
        | (_, "40001" | "40P01" | "55P03" | "57014" | "57P01" | "57P02" | "57P03" | "57P05" | "25006" | "58030") => {
            ErrorClass::Transient
        }
        // data exceptions; integrity constraint violations; program limits a value or a
        // row can pass (an index row or a row too large, a string too long for a
        // tsvector, a value nested too deep, too many columns); a name too long
        ("22" | "23" | "54", _) | (_, "42622") => ErrorClass::Refused,
        _ => ErrorClass::Permanent,
    }
}

/// MySQL and MariaDB error numbers (server and client).
fn classify_mysql(number: u16) -> ErrorClass {
    match number {
        // disk full, too many connections, shutdown in progress, network read/write errors,
        // too many user connections, lock wait timeout, deadlock, read-only (option,
        // transaction, mode), query interrupted, connection killed, statement time limits
        // (MariaDB 1969, MySQL 3024), can't connect, server gone, lost connection,
        // disconnected by the server
        1021 | 1040 | 1053 | 1158 | 1159 | 1160 | 1161 | 1203 | 1205 | 1213 | 1290 | 1317
        | 1792 | 1836 | 1927 | 1969 | 2002 | 2003 | 2006 | 2013 | 3024 | 4031 => {
            ErrorClass::Transient
        }
        // null, duplicate, out of range, incorrect value, incorrect string, data too long,
        // truncated, foreign keys, CHECK (MySQL 3819, MariaDB 4025); and what a record's
        // content can pass: a name too long, too many columns, a row too large, an
        // incorrect column name, an invalid character string, an illegal or incorrect
        // value for its type, invalid JSON text
        1048 | 1062 | 1264 | 1265 | 1292 | 1366 | 1406 | 1451 | 1452 | 1690 | 3819 | 4025
        | 1059 | 1117 | 1118 | 1166 | 1300 | 1367 | 1411 | 3140 => ErrorClass::Refused,
        _ => ErrorClass::Permanent,
    }
}

/// SQLite result codes: the primary code is the low byte of an extended one.
fn classify_sqlite(code: i64) -> ErrorClass {
    match code & 0xff {
        // BUSY, LOCKED, FULL (the disk)
        5 | 6 | 13 => ErrorClass::Transient,
        // TOOBIG, CONSTRAINT, MISMATCH
        18..=20 => ErrorClass::Refused,
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

/// A database error as a user reads it: PostgreSQL's message with its detail (but for data
/// and integrity errors, whose detail quotes the row's values) and hint, without the line
/// of PostgreSQL's own source that sqlx appends (" at line 1392" reads as a line of the
/// user's file); other errors as sqlx writes them.
pub fn shown(error: &sqlx::Error) -> Shown<'_> {
    Shown(error)
}

/// See [`shown`].
pub struct Shown<'a>(&'a sqlx::Error);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pg = match self.0 {
            sqlx::Error::Database(db) => db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>(),
            _ => None,
        };
        let Some(pg) = pg else {
            return write!(f, "{}", self.0);
        };
        write!(f, "error returned from database: {}", pg.message())?;
        // The detail of a data or integrity error quotes the row ("Failing row contains
        // (…)"): values that must not reach logs, traces and the status page.
        let quotes_data = matches!(pg.code().get(..2), Some("22" | "23"));
        if let (Some(detail), false) = (pg.detail(), quotes_data) {
            write!(f, " ({detail})")?;
        }
        if let Some(hint) = pg.hint() {
            write!(f, " hint: {hint}")?;
        }
        Ok(())
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

    #[test]
    fn postgres_codes() {
        use ErrorClass::*;
        for (code, class) in [
            ("08006", Transient),
            ("08000", Transient),
            ("08003", Transient),
            // A NUL in a statement: the record's content, never waited out.
            ("08P01", Refused),
            ("40001", Transient),
            ("40P01", Transient),
            ("55P03", Transient),
            ("57014", Transient),
            ("57P01", Transient),
            ("53300", Transient),
            ("53100", Transient),
            ("25006", Transient),
            ("23505", Refused),
            ("23514", Refused),
            ("22001", Refused),
            ("22021", Refused),
            ("54000", Refused),
            ("54001", Refused),
            ("54011", Refused),
            ("42622", Refused),
            ("42P01", Permanent),
            ("42501", Permanent),
            ("28P01", Permanent),
            ("57P04", Permanent),
            ("", Permanent),
        ] {
            assert_eq!(classify_postgres(code, false), class, "{code}");
        }
        // FATAL: the connection is gone (PgBouncer drops clients with 08P01), so waited
        // out; the class of every other code does not depend on its severity.
        for (code, class) in [
            ("08P01", Transient),
            ("08006", Transient),
            ("57P01", Transient),
            ("53300", Transient),
            ("28P01", Permanent),
            ("3D000", Permanent),
        ] {
            assert_eq!(classify_postgres(code, true), class, "FATAL {code}");
        }
    }

    #[test]
    fn mysql_numbers() {
        use ErrorClass::*;
        for (number, class) in [
            (1205, Transient),
            (1213, Transient),
            (1290, Transient),
            (1792, Transient),
            (1969, Transient),
            (2013, Transient),
            (1062, Refused),
            (1406, Refused),
            (4025, Refused),
            (1059, Refused),
            (1118, Refused),
            (1166, Refused),
            (1300, Refused),
            (3140, Refused),
            (1146, Permanent),
            (1045, Permanent),
            (1064, Permanent),
        ] {
            assert_eq!(classify_mysql(number), class, "{number}");
        }
    }

    #[test]
    fn sqlite_codes() {
        use ErrorClass::*;
        for (code, class) in [
            (5, Transient),
            (517, Transient),
            (6, Transient),
            (13, Transient),
            (19, Refused),
            (2067, Refused),
            (1555, Refused),
            (18, Refused),
            (1, Permanent),
            (14, Permanent),
        ] {
            assert_eq!(classify_sqlite(code), class, "{code}");
        }
    }
}
