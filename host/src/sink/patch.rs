//! Patches: rows that leave out columns the source did not send.
//!
//! PostgreSQL does not log an unchanged TOASTed value (a large text, bytea, JSON or
//! array) on UPDATE under `REPLICA IDENTITY DEFAULT`, and Debezium puts its placeholder
//! there (`sink.unavailable_value`). The mapper reads that as [`SqlValue::Unavailable`];
//! such a row must not overwrite the stored value. Each patch is an `UPDATE` of the columns
//! it carries (with a version column, only of a stored row that is older), by key. When it
//! matches no row and none is stored under its key, there is nothing to keep the left-out
//! value from: the row is refused ([`UnavailableRow`]), and the probe finds it and its
//! record fails alone under the error policy. A row stored with a newer version is
//! a patch that came late: it changes nothing.

use std::borrow::Cow;
use std::error::Error as StdError;

use sqlx::error::{DatabaseError, ErrorKind};
use sqlx::{AssertSqlSafe, Executor, IntoArguments};

use super::backend::Backend;
use super::db;
use super::dialect::{Dialect, TableSpec};
use crate::map::SqlValue;

/// The database error of a patch whose row is not stored: it classifies as a refusal of
/// the row itself ([`super::error::classify`]), so the record fails alone.
#[derive(Debug)]
pub struct UnavailableRow {
    message: String,
}

impl std::fmt::Display for UnavailableRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for UnavailableRow {}

impl DatabaseError for UnavailableRow {
    fn message(&self) -> &str {
        &self.message
    }

    fn code(&self) -> Option<Cow<'_, str>> {
        None
    }

    fn as_error(&self) -> &(dyn StdError + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn StdError + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn StdError + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> ErrorKind {
        ErrorKind::Other
    }
}

/// A bind placeholder for a `column`'s value: PostgreSQL casts each to the column's type
/// (text binds for timestamps, numerics, JSON and UUIDs, as the bulk writers send them).
fn placeholder(dialect: Dialect, table: &TableSpec, column: usize, n: usize) -> String {
    match db::of(dialect).typed_param {
        Some(typed) => typed(&dialect.param(n), table.columns[column].1),
        None => dialect.param(n),
    }
}

/// The `UPDATE` of one patch: the columns it carries, by key; with a version column, only
/// a stored row that is older. Binds, in order: the values of `set`, the key, the version.
fn update_statement(dialect: Dialect, table: &TableSpec, set: &[usize]) -> String {
    let mut n = 0;
    let mut next = |column: usize| {
        n += 1;
        placeholder(dialect, table, column, n)
    };
    let assignments: Vec<String> = set
        .iter()
        .map(|&i| format!("{} = {}", dialect.quote_one(&table.columns[i].0), next(i)))
        .collect();
    let mut conditions = key_conditions(dialect, table, &mut next);
    if let Some(v) = table.version {
        let quoted = dialect.quote_one(&table.columns[v].0);
        conditions.push(format!("({quoted} IS NULL OR {quoted} < {})", next(v)));
    }
    format!(
        "UPDATE {} SET {} WHERE {}",
        table.quoted(dialect),
        assignments.join(", "),
        conditions.join(" AND ")
    )
}

/// `"k" = $n` for each key column, `next` giving each column's placeholder.
fn key_conditions(
    dialect: Dialect,
    table: &TableSpec,
    next: &mut impl FnMut(usize) -> String,
) -> Vec<String> {
    table
        .key
        .iter()
        .map(|&i| format!("{} = {}", dialect.quote_one(&table.columns[i].0), next(i)))
        .collect()
}

/// Whether a row is stored under the key; binds the key.
fn stored_statement(dialect: Dialect, table: &TableSpec) -> String {
    let mut n = 0;
    let conditions = key_conditions(dialect, table, &mut |column| {
        n += 1;
        placeholder(dialect, table, column, n)
    });
    format!(
        "SELECT 1 FROM {} WHERE {}",
        table.quoted(dialect),
        conditions.join(" AND ")
    )
}

