//! The sink stage: one database transaction per batch, holding the batch's rows and the
//! advance of its partitions' offsets, so that a record lands exactly once.
//!
//! ```text
//! BEGIN
//!   advance sluice_offsets for each partition of the batch, compare-and-set on the
//!   offset the batch started from (a zombie that lost the partition fails here, early)
//!   write the rows: runs of writes and deletes, each run one bulk statement per chunk
//! COMMIT
//! ```
//!
//! The offsets go first inside the transaction: the row lock taken by the compare-and-set
//! orders two writers racing for the same partition, and the loser fails before it has
//! written anything. Dropping the transaction on any error rolls it back.

mod backend;
pub mod dialect;
mod postgres;

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::time::Duration;

use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, MySql, Postgres, Sqlite};

use crate::config::{ConnectorConfig, WriteMode, redact_url};
use crate::map::{RowOp, SqlValue};
pub use dialect::{Dialect, TableSpec};

/// A partition's offset moving forward in a batch's transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetAdvance {
    pub topic: String,
    pub partition: i32,
    /// The stored `next_offset` this batch starts from; `None` when nothing is stored yet.
    pub expected: Option<i64>,
    /// The offset after the batch's last record of this partition.
    pub next: i64,
}

/// What one transaction writes.
#[derive(Debug, Clone, Default)]
pub struct WriteBatch {
    /// Row operations in record order (no `Skip`).
    pub ops: Vec<RowOp>,
    /// Offsets to advance; empty in `at_least_once` delivery.
    pub offsets: Vec<OffsetAdvance>,
}

/// What [`Sink::sequence_stats`] finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceStats {
    pub rows: i64,
    pub distinct: i64,
    pub min: Option<i64>,
    pub max: Option<i64>,
}

impl SequenceStats {
    /// Rows beyond one per distinct value.
    pub fn duplicates(&self) -> i64 {
        self.rows - self.distinct
    }

    /// Values missing between min and max (assuming a dense sequence was produced).
    pub fn gaps(&self) -> i64 {
        match (self.min, self.max) {
            (Some(min), Some(max)) => (max - min + 1) - self.distinct,
            _ => 0,
        }
    }
}

/// Why a sink operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot connect to {url}: {source}")]
    Connect { url: String, source: sqlx::Error },
    #[error("{action} on table {table}: {source}")]
    Database {
        action: &'static str,
        table: String,
        source: sqlx::Error,
    },
    /// The stored offset is no longer the one this batch started from: another task owns
    /// the partition now. The transaction was rolled back.
    #[error(
        "offset conflict on {topic}/{partition}: expected stored next_offset {}, another task has moved it; the batch was rolled back",
        expected.map_or("none".to_string(), |o| o.to_string())
    )]
    OffsetConflict {
        topic: String,
        partition: i32,
        expected: Option<i64>,
    },
    /// The database did not answer in time; what happened to the statement is unknown
    /// (a retried batch is fenced by the compare-and-set if it did commit).
    #[error("{action} on table {table}: no answer from the database within {after:?}")]
    Timeout {
        action: &'static str,
        table: String,
        after: Duration,
    },
    #[error("{0}")]
    Invalid(String),
}

impl SinkError {
    /// Lost connections, pool timeouts, serialization failures, deadlocks and busy
    /// databases pass; waiting and retrying is the right answer to them.
    pub fn is_transient(&self) -> bool {
        match self {
            SinkError::Connect { source, .. } | SinkError::Database { source, .. } => {
                is_transient(source)
            }
            SinkError::Timeout { .. } => true,
            SinkError::OffsetConflict { .. } | SinkError::Invalid(_) => false,
        }
    }
}

fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(db) => {
            // MySQL's own error numbers say more than the SQLSTATEs it shares with others.
            if let Some(mysql) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
                // deadlock, lock wait timeout, server gone, lost connection, too many
                // connections, shutdown in progress, read-only during failover
                return matches!(
                    mysql.number(),
                    1213 | 1205 | 2006 | 2013 | 1040 | 1053 | 1290 | 1927
                );
            }
            let code = db.code().unwrap_or_default();
            matches!(
                code.as_ref(),
                // PostgreSQL: serialization failure, deadlock, shutdown, connection exceptions
                "40001" | "40P01" | "57P01" | "57P02" | "57P03" | "53300" | "08000" | "08003" | "08006" | "08001" | "08004"
                // SQLite: busy, locked
                | "5" | "6" | "261" | "517"
            )
        }
        _ => false,
    }
}

enum Pool {
    Postgres(PgPool),
    MySql(MySqlPool),
    Sqlite(SqlitePool),
}

/// A connector's sink: a connection pool and the table it writes. Shared by the
/// connector's tasks.
pub struct Sink {
    pool: Pool,
    dialect: Dialect,
    table: TableSpec,
    mode: WriteMode,
    connector: String,
    create_table: bool,
}

