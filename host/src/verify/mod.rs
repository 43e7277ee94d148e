//! `sluice verify` and `POST /connectors/{name}/verify`: proof that a connector's table
//! holds what its topics say, up to the offsets the connector stored.
//!
//! The log is read from its start up to each partition's stored offset through the
//! seek-consumer pool, and folded by the connector's own path into an empty scratch copy of
//! the table: the same decoders, transforms, schema and mapping, and the same sink
//! statements (upserts, deletes, tombstones, truncates, the version guard, TOAST
//! placeholders left out). A record that fails on the way is left out, as the connector's
//! error policy left it out of the table. Then the database compares the two tables in one
//! snapshot together with the stored offsets (`sink/verify.rs`); if the connector stored
//! newer offsets meanwhile, the fold catches up and the comparison runs again.
//!
//! What a comparison proves depends on the log:
//!
//! - **From offset 0 of every partition** the fold is the whole history, so a row only the
//!   table holds is an extra row, one only the fold holds is a missing row, and a key on
//!   both sides holds different values.
//! - **From a later offset** (retention deleted the start) rows written by records no
//!   longer in the log cannot be proven either way: the keys the
//!   readable records write are checked (missing or differing), and rows only the table
//!   holds are not reported. The report names each partition's first readable offset.
//!
//! The scratch table (`sluice_verify_<id>`, beside the table) and the versions of deleted
//! rows kept for it are dropped at the end; an interrupted verify leaves it to be dropped by
//! hand.

mod fold;
mod moved;
mod report;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{ConnectorConfig, ErrorPolicy, Evolve, Guarantee, TableTemplate, WriteMode};
use crate::deliver::{DeliverError, Policy};
use crate::pool::{ConsumerPool, ReadError};
use crate::prepare::{PrepareError, Preparer};
use crate::sink::verify::{Compared, Comparison};
use crate::sink::{Sink, SinkError};
use crate::validate::RecordSchema;
pub use fold::CHUNK;
use fold::Fold;
use moved::{Moved, moved_on};
pub use report::{Range, Report};

/// Comparisons tried while the connector keeps storing newer offsets.
const ROUNDS: usize = 5;

/// Why a verify could not give an answer.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The connector is not one a fold can be checked against.
    #[error("connector {connector}: {why}")]
    NotVerifiable { connector: String, why: String },
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    #[error(transparent)]
    Schema(#[from] crate::validate::SchemaError),
    #[error(transparent)]
    Deliver(#[from] DeliverError),
    /// A stored offset the log does not reach.
    #[error(
        "connector {connector}: its stored offset {offset} of {topic}/{partition} is past the log's end ({end}): the topic was deleted and created again, or the broker lost records; the table cannot be checked against this log"
    )]
    PastTheEnd {
        connector: String,
        topic: String,
        partition: i32,
        offset: i64,
        end: i64,
    },
    /// The stored offsets went back, or were forgotten, while the fold was catching up to
    /// them.
    #[error(
        "connector {connector}: the stored offset of {topic}/{partition} went back from {from} to {} while verifying (an offsets reset): verify again",
        to.map_or("none".to_string(), |o| o.to_string())
    )]
    WentBack {
        connector: String,
        topic: String,
        partition: i32,
        from: i64,
        to: Option<i64>,
    },
    /// The connector kept storing newer offsets.
    #[error(
        "connector {connector}: its stored offsets moved during each of {rounds} comparisons (it is writing): pause it (`sluice pause`) and verify again"
    )]
    KeptMoving { connector: String, rounds: usize },
}

impl VerifyError {
    /// A mistake in what was asked (a connector that cannot be verified), not a failure.
    /// A read that fails (a topic deleted since its offsets were stored, a log start that
    /// retention moved past the fold) is a failure: the question was right.
    pub fn is_usage(&self) -> bool {
        matches!(self, VerifyError::NotVerifiable { .. })
    }
}

/// How far the fold is, for a progress bar: (records read, records to read).
pub type Progress<'a> = &'a (dyn Fn(u64, u64) + Sync);

