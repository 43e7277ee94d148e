//! Pipeline throughput: 100,000 word events from a real broker into each database, through
//! `sluice run`, with two baselines measured in the same run on the same records:
//!
//! - source ceiling: a bare librdkafka consumer reading the topic, no sink;
//! - sink ceiling: the same rows written by `Sink::write` in 5,000-row batches, no Kafka.
//!
//! Run: `scripts/bench.sh` (or `cargo bench -p sluice --bench pipeline`). Needs the test
//! broker (see tests/e2e/harness) and the local PostgreSQL and MariaDB. `BENCH_RECORDS` sets N.

#[path = "../../tests/e2e/harness/mod.rs"]
mod harness;

use std::time::{Duration, Instant};

use harness::{Backend, Broker, Scenario, SluiceProcess, TestDb};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use sluice::map::{RowOp, SqlValue};
use sluice::sink::{OffsetAdvance, Sink, WriteBatch};

fn records() -> u64 {
    std::env::var("BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

fn consume_all(brokers: &str, topic: &str, n: u64) -> Duration {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", harness::unique("bench"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .set("queued.min.messages", "200000")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let started = Instant::now();
    let mut seen = 0;
    while seen < n && started.elapsed() < Duration::from_secs(300) {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
            seen += 1;
        }
    }
    started.elapsed()
}

async fn sink_only(db: &TestDb, n: u64) -> Duration {
    let scenario = Scenario::new(1);
    let config = scenario.config("unused:9092", db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    sink.prepare().await.expect("prepare");
    let started = Instant::now();
    let mut expected = None;
    for chunk in (0..n as i64).collect::<Vec<_>>().chunks(5000) {
        let ops = chunk
            .iter()
            .map(|&uid| {
                RowOp::Write(vec![
                    SqlValue::Int(uid),
                    SqlValue::Text(format!("w{}", uid % 97)),
                    SqlValue::Timestamp(
                        chrono::DateTime::from_timestamp_millis(1_700_000_000_000 + uid)
                            .expect("ts")
                            .naive_utc(),
                    ),
                    SqlValue::Int(0),
                    SqlValue::Int(uid),
                ])
            })
            .collect();
        let next = chunk[chunk.len() - 1] + 1;
        let batch = WriteBatch {
            ops,
            offsets: vec![OffsetAdvance {
                topic: scenario.topic.clone(),
                partition: 0,
                expected,
                next,
            }],
            ..WriteBatch::default()
        };
        sink.write(&batch).await.expect("write");
        expected = Some(next);
    }
    let elapsed = started.elapsed();
    sink.close().await;
    elapsed
}

fn rate(n: u64, d: Duration) -> String {
    format!(
        "{:>9.0} records/s ({:.2} s)",
        n as f64 / d.as_secs_f64(),
        d.as_secs_f64()
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n = records();
    let broker = Broker::start();
    println!("pipeline benchmark: {n} word events, 4 partitions, batches of 5000, 2 tasks");
    for kind in [Backend::Sqlite, Backend::Postgres, Backend::MariaDb] {
        let db = TestDb::new(kind);
        let mut scenario = Scenario::new(2);
        scenario.max_records = 5000;
        broker.create_topic(&scenario.topic, 4).await;
        broker.produce(&scenario.topic, 0..n).await;

        let source = consume_all(&broker.bootstrap, &scenario.topic, n);
        let sink = sink_only(&db, n).await;

        let dir = tempfile::tempdir().expect("dir");
        let config = scenario.write(dir.path(), &broker.bootstrap, &db);
        let started = Instant::now();
        let sluice = SluiceProcess::start(&config);
        // Start-up (connect, create, join the group) is timed apart from the steady flow.
        let first = scenario
            .wait_for_rows(&broker.bootstrap, &db, 1, Duration::from_secs(120))
            .await;
        let flowing = Instant::now();
        let stats = scenario
            .wait_for_rows(&broker.bootstrap, &db, n as i64, Duration::from_secs(600))
            .await;
        let elapsed = started.elapsed();
        let steady = flowing.elapsed();
        let status = sluice.terminate();
        println!("{kind:?}:");
        println!(
            "  sluice run, end to end    {} (rows {}, duplicates {}, exit {status})",
            rate(n, elapsed),
            stats.rows,
            stats.duplicates()
        );
        println!(
            "  sluice run, after start   {} (first rows after {:.2} s)",
            rate(n - first.rows as u64, steady),
            (elapsed - steady).as_secs_f64()
        );
        println!("  baseline: bare consumer   {}", rate(n, source));
        println!("  baseline: sink alone      {}", rate(n, sink));
    }
}
