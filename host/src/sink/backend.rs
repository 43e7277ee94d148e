//! What the three databases share, written once over sqlx's `Database`: binding a
//! [`SqlValue`], the offsets statements, and multi-row `VALUES` writes (MySQL and SQLite;
//! PostgreSQL writes rows with `UNNEST` in `db/postgres/write.rs`).

use sqlx::query::Query;
use sqlx::{
    AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type,
};

use super::dialect::{Dialect, TableSpec, TimestampText};
use super::{OffsetAdvance, Run, SinkError};
use crate::config::{ColumnType, WriteMode};
use crate::map::SqlValue;

/// A database sluice can bind values for.
pub trait Backend: Database {
    /// Binds one value for a column of `column_type`.
    fn bind_value<'q>(
        query: Query<'q, Self, Self::Arguments>,
        value: &SqlValue,
        column_type: ColumnType,
    ) -> Query<'q, Self, Self::Arguments>;

    /// Rows an `UPDATE` matched.
    fn rows_affected(result: &Self::QueryResult) -> u64;

    /// Column `index` of `row` as text (NULL as `None`).
    fn text_at(row: &Self::Row, index: usize) -> Result<Option<String>, sqlx::Error>;

    /// Column `index` of `row`, a 64-bit integer.
    fn int_at(row: &Self::Row, index: usize) -> Result<i64, sqlx::Error>;
}

macro_rules! scalar_binds {
    ($query:expr, $value:expr) => {
        match $value {
            SqlValue::Null => $query.bind(Option::<String>::None),
            SqlValue::Int(v) => $query.bind(*v),
            SqlValue::Double(v) => $query.bind(*v),
            SqlValue::Bool(v) => $query.bind(*v),
            // Borrowed: each database's arguments encode a value as it is bound.
            SqlValue::Text(v) => $query.bind(v.as_str()),
            SqlValue::Bytes(v) => $query.bind(v.as_slice()),
            SqlValue::Timestamp(t) => $query.bind(TimestampText::of(t).as_str()),
            // Never bound: `runs::runs`, the one way from operations to runs, puts every row
            // holding one in a `Run::Patch`, which sets only the columns it carries
            // (`patch.rs`); COPY and UNNEST refuse the value outright.
            SqlValue::Unavailable => $query.bind(Option::<String>::None),
        }
    };
}

// The three bind the same Rust types; only the SQL text differs between them.
macro_rules! impl_backend {
    ($($db:ty),*) => {$(
        impl Backend for $db {
            fn bind_value<'q>(query: Query<'q, Self, Self::Arguments>, value: &SqlValue, _: ColumnType) -> Query<'q, Self, Self::Arguments> {
                scalar_binds!(query, value)
            }
            fn rows_affected(result: &Self::QueryResult) -> u64 {
                result.rows_affected()
            }
            fn text_at(row: &Self::Row, index: usize) -> Result<Option<String>, sqlx::Error> {
                row.try_get::<Option<String>, _>(index)
            }
            fn int_at(row: &Self::Row, index: usize) -> Result<i64, sqlx::Error> {
                row.try_get::<i64, _>(index)
            }
        }
    )*};
}

impl_backend!(sqlx::MySql, sqlx::Sqlite, sqlx::Postgres);

/// `(partition, next_offset, cluster_id, topic_id)` of every stored partition of a topic.
pub async fn read_offsets<'p, DB>(
    executor: impl Executor<'p, Database = DB>,
    sql: String,
    connector: &str,
    topic: &str,
) -> Result<Vec<StoredRow>, sqlx::Error>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    String: for<'q> Encode<'q, DB> + Type<DB>,
    i32: for<'r> Decode<'r, DB> + Type<DB>,
    i64: for<'r> Decode<'r, DB> + Type<DB>,
    Option<String>: for<'r> Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let rows = sqlx::query::<DB>(AssertSqlSafe(sql))
        .bind(connector.to_string())
        .bind(topic.to_string())
        .fetch_all(executor)
        .await?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get::<i32, _>(0)?,
                row.try_get::<i64, _>(1)?,
                row.try_get::<Option<String>, _>(2)?,
                row.try_get::<Option<String>, _>(3)?,
            ))
        })
        .collect()
}

/// One stored partition: partition, next offset, cluster id, topic id.
pub type StoredRow = (i32, i64, Option<String>, Option<String>);

/// Deletes the stored offsets of a topic; returns how many partitions had one.
pub async fn delete_offsets<'p, DB>(
    executor: impl Executor<'p, Database = DB>,
    sql: String,
    connector: &str,
    topic: &str,
) -> Result<u64, sqlx::Error>
where
    DB: Backend,
    DB::Arguments: IntoArguments<DB>,
    String: for<'q> Encode<'q, DB> + Type<DB>,
{
    let result = sqlx::query::<DB>(AssertSqlSafe(sql))
        .bind(connector.to_string())
        .bind(topic.to_string())
        .execute(executor)
        .await?;
    Ok(DB::rows_affected(&result))
}

