//! `sluice_delivery`: the guarantee and Kafka group each connector last ran with, so that a
//! switch of guarantee seeds the other side's positions at the next start, and a renamed
//! connector (`renamed_from`) takes over what its old name stored.

use sqlx::AssertSqlSafe;

use super::{ControlStore, SinkError, each_pool};

/// What a connector last ran with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRow {
    /// `exactly_once` or `at_least_once`.
    pub guarantee: String,
    /// Its Kafka consumer group.
    pub group: String,
}

fn db_error(action: &'static str, table: &'static str) -> impl Fn(sqlx::Error) -> SinkError {
    move |source| SinkError::Database {
        action,
        table: table.into(),
        source,
    }
}

/// The tables whose rows are keyed by the connector's name, with what each holds.
const NAMED_TABLES: [&str; 5] = [
    "sluice_offsets",
    "sluice_dedup",
    "sluice_redriven",
    "sluice_control",
    "sluice_delivery",
];

impl ControlStore<'_> {
    /// What `connector` last ran with (`None`: it never ran since schema version 8).
    pub async fn read_delivery(&self, connector: &str) -> Result<Option<DeliveryRow>, SinkError> {
        let sql = format!(
            "SELECT guarantee, group_id FROM sluice_delivery WHERE connector = {}",
            self.dialect.param(1)
        );
        let row = each_pool!(self, pool, DB => {
            sqlx::query_as::<DB, (String, String)>(AssertSqlSafe(sql))
                .bind(connector.to_string())
                .fetch_optional(pool)
                .await
        })
        .map_err(db_error("read the delivery guarantee", "sluice_delivery"))?;
        Ok(row.map(|(guarantee, group)| DeliveryRow { guarantee, group }))
    }

    /// Records what this connector runs with now.
    pub async fn write_delivery(&self, row: &DeliveryRow) -> Result<(), SinkError> {
        let p = |n| self.dialect.param(n);
        let delete = format!("DELETE FROM sluice_delivery WHERE connector = {}", p(1));
        let insert = format!(
            "INSERT INTO sluice_delivery (connector, guarantee, group_id, updated_at) VALUES ({}, {}, {}, {})",
            p(1),
            p(2),
            p(3),
            p(4)
        );
        let error = db_error("record the delivery guarantee", "sluice_delivery");
        each_pool!(self, pool, DB => {
            let mut tx = pool.begin_with(self.dialect.begin()).await.map_err(&error)?;
            sqlx::query::<DB>(AssertSqlSafe(delete))
                .bind(self.connector.to_string())
                .execute(&mut *tx)
                .await
                .map_err(&error)?;
            sqlx::query::<DB>(AssertSqlSafe(insert))
                .bind(self.connector.to_string())
                .bind(row.guarantee.clone())
                .bind(row.group.clone())
                .bind(super::now_ms())
                .execute(&mut *tx)
                .await
                .map_err(&error)?;
            tx.commit().await.map_err(&error)
        })
    }

    /// Records `now` in place of `previous` (`None`: no row yet) only if the row still says
    /// `previous`, and with `offsets` (`Some`) replaces every stored offset of the
    /// connector in the same transaction. False when another process changed the row
    /// first: it did the seeding.
    pub async fn claim_delivery(
        &self,
        previous: Option<&DeliveryRow>,
        now: &DeliveryRow,
        offsets: Option<&[(String, i32, i64)]>,
    ) -> Result<bool, SinkError> {
        let p = |n| self.dialect.param(n);
        let error = db_error("record the delivery guarantee", "sluice_delivery");
        each_pool!(self, pool, DB => {
            let mut tx = pool.begin_with(self.dialect.begin()).await.map_err(&error)?;
            let claimed = match previous {
                Some(previous) => sqlx::query::<DB>(AssertSqlSafe(format!(
                    "UPDATE sluice_delivery SET guarantee = {}, group_id = {}, updated_at = {} \
                     WHERE connector = {} AND guarantee = {} AND group_id = {}",
                    p(1), p(2), p(3), p(4), p(5), p(6)
                )))
                .bind(now.guarantee.clone())
                .bind(now.group.clone())
                .bind(super::now_ms())
                .bind(self.connector.to_string())
                .bind(previous.guarantee.clone())
                .bind(previous.group.clone())
                .execute(&mut *tx)
                .await
                .map_err(&error)?
                .rows_affected()
                    == 1,
                None => match sqlx::query::<DB>(AssertSqlSafe(format!(
                    "INSERT INTO sluice_delivery (connector, guarantee, group_id, updated_at) VALUES ({}, {}, {}, {})",
                    p(1), p(2), p(3), p(4)
                )))
                .bind(self.connector.to_string())
                .bind(now.guarantee.clone())
                .bind(now.group.clone())
                .bind(super::now_ms())
                .execute(&mut *tx)
                .await
                {
                    Ok(_) => true,
                    Err(sqlx::Error::Database(e)) if e.is_unique_violation() => false,
                    Err(e) => return Err(error(e)),
                },
            };
            if !claimed {
                return Ok(false);
            }
            if let Some(offsets) = offsets {
                sqlx::query::<DB>(AssertSqlSafe(format!(
                    "DELETE FROM sluice_offsets WHERE connector = {}",
                    p(1)
                )))
                .bind(self.connector.to_string())
                .execute(&mut *tx)
                .await
                .map_err(&error)?;
                let insert = self.dialect.insert_offset();
                for (topic, part, next) in offsets {
                    sqlx::query::<DB>(AssertSqlSafe(insert.clone()))
                        .bind(self.connector.to_string())
                        .bind(topic.clone())
                        .bind(*part)
                        .bind(*next)
                        .bind(None::<String>)
                        .bind(None::<String>)
                        .execute(&mut *tx)
                        .await
                        .map_err(&error)?;
                }
            }
            tx.commit().await.map_err(&error)?;
            Ok(true)
        })
    }

    /// Whether `connector` has stored offsets or producer ids.
    pub async fn has_positions(&self, connector: &str) -> Result<bool, SinkError> {
        let sql = format!(
            "SELECT (SELECT COUNT(*) FROM sluice_offsets WHERE connector = {}) + \
             (SELECT COUNT(*) FROM sluice_dedup WHERE connector = {})",
            self.dialect.param(1),
            self.dialect.param(2)
        );
        let count = each_pool!(self, pool, DB => {
            sqlx::query_scalar::<DB, i64>(AssertSqlSafe(sql))
                .bind(connector.to_string())
                .bind(connector.to_string())
                .fetch_one(pool)
                .await
        })
        .map_err(db_error("read stored positions", "sluice_offsets"))?;
        Ok(count > 0)
    }

    /// Moves what `old` stored (offsets, producer ids, redrive markers, its operator's
    /// target, its guarantee, and its letters in this connector's dead-letter table) to this
    /// connector's name, in one transaction, and forgets `old`'s heartbeats. Returns how
    /// many rows moved. Only once `old` runs nowhere.
    pub async fn take_over(&self, old: &str) -> Result<u64, SinkError> {
        let p = |n| self.dialect.param(n);
        let mut tables: Vec<String> = NAMED_TABLES.iter().map(|t| t.to_string()).collect();
        if let Some(table) = self.dead_letter_table {
            tables.push(table.quoted(self.dialect));
        }
        let error = db_error(
            "take over a renamed connector's positions",
            "sluice_offsets",
        );
        each_pool!(self, pool, DB => {
            let mut tx = pool.begin_with(self.dialect.begin()).await.map_err(&error)?;
            let mut moved = 0;
            // A control or delivery row the new name has already (its operator stopped it
            // while it waited) wins over the old name's.
            for table in ["sluice_control", "sluice_delivery"] {
                let mine = sqlx::query_scalar::<DB, i64>(AssertSqlSafe(format!(
                    "SELECT COUNT(*) FROM {table} WHERE connector = {}",
                    p(1)
                )))
                .bind(self.connector.to_string())
                .fetch_one(&mut *tx)
                .await
                .map_err(&error)?;
                if mine > 0 {
                    sqlx::query::<DB>(AssertSqlSafe(format!(
                        "DELETE FROM {table} WHERE connector = {}",
                        p(1)
                    )))
                    .bind(old.to_string())
                    .execute(&mut *tx)
                    .await
                    .map_err(&error)?;
                }
            }
            for table in &tables {
                let result = sqlx::query::<DB>(AssertSqlSafe(format!(
                    "UPDATE {table} SET connector = {} WHERE connector = {}",
                    p(1),
                    p(2)
                )))
                .bind(self.connector.to_string())
                .bind(old.to_string())
                .execute(&mut *tx)
                .await
                .map_err(&error)?;
                moved += result.rows_affected();
            }
            sqlx::query::<DB>(AssertSqlSafe(format!(
                "DELETE FROM sluice_task_status WHERE connector = {}",
                p(1)
            )))
            .bind(old.to_string())
            .execute(&mut *tx)
            .await
            .map_err(&error)?;
            tx.commit().await.map_err(&error)?;
            Ok(moved)
        })
    }
}
