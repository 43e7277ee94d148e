//! What the end-to-end suites share: a real Kafka-protocol broker on a free loopback port,
//! the three databases, a producer, and `sluice` processes to start, signal and kill.
//!
//! The broker is Tansu 0.6.0 (`cargo install tansu --version 0.6.0 --features
//! dynostore,libsql --locked`; `.ci/run` installs it), started per test and killed when the
//! test ends; its storage is memory, or a SQLite file for a broker killed and restarted.
//! `KAFKA_BROKERS` points the suites at another broker instead. Databases:
//! `SLUICE_TEST_POSTGRES_URL` and `SLUICE_TEST_MYSQL_URL` override the local servers.

#![allow(dead_code)]

pub mod admin;
pub mod proxy;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use sluice::cli::demo::{SequenceStats, sequence_stats};
use sluice::config::{self, Config};
use sluice::sink::Sink;

/// Prints a scenario's `FAULT-SUMMARY` line and appends it to
/// `target/tmp/fault-summary.txt`, where the figures of every run can be quoted from.
pub fn record_summary(line: &str) {
    use std::io::Write;
    println!("{line}");
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fault-summary.txt");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .expect("open fault-summary.txt");
    file.write_all(format!("{line}\n").as_bytes())
        .expect("append to fault-summary.txt");
}

/// Every dead letter of the sink's connector, in (topic, partition, offset) order.
pub async fn all_dead_letters(sink: &Sink) -> Vec<sluice::sink::dead_letters::Stored> {
    let mut letters = Vec::new();
    let mut after = None;
    loop {
        let page = sink
            .read_dead_letters(after.as_ref(), 5000)
            .await
            .expect("read dead letters");
        let Some(last) = page.last() else {
            return letters;
        };
        after = Some(last.coordinates());
        letters.extend(page);
    }
}

/// A name no other test uses: topics, groups, tables and connectors never collide.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// A Kafka-protocol broker for one test.
pub struct Broker {
    pub bootstrap: String,
    child: Option<Child>,
    port: u16,
    log: PathBuf,
    /// Tansu's `--storage-engine`: memory, or a SQLite file that outlives the process.
    storage: String,
    /// Where Tansu runs: its SQLite storage is a path relative to it.
    workdir: Option<PathBuf>,
}

/// Tansu's storage for a broker that lives as long as its process.
const MEMORY_STORAGE: &str = "memory://tansu/";

fn tansu_binary() -> PathBuf {
    if let Ok(path) = std::env::var("TANSU_BIN") {
        return PathBuf::from(path);
    }
    let home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into())).join(".cargo")
        });
    let installed = home.join("bin/tansu");
    if installed.exists() {
        installed
    } else {
        PathBuf::from("tansu")
    }
}

/// Tansu 0.6.0 drops a SIGKILLed group member only at the first join after its session
/// (6 s here) expired; a real Kafka evicts it by itself. A process restarted sooner shares
/// the group with the dead member, whose partitions stay orphaned, so tests wait this long
/// after a SIGKILL.
pub const EVICTION_WAIT: Duration = Duration::from_secs(8);

/// How much of each process's log a stalled run prints.
const LOG_TAIL_LINES: usize = 12;

/// Where sluice and broker logs go: kept after the test for a look at failures.
pub fn log_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-logs");
    std::fs::create_dir_all(&dir).expect("log dir");
    dir
}

