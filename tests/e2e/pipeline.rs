//! End-to-end: a real broker, `sluice run` processes, and each database. Every test body is
//! written once and run against PostgreSQL, MariaDB and SQLite.

use crate::harness;

use std::time::Duration;

use harness::{Backend, Pipeline, Scenario, assert_exactly};

const PARTITIONS: i32 = 4;

fn with_word_parse(mut scenario: Scenario, config: &str) -> Scenario {
    scenario.transforms = format!(
        "    transforms:\n      - name: parse\n        plugin: {}\n{config}",
        sluice_transform::example_plugin_path("word_parse").display()
    );
    scenario
}

/// N records with sequential ids over several partitions: exactly N rows, each id once.
async fn exactly_n_rows(db: Backend) {
    const N: u64 = 20_000;
    let run = Pipeline::new(db, Scenario::new(2), PARTITIONS).await;
    run.produce(0..N).await;
    let sluice = run.start();
    let stats = run.wait_for_rows(N as i64, 120).await;
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
    assert_exactly(stats, N as i64);
    // Nothing more arrives after a clean stop either.
    assert_exactly(run.stats().await, N as i64);
}
for_each_database!(exactly_n_rows);

/// Stopped mid-stream by SIGTERM and by SIGKILL, started again each time: it resumes from
/// the stored offsets, with no duplicate and no gap.
async fn resumes_after_sigterm_and_sigkill(db: Backend) {
    const N: u64 = 30_000;
    let mut scenario = Scenario::new(1);
    scenario.max_records = 200;
    let run = Pipeline::new(db, scenario, PARTITIONS).await;

    run.produce(0..N / 3).await;
    let first = run.start();
    let seen = run.wait_for_rows(1, 60).await;
    assert!(seen.rows > 0, "no rows after 60 s");
    first.kill();
    tokio::time::sleep(harness::EVICTION_WAIT).await;
    let after_kill = run.stats().await;
    assert_eq!(after_kill.duplicates(), 0);

    run.produce(N / 3..2 * N / 3).await;
    let second = run.start();
    run.wait_for_rows(after_kill.rows + 1, 60).await;
    let status = second.terminate();
    assert!(status.success(), "SIGTERM exit: {status}");

    run.produce(2 * N / 3..N).await;
    let third = run.start();
    let stats = run.wait_for_rows(N as i64, 120).await;
    assert!(third.terminate().success());
    assert_exactly(stats, N as i64);
}
for_each_database!(resumes_after_sigterm_and_sigkill: mariadb = MariaDb);

/// `sink.synchronous_commit: off` (PostgreSQL, exactly_once): the same pipeline, through a
/// SIGKILL, each row once. (What it changes, a database crash losing the last commits,
/// rows and offsets together, cannot be provoked on the shared server here.)
async fn asynchronous_commit_resumes_after_sigkill(db: Backend) {
    const N: u64 = 20_000;
    let mut scenario = Scenario::new(1);
    scenario.max_records = 200;
    scenario.extra_sink = "      synchronous_commit: off\n".into();
    let run = Pipeline::new(db, scenario, PARTITIONS).await;
    run.produce(0..N / 2).await;
    let first = run.start();
    let seen = run.wait_for_rows(1, 60).await;
    assert!(seen.rows > 0, "no rows after 60 s");
    first.kill();
    tokio::time::sleep(harness::EVICTION_WAIT).await;
    run.produce(N / 2..N).await;
    let second = run.start();
    let stats = run.wait_for_rows(N as i64, 120).await;
    assert!(second.terminate().success());
    assert_exactly(stats, N as i64);
}
for_each_database!(asynchronous_commit_resumes_after_sigkill: postgres = Postgres);

/// Two processes in one group share the partitions; one leaves; the other takes over.
async fn two_processes_share_then_hand_over(db: Backend) {
    const N: u64 = 20_000;
    let mut scenario = Scenario::new(1);
    scenario.max_records = 500;
    let run = Pipeline::new(db, scenario, PARTITIONS).await;
    let a = run.start();
    let b = run.start();
    run.produce(0..N / 2).await;
    run.wait_for_rows((N / 2) as i64, 120).await;
    assert!(a.terminate().success());
    run.produce(N / 2..N).await;
    let stats = run.wait_for_rows(N as i64, 120).await;
    assert!(b.terminate().success());
    assert_exactly(stats, N as i64);
}
for_each_database!(two_processes_share_then_hand_over: sqlite = Sqlite);

