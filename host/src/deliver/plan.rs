//! What one batch writes once the connector's error policy has been applied to the records
//! that failed: rows, offsets, dead letters, and the failure that stops the task.

use std::collections::{HashMap, HashSet};

use crate::config::ErrorPolicy;
use crate::failure::{DeadLetter, Failure};
use crate::map::RowOp;
use crate::prepare::Prepared;
use crate::record::{Partition, Record};
use crate::sink::{OffsetAdvance, WriteBatch};

/// What one batch writes, after the policy: rows, offsets, dead letters.
pub struct Plan {
    pub batch: WriteBatch,
    /// Where each partition goes after the batch (for the at-least-once Kafka commit).
    pub next_offsets: Vec<(Partition, i64)>,
    /// `fail` policy: the first failed record; the task fails after the batch commits.
    pub fatal: Option<Failure>,
    /// Failures skipped or turned into dead letters.
    pub handled: Vec<Failure>,
    /// Dead letters for the topic, not yet acknowledged.
    pub(super) to_produce: Vec<DeadLetter>,
    /// Dead letters this batch stores or produced.
    pub dead_letters: usize,
}

impl Plan {
    /// A plan for a prepared batch: its operations, its offsets, its failures so far.
    pub fn new(
        policy: ErrorPolicy,
        dlq_table: bool,
        prepared: &mut Prepared,
        offsets: Vec<OffsetAdvance>,
        next_offsets: Vec<(Partition, i64)>,
    ) -> Plan {
        let mut plan = Plan {
            batch: WriteBatch {
                ops: std::mem::take(&mut prepared.ops),
                origins: std::mem::take(&mut prepared.origins),
                routes: std::mem::take(&mut prepared.routes),
                offsets,
                dedup: std::mem::take(&mut prepared.dedup),
                ..WriteBatch::default()
            },
            next_offsets,
            fatal: None,
            handled: Vec::new(),
            to_produce: Vec::new(),
            dead_letters: 0,
        };
        let failures = std::mem::take(&mut prepared.failures);
        plan.apply(policy, dlq_table, failures, prepared);
        plan
    }

    /// Applies the policy to more failures.
    pub(super) fn apply(
        &mut self,
        policy: ErrorPolicy,
        dlq_table: bool,
        failures: Vec<Failure>,
        prepared: &Prepared,
    ) {
        if failures.is_empty() {
            return;
        }
        let failed: HashSet<usize> = failures.iter().map(|f| f.index).collect();
        self.retain_ops(|origin| !failed.contains(&origin));
        // A failed record's id is not stored: it was not written.
        self.batch.dedup.retain(|key| !failed.contains(&key.input));
        if !self.batch.redriven.is_empty() || !self.batch.redriven_from_topic.is_empty() {
            // A redriven dead letter that fails again stays (with its new cause), and a
            // record of a dead-letter topic that fails again is not recorded as redriven.
            let again: HashSet<(&str, i32, i64)> = failures
                .iter()
                .map(|f| (f.topic.as_str(), f.partition, f.offset))
                .collect();
            self.batch
                .redriven
                .retain(|(t, p, o)| !again.contains(&(t.as_str(), *p, *o)));
            self.batch.redriven_from_topic.retain(|r| {
                let (t, p, o) = &r.source;
                !again.contains(&(t.as_str(), *p, *o))
            });
        }
        match policy {
            ErrorPolicy::Fail => {
                // Each partition stops at its first failed record; a batch of whole source
                // transactions (`sink.transactions: source`) stops at its start, since any
                // cut of its partitions could split one of them.
                let mut cut: HashMap<(String, i32), i64> = HashMap::new();
                if prepared.whole {
                    for input in 0..prepared.inputs() {
                        let (topic, partition, offset) = prepared.position(input);
                        let at = cut.entry((topic.to_string(), partition)).or_insert(offset);
                        *at = (*at).min(offset);
                    }
                }
                for f in &failures {
                    let at = cut
                        .entry((f.topic.clone(), f.partition))
                        .or_insert(f.offset);
                    *at = (*at).min(f.offset);
                }
                let before_cut = |input: usize| {
                    let (topic, partition, offset) = prepared.position(input);
                    cut.get(&(topic.to_string(), partition))
                        .is_none_or(|at| offset < *at)
                };
                self.retain_ops(before_cut);
                // Records after the cut are read again: their ids must not be taken.
                self.batch.dedup.retain(|key| before_cut(key.input));
                for advance in &mut self.batch.offsets {
                    if let Some(at) = cut.get(&(advance.topic.clone(), advance.partition)) {
                        advance.next = advance.next.min(*at);
                    }
                }
                self.batch.offsets.retain(|a| a.expected != Some(a.next));
                for (partition, next) in &mut self.next_offsets {
                    if let Some(at) = cut.get(partition) {
                        *next = (*next).min(*at);
                    }
                }
                let first = failures.into_iter().min_by_key(|f| f.index);
                self.fatal = match (self.fatal.take(), first) {
                    (Some(a), Some(b)) => Some(if a.index <= b.index { a } else { b }),
                    (a, b) => a.or(b),
                };
            }
            ErrorPolicy::Skip => self.handled.extend(failures),
            ErrorPolicy::Dlq => {
                let originals = prepared.originals.as_deref().unwrap_or_default();
                for failure in &failures {
                    let record = originals.get(failure.index).cloned().unwrap_or_else(|| {
                        // Without the original (not kept), the dead letter still names it.
                        let (topic, partition, offset) = prepared.position(failure.index);
                        Record {
                            topic: topic.to_string(),
                            partition,
                            offset,
                            ..Default::default()
                        }
                    });
                    let letter = DeadLetter::new(record, failure);
                    if dlq_table {
                        self.batch.dead_letters.push(letter);
                    } else {
                        self.to_produce.push(letter);
                    }
                    self.dead_letters += 1;
                }
                self.handled.extend(failures);
            }
        }
    }

