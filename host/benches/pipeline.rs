//! The pipeline benchmark: a backlog drained by `sluice run` into each database, with the
//! baselines measured in the same run on the same records. Prints one table and writes it
//! as JSON under `target/bench/`.
//!
//! - The backlog is produced first, the way producers write it: batches of up to 10,000
//!   records, lz4-compressed, over several partitions. Two topics hold the same events:
//!   JSON (`{"uid":…,"word":…,"produced_at":…}`) for runs without a plugin, and the
//!   field's raw `#uid*word@timestamp` for runs through the `word_parse` plugin.
//! - sluice runs (a release binary, one process per run, `exactly_once`, batches of
//!   5,000): PostgreSQL insert and upsert, MariaDB and SQLite upsert, each with and
//!   without the plugin, with 1 and 2 tasks; then the levers (the same run with a switch
//!   that puts an older way back, see docs/performance.md).
//! - Baselines: `psql \copy` of the same rows into the same table shape (with and without
//!   its primary key): the sink's limit; a bare librdkafka drain of the topic: the
//!   source's limit; a per-row `INSERT` consumer that commits offsets to Kafka, the shape
//!   of the pipelines in the field articles.
//! - For each: rows/s (from the first commit to the last row: the drain, without the
//!   start), the ratio to COPY with the primary key, the CPU seconds of the sluice process
//!   per million rows (user + system), the share of it spent on the transform threads
//!   (plugins and mapping), and peak RSS. Rows are counted in the table: holes (records
//!   the broker skipped, see below) are printed beside the rate.
//! - Restart to the first commit with a backlog: after SIGTERM, after SIGKILL, and after
//!   SIGKILL with static membership (`group.instance.id`).
//!
//! The test broker (Tansu 0.6.0, memory storage) answers a fetch that starts inside a
//! stored batch with the next batch. A consumer reading on from where its last fetch
//! ended never meets it; one that starts at a stored offset (a restart) or fetches again
//! after a pause does, and the records skipped show as holes.
//!
//! Run: `scripts/bench.sh [--records N] [--only NAME,NAME] [--sluice PATH]`. Needs the test
//! broker (see tests/e2e/harness) and the local PostgreSQL and MariaDB.

#[path = "../../tests/e2e/harness/mod.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness::{Backend, Broker, Scenario, TestDb};
use rdkafka::Message;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, StreamConsumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;
use sluice::sink::Sink;

/// What the command line asks for.
struct Options {
    records: u64,
    partitions: i32,
    /// Only the runs whose names contain one of these (all when empty).
    only: Vec<String>,
    /// The sluice binary to measure.
    sluice: PathBuf,
}

impl Options {
    fn parse() -> Options {
        let mut options = Options {
            records: 1_000_000,
            partitions: 4,
            only: Vec::new(),
            sluice: PathBuf::from(env!("CARGO_BIN_EXE_sluice")),
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || args.next().unwrap_or_else(|| usage(&arg));
            match arg.as_str() {
                "--records" => {
                    options.records = value().parse().unwrap_or_else(|_| usage("--records"))
                }
                "--partitions" => {
                    options.partitions = value().parse().unwrap_or_else(|_| usage("--partitions"))
                }
                "--only" => options.only = value().split(',').map(str::to_string).collect(),
                "--sluice" => {
                    // Relative to where scripts/bench.sh runs (the repository), not to
                    // where cargo runs the bench (host/).
                    let path = PathBuf::from(value());
                    options.sluice = if path.is_relative() && !path.exists() {
                        Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
                    } else {
                        path
                    }
                }
                // cargo bench passes --bench to every bench binary.
                "--bench" => {}
                other => usage(other),
            }
        }
        options
    }

    fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| name.contains(o.as_str()))
    }
}

fn usage(arg: &str) -> ! {
    eprintln!(
        "bench: cannot use {arg}\nusage: scripts/bench.sh [--records N] [--partitions N] [--only NAME,NAME] [--sluice PATH]"
    );
    std::process::exit(2)
}

