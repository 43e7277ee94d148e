//! One connector's section of `connectors.yaml`: topics in, one table out, and everything
//! between (batching, transforms, delivery, errors; the sink is in `sink.rs`).

use std::path::PathBuf;

use serde::Deserialize;

use super::errors::ErrorsConfig;
use super::units::{ByteSize, HumanDuration};
use super::{Envelope, Format, Properties, SchemaRegistryConfig, SinkConfig, defaults};

/// One connector: topics in, one table out.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectorConfig {
    /// Unique name; it keys the stored offsets.
    pub name: String,
    /// Topics to consume. Exactly one of `topics` and `topics_regex`.
    #[serde(default)]
    pub topics: Vec<String>,
    /// A pattern of the topics to consume, matched from the start of a name: topics
    /// created later that match are picked up (librdkafka's `^` subscription).
    #[serde(default)]
    pub topics_regex: Option<super::TopicPattern>,
    /// Consumer group; default `sluice-<name>`.
    #[serde(default)]
    pub group: Option<String>,
    /// The connector's earlier name: once the connector of that name runs in no process,
    /// its stored offsets, producer ids, operator's target, redrive markers and dead
    /// letters move to this name in one transaction, and this connector starts from them.
    /// Without it, a reload refuses a rename.
    #[serde(default)]
    pub renamed_from: Option<String>,
    /// Consumers (threads) this process runs for the connector.
    #[serde(default = "tasks_default")]
    pub tasks: u32,
    /// How a record's value is read (docs/formats.md).
    #[serde(default)]
    pub format: Format,
    /// How a record's key is read; without it, as JSON where a tombstone needs the key,
    /// and as raw bytes for `$key`.
    #[serde(default)]
    pub key_format: Option<Format>,
    /// The Schema Registry of this connector's `avro`, `protobuf` and `json_schema`
    /// formats, in place of `kafka.schema_registry`.
    #[serde(default)]
    pub schema_registry: Option<SchemaRegistryConfig>,
    /// The change-event envelope around each value (docs/cdc.md): `debezium` or `opencdc`
    /// makes every record a change of one row, written by key (`sink.mode: upsert`).
    #[serde(default)]
    pub envelope: Envelope,
    /// When a batch is cut.
    #[serde(default)]
    pub batch: BatchConfig,
    /// The chain of WebAssembly transforms every batch passes through, in order.
    #[serde(default)]
    pub transforms: Vec<TransformConfig>,
    /// A JSON Schema file every value must satisfy after the transforms (`format: json`); a
    /// relative path is read from the directory of the configuration file.
    #[serde(default)]
    pub schema: Option<PathBuf>,
    /// Largest record accepted: key, value and headers together.
    #[serde(default = "max_record_bytes_default")]
    pub max_record_bytes: ByteSize,
    /// Where rows go.
    pub sink: SinkConfig,
    /// Delivery guarantee.
    #[serde(default)]
    pub delivery: DeliveryConfig,
    /// What happens to records that fail, and how long outages are waited out.
    #[serde(default)]
    pub errors: ErrorsConfig,
}

fn max_record_bytes_default() -> ByteSize {
    ByteSize(defaults::MAX_RECORD_BYTES)
}

fn tasks_default() -> u32 {
    defaults::TASKS
}

impl ConnectorConfig {
    /// Whether the connector reads `topic`: one of `topics`, or a name `topics_regex`
    /// matches.
    pub fn reads_topic(&self, topic: &str) -> bool {
        match &self.topics_regex {
            Some(pattern) => pattern.matches(topic),
            None => self.topics.iter().any(|t| t == topic),
        }
    }

    /// What the consumer subscribes to: the topics, or the pattern as librdkafka takes it.
    pub fn subscription(&self) -> Vec<String> {
        match &self.topics_regex {
            Some(pattern) => vec![pattern.subscription()],
            None => self.topics.clone(),
        }
    }

    /// The topics (or the pattern) as the file gives them, for messages.
    pub fn topics_label(&self) -> String {
        match &self.topics_regex {
            Some(pattern) => format!("topics matching {}", pattern.as_str()),
            None => self.topics.join(", "),
        }
    }

