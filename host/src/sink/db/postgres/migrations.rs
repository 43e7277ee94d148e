//! PostgreSQL's migrations of sluice's tables: in one transaction, under an advisory lock
//! that the transaction's end releases.

use crate::sink::db::{Migrations, SchemaLock, portable};

/// How PostgreSQL migrates sluice's tables.
pub(in crate::sink) static MIGRATIONS: Migrations = Migrations {
    steps,
    schema_table: portable::SCHEMA_TABLE,
    lock: SchemaLock::UntilCommit(
        // An arbitrary key: "sluice" in ASCII (0x736c_7569_6365). Every version takes the
        // same one, so processes of two versions starting at once wait on each other.
        "SELECT pg_advisory_xact_lock(126909663503205)",
    ),
    already_done: |_| false,
};

/// The statements that take sluice's tables from `version - 1` to `version`.
fn steps(version: i64) -> Vec<&'static str> {
    match version {
        1 => vec![
            "CREATE TABLE IF NOT EXISTS sluice_offsets (connector TEXT NOT NULL, topic TEXT NOT NULL, \
             \"partition\" INTEGER NOT NULL, next_offset BIGINT NOT NULL, \
             updated_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (connector, topic, \"partition\"))",
        ],
        3 => {
            vec!["ALTER TABLE sluice_offsets ADD COLUMN IF NOT EXISTS cluster_id TEXT"]
        }
        4 => portable::VERSION_4.to_vec(),
        5 => portable::VERSION_5.to_vec(),
        6 => portable::VERSION_6.to_vec(),
        7 => {
            vec!["ALTER TABLE sluice_offsets ADD COLUMN IF NOT EXISTS topic_id TEXT"]
        }
        8 => vec![
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
        9 => portable::VERSION_9.to_vec(),
        10 => {
            vec!["ALTER TABLE sluice_task_status ADD COLUMN IF NOT EXISTS figures TEXT"]
        }
        11 => vec![
            "CREATE TABLE IF NOT EXISTS sluice_schema_changes (id BIGSERIAL PRIMARY KEY, \
             connector TEXT NOT NULL, table_name TEXT NOT NULL, step TEXT NOT NULL, \
             statement TEXT NOT NULL, source_topic TEXT, source_partition INTEGER, \
             source_offset BIGINT, applied_at BIGINT NOT NULL)",
            portable::VERSION_11_INDEX,
        ],
        _ => Vec::new(),
    }
}