/// One line of the table.
#[derive(Debug, Clone, Serialize)]
struct Figure {
    name: String,
    /// `sluice`, `baseline` or `restart`.
    kind: &'static str,
    records: u64,
    /// Rows in the table at the end (sluice, COPY, per-row insert) or records read (drain).
    rows: u64,
    /// Records that never arrived (see the module's note on the broker).
    holes: u64,
    seconds: f64,
    rows_per_s: f64,
    /// The rate from the commit that passed a quarter of the records to the last one:
    /// without the start and an early rebalance (a second task joining).
    rows_per_s_after_quarter: Option<f64>,
    /// rows_per_s / COPY's (PostgreSQL, same table with its primary key, same run).
    ratio_to_copy: Option<f64>,
    /// CPU seconds (user + system) of the sluice process per million rows.
    cpu_s_per_million: Option<f64>,
    /// The share of that CPU spent on the tasks' transform threads.
    transform_cpu_share: Option<f64>,
    peak_rss_mb: Option<f64>,
    /// RSS when a quarter, half, three quarters and all of the records had committed:
    /// flat or growing.
    rss_mb_at_quarters: Vec<f64>,
    note: String,
}

impl Figure {
    fn baseline(name: &str, records: u64, rows: u64, elapsed: Duration, note: &str) -> Figure {
        Figure {
            name: name.to_string(),
            kind: "baseline",
            records,
            rows,
            holes: records.saturating_sub(rows),
            seconds: elapsed.as_secs_f64(),
            rows_per_s: rows as f64 / elapsed.as_secs_f64().max(1e-9),
            ratio_to_copy: None,
            cpu_s_per_million: None,
            transform_cpu_share: None,
            peak_rss_mb: None,
            rows_per_s_after_quarter: None,
            rss_mb_at_quarters: Vec::new(),
            note: note.to_string(),
        }
    }
}

/// A run of `sluice run`.
#[derive(Debug, Clone)]
struct Run {
    name: String,
    db: Backend,
    mode: &'static str,
    plugin: bool,
    tasks: u32,
    /// Environment of the process (a lever's switch).
    env: Vec<(&'static str, &'static str)>,
    /// More `kafka.properties`, indented for the scenario's YAML.
    kafka: String,
    max_records: usize,
}

fn matrix() -> Vec<Run> {
    let mut runs = Vec::new();
    let db_name = |db| match db {
        Backend::Postgres => "postgres",
        Backend::MariaDb => "mariadb",
        Backend::Sqlite => "sqlite",
    };
    for (db, modes) in [
        (Backend::Postgres, &["insert", "upsert"][..]),
        (Backend::MariaDb, &["upsert"][..]),
        (Backend::Sqlite, &["upsert"][..]),
    ] {
        for &mode in modes {
            for plugin in [true, false] {
                for tasks in [1, 2] {
                    runs.push(Run {
                        name: format!(
                            "{} {mode} {} {tasks}t",
                            db_name(db),
                            if plugin { "word_parse" } else { "json" }
                        ),
                        db,
                        mode,
                        plugin,
                        tasks,
                        env: Vec::new(),
                        kafka: String::new(),
                        max_records: 5000,
                    });
                }
            }
        }
    }
    let base = |name: &str, mode: &'static str| Run {
        name: name.to_string(),
        db: Backend::Postgres,
        mode,
        plugin: true,
        tasks: 1,
        env: Vec::new(),
        kafka: String::new(),
        max_records: 5000,
    };
    runs.push(Run {
        env: vec![("SLUICE_PG_WRITE", "unnest")],
        ..base(
            "lever: postgres insert word_parse 1t, UNNEST not COPY",
            "insert",
        )
    });
    runs.push(Run {
        env: vec![("SLUICE_BACKPRESSURE", "pause")],
        ..base(
            "lever: postgres insert word_parse 1t, pause for backpressure",
            "insert",
        )
    });
    runs.push(Run {
        max_records: 20000,
        ..base(
            "lever: postgres insert word_parse 1t, batches of 20000",
            "insert",
        )
    });
    runs.push(Run {
        kafka: "    queued.min.messages: 1000000\n".into(),
        ..base(
            "lever: postgres insert word_parse 1t, queued.min.messages 1M",
            "insert",
        )
    });
    for tasks in [1, 2] {
        runs.push(Run {
            kafka: "    max.partition.fetch.bytes: 4194304\n".into(),
            tasks,
            ..base(
                &format!(
                    "lever: postgres insert word_parse {tasks}t, max.partition.fetch.bytes=4MiB"
                ),
                "insert",
            )
        });
    }
    runs.push(Run {
        kafka: "    fetch.queue.backoff.ms: 1000\n".into(),
        ..base(
            "lever: postgres insert word_parse 1t, fetch.queue.backoff.ms=1000",
            "insert",
        )
    });
    runs.push(Run {
        kafka: "    queued.max.messages.kbytes: 65536\n".into(),
        ..base(
            "lever: postgres insert word_parse 1t, queued.max.messages.kbytes=65536",
            "insert",
        )
    });
    runs
}

