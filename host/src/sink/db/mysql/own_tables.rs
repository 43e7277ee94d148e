//! MySQL's and MariaDB's statements on sluice's own tables where the databases' words
//! differ: `ON DUPLICATE KEY UPDATE` for upserts, `DELETE … LIMIT` for cleanups in chunks,
//! and ids kept as bytes.

use crate::sink::db::OwnTables;

/// MySQL's and MariaDB's statements on sluice's own tables.
pub(in crate::sink) static OWN_TABLES: OwnTables = OwnTables {
    write_target: "INSERT INTO sluice_control (connector, target, restart_seq, restart_tasks, restart_only_failed, updated_at) \
         VALUES (?, ?, 0, 0, 0, ?) ON DUPLICATE KEY UPDATE target = VALUES(target), updated_at = VALUES(updated_at)",
    request_restart: "INSERT INTO sluice_control (connector, target, restart_seq, restart_tasks, restart_only_failed, updated_at) \
         VALUES (?, 'RUNNING', 1, ?, ?, ?) ON DUPLICATE KEY UPDATE restart_seq = restart_seq + 1, \
         restart_tasks = VALUES(restart_tasks), restart_only_failed = VALUES(restart_only_failed), updated_at = VALUES(updated_at)",
    keep_newer_tombstone: " ON DUPLICATE KEY UPDATE \
        deleted_at = IF(version < VALUES(version), VALUES(deleted_at), deleted_at), \
        version = IF(version < VALUES(version), VALUES(version), version)",
    clean_tombstones: |chunk| {
        format!(
            "DELETE FROM sluice_tombstones WHERE table_name = ? AND deleted_at < ? LIMIT {chunk}"
        )
    },
    clean_dedup: |now, chunk| {
        format!(
            "DELETE FROM sluice_dedup WHERE connector = ? AND written_at < {now} - ? LIMIT {chunk}"
        )
    },
    // Ids are VARBINARY: compared exactly, trailing spaces too.
    dedup_id_text: "CONVERT(id USING utf8mb4)",
};
