//! The batch being written: started on the tokio runtime while the task thread goes on
//! polling, then reaped (settled) on the task thread: committed, rolled back on an offset
//! conflict, retried with backoff on a transient failure, or given up when a revocation or
//! a stop cannot wait for an outage to end.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use super::partitions::queue_reassign;
use super::{Inner, Shared, TaskError};
use crate::config::ErrorPolicy;
use crate::deliver::{self, DeliverError, Delivered, Job};
use crate::metrics::BatchStage;
use crate::retry::Retrying;
use crate::sink::SinkError;

/// Longest wait for the batch being written when a revocation or a stop needs it settled;
/// past it the batch is given up (and read again).
const FINISH_WAIT: Duration = Duration::from_secs(5);

/// A write running on the runtime. Its result comes through a channel, sent before the
/// task's bell rings: a loop woken by the bell finds the result there (a `JoinHandle` is
/// marked finished only a moment after the future returns, and a loop that looked in
/// between would sleep a whole poll interval).
pub(super) struct Writing {
    task: tokio::task::JoinHandle<()>,
    result: tokio::sync::oneshot::Receiver<Result<Delivered, DeliverError>>,
    /// The result, once taken from the channel.
    outcome: Option<Result<Delivered, DeliverError>>,
}

impl Writing {
    fn ended_abnormally() -> Result<Delivered, DeliverError> {
        Err(DeliverError::Sink(SinkError::Internal(
            "write task ended abnormally (cancelled or panicked)".into(),
        )))
    }

    /// Whether the result is in.
    pub(super) fn is_finished(&mut self) -> bool {
        use tokio::sync::oneshot::error::TryRecvError;
        if self.outcome.is_none() {
            match self.result.try_recv() {
                Ok(result) => self.outcome = Some(result),
                Err(TryRecvError::Empty) => return false,
                Err(TryRecvError::Closed) => self.outcome = Some(Self::ended_abnormally()),
            }
        }
        true
    }

    /// The result, waiting for it.
    async fn finish(&mut self) -> Result<Delivered, DeliverError> {
        if let Some(outcome) = self.outcome.take() {
            return outcome;
        }
        (&mut self.result)
            .await
            .unwrap_or_else(|_| Self::ended_abnormally())
    }

    /// Cancels the write; its transaction rolls back unless it committed already.
    pub(super) fn abort(&self) {
        self.task.abort();
    }
}

/// A batch being written.
pub(super) struct InFlight {
    pub(super) handle: Writing,
    pub(super) job: Arc<Job>,
    /// Records the batch covers (written, deleted or skipped).
    pub(super) records: u64,
    /// The Kafka timestamps of its records (those that have one).
    pub(super) timestamps: Vec<i64>,
    pub(super) skipped: u64,
    /// Records a transform dropped.
    pub(super) filtered: u64,
    /// When the write started (for `sluice_batch_duration_seconds{stage="write"}`).
    pub(super) started: std::time::Instant,
    /// Set while a transient failure is waited out.
    pub(super) retrying: Option<Retrying>,
}

impl Drop for InFlight {
    /// A write is never left running behind its task: dropped unsettled (the task ended),
    /// it is cancelled, and its transaction rolls back unless it committed already.
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// How [`Shared::settle_in_flight`] treats the batch being written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Settle {
    /// Apply a finished result, retry what is due, never wait.
    Poll,
    /// Wait for the result; give the batch up on a transient failure.
    Finish,
}

impl Shared {
    /// Starts writing `job` on the runtime, in the task's span.
    pub(super) fn spawn_delivery(&self, job: Arc<Job>) -> Writing {
        let sink = self.sink.clone();
        let policy = self.policy.clone();
        let wake = self.wake.clone();
        let (sender, result) = tokio::sync::oneshot::channel();
        let task = self.runtime.spawn(
            async move {
                let delivered = deliver::deliver(sink, policy, job).await;
                // The task ended (and does not want the result) when this fails.
                let _ = sender.send(delivered);
                wake.ring();
            }
            .instrument(tracing::Span::current()),
        );
        Writing {
            task,
            result,
            outcome: None,
        }
    }

