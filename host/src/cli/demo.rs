//! `sluice demo`: the field's word-event pipeline, end to end, with nothing installed.
//! Word events are produced into the embedded Kafka while the connector writes them into
//! the configured database (SQLite by default); at the end the table is checked against
//! what was produced: every uid once, none missing.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::server::signals::shutdown_signal;
use crate::server::{EXIT_FAILURE, EXIT_INVALID, load, resolve_brokers};
use crate::sink::{Sink, SinkError};
use crate::supervisor::Supervisor;

/// What [`sequence_stats`] finds: how the demo (and the end-to-end tests) check a table
/// against the dense sequence of ids that was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceStats {
    pub rows: i64,
    pub distinct: i64,
    pub min: Option<i64>,
    pub max: Option<i64>,
}

impl SequenceStats {
    /// Rows beyond one per distinct value.
    pub fn duplicates(&self) -> i64 {
        self.rows - self.distinct
    }

    /// Values missing between min and max (assuming a dense sequence was produced).
    pub fn gaps(&self) -> i64 {
        match (self.min, self.max) {
            (Some(min), Some(max)) => (max - min + 1) - self.distinct,
            _ => 0,
        }
    }
}

/// Count, distinct count, minimum and maximum of an integer column of the sink's table.
pub async fn sequence_stats(sink: &Sink, column: &str) -> Result<SequenceStats, SinkError> {
    let dialect = sink.dialect();
    let c = dialect.quote_one(column);
    let sql = format!(
        "SELECT CAST(COUNT(*) AS {big}), CAST(COUNT(DISTINCT {c}) AS {big}), CAST(MIN({c}) AS {big}), CAST(MAX({c}) AS {big}) FROM {}",
        dialect.quote_table(sink.table_name()),
        big = sink.bigint_cast(),
    );
    let values = sink.query_integers(sql, 4).await?;
    Ok(SequenceStats {
        rows: values[0].unwrap_or(0),
        distinct: values[1].unwrap_or(0),
        min: values[2],
        max: values[3],
    })
}

/// Deletes every row of the sink table (the demo's fresh start).
async fn clear_table(sink: &Sink) -> Result<(), SinkError> {
    let sql = format!(
        "DELETE FROM {}",
        sink.dialect().quote_table(sink.table_name())
    );
    sink.execute_statement(&sql).await
}

const WORDS: &[&str] = &[
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
];

/// One word event as the field writes it: `#42*echo@1700000000123`. The default
/// connector's `word_parse` plugin turns it into `{"uid":42,"word":"echo","produced_at":…}`.
pub fn word_event(uid: u64, now_ms: i64) -> String {
    format!(
        "#{uid}*{}@{now_ms}",
        WORDS[(uid as usize * 7 + 3) % WORDS.len()]
    )
}

/// The same event as JSON, for a connector without transforms.
pub fn word_event_json(uid: u64, now_ms: i64) -> String {
    format!(
        "{{\"uid\":{uid},\"word\":\"{}\",\"produced_at\":{now_ms}}}",
        WORDS[(uid as usize * 7 + 3) % WORDS.len()]
    )
}

