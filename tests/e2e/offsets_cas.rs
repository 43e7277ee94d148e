//! The compare-and-set on stored offsets: two writers racing for the same partition, and
//! only one batch wins. Run against each database, no broker needed.

use crate::harness;

use harness::{Backend, Scenario, TestDb};
use sluice::cli::demo::sequence_stats;
use sluice::map::{RowOp, SqlValue};
use sluice::sink::{OffsetAdvance, Sink, SinkError, WriteBatch};

fn batch(topic: &str, expected: Option<i64>, next: i64, uids: std::ops::Range<i64>) -> WriteBatch {
    WriteBatch {
        ops: uids.map(harness::scenario_row).collect(),
        offsets: vec![OffsetAdvance {
            topic: topic.to_string(),
            partition: 0,
            expected,
            next,
        }],
        ..WriteBatch::default()
    }
}

async fn race(db: Backend) {
    let db = TestDb::new(db);
    let scenario = Scenario::new(1);
    let config = scenario.config("unused:9092", &db);
    let a = Sink::connect(&config.connectors[0]).await.unwrap();
    let b = Sink::connect(&config.connectors[0]).await.unwrap();
    a.prepare().await.unwrap();
    b.prepare().await.unwrap();

    // Nothing stored yet: both start from "none"; one insert of the offset row wins.
    let (first_a, first_b) = (
        batch(&scenario.topic, None, 100, 0..100),
        batch(&scenario.topic, None, 100, 1000..1100),
    );
    let (ra, rb) = tokio::join!(a.write(&first_a), b.write(&first_b));
    let wins = [ra.is_ok(), rb.is_ok()];
    assert_eq!(
        wins.iter().filter(|w| **w).count(),
        1,
        "exactly one winner: {ra:?} {rb:?}"
    );
    let loser = if ra.is_ok() { rb } else { ra };
    assert!(
        matches!(
            loser,
            Err(SinkError::OffsetConflict {
                partition: 0,
                expected: None,
                ..
            })
        ),
        "{loser:?}"
    );
    let stats = sequence_stats(&a, "uid").await.unwrap();
    assert_eq!(stats.rows, 100, "only the winner's rows: {stats:?}");

    // Both now believe the stored offset is 100; again only one advances it.
    let (second_a, second_b) = (
        batch(&scenario.topic, Some(100), 200, 100..200),
        batch(&scenario.topic, Some(100), 200, 2000..2100),
    );
    let (ra, rb) = tokio::join!(a.write(&second_a), b.write(&second_b));
    assert_eq!(
        [ra.is_ok(), rb.is_ok()].iter().filter(|w| **w).count(),
        1,
        "{ra:?} {rb:?}"
    );
    assert_eq!(sequence_stats(&a, "uid").await.unwrap().rows, 200);
    assert_eq!(
        a.control()
            .read_offsets(&scenario.topic)
            .await
            .unwrap()
            .get(&0),
        Some(&200)
    );

    // A zombie that lags behind can never write again.
    let zombie = b
        .write(&batch(&scenario.topic, Some(100), 150, 5000..5050))
        .await;
    assert!(
        matches!(zombie, Err(SinkError::OffsetConflict { .. })),
        "{zombie:?}"
    );
    assert_eq!(sequence_stats(&a, "uid").await.unwrap().rows, 200);
}
for_each_database!(race);

