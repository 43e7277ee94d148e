//! Partition bookkeeping: where each owned partition stands, and moving partitions back to
//! their stored offsets after an offset conflict or an assignment made while the database
//! was away. The rebalance callback that fills it is in [`super::rebalance`].

use std::collections::HashMap;
use std::time::Duration;

use super::{Inner, Shared, TaskError};
use crate::config::{Guarantee, OnGap, OutOfRange};
use crate::deliver::DeliverError;
use crate::kafka::consumer::{self, SourceConsumer};
use crate::record::Partition;
use crate::retry::Retrying;
use crate::sink::{SinkError, StoredPositions};

/// Longest wait for one attempt at reading stored offsets where polling waits for it (an
/// assignment callback, the loop); past it the partitions wait and the loop tries again
/// later, polling meanwhile.
const OFFSETS_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// What a partition looks like to the task.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PartitionState {
    /// The stored next_offset (exactly-once): where the next batch's compare-and-set starts.
    pub(super) committed: Option<i64>,
    /// The offset after the last record buffered, to drop records seen twice.
    pub(super) position: Option<i64>,
    /// Its start is being (re-)read from the stored offsets: records that arrive meanwhile
    /// are dropped, the consumer is moved to the start once it is known.
    pub(super) pending: bool,
    /// No record has arrived since the partition was assigned, moved or reset: the first
    /// one must be at `position`.
    pub(super) fresh: bool,
}

impl PartitionState {
    /// A partition starting at `start` (its stored offset, if any).
    pub(super) fn starting_at(start: Option<i64>) -> Self {
        PartitionState {
            committed: start,
            position: start,
            pending: false,
            fresh: true,
        }
    }
}

/// Moves `partitions` to their stored offsets at the loop's next turn; until then their
/// records are dropped.
pub(super) fn queue_reassign(inner: &mut Inner, partitions: Vec<Partition>) {
    for partition in partitions {
        if let Some(state) = inner.partitions.get_mut(&partition) {
            state.pending = true;
            if !inner.reassign.contains(&partition) {
                inner.reassign.push(partition);
            }
        }
    }
}

impl Inner {
    /// Forgets what was buffered of `partitions`: they are read again from where their
    /// stored offsets say. Returns the partitions it dropped, for the caller to move back
    /// to their stored offsets: `partitions`, or under `sink.transactions: source` every
    /// partition the task holds, since a source transaction held or buffered whole spans
    /// partitions, and dropping part of one would write the rest without it.
    pub(super) fn drop_buffered(&mut self, partitions: &[Partition]) -> Vec<Partition> {
        let mut dropped = partitions.to_vec();
        if let Some(held) = self.source_transactions.as_mut() {
            held.clear();
            for partition in self.partitions.keys() {
                if !dropped.contains(partition) {
                    dropped.push(partition.clone());
                }
            }
        }
        self.drop_buffered_of(&dropped);
        dropped
    }

    /// Forgets what was buffered of exactly `partitions`.
    fn drop_buffered_of(&mut self, partitions: &[Partition]) {
        self.buffer.drop_partitions(partitions);
        if let Some(transforming) = self.transforming.as_mut() {
            transforming.moved(partitions);
        }
        for partition in partitions {
            if let Some(state) = self.partitions.get_mut(partition) {
                state.position = state.committed;
            }
        }
    }
}

impl Shared {
    /// One attempt at reading a topic's stored offsets and the Kafka cluster and topic ids
    /// stored with them, within [`OFFSETS_READ_TIMEOUT`]: called where polling waits for
    /// it (an assignment, the loop), so it must not wait out an outage.
    pub(super) fn read_stored_once(&self, topic: &str) -> Result<StoredPositions, SinkError> {
        self.runtime.block_on(async {
            let control = self.sink.control();
            let read = control.read_positions(topic);
            tokio::time::timeout(OFFSETS_READ_TIMEOUT, read)
                .await
                .unwrap_or(Err(SinkError::Timeout {
                    action: "read offsets",
                    table: "sluice_offsets".into(),
                    after: OFFSETS_READ_TIMEOUT,
                }))
        })
    }

