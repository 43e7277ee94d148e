//! The source stage: one librdkafka consumer per task, in the connector's group, with
//! offsets that come from the sink database rather than from Kafka.
//!
//! Rebalances are handled by overriding [`ConsumerContext::rebalance`]: on a revocation the
//! task first finishes (or abandons) its in-flight batch, on an assignment it reads the
//! stored offsets and assigns *with* them. Nothing seeks inside a callback, and the same
//! code serves the eager and the cooperative-sticky protocols.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use crate::config::{ConnectorConfig, Guarantee, KafkaConfig, defaults};
use crate::record::{Headers, Incoming, Partition, Record};

pub use super::context::{RebalanceListener, SourceContext};
pub(crate) use crate::logging::Quiet;

/// A task's consumer.
pub type SourceConsumer = BaseConsumer<SourceContext>;

/// The librdkafka configuration of a task's consumer. The user's `kafka.properties` come
/// last but cannot turn auto-commit back on: offsets live in the sink.
pub fn consumer_config(
    kafka: &KafkaConfig,
    brokers: &str,
    connector: &ConnectorConfig,
    task: usize,
) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", connector.group_id())
        .set("client.id", format!("sluice-{}-{task}", connector.name))
        .set("auto.offset.reset", defaults::AUTO_OFFSET_RESET)
        .set("isolation.level", defaults::ISOLATION_LEVEL)
        .set("queued.min.messages", defaults::QUEUED_MIN_MESSAGES)
        .set("fetch.queue.backoff.ms", defaults::FETCH_QUEUE_BACKOFF_MS)
        .set(
            "queued.max.messages.kbytes",
            defaults::QUEUED_MAX_MESSAGES_KBYTES,
        )
        .set(
            "reconnect.backoff.max.ms",
            defaults::RECONNECT_BACKOFF_MAX_MS,
        )
        .set("enable.partition.eof", "false");
    for (key, value) in &kafka.properties {
        config.set(key, value);
    }
    config
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set_log_level(RDKafkaLogLevel::Info);
    if connector.delivery.guarantee == Guarantee::ExactlyOnce {
        // A partition without a stored offset is assigned at `fresh_start` explicitly; a
        // stored offset the log no longer has must reach the task as an error
        // (delivery.on_offset_out_of_range), never as librdkafka's silent reset.
        config.set("auto.offset.reset", "error");
    }
    config
}

/// Where a partition without a stored offset starts: the file's `auto.offset.reset`
/// (`earliest` by default) as an explicit position in `exactly_once`, never the Kafka
/// group's committed offset; `at_least_once` resumes from the group's.
pub fn fresh_start(kafka: &KafkaConfig, connector: &ConnectorConfig) -> Offset {
    if connector.delivery.guarantee == Guarantee::AtLeastOnce {
        return Offset::Invalid;
    }
    if starts_at_end(kafka) {
        Offset::End
    } else {
        Offset::Beginning
    }
}

/// Whether `auto.offset.reset` (default `earliest`) starts a partition without an offset
/// at the log's end.
pub fn starts_at_end(kafka: &KafkaConfig) -> bool {
    matches!(
        kafka
            .properties
            .get("auto.offset.reset")
            .map(String::as_str)
            .unwrap_or(defaults::AUTO_OFFSET_RESET),
        "latest" | "largest" | "end"
    )
}

/// The high watermark librdkafka last saw for a partition, from its fetch responses (no
/// request is made, so it is as fresh as the last fetch), or `None` before the first.
pub fn cached_high_watermark(
    consumer: &SourceConsumer,
    topic: &str,
    partition: i32,
) -> Option<i64> {
    let topic = std::ffi::CString::new(topic).ok()?;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client handle lives as long as `consumer`, which is borrowed; the topic
    // is a NUL-terminated string and the out pointers are live locals.
    let error = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (error == rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0)
        .then_some(high)
}

