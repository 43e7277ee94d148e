//! `sluice validate --connect`: what the file names, reached for real, one line each and
//! nothing changed. For every connector: the Kafka cluster (and its topics), the database
//! (the connection, the sink table with its configured columns, on PostgreSQL the right to
//! insert and update it), and the Schema Registry it reads schemas from. A line says `ok`
//! or what failed; without records, as `dry-run` needs them.

use std::io::Write;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::config::{Config, ConnectorConfig};
use crate::sink::Sink;

/// Longest one question to the broker may take.
const KAFKA_TIMEOUT: Duration = Duration::from_secs(10);

/// One check's outcome.
struct Reached {
    ok: bool,
    line: String,
}

fn ok(line: String) -> Reached {
    Reached { ok: true, line }
}

fn failed(line: String) -> Reached {
    Reached { ok: false, line }
}

/// Reaches what each connector names and writes a line per check to `out`; true when
/// everything answered.
pub fn reach(config: &Config, out: &mut dyn Write) -> bool {
    let checks = async {
        let mut all = Vec::new();
        for connector in &config.connectors {
            all.push((connector.name.clone(), kafka(config, connector).await));
            all.push((connector.name.clone(), database(connector).await));
            if let Some(registry) = registry(connector).await {
                all.push((connector.name.clone(), registry));
            }
        }
        all
    };
    let checks = match tokio::runtime::Handle::try_current() {
        Ok(handle) => tokio::task::block_in_place(|| handle.block_on(checks)),
        Err(_) => match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime.block_on(checks),
            Err(e) => vec![(
                String::new(),
                failed(format!("cannot start a runtime: {e}")),
            )],
        },
    };
    let mut all_ok = true;
    for (connector, reached) in checks {
        all_ok &= reached.ok;
        let verdict = if reached.ok { "ok" } else { "FAILED" };
        let _ = writeln!(out, "  {connector}: {verdict}: {}", reached.line);
    }
    all_ok
}

/// The cluster answers, and the connector's topics are there (a missing one is said, not
/// failed: sluice reads it once it is created).
async fn kafka(config: &Config, connector: &ConnectorConfig) -> Reached {
    if config.kafka.is_embedded() {
        return ok("kafka: embedded (in-process), nothing to reach".into());
    }
    let (kafka, brokers, connector) = (
        config.kafka.clone(),
        config.kafka.brokers.clone(),
        connector.clone(),
    );
    let asked = tokio::task::spawn_blocking(move || {
        let client: BaseConsumer =
            crate::kafka::consumer::consumer_config(&kafka, &brokers, &connector, 0)
                .create()
                .map_err(|e| format!("kafka: cannot create a client: {e}"))?;
        let metadata = client
            .fetch_metadata(None, KAFKA_TIMEOUT)
            .map_err(|e| format!("kafka: no answer from {brokers}: {e}"))?;
        let topics: Vec<(String, usize)> = metadata
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| (t.name().to_string(), t.partitions().len()))
            .collect();
        let brokers_seen = metadata.brokers().len();
        let described = match &connector.topics_regex {
            Some(pattern) => {
                let matching: Vec<&(String, usize)> = topics
                    .iter()
                    .filter(|(t, _)| connector.reads_topic(t))
                    .collect();
                format!(
                    "{} topic(s) match {} ({} partitions)",
                    matching.len(),
                    pattern.as_str(),
                    matching.iter().map(|(_, p)| p).sum::<usize>()
                )
            }
            None => connector
                .topics
                .iter()
                .map(|topic| match topics.iter().find(|(t, _)| t == topic) {
                    Some((_, partitions)) => format!("{topic}: {partitions} partition(s)"),
                    None => format!("{topic}: does not exist yet (read once it is created)"),
                })
                .collect::<Vec<_>>()
                .join(", "),
        };
        Ok::<String, String>(format!(
            "kafka: {brokers_seen} broker(s) answered; {described}"
        ))
    })
    .await;
    match asked {
        Ok(Ok(line)) => ok(line),
        Ok(Err(line)) => failed(line),
        Err(e) => failed(format!("kafka: {e}")),
    }
}

/// The database answers, the sink table has the configured columns (or will be created),
/// and on PostgreSQL the connector's user may insert and update it.
async fn database(connector: &ConnectorConfig) -> Reached {
    let sink = match Sink::connect(connector).await {
        Ok(sink) => sink,
        Err(e) => return failed(format!("database: {e}")),
    };
    let reached = table(connector, &sink).await;
    sink.close().await;
    reached
}

async fn table(connector: &ConnectorConfig, sink: &Sink) -> Reached {
    let Some(table) = connector.sink.fixed_table() else {
        return ok(format!(
            "database: reached; tables from a template ({}) are checked as they are first written",
            connector.sink.table_label()
        ));
    };
    if connector.sink.derives_columns() {
        return ok(format!(
            "database: reached; table {table} takes its columns from the records' schemas"
        ));
    }
    if let Err(e) = sink.check_table().await {
        return if connector.sink.create_table {
            ok(format!(
                "database: reached; table {table} is not there as configured ({e}): create_table makes it at the first start"
            ))
        } else {
            failed(format!("database: table {table}: {e}"))
        };
    }
    // The right to write it, where the database can be asked without writing.
    let Some(sql) = sink.write_privileges_query() else {
        return ok(format!(
            "database: reached; table {table} has the configured columns"
        ));
    };
    match sink.query_integers(sql, 2).await {
        Ok(rights) if rights == [Some(1), Some(1)] => ok(format!(
            "database: reached; table {table} has the configured columns, and may be inserted into and updated"
        )),
        Ok(rights) => failed(format!(
            "database: table {table}: the connector's user may not {} it (GRANT INSERT, UPDATE ON it)",
            if rights.first() == Some(&Some(1)) {
                "update"
            } else {
                "insert into"
            }
        )),
        Err(e) => failed(format!(
            "database: table {table}: cannot ask for its privileges: {e}"
        )),
    }
}

/// The Schema Registry answers, when the connector reads schemas from one.
async fn registry(connector: &ConnectorConfig) -> Option<Reached> {
    let registry = connector.registry_in_use()?;
    let client = match crate::format::registry::RegistryClient::new(registry) {
        Ok(client) => client,
        Err(message) => return Some(failed(format!("schema registry: {message}"))),
    };
    Some(match client.probe().await {
        Ok(()) => ok(format!("schema registry: {} answered", client.describe())),
        Err(e) => failed(format!("schema registry: {e}")),
    })
}
