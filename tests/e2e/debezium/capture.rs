//! Captures what a real Debezium writes, as fixtures in `tests/e2e/cdc/fixtures/real/`
//! (its README says what each file is). Ignored in normal runs; run it by hand to write
//! the fixtures again:
//!
//! ```text
//! cargo nextest run --test e2e --run-ignored only -E 'test(=debezium::capture::capture_real_fixtures)'
//! ```
//!
//! Two workers read the same cluster from the start, one with Connect's `JsonConverter`
//! (`schemas.enable=true`), one with Confluent's `AvroConverter` against the suite's
//! Schema Registry. The changes are made one step at a time; each step waits for its
//! records, so every record is filed under the step that made it.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{
    ConnectWorker, Converter, DEBEZIUM_VERSION, LogicalPostgres, Record, TopicReader,
    WorkerSettings, workspace,
};
use crate::harness::{Broker, run_test};
use crate::registry::TestRegistry;

/// The topic prefixes: stable, so that schema names in the fixtures are too.
const JSON_PREFIX: &str = "fixtures";
const AVRO_PREFIX: &str = "fixtures_avro";

/// The two tables: every column kind the brief lists, and a composite key.
const SCHEMA: &str = "
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE kinds (
    id int8 PRIMARY KEY,
    c_int2 int2,
    c_int4 int4,
    c_int8 int8,
    c_numeric_12_2 numeric(12,2),
    c_numeric numeric,
    c_text text,
    c_toast_text text,
    c_bytea bytea,
    c_jsonb jsonb,
    c_uuid uuid,
    c_timestamptz timestamptz,
    c_timestamp timestamp,
    c_date date,
    c_time time,
    c_enum mood,
    c_int_array int[],
    c_text_array text[]
);
CREATE TABLE pairs (
    tenant text,
    seq int4,
    note text NOT NULL,
    PRIMARY KEY (tenant, seq)
);
";

/// A row of `kinds` with small values.
fn small_row(id: i64) -> String {
    format!(
        "INSERT INTO kinds VALUES ({id}, -32768, 2147483647, -9223372036854775808, \
         1234567890.12, -3.141592653589793238462643383279502884, 'héllo ''quoted'' \\ tab\t', \
         'short', '\\x00ff10', '{{\"a\": [1, 2.5, null], \"b\": {{\"c\": \"d\"}}}}', \
         'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '2024-02-29 13:14:15.123456+02', \
         '2024-02-29 13:14:15.123456', '2024-02-29', '13:14:15.123456', 'happy', \
         '{{1, NULL, -3}}', '{{\"x\", \"y z\", NULL}}')"
    )
}

/// A row of `kinds` whose `c_toast_text` (9,600 characters of md5 hex, which pglz does not
/// shrink enough) and `c_bytea` (4,800 bytes of md5 output) are stored out of line.
fn toasted_row(id: i64) -> String {
    format!(
        "INSERT INTO kinds VALUES ({id}, 1, 2, 3, 0.01, 100, 'before', \
         (SELECT string_agg(md5('toast' || g), '') FROM generate_series(1, 300) g), \
         (SELECT decode(string_agg(md5('blob' || g), ''), 'hex') FROM generate_series(1, 300) g), \
         '[]', '00000000-0000-0000-0000-000000000000', '1970-01-01 00:00:00+00', \
         '1970-01-01 00:00:00', '1970-01-01', '00:00:00', 'sad', '{{}}', '{{}}')"
    )
}

/// One step: its name, its SQL (one transaction), and how many records it adds to each
/// topic (`kinds`, `pairs`, `transaction`).
struct Step {
    name: &'static str,
    sql: String,
    kinds: usize,
    pairs: usize,
    transaction: usize,
}

