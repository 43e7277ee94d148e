//! `sluice dlq redrive`: dead letters written again, from a table or a topic.

use std::path::Path;

use super::{load_connector, plugin_engine};
use crate::config;
use crate::deliver::redrive_topic::Refusal;
use crate::server::{EXIT_FAILURE, EXIT_INVALID};
use crate::sink::Sink;

pub async fn redrive(
    path: &Path,
    name: &str,
    range: crate::deliver::redrive_topic::Range,
    ranged: bool,
    trust_unsigned: bool,
) -> u8 {
    let (config, connector) = match load_connector(path, name) {
        Ok(found) => found,
        Err(code) => return code,
    };
    let connector = &config.connectors[connector];
    let dlq_topic = match &connector.errors.dlq {
        Some(config::DeadLetterDestination::Table(_)) => {
            if trust_unsigned {
                eprintln!(
                    "connector {name}: --trust-unsigned applies to the letters of a dead-letter topic; this connector's dead letters are in a table (errors.dlq.table), written in the rows' transaction"
                );
                return EXIT_INVALID;
            }
            if ranged {
                eprintln!(
                    "connector {name}: --partition, --from-*, --to-* choose a range of a dead-letter topic; this connector's dead letters are in a table (errors.dlq.table), redriven whole"
                );
                return EXIT_INVALID;
            }
            None
        }
        Some(config::DeadLetterDestination::Topic(topic)) => Some(topic.clone()),
        None => {
            eprintln!(
                "connector {name}: it has no dead letters to redrive (errors.dlq is not set)"
            );
            return EXIT_INVALID;
        }
    };
    if trust_unsigned && !connector.errors.dlq_signing_key.is_empty() {
        eprintln!(
            "connector {name}: --trust-unsigned changes nothing here: errors.dlq.signing_key is set, so only letters signed with one of its keys are redriven"
        );
    }
    if dlq_topic.is_some() && config.kafka.is_embedded() {
        eprintln!(
            "{}: kafka.brokers is embedded, a cluster that lives inside `sluice run` only: there is no dead-letter topic to read",
            path.display()
        );
        return EXIT_INVALID;
    }
    let sink = match Sink::connect(connector).await {
        Ok(sink) => std::sync::Arc::new(sink),
        Err(e) => {
            eprintln!("connector {name}: {e}");
            return EXIT_FAILURE;
        }
    };
    if let Err(e) = sink.prepare().await {
        eprintln!("connector {name}: {e}");
        return EXIT_FAILURE;
    }
    let engine = match plugin_engine(connector) {
        Ok(engine) => engine,
        Err(code) => return code,
    };
    let code = match dlq_topic {
        None => {
            let result =
                crate::deliver::redrive::redrive(connector, sink.clone(), engine.as_ref()).await;
            match result {
                Ok(report) => {
                    println!(
                        "{name}: {} dead letter(s) read, {} redriven and removed, {} still failing and kept",
                        report.read, report.redriven, report.still_failing
                    );
                    0
                }
                Err(e) => {
                    eprintln!("connector {name}: {e}");
                    EXIT_FAILURE
                }
            }
        }
        Some(topic) => {
            let pool = crate::pool::ConsumerPool::new(
                &config.kafka,
                &config.kafka.brokers,
                &config.pool,
                &crate::metrics::Metrics::new(),
            );
            let result = crate::deliver::redrive_topic::redrive_topic(
                connector,
                sink.clone(),
                engine.as_ref(),
                pool.clone(),
                &topic,
                &range,
                trust_unsigned,
            )
            .await;
            pool.close();
            match result {
                Ok(report) => {
                    for line in &report.still_failing {
                        println!("still failing, stays in {topic}: {line}");
                    }
                    for line in &report.not_redrivable {
                        println!("not redriven: {line}");
                    }
                    for (why, line) in &report.refused {
                        println!("refused ({}): {line}", why.name());
                    }
                    for line in &report.no_connector {
                        println!("passed over, no sluice.connector header: {line}");
                    }
                    println!(
                        "{name}: {} dead letter(s) read from {topic}, {} redriven, {} redriven before (passed over), {} still failing, {} not redrivable, {} refused ({} unsigned, {} bad signature, {} not matching the source, {} source gone), {} without a sluice.connector header (passed over)",
                        report.read,
                        report.redriven,
                        report.already,
                        report.still_failing.len(),
                        report.not_redrivable.len(),
                        report.refused.len(),
                        report.refused_for(Refusal::Unsigned),
                        report.refused_for(Refusal::BadSignature),
                        report.refused_for(Refusal::NotMatchingSource),
                        report.refused_for(Refusal::SourceGone),
                        report.no_connector.len(),
                    );
                    0
                }
                Err(e) => {
                    eprintln!("connector {name}: {e}");
                    if matches!(&e, crate::deliver::redrive::RedriveError::Read(r) if r.is_usage())
                    {
                        EXIT_INVALID
                    } else {
                        EXIT_FAILURE
                    }
                }
            }
        }
    };
    sink.close().await;
    code
}
