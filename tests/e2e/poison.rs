//! Poisoned records end to end: 1 % of each kind spread through the stream, against a real
//! broker and each database, under each error policy.
//!
//! The kinds, by `uid % 100`:
//!
//! | uid % 100 | value                          | fails at                                  |
//! |-----------|--------------------------------|-------------------------------------------|
//! | 7         | a JSON array                   | transform: `mask` rejects a non-object    |
//! | 17        | `TRAP`                         | transform: `hostile` traps on it          |
//! | 27        | `word` is a number             | validate: the connector's JSON Schema     |
//! | 37        | `uid` is `"abc"`               | map: not a bigint                         |
//! | 47        | `word` of 30 characters        | sink: the table's CHECK (length ≤ 20)     |
//! | 57        | a value of 3,000 bytes         | source: over `max_record_bytes` (2KiB)    |

use crate::harness;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::{Backend, Broker, TestDb, unique};
use sluice::cli::demo::{SequenceStats, sequence_stats};
use sluice::config::{self, Config};
use sluice::sink::Sink;

const KINDS: [u64; 6] = [7, 17, 27, 37, 47, 57];

fn value(uid: u64) -> String {
    match uid % 100 {
        7 => format!("[{uid}, \"array\"]"),
        17 => "TRAP".to_string(),
        27 => format!("{{\"uid\":{uid},\"word\":{uid}}}"),
        37 => "{\"uid\":\"abc\",\"word\":\"w\"}".to_string(),
        47 => format!("{{\"uid\":{uid},\"word\":\"{}\"}}", "x".repeat(30)),
        57 => format!(
            "{{\"uid\":{uid},\"word\":\"w\",\"pad\":\"{}\"}}",
            "p".repeat(3000)
        ),
        _ => format!(
            "{{\"uid\":{uid},\"word\":\"w{}\",\"secret\":\"s{uid}\"}}",
            uid % 97
        ),
    }
}

fn is_poison(uid: u64) -> bool {
    KINDS.contains(&(uid % 100))
}

/// One poisoned run: its broker, database, table (created here, with a CHECK) and config.
struct PoisonRun {
    broker: Broker,
    db: TestDb,
    topic: String,
    table: String,
    dir: tempfile::TempDir,
}

impl PoisonRun {
    async fn new(db: Backend, partitions: i32) -> PoisonRun {
        let broker = Broker::start();
        let db = TestDb::new(db);
        let topic = unique("poison");
        broker.create_topic(&topic, partitions).await;
        let run = PoisonRun {
            broker,
            db,
            topic,
            table: unique("poison"),
            dir: tempfile::tempdir().expect("temp dir"),
        };
        run.create_table().await;
        run
    }

