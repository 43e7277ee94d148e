//! `connectors.yaml`: the structs it deserializes into, and how a file becomes a checked
//! [`Config`] (see [`load`]).
//!
//! Every default lives in [`defaults`]; the JSON Schema in `schemas/connectors.schema.json`
//! mirrors these structs and is what editors use for completion.

mod admin;
mod column_type;
mod connector;
mod dead_letter;
mod errors;
mod files;
mod formats;
mod interpolate;
mod load;
#[cfg(test)]
mod load_tests;
mod names;
mod origin;
mod problem;
mod redact;
mod routing;
mod schema_check;
mod scrub;
mod secret;
mod semantic;
mod shown;
mod sink;
mod sink_checks;
pub mod units;
mod yaml;

#[cfg(test)]
mod env_tests;
#[cfg(test)]
mod prop_tests;

use serde::Deserialize;

pub use column_type::{ColumnType, ElementType, MAX_DECIMAL_PRECISION, UnknownColumnType};
pub use connector::*;
pub use dead_letter::{DeadLetterDestination, MIN_SIGNING_KEY_BYTES, SigningKeys};
pub use errors::{ErrorPolicy, ErrorsConfig, IsolationConfig, RestartConfig, RetryConfig};
pub use formats::{Format, RegistryTls, SchemaRegistryConfig, Urls};
pub use load::{ConfigError, load_file, load_str};
pub use names::{ColumnNameRules, NameLimit, name_limit, table_name_problem};
pub use problem::Problem;
pub use redact::{is_secret_key, redact_url};
pub use routing::{
    CapturePattern, SourceField, TableFrom, TableTemplate, TemplatePart, TopicPattern,
};
pub use scrub::Scrubber;
pub use secret::{Properties, Secret, SecretUrl};
pub use semantic::{check_plugin_memory, check_plugin_timeout};
pub use shown::redact_document;
pub use sink::*;
use units::HumanDuration;

/// Every default value of `connectors.yaml`, in one place.
pub mod defaults {
    use std::time::Duration;

