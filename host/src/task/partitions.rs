//! Partition bookkeeping: where each owned partition stands, and moving partitions back to
//! their stored offsets after an offset conflict or an assignment made while the database
//! was away. The rebalance callback that fills it is in [`super::rebalance`].

use std::collections::HashMap;
use std::time::Duration;

use super::{Inner, Shared, TaskError};
use crate::config::Guarantee;
use crate::deliver::DeliverError;
use crate::kafka::consumer::{self, SourceConsumer};
use crate::record::Partition;
use crate::retry::Retrying;
use crate::sink::SinkError;

/// Longest wait for one attempt at reading stored offsets where polling waits for it (an
/// assignment callback, the loop); past it the partitions wait and the loop tries again
/// later, polling meanwhile.
const OFFSETS_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// What a partition looks like to the task.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PartitionState {
    /// The stored next_offset (exactly-once): where the next batch's compare-and-set starts.
    pub(super) committed: Option<i64>,
    /// The offset after the last record buffered, to drop records seen twice.
    pub(super) position: Option<i64>,
    /// Its start is being (re-)read from the stored offsets: records that arrive meanwhile
    /// are dropped, the consumer is moved to the start once it is known.
    pub(super) pending: bool,
}

/// Moves `partitions` to their stored offsets at the loop's next turn; until then their
/// records are dropped.
pub(super) fn queue_reassign(inner: &mut Inner, partitions: Vec<Partition>) {
    for partition in partitions {
        if let Some(state) = inner.partitions.get_mut(&partition) {
            state.pending = true;
            if !inner.reassign.contains(&partition) {
                inner.reassign.push(partition);
            }
        }
    }
}

impl Inner {
    /// Forgets what was buffered of `partitions`: they are read again from where their
    /// stored offsets say.
    pub(super) fn drop_buffered(&mut self, partitions: &[Partition]) {
        self.buffer.drop_partitions(partitions);
        for partition in partitions {
            if let Some(state) = self.partitions.get_mut(partition) {
                state.position = state.committed;
            }
        }
    }
}

impl Shared {
    /// One attempt at reading a topic's stored offsets, within [`OFFSETS_READ_TIMEOUT`]:
    /// called where polling waits for it (an assignment, the loop), so it must not wait
    /// out an outage.
    pub(super) fn read_offsets_once(&self, topic: &str) -> Result<HashMap<i32, i64>, SinkError> {
        self.runtime.block_on(async {
            tokio::time::timeout(OFFSETS_READ_TIMEOUT, self.sink.read_offsets(topic))
                .await
                .unwrap_or(Err(SinkError::Timeout {
                    action: "read offsets",
                    table: "sluice_offsets".into(),
                    after: OFFSETS_READ_TIMEOUT,
                }))
        })
    }

    /// After an offset conflict, or an assignment while the database was away: read the
    /// stored offsets and move the partitions we still own there. A transient failure puts
    /// them back in the queue for a later turn (with backoff); polling goes on meanwhile.
    pub(super) fn reassign(
        &self,
        consumer: &SourceConsumer,
        partitions: &[Partition],
    ) -> Result<(), TaskError> {
        let mut stored: HashMap<&str, HashMap<i32, i64>> = HashMap::new();
        for (topic, _) in partitions {
            if stored.contains_key(topic.as_str()) {
                continue;
            }
            let read = if self.guarantee == Guarantee::ExactlyOnce {
                self.read_offsets_once(topic)
            } else {
                // At-least-once keeps no offsets in the database: the group's apply.
                Ok(HashMap::new())
            };
            match read {
                Ok(offsets) => {
                    stored.insert(topic, offsets);
                }
                Err(source) if source.is_transient() => {
                    return self.retry_reassign(partitions, source);
                }
                Err(source) => {
                    return Err(TaskError::Offsets {
                        topic: topic.clone(),
                        source,
                    });
                }
            }
        }
        let mut starts: Vec<(Partition, Option<i64>)> = partitions
            .iter()
            .map(|p| {
                (
                    p.clone(),
                    stored.get(p.0.as_str()).and_then(|o| o.get(&p.1)).copied(),
                )
            })
            .collect();
        {
            let mut inner = self.lock();
            if let Some(retrying) = inner.reassign_retrying.take() {
                tracing::info!(
                    attempts = retrying.attempts(),
                    "stored offsets readable again"
                );
            }
            starts.retain(|(p, _)| inner.partitions.contains_key(p));
            for (p, start) in &starts {
                inner.partitions.insert(
                    p.clone(),
                    PartitionState {
                        committed: *start,
                        position: *start,
                        pending: false,
                    },
                );
            }
        }
        if !starts.is_empty() {
            tracing::info!(?starts, "moving partitions to their stored offsets");
            consumer::reassign(consumer, &starts)?;
        }
        Ok(())
    }

    fn retry_reassign(&self, partitions: &[Partition], error: SinkError) -> Result<(), TaskError> {
        let mut inner = self.lock();
        if inner.reassign_retrying.is_none() {
            tracing::warn!(%error,
                "cannot read stored offsets yet; those partitions wait, retrying with backoff");
        }
        if let Err(elapsed) = Retrying::failed(&mut inner.reassign_retrying, &self.retry) {
            return Err(TaskError::RetriesExhausted {
                elapsed,
                source: DeliverError::Sink(error),
            });
        }
        queue_reassign(&mut inner, partitions.to_vec());
        Ok(())
    }
}
