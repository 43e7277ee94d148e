//! The batch being transformed: the preparer (transform chain, schema, mapping) runs on a
//! thread of its own, so the task thread goes on polling Kafka while a plugin works, or
//! while the search for a batch's failing records spends its deadlines. The consumer stays
//! in its group however long a batch takes; its partitions pause when the buffer is full
//! behind it (backpressure).
//!
//! One batch is transformed at a time, and it may be transformed while the batch before it
//! is being written. Its result waits (`ready`) until that write settles; the compare-and-
//! set offsets are taken then, from what committed.
//!
//! A batch whose partitions moved while it was transformed (revoked, or sent back to their
//! stored offsets after a conflict or a given-up write) is *stale* for them: its result is
//! thrown away, and its other partitions are read again from their stored offsets too, so
//! no record is skipped or written twice.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};

use std::time::Instant;

use super::actor::Actor;
use super::in_flight::InFlight;
use super::partitions::queue_reassign;
use super::wake::Wake;
use super::{Inner, TaskError};
use crate::config::Guarantee;
use crate::deliver::{Job, Plan};
use crate::metrics::BatchStage;
use crate::prepare::{PrepareError, Prepared, Preparer};
use crate::record::{Incoming, Partition};
use crate::retry::Retrying;
use crate::sink::{OffsetAdvance, SinkError};

/// What the worker answers for one batch. On a chain failure (not a record's fault) the
/// batch comes back, to be tried again.
pub(super) type Answer = Result<Prepared, (PrepareError, Option<Vec<Incoming>>)>;

/// The thread that owns the task's [`Preparer`].
pub(super) struct Worker {
    batches: Option<mpsc::Sender<Vec<Incoming>>>,
    /// Raised when the task no longer wants the answer: a search for failing records
    /// stops at its next call instead of spending its whole budget.
    cancel: Arc<AtomicBool>,
    answers: mpsc::Receiver<Answer>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    /// Starts the worker thread, in the caller's span (the task's).
    /// `wake` is rung after each answer.
    /// `runtime` runs the Schema Registry's requests of a batch (the thread blocks on them).
    pub(super) fn start(
        mut preparer: Preparer,
        name: String,
        wake: Arc<Wake>,
        runtime: tokio::runtime::Handle,
    ) -> std::io::Result<Self> {
        let (batches, requests) = mpsc::channel::<Vec<Incoming>>();
        let (answer, answers) = mpsc::channel::<Answer>();
        let cancel = Arc::new(AtomicBool::new(false));
        preparer.set_cancel(cancel.clone());
        let span = tracing::Span::current();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            let _entered = span.entered();
            for batch in requests {
                // The schemas the batch names, first: a registry that does not answer
                // hands the whole batch back, untouched, to be tried again.
                if preparer.uses_registry()
                    && let Err(error) = runtime.block_on(preparer.resolve(&batch))
                {
                    let error = PrepareError::Registry(error);
                    let again = error.retry_reason().is_some().then_some(batch);
                    if answer.send(Err((error, again))).is_err() {
                        break;
                    }
                    wake.ring();
                    continue;
                }
                // Kept to be tried again if the chain cannot run (cloned only with
                // transforms: without them nothing fails that is not a record's).
                let copy = preparer.has_transforms().then(|| batch.clone());
                let result = preparer.prepare(batch).map_err(|error| {
                    let again = error.retry_reason().is_some();
                    (error, if again { copy } else { None })
                });
                if answer.send(result).is_err() {
                    // The task ended and does not want the answer.
                    break;
                }
                wake.ring();
            }
        })?;
        Ok(Worker {
            batches: Some(batches),
            cancel,
            answers,
            thread: Some(thread),
        })
    }

    /// Hands a batch over.
    pub(super) fn send(&self, batch: Vec<Incoming>) -> Result<(), PrepareError> {
        self.batches
            .as_ref()
            .and_then(|b| b.send(batch).ok())
            .ok_or_else(Self::gone)
    }

    /// The answer for the batch handed over, if it is there.
    pub(super) fn try_answer(&self) -> Result<Option<Answer>, PrepareError> {
        match self.answers.try_recv() {
            Ok(answer) => Ok(Some(answer)),
            Err(mpsc::TryRecvError::Empty) => Ok(None),
            Err(mpsc::TryRecvError::Disconnected) => Err(Self::gone()),
        }
    }

    fn gone() -> PrepareError {
        PrepareError::WorkerGone
    }
}