fn steps() -> Vec<Step> {
    vec![
        Step {
            name: "insert",
            sql: toasted_row(2),
            kinds: 1,
            pairs: 0,
            transaction: 2,
        },
        Step {
            name: "update_toast_unchanged",
            sql: "UPDATE kinds SET c_text = 'after' WHERE id = 2".into(),
            kinds: 1,
            pairs: 0,
            transaction: 2,
        },
        Step {
            name: "update_primary_key",
            sql: "UPDATE kinds SET id = 3 WHERE id = 2".into(),
            kinds: 3,
            pairs: 0,
            transaction: 2,
        },
        Step {
            name: "delete",
            sql: "DELETE FROM kinds WHERE id = 3".into(),
            kinds: 2,
            pairs: 0,
            transaction: 2,
        },
        Step {
            name: "two_table_transaction",
            sql: format!(
                "BEGIN; {}; INSERT INTO pairs VALUES ('acme', 2, 'in a transaction'); \
                 UPDATE pairs SET note = 'updated in a transaction' WHERE tenant = 'acme' AND seq = 1; \
                 COMMIT",
                small_row(4)
            ),
            kinds: 1,
            pairs: 2,
            transaction: 2,
        },
        Step {
            name: "insert_nulls",
            sql: "INSERT INTO kinds (id) VALUES (5)".into(),
            kinds: 1,
            pairs: 0,
            transaction: 2,
        },
        Step {
            name: "composite_key_update_primary_key",
            sql: "UPDATE pairs SET seq = 10 WHERE tenant = 'acme' AND seq = 1".into(),
            kinds: 0,
            pairs: 3,
            transaction: 2,
        },
        Step {
            name: "composite_key_delete",
            sql: "DELETE FROM pairs WHERE tenant = 'acme' AND seq = 2".into(),
            kinds: 0,
            pairs: 2,
            transaction: 2,
        },
        Step {
            name: "truncate",
            sql: "TRUNCATE kinds".into(),
            kinds: 1,
            pairs: 0,
            transaction: 2,
        },
    ]
}

fn out_dir() -> PathBuf {
    workspace().join("tests/e2e/cdc/fixtures/real")
}

#[test]
#[ignore = "writes tests/e2e/cdc/fixtures/real/; run by hand (see the module's doc)"]
fn capture_real_fixtures() {
    run_test(capture_real_fixtures_body())
}

