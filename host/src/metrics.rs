//! The process's metrics, in Prometheus's names (`GET /metrics` on the admin server).
//!
//! [`Metrics`] holds every family, registered once per process. A connector takes its
//! [`ConnectorMetrics`]: the counters labelled with its name, and handles for the labels
//! only known later (task, topic, partition, plugin, state). Counters are atomics: the
//! task threads count without a lock, and a scrape reads them as they are.
//!
//! Every metric is documented in `docs/operations.md`; a new one goes there too.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The window of the status API's rows per second.
pub const RATE_WINDOW: Duration = Duration::from_secs(30);

/// The content type of [`Metrics::render`]'s text (OpenMetrics, which Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ConnectorLabel {
    connector: String,
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

fn records_histogram() -> Histogram {
    // 1 .. about 1M records.
    Histogram::new(exponential_buckets(1.0, 4.0, 11))
}

/// Every metric family of the process.
pub struct Metrics {
    registry: Registry,
    consumed: Family<TaskLabel, Counter>,
    rows_written: Family<ConnectorLabel, Counter>,
    filtered: Family<ConnectorLabel, Counter>,
    skipped: Family<ReasonLabel, Counter>,
    dead_letters: Family<ConnectorLabel, Counter>,
    duplicates: Family<ConnectorLabel, Counter>,
    committed: Family<ConnectorLabel, Counter>,
    batches: Family<ConnectorLabel, Counter>,
    lag: Family<PartitionLabel, Gauge>,
    batch_duration: HistogramFamily<StageLabel>,
    batch_records: HistogramFamily<ConnectorLabel>,
    retries: Family<ReasonLabel, Counter>,
    conflicts: Family<ConnectorLabel, Counter>,
    offset_gaps: Family<ConnectorLabel, Counter>,
    offset_resets: Family<ConnectorLabel, Counter>,
    offsets_skipped: Family<ConnectorLabel, Counter>,
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
                "Records passed over: reason nothing_to_write (a tombstone on a table without key) or errors_policy (a failed record under errors.policy: skip)",
                Family::default()
            ),
            dead_letters: register!(
                r,
                "dead_letters",
                "Failed records stored or produced as dead letters",
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
                "Records behind: the partition's high watermark minus its stored next offset",
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
                "Transient failures retried, by reason: database, dead_letter_topic, stored_offsets, transform_chain, connect",
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
                "Times a partition's offsets jumped (compaction, transaction markers, or a broker that skipped records)",
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
        }
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

    /// The counters of one connector.
    pub fn connector(self: &Arc<Self>, name: &str) -> Arc<ConnectorMetrics> {
        let label = ConnectorLabel {
            connector: name.to_string(),
        };
        let reason = |reason: &str| ReasonLabel {
            connector: name.to_string(),
            reason: reason.to_string(),
        };
        Arc::new(ConnectorMetrics {
            connector: name.to_string(),
            committed: self.committed.get_or_create_owned(&label),
            rows_written: self.rows_written.get_or_create_owned(&label),
            filtered: self.filtered.get_or_create_owned(&label),
            skipped: self
                .skipped
                .get_or_create_owned(&reason("nothing_to_write")),
            failed_skipped: self.skipped.get_or_create_owned(&reason("errors_policy")),
            dead_letters: self.dead_letters.get_or_create_owned(&label),
            duplicates: self.duplicates.get_or_create_owned(&label),
            batches: self.batches.get_or_create_owned(&label),
            conflicts: self.conflicts.get_or_create_owned(&label),
            offset_gaps: self.offset_gaps.get_or_create_owned(&label),
            offset_resets: self.offset_resets.get_or_create_owned(&label),
            offsets_skipped: self.offsets_skipped.get_or_create_owned(&label),
            batch_records: self.batch_records.get_or_create_owned(&label),
            consumed: Counter::default(),
            lags: Mutex::default(),
            samples: Mutex::default(),
            all: self.clone(),
        })
    }

    /// The text exposition of every metric (OpenMetrics; see [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
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