/// The word event `uid` as the field writes it (the plugin's input).
fn raw_event(uid: u64) -> String {
    format!("#{uid}*w{}@{}", uid % 97, 1_700_000_000_000u64 + uid)
}

/// Produces `n` records as producers write a backlog: lz4 batches of up to 10,000.
async fn produce_backlog(bootstrap: &str, topic: &str, n: u64, value: fn(u64) -> String) {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("compression.codec", "lz4")
        .set("batch.num.messages", "10000")
        .set("batch.size", "1000000")
        .set("linger.ms", "50")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .create()
        .expect("producer");
    let mut pending = Vec::with_capacity(100_000);
    for uid in 0..n {
        let key = uid.to_string();
        let payload = value(uid);
        pending.push(
            producer
                .send_result(FutureRecord::to(topic).key(&key).payload(&payload))
                .expect("enqueue"),
        );
        if pending.len() >= 100_000 {
            for f in pending.drain(..) {
                f.await.expect("delivery").expect("delivered");
            }
        }
    }
    for f in pending {
        f.await.expect("delivery").expect("delivered");
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
}

/// A bare librdkafka consumer reading every partition from the start, no group join, with
/// prefetch raised (`queued.min.messages`): the source's limit.
fn bare_drain(bootstrap: &str, topic: &str, partitions: i32, n: u64) -> Figure {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", harness::unique("bench-drain"))
        .set("enable.auto.commit", "false")
        .set("queued.min.messages", "1000000")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&assignment).expect("assign");
    let started = Instant::now();
    let mut last = Instant::now();
    let mut seen = 0;
    while seen < n && last.elapsed() < Duration::from_secs(10) {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
            seen += 1;
            last = Instant::now();
        }
    }
    let elapsed = if seen < n {
        last - started
    } else {
        started.elapsed()
    };
    Figure::baseline(
        "baseline: bare librdkafka drain",
        n,
        seen,
        elapsed,
        "assign from the start, queued.min.messages=1000000",
    )
}

/// The rows sluice writes for `n` word events, as CSV (partition and offset as in the
/// topic do not matter to the database's pace; they are the uid's).
fn copy_file(dir: &Path, n: u64) -> PathBuf {
    use std::io::Write;
    let path = dir.join("rows.csv");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).expect("csv"));
    for uid in 0..n {
        let t = chrono::DateTime::from_timestamp_millis(1_700_000_000_000 + uid as i64)
            .expect("ts")
            .naive_utc();
        writeln!(
            out,
            "{uid},w{},{}+00,{},{uid}",
            uid % 97,
            t.format("%Y-%m-%d %H:%M:%S%.6f"),
            uid % 4
        )
        .expect("write csv");
    }
    out.flush().expect("flush csv");
    path
}

