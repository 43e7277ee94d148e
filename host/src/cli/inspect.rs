//! `sluice inspect` and `sluice dry-run`: records read through the seek-consumer pool,
//! printed as they are, or run through a connector without writing anything.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use clap::ValueEnum;

use super::{EXIT_FAILURE, EXIT_INVALID, load};
use crate::config::{Config, DeadLetterDestination};
use crate::metrics::Metrics;
use crate::pool::{ConsumerPool, ReadError, Start};
use crate::record::{Incoming, Record};
use crate::sink::Sink;

/// How long a read waits for the records the log says it has.
const READ_WAIT: Duration = Duration::from_secs(10);

/// `sluice inspect --format`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum InspectFormat {
    /// One JSON object per record: what `sluice plugin test --input` reads.
    Jsonl,
    /// A table for people.
    Table,
}

/// `sluice dry-run --format`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum DryRunFormat {
    /// One line per record.
    Text,
    /// One JSON object per record.
    Json,
}

/// Where a dry run's records come from.
pub enum DryRunSource {
    Topic {
        topic: Option<String>,
        partition: i32,
        offset: Option<i64>,
    },
    DeadLetters,
}

/// The pool for the file's cluster; the embedded cluster lives in another process.
pub(super) fn pool_for(path: &Path, config: &Config) -> Result<Arc<ConsumerPool>, u8> {
    if config.kafka.is_embedded() {
        eprintln!(
            "{}: kafka.brokers is embedded, a cluster that lives inside `sluice run` only; inspect, dry-run and verify read a real cluster",
            path.display()
        );
        return Err(EXIT_INVALID);
    }
    Ok(ConsumerPool::new(
        &config.kafka,
        &config.kafka.brokers,
        &config.pool,
        &Metrics::new(),
    ))
}

pub(super) fn read_failed(error: &ReadError) -> u8 {
    eprintln!("{error}");
    if error.is_usage() {
        EXIT_INVALID
    } else {
        EXIT_FAILURE
    }
}

pub async fn inspect(
    path: &Path,
    topic: &str,
    partition: Option<i32>,
    start: Start,
    limit: usize,
    format: InspectFormat,
) -> u8 {
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let pool = match pool_for(path, &config) {
        Ok(pool) => pool,
        Err(code) => return code,
    };
    let partitions = match partition {
        Some(p) => vec![p],
        None => match pool.partitions(topic).await {
            Ok(all) => all,
            Err(e) => return read_failed(&e),
        },
    };
    if let InspectFormat::Table = format {
        println!(
            "{:>9}  {:>10}  {:<24}  {:<16}  {:<40}  headers",
            "partition", "offset", "timestamp", "key", "value"
        );
    }
    let mut code = 0;
    for partition in partitions {
        match pool.read(topic, partition, start, limit, READ_WAIT).await {
            Ok(records) => {
                for incoming in &records {
                    match format {
                        InspectFormat::Jsonl => {
                            println!("{}", sluice_transform::record_to_json(&incoming.record))
                        }
                        InspectFormat::Table => println!("{}", table_line(&incoming.record)),
                    }
                }
            }
            Err(e) => code = read_failed(&e),
        }
    }
    pool.close();
    code
}

/// One record as a table row: bytes shown as text where they are UTF-8, shortened.
fn table_line(record: &Record) -> String {
    let show = |bytes: Option<&[u8]>, width: usize| match bytes {
        None => "null".to_string(),
        Some(b) => {
            let text = match std::str::from_utf8(b) {
                Ok(text) => format!("{text:?}"),
                Err(_) => format!("<{} bytes>", b.len()),
            };
            if text.chars().count() > width {
                format!("{}…", text.chars().take(width - 1).collect::<String>())
            } else {
                text
            }
        }
    };
    let timestamp = record
        .timestamp
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or("-".to_string(), |t| {
            t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
        });
    let headers: Vec<String> = record
        .headers
        .iter()
        .map(|(name, value)| format!("{name}={}", show(value.as_deref(), 40)))
        .collect();
    format!(
        "{:>9}  {:>10}  {:<24}  {:<16}  {:<40}  {}",
        record.partition,
        record.offset,
        timestamp,
        show(record.key.as_deref(), 16),
        show(record.value.as_deref(), 40),
        headers.join(" ")
    )
}

pub async fn dry_run(
    path: &Path,
    name: &str,
    source: DryRunSource,
    limit: usize,
    format: DryRunFormat,
) -> u8 {
    let (config, connector) = match super::load_connector(path, name) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let connector = &config.connectors[connector];
    let inputs: Vec<Incoming> = match source {
        DryRunSource::DeadLetters => {
            if !matches!(connector.errors.dlq, Some(DeadLetterDestination::Table(_))) {
                eprintln!(
                    "connector {name}: --dead-letters reads the dead-letter table, and errors.dlq.table is not set"
                );
                return EXIT_INVALID;
            }
            let sink = match Sink::connect(connector).await {
                Ok(sink) => sink,
                Err(e) => {
                    eprintln!("connector {name}: {e}");
                    return EXIT_FAILURE;
                }
            };
            let stored = sink.read_dead_letters(None, limit).await;
            sink.close().await;
            match stored {
                Ok(stored) => stored.iter().map(|s| s.incoming()).collect(),
                Err(e) => {
                    eprintln!("connector {name}: {e}");
                    return EXIT_FAILURE;
                }
            }
        }
        DryRunSource::Topic {
            topic,
            partition,
            offset,
        } => {
            let pool = match pool_for(path, &config) {
                Ok(pool) => pool,
                Err(code) => return code,
            };
            let topic = match (topic, &connector.topics_regex) {
                (Some(topic), _) => topic,
                (None, Some(pattern)) => {
                    pool.close();
                    eprintln!(
                        "connector {}: it reads the topics matching {}: name one with --topic",
                        connector.name,
                        pattern.as_str()
                    );
                    return EXIT_INVALID;
                }
                (None, None) => connector.topics.first().cloned().unwrap_or_default(),
            };
            let start = offset.map_or(Start::FromEnd(limit as i64), Start::Offset);
            let read = pool.read(&topic, partition, start, limit, READ_WAIT).await;
            pool.close();
            match read {
                Ok(records) => records,
                Err(e) => return read_failed(&e),
            }
        }
    };
    let engine = match super::plugin_engine(connector) {
        Ok(engine) => engine,
        Err(code) => return code,
    };
    let answer = match crate::deliver::dry_run::dry_run(connector, engine.as_ref(), inputs).await {
        Ok(answer) => answer,
        Err(e) => {
            eprintln!("connector {name}: {e}");
            return EXIT_FAILURE;
        }
    };
    for tried in &answer.records {
        match format {
            DryRunFormat::Text => println!("{}", tried.line()),
            DryRunFormat::Json => println!("{}", tried.to_json()),
        }
    }
    match &answer.database_not_asked {
        Some(why) => eprintln!(
            "dry-run: {} record(s); the database was not asked: {why}",
            answer.records.len()
        ),
        None => eprintln!(
            "dry-run: {} record(s); the database checked the rows in a transaction it rolled back; nothing was written",
            answer.records.len()
        ),
    }
    0
}
