//! The multi-row statements that write a sink table's rows (MySQL and SQLite; PostgreSQL
//! builds its `UNNEST` statements in `db/postgres/write.rs`): inserts and upserts, updates, deletes,
//! truncates, each conditional on the stored version for a table with `sink.version`.

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

    /// `(?, ?), (?, ?)`: `rows` groups of `width` placeholders (MySQL, SQLite).
    fn value_groups(self, rows: usize, width: usize) -> String {
        let group = format!("({})", vec!["?"; width].join(", "));
        // Borrowed groups: one allocation for the statement, not one per row.
        vec![group.as_str(); rows].join(", ")
    }

    /// Multi-row insert or upsert for MySQL and SQLite: binds every column of every row.
    pub fn insert_values(self, table: &TableSpec, rows: usize, upsert: bool) -> String {
        let all: Vec<usize> = (0..table.columns.len()).collect();
        let mut sql = format!(
            "INSERT INTO {} ({}) VALUES {}",
            table.quoted(self),
            self.column_list(table, &all),
            self.value_groups(rows, all.len())
        );
        if upsert {
            let values = table.value_columns();
            match self {
                Dialect::MySql => {
                    let set: Vec<String> = if values.is_empty() {
                        table
                            .key
                            .iter()
                            .map(|&i| format!("{0} = {0}", self.quote_one(&table.columns[i].0)))
                            .collect()
                    } else if let Some(v) = table.version {
                        // Assignments run left to right, each seeing the ones before: the
                        // version column comes last, so every test reads the stored one.
                        let v = self.quote_one(&table.columns[v].0);
                        let newer = format!("{v} IS NULL OR {v} < VALUES({v})");
                        values
                            .iter()
                            .map(|&i| {
                                format!(
                                    "{0} = IF({newer}, VALUES({0}), {0})",
                                    self.quote_one(&table.columns[i].0)
                                )
                            })
                            .collect()
                    } else {
                        values
                            .iter()
                            .map(|&i| {
                                format!("{0} = VALUES({0})", self.quote_one(&table.columns[i].0))
                            })
                            .collect()
                    };
                    sql.push_str(&format!(" ON DUPLICATE KEY UPDATE {}", set.join(", ")));
                }
                _ => {
                    sql.push_str(&format!(
                        " ON CONFLICT ({}) ",
                        self.column_list(table, &table.key)
                    ));
                    if values.is_empty() {
                        sql.push_str("DO NOTHING");
                    } else {
                        let set: Vec<String> = values
                            .iter()
                            .map(|&i| {
                                format!("{0} = excluded.{0}", self.quote_one(&table.columns[i].0))
                            })
                            .collect();
                        sql.push_str(&format!("DO UPDATE SET {}", set.join(", ")));
                        if let Some(v) = table.version {
                            let v = self.quote_one(&table.columns[v].0);
                            let t = table.quoted(self);
                            sql.push_str(&format!(
                                " WHERE {t}.{v} IS NULL OR {t}.{v} < excluded.{v}"
                            ));
                        }
                    }
                }
            }
        }
        sql
    }

    /// Multi-row update by key for MySQL and SQLite: binds every column of every row, in
    /// column order.
    pub fn update_values(self, table: &TableSpec, rows: usize) -> String {
        let t = table.quoted(self);
        let values = table.value_columns();
        match self {
            Dialect::MySql => {
                let first: Vec<String> = table
                    .columns
                    .iter()
                    .map(|(n, _)| format!("? AS {}", self.quote_one(n)))
                    .collect();
                let rest = vec![
                    format!("SELECT {}", vec!["?"; table.columns.len()].join(", "));
                    rows.saturating_sub(1)
                ];
                let mut derived = format!("SELECT {}", first.join(", "));
                for select in rest {
                    derived.push_str(" UNION ALL ");
                    derived.push_str(&select);
                }
                let on: Vec<String> = table
                    .key
                    .iter()
                    .map(|&i| format!("t.{0} = v.{0}", self.quote_one(&table.columns[i].0)))
                    .collect();
                let set: Vec<String> = values
                    .iter()
                    .map(|&i| format!("t.{0} = v.{0}", self.quote_one(&table.columns[i].0)))
                    .collect();
                format!(
                    "UPDATE {t} AS t JOIN ({derived}) AS v ON {} SET {}",
                    on.join(" AND "),
                    set.join(", ")
                )
            }
            _ => {
                // SQLite names the columns of a VALUES list column1, column2, …
                let v = |i: usize| format!("v.column{}", i + 1);
                let set: Vec<String> = values
                    .iter()
                    .map(|&i| format!("{} = {}", self.quote_one(&table.columns[i].0), v(i)))
                    .collect();
                let on: Vec<String> = table
                    .key
                    .iter()
                    .map(|&i| format!("{t}.{} = {}", self.quote_one(&table.columns[i].0), v(i)))
                    .collect();
                format!(
                    "UPDATE {t} SET {} FROM (VALUES {}) AS v WHERE {}",
                    set.join(", "),
                    self.value_groups(rows, table.columns.len()),
                    on.join(" AND ")
                )
            }
        }
    }

    /// Multi-row delete by key for MySQL and SQLite: binds the key columns of every row
    /// (and, with a version column, each row's version: a row is deleted only if its
    /// stored version is older).
    pub fn delete_values(self, table: &TableSpec, rows: usize) -> String {
        if let Some(v) = table.version {
            return self.delete_versioned(table, rows, v);
        }
        let key = self.column_list(table, &table.key);
        let groups = self.value_groups(rows, table.key.len());
        match (self, table.key.len()) {
            (_, 1) => format!(
                "DELETE FROM {} WHERE {key} IN ({})",
                table.quoted(self),
                vec!["?"; rows].join(", ")
            ),
            (Dialect::Sqlite, _) => format!(
                "DELETE FROM {} WHERE ({key}) IN (VALUES {groups})",
                table.quoted(self)
            ),
            _ => format!(
                "DELETE FROM {} WHERE ({key}) IN ({groups})",
                table.quoted(self)
            ),
        }
    }

    fn delete_versioned(self, table: &TableSpec, rows: usize, version: usize) -> String {
        let t = table.quoted(self);
        let v = self.quote_one(&table.columns[version].0);
        let bound = table.delete_columns();
        match self {
            Dialect::MySql => {
                let first: Vec<String> = bound
                    .iter()
                    .map(|&i| format!("? AS {}", self.quote_one(&table.columns[i].0)))
                    .collect();
                let mut derived = format!("SELECT {}", first.join(", "));
                for _ in 1..rows {
                    derived.push_str(&format!(
                        " UNION ALL SELECT {}",
                        vec!["?"; bound.len()].join(", ")
                    ));
                }
                let on: Vec<String> = table
                    .key
                    .iter()
                    .map(|&i| format!("t.{0} = d.{0}", self.quote_one(&table.columns[i].0)))
                    .collect();
                format!(
                    "DELETE t FROM {t} AS t JOIN ({derived}) AS d ON {} WHERE t.{v} IS NULL OR t.{v} < d.{v}",
                    on.join(" AND ")
                )
            }
            _ => {
                // SQLite names the columns of a VALUES list column1, column2, … The rows to
                // delete are found from the list through the key (an index lookup each), not
                // by a correlated test of every row of the table.
                let on: Vec<String> = table
                    .key
                    .iter()
                    .enumerate()
                    .map(|(n, &i)| {
                        format!(
                            "{t}.{} = d.column{}",
                            self.quote_one(&table.columns[i].0),
                            n + 1
                        )
                    })
                    .collect();
                let key = self.column_list(table, &table.key);
                let found: Vec<String> = table
                    .key
                    .iter()
                    .map(|&i| format!("{t}.{}", self.quote_one(&table.columns[i].0)))
                    .collect();
                let dv = format!("d.column{}", bound.len());
                format!(
                    "DELETE FROM {t} WHERE ({key}) IN (SELECT {} FROM (VALUES {}) AS d JOIN {t} ON {} WHERE {t}.{v} IS NULL OR {t}.{v} < {dv})",
                    found.join(", "),
                    self.value_groups(rows, bound.len()),
                    on.join(" AND ")
                )
            }
        }
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
