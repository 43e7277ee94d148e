//! End-to-end: a real broker, `sluice run` processes, and each database. Every test body is
//! written once and run against PostgreSQL, MariaDB and SQLite.

mod harness;

use std::time::Duration;

use harness::{Backend, Broker, Scenario, SluiceProcess, TestDb};

const PARTITIONS: i32 = 4;

fn assert_exactly(stats: sluice::sink::SequenceStats, n: i64) {
    assert_eq!(stats.rows, n, "rows: {stats:?}");
    assert_eq!(stats.duplicates(), 0, "duplicates: {stats:?}");
    assert_eq!(stats.gaps(), 0, "gaps: {stats:?}");
    assert_eq!(stats.min, Some(0), "{stats:?}");
    assert_eq!(stats.max, Some(n - 1), "{stats:?}");
}

/// N records with sequential ids over several partitions: exactly N rows, each id once.
async fn exactly_n_rows(db: Backend) {
    const N: u64 = 20_000;
    let broker = Broker::start();
    let db = TestDb::new(db);
    let scenario = Scenario::new(2);
    broker.create_topic(&scenario.topic, PARTITIONS).await;
    broker.produce(&scenario.topic, 0..N).await;
    let dir = tempfile::tempdir().unwrap();
    let config = scenario.write(dir.path(), &broker.bootstrap, &db);
    let sluice = SluiceProcess::start(&config);
    let stats = scenario
        .wait_for_rows(&broker.bootstrap, &db, N as i64, Duration::from_secs(120))
        .await;
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
    assert_exactly(stats, N as i64);
    // Nothing more arrives after a clean stop either.
    assert_exactly(scenario.stats(&broker.bootstrap, &db).await, N as i64);
}
for_each_database!(exactly_n_rows);

/// Stopped mid-stream by SIGTERM and by SIGKILL, started again each time: it resumes from
/// the stored offsets, with no duplicate and no gap.
async fn resumes_after_sigterm_and_sigkill(db: Backend) {
    const N: u64 = 30_000;
    let broker = Broker::start();
    let db = TestDb::new(db);
    let mut scenario = Scenario::new(1);
    scenario.max_records = 200;
    broker.create_topic(&scenario.topic, PARTITIONS).await;
    let dir = tempfile::tempdir().unwrap();
    let config = scenario.write(dir.path(), &broker.bootstrap, &db);

    broker.produce(&scenario.topic, 0..N / 3).await;
    let first = SluiceProcess::start(&config);
    let seen = scenario
        .wait_for_rows(&broker.bootstrap, &db, 1, Duration::from_secs(60))
        .await;
    assert!(seen.rows > 0, "no rows after 60 s");
    first.kill();
    // Tansu 0.6.0 drops a dead member only at the next join after its session expired (a
    // real Kafka evicts it by itself): let the 6 s session run out before rejoining.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after_kill = scenario.stats(&broker.bootstrap, &db).await;
    assert_eq!(after_kill.duplicates(), 0);

    broker.produce(&scenario.topic, N / 3..2 * N / 3).await;
    let second = SluiceProcess::start(&config);
    scenario
        .wait_for_rows(
            &broker.bootstrap,
            &db,
            after_kill.rows + 1,
            Duration::from_secs(60),
        )
        .await;
    let status = second.terminate();
    assert!(status.success(), "SIGTERM exit: {status}");

    broker.produce(&scenario.topic, 2 * N / 3..N).await;
    let third = SluiceProcess::start(&config);
    let stats = scenario
        .wait_for_rows(&broker.bootstrap, &db, N as i64, Duration::from_secs(120))
        .await;
    assert!(third.terminate().success());
    assert_exactly(stats, N as i64);
}
for_each_database!(resumes_after_sigterm_and_sigkill);

/// Two processes in one group share the partitions; one leaves; the other takes over.
async fn two_processes_share_then_hand_over(db: Backend) {
    const N: u64 = 20_000;
    let broker = Broker::start();
    let db = TestDb::new(db);
    let mut scenario = Scenario::new(1);
    scenario.max_records = 500;
    broker.create_topic(&scenario.topic, PARTITIONS).await;
    let dir = tempfile::tempdir().unwrap();
    let config = scenario.write(dir.path(), &broker.bootstrap, &db);

    let a = SluiceProcess::start(&config);
    let b = SluiceProcess::start(&config);
    broker.produce(&scenario.topic, 0..N / 2).await;
    scenario
        .wait_for_rows(
            &broker.bootstrap,
            &db,
            (N / 2) as i64,
            Duration::from_secs(120),
        )
        .await;
    assert!(a.terminate().success());
    broker.produce(&scenario.topic, N / 2..N).await;
    let stats = scenario
        .wait_for_rows(&broker.bootstrap, &db, N as i64, Duration::from_secs(120))
        .await;
    assert!(b.terminate().success());
    assert_exactly(stats, N as i64);
}
for_each_database!(two_processes_share_then_hand_over);