    /// Under `sink.transactions: source`: the transaction topic, Debezium's
    /// `<topic.prefix>.transaction`, the one of `topics` whose name ends so (`None` when
    /// none or several do: `validate` refuses that).
    pub fn transaction_topic(&self) -> Option<&str> {
        if self.sink.transactions != super::Transactions::Source {
            return None;
        }
        let mut found = self.topics.iter().filter(|t| t.ends_with(".transaction"));
        match (found.next(), found.next()) {
            (Some(topic), None) => Some(topic),
            _ => None,
        }
    }

    /// The consumer group: the configured one or `sluice-<name>`.
    pub fn group_id(&self) -> String {
        self.group
            .clone()
            .unwrap_or_else(|| defaults::group(&self.name))
    }

    /// The Schema Registry the connector reads schemas from: its `schema_registry`, when
    /// its value or key format uses one (a registry configured for formats that do not is
    /// never asked).
    pub fn registry_in_use(&self) -> Option<&SchemaRegistryConfig> {
        let uses = self.format.uses_registry()
            || self.key_format.as_ref().is_some_and(|f| f.uses_registry());
        self.schema_registry.as_ref().filter(|_| uses)
    }
}

/// When a batch is cut: whichever limit is reached first.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    /// Most records in a batch.
    #[serde(default = "max_records_default")]
    pub max_records: usize,
    /// Most value bytes in a batch.
    #[serde(default = "max_bytes_default")]
    pub max_bytes: ByteSize,
    /// Longest wait for more records once a batch has one.
    #[serde(default = "linger_default")]
    pub linger: HumanDuration,
}

fn max_records_default() -> usize {
    defaults::BATCH_MAX_RECORDS
}
fn max_bytes_default() -> ByteSize {
    ByteSize(defaults::BATCH_MAX_BYTES)
}
fn linger_default() -> HumanDuration {
    HumanDuration(defaults::BATCH_LINGER)
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            max_records: max_records_default(),
            max_bytes: max_bytes_default(),
            linger: linger_default(),
        }
    }
}

/// One WebAssembly transform of a connector's chain.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformConfig {
    /// Its name in the connector: errors and logs carry it.
    pub name: String,
    /// The component (`.wasm`, built for wasm32-wasip2); a relative path is read from the
    /// directory of the configuration file.
    pub plugin: PathBuf,
    /// Passed to the plugin's `init`, as strings; the values of secret keys never print.
    #[serde(default)]
    pub config: Properties,
    /// The sandbox's limits for this plugin.
    #[serde(default)]
    pub limits: TransformLimits,
}

/// Sandbox limits of one plugin.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransformLimits {
    /// Most linear memory of the instance.
    #[serde(default = "memory_default")]
    pub memory: ByteSize,
    /// CPU deadline of one call (one batch).
    #[serde(default = "timeout_default")]
    pub timeout: HumanDuration,
    /// Most output records of one batch.
    #[serde(default = "max_output_records_default")]
    pub max_output_records: usize,
    /// Most output bytes of one batch.
    #[serde(default = "max_output_bytes_default")]
    pub max_output_bytes: ByteSize,
}

fn memory_default() -> ByteSize {
    ByteSize(defaults::PLUGIN_MEMORY)
}
fn timeout_default() -> HumanDuration {
    HumanDuration(defaults::PLUGIN_TIMEOUT)
}
fn max_output_records_default() -> usize {
    defaults::PLUGIN_MAX_OUTPUT_RECORDS
}
fn max_output_bytes_default() -> ByteSize {
    ByteSize(defaults::PLUGIN_MAX_OUTPUT_BYTES)
}

impl Default for TransformLimits {
    fn default() -> Self {
        Self {
            memory: memory_default(),
            timeout: timeout_default(),
            max_output_records: max_output_records_default(),
            max_output_bytes: max_output_bytes_default(),
        }
    }
}

impl TransformConfig {
    /// The plugin host's view of this transform.
    pub fn spec(&self) -> sluice_transform::PluginSpec {
        sluice_transform::PluginSpec {
            name: self.name.clone(),
            path: self.plugin.clone(),
            config: self.config.expose().clone(),
            limits: sluice_transform::Limits {
                memory_bytes: self.limits.memory.0,
                timeout: self.limits.timeout.0,
                max_output_records: self.limits.max_output_records,
                max_output_bytes: self.limits.max_output_bytes.0,
            },
        }
    }
}

