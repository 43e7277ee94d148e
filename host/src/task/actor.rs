//! The actor loop of a task, on its own thread: take control messages, reap the write in
//! flight, cut and submit batches, apply backpressure, poll. In rust-arroyo's terms: poll,
//! submit, join (with a bounded wait on stop), terminate.

use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::handle::{Control, TaskSpec, TaskStatus};
use super::in_flight::Settle;
use super::partitions::JumpedStart;
use super::state::{TaskEvent, TaskState};
use super::transforming::Worker;
use super::{Inner, Shared, TaskError};
use crate::config::Guarantee;
use crate::kafka::commit::commit_offsets;
use crate::kafka::consumer::{self, PollError, RebalanceListener, SourceConsumer};
use crate::prepare::{PrepareError, Preparer};
use crate::record::{Incoming, Partition};

/// Longest single poll: the loop checks control messages and writes this often.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How long records may wait for their source transaction before a warning says what they
/// wait for (`sink.transactions: source`).
const HELD_WARNING: Duration = Duration::from_secs(30);
/// How many batches may wait behind the one being written before the task stops taking
/// records from its consumer (backpressure).
const BACKPRESSURE_BATCHES: usize = 4;
/// While the buffer is full, the loop still polls this often, one record at most, so that
/// the consumer serves its rebalance callbacks in good time.
const HOLDING_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// How a full buffer holds the source back: by taking no records from librdkafka, whose
/// own prefetch queue (`queued.min.messages`, `queued.max.messages.kbytes`) then stops
/// fetching, or, with `SLUICE_BACKPRESSURE=pause` (kept for comparing the two, see
/// docs/performance.md), by pausing the partitions, which throws away what librdkafka
/// prefetched and fetches it again on resume.
fn backpressure_pauses() -> bool {
    static PAUSES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PAUSES.get_or_init(|| std::env::var("SLUICE_BACKPRESSURE").as_deref() == Ok("pause"))
}
/// How often, at most, an exactly-once task mirrors its committed offsets to the Kafka
/// group (for lag tools).
const MIRROR_INTERVAL: Duration = Duration::from_secs(2);
/// Longest the lag update of a paused task may spend asking the broker for high watermarks.
const LAG_QUERY_BUDGET: Duration = Duration::from_millis(1000);
/// How often the partitions' lag gauges are brought up to date.
const LAG_INTERVAL: Duration = Duration::from_secs(2);

/// The task's thread-side state.
pub(super) struct Actor {
    pub(super) spec: TaskSpec,
    pub(super) shared: Arc<Shared>,
    /// The thread that runs the transforms (instantiated for this task: its own stores),
    /// schema and mapping.
    pub(super) worker: Option<Worker>,
    pub(super) state: TaskState,
    pub(super) status: watch::Sender<TaskStatus>,
    /// The transform chain could not be brought back (a plugin that no longer
    /// instantiates, an `init` that now traps or spins): not a record's fault, so the
    /// batch waits in the buffer and is tried again with `errors.retry`'s backoff.
    pub(super) chain_retrying: Option<crate::retry::Retrying>,
    /// When the lag gauges were last set.
    pub(super) lag_updated: Option<Instant>,
    /// The partitions whose lag gauges are set.
    pub(super) lag_partitions: Vec<Partition>,
    /// When the mirror last went.
    pub(super) mirror_sent: Option<Instant>,
    /// The buffer is full: the loop takes no records (but one per
    /// [`HOLDING_POLL_INTERVAL`]) until a batch leaves it.
    pub(super) holding: bool,
    /// When the loop last polled the consumer.
    pub(super) polled_at: Instant,
}

/// Whether the exactly-once mirror of offsets to the Kafka group goes now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mirror {
    /// When [`MIRROR_INTERVAL`] has passed since the last one.
    WhenDue,
    /// Now: the task stops or fails.
    Now,
}

