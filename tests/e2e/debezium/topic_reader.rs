//! The records Debezium wrote, read back from the broker.

use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};

use crate::harness::unique;

/// One record read back from a topic.
#[derive(Clone, Debug)]
pub struct Record {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    /// The value as JSON (JsonConverter's `{"schema", "payload"}`); `None` for a tombstone.
    pub fn value_json(&self) -> Option<serde_json::Value> {
        self.value
            .as_ref()
            .map(|v| serde_json::from_slice(v).expect("a JSON value"))
    }

    /// The key as JSON; `None` for a null key (a truncate's).
    pub fn key_json(&self) -> Option<serde_json::Value> {
        self.key
            .as_ref()
            .map(|k| serde_json::from_slice(k).expect("a JSON key"))
    }

    /// `payload.op` of a JsonConverter value (`r`, `c`, `u`, `d`, `t`), `None` for a
    /// tombstone.
    pub fn op(&self) -> Option<String> {
        self.value_json()
            .and_then(|v| v["payload"]["op"].as_str().map(str::to_string))
    }
}

/// Reads partition 0 of each of `topics` from its start until `done` says that what was
/// read is enough, or `timeout` passes (then returns what it has). Topics that do not exist
/// yet are waited for.
pub async fn read_until(
    bootstrap: &str,
    topics: &[String],
    timeout: Duration,
    done: impl Fn(&[Record]) -> bool + Send + 'static,
) -> Vec<Record> {
    let mut reader = TopicReader::new(bootstrap, topics);
    reader.read_until(timeout, done).await;
    reader.into_records()
}

/// A reader of partition 0 of some topics from their start, that keeps what it read: a
/// test reads a little after each change. Topics that do not exist yet (Connect creates
/// them as it first writes to them) are assigned once they do. Polls on a blocking thread,
/// so that the test's runtime stays free (its Schema Registry, say).
pub struct TopicReader {
    state: Option<ReaderState>,
}

struct ReaderState {
    consumer: BaseConsumer,
    topics: Vec<String>,
    assigned: Vec<String>,
    records: Vec<Record>,
}

impl TopicReader {
    pub fn new(bootstrap: &str, topics: &[String]) -> TopicReader {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", unique("dbz-reader"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            // Connect creates the topics as it writes; the reader must not.
            .set("allow.auto.create.topics", "false")
            .set("topic.metadata.refresh.interval.ms", "500")
            .create()
            .expect("consumer");
        TopicReader {
            state: Some(ReaderState {
                consumer,
                topics: topics.to_vec(),
                assigned: Vec::new(),
                records: Vec::new(),
            }),
        }
    }

    /// Every record read so far, in the order read.
    pub fn records(&self) -> &[Record] {
        &self.state.as_ref().expect("reader state").records
    }

    pub fn into_records(mut self) -> Vec<Record> {
        self.state.take().expect("reader state").records
    }

    /// Reads on until `done(every record read so far)`, or `timeout` passes; returns
    /// whether `done` said so.
    pub async fn read_until(
        &mut self,
        timeout: Duration,
        done: impl Fn(&[Record]) -> bool + Send + 'static,
    ) -> bool {
        let mut state = self.state.take().expect("reader state");
        let (state, finished) = tokio::task::spawn_blocking(move || {
            let finished = state.read(timeout, done);
            (state, finished)
        })
        .await
        .expect("reader thread");
        self.state = Some(state);
        finished
    }

    /// Reads on until every record its topics hold now is read (each partition up to its
    /// high watermark), or `timeout` passes; returns whether it got there. Topics are
    /// fetched side by side, so a record seen on one topic says nothing of another's:
    /// after a last change's record, this reads what came before it elsewhere.
    pub async fn read_to_end(&mut self, timeout: Duration) -> bool {
        let mut state = self.state.take().expect("reader state");
        let (state, finished) = tokio::task::spawn_blocking(move || {
            state.assign_existing();
            let ends = state.ends();
            let finished = state.read(timeout, move |records| {
                ends.iter().all(|(topic, partition, high)| {
                    *high == 0
                        || records.iter().any(|r| {
                            r.topic == *topic && r.partition == *partition && r.offset >= high - 1
                        })
                })
            });
            (state, finished)
        })
        .await
        .expect("reader thread");
        self.state = Some(state);
        finished
    }
}

impl ReaderState {
    fn read(&mut self, timeout: Duration, done: impl Fn(&[Record]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.assigned.len() < self.topics.len() {
                self.assign_existing();
            }
            if done(&self.records) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            if self.assigned.is_empty() {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            match self.consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(e)) => eprintln!("reader: {e}"),
                Some(Ok(message)) => {
                    let headers = message
                        .headers()
                        .map(|h| {
                            h.iter()
                                .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                                .collect()
                        })
                        .unwrap_or_default();
                    self.records.push(Record {
                        topic: message.topic().to_string(),
                        partition: message.partition(),
                        offset: message.offset(),
                        key: message.key().map(<[u8]>::to_vec),
                        value: message.payload().map(<[u8]>::to_vec),
                        headers,
                    });
                }
            }
        }
    }

    /// `(topic, partition, high watermark)` of every partition of the assigned topics.
    fn ends(&self) -> Vec<(String, i32, i64)> {
        let metadata = self
            .consumer
            .fetch_metadata(None, Duration::from_secs(5))
            .expect("metadata");
        let mut ends = Vec::new();
        for topic in metadata.topics() {
            if !self.assigned.iter().any(|t| t == topic.name()) {
                continue;
            }
            for partition in topic.partitions() {
                let (_, high) = self
                    .consumer
                    .fetch_watermarks(topic.name(), partition.id(), Duration::from_secs(5))
                    .expect("watermarks");
                ends.push((topic.name().to_string(), partition.id(), high));
            }
        }
        ends
    }

    /// Assigns the topics that exist now (a fetch of a missing one errs); those assigned
    /// before go on after the last record read.
    fn assign_existing(&mut self) {
        let Ok(metadata) = self.consumer.fetch_metadata(None, Duration::from_secs(5)) else {
            return;
        };
        let ready: Vec<String> = self
            .topics
            .iter()
            .filter(|topic| {
                metadata.topics().iter().any(|t| {
                    t.name() == topic.as_str() && t.error().is_none() && !t.partitions().is_empty()
                })
            })
            .cloned()
            .collect();
        if ready.len() <= self.assigned.len() {
            return;
        }
        let mut list = rdkafka::TopicPartitionList::new();
        for topic in &ready {
            let next = self
                .records
                .iter()
                .filter(|r| &r.topic == topic)
                .map(|r| r.offset + 1)
                .max();
            let offset = next.map_or(rdkafka::Offset::Beginning, rdkafka::Offset::Offset);
            list.add_partition_offset(topic, 0, offset)
                .expect("partition offset");
        }
        self.consumer.assign(&list).expect("assign");
        self.assigned = ready;
    }
}
