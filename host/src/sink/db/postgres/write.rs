//! PostgreSQL writes a run of inserts with `COPY` (`copy.rs`), and a run of upserts,
//! updates or deletes as one statement: each column travels as one array parameter and
//! `UNNEST` turns the arrays back into rows, so a batch of any size is a handful of binds.
//!
//! `SLUICE_PG_WRITE=unnest` in the environment writes inserts with `UNNEST` too: the way
//! sluice wrote them before `COPY`, kept for comparing the two (`scripts/bench.sh`).
//! `SLUICE_PG_UPSERT=unnest` writes upserts with `UNNEST … ON CONFLICT` alone, without the
//! optimistic `COPY` (`copy.rs`), for the same comparison.

use sqlx::{AssertSqlSafe, PgConnection, Postgres};

use super::copy::{self, CopyIn};
use crate::config::{ColumnType, WriteMode};
use crate::map::SqlValue;
use crate::sink::Run;
use crate::sink::db::dialect::{Dialect, TableSpec, timestamp_text};

/// One column's values as the array PostgreSQL receives.
enum ColumnArray {
    Int(Vec<Option<i64>>),
    Double(Vec<Option<f64>>),
    Bool(Vec<Option<bool>>),
    Bytes(Vec<Option<Vec<u8>>>),
    Text(Vec<Option<String>>),
}

impl ColumnArray {
    fn new(column_type: ColumnType, capacity: usize) -> Self {
        match column_type {
            ColumnType::Smallint | ColumnType::Int | ColumnType::Bigint => {
                ColumnArray::Int(Vec::with_capacity(capacity))
            }
            ColumnType::Double => ColumnArray::Double(Vec::with_capacity(capacity)),
            ColumnType::Bool => ColumnArray::Bool(Vec::with_capacity(capacity)),
            ColumnType::Bytes => ColumnArray::Bytes(Vec::with_capacity(capacity)),
            _ => ColumnArray::Text(Vec::with_capacity(capacity)),
        }
    }

    /// The array type the parameter is cast to.
    fn array_type(&self) -> &'static str {
        match self {
            ColumnArray::Int(_) => "int8[]",
            ColumnArray::Double(_) => "float8[]",
            ColumnArray::Bool(_) => "bool[]",
            ColumnArray::Bytes(_) => "bytea[]",
            ColumnArray::Text(_) => "text[]",
        }
    }

    fn push(&mut self, value: &SqlValue, column_type: ColumnType) -> Result<(), sqlx::Error> {
        let mismatch = || {
            sqlx::Error::Protocol(format!(
                "value {value:?} does not fit a {} column",
                column_type.name()
            ))
        };
        match (self, value) {
            (ColumnArray::Int(v), SqlValue::Null) => v.push(None),
            (ColumnArray::Double(v), SqlValue::Null) => v.push(None),
            (ColumnArray::Bool(v), SqlValue::Null) => v.push(None),
            (ColumnArray::Bytes(v), SqlValue::Null) => v.push(None),
            (ColumnArray::Text(v), SqlValue::Null) => v.push(None),
            (ColumnArray::Int(v), SqlValue::Int(x)) => v.push(Some(*x)),
            (ColumnArray::Double(v), SqlValue::Double(x)) => v.push(Some(*x)),
            (ColumnArray::Double(v), SqlValue::Int(x)) => v.push(Some(*x as f64)),
            (ColumnArray::Bool(v), SqlValue::Bool(x)) => v.push(Some(*x)),
            (ColumnArray::Bytes(v), SqlValue::Bytes(x)) => v.push(Some(x.clone())),
            (ColumnArray::Text(v), SqlValue::Text(x)) => v.push(Some(x.clone())),
            // An integer field in a wider decimal column.
            (ColumnArray::Text(v), SqlValue::Int(x)) if column_type.is_decimal() => {
                v.push(Some(x.to_string()))
            }
            (ColumnArray::Text(v), SqlValue::Timestamp(t)) => {
                let text = timestamp_text(t);
                // A timestamptz is a UTC instant; without the offset PostgreSQL would read
                // it in the session's time zone.
                v.push(Some(if column_type == ColumnType::Timestamptz {
                    text + "+00"
                } else {
                    text
                }))
            }
            _ => return Err(mismatch()),
        }
        Ok(())
    }
}

fn pg_type(column_type: ColumnType) -> std::borrow::Cow<'static, str> {
    Dialect::Postgres.type_name(column_type, false)
}

/// Whether inserts may go through `COPY` (unless `SLUICE_PG_WRITE=unnest`).
pub(in crate::sink) fn copy_enabled() -> bool {
    static COPY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *COPY.get_or_init(|| std::env::var("SLUICE_PG_WRITE").as_deref() != Ok("unnest"))
}

/// Whether upserts may try `COPY` first (unless `SLUICE_PG_UPSERT=unnest`).
pub(in crate::sink) fn upsert_copy_enabled() -> bool {
    static COPY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *COPY.get_or_init(|| {
        copy_enabled() && std::env::var("SLUICE_PG_UPSERT").as_deref() != Ok("unnest")
    })
}