impl Actor {
    pub(super) fn new(
        spec: TaskSpec,
        shared: Arc<Shared>,
        status: watch::Sender<TaskStatus>,
    ) -> Self {
        Self {
            spec,
            shared,
            worker: None,
            state: TaskState::Subscribing,
            status,
            chain_retrying: None,
            lag_updated: None,
            lag_partitions: Vec::new(),
            mirror_sent: None,
            holding: false,
            polled_at: Instant::now(),
        }
    }

    /// Ends in `Failed` with `error`; `transient` when starting again may help.
    pub(super) fn fail(&mut self, error: String, transient: bool) {
        match self.state.next(TaskEvent::Fail) {
            Ok(next) => {
                tracing::info!(from = %self.state, to = %next, "task state");
                self.state = next;
                self.status.send_replace(TaskStatus {
                    state: next,
                    error: Some(error),
                    transient,
                });
            }
            Err(invalid) => tracing::error!(%invalid, "ignored"),
        }
    }

    /// After a failure: the write in flight finishes (at most its bound, given up during an
    /// outage) before the thread ends, so that no write of this task outlives it while a
    /// restarted task reads the same records.
    pub(super) fn settle_after_failure(&mut self) {
        let shared = self.shared.clone();
        shared.settle_in_flight(&mut shared.lock(), Settle::Finish);
        shared.lock().transforming = None;
    }

    /// Removes the lag gauges of the partitions this task held (it has ended).
    pub(super) fn forget_partitions(&mut self) {
        for (topic, partition) in std::mem::take(&mut self.lag_partitions) {
            self.shared
                .metrics
                .clear_lag(self.spec.task, &topic, partition);
        }
        self.shared.metrics.set_held(self.spec.task, Vec::new());
    }

    /// Sets each held partition's lag (its high watermark, as librdkafka last saw it, minus
    /// its stored next offset), at most every [`LAG_INTERVAL`]; removes the gauges of the
    /// partitions no longer held.
    fn update_lag(&mut self, consumer: &SourceConsumer) {
        if self.lag_updated.is_some_and(|t| t.elapsed() < LAG_INTERVAL) {
            return;
        }
        self.lag_updated = Some(Instant::now());
        let held: Vec<(Partition, Option<i64>)> = {
            let inner = self.shared.lock();
            inner
                .partitions
                .iter()
                .map(|(p, s)| (p.clone(), s.committed.or(s.position)))
                .collect()
        };
        // A partition the operator paused does not fetch: its high watermark is asked of
        // the broker, within LAG_QUERY_BUDGET for all of them (the cached one after that).
        let paused = self.shared.paused.load(Ordering::Relaxed);
        let asking = Instant::now();
        let metrics = &self.shared.metrics;
        let task = self.spec.task;
        for (topic, partition) in &self.lag_partitions {
            if !held.iter().any(|((t, p), _)| t == topic && p == partition) {
                metrics.clear_lag(task, topic, *partition);
            }
        }
        self.lag_partitions.clear();
        metrics.set_held(task, held.iter().map(|(p, _)| p.clone()).collect());
        for ((topic, partition), next) in held {
            let ask = paused && asking.elapsed() < LAG_QUERY_BUDGET;
            let Some(high) = consumer::high_watermark(consumer, &topic, partition, ask) else {
                // Not fetched yet (just assigned): looked up again at the next turn, not in
                // 2 s (a paused partition asked of the broker in vain waits the interval).
                if !ask {
                    self.lag_updated = None;
                }
                continue;
            };
            let lag = next.map_or(high, |next| (high - next).max(0));
            metrics.set_lag(task, &topic, partition, lag);
            self.lag_partitions.push((topic, partition));
        }
    }

    fn transition(&mut self, event: TaskEvent) -> Result<(), TaskError> {
        let next = self.state.next(event)?;
        self.enter(next, None);
        Ok(())
    }