    /// The sink table, with a CHECK the 30-character words break (sluice's own
    /// `create_table` makes no constraints beyond the key).
    async fn create_table(&self) {
        let ddl = format!(
            "CREATE TABLE {} (uid BIGINT NOT NULL PRIMARY KEY, word VARCHAR(100) CHECK (length(word) <= 20), secret TEXT)",
            self.table
        );
        match self.db.kind {
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&self.db.url).await.expect("connect");
                sqlx::query(sqlx::AssertSqlSafe(ddl))
                    .execute(&pool)
                    .await
                    .expect("create");
                pool.close().await;
            }
            Backend::MariaDb => {
                let pool = sqlx::MySqlPool::connect(&self.db.url)
                    .await
                    .expect("connect");
                sqlx::query(sqlx::AssertSqlSafe(ddl))
                    .execute(&pool)
                    .await
                    .expect("create");
                pool.close().await;
            }
            Backend::Sqlite => {
                let options = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(self.db.url.trim_start_matches("sqlite://"))
                    .create_if_missing(true);
                let pool = sqlx::SqlitePool::connect_with(options)
                    .await
                    .expect("connect");
                sqlx::query(sqlx::AssertSqlSafe(ddl))
                    .execute(&pool)
                    .await
                    .expect("create");
                pool.close().await;
            }
        }
    }

    /// A connectors.yaml; `transforms`, `schema` and `max_record_bytes` can be left out
    /// (what a fixed configuration for a redrive looks like).
    fn config(&self, name: &str, errors: &str, strict: bool, extra_kafka: &str) -> PathBuf {
        let schema = self.dir.path().join("word.schema.json");
        std::fs::write(
            &schema,
            r#"{"type":"object","required":["uid"],"properties":{"word":{"type":"string"}}}"#,
        )
        .expect("write schema");
        let pipeline = if strict {
            format!(
                r#"    max_record_bytes: 2KiB
    schema: {}
    transforms:
      - name: trap
        plugin: {}
        config: {{ mode: panic, on: TRAP }}
      - name: mask
        plugin: {}
        config: {{ fields: secret }}
"#,
                schema.display(),
                sluice_transform::example_plugin_path("hostile").display(),
                sluice_transform::example_plugin_path("mask").display(),
            )
        } else {
            String::new()
        };
        let yaml = format!(
            r#"kafka:
  brokers: "{brokers}"
  properties:
    session.timeout.ms: 6000
    heartbeat.interval.ms: 500
{extra_kafka}
connectors:
  - name: {name}
    topics: [{topic}]
    group: {group}
    tasks: 2
    batch: {{ max_records: 500, linger: 20ms }}
{pipeline}    sink:
      url: "{url}"
      table: {table}
      mode: upsert
      key: [uid]
      columns:
        uid: {{ from: /uid, type: bigint }}
        word: {{ from: /word, type: text }}
        secret: {{ from: /secret, type: text }}
    errors: {errors}
"#,
            brokers = self.broker.bootstrap,
            topic = self.topic,
            group = unique("group"),
            url = self.db.url,
            table = self.table,
        );
        let path = self.dir.path().join(format!("{}.yaml", unique("poison")));
        std::fs::write(&path, yaml).expect("write config");
        path
    }

    async fn sink(&self, config: &Path) -> Sink {
        let config: Config = config::load_file(config).expect("valid config");
        let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
        sink.prepare().await.expect("prepare");
        sink
    }

    async fn stats(&self, config: &Path) -> (SequenceStats, i64) {
        let sink = self.sink(config).await;
        let stats = sequence_stats(&sink, "uid").await.expect("stats");
        let dead = sink.count_dead_letters().await.expect("count dead letters");
        sink.close().await;
        (stats, dead)
    }

    /// Waits until `rows` rows and `dead` dead letters (at most `seconds`).
    async fn wait_for(
        &self,
        config: &Path,
        rows: i64,
        dead: i64,
        seconds: u64,
    ) -> (SequenceStats, i64) {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            let seen = self.stats(config).await;
            if (seen.0.rows >= rows && seen.1 >= dead) || Instant::now() > deadline {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// A `FAULT-SUMMARY` line for a poisoned run: ids are not dense here (the poisoned uids
/// are missing by design), so `gaps` counts those.
fn summary(
    scenario: &str,
    run: &PoisonRun,
    produced: u64,
    stats: &SequenceStats,
    dead: i64,
) -> String {
    format!(
        "FAULT-SUMMARY scenario={scenario} db={} produced={produced} poisoned={} rows={} duplicates={} gaps={} dead_letters={dead}",
        run.db.name(),
        poison_count(produced),
        stats.rows,
        stats.duplicates(),
        stats.gaps(),
    )
}

/// Gives the connector of `config` (written by [`PoisonRun::config`] without transforms)
/// one transform: the `hostile` plugin with `plugin_config`.
fn with_hostile(config: &Path, name: &str, plugin_config: &str) {
    with_hostile_limited(config, name, plugin_config, None);
}

/// [`with_hostile`] with the transform's `limits` (a YAML flow mapping).
fn with_hostile_limited(config: &Path, name: &str, plugin_config: &str, limits: Option<&str>) {
    let limits = limits
        .map(|l| format!("        limits: {l}\n"))
        .unwrap_or_default();
    let transform = format!(
        "    transforms:\n      - name: {name}\n        plugin: {}\n        config: {plugin_config}\n{limits}",
        sluice_transform::example_plugin_path("hostile").display()
    );
    let text = std::fs::read_to_string(config).expect("config");
    assert!(
        !text.contains("transforms:"),
        "{name}: the config has transforms already"
    );
    std::fs::write(
        config,
        text.replace("    sink:\n", &format!("{transform}    sink:\n")),
    )
    .expect("config");
}

/// Runs `sluice run` on `config` until it exits by itself: its exit code and stderr.
fn run_to_exit(config: &Path) -> (Option<i32>, String) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--config"])
        .arg(config)
        .output()
        .expect("run sluice");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn poison_count(n: u64) -> i64 {
    (0..n).filter(|&u| is_poison(u)).count() as i64
}

/// `dlq` with a table: every good record lands once, every poisoned one is a dead letter
/// exactly once, with its stage. Then a redrive with a fixed configuration (no schema, no
/// size limit) brings back what now passes and keeps the rest.
async fn dead_letter_table_holds_exactly_the_poisoned(db: Backend) {
    const N: u64 = 3000;
    let poisoned = poison_count(N);
    let run = PoisonRun::new(db, 4).await;
    let name = unique("conn");
    let dlq = unique("dead");
    let errors = format!("{{ policy: dlq, dlq: {{ table: {dlq} }} }}");
    let config = run.config(&name, &errors, true, "");
    run.broker.produce_with(&run.topic, 0..N, value).await;
    let sluice = harness::SluiceProcess::start(&config);
    let (stats, dead) = run
        .wait_for(&config, N as i64 - poisoned, poisoned, 120)
        .await;
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
    harness::record_summary(&summary("poison_dlq_table", &run, N, &stats, dead));
    assert_eq!(stats.rows, N as i64 - poisoned, "{stats:?}");
    assert_eq!(stats.duplicates(), 0, "{stats:?}");
    assert_eq!(dead, poisoned, "dead letters");

    // Each poisoned record once, with the stage it failed at.
    let sink = run.sink(&config).await;
    let letters = harness::all_dead_letters(&sink).await;
    sink.close().await;
    let mut uids: Vec<u64> = letters
        .iter()
        .map(|l| {
            let key = l.key.as_deref().expect("the original key is kept");
            std::str::from_utf8(key)
                .expect("utf-8 key")
                .parse()
                .expect("uid key")
        })
        .collect();
    uids.sort();
    let expected: Vec<u64> = (0..N).filter(|&u| is_poison(u)).collect();
    assert_eq!(uids, expected);
    for letter in &letters {
        let uid: u64 = std::str::from_utf8(letter.key.as_deref().unwrap_or_default())
            .unwrap_or_default()
            .parse()
            .unwrap_or_default();
        assert_eq!(
            letter.value.as_deref(),
            Some(value(uid).as_bytes()),
            "dead letter of uid {uid} keeps the original value"
        );
    }

    // Redrive with the schema and the size limit gone: the schema-invalid (27) and the
    // too-large (57) records now pass; the others still fail and stay.
    let fixed = run.config(&name, &errors, false, "");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["dlq", "redrive", "--connector", &name, "--config"])
        .arg(&fixed)
        .output()
        .expect("run sluice dlq redrive");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let back = (0..N).filter(|u| [27, 57].contains(&(u % 100))).count() as i64;
    assert!(
        stdout.contains(&format!("{poisoned} dead letter(s) read, {back} redriven")),
        "{stdout}"
    );
    let (stats, dead) = run.stats(&fixed).await;
    assert_eq!(stats.rows, N as i64 - poisoned + back, "{stats:?}");
    assert_eq!(stats.duplicates(), 0);
    assert_eq!(dead, poisoned - back);
}
for_each_database!(dead_letter_table_holds_exactly_the_poisoned);

/// `skip`: every good record lands once, the poisoned ones are passed over (and logged).
async fn skip_passes_over_the_poisoned(db: Backend) {
    const N: u64 = 2000;
    let poisoned = poison_count(N);
    let run = PoisonRun::new(db, 4).await;
    let config = run.config(&unique("conn"), "{ policy: skip }", true, "");
    run.broker.produce_with(&run.topic, 0..N, value).await;
    let sluice = harness::SluiceProcess::start(&config);
    let (stats, _) = run.wait_for(&config, N as i64 - poisoned, 0, 120).await;
    // Nothing more comes, and the process is healthy.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
    let (after, _) = run.stats(&config).await;
    harness::record_summary(&summary("poison_skip", &run, N, &after, 0));
    assert_eq!(stats.rows, N as i64 - poisoned, "{stats:?}");
    assert_eq!(after.rows, stats.rows);
    assert_eq!(after.duplicates(), 0);
}
for_each_database!(skip_passes_over_the_poisoned);

/// `fail`: on one partition, the records before the first poisoned one (uid 7) commit,
/// the process exits 1 naming its coordinates and cause, and a restart stops there again.
async fn fail_stops_at_the_first_poisoned_record(db: Backend) {
    let run = PoisonRun::new(db, 1).await;
    let config = run.config(&unique("conn"), "{ policy: fail }", true, "");
    run.broker.produce_with(&run.topic, 0..300, value).await;
    for attempt in 0..2 {
        let (code, stderr) = run_to_exit(&config);
        assert_eq!(code, Some(1), "attempt {attempt}: {stderr}");
        assert!(
            stderr.contains(&format!("{}/0@7", run.topic)) && stderr.contains("transform mask"),
            "attempt {attempt}: {stderr}"
        );
        let (stats, _) = run.stats(&config).await;
        harness::record_summary(&format!(
            "{} exit={:?} attempt={attempt}",
            summary("poison_fail", &run, 300, &stats, 0),
            code
        ));
        assert_eq!(stats.rows, 7, "attempt {attempt}: {stats:?}");
        assert_eq!((stats.min, stats.max), (Some(0), Some(6)));
    }
}
for_each_database!(fail_stops_at_the_first_poisoned_record);

/// `dlq` with a topic: the dead letters are on the topic, with the original value and the
/// context headers, before the offsets commit.
async fn dead_letter_topic_gets_each_poisoned_record_with_context(db: Backend) {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    const N: u64 = 1000;
    let poisoned = poison_count(N);
    let run = PoisonRun::new(db, 2).await;
    let dlq = unique("dead");
    run.broker.create_topic(&dlq, 1).await;
    // One record per produce request: Tansu 0.6.0 skips records inside a fetched batch.
    let config = run.config(
        &unique("conn"),
        &format!("{{ policy: dlq, dlq: {{ topic: {dlq} }} }}"),
        true,
        "    batch.num.messages: 1",
    );
    run.broker.produce_with(&run.topic, 0..N, value).await;
    let sluice = harness::SluiceProcess::start(&config);
    let (stats, _) = run.wait_for(&config, N as i64 - poisoned, 0, 120).await;
    assert!(sluice.terminate().success());
    assert_eq!(stats.rows, N as i64 - poisoned, "{stats:?}");

    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &run.broker.bootstrap)
        .set("group.id", unique("reader"))
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[&dlq]).expect("subscribe");
    let mut seen = std::collections::BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (seen.len() as i64) < poisoned && Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message.expect("dead letter");
        let uid: u64 = std::str::from_utf8(message.key().expect("key"))
            .expect("utf-8")
            .parse()
            .expect("uid");
        let mut headers = std::collections::HashMap::new();
        if let Some(h) = message.headers() {
            for header in h.iter() {
                headers.insert(
                    header.key.to_string(),
                    String::from_utf8_lossy(header.value.unwrap_or_default()).into_owned(),
                );
            }
        }
        assert_eq!(message.payload(), Some(value(uid).as_bytes()));
        assert_eq!(headers.get("sluice.source.topic"), Some(&run.topic));
        for name in [
            "sluice.source.partition",
            "sluice.source.offset",
            "sluice.connector",
            "sluice.stage",
            "sluice.error.class",
            "sluice.error.message",
        ] {
            assert!(headers.contains_key(name), "{name} missing: {headers:?}");
        }
        seen.insert(uid, headers["sluice.stage"].clone());
    }
    let expected: Vec<u64> = (0..N).filter(|&u| is_poison(u)).collect();
    harness::record_summary(&summary(
        "poison_dlq_topic",
        &run,
        N,
        &stats,
        seen.len() as i64,
    ));
    assert_eq!(seen.keys().copied().collect::<Vec<_>>(), expected);
    let stage = |kind: u64| seen[&kind].as_str();
    assert_eq!(
        [
            stage(7),
            stage(17),
            stage(27),
            stage(37),
            stage(47),
            stage(57)
        ],
        [
            "transform",
            "transform",
            "validate",
            "map",
            "sink",
            "source"
        ]
    );
}
for_each_database!(dead_letter_topic_gets_each_poisoned_record_with_context: postgres = Postgres);