fn psql(url: &str, sql: &str) -> std::process::Output {
    Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-q", "-c", sql])
        .output()
        .expect("psql runs")
}

/// `psql \copy` of the same rows into the table shape sluice writes, with or without its
/// primary key: the database's pace.
fn psql_copy(url: &str, csv: &Path, n: u64, keyed: bool) -> Figure {
    let table = harness::unique("bench_copy");
    let key = if keyed { " PRIMARY KEY" } else { "" };
    let created = psql(
        url,
        &format!(
            "CREATE TABLE {table} (uid BIGINT{key}, word TEXT, produced_at TIMESTAMPTZ, src_partition INTEGER, src_offset BIGINT)"
        ),
    );
    assert!(created.status.success(), "create: {created:?}");
    let started = Instant::now();
    let copied = psql(
        url,
        &format!("\\copy {table} FROM '{}' WITH (FORMAT csv)", csv.display()),
    );
    let elapsed = started.elapsed();
    assert!(copied.status.success(), "copy: {copied:?}");
    let _ = psql(url, &format!("DROP TABLE {table}"));
    Figure::baseline(
        if keyed {
            "baseline: psql \\copy, primary key"
        } else {
            "baseline: psql \\copy, no key"
        },
        n,
        n,
        elapsed,
        "the same rows, same columns",
    )
}

/// A consumer in a group that inserts each record in its own statement (autocommit) and
/// commits its offsets to Kafka every 1,000 records: the pipelines of the field articles.
/// Runs for at most `budget`; the rate is over the rows it wrote.
async fn per_row_insert(
    bootstrap: &str,
    topic: &str,
    url: &str,
    n: u64,
    budget: Duration,
) -> Figure {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("connect");
    let table = harness::unique("bench_per_row");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {table} (uid BIGINT PRIMARY KEY, word TEXT, produced_at TIMESTAMPTZ, src_partition INTEGER, src_offset BIGINT)"
    )))
    .execute(&pool)
    .await
    .expect("create");
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", harness::unique("bench-per-row"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    let insert = format!(
        "INSERT INTO {table} VALUES ($1, $2, to_timestamp($3::float8 / 1000), $4, $5) ON CONFLICT DO NOTHING"
    );
    let mut rows = 0u64;
    let mut started = None;
    let deadline = Instant::now() + budget + Duration::from_secs(30);
    while rows < n && Instant::now() < deadline {
        let Ok(Ok(message)) = tokio::time::timeout(Duration::from_secs(10), consumer.recv()).await
        else {
            break;
        };
        let started = *started.get_or_insert_with(Instant::now);
        let value: serde_json::Value =
            serde_json::from_slice(message.payload().unwrap_or_default()).expect("json");
        sqlx::query(sqlx::AssertSqlSafe(insert.clone()))
            .bind(value["uid"].as_i64())
            .bind(value["word"].as_str().map(str::to_string))
            .bind(value["produced_at"].as_i64())
            .bind(message.partition())
            .bind(message.offset())
            .execute(&pool)
            .await
            .expect("insert");
        rows += 1;
        if rows.is_multiple_of(1000) {
            consumer
                .commit_consumer_state(CommitMode::Async)
                .expect("commit");
            if started.elapsed() >= budget {
                break;
            }
        }
    }
    let elapsed = started.map_or(Duration::ZERO, |s| s.elapsed());
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
        .execute(&pool)
        .await;
    Figure {
        holes: 0,
        ..Figure::baseline(
            "baseline: per-row INSERT, offsets to Kafka",
            n,
            rows,
            elapsed,
            &format!("stopped after {:.0} s", budget.as_secs_f64()),
        )
    }
}

