//! What the task does when its partitions move: the consumer's rebalance callback calls
//! this listener, inside `poll` on the task thread. It may wait for a short read of the
//! stored offsets, never for an outage to end (the consumer would leave its group).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use super::in_flight::Settle;
use super::partitions::{PartitionState, queue_reassign};
use super::{Shared, TaskError};
use crate::config::{Guarantee, OutOfRange};
use crate::kafka::consumer::RebalanceListener;
use crate::record::Partition;
use rdkafka::Offset;

/// Why a topic's stored offsets are not positions in the log being read.
enum Foreign {
    /// They were read from another Kafka cluster (these ids).
    Cluster(Vec<String>),
    /// They were read from a topic of the same name that has been deleted and created
    /// again since.
    Topic { stored: String, current: String },
}

impl std::fmt::Display for Foreign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Foreign::Cluster(clusters) => {
                write!(f, "read from Kafka cluster {}", clusters.join(", "))
            }
            Foreign::Topic { stored, current } => write!(
                f,
                "read from topic id {stored}; the topic now has id {current} (deleted and created again)"
            ),
        }
    }
}

impl RebalanceListener for Shared {
    fn topics_without_ids(&self, topics: &[String]) -> Vec<String> {
        let known = self.topic_ids.lock().unwrap_or_else(|p| p.into_inner());
        if known.never_ask {
            return Vec::new();
        }
        topics
            .iter()
            .filter(|t| !known.asked.contains(*t))
            .cloned()
            .collect()
    }

    fn learn_topic_ids(&self, asked: &[String], ids: HashMap<String, String>) {
        self.learn_ids(asked, ids);
    }

    fn on_revoke(&self, partitions: &[Partition]) {
        let mut inner = self.lock();
        // The in-flight batch either commits (we still own its partitions until this
        // returns, and a compare-and-set fences it if someone took them already) or, when
        // the database is away, is given up.
        self.settle_in_flight(&mut inner, Settle::Finish);
        let dropped = inner.drop_buffered(partitions);
        for partition in partitions {
            inner.partitions.remove(partition);
            inner.mirrored.remove(partition);
        }
        // Under `sink.transactions: source` the partitions kept lost their buffered
        // records too (a transaction spans partitions): they go back to their stored
        // offsets.
        let kept: Vec<Partition> = dropped
            .into_iter()
            .filter(|p| !partitions.contains(p))
            .collect();
        if !kept.is_empty() {
            queue_reassign(&mut inner, kept);
        }
        inner.reassign.retain(|p| !partitions.contains(p));
        inner.jumped.retain(|j| !partitions.contains(&j.partition));
        // A topic the task no longer holds is asked for its id again when it comes back:
        // it may have been deleted and created again meanwhile.
        let gone: Vec<String> = partitions
            .iter()
            .map(|(topic, _)| topic.clone())
            .filter(|topic| !inner.partitions.keys().any(|(t, _)| t == topic))
            .collect();
        drop(inner);
        if !gone.is_empty() {
            self.forget_ids(&gone);
        }
    }