/// The compare-and-set: each partition's stored offset moves from `expected` to `next`, or
/// the whole batch fails with [`SinkError::OffsetConflict`]. `cluster` (the Kafka cluster
/// id, when the broker gives one) and each topic's id (`topic_ids`, where the broker has
/// them) are stored beside each offset.
pub async fn advance_offsets<DB>(
    conn: &mut DB::Connection,
    dialect: Dialect,
    connector: &str,
    cluster: Option<&str>,
    topic_ids: &[(String, String)],
    offsets: &[OffsetAdvance],
) -> Result<(), SinkError>
where
    DB: Backend,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    String: for<'q> Encode<'q, DB> + Type<DB>,
    Option<String>: for<'q> Encode<'q, DB> + Type<DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
{
    let conflict = |advance: &OffsetAdvance| SinkError::OffsetConflict {
        topic: advance.topic.clone(),
        partition: advance.partition,
        expected: advance.expected,
    };
    let db_error = |source| SinkError::Database {
        action: "advance offsets",
        table: "sluice_offsets".to_string(),
        source,
    };
    // In (topic, partition) order: two writers of the same partitions lock their rows in
    // the same order and queue instead of deadlocking.
    let mut ordered: Vec<&OffsetAdvance> = offsets.iter().collect();
    ordered.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    for advance in ordered {
        let topic_id = topic_ids
            .iter()
            .find(|(t, _)| *t == advance.topic)
            .map(|(_, id)| id.clone());
        match advance.expected {
            Some(expected) => {
                let result = sqlx::query::<DB>(AssertSqlSafe(dialect.advance_offset()))
                    .bind(advance.next)
                    .bind(cluster.map(str::to_string))
                    .bind(topic_id)
                    .bind(connector.to_string())
                    .bind(advance.topic.clone())
                    .bind(advance.partition)
                    .bind(expected)
                    .execute(&mut *conn)
                    .await
                    .map_err(db_error)?;
                if DB::rows_affected(&result) != 1 {
                    return Err(conflict(advance));
                }
            }
            None => {
                let result = sqlx::query::<DB>(AssertSqlSafe(dialect.insert_offset()))
                    .bind(connector.to_string())
                    .bind(advance.topic.clone())
                    .bind(advance.partition)
                    .bind(advance.next)
                    .bind(cluster.map(str::to_string))
                    .bind(topic_id)
                    .execute(&mut *conn)
                    .await;
                match result {
                    Ok(_) => {}
                    Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                        return Err(conflict(advance));
                    }
                    Err(e) => return Err(db_error(e)),
                }
            }
        }
    }
    Ok(())
}

/// Writes one run with multi-row `VALUES` statements, chunked under the bind limit.
pub async fn write_run<DB>(
    conn: &mut DB::Connection,
    dialect: Dialect,
    table: &TableSpec,
    mode: WriteMode,
    run: &Run<'_>,
) -> Result<(), sqlx::Error>
where
    DB: Backend,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let (rows, width, types): (&Vec<&[SqlValue]>, usize, Vec<ColumnType>) = match run {
        Run::Write(rows) => (
            rows,
            table.columns.len(),
            table.columns.iter().map(|(_, t)| *t).collect(),
        ),
        Run::Delete(keys) => {
            let bound = table.delete_columns();
            (
                keys,
                bound.len(),
                bound.iter().map(|&i| table.columns[i].1).collect(),
            )
        }
        Run::Truncate(_) => return Ok(()),
        Run::Patch(_) => return Err(patch_in_bulk()),
    };
    for chunk in rows.chunks(dialect.rows_per_statement(width)) {
        let sql = match (run, mode) {
            (Run::Truncate(_) | Run::Patch(_), _) => return Ok(()),
            (Run::Delete(_), _) => dialect.delete_values(table, chunk.len()),
            (Run::Write(_), WriteMode::Insert) => dialect.insert_values(table, chunk.len(), false),
            (Run::Write(_), WriteMode::Upsert) => dialect.insert_values(table, chunk.len(), true),
            (Run::Write(_), WriteMode::Update) => dialect.update_values(table, chunk.len()),
        };
        let mut query = sqlx::query::<DB>(AssertSqlSafe(sql));
        for row in chunk {
            for (value, column_type) in row.iter().zip(&types) {
                query = DB::bind_value(query, value, *column_type);
            }
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

/// A patch (a row that leaves out columns) met by a bulk writer: a bug, never written.
pub(super) fn patch_in_bulk() -> sqlx::Error {
    sqlx::Error::Protocol(
        "internal error (a bug in sluice, please report it): a row without all its columns reached a bulk write".into(),
    )
}

/// Runs a query that returns one row of integers (counts, min, max).
pub async fn fetch_integers<'p, DB>(
    executor: impl Executor<'p, Database = DB>,
    sql: String,
    columns: usize,
) -> Result<Vec<Option<i64>>, sqlx::Error>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    Option<i64>: for<'r> Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let row = sqlx::query::<DB>(AssertSqlSafe(sql))
        .fetch_one(executor)
        .await?;
    (0..columns)
        .map(|i| row.try_get::<Option<i64>, _>(i))
        .collect()
}