/// Headers whose name is the bytes `name`, which need not be UTF-8 (rdkafka's safe API
/// takes `&str`; a producer in another language can send any bytes).
fn raw_headers(name: &[u8], value: &[u8]) -> rdkafka::message::OwnedHeaders {
    use rdkafka::bindings as rd;
    // SAFETY: a fresh header list; the name and value are copied by librdkafka.
    unsafe {
        let list = rd::rd_kafka_headers_new(1);
        let error = rd::rd_kafka_header_add(
            list,
            name.as_ptr().cast(),
            name.len() as isize,
            value.as_ptr().cast(),
            value.len() as isize,
        );
        assert_eq!(
            error,
            rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR
        );
        // `OwnedHeaders` is a non-null pointer to librdkafka's list and owns it: it frees
        // the list when dropped (or hands it to the produced message).
        std::mem::transmute::<*mut rd::rd_kafka_headers_t, rdkafka::message::OwnedHeaders>(list)
    }
}

/// A header name that is not UTF-8 fails its record alone (rdkafka's own header accessor
/// panics on one: the consumer thread used to die on such a record).
async fn header_name_not_utf8_fails_alone(db: Backend) {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let run = PoisonRun::new(db, 1).await;
    let dlq = unique("dead");
    let config = run.config(
        &unique("conn"),
        &format!("{{ policy: dlq, dlq: {{ table: {dlq} }} }}"),
        false,
        "",
    );
    let producer: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &run.broker.bootstrap)
        .set("batch.num.messages", "1")
        .create()
        .expect("producer");
    for uid in 0..5u64 {
        let key = uid.to_string();
        let value = format!("{{\"uid\":{uid},\"word\":\"w\"}}");
        let mut record = FutureRecord::to(&run.topic).key(&key).payload(&value);
        if uid == 2 {
            record = record.headers(raw_headers(b"bad\xff\xfename", b"v"));
        }
        producer
            .send(record, Duration::from_secs(30))
            .await
            .expect("delivered");
    }
    let sluice = harness::SluiceProcess::start(&config);
    let (stats, dead) = run.wait_for(&config, 4, 1, 60).await;
    assert!(sluice.terminate().success());
    assert_eq!((stats.rows, dead), (4, 1), "{stats:?}");
    let sink = run.sink(&config).await;
    let letters = harness::all_dead_letters(&sink).await;
    sink.close().await;
    assert_eq!(letters[0].offset, 2);
    assert!(
        letters[0].headers.contains("bad\u{fffd}\u{fffd}name"),
        "{:?}",
        letters[0]
    );
}
for_each_database!(header_name_not_utf8_fails_alone);

