//! A task: one consumer, driven through its [state machine](state) on a thread of its own,
//! feeding batches to the sink.
//!
//! The task thread polls Kafka without pause, so the consumer stays in its group however
//! slow the database is. A batch is cut when it reaches `max_records` or `max_bytes`, or
//! `linger` after its first record; it is transformed and mapped on a thread of its own
//! (so polling goes on however long a plugin takes) and written on the tokio runtime while
//! the next batch fills and is transformed. When batches pile up behind the write, the task
//! takes no more records (backpressure: librdkafka's bounded prefetch then stops fetching)
//! and polls only for its group's callbacks; while a failure is retried, the partitions
//! are paused and polling goes on. The write and the transform thread ring the task's
//! [`wake`] bell when they finish.
//!
//! The rooms of a task:
//! - [`handle`]: the supervisor's side: spec, control messages, status, metrics.
//! - [`actor`]: the loop on the task thread.
//! - [`buffer`]: records waiting for their batch.
//! - [`transforming`]: the batch being transformed, on the task's transform thread.
//! - [`in_flight`]: the batch being written, and what its result does.
//! - [`late_topics`]: asking again, every few seconds, for subscribed topics that do not
//!   exist yet.
//! - [`partitions`]: where each partition stands; moving partitions to stored offsets.
//! - [`rebalance`]: what an assignment or a revocation does.
//! - [`source_transactions`]: under `sink.transactions: source`, records held until their
//!   source transaction is whole, then buffered as one unit.
//! - [`state`]: the transition table.
//! - [`wake`]: the bell the write and the transform thread ring when they finish.
//!
//! The state that both the loop and the rebalance callback touch sits in [`Shared`]; the
//! loop never holds its lock across `poll`, which is where the callback runs. Every log
//! line of a task is inside its `task` span, with the connector and task number.

mod actor;
mod buffer;
mod hand_over;
pub mod handle;
mod in_flight;
mod late_topics;
mod partitions;
mod rebalance;
mod source_transactions;
pub mod state;
mod transforming;
mod wake;

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;

use crate::config::{Guarantee, OnGap, OutOfRange, RetryConfig};
use crate::deliver::{DeliverError, Policy};
use crate::failure::Failure;
use crate::metrics::{ConnectorMetrics, Consumed};
use crate::record::Partition;
use crate::retry::Retrying;
use crate::sink::{Sink, SinkError};
pub use handle::{Control, TaskHandle, TaskSpec, TaskStatus};
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
    /// A stored offset the log no longer has, under `on_offset_out_of_range: fail`.
    #[error(
        "{topic}/{partition}: the stored offset {stored} is not in the log, which holds offsets {low}..{high} \
         (retention overtook it, the topic was deleted and created again, or the brokers are another cluster's); \
         set delivery.on_offset_out_of_range: earliest or latest to resume there, skipping what is gone"
    )]
    OffsetOutOfRange {
        topic: String,
        partition: i32,
        stored: i64,
        low: i64,
        high: i64,
    },
    /// Offsets that jumped, under `on_offset_gap: fail`.
    #[error(
        "{topic}/{partition}: offsets jumped from {expected} to {got} ({} offsets never arrived); \
         set delivery.on_offset_gap: warn or ignore for a compacted or transactional topic",
        got - expected
    )]
    OffsetGap {
        topic: String,
        partition: i32,
        expected: i64,
        got: i64,
    },
    /// Stored offsets read from another Kafka cluster, under `on_offset_out_of_range: fail`.
    #[error(
        "{topic}: the stored offsets were read from Kafka cluster {stored}, and the brokers are cluster {current}: \
         they are not positions in this log; set delivery.on_offset_out_of_range: earliest or latest to start over there"
    )]
    ClusterMismatch {
        topic: String,
        stored: String,
        current: String,
    },
    /// Stored offsets of a topic that has been deleted and created again since (its id
    /// changed), under `on_offset_out_of_range: fail`.
    #[error(
        "{topic}: the stored offsets were read from the topic with id {stored}, and the topic now has id {current}: \
         it was deleted and created again, and the stored offsets are not positions in its new log; \
         set delivery.on_offset_out_of_range: earliest (read the new topic from its start) or latest"
    )]
    TopicRecreated {
        topic: String,
        stored: String,
        current: String,
    },
    /// `sink.transactions: source` cannot hold a transaction whole.
    #[error(transparent)]
    SourceTransactions(#[from] source_transactions::HeldError),
    /// The consumer met an error that retrying cannot help.
    #[error("kafka: {reason}: {source}")]
    Consumer {
        reason: &'static str,
        source: rdkafka::error::KafkaError,
    },
}