/// How long a connection or a statement waits for the database before the error is
/// treated as transient.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for one batch's transaction: a database that stops answering (a host
/// gone, a network split) must not hold a task forever.
const WRITE_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest wait for reading stored offsets.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

impl Sink {
    /// Connects to the connector's database. Nothing is created yet: see [`Sink::prepare`].
    pub async fn connect(connector: &ConnectorConfig) -> Result<Self, SinkError> {
        let url = connector.sink.url.as_str();
        let dialect = Dialect::from_url(url).ok_or_else(|| {
            SinkError::Invalid(format!("unsupported database URL {}", redact_url(url)))
        })?;
        let connect_error = |source| SinkError::Connect {
            url: redact_url(url),
            source,
        };
        let connections = connector.tasks + 1;
        let pool = match dialect {
            Dialect::Postgres => Pool::Postgres(
                PgPoolOptions::new()
                    .max_connections(connections)
                    .acquire_timeout(ACQUIRE_TIMEOUT)
                    .connect(url)
                    .await
                    .map_err(connect_error)?,
            ),
            Dialect::MySql => {
                let url = url.replacen("mariadb://", "mysql://", 1);
                Pool::MySql(
                    MySqlPoolOptions::new()
                        .max_connections(connections)
                        .acquire_timeout(ACQUIRE_TIMEOUT)
                        .connect(&url)
                        .await
                        .map_err(connect_error)?,
                )
            }
            Dialect::Sqlite => {
                // One writer at a time is all SQLite allows; WAL lets readers (inspect,
                // the demo's checks) go on. FULL sync: a commit survives power loss.
                let options = SqliteConnectOptions::from_str(url)
                    .map_err(connect_error)?
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full)
                    .busy_timeout(Duration::from_secs(30));
                Pool::Sqlite(
                    SqlitePoolOptions::new()
                        .max_connections(1)
                        .acquire_timeout(Duration::from_secs(60))
                        .connect_with(options)
                        .await
                        .map_err(connect_error)?,
                )
            }
        };
        let columns: Vec<_> = connector
            .sink
            .columns
            .0
            .iter()
            .map(|(name, c)| (name.clone(), c.column_type))
            .collect();
        let key = connector
            .sink
            .key
            .iter()
            .filter_map(|k| columns.iter().position(|(name, _)| name == k))
            .collect();
        Ok(Self {
            pool,
            dialect,
            table: TableSpec {
                name: connector.sink.table.clone(),
                columns,
                key,
            },
            mode: connector.sink.mode,
            connector: connector.name.clone(),
            create_table: connector.sink.create_table,
        })
    }

    fn db_error(&self, action: &'static str) -> impl Fn(sqlx::Error) -> SinkError + '_ {
        move |source| SinkError::Database {
            action,
            table: self.table.name.clone(),
            source,
        }
    }

    /// Creates the offsets table, and the sink table when `create_table` asks for it, then
    /// checks that the table has every configured column.
    pub async fn prepare(&self) -> Result<(), SinkError> {
        let mut statements = vec![self.dialect.create_offsets_table().to_string()];
        if self.create_table {
            statements.push(self.dialect.create_table(&self.table));
        }
        for sql in statements {
            // Two processes creating the same table at once can trip PostgreSQL's catalog
            // unique index; the second attempt then finds the table.
            let mut attempt = 0;
            loop {
                let result = self.execute(&sql).await;
                match result {
                    Ok(_) => break,
                    Err(_) if attempt < 2 => attempt += 1,
                    Err(e) => return Err(self.db_error("create table")(e)),
                }
            }
        }
        self.execute(&self.dialect.probe_table(&self.table)).await.map_err(|source| {
            SinkError::Invalid(format!(
                "table {} is missing or lacks one of the configured columns ({}): {source}; set create_table: true or create it",
                self.table.name,
                self.table.columns.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
            ))
        })?;
        Ok(())
    }

    async fn execute(&self, sql: &str) -> Result<(), sqlx::Error> {
        let sql = AssertSqlSafe(sql.to_string());
        match &self.pool {
            Pool::Postgres(p) => sqlx::query::<Postgres>(sql).execute(p).await.map(|_| ()),
            Pool::MySql(p) => sqlx::query::<MySql>(sql).execute(p).await.map(|_| ()),
            Pool::Sqlite(p) => sqlx::query::<Sqlite>(sql).execute(p).await.map(|_| ()),
        }
    }

    /// The stored `next_offset` of each partition of `topic` that has one.
    pub async fn read_offsets(&self, topic: &str) -> Result<HashMap<i32, i64>, SinkError> {
        tokio::time::timeout(READ_TIMEOUT, self.read_offsets_now(topic))
            .await
            .unwrap_or_else(|_| {
                Err(SinkError::Timeout {
                    action: "read offsets",
                    table: "sluice_offsets".into(),
                    after: READ_TIMEOUT,
                })
            })
    }

    async fn read_offsets_now(&self, topic: &str) -> Result<HashMap<i32, i64>, SinkError> {
        let sql = self.dialect.read_offsets();
        let rows = match &self.pool {
            Pool::Postgres(p) => {
                backend::read_offsets::<Postgres>(p, sql, &self.connector, topic).await
            }
            Pool::MySql(p) => backend::read_offsets::<MySql>(p, sql, &self.connector, topic).await,
            Pool::Sqlite(p) => {
                backend::read_offsets::<Sqlite>(p, sql, &self.connector, topic).await
            }
        };
        rows.map(|rows| rows.into_iter().collect())
            .map_err(self.db_error("read offsets"))
    }

    /// Forgets the stored offsets of `topic` (`sluice offsets reset`).
    pub async fn reset_offsets(&self, topic: &str) -> Result<u64, SinkError> {
        let sql = self.dialect.delete_offsets();
        let result = match &self.pool {
            Pool::Postgres(p) => {
                backend::delete_offsets::<Postgres>(p, sql, &self.connector, topic).await
            }
            Pool::MySql(p) => {
                backend::delete_offsets::<MySql>(p, sql, &self.connector, topic).await
            }
            Pool::Sqlite(p) => {
                backend::delete_offsets::<Sqlite>(p, sql, &self.connector, topic).await
            }
        };
        result.map_err(self.db_error("reset offsets"))
    }

    /// Writes one batch in one transaction: offsets (compare-and-set), then rows. On any
    /// error the transaction is rolled back and nothing of the batch is stored.
    pub async fn write(&self, batch: &WriteBatch) -> Result<(), SinkError> {
        tokio::time::timeout(WRITE_TIMEOUT, self.write_transaction(batch))
            .await
            .unwrap_or_else(|_| {
                Err(SinkError::Timeout {
                    action: "write batch",
                    table: self.table.name.clone(),
                    after: WRITE_TIMEOUT,
                })
            })
    }

    async fn write_transaction(&self, batch: &WriteBatch) -> Result<(), SinkError> {
        let runs = runs(&batch.ops, &self.table.key, self.mode != WriteMode::Insert);
        match &self.pool {
            Pool::Postgres(pool) => {
                let mut tx = pool.begin().await.map_err(self.db_error("begin"))?;
                backend::advance_offsets::<Postgres>(
                    &mut tx,
                    self.dialect,
                    &self.connector,
                    &batch.offsets,
                )
                .await?;
                for run in &runs {
                    postgres::write_run(&mut tx, &self.table, self.mode, run)
                        .await
                        .map_err(self.db_error("write rows"))?;
                }
                tx.commit().await.map_err(self.db_error("commit"))
            }
            Pool::MySql(pool) => {
                let mut tx = pool.begin().await.map_err(self.db_error("begin"))?;
                backend::advance_offsets::<MySql>(
                    &mut tx,
                    self.dialect,
                    &self.connector,
                    &batch.offsets,
                )
                .await?;
                for run in &runs {
                    backend::write_run::<MySql>(&mut tx, self.dialect, &self.table, self.mode, run)
                        .await
                        .map_err(self.db_error("write rows"))?;
                }
                tx.commit().await.map_err(self.db_error("commit"))
            }
            Pool::Sqlite(pool) => {
                // IMMEDIATE takes the write lock at BEGIN, so two writers queue on the busy
                // timeout instead of one failing to upgrade a read lock.
                let mut tx = pool
                    .begin_with("BEGIN IMMEDIATE")
                    .await
                    .map_err(self.db_error("begin"))?;
                backend::advance_offsets::<Sqlite>(
                    &mut tx,
                    self.dialect,
                    &self.connector,
                    &batch.offsets,
                )
                .await?;
                for run in &runs {
                    backend::write_run::<Sqlite>(
                        &mut tx,
                        self.dialect,
                        &self.table,
                        self.mode,
                        run,
                    )
                    .await
                    .map_err(self.db_error("write rows"))?;
                }
                tx.commit().await.map_err(self.db_error("commit"))
            }
        }
    }

    /// Count, distinct count, minimum and maximum of an integer column: how the demo and the
    /// tests check a table against what was produced.
    pub async fn sequence_stats(&self, column: &str) -> Result<SequenceStats, SinkError> {
        let c = self.dialect.quote(column);
        let sql = format!(
            "SELECT CAST(COUNT(*) AS {big}), CAST(COUNT(DISTINCT {c}) AS {big}), CAST(MIN({c}) AS {big}), CAST(MAX({c}) AS {big}) FROM {}",
            self.dialect.quote(&self.table.name),
            big = if self.dialect == Dialect::MySql {
                "SIGNED"
            } else {
                "BIGINT"
            },
        );
        let values = match &self.pool {
            Pool::Postgres(p) => backend::fetch_integers::<Postgres>(p, sql, 4).await,
            Pool::MySql(p) => backend::fetch_integers::<MySql>(p, sql, 4).await,
            Pool::Sqlite(p) => backend::fetch_integers::<Sqlite>(p, sql, 4).await,
        }
        .map_err(self.db_error("count rows"))?;
        Ok(SequenceStats {
            rows: values[0].unwrap_or(0),
            distinct: values[1].unwrap_or(0),
            min: values[2],
            max: values[3],
        })
    }

    /// Deletes every row of the sink table (the demo's fresh start).
    pub async fn clear_table(&self) -> Result<(), SinkError> {
        let sql = format!("DELETE FROM {}", self.dialect.quote(&self.table.name));
        self.execute(&sql)
            .await
            .map_err(self.db_error("clear table"))
    }

    /// Closes the pool, waiting for connections in use.
    pub async fn close(&self) {
        match &self.pool {
            Pool::Postgres(p) => p.close().await,
            Pool::MySql(p) => p.close().await,
            Pool::Sqlite(p) => p.close().await,
        }
    }
}

