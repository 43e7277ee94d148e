//! The supervisor's side of a task: how it is started ([`TaskSpec`]), what it is told
//! ([`Control`]), what it reports back ([`TaskStatus`]), its connector's counters
//! ([`Metrics`]), and the [`TaskHandle`] that holds them together.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc;
use std::thread::JoinHandle;

use tokio::sync::watch;

use super::state::TaskState;
use crate::config::{ConnectorConfig, KafkaConfig};
use crate::deliver::Policy;
use crate::validate::RecordSchema;

/// What the supervisor tells a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Pause,
    Resume,
    Stop,
}

/// What a task reports back on every transition.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStatus {
    pub state: TaskState,
    pub error: Option<String>,
}

/// Counters of one connector, shared by its tasks (the demo and the metrics read them).
#[derive(Debug, Default)]
pub struct Metrics {
    /// Records read from Kafka.
    pub consumed: AtomicU64,
    /// Records whose batch committed (rows written, deleted or skipped).
    pub committed: AtomicU64,
    /// Records that committed as a skip (tombstone without key, …).
    pub skipped: AtomicU64,
    /// Failed records passed over by `errors.policy: skip`.
    pub failed_skipped: AtomicU64,
    /// Failed records stored or produced as dead letters.
    pub dead_letters: AtomicU64,
    /// Batches committed.
    pub batches: AtomicU64,
    /// Batches rolled back on an offset conflict.
    pub conflicts: AtomicU64,
    /// Times a partition's next record came with a higher offset than the one after the
    /// previous record: compaction and transaction markers do that, and so does a broker
    /// that skips records.
    pub offset_gaps: AtomicU64,
    /// Offsets passed over by a reset under `delivery.on_offset_out_of_range: earliest`
    /// or `latest` (records the log no longer had, or never gave).
    pub offsets_skipped: AtomicU64,
    /// Partitions moved by `delivery.on_offset_out_of_range: earliest` or `latest`.
    pub offset_resets: AtomicU64,
}

/// How a task is started.
#[derive(Clone)]
pub struct TaskSpec {
    pub kafka: KafkaConfig,
    /// The resolved bootstrap servers (the embedded cluster's, when `embedded`).
    pub brokers: String,
    pub connector: Arc<ConnectorConfig>,
    pub task: usize,
    /// The process's plugin engine, when the connector has transforms.
    pub engine: Option<sluice_transform::TransformEngine>,
    /// The connector's compiled JSON Schema (`schema:`).
    pub schema: Option<Arc<RecordSchema>>,
    /// The connector's error policy and dead-letter producer.
    pub policy: Arc<Policy>,
}

/// The supervisor's end of a task.
pub struct TaskHandle {
    pub task: usize,
    pub(super) control: mpsc::Sender<Control>,
    pub status: watch::Receiver<TaskStatus>,
    pub(super) thread: Option<JoinHandle<()>>,
}

impl TaskHandle {
    /// Sends a control message; a task that has ended ignores it.
    pub fn send(&self, control: Control) {
        let _ = self.control.send(control);
    }

    /// Resolves when the task has ended: its thread drops the status sender as its last
    /// act, which closes the channel. Cancel-safe, and cheap to await many of at once.
    pub async fn finished(&self) {
        let mut status = self.status.clone();
        while status.changed().await.is_ok() {}
    }

    /// Waits for the task thread to end (blocking: call it where blocking is allowed).
    pub fn join(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
