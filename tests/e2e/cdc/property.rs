//! A property test of versioned change streams: generated histories of creates, updates
//! and deletes over a few keys (a key deleted and created again among them) are delivered
//! as a replay and a rebalance can deliver them: out of order, some events twice, in
//! batches of any size. However they arrive, each table must end equal to the history's
//! final state, row by row: the versions (`$position`, the events' `lsn`) and the
//! tombstones of deletes make the order of arrival irrelevant.
//!
//! The keys belong to two source tables, routed by `table: "<name>_{source.table}"`, so
//! that batches span tables. The events go through the preparer (Debezium's envelope, the
//! table template, the version read from the source block) and the sink's transactions
//! directly, with no broker: each case is a few transactions, so many cases run in
//! seconds. A failing case is shrunk by proptest to a short history and delivery, which
//! the failure prints.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use sluice::config::load_str;
use sluice::prepare::Preparer;
use sluice::record::{Incoming, Record};
use sluice::sink::{Sink, WriteBatch};

use crate::formats::read_rows;
use crate::harness::{Backend, TestDb, unique};

/// One change of the history: `Some(value)` writes the key's row, `None` deletes it.
#[derive(Debug, Clone)]
struct Change {
    key: i64,
    value: Option<i64>,
}

/// A history, and how it is delivered: the order of the events (each at least once, some
/// twice), and the sizes of the batches they are cut into.
#[derive(Debug, Clone)]
struct Case {
    history: Vec<Change>,
    order: Vec<usize>,
    batches: Vec<usize>,
}

fn case() -> impl Strategy<Value = Case> {
    let change = (0..4i64, prop::option::weighted(0.7, 0..1000i64))
        .prop_map(|(key, value)| Change { key, value });
    prop::collection::vec(change, 1..40).prop_flat_map(|history| {
        let n = history.len();
        let order = Just((0..n).collect::<Vec<usize>>()).prop_shuffle();
        let again = prop::collection::vec((0..n, 0..=n), 0..8);
        let batches = prop::collection::vec(1usize..10, 1..12);
        (Just(history), order, again, batches).prop_map(|(history, mut order, again, batches)| {
            // Events delivered a second time (a replay after an offsets reset, a batch
            // written again after a lost answer), at any place of the delivery.
            for (event, at) in again {
                order.insert(at.min(order.len()), event);
            }
            Case {
                history,
                order,
                batches,
            }
        })
    })
}

/// The source table of `key`: even keys are `t0`'s, odd ones `t1`'s.
fn source_table(key: i64) -> String {
    format!("t{}", key % 2)
}

/// What the history leaves in source table `table`: each of its keys' last change, if it
/// writes.
fn final_state(history: &[Change], table: &str) -> BTreeMap<i64, i64> {
    let mut state = BTreeMap::new();
    for change in history.iter().filter(|c| source_table(c.key) == table) {
        match change.value {
            Some(value) => state.insert(change.key, value),
            None => state.remove(&change.key),
        };
    }
    state
}

/// Event `index` of the history as Debezium's PostgreSQL connector writes it (plain JSON),
/// its `lsn` growing with the history; a delete names the key in `before`.
fn event(history: &[Change], index: usize) -> String {
    let change = &history[index];
    let existed = history[..index]
        .iter()
        .rev()
        .find(|c| c.key == change.key)
        .is_some_and(|c| c.value.is_some());
    let (op, before, after) = match change.value {
        Some(value) if existed => ("u", Value::Null, json!({"id": change.key, "v": value})),
        Some(value) => ("c", Value::Null, json!({"id": change.key, "v": value})),
        None => ("d", json!({"id": change.key}), Value::Null),
    };
    json!({
        "op": op,
        "before": before,
        "after": after,
        "source": {"connector": "postgresql", "snapshot": "false", "db": "shop", "schema": "public",
                   "table": source_table(change.key), "lsn": 1_000 + 8 * index as i64},
        "ts_ms": 1_700_000_000_000i64 + index as i64,
    })
    .to_string()
}