/// A transform that makes two rows of every record: when the database refuses a record's
/// rows, the record is one dead letter, not two (two dead letters with one key would make
/// PostgreSQL refuse the whole batch).
async fn refused_record_with_two_rows_is_one_dead_letter(db: Backend) {
    const N: u64 = 300;
    let run = PoisonRun::new(db, 2).await;
    let dlq = unique("dead");
    let config = run.config(
        &unique("conn"),
        &format!("{{ policy: dlq, dlq: {{ table: {dlq} }} }}"),
        false,
        "",
    );
    with_hostile(&config, "twice", "{ mode: flood, count: \"2\" }");
    // Only the database refuses anything here: 30-character words.
    let refused = (0..N).filter(|u| u % 100 == 47).count() as i64;
    run.broker
        .produce_with(&run.topic, 0..N, |uid| {
            if uid % 100 == 47 {
                value(uid)
            } else {
                format!("{{\"uid\":{uid},\"word\":\"w\"}}")
            }
        })
        .await;
    let sluice = harness::SluiceProcess::start(&config);
    let (stats, dead) = run.wait_for(&config, N as i64 - refused, refused, 90).await;
    assert!(sluice.terminate().success());
    assert_eq!(
        (stats.rows, dead),
        (N as i64 - refused, refused),
        "{stats:?}"
    );
    assert_eq!(stats.duplicates(), 0);
}
for_each_database!(refused_record_with_two_rows_is_one_dead_letter);