pub async fn run(path: &Path, records: u64, partitions: i32) -> u8 {
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    if !config.kafka.is_embedded() {
        eprintln!(
            "{}: sluice demo runs on the embedded Kafka: set kafka.brokers: embedded (the default connectors.yaml does)",
            path.display()
        );
        return EXIT_INVALID;
    }
    let Some(connector) = config.connectors.first() else {
        return EXIT_INVALID;
    };
    let Some(key_column) = connector.sink.key_columns().first().cloned() else {
        eprintln!(
            "{}: the demo checks uids: connectors[0].sink.key must name the uid column",
            path.display()
        );
        return EXIT_INVALID;
    };
    if connector.sink.fixed_table().is_none() {
        eprintln!(
            "{}: the demo checks one table: connectors[0].sink.table must name it (not a template)",
            path.display()
        );
        return EXIT_INVALID;
    }
    let Some(topic) = connector.topics.first().cloned() else {
        eprintln!(
            "{}: the demo produces into connectors[0].topics: name a topic (not topics_regex)",
            path.display()
        );
        return EXIT_INVALID;
    };
    let (brokers, _embedded) = match resolve_brokers(&config, partitions) {
        Ok(resolved) => resolved,
        Err(code) => return code,
    };

    // The embedded cluster is new: offsets and rows of an earlier demo are stale.
    let sink = match Sink::connect(connector).await {
        Ok(sink) => sink,
        Err(e) => {
            eprintln!("{e}");
            return EXIT_FAILURE;
        }
    };
    let fresh = async {
        sink.prepare().await?;
        for t in &connector.topics {
            sink.control().reset_offsets(t).await?;
        }
        clear_table(&sink).await
    };
    if let Err(e) = fresh.await {
        eprintln!("connector {}: {e}", connector.name);
        return EXIT_FAILURE;
    }

    let supervisor = match Supervisor::start(&config, &brokers).await {
        Ok(supervisor) => supervisor,
        Err(e) => {
            eprintln!("{e}");
            return EXIT_FAILURE;
        }
    };
    let metrics = supervisor.connectors()[0].metrics.clone();

    let raw = !connector.transforms.is_empty();
    let produced = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (produced, stop, brokers, topic) = (
            produced.clone(),
            stop.clone(),
            brokers.clone(),
            topic.clone(),
        );
        std::thread::spawn(move || produce(&brokers, &topic, records, raw, &produced, &stop))
    };

    let through = if raw {
        let names: Vec<&str> = connector
            .transforms
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        format!(" through {}", names.join(" -> "))
    } else {
        String::new()
    };
    println!(
        "demo: producing {records} word events to {topic} ({partitions} partitions){through} -> {} table {}",
        connector.sink.url,
        connector.sink.table_label()
    );
    let started = Instant::now();
    let mut last = (Instant::now(), 0u64);
    let mut last_progress = Instant::now();
    // The rate is the drain's: from the first commit (seen within CHECK) to the last.
    const CHECK: Duration = Duration::from_millis(50);
    let mut first_commit: Option<(Instant, u64)> = None;
    let mut drained_at: Option<Instant> = None;
    let interrupted = {
        let signal = shutdown_signal();
        let finished = supervisor.all_failed();
        tokio::pin!(signal, finished);
        loop {
            tokio::select! {
                _ = &mut signal => break true,
                _ = &mut finished => break false,
                _ = tokio::time::sleep(CHECK) => {}
            }
            let committed = metrics.committed.get();
            if committed > 0 && first_commit.is_none() {
                first_commit = Some((Instant::now(), committed));
            }
            if committed >= records {
                drained_at = Some(Instant::now());
            }
            if drained_at.is_none() && last.0.elapsed() < Duration::from_secs(1) {
                continue;
            }
            let made = produced.load(Ordering::Relaxed);
            let rate = (committed - last.1) as f64 / last.0.elapsed().as_secs_f64();
            if committed != last.1 {
                last_progress = Instant::now();
            }
            last = (Instant::now(), committed);
            println!(
                "demo: produced {made:>8}  committed {committed:>8}  {rate:>9.0} records/s  lag {:>7}",
                made.saturating_sub(committed)
            );
            if drained_at.is_some() {
                break false;
            }
            if last_progress.elapsed() > Duration::from_secs(60) {
                eprintln!("demo: no progress for 60 s; stopping");
                break false;
            }
        }
    };
    stop.store(true, Ordering::Relaxed);
    let produce_result = producer.join();
    let failures = supervisor.shutdown().await;
    for failure in &failures {
        eprintln!("{failure}");
    }
    let made = produced.load(Ordering::Relaxed);
    let stats = match sequence_stats(&sink, &key_column).await {
        Ok(stats) => stats,
        Err(e) => {
            eprintln!("demo: cannot check the table: {e}");
            return EXIT_FAILURE;
        }
    };
    sink.close().await;
    let committed = metrics.committed.get();
    if let (Some((first, at_first)), Some(last)) = (first_commit, drained_at) {
        // What committed by the first look is left out of the rate, with its time; when
        // that was everything (a small run), the rate is over the whole run.
        let (counted, from, since) = if committed > at_first {
            (committed - at_first, first, "the first commit")
        } else {
            (committed, started, "the start")
        };
        let drain = last.duration_since(from).as_secs_f64().max(0.001);
        println!(
            "demo: {committed} records committed; {drain:.1} s from {since} to the last commit ({:.0} records/s)",
            counted as f64 / drain
        );
    } else {
        println!("demo: {committed} records committed");
    }
    let complete = stats.rows as u64 == made
        && stats.duplicates() == 0
        && stats.gaps() == 0
        && (made == 0 || stats.min == Some(0));
    println!(
        "demo: table {}: {} rows, {} distinct {key_column}, {} duplicates, {} gaps (produced {made})",
        connector.sink.table_label(),
        stats.rows,
        stats.distinct,
        stats.duplicates(),
        stats.gaps()
    );
    if let Ok(Err(e)) = produce_result {
        eprintln!("demo: producer: {e}");
        return EXIT_FAILURE;
    }
    if complete && failures.is_empty() && !interrupted {
        println!("demo: VERDICT: exactly once: every event landed once, none lost");
        0
    } else if interrupted {
        println!(
            "demo: interrupted; the table holds what was committed so far, without duplicates: {}",
            stats.duplicates() == 0
        );
        EXIT_FAILURE
    } else {
        println!("demo: VERDICT: FAILED: the table does not match what was produced");
        EXIT_FAILURE
    }
}

/// Produces `records` events with sequential uids, keyed by uid, as fast as the embedded
/// cluster takes them.
fn produce(
    brokers: &str,
    topic: &str,
    records: u64,
    raw: bool,
    produced: &AtomicU64,
    stop: &AtomicBool,
) -> Result<(), KafkaError> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "5")
        .set("enable.idempotence", "true")
        .create()?;
    for uid in 0..records {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let now = chrono::Utc::now().timestamp_millis();
        let value = if raw {
            word_event(uid, now)
        } else {
            word_event_json(uid, now)
        };
        let key = uid.to_string();
        let mut record = BaseRecord::to(topic).key(&key).payload(&value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(10));
                }
                Err((e, _)) => return Err(e),
            }
        }
        produced.fetch_add(1, Ordering::Relaxed);
        if uid % 1000 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(Duration::from_secs(30))
}
