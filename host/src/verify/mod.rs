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

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::config::{ConnectorConfig, ErrorPolicy, Evolve, Guarantee, TableTemplate, WriteMode};
use crate::deliver::{DeliverError, Job, Plan, Policy, deliver};
use crate::pool::{ConsumerPool, ReadError, Start};
use crate::prepare::{PrepareError, Preparer};
use crate::record::Incoming;
use crate::sink::verify::{Compared, Comparison, Snapshot};
use crate::sink::{Sink, SinkError};
use crate::validate::RecordSchema;

/// Records read and folded at a time.
pub const CHUNK: usize = 5_000;
/// Most bytes of keys, values and headers read at a time (the first record of a read
/// always, whatever its size).
const CHUNK_BYTES: u64 = 64 * 1024 * 1024;
/// How long one read waits for the records the log says it has.
const READ_WAIT: Duration = Duration::from_secs(30);
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

/// One partition's part of the log that was folded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub topic: String,
    pub partition: i32,
    /// The first offset read: the log's first, or the stored offset when the log starts
    /// after it.
    pub from: i64,
    /// The stored offset: the first offset not read.
    pub to: i64,
}

/// What a verify found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub connector: String,
    pub table: String,
    /// The key's columns, in the order keys are shown.
    pub key: Vec<String>,
    /// The columns compared.
    pub columns: Vec<String>,
    /// What was folded, per partition.
    pub ranges: Vec<Range>,
    /// Records read and folded.
    pub records: u64,
    /// Records that failed on the connector's path (left out, as its error policy left them
    /// out of the table).
    pub failed: u64,
    /// Rows of the table, and of the fold.
    pub table_rows: i64,
    pub folded_rows: i64,
    /// Keys the fold holds and the table does not.
    pub missing: Vec<Vec<Option<String>>>,
    /// Keys the table holds and the fold does not (only from a whole log).
    pub extra: Vec<Vec<Option<String>>>,
    /// Keys both hold, with different values.
    pub differing: Vec<Vec<Option<String>>>,
}

impl Report {
    /// Every partition was read from offset 0: extra rows are proven too.
    pub fn whole(&self) -> bool {
        self.ranges.iter().all(|r| r.from == 0)
    }

    /// From a whole log, the table and the fold hold a different number of rows although
    /// no key is apart: a row repeated on one side (a table whose key is not unique).
    pub fn counts_differ(&self) -> bool {
        self.whole()
            && self.table_rows != self.folded_rows
            && self.missing.is_empty()
            && self.extra.is_empty()
            && self.differing.is_empty()
    }

    /// No difference found.
    pub fn equal(&self) -> bool {
        self.missing.is_empty()
            && self.extra.is_empty()
            && self.differing.is_empty()
            && !self.counts_differ()
    }

    /// The whole answer, every key listed.
    pub fn to_json(&self) -> Value {
        let keys = |keys: &[Vec<Option<String>>]| -> Vec<Value> {
            keys.iter()
                .map(|key| {
                    Value::Object(
                        self.key
                            .iter()
                            .zip(key)
                            .map(|(name, value)| (name.clone(), json!(value)))
                            .collect(),
                    )
                })
                .collect()
        };
        json!({
            "connector": self.connector,
            "table": self.table,
            "key": self.key,
            "columns": self.columns,
            "equal": self.equal(),
            "whole_log": self.whole(),
            "ranges": self.ranges.iter().map(|r| json!({
                "topic": r.topic, "partition": r.partition, "from": r.from, "to": r.to,
            })).collect::<Vec<_>>(),
            "records": self.records,
            "failed_records": self.failed,
            "table_rows": self.table_rows,
            "folded_rows": self.folded_rows,
            "counts_differ": self.counts_differ(),
            "missing": keys(&self.missing),
            "extra": keys(&self.extra),
            "differing": keys(&self.differing),
        })
    }

