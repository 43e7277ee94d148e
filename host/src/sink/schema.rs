//! sluice's own tables in a sink database (`sluice_offsets`; the operations issues add
//! theirs here) and their schema version, kept in `sluice_schema`.
//!
//! At start, [`Sink::prepare`] runs every migration newer than the database's version, in
//! order, under a lock that serialises the processes starting at once (PostgreSQL: an
//! advisory lock in the migration's transaction; MySQL/MariaDB: `GET_LOCK`; SQLite: the
//! `BEGIN IMMEDIATE` write lock). PostgreSQL and SQLite run it in one transaction; MySQL
//! commits each DDL statement by itself, so each migration there is idempotent. A database
//! at a newer version than this binary knows is refused: an older sluice must not write
//! tables it does not understand.
//!
//! | version | what |
//! |---|---|
//! | 1 | `sluice_offsets` (connector, topic, partition, next_offset, updated_at) |
//! | 2 | MySQL/MariaDB: `sluice_offsets` compares connector and topic names exactly (binary collation); before, `Orders` and `orders` shared one row |
//! | 3 | `sluice_offsets.cluster_id`: the Kafka cluster an offset was read from |
//! | 4 | `sluice_control` (a connector's target state and restart requests, set through the admin API) and `sluice_task_status` (each process's tasks, as heartbeats) |
//! | 5 | `sluice_dedup` (connector, id, record_time): the producer ids written, for `delivery.dedup` (MySQL/MariaDB: `id` is `VARBINARY`, compared byte for byte: their `_bin` collations ignore trailing spaces) |
//! | 6 | `sluice_redriven` (connector, source_topic, source_partition, source_offset, dlq_topic, dlq_partition, dlq_offset, redriven_at): the records redriven from a dead-letter topic, so that none is written twice |
//! | 7 | `sluice_offsets.topic_id`: the id of the topic an offset was read from (where the broker has topic ids): a topic deleted and created again is not resumed from in silence |
//! | 8 | `sluice_dedup.written_at` (the sink database's clock, ms: the window counts from it, not from the record's timestamp) and `source_topic`, `source_partition`, `source_offset` (where the id was first read: an offsets reset forgets the ids it rewinds past); `sluice_delivery` (connector, guarantee, group_id, updated_at): the guarantee and Kafka group a connector last ran with, so that a switch seeds the other side's positions and a rename (`renamed_from`) finds the old group |
//! | 9 | `sluice_tombstones` (table_name, row_key, version, deleted_at): the versions of rows deleted from tables with `sink.version`, so that an older change replayed after a delete does not bring the row back (`sink/tombstones.rs`) |
//! | 10 | `sluice_task_status.figures`: each task's figures as its heartbeat carries them (JSON: the lag of each partition it holds, its process's rows/s), so that any process's status shows the connector's lag and rate across processes |
//!
//! During a rolling upgrade, a process of the previous version that is already running
//! keeps running: every column a migration adds is nullable, so its statements still fit.
//! A process of the previous version that starts against a newer database refuses with
//! [`SinkError::SchemaTooNew`], which says to upgrade, and is never retried.

use sqlx::{AssertSqlSafe, Encode, Executor, IntoArguments, Type};

use super::backend::{self, Backend};
use super::{Dialect, Sink, SinkError, each_pool};

/// The version of sluice's own tables this binary writes.
pub const SCHEMA_VERSION: i64 = 10;

/// An arbitrary key for PostgreSQL's advisory lock: "sluice" in ASCII.
const PG_LOCK_KEY: i64 = 0x736c_7569_6365;
/// How long MySQL waits for another process's migration, in seconds.
const MYSQL_LOCK_WAIT_SECONDS: i64 = 60;

/// What a migration at start did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    /// The version found (0: sluice's tables did not exist, or predate versioning).
    pub from: i64,
    /// The version now.
    pub to: i64,
}

