//! Keys and values in the formats of `docs/formats.md`, produced by Confluent's own
//! serializers (the `confluent-kafka` Python package's `AvroSerializer`,
//! `ProtobufSerializer` and `JSONSerializer`, through `produce.py`), which register their
//! schemas over HTTP with the suite's Schema Registry ([`crate::registry`]), read by
//! `sluice run` into each database.
//!
//! - [`avro`]: every Avro type and logical type, nested records, arrays and maps, unions, a
//!   key in Avro, the header variant (magic byte 1 and a GUID), a schema that changes
//!   mid-stream, a bare-Avro schema file; a transform, the JSON Schema and dedup reading
//!   the decoded value;
//! - [`protobuf`]: a `.proto` with imports and a nested message that is not the first;
//! - [`json_schema`]: JSON Schema values, one that breaks its schema;
//! - [`connect_json`]: Kafka Connect's `JsonConverter` envelopes, Debezium's change events;
//! - [`registry_faults`]: an unknown id, a truncated frame, the registry down for 20 s
//!   mid-run (nothing lost, nothing dead-lettered), a registry that refuses sluice.

mod avro;
mod connect_json;
mod json_schema;
mod protobuf;
mod registry_faults;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Backend, Broker, SluiceProcess, TestDb, unique};
use crate::registry::TestRegistry;

/// One run: a broker, a registry, a database, a topic and a table of its own.
pub(crate) struct FormatRun {
    pub broker: Broker,
    pub registry: TestRegistry,
    pub db: TestDb,
    pub topic: String,
    pub table: String,
    pub connector: String,
    pub dead_letters: String,
    pub dir: tempfile::TempDir,
}

impl FormatRun {
    pub async fn new(kind: Backend) -> FormatRun {
        FormatRun::on(
            kind,
            Broker::start(),
            tempfile::tempdir().expect("temp dir"),
        )
        .await
    }

    /// As [`FormatRun::new`], on a broker with Tansu's SQLite storage: its ListOffsets
    /// answers the log's real end (the memory storage's does not, a known fault of Tansu
    /// 0.6.0), for a test that reads it.
    pub async fn persistent(kind: Backend) -> FormatRun {
        let dir = tempfile::tempdir().expect("temp dir");
        FormatRun::on(kind, Broker::start_persistent(dir.path()), dir).await
    }

    async fn on(kind: Backend, broker: Broker, dir: tempfile::TempDir) -> FormatRun {
        let registry = TestRegistry::start().await;
        let topic = unique("formats");
        broker.create_topic(&topic, 1).await;
        FormatRun {
            broker,
            registry,
            db: TestDb::new(kind),
            topic,
            table: unique("fmt"),
            connector: unique("fmt"),
            dead_letters: unique("fmt_dlq"),
            dir,
        }
    }

    /// A connectors.yaml for one connector reading the topic in `format` (a YAML value:
    /// `avro`, `{ avro: { schema: F } }`), with `columns` (YAML lines, 8 spaces in), `key`
    /// (the sink's key list), dead letters to a table, and `extra` connector keys (4 spaces
    /// in). Returns its path.
    pub fn config(&self, format: &str, columns: &str, key: &str, extra: &str) -> PathBuf {
        self.config_with(format, &format!("      columns:\n{columns}"), key, extra)
    }

    /// As [`FormatRun::config`], with `sink` (YAML lines, 6 spaces in) in place of the
    /// columns: derived columns leave them out.
    pub fn config_with(&self, format: &str, sink: &str, key: &str, extra: &str) -> PathBuf {
        let text = format!(
            r#"kafka:
  brokers: "{brokers}"
  properties:
    topic.metadata.refresh.interval.ms: 1000
  schema_registry:
    url: "{registry}"
connectors:
  - name: {connector}
    topics: [{topic}]
    format: {format}
    batch: {{ max_records: 100, linger: 20ms }}
    errors:
      policy: dlq
      dlq: {{ table: {dead_letters} }}
      retry: {{ initial: 100ms, max: 1s, max_elapsed: 5m }}
{extra}
    sink:
      url: "{url}"
      table: {table}
      mode: {mode}
      key: {key}
{sink}
      create_table: true
"#,
            brokers = self.broker.bootstrap,
            registry = self.registry.url(),
            connector = self.connector,
            topic = self.topic,
            dead_letters = self.dead_letters,
            url = self.db.url,
            table = self.table,
            mode = if key == "[]" { "insert" } else { "upsert" },
        );
        let path = self.dir.path().join("connectors.yaml");
        std::fs::write(&path, text).expect("write connectors.yaml");
        path
    }