/// A loopback port free now, for a process the test starts (a broker, sluice's admin
/// API, a database cluster) to bind.
pub fn free_port() -> u16 {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    // Below the kernel's ephemeral range: a port from that range (what binding port 0
    // hands out) can be taken as the source port of any outgoing connection between this
    // check and the process that binds it. Seen in CI: a sluice admin listener refused
    // with "Address already in use" while the suite's clients were connecting.
    const LOWEST: u64 = 10_000;
    // The span below the ephemeral range and where this process starts in it, read and
    // chosen once: the ports one process hands out are then a sequence that does not
    // repeat within the span (test processes run side by side, each from elsewhere).
    static SPAN: OnceLock<Option<(u64, u64)>> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let span = *SPAN.get_or_init(|| {
        let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|range| range.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(32_768);
        let seed = u64::from(std::process::id()).wrapping_mul(7_919)
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos().into());
        (ephemeral_low > LOWEST + 1_000).then(|| (ephemeral_low - LOWEST, seed))
    });
    if let Some((span, seed)) = span {
        for _ in 0..1_000 {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let port = LOWEST + (seed.wrapping_add(n.wrapping_mul(104_729))) % span;
            let port = u16::try_from(port).expect("a port below the ephemeral range");
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return port;
            }
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Broker {
    /// Starts Tansu on a free port (or uses `KAFKA_BROKERS`).
    pub fn start() -> Broker {
        if let Ok(bootstrap) = std::env::var("KAFKA_BROKERS") {
            return Broker {
                bootstrap,
                child: None,
                port: 0,
                log: PathBuf::new(),
                storage: String::new(),
                workdir: None,
            };
        }
        let port = free_port();
        Broker::start_on(port, &format!("127.0.0.1:{port}"))
    }

    /// Starts Tansu listening on `port` and telling clients (in metadata) to connect to
    /// `advertised` (`host:port`), which is also the bootstrap address the tests use: a
    /// proxy there sees all of the clients' traffic.
    pub fn start_on(port: u16, advertised: &str) -> Broker {
        Broker::start_with(port, advertised, MEMORY_STORAGE.to_string(), None)
    }

    /// Starts Tansu on a free port with its log in a SQLite file in `dir` (Tansu's `libsql`
    /// storage engine), so that a broker killed and started again ([`Broker::kill`],
    /// [`Broker::restart`]) comes back with every record it acknowledged.
    pub fn start_persistent(dir: &Path) -> Broker {
        let port = free_port();
        // Tansu opens `sqlite://<name>` relative to its working directory.
        let storage = "sqlite://tansu.db".to_string();
        let advertised = format!("127.0.0.1:{port}");
        Broker::start_with(port, &advertised, storage, Some(dir.to_path_buf()))
    }

    fn start_with(
        port: u16,
        advertised: &str,
        storage: String,
        workdir: Option<PathBuf>,
    ) -> Broker {
        let mut broker = Broker {
            bootstrap: advertised.to_string(),
            child: None,
            port,
            log: log_dir().join(format!("tansu-{port}.log")),
            storage,
            workdir,
        };
        broker.spawn();
        broker
    }

    /// SIGKILL: the broker is gone at once, its clients' connections reset.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the broker again on its port and storage, after [`Broker::kill`].
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart of a broker that is running");
        self.spawn();
    }

    fn spawn(&mut self) {
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let advertised = format!("tcp://{}", self.bootstrap);
        // A restarted broker appends to the log of its first life.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("broker log file");
        let mut command = Command::new(tansu_binary());
        if let Some(dir) = &self.workdir {
            command.current_dir(dir);
        }
        let child = command
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &advertised, "--storage-engine", &self.storage])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start tansu ({}): {e}; install it with `cargo install tansu --version 0.6.0 --features dynostore,libsql --locked` or set KAFKA_BROKERS", tansu_binary().display()));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "tansu did not listen on {} within 30 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Creates a topic with `partitions` partitions.
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .expect("admin client");
        let results = admin
            .create_topics(
                &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            )
            .await
            .expect("create_topics");
        for result in results {
            result.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
        }
    }

    /// Deletes `topic` (never while a consumer is assigned to it: Tansu 0.6.0's answer to
    /// such a consumer crashes librdkafka).
    pub async fn delete_topic(&self, topic: &str) {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .expect("admin client");
        let results = admin
            .delete_topics(
                &[topic],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            )
            .await
            .expect("delete_topics");
        for result in results {
            result.unwrap_or_else(|(t, e)| panic!("delete topic {t}: {e}"));
        }
    }

    /// Produces word events `uid` in `range` as JSON, keyed by uid, spread over the
    /// partitions by key.
    pub async fn produce(&self, topic: &str, range: std::ops::Range<u64>) {
        self.produce_with(topic, range, word_event).await
    }

    /// Produces word events as the field writes them: `#<uid>*<word>@<timestamp>`.
    pub async fn produce_raw(&self, topic: &str, range: std::ops::Range<u64>) {
        self.produce_with(topic, range, |uid| {
            format!("#{uid}*w{}@{}", uid % 97, 1_700_000_000_000u64 + uid)
        })
        .await
    }

    /// Produces `value(uid)` for each uid in `range`, keyed by uid.
    pub async fn produce_with(
        &self,
        topic: &str,
        range: std::ops::Range<u64>,
        value: impl Fn(u64) -> String,
    ) {
        produce_values(&self.bootstrap, topic, range, value, None).await
    }
}