    /// The answer for a person: a summary, then the first `shown` keys of each kind.
    pub fn text(&self, shown: usize) -> String {
        let mut out = String::new();
        let key = |key: &Vec<Option<String>>| -> String {
            self.key
                .iter()
                .zip(key)
                .map(|(n, v)| format!("{n}={}", v.as_deref().unwrap_or("NULL")))
                .collect::<Vec<_>>()
                .join(" ")
        };
        out.push_str(&format!(
            "connector {}: table {} ({} rows) against {} record(s) of its log ({} row(s) folded, {} record(s) failed on the way and were left out)\n",
            self.connector, self.table, self.table_rows, self.records, self.folded_rows, self.failed
        ));
        for range in self.ranges.iter().filter(|r| r.from > 0) {
            out.push_str(&format!(
                "  {}/{} read from offset {} (the log no longer holds what came before) to {}\n",
                range.topic, range.partition, range.from, range.to
            ));
        }
        if !self.whole() {
            out.push_str("  the log does not start at 0 everywhere: the keys its records write are checked; rows only the table holds are not\n");
        }
        for (label, keys) in [
            ("missing", &self.missing),
            ("extra", &self.extra),
            ("differing", &self.differing),
        ] {
            if keys.is_empty() {
                continue;
            }
            out.push_str(&format!("{label}: {} row(s)\n", keys.len()));
            for k in keys.iter().take(shown) {
                out.push_str(&format!("  {}\n", key(k)));
            }
            if keys.len() > shown {
                out.push_str(&format!(
                    "  … and {} more (--format json lists all)\n",
                    keys.len() - shown
                ));
            }
        }
        if self.counts_differ() {
            out.push_str(&format!(
                "rows: the table holds {} and the fold {}: a row is repeated on one side (its key is not unique there)\n",
                self.table_rows, self.folded_rows
            ));
        }
        out.push_str(if self.equal() {
            "equal: the table holds what the log says\n"
        } else {
            "DIFFERENT: the table does not hold what the log says\n"
        });
        out
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
                    return Ok(report(
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

/// Where a partition's stored offset went while the fold was reading.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Moved {
    /// Forward: this is left to read.
    Forward(Range),
    /// A partition with no stored offset before (a new topic under `topics_regex`, a
    /// partition added): its log is read from its start.
    New {
        topic: String,
        partition: i32,
        next: i64,
    },
}

/// What changed from the stored offsets `before` to `now` (both sorted): the parts of the
/// log to read next, or why the fold cannot catch up (an offset that went back, or was
/// forgotten: an operator's reset while verifying).
fn moved_on(
    connector: &str,
    before: &[(String, i32, i64)],
    now: &[(String, i32, i64)],
) -> Result<Vec<Moved>, VerifyError> {
    let went_back =
        |topic: &str, partition: i32, from: i64, to: Option<i64>| VerifyError::WentBack {
            connector: connector.to_string(),
            topic: topic.to_string(),
            partition,
            from,
            to,
        };
    let was: BTreeMap<(&str, i32), i64> = before
        .iter()
        .map(|(t, p, o)| ((t.as_str(), *p), *o))
        .collect();
    if let Some((topic, partition, from)) = before
        .iter()
        .find(|(t, p, _)| !now.iter().any(|(nt, np, _)| nt == t && np == p))
    {
        return Err(went_back(topic, *partition, *from, None));
    }
    now.iter()
        .filter_map(
            |(topic, partition, next)| match was.get(&(topic.as_str(), *partition)) {
                Some(&from) if *next < from => {
                    Some(Err(went_back(topic, *partition, from, Some(*next))))
                }
                Some(&from) if *next == from => None,
                Some(&from) => Some(Ok(Moved::Forward(Range {
                    topic: topic.clone(),
                    partition: *partition,
                    from,
                    to: *next,
                }))),
                None => Some(Ok(Moved::New {
                    topic: topic.clone(),
                    partition: *partition,
                    next: *next,
                })),
            },
        )
        .collect()
}

/// The fold of the log into the scratch table.
struct Fold<'a> {
    connector: &'a ConnectorConfig,
    pool: &'a Arc<ConsumerPool>,
    sink: Arc<Sink>,
    preparer: Preparer,
    policy: Arc<Policy>,
    records: u64,
    failed: u64,
    /// Offsets passed, and to pass, for the progress bar.
    done: u64,
    total: u64,
    progress: Progress<'a>,
}

impl Fold<'_> {
    /// The part of `topic`/`partition` to read up to the stored offset `next`: from the
    /// log's first offset.
    async fn range(&self, topic: &str, partition: i32, next: i64) -> Result<Range, VerifyError> {
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
    async fn read(&mut self, range: &Range) -> Result<(), VerifyError> {
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

/// The snapshot's differences sorted into missing, extra and differing keys, with the
/// fold's (records, failed records).
fn report(
    connector: &str,
    compared: &Compared,
    ranges: Vec<Range>,
    (records, failed): (u64, u64),
    snapshot: Snapshot,
) -> Report {
    let table_keys: HashSet<&Vec<Option<String>>> = snapshot.table_only.iter().collect();
    let folded_keys: HashSet<&Vec<Option<String>>> = snapshot.folded_only.iter().collect();
    let whole = ranges.iter().all(|r| r.from == 0);
    let differing: Vec<_> = snapshot
        .folded_only
        .iter()
        .filter(|k| table_keys.contains(k))
        .cloned()
        .collect();
    let missing: Vec<_> = snapshot
        .folded_only
        .iter()
        .filter(|k| !table_keys.contains(k))
        .cloned()
        .collect();
    let extra: Vec<_> = if whole {
        snapshot
            .table_only
            .iter()
            .filter(|k| !folded_keys.contains(k))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    Report {
        connector: connector.to_string(),
        table: compared.table.clone(),
        key: compared.key_names(),
        columns: compared.columns.clone(),
        ranges,
        records,
        failed,
        table_rows: snapshot.table_rows,
        folded_rows: snapshot.folded_rows,
        missing,
        extra,
        differing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> Vec<Option<String>> {
        vec![Some(id.to_string())]
    }

    fn compared() -> Compared {
        Compared {
            table: "orders".into(),
            columns: vec!["id".into(), "name".into()],
            key: vec![0],
        }
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            offsets: vec![("t".into(), 0, 10)],
            table_rows: 3,
            folded_rows: 3,
            // 1 differs, 99 is the table's alone.
            table_only: vec![key("1"), key("99")],
            // 1 differs, 3 is the fold's alone.
            folded_only: vec![key("1"), key("3")],
        }
    }

    fn range(from: i64) -> Range {
        Range {
            topic: "t".into(),
            partition: 0,
            from,
            to: 10,
        }
    }

    #[test]
    fn a_whole_log_sorts_keys_into_missing_extra_and_differing() {
        let report = report("c", &compared(), vec![range(0)], (10, 1), snapshot());
        assert!(report.whole() && !report.equal());
        assert_eq!(report.differing, vec![key("1")]);
        assert_eq!(report.missing, vec![key("3")]);
        assert_eq!(report.extra, vec![key("99")]);
        let json = report.to_json();
        assert_eq!(json["extra"], json!([{"id": "99"}]));
        assert_eq!(json["failed_records"], 1);
        let text = report.text(5);
        assert!(text.contains("extra: 1 row(s)\n  id=99\n"), "{text}");
        assert!(text.ends_with("DIFFERENT: the table does not hold what the log says\n"));
    }

    #[test]
    fn a_log_that_lost_its_start_proves_no_extra_row() {
        let report = report("c", &compared(), vec![range(4)], (6, 0), snapshot());
        assert!(!report.whole());
        assert_eq!(report.differing, vec![key("1")]);
        assert_eq!(report.missing, vec![key("3")]);
        assert!(report.extra.is_empty());
        let text = report.text(5);
        assert!(text.contains("t/0 read from offset 4"), "{text}");
        assert!(text.contains("rows only the table holds are not"), "{text}");
    }

    #[test]
    fn a_row_repeated_on_one_side_of_a_whole_log_is_a_difference() {
        let mut repeated = snapshot();
        repeated.table_only.clear();
        repeated.folded_only.clear();
        repeated.table_rows = 4;
        let whole = report("c", &compared(), vec![range(0)], (10, 0), repeated.clone());
        assert!(whole.counts_differ() && !whole.equal());
        assert!(whole.text(5).contains("the table holds 4 and the fold 3"));
        // From a log that lost its start the counts prove nothing.
        let partial = report("c", &compared(), vec![range(4)], (6, 0), repeated);
        assert!(partial.equal());
    }

    #[test]
    fn offsets_that_moved_on_are_read_from_where_the_fold_stopped() {
        let at = |t: &str, p: i32, o: i64| (t.to_string(), p, o);
        let before = [at("a", 0, 10), at("a", 1, 5)];
        let now = [at("a", 0, 14), at("a", 1, 5), at("b", 0, 3)];
        assert_eq!(
            moved_on("c", &before, &now).expect("moved"),
            vec![
                Moved::Forward(Range {
                    topic: "a".into(),
                    partition: 0,
                    from: 10,
                    to: 14
                }),
                Moved::New {
                    topic: "b".into(),
                    partition: 0,
                    next: 3
                },
            ]
        );
        let back = moved_on("c", &before, &[at("a", 0, 9), at("a", 1, 5)]);
        assert!(
            matches!(
                back,
                Err(VerifyError::WentBack {
                    from: 10,
                    to: Some(9),
                    ..
                })
            ),
            "{back:?}"
        );
        let forgotten = moved_on("c", &before, &[at("a", 0, 10)]);
        assert!(
            matches!(
                forgotten,
                Err(VerifyError::WentBack {
                    partition: 1,
                    to: None,
                    ..
                })
            ),
            "{forgotten:?}"
        );
    }

    #[test]
    fn the_text_lists_the_first_keys_and_says_how_many_more() {
        let mut snapshot = snapshot();
        snapshot.folded_only = (0..30).map(|i| key(&format!("k{i}"))).collect();
        snapshot.table_only.clear();
        let report = report("c", &compared(), vec![range(0)], (30, 0), snapshot);
        let text = report.text(2);
        assert!(
            text.contains("missing: 30 row(s)\n  id=k0\n  id=k1\n  … and 28 more"),
            "{text}"
        );
        assert_eq!(
            report.to_json()["missing"].as_array().map(Vec::len),
            Some(30)
        );
    }
}