    /// Tasks (consumers) per connector.
    pub const TASKS: u32 = 1;
    /// Most records in one batch.
    pub const BATCH_MAX_RECORDS: usize = 5000;
    /// Most value bytes in one batch.
    pub const BATCH_MAX_BYTES: u64 = 4 * 1024 * 1024;
    /// How long a batch waits for more records before it is written.
    pub const BATCH_LINGER: Duration = Duration::from_millis(50);
    /// Where a partition with no stored offset starts.
    pub const AUTO_OFFSET_RESET: &str = "earliest";
    /// Debezium's default `unavailable.value.placeholder` (`sink.unavailable_value`).
    pub const UNAVAILABLE_VALUE: &str = "__debezium_unavailable_value";
    /// Records of aborted producer transactions never reach the pipeline; a consumer
    /// reads up to the last stable offset.
    pub const ISOLATION_LEVEL: &str = "read_committed";
    /// librdkafka's prefetch queue: its default (100k) halves the source's pace.
    pub const QUEUED_MIN_MESSAGES: &str = "200000";
    /// How long librdkafka waits to fetch again once its prefetch queue is full. Its
    /// default (1 s) idles a consumer that drains the queue faster than that: with a
    /// backlog the source ran at ~220k records/s, with 10 ms at ~380k (docs/performance.md).
    pub const FETCH_QUEUE_BACKOFF_MS: &str = "10";
    /// The prefetch queue's size bound per consumer: 32 MiB (librdkafka's default is 64)
    /// keeps a task's memory flat with a backlog at no cost in pace.
    pub const QUEUED_MAX_MESSAGES_KBYTES: &str = "32768";
    /// librdkafka's longest wait between reconnects to a broker (its default, 10 s, is
    /// most of the time a pipeline takes to resume after a broker comes back).
    pub const RECONNECT_BACKOFF_MAX_MS: &str = "1000";
    /// A plugin's memory cap.
    pub const PLUGIN_MEMORY: u64 = sluice_transform::Limits::DEFAULT_MEMORY_BYTES;
    /// A plugin's CPU deadline per batch.
    pub const PLUGIN_TIMEOUT: Duration = sluice_transform::Limits::DEFAULT_TIMEOUT;
    /// Most output records of one plugin call.
    pub const PLUGIN_MAX_OUTPUT_RECORDS: usize =
        sluice_transform::Limits::DEFAULT_MAX_OUTPUT_RECORDS;
    /// Most output bytes of one plugin call.
    pub const PLUGIN_MAX_OUTPUT_BYTES: u64 = sluice_transform::Limits::DEFAULT_MAX_OUTPUT_BYTES;
    /// Largest record accepted (key, value and headers): a larger one is a per-record failure.
    pub const MAX_RECORD_BYTES: u64 = 8 * 1024 * 1024;
    /// First wait before a transient failure is retried.
    pub const RETRY_INITIAL: Duration = Duration::from_millis(200);
    /// Longest wait between two attempts: a pipeline resumes within about this long of
    /// its database coming back.
    pub const RETRY_MAX: Duration = Duration::from_secs(5);
    /// How long transient failures are retried before the task fails.
    pub const RETRY_MAX_ELAPSED: Duration = Duration::from_secs(300);
    /// Wall-clock budget for isolating the failing records of one batch in a transform.
    pub const ISOLATION_MAX_TIME: Duration = Duration::from_secs(300);
    /// Failed transform calls allowed while isolating the failing records of one batch.
    pub const ISOLATION_MAX_FAILED_CALLS: usize = 64;
    /// First wait before a task that failed for a transient reason is started again.
    pub const RESTART_INITIAL: Duration = Duration::from_secs(1);
    /// Longest wait between two restarts of a task that keeps failing transiently.
    pub const RESTART_MAX: Duration = Duration::from_secs(300);
    /// How long `delivery.dedup` remembers a producer id: at least this long after it was
    /// written, by the sink database's clock.
    pub const DEDUP_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);
    /// `sink.version.from`: a Debezium event's source position.
    pub const VERSION_FROM: &str = "$position";
    /// `sink.version.column`.
    pub const VERSION_COLUMN: &str = "_sluice_version";
    /// `sink.version.remember_deletes`: as long as a compacted topic keeps its tombstones
    /// by default (`delete.retention.ms` is one day; a week leaves room for a replay).
    pub const REMEMBER_DELETES: Duration = Duration::from_secs(7 * 24 * 3600);
    /// Most connections a process holds to one database (one `sink.url`), shared by all
    /// its connectors: well below PostgreSQL's default `max_connections` of 100, so that
    /// several processes and the database's own clients fit beside it.
    pub const DATABASE_MAX_CONNECTIONS: u32 = 10;
    /// A database connection unused this long is closed.
    pub const DATABASE_IDLE: Duration = Duration::from_secs(60);
    /// Consumers of the seek-consumer pool.
    pub const POOL_SIZE: usize = 4;
    /// Longest wait for a consumer of the pool.
    pub const POOL_BORROW_TIMEOUT: Duration = Duration::from_secs(5);
    /// A pooled consumer unused this long is closed.
    pub const POOL_IDLE: Duration = Duration::from_secs(60);
    /// Group name: `sluice-<connector name>`.
    pub fn group(connector: &str) -> String {
        format!("sluice-{connector}")
    }
}

/// The ranges a value must lie in, where the type alone does not bound it.
pub mod bounds {
    use std::time::Duration;

