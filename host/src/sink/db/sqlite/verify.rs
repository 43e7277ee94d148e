//! What `sluice verify` asks of SQLite (`sink/verify.rs`).

use crate::sink::db::Verifying;
use crate::sink::db::table::CatalogColumn;
use crate::sink::dialect::{Dialect, TableSpec};

/// An empty table with the columns, declared types, `NOT NULL`s and primary key the
/// catalog lists (SQLite has no `CREATE TABLE … LIKE`).
fn copy_table(_target: &TableSpec, scratch: &TableSpec, catalog: &[CatalogColumn]) -> String {
    let quote = |name: &str| Dialect::Sqlite.quote_one(name);
    let mut parts: Vec<String> = catalog
        .iter()
        .map(|c| {
            let mut column = quote(&c.name);
            if !c.sql_type.is_empty() {
                column.push(' ');
                column.push_str(&c.sql_type);
            }
            if !c.nullable {
                column.push_str(" NOT NULL");
            }
            column
        })
        .collect();
    let mut key: Vec<&CatalogColumn> = catalog.iter().filter(|c| c.key_position > 0).collect();
    key.sort_by_key(|c| c.key_position);
    if !key.is_empty() {
        let names: Vec<String> = key.iter().map(|c| quote(&c.name)).collect();
        parts.push(format!("PRIMARY KEY ({})", names.join(", ")));
    }
    format!(
        "CREATE TABLE {} ({})",
        scratch.quoted(Dialect::Sqlite),
        parts.join(", ")
    )
}

pub(in crate::sink) static VERIFYING: Verifying = Verifying {
    copy_table,
    // In WAL mode a read transaction sees the database as of its first read.
    snapshot: "BEGIN",
    compared: |column| column.to_string(),
    as_text: |column| format!("CAST({column} AS TEXT)"),
};

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, sql_type: &str, key_position: u32, nullable: bool) -> CatalogColumn {
        CatalogColumn {
            name: name.into(),
            sql_type: sql_type.into(),
            key_position,
            nullable,
            has_default: false,
            definition: None,
        }
    }

    #[test]
    fn the_copy_keeps_types_not_nulls_and_the_key_in_its_order() {
        let spec = |name: &str| TableSpec {
            name: name.into(),
            naming: Default::default(),
            columns: Vec::new(),
            key: Vec::new(),
            version: None,
        };
        let sql = copy_table(
            &spec("orders"),
            &spec("sluice_verify_1"),
            &[
                column("b", "integer", 2, false),
                column("a\"x", "text", 1, false),
                column("note", "", 0, true),
            ],
        );
        assert_eq!(
            sql,
            "CREATE TABLE \"sluice_verify_1\" (\"b\" integer NOT NULL, \"a\"\"x\" text NOT NULL, \"note\", PRIMARY KEY (\"a\"\"x\", \"b\"))"
        );
    }
}
