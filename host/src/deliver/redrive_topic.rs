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
//!
//! Anyone who may write to the dead-letter topic could put a letter there, so a letter is
//! checked before it is written ([`crate::kafka::dead_letter_signature`]):
//! - one without a `sluice.connector` header is passed over and counted;
//! - with `errors.dlq.signing_key`, one whose `sluice.signature` is missing or made by none
//!   of the keys is refused;
//! - without it, one is redriven only if its key, value and headers equal those of its
//!   source record, read through the pool (and then the source record is what is written),
//!   in one of the connector's topics; one whose source the log no longer holds is refused
//!   unless `--trust-unsigned`.
//!
//! The check comes before a page passes over second letters of one record, so a forged
//! letter ahead of the genuine one does not keep the genuine one out.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use super::letters::{Letter, Rejected, original_of};
use super::redrive::RedriveError;
use super::{DeliverError, Job, Plan, Policy, deliver};
use crate::config::{ConnectorConfig, ErrorPolicy};
use crate::kafka::dead_letter_headers as header;
use crate::kafka::dead_letter_signature::{Signed, Signer, Verdict};
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
    /// Dead letters refused because they cannot be told from a forgery, with why.
    pub refused: Vec<(Refusal, String)>,
    /// Dead letters without a `sluice.connector` header: passed over (which letter).
    pub no_connector: Vec<String>,
}

impl TopicRedriveReport {
    /// How many letters were refused for `why`.
    pub fn refused_for(&self, why: Refusal) -> usize {
        self.refused.iter().filter(|(r, _)| *r == why).count()
    }
}

/// Why a dead letter was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `errors.dlq.signing_key` is set and the letter has no signature.
    Unsigned,
    /// The letter's signature was made by none of the keys over its contents.
    BadSignature,
    /// No signing key: the letter's key, value or headers differ from its source record.
    NotMatchingSource,
    /// No signing key, no `--trust-unsigned`, and the log no longer holds the source.
    SourceGone,
}

impl Refusal {
    /// As the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::Unsigned => "unsigned",
            Refusal::BadSignature => "bad signature",
            Refusal::NotMatchingSource => "not matching the source",
            Refusal::SourceGone => "source gone",
        }
    }
}

