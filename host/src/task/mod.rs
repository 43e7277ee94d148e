//! A task: one consumer, driven through its [state machine](state) on a thread of its own,
//! feeding batches to the sink.
//!
//! The task thread polls Kafka without pause, so the consumer stays in its group however
//! slow the database is. A batch is cut when it reaches `max_records` or `max_bytes`, or
//! `linger` after its first record; it is mapped on the task thread and written on the
//! tokio runtime while the next batch fills. When the next batch is full before the write
//! ends, the partitions are paused (backpressure) and polling goes on.
//!
//! The state that both the loop and the rebalance callback touch sits in [`Shared`]; the
//! loop never holds its lock across `poll`, which is where the callback runs.

pub mod deliver;
pub mod state;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::watch;

use crate::config::{ConnectorConfig, ErrorPolicy, Guarantee, KafkaConfig, RetryConfig};
use crate::failure::Failure;
use crate::prepare::{Incoming, Preparer};
use crate::retry::Retrying;
use crate::sink::{OffsetAdvance, Sink, SinkError};
use crate::source::{self, Partition, RebalanceListener, SourceConsumer};
use crate::validate::RecordSchema;
pub use deliver::{DeliverError, Policy};
use deliver::{Delivered, Job, Plan};
pub use state::{InvalidTransition, TaskEvent, TaskState};