/// A plugin that fails on every record cannot be isolated record by record: the task fails
/// instead of skipping good records.
async fn plugin_failing_everything_fails_the_task_even_under_skip(db: Backend) {
    let run = PoisonRun::new(db, 1).await;
    let config = run.config(&unique("conn"), "{ policy: skip }", false, "");
    with_hostile(&config, "broken", "{ mode: panic }");
    run.broker
        .produce_with(&run.topic, 0..2000, |uid| {
            format!("{{\"uid\":{uid},\"word\":\"w\"}}")
        })
        .await;
    let (code, stderr) = run_to_exit(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("could not be told apart"), "{stderr}");
    let (stats, _) = run.stats(&config).await;
    assert_eq!(stats.rows, 0, "{stats:?}");
}
for_each_database!(plugin_failing_everything_fails_the_task_even_under_skip: sqlite = Sqlite);

fn row(uid: i64, word: &str, secret: &str) -> sluice::map::RowOp {
    use sluice::map::{RowOp, SqlValue};
    RowOp::Write(vec![
        SqlValue::Int(uid),
        SqlValue::Text(word.to_string()),
        SqlValue::Text(secret.to_string()),
    ])
}

/// The probe finds exactly the rows the database refuses, under savepoints, and keeps
/// nothing.
async fn refused_rows_are_found_and_nothing_is_kept(db: Backend) {
    let run = PoisonRun::new(db, 1).await;
    let config = run.config(&unique("conn"), "{ policy: skip }", false, "");
    let sink = run.sink(&config).await;
    let long = "x".repeat(30);
    let ops = vec![
        row(1, "a", "s1"),
        row(2, &long, "s2"),
        row(3, "b", "s3"),
        row(4, &long, "s4"),
        row(5, "c", "s5"),
    ];
    let refused = sink
        .find_refused(&ops, &Default::default())
        .await
        .expect("probe");
    let indices: Vec<usize> = refused.iter().map(|(i, _)| *i).collect();
    assert_eq!(indices, vec![1, 3], "{refused:?}");
    assert!(refused.iter().all(|(_, message)| !message.is_empty()));
    assert_eq!(sequence_stats(&sink, "uid").await.expect("stats").rows, 0);
    sink.close().await;
}
for_each_database!(refused_rows_are_found_and_nothing_is_kept);