/// The metrics of one connector: counters that its tasks share, and the families for the
/// labels that only its tasks know.
#[derive(Debug)]
pub struct ConnectorMetrics {
    connector: String,
    /// Records whose batch committed (rows written, deleted, dropped or skipped).
    pub committed: Counter,
    /// Row operations committed.
    pub rows_written: Counter,
    /// Records a transform dropped.
    pub filtered: Counter,
    /// Records that committed as a skip (tombstone without key, …).
    pub skipped: Counter,
    /// Failed records passed over by `errors.policy: skip`.
    pub failed_skipped: Counter,
    /// Failed records stored or produced as dead letters.
    pub dead_letters: Counter,
    /// Records skipped as producer duplicates (`delivery.dedup`).
    pub duplicates: Counter,
    /// Batches committed.
    pub batches: Counter,
    /// Batches rolled back on an offset conflict.
    pub conflicts: Counter,
    /// Times a partition's next record came with a higher offset than the one after the
    /// previous record: compaction and transaction markers do that, and so does a broker
    /// that skips records.
    pub offset_gaps: Counter,
    /// Partitions moved by `delivery.on_offset_out_of_range: earliest` or `latest`.
    pub offset_resets: Counter,
    /// Offsets passed over by such resets (records the log no longer had, or never gave).
    pub offsets_skipped: Counter,
    batch_records: Histogram,
    /// Records read by all tasks (the per-task counters are the registered ones).
    consumed: Counter,
    /// Each held partition's lag, by (task, topic, partition), for the status API.
    lags: Mutex<BTreeMap<(usize, String, i32), i64>>,
    /// Samples of `rows_written` for the status API's rate: (when, value), oldest first.
    samples: Mutex<VecDeque<(Instant, u64)>>,
    all: Arc<Metrics>,
}

/// Records read from Kafka by one task.
#[derive(Debug, Clone)]
pub struct Consumed {
    task: Counter,
    connector: Counter,
}

impl Consumed {
    /// One more record read.
    pub fn inc(&self) {
        self.task.inc();
        self.connector.inc();
    }
}

/// A stage of a batch, for `sluice_batch_duration_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchStage {
    Poll,
    Transform,
    Map,
    Write,
    Commit,
}

impl BatchStage {
    fn name(self) -> &'static str {
        match self {
            BatchStage::Poll => "poll",
            BatchStage::Transform => "transform",
            BatchStage::Map => "map",
            BatchStage::Write => "write",
            BatchStage::Commit => "commit",
        }
    }
}

impl ConnectorMetrics {
    /// A stand-alone set, registered nowhere (tools and tests that run a pipeline without
    /// a process around it).
    pub fn detached(name: &str) -> Arc<Self> {
        Arc::new(Metrics::new()).connector(name)
    }

    fn task(&self, task: usize) -> TaskLabel {
        TaskLabel {
            connector: self.connector.clone(),
            task: task.to_string(),
        }
    }

    /// The counter of records read from Kafka by `task`.
    pub fn consumed(&self, task: usize) -> Consumed {
        Consumed {
            task: self.all.consumed.get_or_create_owned(&self.task(task)),
            connector: self.consumed.clone(),
        }
    }

    /// Records read from Kafka by every task of the connector.
    pub fn consumed_total(&self) -> u64 {
        self.consumed.get()
    }