/// The cooperative-sticky protocol: two processes, one leaves mid-stream.
async fn cooperative_sticky_hand_over(db: Backend) {
    const N: u64 = 10_000;
    let broker = Broker::start();
    let db = TestDb::new(db);
    let mut scenario = Scenario::new(1);
    scenario.max_records = 500;
    scenario.extra_kafka = "    partition.assignment.strategy: cooperative-sticky".into();
    broker.create_topic(&scenario.topic, PARTITIONS).await;
    let dir = tempfile::tempdir().unwrap();
    let config = scenario.write(dir.path(), &broker.bootstrap, &db);
    let a = SluiceProcess::start(&config);
    let b = SluiceProcess::start(&config);
    broker.produce(&scenario.topic, 0..N / 2).await;
    scenario
        .wait_for_rows(
            &broker.bootstrap,
            &db,
            (N / 2) as i64,
            Duration::from_secs(120),
        )
        .await;
    // A graceful leave here: after a SIGKILL, Tansu 0.6.0 revoked the survivor's
    // partitions as lost and did not assign them again within two minutes.
    assert!(b.terminate().success());
    broker.produce(&scenario.topic, N / 2..N).await;
    let stats = scenario
        .wait_for_rows(&broker.bootstrap, &db, N as i64, Duration::from_secs(120))
        .await;
    assert!(a.terminate().success());
    assert_exactly(stats, N as i64);
}
for_each_database!(cooperative_sticky_hand_over);

/// The field's raw word events through the `word_parse` plugin: exactly N rows.
async fn word_parse_plugin_end_to_end(db: Backend) {
    const N: u64 = 10_000;
    let broker = Broker::start();
    let db = TestDb::new(db);
    let mut scenario = Scenario::new(2);
    scenario.transforms = format!(
        "    transforms:\n      - name: parse\n        plugin: {}\n        config: {{ separator: \"*\" }}\n",
        sluice_transform::example_plugin_path("word_parse").display()
    );
    broker.create_topic(&scenario.topic, PARTITIONS).await;
    broker.produce_raw(&scenario.topic, 0..N).await;
    let dir = tempfile::tempdir().unwrap();
    let config = scenario.write(dir.path(), &broker.bootstrap, &db);
    let sluice = SluiceProcess::start(&config);
    let stats = scenario
        .wait_for_rows(&broker.bootstrap, &db, N as i64, Duration::from_secs(120))
        .await;
    assert!(sluice.terminate().success());
    assert_exactly(stats, N as i64);
}
for_each_database!(word_parse_plugin_end_to_end);

/// A record the plugin rejects stops the task in its failed state, with the record's
/// coordinates and the plugin's message; nothing after it is written and the process exits 1.
async fn rejected_record_fails_the_task(db: Backend) {
    let broker = Broker::start();
    let db = TestDb::new(db);
    let mut scenario = Scenario::new(1);
    scenario.transforms = format!(
        "    transforms:\n      - name: parse\n        plugin: {}\n",
        sluice_transform::example_plugin_path("word_parse").display()
    );
    broker.create_topic(&scenario.topic, 1).await;
    broker.produce_raw(&scenario.topic, 0..100).await;
    broker
        .produce_with(&scenario.topic, 100..101, |_| {
            "not a word event".to_string()
        })
        .await;
    let dir = tempfile::tempdir().unwrap();
    let config = scenario.write(dir.path(), &broker.bootstrap, &db);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .expect("run sluice");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{}/0@100", scenario.topic))
            && stderr.contains("malformed word event"),
        "{stderr}"
    );
    // The batch holding the bad record was not written, and its offsets did not move.
    let stats = scenario.stats(&broker.bootstrap, &db).await;
    assert!(stats.rows <= 100, "{stats:?}");
}
for_each_database!(rejected_record_fails_the_task);

/// At-least-once: offsets go to the Kafka group, not the database; a restart resumes from
/// the group's committed offsets (upserts make any redelivered row land once).
async fn at_least_once_resumes_from_the_group(db: Backend) {
    const N: u64 = 10_000;
    let broker = Broker::start();
    let db = TestDb::new(db);
    let mut scenario = Scenario::new(1);
    scenario.guarantee = "at_least_once";
    broker.create_topic(&scenario.topic, PARTITIONS).await;
    let dir = tempfile::tempdir().unwrap();
    let config = scenario.write(dir.path(), &broker.bootstrap, &db);
    broker.produce(&scenario.topic, 0..N / 2).await;
    let first = SluiceProcess::start(&config);
    scenario
        .wait_for_rows(
            &broker.bootstrap,
            &db,
            (N / 2) as i64,
            Duration::from_secs(120),
        )
        .await;
    assert!(first.terminate().success());
    broker.produce(&scenario.topic, N / 2..N).await;
    let second = SluiceProcess::start(&config);
    let stats = scenario
        .wait_for_rows(&broker.bootstrap, &db, N as i64, Duration::from_secs(120))
        .await;
    assert!(second.terminate().success());
    assert_exactly(stats, N as i64);
    let sink = sluice::sink::Sink::connect(&scenario.config(&broker.bootstrap, &db).connectors[0])
        .await
        .unwrap();
    assert!(
        sink.read_offsets(&scenario.topic).await.unwrap().is_empty(),
        "at_least_once stores no offsets in the database"
    );
    sink.close().await;
    // The group holds them: every partition committed up to its end.
    let consumer: rdkafka::consumer::BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", &broker.bootstrap)
        .set("group.id", &scenario.group)
        .create()
        .unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(&scenario.topic, p);
    }
    use rdkafka::consumer::Consumer;
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .unwrap();
    let total: i64 = committed
        .elements()
        .iter()
        .map(|e| e.offset().to_raw().unwrap_or(0))
        .sum();
    assert_eq!(total, N as i64, "committed offsets: {committed:?}");
}
for_each_database!(at_least_once_resumes_from_the_group);
