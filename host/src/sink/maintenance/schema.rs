//! sluice's own tables in a sink database (`sluice_offsets`; the operations issues add
//! theirs here) and their schema version, kept in `sluice_schema`.
//!
//! At start, [`Sink::prepare`](crate::sink::Sink::prepare) runs every migration newer than the database's version, in
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
//! | 11 | `sluice_schema_changes` (id, connector, table_name, step, statement, source_topic, source_partition, source_offset, applied_at): every statement `sink.evolve` ran on a derived table, with the record that needed it |
//!
//! During a rolling upgrade, a process of the previous version that is already running
//! keeps running: every column a migration adds is nullable, so its statements still fit.
//! A process of the previous version that starts against a newer database refuses with
//! [`SinkError::SchemaTooNew`], which says to upgrade, and is never retried.

use sqlx::{AssertSqlSafe, Encode, Executor, IntoArguments, Type};

use super::Maintenance;
use crate::sink::backend::{self, Backend};
use crate::sink::db::{self, Migrations, SchemaLock};
use crate::sink::{Dialect, SinkError, each_pool};

/// The version of sluice's own tables this binary writes.
pub const SCHEMA_VERSION: i64 = 11;

/// What a migration at start did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migrated {
    /// The version found (0: sluice's tables did not exist, or predate versioning).
    pub from: i64,
    /// The version now.
    pub to: i64,
}

impl Maintenance<'_> {
    /// Brings sluice's own tables to version `to` (at most [`SCHEMA_VERSION`]): the tables
    /// a sluice of version `to` left behind, for the tests that migrate a database from
    /// every earlier version. Nothing but [`Sink::prepare`](crate::sink::Sink::prepare) migrates a real database.
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
        let migrations = db::of(dialect).migrations;
        each_pool!(self, pool, DB => {
            let mut tx = pool.begin_with(dialect.begin()).await.map_err(db_error)?;
            match migrations.lock {
                SchemaLock::Transaction => {}
                SchemaLock::UntilCommit(take) => {
                    execute::<DB>(&mut tx, take.into()).await.map_err(db_error)?;
                }
                SchemaLock::Named { take, wait_seconds, .. } => {
                    let got = backend::fetch_integers::<DB>(&mut *tx, take.into(), 1)
                        .await
                        .map_err(db_error)?;
                    if got.first().copied().flatten() != Some(1) {
                        return Err(SinkError::Internal(format!(
                            "another process held the schema lock for {wait_seconds} s"
                        )));
                    }
                }
            }
            let result = migrate_in::<DB>(&mut tx, dialect, migrations, to).await;
            if let SchemaLock::Named { release, .. } = migrations.lock {
                // A pooled connection outlives this call: the lock must not.
                execute::<DB>(&mut tx, release.into())
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
    migrations: &Migrations,
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
    execute::<DB>(conn, migrations.schema_table.into())
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
        for statement in (migrations.steps)(version) {
            match execute::<DB>(conn, statement.into()).await {
                Ok(()) => {}
                Err(sqlx::Error::Database(error)) if (migrations.already_done)(error.as_ref()) => {}
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
pub(crate) fn case_collisions(topics: &[String]) -> Vec<Vec<&str>> {
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
        let migration = |dialect, version| (db::of(dialect).migrations.steps)(version);
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
