//! The backlog, produced before the runs as producers write it.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};

/// The word event `uid` as the field writes it (the plugin's input).
pub(crate) fn raw_event(uid: u64) -> String {
    format!("#{uid}*w{}@{}", uid % 97, 1_700_000_000_000u64 + uid)
}

/// The word event `uid` as Debezium's PostgreSQL connector would write its row's creation
/// (JSON without the converter's schemas): `after` is the word event, the lsn grows with
/// `uid`.
pub(crate) fn debezium_event(uid: u64) -> String {
    format!(
        r#"{{"before":null,"after":{},"source":{{"version":"3.6.1.Final","connector":"postgresql","name":"bench","ts_ms":{ts},"db":"bench","schema":"public","table":"words","txId":{tx},"lsn":{lsn}}},"op":"c","ts_ms":{ts},"transaction":null}}"#,
        crate::harness::word_event(uid),
        ts = 1_700_000_000_000u64 + uid,
        tx = 1000 + uid / 10,
        lsn = 24_000_000 + uid * 64,
    )
}

/// How many tables the many-table Debezium topic spreads its rows over.
pub(crate) const DEBEZIUM_TABLES: u64 = 20;

/// [`debezium_event`] from one of [`DEBEZIUM_TABLES`] source tables (`words_0` …), by
/// `uid`: one topic carrying a database's tables, as Debezium's topic routing writes it.
pub(crate) fn debezium_event_of_many_tables(uid: u64) -> String {
    debezium_event(uid).replacen(
        r#""table":"words""#,
        &format!(r#""table":"words_{}""#, uid % DEBEZIUM_TABLES),
        1,
    )
}

/// The topic of [`DEBEZIUM_TABLES`] topics (`<base>_words_N`) that carries source table
/// `words_N` of [`debezium_event_of_many_tables`]: one topic per table, as Debezium's
/// connectors name and write them by default.
pub(crate) fn table_topic(base: &str, uid: u64) -> String {
    format!("{base}_words_{}", uid % DEBEZIUM_TABLES)
}

/// Produces `n` records as producers write a backlog: lz4 batches of up to 10,000.
pub(crate) async fn produce_backlog(
    bootstrap: &str,
    topic: &str,
    n: u64,
    value: fn(u64) -> String,
) {
    produce_backlog_routed(bootstrap, &|_| topic.to_string(), n, value).await
}

/// [`produce_backlog`] with each record's topic chosen by its uid.
pub(crate) async fn produce_backlog_routed(
    bootstrap: &str,
    topic_of: &dyn Fn(u64) -> String,
    n: u64,
    value: fn(u64) -> String,
) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("compression.codec", "lz4")
        .set("batch.num.messages", "10000")
        .set("batch.size", "1000000")
        .set("linger.ms", "50")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .create()
        .expect("producer");
    let mut pending = Vec::with_capacity(100_000);
    for uid in 0..n {
        let key = uid.to_string();
        let payload = value(uid);
        pending.push(
            producer
                .send_result(FutureRecord::to(&topic_of(uid)).key(&key).payload(&payload))
                .expect("enqueue"),
        );
        if pending.len() >= 100_000 {
            for f in pending.drain(..) {
                f.await.expect("delivery").expect("delivered");
            }
        }
    }
    for f in pending {
        f.await.expect("delivery").expect("delivered");
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
}

/// Produces `n` word events in Avro to `topic`, as Confluent's own serializer writes them
/// (`produce_avro.py`: confluent_kafka's `AvroSerializer`, its schema registered with the
/// registry at `registry`), in the same lz4 batches and with the same keys as
/// [`produce_backlog`]. The seconds the script took.
pub(crate) async fn produce_avro_backlog(
    bootstrap: &str,
    registry: &str,
    topic: &str,
    n: u64,
) -> f64 {
    let python = python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/pipeline/produce_avro.py");
    let output = tokio::process::Command::new(&python)
        .arg(&script)
        .args([bootstrap, registry, topic, &n.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .await
        .expect("run produce_avro.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "produce_avro.py failed: {stdout}");
    stdout
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.0)
}

/// A Python with confluent-kafka and its serializers: `examples/lib/python.sh` ($PYTHON if
/// it has them, or the examples' virtual environment).
fn python() -> String {
    let output = std::process::Command::new(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lib/python.sh"),
    )
    .stderr(Stdio::inherit())
    .output()
    .expect("run examples/lib/python.sh");
    assert!(
        output.status.success(),
        "examples/lib/python.sh could not provide a Python with examples/requirements.txt"
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}
