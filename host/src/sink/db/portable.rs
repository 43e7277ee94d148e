//! Statements PostgreSQL and SQLite share word for word: the migrations of sluice's tables
//! that need no type or syntax of one of them (MySQL and MariaDB have their own, with
//! binary collations and bounded key lengths).

/// The steps to schema version 4 (`sink/maintenance/schema.rs` says what each version adds).
pub(super) const VERSION_4: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS sluice_control (connector TEXT NOT NULL PRIMARY KEY, \
             target TEXT NOT NULL, restart_seq BIGINT NOT NULL, restart_tasks INTEGER NOT NULL, \
             restart_only_failed INTEGER NOT NULL, updated_at BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sluice_task_status (connector TEXT NOT NULL, worker TEXT NOT NULL, \
             task INTEGER NOT NULL, state TEXT NOT NULL, trace TEXT, updated_at BIGINT NOT NULL, \
             PRIMARY KEY (connector, worker, task))",
];

/// The steps to schema version 5 (`sink/maintenance/schema.rs` says what each version adds).
pub(super) const VERSION_5: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS sluice_dedup (connector TEXT NOT NULL, id TEXT NOT NULL, \
             record_time BIGINT NOT NULL, PRIMARY KEY (connector, id))",
    "CREATE INDEX IF NOT EXISTS sluice_dedup_time ON sluice_dedup (connector, record_time)",
];

/// The steps to schema version 6 (`sink/maintenance/schema.rs` says what each version adds).
pub(super) const VERSION_6: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS sluice_redriven (connector TEXT NOT NULL, \
             source_topic TEXT NOT NULL, source_partition INTEGER NOT NULL, source_offset BIGINT NOT NULL, \
             dlq_topic TEXT NOT NULL, dlq_partition INTEGER NOT NULL, dlq_offset BIGINT NOT NULL, \
             redriven_at BIGINT NOT NULL, \
             PRIMARY KEY (connector, source_topic, source_partition, source_offset))",
];

/// The steps to schema version 9 (`sink/maintenance/schema.rs` says what each version adds).
pub(super) const VERSION_9: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS sluice_tombstones (table_name TEXT NOT NULL, \
             row_key TEXT NOT NULL, version TEXT NOT NULL, deleted_at BIGINT NOT NULL, \
             PRIMARY KEY (table_name, row_key))",
    "CREATE INDEX IF NOT EXISTS sluice_tombstones_age ON sluice_tombstones (table_name, deleted_at)",
];

/// The index of the step to schema version 11 (`sluice_schema_changes` by connector and
/// time; the table itself differs in its id column).
pub(super) const VERSION_11_INDEX: &str = "CREATE INDEX IF NOT EXISTS sluice_schema_changes_by_connector \
             ON sluice_schema_changes (connector, applied_at)";

/// `sluice_schema`: one row, the version of sluice's own tables.
pub(super) const SCHEMA_TABLE: &str = "CREATE TABLE IF NOT EXISTS sluice_schema (id INTEGER NOT NULL PRIMARY KEY, version BIGINT NOT NULL)";

/// What follows a multi-row `INSERT` into `sluice_tombstones` so that a newer version of a
/// key's delete replaces the stored one and an older one changes nothing.
pub(super) const KEEP_NEWER_TOMBSTONE: &str = " ON CONFLICT (table_name, row_key) DO UPDATE SET version = excluded.version, \
    deleted_at = excluded.deleted_at WHERE sluice_tombstones.version < excluded.version";