    fn retain_ops(&mut self, keep: impl Fn(usize) -> bool) {
        if self.batch.origins.iter().all(|&o| keep(o)) {
            return;
        }
        let kept: Vec<bool> = self.batch.origins.iter().map(|&o| keep(o)).collect();
        let (ops, origins): (Vec<RowOp>, Vec<usize>) = std::mem::take(&mut self.batch.ops)
            .into_iter()
            .zip(std::mem::take(&mut self.batch.origins))
            .zip(&kept)
            .filter(|(_, kept)| **kept)
            .map(|(pair, _)| pair)
            .unzip();
        self.batch.ops = ops;
        self.batch.origins = origins;
        self.batch.routes.retain(&kept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, ConnectorConfig};
    use crate::failure::{FailureClass, Stage};
    use crate::map::SqlValue;
    use crate::prepare::Preparer;
    use crate::record::{Incoming, Record};
    use crate::sink::OffsetAdvance;

    fn connector(policy: &str) -> ConnectorConfig {
        let text = format!(
            r#"
kafka: {{ brokers: localhost:9092 }}
connectors:
  - name: c
    topics: [t]
    max_record_bytes: 100
    sink:
      url: sqlite://x.db
      table: words
      columns:
        uid: {{ from: /uid, type: bigint }}
    errors: {policy}
"#
        );
        let config: Config = crate::config::load_str(&text, &|_| None).expect("valid");
        config.connectors.into_iter().next().expect("one connector")
    }

    /// Partition 0 offsets 10..14 and partition 1 offsets 20..22; offsets 11 and 21 are
    /// not JSON, 13 is too large.
    fn prepared(connector: &ConnectorConfig) -> Prepared {
        let mut records = Vec::new();
        for offset in 10..15 {
            let value = match offset {
                11 => "not json".to_string(),
                13 => format!("{{\"uid\": {offset}, \"pad\": \"{}\"}}", "x".repeat(200)),
                _ => format!("{{\"uid\": {offset}}}"),
            };
            records.push(Incoming::from(Record::from_value("t", 0, offset, value)));
        }
        for offset in 20..23 {
            let value = if offset == 21 {
                "{".to_string()
            } else {
                format!("{{\"uid\": {offset}}}")
            };
            records.push(Incoming::from(Record::from_value("t", 1, offset, value)));
        }
        Preparer::new(connector, None, None)
            .prepare(records)
            .expect("no transforms to fail")
    }

    fn offsets() -> (Vec<OffsetAdvance>, Vec<(Partition, i64)>) {
        let advance = |partition, expected, next| OffsetAdvance {
            topic: "t".into(),
            partition,
            expected,
            next,
        };
        (
            vec![advance(0, Some(10), 15), advance(1, None, 23)],
            vec![(("t".into(), 0), 15), (("t".into(), 1), 23)],
        )
    }

    fn uids(plan: &Plan) -> Vec<i64> {
        plan.batch
            .ops
            .iter()
            .map(|op| match op {
                RowOp::Write(row) => match row[0] {
                    SqlValue::Int(uid) => uid,
                    ref other => panic!("uid {other:?}"),
                },
                other => panic!("op {other:?}"),
            })
            .collect()
    }

    #[test]
    fn failures_are_found_per_record() {
        let prepared = prepared(&connector("{ policy: skip }"));
        let found: Vec<(i64, FailureClass, Stage)> = prepared
            .failures
            .iter()
            .map(|f| (f.offset, f.class, f.stage))
            .collect();
        assert_eq!(
            found,
            vec![
                (11, FailureClass::InvalidJson, Stage::Map),
                (13, FailureClass::RecordTooLarge, Stage::Source),
                (21, FailureClass::InvalidJson, Stage::Map)
            ]
        );
        assert_eq!(prepared.ops.len(), 5);
    }

    #[test]
    fn fail_commits_what_comes_before_the_first_failure_of_each_partition() {
        let connector = connector("{ policy: fail }");
        let mut prepared = prepared(&connector);
        let (offsets, next) = offsets();
        let plan = Plan::new(ErrorPolicy::Fail, false, &mut prepared, offsets, next);
        assert_eq!(uids(&plan), vec![10, 20]);
        let fatal = plan.fatal.as_ref().expect("a fatal failure");
        assert_eq!((fatal.partition, fatal.offset), (0, 11));
        let advanced: Vec<(i32, i64)> = plan
            .batch
            .offsets
            .iter()
            .map(|a| (a.partition, a.next))
            .collect();
        assert_eq!(advanced, vec![(0, 11), (1, 21)]);
        assert_eq!(plan.next_offsets[0].1, 11);
        assert!(plan.handled.is_empty());
    }

    #[test]
    fn fail_keeps_a_batch_of_whole_source_transactions_back_entirely() {
        let connector = connector("{ policy: fail }");
        let mut prepared = prepared(&connector);
        prepared.whole = true;
        let (offsets, next) = offsets();
        let plan = Plan::new(ErrorPolicy::Fail, false, &mut prepared, offsets, next);
        assert!(uids(&plan).is_empty(), "no row of the batch");
        let advanced: Vec<(i32, i64)> = plan
            .batch
            .offsets
            .iter()
            .map(|a| (a.partition, a.next))
            .collect();
        // Partition 0 stays at its stored 10; partition 1 had none stored, and 20 is where
        // the batch started.
        assert_eq!(advanced, vec![(1, 20)]);
        assert_eq!(
            plan.next_offsets,
            vec![(("t".into(), 0), 10), (("t".into(), 1), 20)]
        );
        assert_eq!(plan.fatal.as_ref().map(|f| f.offset), Some(11));
    }

    #[test]
    fn fail_on_a_partitions_first_record_leaves_its_offset_alone() {
        let mut plan = Plan {
            batch: WriteBatch {
                ops: vec![RowOp::Write(vec![SqlValue::Int(1)])],
                origins: vec![0],
                offsets: vec![OffsetAdvance {
                    topic: "t".into(),
                    partition: 0,
                    expected: Some(5),
                    next: 6,
                }],
                ..WriteBatch::default()
            },
            next_offsets: vec![(("t".into(), 0), 6)],
            fatal: None,
            handled: Vec::new(),
            to_produce: Vec::new(),
            dead_letters: 0,
        };
        let connector = connector("{ policy: fail }");
        let prepared = Preparer::new(&connector, None, None)
            .prepare(vec![Record::from_value("t", 0, 5, "{\"uid\": 1}").into()])
            .expect("prepared");
        let failure = prepared.failure(0, Stage::Sink, FailureClass::DatabaseRefused, "no".into());
        plan.apply(ErrorPolicy::Fail, false, vec![failure], &prepared);
        assert!(plan.batch.ops.is_empty());
        // Nothing moves: a compare-and-set from 5 to 5 is no advance at all.
        assert!(plan.batch.offsets.is_empty());
        assert!(plan.fatal.is_some());
    }

    #[test]
    fn skip_and_dead_letters_keep_the_offsets_whole() {
        for (policy, table) in [
            ("{ policy: skip }", false),
            ("{ policy: dlq, dlq: { table: dead } }", true),
            ("{ policy: dlq, dlq: { topic: dead } }", false),
        ] {
            let connector = connector(policy);
            let mut prepared = prepared(&connector);
            let (offsets, next) = offsets();
            let plan = Plan::new(
                connector.errors.policy,
                table,
                &mut prepared,
                offsets.clone(),
                next,
            );
            assert_eq!(uids(&plan), vec![10, 12, 14, 20, 22], "{policy}");
            assert_eq!(plan.batch.offsets, offsets, "{policy}");
            assert_eq!(plan.handled.len(), 3, "{policy}");
            assert!(plan.fatal.is_none());
            match connector.errors.policy {
                ErrorPolicy::Skip => {
                    assert_eq!(plan.dead_letters, 0);
                    assert!(plan.batch.dead_letters.is_empty() && plan.to_produce.is_empty());
                }
                _ => {
                    assert_eq!(plan.dead_letters, 3);
                    let letters = if table {
                        &plan.batch.dead_letters
                    } else {
                        &plan.to_produce
                    };
                    assert_eq!(letters.len(), 3, "{policy}");
                    // The original record, as it arrived.
                    assert_eq!(letters[0].record.value.as_deref(), Some(&b"not json"[..]));
                    assert_eq!(letters[1].class, FailureClass::RecordTooLarge);
                }
            }
        }
    }

    /// Producer ids: a record without one fails on arrival; a failed record's id, and under
    /// `fail` the ids of the records after the cut (read again), are not stored.
    #[test]
    fn only_the_ids_of_records_the_batch_commits_are_stored() {
        let text = r#"
kafka: { brokers: localhost:9092 }
connectors:
  - name: c
    topics: [t]
    sink:
      url: sqlite://x.db
      table: words
      columns:
        uid: { from: /uid, type: bigint }
    delivery: { dedup: { id: /id } }
    errors: { policy: fail }
"#;
        let config: Config = crate::config::load_str(text, &|_| None).expect("valid");
        let connector = &config.connectors[0];
        let values = [
            r#"{"id": "a", "uid": 1}"#,
            r#"{"id": "b", "uid": 2}"#,
            r#"{"uid": 3}"#,
            r#"{"id": "d", "uid": 4}"#,
        ];
        let records = values
            .iter()
            .enumerate()
            .map(|(i, v)| Incoming::from(Record::from_value("t", 0, 10 + i as i64, *v)))
            .collect();
        let mut prepared = Preparer::new(connector, None, None)
            .prepare(records)
            .expect("prepared");
        assert_eq!(prepared.failures.len(), 1);
        assert_eq!(prepared.failures[0].class, FailureClass::MissingId);
        assert_eq!(prepared.failures[0].offset, 12);
        let ids = |plan: &Plan| -> Vec<String> {
            plan.batch.dedup.iter().map(|k| k.id.clone()).collect()
        };
        let offsets = vec![OffsetAdvance {
            topic: "t".into(),
            partition: 0,
            expected: Some(10),
            next: 14,
        }];
        let plan = Plan::new(
            ErrorPolicy::Fail,
            false,
            &mut prepared,
            offsets,
            vec![(("t".into(), 0), 14)],
        );
        // Offset 12 fails: 10 and 11 commit, 13 is read again.
        assert_eq!(ids(&plan), vec!["a", "b"]);
        assert_eq!(plan.batch.ops.len(), 2);
        assert_eq!(plan.batch.origins, vec![0, 1]);
    }

    #[test]
    fn refused_rows_leave_the_batch_and_a_redrive_keeps_their_dead_letters() {
        let connector = connector("{ policy: dlq, dlq: { table: dead } }");
        let mut prepared = prepared(&connector);
        let mut plan = Plan::new(
            ErrorPolicy::Dlq,
            true,
            &mut prepared,
            Vec::new(),
            Vec::new(),
        );
        plan.batch.redriven = vec![("t".into(), 0, 10), ("t".into(), 0, 12)];
        // The database refuses the row of offset 12 (ops: 10, 12, 14, 20, 22).
        let refused = prepared.failure(
            plan.batch.origins[1],
            Stage::Sink,
            FailureClass::DatabaseRefused,
            "too long".into(),
        );
        assert_eq!(refused.offset, 12);
        plan.apply(ErrorPolicy::Dlq, true, vec![refused], &prepared);
        assert_eq!(uids(&plan), vec![10, 14, 20, 22]);
        assert_eq!(plan.batch.redriven, vec![("t".to_string(), 0, 10)]);
        assert_eq!(plan.batch.dead_letters.len(), 4);
        assert_eq!(plan.batch.dead_letters[3].stage, Stage::Sink);
    }
}
