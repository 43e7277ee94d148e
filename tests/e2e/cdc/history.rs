//! A generated history of Debezium change events (`history.py`: thousands of c/u/d over
//! hundreds of keys in 5 tables, deletes with their tombstones, keys deleted and created
//! again, a schema version that adds a column halfway), replicated by two `sluice run`
//! processes in one group while one of them is SIGKILLed five times. Each table must end
//! equal to the history's final state, row by row; every partition's stored offset must
//! be its log's end; then a replay of every topic from offset 0 must change nothing. It runs
//! with one connector per table (explicit columns), and with one connector for all five
//! (tables from `{source.table}`, columns derived from the events' schemas, `note` added by
//! `evolve: add_columns`).
//!
//! The test broker's memory storage cannot serve a fetch that starts inside a multi-record
//! batch (a fault of Tansu 0.6.0, DESIGN.md): after a SIGKILL a task resumes mid-log, so
//! the history is produced one record per batch.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::formats::read_rows;
use crate::harness::{Backend, Broker, SluiceProcess, TestDb, unique};
use crate::registry::TestRegistry;

const TABLES: [&str; 5] = ["customers", "orders", "order_lines", "products", "payments"];
const PARTITIONS: i32 = 3;

/// The columns of every table, as the connectors map them, with the sluice type they are
/// read back as.
const COLUMNS: [(&str, &str); 8] = [
    ("id", "bigint"),
    ("name", "text"),
    ("qty", "int"),
    ("price", "numeric"),
    ("updated_at", "timestamp"),
    ("day", "date"),
    ("active", "bool"),
    ("note", "text"),
];

struct Replica {
    broker: Broker,
    registry: TestRegistry,
    db: TestDb,
    dir: tempfile::TempDir,
    /// table -> (topic, sink table, connector)
    names: BTreeMap<&'static str, (String, String, String)>,
    /// One connector for every table, its columns derived from the row schemas: the
    /// prefix of its table template (`<tag>_{source.table}`).
    derived: Option<String>,
}

impl Replica {
    /// With `derived`, one connector replicates every table (columns from the schemas);
    /// else one connector per table, with explicit columns.
    async fn new(kind: Backend, derived: bool) -> Replica {
        let broker = Broker::start();
        let mut names = BTreeMap::new();
        let tag = unique("cdcd");
        let one = unique("cdc-one");
        for table in TABLES {
            let topic = unique(&format!("shop.{table}"));
            broker.create_topic(&topic, PARTITIONS).await;
            let names_of = if derived {
                (topic, format!("{tag}_{table}"), one.clone())
            } else {
                (topic, unique(&format!("cdc_{table}")), unique("cdc"))
            };
            names.insert(table, names_of);
        }
        Replica {
            broker,
            registry: TestRegistry::start().await,
            db: TestDb::new(kind),
            dir: tempfile::tempdir().expect("temp dir"),
            names,
            derived: derived.then_some(tag),
        }
    }

    /// One connector per table, all in one file.
    fn config(&self, format: &str) -> PathBuf {
        let group = unique("cdc-group");
        let mut text = format!(
            r#"kafka:
  brokers: "{}"
  properties:
    session.timeout.ms: 6000
    heartbeat.interval.ms: 500
    topic.metadata.refresh.interval.ms: 1000
  schema_registry:
    url: "{}"
connectors:
"#,
            self.broker.bootstrap,
            self.registry.url()
        );
        // One connector: its topics, and its sink's table and columns (YAML, 6 spaces in).
        let connector = |name: &str, topics: &str, sink: &str| {
            format!(
                r#"  - name: {name}
    topics: [{topics}]
    group: {group}-{name}
    tasks: 2
    format: {format}
    key_format: {format}
    envelope: debezium
    batch: {{ max_records: 200, linger: 20ms }}
    errors:
      retry: {{ initial: 100ms, max: 1s, max_elapsed: 5m }}
    sink:
      url: "{url}"
      mode: upsert
      create_table: true
{sink}"#,
                url = self.db.url,
            )
        };
        if let Some(tag) = &self.derived {
            let (_, _, name) = &self.names["customers"];
            let topics: Vec<&str> = self.names.values().map(|(t, _, _)| t.as_str()).collect();
            text.push_str(&connector(
                name,
                &topics.join(", "),
                &format!(
                    "      table: \"{tag}_{{source.table}}\"\n      key: record_key\n      evolve: add_columns\n"
                ),
            ));
        } else {
            let columns: String = COLUMNS
                .iter()
                .map(|(name, kind)| format!("        {name}: {{ from: /{name}, type: {kind} }}\n"))
                .collect();
            for (topic, table, name) in self.names.values() {
                text.push_str(&connector(
                    name,
                    topic,
                    &format!("      table: {table}\n      key: [id]\n      columns:\n{columns}"),
                ));
            }
        }
        let path = self.dir.path().join("connectors.yaml");
        std::fs::write(&path, text).expect("write connectors.yaml");
        path
    }

