//! The control store's side of a connector's stored positions in `sluice_offsets`: read
//! (where a task resumes, what `sluice offsets show` prints), and forgotten or set by an
//! operator's reset with the producer ids and redrive markers past it.

use std::collections::HashMap;

use super::ControlStore;
use crate::sink::{READ_TIMEOUT, SinkError, StoredPositions, backend, each_pool};

impl ControlStore<'_> {
    /// The topics this connector has stored offsets of, in name order.
    pub async fn stored_topics(&self) -> Result<Vec<String>, SinkError> {
        let sql = format!(
            "SELECT DISTINCT topic FROM sluice_offsets WHERE connector = {} ORDER BY topic",
            self.dialect.param(1)
        );
        let read = async {
            each_pool!(self, pool, DB => {
                sqlx::query_scalar::<DB, String>(sqlx::AssertSqlSafe(sql))
                    .bind(self.connector.to_string())
                    .fetch_all(pool)
                    .await
            })
        };
        match tokio::time::timeout(READ_TIMEOUT, read).await {
            Ok(result) => result.map_err(|source| SinkError::Database {
                action: "read offsets",
                table: "sluice_offsets".into(),
                source,
            }),
            Err(_) => Err(SinkError::Timeout {
                action: "read offsets",
                table: "sluice_offsets".into(),
                after: READ_TIMEOUT,
            }),
        }
    }

    /// The stored `next_offset` of each partition of `topic` that has one.
    pub async fn read_offsets(&self, topic: &str) -> Result<HashMap<i32, i64>, SinkError> {
        self.read_positions(topic).await.map(|p| p.offsets)
    }

    /// The Kafka cluster ids stored with `topic`'s offsets (none for offsets stored before
    /// sluice kept them).
    pub async fn stored_clusters(&self, topic: &str) -> Result<Vec<String>, SinkError> {
        self.read_positions(topic).await.map(|p| p.clusters)
    }

    /// What is stored of `topic`'s positions, in one query: each partition's next offset,
    /// and the cluster and topic ids they were read from.
    pub async fn read_positions(&self, topic: &str) -> Result<StoredPositions, SinkError> {
        tokio::time::timeout(READ_TIMEOUT, self.read_positions_now(topic))
            .await
            .unwrap_or_else(|_| {
                Err(SinkError::Timeout {
                    action: "read offsets",
                    table: "sluice_offsets".into(),
                    after: READ_TIMEOUT,
                })
            })
    }

    async fn read_positions_now(&self, topic: &str) -> Result<StoredPositions, SinkError> {
        let sql = self.dialect.read_offsets();
        let rows = each_pool!(self, pool, DB => {
            backend::read_offsets::<DB>(pool, sql, self.connector, topic).await
        })
        .map_err(|source| SinkError::Database {
            action: "read offsets",
            table: "sluice_offsets".into(),
            source,
        })?;
        let mut stored = StoredPositions::default();
        for (partition, next, cluster, topic_id) in rows {
            stored.offsets.insert(partition, next);
            for (found, all) in [
                (cluster, &mut stored.clusters),
                (topic_id, &mut stored.topic_ids),
            ] {
                if let Some(found) = found.filter(|f| !all.contains(f)) {
                    all.push(found);
                }
            }
        }
        Ok(stored)
    }

    /// Forgets the stored offsets of `topic` (`sluice offsets reset`).
    pub async fn reset_offsets(&self, topic: &str) -> Result<u64, SinkError> {
        let sql = self.dialect.delete_offsets();
        let result = each_pool!(self, pool, DB => {
            backend::delete_offsets::<DB>(pool, sql, self.connector, topic).await
        });
        result.map_err(reset_error("sluice_offsets"))
    }
}

/// Where one partition goes in an operator's reset: the position `start` (P) where the
/// connector will next read it. The ids of `delivery.dedup` and the redrive markers first
/// recorded at or after P are forgotten with it, so that a replay writes again what it
/// reads again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetPoint {
    pub topic: String,
    pub partition: i32,
    /// P: the offset the connector reads next.
    pub start: i64,
}

/// What an operator's reset does to `sluice_offsets`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetsChange {
    /// Leaves them (an `at_least_once` connector resumes from its Kafka group).
    None,
    /// Forgets every stored offset of the connector (`DELETE …/offsets`).
    ForgetAll,
    /// Sets (`Some`) or forgets (`None`) the given partitions' offsets (`PATCH …/offsets`).
    Set(Vec<(String, i32, Option<i64>)>),
}

/// What a reset forgot, and what it left for the replay to decide.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Forgotten {
    /// Stored offsets removed or set.
    pub offsets: u64,
    /// Producer ids (`delivery.dedup`) first read at or after a partition's P, and ids
    /// stored before sluice kept their source (schema version 8), whose place is unknown.
    pub dedup_ids: u64,
    /// Redrive markers (`sluice_redriven`) of records at or after P.
    pub redrive_markers: u64,
    /// Dead letters in the dead-letter table of records at or after P. They stay: a letter
    /// is removed in the transaction that writes its record's row, so the replay removes
    /// those whose records now land, and a record that fails again keeps one letter.
    pub dead_letters_to_replay: u64,
}

fn reset_error(table: &'static str) -> impl Fn(sqlx::Error) -> SinkError {
    move |source| SinkError::Database {
        action: "reset offsets",
        table: table.into(),
        source,
    }
}