/// Why a task stopped in `Failed`.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error("sink: {0}")]
    Sink(#[from] SinkError),
    #[error("{0}")]
    Deliver(#[from] DeliverError),
    /// `errors.policy: fail` and a record failed; the records before it committed.
    #[error("{0} (errors.policy is fail)")]
    Record(Failure),
    #[error("transform: {0}")]
    Transform(#[from] sluice_transform::TransformError),
    #[error("{0}")]
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
    control: mpsc::Sender<Control>,
    pub status: watch::Receiver<TaskStatus>,
    thread: Option<JoinHandle<()>>,
}

impl TaskHandle {
    /// Sends a control message; a task that has ended ignores it.
    pub fn send(&self, control: Control) {
        let _ = self.control.send(control);
    }

    /// Waits for the task thread to end.
    pub fn join(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    /// True once the thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }
}

/// Starts a task on its own thread.
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
    let thread = std::thread::Builder::new().name(name).spawn(move || {
        let connector = spec.connector.name.clone();
        let mut actor = Actor::new(spec, sink, metrics, runtime, status_tx);
        let result = actor.run(control_rx);
        if let Err(error) = result {
            tracing::error!(connector, task, %error, "task failed");
            actor.report(TaskEvent::Fail, Some(error.to_string()));
        }
    })?;
    Ok(TaskHandle {
        task,
        control: control_tx,
        status: status_rx,
        thread: Some(thread),
    })
}

/// Longest wait for one attempt at reading stored offsets where polling waits for it (an
/// assignment callback, the loop); past it the partitions wait and the loop tries again
/// later, polling meanwhile.
const OFFSETS_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest wait for the batch being written when a revocation or a stop needs it settled;
/// past it the batch is given up (and read again).
const FINISH_WAIT: Duration = Duration::from_secs(5);
/// Longest single poll: the loop checks control messages and writes this often.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How many batches may wait behind the one being written before the partitions pause.
const BACKPRESSURE_BATCHES: usize = 4;

/// How [`Shared::settle_in_flight`] treats the batch being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settle {
    /// Apply a finished result, retry what is due, never wait.
    Poll,
    /// Wait for the result; give the batch up on a transient failure.
    Finish,
}

/// What a partition looks like to the task.
#[derive(Debug, Clone, Copy, Default)]
struct PartitionState {
    /// The stored next_offset (exactly-once): where the next batch's compare-and-set starts.
    committed: Option<i64>,
    /// The offset after the last record buffered, to drop records seen twice.
    position: Option<i64>,
    /// Its start is being (re-)read from the stored offsets: records that arrive meanwhile
    /// are dropped, the consumer is moved to the start once it is known.
    pending: bool,
}

/// A batch being written.
struct InFlight {
    handle: tokio::task::JoinHandle<Result<Delivered, DeliverError>>,
    job: Arc<Job>,
    /// Records the batch covers (written, deleted or skipped).
    records: u64,
    skipped: u64,
    /// Set while a transient failure is waited out.
    retrying: Option<Retrying>,
}

/// What the loop and the rebalance callback share.
struct Inner {
    partitions: HashMap<Partition, PartitionState>,
    buffer: Vec<Incoming>,
    buffer_bytes: usize,
    batch_started: Option<Instant>,
    in_flight: Option<InFlight>,
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

struct Shared {
    inner: Mutex<Inner>,
    sink: Arc<Sink>,
    runtime: Handle,
    metrics: Arc<Metrics>,
    connector: String,
    task: usize,
    guarantee: Guarantee,
    policy: Arc<Policy>,
    /// Whether dead letters go to the sink's dead-letter table.
    dlq_table: bool,
    retry: RetryConfig,
    /// The operator paused the task.
    paused: AtomicBool,
    /// The next batch is full while the previous one is still being written.
    backpressure: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave `Inner` half-updated in a way that
        // loses records (the offsets in the database are the truth), so go on.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Waits for the in-flight write, then applies its result. Transient failures are
    /// retried here too, so a revocation never leaves a batch behind half-decided.
    ///
    /// `Settle::Poll` applies a finished result and retries what is due; `Settle::Finish`
    /// waits for the result, and gives the batch up on a transient failure instead of
    /// waiting the outage out (a revocation or a stop must not hold the poll loop): nothing
    /// of it committed, and whoever owns its partitions next reads it again. Returns true
    /// when the batch was given up.
    fn settle_in_flight(&self, inner: &mut Inner, mode: Settle) -> bool {
        let wait = mode == Settle::Finish;
        loop {
            let Some(flight) = inner.in_flight.as_mut() else {
                return false;
            };
            if wait && flight.retrying.is_some() {
                // Already waiting out an outage: no point in waiting here.
                self.give_up(inner, "waiting out a transient failure");
                return true;
            }
            if let Some(retrying) = flight.retrying.as_mut() {
                if !retrying.is_due() {
                    return false;
                }
                if retrying.start_if_due() {
                    flight.handle = self.spawn_delivery(flight.job.clone());
                }
            }
            if !wait && !flight.handle.is_finished() {
                return false;
            }
            let Some(mut flight) = inner.in_flight.take() else {
                return false;
            };
            // Finishing waits a bounded time: a database that does not answer within it is
            // treated as away (a write that committed meanwhile is fenced for whoever
            // reads the batch again by the compare-and-set).
            let waited = self
                .runtime
                .block_on(async { tokio::time::timeout(FINISH_WAIT, &mut flight.handle).await });
            let result = match waited {
                Ok(Ok(result)) => result,
                Ok(Err(join)) => Err(DeliverError::Sink(SinkError::Invalid(format!(
                    "write task ended abnormally: {join}"
                )))),
                Err(_) => {
                    inner.in_flight = Some(flight);
                    self.give_up(inner, "no answer from the database in time");
                    return true;
                }
            };
            match result {
                Ok(delivered) => {
                    self.committed(inner, &flight, delivered);
                    return false;
                }
                Err(DeliverError::Sink(SinkError::OffsetConflict {
                    topic,
                    partition,
                    expected,
                })) => {
                    self.metrics.conflicts.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(connector = %self.connector, task = self.task, topic, partition, ?expected,
                        "offset conflict: another task moved this partition on; batch rolled back, re-reading offsets");
                    // Everything buffered for the batch's partitions is re-read from the
                    // stored offsets.
                    let touched = flight.job.partitions.clone();
                    drop_buffered(inner, &touched);
                    queue_reassign(inner, touched);
                    return false;
                }
                Err(error) if error.is_transient() && wait => {
                    inner.in_flight = Some(flight);
                    self.give_up(inner, &error.to_string());
                    return true;
                }
                Err(error) if error.is_transient() => {
                    if flight.retrying.is_none() {
                        tracing::warn!(connector = %self.connector, task = self.task, %error,
                            "transient failure; partitions paused, retrying with backoff until errors.retry.max_elapsed");
                    }
                    if let Err(elapsed) = Retrying::failed(&mut flight.retrying, &self.retry) {
                        inner.fatal = Some(TaskError::RetriesExhausted {
                            elapsed,
                            source: error,
                        });
                        return false;
                    }
                    inner.in_flight = Some(flight);
                }
                Err(error) => {
                    inner.fatal = Some(TaskError::Deliver(error));
                    return false;
                }
            }
        }
    }

    /// Gives the in-flight batch up: nothing of it committed, so its partitions are read
    /// again from the stored offsets (here, or by their next owner).
    fn give_up(&self, inner: &mut Inner, why: &str) {
        let Some(flight) = inner.in_flight.take() else {
            return;
        };
        flight.handle.abort();
        tracing::warn!(connector = %self.connector, task = self.task, records = flight.records, why,
            "partitions revoked or task stopping during a transient failure: the batch is given up and will be read again");
        let touched = flight.job.partitions.clone();
        drop_buffered(inner, &touched);
        queue_reassign(inner, touched);
    }

    /// One attempt at reading a topic's stored offsets, within [`OFFSETS_READ_TIMEOUT`]:
    /// called where polling waits for it (an assignment, the loop), so it must not wait
    /// out an outage.
    fn read_offsets_once(&self, topic: &str) -> Result<HashMap<i32, i64>, SinkError> {
        self.runtime.block_on(async {
            tokio::time::timeout(OFFSETS_READ_TIMEOUT, self.sink.read_offsets(topic))
                .await
                .unwrap_or(Err(SinkError::Timeout {
                    action: "read offsets",
                    table: "sluice_offsets".into(),
                    after: OFFSETS_READ_TIMEOUT,
                }))
        })
    }

    fn spawn_delivery(
        &self,
        job: Arc<Job>,
    ) -> tokio::task::JoinHandle<Result<Delivered, DeliverError>> {
        let sink = self.sink.clone();
        let policy = self.policy.clone();
        let dlq_table = self.dlq_table;
        self.runtime
            .spawn(async move { deliver::deliver(sink, policy, dlq_table, job).await })
    }

    fn committed(&self, inner: &mut Inner, flight: &InFlight, delivered: Delivered) {
        if let Some(retrying) = &flight.retrying {
            tracing::info!(connector = %self.connector, task = self.task, attempts = retrying.attempts(), "recovered; batch committed, partitions resume");
        }
        for failure in &delivered.handled {
            tracing::warn!(connector = %self.connector, task = self.task, topic = %failure.topic, partition = failure.partition,
                offset = failure.offset, stage = %failure.stage, class = failure.class, policy = self.policy.policy.name(),
                error = %failure.message, "record failed");
        }
        match self.policy.policy {
            ErrorPolicy::Dlq => self
                .metrics
                .dead_letters
                .fetch_add(delivered.dead_letters as u64, Ordering::Relaxed),
            _ => self
                .metrics
                .failed_skipped
                .fetch_add(delivered.handled.len() as u64, Ordering::Relaxed),
        };
        if let Some(failure) = delivered.fatal {
            inner.fatal = Some(TaskError::Record(failure));
        }
        for advance in &delivered.offsets {
            if let Some(state) = inner
                .partitions
                .get_mut(&(advance.topic.clone(), advance.partition))
            {
                state.committed = Some(advance.next);
            }
        }
        if self.guarantee == Guarantee::AtLeastOnce {
            inner.kafka_commits.extend(delivered.next_offsets);
        }
        self.metrics
            .committed
            .fetch_add(flight.records, Ordering::Relaxed);
        self.metrics
            .skipped
            .fetch_add(flight.skipped, Ordering::Relaxed);
        self.metrics.batches.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(connector = %self.connector, task = self.task, records = flight.records, "batch committed");
    }
}

/// Moves `partitions` to their stored offsets at the loop's next turn; until then their
/// records are dropped.
fn queue_reassign(inner: &mut Inner, partitions: Vec<Partition>) {
    for partition in partitions {
        if let Some(state) = inner.partitions.get_mut(&partition) {
            state.pending = true;
            if !inner.reassign.contains(&partition) {
                inner.reassign.push(partition);
            }
        }
    }
}

fn drop_buffered(inner: &mut Inner, partitions: &[Partition]) {
    let before = inner.buffer.len();
    inner.buffer.retain(|i| {
        !partitions
            .iter()
            .any(|(t, p)| *t == i.record.topic && *p == i.record.partition)
    });
    if inner.buffer.len() != before {
        inner.buffer_bytes = inner
            .buffer
            .iter()
            .map(|i| i.record.payload_bytes() as usize)
            .sum();
        if inner.buffer.is_empty() {
            inner.batch_started = None;
        }
    }
    for partition in partitions {
        if let Some(state) = inner.partitions.get_mut(partition) {
            state.position = state.committed;
        }
    }
}

impl RebalanceListener for Shared {
    fn on_revoke(&self, partitions: &[Partition]) {
        let mut inner = self.lock();
        // The in-flight batch either commits (we still own its partitions until this
        // returns, and a compare-and-set fences it if someone took them already) or, when
        // the database is away, is given up.
        self.settle_in_flight(&mut inner, Settle::Finish);
        drop_buffered(&mut inner, partitions);
        for partition in partitions {
            inner.partitions.remove(partition);
        }
        inner.reassign.retain(|p| !partitions.contains(p));
    }

    fn on_assign(&self, partitions: &[Partition]) -> Vec<(Partition, Option<i64>)> {
        let mut stored: HashMap<String, HashMap<i32, i64>> = HashMap::new();
        // Topics whose stored offsets could not be read now (the database is away): their
        // partitions are read again from the loop, not here: a callback that waits out an
        // outage stops polling and gets the consumer thrown out of its group.
        let mut unknown: Vec<String> = Vec::new();
        if self.guarantee == Guarantee::ExactlyOnce {
            for (topic, _) in partitions {
                if stored.contains_key(topic) || unknown.contains(topic) {
                    continue;
                }
                // One short attempt: a database that does not answer at once is retried
                // from the loop.
                match self.read_offsets_once(topic) {
                    Ok(offsets) => {
                        stored.insert(topic.clone(), offsets);
                    }
                    Err(e) if e.is_transient() => {
                        tracing::warn!(connector = %self.connector, task = self.task, topic, error = %e,
                            "cannot read stored offsets at assignment; its partitions wait, and polling goes on");
                        unknown.push(topic.clone());
                    }
                    Err(source) => {
                        self.lock().fatal = Some(TaskError::Offsets {
                            topic: topic.clone(),
                            source,
                        });
                        stored.insert(topic.clone(), HashMap::new());
                    }
                }
            }
        }
        let mut inner = self.lock();
        let mut waiting = Vec::new();
        let starts = partitions
            .iter()
            .map(|partition| {
                let start = stored.get(&partition.0).and_then(|o| o.get(&partition.1)).copied();
                inner.partitions.insert(partition.clone(), PartitionState { committed: start, position: start, pending: false });
                if unknown.contains(&partition.0) {
                    waiting.push(partition.clone());
                } else {
                    tracing::info!(connector = %self.connector, task = self.task, topic = %partition.0, partition = partition.1,
                        start = ?start, "resuming from stored offset");
                }
                (partition.clone(), start)
            })
            .collect();
        queue_reassign(&mut inner, waiting);
        starts
    }

    fn take_kafka_commits(&self) -> Vec<(Partition, i64)> {
        std::mem::take(&mut self.lock().kafka_commits)
    }

    fn failed(&self, error: rdkafka::error::KafkaError) {
        self.lock().fatal.get_or_insert(TaskError::Kafka(error));
    }

    fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed) || self.backpressure.load(Ordering::Relaxed)
    }
}

