//! One read through a borrowed consumer: a partition's records from a position, at most a
//! given number, up to the log's end as it was when the read began.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use super::{Borrowed, ConsumerPool, PoolError};
use crate::kafka::consumer::{PollError, classify_poll_error};
use crate::record::Incoming;

/// How long one metadata or offsets request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Where a read starts in a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At this offset.
    Offset(i64),
    /// At the first record whose timestamp is at or after this (ms since the epoch).
    Timestamp(i64),
    /// This many records before the log's end.
    FromEnd(i64),
}

/// Why a read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error("topic {topic} does not exist on {cluster}")]
    UnknownTopic { topic: String, cluster: String },
    #[error("topic {topic} has no partition {partition} (it has {partitions})")]
    UnknownPartition {
        topic: String,
        partition: i32,
        partitions: usize,
    },
    #[error(
        "offset {offset} is outside {topic}/{partition}'s log, which holds offsets {low}..{high} (the end, {high}, is where the next record will be)"
    )]
    OutOfRange {
        topic: String,
        partition: i32,
        offset: i64,
        low: i64,
        high: i64,
    },
    #[error("cannot {action} on {cluster}: {source}")]
    Kafka {
        action: &'static str,
        cluster: String,
        source: KafkaError,
    },
    #[error(
        "{topic}/{partition}: no record from offset {from} within {after:?}, though the log's end is {high}"
    )]
    TimedOut {
        topic: String,
        partition: i32,
        from: i64,
        high: i64,
        after: Duration,
    },
}

impl ReadError {
    /// The reader's mistake (a topic, partition or offset that is not there), not the
    /// cluster's or the pool's.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            ReadError::UnknownTopic { .. }
                | ReadError::UnknownPartition { .. }
                | ReadError::OutOfRange { .. }
        )
    }
}

impl ConsumerPool {
    /// The partitions of `topic`.
    pub async fn partitions(self: &Arc<Self>, topic: &str) -> Result<Vec<i32>, ReadError> {
        let mut borrowed = self.borrow().await?;
        let topic = topic.to_string();
        let cluster = self.cluster.clone();
        blocking(move || partitions_of(&mut borrowed, &topic, &cluster)).await
    }

    /// The first offset `topic`/`partition`'s log still holds, and its end (where the next
    /// record will be).
    pub async fn watermarks(
        self: &Arc<Self>,
        topic: &str,
        partition: i32,
    ) -> Result<(i64, i64), ReadError> {
        let mut borrowed = self.borrow().await?;
        let topic = topic.to_string();
        let cluster = self.cluster.clone();
        blocking(move || {
            let partitions = partitions_of(&mut borrowed, &topic, &cluster)?;
            if !partitions.contains(&partition) {
                return Err(ReadError::UnknownPartition {
                    topic,
                    partition,
                    partitions: partitions.len(),
                });
            }
            borrowed
                .consumer()
                .fetch_watermarks(&topic, partition, REQUEST_TIMEOUT)
                .map_err(|source| ReadError::Kafka {
                    action: "read the partition's offsets",
                    cluster: cluster.clone(),
                    source,
                })
        })
        .await
    }

    /// Up to `limit` records of `topic`/`partition` from `start`, stopping at the log's end
    /// as it is when the read begins; `wait` bounds the wait for records the log says it
    /// has.
    pub async fn read(
        self: &Arc<Self>,
        topic: &str,
        partition: i32,
        start: Start,
        limit: usize,
        wait: Duration,
    ) -> Result<Vec<Incoming>, ReadError> {
        self.read_bounded(topic, partition, start, limit, u64::MAX, wait)
            .await
            .map(|(records, _)| records)
    }

    /// As [`read`](Self::read), and at most `max_bytes` of keys, values and headers (the
    /// first record always, whatever its size): `true` beside the records when the bound
    /// cut the read short.
    pub async fn read_bounded(
        self: &Arc<Self>,
        topic: &str,
        partition: i32,
        start: Start,
        limit: usize,
        max_bytes: u64,
        wait: Duration,
    ) -> Result<(Vec<Incoming>, bool), ReadError> {
        let mut borrowed = self.borrow().await?;
        let topic = topic.to_string();
        let cluster = self.cluster.clone();
        blocking(move || {
            let partitions = partitions_of(&mut borrowed, &topic, &cluster)?;
            if !partitions.contains(&partition) {
                return Err(ReadError::UnknownPartition {
                    topic,
                    partition,
                    partitions: partitions.len(),
                });
            }
            let result = read_range(
                borrowed.consumer(),
                &topic,
                partition,
                start,
                Bound {
                    records: limit,
                    bytes: max_bytes,
                },
                wait,
                &cluster,
            );
            // Whatever happened, the consumer goes back without an assignment.
            if borrowed.consumer().unassign().is_err()
                || matches!(result, Err(ReadError::Kafka { .. }))
            {
                borrowed.mark_broken();
            }
            result
        })
        .await
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ReadError> + Send + 'static,
) -> Result<T, ReadError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|_| Err(ReadError::Pool(PoolError::Closed)))
}

