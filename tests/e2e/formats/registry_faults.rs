//! What the registry and the frames do wrong: an id the registry does not have
//! (`schema_not_found`), frames that are not frames (`bad_frame`), a payload cut short
//! (`decode_failed`): each a dead letter of its own, the records around them written. The
//! registry down (503) for 20 s while a new schema id arrives: the batch waits, partitions
//! paused, nothing lost and nothing dead-lettered, the retries counted under
//! `schema_registry`. A registry that refuses sluice (401) fails the task, naming it.

use std::time::{Duration, Instant};

use hyper::Method;
use serde_json::{Value, json};
use sluice::admin::client::AdminClient;

use super::{FormatRun, row};
use crate::harness::{Backend, free_port};

const SCHEMA_V1: &str = r#"{"type": "record", "name": "Word", "namespace": "t", "fields": [{"name": "id", "type": "long"}, {"name": "word", "type": "string"}]}"#;
const SCHEMA_V2: &str = r#"{"type": "record", "name": "Word", "namespace": "t", "fields": [{"name": "id", "type": "long"}, {"name": "word", "type": "string"}, {"name": "lang", "type": "string", "default": "en"}]}"#;
const COLUMNS: &str =
    "        id: { from: /id, type: bigint }\n        word: { from: /word, type: text }";

fn words(schema: &str, ids: std::ops::Range<i64>) -> (Value, Vec<Value>) {
    (
        json!({"serializer": "avro", "schema": schema}),
        ids.map(|i| json!({"value": {"id": i, "word": format!("w{i}"), "lang": "de"}}))
            .collect(),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn bad_records_are_dead_letters_of_their_own(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let config = run.config("avro", COLUMNS, "[id]", "");
    let (spec, records) = words(SCHEMA_V1, 0..2);
    run.produce(spec, records).await;
    run.produce(
        json!({"serializer": "raw"}),
        vec![
            // An id the registry never gave: 40403.
            json!({"raw_value_hex": hex(&[0, 0, 0, 0x27, 0x0f, 2, 2, b'x'])}),
            // Too short for a schema id.
            json!({"raw_value_hex": hex(&[0, 0, 1])}),
            // Plain JSON where a frame is expected: magic byte '{'.
            json!({"raw_value_hex": hex(br#"{"id": 9}"#)}),
            // Schema 1 (the registry's first id), the string cut short.
            json!({"raw_value_hex": hex(&[0, 0, 0, 0, 1, 4, 10, b'a'])}),
        ],
    )
    .await;
    let (spec, records) = words(SCHEMA_V1, 2..4);
    run.produce(spec, records).await;
    let sluice = run.start(&config);
    run.wait_for(4, 4, 120, &sluice).await;
    let letters: Vec<(i64, String)> = run
        .letters()
        .await
        .into_iter()
        .map(|(offset, stage, class, _)| {
            assert_eq!(stage, "source");
            (offset, class)
        })
        .collect();
    assert_eq!(
        letters,
        vec![
            (2, "schema_not_found".to_string()),
            (3, "bad_frame".to_string()),
            (4, "bad_frame".to_string()),
            (5, "decode_failed".to_string()),
        ]
    );
    let messages = run.letters().await;
    assert!(messages[0].3.contains("9999"), "{:?}", messages[0]);
    assert!(
        messages[2].3.contains("magic byte 123"),
        "{:?}",
        messages[2]
    );
    sluice.terminate();
}
for_each_database!(bad_records_are_dead_letters_of_their_own: postgres = Postgres);

/// `GET /metrics`, the value of the first sample whose line starts with `prefix`.
async fn metric(admin: &AdminClient, prefix: &str) -> f64 {
    let answer = admin.get("/metrics").await.expect("metrics");
    answer
        .body
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

async fn a_registry_outage_is_waited_out(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let port = free_port();
    let config = run.config("avro", COLUMNS, "[id]", "");
    // An admin listener, to pause and resume the connector and read its metrics.
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        format!("{text}admin:\n  listen: 127.0.0.1:{port}\n"),
    )
    .expect("config");
    let admin = AdminClient::new(&format!("http://127.0.0.1:{port}"), None).expect("client");
    let (spec, records) = words(SCHEMA_V1, 0..50);
    run.produce(spec, records).await;
    let sluice = run.start(&config);
    run.wait_for(50, 0, 120, &sluice).await;

    // Paused, a producer registers a new version and writes with it; then the registry
    // goes down, and the connector resumes: the new id is not cached.
    let pause = format!("/connectors/{}/pause", run.connector);
    let answer = admin
        .request(Method::PUT, &pause, None)
        .await
        .expect("pause");
    assert!(answer.status.is_success(), "{}", answer.body);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (spec, records) = words(SCHEMA_V2, 50..100);
    run.produce(spec, records).await;
    let down = Duration::from_secs(20);
    run.registry.set_unavailable(down);
    let outage = Instant::now();
    let resume = format!("/connectors/{}/resume", run.connector);
    let answer = admin
        .request(Method::PUT, &resume, None)
        .await
        .expect("resume");
    assert!(answer.status.is_success(), "{}", answer.body);

    // During the outage nothing of the new records lands, and nothing is dead-lettered.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(super::count(&run.db, &run.table).await, 50);
    assert_eq!(super::count(&run.db, &run.dead_letters).await, 0);
    let prefix = format!(
        "sluice_retries_total{{connector=\"{}\",reason=\"schema_registry\"}}",
        run.connector
    );
    assert!(metric(&admin, &prefix).await >= 1.0, "retries counted");
    let unavailable = metric(
        &admin,
        "sluice_schema_registry_requests_total{outcome=\"unavailable\"}",
    )
    .await;
    assert!(unavailable >= 1.0, "unavailable requests counted");

    run.wait_for(100, 0, 120, &sluice).await;
    assert!(
        outage.elapsed() >= down,
        "the records waited for the registry"
    );
    let rows = run.rows(&[("id", "bigint"), ("word", "text")]).await;
    assert_eq!(rows.len(), 100);
    assert_eq!(rows[99], row(&[Some("99"), Some("w99")]));
    sluice.terminate();
}
for_each_database!(a_registry_outage_is_waited_out: postgres = Postgres, mariadb = MariaDb);

async fn a_registry_that_refuses_fails_the_task(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let config = run.config("avro", COLUMNS, "[id]", "");
    let (spec, records) = words(SCHEMA_V1, 0..3);
    run.produce(spec, records).await;
    // From now on the registry asks for credentials sluice does not have.
    run.registry.require_basic("sluice", "secret-password");
    let sluice = run.start(&config);
    let log = sluice.log.clone();
    let status = sluice.wait_for_exit(Duration::from_secs(120));
    assert!(!status.success(), "a refused registry fails the task");
    let text = std::fs::read_to_string(log).expect("log");
    assert!(
        text.contains(&format!(
            "schema registry {} refused the request (401)",
            run.registry.url()
        )),
        "the log names the registry and the refusal:\n{text}"
    );
    assert_eq!(super::count(&run.db, &run.dead_letters).await, 0);
}
for_each_database!(a_registry_that_refuses_fails_the_task: sqlite = Sqlite);