/// The statements that take the tables from `version - 1` to `version`.
fn migration(dialect: Dialect, version: i64) -> Vec<&'static str> {
    match (version, dialect) {
        (1, Dialect::Postgres) => vec![
            "CREATE TABLE IF NOT EXISTS sluice_offsets (connector TEXT NOT NULL, topic TEXT NOT NULL, \
             \"partition\" INTEGER NOT NULL, next_offset BIGINT NOT NULL, \
             updated_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (connector, topic, \"partition\"))",
        ],
        (1, Dialect::MySql) => vec![
            "CREATE TABLE IF NOT EXISTS sluice_offsets (connector VARCHAR(255) NOT NULL, topic VARCHAR(255) NOT NULL, \
             `partition` INT NOT NULL, next_offset BIGINT NOT NULL, \
             updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), PRIMARY KEY (connector, topic, `partition`))",
        ],
        (1, Dialect::Sqlite) => vec![
            "CREATE TABLE IF NOT EXISTS sluice_offsets (connector TEXT NOT NULL, topic TEXT NOT NULL, \
             \"partition\" INTEGER NOT NULL, next_offset INTEGER NOT NULL, \
             updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), PRIMARY KEY (connector, topic, \"partition\"))",
        ],
        // PostgreSQL and SQLite compare text exactly already.
        (2, Dialect::MySql) => vec![
            "ALTER TABLE sluice_offsets \
             MODIFY connector VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             MODIFY topic VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL",
        ],
        (3, Dialect::Postgres) => {
            vec!["ALTER TABLE sluice_offsets ADD COLUMN IF NOT EXISTS cluster_id TEXT"]
        }
        // MySQL has no IF NOT EXISTS here: a column already there (1060) is this step done.
        (3, Dialect::MySql) => vec![
            "ALTER TABLE sluice_offsets ADD COLUMN cluster_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL",
        ],
        (3, Dialect::Sqlite) => vec!["ALTER TABLE sluice_offsets ADD COLUMN cluster_id TEXT"],
        (4, Dialect::MySql) => vec![
            "CREATE TABLE IF NOT EXISTS sluice_control (\
             connector VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, \
             target VARCHAR(16) NOT NULL, restart_seq BIGINT NOT NULL, restart_tasks INT NOT NULL, \
             restart_only_failed INT NOT NULL, updated_at BIGINT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS sluice_task_status (\
             connector VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             worker VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, task INT NOT NULL, \
             state VARCHAR(16) NOT NULL, trace TEXT NULL, updated_at BIGINT NOT NULL, \
             PRIMARY KEY (connector, worker, task))",
        ],
        (4, _) => vec![
            "CREATE TABLE IF NOT EXISTS sluice_control (connector TEXT NOT NULL PRIMARY KEY, \
             target TEXT NOT NULL, restart_seq BIGINT NOT NULL, restart_tasks INTEGER NOT NULL, \
             restart_only_failed INTEGER NOT NULL, updated_at BIGINT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS sluice_task_status (connector TEXT NOT NULL, worker TEXT NOT NULL, \
             task INTEGER NOT NULL, state TEXT NOT NULL, trace TEXT, updated_at BIGINT NOT NULL, \
             PRIMARY KEY (connector, worker, task))",
        ],
        (5, Dialect::MySql) => vec![
            "CREATE TABLE IF NOT EXISTS sluice_dedup (\
             connector VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             id VARBINARY(255) NOT NULL, \
             record_time BIGINT NOT NULL, PRIMARY KEY (connector, id), \
             INDEX sluice_dedup_time (connector, record_time))",
        ],
        (5, _) => vec![
            "CREATE TABLE IF NOT EXISTS sluice_dedup (connector TEXT NOT NULL, id TEXT NOT NULL, \
             record_time BIGINT NOT NULL, PRIMARY KEY (connector, id))",
            "CREATE INDEX IF NOT EXISTS sluice_dedup_time ON sluice_dedup (connector, record_time)",
        ],
        (6, Dialect::MySql) => vec![
            "CREATE TABLE IF NOT EXISTS sluice_redriven (\
             connector VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             source_topic VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             source_partition INT NOT NULL, source_offset BIGINT NOT NULL, \
             dlq_topic VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             dlq_partition INT NOT NULL, dlq_offset BIGINT NOT NULL, redriven_at BIGINT NOT NULL, \
             PRIMARY KEY (connector, source_topic, source_partition, source_offset))",
        ],
        (6, _) => vec![
            "CREATE TABLE IF NOT EXISTS sluice_redriven (connector TEXT NOT NULL, \
             source_topic TEXT NOT NULL, source_partition INTEGER NOT NULL, source_offset BIGINT NOT NULL, \
             dlq_topic TEXT NOT NULL, dlq_partition INTEGER NOT NULL, dlq_offset BIGINT NOT NULL, \
             redriven_at BIGINT NOT NULL, \
             PRIMARY KEY (connector, source_topic, source_partition, source_offset))",
        ],
        (7, Dialect::Postgres) => {
            vec!["ALTER TABLE sluice_offsets ADD COLUMN IF NOT EXISTS topic_id TEXT"]
        }
        // A column already there (1060) is this step done.
        (7, Dialect::MySql) => vec![
            "ALTER TABLE sluice_offsets ADD COLUMN topic_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL",
        ],
        (7, Dialect::Sqlite) => vec!["ALTER TABLE sluice_offsets ADD COLUMN topic_id TEXT"],
        // Ids stored before this version (or by a process of version 7 meanwhile) have no
        // written_at: the cleanup stamps them when it first sees them, so they count their
        // window from then (no table-wide UPDATE under the migration's lock).
        (8, Dialect::Postgres) => vec![
            "ALTER TABLE sluice_dedup ADD COLUMN IF NOT EXISTS written_at BIGINT, \
             ADD COLUMN IF NOT EXISTS source_topic TEXT, \
             ADD COLUMN IF NOT EXISTS source_partition INTEGER, \
             ADD COLUMN IF NOT EXISTS source_offset BIGINT",
            "CREATE INDEX IF NOT EXISTS sluice_dedup_written ON sluice_dedup (connector, written_at)",
            "CREATE INDEX IF NOT EXISTS sluice_dedup_source ON sluice_dedup \
             (connector, source_topic, source_partition, source_offset)",
            "CREATE TABLE IF NOT EXISTS sluice_delivery (connector TEXT NOT NULL PRIMARY KEY, \
             guarantee TEXT NOT NULL, group_id TEXT NOT NULL, updated_at BIGINT NOT NULL)",
        ],
        // One statement per column: a column already there (1060) or an index (1061) is
        // that step done.
        (8, Dialect::MySql) => vec![
            "ALTER TABLE sluice_dedup ADD COLUMN written_at BIGINT NULL",
            "ALTER TABLE sluice_dedup ADD COLUMN source_topic VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL",
            "ALTER TABLE sluice_dedup ADD COLUMN source_partition INT NULL",
            "ALTER TABLE sluice_dedup ADD COLUMN source_offset BIGINT NULL",
            "CREATE INDEX sluice_dedup_written ON sluice_dedup (connector, written_at)",
            "CREATE INDEX sluice_dedup_source ON sluice_dedup \
             (connector, source_topic, source_partition, source_offset)",
            "CREATE TABLE IF NOT EXISTS sluice_delivery (\
             connector VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY, \
             guarantee VARCHAR(16) NOT NULL, \
             group_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, updated_at BIGINT NOT NULL)",
        ],
        (8, Dialect::Sqlite) => vec![
            "ALTER TABLE sluice_dedup ADD COLUMN written_at INTEGER",
            "ALTER TABLE sluice_dedup ADD COLUMN source_topic TEXT",
            "ALTER TABLE sluice_dedup ADD COLUMN source_partition INTEGER",
            "ALTER TABLE sluice_dedup ADD COLUMN source_offset INTEGER",
            "CREATE INDEX IF NOT EXISTS sluice_dedup_written ON sluice_dedup (connector, written_at)",
            "CREATE INDEX IF NOT EXISTS sluice_dedup_source ON sluice_dedup \
             (connector, source_topic, source_partition, source_offset)",
            "CREATE TABLE IF NOT EXISTS sluice_delivery (connector TEXT NOT NULL PRIMARY KEY, \
             guarantee TEXT NOT NULL, group_id TEXT NOT NULL, updated_at BIGINT NOT NULL)",
        ],
        (9, Dialect::MySql) => vec![
            "CREATE TABLE IF NOT EXISTS sluice_tombstones (\
             table_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             row_key VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, \
             version VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, \
             deleted_at BIGINT NOT NULL, PRIMARY KEY (table_name, row_key), \
             INDEX sluice_tombstones_age (table_name, deleted_at))",
        ],
        (9, _) => vec![
            "CREATE TABLE IF NOT EXISTS sluice_tombstones (table_name TEXT NOT NULL, \
             row_key TEXT NOT NULL, version TEXT NOT NULL, deleted_at BIGINT NOT NULL, \
             PRIMARY KEY (table_name, row_key))",
            "CREATE INDEX IF NOT EXISTS sluice_tombstones_age ON sluice_tombstones (table_name, deleted_at)",
        ],
        (10, Dialect::Postgres) => {
            vec!["ALTER TABLE sluice_task_status ADD COLUMN IF NOT EXISTS figures TEXT"]
        }
        // A column already there (1060) is this step done.
        (10, Dialect::MySql) => vec!["ALTER TABLE sluice_task_status ADD COLUMN figures TEXT NULL"],
        (10, Dialect::Sqlite) => vec!["ALTER TABLE sluice_task_status ADD COLUMN figures TEXT"],
        _ => Vec::new(),
    }
}

