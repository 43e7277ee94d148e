//! Dead letters that cannot be forged, against each database: whoever may write to a
//! dead-letter topic can put a message with sluice's context headers there, and
//! `sluice dlq redrive` must not write it.
//!
//! - Without `errors.dlq.signing_key`, a letter is redriven only if its key, value and
//!   headers equal its source record's (read through the seek-consumer pool): a forged
//!   letter for `words/0@17` is refused and the genuine one for the same record, behind it
//!   in the topic, still lands; a letter whose source is past the log's end or in a topic
//!   that does not exist is refused unless `--trust-unsigned`; the copy of a record of a
//!   topic the connector does not read is refused; one without a `sluice.connector` header
//!   is passed over and counted.
//! - With a signing key (a list: new key first, old key second), letters signed with
//!   either key redrive; an unsigned one and a tampered one are refused, and the command
//!   says so.
//!
//! The tables have no key (`mode: insert`): a record written twice would be two rows. The
//! broker runs on Tansu's SQLite storage, whose reads inside a producer batch are right.

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use sluice::failure::{DeadLetter, Failure, FailureClass, Stage};
use sluice::kafka::dead_letter_producer::{DeadLetterProducer, header};
use sluice::kafka::dead_letter_signature::{Signed, Signer};
use sluice::pool::{ConsumerPool, Start};
use sluice::record::Record;
use sluice::sink::Sink;

use crate::dlq_topic::{redrive_with, rows};
use crate::harness::{self, Backend, Broker, Scenario, TestDb, word_event};

const NEW_KEY: &str = "forgery-suite-new-key-0123456789";
const OLD_KEY: &str = "forgery-suite-old-key-0123456789";

fn failure(record: &Record) -> Failure {
    Failure {
        index: 0,
        topic: record.topic.clone(),
        partition: record.partition,
        offset: record.offset,
        stage: Stage::Transform,
        class: FailureClass::Transform,
        message: "the plugin of the day before".into(),
    }
}

/// Produces the dead letters of `records` as the connector's producer does, signed with
/// `keys` (none: unsigned).
async fn produce_letters(
    broker: &Broker,
    scenario: &Scenario,
    db: &TestDb,
    dlq: &str,
    keys: &[&str],
    records: Vec<Record>,
) {
    let config = scenario.config(&broker.bootstrap, db);
    let mut producer =
        DeadLetterProducer::new(&config.kafka, &broker.bootstrap, dlq, &scenario.connector)
            .expect("dead-letter producer");
    if !keys.is_empty() {
        producer = producer.with_signing_key(&signing_keys(keys));
    }
    let mut letters: Vec<DeadLetter> = records
        .into_iter()
        .map(|record| {
            let failure = failure(&record);
            DeadLetter::new(record, &failure)
        })
        .collect();
    producer
        .send_all(&mut letters)
        .await
        .expect("dead letters produced");
}

fn signing_keys(keys: &[&str]) -> sluice::config::SigningKeys {
    serde_json::from_value(serde_json::json!(keys)).expect("signing keys")
}

/// Produces a message to `dlq` with `key`, `value` and `headers`, as any client could.
async fn produce_plain(
    broker: &Broker,
    dlq: &str,
    key: &str,
    value: &str,
    headers: &[(&str, &str)],
) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &broker.bootstrap)
        .create()
        .expect("producer");
    let mut owned = OwnedHeaders::new();
    for (name, value) in headers {
        owned = owned.insert(Header {
            key: name,
            value: Some(value.as_bytes()),
        });
    }
    producer
        .send(
            FutureRecord::to(dlq).key(key).payload(value).headers(owned),
            Duration::from_secs(10),
        )
        .await
        .expect("plain message");
    producer.flush(Duration::from_secs(10)).expect("flush");
}

/// The records of `topic`/0 from offset 0, read back as the connector reads them.
async fn source_records(
    broker: &Broker,
    scenario: &Scenario,
    db: &TestDb,
    topic: &str,
    n: usize,
) -> Vec<Record> {
    let config = scenario.config(&broker.bootstrap, db);
    let pool = ConsumerPool::new(
        &config.kafka,
        &broker.bootstrap,
        &config.pool,
        &sluice::metrics::Metrics::new(),
    );
    let records = pool
        .read(topic, 0, Start::Offset(0), n, Duration::from_secs(30))
        .await
        .expect("source records");
    pool.close();
    assert_eq!(records.len(), n);
    records.into_iter().map(|i| i.record).collect()
}

