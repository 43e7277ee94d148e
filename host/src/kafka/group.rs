//! A connector's Kafka consumer group seen from outside: the committed offsets that
//! exactly-once connectors mirror for `kafka-consumer-groups`, Burrow and KEDA. When an
//! operator alters or resets the offsets stored in the sink database (the truth), the
//! group's copy follows, so that lag tools do not show the old positions. One client per
//! group serves every such call ([`outside_consumer`]).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use crate::config::{ConnectorConfig, KafkaConfig};

/// Longest [`log_ranges`] may take for all the partitions it is asked about.
const LOG_RANGES_BUDGET: Duration = Duration::from_secs(5);
/// How long an operation on the group may take.
const GROUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Commits `offsets` (topic, partition, next offset) to the connector's group, as a
/// consumer outside the group (the connector must be stopped: a group with members refuses
/// such commits).
pub fn commit_group_offsets(
    kafka: &KafkaConfig,
    brokers: &str,
    connector: &ConnectorConfig,
    offsets: &[(String, i32, i64)],
) -> Result<(), KafkaError> {
    if offsets.is_empty() {
        return Ok(());
    }
    let consumer = outside_consumer(kafka, brokers, connector)?;
    let mut list = TopicPartitionList::new();
    for (topic, partition, next) in offsets {
        list.add_partition_offset(topic, *partition, Offset::Offset(*next))?;
    }
    consumer.commit(&list, CommitMode::Sync)
}

/// Moves the connector's group to where the connector starts after its stored offsets are
/// forgotten: each partition's log start (or end, with `auto.offset.reset: latest`), so
/// that lag tools show the backlog the connector will read. Returns how many partitions
/// moved. The connector must be stopped (a group with members refuses such commits).
pub fn reset_group_offsets(
    kafka: &KafkaConfig,
    brokers: &str,
    connector: &ConnectorConfig,
) -> Result<usize, KafkaError> {
    let consumer = outside_consumer(kafka, brokers, connector)?;
    let mut list = TopicPartitionList::new();
    for (topic, partition, start) in starts(
        &consumer,
        kafka,
        &partitions(
            &consumer,
            &connector_topics(&*consumer, connector, GROUP_TIMEOUT)?,
        )?,
    )? {
        list.add_partition_offset(&topic, partition, Offset::Offset(start))?;
    }
    let moved = list.count();
    if moved > 0 {
        consumer.commit(&list, CommitMode::Sync)?;
    }
    Ok(moved)
}

/// Where a partition without a stored offset starts: its log start, or its end with
/// `auto.offset.reset: latest`. `only` limits it to some partitions (topic, partition);
/// `None` takes every partition of the connector's topics.
pub fn start_positions(
    kafka: &KafkaConfig,
    brokers: &str,
    connector: &ConnectorConfig,
    only: Option<&[(String, i32)]>,
) -> Result<Vec<(String, i32, i64)>, KafkaError> {
    let consumer = outside_consumer(kafka, brokers, connector)?;
    let all = match only {
        Some(only) => only.to_vec(),
        None => partitions(
            &consumer,
            &connector_topics(&*consumer, connector, GROUP_TIMEOUT)?,
        )?,
    };
    starts(&consumer, kafka, &all)
}

fn starts(
    consumer: &BaseConsumer,
    kafka: &KafkaConfig,
    partitions: &[(String, i32)],
) -> Result<Vec<(String, i32, i64)>, KafkaError> {
    let latest = crate::kafka::consumer::starts_at_end(kafka);
    partitions
        .iter()
        .map(|(topic, partition)| {
            let (low, high) = consumer.fetch_watermarks(topic, *partition, GROUP_TIMEOUT)?;
            Ok((topic.clone(), *partition, if latest { high } else { low }))
        })
        .collect()
}

/// An outside consumer unused this long is closed.
const OUTSIDE_IDLE: Duration = Duration::from_secs(60);

/// The outside consumers kept between calls, by their whole configuration (brokers, group,
/// settings): the admin API's offsets calls, which a script may make every few seconds,
/// reuse one client per group instead of starting a librdkafka client (its threads, its
/// connections to every broker) per call.
type Outside = std::collections::BTreeMap<Vec<(String, String)>, (Arc<BaseConsumer>, Instant)>;

fn outside_consumers() -> &'static Mutex<Outside> {
    static OUTSIDE: OnceLock<Mutex<Outside>> = OnceLock::new();
    OUTSIDE.get_or_init(|| Mutex::new(Outside::new()))
}