/// A task whose buffer is full behind a slow write holds (takes no records) instead of
/// pausing; it still serves its group's callbacks, so a second process that joins gets
/// its partitions within seconds, not after the backlog, and every record lands once.
async fn a_holding_task_serves_a_rebalance(db: Backend) {
    const N: u64 = 6_000;
    let mut scenario = Scenario::new(1);
    scenario.max_records = 200;
    let run = Pipeline::new(db, scenario, PARTITIONS).await;
    run.produce(0..N).await;
    let table = &run.scenario.table;
    let sink = sluice::sink::Sink::connect(
        &run.scenario
            .config(&run.broker.bootstrap, &run.db)
            .connectors[0],
    )
    .await
    .expect("connect");
    sink.prepare().await.expect("create the table");
    // Each write takes 1 s: batches pile up behind it and the task holds.
    harness::slow_writes(&sink, table, 1.0).await;
    let a = run.start();
    assert!(run.wait_for_rows(1, 60).await.rows > 0, "no rows");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let joined = std::time::Instant::now();
    let b = run.start();
    let assigned = loop {
        let log = std::fs::read_to_string(&b.log).unwrap_or_default();
        if log.contains("partitions assigned") {
            break joined.elapsed();
        }
        assert!(
            joined.elapsed() < Duration::from_secs(30),
            "the second process got no partitions while the first held: {log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The first task's revoke waits for its write in flight (1 s) and the join round.
    assert!(
        assigned < Duration::from_secs(15),
        "assigned after {assigned:?}"
    );
    sink.execute_statement(&format!("DROP TRIGGER {table}_slow ON {table}"))
        .await
        .expect("drop trigger");
    sink.close().await;
    let stats = run.wait_for_rows(N as i64, 120).await;
    assert!(a.terminate().success());
    assert!(b.terminate().success());
    assert_exactly(stats, N as i64);
}
// slow_writes is a PostgreSQL trigger.
for_each_database!(a_holding_task_serves_a_rebalance: postgres = Postgres);

/// The cooperative-sticky protocol: two processes, one leaves mid-stream.
async fn cooperative_sticky_hand_over(db: Backend) {
    const N: u64 = 10_000;
    let mut scenario = Scenario::new(1);
    scenario.max_records = 500;
    scenario.extra_kafka = "    partition.assignment.strategy: cooperative-sticky".into();
    let run = Pipeline::new(db, scenario, PARTITIONS).await;
    let a = run.start();
    let b = run.start();
    run.produce(0..N / 2).await;
    run.wait_for_rows((N / 2) as i64, 120).await;
    // A graceful leave here: after a SIGKILL, Tansu 0.6.0 revoked the survivor's
    // partitions as lost and did not assign them again within two minutes.
    assert!(b.terminate().success());
    run.produce(N / 2..N).await;
    let stats = run.wait_for_rows(N as i64, 120).await;
    assert!(a.terminate().success());
    assert_exactly(stats, N as i64);
}
for_each_database!(cooperative_sticky_hand_over: postgres = Postgres);

/// The field's raw word events through the `word_parse` plugin: exactly N rows.
async fn word_parse_plugin_end_to_end(db: Backend) {
    const N: u64 = 10_000;
    let scenario = with_word_parse(Scenario::new(2), "        config: { separator: \"*\" }\n");
    let run = Pipeline::new(db, scenario, PARTITIONS).await;
    run.broker.produce_raw(&run.scenario.topic, 0..N).await;
    let sluice = run.start();
    let stats = run.wait_for_rows(N as i64, 120).await;
    assert!(sluice.terminate().success());
    assert_exactly(stats, N as i64);
}
for_each_database!(word_parse_plugin_end_to_end: mariadb = MariaDb);

/// A record the plugin rejects stops the task in its failed state, with the record's
/// coordinates and the plugin's message; nothing after it is written and the process exits 1.
async fn rejected_record_fails_the_task(db: Backend) {
    let run = Pipeline::new(db, with_word_parse(Scenario::new(1), ""), 1).await;
    let topic = &run.scenario.topic;
    run.broker.produce_raw(topic, 0..100).await;
    run.broker
        .produce_with(topic, 100..101, |_| "not a word event".to_string())
        .await;
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["run", "--config"])
        .arg(&run.config)
        .output()
        .expect("run sluice");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{topic}/0@100")) && stderr.contains("malformed word event"),
        "{stderr}"
    );
    // The batch holding the bad record was not written, and its offsets did not move.
    let stats = run.stats().await;
    assert!(stats.rows <= 100, "{stats:?}");
}
for_each_database!(rejected_record_fails_the_task: sqlite = Sqlite);