/// The task's thread-side state.
struct Actor {
    spec: TaskSpec,
    shared: Arc<Shared>,
    /// Transforms (instantiated for this task: its own stores), schema and mapping.
    preparer: Option<Preparer>,
    state: TaskState,
    status: watch::Sender<TaskStatus>,
}

impl Actor {
    fn new(
        spec: TaskSpec,
        sink: Arc<Sink>,
        metrics: Arc<Metrics>,
        runtime: Handle,
        status: watch::Sender<TaskStatus>,
    ) -> Self {
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                partitions: HashMap::new(),
                buffer: Vec::new(),
                buffer_bytes: 0,
                batch_started: None,
                in_flight: None,
                fatal: None,
                reassign: Vec::new(),
                reassign_retrying: None,
                kafka_commits: Vec::new(),
            }),
            sink,
            runtime,
            metrics,
            connector: spec.connector.name.clone(),
            task: spec.task,
            guarantee: spec.connector.delivery.guarantee,
            policy: spec.policy.clone(),
            dlq_table: spec
                .connector
                .errors
                .dlq
                .as_ref()
                .is_some_and(|d| d.table.is_some()),
            retry: spec.connector.errors.retry.clone(),
            paused: AtomicBool::new(false),
            backpressure: AtomicBool::new(false),
        });
        Self {
            spec,
            shared,
            preparer: None,
            state: TaskState::Subscribing,
            status,
        }
    }

    /// Applies a transition and reports it.
    fn report(&mut self, event: TaskEvent, error: Option<String>) {
        match self.state.next(event) {
            Ok(next) => {
                tracing::info!(connector = %self.spec.connector.name, task = self.spec.task, from = %self.state, to = %next, "task state");
                self.state = next;
                self.status.send_replace(TaskStatus { state: next, error });
            }
            Err(invalid) => {
                tracing::error!(connector = %self.spec.connector.name, task = self.spec.task, %invalid, "ignored")
            }
        }
    }

    fn transition(&mut self, event: TaskEvent) -> Result<(), TaskError> {
        let next = self.state.next(event)?;
        tracing::info!(connector = %self.spec.connector.name, task = self.spec.task, from = %self.state, to = %next, "task state");
        self.state = next;
        self.status.send_replace(TaskStatus {
            state: next,
            error: None,
        });
        Ok(())
    }

    fn run(&mut self, control: mpsc::Receiver<Control>) -> Result<(), TaskError> {
        let mut chain = None;
        if let Some(engine) = &self.spec.engine
            && !self.spec.connector.transforms.is_empty()
        {
            let specs: Vec<_> = self
                .spec
                .connector
                .transforms
                .iter()
                .map(|t| t.spec())
                .collect();
            chain = Some(sluice_transform::TransformChain::new(
                engine,
                &self.spec.connector.name,
                &specs,
            )?);
        }
        self.preparer = Some(Preparer::new(
            &self.spec.connector,
            chain,
            self.spec.schema.clone(),
        ));
        let listener: Arc<dyn RebalanceListener> = self.shared.clone();
        let consumer = source::subscribe(
            &self.spec.kafka,
            &self.spec.brokers,
            &self.spec.connector,
            self.spec.task,
            listener,
        )?;
        self.transition(TaskEvent::Subscribed)?;
        let batch = self.spec.connector.batch.clone();
        let max_bytes = usize::try_from(batch.max_bytes.0).unwrap_or(usize::MAX);
        // Since when the consumer reports errors without records in between.
        let mut broker_trouble: Option<Instant> = None;
        loop {
            match control.try_recv() {
                Ok(Control::Stop) | Err(mpsc::TryRecvError::Disconnected) => break,
                Ok(Control::Pause) if self.state == TaskState::Consuming => {
                    self.transition(TaskEvent::Pause)?;
                    self.shared.paused.store(true, Ordering::Relaxed);
                    source::set_paused(&consumer, true)?;
                    self.transition(TaskEvent::PauseApplied)?;
                }
                Ok(Control::Resume) if self.state == TaskState::Paused => {
                    self.transition(TaskEvent::Resume)?;
                    self.shared.paused.store(false, Ordering::Relaxed);
                    if !self.shared.backpressure.load(Ordering::Relaxed) {
                        source::set_paused(&consumer, false)?;
                    }
                    self.transition(TaskEvent::ResumeApplied)?;
                }
                Ok(other) => {
                    tracing::debug!(connector = %self.spec.connector.name, task = self.spec.task, ?other, state = %self.state, "control message has no effect in this state")
                }
                Err(mpsc::TryRecvError::Empty) => {}
            }

            self.step(&consumer, batch.max_records, max_bytes, batch.linger.0)?;

            // Poll: drain what is ready without blocking, then wait a little.
            let mut polled = 0;
            while let Some(message) = consumer.poll(if polled == 0 {
                POLL_INTERVAL
            } else {
                Duration::ZERO
            }) {
                match message {
                    Ok(message) => {
                        if let Some(since) = broker_trouble.take() {
                            tracing::info!(connector = %self.spec.connector.name, task = self.spec.task,
                                after = ?since.elapsed(), "records flow again");
                        }
                        let incoming = source::to_record(&message);
                        self.accept(incoming);
                    }
                    Err(error) => {
                        // librdkafka reconnects by itself and reports every failed attempt:
                        // one warning when the trouble starts, the rest at debug level.
                        if broker_trouble.is_none() {
                            tracing::warn!(connector = %self.spec.connector.name, task = self.spec.task, %error,
                                "consumer error; librdkafka keeps reconnecting (further errors at debug level until records flow again)");
                            broker_trouble = Some(Instant::now());
                        } else {
                            tracing::debug!(connector = %self.spec.connector.name, task = self.spec.task, %error, "consumer error");
                        }
                        break;
                    }
                }
                polled += 1;
                if polled >= batch.max_records {
                    break;
                }
            }
        }

        self.transition(TaskEvent::Stop)?;
        // Commit what was read, then leave the group.
        {
            let shared = self.shared.clone();
            let mut inner = shared.lock();
            // During an outage the batches are given up, not waited for: the next start
            // reads them again from the stored offsets.
            let mut gave_up = self.shared.settle_in_flight(&mut inner, Settle::Finish);
            while !gave_up && inner.fatal.is_none() && !inner.buffer.is_empty() {
                self.submit(&mut inner, batch.max_records, max_bytes)?;
                gave_up = self.shared.settle_in_flight(&mut inner, Settle::Finish);
            }
            if let Some(error) = inner.fatal.take() {
                drop(inner);
                self.commit_to_kafka(&consumer);
                return Err(error);
            }
        }
        self.commit_to_kafka(&consumer);
        drop(consumer);
        self.transition(TaskEvent::Closed)?;
        Ok(())
    }

    /// One turn of the loop between polls: reap the write, fail on a fatal error, move
    /// partitions back after a conflict, cut and submit a batch, apply backpressure.
    fn step(
        &mut self,
        consumer: &SourceConsumer,
        max_records: usize,
        max_bytes: usize,
        linger: Duration,
    ) -> Result<(), TaskError> {
        let shared = self.shared.clone();
        let mut inner = shared.lock();
        self.shared.settle_in_flight(&mut inner, Settle::Poll);
        if let Some(error) = inner.fatal.take() {
            // At-least-once: what committed before the failure is not read again.
            drop(inner);
            self.commit_to_kafka(consumer);
            return Err(error);
        }
        if !inner.reassign.is_empty() && inner.reassign_retrying.is_none_or(|r| r.is_due()) {
            let partitions = std::mem::take(&mut inner.reassign);
            drop(inner);
            self.reassign(consumer, &partitions)?;
            inner = shared.lock();
        }
        let full = inner.buffer.len() >= max_records || inner.buffer_bytes >= max_bytes;
        let due = inner.batch_started.is_some_and(|t| t.elapsed() >= linger);
        if inner.in_flight.is_none() && !inner.buffer.is_empty() && (full || due) {
            self.submit(&mut inner, max_records, max_bytes)?;
        }
        // Pausing purges librdkafka's prefetched records and costs a fetch round trip on
        // resume, so the buffer may run BACKPRESSURE_BATCHES batches ahead before it does.
        // While a transient failure is retried, the partitions pause too: polling goes on,
        // so the consumer stays in its group.
        let retrying = inner
            .in_flight
            .as_ref()
            .is_some_and(|f| f.retrying.is_some());
        let full = retrying
            || inner.buffer.len() >= max_records * BACKPRESSURE_BATCHES
            || inner.buffer_bytes >= max_bytes.saturating_mul(BACKPRESSURE_BATCHES);
        drop(inner);
        if full != self.shared.backpressure.load(Ordering::Relaxed) {
            tracing::debug!(connector = %self.spec.connector.name, task = self.spec.task, paused = full, "backpressure");
            self.shared.backpressure.store(full, Ordering::Relaxed);
            if !self.shared.paused.load(Ordering::Relaxed) {
                source::set_paused(consumer, full)?;
            }
        }
        self.commit_to_kafka(consumer);
        Ok(())
    }

    fn accept(&self, incoming: Incoming) {
        let record = &incoming.record;
        self.shared.metrics.consumed.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.shared.lock();
        let key = (record.topic.clone(), record.partition);
        let Some(state) = inner.partitions.get_mut(&key) else {
            // Not ours (any more): a record fetched before a revocation.
            return;
        };
        if state.pending {
            // Read again from its stored offset once that is known.
            return;
        }
        match state.position {
            Some(p) if record.offset < p => return,
            Some(p) if record.offset > p => {
                self.shared
                    .metrics
                    .offset_gaps
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(connector = %self.spec.connector.name, task = self.spec.task, topic = %record.topic,
                    partition = record.partition, expected = p, got = record.offset, "offset gap");
            }
            _ => {}
        }
        state.position = Some(record.offset + 1);
        inner.buffer_bytes += record.payload_bytes() as usize;
        inner.batch_started.get_or_insert_with(Instant::now);
        inner.buffer.push(incoming);
    }

    /// Transforms and maps the buffered records and starts writing them with their
    /// offsets. Every consumed record advances its partition's offset: it leaves as rows, a
    /// delete, a transform's decision to drop it, or a counted skip.
    fn submit(
        &mut self,
        inner: &mut Inner,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<(), TaskError> {
        // The oldest records, up to one batch's worth (at least one record).
        let mut take = 0;
        let mut bytes = 0;
        for incoming in &inner.buffer {
            let size = incoming.record.payload_bytes() as usize;
            if take > 0 && (take >= max_records || bytes + size > max_bytes) {
                break;
            }
            take += 1;
            bytes += size;
        }
        let records: Vec<Incoming> = inner.buffer.drain(..take).collect();
        inner.buffer_bytes = inner.buffer_bytes.saturating_sub(bytes);
        if inner.buffer.is_empty() {
            inner.batch_started = None;
        }
        let mut last: HashMap<Partition, i64> = HashMap::new();
        for incoming in &records {
            let record = &incoming.record;
            let entry = last
                .entry((record.topic.clone(), record.partition))
                .or_insert(record.offset);
            *entry = (*entry).max(record.offset);
        }
        let consumed = records.len() as u64;
        let Some(preparer) = self.preparer.as_mut() else {
            return Err(TaskError::Sink(SinkError::Invalid(
                "internal: batch submitted before the task started".into(),
            )));
        };
        let mut prepared = preparer.prepare(records)?;
        let skipped = prepared.skipped;
        let next_offsets: Vec<(Partition, i64)> =
            last.into_iter().map(|(p, o)| (p, o + 1)).collect();
        let offsets = if self.shared.guarantee == Guarantee::ExactlyOnce {
            next_offsets
                .iter()
                .map(|((topic, partition), next)| OffsetAdvance {
                    topic: topic.clone(),
                    partition: *partition,
                    expected: inner
                        .partitions
                        .get(&(topic.clone(), *partition))
                        .and_then(|s| s.committed),
                    next: *next,
                })
                .collect()
        } else {
            Vec::new()
        };
        let partitions = next_offsets.iter().map(|(p, _)| p.clone()).collect();
        let plan = Plan::new(
            self.shared.policy.policy,
            self.shared.dlq_table,
            &mut prepared,
            offsets,
            next_offsets,
        );
        let job = Arc::new(Job {
            plan: tokio::sync::Mutex::new(plan),
            prepared,
            partitions,
        });
        let handle = self.shared.spawn_delivery(job.clone());
        inner.in_flight = Some(InFlight {
            handle,
            job,
            records: consumed,
            skipped,
            retrying: None,
        });
        Ok(())
    }

    /// After an offset conflict, or an assignment while the database was away: read the
    /// stored offsets and move the partitions we still own there. A transient failure puts
    /// them back in the queue for a later turn (with backoff); polling goes on meanwhile.
    fn reassign(
        &self,
        consumer: &SourceConsumer,
        partitions: &[Partition],
    ) -> Result<(), TaskError> {
        let mut stored: HashMap<&str, HashMap<i32, i64>> = HashMap::new();
        for (topic, _) in partitions {
            if stored.contains_key(topic.as_str()) {
                continue;
            }
            let read = if self.shared.guarantee == Guarantee::ExactlyOnce {
                self.shared.read_offsets_once(topic)
            } else {
                // At-least-once keeps no offsets in the database: the group's apply.
                Ok(HashMap::new())
            };
            match read {
                Ok(offsets) => {
                    stored.insert(topic, offsets);
                }
                Err(source) if source.is_transient() => {
                    return self.retry_reassign(partitions, source);
                }
                Err(source) => {
                    return Err(TaskError::Offsets {
                        topic: topic.clone(),
                        source,
                    });
                }
            }
        }
        let mut starts: Vec<(Partition, Option<i64>)> = partitions
            .iter()
            .map(|p| {
                (
                    p.clone(),
                    stored.get(p.0.as_str()).and_then(|o| o.get(&p.1)).copied(),
                )
            })
            .collect();
        {
            let mut inner = self.shared.lock();
            if let Some(retrying) = inner.reassign_retrying.take() {
                tracing::info!(connector = %self.spec.connector.name, task = self.spec.task,
                    attempts = retrying.attempts(), "stored offsets readable again");
            }
            starts.retain(|(p, _)| inner.partitions.contains_key(p));
            for (p, start) in &starts {
                inner.partitions.insert(
                    p.clone(),
                    PartitionState {
                        committed: *start,
                        position: *start,
                        pending: false,
                    },
                );
            }
        }
        if !starts.is_empty() {
            tracing::info!(connector = %self.spec.connector.name, task = self.spec.task, ?starts, "moving partitions to their stored offsets");
            source::reassign(consumer, &starts)?;
        }
        Ok(())
    }

    fn retry_reassign(&self, partitions: &[Partition], error: SinkError) -> Result<(), TaskError> {
        let mut inner = self.shared.lock();
        if inner.reassign_retrying.is_none() {
            tracing::warn!(connector = %self.spec.connector.name, task = self.spec.task, %error,
                "cannot read stored offsets yet; those partitions wait, retrying with backoff");
        }
        if let Err(elapsed) = Retrying::failed(&mut inner.reassign_retrying, &self.shared.retry) {
            return Err(TaskError::RetriesExhausted {
                elapsed,
                source: DeliverError::Sink(error),
            });
        }
        queue_reassign(&mut inner, partitions.to_vec());
        Ok(())
    }

    /// At-least-once: offsets go to the Kafka group once their rows are committed.
    fn commit_to_kafka(&self, consumer: &SourceConsumer) {
        let commits = self.shared.take_kafka_commits();
        if commits.is_empty() {
            return;
        }
        if let Err(error) = source::commit_offsets(consumer, &commits) {
            tracing::warn!(connector = %self.spec.connector.name, task = self.spec.task, %error, "committing offsets to Kafka failed; those records will be delivered again");
        }
    }
}
