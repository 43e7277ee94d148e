//! The sink stage: one database transaction per batch, holding the batch's rows and the
//! advance of its partitions' offsets, so that a record lands exactly once.
//!
//! ```text
//! BEGIN
//!   advance sluice_offsets for each partition of the batch, compare-and-set on the
//!   offset the batch started from (a zombie that lost the partition fails here, early)
//!   with delivery.dedup: claim the batch's producer ids in sluice_dedup; the rows of
//!   records whose id was there already are dropped (crate::dedup)
//!   write the rows: runs of writes and deletes, each run one bulk statement per chunk
//!   (PostgreSQL: inserts with COPY; upserts, updates and deletes with UNNEST)
//! COMMIT
//! ```
//!
//! The offsets go first inside the transaction: the row lock taken by the compare-and-set
//! orders two writers racing for the same partition, and the loser fails before it has
//! written anything. Dropping the transaction on any error rolls it back.

mod backend;
pub mod control;
mod db;
pub mod dead_letters;
mod dedup;
mod derived;
mod error;
pub mod maintenance;
mod nodelay;
mod patch;
mod probe;
mod redriven;
mod routed;
mod runs;
mod tombstones;
pub mod verify;
mod write;
mod write_runs;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::AssertSqlSafe;

use crate::config::{ConnectorConfig, DeadLetterDestination, WriteMode, redact_url};
use crate::dedup::DedupKey;
use crate::failure::DeadLetter;
use crate::map::{RowOp, TableRoutes};
pub use control::ControlStore;
pub use control::{DeliveryRow, Forgotten, OffsetsChange, ResetPoint};
pub use db::dialect;
pub use db::pools::{DatabasePools, SharedPool};
pub use db::postgres::copy::CopyIn;
pub use dialect::{Dialect, TableSpec};
pub use error::{ErrorClass, SinkError, classify, shown};
pub use maintenance::{Maintenance, schema};
pub use runs::Run;

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

/// What the sink database keeps of a topic's positions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredPositions {
    /// Each partition's next offset.
    pub offsets: HashMap<i32, i64>,
    /// The distinct Kafka cluster ids stored with them.
    pub clusters: Vec<String>,
    /// The distinct topic ids stored with them.
    pub topic_ids: Vec<String>,
}

/// A record redriven from a dead-letter topic: its source coordinates (its identity) and
/// where its dead letter is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedrivenFromTopic {
    pub source: (String, i32, i64),
    pub dead_letter: (String, i32, i64),
}

/// What a committed transaction did.
#[derive(Debug, Clone, Default)]
pub struct Written {
    /// How long the commit itself took.
    pub commit_time: Duration,
    /// Row operations written.
    pub rows: usize,
    /// Inputs (indices in the batch) skipped as producer duplicates (`delivery.dedup`).
    pub duplicates: Vec<usize>,
    /// Dead letters of an earlier pass removed because their records' rows were written
    /// now (see [`WriteBatch::supersedes`]).
    pub superseded_letters: u64,
}

/// What one transaction writes.
#[derive(Debug, Clone, Default)]
pub struct WriteBatch {
    /// Row operations in record order (no `Skip`).
    pub ops: Vec<RowOp>,
    /// The input record (its index in the batch) of each of `ops`; needed with `dedup`.
    pub origins: Vec<usize>,
    /// With a table template: the table of each of `ops` (empty: the connector's table).
    pub routes: TableRoutes,
    /// With `delivery.dedup`: the producer ids of the inputs this batch commits, in input
    /// order. The rows of an input whose id is stored already are not written.
    pub dedup: Vec<DedupKey>,
    /// Offsets to advance; empty in `at_least_once` delivery.
    pub offsets: Vec<OffsetAdvance>,
    /// Dead letters for the connector's dead-letter table.
    pub dead_letters: Vec<DeadLetter>,
    /// Dead letters (topic, partition, offset) that a redrive wrote: deleted from the
    /// dead-letter table in the same transaction.
    pub redriven: Vec<(String, i32, i64)>,
    /// With a dead-letter table: the records (topic, partition, offset, input index) whose
    /// rows this batch writes. Their dead letters from an earlier pass (a replay after an
    /// offsets reset) are removed in the same transaction, before this batch's own letters
    /// are stored, so that no record has both a row and a letter. Inputs skipped as
    /// producer duplicates keep their letters.
    pub supersedes: Vec<(String, i32, i64, usize)>,
    /// Records redriven from a dead-letter topic: recorded in `sluice_redriven` in the
    /// same transaction, where another redrive of the same record meets them (a
    /// [`SinkError::RedriveConflict`]).
    pub redriven_from_topic: Vec<RedrivenFromTopic>,
    /// The id of the Kafka cluster the records came from, stored beside the offsets: a
    /// stored offset from another cluster is not resumed from in silence.
    pub cluster: Option<String>,
    /// The ids of the batch's topics (topic, id), where the broker has them, stored beside
    /// the offsets: a stored offset of a topic deleted and created again since is not
    /// resumed from in silence.
    pub topic_ids: Vec<(String, String)>,
}

