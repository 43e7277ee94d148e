//! The fold of the log into the scratch table ([`Fold`]): each partition read from where
//! the fold stands up to the stored offset through the seek-consumer pool, and written by
//! the connector's own path (prepare, plan, deliver with the records that fail left out).

use std::sync::Arc;
use std::time::Duration;

use super::{Progress, Range, VerifyError};
use crate::config::{ConnectorConfig, ErrorPolicy};
use crate::deliver::{Job, Plan, Policy, deliver};
use crate::pool::{ConsumerPool, Start};
use crate::prepare::{PrepareError, Preparer};
use crate::record::Incoming;
use crate::sink::Sink;

/// Records read and folded at a time.
pub const CHUNK: usize = 5_000;
/// Most bytes of keys, values and headers read at a time (the first record of a read
/// always, whatever its size).
const CHUNK_BYTES: u64 = 64 * 1024 * 1024;
/// How long one read waits for the records the log says it has.
const READ_WAIT: Duration = Duration::from_secs(30);

/// The fold of the log into the scratch table.
pub(super) struct Fold<'a> {
    pub(super) connector: &'a ConnectorConfig,
    pub(super) pool: &'a Arc<ConsumerPool>,
    pub(super) sink: Arc<Sink>,
    pub(super) preparer: Preparer,
    pub(super) policy: Arc<Policy>,
    pub(super) records: u64,
    pub(super) failed: u64,
    /// Offsets passed, and to pass, for the progress bar.
    pub(super) done: u64,
    pub(super) total: u64,
    pub(super) progress: Progress<'a>,
}

impl Fold<'_> {
    /// The part of `topic`/`partition` to read up to the stored offset `next`: from the
    /// log's first offset.
    pub(super) async fn range(
        &self,
        topic: &str,
        partition: i32,
        next: i64,
    ) -> Result<Range, VerifyError> {
        let (low, high) = self.pool.watermarks(topic, partition).await?;
        if next > high {
            return Err(VerifyError::PastTheEnd {
                connector: self.connector.name.clone(),
                topic: topic.to_string(),
                partition,
                offset: next,
                end: high,
            });
        }
        Ok(Range {
            topic: topic.to_string(),
            partition,
            from: low.min(next),
            to: next,
        })
    }

    /// Reads `range` and writes what the connector would have written of it.
    pub(super) async fn read(&mut self, range: &Range) -> Result<(), VerifyError> {
        let mut at = range.from;
        while at < range.to {
            let wanted = usize::try_from(range.to - at)
                .unwrap_or(usize::MAX)
                .min(CHUNK);
            let (mut records, _) = self
                .pool
                .read_bounded(
                    &range.topic,
                    range.partition,
                    Start::Offset(at),
                    wanted,
                    CHUNK_BYTES,
                    READ_WAIT,
                )
                .await?;
            records.retain(|r| r.record.offset < range.to);
            let Some(last) = records.last() else {
                // Nothing more before the stored offset (a compacted or transactional
                // log's gaps at its end).
                break;
            };
            let next = last.record.offset + 1;
            self.done += (next - at) as u64;
            at = next;
            self.write(records).await?;
            (self.progress)(self.done, self.total);
        }
        Ok(())
    }

    async fn write(&mut self, records: Vec<Incoming>) -> Result<(), VerifyError> {
        self.records += records.len() as u64;
        if self.preparer.uses_registry() {
            self.preparer
                .resolve(&records)
                .await
                .map_err(PrepareError::Registry)?;
        }
        let mut prepared = self.preparer.prepare(records)?;
        let plan = Plan::new(
            ErrorPolicy::Skip,
            false,
            &mut prepared,
            Vec::new(),
            Vec::new(),
        );
        let job = Arc::new(Job {
            plan: tokio::sync::Mutex::new(plan),
            prepared,
            partitions: Vec::new(),
        });
        let delivered = deliver(self.sink.clone(), self.policy.clone(), job).await?;
        self.failed += delivered.handled.len() as u64;
        Ok(())
    }
}
