//! `sluice dlq redrive` for a dead-letter *topic*: the dead letters are read through the
//! seek-consumer pool (a range of offsets or times, one partition or all), each is turned
//! back into the record it was (its `sluice.source.*` headers give its coordinates, the
//! context headers sluice added are dropped) and sent through the connector's current
//! transforms, schema, mapping and sink, a page at a time. Each page is one transaction
//! that writes the rows and records the records it redrove in `sluice_redriven` (a record
//! in a topic cannot be deleted): a repeated or concurrent redrive of the same range, or a
//! second dead letter of the same record, passes over what is recorded there, so each
//! record is written once. A record that fails again stays where it was, and the report
//! says why.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::redrive::RedriveError;
use super::{DeliverError, Job, Plan, Policy, deliver};
use crate::config::{ConnectorConfig, ErrorPolicy};
use crate::kafka::dead_letter_producer::header;
use crate::pool::{ConsumerPool, ReadError, Start};
use crate::prepare::Preparer;
use crate::record::{Incoming, Record};
use crate::sink::{RedrivenFromTopic, Sink, SinkError};
use crate::validate::RecordSchema;

/// How long a page's read waits for the records the log says it has.
const READ_WAIT: Duration = Duration::from_secs(30);
/// Attempts at one page that keeps meeting another redrive.
const PAGE_ATTEMPTS: usize = 10;

/// Which dead letters of the topic to redrive.
#[derive(Debug, Clone)]
pub struct Range {
    /// One partition of the dead-letter topic, or all.
    pub partition: Option<i32>,
    /// Where to start in each partition.
    pub start: Start,
    /// Stop before this offset.
    pub to_offset: Option<i64>,
    /// Stop at the first dead letter after this time (ms since the epoch).
    pub to_time: Option<i64>,
}

/// What a topic redrive did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TopicRedriveReport {
    /// Dead letters read.
    pub read: u64,
    /// Records written through the connector (or passed over as it would, a tombstone
    /// without key, say) and recorded as redriven.
    pub redriven: u64,
    /// Records a redrive had written already (this range before, or another dead letter of
    /// the same record): passed over.
    pub already: u64,
    /// Records that fail again, with why: they stay in the topic.
    pub still_failing: Vec<String>,
    /// Dead letters that cannot be redriven (not sluice's, another connector's, a value
    /// left out for its size), with why.
    pub not_redrivable: Vec<String>,
}

/// The record a dead letter was, or why it cannot be had.
fn original_of(letter: &Record, connector: &str) -> Result<Record, String> {
    let named = |name: &str| {
        letter
            .headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
            .and_then(|v| std::str::from_utf8(v).ok())
    };
    let topic = named(header::SOURCE_TOPIC)
        .ok_or("it has no sluice.source.topic header: not a dead letter sluice produced")?;
    let partition = named(header::SOURCE_PARTITION)
        .and_then(|p| p.parse::<i32>().ok())
        .ok_or("its sluice.source.partition header is missing or not a number")?;
    let offset = named(header::SOURCE_OFFSET)
        .and_then(|o| o.parse::<i64>().ok())
        .ok_or("its sluice.source.offset header is missing or not a number")?;
    if let Some(other) = named(header::CONNECTOR).filter(|c| *c != connector) {
        return Err(format!("a dead letter of connector {other}"));
    }
    if named(header::ERROR_CLASS) == Some("header_not_utf8") {
        return Err(
            "the record had a header name that is not UTF-8, which the dead letter keeps only lossily: it cannot be redriven as it was".into(),
        );
    }
    if let Some(size) = named(header::VALUE_OMITTED) {
        return Err(format!(
            "its value ({size} bytes) was too large for the dead-letter topic and was left out"
        ));
    }
    Ok(Record {
        topic: topic.to_string(),
        partition,
        offset,
        // The record's own time (a dead letter's is when it was produced as one).
        timestamp: match named(header::SOURCE_TIMESTAMP) {
            Some(t) => Some(
                t.parse::<i64>()
                    .map_err(|_| "its sluice.source.timestamp header is not a number")?,
            ),
            None => None,
        },
        key: letter.key.clone(),
        value: letter.value.clone(),
        headers: letter
            .headers
            .iter()
            .filter(|(n, _)| !header::ALL.contains(&n.as_str()))
            .cloned()
            .collect(),
    })
}