/// Rows of the scenario's table whose `word` is `word`.
async fn rows_with_word(scenario: &Scenario, db: &TestDb, word: &str) -> i64 {
    let config = scenario.config("unused:9092", db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    sink.prepare().await.expect("prepare");
    let dialect = sink.dialect();
    let big = if dialect == sluice::sink::Dialect::MySql {
        "SIGNED"
    } else {
        "BIGINT"
    };
    let sql = format!(
        "SELECT CAST(COUNT(*) AS {big}) FROM {} WHERE {} = '{word}'",
        dialect.quote_table(sink.table_name()),
        dialect.quote_one("word"),
    );
    let count = sink.query_integers(sql, 1).await.expect("count")[0].unwrap_or(0);
    sink.close().await;
    count
}

fn scenario_with(dlq: &str, signing: &str) -> Scenario {
    let mut scenario = Scenario::new(1);
    scenario.mode = "insert";
    scenario.key = "[]";
    scenario.extra_connector =
        format!("    errors: {{ policy: dlq, dlq: {{ topic: {dlq}{signing} }} }}");
    scenario
}

async fn unsigned_letters_must_match_their_source(kind: Backend) {
    let storage = tempfile::tempdir().expect("broker dir");
    let broker = Broker::start_persistent(storage.path());
    let db = TestDb::new(kind);
    let dlq = harness::unique("dlq");
    broker.create_topic(&dlq, 1).await;
    let mut scenario = scenario_with(&dlq, "");
    let topic = scenario.topic.clone();
    // The connector reads a second topic, which does not exist (deleted, say).
    let gone_topic = harness::unique("gone");
    scenario.topic = format!("{topic}, {gone_topic}");
    broker.create_topic(&topic, 1).await;
    broker.produce(&topic, 0..20).await;
    // A record with a header named like one of sluice's (its topic holds dead letters too).
    produce_plain(
        &broker,
        &topic,
        "20",
        &word_event(20),
        &[("trace", "t20"), (header::STAGE, "map")],
    )
    .await;
    let source = source_records(&broker, &scenario, &db, &topic, 21).await;
    assert_eq!(source[17].offset, 17);
    let dir = tempfile::tempdir().expect("dir");
    let config = scenario.write(dir.path(), &broker.bootstrap, &db);
    let forged_value = r#"{"uid":17,"word":"forged","produced_at":1700000000017}"#;

    // A forgery of words/0@17 ahead of its genuine letter, with every header a letter has.
    produce_plain(
        &broker,
        &dlq,
        "17",
        forged_value,
        &[
            (header::SOURCE_TOPIC, &topic),
            (header::SOURCE_PARTITION, "0"),
            (header::SOURCE_OFFSET, "17"),
            (header::CONNECTOR, &scenario.connector),
            (header::STAGE, "transform"),
        ],
    )
    .await;
    // Genuine letters of 0..10 and 17.
    let genuine: Vec<Record> = source
        .iter()
        .filter(|r| r.offset < 10 || r.offset == 17 || r.offset == 20)
        .cloned()
        .collect();
    produce_letters(&broker, &scenario, &db, &dlq, &[], genuine).await;
    // The source's own content for words/0@11, but no sluice.connector header.
    produce_plain(
        &broker,
        &dlq,
        "11",
        &word_event(11),
        &[
            (header::SOURCE_TOPIC, &topic),
            (header::SOURCE_PARTITION, "0"),
            (header::SOURCE_OFFSET, "11"),
        ],
    )
    .await;
    // Letters whose source the log does not hold: past the end, and a topic that is not.
    let mut past_end = Record::from_value(&topic, 0, 1000, word_event(1000));
    past_end.key = Some(b"1000".to_vec());
    let mut no_topic = Record::from_value(&gone_topic, 0, 0, word_event(2000));
    no_topic.key = Some(b"2000".to_vec());
    produce_letters(&broker, &scenario, &db, &dlq, &[], vec![past_end, no_topic]).await;
    // The exact copy of a record of a topic the connector does not read.
    let other = harness::unique("other");
    broker.create_topic(&other, 1).await;
    broker
        .produce_with(&other, 0..1, |_| word_event(3000))
        .await;
    let mut other_record = Record::from_value(&other, 0, 0, word_event(3000));
    other_record.key = Some(b"0".to_vec());
    produce_letters(&broker, &scenario, &db, &dlq, &[], vec![other_record]).await;

    let (ok, out) = redrive_with(&config, &scenario.connector, &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!(
            "17 dead letter(s) read from {dlq}, 12 redriven, 0 redriven before (passed over), 0 still failing, 0 not redrivable, 4 refused (0 unsigned, 0 bad signature, 2 not matching the source, 2 source gone), 1 without a sluice.connector header (passed over)"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "refused (not matching the source): {dlq}/0@0: its key, value or headers differ from those of its source record {}/0@17",
            topic
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("refused (source gone): {dlq}/0@14: its source record {topic}/0@1000 is no longer in the log")),
        "{out}"
    );
    assert!(out.contains("--trust-unsigned"), "{out}");
    assert!(
        out.contains(&format!(
            "refused (not matching the source): {dlq}/0@16: its source topic {other} is not one that connector {} reads",
            scenario.connector
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "passed over, no sluice.connector header: {dlq}/0@13"
        )),
        "{out}"
    );
    let stats = rows(&scenario, &db).await;
    assert_eq!((stats.rows, stats.distinct), (12, 12), "{stats:?}");
    assert_eq!(rows_with_word(&scenario, &db, "forged").await, 0);
    assert_eq!(rows_with_word(&scenario, &db, "w17").await, 1);

    // Trusted: the two whose source is gone are written as they are; the forgery is still
    // refused, the rest was redriven before.
    let (ok, out) = redrive_with(&config, &scenario.connector, &["--trust-unsigned"]);
    assert!(ok, "{out}");
    assert!(
        out.contains(", 2 redriven, 12 redriven before (passed over), 0 still failing, 0 not redrivable, 2 refused (0 unsigned, 0 bad signature, 2 not matching the source, 0 source gone), 1 without"),
        "{out}"
    );
    let stats = rows(&scenario, &db).await;
    assert_eq!((stats.rows, stats.distinct), (14, 14), "{stats:?}");
    assert_eq!(rows_with_word(&scenario, &db, "forged").await, 0);
}
for_each_database!(unsigned_letters_must_match_their_source: postgres = Postgres);

async fn signed_letters_redrive_and_the_rest_are_refused(kind: Backend) {
    let storage = tempfile::tempdir().expect("broker dir");
    let broker = Broker::start_persistent(storage.path());
    let db = TestDb::new(kind);
    let dlq = harness::unique("dlq");
    broker.create_topic(&dlq, 1).await;
    // Rotated: letters signed with the old key still verify.
    let scenario = scenario_with(&dlq, &format!(", signing_key: [{NEW_KEY}, {OLD_KEY}]"));
    let dir = tempfile::tempdir().expect("dir");
    let config = scenario.write(dir.path(), &broker.bootstrap, &db);
    let record = |uid: u64| {
        let mut record = Record::from_value(&scenario.topic, 0, uid as i64, word_event(uid));
        record.key = Some(uid.to_string().into_bytes());
        record.headers = vec![("trace".into(), Some(format!("t{uid}").into_bytes()))];
        if uid == 9 {
            // Named like a header of sluice's: left out of the signature.
            record
                .headers
                .push((header::STAGE.into(), Some(b"map".to_vec())));
        }
        record
    };
    // Signed before the rotation (old key), after it (the connector's list), unsigned.
    produce_letters(
        &broker,
        &scenario,
        &db,
        &dlq,
        &[OLD_KEY],
        (0..5).map(record).collect(),
    )
    .await;
    produce_letters(
        &broker,
        &scenario,
        &db,
        &dlq,
        &[NEW_KEY, OLD_KEY],
        (5..10).map(record).collect(),
    )
    .await;
    produce_letters(&broker, &scenario, &db, &dlq, &[], vec![record(10)]).await;
    // A genuine signature of uid 11 on a changed value, and one made with a key not listed.
    let genuine = record(11);
    let signer = Signer::new(&signing_keys(&[NEW_KEY])).expect("signer");
    let signature = signer.sign(&Signed {
        connector: &scenario.connector,
        record: &genuine,
        value: genuine.value.as_deref(),
    });
    let headers = |signature: &str| {
        vec![
            ("trace".to_string(), "t11".to_string()),
            (header::SOURCE_TOPIC.into(), scenario.topic.clone()),
            (header::SOURCE_PARTITION.into(), "0".into()),
            (header::SOURCE_OFFSET.into(), "11".into()),
            (header::CONNECTOR.into(), scenario.connector.clone()),
            (header::SIGNATURE.into(), signature.to_string()),
        ]
    };
    let tampered = r#"{"uid":11,"word":"tampered","produced_at":1700000000011}"#;
    let tampered_headers = headers(&signature);
    let refs: Vec<(&str, &str)> = tampered_headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    produce_plain(&broker, &dlq, "11", tampered, &refs).await;
    let stranger = Signer::new(&signing_keys(&["a-key-nobody-listed-0123456789"]))
        .expect("signer")
        .sign(&Signed {
            connector: &scenario.connector,
            record: &genuine,
            value: genuine.value.as_deref(),
        });
    let stranger_headers = headers(&stranger);
    let refs: Vec<(&str, &str)> = stranger_headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    produce_plain(&broker, &dlq, "11", &word_event(11), &refs).await;

    let (ok, out) = redrive_with(&config, &scenario.connector, &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains(", 10 redriven, 0 redriven before (passed over), 0 still failing, 0 not redrivable, 3 refused (1 unsigned, 2 bad signature, 0 not matching the source, 0 source gone), 0 without"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "refused (unsigned): {dlq}/0@10: it has no sluice.signature header"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "refused (bad signature): {dlq}/0@11: its sluice.signature was made by none of the keys"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("refused (bad signature): {dlq}/0@12:")),
        "{out}"
    );
    harness::assert_exactly(rows(&scenario, &db).await, 10);
    assert_eq!(rows_with_word(&scenario, &db, "tampered").await, 0);

    // --trust-unsigned does not let an unsigned letter past a signing key.
    let (ok, out) = redrive_with(&config, &scenario.connector, &["--trust-unsigned"]);
    assert!(ok, "{out}");
    assert!(out.contains(", 0 redriven, 10 redriven before"), "{out}");
    assert!(out.contains("1 unsigned, 2 bad signature"), "{out}");
    harness::assert_exactly(rows(&scenario, &db).await, 10);
}
for_each_database!(signed_letters_redrive_and_the_rest_are_refused: mariadb = MariaDb);

/// The letters `sluice run` produces redrive: signed with the connector's key and verified
/// after a rotation (`signed`), or checked against their source records (no key). A JSON
/// Schema sends the records whose word does not start with `w1` to the dead-letter topic;
/// the redrive runs with the schema gone, so they all land.
async fn letters_of_a_running_connector_redrive(kind: Backend, signed: bool) {
    const N: u64 = 20;
    let storage = tempfile::tempdir().expect("broker dir");
    let broker = Broker::start_persistent(storage.path());
    let db = TestDb::new(kind);
    let dlq = harness::unique("dlq");
    broker.create_topic(&dlq, 1).await;
    let dir = tempfile::tempdir().expect("dir");
    let schema = dir.path().join("word.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"word":{"type":"string","pattern":"^w1"}}}"#,
    )
    .expect("schema");
    let signing = |keys: &[&str]| {
        if signed {
            format!(", signing_key: [{}]", keys.join(", "))
        } else {
            String::new()
        }
    };
    let mut scenario = scenario_with(&dlq, &signing(&[OLD_KEY]));
    scenario.extra_connector = format!(
        "    schema: {}\n{}",
        schema.display(),
        scenario.extra_connector
    );
    broker.create_topic(&scenario.topic, 1).await;
    broker.produce(&scenario.topic, 0..N).await;
    let config = scenario.write(dir.path(), &broker.bootstrap, &db);
    let sluice = harness::SluiceProcess::start(&config);
    // w1 and w10..w19 pass the schema.
    let stats = scenario
        .wait_for_rows(&broker.bootstrap, &db, 11, Duration::from_secs(120))
        .await;
    assert!(sluice.terminate().success());
    assert_eq!(stats.rows, 11, "{stats:?}");

    // The schema fixed (gone), and the key rotated: the old key second.
    let mut fixed = scenario_with(&dlq, &signing(&[NEW_KEY, OLD_KEY]));
    fixed.connector = scenario.connector.clone();
    fixed.topic = scenario.topic.clone();
    fixed.group = scenario.group.clone();
    fixed.table = scenario.table.clone();
    let fixed_dir = tempfile::tempdir().expect("dir");
    let fixed_config = fixed.write(fixed_dir.path(), &broker.bootstrap, &db);
    let (ok, out) = redrive_with(&fixed_config, &fixed.connector, &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!(
            "9 dead letter(s) read from {dlq}, 9 redriven, 0 redriven before (passed over), 0 still failing, 0 not redrivable, 0 refused"
        )),
        "{out}"
    );
    harness::assert_exactly(rows(&fixed, &db).await, N as i64);

    if signed {
        // Without the key that signed them, they are refused (even though redriven).
        let (ok, out) = {
            let mut other = scenario_with(&dlq, &signing(&[NEW_KEY]));
            other.connector = scenario.connector.clone();
            other.topic = scenario.topic.clone();
            other.table = scenario.table.clone();
            let other_dir = tempfile::tempdir().expect("dir");
            let other_config = other.write(other_dir.path(), &broker.bootstrap, &db);
            // Refused before sluice_redriven is asked whether they were redriven.
            redrive_with(&other_config, &other.connector, &[])
        };
        assert!(ok, "{out}");
        assert!(
            out.contains("0 redriven, 0 redriven before (passed over), 0 still failing, 0 not redrivable, 9 refused (0 unsigned, 9 bad signature"),
            "{out}"
        );
        harness::assert_exactly(rows(&fixed, &db).await, N as i64);
    }
}

async fn letters_of_a_running_connector_redrive_signed(kind: Backend) {
    letters_of_a_running_connector_redrive(kind, true).await
}
for_each_database!(letters_of_a_running_connector_redrive_signed: sqlite = Sqlite);

async fn letters_of_a_running_connector_redrive_unsigned(kind: Backend) {
    letters_of_a_running_connector_redrive(kind, false).await
}
for_each_database!(letters_of_a_running_connector_redrive_unsigned: postgres = Postgres);
