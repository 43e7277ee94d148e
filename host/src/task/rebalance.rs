//! What the task does when its partitions move: the consumer's rebalance callback calls
//! this listener, inside `poll` on the task thread. It may wait for a short read of the
//! stored offsets, never for an outage to end (the consumer would leave its group).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use super::in_flight::Settle;
use super::partitions::{PartitionState, queue_reassign};
use super::{Shared, TaskError};
use crate::config::Guarantee;
use crate::kafka::consumer::RebalanceListener;
use crate::record::Partition;

impl RebalanceListener for Shared {
    fn on_revoke(&self, partitions: &[Partition]) {
        let mut inner = self.lock();
        // The in-flight batch either commits (we still own its partitions until this
        // returns, and a compare-and-set fences it if someone took them already) or, when
        // the database is away, is given up.
        self.settle_in_flight(&mut inner, Settle::Finish);
        inner.drop_buffered(partitions);
        for partition in partitions {
            inner.partitions.remove(partition);
        }
        inner.reassign.retain(|p| !partitions.contains(p));
        inner.jumped.retain(|j| !partitions.contains(&j.partition));
    }

    fn on_assign(&self, partitions: &[Partition]) -> Vec<(Partition, Option<i64>)> {
        let mut stored: HashMap<String, HashMap<i32, i64>> = HashMap::new();
        // Topics whose stored offsets could not be read now (the database is away): their
        // partitions are read again from the loop, not here: a callback that waits out an
        // outage stops polling and gets the consumer thrown out of its group.
        let mut unknown: Vec<String> = Vec::new();
        if self.guarantee == Guarantee::ExactlyOnce {
            for (topic, _) in partitions {
                if stored.contains_key(topic) || unknown.contains(topic) {
                    continue;
                }
                // One short attempt: a database that does not answer at once is retried
                // from the loop.
                match self.read_offsets_once(topic) {
                    Ok(offsets) => {
                        stored.insert(topic.clone(), offsets);
                    }
                    Err(e) if e.is_transient() => {
                        tracing::warn!(topic, error = %e,
                            "cannot read stored offsets at assignment; its partitions wait, and polling goes on");
                        unknown.push(topic.clone());
                    }
                    Err(source) => {
                        self.lock().fatal = Some(TaskError::Offsets {
                            topic: topic.clone(),
                            source,
                        });
                        stored.insert(topic.clone(), HashMap::new());
                    }
                }
            }
        }
        let mut inner = self.lock();
        let mut waiting = Vec::new();
        let starts = partitions
            .iter()
            .map(|partition| {
                let start = stored
                    .get(&partition.0)
                    .and_then(|o| o.get(&partition.1))
                    .copied();
                inner
                    .partitions
                    .insert(partition.clone(), PartitionState::starting_at(start));
                if unknown.contains(&partition.0) {
                    waiting.push(partition.clone());
                } else {
                    tracing::info!(topic = %partition.0, partition = partition.1,
                        start = ?start, "resuming from stored offset");
                }
                (partition.clone(), start)
            })
            .collect();
        queue_reassign(&mut inner, waiting);
        starts
    }

    fn take_kafka_commits(&self) -> Vec<(Partition, i64)> {
        std::mem::take(&mut self.lock().kafka_commits)
    }

    fn failed(&self, error: rdkafka::error::KafkaError) {
        self.lock().fatal.get_or_insert(TaskError::Kafka(error));
    }

    fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed) || self.backpressure.load(Ordering::Relaxed)
    }
}
