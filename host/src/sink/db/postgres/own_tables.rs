//! PostgreSQL's statements on sluice's own tables where the databases' words differ.

use crate::sink::db::OwnTables;

/// PostgreSQL's statements on sluice's own tables.
pub(in crate::sink) static OWN_TABLES: OwnTables = OwnTables {
    write_target: "INSERT INTO sluice_control (connector, target, restart_seq, restart_tasks, restart_only_failed, updated_at) \
         VALUES ($1, $2, 0, 0, 0, $3) ON CONFLICT (connector) DO UPDATE SET target = excluded.target, updated_at = excluded.updated_at",
    request_restart: "INSERT INTO sluice_control (connector, target, restart_seq, restart_tasks, restart_only_failed, updated_at) \
         VALUES ($1, 'RUNNING', 1, $2, $3, $4) ON CONFLICT (connector) DO UPDATE SET restart_seq = sluice_control.restart_seq + 1, \
         restart_tasks = excluded.restart_tasks, restart_only_failed = excluded.restart_only_failed, updated_at = excluded.updated_at",
    keep_newer_tombstone: super::super::portable::KEEP_NEWER_TOMBSTONE,
    clean_tombstones: |chunk| {
        format!(
            "DELETE FROM sluice_tombstones WHERE table_name = $1 AND row_key IN \
             (SELECT row_key FROM sluice_tombstones WHERE table_name = $1 AND deleted_at < $2 LIMIT {chunk})"
        )
    },
    clean_dedup: |now, chunk| {
        format!(
            "DELETE FROM sluice_dedup WHERE ctid IN (SELECT ctid FROM sluice_dedup \
             WHERE connector = $1 AND written_at < {now} - $2 LIMIT {chunk})"
        )
    },
    dedup_id_text: "id",
};
