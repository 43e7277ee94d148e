//! An operator's replay replays: an offsets reset forgets what it rewinds past (the ids of
//! `delivery.dedup`, the redrive markers), so the records read again are written again;
//! a row written for a record that has a dead letter in the dead-letter table removes the
//! letter; `sluice offsets reset` refuses while the connector runs anywhere.

use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use sluice::admin::client::AdminClient;
use sluice::sink::{OffsetAdvance, Sink, WriteBatch};

use crate::harness::{self, Backend, Pipeline, Scenario, TestDb, free_port};

const TOKEN: &str = "replay-token-0123";
const PARTITIONS: i32 = 2;

fn client(port: u16) -> AdminClient {
    AdminClient::new(&format!("http://127.0.0.1:{port}"), Some(TOKEN.into())).expect("client")
}

async fn send(port: u16, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    let answer = client(port)
        .request(method, path, body)
        .await
        .expect("request");
    (answer.status, answer.json())
}

/// `PUT /connectors/{name}/{action}`, then waits until the status says `state`.
async fn control(port: u16, name: &str, action: &str, state: &str) {
    let (code, body) = send(
        port,
        Method::PUT,
        &format!("/connectors/{name}/{action}"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{action}: {body}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, status) = send(
            port,
            Method::GET,
            &format!("/connectors/{name}/status"),
            None,
        )
        .await;
        let tasks_settled =
            state != "STOPPED" || status["tasks"].as_array().is_some_and(Vec::is_empty);
        if code == StatusCode::OK && status["connector"]["state"] == state && tasks_settled {
            return;
        }
        assert!(Instant::now() < deadline, "never {state}: {status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A connector with producer-duplicate detection on, appending (no key: a record written
/// twice is two rows), with an admin listener.
fn scenario(port: u16, guarantee: &'static str) -> Scenario {
    let mut scenario = Scenario::new(1);
    scenario.extra_kafka = format!("admin:\n  listen: \"127.0.0.1:{port}\"\n  token: {TOKEN}");
    scenario.mode = "insert";
    scenario.key = "[]";
    scenario.guarantee = guarantee;
    scenario.delivery_extra = "dedup: { id: /uid }".into();
    scenario
}

async fn sink_of(run: &Pipeline) -> Sink {
    let config = run.scenario.config(&run.broker.bootstrap, &run.db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    sink.prepare().await.expect("prepare");
    sink
}

/// Rows land; stop; the table is emptied; `DELETE …/offsets`; resume: every row lands
/// again (before, the replay wrote nothing and counted 1,000 duplicates). Then a `PATCH`
/// to the middle of one partition rewrites only from there.
async fn a_reset_replays(kind: Backend, guarantee: &'static str) {
    let port = free_port();
    let run = Pipeline::new(kind, scenario(port, guarantee), PARTITIONS).await;
    let name = run.scenario.connector.clone();
    run.produce(0..1000).await;
    let sluice = run.start();
    harness::assert_exactly(run.wait_for_rows(1000, 120).await, 1000);
    control(port, &name, "stop", "STOPPED").await;

    let sink = sink_of(&run).await;
    sink.execute_statement(&format!("DELETE FROM {}", run.scenario.table))
        .await
        .expect("empty the table");
    let (code, body) = send(
        port,
        Method::DELETE,
        &format!("/connectors/{name}/offsets"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["forgotten"]["dedup_ids"], 1000, "{body}");
    control(port, &name, "resume", "RUNNING").await;
    harness::assert_exactly(run.wait_for_rows(1000, 120).await, 1000);

    // PATCH partition 0 to its middle: its rows from there are removed by hand and read
    // again; the rows before stay, and nothing else is written twice.
    control(port, &name, "stop", "STOPPED").await;
    let (code, offsets) = send(
        port,
        Method::GET,
        &format!("/connectors/{name}/offsets"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{offsets}");
    let end = offsets["offsets"]
        .as_array()
        .and_then(|all| {
            all.iter()
                .find(|o| o["partition"]["kafka_partition"] == 0)
                .and_then(|o| o["offset"]["kafka_offset"].as_i64())
        })
        .unwrap_or_else(|| panic!("partition 0 has no offset: {offsets}"));
    let middle = end / 2;
    sink.execute_statement(&format!(
        "DELETE FROM {} WHERE src_partition = 0 AND src_offset >= {middle}",
        run.scenario.table
    ))
    .await
    .expect("remove the rows from the middle");
    let patch = json!({"offsets": [{"partition": {"kafka_topic": run.scenario.topic, "kafka_partition": 0}, "offset": {"kafka_offset": middle}}]});
    let (code, body) = send(
        port,
        Method::PATCH,
        &format!("/connectors/{name}/offsets"),
        Some(patch),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["forgotten"]["dedup_ids"], end - middle, "{body}");
    control(port, &name, "resume", "RUNNING").await;
    harness::assert_exactly(run.wait_for_rows(1000, 120).await, 1000);
    // Settled: nothing more arrives (a replay of more than the PATCH asked would add rows).
    tokio::time::sleep(Duration::from_secs(3)).await;
    harness::assert_exactly(run.stats().await, 1000);
    sink.close().await;
    assert!(sluice.terminate().success());
}

async fn a_reset_replays_exactly_once(kind: Backend) {
    a_reset_replays(kind, "exactly_once").await
}
for_each_database!(a_reset_replays_exactly_once);

async fn a_reset_replays_at_least_once(kind: Backend) {
    a_reset_replays(kind, "at_least_once").await
}
for_each_database!(a_reset_replays_at_least_once: postgres = Postgres);

/// `sluice offsets reset` refuses while the connector runs (its heartbeats and the Kafka
/// group say so), exactly as the API does, and resets once it runs nowhere.
async fn the_cli_reset_refuses_while_the_connector_runs(kind: Backend) {
    let port = free_port();
    let run = Pipeline::new(kind, scenario(port, "exactly_once"), PARTITIONS).await;
    run.produce(0..200).await;
    let sluice = run.start();
    harness::assert_exactly(run.wait_for_rows(200, 120).await, 200);
    let reset = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["offsets", "reset", "--config"])
            .arg(&run.config)
            .args(["--connector", &run.scenario.connector])
            .output()
            .expect("sluice offsets reset")
    };
    let refused = reset();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("still runs"), "{stderr}");
    let sink = sink_of(&run).await;
    assert_eq!(
        sink.control()
            .read_offsets(&run.scenario.topic)
            .await
            .expect("offsets")
            .values()
            .sum::<i64>(),
        200,
        "a refused reset changed the offsets"
    );
    assert!(sluice.terminate().success());
    // The group empties once the process has left it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let out = reset();
        if out.status.success() {
            break out;
        }
        assert!(
            Instant::now() < deadline,
            "never reset: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let stdout = String::from_utf8_lossy(&done.stdout);
    assert!(stdout.contains("200 producer id(s)"), "{stdout}");
    assert!(
        sink.control()
            .read_offsets(&run.scenario.topic)
            .await
            .expect("offsets")
            .is_empty()
    );
    sink.close().await;
}
for_each_database!(the_cli_reset_refuses_while_the_connector_runs: mariadb = MariaDb);

/// A batch that writes a record's row removes the record's dead letter from the
/// dead-letter table in the same transaction (a replay after a reset must not leave both),
/// and leaves the letters of records it does not write.
async fn a_written_row_removes_its_dead_letter(kind: Backend) {
    use sluice::failure::{DeadLetter, Failure, FailureClass, Stage};
    use sluice::record::Record;

    let db = TestDb::new(kind);
    let mut scenario = Scenario::new(1);
    let letters_table = harness::unique("letters");
    scenario.extra_connector =
        format!("    errors: {{ policy: dlq, dlq: {{ table: {letters_table} }} }}");
    let config = scenario.config("unused:9092", &db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    sink.prepare().await.expect("prepare");
    let letter = |offset: i64| {
        let record = Record::from_value(&scenario.topic, 0, offset, "{}");
        let failure = Failure {
            index: 0,
            topic: scenario.topic.clone(),
            partition: 0,
            offset,
            stage: Stage::Sink,
            class: FailureClass::DatabaseRefused,
            message: "refused".into(),
        };
        DeadLetter::new(record, &failure)
    };
    // First pass: records 3 and 7 failed and became dead letters.
    let first = WriteBatch {
        dead_letters: vec![letter(3), letter(7)],
        offsets: vec![OffsetAdvance {
            topic: scenario.topic.clone(),
            partition: 0,
            expected: None,
            next: 10,
        }],
        ..WriteBatch::default()
    };
    sink.write(&first).await.expect("first pass");
    assert_eq!(sink.count_dead_letters().await.expect("count"), 2);
    // The replay writes records 2..=4 (3 among them) and 8; 7 lies between them and is
    // not written (filtered, say): its letter stays.
    let written = [2i64, 3, 4, 8];
    let replay = WriteBatch {
        ops: written
            .iter()
            .map(|&uid| harness::scenario_row(uid))
            .collect(),
        origins: (0..written.len()).collect(),
        supersedes: written
            .iter()
            .enumerate()
            .map(|(input, &offset)| (scenario.topic.clone(), 0, offset, input))
            .collect(),
        // (The offsets' compare-and-set goes on from the first pass's; what it stores is
        // not what this test is about.)
        offsets: vec![OffsetAdvance {
            topic: scenario.topic.clone(),
            partition: 0,
            expected: Some(10),
            next: 11,
        }],
        ..WriteBatch::default()
    };
    let written = sink.write_timed(&replay).await.expect("replay");
    assert_eq!(written.superseded_letters, 1);
    let left: Vec<i64> = harness::all_dead_letters(&sink)
        .await
        .iter()
        .map(|l| l.offset)
        .collect();
    assert_eq!(left, vec![7]);
    sink.close().await;
}
for_each_database!(a_written_row_removes_its_dead_letter);