/// The JSON word event for `uid`: what `Scenario`'s columns map.
pub fn word_event(uid: u64) -> String {
    format!(
        "{{\"uid\":{uid},\"word\":\"w{}\",\"produced_at\":{}}}",
        uid % 97,
        1_700_000_000_000u64 + uid
    )
}

/// Produces `value(uid)` for each uid in `range`, keyed by uid, to `topic` at `bootstrap`;
/// with `per_second`, at about that pace (records flow while a test injects faults).
pub async fn produce_values(
    bootstrap: &str,
    topic: &str,
    range: std::ops::Range<u64>,
    value: impl Fn(u64) -> String,
    per_second: Option<u64>,
) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        // One record per batch. Tansu 0.6.0's memory storage answers a fetch that starts
        // inside a stored batch with the *next* batch, skipping the rest of the one that
        // holds the offset (a real Kafka returns the holding batch and the client skips
        // ahead within it). Every resume from a stored offset would lose records on it;
        // single-record batches keep every offset at a batch start.
        .set("batch.num.messages", "1")
        .set("linger.ms", "0")
        // Long enough to outlast a broker outage that a test injects.
        .set("message.timeout.ms", "120000")
        .create()
        .expect("producer");
    // Paced runs wait for deliveries in small steps so that the pace holds.
    let step = if per_second.is_some() { 100 } else { 5000 };
    let started = Instant::now();
    let first = range.start;
    let mut pending = Vec::new();
    for uid in range {
        let key = uid.to_string();
        let value = value(uid);
        let future = producer
            .send_result(FutureRecord::to(topic).key(&key).payload(&value))
            .expect("enqueue");
        pending.push(future);
        if pending.len() >= step {
            for f in pending.drain(..) {
                f.await.expect("delivery").expect("delivered");
            }
            if let Some(rate) = per_second {
                let due = started + Duration::from_secs_f64((uid + 1 - first) as f64 / rate as f64);
                tokio::time::sleep_until(due.into()).await;
            }
        }
    }
    for f in pending {
        f.await.expect("delivery").expect("delivered");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

/// Produces JSON word events `uid` in `range` as producers with compression write them:
/// batches of up to 500 records compressed with `codec` (`gzip`, `snappy`, `lz4`, `zstd`).
/// Tansu's memory storage serves such batches to a consumer that reads each from its start
/// (a fetch inside one skips the rest of it); its SQLite storage cannot serve snappy.
pub async fn produce_compressed(
    bootstrap: &str,
    topic: &str,
    range: std::ops::Range<u64>,
    codec: &str,
) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("compression.codec", codec)
        .set("batch.num.messages", "500")
        .set("linger.ms", "20")
        .create()
        .expect("producer");
    let mut pending = Vec::new();
    for uid in range {
        let key = uid.to_string();
        let value = word_event(uid);
        pending.push(
            producer
                .send_result(FutureRecord::to(topic).key(&key).payload(&value))
                .expect("enqueue"),
        );
    }
    for f in pending {
        f.await.expect("delivery").expect("delivered");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Makes every write statement into `table` take `seconds` longer (PostgreSQL: a
/// statement trigger that sleeps), so that batches pile up behind the one being written.
pub async fn slow_writes(sink: &Sink, table: &str, seconds: f64) {
    sink.execute_statement(&format!(
        "CREATE FUNCTION {table}_slow() RETURNS trigger AS $$ BEGIN PERFORM pg_sleep({seconds}); RETURN NULL; END $$ LANGUAGE plpgsql"
    ))
    .await
    .expect("function");
    sink.execute_statement(&format!(
        "CREATE TRIGGER {table}_slow AFTER INSERT ON {table} FOR EACH STATEMENT EXECUTE FUNCTION {table}_slow()"
    ))
    .await
    .expect("trigger");
}

/// Stores `next` as partition 0's offset of `topic`, as if a batch had committed it.
pub async fn store_offset(sink: &Sink, topic: &str, next: i64) {
    sink.write(&sluice::sink::WriteBatch {
        offsets: vec![sluice::sink::OffsetAdvance {
            topic: topic.to_string(),
            partition: 0,
            expected: None,
            next,
        }],
        ..sluice::sink::WriteBatch::default()
    })
    .await
    .expect("store an offset");
}

/// An offset gap on the test broker: offsets 0..1000 in batches of 500 on the run's topic,
/// and a stored offset of 100, inside the first batch. Tansu answers the fetch at 100 with
/// the batch at 500, so the first record a task reads is past its stored offset.
pub async fn stored_offset_inside_a_batch(run: &Pipeline) {
    produce_compressed(&run.broker.bootstrap, &run.scenario.topic, 0..1_000, "none").await;
    let config = run.scenario.config(&run.broker.bootstrap, &run.db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    sink.prepare().await.expect("prepare");
    store_offset(&sink, &run.scenario.topic, 100).await;
    sink.close().await;
}

/// The databases every end-to-end test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    MariaDb,
    Sqlite,
}

/// A database for one test: its URL, and for SQLite the directory that holds the file.
pub struct TestDb {
    pub kind: Backend,
    pub url: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    pub fn new(kind: Backend) -> TestDb {
        match kind {
            Backend::Postgres => TestDb {
                kind,
                url: std::env::var("SLUICE_TEST_POSTGRES_URL")
                    .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into()),
                _dir: None,
            },
            Backend::MariaDb => TestDb {
                kind,
                url: std::env::var("SLUICE_TEST_MYSQL_URL")
                    .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into()),
                _dir: None,
            },
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite://{}", dir.path().join("sluice.db").display());
                TestDb {
                    kind,
                    url,
                    _dir: Some(dir),
                }
            }
        }
    }
}

