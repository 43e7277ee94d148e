//! What `sluice verify` asks of PostgreSQL (`sink/verify.rs`).

use crate::sink::db::Verifying;
use crate::sink::db::table::CatalogColumn;
use crate::sink::dialect::{Dialect, TableSpec};

/// An empty copy of the table: its columns, types, defaults, checks and indexes (so its
/// key takes the same upserts), not its foreign keys.
fn copy_table(target: &TableSpec, scratch: &TableSpec, _catalog: &[CatalogColumn]) -> String {
    format!(
        "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES INCLUDING GENERATED)",
        scratch.quoted(Dialect::Postgres),
        target.quoted(Dialect::Postgres)
    )
}

pub(in crate::sink) static VERIFYING: Verifying = Verifying {
    copy_table,
    snapshot: "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    // As text: a type without an equality operator (json, point) compares too, and two
    // values of one column type print alike exactly when they are equal.
    compared: |column| format!("CAST({column} AS TEXT)"),
    as_text: |column| format!("CAST({column} AS TEXT)"),
};