/// Delivery settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveryConfig {
    /// `exactly_once` (offsets in the sink database) or `at_least_once`.
    #[serde(default)]
    pub guarantee: Guarantee,
    /// What happens when a partition's stored offset is not in the log (retention overtook
    /// it, the topic was deleted and created again, another cluster): never a silent jump.
    #[serde(default)]
    pub on_offset_out_of_range: OutOfRange,
    /// What happens when a partition's records skip offsets.
    #[serde(default)]
    pub on_offset_gap: OnGap,
    /// Producer-duplicate detection: records that carry an id already written are skipped.
    #[serde(default)]
    pub dedup: Option<DedupConfig>,
}

/// `delivery.dedup`: detects the duplicates a producer wrote (a retry without idempotence,
/// a replay): the same message at two offsets, maybe in two partitions. The ids written
/// are kept in the sink database in the rows' transaction, so a duplicate is skipped
/// across restarts, rebalances and processes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DedupConfig {
    /// Where a record's id is, in the record as it arrived (before any transform):
    /// `header:NAME` (the header's value, UTF-8) or a JSON pointer into the value (`/id`;
    /// a string or an integer). A record without one is a per-record failure.
    pub id: DedupIdSource,
    /// How long an id is remembered: at least `window` after it was written, by the sink
    /// database's clock (a record's own timestamp does not count); older ids are cleaned
    /// up.
    #[serde(default = "dedup_window_default")]
    pub window: HumanDuration,
}

fn dedup_window_default() -> HumanDuration {
    HumanDuration(defaults::DEDUP_WINDOW)
}

/// Where a record's producer id is.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub enum DedupIdSource {
    /// `header:NAME`: the value of the record's (last) header named NAME.
    Header(String),
    /// `/json/pointer`: a string or an integer in the record's value.
    Pointer(String),
}

impl TryFrom<String> for DedupIdSource {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        if let Some(name) = text.strip_prefix("header:") {
            if name.is_empty() {
                return Err("\"header:\" names no header: write header:NAME".into());
            }
            return Ok(DedupIdSource::Header(name.to_string()));
        }
        if text.starts_with('/') {
            // RFC 6901: `~` only as `~0` (a `~`) or `~1` (a `/`).
            let bad_escape = text
                .match_indices('~')
                .any(|(at, _)| !matches!(text.as_bytes().get(at + 1), Some(b'0' | b'1')));
            if bad_escape {
                return Err(format!(
                    "\"{text}\" is not a JSON pointer: write ~0 for ~ and ~1 for /"
                ));
            }
            return Ok(DedupIdSource::Pointer(text));
        }
        Err(format!(
            "\"{text}\" is not an id source: write header:NAME or a JSON pointer such as /id"
        ))
    }
}

impl std::fmt::Display for DedupIdSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DedupIdSource::Header(name) => write!(f, "header:{name}"),
            DedupIdSource::Pointer(pointer) => f.write_str(pointer),
        }
    }
}

/// `delivery.on_offset_out_of_range`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutOfRange {
    /// The task fails with the topic, partition, stored offset and the log's range.
    #[default]
    Fail,
    /// Resume at the log's first offset; skipped offsets are logged and counted.
    Earliest,
    /// Resume at the log's end; skipped offsets are logged and counted.
    Latest,
}

/// `delivery.on_offset_gap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnGap {
    /// A warning with the range (at most one per 30 s per task), and a count.
    #[default]
    Warn,
    /// The task fails with the range; a gap of one offset only warns (a transaction's
    /// commit marker takes one offset the client never sees).
    Fail,
    /// Counted and logged at debug level: for compacted topics and transactional producers,
    /// whose logs have gaps by design.
    Ignore,
}

impl OnGap {
    /// The name as `connectors.yaml` spells it.
    pub fn name(self) -> &'static str {
        match self {
            OnGap::Warn => "warn",
            OnGap::Fail => "fail",
            OnGap::Ignore => "ignore",
        }
    }
}

/// Delivery guarantee.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Guarantee {
    /// Rows and offsets commit in one database transaction, fenced by a compare-and-set.
    #[default]
    ExactlyOnce,
    /// Rows commit in the database, then offsets commit to the Kafka consumer group (the
    /// Kafka Connect way): a crash between the two writes that batch again on restart.
    AtLeastOnce,
}