impl TestDb {
    /// The same database reached through `proxy` (PostgreSQL and MariaDB only: SQLite has
    /// no network).
    pub fn through(&self, proxy: &proxy::Proxy) -> TestDb {
        assert!(
            self.kind != Backend::Sqlite,
            "SQLite cannot sit behind a proxy"
        );
        TestDb {
            kind: self.kind,
            url: proxy::url_through(&self.url, &proxy.addr()),
            _dir: None,
        }
    }

    /// The same database under another URL (another user, say). For SQLite, `url` names
    /// a file this value does not own.
    pub fn with_url(&self, url: String) -> TestDb {
        TestDb {
            kind: self.kind,
            url,
            _dir: None,
        }
    }

    /// PostgreSQL: the URL with `application_name=name`, so that a process's connections
    /// can be told apart in `pg_stat_activity`.
    pub fn with_application_name(&self, name: &str) -> TestDb {
        let separator = if self.url.contains('?') { '&' } else { '?' };
        self.with_url(format!("{}{separator}application_name={name}", self.url))
    }

    /// `host:port` of the database server.
    pub fn server(&self) -> String {
        proxy::url_authority(&self.url)
    }

    /// The name summaries use.
    pub fn name(&self) -> &'static str {
        match self.kind {
            Backend::Postgres => "postgres",
            Backend::MariaDb => "mariadb",
            Backend::Sqlite => "sqlite",
        }
    }
}

/// The scenarios' connectors in one file, each writing to its database; the top-level
/// sections (`kafka`, an `admin` in the first's `extra_kafka`) are the first scenario's.
pub fn combined_yaml(brokers: &str, scenarios: &[(&Scenario, &TestDb)]) -> String {
    let mut yaml = scenarios[0].0.yaml(brokers, scenarios[0].1);
    for (scenario, db) in &scenarios[1..] {
        let text = scenario.yaml(brokers, db);
        let (_, connectors) = text
            .split_once("connectors:\n")
            .expect("a connectors section");
        yaml.push_str(connectors);
    }
    yaml
}

