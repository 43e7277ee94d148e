//! `sluice dlq redrive`: dead letters from the connector's dead-letter table go through the
//! connector's current transforms, schema and mapping again (after a plugin fix, say).
//! What now succeeds is written to the sink table and removed from the dead-letter table
//! in one transaction; what still fails stays, with its new cause.

use std::collections::HashSet;
use std::sync::Arc;

use super::{DeliverError, Job, Plan, Policy, deliver};
use crate::config::{ConnectorConfig, ErrorPolicy};
use crate::prepare::Preparer;
use crate::record::Incoming;
use crate::sink::{Sink, SinkError};
use crate::validate::RecordSchema;

/// What a redrive did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RedriveReport {
    /// Dead letters read.
    pub read: u64,
    /// Written to the sink table (or passed over as a tombstone without key) and removed
    /// from the dead-letter table.
    pub redriven: u64,
    /// Still failing: kept, with the new cause.
    pub still_failing: u64,
}

/// Why a redrive stopped.
#[derive(Debug, thiserror::Error)]
pub enum RedriveError {
    #[error(transparent)]
    Sink(#[from] crate::sink::SinkError),
    #[error(transparent)]
    Deliver(#[from] super::DeliverError),
    #[error("transform: {0}")]
    Transform(#[from] sluice_transform::TransformError),
    #[error(transparent)]
    Prepare(#[from] crate::prepare::PrepareError),
    #[error(transparent)]
    Schema(#[from] crate::validate::SchemaError),
    /// The dead-letter topic could not be read.
    #[error(transparent)]
    Read(#[from] crate::pool::ReadError),
}

/// Re-submits every dead letter of `connector`'s table through its current transforms,
/// schema, mapping and sink, `batch` at a time; each batch is one transaction that writes
/// the rows and removes their dead letters.
pub async fn redrive(
    connector: &ConnectorConfig,
    sink: Arc<Sink>,
    engine: Option<&sluice_transform::TransformEngine>,
) -> Result<RedriveReport, RedriveError> {
    let schema = match &connector.schema {
        Some(path) => Some(Arc::new(RecordSchema::load(path)?)),
        None => None,
    };
    let mut preparer = Preparer::for_connector(connector, engine, schema)?.keep_originals(true);
    let policy = Arc::new(Policy {
        policy: ErrorPolicy::Dlq,
        dlq_topic: None,
        dlq_table: true,
    });
    let mut report = RedriveReport::default();
    let mut after = None;
    loop {
        let stored = sink
            .read_dead_letters(after.as_ref(), connector.batch.max_records)
            .await?;
        let Some(last) = stored.last() else {
            break;
        };
        let page_start = after.replace(last.coordinates());
        let incoming: Vec<Incoming> = stored.iter().map(|s| s.incoming()).collect();
        preparer
            .resolve(&incoming)
            .await
            .map_err(crate::prepare::PrepareError::Registry)?;
        let mut prepared = preparer.prepare(incoming)?;
        let failed: HashSet<usize> = prepared.failures.iter().map(|f| f.index).collect();
        let redriven = stored
            .iter()
            .enumerate()
            .filter(|(i, _)| !failed.contains(i))
            .map(|(_, s)| s.coordinates())
            .collect();
        let mut plan = Plan::new(
            ErrorPolicy::Dlq,
            true,
            &mut prepared,
            Vec::new(),
            Vec::new(),
        );
        plan.batch.redriven = redriven;
        let partitions = Vec::new();
        let job = Arc::new(Job {
            plan: tokio::sync::Mutex::new(plan),
            prepared,
            partitions,
        });
        let delivered = match deliver(sink.clone(), policy.clone(), job).await {
            Ok(delivered) => delivered,
            Err(DeliverError::Sink(SinkError::RedriveConflict {
                topic,
                partition,
                offset,
            })) => {
                // Another redrive wrote some of this page back: nothing of it committed
                // here. Read the page again: what the other took is gone from it.
                tracing::info!(connector = %connector.name, topic, partition, offset,
                    "dead letters redriven by another process meanwhile; reading the page again");
                after = page_start;
                continue;
            }
            Err(DeliverError::Sink(SinkError::DedupConflict { .. })) => {
                // Another transaction (a redrive, the running connector) stored one of
                // this page's producer ids at the same time: read the page again, and
                // that id is found.
                tracing::info!(connector = %connector.name,
                    "producer ids stored by another process meanwhile; reading the page again");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                after = page_start;
                continue;
            }
            Err(error) => return Err(error.into()),
        };
        report.read += stored.len() as u64;
        report.still_failing += delivered.handled.len() as u64;
        report.redriven += (stored.len() - delivered.handled.len()) as u64;
        for failure in &delivered.handled {
            tracing::warn!(connector = %connector.name, topic = %failure.topic, partition = failure.partition,
                offset = failure.offset, stage = %failure.stage, error = %failure.message, "dead letter still fails; kept");
        }
    }
    Ok(report)
}
