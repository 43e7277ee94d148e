//! `sluice dlq redrive` for a dead-letter topic, against each database: dead letters read
//! through the seek-consumer pool and written through the connector once each, however
//! often the redrive runs, even two at once; a second dead letter of one record, records
//! that still fail (they stay, and the command says why), and messages that are not
//! sluice's dead letters. The connector signs its letters (`errors.dlq.signing_key`), so
//! letters of records that were never in the source topic redrive; the checks against
//! forgeries have their own suite, [`crate::dlq_forgery`].
//!
//! The tables have no key (`mode: insert`): a record written twice would be two rows. The
//! broker runs on Tansu's SQLite storage (see the test body).

use std::process::Command;

use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use sluice::cli::demo::sequence_stats;
use sluice::failure::{DeadLetter, Failure, FailureClass, Stage};
use sluice::kafka::dead_letter_producer::DeadLetterProducer;
use sluice::record::Record;
use sluice::sink::Sink;

use crate::harness::{self, Backend, Broker, Scenario, TestDb, word_event};

/// A signing key of the suites' connectors.
pub(crate) const SIGNING_KEY: &str = "dlq-suite-signing-key-0123456789";

/// Dead letters of `connector` for the records `uids` of `source` (at offset = uid), each
/// with `value`, produced to `dlq`, signed with the connector's `errors.dlq.signing_key`
/// when it has one.
pub(crate) async fn dead_letters(
    broker: &Broker,
    scenario: &Scenario,
    dlq: &str,
    uids: impl Iterator<Item = u64>,
    value: impl Fn(u64) -> String,
) {
    let config = scenario.config(&broker.bootstrap, &TestDb::new(Backend::Sqlite));
    let producer =
        DeadLetterProducer::new(&config.kafka, &broker.bootstrap, dlq, &scenario.connector)
            .expect("dead-letter producer")
            .with_signing_key(&config.connectors[0].errors.dlq_signing_key);
    let mut letters: Vec<DeadLetter> = uids
        .map(|uid| {
            let record = Record::from_value(&scenario.topic, 0, uid as i64, value(uid));
            let failure = Failure {
                index: 0,
                topic: scenario.topic.clone(),
                partition: 0,
                offset: uid as i64,
                stage: Stage::Transform,
                class: FailureClass::Transform,
                message: "the plugin of the day before".into(),
            };
            DeadLetter::new(record, &failure)
        })
        .collect();
    producer
        .send_all(&mut letters)
        .await
        .expect("dead letters produced");
}

fn redrive(config: &std::path::Path, connector: &str) -> (bool, String) {
    redrive_with(config, connector, &[])
}

/// `sluice dlq redrive` of `connector` with `args`: whether it succeeded, and its output.
pub(crate) fn redrive_with(
    config: &std::path::Path,
    connector: &str,
    args: &[&str],
) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["dlq", "redrive", "--config"])
        .arg(config)
        .args(["--connector", connector])
        .args(args)
        .output()
        .expect("run sluice dlq redrive");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("$ sluice dlq redrive --connector {connector}\n{text}");
    (output.status.success(), text)
}

pub(crate) async fn rows(scenario: &Scenario, db: &TestDb) -> sluice::cli::demo::SequenceStats {
    let config = scenario.config("unused:9092", db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    sink.prepare().await.expect("prepare");
    let stats = sequence_stats(&sink, "uid").await.expect("stats");
    sink.close().await;
    stats
}

async fn redrive_a_dead_letter_topic(kind: Backend) {
    // Tansu's SQLite storage: its memory storage gives wrong high watermarks and skips the
    // rest of a producer batch when a fetch starts inside it, which a page boundary does
    // (the dead-letter producer batches, as it should).
    let storage = tempfile::tempdir().expect("broker dir");
    let broker = Broker::start_persistent(storage.path());
    let db = TestDb::new(kind);
    let dlq = harness::unique("dlq");
    broker.create_topic(&dlq, 2).await;
    let mut scenario = Scenario::new(1);
    scenario.mode = "insert";
    scenario.key = "[]";
    scenario.extra_connector = format!(
        "    errors: {{ policy: dlq, dlq: {{ topic: {dlq}, signing_key: {SIGNING_KEY} }} }}"
    );
    let dir = tempfile::tempdir().expect("dir");
    let config = scenario.write(dir.path(), &broker.bootstrap, &db);

    // 30 that pass now, a second dead letter of uid 5, 3 that still fail, and a message
    // that is no dead letter of sluice's.
    dead_letters(&broker, &scenario, &dlq, 0..30, word_event).await;
    dead_letters(&broker, &scenario, &dlq, 5..6, word_event).await;
    dead_letters(&broker, &scenario, &dlq, 1000..1003, |_| {
        "still not json".into()
    })
    .await;
    let plain: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.bootstrap)
        .create()
        .expect("producer");
    plain
        .send(
            FutureRecord::to(&dlq).key("x").payload("hello"),
            std::time::Duration::from_secs(10),
        )
        .await
        .expect("plain message");
    plain
        .flush(std::time::Duration::from_secs(10))
        .expect("flush");

    let (ok, out) = redrive(&config, &scenario.connector);
    assert!(ok, "{out}");
    assert!(
        out.contains("35 dead letter(s) read")
            && out.contains(
                ", 30 redriven, 1 redriven before (passed over), 3 still failing, 1 not redrivable"
            ),
        "{out}"
    );
    assert_eq!(out.matches("still failing, stays in").count(), 3, "{out}");
    assert!(out.contains("not a dead letter sluice produced"), "{out}");
    harness::assert_exactly(rows(&scenario, &db).await, 30);

    // Again: everything is found redriven; nothing is written twice.
    let (ok, out) = redrive(&config, &scenario.connector);
    assert!(ok, "{out}");
    assert!(out.contains(", 0 redriven, 31 redriven before"), "{out}");
    harness::assert_exactly(rows(&scenario, &db).await, 30);

    // 300 more, redriven by two processes at once: each record once.
    dead_letters(&broker, &scenario, &dlq, 30..330, word_event).await;
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| redrive(&config, &scenario.connector));
        let b = s.spawn(|| redrive(&config, &scenario.connector));
        (a.join().expect("a"), b.join().expect("b"))
    });
    assert!(a.0 && b.0, "{}\n{}", a.1, b.1);
    harness::assert_exactly(rows(&scenario, &db).await, 330);
}
for_each_database!(redrive_a_dead_letter_topic: mariadb = MariaDb);
