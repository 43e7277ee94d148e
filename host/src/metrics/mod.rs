//! The process's metrics, in Prometheus's names (`GET /metrics` on the admin server).
//!
//! [`Metrics`] holds every family, registered once per process. A connector takes its
//! [`ConnectorMetrics`]: the counters labelled with its name, and handles for the labels
//! only known later (task, topic, partition, plugin, state). Counters are atomics: the
//! task threads count without a lock, and a scrape reads them as they are.
//!
//! Every metric is documented in `docs/operations.md`; a new one goes there too.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

mod connector;
mod process;
mod schema_registry;
#[cfg(test)]
mod tests;

pub use schema_registry::{schema_registry_observer, set_cached_schemas};

pub use connector::{BatchStage, ConnectorMetrics, Consumed};

/// The window of the status API's rows per second.
pub const RATE_WINDOW: Duration = Duration::from_secs(30);

/// The content type of [`Metrics::render`]'s text (OpenMetrics, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectorLabel {
    connector: String,
}

/// A per-record failure's counter: why it was passed over (`reason`, for skips) and its
/// failure class (empty for a skip that is no failure, `nothing_to_write`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabel {
    connector: String,
    reason: String,
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabel {
    connector: String,
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabel {
    connector: String,
    task: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    connector: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StepLabel {
    connector: String,
    step: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StageLabel {
    connector: String,
    stage: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabel {
    connector: String,
    task: String,
    topic: String,
    partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    connector: String,
    task: String,
    state: String,
}

/// An offset gap's counter: the connector's `delivery.on_offset_gap` when it was counted.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GapLabel {
    connector: String,
    policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabel {
    cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolStateLabel {
    cluster: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabel {
    connector: String,
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginFailureLabel {
    connector: String,
    plugin: String,
    kind: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds_histogram() -> Histogram {
    // 1 ms .. about 65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

fn latency_histogram() -> Histogram {
    // 5 ms .. about 44 minutes: a pipeline keeping up, and one catching up on a backlog.
    Histogram::new(exponential_buckets(0.005, 2.0, 20))
}

fn records_histogram() -> Histogram {
    // 1 .. about 1M records.
    Histogram::new(exponential_buckets(1.0, 4.0, 11))
}

/// Every metric family of the process.
pub struct Metrics {
    registry: Registry,
    /// `process_*`, the Prometheus client conventions: no `sluice_` prefix.
    process: Registry,
    ready: Gauge,
    record_latency: HistogramFamily<ConnectorLabel>,
    consumed: Family<TaskLabel, Counter>,
    rows_written: Family<ConnectorLabel, Counter>,
    filtered: Family<ConnectorLabel, Counter>,
    skipped: Family<FailureLabel, Counter>,
    dead_letters: Family<ClassLabel, Counter>,
    duplicates: Family<ConnectorLabel, Counter>,
    committed: Family<ConnectorLabel, Counter>,
    batches: Family<ConnectorLabel, Counter>,
    lag: Family<PartitionLabel, Gauge>,
    unread_partitions: Family<ConnectorLabel, Gauge>,
    batch_duration: HistogramFamily<StageLabel>,
    batch_records: HistogramFamily<ConnectorLabel>,
    retries: Family<ReasonLabel, Counter>,
    conflicts: Family<ConnectorLabel, Counter>,
    offset_gaps: Family<GapLabel, Counter>,
    offset_resets: Family<ConnectorLabel, Counter>,
    offsets_skipped: Family<ConnectorLabel, Counter>,
    schema_changes: Family<StepLabel, Counter>,
    rebalances: Family<TaskLabel, Counter>,
    task_restarts: Family<TaskLabel, Counter>,
    task_state: Family<StateLabel, Gauge>,
    plugin_call: HistogramFamily<PluginLabel>,
    plugin_failures: Family<PluginFailureLabel, Counter>,
    pool_consumers: Family<PoolStateLabel, Gauge>,
    pool_waiting: Family<ClusterLabel, Gauge>,
    pool_created: Family<ClusterLabel, Counter>,
    pool_evicted: Family<ClusterLabel, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics(..)")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

macro_rules! register {
    ($registry:ident, $name:literal, $help:literal, $family:expr) => {{
        let family = $family;
        $registry.register($name, $help, family.clone());
        family
    }};
}

impl Metrics {
    /// Every family, registered under the `sluice_` prefix.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("sluice");
        let r = &mut registry;
        Self {
            consumed: register!(
                r,
                "records_consumed",
                "Records read from Kafka",
                Family::default()
            ),
            rows_written: register!(
                r,
                "rows_written",
                "Row operations (inserts, upserts, updates, deletes) committed to the sink table",
                Family::default()
            ),
            filtered: register!(
                r,
                "records_filtered",
                "Records a transform dropped (answered with no record); their offsets commit",
                Family::default()
            ),
            skipped: register!(
                r,
                "records_skipped",
                "Records passed over: reason nothing_to_write (a tombstone on a table without key, class empty) or errors_policy (a failed record under errors.policy: skip, by its failure class)",
                Family::default()
            ),
            dead_letters: register!(
                r,
                "dead_letters",
                "Failed records stored or produced as dead letters, by failure class",
                Family::default()
            ),
            duplicates: register!(
                r,
                "duplicates_skipped",
                "Records skipped as producer duplicates: their delivery.dedup id was written before",
                Family::default()
            ),
            committed: register!(
                r,
                "records_committed",
                "Records whose batch committed (as rows, deletes, dead letters, skips or drops)",
                Family::default()
            ),
            batches: register!(r, "batches", "Batches committed", Family::default()),
            lag: register!(
                r,
                "consumer_lag",
                "Records behind: the partition's high watermark minus its stored next offset; every partition of the connector's topics, task=\"none\" for one no task reads",
                Family::default()
            ),
            unread_partitions: register!(
                r,
                "unread_partitions",
                "Partitions of the connector's topics that no task has read for longer than a rebalance takes (session.timeout.ms plus 15 s); 0 while the connector is stopped",
                Family::default()
            ),
            batch_duration: register!(
                r,
                "batch_duration_seconds",
                "Time a batch spends in each stage: poll (first record to cut), transform, map, write (the whole delivery), commit",
                HistogramFamily::<StageLabel>::new_with_constructor(
                    seconds_histogram as fn() -> Histogram
                )
            ),
            record_latency: register!(
                r,
                "record_latency_seconds",
                "Time from each record's Kafka timestamp to the commit of its batch (records without a timestamp are left out)",
                HistogramFamily::<ConnectorLabel>::new_with_constructor(
                    latency_histogram as fn() -> Histogram
                )
            ),
            ready: register!(
                r,
                "ready",
                "1 when the process is ready (every connector made its first attempt to start, as /readyz answers), 0 before; set at each scrape",
                Gauge::default()
            ),
            batch_records: register!(
                r,
                "batch_records",
                "Records per committed batch",
                HistogramFamily::<ConnectorLabel>::new_with_constructor(
                    records_histogram as fn() -> Histogram
                )
            ),
            retries: register!(
                r,
                "retries",
                "Transient failures retried, by reason: database, dead_letter_topic, stored_offsets, transform_chain, schema_registry, connect",
                Family::default()
            ),
            conflicts: register!(
                r,
                "offset_conflicts",
                "Batches rolled back because another task had moved the partition on (the compare-and-set)",
                Family::default()
            ),
            offset_gaps: register!(
                r,
                "offset_gaps",
                "Times a partition's offsets jumped (compaction, transaction markers, or a broker that skipped records), by the connector's delivery.on_offset_gap: warn, fail or ignore",
                Family::default()
            ),
            offset_resets: register!(
                r,
                "offset_resets",
                "Partitions moved by delivery.on_offset_out_of_range: earliest or latest",
                Family::default()
            ),
            offsets_skipped: register!(
                r,
                "offsets_skipped",
                "Offsets passed over by such resets (records the log no longer had)",
                Family::default()
            ),
            schema_changes: register!(
                r,
                "schema_changes",
                "Statements sluice ran to change a derived table (sink.evolve), by step: add_columns, widen or relax; each is recorded in sluice_schema_changes",
                Family::default()
            ),
            rebalances: register!(
                r,
                "rebalances",
                "Partition assignments a task received from its group",
                Family::default()
            ),
            task_restarts: register!(
                r,
                "task_restarts",
                "Tasks started again: after a transient failure, or by the admin API",
                Family::default()
            ),
            task_state: register!(
                r,
                "task_state",
                "1 for the state each task of this process is in (RUNNING, PAUSED, FAILED, UNASSIGNED, RESTARTING, STOPPED), 0 for the others",
                Family::default()
            ),
            plugin_call: register!(
                r,
                "plugin_call_seconds",
                "Wall time of each call of a transform plugin",
                HistogramFamily::<PluginLabel>::new_with_constructor(
                    seconds_histogram as fn() -> Histogram
                )
            ),
            plugin_failures: register!(
                r,
                "plugin_failures",
                "Failed calls of a transform plugin, by kind: trap, timeout, memory, output",
                Family::default()
            ),
            pool_consumers: register!(
                r,
                "pool_consumers",
                "Consumers of the seek-consumer pool (inspect, dry-run), by state: idle or borrowed",
                Family::default()
            ),
            pool_waiting: register!(
                r,
                "pool_waiting",
                "Borrowers waiting for a consumer of the pool",
                Family::default()
            ),
            pool_created: register!(
                r,
                "pool_created",
                "Consumers the pool created (at first use, or to replace a broken or evicted one)",
                Family::default()
            ),
            pool_evicted: register!(
                r,
                "pool_evicted",
                "Consumers the pool closed: idle too long, or broken",
                Family::default()
            ),
            registry,
            process: process::registry(),
        }
        .with_schema_registry()
    }

    fn with_schema_registry(mut self) -> Self {
        schema_registry::register(&mut self.registry);
        self
    }

    /// The gauges and counters of the seek-consumer pool of `cluster`.
    pub fn pool(&self, cluster: &str) -> PoolMetrics {
        let state = |state: &str| PoolStateLabel {
            cluster: cluster.to_string(),
            state: state.to_string(),
        };
        let label = ClusterLabel {
            cluster: cluster.to_string(),
        };
        PoolMetrics {
            idle: self.pool_consumers.get_or_create_owned(&state("idle")),
            borrowed: self.pool_consumers.get_or_create_owned(&state("borrowed")),
            waiting: self.pool_waiting.get_or_create_owned(&label),
            created: self.pool_created.get_or_create_owned(&label),
            evicted: self.pool_evicted.get_or_create_owned(&label),
        }
    }

    /// Sets `sluice_ready`: whether the process is ready, as `/readyz` would answer now.
    pub fn set_ready(&self, ready: bool) {
        self.ready.set(i64::from(ready));
    }

    /// The text exposition of every metric (OpenMetrics; see [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        use prometheus_client::encoding::text::{encode_eof, encode_registry};
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode_registry(&mut out, &self.registry);
        let _ = encode_registry(&mut out, &self.process);
        let _ = encode_eof(&mut out);
        out
    }
}

/// The metrics of one seek-consumer pool.
#[derive(Debug, Clone, Default)]
pub struct PoolMetrics {
    /// Consumers ready to lend.
    pub idle: Gauge,
    /// Consumers lent out.
    pub borrowed: Gauge,
    /// Borrowers waiting for a consumer.
    pub waiting: Gauge,
    /// Consumers created.
    pub created: Counter,
    /// Consumers closed for idleness or breakage.
    pub evicted: Counter,
}

/// The task states `sluice_task_state` shows, Kafka Connect's names.
pub const TASK_STATES: &[&str] = &[
    "RUNNING",
    "PAUSED",
    "FAILED",
    "UNASSIGNED",
    "RESTARTING",
    "STOPPED",
];
