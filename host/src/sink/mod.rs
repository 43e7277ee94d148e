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
use sqlx::{AssertSqlSafe, Encode, Executor, IntoArguments, MySql, Postgres, Sqlite, Type};

use backend::Backend;

use crate::config::{ConnectorConfig, WriteMode, redact_url};
use crate::dead_letter::{self, DeadLetter};
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
    /// Dead letters for the connector's dead-letter table.
    pub dead_letters: Vec<DeadLetter>,
    /// Dead letters (topic, partition, offset) that a redrive wrote: deleted from the
    /// dead-letter table in the same transaction.
    pub redriven: Vec<(String, i32, i64)>,
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

/// Whether the database refused the rows themselves: a constraint (unique, foreign key,
/// check, not null) or a value it cannot store (too long, out of range, bad encoding).
fn is_refusal(error: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = error else {
        return false;
    };
    if let Some(mysql) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        // null, duplicate, out of range, incorrect value, incorrect string, data too long,
        // truncated, foreign keys, CHECK (MySQL 3819, MariaDB 4025)
        return matches!(
            mysql.number(),
            1048 | 1062 | 1264 | 1265 | 1292 | 1366 | 1406 | 1451 | 1452 | 1690 | 3819 | 4025
        );
    }
    let code = db.code().unwrap_or_default();
    if db
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .is_some()
    {
        // Class 22: data exception; class 23: integrity constraint violation.
        return code.starts_with("22") || code.starts_with("23");
    }
    // SQLite: TOOBIG, CONSTRAINT (and its extended codes), MISMATCH.
    code.parse::<i64>()
        .is_ok_and(|c| matches!(c & 0xff, 18..=20))
}

/// A refused row's message: the database's own words.
fn refused_message(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(db) => match db.code() {
            Some(code) => format!("{} (code {code})", db.message()),
            None => db.message().to_string(),
        },
        other => other.to_string(),
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
                // connections, shutdown in progress, read-only during failover, statement
                // time limits (MariaDB, MySQL)
                return matches!(
                    mysql.number(),
                    1213 | 1205 | 2006 | 2013 | 1040 | 1053 | 1290 | 1927 | 1969 | 3024
                );
            }
            let code = db.code().unwrap_or_default();
            matches!(
                code.as_ref(),
                // PostgreSQL: serialization failure, deadlock, lock timeout, statement
                // timeout, shutdown, too many connections, connection exceptions
                "40001" | "40P01" | "55P03" | "57014" | "57P01" | "57P02" | "57P03" | "53300" | "08000" | "08003" | "08006" | "08001" | "08004"
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
    /// The dead-letter table, when `errors.dlq.table` is set.
    dead_letter_table: Option<TableSpec>,
}

/// Runs `$body` with `$pool` bound to the connector's pool and `$db` to its sqlx database
/// type: one generic body serves PostgreSQL, MySQL and SQLite.
macro_rules! each_pool {
    ($self:expr, $pool:ident, $db:ident => $body:expr) => {
        match &$self.pool {
            Pool::Postgres($pool) => {
                type $db = Postgres;
                $body
            }
            Pool::MySql($pool) => {
                type $db = MySql;
                $body
            }
            Pool::Sqlite($pool) => {
                type $db = Sqlite;
                $body
            }
        }
    };
}

