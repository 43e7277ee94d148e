//! What `sluice verify` asks of MySQL and MariaDB (`sink/verify.rs`).

use crate::sink::db::Verifying;
use crate::sink::db::table::CatalogColumn;
use crate::sink::dialect::{Dialect, TableSpec};

/// An empty copy of the table: columns, types, character sets, indexes (its key takes
/// the same upserts); `LIKE` copies no foreign key.
fn copy_table(target: &TableSpec, scratch: &TableSpec, _catalog: &[CatalogColumn]) -> String {
    format!(
        "CREATE TABLE {} LIKE {}",
        scratch.quoted(Dialect::MySql),
        target.quoted(Dialect::MySql)
    )
}

pub(in crate::sink) static VERIFYING: Verifying = Verifying {
    copy_table,
    // Every read of the transaction sees the moment it began.
    snapshot: "START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY",
    compared: |column| column.to_string(),
    as_text: |column| format!("CAST({column} AS CHAR)"),
};