/// What `/proc` says of a process.
#[derive(Debug, Default, Clone, Copy)]
struct ProcessUse {
    cpu_seconds: f64,
    transform_cpu_seconds: f64,
    peak_rss_mb: f64,
    rss_mb: f64,
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of a `/proc/…/stat` line, in ticks, and the thread's name.
fn stat_ticks(stat: &str) -> Option<(String, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat[open + 1..close].to_string();
    let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
    // Fields after the name: state is index 0, utime 11, stime 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

fn process_use(pid: u32, ticks: f64) -> ProcessUse {
    let mut usage = ProcessUse::default();
    if let Some((_, total)) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| stat_ticks(&s))
    {
        usage.cpu_seconds = total as f64 / ticks;
    }
    for entry in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Some((name, t)) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| stat_ticks(&s))
            && name.contains("-transf")
        {
            usage.transform_cpu_seconds += t as f64 / ticks;
        }
    }
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        for line in status.lines() {
            let mb = |kb: &str| {
                kb.trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<f64>()
                    .unwrap_or(0.0)
                    / 1024.0
            };
            if let Some(kb) = line.strip_prefix("VmHWM:") {
                usage.peak_rss_mb = mb(kb);
            }
            if let Some(kb) = line.strip_prefix("VmRSS:") {
                usage.rss_mb = mb(kb);
            }
        }
    }
    usage
}

/// A sluice process and the scenario it runs.
struct Process {
    child: Child,
}