/// A MySQL error that means the step was done already (by a migration that stopped before
/// it recorded its version: MySQL commits each DDL statement by itself): a duplicate
/// column (1060) or index (1061).
fn already_done(dialect: Dialect, error: &sqlx::Error) -> bool {
    dialect == Dialect::MySql
        && matches!(error, sqlx::Error::Database(db)
            if db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|e| matches!(e.number(), 1060 | 1061)))
}

/// `sluice_schema`: one row, the version of sluice's own tables.
fn create_schema_table(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::MySql => {
            "CREATE TABLE IF NOT EXISTS sluice_schema (id INT NOT NULL PRIMARY KEY, version BIGINT NOT NULL)"
        }
        _ => {
            "CREATE TABLE IF NOT EXISTS sluice_schema (id INTEGER NOT NULL PRIMARY KEY, version BIGINT NOT NULL)"
        }
    }
}

impl Sink {
    /// Brings sluice's own tables to [`SCHEMA_VERSION`].
    pub(super) async fn migrate(&self) -> Result<Migrated, SinkError> {
        self.migrate_to(SCHEMA_VERSION).await
    }

    /// Brings sluice's own tables to version `to` (at most [`SCHEMA_VERSION`]): the tables
    /// a sluice of version `to` left behind, for the tests that migrate a database from
    /// every earlier version. Nothing but [`Sink::prepare`] migrates a real database.
    #[doc(hidden)]
    pub async fn migrate_to(&self, to: i64) -> Result<Migrated, SinkError> {
        if !(1..=SCHEMA_VERSION).contains(&to) {
            return Err(SinkError::Internal(format!(
                "no schema version {to}: this binary knows 1 to {SCHEMA_VERSION}"
            )));
        }
        let dialect = self.dialect;
        let db_error = |source| SinkError::Database {
            action: "migrate",
            table: "sluice_schema".into(),
            source,
        };
        each_pool!(self, pool, DB => {
            let mut tx = pool.begin_with(dialect.begin()).await.map_err(db_error)?;
            match dialect {
                Dialect::Postgres => {
                    execute::<DB>(&mut tx, format!("SELECT pg_advisory_xact_lock({PG_LOCK_KEY})"))
                        .await
                        .map_err(db_error)?;
                }
                Dialect::MySql => {
                    let got = backend::fetch_integers::<DB>(
                        &mut *tx,
                        format!("SELECT GET_LOCK('sluice_schema', {MYSQL_LOCK_WAIT_SECONDS})"),
                        1,
                    )
                    .await
                    .map_err(db_error)?;
                    if got.first().copied().flatten() != Some(1) {
                        return Err(SinkError::Internal(format!(
                            "another process held the schema lock for {MYSQL_LOCK_WAIT_SECONDS} s"
                        )));
                    }
                }
                // BEGIN IMMEDIATE holds the write lock already.
                Dialect::Sqlite => {}
            }
            let result = migrate_in::<DB>(&mut tx, dialect, to).await;
            if dialect == Dialect::MySql {
                // A pooled connection outlives this call: the lock must not.
                execute::<DB>(&mut tx, "DO RELEASE_LOCK('sluice_schema')".into())
                    .await
                    .map_err(db_error)?;
            }
            let migrated = result?;
            tx.commit().await.map_err(db_error)?;
            Ok(migrated)
        })
    }
}