/// A savepoint the probe for refused rows rolls back to.
const PROBE_SAVEPOINT: &str = "sluice_probe";

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
            dead_letter_table: connector
                .errors
                .dlq
                .as_ref()
                .and_then(|d| d.table.as_deref())
                .map(dead_letter::table_spec),
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
        if let Some(table) = &self.dead_letter_table {
            statements.push(self.dialect.create_table(table));
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
        each_pool!(self, pool, DB => {
            let mut tx = pool
                .begin_with(self.dialect.begin())
                .await
                .map_err(self.db_error("begin"))?;
            self.write_in::<DB>(&mut tx, batch).await?;
            tx.commit().await.map_err(self.db_error("commit"))
        })
    }

    /// The body of a batch's transaction.
    async fn write_in<DB>(
        &self,
        conn: &mut DB::Connection,
        batch: &WriteBatch,
    ) -> Result<(), SinkError>
    where
        DB: Backend,
        DB::Connection: 'static,
        DB::Arguments: IntoArguments<DB>,
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
        String: for<'q> Encode<'q, DB> + Type<DB>,
        i32: for<'q> Encode<'q, DB> + Type<DB>,
        i64: for<'q> Encode<'q, DB> + Type<DB>,
    {
        backend::advance_offsets::<DB>(conn, self.dialect, &self.connector, &batch.offsets).await?;
        let runs = runs(&batch.ops, &self.table.key, self.mode != WriteMode::Insert);
        backend::write_runs::<DB>(conn, self.dialect, &self.table, self.mode, &runs)
            .await
            .map_err(self.db_error("write rows"))?;
        if batch.dead_letters.is_empty() && batch.redriven.is_empty() {
            return Ok(());
        }
        let Some(table) = &self.dead_letter_table else {
            return Err(SinkError::Invalid(
                "dead letters for a connector without errors.dlq.table".into(),
            ));
        };
        let dlq_error = |action| {
            move |source| SinkError::Database {
                action,
                table: table.name.clone(),
                source,
            }
        };
        let rows: Vec<Vec<SqlValue>> = batch
            .dead_letters
            .iter()
            .map(|letter| dead_letter::row(&self.connector, letter))
            .collect();
        let keys: Vec<Vec<SqlValue>> = batch
            .redriven
            .iter()
            .map(|(topic, partition, offset)| {
                dead_letter::key(&self.connector, topic, *partition, *offset)
            })
            .collect();
        let mut runs = Vec::new();
        if !rows.is_empty() {
            runs.push(Run::Write(rows.iter().map(Vec::as_slice).collect()));
        }
        if !keys.is_empty() {
            runs.push(Run::Delete(keys.iter().map(Vec::as_slice).collect()));
        }
        // Upsert: an at-least-once redelivery stores the same dead letter again.
        backend::write_runs::<DB>(conn, self.dialect, table, WriteMode::Upsert, &runs)
            .await
            .map_err(dlq_error("write dead letters"))
    }

    /// Finds the operations the database refuses (a constraint, a length, a value out of
    /// range), with its message for each, by splitting `ops` in halves under savepoints
    /// until each refusal is one operation. Nothing is kept: the transaction is rolled
    /// back. `Err` for a transient failure, or when the database cannot be probed.
    pub async fn find_refused(&self, ops: &[RowOp]) -> Result<Vec<(usize, String)>, SinkError> {
        let probe = async {
            each_pool!(self, pool, DB => {
                let mut tx = pool
                    .begin_with(self.dialect.begin())
                    .await
                    .map_err(self.db_error("begin"))?;
                if self.dialect == Dialect::Postgres {
                    // Deferred constraints would only fail at a COMMIT the probe never runs.
                    sqlx::query::<DB>("SET CONSTRAINTS ALL IMMEDIATE")
                        .execute(&mut *tx)
                        .await
                        .map_err(self.db_error("find refused rows"))?;
                }
                // Dropping the transaction rolls it back.
                self.refused_in::<DB>(&mut tx, ops).await
            })
        };
        tokio::time::timeout(WRITE_TIMEOUT, probe)
            .await
            .unwrap_or_else(|_| {
                Err(SinkError::Timeout {
                    action: "find refused rows",
                    table: self.table.name.clone(),
                    after: WRITE_TIMEOUT,
                })
            })
    }

    async fn refused_in<DB>(
        &self,
        conn: &mut DB::Connection,
        ops: &[RowOp],
    ) -> Result<Vec<(usize, String)>, SinkError>
    where
        DB: Backend,
        DB::Connection: 'static,
        DB::Arguments: IntoArguments<DB>,
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    {
        let savepoint = |verb: &str| AssertSqlSafe(format!("{verb} {PROBE_SAVEPOINT}"));
        let db_error = self.db_error("find refused rows");
        let dedupe = self.mode != WriteMode::Insert;
        let mut refused = Vec::new();
        // Ranges still to try, the next one on top: in record order, so that an earlier
        // row is in place when a later one is tried (a duplicate key refuses the later).
        let mut stack = vec![(0, ops.len())];
        while let Some((start, end)) = stack.pop() {
            if start >= end {
                continue;
            }
            sqlx::query::<DB>(savepoint("SAVEPOINT"))
                .execute(&mut *conn)
                .await
                .map_err(&db_error)?;
            let runs = runs(&ops[start..end], &self.table.key, dedupe);
            match backend::write_runs::<DB>(conn, self.dialect, &self.table, self.mode, &runs).await
            {
                Ok(()) => {}
                // Only a refusal of the rows themselves is put on them; a lock or
                // statement timeout, a full disk, a lost connection is the batch's.
                Err(error) if !is_refusal(&error) => return Err(db_error(error)),
                Err(error) => {
                    sqlx::query::<DB>(savepoint("ROLLBACK TO SAVEPOINT"))
                        .execute(&mut *conn)
                        .await
                        .map_err(&db_error)?;
                    if end - start == 1 {
                        refused.push((start, refused_message(&error)));
                    } else {
                        let middle = start + (end - start) / 2;
                        stack.push((middle, end));
                        stack.push((start, middle));
                    }
                }
            }
            sqlx::query::<DB>(savepoint("RELEASE SAVEPOINT"))
                .execute(&mut *conn)
                .await
                .map_err(&db_error)?;
        }
        Ok(refused)
    }

    /// Reads up to `limit` dead letters of this connector after `after` (topic, partition,
    /// offset), in that order.
    pub async fn read_dead_letters(
        &self,
        after: Option<&(String, i32, i64)>,
        limit: usize,
    ) -> Result<Vec<dead_letter::redrive::Stored>, SinkError> {
        let Some(table) = &self.dead_letter_table else {
            return Err(SinkError::Invalid(format!(
                "connector {} has no dead-letter table (errors.dlq.table)",
                self.connector
            )));
        };
        let sql = self.dialect.read_dead_letters(&table.name, limit);
        let start = after
            .cloned()
            .unwrap_or_else(|| (String::new(), i32::MIN, i64::MIN));
        each_pool!(self, pool, DB => {
            dead_letter::redrive::read::<DB>(pool, sql, &self.connector, &start).await
        })
        .map_err(|source| SinkError::Database {
            action: "read dead letters",
            table: table.name.clone(),
            source,
        })
    }

    /// How many dead letters this connector has in its table.
    pub async fn count_dead_letters(&self) -> Result<i64, SinkError> {
        let Some(table) = &self.dead_letter_table else {
            return Ok(0);
        };
        let sql = format!(
            "SELECT CAST(COUNT(*) AS {}) FROM {} WHERE connector = {}",
            if self.dialect == Dialect::MySql {
                "SIGNED"
            } else {
                "BIGINT"
            },
            self.dialect.quote(&table.name),
            self.dialect.param(1)
        );
        each_pool!(self, pool, DB => {
            sqlx::query_scalar::<DB, i64>(AssertSqlSafe(sql))
                .bind(self.connector.clone())
                .fetch_one(pool)
                .await
        })
        .map_err(|source| SinkError::Database {
            action: "count dead letters",
            table: table.name.clone(),
            source,
        })
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