/// Redrives the dead letters of `dlq_topic` in `range` through `connector`. With
/// `trust_unsigned` (and no `errors.dlq.signing_key`), a letter whose source record the log
/// no longer holds is redriven as it is instead of refused.
pub async fn redrive_topic(
    connector: &ConnectorConfig,
    sink: Arc<Sink>,
    engine: Option<&sluice_transform::TransformEngine>,
    pool: Arc<ConsumerPool>,
    dlq_topic: &str,
    range: &Range,
    trust_unsigned: bool,
) -> Result<TopicRedriveReport, RedriveError> {
    let check = Check {
        signer: Signer::new(&connector.errors.dlq_signing_key),
        pool: pool.clone(),
        trust_unsigned,
    };
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
                    &check,
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

/// How letters are told from forgeries.
struct Check {
    /// With `errors.dlq.signing_key`: letters must carry a signature of one of its keys.
    signer: Option<Signer>,
    /// Without: letters must equal their source records, read through the pool.
    pool: Arc<ConsumerPool>,
    /// Without a key: a letter whose source is gone is redriven as it is.
    trust_unsigned: bool,
}

/// One page of dead letters: one transaction.
#[allow(clippy::too_many_arguments)]
async fn redrive_page(
    connector: &ConnectorConfig,
    check: &Check,
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
    let verified = check_page(connector, check, dlq_topic, letters, &mut page).await?;
    let mut seen = HashSet::new();
    let mut candidates: Vec<(Incoming, RedrivenFromTopic)> = Vec::new();
    for (at, incoming) in verified {
        let source = incoming.record.source();
        if !seen.insert(source.clone()) {
            // A second dead letter of one record in this page.
            page.already += 1;
            continue;
        }
        candidates.push((
            incoming,
            RedrivenFromTopic {
                source,
                dead_letter: at,
            },
        ));
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
        preparer
            .resolve(&incoming)
            .await
            .map_err(crate::prepare::PrepareError::Registry)?;
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
    report.refused.extend(page.refused);
    report.no_connector.extend(page.no_connector);
    Ok(())
}

/// The letters of a page that pass the checks against forgeries, in the page's order, as
/// the records to write; the others go to `page` with why.
async fn check_page(
    connector: &ConnectorConfig,
    check: &Check,
    dlq_topic: &str,
    letters: &[Incoming],
    page: &mut TopicRedriveReport,
) -> Result<Vec<(DlqAt, Incoming)>, RedriveError> {
    // Each letter taken apart, then checked, in the page's order.
    let taken: Vec<(DlqAt, Result<Letter, Rejected>, Option<String>)> = letters
        .iter()
        .map(|letter| {
            let at = (
                dlq_topic.to_string(),
                letter.record.partition,
                letter.record.offset,
            );
            let taken = original_of(
                &letter.record,
                &connector.name,
                connector.renamed_from.as_deref(),
            );
            (at, taken, letter.defect.clone())
        })
        .collect();
    let mut verified = Vec::new();
    let sources = match &check.signer {
        Some(_) => HashMap::new(),
        None => {
            let wanted: Vec<(String, i32, i64)> = taken
                .iter()
                .filter_map(|(_, l, _)| l.as_ref().ok())
                .map(|l| l.original.source())
                .filter(|(topic, _, _)| connector.reads_topic(topic))
                .collect();
            read_sources(&check.pool, &wanted).await?
        }
    };
    for (at, letter, defect) in taken {
        let place = format!("{}/{}@{}", at.0, at.1, at.2);
        let letter = match letter {
            Ok(letter) => letter,
            Err(Rejected::NoConnector) => {
                tracing::warn!(connector = %connector.name, dead_letter = %place,
                    "a message of the dead-letter topic has no sluice.connector header; passed over");
                page.no_connector.push(place);
                continue;
            }
            Err(Rejected::NotRedrivable(why)) => {
                page.not_redrivable.push(format!("{place}: {why}"));
                continue;
            }
        };
        let source = letter.original.source();
        let coordinates = format!("{}/{}@{}", source.0, source.1, source.2);
        let outcome = match &check.signer {
            Some(signer) => {
                let signed = Signed {
                    connector: &letter.connector,
                    record: &letter.original,
                    value: letter.original.value.as_deref(),
                };
                match signer.verify(&signed, letter.signature.as_deref()) {
                    Verdict::Valid => Ok(Incoming {
                        record: letter.original,
                        defect,
                    }),
                    Verdict::Unsigned => Err((
                        Refusal::Unsigned,
                        "it has no sluice.signature header, and errors.dlq.signing_key is set: only signed dead letters are redriven".to_string(),
                    )),
                    Verdict::Bad => Err((
                        Refusal::BadSignature,
                        "its sluice.signature was made by none of the keys of errors.dlq.signing_key over its contents: it was changed, forged, or signed with a key no longer listed".to_string(),
                    )),
                }
            }
            // A copy of a record of a topic the connector does not read would equal its
            // source too.
            None if !connector.reads_topic(&source.0) => Err((
                Refusal::NotMatchingSource,
                format!(
                    "its source topic {} is not one that connector {} reads",
                    source.0, connector.name
                ),
            )),
            None => match sources.get(&source) {
                Some(found) if same_contents(&letter.original, &found.record) => Ok(found.clone()),
                Some(_) => Err((
                    Refusal::NotMatchingSource,
                    format!(
                        "its key, value or headers differ from those of its source record {coordinates}: it is not the dead letter sluice produced for it"
                    ),
                )),
                None if check.trust_unsigned => Ok(Incoming {
                    record: letter.original,
                    defect,
                }),
                None => Err((
                    Refusal::SourceGone,
                    format!(
                        "its source record {coordinates} is no longer in the log, so the letter cannot be checked against it (set errors.dlq.signing_key to sign letters; --trust-unsigned redrives such letters as they are)"
                    ),
                )),
            },
        };
        match outcome {
            Ok(incoming) => verified.push((at, incoming)),
            Err((why, message)) => {
                tracing::warn!(connector = %connector.name, dead_letter = %place, source = %coordinates,
                    refused = why.name(), "a dead letter is refused: {message}");
                page.refused.push((why, format!("{place}: {message}")));
            }
        }
    }
    Ok(verified)
}

/// Where a dead letter is: the dead-letter topic, partition, offset.
type DlqAt = (String, i32, i64);

trait Source {
    /// The record's coordinates, as `sluice_redriven` keys them.
    fn source(&self) -> (String, i32, i64);
}

impl Source for Record {
    fn source(&self) -> (String, i32, i64) {
        (self.topic.clone(), self.partition, self.offset)
    }
}

/// Whether a letter carries its source record's key, value and headers (the letter's
/// without sluice's, so the source's without those named like them).
fn same_contents(letter: &Record, source: &Record) -> bool {
    let own = source
        .headers
        .iter()
        .filter(|(name, _)| !header::ALL.contains(&name.as_str()));
    letter.key == source.key && letter.value == source.value && letter.headers.iter().eq(own)
}

/// Most records one read of a source partition asks for.
const SOURCE_READ_LIMIT: i64 = 500;

/// The source records at `wanted` that the log still holds, read through the pool a run of
/// nearby offsets at a time. One missing from the answer is gone: before the log's start
/// (retention), past its end, compacted away, or in a topic or partition that no longer
/// exists. A read that fails otherwise (the cluster unreachable) fails the redrive: a
/// letter is not refused for an outage.
async fn read_sources(
    pool: &Arc<ConsumerPool>,
    wanted: &[(String, i32, i64)],
) -> Result<HashMap<(String, i32, i64), Incoming>, RedriveError> {
    let mut by_partition: HashMap<(String, i32), Vec<i64>> = HashMap::new();
    for (topic, partition, offset) in wanted {
        by_partition
            .entry((topic.clone(), *partition))
            .or_default()
            .push(*offset);
    }
    let mut found = HashMap::new();
    for ((topic, partition), mut offsets) in by_partition {
        offsets.sort_unstable();
        offsets.dedup();
        let mut next = 0;
        while next < offsets.len() {
            let from = offsets[next];
            let until = offsets[next..]
                .iter()
                .take_while(|o| **o - from < SOURCE_READ_LIMIT)
                .last()
                .copied()
                .unwrap_or(from);
            let limit = usize::try_from(until - from + 1).unwrap_or(1);
            let records = match pool
                .read(&topic, partition, Start::Offset(from), limit, READ_WAIT)
                .await
            {
                Ok(records) => records,
                Err(ReadError::UnknownTopic { .. } | ReadError::UnknownPartition { .. }) => {
                    break;
                }
                Err(ReadError::OutOfRange { .. }) => {
                    next += 1;
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let Some(last) = records.last().map(|r| r.record.offset) else {
                // Nothing from `from` on: the log ends before it.
                next += 1;
                continue;
            };
            for incoming in records {
                let offset = incoming.record.offset;
                if offsets[next..].binary_search(&offset).is_ok() {
                    found.insert((topic.clone(), partition, offset), incoming);
                }
            }
            // What the read covered and did not return is gone; read on after it.
            next += offsets[next..].partition_point(|o| *o <= last.max(from));
        }
    }
    Ok(found)
}