impl ControlStore<'_> {
    /// The (topic, partition) pairs that have ids or redrive markers of this connector:
    /// a reset of everything forgets those of partitions it has no P for.
    pub async fn remembered_partitions(&self) -> Result<Vec<(String, i32)>, SinkError> {
        let sql = format!(
            "SELECT source_topic, source_partition FROM sluice_dedup WHERE connector = {} \
             AND source_topic IS NOT NULL \
             UNION SELECT source_topic, source_partition FROM sluice_redriven WHERE connector = {}",
            self.dialect.param(1),
            self.dialect.param(2)
        );
        each_pool!(self, pool, DB => {
            sqlx::query_as::<DB, (String, i32)>(sqlx::AssertSqlSafe(sql))
                .bind(self.connector.to_string())
                .bind(self.connector.to_string())
                .fetch_all(pool)
                .await
        })
        .map_err(reset_error("sluice_dedup"))
    }

    /// An operator's reset, in one transaction: the offsets change, and the ids and
    /// redrive markers at or after each point's P are forgotten. Only for a connector
    /// stopped everywhere: it bypasses the compare-and-set.
    pub async fn reset(
        &self,
        change: &OffsetsChange,
        points: &[ResetPoint],
    ) -> Result<Forgotten, SinkError> {
        let d = self.dialect;
        let p = |n| d.param(n);
        let partition = d.quote_one("partition");
        let connector = self.connector.to_string();
        let dead_letter_table = self.dead_letter_table.map(|t| d.quote_table(&t.name));
        each_pool!(self, pool, DB => {
            let mut tx = pool
                .begin_with(d.begin())
                .await
                .map_err(reset_error("sluice_offsets"))?;
            let mut forgotten = Forgotten::default();
            match change {
                OffsetsChange::None => {}
                OffsetsChange::ForgetAll => {
                    let result = sqlx::query::<DB>(sqlx::AssertSqlSafe(format!(
                        "DELETE FROM sluice_offsets WHERE connector = {}",
                        p(1)
                    )))
                    .bind(connector.clone())
                    .execute(&mut *tx)
                    .await
                    .map_err(reset_error("sluice_offsets"))?;
                    forgotten.offsets = result.rows_affected();
                }
                OffsetsChange::Set(offsets) => {
                    let delete = format!(
                        "DELETE FROM sluice_offsets WHERE connector = {} AND topic = {} AND {partition} = {}",
                        p(1),
                        p(2),
                        p(3)
                    );
                    let insert = d.insert_offset();
                    for (topic, part, next) in offsets {
                        let result = sqlx::query::<DB>(sqlx::AssertSqlSafe(delete.clone()))
                            .bind(connector.clone())
                            .bind(topic.clone())
                            .bind(*part)
                            .execute(&mut *tx)
                            .await
                            .map_err(reset_error("sluice_offsets"))?;
                        forgotten.offsets += result.rows_affected();
                        if let Some(next) = next {
                            sqlx::query::<DB>(sqlx::AssertSqlSafe(insert.clone()))
                                .bind(connector.clone())
                                .bind(topic.clone())
                                .bind(*part)
                                .bind(*next)
                                // Cluster and topic ids: the connector's next batch stores them.
                                .bind(None::<String>)
                                .bind(None::<String>)
                                .execute(&mut *tx)
                                .await
                                .map_err(reset_error("sluice_offsets"))?;
                        }
                    }
                }
            }
            // Ids stored before sluice kept their source: their place is unknown, and
            // keeping them could pass over a replayed record. Only a reset of everything
            // forgets them (a reset of some partitions cannot tell which are theirs).
            let result = if *change != OffsetsChange::ForgetAll {
                None
            } else {
                Some(sqlx::query::<DB>(sqlx::AssertSqlSafe(format!(
                "DELETE FROM sluice_dedup WHERE connector = {} AND source_topic IS NULL",
                p(1)
            )))
            .bind(connector.clone())
            .execute(&mut *tx)
            .await
            .map_err(reset_error("sluice_dedup"))?)
            };
            forgotten.dedup_ids += result.map_or(0, |r| r.rows_affected());
            let from = |table: &str| {
                format!(
                    "FROM {table} WHERE connector = {} AND source_topic = {} AND source_partition = {} AND source_offset >= {}",
                    p(1),
                    p(2),
                    p(3),
                    p(4)
                )
            };
            for point in points {
                for (table, count) in [
                    ("sluice_dedup", &mut forgotten.dedup_ids),
                    ("sluice_redriven", &mut forgotten.redrive_markers),
                ] {
                    let result = sqlx::query::<DB>(sqlx::AssertSqlSafe(format!(
                        "DELETE {}",
                        from(table)
                    )))
                    .bind(connector.clone())
                    .bind(point.topic.clone())
                    .bind(point.partition)
                    .bind(point.start)
                    .execute(&mut *tx)
                    .await
                    .map_err(reset_error("sluice_dedup"))?;
                    *count += result.rows_affected();
                }
                if let Some(table) = &dead_letter_table {
                    let letters = sqlx::query_scalar::<DB, i64>(sqlx::AssertSqlSafe(format!(
                        "SELECT COUNT(*) {}",
                        from(table)
                    )))
                    .bind(connector.clone())
                    .bind(point.topic.clone())
                    .bind(point.partition)
                    .bind(point.start)
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(reset_error("dead letters"))?;
                    forgotten.dead_letters_to_replay += u64::try_from(letters).unwrap_or(0);
                }
            }
            tx.commit().await.map_err(reset_error("sluice_offsets"))?;
            Ok(forgotten)
        })
    }
}