/// `batch`'s operations without those of `inputs` (sorted), with their routes; `None` when
/// none is dropped.
fn without_inputs(batch: &WriteBatch, inputs: &[usize]) -> Option<(Vec<RowOp>, TableRoutes)> {
    if inputs.is_empty() {
        return None;
    }
    let keep: Vec<bool> = batch
        .origins
        .iter()
        .map(|origin| inputs.binary_search(origin).is_err())
        .collect();
    let ops = batch
        .ops
        .iter()
        .zip(&keep)
        .filter(|(_, kept)| **kept)
        .map(|(op, _)| op.clone())
        .collect();
    let mut routes = batch.routes.clone();
    routes.retain(&keep);
    Some((ops, routes))
}

/// A connector's sink: a connection pool and the table it writes. Shared by the
/// connector's tasks.
pub struct Sink {
    /// The process's pool for the connector's database, shared with the other connectors
    /// that write there.
    pool: Arc<SharedPool>,
    dialect: Dialect,
    table: TableSpec,
    mode: WriteMode,
    connector: String,
    /// The connector's topics (the migration reports names that differ only in case).
    topics: Vec<String>,
    create_table: bool,
    /// The dead-letter table, when `errors.dlq.table` is set.
    dead_letter_table: Option<TableSpec>,
    /// PostgreSQL with `sink.synchronous_commit: off`: each batch's transaction commits
    /// without waiting for the write-ahead log to reach disk.
    asynchronous_commit: bool,
    /// PostgreSQL: how the table takes rows through `COPY` (decided by `prepare`).
    copy_in: std::sync::OnceLock<CopyIn>,
    /// With a table template: the tables records go to, each made ready on first use
    /// (`table` then holds only their columns, key and version).
    routing: Option<routed::Routing>,
    /// `sink.transactions: source`: a batch's rows written in record order, cut where the
    /// table changes, instead of table by table (a source transaction's parents before
    /// its children, as foreign keys on the replica ask).
    source_order: bool,
}

pub(crate) use db::pools::each_pool;

/// A connection taken from the pool for one transaction. Dropped before the work on it ran
/// to completion (its future cancelled: the write's time bound, a revocation or a stop
/// giving the batch up), it is closed instead of going back to the pool: it may be in the
/// middle of an exchange with the server that its next user would read as the answer to
/// its own statements (sqlx's COPY is not cancel-safe: cancelled while it waits for the
/// server's answer to `CopyDone`, the connection goes back with that answer unread, and
/// the next `BEGIN` fails). A closed connection costs a reconnect, nothing else.
pub(crate) struct Checkout<DB: sqlx::Database> {
    pub(crate) conn: sqlx::pool::PoolConnection<DB>,
    completed: bool,
    /// A writer's permit (see [`SharedPool::writers`]), held as long as the connection.
    _writer: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl<DB: sqlx::Database> Checkout<DB> {
    pub(crate) async fn take(pool: &sqlx::Pool<DB>) -> Result<Self, sqlx::Error> {
        Ok(Checkout {
            conn: pool.acquire().await?,
            completed: false,
            _writer: None,
        })
    }

    /// A connection for a batch's transaction (or a probe of one): first a writer's
    /// permit of `shared`, waited for as long as a connection is.
    pub(crate) async fn take_for_write(
        shared: &SharedPool,
        pool: &sqlx::Pool<DB>,
    ) -> Result<Self, sqlx::Error> {
        let permit = tokio::time::timeout(
            pool.options().get_acquire_timeout(),
            shared.writers.clone().acquire_owned(),
        )
        .await
        .map_err(|_| sqlx::Error::PoolTimedOut)?
        .map_err(|_| sqlx::Error::PoolClosed)?;
        Ok(Checkout {
            conn: pool.acquire().await?,
            completed: false,
            _writer: Some(permit),
        })
    }

    /// The work ran to its end (committed, rolled back or failed with an answer from the
    /// server): the connection may serve again.
    pub(crate) fn ran_to_completion(&mut self) {
        self.completed = true;
    }
}

impl<DB: sqlx::Database> Drop for Checkout<DB> {
    fn drop(&mut self) {
        if !self.completed {
            self.conn.close_on_drop();
        }
    }
}

/// Longest wait for one batch's transaction: a database that stops answering (a host
/// gone, a network split) must not hold a task forever.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest wait for reading stored offsets.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

impl Sink {
    /// Connects to the connector's database with a pool of its own (the commands that
    /// work on one connector). Nothing is created yet: see [`Sink::prepare`].
    pub async fn connect(connector: &ConnectorConfig) -> Result<Self, SinkError> {
        let pools = DatabasePools::new(&crate::config::DatabasesConfig::default());
        Self::connect_shared(connector, &pools).await
    }