/// A deferred constraint fails only at COMMIT, which the probe never runs: it checks
/// constraints immediately, so the refused row is still found.
async fn deferred_constraints_are_checked_by_the_probe(db: Backend) {
    let run = PoisonRun::new(db, 1).await;
    let pool = sqlx::PgPool::connect(&run.db.url).await.expect("connect");
    let ddl = format!(
        "ALTER TABLE {} ADD CONSTRAINT {}_secret UNIQUE (secret) DEFERRABLE INITIALLY DEFERRED",
        run.table, run.table
    );
    sqlx::query(sqlx::AssertSqlSafe(ddl))
        .execute(&pool)
        .await
        .expect("alter");
    pool.close().await;
    let config = run.config(&unique("conn"), "{ policy: skip }", false, "");
    let sink = run.sink(&config).await;
    let ops = vec![
        row(1, "a", "same"),
        row(2, "b", "other"),
        row(3, "c", "same"),
    ];
    let refused = sink
        .find_refused(&ops, &Default::default())
        .await
        .expect("probe");
    assert_eq!(
        refused.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        vec![2],
        "{refused:?}"
    );
    sink.close().await;
}
for_each_database!(deferred_constraints_are_checked_by_the_probe: postgres = Postgres);

/// A plugin that spins on 2 % of the records, with a deadline that makes the isolation of
/// one batch last longer than the consumer's `max.poll.interval.ms`: transforms run off the
/// polling thread, so the consumer stays in its group; each spinning record costs one
/// deadline and becomes a dead letter, and every other record lands once.
async fn spinning_records_are_dead_letters_and_the_consumer_stays(db: Backend) {
    const N: u64 = 1000;
    let spins = |uid: u64| uid % 50 == 37;
    let run = PoisonRun::new(db, 1).await;
    let dlq = unique("dead");
    let errors = format!("{{ policy: dlq, dlq: {{ table: {dlq} }} }}");
    let config = run.config(
        &unique("conn"),
        &errors,
        false,
        "    max.poll.interval.ms: 6000\n",
    );
    with_hostile_limited(
        &config,
        "spin",
        "{ mode: loop, on: SPIN }",
        Some("{ timeout: 1s }"),
    );
    run.broker
        .produce_with(&run.topic, 0..N, |uid| {
            if spins(uid) {
                "SPIN".to_string()
            } else {
                format!("{{\"uid\":{uid},\"word\":\"w\"}}")
            }
        })
        .await;
    let spinning = (0..N).filter(|&u| spins(u)).count() as i64;
    let started = Instant::now();
    let sluice = harness::SluiceProcess::start(&config);
    let (stats, dead) = run
        .wait_for(&config, N as i64 - spinning, spinning, 180)
        .await;
    let elapsed = started.elapsed();
    let log_path = sluice.log.clone();
    let status = sluice.terminate();
    println!(
        "SPIN-E2E db={} records={N} spinning={spinning} deadline=1s drained in {elapsed:?}",
        run.db.name()
    );
    assert!(status.success(), "sluice exited with {status}");
    assert_eq!(stats.rows, N as i64 - spinning, "{stats:?}");
    assert_eq!(stats.duplicates(), 0, "{stats:?}");
    assert_eq!(dead, spinning, "one dead letter per spinning record");
    let log = std::fs::read_to_string(&log_path).expect("sluice log");
    assert!(
        !log.contains("maximum poll interval"),
        "the consumer was thrown out of its group: {}",
        log_path.display()
    );
}
for_each_database!(spinning_records_are_dead_letters_and_the_consumer_stays: postgres = Postgres, sqlite = Sqlite);

