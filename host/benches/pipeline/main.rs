//! The pipeline benchmark: a backlog drained by `sluice run` into each database, with the
//! baselines measured in the same run on the same records. Prints one table and writes it
//! as JSON under `target/bench/`.
//!
//! - The backlog is produced first, the way producers write it: batches of up to 10,000
//!   records, lz4-compressed, over several partitions. Two topics hold the same events:
//!   JSON (`{"uid":…,"word":…,"produced_at":…}`) for runs without a plugin, and the
//!   field's raw `#uid*word@timestamp` for runs through the `word_parse` plugin. When the
//!   Avro run is asked for, a third holds them in Avro (record `WordEvent`), written by
//!   Confluent's own `AvroSerializer` (`produce_avro.py`) against the suite's Schema
//!   Registry, which runs in this process.
//! - sluice runs (a release binary, one process per run, `exactly_once`, batches of
//!   5,000): PostgreSQL insert and upsert, MariaDB and SQLite upsert, each with and
//!   without the plugin, with 1 and 2 tasks; then the levers (the same run with a switch
//!   that puts an older way back, see docs/performance.md); `postgres insert avro 1t`
//!   (`format: avro`) beside `postgres insert json 1t`, and its ratio to it;
//!   `postgres upsert debezium 1t` (the JSON run's rows as Debezium change events,
//!   `envelope: debezium`, versioned by their lsn) beside `postgres upsert json 1t`, and
//!   `postgres upsert debezium 20 tables 1t` (the same events from 20 source tables, one
//!   connector writing 20 tables through `table: "…_{source.table}"`) beside it too, and
//!   `postgres upsert debezium 20 topics 20 tables 1t`: the same events with each source
//!   table on a topic of its own (one partition each, as Debezium writes a database by
//!   default), one connector subscribed to the 20 topics.
//! - Baselines: `psql \copy` of the same rows into the same table shape (with and without
//!   its primary key): the sink's limit; a bare librdkafka drain of the topic with sluice's
//!   own fetch settings, timed from its first record: the source's limit (`×drain`); a
//!   per-row `INSERT` consumer that commits offsets to Kafka, the shape of the pipelines in
//!   the field articles.
//! - For each: rows/s (from the first commit to the last row: the drain, without the
//!   start), the ratio to COPY with the primary key, the CPU seconds of the sluice process
//!   per million rows (user + system), the share of it spent on the transform threads
//!   (plugins and mapping), and peak RSS. Rows are counted in the table: holes (records
//!   the broker skipped, see below) are printed beside the rate.
//! - `postgres insert word_parse 2 processes × 1t`: two `sluice run` processes in one
//!   group, one task each (CPU and RSS summed over both), beside the 1-task and 2-task runs.
//! - `postgres insert json 100 connectors`: 100 connectors in one process, each on a topic
//!   of a hundredth of the backlog, each writing its own table (many.rs): its rows/s beside
//!   `postgres insert json 1t` on the same number of records, peak RSS, the connections it
//!   holds at PostgreSQL and the time to the last connector's first commit.
//! - Restart to the first commit with a backlog: after SIGTERM, after SIGKILL, and after
//!   SIGKILL with static membership (`group.instance.id`).
//!
//! The test broker (Tansu 0.6.0, memory storage) answers a fetch that starts inside a
//! stored batch with the next batch. A consumer reading on from where its last fetch
//! ended never meets it; one that starts at a stored offset (a restart) or fetches again
//! after a pause does, and the records skipped show as holes.
//!
//! Run: `scripts/bench.sh [--records N] [--only NAME,NAME] [--rounds N] [--sluice PATH]`. Needs the test
//! broker (see tests/e2e/harness) and the local PostgreSQL and MariaDB.

#[path = "../../../tests/e2e/harness/mod.rs"]
mod harness;
// The suite's Schema Registry, for the Avro run. The bench uses only a part of it, and
// cargo builds benches with cfg(test) but without the test harness, so the registry's
// unit tests are left with imports they do not use.
#[path = "../../../tests/e2e/registry/mod.rs"]
#[allow(dead_code, unused_imports)]
mod registry;

mod backlog;
mod baselines;
mod many;
mod matrix;
mod process;
mod report;
mod runs;
mod timeline;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::{Backend, Broker, TestDb};

use backlog::{
    DEBEZIUM_TABLES, debezium_event, debezium_event_of_many_tables, produce_avro_backlog,
    produce_backlog, produce_backlog_routed, raw_event, table_topic,
};
use baselines::{bare_drain, copy_file, per_row_insert, psql_copy, sqlite_loop};
use matrix::matrix;
use process::clock_ticks;
use registry::TestRegistry;
use report::{compare, print_table, third_pass_targets};
use runs::{restart_to_first_commit, run_sluice};

