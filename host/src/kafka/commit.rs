//! Offsets committed to the Kafka consumer group: where a task resumes under
//! at-least-once, and only the progress and lag that Kafka's tools show under
//! exactly-once (the database holds the offsets then). Committed from the task's loop
//! (`task/actor.rs`) and, before partitions go, from the rebalance callback
//! (`context.rs`), both on the consumer's own thread.

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::record::Partition;

/// Commits each partition's `next` offset (the next record to read, Kafka's convention)
/// to the consumer group: synchronously with [`CommitMode::Sync`], which returns once the
/// group coordinator has taken them.
pub fn commit_offsets<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    commits: &[(Partition, i64)],
    mode: CommitMode,
) -> Result<(), KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), next) in commits {
        tpl.add_partition_offset(topic, *partition, Offset::Offset(*next))?;
    }
    consumer.commit(&tpl, mode)
}
