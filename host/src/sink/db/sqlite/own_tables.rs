//! SQLite's statements on sluice's own tables where the databases' words differ.

use crate::sink::db::OwnTables;

/// SQLite's statements on sluice's own tables.
pub(in crate::sink) static OWN_TABLES: OwnTables = OwnTables {
    write_target: "INSERT INTO sluice_control (connector, target, restart_seq, restart_tasks, restart_only_failed, updated_at) \
         VALUES (?, ?, 0, 0, 0, ?) ON CONFLICT (connector) DO UPDATE SET target = excluded.target, updated_at = excluded.updated_at",
    request_restart: "INSERT INTO sluice_control (connector, target, restart_seq, restart_tasks, restart_only_failed, updated_at) \
         VALUES (?, 'RUNNING', 1, ?, ?, ?) ON CONFLICT (connector) DO UPDATE SET restart_seq = sluice_control.restart_seq + 1, \
         restart_tasks = excluded.restart_tasks, restart_only_failed = excluded.restart_only_failed, updated_at = excluded.updated_at",
    keep_newer_tombstone: super::super::portable::KEEP_NEWER_TOMBSTONE,
    // Numbered: the first parameter stands twice.
    clean_tombstones: |chunk| {
        format!(
            "DELETE FROM sluice_tombstones WHERE table_name = ?1 AND row_key IN \
             (SELECT row_key FROM sluice_tombstones WHERE table_name = ?1 AND deleted_at < ?2 LIMIT {chunk})"
        )
    },
    clean_dedup: |now, chunk| {
        format!(
            "DELETE FROM sluice_dedup WHERE rowid IN (SELECT rowid FROM sluice_dedup \
             WHERE connector = ? AND written_at < {now} - ? LIMIT {chunk})"
        )
    },
    dedup_id_text: "id",
};