/// A search for failing records that runs out of its budget (`errors.isolation`): under
/// `dlq`, the records it did not reach are dead letters of class `transform_not_isolated`
/// (nothing lost, nothing dropped); under `fail`, the task fails saying why.
async fn records_not_isolated_are_dead_letters_under_dlq(db: Backend) {
    const N: u64 = 500;
    let run = PoisonRun::new(db, 1).await;
    let dlq = unique("dead");
    let errors =
        format!("{{ policy: dlq, dlq: {{ table: {dlq} }}, isolation: {{ max_failed_calls: 2 }} }}");
    let config = run.config(&unique("conn"), &errors, false, "");
    with_hostile(&config, "trap", "{ mode: panic, on: TRAP }");
    let value = |uid: u64| {
        if uid % 100 == 17 {
            "TRAP".to_string()
        } else {
            format!("{{\"uid\":{uid},\"word\":\"w\"}}")
        }
    };
    run.broker.produce_with(&run.topic, 0..N, value).await;
    let sluice = harness::SluiceProcess::start(&config);
    let deadline = Instant::now() + Duration::from_secs(120);
    let (stats, dead) = loop {
        let (stats, dead) = run.stats(&config).await;
        if stats.rows + dead >= N as i64 || Instant::now() > deadline {
            break (stats, dead);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
    assert_eq!(
        stats.rows + dead,
        N as i64,
        "every record is a row or a dead letter"
    );
    assert_eq!(stats.duplicates(), 0, "{stats:?}");
    assert_eq!(
        db,
        Backend::Sqlite,
        "the classes are read with SQLite's driver"
    );
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(run.db.url.trim_start_matches("sqlite://"));
    let pool = sqlx::SqlitePool::connect_with(options)
        .await
        .expect("connect");
    let classes: Vec<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT error_class, COUNT(*) FROM {dlq} GROUP BY error_class ORDER BY error_class"
    )))
    .fetch_all(&pool)
    .await
    .expect("dead-letter classes");
    pool.close().await;
    assert!(
        classes.iter().any(|(c, _)| c == "transform_not_isolated"),
        "{classes:?}"
    );
    assert!(
        classes
            .iter()
            .all(|(c, _)| c == "transform" || c == "transform_not_isolated"),
        "{classes:?}"
    );

    // The same under `fail`: the task fails, naming the budget.
    let run = PoisonRun::new(db, 1).await;
    let config = run.config(
        &unique("conn"),
        "{ policy: fail, isolation: { max_failed_calls: 2 } }",
        false,
        "",
    );
    with_hostile(&config, "trap", "{ mode: panic, on: TRAP }");
    run.broker.produce_with(&run.topic, 0..N, value).await;
    let (code, stderr) = run_to_exit(&config);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("errors.isolation"), "{stderr}");
}
for_each_database!(records_not_isolated_are_dead_letters_under_dlq: sqlite = Sqlite);