/// Verifies `connector`'s table against its topics, read through `pool`.
pub async fn verify(
    connector: &ConnectorConfig,
    pool: &Arc<ConsumerPool>,
    engine: Option<&sluice_transform::TransformEngine>,
    progress: Progress<'_>,
) -> Result<Report, VerifyError> {
    let not = |why: String| VerifyError::NotVerifiable {
        connector: connector.name.clone(),
        why,
    };
    if connector.sink.table_template().is_some() {
        return Err(not(format!(
            "its table is a template ({}): verify checks one table",
            connector.sink.table_label()
        )));
    }
    if connector.delivery.guarantee != Guarantee::ExactlyOnce {
        return Err(not(
            "verify checks the table against the offsets stored with it (delivery.guarantee: exactly_once); at least once, the table may hold records past the group's offsets".into(),
        ));
    }
    if connector.sink.mode == WriteMode::Update {
        return Err(not(
            "sink.mode update changes rows the log did not make: a fold of the log cannot show what the table should hold".into(),
        ));
    }
    let sink = Sink::connect(connector).await?;
    let result = async {
        let compared = sink.compared_table().await?;
        if compared.key.is_empty() {
            return Err(not(format!(
                "table {} has no key: verify matches rows by key",
                compared.table
            )));
        }
        let id = format!("{:08x}", rand::random::<u32>());
        let scratch = sink.create_scratch(&id).await?;
        let folded = fold_and_compare(
            connector, &sink, &compared, &scratch, pool, engine, progress,
        )
        .await;
        if let Err(e) = sink.drop_scratch(&scratch).await {
            tracing::warn!(connector = %connector.name, table = %scratch, error = %e,
                "could not drop verify's scratch table: drop it by hand");
        }
        folded
    }
    .await;
    sink.close().await;
    result
}

async fn fold_and_compare(
    connector: &ConnectorConfig,
    sink: &Sink,
    compared: &Compared,
    scratch: &str,
    pool: &Arc<ConsumerPool>,
    engine: Option<&sluice_transform::TransformEngine>,
    progress: Progress<'_>,
) -> Result<Report, VerifyError> {
    // The connector as it would write into the scratch table: nothing created or changed,
    // no dead letters, no producer ids stored.
    let mut shadow = connector.clone();
    shadow.sink.table = Some(TableTemplate::try_from(scratch.to_string()).map_err(|why| {
        VerifyError::NotVerifiable {
            connector: connector.name.clone(),
            why: format!("its scratch table's name {scratch} is refused: {why}"),
        }
    })?);
    shadow.sink.table_from = None;
    shadow.sink.create_table = false;
    shadow.sink.evolve = Evolve::NONE;
    shadow.errors.dlq = None;
    shadow.delivery.dedup = None;
    let preparer = {
        let schema = match &connector.schema {
            Some(path) => Some(Arc::new(RecordSchema::load(path)?)),
            None => None,
        };
        Preparer::for_connector(&shadow, engine, schema)?.dry_run()
    };
    let target = Arc::new(Sink::connect(&shadow).await?);
    let mut fold = Fold {
        connector,
        pool,
        sink: target.clone(),
        preparer,
        policy: Arc::new(Policy {
            policy: ErrorPolicy::Skip,
            dlq_topic: None,
            dlq_table: false,
        }),
        records: 0,
        failed: 0,
        done: 0,
        total: 0,
        progress,
    };
    let result = async {
        target.prepare().await?;
        let mut stored = sink.control().read_all_offsets().await?;
        stored.sort();
        let mut ranges: BTreeMap<(String, i32), Range> = BTreeMap::new();
        let mut to_read = Vec::new();
        for (topic, partition, next) in &stored {
            let range = fold.range(topic, *partition, *next).await?;
            to_read.push(range.clone());
            ranges.insert((topic.clone(), *partition), range);
        }
        fold.total = to_read.iter().map(|r| (r.to - r.from) as u64).sum();
        for range in &to_read {
            fold.read(range).await?;
        }
        for _ in 0..ROUNDS {
            let now = match sink.compare(compared, scratch, &stored).await? {
                Comparison::Done(snapshot) => {
                    return Ok(report::report(
                        &connector.name,
                        compared,
                        ranges.into_values().collect(),
                        (fold.records, fold.failed),
                        snapshot,
                    ));
                }
                Comparison::Moved(now) => now,
            };
            // The connector stored newer offsets: read up to them, then compare again.
            let mut to_read = Vec::new();
            for moved in moved_on(&connector.name, &stored, &now)? {
                let range = match moved {
                    Moved::Forward(range) => range,
                    Moved::New {
                        topic,
                        partition,
                        next,
                    } => fold.range(&topic, partition, next).await?,
                };
                let whole = ranges
                    .entry((range.topic.clone(), range.partition))
                    .or_insert_with(|| range.clone());
                whole.to = range.to;
                to_read.push(range);
            }
            fold.total += to_read.iter().map(|r| (r.to - r.from) as u64).sum::<u64>();
            for range in &to_read {
                fold.read(range).await?;
            }
            stored = now;
        }
        Err(VerifyError::KeptMoving {
            connector: connector.name.clone(),
            rounds: ROUNDS,
        })
    }
    .await;
    target.close().await;
    result
}
