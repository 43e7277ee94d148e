//! MySQL's and MariaDB's error numbers (server and client), which say more than the
//! SQLSTATEs they share.

use sqlx::error::DatabaseError;
use sqlx::mysql::MySqlDatabaseError;

use crate::sink::db::{ErrorClass, ErrorReading};

/// What MySQL's or MariaDB's numbers say of `error`; `None` when another database raised
/// it.
pub(in crate::sink) fn read(error: &dyn DatabaseError) -> Option<ErrorReading> {
    let number = error.try_downcast_ref::<MySqlDatabaseError>()?.number();
    Some(ErrorReading {
        class: classify(number),
        // table access denied, database access denied
        not_permitted: matches!(number, 1142 | 1044),
        // duplicate column name
        duplicate_column: number == 1060,
    })
}

/// The class of an error number.
fn classify(number: u16) -> ErrorClass {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
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
            assert_eq!(classify(number), class, "{number}");
        }
    }
}
