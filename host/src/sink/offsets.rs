//! Reading and forgetting a connector's stored positions in `sluice_offsets`.

use std::collections::HashMap;

use sqlx::{MySql, Postgres, Sqlite};

use super::backend;
use super::{Pool, READ_TIMEOUT, Sink, SinkError, StoredPositions, each_pool};

impl Sink {
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
            backend::read_offsets::<DB>(pool, sql, &self.connector, topic).await
        })
        .map_err(self.db_error("read offsets"))?;
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
        let result = match &self.pool {
            Pool::Postgres(p) => {
                backend::delete_offsets::<Postgres>(p, sql, &self.connector, topic).await
            }
            Pool::MySql(p) => {
                backend::delete_offsets::<MySql>(p, sql, &self.connector, topic).await
            }
            Pool::Sqlite(p) => {
                backend::delete_offsets::<Sqlite>(p, sql, &self.connector, topic).await
            }
        };
        result.map_err(self.db_error("reset offsets"))
    }
}