/// Writes one run: inserts with `COPY`, upserts of keys not in the table yet with `COPY`
/// (`copy::upsert_if_all_new`), the rest in one `UNNEST` statement.
pub async fn write_run(
    conn: &mut PgConnection,
    table: &TableSpec,
    mode: WriteMode,
    run: &Run<'_>,
    copy_in: &CopyIn,
) -> Result<(), sqlx::Error> {
    match (run, mode) {
        (Run::Write(rows), _) if rows.is_empty() => Ok(()),
        (Run::Write(rows), WriteMode::Insert) if copy_in.inserts && copy_enabled() => {
            copy::insert(conn, table, rows).await
        }
        (Run::Write(rows), WriteMode::Upsert)
            if rows.len() >= copy::MIN_ROWS && copy_in.try_upsert() =>
        {
            if copy::upsert_if_all_new(conn, table, rows, copy_in).await? {
                return Ok(());
            }
            write_unnest(conn, table, mode, run).await
        }
        _ => write_unnest(conn, table, mode, run).await,
    }
}

/// Writes one run in one `UNNEST` statement.
async fn write_unnest(
    conn: &mut PgConnection,
    table: &TableSpec,
    mode: WriteMode,
    run: &Run<'_>,
) -> Result<(), sqlx::Error> {
    let d = Dialect::Postgres;
    let (rows, indices): (&Vec<&[SqlValue]>, Vec<usize>) = match run {
        Run::Write(rows) => (rows, (0..table.columns.len()).collect()),
        Run::Delete(keys) => (keys, table.delete_columns()),
        // Written by `backend::write_one`.
        Run::Truncate(_) => return Ok(()),
        Run::Patch(_) => return Err(crate::sink::backend::patch_in_bulk()),
    };
    if rows.is_empty() {
        return Ok(());
    }
    let mut arrays: Vec<ColumnArray> = indices
        .iter()
        .map(|&i| ColumnArray::new(table.columns[i].1, rows.len()))
        .collect();
    for row in rows {
        for (position, &column) in indices.iter().enumerate() {
            arrays[position].push(&row[position], table.columns[column].1)?;
        }
    }
    // SELECT "a"::BIGINT, "b"::TEXT FROM UNNEST($1::int8[], $2::text[]) AS v("a", "b")
    let names: Vec<String> = indices
        .iter()
        .map(|&i| d.quote_one(&table.columns[i].0))
        .collect();
    let params: Vec<String> = arrays
        .iter()
        .enumerate()
        .map(|(n, a)| format!("${}::{}", n + 1, a.array_type()))
        .collect();
    let casts: Vec<String> = indices
        .iter()
        .zip(&names)
        .map(|(&i, name)| format!("{name}::{}", pg_type(table.columns[i].1)))
        .collect();
    let source = format!(
        "SELECT {} FROM UNNEST({}) AS u({})",
        casts.join(", "),
        params.join(", "),
        names.join(", ")
    );
    let t = table.quoted(d);
    let key_match = |left: &str| {
        table
            .key
            .iter()
            .map(|&i| format!("{left}.{0} = v.{0}", d.quote_one(&table.columns[i].0)))
            .collect::<Vec<_>>()
            .join(" AND ")
    };
    let values = table.value_columns();
    // With a version column: only rows whose stored version is older (or NULL) change.
    let older = |new: &str| {
        table.version.map_or(String::new(), |v| {
            let v = d.quote_one(&table.columns[v].0);
            format!(" AND (t.{v} IS NULL OR t.{v} < {new}.{v})")
        })
    };
    let sql = match (run, mode) {
        (Run::Truncate(_) | Run::Patch(_), _) => return Ok(()),
        (Run::Delete(_), _) => format!(
            "DELETE FROM {t} AS t USING ({source}) AS v WHERE {}{}",
            key_match("t"),
            older("v")
        ),
        (Run::Write(_), WriteMode::Insert) => {
            format!("INSERT INTO {t} ({}) {source}", names.join(", "))
        }
        (Run::Write(_), WriteMode::Upsert) => {
            let action = if values.is_empty() {
                "DO NOTHING".to_string()
            } else {
                let set: Vec<String> = values
                    .iter()
                    .map(|&i| format!("{0} = EXCLUDED.{0}", d.quote_one(&table.columns[i].0)))
                    .collect();
                let condition = older("EXCLUDED");
                match condition.strip_prefix(" AND ") {
                    Some(condition) => {
                        format!("DO UPDATE SET {} WHERE {condition}", set.join(", "))
                    }
                    None => format!("DO UPDATE SET {}", set.join(", ")),
                }
            };
            format!(
                "INSERT INTO {t} AS t ({}) {source} ON CONFLICT ({}) {action}",
                names.join(", "),
                d.column_list(table, &table.key)
            )
        }
        (Run::Write(_), WriteMode::Update) => {
            let set: Vec<String> = values
                .iter()
                .map(|&i| format!("{0} = v.{0}", d.quote_one(&table.columns[i].0)))
                .collect();
            format!(
                "UPDATE {t} AS t SET {} FROM ({source}) AS v WHERE {}",
                set.join(", "),
                key_match("t")
            )
        }
    };
    let mut query = sqlx::query::<Postgres>(AssertSqlSafe(sql));
    for array in arrays {
        query = match array {
            ColumnArray::Int(v) => query.bind(v),
            ColumnArray::Double(v) => query.bind(v),
            ColumnArray::Bool(v) => query.bind(v),
            ColumnArray::Bytes(v) => query.bind(v),
            ColumnArray::Text(v) => query.bind(v),
        };
    }
    query.execute(&mut *conn).await?;
    Ok(())
}
