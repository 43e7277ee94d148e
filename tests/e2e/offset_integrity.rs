//! Offsets that the log contradicts: a stored offset the log no longer has, and records
//! that skip offsets. sluice never jumps silently: it fails, or resumes where it is told
//! and says how much it skipped.

use std::time::{Duration, Instant};

use sluice::cli::demo::sequence_stats;
use sluice::kafka::embedded::EmbeddedKafka;
use sluice::sink::Sink;
use sluice::supervisor::Supervisor;

use crate::harness::{self, Backend, Scenario, TestDb};

const PRODUCED: u64 = 300;
/// Beyond the log's end: what a topic deleted and created again (or another cluster)
/// looks like to a stored offset.
const STORED: i64 = 1_000;

/// A run on librdkafka's mock cluster (which answers a fetch outside the log with
/// OFFSET_OUT_OF_RANGE, as Kafka does; the test broker answers it with nothing), with
/// `next` stored for partition 0 of a topic that holds `PRODUCED` records, as read from
/// Kafka cluster `cluster`.
async fn stored_before(
    db: &TestDb,
    policy: &'static str,
    next: i64,
    cluster: Option<&str>,
) -> (EmbeddedKafka, Scenario, sluice::config::Config) {
    let kafka = EmbeddedKafka::start(1).expect("mock cluster");
    let mut scenario = Scenario::new(1);
    scenario.guarantee = policy;
    kafka.create_topic(&scenario.topic, 1).expect("topic");
    let bootstrap = kafka.bootstrap_servers();
    harness::produce_values(
        &bootstrap,
        &scenario.topic,
        0..PRODUCED,
        harness::word_event,
        None,
    )
    .await;
    let config = scenario.config(&bootstrap, db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    sink.prepare().await.expect("prepare");
    sink.write(&sluice::sink::WriteBatch {
        offsets: vec![sluice::sink::OffsetAdvance {
            topic: scenario.topic.clone(),
            partition: 0,
            expected: None,
            next,
        }],
        cluster: cluster.map(str::to_string),
        ..sluice::sink::WriteBatch::default()
    })
    .await
    .expect("store an offset");
    sink.close().await;
    (kafka, scenario, config)
}

/// `STORED`, beyond the log's end.
async fn beyond_the_log(
    db: &TestDb,
    policy: &'static str,
) -> (EmbeddedKafka, Scenario, sluice::config::Config) {
    stored_before(db, policy, STORED, None).await
}

async fn rows(config: &sluice::config::Config) -> i64 {
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    let rows = sequence_stats(&sink, "uid").await.expect("stats").rows;
    sink.close().await;
    rows
}

/// Runs the connector in this process until the table holds every produced record (at
/// most 60 s), stops it cleanly, and returns a sink on its database.
async fn run_until_drained(kafka: &EmbeddedKafka, config: &sluice::config::Config) -> Sink {
    let supervisor = Supervisor::start(config, &kafka.bootstrap_servers())
        .await
        .expect("start");
    let deadline = Instant::now() + Duration::from_secs(60);
    while rows(config).await < PRODUCED as i64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let failures = supervisor.shutdown().await;
    assert!(failures.is_empty(), "{failures:?}");
    Sink::connect(&config.connectors[0]).await.expect("connect")
}

/// Runs the connector in this process until its task ends, which must be a failure:
/// returns its error. Nothing is written.
async fn task_failure(kafka: &EmbeddedKafka, config: &sluice::config::Config) -> String {
    let supervisor = Supervisor::start(config, &kafka.bootstrap_servers())
        .await
        .expect("start");
    tokio::time::timeout(Duration::from_secs(60), supervisor.all_failed())
        .await
        .expect("the task fails for good");
    let task = supervisor.connectors()[0].view().tasks[0].clone();
    assert_eq!(task.state, "FAILED", "{task:?}");
    assert!(!task.transient, "{task:?}");
    supervisor.shutdown().await;
    assert_eq!(rows(config).await, 0);
    task.trace.unwrap_or_default()
}

/// Default (`fail`): the task fails, naming the topic, partition, stored offset and the
/// log's range; nothing is written.
async fn out_of_range_fails_by_default(db: Backend) {
    let db = TestDb::new(db);
    let (kafka, scenario, config) = beyond_the_log(&db, "exactly_once").await;
    let error = task_failure(&kafka, &config).await;
    for part in [
        format!("{}/0", scenario.topic),
        format!("stored offset {STORED}"),
        format!("0..{PRODUCED}"),
        "on_offset_out_of_range".to_string(),
    ] {
        assert!(error.contains(&part), "{part:?} in {error}");
    }
}
for_each_database!(out_of_range_fails_by_default: mariadb = MariaDb);

/// `earliest`: the partition resumes at the log's start, and every record of the new log
/// lands once; the stored offset follows.
async fn out_of_range_earliest_reads_the_log_again(db: Backend) {
    let db = TestDb::new(db);
    let (kafka, scenario, config) =
        beyond_the_log(&db, "exactly_once, on_offset_out_of_range: earliest").await;
    let sink = run_until_drained(&kafka, &config).await;
    let stats = sequence_stats(&sink, "uid").await.expect("stats");
    harness::assert_exactly(stats, PRODUCED as i64);
    let stored = sink
        .control()
        .read_offsets(&scenario.topic)
        .await
        .expect("offsets");
    assert_eq!(stored.get(&0), Some(&(PRODUCED as i64)));
    sink.close().await;
}
for_each_database!(out_of_range_earliest_reads_the_log_again: sqlite = Sqlite, postgres = Postgres);

/// `latest`: the partition resumes at the log's end: what was there is passed over (and
/// logged), what comes after lands.
async fn out_of_range_latest_reads_what_comes_next(db: Backend) {
    let db = TestDb::new(db);
    let (kafka, scenario, config) =
        beyond_the_log(&db, "exactly_once, on_offset_out_of_range: latest").await;
    let bootstrap = kafka.bootstrap_servers();
    let supervisor = Supervisor::start(&config, &bootstrap).await.expect("start");
    // New records are produced once the partition has been reset to the log's end.
    let metrics = supervisor.connectors()[0].metrics.clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    while metrics.offset_resets.get() == 0 {
        assert!(Instant::now() < deadline, "no reset within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    harness::produce_values(
        &bootstrap,
        &scenario.topic,
        PRODUCED..PRODUCED + 50,
        harness::word_event,
        None,
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while rows(&config).await < 50 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let skipped = supervisor.connectors()[0].metrics.offsets_skipped.get();
    let failures = supervisor.shutdown().await;
    assert!(failures.is_empty(), "{failures:?}");
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    let stats = sequence_stats(&sink, "uid").await.expect("stats");
    assert_eq!(stats.rows, 50, "{stats:?}");
    assert_eq!(stats.min, Some(PRODUCED as i64), "{stats:?}");
    // Moving from 1000 back to the end (300) skips nothing that the log holds.
    assert_eq!(skipped, 0);
    sink.close().await;
}
for_each_database!(out_of_range_latest_reads_what_comes_next: sqlite = Sqlite);

/// A run on Tansu even when `KAFKA_BROKERS` points elsewhere: the tests below need its
/// fault. One partition, `max_records` per batch, `policy` in `delivery:`.
async fn on_tansu(db: Backend, policy: &'static str, max_records: usize) -> harness::Pipeline {
    let port = harness::free_port();
    let broker = harness::Broker::start_on(port, &format!("127.0.0.1:{port}"));
    let mut scenario = Scenario::new(1);
    scenario.max_records = max_records;
    scenario.guarantee = policy;
    harness::Pipeline::assemble(broker, TestDb::new(db), None, scenario, 1).await
}

/// The first record after an assignment is past the stored offset: the log holds the
/// stored offset (it is inside the log's range), so the broker skipped records. The test
/// broker's fault makes that happen (a fetch at 100, inside a stored batch of 500, answers
/// with the next batch, at 500), so this test always starts Tansu. `warn`: the jump is
/// logged with its range and the partition reads on from 500; `fail`: the task fails.
async fn first_record_past_the_stored_offset(
    db: Backend,
    policy: &'static str,
) -> (harness::SluiceProcess, harness::Pipeline) {
    let run = on_tansu(db, policy, 1_000).await;
    harness::stored_offset_inside_a_batch(&run).await;
    (run.start(), run)
}

async fn a_jumped_start_warns_and_reads_on(db: Backend) {
    let (sluice, run) = first_record_past_the_stored_offset(db, "exactly_once").await;
    let stats = run.wait_for_rows(500, 60).await;
    assert!(sluice.terminate().success());
    assert_eq!(
        (stats.rows, stats.min, stats.max),
        (500, Some(500), Some(999)),
        "{stats:?}"
    );
    let log = std::fs::read_to_string(sluice_log(&run)).unwrap_or_default();
    let line = log
        .lines()
        .find(|l| l.contains("offsets jumped"))
        .unwrap_or_else(|| panic!("no warning of the jump: {log}"));
    assert!(
        line.contains("expected=100") && line.contains("got=500"),
        "{line}"
    );
}
for_each_database!(a_jumped_start_warns_and_reads_on: sqlite = Sqlite, mariadb = MariaDb);

async fn a_jumped_start_fails_when_told(db: Backend) {
    let (sluice, run) =
        first_record_past_the_stored_offset(db, "exactly_once, on_offset_gap: fail").await;
    let log_path = sluice.log.clone();
    let status = sluice.wait_for_exit(Duration::from_secs(60));
    assert!(!status.success(), "{status}");
    let log = std::fs::read_to_string(log_path).unwrap_or_default();
    assert!(log.contains("offsets jumped from 100 to 500"), "{log}");
    assert_eq!(run.stats().await.rows, 0);
}
for_each_database!(a_jumped_start_fails_when_told: sqlite = Sqlite);

/// The newest sluice log of a run's connector.
fn sluice_log(run: &harness::Pipeline) -> std::path::PathBuf {
    let prefix = format!("{}-", run.scenario.connector);
    let mut logs: Vec<(std::time::SystemTime, std::path::PathBuf)> =
        std::fs::read_dir(harness::log_dir())
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| {
                (
                    e.metadata()
                        .and_then(|m| m.modified())
                        .unwrap_or(std::time::UNIX_EPOCH),
                    e.path(),
                )
            })
            .collect();
    logs.sort();
    logs.pop().map(|(_, p)| p).expect("a sluice log")
}

/// Records that skip offsets are noticed. The gap is made by the test broker's own fault
/// (Tansu 0.6.0's memory storage answers a fetch that starts inside a stored batch with
/// the next batch): batches of 500 records, and a slow sink that makes sluice pause and
/// resume its partitions mid-batch. sluice no longer pauses for backpressure (it stops
/// taking records instead), so the process runs with `SLUICE_BACKPRESSURE=pause`, the
/// switch that puts pausing back. This test always starts Tansu, even when
/// `KAFKA_BROKERS` points elsewhere. `warn` (the default) logs the range and goes on;
/// `fail` fails the task.
async fn offset_gaps_are_noticed(
    db: Backend,
    policy: &'static str,
) -> (harness::SluiceProcess, harness::Pipeline) {
    let run = on_tansu(db, policy, 50).await;
    harness::produce_compressed(&run.broker.bootstrap, &run.scenario.topic, 0..3_000, "none").await;
    let config = run.scenario.config(&run.broker.bootstrap, &run.db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    sink.prepare().await.expect("create the table");
    let table = &run.scenario.table;
    harness::slow_writes(&sink, table, 0.3).await;
    sink.close().await;
    let sluice =
        harness::SluiceProcess::start_with_env(&run.config, &[("SLUICE_BACKPRESSURE", "pause")]);
    (sluice, run)
}

async fn offset_gap_warns(db: Backend) {
    let (sluice, run) = offset_gaps_are_noticed(db, "exactly_once").await;
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut log = String::new();
    while Instant::now() < deadline {
        log = std::fs::read_to_string(&sluice.log).unwrap_or_default();
        if log.contains("offsets jumped") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(sluice.terminate().success());
    let line = log
        .lines()
        .find(|l| l.contains("offsets jumped"))
        .unwrap_or_else(|| panic!("no gap warning: {log}"));
    assert!(
        line.contains("expected=") && line.contains("got="),
        "{line}"
    );
    // What the broker skipped is not in the table.
    assert!(run.stats().await.rows < 3_000);
}
for_each_database!(offset_gap_warns: postgres = Postgres);

async fn offset_gap_fails_when_told(db: Backend) {
    let (sluice, _run) = offset_gaps_are_noticed(db, "exactly_once, on_offset_gap: fail").await;
    let log_path = sluice.log.clone();
    let status = sluice.wait_for_exit(Duration::from_secs(90));
    assert!(!status.success(), "a gap must fail the task: {status}");
    let log = std::fs::read_to_string(log_path).unwrap_or_default();
    assert!(log.contains("offsets jumped from"), "{log}");
}
for_each_database!(offset_gap_fails_when_told: postgres = Postgres);

/// A listener that starts every partition at offset 0 and records nothing else.
struct FromZero;

impl sluice::kafka::consumer::RebalanceListener for FromZero {
    fn on_revoke(&self, _: &[sluice::record::Partition]) {}
    fn on_assign(
        &self,
        partitions: &[sluice::record::Partition],
    ) -> Vec<(sluice::record::Partition, rdkafka::Offset)> {
        partitions
            .iter()
            .map(|p| (p.clone(), rdkafka::Offset::Offset(0)))
            .collect()
    }
    fn paused(&self) -> bool {
        false
    }
    fn failed(&self, error: rdkafka::error::KafkaError) {
        panic!("{error}")
    }
    fn take_kafka_commits(&self) -> Vec<(sluice::record::Partition, i64)> {
        Vec::new()
    }
}

/// Moving one partition with the eager protocol's assign (the path taken when a seek is
/// not possible) leaves the other partitions where they are fetching: before, they went
/// back to the offsets of the last assign call and read everything again.
#[test]
fn reassigning_one_partition_leaves_the_others_where_they_are() {
    harness::run_test(async {
        let kafka = EmbeddedKafka::start(1).expect("mock cluster");
        let scenario = Scenario::new(1);
        kafka.create_topic(&scenario.topic, 2).expect("topic");
        let bootstrap = kafka.bootstrap_servers();
        harness::produce_values(
            &bootstrap,
            &scenario.topic,
            0..400,
            harness::word_event,
            None,
        )
        .await;
        let db = TestDb::new(Backend::Sqlite);
        let config = scenario.config(&bootstrap, &db);
        let consumer = sluice::kafka::consumer::subscribe(
            &config.kafka,
            &bootstrap,
            &config.connectors[0],
            0,
            std::sync::Arc::new(FromZero),
        )
        .expect("consumer");
        let next = |consumer: &sluice::kafka::consumer::SourceConsumer,
                    partition: i32,
                    after: Option<i64>| {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                assert!(
                    Instant::now() < deadline,
                    "no record of partition {partition}"
                );
                if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
                    let record = sluice::kafka::consumer::to_record(&message).record;
                    if record.partition == partition && after.is_none_or(|a| record.offset > a) {
                        return record.offset;
                    }
                }
            }
        };
        // Read partition 1 up to offset 50 or more.
        let mut last = next(&consumer, 1, None);
        while last < 50 {
            last = next(&consumer, 1, Some(last));
        }
        // Partition 0 back to its start by assign: an invalid start makes the seek fail.
        sluice::kafka::consumer::reassign(
            &consumer,
            &[((scenario.topic.clone(), 0), None)],
            rdkafka::Offset::Invalid,
        )
        .expect("reassign");
        let resumed = next(&consumer, 1, None);
        assert!(
            resumed > last,
            "partition 1 went back to {resumed} after {last}: it should fetch on"
        );
    });
}

/// Stored offsets written while reading another Kafka cluster (`KAFKA_BROKERS` moved to a
/// DR replica, say) are not positions in this log: by default the task fails and names
/// both clusters; with `earliest` it reads this log from its start, and the offsets it
/// stores from then on carry this cluster's id.
async fn offsets_from_another_cluster(
    db: &TestDb,
    policy: &'static str,
) -> (EmbeddedKafka, Scenario, sluice::config::Config) {
    stored_before(db, policy, 120, Some("another-cluster")).await
}

async fn another_clusters_offsets_fail_by_default(db: Backend) {
    let db = TestDb::new(db);
    let (kafka, scenario, config) = offsets_from_another_cluster(&db, "exactly_once").await;
    let error = task_failure(&kafka, &config).await;
    assert!(
        error.contains(&scenario.topic) && error.contains("another-cluster"),
        "{error}"
    );
}
for_each_database!(another_clusters_offsets_fail_by_default: postgres = Postgres);

async fn another_clusters_offsets_with_earliest_read_this_log(db: Backend) {
    let db = TestDb::new(db);
    let (kafka, scenario, config) =
        offsets_from_another_cluster(&db, "exactly_once, on_offset_out_of_range: earliest").await;
    let sink = run_until_drained(&kafka, &config).await;
    harness::assert_exactly(
        sequence_stats(&sink, "uid").await.expect("stats"),
        PRODUCED as i64,
    );
    let clusters = sink
        .control()
        .stored_clusters(&scenario.topic)
        .await
        .expect("clusters");
    assert_eq!(clusters.len(), 1, "{clusters:?}");
    assert_ne!(clusters[0], "another-cluster");
    sink.close().await;
}
for_each_database!(another_clusters_offsets_with_earliest_read_this_log: sqlite = Sqlite, mariadb = MariaDb);

/// A topic deleted and created again while sluice was stopped, and written past the stored
/// offset before sluice starts again: the stored offset lies inside the new log's range,
/// but it is a position in the old log, and resuming there would skip the new log's first
/// records in silence. The topic's id, stored beside the offsets, tells: by default the
/// task fails and says why (nothing of the new log is written or skipped); with
/// `on_offset_out_of_range: earliest` the new log is read from its start.
async fn a_topic_created_again_is_not_resumed_in_silence(db: Backend) {
    let run = harness::Pipeline::new(db, Scenario::new(1), 1).await;
    run.produce(0..300).await;
    let sluice = run.start();
    harness::assert_exactly(run.wait_for_rows(300, 60).await, 300);
    assert!(sluice.terminate().success());

    run.broker.delete_topic(&run.scenario.topic).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    run.broker.create_topic(&run.scenario.topic, 1).await;
    run.produce(1_000..1_400).await;

    let sluice = run.start();
    let log_path = sluice.log.clone();
    let status = sluice.wait_for_exit(Duration::from_secs(60));
    assert!(!status.success(), "{status}");
    let log = std::fs::read_to_string(log_path).unwrap_or_default();
    assert!(log.contains("was deleted and created again"), "{log}");
    assert_eq!(
        run.stats().await.rows,
        300,
        "nothing of the new log was written"
    );

    let mut again = Scenario::new(1);
    again.connector = run.scenario.connector.clone();
    again.topic = run.scenario.topic.clone();
    again.group = run.scenario.group.clone();
    again.table = run.scenario.table.clone();
    again.guarantee = "exactly_once, on_offset_out_of_range: earliest";
    std::fs::write(&run.config, again.yaml(&run.broker.bootstrap, &run.db)).expect("config");
    let sluice = run.start();
    let stats = run.wait_for_rows(700, 60).await;
    assert!(sluice.terminate().success());
    assert_eq!((stats.rows, stats.distinct), (700, 700), "{stats:?}");
}
for_each_database!(a_topic_created_again_is_not_resumed_in_silence: sqlite = Sqlite);
