//! SQLite's result codes: the primary code is the low byte of an extended one.

use sqlx::error::DatabaseError;
use sqlx::sqlite::SqliteError;

use crate::sink::db::{ErrorClass, ErrorReading};

/// What SQLite's codes say of `error`; `None` when another database raised it.
pub(in crate::sink) fn read(error: &dyn DatabaseError) -> Option<ErrorReading> {
    error.try_downcast_ref::<SqliteError>()?;
    let code = error.code().and_then(|code| code.parse::<i64>().ok());
    Some(ErrorReading {
        class: code.map_or(ErrorClass::Permanent, classify),
        // SQLite has no privileges.
        not_permitted: false,
        // SQLITE_ERROR with this text is its only word for it.
        duplicate_column: error.message().contains("duplicate column name"),
    })
}

/// The class of a result code.
fn classify(code: i64) -> ErrorClass {
    match code & 0xff {
        // BUSY, LOCKED, FULL (the disk)
        5 | 6 | 13 => ErrorClass::Transient,
        // TOOBIG, CONSTRAINT, MISMATCH
        18..=20 => ErrorClass::Refused,
        _ => ErrorClass::Permanent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_codes() {
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
            assert_eq!(classify(code), class, "{code}");
        }
    }
}