/// A consumer with the connector's settings and group that never joins it: for commits
/// and queries from outside the group. Kept for [`OUTSIDE_IDLE`] after its last use.
fn outside_consumer(
    kafka: &KafkaConfig,
    brokers: &str,
    connector: &ConnectorConfig,
) -> Result<Arc<BaseConsumer>, KafkaError> {
    let config = crate::kafka::consumer::consumer_config(kafka, brokers, connector, 0);
    let key: Vec<(String, String)> = config
        .config_map()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut cache = outside_consumers()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // Those unused for long (and not in use now) close.
    cache.retain(|_, (consumer, used)| {
        used.elapsed() < OUTSIDE_IDLE || Arc::strong_count(consumer) > 1
    });
    if let Some((consumer, used)) = cache.get_mut(&key) {
        *used = Instant::now();
        // Errors queued while it sat unused (a broker that went away and came back) are
        // not this call's; with no assignment, nothing else is queued.
        for _ in 0..1000 {
            if consumer.poll(Duration::ZERO).is_none() {
                break;
            }
        }
        return Ok(consumer.clone());
    }
    let consumer = Arc::new(config.create::<BaseConsumer>()?);
    cache.insert(key, (consumer.clone(), Instant::now()));
    Ok(consumer)
}

/// The connector's topics as the cluster has them now: `topics`, or every topic that
/// `topics_regex` matches.
pub fn connector_topics<C: rdkafka::consumer::ConsumerContext>(
    consumer: &impl Consumer<C>,
    connector: &ConnectorConfig,
    timeout: Duration,
) -> Result<Vec<String>, KafkaError> {
    if connector.topics_regex.is_none() {
        return Ok(connector.topics.clone());
    }
    let metadata = consumer.fetch_metadata(None, timeout)?;
    let mut topics: Vec<String> = metadata
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .filter(|t| connector.reads_topic(t))
        .collect();
    topics.sort();
    Ok(topics)
}

/// Every partition of the connector's topics (topic, partition), as the broker's metadata
/// has them now.
pub fn all_partitions(
    kafka: &KafkaConfig,
    brokers: &str,
    connector: &ConnectorConfig,
) -> Result<Vec<(String, i32)>, KafkaError> {
    let consumer = outside_consumer(kafka, brokers, connector)?;
    partitions(
        &consumer,
        &connector_topics(&*consumer, connector, GROUP_TIMEOUT)?,
    )
}

/// The log of each partition of `asked`: `(low, high)`, its first offset and the one after
/// its last, as the broker says now; `None` for one it did not answer.
pub fn log_ranges(
    kafka: &KafkaConfig,
    brokers: &str,
    connector: &ConnectorConfig,
    asked: &[(String, i32)],
) -> Vec<Option<(i64, i64)>> {
    let Ok(consumer) = outside_consumer(kafka, brokers, connector) else {
        return vec![None; asked.len()];
    };
    // All of them within LOG_RANGES_BUDGET: past it (a broker down, a leader moving) the
    // rest are not asked this time.
    let deadline = Instant::now() + LOG_RANGES_BUDGET;
    asked
        .iter()
        .map(|(topic, partition)| {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            consumer
                .fetch_watermarks(topic, *partition, left.min(GROUP_TIMEOUT))
                .ok()
        })
        .collect()
}

/// Every partition of `topics`, as the broker's metadata has them.
fn partitions(
    consumer: &BaseConsumer,
    topics: &[String],
) -> Result<Vec<(String, i32)>, KafkaError> {
    let mut all = Vec::new();
    for topic in topics {
        let metadata = consumer.fetch_metadata(Some(topic), GROUP_TIMEOUT)?;
        for found in metadata.topics() {
            all.extend(found.partitions().iter().map(|p| (topic.clone(), p.id())));
        }
    }
    Ok(all)
}

/// How many members the connector's group has now, every process's tasks together: the
/// ground truth of whether the connector runs anywhere.
pub fn members(
    kafka: &KafkaConfig,
    brokers: &str,
    connector: &ConnectorConfig,
) -> Result<usize, KafkaError> {
    let consumer = outside_consumer(kafka, brokers, connector)?;
    let group = connector.group_id();
    let groups = consumer.fetch_group_list(Some(&group), GROUP_TIMEOUT)?;
    Ok(groups
        .groups()
        .iter()
        .filter(|g| g.name() == group)
        .map(|g| g.members().len())
        .sum())
}

/// The group's committed offsets (topic, partition, next offset) of every partition of the
/// connector's topics that has one: where an `at_least_once` connector resumes.
pub fn committed_offsets(
    kafka: &KafkaConfig,
    brokers: &str,
    connector: &ConnectorConfig,
) -> Result<Vec<(String, i32, i64)>, KafkaError> {
    let consumer = outside_consumer(kafka, brokers, connector)?;
    let mut list = TopicPartitionList::new();
    for (topic, partition) in partitions(
        &consumer,
        &connector_topics(&*consumer, connector, GROUP_TIMEOUT)?,
    )? {
        list.add_partition(&topic, partition);
    }
    let committed = consumer.committed_offsets(list, GROUP_TIMEOUT)?;
    Ok(committed
        .elements()
        .iter()
        .filter_map(|e| match e.offset() {
            Offset::Offset(next) => Some((e.topic().to_string(), e.partition(), next)),
            _ => None,
        })
        .collect())
}