    /// How long a batch spent in `stage`.
    pub fn observe_stage(&self, stage: BatchStage, took: Duration) {
        self.all
            .batch_duration
            .get_or_create(&StageLabel {
                connector: self.connector.clone(),
                stage: stage.name().to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// A committed batch of `records`.
    pub fn observe_batch(&self, records: u64) {
        self.batch_records.observe(records as f64);
    }

    /// A transient failure retried, for `reason` (database, stored_offsets, …).
    pub fn retried(&self, reason: &str) {
        self.all
            .retries
            .get_or_create(&ReasonLabel {
                connector: self.connector.clone(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Retries counted for `reason`.
    pub fn retries(&self, reason: &str) -> u64 {
        self.all
            .retries
            .get(&ReasonLabel {
                connector: self.connector.clone(),
                reason: reason.to_string(),
            })
            .map_or(0, |c| c.get())
    }

    /// A partition assignment received by `task`.
    pub fn rebalanced(&self, task: usize) {
        self.all.rebalances.get_or_create(&self.task(task)).inc();
    }

    /// A task started again.
    pub fn restarted(&self, task: usize) {
        self.all.task_restarts.get_or_create(&self.task(task)).inc();
    }

    fn partition(&self, task: usize, topic: &str, partition: i32) -> PartitionLabel {
        PartitionLabel {
            connector: self.connector.clone(),
            task: task.to_string(),
            topic: topic.to_string(),
            partition: partition.to_string(),
        }
    }

    /// Sets a partition's lag.
    pub fn set_lag(&self, task: usize, topic: &str, partition: i32, lag: i64) {
        self.all
            .lag
            .get_or_create(&self.partition(task, topic, partition))
            .set(lag);
        if let Ok(mut lags) = self.lags.lock() {
            lags.insert((task, topic.to_string(), partition), lag);
        }
    }

    /// Each held partition's lag: (task, topic, partition, lag).
    pub fn lags(&self) -> Vec<(usize, String, i32, i64)> {
        self.lags
            .lock()
            .map(|lags| {
                lags.iter()
                    .map(|((task, topic, partition), lag)| (*task, topic.clone(), *partition, *lag))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The connector's lag: the sum over its held partitions.
    pub fn total_lag(&self) -> i64 {
        self.lags().iter().map(|(.., lag)| lag).sum()
    }

    /// Forgets a partition's lag (the task no longer holds it).
    pub fn clear_lag(&self, task: usize, topic: &str, partition: i32) {
        self.all.lag.remove(&self.partition(task, topic, partition));
        if let Ok(mut lags) = self.lags.lock() {
            lags.remove(&(task, topic.to_string(), partition));
        }
    }

    /// Forgets the lag of every partition `task` held (its thread ended without cleaning up).
    pub fn clear_task_lags(&self, task: usize) {
        let held: Vec<(String, i32)> = self
            .lags()
            .into_iter()
            .filter(|(t, ..)| *t == task)
            .map(|(_, topic, partition, _)| (topic, partition))
            .collect();
        for (topic, partition) in held {
            self.clear_lag(task, &topic, partition);
        }
    }

    /// Takes a sample of `rows_written` (at most one a second; the runner calls this
    /// often) and returns the rows written per second over the last [`RATE_WINDOW`].
    pub fn rows_per_second(&self) -> f64 {
        let now = Instant::now();
        let value = self.rows_written.get();
        let Ok(mut samples) = self.samples.lock() else {
            return 0.0;
        };
        if samples
            .back()
            .is_none_or(|(at, _)| now.duration_since(*at) >= Duration::from_secs(1))
        {
            samples.push_back((now, value));
        }
        while samples.len() > 2
            && samples
                .front()
                .is_some_and(|(at, _)| now.duration_since(*at) > RATE_WINDOW)
        {
            samples.pop_front();
        }
        match samples.front() {
            Some((at, first)) if now.duration_since(*at) >= Duration::from_millis(500) => {
                value.saturating_sub(*first) as f64 / now.duration_since(*at).as_secs_f64()
            }
            _ => 0.0,
        }
    }

    /// Sets the state gauges of `task`: 1 for `state`, 0 for the others that were set.
    pub fn set_task_state(&self, task: usize, state: &str) {
        for name in TASK_STATES {
            let label = StateLabel {
                connector: self.connector.clone(),
                task: task.to_string(),
                state: name.to_string(),
            };
            self.all
                .task_state
                .get_or_create(&label)
                .set(i64::from(*name == state));
        }
    }

    /// Forgets the state gauges of `task` (the connector has fewer tasks now).
    pub fn clear_task_state(&self, task: usize) {
        for name in TASK_STATES {
            self.all.task_state.remove(&StateLabel {
                connector: self.connector.clone(),
                task: task.to_string(),
                state: name.to_string(),
            });
        }
    }

    /// An observer for the connector's transform chains: each plugin call's time, and its
    /// failure's kind.
    pub fn plugin_observer(self: &Arc<Self>) -> sluice_transform::CallObserver {
        let metrics = self.clone();
        Arc::new(
            move |plugin: &str, took: Duration, failure: Option<&'static str>| {
                let label = PluginLabel {
                    connector: metrics.connector.clone(),
                    plugin: plugin.to_string(),
                };
                metrics
                    .all
                    .plugin_call
                    .get_or_create(&label)
                    .observe(took.as_secs_f64());
                if let Some(kind) = failure {
                    metrics
                        .all
                        .plugin_failures
                        .get_or_create(&PluginFailureLabel {
                            connector: label.connector,
                            plugin: label.plugin,
                            kind: kind.to_string(),
                        })
                        .inc();
                }
            },
        )
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_labels_and_values_show_in_the_exposition() {
        let metrics = Arc::new(Metrics::new());
        let words = metrics.connector("words");
        for _ in 0..7 {
            words.consumed(0).inc();
        }
        for _ in 0..3 {
            words.consumed(1).inc();
        }
        words.rows_written.inc_by(9);
        words.set_lag(1, "events", 2, 41);
        words.set_task_state(0, "RUNNING");
        words.observe_stage(BatchStage::Write, Duration::from_millis(3));
        words.retried("database");
        (words.plugin_observer())("parse", Duration::from_millis(2), Some("trap"));
        assert_eq!(words.consumed_total(), 10);
        let text = metrics.render();
        for line in [
            "sluice_records_consumed_total{connector=\"words\",task=\"0\"} 7",
            "sluice_rows_written_total{connector=\"words\"} 9",
            "sluice_consumer_lag{connector=\"words\",task=\"1\",topic=\"events\",partition=\"2\"} 41",
            "sluice_task_state{connector=\"words\",task=\"0\",state=\"RUNNING\"} 1",
            "sluice_task_state{connector=\"words\",task=\"0\",state=\"FAILED\"} 0",
            "sluice_retries_total{connector=\"words\",reason=\"database\"} 1",
            "sluice_plugin_failures_total{connector=\"words\",plugin=\"parse\",kind=\"trap\"} 1",
            "sluice_batch_duration_seconds_count{connector=\"words\",stage=\"write\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        words.clear_lag(1, "events", 2);
        assert!(!metrics.render().contains("sluice_consumer_lag{"));
        assert!(text.ends_with("# EOF\n"));
    }
}