    /// Produces the history `spec` describes (see history.py); returns the final state it
    /// must leave and how many records went to each topic.
    async fn produce(&self, mut spec: Value) -> (Value, BTreeMap<String, i64>) {
        let expected = self.dir.path().join("expected.json");
        spec["brokers"] = json!(self.broker.bootstrap);
        spec["registry"] = json!(self.registry.url());
        spec["expected"] = json!(expected);
        spec["topics"] = json!(
            self.names
                .iter()
                .map(|(table, (topic, _, _))| (table.to_string(), json!(topic)))
                .collect::<serde_json::Map<_, _>>()
        );
        spec["producer"] = json!({"batch.num.messages": 1, "linger.ms": 0});
        let output = crate::formats::run_script("tests/e2e/cdc/history.py", spec).await;
        assert!(
            output.status.success(),
            "history.py failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let summary: Value = serde_json::from_slice(&output.stdout).expect("history.py summary");
        let per_topic = summary["per_topic"]
            .as_object()
            .expect("per_topic")
            .iter()
            .map(|(t, n)| (t.clone(), n.as_i64().expect("count")))
            .collect();
        let expected =
            serde_json::from_str(&std::fs::read_to_string(expected).expect("expected.json"))
                .expect("expected.json is JSON");
        (expected, per_topic)
    }

    /// The sum of the stored next offsets of each connector's partitions.
    async fn stored(&self) -> BTreeMap<String, i64> {
        let mut stored = BTreeMap::new();
        for (topic, _, connector) in self.names.values() {
            let mut sum = 0;
            for partition in 0..PARTITIONS {
                sum += super::stored_offset(&self.db, connector, topic, partition)
                    .await
                    .unwrap_or(0);
            }
            stored.insert(topic.clone(), sum);
        }
        stored
    }

    /// Waits until every partition's stored offset is its log's end (records per topic).
    async fn wait_for_all(&self, per_topic: &BTreeMap<String, i64>, seconds: u64, log: &Path) {
        let deadline = std::time::Instant::now() + Duration::from_secs(seconds);
        loop {
            let stored = self.stored().await;
            if &stored == per_topic {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "after {seconds} s stored offsets {stored:?}, the logs end at {per_topic:?}; log {}",
                log.display()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Every table against the history's final state, row by row.
    async fn assert_replica(&self, expected: &Value) {
        for (table, (_, sink_table, _)) in &self.names {
            let rows = read_rows(&self.db, sink_table, &COLUMNS).await;
            let got: BTreeMap<String, Vec<Option<String>>> = rows
                .into_iter()
                .map(|r| (r[0].clone().expect("id"), r))
                .collect();
            let want: BTreeMap<String, Vec<Option<String>>> = expected[*table]["rows"]
                .as_object()
                .expect("rows")
                .iter()
                .map(|(id, row)| {
                    let values = COLUMNS
                        .iter()
                        .map(|(name, kind)| match &row[*name] {
                            Value::Null => None,
                            Value::String(s) => Some(crate::formats::normalise(s, kind)),
                            Value::Bool(b) => Some(b.to_string()),
                            other => Some(crate::formats::normalise(&other.to_string(), kind)),
                        })
                        .collect();
                    (id.clone(), values)
                })
                .collect();
            let missing: Vec<&String> = want.keys().filter(|k| !got.contains_key(*k)).collect();
            let extra: Vec<&String> = got.keys().filter(|k| !want.contains_key(*k)).collect();
            assert!(
                missing.is_empty() && extra.is_empty(),
                "{table}: rows missing {missing:?}, rows that should be gone {extra:?}"
            );
            for (id, row) in &want {
                assert_eq!(&got[id], row, "{table} row {id}");
            }
        }
    }
}

/// The history through `format`, shaped as Debezium's `connector` writes it; with
/// `derived`, through one connector whose tables and columns come from the events.
async fn replica_equals_the_history(kind: Backend, connector: &str, format: &str, derived: bool) {
    let replica = Replica::new(kind, derived).await;
    let config = replica.config(format);
    let mut first = Some(SluiceProcess::start(&config));
    let second = SluiceProcess::start(&config);
    let spec = json!({
        "encoding": format, "connector": connector, "tables": TABLES,
        "keys": 100, "events": 3000, "snapshot": true, "add_column_at": 0.5, "seed": 23,
    });
    let producing = {
        let replica = &replica;
        async move { replica.produce(spec).await }
    };
    // Five SIGKILLs of one process while the history is produced and written. The test
    // broker drops a SIGKILLed member only at a join after its session expired (a fault
    // of Tansu 0.6.0): the process is started again after EVICTION_WAIT, else the dead
    // member's partitions stay orphaned.
    let killing = async {
        for kill in 0..5u64 {
            tokio::time::sleep(Duration::from_millis(700 + 300 * kill)).await;
            if let Some(process) = first.take() {
                process.kill();
            }
            tokio::time::sleep(crate::harness::EVICTION_WAIT).await;
            first = Some(SluiceProcess::start(&config));
        }
    };
    let ((expected, per_topic), ()) = tokio::join!(producing, killing);
    let first = first.expect("the first process");
    replica.wait_for_all(&per_topic, 240, &first.log).await;
    let events = &expected["events"];
    assert!(
        events["d"].as_i64() > Some(100) && events["u"].as_i64() > Some(1000),
        "{events}"
    );
    replica.assert_replica(&expected).await;
    first.terminate();
    second.terminate();

    // A replay of every topic from offset 0 changes nothing: a row changed by hand since
    // keeps its change, as no record of the replay is newer than what the row holds.
    let (_, table, _) = &replica.names["orders"];
    let changed = read_rows(&replica.db, table, &COLUMNS[..1]).await[0][0]
        .clone()
        .expect("an order");
    super::execute(
        &replica.db,
        &format!("UPDATE {table} SET name = 'by hand' WHERE id = {changed}"),
    )
    .await;
    let connectors: std::collections::BTreeSet<&String> =
        replica.names.values().map(|(_, _, c)| c).collect();
    for connector in connectors {
        super::execute(
            &replica.db,
            &format!("DELETE FROM sluice_offsets WHERE connector = '{connector}'"),
        )
        .await;
    }
    // The test broker may still count a member SIGKILLed last in the groups (the fault
    // above), and leave its partitions to nobody: it drops such a member at the first join
    // after its session expired, so the replay joins after EVICTION_WAIT. (Groups of their
    // own would not do: a connector whose group changed waits for the old one to empty
    // before it takes over, and the dead member never leaves it.)
    tokio::time::sleep(crate::harness::EVICTION_WAIT).await;
    let replay = SluiceProcess::start(&config);
    replica.wait_for_all(&per_topic, 240, &replay.log).await;
    let mut expected = expected;
    expected["orders"]["rows"][&changed]["name"] = json!("by hand");
    replica.assert_replica(&expected).await;
    replay.terminate();
}

async fn postgres_connector_in_connect_json(kind: Backend) {
    replica_equals_the_history(kind, "postgresql", "connect_json", false).await;
}
for_each_database!(postgres_connector_in_connect_json: mariadb = MariaDb);

async fn mysql_connector_in_avro(kind: Backend) {
    replica_equals_the_history(kind, "mysql", "avro", false).await;
}
for_each_database!(mysql_connector_in_avro: postgres = Postgres);

/// One connector for the whole database: every topic, each table named by the events'
/// source block, its columns from the row schema (created from the first event, `note`
/// added halfway by `evolve: add_columns`), the key from the key's schema.
async fn one_connector_with_derived_columns(kind: Backend) {
    replica_equals_the_history(kind, "postgresql", "connect_json", true).await;
}
for_each_database!(one_connector_with_derived_columns: sqlite = Sqlite);

/// The same from Avro, as Debezium's MySQL connector writes it through the registry (each
/// row schema an optional union, the column added as a new schema version).
async fn one_connector_with_derived_columns_from_avro(kind: Backend) {
    replica_equals_the_history(kind, "mysql", "avro", true).await;
}
for_each_database!(one_connector_with_derived_columns_from_avro: mariadb = MariaDb);