impl TaskError {
    /// Whether starting the task again may help: a database or broker that was away, a
    /// transform chain that could not be brought back, a thread that could not start.
    /// Restarted with `errors.restart`'s backoff. The others are permanent (a record under
    /// `errors.policy: fail`, an offset out of range or a gap under `fail`, another
    /// cluster's offsets, authentication or authorization refused, a table that does not
    /// match): the task stays `FAILED` until restarted through the admin API.
    pub fn is_transient(&self) -> bool {
        use crate::prepare::PrepareError;
        match self {
            TaskError::Kafka(_) | TaskError::RetriesExhausted { .. } => true,
            // A transaction that cannot be held whole, or topics not named as Debezium
            // names them: restarting reads the same records again.
            TaskError::SourceTransactions(_) => false,
            TaskError::Sink(e) | TaskError::Offsets { source: e, .. } => e.is_transient(),
            TaskError::Deliver(e) => e.is_transient(),
            TaskError::Transform(e) | TaskError::Prepare(PrepareError::Transform(e)) => {
                e.is_chain_failure()
            }
            TaskError::Prepare(PrepareError::WorkerStart(_) | PrepareError::WorkerGone) => true,
            TaskError::Prepare(PrepareError::Registry(e)) => e.is_transient(),
            TaskError::Prepare(
                PrepareError::NotIsolated { .. }
                | PrepareError::NoDecoders(_)
                | PrepareError::Unresolved(_),
            )
            | TaskError::Prepare(PrepareError::Format(_))
            | TaskError::Record(_)
            | TaskError::Transition(_)
            | TaskError::OffsetOutOfRange { .. }
            | TaskError::OffsetGap { .. }
            | TaskError::ClusterMismatch { .. }
            | TaskError::TopicRecreated { .. }
            | TaskError::Consumer { .. } => false,
        }
    }
}

/// What the loop and the rebalance callback share, under [`Shared`]'s lock.
struct Inner {
    partitions: HashMap<Partition, partitions::PartitionState>,
    buffer: buffer::Buffer,
    in_flight: Option<in_flight::InFlight>,
    /// The batch on the transform thread, or transformed and waiting for `in_flight`.
    transforming: Option<transforming::Transforming>,
    /// An error the callback met; the loop fails the task with it.
    fatal: Option<TaskError>,
    /// Partitions to move to their stored offsets: after a conflict, or assigned while the
    /// stored offsets could not be read.
    reassign: Vec<Partition>,
    /// Set while the stored offsets for `reassign` cannot be read (a transient failure).
    reassign_retrying: Option<Retrying>,
    /// Offsets to commit to the Kafka group, the newest of each partition: after their
    /// rows committed, and (exactly-once) each assigned partition's stored offset, so that
    /// the group shows where the database stands even when nothing new is read.
    kafka_commits: HashMap<Partition, i64>,
    /// Exactly-once: the newest offset of each held partition sent to the group, so that a
    /// commit the broker refused is sent again only while nothing newer went after it.
    mirrored: HashMap<Partition, i64>,
    /// Partitions whose first record came past their stored offset, for the loop to judge.
    jumped: Vec<partitions::JumpedStart>,
    /// `sink.transactions: source`: records whose source transaction is not whole yet.
    source_transactions: Option<source_transactions::SourceTransactions>,
}

/// A task's state, shared by its loop and its consumer's rebalance callback.
struct Shared {
    inner: Mutex<Inner>,
    sink: Arc<Sink>,
    runtime: Handle,
    metrics: Arc<ConnectorMetrics>,
    /// This task's count of records read.
    consumed: Consumed,
    /// The task's number.
    task: usize,
    guarantee: Guarantee,
    policy: Arc<Policy>,
    retry: RetryConfig,
    /// The operator paused the task.
    paused: AtomicBool,
    /// The next batch is full while the previous one is still being written.
    backpressure: AtomicBool,
    /// `delivery.on_offset_gap` and `on_offset_out_of_range`.
    on_gap: OnGap,
    out_of_range: OutOfRange,
    /// Where a partition without a stored offset starts.
    fresh_start: rdkafka::Offset,
    /// The id of the Kafka cluster the consumer reads (set once, before the first poll).
    cluster: std::sync::OnceLock<Option<String>>,
    /// The ids of the connector's topics, where the cluster has them (the topics of the
    /// subscription before the first poll; a topic a pattern takes later, at its first
    /// assignment), with every topic asked about.
    topic_ids: Mutex<TopicIds>,
    /// Gap warnings: at most one per 30 s, at debug level in between.
    gap_warnings: crate::logging::Quiet,
    /// The warnings of failed records (skipped or dead-lettered), one per 30 s with a count.
    failure_warnings: crate::logging::Quiet,
    /// `sink.transactions: source`: the warnings of held records that cannot go on.
    held_warnings: crate::logging::Quiet,
    /// Rung when the write in flight or the batch being transformed finishes.
    wake: Arc<wake::Wake>,
}