async fn execute<DB>(conn: &mut DB::Connection, sql: String) -> Result<(), sqlx::Error>
where
    DB: Backend,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    sqlx::query::<DB>(AssertSqlSafe(sql))
        .execute(&mut *conn)
        .await
        .map(|_| ())
}

/// The migration itself, to version `to`, on a connection that holds the lock.
async fn migrate_in<DB>(
    conn: &mut DB::Connection,
    dialect: Dialect,
    to: i64,
) -> Result<Migrated, SinkError>
where
    DB: Backend,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    Option<i64>: for<'r> sqlx::Decode<'r, DB> + Type<DB>,
    usize: sqlx::ColumnIndex<DB::Row>,
{
    let db_error = |source| SinkError::Database {
        action: "migrate",
        table: "sluice_schema".into(),
        source,
    };
    execute::<DB>(conn, create_schema_table(dialect).into())
        .await
        .map_err(db_error)?;
    let found = backend::fetch_integers::<DB>(
        &mut *conn,
        "SELECT MAX(version) FROM sluice_schema".into(),
        1,
    )
    .await
    .map_err(db_error)?;
    let from = found.first().copied().flatten().unwrap_or(0);
    if from > SCHEMA_VERSION {
        return Err(SinkError::SchemaTooNew {
            found: from,
            known: SCHEMA_VERSION,
        });
    }
    for version in from + 1..=to {
        for statement in migration(dialect, version) {
            match execute::<DB>(conn, statement.into()).await {
                Ok(()) => {}
                Err(error) if already_done(dialect, &error) => {}
                Err(source) => {
                    return Err(SinkError::Database {
                        action: "migrate",
                        table: "sluice_offsets".into(),
                        source,
                    });
                }
            }
        }
        tracing::info!(version, "sluice's tables migrated");
    }
    if from < to {
        execute::<DB>(conn, "DELETE FROM sluice_schema".into())
            .await
            .map_err(db_error)?;
        sqlx::query::<DB>(AssertSqlSafe(format!(
            "INSERT INTO sluice_schema (id, version) VALUES (1, {})",
            dialect.param(1)
        )))
        .bind(to)
        .execute(&mut *conn)
        .await
        .map_err(db_error)?;
    }
    Ok(Migrated {
        from,
        to: to.max(from),
    })
}