impl Process {
    fn start(sluice: &Path, config: &Path, env: &[(&str, &str)]) -> Process {
        let log = harness::log_dir().join(format!(
            "bench-{}-{:04x}.log",
            config.file_stem().unwrap_or_default().to_string_lossy(),
            rand::random::<u16>()
        ));
        let child = Command::new(sluice)
            .args(["run", "--config"])
            .arg(config)
            .env(
                "RUST_LOG",
                std::env::var("SLUICE_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("start sluice");
        Process { child }
    }

    fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status();
    }

    fn wait(mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The records a connector has committed from `topic`: the sum of its stored next offsets
/// (every partition starts at 0).
async fn committed(sink: &Sink, connector: &str, topic: &str) -> u64 {
    // SUM is a DECIMAL in PostgreSQL and MySQL: cast back to an integer.
    let integer = match sink.dialect() {
        sluice::sink::Dialect::MySql => "SIGNED",
        _ => "BIGINT",
    };
    sink.query_integers(
        format!(
            "SELECT CAST(COALESCE(SUM(next_offset), 0) AS {integer}) FROM sluice_offsets WHERE connector = '{connector}' AND topic = '{topic}'"
        ),
        1,
    )
    .await
    .ok()
    .and_then(|v| v[0])
    .unwrap_or(0) as u64
}

/// A connector's scenario for `run`, on `topic`, with a short name (its task threads are
/// named after it, and Linux keeps 15 characters of a thread's name).
fn scenario(run: &Run, index: usize, topic: &str) -> Scenario {
    let mut scenario = Scenario::new(run.tasks);
    // Unique with the topic (offsets are kept per connector and topic, and each bench
    // run has its own topics).
    scenario.connector = format!("b{index:02}");
    scenario.topic = topic.to_string();
    scenario.mode = run.mode;
    scenario.key = "[uid]";
    scenario.max_records = run.max_records;
    scenario.extra_kafka = run.kafka.clone();
    // The admin API, for the stage durations in /metrics (a top-level key after the
    // scenario's kafka properties).
    scenario.extra_kafka.push_str(&format!(
        "admin:\n  listen: 127.0.0.1:{}\n",
        harness::free_port()
    ));
    if run.plugin {
        scenario.transforms = format!(
            "    transforms:\n      - name: parse\n        plugin: {}\n        config: {{ separator: \"*\" }}\n",
            sluice_transform::example_plugin_path("word_parse").display()
        );
    }
    scenario
}

/// The sums and counts of `sluice_batch_duration_seconds` by stage, from the process's
/// /metrics: where a batch's time goes.
fn stage_times(scenario: &Scenario) -> String {
    use std::io::{Read, Write};
    let Some(listen) = scenario
        .extra_kafka
        .lines()
        .find_map(|l| l.trim().strip_prefix("listen: "))
    else {
        return String::new();
    };
    let mut text = String::new();
    if let Ok(mut stream) = std::net::TcpStream::connect(listen) {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n");
        let _ = stream.read_to_string(&mut text);
    }
    let mut out = Vec::new();
    for stage in ["poll", "transform", "map", "write", "commit"] {
        let find = |suffix: &str| {
            text.lines()
                .find(|l| {
                    l.starts_with(&format!("sluice_batch_duration_seconds_{suffix}{{"))
                        && l.contains(&format!("stage=\"{stage}\""))
                })
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
        };
        if let (Some(sum), Some(count)) = (find("sum"), find("count")) {
            out.push(format!("{stage} {sum:.2}/{count:.0}"));
        }
    }
    out.join(", ")
}

/// Drains the backlog with one sluice process.
async fn run_sluice(
    options: &Options,
    broker: &Broker,
    run: &Run,
    index: usize,
    topic: &str,
    ticks: f64,
) -> Figure {
    let n = options.records;
    let db = TestDb::new(run.db);
    let scenario = scenario(run, index, topic);
    let dir = tempfile::tempdir().expect("dir");
    let config_path = scenario.write(dir.path(), &broker.bootstrap, &db);
    let config = scenario.config(&broker.bootstrap, &db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    sink.prepare().await.expect("prepare");

    let process = Process::start(&options.sluice, &config_path, &run.env);
    let pid = process.child.id();
    let started = Instant::now();
    let mut first: Option<(Instant, u64, ProcessUse)> = None;
    let mut progress = (Instant::now(), 0u64);
    let mut quarter: Option<(Instant, u64)> = None;
    let mut rss = Vec::new();
    let mut done;
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        done = committed(&sink, &scenario.connector, topic).await;
        if done > progress.1 {
            progress = (Instant::now(), done);
            while rss.len() < 4 && done >= n * (rss.len() as u64 + 1) / 4 {
                rss.push(process_use(pid, ticks).rss_mb);
            }
            if quarter.is_none() && done >= n / 4 {
                quarter = Some(progress);
            }
        }
        if done > 0 && first.is_none() {
            first = Some((Instant::now(), done, process_use(pid, ticks)));
        }
        if done >= n || progress.0.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    let end = progress.0;
    let usage = process_use(pid, ticks);
    let stages = stage_times(&scenario);
    process.signal("-TERM");
    process.wait(Duration::from_secs(30));
    let counts = sink
        .query_integers(
            format!(
                "SELECT COUNT(*), COUNT(DISTINCT uid) FROM {}",
                scenario.table
            ),
            2,
        )
        .await
        .expect("count");
    let (rows, distinct) = (counts[0].unwrap_or(0) as u64, counts[1].unwrap_or(0) as u64);
    let _ = sink
        .execute_statement(&format!("DROP TABLE {}", scenario.table))
        .await;
    sink.close().await;
    let (first_at, first_done, at_first) = first.unwrap_or((end, 0, usage));
    let drain = end.saturating_duration_since(first_at);
    let drained = done.saturating_sub(first_done);
    let cpu = usage.cpu_seconds;
    Figure {
        name: run.name.clone(),
        kind: "sluice",
        records: n,
        rows,
        holes: n.saturating_sub(distinct),
        seconds: drain.as_secs_f64(),
        rows_per_s: drained as f64 / drain.as_secs_f64().max(1e-9),
        rows_per_s_after_quarter: quarter.map(|(at, from)| {
            done.saturating_sub(from) as f64
                / end.saturating_duration_since(at).as_secs_f64().max(1e-9)
        }),
        rss_mb_at_quarters: rss,
        ratio_to_copy: None,
        // Over the drain, like the rate: the start (plugin compilation, connections, the
        // group join) is in the note.
        cpu_s_per_million: Some((cpu - at_first.cpu_seconds) / (drained.max(1) as f64) * 1e6),
        transform_cpu_share: Some(
            (usage.transform_cpu_seconds - at_first.transform_cpu_seconds).max(0.0)
                / (cpu - at_first.cpu_seconds).max(1e-9),
        ),
        peak_rss_mb: Some(usage.peak_rss_mb),
        note: format!(
            "first commit {:.2} s after start; {:.2} CPU s in all; {} duplicates; batch stages (s in all, batches): {stages}",
            first_at.saturating_duration_since(started).as_secs_f64(),
            cpu,
            rows.saturating_sub(distinct)
        ),
    }
}

/// Starts a connector on the backlog, stops it with `signal` once a tenth has committed,
/// starts it again and times the new process from its start to its first commit.
async fn restart_to_first_commit(
    options: &Options,
    broker: &Broker,
    topic: &str,
    signal: &str,
    static_membership: bool,
    index: usize,
) -> Figure {
    let run = Run {
        name: String::new(),
        db: Backend::Postgres,
        mode: "insert",
        plugin: true,
        tasks: 1,
        env: Vec::new(),
        kafka: if static_membership {
            format!("    group.instance.id: {}\n", harness::unique("bench"))
        } else {
            String::new()
        },
        max_records: 5000,
    };
    let db = TestDb::new(Backend::Postgres);
    let scenario = scenario(&run, index, topic);
    let dir = tempfile::tempdir().expect("dir");
    let config_path = scenario.write(dir.path(), &broker.bootstrap, &db);
    let config = scenario.config(&broker.bootstrap, &db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    sink.prepare().await.expect("prepare");
    let process = Process::start(&options.sluice, &config_path, &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while committed(&sink, &scenario.connector, topic).await < options.records / 10
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    process.signal(signal);
    process.wait(Duration::from_secs(30));
    let before = committed(&sink, &scenario.connector, topic).await;
    let process = Process::start(&options.sluice, &config_path, &[]);
    let started = Instant::now();
    let mut first = None;
    while started.elapsed() < Duration::from_secs(120) {
        if committed(&sink, &scenario.connector, topic).await > before {
            first = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    process.signal("-TERM");
    process.wait(Duration::from_secs(30));
    let _ = sink
        .execute_statement(&format!("DROP TABLE {}", scenario.table))
        .await;
    sink.close().await;
    let name = format!(
        "restart after {}{}: to the first commit",
        signal.trim_start_matches('-'),
        if static_membership {
            ", group.instance.id"
        } else {
            ""
        }
    );
    let elapsed = first.unwrap_or(Duration::from_secs(120));
    Figure {
        name,
        kind: "restart",
        records: options.records,
        rows: 0,
        holes: 0,
        seconds: elapsed.as_secs_f64(),
        rows_per_s: 0.0,
        ratio_to_copy: None,
        cpu_s_per_million: None,
        transform_cpu_share: None,
        peak_rss_mb: None,
        rows_per_s_after_quarter: None,
        rss_mb_at_quarters: Vec::new(),
        note: format!(
            "{} records committed before the stop; session.timeout.ms 6000{}",
            before,
            if first.is_none() {
                "; no commit within 120 s"
            } else {
                ""
            }
        ),
    }
}

fn print_table(figures: &[Figure]) {
    println!(
        "\n{:<70} {:>8} {:>8} {:>6} {:>8} {:>7} {:>16} {:>6} {:>7}",
        "run", "rows/s", ">25%", "×COPY", "CPU s/M", "xform%", "RSS MB ¼ ½ ¾ 1", "holes", "seconds"
    );
    for f in figures {
        let opt = |v: Option<f64>, digits: usize| {
            v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
        };
        let rate = if f.kind == "restart" {
            "-".to_string()
        } else {
            format!("{:.0}", f.rows_per_s)
        };
        let rss = if f.rss_mb_at_quarters.is_empty() {
            opt(f.peak_rss_mb, 0)
        } else {
            f.rss_mb_at_quarters
                .iter()
                .map(|mb| format!("{mb:.0}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!(
            "{:<70} {:>8} {:>8} {:>6} {:>8} {:>7} {:>16} {:>6} {:>7.2}",
            f.name,
            rate,
            opt(f.rows_per_s_after_quarter, 0),
            opt(f.ratio_to_copy, 2),
            opt(f.cpu_s_per_million, 2),
            opt(f.transform_cpu_share.map(|s| s * 100.0), 1),
            rss,
            f.holes,
            f.seconds
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let options = Options::parse();
    let n = options.records;
    let ticks = clock_ticks();
    let broker = Broker::start();
    let json_topic = harness::unique("bench_json");
    let raw_topic = harness::unique("bench_raw");
    println!(
        "pipeline benchmark: {n} records, {} partitions, lz4 batches of up to 10000; sluice {}",
        options.partitions,
        options.sluice.display()
    );
    let producing = Instant::now();
    for (topic, value) in [
        (&json_topic, harness::word_event as fn(u64) -> String),
        (&raw_topic, raw_event),
    ] {
        broker.create_topic(topic, options.partitions).await;
        produce_backlog(&broker.bootstrap, topic, n, value).await;
    }
    println!(
        "produced 2 × {n} records in {:.1} s",
        producing.elapsed().as_secs_f64()
    );

    let postgres = TestDb::new(Backend::Postgres);
    let mut figures = Vec::new();
    let csv_dir = tempfile::tempdir().expect("dir");
    let csv = copy_file(csv_dir.path(), n);
    let copy_keyed = psql_copy(&postgres.url, &csv, n, true);
    let copy_rate = copy_keyed.rows_per_s;
    figures.push(copy_keyed);
    figures.push(psql_copy(&postgres.url, &csv, n, false));
    figures.push(bare_drain(
        &broker.bootstrap,
        &json_topic,
        options.partitions,
        n,
    ));
    if options.wants("per-row") {
        figures.push(
            per_row_insert(
                &broker.bootstrap,
                &json_topic,
                &postgres.url,
                n,
                Duration::from_secs(20),
            )
            .await,
        );
    }
    print_table(&figures);

    for (index, run) in matrix().into_iter().enumerate() {
        if !options.wants(&run.name) {
            continue;
        }
        let topic = if run.plugin { &raw_topic } else { &json_topic };
        let figure = run_sluice(&options, &broker, &run, index, topic, ticks).await;
        println!("{}: {:.0} rows/s", figure.name, figure.rows_per_s);
        figures.push(figure);
    }
    if options.wants("restart") {
        for (i, (signal, static_membership)) in
            [("-TERM", false), ("-KILL", false), ("-KILL", true)]
                .into_iter()
                .enumerate()
        {
            let figure = restart_to_first_commit(
                &options,
                &broker,
                &raw_topic,
                signal,
                static_membership,
                90 + i,
            )
            .await;
            println!("{}: {:.2} s", figure.name, figure.seconds);
            figures.push(figure);
        }
    }
    for f in &mut figures {
        if f.kind != "restart" {
            f.ratio_to_copy = Some(f.rows_per_s / copy_rate.max(1e-9));
        }
    }
    print_table(&figures);

    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("../bench");
    std::fs::create_dir_all(&dir).expect("target/bench");
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let report = serde_json::json!({
        "records": n,
        "partitions": options.partitions,
        "sluice": options.sluice.display().to_string(),
        "unix_time": stamp,
        "figures": figures,
    });
    let text = serde_json::to_string_pretty(&report).expect("json");
    for name in [
        format!("pipeline-{stamp}.json"),
        "pipeline.json".to_string(),
    ] {
        std::fs::write(dir.join(&name), &text).expect("write report");
    }
    println!("\nwritten: {}", dir.join("pipeline.json").display());
}