    /// Shortest CPU deadline of a plugin call: below it epoch interruption (ticks of a
    /// few milliseconds) cannot keep time.
    pub const PLUGIN_TIMEOUT_MIN: Duration = Duration::from_millis(1);
    /// Longest CPU deadline of a plugin call: one batch that computes longer holds its
    /// partitions and the group's patience (a rebalance waits for it).
    pub const PLUGIN_TIMEOUT_MAX: Duration = Duration::from_secs(300);
    /// Smallest memory cap of a plugin: a component needs a few 64 KiB pages to start.
    pub const PLUGIN_MEMORY_MIN: u64 = 1024 * 1024;
    /// Largest memory cap of a plugin: a 32-bit WebAssembly memory cannot grow past 4 GiB.
    pub const PLUGIN_MEMORY_MAX: u64 = 4 * 1024 * 1024 * 1024;
    /// Shortest `admin.token` on an admin listener that other hosts can reach.
    pub const ADMIN_TOKEN_MIN_BYTES: usize = 16;
    /// Most consumers of the seek-consumer pool: each is a Kafka client with its own
    /// connections and threads, and the pool's permits are counted in a semaphore.
    pub const POOL_SIZE_MAX: usize = 256;
    /// Most connections to one database a process may hold.
    pub const DATABASE_MAX_CONNECTIONS_MAX: u32 = 1000;
    /// Longest Kafka topic name, in bytes (Kafka's own limit).
    pub const TOPIC_NAME_MAX: usize = 249;
}

/// The whole file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Kafka connection shared by all connectors.
    pub kafka: KafkaConfig,
    /// The connectors this process runs.
    pub connectors: Vec<ConnectorConfig>,
    /// The admin HTTP server (status, control, offsets, metrics, health); off when absent.
    #[serde(default)]
    pub admin: Option<AdminConfig>,
    /// The pool of seek consumers that `inspect`, `dry-run` and the admin API's record
    /// reads borrow.
    #[serde(default)]
    pub pool: PoolConfig,
    /// The connections to each sink database, shared by the connectors that write to it.
    #[serde(default)]
    pub databases: DatabasesConfig,
    /// The file as checked, `${VAR}`s resolved: what a reload compares (a rotated password
    /// is a change).
    #[serde(skip)]
    pub document: Document,
    /// The file as it is shown (the admin API's connector config): values that came from
    /// `${VAR}` as the file wrote them, literal secrets as `***`. Same shape as `document`.
    #[serde(skip)]
    pub shown: Document,
}

/// The admin HTTP server.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// `address:port` to listen on, e.g. `127.0.0.1:8083` (`0.0.0.0:8083` in a container).
    pub listen: String,
    /// When set, every endpoint but `/healthz` and `/readyz` requires
    /// `Authorization: Bearer <token>`.
    #[serde(default)]
    pub token: Option<Secret>,
    /// `address:port` of a second listener that serves only `GET /metrics`, `/healthz` and
    /// `/readyz`, without the token (nothing there is secret or changes state): what
    /// Prometheus scrapes and probes call. Off when absent.
    #[serde(default)]
    pub metrics_listen: Option<String>,
    /// A second token that allows only `GET` (and `HEAD`): for dashboards, scripts and
    /// status pages, which must not be able to stop anything.
    #[serde(default)]
    pub read_token: Option<Secret>,
    /// Serve HTTPS with this certificate and key instead of plain HTTP.
    #[serde(default)]
    pub tls: Option<AdminTls>,
}

/// HTTPS for the admin API: PEM files, read at start and at every reload that changes
/// `admin:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminTls {
    /// The server's certificate chain (PEM), leaf first.
    pub cert: std::path::PathBuf,
    /// The certificate's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: std::path::PathBuf,
    /// For the clients only (`sluice status`, `pause`, …): the CA certificate(s) (PEM)
    /// they trust for this server, e.g. the certificate itself when it is self-signed.
    /// Default: the web's public roots.
    #[serde(default)]
    pub ca: Option<std::path::PathBuf>,
}

/// The seek-consumer pool: assign-mode consumers, never in a group, never committing,
/// lent to one reader at a time.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Most consumers (and so most reads at once).
    #[serde(default = "pool_size_default")]
    pub size: usize,
    /// Longest wait for a free consumer before a read is refused.
    #[serde(default = "pool_borrow_timeout_default")]
    pub borrow_timeout: HumanDuration,
    /// A consumer unused this long is closed.
    #[serde(default = "pool_idle_default")]
    pub idle: HumanDuration,
}

