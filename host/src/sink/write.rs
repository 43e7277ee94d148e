//! A batch's transaction: offsets (the compare-and-set), producer ids, rows, redrive
//! markers and dead letters, committed together.

use sqlx::{AssertSqlSafe, Connection, Encode, Executor, IntoArguments, Type};

use std::sync::Arc;

use super::backend::{self, Backend};
use super::routed::ReadyTable;
use super::write_runs::write_runs;
use super::{
    Checkout, Run, Sink, SinkError, WRITE_TIMEOUT, WriteBatch, Written, dead_letters, dedup,
    each_pool, redriven, without_inputs,
};
use crate::config::WriteMode;
use crate::map::{RowOp, SqlValue, TableRoutes};

impl Sink {
    /// Writes one batch in one transaction: offsets (compare-and-set), then rows. On any
    /// error the transaction is rolled back and nothing of the batch is stored.
    pub async fn write(&self, batch: &WriteBatch) -> Result<(), SinkError> {
        self.write_timed(batch).await.map(|_| ())
    }

    /// [`write`](Self::write), returning what the transaction did.
    pub async fn write_timed(&self, batch: &WriteBatch) -> Result<Written, SinkError> {
        let write = async {
            // Tables a template names for the first time are made ready first, outside
            // the transaction (MySQL commits DDL implicitly).
            let tables = self.ready_tables(&batch.routes, true).await?;
            self.write_transaction(batch, &tables).await
        };
        tokio::time::timeout(WRITE_TIMEOUT, write)
            .await
            .unwrap_or_else(|_| {
                Err(SinkError::Timeout {
                    action: "write batch",
                    table: self.table.name.clone(),
                    after: WRITE_TIMEOUT,
                })
            })
    }

    async fn write_transaction(
        &self,
        batch: &WriteBatch,
        tables: &[Option<Arc<ReadyTable>>],
    ) -> Result<Written, SinkError> {
        each_pool!(self, pool, DB => {
            let mut checkout = Checkout::take_for_write(&self.pool, pool).await.map_err(self.db_error("begin"))?;
            let result = async {
                let conn: &mut <DB as sqlx::Database>::Connection = &mut checkout.conn;
                let mut tx = conn
                    .begin_with(self.dialect.begin())
                    .await
                    .map_err(self.db_error("begin"))?;
                if self.asynchronous_commit {
                    // sink.synchronous_commit: off (PostgreSQL, exactly_once: checked by
                    // validate). For this transaction only.
                    sqlx::query::<DB>(sqlx::AssertSqlSafe(
                        "SET LOCAL synchronous_commit = off".to_string(),
                    ))
                    .execute(&mut *tx)
                    .await
                    .map_err(self.db_error("begin"))?;
                }
                let mut written = self.write_in::<DB>(&mut tx, batch, tables).await?;
                let committing = std::time::Instant::now();
                tx.commit().await.map_err(self.db_error("commit"))?;
                written.commit_time = committing.elapsed();
                Ok(written)
            }
            .await;
            checkout.ran_to_completion();
            result
        })
    }

