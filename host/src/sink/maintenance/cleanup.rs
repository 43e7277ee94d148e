//! The cleanups a connector's runner runs every minute: the tombstones of deleted rows
//! past `sink.version.remember_deletes` and the producer ids past `delivery.dedup.window`.
//! Each removes in chunks, so that a large cleanup does not hold the connection (SQLite has
//! one) or many locks for long; a failure is tried again at the next round.

use sqlx::AssertSqlSafe;

use super::Maintenance;
use crate::config::ColumnType;
use crate::map::SqlValue;
use crate::sink::backend::Backend;
use crate::sink::dedup::db_error as dedup_error;
use crate::sink::{SinkError, db, each_pool, routed};

/// Tombstones removed per statement of a cleanup.
const CLEAN_CHUNK: i64 = 10_000;
/// Producer ids removed per statement of a cleanup.
const DEDUP_CLEAN_CHUNK: u64 = 10_000;
/// Longest wait for one cleanup of producer ids.
const CLEAN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

impl Maintenance<'_> {
    /// Removes the tombstones of this sink's table older than `window`; returns how many.
    /// With a table template: of every table this process has written so far (a table not
    /// written since the process started keeps its tombstones until it is).
    pub async fn clean_tombstones(&self, window: std::time::Duration) -> Result<u64, SinkError> {
        let mut removed = 0;
        for table in routed::written_table_names(self.table, self.routing) {
            removed += self.clean_tombstones_of(&table, window).await?;
        }
        Ok(removed)
    }

    async fn clean_tombstones_of(
        &self,
        table_name: &str,
        window: std::time::Duration,
    ) -> Result<u64, SinkError> {
        let now = chrono::Utc::now().timestamp_millis();
        let before = now - i64::try_from(window.as_millis()).unwrap_or(i64::MAX / 2);
        let d = self.dialect;
        // In chunks: a large cleanup does not hold the connection (SQLite has one) or take
        // many locks at once.
        let sql = (db::of(d).own_tables.clean_tombstones)(CLEAN_CHUNK.unsigned_abs());
        let mut removed = 0;
        loop {
            let sql = sql.clone();
            let table = table_name.to_string();
            let done = each_pool!(self, pool, DB => {
                let query = sqlx::query::<DB>(AssertSqlSafe(sql));
                let query = DB::bind_value(query, &SqlValue::Text(table), ColumnType::Text);
                let query = DB::bind_value(query, &SqlValue::Int(before), ColumnType::Bigint);
                query.execute(pool).await.map(|r| DB::rows_affected(&r))
            })
            .map_err(self.db_error("clean up tombstones"))?;
            removed += done;
            if done < CLEAN_CHUNK as u64 {
                return Ok(removed);
            }
        }
    }

    /// How many tombstones this sink's table has (for tests and `sluice offsets show`).
    pub async fn tombstones(&self) -> Result<i64, SinkError> {
        let sql = format!(
            "SELECT COUNT(*) FROM sluice_tombstones WHERE table_name = {}",
            self.dialect.param(1)
        );
        let table = self.table.name.clone();
        each_pool!(self, pool, DB => {
            let query = sqlx::query::<DB>(AssertSqlSafe(sql));
            let query = DB::bind_value(query, &SqlValue::Text(table), ColumnType::Text);
            let row = query.fetch_one(pool).await.map_err(self.db_error("count tombstones"))?;
            DB::int_at(&row, 0).map_err(self.db_error("count tombstones"))
        })
    }

    /// Removes the ids of `delivery.dedup` written more than `window` ago, by the sink
    /// database's clock. Ids that a process of the previous schema version stored (no
    /// `written_at`) are stamped now first, so they too are kept at least `window` after
    /// they were written. Returns how many were removed.
    pub async fn clean_dedup(&self, window: std::time::Duration) -> Result<u64, SinkError> {
        let window = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let dialect = self.dialect;
        let now = dialect.now_ms();
        let clean = async {
            each_pool!(self, pool, DB => {
                sqlx::query::<DB>(AssertSqlSafe(format!(
                    "UPDATE sluice_dedup SET written_at = {now} WHERE connector = {} AND written_at IS NULL",
                    dialect.param(1)
                )))
                .bind(self.connector.to_string())
                .execute(pool)
                .await
                .map_err(dedup_error("clean up producer ids"))?;
                // In chunks: a large cleanup does not hold the connection (SQLite has one)
                // or many locks for long.
                let sql = (db::of(dialect).own_tables.clean_dedup)(now, DEDUP_CLEAN_CHUNK);
                let mut removed = 0;
                loop {
                    let result = sqlx::query::<DB>(AssertSqlSafe(sql.clone()))
                        .bind(self.connector.to_string())
                        .bind(window)
                        .execute(pool)
                        .await
                        .map_err(dedup_error("clean up producer ids"))?;
                    let gone = <DB as Backend>::rows_affected(&result);
                    removed += gone;
                    if gone < DEDUP_CLEAN_CHUNK {
                        return Ok(removed);
                    }
                }
            })
        };
        tokio::time::timeout(CLEAN_TIMEOUT, clean)
            .await
            .unwrap_or_else(|_| {
                Err(SinkError::Timeout {
                    action: "clean up producer ids",
                    table: "sluice_dedup".into(),
                    after: CLEAN_TIMEOUT,
                })
            })
    }

    /// How many producer ids this connector keeps (for tests and checks).
    pub async fn dedup_ids(&self) -> Result<i64, SinkError> {
        let sql = format!(
            "SELECT COUNT(*) FROM sluice_dedup WHERE connector = {}",
            self.dialect.param(1)
        );
        each_pool!(self, pool, DB => {
            sqlx::query_scalar::<DB, i64>(AssertSqlSafe(sql))
                .bind(self.connector.to_string())
                .fetch_one(pool)
                .await
        })
        .map_err(dedup_error("count producer ids"))
    }
}
