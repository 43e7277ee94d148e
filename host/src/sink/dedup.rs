//! `sluice_dedup`: the producer ids a connector has written (`delivery.dedup`), claimed in
//! each batch's transaction (cleaned up past their window by the sink's maintenance,
//! `maintenance/cleanup.rs`). See [`crate::dedup`] for the
//! whole mechanism.

use std::collections::HashSet;

use sqlx::{AssertSqlSafe, ColumnIndex, Decode, Encode, Executor, IntoArguments, Row, Type};

use super::backend::Backend;
use super::{Dialect, SinkError, db};
use crate::dedup::{DedupKey, duplicates};

/// Ids looked up, or rows stored, per statement: far under every database's bind limit.
const IDS_PER_STATEMENT: usize = 1000;

pub(super) fn db_error(action: &'static str) -> impl Fn(sqlx::Error) -> SinkError {
    move |source| SinkError::Database {
        action,
        table: "sluice_dedup".into(),
        source,
    }
}

/// In a batch's transaction: finds which of `keys` are duplicates (their id is stored, or
/// an earlier key of the batch has it) and stores the others' ids. Returns the duplicates'
/// positions in `keys`. A concurrent transaction storing one of the ids makes this one
/// fail with [`SinkError::DedupConflict`], to be retried.
pub(super) async fn claim<DB>(
    conn: &mut DB::Connection,
    dialect: Dialect,
    connector: &str,
    keys: &[DedupKey],
) -> Result<Vec<usize>, SinkError>
where
    DB: Backend,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    String: for<'q> Encode<'q, DB> + for<'r> Decode<'r, DB> + Type<DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let mut stored = HashSet::new();
    let mut wanted: Vec<&str> = keys.iter().map(|k| k.id.as_str()).collect();
    wanted.sort_unstable();
    wanted.dedup();
    for chunk in wanted.chunks(IDS_PER_STATEMENT) {
        let list: Vec<String> = (0..chunk.len()).map(|i| dialect.param(i + 2)).collect();
        // MySQL keeps ids as bytes (VARBINARY: compared exactly, trailing spaces too).
        // MySQL keeps ids as bytes (VARBINARY: compared exactly, trailing spaces too).
        let id = db::of(dialect).own_tables.dedup_id_text;
        let sql = format!(
            "SELECT {id} FROM sluice_dedup WHERE connector = {} AND id IN ({})",
            dialect.param(1),
            list.join(", ")
        );
        let mut query = sqlx::query::<DB>(AssertSqlSafe(sql)).bind(connector.to_string());
        for id in chunk {
            query = query.bind(id.to_string());
        }
        let rows = query
            .fetch_all(&mut *conn)
            .await
            .map_err(db_error("look up producer ids"))?;
        for row in rows {
            stored.insert(
                row.try_get::<String, _>(0)
                    .map_err(db_error("look up producer ids"))?,
            );
        }
    }
    let skipped = duplicates(keys, &stored);
    let mut skip = skipped.iter().copied().peekable();
    let mut fresh: Vec<&DedupKey> = keys
        .iter()
        .enumerate()
        .filter(|(position, _)| skip.next_if_eq(position).is_none())
        .map(|(_, key)| key)
        .collect();
    // In id order: two tasks storing overlapping ids take their key locks in one order
    // and queue instead of deadlocking.
    fresh.sort_unstable_by(|a, b| a.id.cmp(&b.id));
    for chunk in fresh.chunks(IDS_PER_STATEMENT) {
        // written_at is the database's clock: the window counts from it.
        let groups: Vec<String> = (0..chunk.len())
            .map(|i| {
                let n = 6 * i;
                format!(
                    "({}, {}, {}, {}, {}, {}, {})",
                    dialect.param(n + 1),
                    dialect.param(n + 2),
                    dialect.param(n + 3),
                    dialect.now_ms(),
                    dialect.param(n + 4),
                    dialect.param(n + 5),
                    dialect.param(n + 6)
                )
            })
            .collect();
        let sql = format!(
            "INSERT INTO sluice_dedup (connector, id, record_time, written_at, source_topic, source_partition, source_offset) VALUES {}",
            groups.join(", ")
        );
        let mut query = sqlx::query::<DB>(AssertSqlSafe(sql));
        for key in chunk {
            query = query
                .bind(connector.to_string())
                .bind(key.id.clone())
                .bind(key.timestamp)
                .bind(key.topic.clone())
                .bind(key.partition)
                .bind(key.offset);
        }
        match query.execute(&mut *conn).await {
            Ok(_) => {}
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Err(SinkError::DedupConflict { ids: chunk.len() });
            }
            Err(e) => return Err(db_error("store producer ids")(e)),
        }
    }
    Ok(skipped)
}
