//! Many topics into many tables in one connector: `topics_regex` (librdkafka's `^` pattern
//! subscription; a topic created later that matches is picked up at a metadata refresh),
//! `sink.table` as a template (`{topic}`, `{source.table}`) and `sink.table_from`, against
//! each database.
//!
//! - every topic the pattern matches, one created mid-run too, lands in its own table (dots
//!   kept in the name), and nothing else does; `sluice offsets show` lists each topic;
//! - Debezium change events of two source tables, routed by `{source.table}`: each table
//!   ends at its history's final state;
//! - a table name the database cannot take (too long), two topics that meet in one table
//!   (names compared without case), a topic `table_from` does not match: dead letters of
//!   class `table_name`, while the other topics land and every offset moves past them;
//! - a SIGKILL while batches span three tables: every table has each of its records once.
//!
//! The tables of the JSON runs have no primary key (`mode: insert`): a record written twice
//! would be two rows.
//!
//! Test-broker workarounds (Tansu 0.6.0's faults, DESIGN.md), here only: records are produced
//! one per producer batch (its memory storage answers a fetch that starts inside a batch
//! with the next batch), and a process is started again only [`EVICTION_WAIT`] after a
//! SIGKILL (a SIGKILLed member stays in the group until a join after its session expired).

use crate::harness;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::{Backend, Broker, EVICTION_WAIT, SluiceProcess, TestDb, produce_values, unique};
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use serde_json::{Value, json};

use crate::cdc::stored_offset;
use crate::formats::read_rows;

/// A table name as one identifier (`rt_x.a` is one name, not schema `rt_x`).
fn quote(db: &TestDb, name: &str) -> String {
    match db.kind {
        Backend::MariaDb => format!("`{name}`"),
        _ => format!("\"{name}\""),
    }
}

/// Rows of the table `name`; `None` when there is no such table.
async fn count(db: &TestDb, name: &str) -> Option<i64> {
    let sql = sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {}", quote(db, name)));
    with_pool!(db, pool => sqlx::query_scalar::<_, i64>(sql).fetch_one(&pool).await.ok())
}

/// The tables whose names contain `tag`, as the database spells them.
async fn tables_named_like(db: &TestDb, tag: &str) -> BTreeSet<String> {
    let sql = match db.kind {
        Backend::Postgres => {
            format!("SELECT tablename::text FROM pg_tables WHERE tablename LIKE '%{tag}%'")
        }
        Backend::MariaDb => format!(
            "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE '%{tag}%'"
        ),
        Backend::Sqlite => {
            format!("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '%{tag}%'")
        }
    };
    let sql = sqlx::AssertSqlSafe(sql);
    let names: Vec<String> = with_pool!(db, pool => sqlx::query_scalar::<_, String>(sql)
        .fetch_all(&pool)
        .await
        .expect("list tables"));
    names.into_iter().collect()
}

