//! `sluice_redriven`: the records a redrive of a dead-letter *topic* has written. A record
//! in a topic cannot be deleted as the dead-letter table's rows are, so each one redriven
//! is recorded, by its source coordinates, in the transaction that writes its rows: a
//! repeated or concurrent redrive of the same range, or a second dead letter of the same
//! record (a batch whose dead letters were produced twice), finds it and passes it over.

use std::collections::HashSet;

use sqlx::{AssertSqlSafe, ColumnIndex, Decode, Encode, Executor, IntoArguments, Row, Type};

use super::backend::Backend;
use super::{Dialect, RedrivenFromTopic, Sink, SinkError, each_pool};

/// Rows per insert statement (8 binds each).
const ROWS_PER_STATEMENT: usize = 500;

fn db_error(action: &'static str) -> impl Fn(sqlx::Error) -> SinkError {
    move |source| SinkError::Database {
        action,
        table: "sluice_redriven".into(),
        source,
    }
}

/// In a batch's transaction: records `redriven`. A record another transaction recorded
/// first fails the batch with [`SinkError::RedriveConflict`] (the redrive reads its page
/// again and passes it over).
pub(super) async fn record<DB>(
    conn: &mut DB::Connection,
    dialect: Dialect,
    connector: &str,
    redriven: &[RedrivenFromTopic],
) -> Result<(), SinkError>
where
    DB: Backend,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    String: for<'q> Encode<'q, DB> + Type<DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB>,
{
    let now = super::control::now_ms();
    let mut ordered: Vec<&RedrivenFromTopic> = redriven.iter().collect();
    // In key order: two redrives lock their rows in one order and queue.
    ordered.sort_by(|a, b| a.source.cmp(&b.source));
    for chunk in ordered.chunks(ROWS_PER_STATEMENT) {
        let groups: Vec<String> = (0..chunk.len())
            .map(|i| {
                let p: Vec<String> = (1..=8).map(|k| dialect.param(8 * i + k)).collect();
                format!("({})", p.join(", "))
            })
            .collect();
        let sql = format!(
            "INSERT INTO sluice_redriven (connector, source_topic, source_partition, source_offset, \
             dlq_topic, dlq_partition, dlq_offset, redriven_at) VALUES {}",
            groups.join(", ")
        );
        let mut query = sqlx::query::<DB>(AssertSqlSafe(sql));
        for r in chunk {
            query = query
                .bind(connector.to_string())
                .bind(r.source.0.clone())
                .bind(r.source.1)
                .bind(r.source.2)
                .bind(r.dead_letter.0.clone())
                .bind(r.dead_letter.1)
                .bind(r.dead_letter.2)
                .bind(now);
        }
        match query.execute(&mut *conn).await {
            Ok(_) => {}
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                let first = &chunk[0].source;
                return Err(SinkError::RedriveConflict {
                    topic: first.0.clone(),
                    partition: first.1,
                    offset: first.2,
                });
            }
            Err(e) => return Err(db_error("record redriven records")(e)),
        }
    }
    Ok(())
}

impl Sink {
    /// Which of `sources` (topic, partition, offset) a redrive of a dead-letter topic has
    /// written already.
    pub async fn redriven_already(
        &self,
        sources: &[(String, i32, i64)],
    ) -> Result<HashSet<(String, i32, i64)>, SinkError> {
        let mut found = HashSet::new();
        // One query per source partition, over the offsets' span.
        let mut partitions: Vec<(&str, i32)> =
            sources.iter().map(|(t, p, _)| (t.as_str(), *p)).collect();
        partitions.sort_unstable();
        partitions.dedup();
        for (topic, partition) in partitions {
            let offsets = sources
                .iter()
                .filter(|(t, p, _)| t == topic && *p == partition)
                .map(|(_, _, o)| *o);
            let (low, high) = offsets.fold((i64::MAX, i64::MIN), |(l, h), o| (l.min(o), h.max(o)));
            let rows = self.redriven_between(topic, partition, low, high).await?;
            found.extend(rows.into_iter().map(|o| (topic.to_string(), partition, o)));
        }
        found.retain(|s| sources.contains(s));
        Ok(found)
    }

    async fn redriven_between(
        &self,
        topic: &str,
        partition: i32,
        low: i64,
        high: i64,
    ) -> Result<Vec<i64>, SinkError> {
        let d = self.dialect;
        let sql = format!(
            "SELECT source_offset FROM sluice_redriven WHERE connector = {} AND source_topic = {} \
             AND source_partition = {} AND source_offset BETWEEN {} AND {}",
            d.param(1),
            d.param(2),
            d.param(3),
            d.param(4),
            d.param(5)
        );
        each_pool!(self, pool, DB => {
            offsets::<DB>(pool, sql, &self.connector, topic, partition, low, high).await
        })
        .map_err(db_error("read redriven records"))
    }
}

async fn offsets<'p, DB>(
    executor: impl Executor<'p, Database = DB>,
    sql: String,
    connector: &str,
    topic: &str,
    partition: i32,
    low: i64,
    high: i64,
) -> Result<Vec<i64>, sqlx::Error>
where
    DB: sqlx::Database,
    DB::Arguments: IntoArguments<DB>,
    String: for<'q> Encode<'q, DB> + Type<DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB>,
    i64: for<'q> Encode<'q, DB> + for<'r> Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let rows = sqlx::query::<DB>(AssertSqlSafe(sql))
        .bind(connector.to_string())
        .bind(topic.to_string())
        .bind(partition)
        .bind(low)
        .bind(high)
        .fetch_all(executor)
        .await?;
    rows.iter().map(|row| row.try_get::<i64, _>(0)).collect()
}