/// A stretch of consecutive operations of one kind, written by one bulk statement (per
/// chunk).
#[derive(Debug, PartialEq)]
pub enum Run<'a> {
    /// Whole rows to insert, upsert or update.
    Write(Vec<&'a [SqlValue]>),
    /// Key values of rows to delete.
    Delete(Vec<&'a [SqlValue]>),
}

/// Splits operations into runs, keeping their order across kinds. With `dedupe` (upsert and
/// update), a run keeps only the last row for each key: one statement cannot touch a row
/// twice in PostgreSQL, and the last write is what a sequence of upserts leaves anyway.
fn runs<'a>(ops: &'a [RowOp], key: &[usize], dedupe: bool) -> Vec<Run<'a>> {
    let mut runs: Vec<Run<'a>> = Vec::new();
    for op in ops {
        match (op, runs.last_mut()) {
            (RowOp::Write(row), Some(Run::Write(rows))) => rows.push(row),
            (RowOp::Write(row), _) => runs.push(Run::Write(vec![row])),
            (RowOp::Delete(k), Some(Run::Delete(keys))) => keys.push(k),
            (RowOp::Delete(k), _) => runs.push(Run::Delete(vec![k])),
            (RowOp::Skip(_), _) => {}
        }
    }
    if dedupe && !key.is_empty() {
        for run in &mut runs {
            match run {
                Run::Write(rows) => keep_last(rows, |row| key.iter().map(|&i| &row[i]).collect()),
                Run::Delete(keys) => keep_last(keys, |k| k.iter().collect()),
            }
        }
    }
    runs
}