/// The last lines of a sluice log, for a failure message.
fn log_tail(process: &SluiceProcess) -> String {
    let text = std::fs::read_to_string(&process.log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    format!(
        "log {}:\n{}",
        process.log.display(),
        lines[lines.len().saturating_sub(40)..].join("\n")
    )
}

/// Waits until each table holds its number of rows (at most `seconds`), then a moment
/// longer to see that no more come.
async fn wait_for_rows(db: &TestDb, want: &[(&str, i64)], seconds: u64, process: &SluiceProcess) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let mut seen = Vec::new();
        for (table, _) in want {
            seen.push(count(db, table).await.unwrap_or(0));
        }
        if seen.iter().zip(want).all(|(n, (_, w))| n == w) {
            tokio::time::sleep(Duration::from_millis(500)).await;
            for ((table, w), n) in want.iter().zip(&seen) {
                let again = count(db, table).await.unwrap_or(0);
                assert_eq!(again, *w, "table {table} went on from {n} to {again} rows");
            }
            return;
        }
        assert!(
            Instant::now() < deadline,
            "after {seconds} s the tables hold {:?} rows, not {want:?}\n{}",
            want.iter().map(|(t, _)| *t).zip(&seen).collect::<Vec<_>>(),
            log_tail(process)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until each topic's partition 0 has `next` stored (at most `seconds` in all).
async fn wait_for_offsets(
    db: &TestDb,
    connector: &str,
    want: &[(&str, i64)],
    seconds: u64,
    process: &SluiceProcess,
) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    for (topic, next) in want {
        loop {
            let stored = stored_offset(db, connector, topic, 0).await;
            if stored == Some(*next) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "after {seconds} s the stored offset of {topic}/0 is {stored:?}, not {next}\n{}",
                log_tail(process)
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// The value of record `id` of `topic`.
fn value(topic: &str, id: u64) -> String {
    json!({"id": id, "v": format!("{topic}-{id}")}).to_string()
}

/// Produces records `range` of `topic` ([`value`]), keyed by id, one per producer batch.
async fn produce(broker: &Broker, topic: &str, range: std::ops::Range<u64>) {
    produce_values(&broker.bootstrap, topic, range, |id| value(topic, id), None).await
}

/// Produces `(key, value)` records in order, a `None` value as a tombstone, each delivered
/// before the next is sent, one per producer batch (Tansu 0.6.0: see the module's doc).
async fn produce_in_order(broker: &Broker, topic: &str, records: &[(String, Option<String>)]) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.bootstrap)
        .set("batch.num.messages", "1")
        .set("linger.ms", "0")
        .create()
        .expect("producer");
    for (key, value) in records {
        let record = FutureRecord::<String, String>::to(topic).key(key);
        let record = match value {
            Some(value) => record.payload(value),
            None => record,
        };
        producer
            .send(record, Duration::from_secs(30))
            .await
            .unwrap_or_else(|(e, _)| panic!("produce to {topic}: {e}"));
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Produces records `range` of each of `topics` ([`value`]), keyed by id, the topics in
/// turn, about `per_second` records a second in all, evenly (not in bursts: the batches of
/// a consumer that keeps up span the topics, and a kill at any moment finds one being
/// written); one record per producer batch (Tansu 0.6.0: see the module's doc).
async fn produce_round_robin(
    broker: &Broker,
    topics: &[String],
    range: std::ops::Range<u64>,
    per_second: u64,
) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.bootstrap)
        .set("batch.num.messages", "1")
        .set("linger.ms", "0")
        .create()
        .expect("producer");
    let started = tokio::time::Instant::now();
    let mut sent = 0u64;
    let mut pending = Vec::new();
    for id in range {
        for topic in topics {
            let (key, payload) = (id.to_string(), value(topic, id));
            pending.push(
                producer
                    .send_result(FutureRecord::to(topic).key(&key).payload(&payload))
                    .expect("enqueue"),
            );
            sent += 1;
            tokio::time::sleep_until(
                started + Duration::from_secs_f64(sent as f64 / per_second as f64),
            )
            .await;
        }
    }
    for delivery in pending {
        delivery.await.expect("delivery").expect("delivered");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// `topics_regex` in YAML's double quotes: the topics `<prefix>.<anything>`.
fn pattern(prefix: &str) -> String {
    format!("^{prefix}\\\\..*")
}

/// The start of a connectors.yaml: the broker, a quick metadata refresh (a topic created
/// mid-run is found within a second) and short sessions.
fn kafka_yaml(broker: &Broker) -> String {
    format!(
        r#"kafka:
  brokers: "{}"
  properties:
    session.timeout.ms: "6000"
    heartbeat.interval.ms: "500"
    topic.metadata.refresh.interval.ms: "1000"
connectors:
"#,
        broker.bootstrap
    )
}

/// A connector of the JSON records of [`value`]: `table` is the sink's table line (`table:
/// "{topic}"`, or a `table_from:`), rows inserted (no key: a duplicate is a second row),
/// failures dead letters in the table `dlq`.
fn json_connector(
    name: &str,
    regex: &str,
    table: &str,
    max_records: usize,
    dlq: &str,
    db: &TestDb,
) -> String {
    format!(
        r#"  - name: {name}
    topics_regex: "{regex}"
    group: {name}
    batch: {{ max_records: {max_records}, linger: 20ms }}
    errors:
      policy: dlq
      dlq: {{ table: {dlq} }}
      retry: {{ initial: 100ms, max: 1s, max_elapsed: 5m }}
    sink:
      url: "{url}"
      {table}
      mode: insert
      key: []
      columns:
        id: {{ from: /id, type: bigint }}
        v: {{ from: /v, type: text }}
        src_topic: {{ from: $topic, type: text }}
        src_partition: {{ from: $partition, type: int }}
        src_offset: {{ from: $offset, type: bigint }}
      create_table: true
"#,
        url = db.url,
    )
}

/// Writes `text` as `<name>.yaml` in `dir` (sluice's log is named after the file).
fn write_config(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text).expect("write connectors.yaml");
    path
}

/// Asserts that `table` holds exactly the records `0..n` of `topic`, each once, and that
/// the connector's stored offset of each of the topic's partitions is just past the last
/// of its rows (every partition's records are offsets `0..count`, all of them rows).
async fn assert_table_holds(db: &TestDb, connector: &str, table: &str, topic: &str, n: u64) {
    let rows = read_rows(
        db,
        &quote(db, table),
        &[
            ("id", "bigint"),
            ("v", "text"),
            ("src_topic", "text"),
            ("src_partition", "int"),
            ("src_offset", "bigint"),
        ],
    )
    .await;
    let text = |r: &Vec<Option<String>>, i: usize| r[i].clone().unwrap_or_default();
    let mut ids: Vec<u64> = rows
        .iter()
        .map(|r| text(r, 0).parse().expect("an id"))
        .collect();
    // PostgreSQL orders the ids as read_rows selects them, as text.
    ids.sort_unstable();
    assert_eq!(
        ids,
        (0..n).collect::<Vec<_>>(),
        "table {table}: not exactly the ids 0..{n} of {topic}, each once"
    );
    let mut offsets: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for row in &rows {
        let id = text(row, 0);
        assert_eq!(
            text(row, 2),
            topic,
            "table {table}: a row of another topic: {row:?}"
        );
        assert_eq!(
            text(row, 1),
            format!("{topic}-{id}"),
            "table {table}: {row:?}"
        );
        offsets
            .entry(text(row, 3).parse().expect("a partition"))
            .or_default()
            .push(text(row, 4).parse().expect("an offset"));
    }
    for (partition, mut at) in offsets {
        at.sort_unstable();
        let count = at.len() as i64;
        assert_eq!(
            at,
            (0..count).collect::<Vec<_>>(),
            "table {table}: the offsets of {topic}/{partition}"
        );
        assert_eq!(
            stored_offset(db, connector, topic, partition).await,
            Some(count),
            "the stored offset of {topic}/{partition} ({count} records)"
        );
    }
}

/// A dead letter: (connector, topic, offset, class, message).
type Letter = (String, String, i64, String, String);

/// Every dead letter of the table `dlq`, by connector, topic and offset.
async fn letters(db: &TestDb, dlq: &str) -> Vec<Letter> {
    let rows = read_rows(
        db,
        dlq,
        &[
            ("connector", "text"),
            ("source_topic", "text"),
            ("source_offset", "bigint"),
            ("error_class", "text"),
            ("error_message", "text"),
        ],
    )
    .await;
    let mut letters: Vec<Letter> = rows
        .into_iter()
        .map(|r| {
            let text = |i: usize| r[i].clone().unwrap_or_default();
            (
                text(0),
                text(1),
                text(2).parse().expect("an offset"),
                text(3),
                text(4),
            )
        })
        .collect();
    letters.sort();
    letters
}

/// `sluice offsets show --config FILE`: its lines `(topic, partition, next)`.
fn offsets_shown(config: &Path, connector: &str) -> BTreeSet<(String, i32, i64)> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["offsets", "show", "--config"])
        .arg(config)
        .output()
        .expect("run sluice offsets show");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "sluice offsets show: {}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let shown: BTreeSet<(String, i32, i64)> = stdout
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields.len(), 4, "a line of sluice offsets show: {line:?}");
            assert_eq!(fields[0], connector, "{line:?}");
            (
                fields[1].to_string(),
                fields[2].parse().expect("a partition"),
                fields[3].parse().expect("an offset"),
            )
        })
        .collect();
    // `--format json`: the same, a JSON object per partition.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["offsets", "show", "--format", "json", "--config"])
        .arg(config)
        .output()
        .expect("run sluice offsets show --format json");
    let json: BTreeSet<(String, i32, i64)> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            assert_eq!(v["connector"], connector, "{line}");
            (
                v["topic"].as_str().expect("topic").to_string(),
                v["partition"].as_i64().expect("partition") as i32,
                v["next_offset"].as_i64().expect("next_offset"),
            )
        })
        .collect();
    assert_eq!(json, shown);
    shown
}

mod bad_names;
mod debezium;
mod pattern;
mod sigkill;
