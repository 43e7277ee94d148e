//! A real Debezium writes to the test broker: a snapshot read, a create, an update, a
//! delete with its tombstone and a truncate, in that order, as Connect's JSON.

use std::time::{Duration, Instant};

use super::{ConnectWorker, Converter, LogicalPostgres, Record, read_until};
use crate::harness::{Broker, run_test};

#[test]
fn real_debezium_events_reach_the_broker() {
    run_test(real_debezium_events_reach_the_broker_body())
}

async fn real_debezium_events_reach_the_broker_body() {
    let broker = Broker::start();
    let pg = LogicalPostgres::start().await;
    pg.execute("CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL)")
        .await;
    pg.execute("INSERT INTO items VALUES (1, 'in the snapshot')")
        .await;
    let mut worker = ConnectWorker::start(&broker.bootstrap, &pg, Converter::Json);
    let streaming = worker.wait_streaming(Duration::from_secs(60)).await;

    let changed = Instant::now();
    pg.execute("INSERT INTO items VALUES (2, 'created')").await;
    pg.execute("UPDATE items SET name = 'updated' WHERE id = 2")
        .await;
    pg.execute("DELETE FROM items WHERE id = 2").await;
    pg.execute("TRUNCATE items").await;

    let topic = worker.topic("items");
    let first_change = std::sync::Arc::new(std::sync::Mutex::new(None::<Duration>));
    let seen = first_change.clone();
    let records = read_until(
        &broker.bootstrap,
        std::slice::from_ref(&topic),
        Duration::from_secs(45),
        move |records: &[Record]| {
            let ops: Vec<Option<String>> = records.iter().map(Record::op).collect();
            if ops.iter().any(|op| op.as_deref() == Some("c")) {
                seen.lock().unwrap().get_or_insert(changed.elapsed());
            }
            ops.iter().any(|op| op.as_deref() == Some("t"))
        },
    )
    .await;
    let first_change = *first_change.lock().unwrap();
    worker.stop(Duration::from_secs(15));

    let ops: Vec<String> = records
        .iter()
        .map(|r| r.op().unwrap_or_else(|| "tombstone".into()))
        .collect();
    assert_eq!(
        ops,
        ["r", "c", "u", "d", "tombstone", "t"],
        "the events on {topic}; the worker's log ({}):\n{}",
        worker.log.display(),
        worker.log_tail(40)
    );

    // What the events say, as Debezium writes them.
    let snapshot = records[0].value_json().unwrap();
    assert_eq!(snapshot["payload"]["after"]["name"], "in the snapshot");
    assert_eq!(snapshot["payload"]["source"]["snapshot"], "last");
    let key = records[1].key_json().expect("a key");
    assert_eq!(key["payload"], serde_json::json!({"id": 2}));
    assert_eq!(key["schema"]["name"], format!("{topic}.Key"));
    let update = records[2].value_json().unwrap();
    assert_eq!(update["payload"]["after"]["name"], "updated");
    // REPLICA IDENTITY DEFAULT: an update's before-image is absent.
    assert!(update["payload"]["before"].is_null(), "{update}");
    let delete = records[3].value_json().unwrap();
    assert_eq!(delete["payload"]["before"]["id"], 2);
    assert!(delete["payload"]["after"].is_null());
    assert_eq!(records[4].key, records[3].key, "the tombstone's key");
    assert!(records[5].key.is_none(), "a truncate has no key");
    // Every change event carries its transaction (provide.transaction.metadata).
    for record in [&records[1], &records[2], &records[3], &records[5]] {
        let value = record.value_json().unwrap();
        assert!(value["payload"]["transaction"]["id"].is_string(), "{value}");
    }

    // One record per batch (the worker's producer.batch.size=0): a read that starts at any
    // offset gets that record first, even from Tansu's memory storage, which answers a
    // fetch inside a multi-record batch with the next batch.
    for start in [2, 3] {
        let from = first_offset_from(&broker.bootstrap, &topic, start).await;
        assert_eq!(from, Some(start), "a read from offset {start} of {topic}");
    }

    let line = format!(
        "DEBEZIUM-SMOKE streaming_after_ms={} first_change_after_ms={}",
        streaming.as_millis(),
        first_change.map_or(-1, |d| d.as_millis() as i64)
    );
    crate::harness::record_summary(&line);
}

/// The offset of the first record a consumer assigned at `start` of `topic`'s partition 0
/// receives (within 20 s).
async fn first_offset_from(bootstrap: &str, topic: &str, start: i64) -> Option<i64> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    let bootstrap = bootstrap.to_string();
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", crate::harness::unique("dbz-seek"))
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let mut list = rdkafka::TopicPartitionList::new();
        list.add_partition_offset(&topic, 0, rdkafka::Offset::Offset(start))
            .expect("offset");
        consumer.assign(&list).expect("assign");
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
                return Some(message.offset());
            }
        }
        None
    })
    .await
    .expect("reader thread")
}
