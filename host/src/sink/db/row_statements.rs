//! The multi-row statements that write a sink table's rows (MySQL and SQLite; PostgreSQL
//! builds its `UNNEST` statements in `db/postgres/write.rs`): inserts and upserts, updates, deletes,
//! truncates, each conditional on the stored version for a table with `sink.version`. What
//! differs by database is each database's (`db/<name>/words.rs`, the ones PostgreSQL and
//! SQLite share in `db/portable.rs`); this file puts the parts together.

use super::dialect::{Dialect, TableSpec};

/// Most bind parameters in one statement: PostgreSQL and MySQL take 65535, SQLite 32766.
const MAX_PARAMS: usize = 30_000;
/// Most rows in one multi-row statement, whatever the width, to bound packet sizes.
const MAX_ROWS_PER_STATEMENT: usize = 2_000;

impl Dialect {
    /// How many rows of `width` values one statement may carry.
    pub fn rows_per_statement(self, width: usize) -> usize {
        (MAX_PARAMS / width.max(1)).clamp(1, MAX_ROWS_PER_STATEMENT)
    }

    /// Multi-row insert or upsert for MySQL and SQLite: binds every column of every row.
    /// An upsert's clause is the database's (`db/<name>/words.rs`).
    pub fn insert_values(self, table: &TableSpec, rows: usize, upsert: bool) -> String {
        let all: Vec<usize> = (0..table.columns.len()).collect();
        let mut sql = format!(
            "INSERT INTO {} ({}) VALUES {}",
            table.quoted(self),
            self.column_list(table, &all),
            value_groups(rows, all.len())
        );
        if upsert {
            sql.push_str(&(super::of(self).words.rows.upsert)(self, table));
        }
        sql
    }

    /// Multi-row update by key for MySQL and SQLite: binds every column of every row, in
    /// column order.
    pub fn update_values(self, table: &TableSpec, rows: usize) -> String {
        (super::of(self).words.rows.update_values)(self, table, rows)
    }

    /// Multi-row delete by key for MySQL and SQLite: binds the key columns of every row
    /// (and, with a version column, each row's version: a row is deleted only if its
    /// stored version is older).
    pub fn delete_values(self, table: &TableSpec, rows: usize) -> String {
        if table.version.is_none() && table.key.len() == 1 {
            // One key column: a plain list, in the same words everywhere.
            return format!(
                "DELETE FROM {} WHERE {} IN ({})",
                table.quoted(self),
                self.column_list(table, &table.key),
                vec!["?"; rows].join(", ")
            );
        }
        (super::of(self).words.rows.delete_values)(self, table, rows)
    }

    /// Deletes every row of a table (a truncate event), or with a version column every row
    /// older than the version bound first. A `DELETE`, not `TRUNCATE`: MySQL commits a
    /// `TRUNCATE` at once, outside the batch's transaction.
    pub fn truncate(self, table: &TableSpec) -> String {
        let t = table.quoted(self);
        match table.version {
            None => format!("DELETE FROM {t}"),
            Some(v) => {
                let v = self.quote_one(&table.columns[v].0);
                format!(
                    "DELETE FROM {t} WHERE {v} IS NULL OR {v} < {}",
                    self.param(1)
                )
            }
        }
    }
}

/// `(?, ?), (?, ?)`: `rows` groups of `width` placeholders (MySQL, SQLite).
pub(super) fn value_groups(rows: usize, width: usize) -> String {
    let group = format!("({})", vec!["?"; width].join(", "));
    // Borrowed groups: one allocation for the statement, not one per row.
    vec![group.as_str(); rows].join(", ")
}
