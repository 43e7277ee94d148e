//! SQLite's migrations of sluice's tables: in one transaction, whose `BEGIN IMMEDIATE`
//! holds the database's write lock.

use crate::sink::db::{Migrations, SchemaLock, portable};

/// How SQLite migrates sluice's tables.
pub(in crate::sink) static MIGRATIONS: Migrations = Migrations {
    steps,
    schema_table: portable::SCHEMA_TABLE,
    lock: SchemaLock::Transaction,
    already_done: |_| false,
};

/// The statements that take sluice's tables from `version - 1` to `version`.
fn steps(version: i64) -> Vec<&'static str> {
    match version {
        1 => vec![
            "CREATE TABLE IF NOT EXISTS sluice_offsets (connector TEXT NOT NULL, topic TEXT NOT NULL, \
             \"partition\" INTEGER NOT NULL, next_offset INTEGER NOT NULL, \
             updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')), PRIMARY KEY (connector, topic, \"partition\"))",
        ],
        3 => vec!["ALTER TABLE sluice_offsets ADD COLUMN cluster_id TEXT"],
        4 => portable::VERSION_4.to_vec(),
        5 => portable::VERSION_5.to_vec(),
        6 => portable::VERSION_6.to_vec(),
        7 => vec!["ALTER TABLE sluice_offsets ADD COLUMN topic_id TEXT"],
        8 => vec![
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
        9 => portable::VERSION_9.to_vec(),
        10 => vec!["ALTER TABLE sluice_task_status ADD COLUMN figures TEXT"],
        11 => vec![
            "CREATE TABLE IF NOT EXISTS sluice_schema_changes (id INTEGER PRIMARY KEY, \
             connector TEXT NOT NULL, table_name TEXT NOT NULL, step TEXT NOT NULL, \
             statement TEXT NOT NULL, source_topic TEXT, source_partition INTEGER, \
             source_offset INTEGER, applied_at INTEGER NOT NULL)",
            portable::VERSION_11_INDEX,
        ],
        _ => Vec::new(),
    }
}
