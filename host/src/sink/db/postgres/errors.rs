//! PostgreSQL's error codes: SQLSTATEs (appendix A of its manual) and severities.

use sqlx::error::DatabaseError;
use sqlx::postgres::{PgDatabaseError, PgSeverity};

use crate::sink::db::{ErrorClass, ErrorReading};

/// What PostgreSQL's codes say of `error`; `None` when another database raised it.
pub(in crate::sink) fn read(error: &dyn DatabaseError) -> Option<ErrorReading> {
    let pg = error.try_downcast_ref::<PgDatabaseError>()?;
    let ends_session = matches!(pg.severity(), PgSeverity::Fatal | PgSeverity::Panic);
    Some(ErrorReading {
        class: classify(pg.code(), ends_session),
        // insufficient_privilege
        not_permitted: pg.code() == "42501",
        // duplicate_column
        duplicate_column: pg.code() == "42701",
    })
}

/// Writes `error` as a user reads it: PostgreSQL's message with its detail (but for data
/// and integrity errors, whose detail quotes the row's values) and hint, without the line
/// of PostgreSQL's own source that sqlx appends (" at line 1392" reads as a line of the
/// user's file). `None` when another database raised it.
pub(in crate::sink) fn write(
    error: &dyn DatabaseError,
    f: &mut std::fmt::Formatter<'_>,
) -> Option<std::fmt::Result> {
    let pg = error.try_downcast_ref::<PgDatabaseError>()?;
    Some((|| {
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
    })())
}

/// The class of a SQLSTATE; `ends_session` for an error of severity FATAL or PANIC, after
/// which the server closes the connection.
fn classify(sqlstate: &str, ends_session: bool) -> ErrorClass {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates() {
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
            assert_eq!(classify(code, false), class, "{code}");
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
            assert_eq!(classify(code, true), class, "FATAL {code}");
        }
    }
}