/// Upsert, update and tombstone deletes through each dialect's bulk statements.
async fn write_modes(db: Backend) {
    let db = TestDb::new(db);
    let scenario = Scenario::new(1);
    let config = scenario.config("unused:9092", &db);
    let sink = Sink::connect(&config.connectors[0]).await.unwrap();
    sink.prepare().await.unwrap();
    let mut first = batch(&scenario.topic, None, 10, 0..10);
    // Same key twice in one batch: the last write wins.
    first.ops.push(RowOp::Write(vec![
        SqlValue::Int(3),
        SqlValue::Text("again".into()),
        SqlValue::Null,
        SqlValue::Int(0),
        SqlValue::Int(3),
    ]));
    first.ops.push(RowOp::Delete(vec![SqlValue::Int(5)]));
    sink.write(&first).await.unwrap();
    let stats = sequence_stats(&sink, "uid").await.unwrap();
    assert_eq!(stats.rows, 9, "{stats:?}");
    let mut second = batch(&scenario.topic, Some(10), 20, 5..6);
    second.ops.push(RowOp::Delete(vec![SqlValue::Int(0)]));
    sink.write(&second).await.unwrap();
    let stats = sequence_stats(&sink, "uid").await.unwrap();
    assert_eq!((stats.rows, stats.min), (9, Some(1)), "{stats:?}");
}
for_each_database!(write_modes);

/// Two connectors upserting the same keys into one table at the same time, one with its
/// records in ascending key order and one in descending: written in key order, their row
/// locks queue, and neither transaction deadlocks (or waits out a retry). Written in
/// record order, the two would lock the keys in opposite orders.
async fn overlapping_upserts_do_not_deadlock(db: Backend) {
    const KEYS: i64 = 2_000;
    const ROUNDS: i64 = 5;
    let db = TestDb::new(db);
    let mut one = Scenario::new(1);
    let mut two = Scenario::new(1);
    two.table = one.table.clone();
    one.connector = harness::unique("up");
    two.connector = harness::unique("down");
    let a = Sink::connect(&one.config("unused:9092", &db).connectors[0])
        .await
        .unwrap();
    let b = Sink::connect(&two.config("unused:9092", &db).connectors[0])
        .await
        .unwrap();
    a.prepare().await.unwrap();
    b.prepare().await.unwrap();
    let rows = |uids: Vec<i64>, round: i64| -> Vec<RowOp> {
        uids.into_iter()
            .map(|uid| {
                RowOp::Write(vec![
                    SqlValue::Int(uid),
                    SqlValue::Text(format!("r{round}")),
                    SqlValue::Null,
                    SqlValue::Int(0),
                    SqlValue::Int(uid),
                ])
            })
            .collect()
    };
    for round in 0..ROUNDS {
        let up = WriteBatch {
            ops: rows((0..KEYS).collect(), round),
            offsets: vec![OffsetAdvance {
                topic: one.topic.clone(),
                partition: 0,
                expected: (round > 0).then_some(round * KEYS),
                next: (round + 1) * KEYS,
            }],
            ..WriteBatch::default()
        };
        let down = WriteBatch {
            ops: rows((0..KEYS).rev().collect(), round),
            offsets: vec![OffsetAdvance {
                topic: two.topic.clone(),
                partition: 0,
                expected: (round > 0).then_some(round * KEYS),
                next: (round + 1) * KEYS,
            }],
            ..WriteBatch::default()
        };
        let (ra, rb) = tokio::join!(a.write(&up), b.write(&down));
        assert!(ra.is_ok(), "round {round}, ascending: {ra:?}");
        assert!(rb.is_ok(), "round {round}, descending: {rb:?}");
    }
    assert_eq!(sequence_stats(&a, "uid").await.unwrap().rows, KEYS);
    a.close().await;
    b.close().await;
}
for_each_database!(overlapping_upserts_do_not_deadlock: postgres = Postgres, mariadb = MariaDb);