    /// Connects to the connector's database through the process's pool for its URL,
    /// shared with the other connectors that write there. Nothing is created yet: see
    /// [`Sink::prepare`].
    pub async fn connect_shared(
        connector: &ConnectorConfig,
        pools: &DatabasePools,
    ) -> Result<Self, SinkError> {
        let url = connector.sink.url.expose();
        let dialect = Dialect::from_url(url).ok_or_else(|| SinkError::UnsupportedUrl {
            url: redact_url(url),
        })?;
        let pool = pools.pool_for(url).await?;
        let mut columns: Vec<_> = connector
            .sink
            .columns()
            .iter()
            .map(|(name, c)| (name.clone(), c.column_type))
            .collect();
        let key = connector
            .sink
            .key_columns()
            .iter()
            .filter_map(|k| columns.iter().position(|(name, _)| name == k))
            .collect();
        // The version column comes last, where the mapper writes it.
        let version = connector.sink.versioning(connector.envelope).map(|v| {
            columns.push((v.column, crate::config::ColumnType::Text));
            columns.len() - 1
        });
        Ok(Self {
            pool,
            dialect,
            table: TableSpec {
                name: connector.sink.table_label(),
                naming: Default::default(),
                columns,
                key,
                version,
            },
            mode: connector.sink.mode,
            connector: connector.name.clone(),
            topics: connector.topics.clone(),
            create_table: connector.sink.create_table,
            dead_letter_table: match &connector.errors.dlq {
                Some(DeadLetterDestination::Table(name)) => Some(dead_letters::table_spec(name)),
                _ => None,
            },
            copy_in: std::sync::OnceLock::new(),
            asynchronous_commit: crate::db_kind::DbKind::from_url(url)
                .is_some_and(crate::db_kind::DbKind::commits_asynchronously)
                && connector.sink.synchronous_commit == crate::config::SynchronousCommit::Off,
            routing: (connector.sink.table_template().is_some()
                || connector.sink.derives_columns())
            .then(|| routed::Routing {
                schema: connector.sink.schema.clone(),
                derived: connector
                    .sink
                    .derives_columns()
                    .then_some(connector.sink.evolve),
                fixed: connector.sink.table_template().is_none(),
                ..Default::default()
            }),
            source_order: connector.sink.transactions == crate::config::Transactions::Source,
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
        let migrated = self.maintenance().migrate().await?;
        if migrated.from < db::of(self.dialect).exact_names_since {
            for names in schema::case_collisions(&self.topics) {
                tracing::warn!(connector = %self.connector, topics = ?names,
                    "these topics differ only in case: before sluice compared names exactly on MySQL/MariaDB (schema version 2) they shared one stored offset, so records of one of them may be missing or duplicated; check the table against the topics");
            }
        }
        // With a table template, each table is made ready when a batch first names it.
        let one_table = self.routing.is_none();
        if self.create_table && one_table {
            self.create(&self.table).await?;
        }
        if let Some(table) = &self.dead_letter_table {
            self.create(table).await?;
        }
        self.exact_dead_letter_keys().await?;
        if !one_table {
            return Ok(());
        }
        self.check_columns(&self.table).await?;
        let _ = self.copy_in.set(self.copy_choice(&self.table).await);
        Ok(())
    }

    /// Fails when `table` is missing or lacks one of its columns ([`SinkError::TableMismatch`]);
    /// a lost connection, a pool timeout or a lock wait is a transient
    /// [`SinkError::Database`] instead (the check could not run), and a table sluice may not
    /// read is [`SinkError::NotPermitted`].
    async fn check_columns(&self, table: &TableSpec) -> Result<(), SinkError> {
        self.execute(&self.dialect.probe_table(table))
            .await
            .map_err(|source| {
                if error::is_transient(&source) {
                    return SinkError::Database {
                        action: "check table",
                        table: table.name.clone(),
                        source,
                    };
                }
                if error::is_not_permitted(&source) {
                    return SinkError::NotPermitted {
                        action: "read table",
                        table: table.name.clone(),
                        source,
                    };
                }
                SinkError::TableMismatch {
                    table: table.name.clone(),
                    columns: table
                        .columns
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    source,
                }
            })
    }

    /// `CREATE TABLE IF NOT EXISTS`. Two processes creating the same table at once can
    /// trip PostgreSQL's catalog unique index; the second attempt then finds the table.
    async fn create(&self, table: &TableSpec) -> Result<(), SinkError> {
        let sql = self.dialect.create_table(table);
        let mut attempt = 0;
        loop {
            match self.execute(&sql).await {
                Ok(_) => return Ok(()),
                Err(source) if error::is_not_permitted(&source) => {
                    return Err(SinkError::NotPermitted {
                        action: "create table",
                        table: table.name.clone(),
                        source,
                    });
                }
                Err(_) if attempt < 2 => attempt += 1,
                Err(source) => {
                    return Err(SinkError::Database {
                        action: "create table",
                        table: table.name.clone(),
                        source,
                    });
                }
            }
        }
    }

    /// Whether inserts, or upserts of keys not in the table yet, go through `COPY`
    /// (PostgreSQL, into a table that takes it; known after [`Sink::prepare`]).
    pub fn writes_with_copy(&self) -> bool {
        let copy = self.copy_in();
        copy.inserts || copy.upserts
    }

    fn copy_in(&self) -> &CopyIn {
        self.copy_in.get().unwrap_or(&db::postgres::copy::NO_COPY)
    }

    /// How `table` takes rows through `COPY` (PostgreSQL only: `db/postgres/catalog.rs`).
    async fn copy_choice(&self, table: &TableSpec) -> CopyIn {
        self.pool
            .pool
            .copy_choice(self.mode, table, &self.connector)
            .await
    }

    /// Fails when the sink table is missing or lacks a configured column; reads no row.
    /// With a table template there is no one table: each is checked when first written.
    pub async fn check_table(&self) -> Result<(), SinkError> {
        if self.routing.is_some() {
            return Ok(());
        }
        self.execute(&self.dialect.probe_table(&self.table))
            .await
            .map_err(self.db_error("read"))
    }

    async fn execute(&self, sql: &str) -> Result<(), sqlx::Error> {
        let sql = AssertSqlSafe(sql.to_string());
        each_pool!(self, pool, DB => sqlx::query::<DB>(sql).execute(pool).await.map(|_| ()))
    }

    /// The query of whether the connector's user may insert into and update its table:
    /// two integers, 1 for yes; `None` where the database cannot be asked without writing.
    pub fn write_privileges_query(&self) -> Option<String> {
        db::of(self.dialect)
            .write_privileges
            .map(|query| query(&self.dialect.quote_table(&self.table.name)))
    }

    /// The type an integer is cast to in a `SELECT` (`CAST(COUNT(*) AS …)`) here.
    pub fn bigint_cast(&self) -> &'static str {
        db::of(self.dialect).bigint_cast
    }

    /// The database this sink writes to.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The connector this sink writes for: the name that keys its offsets and ids.
    pub fn connector_name(&self) -> &str {
        &self.connector
    }

    /// The sink table's name, as configured (a template's text, with a template).
    pub fn table_name(&self) -> &str {
        &self.table.name
    }

    /// Runs a query that returns one row of `columns` integers (NULL as `None`). For checks
    /// beside the pipeline, such as the demo's verdict; the pipeline never calls it.
    pub async fn query_integers(
        &self,
        sql: String,
        columns: usize,
    ) -> Result<Vec<Option<i64>>, SinkError> {
        each_pool!(self, pool, DB => backend::fetch_integers::<DB>(pool, sql, columns).await)
            .map_err(self.db_error("query"))
    }

    /// Runs one statement outside any batch (the demo's fresh start). The pipeline never
    /// calls it.
    pub async fn execute_statement(&self, sql: &str) -> Result<(), SinkError> {
        self.execute(sql).await.map_err(self.db_error("execute"))
    }

    /// Done with the database: the last sink using the process's pool for it closes the
    /// pool, waiting for connections in use; the others leave it open.
    pub async fn close(&self) {
        SharedPool::release(&self.pool).await;
    }
}