/// What the command line asks for.
struct Options {
    records: u64,
    partitions: i32,
    /// Only the runs whose names contain one of these (all when empty).
    only: Vec<String>,
    /// The sluice binary to measure.
    sluice: PathBuf,
    /// How many times the runs go, alternated (each round runs every run once): the
    /// targets and ratios are the means over the rounds.
    rounds: u32,
}

impl Options {
    fn parse() -> Options {
        let mut options = Options {
            records: 1_000_000,
            partitions: 4,
            only: Vec::new(),
            sluice: PathBuf::from(env!("CARGO_BIN_EXE_sluice")),
            rounds: 1,
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
                "--rounds" => {
                    options.rounds = value()
                        .parse()
                        .ok()
                        .filter(|&r| r > 0)
                        .unwrap_or_else(|| usage("--rounds"))
                }
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

    /// `sluice` is another build than this benchmark's (`--sluice`): the runs leave the
    /// tables to it ([`runs::prepare_tables`]), so that an older sluice meets a database
    /// at its own schema version.
    fn other_build(&self) -> bool {
        self.sluice != Path::new(env!("CARGO_BIN_EXE_sluice"))
    }

    fn wants(&self, name: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|o| name.contains(o.as_str()))
    }
}

fn usage(arg: &str) -> ! {
    eprintln!(
        "bench: cannot use {arg}\nusage: scripts/bench.sh [--records N] [--partitions N] [--only NAME,NAME] [--rounds N] [--sluice PATH]"
    );
    std::process::exit(2)
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
    // The Avro topic, only when an Avro run is asked for: its producer is Python.
    let avro_topic = harness::unique("bench_avro");
    let registry = if matrix()
        .iter()
        .any(|run| run.avro && options.wants(&run.name))
    {
        let registry = TestRegistry::start().await;
        broker.create_topic(&avro_topic, options.partitions).await;
        let seconds =
            produce_avro_backlog(&broker.bootstrap, &registry.url(), &avro_topic, n).await;
        println!("produced {n} Avro records (confluent_kafka's AvroSerializer) in {seconds:.1} s");
        Some(registry)
    } else {
        None
    };
    let registry_url = registry.as_ref().map(TestRegistry::url);
    // The Debezium topic (the JSON topic's rows in change events), only when asked for.
    let debezium_topic = harness::unique("bench_debezium");
    if matrix()
        .iter()
        .any(|run| run.debezium && options.wants(&run.name))
    {
        broker
            .create_topic(&debezium_topic, options.partitions)
            .await;
        produce_backlog(&broker.bootstrap, &debezium_topic, n, debezium_event).await;
        println!("produced {n} Debezium change events");
    }
    // The same events from 20 source tables, only when asked for.
    let many_tables_topic = harness::unique("bench_debezium_tables");
    if matrix()
        .iter()
        .any(|run| run.many_tables && options.wants(&run.name))
    {
        broker
            .create_topic(&many_tables_topic, options.partitions)
            .await;
        produce_backlog(
            &broker.bootstrap,
            &many_tables_topic,
            n,
            debezium_event_of_many_tables,
        )
        .await;
        println!("produced {n} Debezium change events of 20 tables");
    }
    // The same events on a topic per source table (one partition each), only when asked
    // for.
    let table_topics = harness::unique("bench_debezium_topics");
    if matrix()
        .iter()
        .any(|run| run.many_topics && options.wants(&run.name))
    {
        for uid in 0..DEBEZIUM_TABLES {
            broker
                .create_topic(&table_topic(&table_topics, uid), 1)
                .await;
        }
        produce_backlog_routed(
            &broker.bootstrap,
            &|uid| table_topic(&table_topics, uid),
            n,
            debezium_event_of_many_tables,
        )
        .await;
        println!("produced {n} Debezium change events of 20 tables on 20 topics");
    }

    let postgres = TestDb::new(Backend::Postgres);
    let mut figures = Vec::new();
    let csv_dir = tempfile::tempdir().expect("dir");
    let csv = copy_file(csv_dir.path(), n);
    let copy_keyed = psql_copy(&postgres.url, &csv, n, true);
    let copy_rate = copy_keyed.rows_per_s;
    figures.push(copy_keyed);
    figures.push(psql_copy(&postgres.url, &csv, n, false));
    let drain = bare_drain(&broker.bootstrap, &json_topic, options.partitions, n);
    let drain_rate = drain.rows_per_s;
    figures.push(drain);
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
    // SQLite's own pace, beside the SQLite runs.
    if options.wants("bare sqlx")
        || matrix()
            .iter()
            .any(|run| run.db == Backend::Sqlite && options.wants(&run.name))
    {
        figures.push(sqlite_loop(n).await);
    }
    print_table(&figures);

    // Each round runs every run once, so that a slow spell of this shared machine falls
    // on every run alike.
    // A run's index names its connector, whose offsets are kept per connector and
    // topic: each round's runs get indexes of their own, so a round drains the backlog
    // again.
    let runs = matrix().len();
    let rounds = (1..=options.rounds).flat_map(|round| {
        matrix()
            .into_iter()
            .enumerate()
            .map(move |(index, run)| (round, (round as usize - 1) * runs + index, run))
    });
    for (round, index, run) in rounds {
        if !options.wants(&run.name) {
            continue;
        }
        if options.rounds > 1 {
            println!("round {round} of {}: {}", options.rounds, run.name);
        }
        let topic = if run.plugin {
            &raw_topic
        } else if run.avro {
            &avro_topic
        } else if run.many_topics {
            &table_topics
        } else if run.many_tables {
            &many_tables_topic
        } else if run.debezium {
            &debezium_topic
        } else {
            &json_topic
        };
        let figure = run_sluice(
            &options,
            &broker,
            &run,
            index,
            topic,
            registry_url.as_deref(),
            ticks,
        )
        .await;
        println!("{}: {:.0} rows/s", figure.name, figure.rows_per_s);
        figures.push(figure);
    }
    let many = if options.wants(many::NAME) {
        let many = many::many_connectors(&options, &broker, ticks).await;
        println!("{}: {:.0} rows/s", many.figure.name, many.figure.rows_per_s);
        figures.push(many.figure.clone());
        Some(many)
    } else {
        None
    };
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
                900 + i,
            )
            .await;
            println!("{}: {:.2} s", figure.name, figure.seconds);
            figures.push(figure);
        }
    }
    for f in &mut figures {
        if f.kind != "restart" {
            f.ratio_to_copy = Some(f.rows_per_s / copy_rate.max(1e-9));
            f.ratio_to_drain = Some(f.rows_per_s / drain_rate.max(1e-9));
        }
    }
    print_table(&figures);
    let avro = compare(
        &figures,
        "postgres insert avro 1t",
        "postgres insert json 1t",
        0.9,
    );
    let debezium = compare(
        &figures,
        "postgres upsert debezium 1t",
        "postgres upsert json 1t",
        0.8,
    );
    let many_tables = compare(
        &figures,
        "postgres upsert debezium 20 tables 1t",
        "postgres upsert json 1t",
        0.8,
    );
    let many_topics = compare(
        &figures,
        "postgres upsert debezium 20 topics 20 tables 1t",
        "postgres upsert json 1t",
        0.8,
    );
    let many_tables_large_batches = compare(
        &figures,
        "lever: postgres upsert debezium 20 tables 1t, batches of 20000",
        "postgres upsert json 1t",
        0.8,
    );
    let many_connectors = compare(&figures, many::NAME, "postgres insert json 1t", 0.6);
    for comparison in [
        &avro,
        &debezium,
        &many_tables,
        &many_topics,
        &many_tables_large_batches,
        &many_connectors,
    ]
    .into_iter()
    .flatten()
    {
        println!("\n{comparison}");
    }
    if let Some(many) = &many {
        println!("\n{many}");
    }
    let targets = third_pass_targets(&figures);
    if !targets.is_empty() {
        println!(
            "\nissue 47's targets (means over {} round(s); docs/performance.md):",
            options.rounds
        );
        for target in &targets {
            println!("  {target}");
        }
    }

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
        "avro_to_json": avro,
        "debezium_to_upsert": debezium,
        "debezium_20_tables_to_upsert": many_tables,
        "debezium_20_topics_to_upsert": many_topics,
        "many_connectors_to_one": many_connectors,
        "rounds": options.rounds,
        "third_pass_targets": targets,
        "many_connectors": many.as_ref().map(|m| serde_json::json!({
            "connectors": many::CONNECTORS,
            "committed": m.started,
            "peak_connections": m.peak_connections,
            "last_first_commit_s": m.last_first_commit.map(|d| d.as_secs_f64()),
            "peak_rss_mb": m.figure.peak_rss_mb,
        })),
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
