//! A batch's way into the database, with the connector's error policy applied to the
//! records that failed.
//!
//! Records that failed before the database (arrival checks, transforms, schema, mapping)
//! are known when the batch is planned. When the database refuses the batch for a reason
//! that is not transient, the sink finds the refused rows by splitting the batch under
//! savepoints ([`Sink::find_refused_in`]); they join the failures and the batch is planned and
//! written again. The policy decides what a failure becomes:
//!
//! - `fail`: nothing at or after the first failed record of its partition is written; the
//!   records before it commit, then the task fails with the record's coordinates and cause.
//! - `skip`: logged with coordinates and counted; its offset commits with the batch.
//! - `dlq`: a dead letter, in the dead-letter table in the batch's transaction, or produced
//!   to the dead-letter topic and acknowledged before the transaction begins.

pub mod dry_run;
mod letters;
mod plan;
pub mod redrive;
pub mod redrive_topic;

use std::collections::HashSet;
use std::sync::Arc;

use crate::config::ErrorPolicy;
use crate::failure::{Failure, FailureClass, Stage};
use crate::kafka::dead_letter_producer::{DeadLetterError, DeadLetterProducer};
use crate::prepare::Prepared;
use crate::record::Partition;
use crate::sink::{OffsetAdvance, Sink, SinkError};
pub use plan::Plan;

/// Rounds of "write, find the refused rows, plan again" before a batch gives up: each
/// round removes at least one refused row, and a database that refuses a different row
/// every time is not one to fight with.
const MAX_ROUNDS: usize = 8;

/// A connector's error policy, shared by its tasks.
pub struct Policy {
    pub policy: ErrorPolicy,
    /// The dead-letter topic's producer (`errors.dlq.topic`).
    pub dlq_topic: Option<DeadLetterProducer>,
    /// Dead letters go to the sink's dead-letter table (`errors.dlq.table`).
    pub dlq_table: bool,
}

