//! The actor's side of the hand-over to the transform thread (`transforming.rs`): cutting a
//! batch from the buffer for the worker ([`Actor::submit`]), taking its answer
//! ([`Actor::collect_transformed`]: a batch the chain could not prepare goes back to the
//! buffer, waited out with `errors.retry`), and starting the write of what it prepared once
//! the write before it has settled ([`Actor::deliver_transformed`]: a batch whose
//! partitions moved meanwhile is thrown away and its partitions read again).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::actor::Actor;
use super::in_flight::InFlight;
use super::partitions::queue_reassign;
use super::transforming::Transforming;
use super::{Inner, TaskError};
use crate::config::Guarantee;
use crate::deliver::{Job, Plan};
use crate::metrics::BatchStage;
use crate::record::Partition;
use crate::retry::Retrying;
use crate::sink::{OffsetAdvance, SinkError};

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
            let unmoved = inner.drop_buffered(&unmoved);
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