/// A connectors.yaml for one word-event connector.
pub struct Scenario {
    pub connector: String,
    pub topic: String,
    pub group: String,
    pub table: String,
    pub tasks: u32,
    pub max_records: usize,
    pub extra_kafka: String,
    /// A `transforms:` block (indented for a connector), or empty.
    pub transforms: String,
    /// `exactly_once` or `at_least_once`.
    pub guarantee: &'static str,
    /// More `delivery:` keys (`dedup: { id: /uid }`, say), or empty.
    pub delivery_extra: String,
    /// More connector keys (an `errors:` block, say), indented 4 spaces, or empty.
    pub extra_connector: String,
    /// More `sink:` keys, indented 6 spaces, each line ending in a newline, or empty.
    pub extra_sink: String,
    /// The sink's `mode` and `key`: `upsert` on `[uid]`, or `insert` on `[]` (no primary
    /// key: a record written twice is two rows, so duplicates show in the counts).
    pub mode: &'static str,
    pub key: &'static str,
}

impl Scenario {
    pub fn new(tasks: u32) -> Scenario {
        Scenario {
            connector: unique("conn"),
            topic: unique("words"),
            group: unique("group"),
            table: unique("words"),
            tasks,
            max_records: 1000,
            extra_kafka: String::new(),
            transforms: String::new(),
            guarantee: "exactly_once",
            delivery_extra: String::new(),
            extra_connector: String::new(),
            extra_sink: String::new(),
            mode: "upsert",
            key: "[uid]",
        }
    }

    pub fn yaml(&self, brokers: &str, db: &TestDb) -> String {
        format!(
            r#"kafka:
  brokers: "{brokers}"
  properties:
    session.timeout.ms: 6000
    heartbeat.interval.ms: 500
    topic.metadata.refresh.interval.ms: 1000
{extra}
connectors:
  - name: {connector}
    topics: [{topic}]
    group: {group}
    tasks: {tasks}
    batch: {{ max_records: {max_records}, linger: 20ms }}
{transforms}
    delivery: {{ guarantee: {guarantee}{delivery_extra} }}
{extra_connector}
    sink:
      url: "{url}"
      table: {table}
      mode: {mode}
      key: {key}
      columns:
        uid: {{ from: /uid, type: bigint }}
        word: {{ from: /word, type: text }}
        produced_at: {{ from: /produced_at, type: timestamptz }}
        src_partition: {{ from: $partition, type: int }}
        src_offset: {{ from: $offset, type: bigint }}
      create_table: true
{extra_sink}"#,
            extra_sink = self.extra_sink,
            extra = self.extra_kafka,
            transforms = self.transforms,
            guarantee = self.guarantee,
            delivery_extra = if self.delivery_extra.is_empty() {
                String::new()
            } else {
                format!(", {}", self.delivery_extra)
            },
            extra_connector = self.extra_connector,
            mode = self.mode,
            key = self.key,
            connector = self.connector,
            topic = self.topic,
            group = self.group,
            tasks = self.tasks,
            max_records = self.max_records,
            url = db.url,
            table = self.table,
        )
    }

    pub fn config(&self, brokers: &str, db: &TestDb) -> Config {
        config::load_str(&self.yaml(brokers, db), &|_| None).expect("scenario config is valid")
    }

    /// Writes the file and returns its path (inside `dir`).
    pub fn write(&self, dir: &Path, brokers: &str, db: &TestDb) -> PathBuf {
        let path = dir.join(format!("{}.yaml", self.connector));
        std::fs::write(&path, self.yaml(brokers, db)).expect("write config");
        path
    }

    /// Count, distinct, min and max of uid in the table, through sluice's own sink.
    pub async fn stats(&self, brokers: &str, db: &TestDb) -> SequenceStats {
        let config = self.config(brokers, db);
        let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
        sink.prepare().await.expect("prepare");
        let stats = sequence_stats(&sink, "uid").await.expect("stats");
        sink.close().await;
        stats
    }

