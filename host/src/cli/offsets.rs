//! `sluice offsets show|reset`: the stored positions of a connector.

use super::OffsetsAction;
use crate::server::{EXIT_FAILURE, EXIT_INVALID, load};
use crate::sink::Sink;

pub async fn offsets(action: OffsetsAction) -> u8 {
    let (path, only, reset) = match &action {
        OffsetsAction::Show { config, connector } => (config, connector.clone(), false),
        OffsetsAction::Reset { config, connector } => (config, Some(connector.clone()), true),
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
        for topic in &connector.topics {
            let result = if reset {
                sink.reset_offsets(topic).await.map(|n| {
                    println!(
                        "{} {topic}: forgot the offsets of {n} partition(s)",
                        connector.name
                    )
                })
            } else {
                sink.read_offsets(topic).await.map(|offsets| {
                    let mut offsets: Vec<_> = offsets.into_iter().collect();
                    offsets.sort();
                    for (partition, next) in offsets {
                        println!("{} {topic} {partition} {next}", connector.name);
                    }
                })
            };
            if let Err(e) = result {
                eprintln!("connector {}: {e}", connector.name);
                return EXIT_FAILURE;
            }
        }
        sink.close().await;
        // The group's committed offsets (a mirror for lag tools) go too; the embedded
        // cluster of another process is not reachable from here.
        if reset && !config.kafka.is_embedded() {
            let (kafka, connector_config) = (config.kafka.clone(), connector.clone());
            let moved = tokio::task::spawn_blocking(move || {
                crate::kafka::group::reset_group_offsets(&kafka, &kafka.brokers, &connector_config)
            })
            .await
            .unwrap_or_else(|_| Err(rdkafka::error::KafkaError::Canceled));
            match moved {
                Ok(n) => println!(
                    "{}: moved the Kafka group {}'s committed offsets of {n} partition(s) to where the connector starts",
                    connector.name,
                    connector.group_id()
                ),
                Err(e) => eprintln!(
                    "{}: the Kafka group {}'s committed offsets stay ({e}); stop the connector (sluice stop) and reset again to clear them",
                    connector.name,
                    connector.group_id()
                ),
            }
        }
    }
    0
}