impl Drop for Worker {
    /// Closes the worker's queue and raises the cancel flag; a batch it is still
    /// transforming is abandoned (its records are read again from the stored offsets), and
    /// the thread ends after the guest call it is in (at most one deadline). Not joined: a
    /// stop must not wait for a plugin's deadline.
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        self.batches = None;
        if let Some(thread) = self.thread.take()
            && thread.is_finished()
        {
            let _ = thread.join();
        }
    }
}

/// The batch handed to the worker, from when it is cut until it is written.
pub(super) struct Transforming {
    /// The last offset of each partition in the batch.
    pub(super) last: HashMap<Partition, i64>,
    /// Records in the batch.
    pub(super) records: u64,
    /// The Kafka timestamps of its records (those that have one), for
    /// `sluice_record_latency_seconds` at commit.
    pub(super) timestamps: Vec<i64>,
    /// Partitions that moved since the batch was cut: the result is stale for them.
    pub(super) stale: Vec<Partition>,
    /// The worker's answer, waiting for the write before it to settle.
    pub(super) ready: Option<Prepared>,
}

impl Transforming {
    /// Marks the batch stale for those of `partitions` that it holds.
    pub(super) fn moved(&mut self, partitions: &[Partition]) {
        for partition in partitions {
            if self.last.contains_key(partition) && !self.stale.contains(partition) {
                self.stale.push(partition.clone());
            }
        }
    }

    /// Its partitions that did not move (they must be read again if the batch is thrown
    /// away).
    pub(super) fn unmoved(&self) -> Vec<Partition> {
        self.last
            .keys()
            .filter(|p| !self.stale.contains(p))
            .cloned()
            .collect()
    }
}

/// The actor's side of the hand-over: cutting a batch for the worker, taking its answer,
/// and starting the write of what it prepared.
impl Actor {
    /// Cuts a batch from the buffer and hands it to the transform thread. Every consumed
    /// record advances its partition's offset: it leaves as rows, a delete, a transform's
    /// decision to drop it, or a counted skip.
    pub(super) fn submit(
        &mut self,
        inner: &mut Inner,
        max_records: usize,
        max_bytes: usize,
    ) -> Result<(), TaskError> {
        self.shared
            .metrics
            .observe_stage(BatchStage::Poll, inner.buffer.waited());
        let records = inner.buffer.take_batch(max_records, max_bytes);
        let mut last: HashMap<Partition, i64> = HashMap::new();
        for incoming in &records {
            let record = &incoming.record;
            let entry = last
                .entry((record.topic.clone(), record.partition))
                .or_insert(record.offset);
            *entry = (*entry).max(record.offset);
        }
        let consumed = records.len() as u64;
        let timestamps = records.iter().filter_map(|i| i.record.timestamp).collect();
        let Some(worker) = self.worker.as_ref() else {
            return Err(TaskError::Sink(SinkError::Internal(
                "batch submitted before the task started".into(),
            )));
        };
        worker.send(records)?;
        inner.transforming = Some(Transforming {
            last,
            records: consumed,
            timestamps,
            stale: Vec::new(),
            ready: None,
        });
        Ok(())
    }