    /// Stored offsets next to the broker's high watermarks, per partition: where a stalled
    /// run stopped.
    pub async fn diagnose(&self, brokers: &str, db: &TestDb) -> String {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let config = self.config(brokers, db);
        let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
        let stored = sink
            .control()
            .read_offsets(&self.topic)
            .await
            .expect("offsets");
        sink.close().await;
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .create()
            .expect("consumer");
        let mut out = String::new();
        for partition in 0..16 {
            match consumer.fetch_watermarks(&self.topic, partition, Duration::from_secs(5)) {
                Ok((low, high)) => out.push_str(&format!(
                    "partition {partition}: stored next_offset {:?}, watermarks {low}..{high}\n",
                    stored.get(&partition)
                )),
                Err(_) => break,
            }
        }
        match consumer.fetch_group_list(Some(&self.group), Duration::from_secs(5)) {
            Ok(list) => {
                for group in list.groups() {
                    out.push_str(&format!(
                        "group {}: state {:?}, protocol {:?}, {} members {:?}\n",
                        group.name(),
                        group.state(),
                        group.protocol(),
                        group.members().len(),
                        group
                            .members()
                            .iter()
                            .map(|m| m.client_id())
                            .collect::<Vec<_>>()
                    ));
                }
            }
            Err(e) => out.push_str(&format!("group {}: cannot describe: {e}\n", self.group)),
        }
        out.push_str(&self.log_tails(LOG_TAIL_LINES));
        out
    }

