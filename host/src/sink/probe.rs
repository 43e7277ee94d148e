//! Finding the rows the database refuses: a batch that fails for a reason that is not
//! transient is split in halves under savepoints, in a transaction that is rolled back,
//! until each refusal is one operation. The task's delivery then handles those records
//! under the error policy and writes the rest.

use sqlx::{AssertSqlSafe, Executor, IntoArguments};

use std::sync::Arc;

use super::backend::Backend;
use super::error::{is_refusal, refused_message};
use super::routed::ReadyTable;
use super::{Sink, SinkError, WRITE_TIMEOUT, WriteBatch, dedup, each_pool};
use crate::map::{RowOp, TableRoutes};

/// A savepoint the probe for refused rows rolls back to.
const PROBE_SAVEPOINT: &str = "sluice_probe";

impl Sink {
    /// Finds the operations the database refuses (a constraint, a length, a value out of
    /// range), with its message for each, by splitting `ops` in halves under savepoints
    /// until each refusal is one operation. Nothing is kept: the transaction is rolled
    /// back. `Err` for a transient failure, or when the database cannot be probed.
    /// `routes` are the operations' tables (empty: the connector's table); a table that
    /// does not exist yet is not created here.
    pub async fn find_refused(
        &self,
        ops: &[RowOp],
        routes: &TableRoutes,
    ) -> Result<Vec<(usize, String)>, SinkError> {
        self.probe(ops, routes, None).await
    }

    /// [`find_refused`](Self::find_refused) for a batch: with `delivery.dedup`, the rows of
    /// records the transaction would skip as duplicates are not tried (a duplicate's row
    /// would be refused by the key its first copy wrote). Indices are into `batch.ops`.
    pub async fn find_refused_in(
        &self,
        batch: &WriteBatch,
    ) -> Result<Vec<(usize, String)>, SinkError> {
        self.probe(&batch.ops, &batch.routes, Some(batch)).await
    }

    /// The probe; with a `batch` that has producer ids, they are claimed first (and rolled
    /// back with the rest) and its duplicates' rows left out.
    async fn probe(
        &self,
        ops: &[RowOp],
        routes: &TableRoutes,
        batch: Option<&WriteBatch>,
    ) -> Result<Vec<(usize, String)>, SinkError> {
        let probe = async {
            let tables = self.ready_tables(routes, batch.is_some()).await?;
            let tables = &tables;
            each_pool!(self, pool, DB => {
                // Closed rather than given back if the probe is cancelled midway (see
                // `Checkout`).
                let mut checkout = super::Checkout::take_for_write(&self.pool, pool).await.map_err(self.db_error("begin"))?;
                let outcome = async {
                let conn: &mut <DB as sqlx::Database>::Connection = &mut checkout.conn;
                let mut tx = sqlx::Connection::begin_with(conn, self.dialect.begin())
                    .await
                    .map_err(self.db_error("begin"))?;
                if let Some(first) = super::db::of(self.dialect).probe_begins_with {
                    // Deferred constraints would only fail at a COMMIT the probe never runs.
                    sqlx::query::<DB>(first)
                        .execute(&mut *tx)
                        .await
                        .map_err(self.db_error("find refused rows"))?;
                }
                // Dropping the transaction rolls it back, with any ids claimed here.
                let Some(batch) = batch.filter(|b| !b.dedup.is_empty()) else {
                    return self.refused_in::<DB>(&mut tx, ops, routes, tables).await;
                };
                let skipped =
                    dedup::claim::<DB>(&mut tx, self.dialect, &self.connector, &batch.dedup)
                        .await?;
                let inputs: Vec<usize> = skipped.iter().map(|&p| batch.dedup[p].input).collect();
                // The kept operations, and where each is in `ops`.
                let keep: Vec<bool> = batch
                    .origins
                    .iter()
                    .map(|origin| inputs.binary_search(origin).is_err())
                    .collect();
                let (kept, at): (Vec<RowOp>, Vec<usize>) = ops
                    .iter()
                    .zip(&keep)
                    .enumerate()
                    .filter(|(_, (_, kept))| **kept)
                    .map(|(i, (op, _))| (op.clone(), i))
                    .unzip();
                let mut kept_routes = routes.clone();
                kept_routes.retain(&keep);
                let refused = self
                    .refused_in::<DB>(&mut tx, &kept, &kept_routes, tables)
                    .await?;
                Ok(refused.into_iter().map(|(i, message)| (at[i], message)).collect())
                }
                .await;
                checkout.ran_to_completion();
                outcome
            })
        };
        tokio::time::timeout(WRITE_TIMEOUT, probe)
            .await
            .unwrap_or_else(|_| {
                Err(SinkError::Timeout {
                    action: "find refused rows",
                    table: self.table.name.clone(),
                    after: WRITE_TIMEOUT,
                })
            })
    }

    async fn refused_in<DB>(
        &self,
        conn: &mut DB::Connection,
        ops: &[RowOp],
        routes: &TableRoutes,
        tables: &[Option<Arc<ReadyTable>>],
    ) -> Result<Vec<(usize, String)>, SinkError>
    where
        DB: Backend,
        DB::Connection: 'static,
        DB::Arguments: IntoArguments<DB>,
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    {
        let savepoint = |verb: &str| AssertSqlSafe(format!("{verb} {PROBE_SAVEPOINT}"));
        let db_error = self.db_error("find refused rows");
        let mut refused = Vec::new();
        // Ranges still to try, the next one on top: in record order, so that an earlier
        // row is in place when a later one is tried (a duplicate key refuses the later).
        let mut stack = vec![(0, ops.len())];
        while let Some((start, end)) = stack.pop() {
            if start >= end {
                continue;
            }
            sqlx::query::<DB>(savepoint("SAVEPOINT"))
                .execute(&mut *conn)
                .await
                .map_err(&db_error)?;
            match self
                .write_ops::<DB>(conn, ops, routes, tables, start..end)
                .await
                .map_err(|(_, error)| error)
            {
                Ok(()) => {}
                // Only a refusal of the rows themselves is put on them; a lock or
                // statement timeout, a full disk, a lost connection is the batch's.
                Err(error) if !is_refusal(&error) => return Err(db_error(error)),
                Err(error) => {
                    sqlx::query::<DB>(savepoint("ROLLBACK TO SAVEPOINT"))
                        .execute(&mut *conn)
                        .await
                        .map_err(&db_error)?;
                    if end - start == 1 {
                        refused.push((start, refused_message(&error)));
                    } else {
                        let middle = start + (end - start) / 2;
                        stack.push((middle, end));
                        stack.push((start, middle));
                    }
                }
            }
            sqlx::query::<DB>(savepoint("RELEASE SAVEPOINT"))
                .execute(&mut *conn)
                .await
                .map_err(&db_error)?;
        }
        Ok(refused)
    }
}