/// Writes `rows`, patches that leave out the same columns, one `UPDATE` each.
pub(super) async fn write_patches<DB>(
    conn: &mut DB::Connection,
    dialect: Dialect,
    table: &TableSpec,
    rows: &[&[SqlValue]],
) -> Result<(), sqlx::Error>
where
    DB: Backend,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let Some(first) = rows.first() else {
        return Ok(());
    };
    if table.key.is_empty() {
        return Err(refused(
            table,
            first,
            "the table has no key to update the stored row by",
        ));
    }
    // The columns set: those the patch carries, the key excepted (it finds the row).
    let set: Vec<usize> = table
        .value_columns()
        .into_iter()
        .filter(|&i| !matches!(first.get(i), Some(SqlValue::Unavailable)))
        .collect();
    let update = update_statement(dialect, table, &set);
    let stored = stored_statement(dialect, table);
    for row in rows {
        let matched = if set.is_empty() {
            0
        } else {
            let mut query = sqlx::query::<DB>(AssertSqlSafe(update.clone()));
            for &i in set.iter().chain(&table.key).chain(&table.version) {
                query = DB::bind_value(query, &row[i], table.columns[i].1);
            }
            DB::rows_affected(&query.execute(&mut *conn).await?)
        };
        if matched > 0 {
            continue;
        }
        let mut query = sqlx::query::<DB>(AssertSqlSafe(stored.clone()));
        for &i in &table.key {
            query = DB::bind_value(query, &row[i], table.columns[i].1);
        }
        if query.fetch_optional(&mut *conn).await?.is_none() {
            return Err(refused(
                table,
                row,
                "no row is stored under its key to keep them from",
            ));
        }
    }
    Ok(())
}

/// The refusal of a patch: which columns it leaves out, and why it cannot be written.
fn refused(table: &TableSpec, row: &[SqlValue], why: &str) -> sqlx::Error {
    let missing: Vec<&str> = row
        .iter()
        .zip(&table.columns)
        .filter(|(v, _)| matches!(v, SqlValue::Unavailable))
        .map(|(_, (name, _))| name.as_str())
        .collect();
    sqlx::Error::Database(Box::new(UnavailableRow {
        message: format!(
            "the change event does not carry column(s) {} (Debezium's unavailable-value placeholder: an unchanged TOASTed value under REPLICA IDENTITY DEFAULT), and {why}; set REPLICA IDENTITY FULL on the source table, or snapshot it again",
            missing.join(", ")
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ColumnType;

    fn table(version: bool) -> TableSpec {
        let mut columns = vec![
            ("id".to_string(), ColumnType::Bigint),
            ("a.b".to_string(), ColumnType::Text),
            ("body".to_string(), ColumnType::Text),
        ];
        if version {
            columns.push(("v".to_string(), ColumnType::Text));
        }
        TableSpec {
            name: "t".into(),
            naming: Default::default(),
            columns,
            key: vec![0],
            version: version.then_some(3),
        }
    }

    #[test]
    fn a_patch_sets_only_what_it_carries_and_never_splits_a_name() {
        assert_eq!(
            update_statement(Dialect::Postgres, &table(false), &[1]),
            "UPDATE \"t\" SET \"a.b\" = $1::TEXT WHERE \"id\" = $2::BIGINT"
        );
        assert_eq!(
            update_statement(Dialect::MySql, &table(true), &[1, 3]),
            "UPDATE `t` SET `a.b` = ?, `v` = ? WHERE `id` = ? AND (`v` IS NULL OR `v` < ?)"
        );
        assert_eq!(
            stored_statement(Dialect::Sqlite, &table(false)),
            "SELECT 1 FROM \"t\" WHERE \"id\" = ?"
        );
    }

    #[test]
    fn a_refused_patch_names_its_columns_and_is_the_rows_fault() {
        let row = [
            SqlValue::Int(1),
            SqlValue::Text("x".into()),
            SqlValue::Unavailable,
        ];
        let error = refused(&table(false), &row, "no row is stored under its key");
        assert!(error.to_string().contains("column(s) body"), "{error}");
        assert_eq!(
            super::super::classify(&error),
            super::super::ErrorClass::Refused
        );
    }
}