/// Topics of one connector whose names differ only in case: on MySQL/MariaDB before schema
/// version 2 they shared one stored offset, so one of them may have been skipped or read
/// twice. Reported at the migration, never guessed at.
pub(super) fn case_collisions(topics: &[String]) -> Vec<Vec<&str>> {
    let mut groups: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
    for topic in topics {
        groups.entry(topic.to_lowercase()).or_default().push(topic);
    }
    groups.into_values().filter(|g| g.len() > 1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_version_up_to_the_current_one_has_its_steps() {
        for dialect in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            assert!(!migration(dialect, 1).is_empty(), "{dialect:?}");
            assert!(migration(dialect, SCHEMA_VERSION + 1).is_empty());
        }
        assert!(!migration(Dialect::MySql, 2).is_empty());
        for dialect in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            assert!(!migration(dialect, 3).is_empty(), "{dialect:?}");
            assert_eq!(migration(dialect, 4).len(), 2, "{dialect:?}");
            assert!(!migration(dialect, 5).is_empty(), "{dialect:?}");
            assert!(!migration(dialect, 6).is_empty(), "{dialect:?}");
            assert!(!migration(dialect, 7).is_empty(), "{dialect:?}");
            assert!(!migration(dialect, 8).is_empty(), "{dialect:?}");
        }
    }

    #[test]
    fn topics_that_differ_only_in_case_are_found() {
        let topics = ["Orders", "orders", "items", "ORDERS"].map(String::from);
        assert_eq!(
            case_collisions(&topics),
            vec![vec!["Orders", "orders", "ORDERS"]]
        );
        assert!(case_collisions(&["a".to_string(), "b".to_string()]).is_empty());
    }
}
