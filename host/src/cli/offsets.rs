//! `sluice offsets show|reset`: the stored positions of a connector. A reset runs only
//! while the connector runs nowhere (the same check as the admin API's), and forgets with
//! the offsets what they rewind past (`crate::reset`).

use super::{OffsetsAction, OutputFormat};
use crate::config::{Config, ConnectorConfig};
use crate::reset::{ResetRequest, reset, running_anywhere};
use crate::server::{EXIT_FAILURE, EXIT_INVALID, load};
use crate::sink::{ControlStore, Sink};

pub async fn offsets(action: OffsetsAction) -> u8 {
    let (path, only, resetting, format) = match &action {
        OffsetsAction::Show {
            config,
            connector,
            format,
        } => (config, connector.clone(), false, *format),
        OffsetsAction::Reset { config, connector } => {
            (config, Some(connector.clone()), true, OutputFormat::Text)
        }
    };
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let selected: Vec<_> = config
        .connectors
        .iter()
        .filter(|c| only.as_ref().is_none_or(|n| *n == c.name))
        .collect();
    if selected.is_empty() {
        eprintln!(
            "{}: no connector named {}",
            path.display(),
            only.unwrap_or_default()
        );
        return EXIT_INVALID;
    }
    for connector in selected {
        let sink = match Sink::connect(connector).await {
            Ok(sink) => sink,
            Err(e) => {
                eprintln!("connector {}: {e}", connector.name);
                return EXIT_FAILURE;
            }
        };
        let code = if resetting {
            reset_one(&config, connector, &sink).await
        } else {
            show(connector, sink.control(), format).await
        };
        sink.close().await;
        if code != 0 {
            return code;
        }
    }
    0
}

async fn show(connector: &ConnectorConfig, control: ControlStore<'_>, format: OutputFormat) -> u8 {
    // With topics_regex: every topic it has stored offsets of.
    let topics = match &connector.topics_regex {
        None => connector.topics.clone(),
        Some(_) => match control.stored_topics().await {
            Ok(topics) => topics,
            Err(e) => {
                eprintln!("connector {}: {e}", connector.name);
                return EXIT_FAILURE;
            }
        },
    };
    for topic in &topics {
        match control.read_offsets(topic).await {
            Ok(offsets) => {
                let mut offsets: Vec<_> = offsets.into_iter().collect();
                offsets.sort();
                for (partition, next) in offsets {
                    match format {
                        OutputFormat::Text => {
                            println!("{} {topic} {partition} {next}", connector.name)
                        }
                        OutputFormat::Json => println!(
                            "{}",
                            serde_json::json!({"connector": connector.name, "topic": topic,
                                "partition": partition, "next_offset": next})
                        ),
                    }
                }
            }
            Err(e) => {
                eprintln!("connector {}: {e}", connector.name);
                return EXIT_FAILURE;
            }
        }
    }
    0
}

async fn reset_one(config: &Config, connector: &ConnectorConfig, sink: &Sink) -> u8 {
    let name = &connector.name;
    if let Err(e) = sink.prepare().await {
        eprintln!("connector {name}: {e}");
        return EXIT_FAILURE;
    }
    // The embedded cluster of another process is not reachable from here.
    let brokers = (!config.kafka.is_embedded()).then_some(config.kafka.brokers.as_str());
    match running_anywhere(&sink.control(), &config.kafka, brokers, connector, None).await {
        Ok(running) if running.is_empty() => {}
        Ok(running) => {
            eprintln!(
                "connector {name} still runs ({}): stop it everywhere first (sluice stop {name}); nothing was reset",
                running.join(", ")
            );
            return EXIT_FAILURE;
        }
        Err(e) => {
            eprintln!("{e}; nothing was reset");
            return EXIT_FAILURE;
        }
    }
    let report = match reset(
        sink.control(),
        &config.kafka,
        brokers,
        connector,
        &ResetRequest::All,
    )
    .await
    {
        Ok(report) => report,
        Err(e) => {
            eprintln!("connector {name}: {e}");
            return EXIT_FAILURE;
        }
    };
    let f = &report.forgotten;
    println!(
        "{name}: forgot the offsets of {} partition(s), {} producer id(s) and {} redrive marker(s); {} dead letter(s) of replayed records stay until their records land",
        f.offsets, f.dedup_ids, f.redrive_markers, f.dead_letters_to_replay
    );
    match report.kafka_group {
        Ok(n) => {
            println!(
                "{name}: moved the Kafka group {}'s committed offsets of {n} partition(s) to where the connector starts",
                connector.group_id()
            );
            0
        }
        Err(e) => {
            eprintln!(
                "{name}: the Kafka group {}'s committed offsets stay ({e})",
                connector.group_id()
            );
            if connector.delivery.guarantee == crate::config::Guarantee::AtLeastOnce {
                // Where such a connector resumes: the reset is not done.
                EXIT_FAILURE
            } else {
                0
            }
        }
    }
}