async fn capture_real_fixtures_body() {
    let broker = Broker::start();
    let registry = TestRegistry::start().await;
    let pg = LogicalPostgres::start().await;
    pg.execute(SCHEMA).await;
    pg.execute(&small_row(1)).await;
    pg.execute("INSERT INTO pairs VALUES ('acme', 1, 'in the snapshot')")
        .await;

    let settings = |prefix: &str| WorkerSettings {
        topic_prefix: prefix.to_string(),
        ..WorkerSettings::new()
    };
    let mut json_worker = ConnectWorker::start_with(
        &broker.bootstrap,
        &pg,
        Converter::Json,
        settings(JSON_PREFIX),
    );
    let mut avro_worker = ConnectWorker::start_with(
        &broker.bootstrap,
        &pg,
        Converter::Avro {
            registry_url: registry.url(),
        },
        settings(AVRO_PREFIX),
    );
    let json_streaming = json_worker.wait_streaming(Duration::from_secs(90)).await;
    let avro_streaming = avro_worker.wait_streaming(Duration::from_secs(90)).await;
    eprintln!("streaming after {json_streaming:?} (JSON), {avro_streaming:?} (Avro)");

    let topics =
        |w: &ConnectWorker| vec![w.topic("kinds"), w.topic("pairs"), w.transaction_topic()];
    let json_topics = topics(&json_worker);
    let mut reader = TopicReader::new(&broker.bootstrap, &json_topics);

    // The snapshot: one read per table, no transaction records.
    let mut expected = [1usize, 1, 0];
    let mut labelled: Vec<(String, Record)> = Vec::new();
    let started = Instant::now();
    wait_counts(
        &mut reader,
        &json_topics,
        expected,
        "snapshot",
        &json_worker,
    )
    .await;
    let first_event = started.elapsed();
    label(&mut labelled, reader.records(), 0, "snapshot");

    for (index, step) in steps().iter().enumerate() {
        pg.execute(&step.sql).await;
        expected[0] += step.kinds;
        expected[1] += step.pairs;
        expected[2] += step.transaction;
        wait_counts(&mut reader, &json_topics, expected, step.name, &json_worker).await;
        label(&mut labelled, reader.records(), index + 1, step.name);
    }

    // The Avro worker saw the same changes: the same number of records on each topic.
    let avro_topics = topics(&avro_worker);
    let mut avro_reader = TopicReader::new(&broker.bootstrap, &avro_topics);
    wait_counts(
        &mut avro_reader,
        &avro_topics,
        expected,
        "avro",
        &avro_worker,
    )
    .await;
    let avro_records = avro_reader.into_records();

    json_worker.stop(Duration::from_secs(15));
    avro_worker.stop(Duration::from_secs(15));
    // What the AvroConverter asked the registry (before this test's own reads below).
    let requests = registry.log();

    let out = out_dir();
    let _ = std::fs::remove_dir_all(out.join("json"));
    let _ = std::fs::remove_dir_all(out.join("avro"));
    std::fs::create_dir_all(out.join("json")).expect("fixture dir");
    std::fs::create_dir_all(out.join("avro/schemas")).expect("fixture dir");

    // JSON: each record's key and value, byte for byte as read.
    let mut index = Vec::new();
    for (name, record) in &labelled {
        write_side(
            &out.join("json"),
            name,
            "key",
            record.key.as_deref(),
            "json",
        );
        write_side(
            &out.join("json"),
            name,
            "value",
            record.value.as_deref(),
            "json",
        );
        index.push(entry(name, record));
    }
    write_json(&out.join("json/index.json"), &Value::Array(index));
    for (worker, dir) in [(&json_worker, "json"), (&avro_worker, "avro")] {
        for file in ["worker.properties", "connector.properties"] {
            std::fs::copy(worker.config_dir().join(file), out.join(dir).join(file))
                .expect("copy the worker's properties");
        }
    }

    // Avro: the records in the same order per topic, named as their JSON twins.
    let mut avro_index = Vec::new();
    let mut schema_ids = std::collections::BTreeSet::new();
    for (name, record) in &labelled {
        let position = labelled
            .iter()
            .filter(|(_, r)| r.topic == record.topic)
            .position(|(n, _)| n == name)
            .expect("position");
        let topic = avro_twin(&record.topic);
        let twin = avro_records
            .iter()
            .filter(|r| r.topic == topic)
            .nth(position)
            .unwrap_or_else(|| panic!("no Avro record {position} on {topic}"));
        for side in [twin.key.as_deref(), twin.value.as_deref()]
            .into_iter()
            .flatten()
        {
            assert_eq!(side[0], 0, "Confluent's magic byte");
            schema_ids.insert(u32::from_be_bytes(side[1..5].try_into().unwrap()));
        }
        write_side(&out.join("avro"), name, "key", twin.key.as_deref(), "bin");
        write_side(
            &out.join("avro"),
            name,
            "value",
            twin.value.as_deref(),
            "bin",
        );
        avro_index.push(entry(name, twin));
    }
    write_json(&out.join("avro/index.json"), &Value::Array(avro_index));
    let registry_url = registry.url();
    for id in &schema_ids {
        let answer = http_get(&registry_url, &format!("/schemas/ids/{id}")).await;
        let answer: Value = serde_json::from_str(&answer).expect("registry answer");
        // The schema text as the converter registered it.
        let schema = answer["schema"].as_str().expect("schema");
        std::fs::write(out.join(format!("avro/schemas/{id}.avsc")), schema).expect("schema file");
    }
    let mut subjects = BTreeMap::new();
    let names: Value =
        serde_json::from_str(&http_get(&registry_url, "/subjects").await).expect("subjects");
    for subject in names.as_array().expect("subject list") {
        let subject = subject.as_str().expect("subject");
        let versions: Value = serde_json::from_str(
            &http_get(&registry_url, &format!("/subjects/{subject}/versions")).await,
        )
        .expect("versions");
        let mut ids = Vec::new();
        for version in versions.as_array().expect("versions") {
            let answer: Value = serde_json::from_str(
                &http_get(
                    &registry_url,
                    &format!("/subjects/{subject}/versions/{version}"),
                )
                .await,
            )
            .expect("version");
            ids.push(json!({"version": version, "id": answer["id"]}));
        }
        subjects.insert(subject.to_string(), Value::Array(ids));
    }
    write_json(&out.join("avro/subjects.json"), &json!(subjects));
    std::fs::write(
        out.join("avro/registry-requests.txt"),
        requests.join("\n") + "\n",
    )
    .expect("registry log");

    // The decoded Avro (fastavro, an implementation other than sluice's), when the
    // examples' Python is installed (`scripts/setup.sh --tests`).
    let python = workspace().join("target/examples-venv/bin/python");
    if python.exists() {
        let status = std::process::Command::new(&python)
            .arg(out.join("decode_avro.py"))
            .arg(out.join("avro"))
            .status()
            .expect("run decode_avro.py");
        assert!(status.success(), "decode_avro.py failed");
    } else {
        eprintln!("no {}: the Avro fixtures are not decoded", python.display());
    }

    let line = format!(
        "DEBEZIUM-CAPTURE debezium={DEBEZIUM_VERSION} json_streaming_after_ms={} avro_streaming_after_ms={} \
         snapshot_read_after_ms={} json_records={} avro_records={} schema_ids={} registry_requests={}",
        json_streaming.as_millis(),
        avro_streaming.as_millis(),
        first_event.as_millis(),
        labelled.len(),
        avro_records.len(),
        schema_ids.len(),
        requests.len()
    );
    crate::harness::record_summary(&line);
}