fn pool_size_default() -> usize {
    defaults::POOL_SIZE
}
fn pool_borrow_timeout_default() -> HumanDuration {
    HumanDuration(defaults::POOL_BORROW_TIMEOUT)
}
fn pool_idle_default() -> HumanDuration {
    HumanDuration(defaults::POOL_IDLE)
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            size: pool_size_default(),
            borrow_timeout: pool_borrow_timeout_default(),
            idle: pool_idle_default(),
        }
    }
}

/// `databases:` the process's connections to its sink databases. Connectors whose
/// `sink.url` is the same share one pool of connections; each pool opens a connection only
/// when a write or a control read needs one, and holds at most `max_connections`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabasesConfig {
    /// Most connections this process holds to one database (one `sink.url`), for all the
    /// connectors that write to it: a task with a write in flight holds one, a control
    /// read or a cleaner one for a moment. More tasks than this wait for a connection.
    #[serde(default = "database_max_connections_default")]
    pub max_connections: u32,
    /// A connection unused this long is closed.
    #[serde(default = "database_idle_default")]
    pub idle: HumanDuration,
}

fn database_max_connections_default() -> u32 {
    defaults::DATABASE_MAX_CONNECTIONS
}
fn database_idle_default() -> HumanDuration {
    HumanDuration(defaults::DATABASE_IDLE)
}

impl Default for DatabasesConfig {
    fn default() -> Self {
        Self {
            max_connections: database_max_connections_default(),
            idle: database_idle_default(),
        }
    }
}

/// A configuration file as checked (JSON, `${VAR}`s resolved). Its `Debug` prints nothing
/// of it: it holds the secrets.
#[derive(Clone, Default, PartialEq)]
pub struct Document(pub serde_json::Value);

impl std::fmt::Debug for Document {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Document(..)")
    }
}

impl Config {
    /// The section of connector `name` as the file has it (`${VAR}`s resolved, secrets
    /// included): what a reload compares.
    pub fn connector_section(&self, name: &str) -> Option<&serde_json::Value> {
        self.document
            .0
            .get("connectors")?
            .as_array()?
            .iter()
            .find(|c| c.get("name").and_then(serde_json::Value::as_str) == Some(name))
    }

    /// The section of connector `name` as it is shown: each value that came from `${VAR}`
    /// as the file wrote it (`${MASK_SALT}`, `postgres://app:${PW}@db/x`), never its text;
    /// literal secrets as `***` (URL passwords, secret query parameters, values of secret
    /// keys). What the admin API shows.
    pub fn redacted_section(&self, name: &str) -> Option<serde_json::Value> {
        let connectors = self.document.0.get("connectors")?.as_array()?;
        let index = connectors
            .iter()
            .position(|c| c.get("name").and_then(serde_json::Value::as_str) == Some(name))?;
        self.shown.0.get("connectors")?.get(index).cloned()
    }
}

/// How to reach Kafka.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// `host:port[,host:port…]`, or `embedded` for an in-process mock cluster (demo, first run).
    pub brokers: String,
    /// librdkafka properties passed as they are (`security.protocol`, `sasl.mechanism`, …);
    /// the values of secret keys (`sasl.password`, …) never print.
    #[serde(default)]
    pub properties: Properties,
    /// The Schema Registry that `avro`, `protobuf` and `json_schema` formats fetch their
    /// schemas from (a connector's own `schema_registry` takes its place).
    #[serde(default)]
    pub schema_registry: Option<SchemaRegistryConfig>,
}

impl KafkaConfig {
    /// True when `brokers: embedded` asks for the in-process mock cluster.
    pub fn is_embedded(&self) -> bool {
        self.brokers.trim() == "embedded"
    }
}
