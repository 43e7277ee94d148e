//! MySQL's and MariaDB's migrations of sluice's tables. They commit each DDL statement by
//! itself, so each step is idempotent: a column (1060) or an index (1061) already there is
//! that step done, by a migration that stopped before it recorded its version. Processes
//! starting at once wait on a named lock (`GET_LOCK`), released before the connection goes
//! back to the pool.

use crate::sink::db::{Migrations, SchemaLock};

/// How MySQL and MariaDB migrate sluice's tables.
pub(in crate::sink) static MIGRATIONS: Migrations = Migrations {
    steps,
    schema_table: "CREATE TABLE IF NOT EXISTS sluice_schema (id INT NOT NULL PRIMARY KEY, version BIGINT NOT NULL)",
    lock: SchemaLock::Named {
        take: "SELECT GET_LOCK('sluice_schema', 60)",
        wait_seconds: 60,
        release: "DO RELEASE_LOCK('sluice_schema')",
    },
    already_done: |error| {
        error
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .is_some_and(|e| matches!(e.number(), 1060 | 1061))
    },
};

/// The statements that take sluice's tables from `version - 1` to `version`.
fn steps(version: i64) -> Vec<&'static str> {
    match version {
        1 => vec![
            "CREATE TABLE IF NOT EXISTS sluice_offsets (connector VARCHAR(255) NOT NULL, topic VARCHAR(255) NOT NULL, \
             `partition` INT NOT NULL, next_offset BIGINT NOT NULL, \
             updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), PRIMARY KEY (connector, topic, `partition`))",
        ],
        // Connector and topic names compared exactly (PostgreSQL and SQLite do already).
        2 => vec![
            "ALTER TABLE sluice_offsets \
             MODIFY connector VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             MODIFY topic VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL",
        ],
        // No IF NOT EXISTS for a column here: one already there (1060) is the step done.
        3 => vec![
            "ALTER TABLE sluice_offsets ADD COLUMN cluster_id VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL",
        ],
        4 => vec![
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
        5 => vec![
            "CREATE TABLE IF NOT EXISTS sluice_dedup (\
             connector VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             id VARBINARY(255) NOT NULL, \
             record_time BIGINT NOT NULL, PRIMARY KEY (connector, id), \
             INDEX sluice_dedup_time (connector, record_time))",
        ],
        6 => vec![
            "CREATE TABLE IF NOT EXISTS sluice_redriven (\
             connector VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             source_topic VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             source_partition INT NOT NULL, source_offset BIGINT NOT NULL, \
             dlq_topic VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             dlq_partition INT NOT NULL, dlq_offset BIGINT NOT NULL, redriven_at BIGINT NOT NULL, \
             PRIMARY KEY (connector, source_topic, source_partition, source_offset))",
        ],
        7 => vec![
            "ALTER TABLE sluice_offsets ADD COLUMN topic_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL",
        ],
        // One statement per column and index, each done alone.
        8 => vec![
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
        9 => vec![
            "CREATE TABLE IF NOT EXISTS sluice_tombstones (\
             table_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             row_key VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, \
             version VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, \
             deleted_at BIGINT NOT NULL, PRIMARY KEY (table_name, row_key), \
             INDEX sluice_tombstones_age (table_name, deleted_at))",
        ],
        10 => vec!["ALTER TABLE sluice_task_status ADD COLUMN figures TEXT NULL"],
        11 => vec![
            "CREATE TABLE IF NOT EXISTS sluice_schema_changes (\
             id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, \
             connector VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             table_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             step VARCHAR(16) NOT NULL, statement TEXT NOT NULL, \
             source_topic VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL, \
             source_partition INT NULL, source_offset BIGINT NULL, applied_at BIGINT NOT NULL, \
             INDEX sluice_schema_changes_by_connector (connector, applied_at))",
        ],
        _ => Vec::new(),
    }
}