/// The partitions of `topic`: the borrow's validation too. A consumer that cannot get
/// metadata is replaced by a new one, once.
fn partitions_of(
    borrowed: &mut Borrowed,
    topic: &str,
    cluster: &str,
) -> Result<Vec<i32>, ReadError> {
    let metadata = match borrowed
        .consumer()
        .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
    {
        Ok(metadata) => metadata,
        Err(first) => {
            tracing::debug!(%cluster, error = %first, "a pooled consumer could not get metadata; replacing it");
            borrowed.replace()?;
            borrowed
                .consumer()
                .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
                .map_err(|source| {
                    borrowed.mark_broken();
                    ReadError::Kafka {
                        action: "read the topic's metadata",
                        cluster: cluster.to_string(),
                        source,
                    }
                })?
        }
    };
    let unknown = || ReadError::UnknownTopic {
        topic: topic.to_string(),
        cluster: cluster.to_string(),
    };
    let found = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .ok_or_else(unknown)?;
    if found.error().is_some() || found.partitions().is_empty() {
        return Err(unknown());
    }
    let mut partitions: Vec<i32> = found.partitions().iter().map(|p| p.id()).collect();
    partitions.sort_unstable();
    Ok(partitions)
}

/// Most records and bytes (keys, values, headers) of one read.
struct Bound {
    records: usize,
    bytes: u64,
}

fn read_range(
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
    start: Start,
    bound: Bound,
    wait: Duration,
    cluster: &str,
) -> Result<(Vec<Incoming>, bool), ReadError> {
    let limit = bound.records;
    let kafka = |action: &'static str| {
        move |source| ReadError::Kafka {
            action,
            cluster: cluster.to_string(),
            source,
        }
    };
    let (low, high) = consumer
        .fetch_watermarks(topic, partition, REQUEST_TIMEOUT)
        .map_err(kafka("read the partition's offsets"))?;
    let from = match start {
        Start::Offset(offset) => {
            if offset < low || offset > high {
                return Err(ReadError::OutOfRange {
                    topic: topic.to_string(),
                    partition,
                    offset,
                    low,
                    high,
                });
            }
            offset
        }
        Start::FromEnd(n) => (high - n.max(0)).max(low),
        Start::Timestamp(ms) => {
            let mut query = TopicPartitionList::new();
            query
                .add_partition_offset(topic, partition, Offset::Offset(ms))
                .map_err(kafka("look up a timestamp"))?;
            let found = consumer
                .offsets_for_times(query, REQUEST_TIMEOUT)
                .map_err(kafka("look up a timestamp"))?;
            match found.find_partition(topic, partition).map(|p| p.offset()) {
                Some(Offset::Offset(offset)) => offset.max(low),
                // No record at or after the time: the read starts at the end.
                _ => high,
            }
        }
    };
    let wanted = usize::try_from(high - from).unwrap_or(0).min(limit);
    if wanted == 0 {
        return Ok((Vec::new(), false));
    }
    // Errors queued while the consumer sat idle (a broker that went away and came back)
    // are not this read's.
    while let Some(Err(e)) = consumer.poll(Duration::ZERO) {
        tracing::debug!(%cluster, error = %e, "an error queued before this read");
    }
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, partition, Offset::Offset(from))
        .map_err(kafka("assign the partition"))?;
    consumer
        .assign(&assignment)
        .map_err(kafka("assign the partition"))?;
    let mut records = Vec::with_capacity(wanted);
    let mut bytes = 0u64;
    let deadline = Instant::now() + wait;
    while records.len() < wanted {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReadError::TimedOut {
                topic: topic.to_string(),
                partition,
                from: records
                    .last()
                    .map_or(from, |r: &Incoming| r.record.offset + 1),
                high,
                after: wait,
            });
        }
        match consumer.poll(left.min(Duration::from_millis(200))) {
            None => {}
            Some(Ok(message)) => {
                let incoming = crate::kafka::consumer::to_record(&message);
                let r = &incoming.record;
                if r.topic != topic || r.partition != partition {
                    // Not this read's (nothing else is assigned; never trusted anyway).
                    continue;
                }
                let offset = r.offset;
                if offset >= from && offset < high {
                    let size = incoming.record.payload_bytes();
                    if !records.is_empty() && bytes.saturating_add(size) > bound.bytes {
                        return Ok((records, true));
                    }
                    bytes = bytes.saturating_add(size);
                    records.push(incoming);
                }
                if offset + 1 >= high {
                    break;
                }
            }
            // The end of what can be read: with read_committed, `high` is the last stable
            // offset, and a transaction's commit marker before it is never delivered.
            Some(Err(KafkaError::PartitionEOF(p))) if p == partition => break,
            Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => match classify_poll_error(&e) {
                PollError::OutOfRange => {
                    return Err(ReadError::OutOfRange {
                        topic: topic.to_string(),
                        partition,
                        offset: from,
                        low,
                        high,
                    });
                }
                // A broker reconnecting, an error left over from before this read: the
                // client retries; the deadline bounds the wait.
                PollError::Transient => {
                    tracing::debug!(%cluster, error = %e, "the pooled consumer reports an error; reading on");
                }
                PollError::UnknownTopic | PollError::Fatal(_) => {
                    return Err(kafka("read records")(e));
                }
            },
        }
    }
    Ok((records, false))
}
