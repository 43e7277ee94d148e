//! Statements PostgreSQL and SQLite share word for word: the migrations of sluice's tables
//! that need no type or syntax of one of them (MySQL and MariaDB have their own, with
//! binary collations and bounded key lengths), `"` quoting, and the multi-row statements
//! of the generic writer (`ON CONFLICT` upserts, updates and deletes through a `VALUES`
//! list; MySQL's are in `mysql/words.rs`).

use super::dialect::{Dialect, TableSpec};
use super::row_statements::value_groups;

/// The multi-row statements PostgreSQL and SQLite share.
pub(super) static ROWS: super::RowStatements = super::RowStatements {
    upsert: on_conflict,
    update_values: update_from_values,
    delete_values,
};

/// Quotes one identifier as it is, dots and all, in double quotes.
pub(super) fn quote_one(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

/// What follows a multi-row `INSERT` to make it an upsert: `ON CONFLICT (key)`, with a
/// version column only where the stored version is older.
pub(super) fn on_conflict(dialect: Dialect, table: &TableSpec) -> String {
    let values = table.value_columns();
    let mut sql = format!(" ON CONFLICT ({}) ", dialect.column_list(table, &table.key));
    if values.is_empty() {
        sql.push_str("DO NOTHING");
        return sql;
    }
    let set: Vec<String> = values
        .iter()
        .map(|&i| format!("{0} = excluded.{0}", dialect.quote_one(&table.columns[i].0)))
        .collect();
    sql.push_str(&format!("DO UPDATE SET {}", set.join(", ")));
    if let Some(v) = table.version {
        let v = dialect.quote_one(&table.columns[v].0);
        let t = table.quoted(dialect);
        sql.push_str(&format!(" WHERE {t}.{v} IS NULL OR {t}.{v} < excluded.{v}"));
    }
    sql
}

/// Multi-row update by key: binds every column of every row, in column order. The
/// columns of a `VALUES` list are named column1, column2, …
pub(super) fn update_from_values(dialect: Dialect, table: &TableSpec, rows: usize) -> String {
    let t = table.quoted(dialect);
    let v = |i: usize| format!("v.column{}", i + 1);
    let set: Vec<String> = table
        .value_columns()
        .iter()
        .map(|&i| format!("{} = {}", dialect.quote_one(&table.columns[i].0), v(i)))
        .collect();
    let on: Vec<String> = table
        .key
        .iter()
        .map(|&i| format!("{t}.{} = {}", dialect.quote_one(&table.columns[i].0), v(i)))
        .collect();
    format!(
        "UPDATE {t} SET {} FROM (VALUES {}) AS v WHERE {}",
        set.join(", "),
        value_groups(rows, table.columns.len()),
        on.join(" AND ")
    )
}

/// Multi-row delete by a key of several columns, or with a version column (a row is
/// deleted only if its stored version is older): binds the key columns of every row, and
/// its version. A single key column without a version is `row_statements.rs`'s.
pub(super) fn delete_values(dialect: Dialect, table: &TableSpec, rows: usize) -> String {
    let t = table.quoted(dialect);
    let key = dialect.column_list(table, &table.key);
    let Some(version) = table.version else {
        return format!(
            "DELETE FROM {t} WHERE ({key}) IN (VALUES {})",
            value_groups(rows, table.key.len())
        );
    };
    // The rows to delete are found from the list through the key (an index lookup each),
    // not by a correlated test of every row of the table.
    let v = dialect.quote_one(&table.columns[version].0);
    let bound = table.delete_columns();
    let on: Vec<String> = table
        .key
        .iter()
        .enumerate()
        .map(|(n, &i)| {
            format!(
                "{t}.{} = d.column{}",
                dialect.quote_one(&table.columns[i].0),
                n + 1
            )
        })
        .collect();
    let found: Vec<String> = table
        .key
        .iter()
        .map(|&i| format!("{t}.{}", dialect.quote_one(&table.columns[i].0)))
        .collect();
    let dv = format!("d.column{}", bound.len());
    format!(
        "DELETE FROM {t} WHERE ({key}) IN (SELECT {} FROM (VALUES {}) AS d JOIN {t} ON {} WHERE {t}.{v} IS NULL OR {t}.{v} < {dv})",
        found.join(", "),
        value_groups(rows, bound.len()),
        on.join(" AND ")
    )
}

/// The steps to schema version 4 (`sink/maintenance/schema.rs` says what each version adds).
pub(super) const VERSION_4: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS sluice_control (connector TEXT NOT NULL PRIMARY KEY, \
             target TEXT NOT NULL, restart_seq BIGINT NOT NULL, restart_tasks INTEGER NOT NULL, \
             restart_only_failed INTEGER NOT NULL, updated_at BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sluice_task_status (connector TEXT NOT NULL, worker TEXT NOT NULL, \
             task INTEGER NOT NULL, state TEXT NOT NULL, trace TEXT, updated_at BIGINT NOT NULL, \
             PRIMARY KEY (connector, worker, task))",
];

/// The steps to schema version 5 (`sink/maintenance/schema.rs` says what each version adds).
pub(super) const VERSION_5: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS sluice_dedup (connector TEXT NOT NULL, id TEXT NOT NULL, \
             record_time BIGINT NOT NULL, PRIMARY KEY (connector, id))",
    "CREATE INDEX IF NOT EXISTS sluice_dedup_time ON sluice_dedup (connector, record_time)",
];

/// The steps to schema version 6 (`sink/maintenance/schema.rs` says what each version adds).
pub(super) const VERSION_6: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS sluice_redriven (connector TEXT NOT NULL, \
             source_topic TEXT NOT NULL, source_partition INTEGER NOT NULL, source_offset BIGINT NOT NULL, \
             dlq_topic TEXT NOT NULL, dlq_partition INTEGER NOT NULL, dlq_offset BIGINT NOT NULL, \
             redriven_at BIGINT NOT NULL, \
             PRIMARY KEY (connector, source_topic, source_partition, source_offset))",
];

/// The steps to schema version 9 (`sink/maintenance/schema.rs` says what each version adds).
pub(super) const VERSION_9: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS sluice_tombstones (table_name TEXT NOT NULL, \
             row_key TEXT NOT NULL, version TEXT NOT NULL, deleted_at BIGINT NOT NULL, \
             PRIMARY KEY (table_name, row_key))",
    "CREATE INDEX IF NOT EXISTS sluice_tombstones_age ON sluice_tombstones (table_name, deleted_at)",
];

/// The index of the step to schema version 11 (`sluice_schema_changes` by connector and
/// time; the table itself differs in its id column).
pub(super) const VERSION_11_INDEX: &str = "CREATE INDEX IF NOT EXISTS sluice_schema_changes_by_connector \
             ON sluice_schema_changes (connector, applied_at)";

/// `sluice_schema`: one row, the version of sluice's own tables.
pub(super) const SCHEMA_TABLE: &str = "CREATE TABLE IF NOT EXISTS sluice_schema (id INTEGER NOT NULL PRIMARY KEY, version BIGINT NOT NULL)";

/// What follows a multi-row `INSERT` into `sluice_tombstones` so that a newer version of a
/// key's delete replaces the stored one and an older one changes nothing.
pub(super) const KEEP_NEWER_TOMBSTONE: &str = " ON CONFLICT (table_name, row_key) DO UPDATE SET version = excluded.version, \
    deleted_at = excluded.deleted_at WHERE sluice_tombstones.version < excluded.version";
