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
    let plugin = sluice_transform::example_plugin_path("hostile");
    with_plugin_limited(config, name, &plugin, plugin_config, limits);
}

/// [`with_hostile_limited`] with any plugin's component.
fn with_plugin_limited(
    config: &Path,
    name: &str,
    plugin: &Path,
    plugin_config: &str,
    limits: Option<&str>,
) {
    let limits = limits
        .map(|l| format!("        limits: {l}\n"))
        .unwrap_or_default();
    let transform = format!(
        "    transforms:\n      - name: {name}\n        plugin: {}\n        config: {plugin_config}\n{limits}",
        plugin.display()
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
for_each_database!(skip_passes_over_the_poisoned: mariadb = MariaDb);

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
for_each_database!(fail_stops_at_the_first_poisoned_record: postgres = Postgres);

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
for_each_database!(header_name_not_utf8_fails_alone: sqlite = Sqlite);

mod isolation;
mod probe;