/// Redrives the dead letters of `dlq_topic` in `range` through `connector`.
pub async fn redrive_topic(
    connector: &ConnectorConfig,
    sink: Arc<Sink>,
    engine: Option<&sluice_transform::TransformEngine>,
    pool: Arc<ConsumerPool>,
    dlq_topic: &str,
    range: &Range,
) -> Result<TopicRedriveReport, RedriveError> {
    let schema = match &connector.schema {
        Some(path) => Some(Arc::new(RecordSchema::load(path)?)),
        None => None,
    };
    let mut preparer = Preparer::for_connector(connector, engine, schema)?;
    let policy = Arc::new(Policy {
        // A record that fails again is reported and left where it is.
        policy: ErrorPolicy::Skip,
        dlq_topic: None,
        dlq_table: false,
    });
    let page = connector.batch.max_records.clamp(1, 1000);
    let partitions = match range.partition {
        Some(p) => vec![p],
        None => pool.partitions(dlq_topic).await?,
    };
    let mut report = TopicRedriveReport::default();
    for partition in partitions {
        let mut start = range.start;
        loop {
            let mut letters = match pool
                .read(dlq_topic, partition, start, page, READ_WAIT)
                .await
            {
                Ok(letters) => letters,
                // A start outside this partition's log (one --from-offset for all of them,
                // retention since): its log's start, or nothing past its end.
                Err(ReadError::OutOfRange {
                    low, high, offset, ..
                }) => {
                    if offset < low {
                        start = Start::Offset(low);
                        continue;
                    }
                    tracing::info!(
                        topic = dlq_topic,
                        partition,
                        offset,
                        high,
                        "the range starts past this partition's end: nothing to redrive in it"
                    );
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            let Some(last) = letters.last().map(|l| l.record.offset) else {
                break;
            };
            // The range ends at the first dead letter past it (offset or time).
            let end = letters
                .iter()
                .position(|l| {
                    range.to_offset.is_some_and(|to| l.record.offset >= to)
                        || range
                            .to_time
                            .is_some_and(|to| l.record.timestamp.is_some_and(|t| t > to))
                })
                .unwrap_or(letters.len());
            let ended = end < letters.len();
            letters.truncate(end);
            let mut attempts = 0;
            loop {
                match redrive_page(
                    connector,
                    &sink,
                    &policy,
                    &mut preparer,
                    dlq_topic,
                    &letters,
                    &mut report,
                )
                .await
                {
                    Ok(()) => break,
                    Err(RedriveError::Deliver(DeliverError::Sink(
                        SinkError::RedriveConflict { .. } | SinkError::DedupConflict { .. },
                    ))) if attempts < PAGE_ATTEMPTS => {
                        // Another redrive wrote some of this page meanwhile: nothing of it
                        // committed here; read it again, and what the other wrote is
                        // found in sluice_redriven.
                        attempts += 1;
                        tracing::info!(connector = %connector.name, topic = dlq_topic, partition,
                            "records of this page redriven by another process meanwhile; trying the page again");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
            if ended {
                break;
            }
            start = Start::Offset(last + 1);
        }
    }
    Ok(report)
}

/// One page of dead letters: one transaction.
async fn redrive_page(
    connector: &ConnectorConfig,
    sink: &Arc<Sink>,
    policy: &Arc<Policy>,
    preparer: &mut Preparer,
    dlq_topic: &str,
    letters: &[Incoming],
    report: &mut TopicRedriveReport,
) -> Result<(), RedriveError> {
    let mut page = TopicRedriveReport {
        read: letters.len() as u64,
        ..TopicRedriveReport::default()
    };
    let mut seen = HashSet::new();
    let mut candidates: Vec<(Incoming, RedrivenFromTopic)> = Vec::new();
    for letter in letters {
        let at = (
            dlq_topic.to_string(),
            letter.record.partition,
            letter.record.offset,
        );
        match original_of(&letter.record, &connector.name) {
            Err(why) => page
                .not_redrivable
                .push(format!("{}/{}@{}: {why}", at.0, at.1, at.2)),
            Ok(record) => {
                let source = (record.topic.clone(), record.partition, record.offset);
                if !seen.insert(source.clone()) {
                    // A second dead letter of one record in this page.
                    page.already += 1;
                    continue;
                }
                candidates.push((
                    Incoming {
                        record,
                        defect: letter.defect.clone(),
                    },
                    RedrivenFromTopic {
                        source,
                        dead_letter: at,
                    },
                ));
            }
        }
    }
    let sources: Vec<(String, i32, i64)> =
        candidates.iter().map(|(_, r)| r.source.clone()).collect();
    let done = sink.redriven_already(&sources).await?;
    let before = candidates.len();
    candidates.retain(|(_, r)| !done.contains(&r.source));
    page.already += (before - candidates.len()) as u64;
    if !candidates.is_empty() {
        let (incoming, redriven): (Vec<Incoming>, Vec<RedrivenFromTopic>) =
            candidates.into_iter().unzip();
        let mut prepared = preparer.prepare(incoming)?;
        let mut plan = Plan::new(
            ErrorPolicy::Skip,
            false,
            &mut prepared,
            Vec::new(),
            Vec::new(),
        );
        let failed: HashSet<(String, i32, i64)> = plan
            .handled
            .iter()
            .map(|f| (f.topic.clone(), f.partition, f.offset))
            .collect();
        plan.batch.redriven_from_topic = redriven
            .into_iter()
            .filter(|r| !failed.contains(&r.source))
            .collect();
        let job = Arc::new(Job {
            plan: tokio::sync::Mutex::new(plan),
            prepared,
            partitions: Vec::new(),
        });
        let delivered = deliver(sink.clone(), policy.clone(), job.clone()).await?;
        page.redriven = job.plan.lock().await.batch.redriven_from_topic.len() as u64;
        for failure in &delivered.handled {
            tracing::warn!(connector = %connector.name, topic = %failure.topic, partition = failure.partition,
                offset = failure.offset, stage = %failure.stage, error = %failure.message,
                "a redriven record fails again; its dead letter stays");
            page.still_failing.push(format!(
                "{}/{}@{}: {} [{}]: {}",
                failure.topic,
                failure.partition,
                failure.offset,
                failure.stage,
                failure.class,
                failure.message
            ));
        }
    }
    report.read += page.read;
    report.redriven += page.redriven;
    report.already += page.already;
    report.still_failing.extend(page.still_failing);
    report.not_redrivable.extend(page.not_redrivable);
    Ok(())
}