/// Delivers `case` through `preparer` and `sink` (one transaction per batch), then reads
/// the tables and compares each with the history's final state.
async fn deliver(
    case: &Case,
    db: &TestDb,
    base: &str,
    preparer: &mut Preparer,
    sink: &Sink,
) -> Result<(), TestCaseError> {
    let mut at = 0;
    let mut sizes = case.batches.iter().cycle();
    while at < case.order.len() {
        let size = (*sizes.next().unwrap_or(&1)).min(case.order.len() - at);
        let incoming: Vec<Incoming> = case.order[at..at + size]
            .iter()
            .map(|&index| {
                Incoming::from(Record {
                    topic: "shop.public".into(),
                    partition: 0,
                    offset: index as i64,
                    value: Some(event(&case.history, index).into_bytes()),
                    ..Default::default()
                })
            })
            .collect();
        let prepared = preparer
            .prepare(incoming)
            .map_err(|e| TestCaseError::fail(format!("prepare: {e}")))?;
        if let Some(failure) = prepared.failures.first() {
            return Err(TestCaseError::fail(format!("{failure}")));
        }
        let batch = WriteBatch {
            ops: prepared.ops,
            origins: prepared.origins,
            routes: prepared.routes,
            ..WriteBatch::default()
        };
        sink.write(&batch)
            .await
            .map_err(|e| TestCaseError::fail(format!("write: {e}")))?;
        at += size;
    }
    for source in ["t0", "t1"] {
        let table = format!("{base}_{source}");
        let named = case.history.iter().any(|c| source_table(c.key) == source);
        let exists = sink
            .query_integers(format!("SELECT COUNT(*) FROM {table}"), 1)
            .await
            .is_ok();
        if !exists {
            // No case so far named the table: it was never made, rightly.
            prop_assert!(!named, "table {} was never made", table);
            continue;
        }
        let rows = read_rows(db, &table, &[("id", "bigint"), ("v", "bigint")]).await;
        let found: BTreeMap<i64, i64> = rows
            .iter()
            .map(|row| {
                let number = |cell: &Option<String>| cell.as_deref().and_then(|s| s.parse().ok());
                (number(&row[0]).unwrap_or(-1), number(&row[1]).unwrap_or(-1))
            })
            .collect();
        prop_assert_eq!(found, final_state(&case.history, source), "table {}", table);
    }
    Ok(())
}

/// Empties the tables and forgets their tombstones: the next case starts from nothing.
async fn clear(sink: &Sink, base: &str) {
    for source in ["t0", "t1"] {
        let table = format!("{base}_{source}");
        // Before the first case there is no table yet: a batch that names it makes it.
        let _ = sink
            .execute_statement(&format!("DELETE FROM {table}"))
            .await;
        sink.execute_statement(&format!(
            "DELETE FROM sluice_tombstones WHERE table_name = '{table}'"
        ))
        .await
        .expect("clear the tombstones");
    }
}

fn histories_end_at_their_final_state(kind: Backend) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let db = TestDb::new(kind);
    let base = unique("prop");
    let text = format!(
        "kafka: {{ brokers: localhost:9092 }}\nconnectors:\n  - name: {base}\n    topics: [shop.public]\n    envelope: debezium\n    sink:\n      url: \"{}\"\n      table: \"{base}_{{source.table}}\"\n      mode: upsert\n      key: [id]\n      columns:\n        id: {{ from: /id, type: bigint }}\n        v: {{ from: /v, type: bigint }}\n      create_table: true\n",
        db.url
    );
    let config = load_str(&text, &|_| None).expect("valid config");
    let connector = &config.connectors[0];
    // `TestRunner::run` takes a `Fn`: the preparer (which `prepare` needs mutably) is
    // taken for each case.
    let preparer = tokio::sync::Mutex::new(Preparer::new(connector, None, None));
    let sink = runtime.block_on(async {
        let sink = Sink::connect(connector).await.expect("connect");
        sink.prepare().await.expect("prepare");
        sink
    });
    let mut runner = TestRunner::new(Config {
        cases: 32,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&case(), |case| {
        runtime.block_on(async {
            clear(&sink, &base).await;
            let mut preparer = preparer.lock().await;
            deliver(&case, &db, &base, &mut preparer, &sink).await
        })
    });
    runtime.block_on(async {
        for source in ["t0", "t1"] {
            let _ = sink
                .execute_statement(&format!("DROP TABLE {base}_{source}"))
                .await;
        }
        sink.close().await;
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

#[test]
fn histories_end_at_their_final_state_postgres() {
    histories_end_at_their_final_state(Backend::Postgres);
}

#[test]
fn histories_end_at_their_final_state_mariadb() {
    histories_end_at_their_final_state(Backend::MariaDb);
}

#[test]
fn histories_end_at_their_final_state_sqlite() {
    histories_end_at_their_final_state(Backend::Sqlite);
}