/// At-least-once: offsets go to the Kafka group, not the database; a restart resumes from
/// the group's committed offsets (upserts make any redelivered row land once).
async fn at_least_once_resumes_from_the_group(db: Backend) {
    const N: u64 = 10_000;
    let mut scenario = Scenario::new(1);
    scenario.guarantee = "at_least_once";
    let run = Pipeline::new(db, scenario, PARTITIONS).await;
    run.produce(0..N / 2).await;
    let first = run.start();
    run.wait_for_rows((N / 2) as i64, 120).await;
    assert!(first.terminate().success());
    run.produce(N / 2..N).await;
    let second = run.start();
    let stats = run.wait_for_rows(N as i64, 120).await;
    assert!(second.terminate().success());
    assert_exactly(stats, N as i64);

    let config = run.scenario.config(&run.broker.bootstrap, &run.db);
    let sink = sluice::sink::Sink::connect(&config.connectors[0])
        .await
        .unwrap();
    let stored = sink
        .control()
        .read_offsets(&run.scenario.topic)
        .await
        .unwrap();
    assert!(
        stored.is_empty(),
        "at_least_once stores no offsets in the database: {stored:?}"
    );
    sink.close().await;
    // The group holds them: every partition committed up to its end.
    let total = group_committed(&run);
    assert_eq!(total, N as i64, "committed offsets");
}
for_each_database!(at_least_once_resumes_from_the_group: postgres = Postgres);

/// A client of the run's group that does not join it: it reads and commits offsets.
fn outside_the_group(run: &Pipeline) -> rdkafka::consumer::BaseConsumer {
    rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", &run.broker.bootstrap)
        .set("group.id", &run.scenario.group)
        .create()
        .unwrap()
}

/// The sum of the offsets the run's group has committed in Kafka, over its partitions.
fn group_committed(run: &Pipeline) -> i64 {
    use rdkafka::consumer::Consumer;
    let consumer = outside_the_group(run);
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(&run.scenario.topic, p);
    }
    let committed = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .unwrap();
    committed
        .elements()
        .iter()
        .map(|e| e.offset().to_raw().unwrap_or(0).max(0))
        .sum()
}

/// Exactly-once: the database holds the offsets, and the Kafka group shows the progress
/// too, so that `kafka-consumer-groups --describe`, Burrow and KEDA see the lag.
async fn exactly_once_shows_progress_to_the_group(db: Backend) {
    const N: u64 = 5_000;
    let run = Pipeline::new(db, Scenario::new(1), PARTITIONS).await;
    run.produce(0..N).await;
    let sluice = run.start();
    let stats = run.wait_for_rows(N as i64, 120).await;
    assert_exactly(stats, N as i64);
    // The group's offsets follow the database's, asynchronously.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut total = group_committed(&run);
    while total < N as i64 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        total = group_committed(&run);
    }
    assert!(sluice.terminate().success());
    assert_eq!(
        total, N as i64,
        "the group shows every partition at its end"
    );

    // The group's copy moved behind sluice's back (an operator's reset with
    // `kafka-consumer-groups`, a restored cluster; or, as CI once hit, a partition handed
    // to a task that reads nothing more before the previous owner's mirror went): the
    // next owner of each partition shows the database's offsets, with no record to read.
    commit_group(&run, 0);
    assert_eq!(group_committed(&run), 0);
    let sluice = run.start();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while group_committed(&run) < N as i64 {
        assert!(
            std::time::Instant::now() < deadline,
            "the group never showed the database's offsets: {}",
            group_committed(&run)
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(sluice.terminate().success());
}
for_each_database!(exactly_once_shows_progress_to_the_group: postgres = Postgres);

/// Commits `next` for every partition of the run's topic to its group, from outside it.
fn commit_group(run: &Pipeline, next: i64) {
    use rdkafka::consumer::{CommitMode, Consumer};
    let consumer = outside_the_group(run);
    let mut tpl = rdkafka::TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(&run.scenario.topic, p, rdkafka::Offset::Offset(next))
            .unwrap();
    }
    consumer.commit(&tpl, CommitMode::Sync).unwrap();
}

/// Topics written with each compression codec a producer may use (gzip, snappy, lz4,
/// zstd), in batches of hundreds as real producers write them: every record lands, once.
///
/// Worked around here, both faults of Tansu 0.6.0: its SQLite storage cannot serve
/// snappy batches (it closes the connection with `UnexpectedType("Snappy")`), and its
/// memory storage answers a fetch that starts inside a batch with the next batch. So the
/// broker keeps its log in memory, and `max_records` is large enough that backpressure
/// never pauses (a resume would fetch from inside a batch): the consumer reads each batch
/// from its start.
async fn every_compression_codec(db: Backend) {
    const PER_CODEC: u64 = 1_500;
    const CODECS: [&str; 4] = ["gzip", "snappy", "lz4", "zstd"];
    let mut scenario = Scenario::new(1);
    scenario.max_records = 5_000;
    let run = Pipeline::new(db, scenario, 2).await;
    for (i, codec) in CODECS.iter().enumerate() {
        let start = i as u64 * PER_CODEC;
        harness::produce_compressed(
            &run.broker.bootstrap,
            &run.scenario.topic,
            start..start + PER_CODEC,
            codec,
        )
        .await;
    }
    let total = (CODECS.len() as u64 * PER_CODEC) as i64;
    let sluice = run.start();
    let stats = run.wait_for_rows(total, 120).await;
    assert!(sluice.terminate().success());
    assert_exactly(stats, total);
}
for_each_database!(every_compression_codec: sqlite = Sqlite, postgres = Postgres);

