//! What `sluice verify` asks of MySQL and MariaDB (`sink/verify.rs`).

use crate::sink::db::Verifying;
use crate::sink::db::dialect::{Dialect, TableSpec};

/// An empty copy of the table: columns, types, character sets, defaults, indexes (its key,
/// a primary key or a unique index, takes the same upserts) and an `AUTO_INCREMENT`
/// counter of its own; `LIKE` copies no foreign key and no trigger.
fn copy_table(
    target: &TableSpec,
    scratch: &TableSpec,
    _source: &[String],
) -> Result<Vec<String>, String> {
    Ok(vec![format!(
        "CREATE TABLE {} LIKE {}",
        scratch.quoted(Dialect::MySql),
        target.quoted(Dialect::MySql)
    )])
}

pub(in crate::sink) static VERIFYING: Verifying = Verifying {
    copy_source: None,
    copy_table,
    // sluice's connections read committed (`pool.rs`), and InnoDB takes no consistent
    // snapshot below repeatable read: this transaction asks for it.
    before_snapshot: Some("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"),
    snapshot: "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
    // As bytes: a text column's collation (`utf8mb4_general_ci`, the default) would take
    // `Bob` for `bob` and `x` for `x `.
    compared: |column| format!("CAST({column} AS BINARY)"),
    as_text: |column| format!("CAST({column} AS CHAR)"),
};