    /// After an offset conflict, or an assignment while the database was away: read the
    /// stored offsets and move the partitions we still own there. A transient failure puts
    /// them back in the queue for a later turn (with backoff); polling goes on meanwhile.
    pub(super) fn reassign(
        &self,
        consumer: &SourceConsumer,
        partitions: &[Partition],
    ) -> Result<(), TaskError> {
        let mut stored: HashMap<&str, HashMap<i32, i64>> = HashMap::new();
        for (topic, _) in partitions {
            if stored.contains_key(topic.as_str()) {
                continue;
            }
            let read = if self.guarantee == Guarantee::ExactlyOnce {
                self.read_stored_once(topic).map(|stored| stored.offsets)
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
            let mut inner = self.lock();
            if let Some(retrying) = inner.reassign_retrying.take() {
                tracing::info!(
                    attempts = retrying.attempts(),
                    "stored offsets readable again"
                );
            }
            starts.retain(|(p, _)| inner.partitions.contains_key(p));
            for (p, start) in &starts {
                inner
                    .partitions
                    .insert(p.clone(), PartitionState::starting_at(*start));
                // Exactly-once: the group is shown the stored offset (see `on_assign`).
                if let Some(start) = start
                    && self.guarantee == Guarantee::ExactlyOnce
                {
                    inner.kafka_commits.entry(p.clone()).or_insert(*start);
                }
            }
        }
        if !starts.is_empty() {
            tracing::info!(?starts, "moving partitions to their stored offsets");
            consumer::reassign(consumer, &starts, self.fresh_start)?;
        }
        Ok(())
    }

    fn retry_reassign(&self, partitions: &[Partition], error: SinkError) -> Result<(), TaskError> {
        let mut inner = self.lock();
        if inner.reassign_retrying.is_none() {
            tracing::warn!(%error,
                "cannot read stored offsets yet; those partitions wait, retrying with backoff");
        }
        self.metrics.retried("stored_offsets");
        if let Err(elapsed) = Retrying::failed(&mut inner.reassign_retrying, &self.retry) {
            return Err(TaskError::RetriesExhausted {
                elapsed,
                source: DeliverError::Sink(error),
            });
        }
        queue_reassign(&mut inner, partitions.to_vec());
        Ok(())
    }
}

/// How long a look at a partition's log range may take.
const WATERMARKS_TIMEOUT: Duration = Duration::from_secs(5);

/// A partition whose first record after an assignment or a move came past its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct JumpedStart {
    pub(super) partition: Partition,
    /// Where it should have started (its stored offset).
    pub(super) expected: i64,
    /// The offset of the record that came first.
    pub(super) got: i64,
}

impl Shared {
    /// librdkafka reported an offset out of range (it is told `auto.offset.reset=error` in
    /// `exactly_once`). The report does not say which partition, so each one's position is
    /// held against its log's range; the ones outside it are handled by
    /// `delivery.on_offset_out_of_range` ([`Shared::reset`]).
    pub(super) fn out_of_range(&self, consumer: &SourceConsumer) -> Result<(), TaskError> {
        let owned: Vec<(Partition, Option<i64>, Option<i64>)> = self
            .lock()
            .partitions
            .iter()
            .map(|(p, s)| (p.clone(), s.position, s.committed))
            .collect();
        let fetching: HashMap<Partition, Option<i64>> =
            consumer::fetch_positions(consumer).into_iter().collect();
        let mut moved = 0;
        for (partition, position, committed) in owned {
            let Some(at) = position.or(committed) else {
                continue;
            };
            let range = self.log_range(consumer, &partition);
            match range {
                Some((low, high)) if !(low..=high).contains(&at) => {
                    self.reset(consumer, partition, at, committed, (low, high))?;
                    moved += 1;
                }
                // librdkafka fetches ahead of the task: its position, not the task's, may be
                // the one outside the log (a log that lost its tail). Or the range could
                // not be read. Either way librdkafka has stopped fetching the partition
                // (auto.offset.reset=error): fetch again from the task's own position,
                // which skips nothing; a second report comes back here.
                Some((low, high))
                    if fetching
                        .get(&partition)
                        .copied()
                        .flatten()
                        .is_some_and(|f| !(low..=high).contains(&f)) =>
                {
                    self.refetch(consumer, partition, at)?;
                    moved += 1;
                }
                None => {
                    self.refetch(consumer, partition, at)?;
                    moved += 1;
                }
                Some(_) => {}
            }
        }
        if moved == 0 {
            tracing::warn!(
                "the consumer reported an offset out of range, but every partition's position is inside its log's range as the broker reports it"
            );
        }
        Ok(())
    }

    /// The first record after an assignment or a move came past the stored offset. When the
    /// log no longer holds the stored offset (retention overtook it), that is the
    /// out-of-range case; when it does, the broker skipped records: a gap. Either way the
    /// partition then reads on from where its policy says.
    pub(super) fn jumped_start(
        &self,
        consumer: &SourceConsumer,
        jump: JumpedStart,
    ) -> Result<(), TaskError> {
        let JumpedStart {
            partition,
            expected,
            got,
        } = jump;
        let Some(committed) = self.lock().partitions.get(&partition).map(|s| s.committed) else {
            return Ok(());
        };
        if let Some((low, high)) = self.log_range(consumer, &partition)
            && !(low..=high).contains(&expected)
        {
            return self.reset(consumer, partition, expected, committed, (low, high));
        }
        self.offset_gap(partition.0.clone(), partition.1, expected, got)?;
        self.move_to(consumer, partition, got)
    }

    fn log_range(
        &self,
        consumer: &SourceConsumer,
        (topic, partition): &Partition,
    ) -> Option<(i64, i64)> {
        match consumer::log_range(consumer, topic, *partition, WATERMARKS_TIMEOUT) {
            Ok(range) => Some(range),
            Err(error) => {
                tracing::warn!(topic, partition, %error, "cannot read the log's range");
                None
            }
        }
    }