/// Two `dlq redrive`s of one dead-letter table at the same time: each dead letter is
/// written back once. The removal of a dead letter is its compare-and-set; the redrive that
/// finds one gone rolls back and reads its page again. The sink table has no key (insert
/// mode), so a record written twice would be two rows.
async fn concurrent_redrives_write_each_dead_letter_once(db: Backend) {
    const LETTERS: i64 = 300;
    let db = TestDb::new(db);
    let mut scenario = Scenario::new(1);
    scenario.mode = "insert";
    scenario.key = "[]";
    scenario.max_records = 50;
    scenario.extra_connector = format!(
        "    errors: {{ policy: dlq, dlq: {{ table: {} }} }}",
        harness::unique("dead")
    );
    let connector = scenario.config("unused:9092", &db).connectors.remove(0);
    let a = std::sync::Arc::new(Sink::connect(&connector).await.unwrap());
    let b = std::sync::Arc::new(Sink::connect(&connector).await.unwrap());
    a.prepare().await.unwrap();
    let letters = (0..LETTERS)
        .map(|uid| {
            let record = sluice::record::Record::from_value(
                &scenario.topic,
                0,
                uid,
                harness::word_event(uid as u64),
            );
            let failure = sluice::failure::Failure {
                index: 0,
                topic: scenario.topic.clone(),
                partition: 0,
                offset: uid,
                stage: sluice::failure::Stage::Sink,
                class: sluice::failure::FailureClass::DatabaseRefused,
                message: "refused then".into(),
            };
            sluice::failure::DeadLetter::new(record, &failure)
        })
        .collect();
    a.write(&WriteBatch {
        dead_letters: letters,
        ..WriteBatch::default()
    })
    .await
    .expect("store the dead letters");
    assert_eq!(a.count_dead_letters().await.unwrap(), LETTERS);

    let (ra, rb) = tokio::join!(
        sluice::deliver::redrive::redrive(&connector, a.clone(), None),
        sluice::deliver::redrive::redrive(&connector, b.clone(), None)
    );
    let (ra, rb) = (ra.expect("first redrive"), rb.expect("second redrive"));
    assert_eq!(ra.redriven + rb.redriven, LETTERS as u64, "{ra:?} {rb:?}");
    let stats = sequence_stats(&a, "uid").await.unwrap();
    assert_eq!(
        stats.rows, LETTERS,
        "each dead letter written back once: {stats:?}"
    );
    assert_eq!(stats.duplicates(), 0);
    assert_eq!(a.count_dead_letters().await.unwrap(), 0);
    a.close().await;
    b.close().await;
}
for_each_database!(concurrent_redrives_write_each_dead_letter_once);

/// An upsert keyed on timestamps that differ only below microseconds (which every database
/// here stores at most): one row, the last write; before, PostgreSQL refused the whole
/// batch ("cannot affect row a second time") on every retry.
async fn keys_equal_at_the_databases_precision_are_one_key(db: Backend) {
    let db = TestDb::new(db);
    let text = format!(
        "kafka: {{ brokers: localhost:9092 }}\nconnectors:\n  - name: {}\n    topics: [t]\n    \
         sink: {{ url: \"{}\", table: {}, mode: upsert, key: [at], create_table: true, \
         columns: {{ at: {{ from: /at, type: timestamptz }}, word: {{ from: /word, type: text }} }} }}\n",
        harness::unique("nanos"),
        db.url,
        harness::unique("nanos")
    );
    let config = sluice::config::load_str(&text, &|_| None).expect("config");
    let sink = Sink::connect(&config.connectors[0]).await.unwrap();
    sink.prepare().await.unwrap();
    let at = |nanos: u32| {
        SqlValue::Timestamp(
            chrono::DateTime::from_timestamp(1_700_000_000, 123_456_000 + nanos)
                .expect("instant")
                .naive_utc(),
        )
    };
    let batch = WriteBatch {
        ops: vec![
            RowOp::Write(vec![at(1), SqlValue::Text("first".into())]),
            RowOp::Write(vec![at(999), SqlValue::Text("last".into())]),
        ],
        ..WriteBatch::default()
    };
    sink.write(&batch)
        .await
        .expect("one row for two keys equal in microseconds");
    let rows = sink
        .query_integers(
            format!(
                "SELECT CAST(COUNT(*) AS {}) FROM {}",
                if db.kind == Backend::MariaDb {
                    "SIGNED"
                } else {
                    "BIGINT"
                },
                sink.dialect().quote_table(sink.table_name())
            ),
            1,
        )
        .await
        .unwrap();
    assert_eq!(rows, [Some(1)]);
    sink.close().await;
}
for_each_database!(keys_equal_at_the_databases_precision_are_one_key);