    fn on_assign(&self, partitions: &[Partition]) -> Vec<(Partition, Offset)> {
        self.metrics.rebalanced(self.task);
        let mut stored: HashMap<String, HashMap<i32, i64>> = HashMap::new();
        // Topics whose stored offsets came from another Kafka cluster than this one, or from
        // a topic of the same name that was deleted and created again since.
        let mut foreign: HashMap<String, Foreign> = HashMap::new();
        // Topics whose stored offsets could not be read now (the database is away): their
        // partitions are read again from the loop, not here: a callback that waits out an
        // outage stops polling and gets the consumer thrown out of its group.
        let mut unknown: Vec<String> = Vec::new();
        let cluster = self.cluster();
        if self.guarantee == Guarantee::ExactlyOnce {
            for (topic, _) in partitions {
                if stored.contains_key(topic) || unknown.contains(topic) {
                    continue;
                }
                // One short attempt: a database that does not answer at once is retried
                // from the loop.
                match self.read_stored_once(topic) {
                    Ok(found) => {
                        if let Some(current) = &cluster
                            && found.clusters.iter().any(|c| c != current)
                        {
                            foreign.insert(topic.clone(), Foreign::Cluster(found.clusters));
                        } else if let Some(current) = self.topic_id(topic)
                            && found.topic_ids.iter().any(|id| *id != current)
                        {
                            foreign.insert(
                                topic.clone(),
                                Foreign::Topic {
                                    stored: found.topic_ids.join(", "),
                                    current,
                                },
                            );
                        }
                        stored.insert(topic.clone(), found.offsets);
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
        let mut starts = Vec::with_capacity(partitions.len());
        for partition in partitions {
            let start = stored
                .get(&partition.0)
                .and_then(|o| o.get(&partition.1))
                .copied();
            let mut state = PartitionState::starting_at(start);
            let mut at = start.map_or(self.fresh_start, Offset::Offset);
            if let (Some(stored_at), Some(foreign)) = (start, foreign.get(&partition.0)) {
                // Offsets read from another cluster (a DR replica, a new cluster behind
                // the same name), or from a topic deleted and created again since: they are
                // not positions in this log.
                match self.out_of_range {
                    OutOfRange::Fail => {
                        inner.fatal.get_or_insert(match foreign {
                            Foreign::Cluster(clusters) => TaskError::ClusterMismatch {
                                topic: partition.0.clone(),
                                stored: clusters.join(", "),
                                current: cluster.clone().unwrap_or_default(),
                            },
                            Foreign::Topic { stored, current } => TaskError::TopicRecreated {
                                topic: partition.0.clone(),
                                stored: stored.clone(),
                                current: current.clone(),
                            },
                        });
                    }
                    policy => {
                        at = if policy == OutOfRange::Latest {
                            Offset::End
                        } else {
                            Offset::Beginning
                        };
                        // The compare-and-set still starts from the stored offset; where
                        // reading starts is only known at the first record.
                        state.position = None;
                        state.fresh = false;
                        self.metrics.offset_resets.inc();
                        tracing::warn!(topic = %partition.0, partition = partition.1, stored = stored_at,
                            why = %foreign, ?policy,
                            "stored offset is not a position in this log: reading from the log's start or end, as delivery.on_offset_out_of_range says");
                    }
                }
            }
            inner.partitions.insert(partition.clone(), state);
            // Exactly-once: the group is shown where the database stands, even if nothing
            // new is ever read here (the previous owner's last mirror may not have gone).
            if let (Some(stored_at), false) = (start, foreign.contains_key(&partition.0)) {
                inner.kafka_commits.insert(partition.clone(), stored_at);
            }
            if unknown.contains(&partition.0) {
                waiting.push(partition.clone());
            } else {
                tracing::info!(topic = %partition.0, partition = partition.1,
                    start = ?start, "resuming from stored offset");
            }
            starts.push((partition.clone(), at));
        }
        queue_reassign(&mut inner, waiting);
        starts
    }

    fn take_kafka_commits(&self) -> Vec<(Partition, i64)> {
        std::mem::take(&mut self.lock().kafka_commits)
            .into_iter()
            .collect()
    }

    fn mirror_refused(&self, refused: &[(Partition, i64)]) {
        if self.guarantee != Guarantee::ExactlyOnce {
            return;
        }
        let mut inner = self.lock();
        for (partition, next) in refused {
            // Sent again only for a partition still held, when nothing newer was sent
            // (offsets only grow while a task holds a partition) and nothing newer waits:
            // an older offset never overwrites a newer one.
            if inner
                .mirrored
                .get(partition)
                .is_none_or(|sent| sent <= next)
                && inner.partitions.contains_key(partition)
            {
                inner
                    .kafka_commits
                    .entry(partition.clone())
                    .or_insert(*next);
            }
        }
    }

    fn failed(&self, error: rdkafka::error::KafkaError) {
        self.lock().fatal.get_or_insert(TaskError::Kafka(error));
    }

    fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed) || self.backpressure.load(Ordering::Relaxed)
    }
}