    fn enter(&mut self, next: TaskState, error: Option<String>) {
        tracing::info!(from = %self.state, to = %next, "task state");
        self.state = next;
        self.status.send_replace(TaskStatus {
            state: next,
            error,
            transient: false,
        });
    }

    pub(super) fn run(&mut self, control: mpsc::Receiver<Control>) -> Result<(), TaskError> {
        let mut preparer = Preparer::for_connector(
            &self.spec.connector,
            self.spec.engine.as_ref(),
            self.spec.schema.clone(),
        )?;
        preparer.set_observer(self.shared.metrics.plugin_observer());
        self.worker = Some(
            Worker::start(
                preparer,
                format!("{}-{}-transform", self.spec.connector.name, self.spec.task),
                self.shared.wake.clone(),
                self.shared.runtime.clone(),
            )
            .map_err(PrepareError::WorkerStart)?,
        );
        let listener: Arc<dyn RebalanceListener> = self.shared.clone();
        let consumer = consumer::subscribe(
            &self.spec.kafka,
            &self.spec.brokers,
            &self.spec.connector,
            self.spec.task,
            listener,
        )?;
        // Which cluster this is, before any assignment: stored offsets from another one
        // are not resumed from (delivery.on_offset_out_of_range).
        let _ = self
            .shared
            .cluster
            .set(consumer::cluster_id(&consumer, Duration::from_secs(5)));
        // And which topics: a topic deleted and created again has a new id. A topic that
        // `topics_regex` takes is asked about at its first assignment instead; so is one
        // asked about here in vain.
        let asked = &self.spec.connector.topics;
        if !asked.is_empty() && !self.spec.kafka.is_embedded() {
            match crate::kafka::topic_ids::topic_ids(
                rdkafka::consumer::Consumer::client(&consumer),
                asked,
                Duration::from_secs(5),
            ) {
                Ok(ids) => self.shared.learn_ids(asked, ids),
                Err(why) => {
                    tracing::info!(%why, "the topics' ids are not known yet; asked again at their assignment");
                }
            }
        }
        self.transition(TaskEvent::Subscribed)?;
        let mut late_topics = super::late_topics::LateTopics::new();
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
                    consumer::set_paused(&consumer, true)?;
                    self.transition(TaskEvent::PauseApplied)?;
                }
                Ok(Control::Resume) if self.state == TaskState::Paused => {
                    self.transition(TaskEvent::Resume)?;
                    self.shared.paused.store(false, Ordering::Relaxed);
                    if !self.shared.backpressure.load(Ordering::Relaxed) {
                        consumer::set_paused(&consumer, false)?;
                    }
                    self.transition(TaskEvent::ResumeApplied)?;
                }
                Ok(other) => {
                    tracing::debug!(?other, state = %self.state, "control message has no effect in this state")
                }
                Err(mpsc::TryRecvError::Empty) => {}
            }

            late_topics.look(&consumer, &self.spec.connector);
            if let Err(error) = self.step(&consumer, batch.max_records, max_bytes, batch.linger.0) {
                // The write in flight (of records before the failure) is finished first,
                // and at-least-once offsets go to Kafka, so that a restart does not deliver
                // them again.
                let shared = self.shared.clone();
                shared.settle_in_flight(&mut shared.lock(), Settle::Finish);
                self.commit_to_kafka(&consumer, Mirror::Now);
                return Err(error);
            }

            // Poll: drain what is ready without blocking, then wait a little. A paused
            // consumer has nothing to wait for: it serves its callbacks, then the loop
            // waits for the write or the transform to finish (or the poll interval). A
            // holding task takes no records until a batch leaves the buffer.
            let paused = self.shared.paused.load(Ordering::Relaxed)
                || self.shared.backpressure.load(Ordering::Relaxed);
            let limit = if !self.holding {
                batch.max_records
            } else if self.polled_at.elapsed() >= HOLDING_POLL_INTERVAL {
                1
            } else {
                0
            };
            if limit == 0 {
                self.shared.wake.wait(POLL_INTERVAL);
                continue;
            }
            self.polled_at = Instant::now();
            let mut polled = 0;
            while let Some(message) = consumer.poll(if polled == 0 && !paused && !self.holding {
                POLL_INTERVAL
            } else {
                Duration::ZERO
            }) {
                match message {
                    Ok(message) => {
                        if let Some(since) = broker_trouble.take() {
                            tracing::info!(after = ?since.elapsed(), "records flow again");
                        }
                        self.accept(consumer::to_record(&message));
                    }
                    Err(error) => {
                        match consumer::classify_poll_error(&error) {
                            PollError::OutOfRange
                                if self.spec.connector.delivery.guarantee
                                    == Guarantee::ExactlyOnce =>
                            {
                                self.shared.out_of_range(&consumer)?;
                                break;
                            }
                            PollError::Fatal(reason) => {
                                return Err(TaskError::Consumer {
                                    reason,
                                    source: error,
                                });
                            }
                            PollError::UnknownTopic => {
                                self.unknown_topic(&consumer, error)?;
                                late_topics.look_soon();
                                break;
                            }
                            PollError::OutOfRange | PollError::Transient => {}
                        }
                        // librdkafka reconnects by itself and reports every failed attempt:
                        // one warning when the trouble starts, the rest at debug level.
                        if broker_trouble.is_none() {
                            tracing::warn!(%error,
                                "consumer error; librdkafka keeps reconnecting (further errors at debug level until records flow again)");
                            broker_trouble = Some(Instant::now());
                        } else {
                            tracing::debug!(%error, "consumer error");
                        }
                        break;
                    }
                }
                polled += 1;
                if polled >= limit {
                    break;
                }
            }
            if (paused || self.holding) && polled == 0 {
                self.shared.wake.wait(POLL_INTERVAL);
            }
        }

        self.transition(TaskEvent::Stop)?;
        // Finish the batch in flight (at most FINISH_WAIT, given up during an outage), then
        // leave the group. Records buffered behind it are dropped, not written one batch
        // after another past the stop's bound: nothing of them committed, so the next
        // owner of their partitions reads them again from the stored offsets.
        {
            let shared = self.shared.clone();
            let mut inner = shared.lock();
            self.shared.settle_in_flight(&mut inner, Settle::Finish);
            if inner.transforming.take().is_some() {
                tracing::info!("stopping: the batch being transformed is left to be read again");
            }
            if !inner.buffer.is_empty() {
                tracing::info!("stopping: buffered records are left to be read again");
            }
            if let Some(error) = inner.fatal.take() {
                drop(inner);
                self.commit_to_kafka(&consumer, Mirror::Now);
                return Err(error);
            }
        }
        self.commit_to_kafka(&consumer, Mirror::Now);
        drop(consumer);
        self.worker = None;
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
            self.commit_to_kafka(consumer, Mirror::Now);
            return Err(error);
        }
        if !inner.jumped.is_empty() {
            let jumped = std::mem::take(&mut inner.jumped);
            drop(inner);
            for jump in jumped {
                self.shared.jumped_start(consumer, jump)?;
            }
            inner = shared.lock();
        }
        // Not while a write is in flight: it may still commit, and the stored offsets read
        // now would be behind it (under sink.transactions: source, partitions it did not
        // fail on are moved too).
        if !inner.reassign.is_empty()
            && inner.in_flight.is_none()
            && inner.reassign_retrying.is_none_or(|r| r.is_due())
        {
            let partitions = std::mem::take(&mut inner.reassign);
            drop(inner);
            self.shared.reassign(consumer, &partitions)?;
            inner = shared.lock();
        }
        if let Some(held) = inner.source_transactions.as_ref()
            && let Some(waited) = held.waited()
            && waited >= HELD_WARNING
            && self.shared.held_warnings.loud().is_some()
        {
            tracing::warn!(waited_s = waited.as_secs(), waiting = %held.waiting_for(),
                "sink.transactions: source: records wait for their source transaction to be whole (every partition of the connector's topics must be read by this task)");
        }
        self.collect_transformed(&mut inner)?;
        self.deliver_transformed(&mut inner);
        let full = inner.buffer.holds(1, max_records, max_bytes);
        let due = inner.buffer.lingered(linger);
        let chain_due = self.chain_retrying.is_none_or(|r| r.is_due());
        if inner.transforming.is_none() && !inner.buffer.is_empty() && (full || due) && chain_due {
            self.submit(&mut inner, max_records, max_bytes)?;
        }
        // Backpressure: the buffer may run BACKPRESSURE_BATCHES batches ahead of the write;
        // past that the task holds (takes no more records), and librdkafka's bounded
        // prefetch stops fetching. Nothing is thrown away and fetched again, as a pause
        // would. While a transient failure is retried, the partitions pause: polling goes
        // on, so the consumer stays in its group however long the outage lasts.
        let retrying = self.chain_retrying.is_some()
            || inner
                .in_flight
                .as_ref()
                .is_some_and(|f| f.retrying.is_some());
        let buffer_full = inner
            .buffer
            .holds(BACKPRESSURE_BATCHES, max_records, max_bytes);
        let full = retrying || (buffer_full && backpressure_pauses());
        self.holding = buffer_full && !full;
        drop(inner);
        if full != self.shared.backpressure.load(Ordering::Relaxed) {
            tracing::debug!(paused = full, "backpressure");
            self.shared.backpressure.store(full, Ordering::Relaxed);
            if !self.shared.paused.load(Ordering::Relaxed) {
                consumer::set_paused(consumer, full)?;
            }
        }
        self.commit_to_kafka(consumer, Mirror::WhenDue);
        self.update_lag(consumer);
        Ok(())
    }

    /// Takes a polled record into the buffer, unless its partition is no longer ours, is
    /// waiting for its stored offset, or has seen it already.
    fn accept(&self, incoming: Incoming) {
        let record = &incoming.record;
        self.shared.consumed.inc();
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
        let fresh = std::mem::replace(&mut state.fresh, false);
        match state.position {
            Some(p) if record.offset < p => {
                // Committed already: the consumer is behind where the database says.
                if fresh {
                    tracing::warn!(topic = %record.topic, partition = record.partition, stored = p, got = record.offset,
                        "the first record after an assignment is below the stored offset; records below it are committed already and dropped");
                }
                state.fresh = fresh;
                return;
            }
            Some(p) if record.offset > p && fresh => {
                // The first record is not at the stored offset: retention overtook it, or
                // the broker skipped records. Decided in the loop, which can ask the log.
                state.pending = true;
                inner.jumped.push(JumpedStart {
                    partition: key,
                    expected: p,
                    got: record.offset,
                });
                return;
            }
            Some(p) if record.offset > p => {
                let (topic, partition) = (record.topic.clone(), record.partition);
                if let Err(error) = self.shared.offset_gap(topic, partition, p, record.offset) {
                    inner.fatal.get_or_insert(error);
                    return;
                }
            }
            _ => {}
        }
        state.position = Some(record.offset + 1);
        let Inner {
            buffer,
            source_transactions,
            fatal,
            ..
        } = &mut *inner;
        match source_transactions {
            None => buffer.push(incoming),
            Some(held) => match held.offer(incoming).and_then(|()| held.release()) {
                Ok(units) => {
                    for unit in units {
                        buffer.push_unit(unit);
                    }
                }
                Err(error) => {
                    fatal.get_or_insert(error.into());
                }
            },
        }
    }

    /// The broker does not know a topic or partition: fatal when it is one the task holds
    /// (deleted while assigned; its stored offsets would otherwise wait for a topic of the
    /// same name), a warning when the task only subscribed to it (it may not exist yet) or
    /// when `topics_regex` took it (topics matching a pattern come and go).
    fn unknown_topic(
        &self,
        consumer: &SourceConsumer,
        error: rdkafka::error::KafkaError,
    ) -> Result<(), TaskError> {
        let held: Vec<String> = {
            let inner = self.shared.lock();
            let mut topics: Vec<String> = inner.partitions.keys().map(|(t, _)| t.clone()).collect();
            topics.sort();
            topics.dedup();
            topics
        };
        for topic in held {
            if let Ok(true) = consumer::topic_is_gone(consumer, &topic, Duration::from_secs(5)) {
                if self.spec.connector.topics_regex.is_some() {
                    // Under a pattern, topics come and go: this one leaves the subscription
                    // (and the task) at the next metadata refresh. Its stored offsets stay;
                    // a topic created again under its name is told apart by its id.
                    tracing::warn!(topic, %error,
                        "a topic the pattern took was deleted; it leaves the subscription at the next metadata refresh");
                    continue;
                }
                return Err(TaskError::Consumer {
                    reason: "a topic the task reads was deleted",
                    source: error,
                });
            }
        }
        // Which topics, and when sluice looks again, is the late topics' warning.
        tracing::debug!(%error, "a subscribed topic does not exist (yet); its partitions are read once it does");
        Ok(())
    }

    /// Offsets go to the Kafka group once their rows are committed. At-least-once: that is
    /// where a restart resumes, so the commit is synchronous.
    ///
    /// Exactly-once: the database holds the offsets and sluice resumes from there only;
    /// they also go to the Kafka group, asynchronously and at most every
    /// [`MIRROR_INTERVAL`] (and when the task stops or fails), so that the group shows its
    /// progress and lag to `kafka-consumer-groups`, Burrow or KEDA. Never read back. What
    /// is pending goes with the partitions when they are revoked (the rebalance callback
    /// commits it), an assigned partition's stored offset is mirrored by its new owner, and
    /// a commit the broker refused is sent again (`mirror_refused`), so the group's view
    /// reaches the database's even when nothing more is read.
    fn commit_to_kafka(&mut self, consumer: &SourceConsumer, mirror: Mirror) {
        if self.shared.guarantee == Guarantee::ExactlyOnce {
            let due = self
                .mirror_sent
                .is_none_or(|at| at.elapsed() >= MIRROR_INTERVAL);
            if mirror == Mirror::WhenDue && !due {
                return;
            }
            // Only partitions still held: a revoked one's pending offset went with the
            // revocation, and its new owner mirrors it from then on.
            let commits: Vec<(Partition, i64)> = {
                let mut inner = self.shared.lock();
                if inner.kafka_commits.is_empty() {
                    return;
                }
                let pending = std::mem::take(&mut inner.kafka_commits);
                let held: Vec<(Partition, i64)> = pending
                    .into_iter()
                    .filter(|(partition, _)| inner.partitions.contains_key(partition))
                    .collect();
                for (partition, next) in &held {
                    inner.mirrored.insert(partition.clone(), *next);
                }
                held
            };
            self.mirror_sent = Some(Instant::now());
            if commits.is_empty() {
                return;
            }
            if let Err(error) =
                commit_offsets(consumer, &commits, rdkafka::consumer::CommitMode::Async)
            {
                tracing::debug!(%error, "showing progress to the Kafka group failed (the database holds the offsets)");
                self.shared.mirror_refused(&commits);
            }
            return;
        }
        let commits = self.shared.take_kafka_commits();
        if commits.is_empty() {
            return;
        }
        if let Err(error) = commit_offsets(consumer, &commits, rdkafka::consumer::CommitMode::Sync)
        {
            tracing::warn!(%error, "committing offsets to Kafka failed; those records will be delivered again");
        }
    }
}