    /// The body of a batch's transaction.
    async fn write_in<DB>(
        &self,
        conn: &mut DB::Connection,
        batch: &WriteBatch,
        tables: &[Option<Arc<ReadyTable>>],
    ) -> Result<Written, SinkError>
    where
        DB: Backend,
        DB::Connection: 'static,
        DB::Arguments: IntoArguments<DB>,
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
        String: for<'q> Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + Type<DB>,
        i32: for<'q> Encode<'q, DB> + Type<DB>,
        i64: for<'q> Encode<'q, DB> + for<'r> sqlx::Decode<'r, DB> + Type<DB>,
        Option<String>: for<'q> Encode<'q, DB> + Type<DB>,
        usize: sqlx::ColumnIndex<DB::Row>,
    {
        backend::advance_offsets::<DB>(
            conn,
            self.dialect,
            &self.connector,
            batch.cluster.as_deref(),
            &batch.topic_ids,
            &batch.offsets,
        )
        .await?;
        let mut written = Written::default();
        let kept;
        let (ops, routes): (&[RowOp], &TableRoutes) = if batch.dedup.is_empty() {
            (&batch.ops, &batch.routes)
        } else {
            let skipped =
                dedup::claim::<DB>(conn, self.dialect, &self.connector, &batch.dedup).await?;
            written.duplicates = skipped.iter().map(|&p| batch.dedup[p].input).collect();
            kept = without_inputs(batch, &written.duplicates);
            match &kept {
                Some((ops, routes)) => (ops, routes),
                None => (&batch.ops, &batch.routes),
            }
        };
        written.rows = ops.len();
        self.write_ops::<DB>(conn, ops, routes, tables, 0..ops.len())
            .await
            .map_err(|(table, source)| SinkError::Database {
                action: "write rows",
                table,
                source,
            })?;
        if !batch.redriven_from_topic.is_empty() {
            redriven::record::<DB>(
                conn,
                self.dialect,
                &self.connector,
                &batch.redriven_from_topic,
            )
            .await?;
        }
        if batch.dead_letters.is_empty() && batch.redriven.is_empty() && batch.supersedes.is_empty()
        {
            return Ok(written);
        }
        let Some(table) = &self.dead_letter_table else {
            return Err(SinkError::Internal(
                "dead letters for a connector without errors.dlq.table".into(),
            ));
        };
        let dlq_error = |action| {
            move |source| SinkError::Database {
                action,
                table: table.name.clone(),
                source,
            }
        };
        // The removal of a redriven dead letter is its compare-and-set: a dead letter that
        // is gone was redriven by someone else, and this batch must not write it again.
        let delete = self.dialect.delete_dead_letter(&table.name);
        for (topic, partition, offset) in &batch.redriven {
            let result = sqlx::query::<DB>(AssertSqlSafe(delete.clone()))
                .bind(self.connector.clone())
                .bind(topic.clone())
                .bind(*partition)
                .bind(*offset)
                .execute(&mut *conn)
                .await
                .map_err(dlq_error("remove redriven dead letters"))?;
            if DB::rows_affected(&result) != 1 {
                return Err(SinkError::RedriveConflict {
                    topic: topic.clone(),
                    partition: *partition,
                    offset: *offset,
                });
            }
        }
        // After the redriven letters' compare-and-set above: a redrive's own letters are
        // gone by now. A plain read of the range first (MySQL/MariaDB take gap locks for a
        // DELETE that finds nothing), then each letter found deleted by its key.
        if !batch.supersedes.is_empty() {
            let mut by_partition: std::collections::BTreeMap<(&str, i32), Vec<i64>> =
                Default::default();
            let duplicates: std::collections::HashSet<usize> =
                written.duplicates.iter().copied().collect();
            for (topic, partition, offset, input) in &batch.supersedes {
                if !duplicates.contains(input) {
                    by_partition
                        .entry((topic.as_str(), *partition))
                        .or_default()
                        .push(*offset);
                }
            }
            let find = format!(
                "SELECT source_offset FROM {} WHERE connector = {} AND source_topic = {} \
                 AND source_partition = {} AND source_offset >= {} AND source_offset <= {}",
                table.quoted(self.dialect),
                self.dialect.param(1),
                self.dialect.param(2),
                self.dialect.param(3),
                self.dialect.param(4),
                self.dialect.param(5)
            );
            let delete = self.dialect.delete_dead_letter(&table.name);
            for ((topic, partition), mut offsets) in by_partition {
                offsets.sort_unstable();
                let (Some(first), Some(last)) = (offsets.first(), offsets.last()) else {
                    continue;
                };
                let found: Vec<i64> = sqlx::query_scalar::<DB, i64>(AssertSqlSafe(find.clone()))
                    .bind(self.connector.clone())
                    .bind(topic.to_string())
                    .bind(partition)
                    .bind(*first)
                    .bind(*last)
                    .fetch_all(&mut *conn)
                    .await
                    .map_err(dlq_error("find superseded dead letters"))?;
                for offset in found {
                    if offsets.binary_search(&offset).is_err() {
                        continue;
                    }
                    let result = sqlx::query::<DB>(AssertSqlSafe(delete.clone()))
                        .bind(self.connector.clone())
                        .bind(topic.to_string())
                        .bind(partition)
                        .bind(offset)
                        .execute(&mut *conn)
                        .await
                        .map_err(dlq_error("remove superseded dead letters"))?;
                    written.superseded_letters += DB::rows_affected(&result);
                }
            }
        }
        let rows: Vec<Vec<SqlValue>> = batch
            .dead_letters
            .iter()
            .map(|letter| dead_letters::row(&self.connector, letter))
            .collect();
        if !rows.is_empty() {
            let runs = [Run::Write(rows.iter().map(Vec::as_slice).collect())];
            // Upsert: an at-least-once redelivery stores the same dead letter again.
            write_runs::<DB>(
                conn,
                self.dialect,
                table,
                WriteMode::Upsert,
                &runs,
                &super::db::postgres::copy::NO_COPY,
            )
            .await
            .map_err(dlq_error("write dead letters"))?;
        }
        Ok(written)
    }
}