    /// A partition at `at` (stored: `committed`) outside its log `range`: the task fails,
    /// or the partition moves to the log's start or end, and the offsets skipped are
    /// logged and counted.
    fn reset(
        &self,
        consumer: &SourceConsumer,
        partition: Partition,
        at: i64,
        committed: Option<i64>,
        (low, high): (i64, i64),
    ) -> Result<(), TaskError> {
        let (topic, number) = (partition.0.clone(), partition.1);
        let to = match self.out_of_range {
            OutOfRange::Fail => {
                return Err(TaskError::OffsetOutOfRange {
                    topic,
                    partition: number,
                    stored: committed.unwrap_or(at),
                    low,
                    high,
                });
            }
            OutOfRange::Earliest => low,
            OutOfRange::Latest => high,
        };
        let skipped = (to - at).max(0) as u64;
        self.metrics.offsets_skipped.inc_by(skipped);
        self.metrics.offset_resets.inc();
        if to < at {
            // The stored offset is past the log's end: a topic created again (its records
            // are new), or a log that lost its tail (then the records up to the stored
            // offset are read again: `latest` is the choice there).
            tracing::warn!(topic, partition = number, stored = at, low, high, resume_at = to,
                rewound = at - to, policy = ?self.out_of_range,
                "stored offset past the log's end: reading from the log's start, as delivery.on_offset_out_of_range says; if this log lost its tail rather than being created again, the records up to the stored offset are read again");
        } else {
            tracing::warn!(topic, partition = number, stored = at, low, high, resume_at = to, skipped,
                policy = ?self.out_of_range,
                "stored offset not in the log: resuming as delivery.on_offset_out_of_range says; the offsets skipped are gone");
        }
        self.move_to(consumer, partition, to)
    }

    /// Has the consumer fetch a partition again from the task's own position `at`: what is
    /// buffered of it, or on the transform thread, or being written, is all below `at` and
    /// stays (dropping it would lose it: the position is past it). The first record must
    /// then be at `at`.
    fn refetch(
        &self,
        consumer: &SourceConsumer,
        partition: Partition,
        at: i64,
    ) -> Result<(), TaskError> {
        {
            let mut inner = self.lock();
            let Some(state) = inner.partitions.get_mut(&partition) else {
                // Revoked meanwhile: its next owner starts from the stored offset.
                return Ok(());
            };
            state.fresh = true;
        }
        consumer::reassign(consumer, &[(partition, Some(at))], self.fresh_start)?;
        Ok(())
    }

    /// Moves a partition to `to`: what was buffered of it is dropped, the consumer fetches
    /// from there.
    fn move_to(
        &self,
        consumer: &SourceConsumer,
        partition: Partition,
        to: i64,
    ) -> Result<(), TaskError> {
        {
            let mut inner = self.lock();
            if !inner.partitions.contains_key(&partition) {
                // Revoked meanwhile: its next owner starts from the stored offset.
                return Ok(());
            }
            let stored = inner.partitions.get(&partition).and_then(|s| s.committed);
            // One offset is a transaction's commit marker, which the client never sees:
            // nothing is lost by moving past it.
            let loses = stored.is_some_and(|stored| to < stored || to - stored > 1);
            if inner.source_transactions.is_some() && loses {
                // Records of the partition are gone (or skipped by the policy): the source
                // transactions they belonged to cannot be applied whole, and the ones whose
                // other events are held or buffered would be written in part.
                return Err(super::source_transactions::HeldError::Moved {
                    topic: partition.0,
                    partition: partition.1,
                    stored,
                    to,
                }
                .into());
            }
            inner.drop_buffered_of(std::slice::from_ref(&partition));
            if let Some(state) = inner.partitions.get_mut(&partition) {
                state.position = Some(to);
                state.fresh = true;
                state.pending = false;
            }
        }
        consumer::reassign(consumer, &[(partition, Some(to))], self.fresh_start)?;
        Ok(())
    }
}

impl Shared {
    /// A partition's records skipped offsets `expected..got`: counted, and handled by
    /// `delivery.on_offset_gap`.
    pub(super) fn offset_gap(
        &self,
        topic: String,
        partition: i32,
        expected: i64,
        got: i64,
    ) -> Result<(), TaskError> {
        let missing = got - expected;
        // A transaction's commit marker takes one offset the client never sees: not a gap,
        // neither counted (the offset-gap alert would fire on every transaction) nor failed.
        if missing > 1 {
            self.metrics.offset_gap(self.on_gap.name());
        }
        let fail = self.on_gap == OnGap::Fail && missing > 1;
        if fail {
            return Err(TaskError::OffsetGap {
                topic,
                partition,
                expected,
                got,
            });
        }
        if self.on_gap == OnGap::Ignore {
            tracing::debug!(topic, partition, expected, got, "offset gap");
            return Ok(());
        }
        let Some(held_back) = self.gap_warnings.loud() else {
            tracing::debug!(topic, partition, expected, got, "offset gap");
            return Ok(());
        };
        tracing::warn!(
            topic,
            partition,
            expected,
            got,
            missing,
            held_back,
            "offsets jumped: records between never arrived (compaction and transaction markers leave gaps by design: delivery.on_offset_gap: ignore is for those topics)"
        );
        Ok(())
    }
}