/// Why a batch could not be delivered.
#[derive(Debug, thiserror::Error)]
pub enum DeliverError {
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    DeadLetter(#[from] DeadLetterError),
    /// The database refused a different row on every round of isolating the refused ones.
    #[error("the database kept refusing rows of a batch after {rounds} rounds of isolating them")]
    KeptRefusing { rounds: usize },
}

impl DeliverError {
    /// Worth waiting for and retrying.
    pub fn is_transient(&self) -> bool {
        match self {
            DeliverError::Sink(e) => e.is_transient(),
            DeliverError::DeadLetter(e) => e.is_transient(),
            DeliverError::KeptRefusing { .. } => false,
        }
    }
}

/// A batch being delivered: its plan, and what retries and probes need.
pub struct Job {
    pub plan: tokio::sync::Mutex<Plan>,
    /// The prepared batch without its operations: coordinates and originals.
    pub prepared: Prepared,
    /// The partitions the batch covers.
    pub partitions: Vec<Partition>,
}

/// What a delivered batch did.
#[derive(Debug, Default)]
pub struct Delivered {
    /// The offsets the transaction advanced (after a `fail` cut).
    pub offsets: Vec<OffsetAdvance>,
    pub next_offsets: Vec<(Partition, i64)>,
    pub fatal: Option<Failure>,
    pub handled: Vec<Failure>,
    pub dead_letters: usize,
    /// Row operations the transaction wrote.
    pub rows: usize,
    /// Inputs (indices in the batch) skipped as producer duplicates (`delivery.dedup`).
    pub duplicates: Vec<usize>,
    /// How long the transaction's commit took.
    pub commit_time: std::time::Duration,
}

/// Delivers a batch: dead letters to their topic, then one transaction; refused rows are
/// found, planned again under the policy, and the batch written again. Safe to call again
/// after a transient error: what was acknowledged is not produced twice.
pub async fn deliver(
    sink: Arc<Sink>,
    policy: Arc<Policy>,
    job: Arc<Job>,
) -> Result<Delivered, DeliverError> {
    let mut plan = job.plan.lock().await;
    for _ in 0..MAX_ROUNDS {
        if !plan.to_produce.is_empty() {
            match &policy.dlq_topic {
                // What the broker acknowledged leaves the list: a retry sends the rest.
                Some(producer) => producer.send_all(&mut plan.to_produce).await?,
                None => plan.to_produce.clear(),
            }
        }
        if policy.dlq_table {
            plan.batch.supersedes = written_records(&plan.batch.origins, &job.prepared);
        }
        let error = match sink.write_timed(&plan.batch).await {
            Ok(written) => {
                return Ok(Delivered {
                    rows: written.rows,
                    commit_time: written.commit_time,
                    duplicates: written.duplicates,
                    offsets: plan.batch.offsets.clone(),
                    next_offsets: plan.next_offsets.clone(),
                    fatal: plan.fatal.clone(),
                    handled: plan.handled.clone(),
                    dead_letters: plan.dead_letters,
                });
            }
            Err(e)
                if e.is_transient()
                    || matches!(
                        e,
                        SinkError::OffsetConflict { .. } | SinkError::RedriveConflict { .. }
                    ) =>
            {
                return Err(e.into());
            }
            Err(e) => e,
        };
        // With a table template: a table the database will not let sluice write (it
        // refuses to create it, one of that name has other columns) fails its records
        // alone, and the other tables' rows go on.
        if !plan.batch.routes.is_empty() {
            let unready = sink.tables_refused(&plan.batch.routes).await?;
            if !unready.is_empty() {
                let mut inputs = HashSet::new();
                let failures = failures_of(&plan, &job, unready, &mut inputs);
                plan.apply(policy.policy, policy.dlq_table, failures, &job.prepared);
                continue;
            }
        }
        let refused = sink.find_refused_in(&plan.batch).await?;
        if refused.is_empty() {
            // Not a row's fault (the offsets, the dead letters, the commit).
            return Err(error.into());
        }
        // One failure per input record, however many of its rows were refused.
        let mut inputs = HashSet::new();
        let refused = refused
            .into_iter()
            .map(|(op, why)| (op, FailureClass::DatabaseRefused, why))
            .collect();
        let mut failures = failures_of(&plan, &job, refused, &mut inputs);
        // With delivery.dedup the probe left out the later copies of a refused record
        // (skipped as duplicates): they are the same message, and fail with it now
        // rather than one round each.
        failures.extend(copies_of(
            &plan.batch.dedup,
            &failures,
            &mut inputs,
            &job.prepared,
        ));
        plan.apply(policy.policy, policy.dlq_table, failures, &job.prepared);
    }
    Err(DeliverError::KeptRefusing { rounds: MAX_ROUNDS })
}

/// The sink stage's failures of the operations `ops` (index in the batch, class, why), one
/// per input record however many of its operations are listed; `inputs` gathers those
/// records.
fn failures_of(
    plan: &Plan,
    job: &Job,
    ops: Vec<(usize, FailureClass, String)>,
    inputs: &mut HashSet<usize>,
) -> Vec<crate::failure::Failure> {
    ops.into_iter()
        .filter(|(op, _, _)| inputs.insert(plan.batch.origins[*op]))
        .map(|(op, class, message)| {
            job.prepared
                .failure(plan.batch.origins[op], Stage::Sink, class, message)
        })
        .collect()
}

/// The records whose rows `origins` (input indices) write, each once: (topic, partition,
/// offset, input). With a dead-letter table, their letters of an earlier pass are removed
/// in the batch's transaction.
fn written_records(
    origins: &[usize],
    prepared: &crate::prepare::Prepared,
) -> Vec<(String, i32, i64, usize)> {
    let mut seen = HashSet::new();
    origins
        .iter()
        .filter(|&&origin| seen.insert(origin))
        .map(|&origin| {
            let (topic, partition, offset) = prepared.position(origin);
            (topic.to_string(), partition, offset, origin)
        })
        .collect()
}

/// Failures for the other inputs of a batch that carry the producer id of a failed one.
fn copies_of(
    keys: &[crate::dedup::DedupKey],
    failures: &[Failure],
    failed: &mut HashSet<usize>,
    prepared: &Prepared,
) -> Vec<Failure> {
    if keys.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for failure in failures {
        let Some(id) = keys
            .iter()
            .find(|k| k.input == failure.index)
            .map(|k| &k.id)
        else {
            continue;
        };
        for copy in keys.iter().filter(|k| &k.id == id) {
            if failed.insert(copy.input) {
                out.push(prepared.failure(
                    copy.input,
                    failure.stage,
                    failure.class,
                    format!(
                        "a copy (same producer id) of a refused record: {}",
                        failure.message
                    ),
                ));
            }
        }
    }
    out
}