/// A partition's high watermark: librdkafka's cached one while the partition fetches, or,
/// when it has none or `ask` (a paused partition does not fetch, so its cached one goes
/// stale), asked of the broker (at most `LAG_QUERY_TIMEOUT`).
pub fn high_watermark(
    consumer: &SourceConsumer,
    topic: &str,
    partition: i32,
    ask: bool,
) -> Option<i64> {
    match cached_high_watermark(consumer, topic, partition) {
        Some(high) if !ask => Some(high),
        cached => consumer
            .fetch_watermarks(topic, partition, LAG_QUERY_TIMEOUT)
            .ok()
            .map(|(_, high)| high)
            .or(cached),
    }
}

/// Longest wait for a partition's high watermark from the broker.
const LAG_QUERY_TIMEOUT: Duration = Duration::from_millis(500);

/// What an error returned by `poll` means for the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollError {
    /// A partition's offset is not in its log (`auto.offset.reset=error` reports it):
    /// `delivery.on_offset_out_of_range` decides.
    OutOfRange,
    /// A topic or partition the broker does not know: fatal for a partition the task
    /// holds (deleted while assigned), a warning for one it only subscribed to.
    UnknownTopic,
    /// Authentication or authorization refused, or a fatal client error: retrying cannot
    /// help, the task fails with the reason.
    Fatal(&'static str),
    /// Anything else (a broker down, a timeout): librdkafka keeps retrying.
    Transient,
}

/// Classifies an error `poll` returned.
pub fn classify_poll_error(error: &KafkaError) -> PollError {
    use rdkafka::error::RDKafkaErrorCode as Code;
    let code = match error {
        KafkaError::MessageConsumptionFatal(_) => return PollError::Fatal("a fatal client error"),
        KafkaError::MessageConsumption(code) | KafkaError::Global(code) => *code,
        _ => return PollError::Transient,
    };
    match code {
        Code::AutoOffsetReset | Code::OffsetOutOfRange => PollError::OutOfRange,
        Code::UnknownTopicOrPartition | Code::UnknownTopic | Code::UnknownPartition => {
            PollError::UnknownTopic
        }
        Code::Authentication | Code::SaslAuthenticationFailed => {
            PollError::Fatal("authentication refused")
        }
        Code::TopicAuthorizationFailed
        | Code::GroupAuthorizationFailed
        | Code::ClusterAuthorizationFailed => PollError::Fatal("authorization refused"),
        Code::Fatal => PollError::Fatal("a fatal client error"),
        _ => PollError::Transient,
    }
}

/// Creates a task's consumer and subscribes it to the connector's topics.
pub fn subscribe(
    kafka: &KafkaConfig,
    brokers: &str,
    connector: &ConnectorConfig,
    task: usize,
    listener: Arc<dyn RebalanceListener>,
) -> Result<SourceConsumer, KafkaError> {
    let context = SourceContext {
        connector: connector.name.clone(),
        task,
        listener,
        quiet: Quiet::default(),
        commits_mirror: connector.delivery.guarantee == crate::config::Guarantee::ExactlyOnce,
    };
    let consumer: SourceConsumer =
        consumer_config(kafka, brokers, connector, task).create_with_context(context)?;
    // A `^…` entry is a pattern: librdkafka matches it against the cluster's topics, and
    // again at each metadata refresh (`topic.metadata.refresh.interval.ms`), so topics
    // created later join the subscription.
    let subscription = connector.subscription();
    let topics: Vec<&str> = subscription.iter().map(String::as_str).collect();
    consumer.subscribe(&topics)?;
    Ok(consumer)
}