    /// The last `lines` lines of every sluice log of this scenario, oldest process first:
    /// what a stalled run was doing, in the test's own output.
    fn log_tails(&self, lines: usize) -> String {
        let prefix = format!("{}-", self.connector);
        let mut logs: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(log_dir())
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| {
                let modified = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                (modified, e.path())
            })
            .collect();
        logs.sort();
        let mut out = String::new();
        for (_, path) in logs {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            out.push_str(&format!("--- last lines of {}\n", path.display()));
            for line in &all[all.len().saturating_sub(lines)..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Waits until the table holds `rows` rows (or the timeout passes) and returns the
    /// last stats seen.
    pub async fn wait_for_rows(
        &self,
        brokers: &str,
        db: &TestDb,
        rows: i64,
        timeout: Duration,
    ) -> SequenceStats {
        let deadline = Instant::now() + timeout;
        loop {
            let stats = self.stats(brokers, db).await;
            if stats.rows >= rows {
                return stats;
            }
            if Instant::now() > deadline {
                eprintln!(
                    "timed out waiting for {rows} rows: {stats:?}\n{}",
                    self.diagnose(brokers, db).await
                );
                return stats;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// A row of [`Scenario`]'s table for uid `uid` (`produced_at` null), as a test writes it
/// through the sink directly.
pub fn scenario_row(uid: i64) -> sluice::map::RowOp {
    use sluice::map::{RowOp, SqlValue};
    RowOp::Write(vec![
        SqlValue::Int(uid),
        SqlValue::Text(format!("w{uid}")),
        SqlValue::Null,
        SqlValue::Int(0),
        SqlValue::Int(uid),
    ])
}

/// Exactly the ids `0..n`, each once.
pub fn assert_exactly(stats: SequenceStats, n: i64) {
    assert_eq!(stats.rows, n, "rows: {stats:?}");
    assert_eq!(stats.duplicates(), 0, "duplicates: {stats:?}");
    assert_eq!(stats.gaps(), 0, "gaps: {stats:?}");
    assert_eq!(stats.min, Some(0), "{stats:?}");
    assert_eq!(stats.max, Some(n - 1), "{stats:?}");
}

/// A running `sluice run` process.
pub struct SluiceProcess {
    child: Child,
    /// Its log (stderr), kept after the test.
    pub log: PathBuf,
}

impl SluiceProcess {
    pub fn start(config: &Path) -> SluiceProcess {
        SluiceProcess::start_with_env(config, &[])
    }

    /// [`start`](Self::start) with more environment variables (those a config file
    /// interpolates, say).
    pub fn start_with_env(config: &Path, env: &[(&str, &str)]) -> SluiceProcess {
        // Logs outlive the test's temporary directory: target/tmp/e2e-logs/<config>-<n>.log
        let stem = config
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = log_dir().join(format!("{stem}-{:04x}.log", rand::random::<u16>()));
        eprintln!("sluice log: {}", path.display());
        let log = std::fs::File::create(&path).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["run", "--config"])
            .arg(config)
            .env(
                "RUST_LOG",
                std::env::var("SLUICE_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sluice");
        SluiceProcess { child, log: path }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn terminate(self) -> ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.wait_for_exit(Duration::from_secs(60))
    }

    /// Waits for the process to exit (by itself: a failed task ends `sluice run`), at most
    /// `limit`; then kills it and fails the test.
    pub fn wait_for_exit(mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("sluice did not exit within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL: no chance to clean up.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SluiceProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How long a test may run under nextest before the watchdog prints every thread's stack: a
/// little less than nextest's limit (`.config/nextest.toml`: 5 × 60 s), so that a hung test
/// says where it hangs before it is killed. Under `cargo test` (a soak runs for minutes)
/// there is no watchdog.
const HANG_DUMP_AFTER: Duration = Duration::from_secs(280);

/// How long the runtime may take to stop once the test body has finished.
const RUNTIME_STOP_LIMIT: Duration = Duration::from_secs(10);

/// Runs one async test body on a two-worker runtime, as `#[tokio::test]` would, with two
/// additions for hangs: under nextest, a watchdog that prints every thread's stack (by
/// `gdb`, when it is installed) if the test is still running after [`HANG_DUMP_AFTER`]; and
/// a bounded stop of the runtime that fails the test, with the stacks, if a task or
/// blocking call outlives the body by [`RUNTIME_STOP_LIMIT`].
pub fn run_test(body: impl std::future::Future<Output = ()>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("test runtime");
    let watchdog = std::env::var_os("NEXTEST_RUN_ID").map(|_| Watchdog::arm(HANG_DUMP_AFTER));
    runtime.block_on(body);
    let stopping = Instant::now();
    runtime.shutdown_timeout(RUNTIME_STOP_LIMIT);
    if stopping.elapsed() >= RUNTIME_STOP_LIMIT {
        eprintln!("{}", thread_stacks());
        panic!(
            "the test body finished but its runtime did not stop within {RUNTIME_STOP_LIMIT:?} \
             (the stacks above show what is still running)"
        );
    }
    drop(watchdog);
}

/// Prints every thread's stack once, from its own thread, if it is not dropped in time.
struct Watchdog {
    _disarm: std::sync::mpsc::Sender<()>,
}

impl Watchdog {
    fn arm(after: Duration) -> Watchdog {
        let (disarm, disarmed) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            // Dropping the sender (the test ended, or it panicked) disconnects the channel.
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = disarmed.recv_timeout(after) {
                eprintln!(
                    "the test is still running after {after:?}; every thread's stack:\n{}",
                    thread_stacks()
                );
            }
        });
        Watchdog { _disarm: disarm }
    }
}

/// Every thread's stack in this process, by `gdb -batch -p`, or why it cannot be had.
fn thread_stacks() -> String {
    let output = Command::new("gdb")
        .args(["-batch", "-nx", "-p", &std::process::id().to_string()])
        .args(["-ex", "thread apply all bt 40"])
        .stdin(Stdio::null())
        .output();
    match output {
        Ok(output) => format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(e) => format!("(no thread stacks: cannot run gdb: {e})"),
    }
}

/// Runs `$body` with `$pool` connected to `db` (a PostgreSQL, MySQL or SQLite pool: one
/// body serves the three), then closes the pool. A SQLite file is created when missing, so
/// that a read before sluice made it finds nothing rather than failing.
// The benchmark includes this harness too, and reads no table through it.
#[allow(unused_macros)]
macro_rules! with_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db.kind {
            $crate::harness::Backend::Postgres => {
                let $pool = sqlx::PgPool::connect(&$db.url).await.expect("connect");
                let out = $body;
                $pool.close().await;
                out
            }
            $crate::harness::Backend::MariaDb => {
                let $pool = sqlx::MySqlPool::connect(&$db.url).await.expect("connect");
                let out = $body;
                $pool.close().await;
                out
            }
            $crate::harness::Backend::Sqlite => {
                let options = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename($db.url.trim_start_matches("sqlite://"))
                    .create_if_missing(true);
                let $pool = sqlx::SqlitePool::connect_with(options)
                    .await
                    .expect("connect");
                let out = $body;
                $pool.close().await;
                out
            }
        }
    };
}

/// Writes one test body once and runs it against PostgreSQL, MariaDB and SQLite, or
/// against the databases listed: `for_each_database!(body: postgres = Postgres)`.
///
/// A body runs on all three only where the SQL it exercises differs by database: the
/// write statements, offsets and their compare-and-set, dedup claims, dead-letter rows,
/// derived columns and their DDL, a database's refusals and name rules, migrations, a
/// SIGKILL in the middle of a transaction. A whole-process scenario about the broker, the
/// group, the admin API, plugins or formats names one database, and those are spread
/// over the three so that each carries a share (docs/testing.md).
#[macro_export]
macro_rules! for_each_database {
    ($body:ident) => {
        $crate::for_each_database!($body: postgres = Postgres, mariadb = MariaDb, sqlite = Sqlite);
    };
    ($body:ident: $($test:ident = $kind:ident),+) => {
        mod $body {
            use super::*;
            $(
                #[test]
                fn $test() {
                    $crate::harness::run_test($body(Backend::$kind))
                }
            )+
        }
    };
}

/// One end-to-end run: its broker, database, scenario (topic created) and config file.
pub struct Pipeline {
    pub broker: Broker,
    pub db: TestDb,
    pub scenario: Scenario,
    /// The scenario's connectors.yaml.
    pub config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Pipeline {
    /// Starts a broker, creates the scenario's topic with `partitions`, writes its config.
    pub async fn new(kind: Backend, scenario: Scenario, partitions: i32) -> Pipeline {
        Pipeline::assemble(
            Broker::start(),
            TestDb::new(kind),
            None,
            scenario,
            partitions,
        )
        .await
    }

    /// A run on a broker and database of the test's making; sluice writes through `sink`
    /// (the database behind a proxy, say) when given, the test reads `db` directly.
    pub async fn assemble(
        broker: Broker,
        db: TestDb,
        sink: Option<&TestDb>,
        scenario: Scenario,
        partitions: i32,
    ) -> Pipeline {
        broker.create_topic(&scenario.topic, partitions).await;
        let dir = tempfile::tempdir().expect("temp dir");
        let config = scenario.write(dir.path(), &broker.bootstrap, sink.unwrap_or(&db));
        Pipeline {
            broker,
            db,
            scenario,
            config,
            _dir: dir,
        }
    }

    /// Produces JSON word events for `range` to the scenario's topic.
    pub async fn produce(&self, range: std::ops::Range<u64>) {
        self.broker.produce(&self.scenario.topic, range).await
    }

    /// Starts a `sluice run` on the scenario's config.
    pub fn start(&self) -> SluiceProcess {
        SluiceProcess::start(&self.config)
    }

    /// The table's uid statistics now.
    pub async fn stats(&self) -> SequenceStats {
        self.scenario.stats(&self.broker.bootstrap, &self.db).await
    }

    /// Waits for `count` dead letters in the connector's dead-letter table (at most
    /// `seconds`), returning the last count seen.
    pub async fn wait_for_dead_letters(&self, count: i64, seconds: u64) -> i64 {
        let config = self.scenario.config(&self.broker.bootstrap, &self.db);
        let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            let seen = sink.count_dead_letters().await.expect("count dead letters");
            if seen >= count || Instant::now() > deadline {
                sink.close().await;
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The record keys of every dead letter in the connector's dead-letter table.
    pub async fn dead_letter_keys(&self) -> Vec<String> {
        let config = self.scenario.config(&self.broker.bootstrap, &self.db);
        let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
        let letters = all_dead_letters(&sink).await;
        sink.close().await;
        letters
            .iter()
            .map(|l| String::from_utf8_lossy(l.key.as_deref().unwrap_or_default()).into_owned())
            .collect()
    }

    /// Waits for `rows` rows (at most `seconds`), returning the last statistics seen.
    pub async fn wait_for_rows(&self, rows: i64, seconds: u64) -> SequenceStats {
        self.scenario
            .wait_for_rows(
                &self.broker.bootstrap,
                &self.db,
                rows,
                Duration::from_secs(seconds),
            )
            .await
    }
}