/// Waits until `reader` has `expected` records on each of `topics`; fails with the counts
/// and the worker's log after 60 s.
async fn wait_counts(
    reader: &mut TopicReader,
    topics: &[String],
    expected: [usize; 3],
    step: &str,
    worker: &ConnectWorker,
) {
    let wanted = topics.to_vec();
    let done = reader
        .read_until(Duration::from_secs(60), move |records: &[Record]| {
            counts(records, &wanted) == expected
        })
        .await;
    let seen = counts(reader.records(), topics);
    assert!(
        done,
        "step {step}: {seen:?} records on {topics:?}, not {expected:?}; the worker's log ({}):\n{}",
        worker.log.display(),
        worker.log_tail(40)
    );
}

fn counts(records: &[Record], topics: &[String]) -> [usize; 3] {
    let mut out = [0; 3];
    for (i, topic) in topics.iter().enumerate().take(3) {
        out[i] = records.iter().filter(|r| &r.topic == topic).count();
    }
    out
}

/// Names the records from `labelled.len()` on as step `index`'s:
/// `NN_step__table_op` (`op` is `tombstone` for a null value; `begin`/`end` on the
/// transaction topic).
fn label(labelled: &mut Vec<(String, Record)>, records: &[Record], index: usize, step: &str) {
    let mut used: BTreeMap<String, usize> = BTreeMap::new();
    for record in &records[labelled.len()..] {
        let table = record.topic.rsplit('.').next().expect("topic").to_string();
        let what = match record.value_json() {
            None => "tombstone".to_string(),
            Some(value) => match value["payload"]["op"].as_str() {
                Some(op) => op_name(op).to_string(),
                None => value["payload"]["status"]
                    .as_str()
                    .expect("a transaction status")
                    .to_lowercase(),
            },
        };
        let base = format!("{index:02}_{step}__{table}_{what}");
        let n = used.entry(base.clone()).or_default();
        *n += 1;
        let name = if *n == 1 { base } else { format!("{base}_{n}") };
        labelled.push((name, record.clone()));
    }
}

fn op_name(op: &str) -> &str {
    match op {
        "r" => "read",
        "c" => "create",
        "u" => "update",
        "d" => "delete",
        "t" => "truncate",
        other => other,
    }
}

/// `fixtures.public.kinds` → `fixtures_avro.public.kinds`.
fn avro_twin(topic: &str) -> String {
    let rest = topic.strip_prefix(JSON_PREFIX).expect("a JSON topic");
    format!("{AVRO_PREFIX}{rest}")
}

fn entry(name: &str, record: &Record) -> Value {
    let headers: BTreeMap<String, String> = record
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
        .collect();
    json!({
        "name": name,
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "key_null": record.key.is_none(),
        "value_null": record.value.is_none(),
        "headers": headers,
    })
}

/// Writes one side of a record: its bytes as read, or `null` for a null key or value.
fn write_side(dir: &Path, name: &str, side: &str, bytes: Option<&[u8]>, ext: &str) {
    let path = match bytes {
        Some(_) => dir.join(format!("{name}.{side}.{ext}")),
        None => dir.join(format!("{name}.{side}.null")),
    };
    std::fs::write(&path, bytes.unwrap_or(b"null")).expect("write fixture");
}

fn write_json(path: &Path, value: &Value) {
    let mut text = serde_json::to_string_pretty(value).expect("json");
    text.push('\n');
    std::fs::write(path, text).expect("write json");
}

/// `GET path` from the registry at `base` (`http://127.0.0.1:PORT`): the answer's body.
async fn http_get(base: &str, path: &str) -> String {
    let address = base.trim_start_matches("http://").to_string();
    let path = path.to_string();
    tokio::task::spawn_blocking(move || {
        let mut stream = std::net::TcpStream::connect(&address).expect("connect to the registry");
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
        )
        .expect("request");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("answer");
        let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
        assert!(head.starts_with("HTTP/1.1 200"), "GET {path}: {head}");
        if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(body)
        } else {
            body.to_string()
        }
    })
    .await
    .expect("http thread")
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").expect("chunk size");
        let size = usize::from_str_radix(size.trim(), 16).expect("hex chunk size");
        if size == 0 {
            return out;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
}