/// Two topics whose names differ only in case, read by one connector: each keeps its own
/// stored offsets (MySQL and MariaDB compare text case-insensitively unless told not to,
/// and then both topics shared one row and one of them lost records).
async fn topics_that_differ_only_in_case(db: Backend) {
    const PER_TOPIC: u64 = 3_000;
    let broker = harness::Broker::start();
    let upper = format!("Case{}", harness::unique("words"));
    let lower = upper.to_lowercase();
    broker.create_topic(&upper, 2).await;
    broker.create_topic(&lower, 2).await;
    // Half of each topic for the first process, the rest once it has stopped: the second
    // start reads both topics' stored offsets, and has records to write after it (a
    // process that finds nothing to do may be stopped before it handles signals).
    let half = PER_TOPIC / 2;
    broker.produce(&upper, 0..half).await;
    broker.produce(&lower, PER_TOPIC..PER_TOPIC + half).await;
    let db = harness::TestDb::new(db);
    let mut scenario = Scenario::new(1);
    scenario.max_records = 500;
    scenario.topic = format!("{upper}, {lower}");
    let dir = tempfile::tempdir().expect("temp dir");
    let config = scenario.write(dir.path(), &broker.bootstrap, &db);
    // Stopped and started again half way, so the second start reads both topics' offsets.
    let first = harness::SluiceProcess::start(&config);
    scenario
        .wait_for_rows(
            &broker.bootstrap,
            &db,
            PER_TOPIC as i64,
            Duration::from_secs(120),
        )
        .await;
    assert!(first.terminate().success());
    broker.produce(&upper, half..PER_TOPIC).await;
    broker
        .produce(&lower, PER_TOPIC + half..2 * PER_TOPIC)
        .await;
    let second = harness::SluiceProcess::start(&config);
    let stats = scenario
        .wait_for_rows(
            &broker.bootstrap,
            &db,
            2 * PER_TOPIC as i64,
            Duration::from_secs(120),
        )
        .await;
    assert!(second.terminate().success());
    assert_exactly(stats, 2 * PER_TOPIC as i64);
    let sink = sluice::sink::Sink::connect(&scenario.config(&broker.bootstrap, &db).connectors[0])
        .await
        .expect("connect");
    for topic in [&upper, &lower] {
        let stored = sink.control().read_offsets(topic).await.expect("offsets");
        let total: i64 = stored.values().sum();
        assert_eq!(total, PER_TOPIC as i64, "{topic}: {stored:?}");
    }
    sink.close().await;
}
for_each_database!(topics_that_differ_only_in_case);

/// A stop finishes the batch in flight and leaves; the batches buffered behind it are not
/// written one after another (each takes 2 s here: a statement trigger sleeps), so the stop
/// takes about one batch, not the backlog. The next start reads the rest exactly once.
async fn a_stop_finishes_only_the_batch_in_flight(db: Backend) {
    const N: u64 = 4_000;
    let mut scenario = Scenario::new(1);
    scenario.max_records = 200;
    let run = Pipeline::new(db, scenario, 1).await;
    run.produce(0..N).await;
    let table = &run.scenario.table;
    // The table exists before sluice starts, with a trigger that makes each write slow.
    let sink = sluice::sink::Sink::connect(
        &run.scenario
            .config(&run.broker.bootstrap, &run.db)
            .connectors[0],
    )
    .await
    .expect("connect");
    sink.prepare().await.expect("create the table");
    harness::slow_writes(&sink, table, 2.0).await;
    let sluice = run.start();
    let first = run.wait_for_rows(1, 60).await;
    assert!(first.rows > 0, "no rows");
    // By now the buffer holds several batches behind the one being written.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stopping = std::time::Instant::now();
    assert!(sluice.terminate().success());
    let took = stopping.elapsed();
    let after_stop = run.stats().await;
    // Before the fix the stop wrote every buffered batch: 4 or more times 2 s.
    assert!(
        took < Duration::from_secs(6),
        "the stop took {took:?} and left {after_stop:?}"
    );
    assert!(
        after_stop.rows <= first.rows + 2 * 200,
        "{after_stop:?} after {first:?}"
    );
    sink.execute_statement(&format!("DROP TRIGGER {table}_slow ON {table}"))
        .await
        .expect("drop trigger");
    sink.close().await;
    let again = run.start();
    let stats = run.wait_for_rows(N as i64, 120).await;
    assert!(again.terminate().success());
    assert_exactly(stats, N as i64);
}
for_each_database!(a_stop_finishes_only_the_batch_in_flight: postgres = Postgres);