/// Moves partitions that the task still owns to the given offsets (after an offset
/// conflict, a reset, or stored offsets read late): outside any callback, with the
/// protocol's own assign call. `None` is `fresh_start`. The task's other partitions stay
/// where they are fetching now.
pub fn reassign(
    consumer: &SourceConsumer,
    starts: &[(Partition, Option<i64>)],
    fresh_start: Offset,
) -> Result<(), KafkaError> {
    let start = |offset: &Option<i64>| offset.map_or(fresh_start, Offset::Offset);
    // A seek moves just these partitions and leaves the others where they are. It needs a
    // partition that is fetching; otherwise assign again.
    let seeks: Result<(), KafkaError> =
        starts
            .iter()
            .try_for_each(|((topic, partition), offset)| match start(offset) {
                Offset::Invalid => Err(KafkaError::Seek("no position to seek to".into())),
                offset => consumer.seek(
                    topic,
                    *partition,
                    offset,
                    std::time::Duration::from_secs(10),
                ),
            });
    if seeks.is_ok() {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    for ((topic, partition), offset) in starts {
        tpl.add_partition_offset(topic, *partition, start(offset))?;
    }
    if matches!(
        consumer.rebalance_protocol(),
        RebalanceProtocol::Cooperative
    ) {
        consumer.incremental_unassign(&tpl)?;
        consumer.incremental_assign(&tpl)
    } else {
        // The eager protocol assigns the whole list again: every other partition goes at
        // its current position, not at the offset of the last assign call (which would
        // rewind it, or send a partition that had no stored offset back to its start).
        let mut current = consumer.assignment()?;
        let positions = consumer.position()?;
        for element in positions.elements() {
            if let Offset::Offset(at) = element.offset() {
                current.set_partition_offset(
                    element.topic(),
                    element.partition(),
                    Offset::Offset(at),
                )?;
            }
        }
        for ((topic, partition), offset) in starts {
            current.set_partition_offset(topic, *partition, start(offset))?;
        }
        consumer.assign(&current)
    }
}

/// The offsets a partition's log holds now: `(low, high)`, the first one and the one after
/// the last.
pub fn log_range(
    consumer: &SourceConsumer,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> Result<(i64, i64), KafkaError> {
    consumer.fetch_watermarks(topic, partition, timeout)
}

/// Whether the broker says `topic` does not exist: absent from its metadata, or reported
/// as unknown. Any other answer (a leader election under way, say) is not a deletion.
pub fn topic_is_gone(
    consumer: &SourceConsumer,
    topic: &str,
    timeout: Duration,
) -> Result<bool, KafkaError> {
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let unknown = rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
    Ok(match metadata.topics().iter().find(|t| t.name() == topic) {
        None => true,
        Some(t) => t.error() == Some(unknown),
    })
}

/// The id of the cluster the consumer is connected to, when the broker gives one.
pub fn cluster_id(consumer: &SourceConsumer, timeout: Duration) -> Option<String> {
    consumer.client().fetch_cluster_id(timeout)
}

/// Where librdkafka is fetching each assigned partition from (`None`: not known yet).
pub fn fetch_positions(consumer: &SourceConsumer) -> Vec<(Partition, Option<i64>)> {
    consumer
        .position()
        .map(|list| {
            list.elements()
                .iter()
                .map(|e| {
                    let at = match e.offset() {
                        Offset::Offset(at) => Some(at),
                        _ => None,
                    };
                    ((e.topic().to_string(), e.partition()), at)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Pauses (or resumes) every assigned partition.
pub fn set_paused(consumer: &SourceConsumer, paused: bool) -> Result<(), KafkaError> {
    let assignment = consumer.assignment()?;
    if assignment.count() == 0 {
        return Ok(());
    }
    if paused {
        consumer.pause(&assignment)
    } else {
        consumer.resume(&assignment)
    }
}

/// The record of a message. A header name that is not UTF-8 (Kafka says header names are
/// strings; nothing stops a producer from sending bytes) is kept, lossily decoded, and the
/// record carries the defect, so that it fails alone.
pub fn to_record(message: &BorrowedMessage<'_>) -> Incoming {
    let (headers, defect) = headers_of(message);
    Incoming {
        record: Record {
            topic: message.topic().to_string(),
            partition: message.partition(),
            offset: message.offset(),
            timestamp: message.timestamp().to_millis(),
            key: message.key().map(<[u8]>::to_vec),
            value: message.payload().map(<[u8]>::to_vec),
            headers,
        },
        defect,
    }
}

/// A message's headers, read through librdkafka directly: rdkafka's own accessor panics on
/// a header name that is not UTF-8.
fn headers_of(message: &BorrowedMessage<'_>) -> (Headers, Option<String>) {
    use rdkafka::message::{BorrowedHeaders, Headers};
    let Some(headers) = message.headers() else {
        return (Vec::new(), None);
    };
    // `BorrowedHeaders` is librdkafka's header list itself (rdkafka casts it the same way).
    let native = headers as *const BorrowedHeaders as *const rdkafka::bindings::rd_kafka_headers_t;
    let mut out = Vec::with_capacity(headers.count());
    let mut defect = None;
    for index in 0..headers.count() {
        let mut name = std::ptr::null();
        let mut value = std::ptr::null();
        let mut size = 0;
        // SAFETY: `native` is the message's header list, alive while `message` is borrowed;
        // librdkafka fills in pointers into it, read before this function returns.
        let error = unsafe {
            rdkafka::bindings::rd_kafka_header_get_all(
                native, index, &mut name, &mut value, &mut size,
            )
        };
        if error != rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            break;
        }
        // SAFETY: a NUL-terminated name owned by the header list (see above).
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
        let value = (!value.is_null()).then(|| {
            // SAFETY: `size` bytes owned by the header list (see above).
            unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) }.to_vec()
        });
        let name = match std::str::from_utf8(name) {
            Ok(name) => name.to_string(),
            Err(_) => {
                let lossy = String::from_utf8_lossy(name).into_owned();
                defect.get_or_insert_with(|| {
                    format!("header name {lossy:?} (header {index}) is not UTF-8")
                });
                lossy
            }
        };
        out.push((name, value));
    }
    (out, defect)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connector() -> ConnectorConfig {
        let text = "kafka: { brokers: localhost:9092 }\nconnectors:\n  - name: c\n    topics: [t]\n    sink: { url: \"sqlite://x.db\", table: t, columns: { v: { from: /v, type: text } } }\n";
        let config = crate::config::load_str(text, &|_| None).expect("valid config");
        config.connectors.into_iter().next().expect("a connector")
    }

    #[test]
    fn poll_errors_are_classified() {
        use rdkafka::error::RDKafkaErrorCode as Code;
        let consumption = |code| classify_poll_error(&KafkaError::MessageConsumption(code));
        assert_eq!(consumption(Code::AutoOffsetReset), PollError::OutOfRange);
        assert_eq!(
            consumption(Code::UnknownTopicOrPartition),
            PollError::UnknownTopic
        );
        assert!(matches!(
            consumption(Code::TopicAuthorizationFailed),
            PollError::Fatal(_)
        ));
        assert!(matches!(
            consumption(Code::SaslAuthenticationFailed),
            PollError::Fatal(_)
        ));
        assert!(matches!(
            classify_poll_error(&KafkaError::MessageConsumptionFatal(Code::Fatal)),
            PollError::Fatal(_)
        ));
        assert_eq!(consumption(Code::AllBrokersDown), PollError::Transient);
        assert_eq!(
            consumption(Code::BrokerTransportFailure),
            PollError::Transient
        );
    }

    #[test]
    fn exactly_once_starts_new_partitions_itself_and_hears_of_out_of_range() {
        let kafka = KafkaConfig {
            brokers: "b:9092".into(),
            properties: Default::default(),
            schema_registry: None,
        };
        let mut connector = connector();
        let config = consumer_config(&kafka, "b:9092", &connector, 0);
        assert_eq!(config.get("auto.offset.reset"), Some("error"));
        assert_eq!(fresh_start(&kafka, &connector), Offset::Beginning);
        let mut latest = kafka.clone();
        latest
            .properties
            .insert("auto.offset.reset".into(), "latest".into());
        assert_eq!(fresh_start(&latest, &connector), Offset::End);
        connector.delivery.guarantee = Guarantee::AtLeastOnce;
        let config = consumer_config(&latest, "b:9092", &connector, 0);
        assert_eq!(config.get("auto.offset.reset"), Some("latest"));
        assert_eq!(fresh_start(&latest, &connector), Offset::Invalid);
    }

    #[test]
    fn consumers_read_committed_unless_the_file_says_otherwise() {
        let mut kafka = KafkaConfig {
            brokers: "b:9092".into(),
            properties: Default::default(),
            schema_registry: None,
        };
        let config = consumer_config(&kafka, "b:9092", &connector(), 0);
        assert_eq!(config.get("isolation.level"), Some("read_committed"));
        assert_eq!(config.get("enable.auto.commit"), Some("false"));
        kafka
            .properties
            .insert("isolation.level".into(), "read_uncommitted".into());
        let config = consumer_config(&kafka, "b:9092", &connector(), 0);
        assert_eq!(config.get("isolation.level"), Some("read_uncommitted"));
    }
}