    /// Waits for the in-flight write, then applies its result. Transient failures are
    /// retried here too, so a revocation never leaves a batch behind half-decided.
    ///
    /// `Settle::Poll` applies a finished result and retries what is due; `Settle::Finish`
    /// waits for the result, and gives the batch up on a transient failure instead of
    /// waiting the outage out (a revocation or a stop must not hold the poll loop): nothing
    /// of it committed, and whoever owns its partitions next reads it again. Returns true
    /// when the batch was given up.
    pub(super) fn settle_in_flight(&self, inner: &mut Inner, mode: Settle) -> bool {
        let wait = mode == Settle::Finish;
        loop {
            let Some(flight) = inner.in_flight.as_mut() else {
                return false;
            };
            if wait && flight.retrying.is_some_and(|r| r.waiting()) {
                // Waiting out an outage, no attempt running: no point in waiting here. An
                // attempt that runs is waited for below (it may have committed).
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
            let waited = self.runtime.block_on(async {
                tokio::time::timeout(FINISH_WAIT, flight.handle.finish()).await
            });
            let result = match waited {
                Ok(result) => result,
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
                    self.metrics.conflicts.inc();
                    tracing::warn!(
                        topic,
                        partition,
                        ?expected,
                        "offset conflict: another task moved this partition on; batch rolled back, re-reading offsets"
                    );
                    // Everything buffered for the batch's partitions is re-read from the
                    // stored offsets.
                    let touched = inner.drop_buffered(&flight.job.partitions);
                    queue_reassign(inner, touched);
                    return false;
                }
                Err(error) if error.is_transient() && wait => {
                    inner.in_flight = Some(flight);
                    self.give_up(inner, &error.to_string());
                    return true;
                }
                Err(error) if error.is_transient() => {
                    self.metrics.retried(match error {
                        DeliverError::DeadLetter(_) => "dead_letter_topic",
                        _ => "database",
                    });
                    if flight.retrying.is_none() {
                        tracing::warn!(%error,
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
        tracing::warn!(
            records = flight.records,
            why,
            "partitions revoked or task stopping during a transient failure: the batch is given up and will be read again"
        );
        let touched = inner.drop_buffered(&flight.job.partitions);
        queue_reassign(inner, touched);
    }

    /// A batch committed: its failures are reported, its offsets become the partitions'
    /// stored offsets, its counts go to the metrics.
    fn committed(&self, inner: &mut Inner, flight: &InFlight, delivered: Delivered) {
        if let Some(retrying) = &flight.retrying {
            tracing::info!(
                attempts = retrying.attempts(),
                "recovered; batch committed, partitions resume"
            );
        }
        // A stream of bad records is a warning every 30 s with how many were held back
        // (each one at debug level); the dead letters and the metrics keep every one.
        for failure in &delivered.handled {
            match self.failure_warnings.loud() {
                Some(held_back) => {
                    tracing::warn!(topic = %failure.topic, partition = failure.partition,
                    offset = failure.offset, stage = %failure.stage, class = %failure.class, policy = self.policy.policy.name(),
                    error = %failure.message, held_back, "record failed (more within 30 s are logged at debug level, and counted in sluice_dead_letters_total or sluice_records_skipped_total)")
                }
                None => tracing::debug!(topic = %failure.topic, partition = failure.partition,
                    offset = failure.offset, stage = %failure.stage, class = %failure.class,
                    error = %failure.message, "record failed"),
            }
        }
        let dead_letters = self.policy.policy == ErrorPolicy::Dlq;
        for failure in &delivered.handled {
            self.metrics.record_failed(failure.class, dead_letters);
        }
        for &input in &delivered.duplicates {
            let (topic, partition, offset) = flight.job.prepared.position(input);
            tracing::debug!(
                topic,
                partition,
                offset,
                "producer duplicate skipped (delivery.dedup)"
            );
        }
        self.metrics
            .duplicates
            .inc_by(delivered.duplicates.len() as u64);
        let cut = delivered.fatal.is_some();
        if let Some(failure) = delivered.fatal {
            inner.fatal = Some(TaskError::Record(failure));
        } else {
            // A batch cut short by `errors.policy: fail` committed only part of its
            // records, and which part its timestamps do not say: it is left out.
            self.metrics.observe_latency(&flight.timestamps);
        }
        for advance in &delivered.offsets {
            if let Some(state) = inner
                .partitions
                .get_mut(&(advance.topic.clone(), advance.partition))
            {
                state.committed = Some(advance.next);
            }
        }
        // A batch cut short by `errors.policy: fail` committed the records before the cut
        // only: those below the offsets it advanced.
        let committed = if cut {
            let prepared = &flight.job.prepared;
            committed_inputs(
                (0..prepared.inputs()).map(|i| prepared.position(i)),
                &delivered.next_offsets,
            )
        } else {
            flight.records
        };
        // At-least-once: the group's offsets are where a restart resumes. Exactly-once: they
        // only show the group's progress (the database's offsets are the truth).
        inner.kafka_commits.extend(delivered.next_offsets);
        self.metrics.committed.inc_by(committed);
        self.metrics.skipped.inc_by(flight.skipped);
        self.metrics.batches.inc();
        self.metrics.rows_written.inc_by(delivered.rows as u64);
        self.metrics.filtered.inc_by(flight.filtered);
        self.metrics.observe_batch(flight.records);
        self.metrics
            .observe_stage(BatchStage::Write, flight.started.elapsed());
        self.metrics
            .observe_stage(BatchStage::Commit, delivered.commit_time);
        tracing::debug!(records = flight.records, "batch committed");
    }
}

/// How many of a batch's records (`positions`: topic, partition, offset) lie below the
/// next offsets it committed (`next`: the partition and its next offset, cut at a failure,
/// under either guarantee): those it committed.
fn committed_inputs<'a>(
    positions: impl Iterator<Item = (&'a str, i32, i64)>,
    next: &[(crate::record::Partition, i64)],
) -> u64 {
    positions
        .filter(|(topic, partition, offset)| {
            next.iter()
                .any(|((t, p), n)| t == topic && p == partition && offset < n)
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::committed_inputs;

    #[test]
    fn a_cut_batch_counts_the_records_below_its_advanced_offsets() {
        let positions = [
            ("t", 0, 10),
            ("t", 0, 11),
            ("t", 1, 5),
            ("t", 0, 12),
            ("T", 0, 3),
        ];
        // Partition 0 advanced to 12 (the record at 12 failed); partition 1 and topic T
        // did not advance.
        let advanced = [(("t".to_string(), 0), 12)];
        assert_eq!(committed_inputs(positions.into_iter(), &advanced), 2);
        assert_eq!(committed_inputs(positions.into_iter(), &[]), 0);
    }
}
