//! Producer-duplicate detection (`delivery.dedup`): the same message produced twice, at
//! different offsets, lands once. Against each database: copies in one batch, in other
//! batches and other partitions, copies replayed after a SIGKILL under `at_least_once`,
//! two writers claiming one id at the same moment, and the cleanup of ids past the window.
//!
//! The tables have no primary key (`mode: insert`): a copy written would be a second row.

use crate::harness;

use std::time::Duration;

use harness::{Backend, Pipeline, Scenario, TestDb, assert_exactly, word_event};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use sluice::dedup::DedupKey;
use sluice::sink::{OffsetAdvance, Sink, SinkError, WriteBatch};

/// Produces `(key, value)` pairs in order, one record per batch (Tansu 0.6.0's memory
/// storage skips the rest of a batch when a fetch starts inside it: see `produce_values`).
async fn produce_pairs(bootstrap: &str, topic: &str, pairs: &[(String, String)]) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("batch.num.messages", "1")
        .set("linger.ms", "0")
        .create()
        .expect("producer");
    for chunk in pairs.chunks(2000) {
        let pending: Vec<_> = chunk
            .iter()
            .map(|(key, value)| {
                producer
                    .send_result(FutureRecord::to(topic).key(key).payload(value))
                    .expect("enqueue")
            })
            .collect();
        for delivery in pending {
            delivery.await.expect("delivery").expect("delivered");
        }
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Originals keyed by uid; `copies` again under another key (so another partition, most
/// of the time).
fn with_copies(
    originals: std::ops::Range<u64>,
    copies: impl Iterator<Item = u64>,
) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = originals
        .map(|uid| (uid.to_string(), word_event(uid)))
        .collect();
    pairs.extend(copies.map(|uid| (format!("again-{uid}"), word_event(uid))));
    pairs
}

/// 2,500 distinct events among 3,320 records: copies in other partitions, twins next to
/// each other (one batch), and copies of records written before a SIGKILL. At least once
/// with the group's offsets (the article's pattern 1): the batches the group had not
/// committed when sluice was killed are read again, and their ids are found.
async fn producer_duplicates_land_once(kind: Backend) {
    let mut scenario = Scenario::new(2);
    scenario.mode = "insert";
    scenario.key = "[]";
    scenario.max_records = 200;
    scenario.guarantee = "at_least_once";
    scenario.delivery_extra = "dedup: { id: /uid, window: 7d }".into();
    let run = Pipeline::new(kind, scenario, 3).await;
    let topic = run.scenario.topic.clone();

    let mut first = with_copies(0..1500, (0..1500).step_by(5));
    for uid in 1500..1800 {
        first.push((uid.to_string(), word_event(uid)));
        first.push((uid.to_string(), word_event(uid)));
    }
    produce_pairs(&run.broker.bootstrap, &topic, &first).await;
    let sluice = run.start();
    run.wait_for_rows(600, 90).await;
    sluice.kill();

    let second = with_copies(1800..2500, (0..300).step_by(3));
    produce_pairs(&run.broker.bootstrap, &topic, &second).await;
    let sluice = run.start();
    run.wait_for_rows(2500, 120).await;
    // A copy that slipped through would land after the last original: give it time.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stats = run.stats().await;
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
    assert_exactly(stats, 2500);

    let config = run.scenario.config(&run.broker.bootstrap, &run.db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    assert_eq!(
        sink.maintenance().dedup_ids().await.expect("count ids"),
        2500
    );
    sink.close().await;
}
for_each_database!(producer_duplicates_land_once);

/// A sink of an append-only scenario table (`mode: insert`, no key) with `delivery`'s
/// `dedup` settings, its tables made; the database is kept alive by the returned `TestDb`.
async fn dedup_sink(kind: Backend, dedup: &str) -> (TestDb, Scenario, Sink) {
    let db = TestDb::new(kind);
    let mut scenario = Scenario::new(1);
    scenario.mode = "insert";
    scenario.key = "[]";
    scenario.delivery_extra = dedup.into();
    let config = scenario.config("unused:9092", &db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    sink.prepare().await.expect("prepare");
    (db, scenario, sink)
}

/// A batch of one record with producer id `id` (from partition `partition`).
fn one_record(topic: &str, partition: i32, uid: i64, id: &str, timestamp: i64) -> WriteBatch {
    WriteBatch {
        ops: vec![harness::scenario_row(uid)],
        origins: vec![0],
        dedup: vec![DedupKey {
            input: 0,
            id: id.into(),
            timestamp,
            topic: topic.into(),
            partition,
            offset: uid,
        }],
        offsets: vec![OffsetAdvance {
            topic: topic.into(),
            partition,
            expected: None,
            next: 1,
        }],
        ..WriteBatch::default()
    }
}

/// Two copies of one message in two partitions, written by two tasks at the same moment:
/// one writes it; the other skips it, at once or (after a conflict on the id's key) when
/// written again, as the task's retry does.
async fn concurrent_claims_of_one_id(kind: Backend) {
    let db = TestDb::new(kind);
    let mut scenario = Scenario::new(1);
    scenario.mode = "insert";
    scenario.key = "[]";
    scenario.delivery_extra = "dedup: { id: /uid }".into();
    let config = scenario.config("unused:9092", &db);
    let a = Sink::connect(&config.connectors[0]).await.expect("connect");
    let b = Sink::connect(&config.connectors[0]).await.expect("connect");
    a.prepare().await.expect("prepare");
    for round in 0..10 {
        let id = format!("msg-{round}");
        let first = one_record(&format!("{}-{round}", scenario.topic), 0, 1, &id, 1_000);
        let second = one_record(&format!("{}-{round}", scenario.topic), 1, 2, &id, 1_000);
        let (ra, rb) = tokio::join!(a.write_timed(&first), b.write_timed(&second));
        let mut rows = 0;
        let mut skipped = 0;
        for (result, sink, batch) in [(ra, &a, &first), (rb, &b, &second)] {
            let written = match result {
                Ok(written) => written,
                Err(SinkError::DedupConflict { ids }) => {
                    assert_eq!(ids, 1);
                    sink.write_timed(batch).await.expect("written again")
                }
                Err(e) => panic!("round {round}: {e}"),
            };
            rows += written.rows;
            skipped += written.duplicates.len();
        }
        assert_eq!((rows, skipped), (1, 1), "round {round}");
    }
    let stats = sluice::cli::demo::sequence_stats(&a, "uid")
        .await
        .expect("stats");
    assert_eq!(stats.rows, 10, "{stats:?}");
    assert_eq!(a.maintenance().dedup_ids().await.expect("ids"), 10);
    a.close().await;
    b.close().await;
}
for_each_database!(concurrent_claims_of_one_id);

/// Ages the ids of `sink`'s connector named in `ids` by `ms`, as if they had been written
/// that long ago by the database's clock.
async fn age_ids(sink: &Sink, ids: &[&str], ms: i64) {
    let list: Vec<String> = ids.iter().map(|id| format!("'{id}'")).collect();
    sink.execute_statement(&format!(
        "UPDATE sluice_dedup SET written_at = written_at - {ms} WHERE connector = '{}' AND id IN ({})",
        sink.connector_name(),
        list.join(", ")
    ))
    .await
    .expect("age ids");
}

/// Ids written more than the window ago by the database's clock are removed; a record
/// whose id was removed is written again (the window is the promise, and no more).
async fn ids_past_the_window_are_cleaned_up(kind: Backend) {
    let (_db, scenario, sink) = dedup_sink(kind, "dedup: { id: /uid, window: 1h }").await;
    let hour = 3_600_000;
    let now = chrono::Utc::now().timestamp_millis();
    for i in 0..4 {
        let topic = format!("{}-{i}", scenario.topic);
        sink.write(&one_record(&topic, 0, i as i64, &format!("id-{i}"), now))
            .await
            .expect("write");
    }
    // id-0 and id-1 were written two hours ago, id-2 half an hour ago.
    age_ids(&sink, &["id-0", "id-1"], 2 * hour).await;
    age_ids(&sink, &["id-2"], hour / 2).await;
    let window = Duration::from_secs(3600);
    assert_eq!(
        sink.maintenance().clean_dedup(window).await.expect("clean"),
        2
    );
    assert_eq!(sink.maintenance().dedup_ids().await.expect("ids"), 2);
    assert_eq!(
        sink.maintenance()
            .clean_dedup(window)
            .await
            .expect("clean again"),
        0
    );
    // id-0 is forgotten: a copy of it now is a new record; id-3 is still a duplicate.
    let again = sink
        .write_timed(&one_record(
            &format!("{}-again", scenario.topic),
            0,
            0,
            "id-0",
            now,
        ))
        .await
        .expect("write");
    assert_eq!((again.rows, again.duplicates.len()), (1, 0));
    let copy = sink
        .write_timed(&one_record(
            &format!("{}-copy", scenario.topic),
            0,
            3,
            "id-3",
            now,
        ))
        .await
        .expect("write");
    assert_eq!((copy.rows, copy.duplicates), (0, vec![0]));
    sink.close().await;
}
for_each_database!(ids_past_the_window_are_cleaned_up);

/// The window counts from when an id was written, by the database's clock, whatever the
/// record's own timestamp says: a producer that stamps event time 11 minutes old under
/// `window: 10m`, beside records stamped now, keeps its id, and its copy is skipped. (When
/// record timestamps counted, the cleanup took the old-stamped id at once.)
async fn the_window_counts_from_the_write_not_the_record_time(kind: Backend) {
    let (_db, scenario, sink) = dedup_sink(kind, "dedup: { id: /uid, window: 10m }").await;
    let now = chrono::Utc::now().timestamp_millis();
    let minute = 60_000;
    sink.write(&one_record(
        &format!("{}-old", scenario.topic),
        0,
        1,
        "stamped-old",
        now - 11 * minute,
    ))
    .await
    .expect("write");
    sink.write(&one_record(
        &format!("{}-new", scenario.topic),
        0,
        2,
        "stamped-now",
        now,
    ))
    .await
    .expect("write");
    let window = Duration::from_secs(600);
    assert_eq!(
        sink.maintenance().clean_dedup(window).await.expect("clean"),
        0
    );
    assert_eq!(sink.maintenance().dedup_ids().await.expect("ids"), 2);
    let copy = sink
        .write_timed(&one_record(
            &format!("{}-copy", scenario.topic),
            0,
            1,
            "stamped-old",
            now - 11 * minute,
        ))
        .await
        .expect("write");
    assert_eq!(
        (copy.rows, copy.duplicates),
        (0, vec![0]),
        "the copy of an id written a moment ago landed again"
    );
    sink.close().await;
}
for_each_database!(the_window_counts_from_the_write_not_the_record_time);

/// Ids that a process of the previous schema version stored (without `written_at`, during
/// a rolling upgrade) are kept at least a window from the first cleanup that sees them.
async fn ids_of_an_older_process_are_kept_a_window(kind: Backend) {
    let (_db, scenario, sink) = dedup_sink(kind, "dedup: { id: /uid, window: 1h }").await;
    let connector = sink.connector_name().to_string();
    sink.execute_statement(&format!(
        "INSERT INTO sluice_dedup (connector, id, record_time) VALUES ('{connector}', 'from-v7', 1000)"
    ))
    .await
    .expect("insert as version 7 does");
    assert_eq!(
        sink.maintenance()
            .clean_dedup(Duration::from_secs(3600))
            .await
            .expect("clean"),
        0
    );
    let copy = sink
        .write_timed(&one_record(&scenario.topic, 0, 1, "from-v7", 1000))
        .await
        .expect("write");
    assert_eq!((copy.rows, copy.duplicates), (0, vec![0]));
    // The cleanup stamped it: a window after that, it goes.
    age_ids(&sink, &["from-v7"], 2 * 3_600_000).await;
    assert_eq!(
        sink.maintenance()
            .clean_dedup(Duration::from_secs(3600))
            .await
            .expect("clean"),
        1
    );
    sink.close().await;
}
for_each_database!(ids_of_an_older_process_are_kept_a_window);

/// Ids compare byte for byte on every database: case and trailing spaces make different
/// ids (MySQL's `_bin` collations would take `a` and `a ` for one), and an id stored once
/// is found again exactly.
async fn ids_compare_exactly(kind: Backend) {
    let (_db, scenario, sink) = dedup_sink(kind, "dedup: { id: /uid }").await;
    let ids = ["a", "a ", "A", "ä", "a\t"];
    let mut batch = WriteBatch::default();
    for (input, id) in ids.iter().enumerate() {
        batch.ops.push(harness::scenario_row(input as i64));
        batch.origins.push(input);
        batch.dedup.push(DedupKey {
            input,
            id: id.to_string(),
            timestamp: 1_000,
            topic: scenario.topic.clone(),
            partition: 0,
            offset: input as i64,
        });
    }
    batch.offsets = vec![OffsetAdvance {
        topic: scenario.topic.clone(),
        partition: 0,
        expected: None,
        next: ids.len() as i64,
    }];
    let written = sink.write_timed(&batch).await.expect("write");
    assert_eq!((written.rows, written.duplicates.len()), (ids.len(), 0));
    // The same ids again, from another partition: every one is found.
    batch.offsets[0].partition = 1;
    let again = sink.write_timed(&batch).await.expect("write again");
    assert_eq!(again.rows, 0);
    assert_eq!(again.duplicates, (0..ids.len()).collect::<Vec<_>>());
    sink.close().await;
}
for_each_database!(ids_compare_exactly);

/// A cleanup larger than one chunk (10,000 ids per statement) removes every id past the
/// window, over several statements, and keeps the rest.
async fn a_large_cleanup_goes_in_chunks(kind: Backend) {
    let (_db, scenario, sink) = dedup_sink(kind, "dedup: { id: /uid, window: 1h }").await;
    let mut batch = WriteBatch::default();
    for input in 0..25_001usize {
        batch.origins.push(input);
        batch.dedup.push(DedupKey {
            input,
            id: format!("id-{input}"),
            timestamp: 1_700_000_000_000,
            topic: scenario.topic.clone(),
            partition: 0,
            offset: input as i64,
        });
    }
    batch.offsets = vec![OffsetAdvance {
        topic: scenario.topic.clone(),
        partition: 0,
        expected: None,
        next: 25_001,
    }];
    sink.write(&batch).await.expect("write ids");
    assert_eq!(sink.maintenance().dedup_ids().await.expect("ids"), 25_001);
    // All but the last were written two hours ago.
    sink.execute_statement(&format!(
        "UPDATE sluice_dedup SET written_at = written_at - 7200000 WHERE connector = '{}' AND id <> 'id-25000'",
        sink.connector_name()
    ))
    .await
    .expect("age ids");
    let removed = sink
        .maintenance()
        .clean_dedup(Duration::from_secs(3600))
        .await
        .expect("clean");
    assert_eq!(removed, 25_000);
    assert_eq!(sink.maintenance().dedup_ids().await.expect("ids"), 1);
    sink.close().await;
}
for_each_database!(a_large_cleanup_goes_in_chunks);

/// Nine copies of one record that the database refuses, in one batch: the copies fail with
/// it in the same round of isolating refused rows (each would otherwise cost a round of
/// the eight a batch has, and the batch would give up), and the good record commits.
async fn copies_of_a_refused_record_fail_together(kind: Backend) {
    use sluice::config::ErrorPolicy;
    use sluice::deliver::{Job, Plan, Policy, deliver};
    use sluice::prepare::Preparer;
    use sluice::record::{Incoming, Record};
    use std::sync::Arc;

    let db = TestDb::new(kind);
    let mut scenario = Scenario::new(1);
    scenario.mode = "insert";
    scenario.key = "[]";
    scenario.delivery_extra = "dedup: { id: /uid }".into();
    scenario.extra_connector = "    errors: { policy: skip }".into();
    let config = scenario.config("unused:9092", &db);
    let connector = &config.connectors[0];
    let sink = Arc::new(Sink::connect(connector).await.expect("connect"));
    let time = match kind {
        Backend::Postgres => "TIMESTAMPTZ",
        Backend::MariaDb => "DATETIME(6)",
        Backend::Sqlite => "TEXT",
    };
    // A word column that takes one character: "toolong" is refused by the database.
    sink.execute_statement(&format!(
        "CREATE TABLE {} (uid BIGINT, word VARCHAR(1) CHECK (length(word) <= 1), produced_at {time}, src_partition INT, src_offset BIGINT)",
        scenario.table
    ))
    .await
    .expect("create table");
    sink.prepare().await.expect("prepare");
    let mut records: Vec<Incoming> = (0..9)
        .map(|offset| {
            Incoming::from(Record::from_value(
                &scenario.topic,
                0,
                offset,
                r#"{"uid": 1, "word": "toolong", "produced_at": 1700000000000}"#,
            ))
        })
        .collect();
    records.push(Incoming::from(Record::from_value(
        &scenario.topic,
        0,
        9,
        r#"{"uid": 2, "word": "w", "produced_at": 1700000000000}"#,
    )));
    let mut prepared = Preparer::new(connector, None, None)
        .prepare(records)
        .expect("prepared");
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
    let policy = Arc::new(Policy {
        policy: ErrorPolicy::Skip,
        dlq_topic: None,
        dlq_table: false,
    });
    let delivered = deliver(sink.clone(), policy, job)
        .await
        .expect("delivered, not given up");
    assert_eq!(
        delivered.handled.len(),
        9,
        "every copy fails with the refused one"
    );
    assert_eq!(delivered.rows, 1);
    let stats = sluice::cli::demo::sequence_stats(&sink, "uid")
        .await
        .expect("stats");
    assert_eq!((stats.rows, stats.min), (1, Some(2)));
    // The refused record's id is not kept; the good one's is.
    assert_eq!(sink.maintenance().dedup_ids().await.expect("ids"), 1);
    sink.close().await;
}
for_each_database!(copies_of_a_refused_record_fail_together);
