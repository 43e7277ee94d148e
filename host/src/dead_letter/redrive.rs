//! `sluice dlq redrive`: dead letters from the connector's dead-letter table go through the
//! connector's current transforms, schema and mapping again (after a plugin fix, say).
//! What now succeeds is written to the sink table and removed from the dead-letter table
//! in one transaction; what still fails stays, with its new cause.

use sqlx::{
    AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type,
};

use crate::record::Record;

/// A dead letter read back from its table.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// The headers column as stored (see [`super::headers_to_json`]).
    pub headers: String,
}

impl Stored {
    /// The record as it first arrived; `Err` when the stored headers are damaged.
    pub fn record(&self) -> Result<Record, String> {
        Ok(Record {
            topic: self.topic.clone(),
            partition: self.partition,
            offset: self.offset,
            timestamp: None,
            key: self.key.clone(),
            value: self.value.clone(),
            headers: super::headers_from_json(&self.headers)?,
        })
    }

    /// Where it came from, the dead-letter table's key (with the connector).
    pub fn coordinates(&self) -> (String, i32, i64) {
        (self.topic.clone(), self.partition, self.offset)
    }
}

/// Runs the dialect's `read_dead_letters` statement.
pub async fn read<'p, DB>(
    executor: impl Executor<'p, Database = DB>,
    sql: String,
    connector: &str,
    after: &(String, i32, i64),
) -> Result<Vec<Stored>, sqlx::Error>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    String: for<'q> Encode<'q, DB> + Type<DB> + for<'r> Decode<'r, DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB> + for<'r> Decode<'r, DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB> + for<'r> Decode<'r, DB>,
    Vec<u8>: Type<DB> + for<'r> Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    let rows = sqlx::query::<DB>(AssertSqlSafe(sql))
        .bind(connector.to_string())
        .bind(after.0.clone())
        .bind(after.1)
        .bind(after.2)
        .fetch_all(executor)
        .await?;
    rows.iter()
        .map(|row| {
            Ok(Stored {
                topic: row.try_get(0)?,
                partition: row.try_get(1)?,
                offset: row.try_get(2)?,
                key: row.try_get(3)?,
                value: row.try_get(4)?,
                headers: row.try_get(5)?,
            })
        })
        .collect()
}

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
    #[error("{0}")]
    Sink(#[from] crate::sink::SinkError),
    #[error("{0}")]
    Deliver(#[from] crate::task::DeliverError),
    #[error("transform: {0}")]
    Transform(#[from] sluice_transform::TransformError),
    #[error("{0}")]
    Prepare(#[from] crate::prepare::PrepareError),
    #[error("{0}")]
    Schema(#[from] crate::validate::SchemaError),
}

/// Re-submits every dead letter of `connector`'s table through its current transforms,
/// schema, mapping and sink, `batch` at a time; each batch is one transaction that writes
/// the rows and removes their dead letters.
pub async fn redrive(
    connector: &crate::config::ConnectorConfig,
    sink: std::sync::Arc<crate::sink::Sink>,
    engine: Option<&sluice_transform::TransformEngine>,
) -> Result<RedriveReport, RedriveError> {
    use crate::config::ErrorPolicy;
    use crate::prepare::{Incoming, Preparer};
    use crate::task::deliver::{self, Job, Plan, Policy};

    let chain = match engine {
        Some(engine) if !connector.transforms.is_empty() => {
            let specs: Vec<_> = connector.transforms.iter().map(|t| t.spec()).collect();
            Some(sluice_transform::TransformChain::new(
                engine,
                &connector.name,
                &specs,
            )?)
        }
        _ => None,
    };
    let schema = match &connector.schema {
        Some(path) => Some(std::sync::Arc::new(crate::validate::RecordSchema::load(
            path,
        )?)),
        None => None,
    };
    let mut preparer = Preparer::new(connector, chain, schema).keep_originals(true);
    let policy = std::sync::Arc::new(Policy {
        policy: ErrorPolicy::Dlq,
        dlq_topic: None,
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
        after = Some(last.coordinates());
        let incoming: Vec<Incoming> = stored
            .iter()
            .map(|s| match s.record() {
                Ok(record) => Incoming::from(record),
                Err(defect) => Incoming {
                    record: Record {
                        topic: s.topic.clone(),
                        partition: s.partition,
                        offset: s.offset,
                        key: s.key.clone(),
                        value: s.value.clone(),
                        ..Record::default()
                    },
                    defect: Some(defect),
                },
            })
            .collect();
        let mut prepared = preparer.prepare(incoming)?;
        let failed: std::collections::HashSet<usize> =
            prepared.failures.iter().map(|f| f.index).collect();
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
        let job = std::sync::Arc::new(Job {
            plan: tokio::sync::Mutex::new(plan),
            prepared,
            partitions,
        });
        let delivered = deliver::deliver(sink.clone(), policy.clone(), true, job).await?;
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
