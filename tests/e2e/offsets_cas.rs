//! The compare-and-set on stored offsets: two writers racing for the same partition, and
//! only one batch wins. Run against each database, no broker needed.

use crate::harness;

use harness::{Backend, Scenario, TestDb};
use sluice::cli::demo::sequence_stats;
use sluice::map::{RowOp, SqlValue};
use sluice::sink::{OffsetAdvance, Sink, SinkError, WriteBatch};

fn batch(topic: &str, expected: Option<i64>, next: i64, uids: std::ops::Range<i64>) -> WriteBatch {
    WriteBatch {
        ops: uids
            .map(|uid| {
                RowOp::Write(vec![
                    SqlValue::Int(uid),
                    SqlValue::Text(format!("w{uid}")),
                    SqlValue::Null,
                    SqlValue::Int(0),
                    SqlValue::Int(uid),
                ])
            })
            .collect(),
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
        a.read_offsets(&scenario.topic).await.unwrap().get(&0),
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