/// What a task knows of its topics' ids.
#[derive(Debug, Default)]
struct TopicIds {
    /// By topic, where the cluster has one.
    ids: HashMap<String, String>,
    /// Every topic asked about (with an id or without).
    asked: std::collections::HashSet<String>,
    /// The embedded mock cluster has no controller to answer for topic ids (each question
    /// would wait out its time-out), and forgets its topics on exit: never asked.
    never_ask: bool,
}

impl Shared {
    fn new(
        spec: &TaskSpec,
        sink: Arc<Sink>,
        metrics: Arc<ConnectorMetrics>,
        runtime: Handle,
    ) -> Self {
        metrics.gap_policy(spec.connector.delivery.on_offset_gap.name());
        Shared {
            inner: Mutex::new(Inner {
                partitions: HashMap::new(),
                buffer: buffer::Buffer::default(),
                in_flight: None,
                transforming: None,
                fatal: None,
                reassign: Vec::new(),
                reassign_retrying: None,
                kafka_commits: HashMap::new(),
                mirrored: HashMap::new(),
                jumped: Vec::new(),
                source_transactions: spec.connector.transaction_topic().map(|topic| {
                    source_transactions::SourceTransactions::new(topic, &spec.connector.topics)
                }),
            }),
            sink,
            runtime,
            consumed: metrics.consumed(spec.task),
            task: spec.task,
            metrics,
            guarantee: spec.connector.delivery.guarantee,
            policy: spec.policy.clone(),
            retry: spec.connector.errors.retry.clone(),
            paused: AtomicBool::new(false),
            backpressure: AtomicBool::new(false),
            on_gap: spec.connector.delivery.on_offset_gap,
            out_of_range: spec.connector.delivery.on_offset_out_of_range,
            fresh_start: crate::kafka::consumer::fresh_start(&spec.kafka, &spec.connector),
            gap_warnings: Default::default(),
            failure_warnings: Default::default(),
            held_warnings: Default::default(),
            cluster: std::sync::OnceLock::new(),
            topic_ids: Mutex::new(TopicIds {
                never_ask: spec.kafka.is_embedded(),
                ..TopicIds::default()
            }),
            wake: Arc::default(),
        }
    }

    /// The Kafka cluster's id, once known.
    fn cluster(&self) -> Option<String> {
        self.cluster.get().cloned().flatten()
    }

    /// `topic`'s id, when the cluster has one.
    fn topic_id(&self, topic: &str) -> Option<String> {
        self.topic_ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .ids
            .get(topic)
            .cloned()
    }

    /// Forgets what is known of `topics`' ids: they are asked for again at their next
    /// assignment.
    fn forget_ids(&self, topics: &[String]) {
        let mut known = self.topic_ids.lock().unwrap_or_else(|p| p.into_inner());
        for topic in topics {
            known.asked.remove(topic);
            known.ids.remove(topic);
        }
    }

    /// Records the ids the cluster reported for `asked`.
    fn learn_ids(&self, asked: &[String], ids: HashMap<String, String>) {
        let mut known = self.topic_ids.lock().unwrap_or_else(|p| p.into_inner());
        known.asked.extend(asked.iter().cloned());
        known.ids.extend(ids);
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
    metrics: Arc<ConnectorMetrics>,
    runtime: Handle,
) -> std::io::Result<TaskHandle> {
    let (control_tx, control_rx) = mpsc::channel();
    let (status_tx, status_rx) = watch::channel(TaskStatus {
        state: TaskState::Subscribing,
        error: None,
        transient: false,
    });
    let name = format!("{}-{}", spec.connector.name, spec.task);
    let task = spec.task;
    // At ERROR level, so that the span (and its connector and task fields) is there
    // whatever level RUST_LOG lets through: a warning under RUST_LOG=warn names its task.
    let span = tracing::error_span!("task", connector = %spec.connector.name, task);
    let thread = std::thread::Builder::new().name(name).spawn(move || {
        let _entered = span.entered();
        let shared = Arc::new(Shared::new(&spec, sink, metrics, runtime));
        let mut actor = actor::Actor::new(spec, shared, status_tx);
        if let Err(error) = actor.run(control_rx) {
            let transient = error.is_transient();
            tracing::error!(%error, transient, "task failed");
            actor.settle_after_failure();
            actor.fail(error.to_string(), transient);
        }
        actor.forget_partitions();
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