    /// Produces `records` with `produce.py` (see its doc): `spec` holds the serializer and
    /// the schema; the broker, topic and registry are added here.
    pub async fn produce(&self, mut spec: Value, records: Vec<Value>) {
        spec["brokers"] = json!(self.broker.bootstrap);
        spec["topic"] = json!(self.topic);
        spec["registry"] = json!(self.registry.url());
        spec["records"] = Value::Array(records);
        let output = run_script("tests/e2e/formats/produce.py", spec).await;
        assert!(
            output.status.success(),
            "produce.py failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    pub fn start(&self, config: &Path) -> SluiceProcess {
        SluiceProcess::start(config)
    }

    /// Rows of the table, each column read as text (bytes as lowercase hex), ordered by the
    /// first column.
    pub async fn rows(&self, columns: &[(&str, &str)]) -> Vec<Vec<Option<String>>> {
        read_rows(&self.db, &self.table, columns).await
    }

    /// Waits until the table has `n` rows and the dead-letter table `letters` (at most
    /// `seconds`).
    pub async fn wait_for(&self, n: i64, letters: i64, seconds: u64, process: &SluiceProcess) {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            let rows = count(&self.db, &self.table).await;
            let dead = count(&self.db, &self.dead_letters).await;
            if rows == n && dead == letters {
                // Nothing more comes: a moment later the counts still hold.
                tokio::time::sleep(Duration::from_millis(500)).await;
                let (rows, dead) = (
                    count(&self.db, &self.table).await,
                    count(&self.db, &self.dead_letters).await,
                );
                assert_eq!((rows, dead), (n, letters), "counts moved past the expected");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "after {seconds} s: {rows} rows (want {n}), {dead} dead letters (want {letters}); log {}:\n{}",
                process.log.display(),
                std::fs::read_to_string(&process.log)
                    .unwrap_or_default()
                    .lines()
                    .rev()
                    .take(30)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The dead letters: (offset, stage, class, message), by offset.
    pub async fn letters(&self) -> Vec<(i64, String, String, String)> {
        let rows = read_rows(
            &self.db,
            &self.dead_letters,
            &[
                ("source_offset", "bigint"),
                ("stage", "text"),
                ("error_class", "text"),
                ("error_message", "text"),
            ],
        )
        .await;
        rows.into_iter()
            .map(|r| {
                let text = |i: usize| r[i].clone().unwrap_or_default();
                (text(0).parse().expect("offset"), text(1), text(2), text(3))
            })
            .collect()
    }
}

/// `value`'s JSON text as lowercase hex: a raw key or value for `produce.py`'s raw
/// serializer.
pub(crate) fn hex(value: &Value) -> String {
    value
        .to_string()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Runs a Python script of the suites (`path` from the repository's root) with the
/// examples' Python, `spec` as JSON on its stdin; its output once it exits.
pub(crate) async fn run_script(path: &str, spec: Value) -> std::process::Output {
    let python = crate::examples::python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    tokio::task::spawn_blocking(move || {
        let mut child = Command::new(python)
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", script.display()));
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(spec.to_string().as_bytes())
            .expect("write the spec");
        child.wait_with_output().expect("wait for the script")
    })
    .await
    .expect("the script's thread")
}

/// Rows of `count`, 0 while the table does not exist yet.
async fn count(db: &TestDb, table: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM {table}");
    let sql = sqlx::AssertSqlSafe(sql);
    match db.kind {
        Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
            let n = sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap_or(0);
            pool.close().await;
            n
        }
        Backend::MariaDb => {
            let pool = sqlx::MySqlPool::connect(&db.url).await.expect("connect");
            let n = sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap_or(0);
            pool.close().await;
            n
        }
        Backend::Sqlite => {
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(db.url.trim_start_matches("sqlite://"))
                .create_if_missing(true);
            let pool = sqlx::SqlitePool::connect_with(options)
                .await
                .expect("connect");
            let n = sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap_or(0);
            pool.close().await;
            n
        }
    }
}

/// `columns` (name, sluice type) of `table` as text: bytes as lowercase hex, instants as
/// `YYYY-MM-DD HH:MM:SS[.f]` UTC without trailing zeros, decimals without trailing zeros.
pub(crate) async fn read_rows(
    db: &TestDb,
    table: &str,
    columns: &[(&str, &str)],
) -> Vec<Vec<Option<String>>> {
    let select: Vec<String> = columns
        .iter()
        .map(|(name, kind)| {
            // Quoted: `blob`, `lines` and the like are reserved words in MySQL.
            let q = match db.kind {
                Backend::MariaDb => format!("`{name}`"),
                _ => format!("\"{name}\""),
            };
            match (db.kind, *kind) {
                (Backend::Postgres, "bytes") => format!("encode({q}, 'hex')"),
                (Backend::Postgres, "timestamptz") => {
                    format!("to_char({q} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')")
                }
                (Backend::Postgres, _) => format!("{q}::text"),
                (Backend::MariaDb, "bytes") => format!("LOWER(HEX({q}))"),
                (Backend::MariaDb, _) => format!("CAST({q} AS CHAR)"),
                // SQLite's hex(NULL) is '', not NULL.
                (Backend::Sqlite, "bytes") => {
                    format!("CASE WHEN {q} IS NULL THEN NULL ELSE LOWER(HEX({q})) END")
                }
                (Backend::Sqlite, _) => format!("CAST({q} AS TEXT)"),
            }
        })
        .collect();
    let sql = format!(
        "SELECT {} FROM {table} ORDER BY {}",
        select.join(", "),
        match db.kind {
            Backend::MariaDb => format!("`{}`", columns[0].0),
            _ => format!("\"{}\"", columns[0].0),
        }
    );
    let sql = sqlx::AssertSqlSafe(sql);
    let raw: Vec<Vec<Option<String>>> = match db.kind {
        Backend::Postgres => {
            use sqlx::Row;
            let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
            let rows = sqlx::query(sql).fetch_all(&pool).await.expect("select");
            pool.close().await;
            rows.iter()
                .map(|r| (0..columns.len()).map(|i| r.get(i)).collect())
                .collect()
        }
        Backend::MariaDb => {
            use sqlx::Row;
            let pool = sqlx::MySqlPool::connect(&db.url).await.expect("connect");
            let rows = sqlx::query(sql).fetch_all(&pool).await.expect("select");
            pool.close().await;
            rows.iter()
                .map(|r| (0..columns.len()).map(|i| r.get(i)).collect())
                .collect()
        }
        Backend::Sqlite => {
            use sqlx::Row;
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(db.url.trim_start_matches("sqlite://"));
            let pool = sqlx::SqlitePool::connect_with(options)
                .await
                .expect("connect");
            let rows = sqlx::query(sql).fetch_all(&pool).await.expect("select");
            pool.close().await;
            rows.iter()
                .map(|r| (0..columns.len()).map(|i| r.get(i)).collect())
                .collect()
        }
    };
    raw.into_iter()
        .map(|row| {
            row.into_iter()
                .zip(columns)
                .map(|(value, (_, kind))| value.map(|v| normalise(&v, kind)))
                .collect()
        })
        .collect()
}

/// One spelling per value across the databases.
pub(crate) fn normalise(value: &str, kind: &str) -> String {
    let trim_fraction = |v: &str| -> String {
        match v.split_once('.') {
            Some((whole, fraction)) => {
                let fraction = fraction.trim_end_matches('0');
                if fraction.is_empty() {
                    whole.to_string()
                } else {
                    format!("{whole}.{fraction}")
                }
            }
            None => v.to_string(),
        }
    };
    match kind {
        "timestamptz" | "timestamp" => {
            let v = value.replace('T', " ");
            let v = v
                .trim_end_matches("+00:00")
                .trim_end_matches("+00")
                .trim_end_matches('Z');
            trim_fraction(v)
        }
        "time" | "numeric" | "double" => trim_fraction(value),
        "bool" => match value {
            "t" | "true" | "1" => "true".into(),
            "f" | "false" | "0" => "false".into(),
            other => other.into(),
        },
        "json" => serde_json::from_str::<Value>(value)
            .map(|v| sorted(&v).to_string())
            .unwrap_or_else(|_| value.to_string()),
        _ => value.to_string(),
    }
}

/// `value` with every object's keys in sorted order (PostgreSQL's `jsonb` reorders them).
pub(crate) fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), sorted(&map[k])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// Strings, as the expected row of [`FormatRun::rows`].
pub(crate) fn row(values: &[Option<&str>]) -> Vec<Option<String>> {
    values.iter().map(|v| v.map(str::to_string)).collect()
}
