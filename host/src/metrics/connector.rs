//! One connector's metrics: the counters its tasks share, and the families for the labels
//! only its tasks know (task, topic, partition, plugin, state).

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use super::*;

impl Metrics {
    /// The counters of one connector.
    pub fn connector(self: &Arc<Self>, name: &str) -> Arc<ConnectorMetrics> {
        let label = ConnectorLabel {
            connector: name.to_string(),
        };
        Arc::new(ConnectorMetrics {
            connector: name.to_string(),
            committed: self.committed.get_or_create_owned(&label),
            rows_written: self.rows_written.get_or_create_owned(&label),
            filtered: self.filtered.get_or_create_owned(&label),
            skipped: self.skipped.get_or_create_owned(&FailureLabel {
                connector: name.to_string(),
                reason: "nothing_to_write".into(),
                class: String::new(),
            }),
            failed_skipped: Counter::default(),
            dead_letters: Counter::default(),
            duplicates: self.duplicates.get_or_create_owned(&label),
            batches: self.batches.get_or_create_owned(&label),
            conflicts: self.conflicts.get_or_create_owned(&label),
            offset_gaps: Counter::default(),
            offset_resets: self.offset_resets.get_or_create_owned(&label),
            offsets_skipped: self.offsets_skipped.get_or_create_owned(&label),
            batch_records: self.batch_records.get_or_create_owned(&label),
            record_latency: self.record_latency.get_or_create_owned(&label),
            consumed: Counter::default(),
            lags: Mutex::default(),
            held: Mutex::default(),
            samples: Mutex::default(),
            all: self.clone(),
        })
    }
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
    /// Failed records passed over by `errors.policy: skip`, all classes (the registered
    /// counters are by class: [`ConnectorMetrics::record_failed`]).
    pub failed_skipped: Counter,
    /// Failed records stored or produced as dead letters, all classes.
    pub dead_letters: Counter,
    /// Records skipped as producer duplicates (`delivery.dedup`).
    pub duplicates: Counter,
    /// Batches committed.
    pub batches: Counter,
    /// Batches rolled back on an offset conflict.
    pub conflicts: Counter,
    /// Times a partition's next record came with a higher offset than the one after the
    /// previous record: compaction and transaction markers do that, and so does a broker
    /// that skips records. All policies (the registered counters are by policy:
    /// [`ConnectorMetrics::offset_gap`]).
    pub offset_gaps: Counter,
    /// Partitions moved by `delivery.on_offset_out_of_range: earliest` or `latest`.
    pub offset_resets: Counter,
    /// Offsets passed over by such resets (records the log no longer had, or never gave).
    pub offsets_skipped: Counter,
    batch_records: Histogram,
    record_latency: Histogram,
    /// Records read by all tasks (the per-task counters are the registered ones).
    consumed: Counter,
    /// Each held partition's lag, by (task, topic, partition), for the status API.
    lags: Mutex<BTreeMap<(usize, String, i32), i64>>,
    /// The partitions each task holds, whether or not their lag is known yet (a partition
    /// just assigned, before its first fetch): what the coverage watcher counts as read.
    held: Mutex<BTreeMap<usize, Vec<(String, i32)>>>,
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

    /// A failed record that committed as a dead letter (`dead_letter`) or a skip
    /// (`errors.policy: skip`), counted by its class.
    pub fn record_failed(&self, class: crate::failure::FailureClass, dead_letter: bool) {
        if dead_letter {
            self.dead_letters.inc();
            self.all
                .dead_letters
                .get_or_create(&ClassLabel {
                    connector: self.connector.clone(),
                    class: class.name().to_string(),
                })
                .inc();
        } else {
            self.failed_skipped.inc();
            self.all
                .skipped
                .get_or_create(&FailureLabel {
                    connector: self.connector.clone(),
                    reason: "errors_policy".into(),
                    class: class.name().to_string(),
                })
                .inc();
        }
    }

    /// A committed batch of `records`.
    pub fn observe_batch(&self, records: u64) {
        self.batch_records.observe(records as f64);
    }

    /// Records committed now: the time from each one's Kafka timestamp (milliseconds since
    /// the Unix epoch) to now. A timestamp ahead of this host's clock counts as zero.
    pub fn observe_latency(&self, timestamps: &[i64]) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        for &timestamp in timestamps {
            let millis = now.saturating_sub(timestamp).max(0);
            self.record_latency.observe(millis as f64 / 1000.0);
        }
    }

    fn gap_label(&self, policy: &str) -> GapLabel {
        GapLabel {
            connector: self.connector.clone(),
            policy: policy.to_string(),
        }
    }

    /// Creates the gap counter of `policy` (`delivery.on_offset_gap`) at 0, so that the
    /// first gap shows as an increase.
    pub fn gap_policy(&self, policy: &str) {
        let _ = self
            .all
            .offset_gaps
            .get_or_create_owned(&self.gap_label(policy));
    }

    /// A partition's offsets jumped, under `policy` (`delivery.on_offset_gap`).
    pub fn offset_gap(&self, policy: &str) {
        self.offset_gaps.inc();
        self.all
            .offset_gaps
            .get_or_create(&self.gap_label(policy))
            .inc();
    }

    /// One statement that changed a derived table, by its `sink.evolve` step.
    pub fn schema_changed(&self, step: &str) {
        self.all
            .schema_changes
            .get_or_create(&StepLabel {
                connector: self.connector.clone(),
                step: step.to_string(),
            })
            .inc();
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

    /// Forgets a partition's lag (the task no longer holds it).
    pub fn clear_lag(&self, task: usize, topic: &str, partition: i32) {
        self.all.lag.remove(&self.partition(task, topic, partition));
        if let Ok(mut lags) = self.lags.lock() {
            lags.remove(&(task, topic.to_string(), partition));
        }
    }

    /// Sets the lag of a partition no task reads (label `task="none"`).
    pub fn set_unread_lag(&self, topic: &str, partition: i32, lag: i64) {
        self.all
            .lag
            .get_or_create(&self.unread_partition(topic, partition))
            .set(lag);
    }

    /// Forgets the lag series of a partition no task read (a task holds it now).
    pub fn clear_unread_lag(&self, topic: &str, partition: i32) {
        self.all
            .lag
            .remove(&self.unread_partition(topic, partition));
    }

    fn unread_partition(&self, topic: &str, partition: i32) -> PartitionLabel {
        PartitionLabel {
            connector: self.connector.clone(),
            task: "none".into(),
            topic: topic.to_string(),
            partition: partition.to_string(),
        }
    }

    /// How many partitions no task has read past the grace (`supervisor::coverage`).
    pub fn set_unread_partitions(&self, count: i64) {
        self.all
            .unread_partitions
            .get_or_create(&ConnectorLabel {
                connector: self.connector.clone(),
            })
            .set(count);
    }

    /// The partitions `task` holds now (empty: none, it ended).
    pub fn set_held(&self, task: usize, partitions: Vec<(String, i32)>) {
        if let Ok(mut held) = self.held.lock() {
            if partitions.is_empty() {
                held.remove(&task);
            } else {
                held.insert(task, partitions);
            }
        }
    }

    /// Every partition a task of this process holds.
    pub fn held(&self) -> Vec<(String, i32)> {
        self.held
            .lock()
            .map(|held| held.values().flatten().cloned().collect())
            .unwrap_or_default()
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
        self.set_held(task, Vec::new());
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
