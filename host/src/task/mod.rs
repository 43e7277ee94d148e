//! A task: one consumer, driven through its [state machine](state) on a thread of its own,
//! feeding batches to the sink.
//!
//! The task thread polls Kafka without pause, so the consumer stays in its group however
//! slow the database is. A batch is cut when it reaches `max_records` or `max_bytes`, or
//! `linger` after its first record; it is mapped on the task thread and written on the
//! tokio runtime while the next batch fills. When the next batch is full before the write
//! ends, the partitions are paused (backpressure) and polling goes on.
//!
//! The rooms of a task:
//! - [`handle`]: the supervisor's side: spec, control messages, status, metrics.
//! - [`actor`]: the loop on the task thread.
//! - [`buffer`]: records waiting for their batch.
//! - [`in_flight`]: the batch being written, and what its result does.
//! - [`partitions`]: where each partition stands; moving partitions to stored offsets.
//! - [`rebalance`]: what an assignment or a revocation does.
//! - [`state`]: the transition table.
//!
//! The state that both the loop and the rebalance callback touch sits in [`Shared`]; the
//! loop never holds its lock across `poll`, which is where the callback runs. Every log
//! line of a task is inside its `task` span, with the connector and task number.

mod actor;
mod buffer;
pub mod handle;
mod in_flight;
mod partitions;
mod rebalance;
pub mod state;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;

use crate::config::{Guarantee, RetryConfig};
use crate::deliver::{DeliverError, Policy};
use crate::failure::Failure;
use crate::record::Partition;
use crate::retry::Retrying;
use crate::sink::{Sink, SinkError};
pub use handle::{Control, Metrics, TaskHandle, TaskSpec, TaskStatus};
pub use state::{InvalidTransition, TaskEvent, TaskState};

/// Why a task stopped in `Failed`.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("sink: {0}")]
    Sink(#[from] SinkError),
    #[error(transparent)]
    Deliver(#[from] DeliverError),
    /// `errors.policy: fail` and a record failed; the records before it committed.
    #[error("{0} (errors.policy is fail)")]
    Record(Failure),
    #[error("transform: {0}")]
    Transform(#[from] sluice_transform::TransformError),
    #[error(transparent)]
    Prepare(#[from] crate::prepare::PrepareError),
    #[error("reading stored offsets for {topic}: {source}")]
    Offsets { topic: String, source: SinkError },
    #[error("still failing after {elapsed:?} of retries (errors.retry.max_elapsed): {source}")]
    RetriesExhausted {
        elapsed: Duration,
        source: DeliverError,
    },
    #[error(transparent)]
    Transition(#[from] InvalidTransition),
}

/// What the loop and the rebalance callback share, under [`Shared`]'s lock.
struct Inner {
    partitions: HashMap<Partition, partitions::PartitionState>,
    buffer: buffer::Buffer,
    in_flight: Option<in_flight::InFlight>,
    /// An error the callback met; the loop fails the task with it.
    fatal: Option<TaskError>,
    /// Partitions to move to their stored offsets: after a conflict, or assigned while the
    /// stored offsets could not be read.
    reassign: Vec<Partition>,
    /// Set while the stored offsets for `reassign` cannot be read (a transient failure).
    reassign_retrying: Option<Retrying>,
    /// At-least-once: offsets to commit to Kafka after their rows committed.
    kafka_commits: Vec<(Partition, i64)>,
}

/// A task's state, shared by its loop and its consumer's rebalance callback.
struct Shared {
    inner: Mutex<Inner>,
    sink: Arc<Sink>,
    runtime: Handle,
    metrics: Arc<Metrics>,
    guarantee: Guarantee,
    policy: Arc<Policy>,
    retry: RetryConfig,
    /// The operator paused the task.
    paused: AtomicBool,
    /// The next batch is full while the previous one is still being written.
    backpressure: AtomicBool,
}

impl Shared {
    fn new(spec: &TaskSpec, sink: Arc<Sink>, metrics: Arc<Metrics>, runtime: Handle) -> Self {
        Shared {
            inner: Mutex::new(Inner {
                partitions: HashMap::new(),
                buffer: buffer::Buffer::default(),
                in_flight: None,
                fatal: None,
                reassign: Vec::new(),
                reassign_retrying: None,
                kafka_commits: Vec::new(),
            }),
            sink,
            runtime,
            metrics,
            guarantee: spec.connector.delivery.guarantee,
            policy: spec.policy.clone(),
            retry: spec.connector.errors.retry.clone(),
            paused: AtomicBool::new(false),
            backpressure: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave `Inner` half-updated in a way that
        // loses records (the offsets in the database are the truth), so go on.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Starts a task on its own thread, inside a `task` span (connector, task).
pub fn spawn(
    spec: TaskSpec,
    sink: Arc<Sink>,
    metrics: Arc<Metrics>,
    runtime: Handle,
) -> std::io::Result<TaskHandle> {
    let (control_tx, control_rx) = mpsc::channel();
    let (status_tx, status_rx) = watch::channel(TaskStatus {
        state: TaskState::Subscribing,
        error: None,
    });
    let name = format!("{}-{}", spec.connector.name, spec.task);
    let task = spec.task;
    let span = tracing::info_span!("task", connector = %spec.connector.name, task);
    let thread = std::thread::Builder::new().name(name).spawn(move || {
        let _entered = span.entered();
        let shared = Arc::new(Shared::new(&spec, sink, metrics, runtime));
        let mut actor = actor::Actor::new(spec, shared, status_tx);
        if let Err(error) = actor.run(control_rx) {
            tracing::error!(%error, "task failed");
            actor.report(TaskEvent::Fail, Some(error.to_string()));
        }
        // The actor, and with it the status sender, is dropped here: that closes the
        // status channel, which is how `TaskHandle::finished` learns the task ended.
    })?;
    Ok(TaskHandle {
        task,
        control: control_tx,
        status: status_rx,
        thread: Some(thread),
    })
}