fn keep_last<'a>(
    rows: &mut Vec<&'a [SqlValue]>,
    key_of: impl Fn(&'a [SqlValue]) -> Vec<&'a SqlValue>,
) {
    let mut seen = HashSet::new();
    let mut kept: Vec<&'a [SqlValue]> = rows
        .iter()
        .rev()
        .filter(|row| seen.insert(format!("{:?}", key_of(row))))
        .copied()
        .collect();
    kept.reverse();
    *rows = kept;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(k: i64, v: &str) -> RowOp {
        RowOp::Write(vec![SqlValue::Int(k), SqlValue::Text(v.into())])
    }

    #[test]
    fn runs_keep_order_and_last_write_per_key() {
        let ops = vec![
            w(1, "a"),
            w(2, "b"),
            w(1, "c"),
            RowOp::Delete(vec![SqlValue::Int(2)]),
            RowOp::Skip("x"),
            w(2, "d"),
        ];
        let runs = runs(&ops, &[0], true);
        assert_eq!(runs.len(), 3);
        let Run::Write(first) = &runs[0] else {
            panic!()
        };
        assert_eq!(first.len(), 2);
        assert_eq!(first[0][1], SqlValue::Text("b".into()));
        assert_eq!(first[1][1], SqlValue::Text("c".into()));
        assert!(matches!(&runs[1], Run::Delete(k) if k.len() == 1));
    }

    #[test]
    fn insert_mode_keeps_duplicates() {
        let ops = vec![w(1, "a"), w(1, "b")];
        let Run::Write(rows) = &runs(&ops, &[0], false)[0] else {
            panic!()
        };
        assert_eq!(rows.len(), 2);
    }

    #[test]
    fn transient_errors() {
        assert!(is_transient(&sqlx::Error::PoolTimedOut));
        assert!(!is_transient(&sqlx::Error::RowNotFound));
    }
}