/// A plugin whose `init` starts to spin when it is instantiated again (after a trap) is not
/// a record's fault: the batch waits and is tried again with `errors.retry`, nothing is
/// dead-lettered or skipped for it, and past `max_elapsed` the task fails naming `init`
/// (a transient failure: it waits for its restart, `errors.restart`).
async fn a_chain_that_cannot_restart_is_retried_not_blamed_on_records(db: Backend) {
    let run = PoisonRun::new(db, 1).await;
    let dlq = unique("dead");
    let errors = format!(
        "{{ policy: dlq, dlq: {{ table: {dlq} }}, retry: {{ initial: 100ms, max: 500ms, max_elapsed: 3s }}, restart: {{ initial: 10m, max: 10m }} }}"
    );
    let config = run.config(&unique("conn"), &errors, false, "");
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis()
    };
    // `init` runs in time when the task starts, and spins once this moment has passed.
    let after = now_ms() + 8000;
    with_hostile_limited(
        &config,
        "flaky",
        &format!("{{ mode: init-loop-after, after: \"{after}\", on: TRAP }}"),
        Some("{ timeout: 300ms }"),
    );
    let good = |uid: u64| format!("{{\"uid\":{uid},\"word\":\"w\"}}");
    run.broker.produce_with(&run.topic, 0..100, good).await;
    let sluice = harness::SluiceProcess::start(&config);
    let (stats, _) = run.wait_for(&config, 100, 0, 60).await;
    assert_eq!(stats.rows, 100, "{stats:?}");
    while now_ms() < after + 500 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A trap makes the chain start a fresh instance, whose `init` now spins.
    run.broker
        .produce_with(&run.topic, 100..110, |uid| {
            if uid == 100 {
                "TRAP".to_string()
            } else {
                good(uid)
            }
        })
        .await;
    // Past `max_elapsed` the task fails, for a transient reason: it waits for its restart
    // (errors.restart, ten minutes here) while the process stays up; a stop then exits 1.
    let log_path = sluice.log.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(&log_path)
        .unwrap_or_default()
        .contains("task failed for a transient reason")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the task does not fail: {}",
            log_path.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let status = sluice.terminate();
    assert_eq!(status.code(), Some(1), "a stop after a failure exits 1");
    let log = std::fs::read_to_string(&log_path).expect("sluice log");
    assert!(
        log.contains("the transform chain cannot run"),
        "{}",
        log_path.display()
    );
    assert!(
        log.contains("CPU deadline") && log.contains("in init"),
        "{}",
        log_path.display()
    );
    let (stats, dead) = run.stats(&config).await;
    assert_eq!(
        stats.rows, 100,
        "nothing of the batch was written: {stats:?}"
    );
    assert_eq!(dead, 0, "no record is blamed for the chain");
}
for_each_database!(a_chain_that_cannot_restart_is_retried_not_blamed_on_records: sqlite = Sqlite);