    /// Takes the transform thread's answer, if it is there. A chain failure (the chain
    /// cannot be brought back: not a record's fault) puts the batch back in the buffer,
    /// tried again with `errors.retry`'s backoff; other failures fail the task.
    pub(super) fn collect_transformed(&mut self, inner: &mut Inner) -> Result<(), TaskError> {
        if inner
            .transforming
            .as_ref()
            .is_none_or(|t| t.ready.is_some())
        {
            return Ok(());
        }
        let Some(worker) = self.worker.as_ref() else {
            return Ok(());
        };
        let Some(answer) = worker.try_answer()? else {
            return Ok(());
        };
        match answer {
            Ok(prepared) => {
                if let Some(retrying) = self.chain_retrying.take() {
                    tracing::info!(
                        attempts = retrying.attempts(),
                        "the batch is prepared again (transform chain, schema registry)"
                    );
                }
                let metrics = &self.shared.metrics;
                if !self.spec.connector.transforms.is_empty() {
                    metrics.observe_stage(BatchStage::Transform, prepared.transform_time);
                }
                metrics.observe_stage(BatchStage::Map, prepared.map_time);
                if let Some(transforming) = inner.transforming.as_mut() {
                    transforming.ready = Some(prepared);
                }
                Ok(())
            }
            Err((error, Some(batch))) if error.retry_reason().is_some() => {
                let reason = error.retry_reason().unwrap_or("transform_chain");
                let stale = inner
                    .transforming
                    .take()
                    .map(|t| t.stale)
                    .unwrap_or_default();
                self.shared.metrics.retried(reason);
                let Ok(wait) =
                    Retrying::failed(&mut self.chain_retrying, &self.spec.connector.errors.retry)
                else {
                    // Past `errors.retry.max_elapsed`: the task fails with the cause.
                    return Err(error.into());
                };
                let first = self.chain_retrying.is_some_and(|r| r.attempts() == 1);
                match (first, reason) {
                    (true, "schema_registry") => tracing::warn!(%error, ?wait, reason,
                        "the Schema Registry does not answer; the batch waits, partitions paused, and is tried again (errors.retry)"),
                    (true, _) => tracing::warn!(%error, ?wait, reason,
                        "the transform chain cannot run; the batch waits and is tried again (errors.retry)"),
                    (false, _) => {
                        tracing::debug!(%error, ?wait, reason, "the batch still cannot be prepared")
                    }
                }
                // Records of partitions that moved meanwhile are read again from their
                // stored offsets; the rest go back to the front of the buffer.
                let batch = batch
                    .into_iter()
                    .filter(|i| {
                        !stale
                            .iter()
                            .any(|(t, p)| *t == i.record.topic && *p == i.record.partition)
                    })
                    .collect();
                inner.buffer.put_back(batch);
                Ok(())
            }
            Err((error, _)) => Err(error.into()),
        }
    }

    /// Starts writing the transformed batch once the write before it has settled, with the
    /// offsets that committed; throws it away if its partitions moved meanwhile.
    pub(super) fn deliver_transformed(&mut self, inner: &mut Inner) {
        let Some(transforming) = inner.transforming.as_ref() else {
            return;
        };
        if transforming.ready.is_none() || inner.in_flight.is_some() {
            // A stale batch waits too: reading its partitions again from the stored
            // offsets while a write of theirs may still commit would read that write's
            // records a second time.
            return;
        }
        if !transforming.stale.is_empty() {
            // Its partitions moved while it was transformed: nothing of it is written, and
            // the partitions that did not move are read again from their stored offsets
            // as well (their positions are past the batch).
            let unmoved = transforming.unmoved();
            tracing::info!(
                records = transforming.records,
                moved = ?transforming.stale,
                "partitions moved while their batch was transformed: it is read again"
            );
            inner.transforming = None;
            inner.drop_buffered(&unmoved);
            queue_reassign(inner, unmoved);
            return;
        }
        let Some(Transforming {
            last,
            records: consumed,
            timestamps,
            ready: Some(mut prepared),
            ..
        }) = inner.transforming.take()
        else {
            return;
        };
        let (skipped, filtered) = (prepared.skipped, prepared.filtered);
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
        let mut plan = Plan::new(
            self.shared.policy.policy,
            self.shared.policy.dlq_table,
            &mut prepared,
            offsets,
            next_offsets,
        );
        plan.batch.cluster = self.shared.cluster();
        let mut batch_topics: Vec<&str> = plan
            .batch
            .offsets
            .iter()
            .map(|a| a.topic.as_str())
            .collect();
        batch_topics.sort_unstable();
        batch_topics.dedup();
        plan.batch.topic_ids = batch_topics
            .into_iter()
            .filter_map(|t| self.shared.topic_id(t).map(|id| (t.to_string(), id)))
            .collect();
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
            timestamps,
            skipped,
            filtered,
            started: Instant::now(),
            retrying: None,
        });
    }
}
