//! The sluice runs: one `sluice run` process draining the backlog, and the restart to the
//! first commit.

use std::path::Path;
use std::time::{Duration, Instant};

use sluice::sink::Sink;

use crate::Options;
use crate::harness::{self, Backend, Broker, Scenario, TestDb};
use crate::matrix::{PluginLang, Run};
use crate::process::{Process, ProcessUse, ThreadTimes, process_use};
use crate::report::Figure;
use crate::timeline::Timeline;

/// The records a connector has committed from `topic` (and from the topics named
/// `topic…`, a many-topics run's): the sum of its stored next offsets (every partition
/// starts at 0). Each run's connector has its own name, so the prefix meets only its own.
pub(crate) async fn committed(sink: &Sink, connector: &str, topic: &str) -> u64 {
    // SUM is a DECIMAL in PostgreSQL and MySQL: cast back to an integer.
    let integer = match sink.dialect() {
        sluice::sink::Dialect::MySql => "SIGNED",
        _ => "BIGINT",
    };
    sink.query_integers(
        format!(
            "SELECT CAST(COALESCE(SUM(next_offset), 0) AS {integer}) FROM sluice_offsets WHERE connector = '{connector}' AND topic LIKE '{topic}%'"
        ),
        1,
    )
    .await
    .ok()
    .and_then(|v| v[0])
    .unwrap_or(0) as u64
}

/// Prepares sluice's tables and the run's table with this benchmark's library, unless the
/// process measured is another build (`--sluice`) and `needed` is false: that build, with
/// `create_table: true`, prepares its own at its own schema version, where this library's
/// version would be newer than an older sluice accepts.
pub(crate) async fn prepare_tables(options: &Options, sink: &Sink, needed: bool) {
    if needed || !options.other_build() {
        sink.prepare().await.expect("prepare");
    }
}

/// A connector's scenario for `run`, on `topic`, with a short name (its task threads are
/// named after it, and Linux keeps 15 characters of a thread's name); `registry` the
/// Schema Registry of an Avro run.
pub(crate) fn scenario(run: &Run, index: usize, topic: &str, registry: Option<&str>) -> Scenario {
    let mut scenario = Scenario::new(run.tasks);
    // Unique with the topic (offsets are kept per connector and topic, and each bench
    // run has its own topics).
    scenario.connector = format!("b{index:02}");
    scenario.topic = if run.many_topics {
        // A list in the scenario's `topics: [...]`.
        (0..crate::backlog::DEBEZIUM_TABLES)
            .map(|uid| crate::backlog::table_topic(topic, uid))
            .collect::<Vec<_>>()
            .join(", ")
    } else {
        topic.to_string()
    };
    scenario.mode = run.mode;
    scenario.key = "[uid]";
    scenario.max_records = run.max_records;
    scenario.extra_kafka = run.kafka.clone();
    scenario.extra_sink = run.sink.clone();
    if run.avro {
        let registry = registry.expect("an Avro run has a registry");
        // `kafka.schema_registry`, after the scenario's kafka properties.
        scenario
            .extra_kafka
            .push_str(&format!("  schema_registry:\n    url: \"{registry}\"\n"));
        scenario.extra_connector = "    format: avro\n".into();
    }
    if run.debezium {
        scenario.extra_connector = "    envelope: debezium\n".into();
    }
    if run.many_tables {
        scenario.table = format!("\"{}_{{source.table}}\"", scenario.table);
    }
    // The admin API, for the stage durations in /metrics (a top-level key after the
    // scenario's kafka properties).
    scenario.extra_kafka.push_str(&format!(
        "admin:\n  listen: 127.0.0.1:{}\n",
        harness::free_port()
    ));
    if run.plugin {
        scenario.transforms = format!(
            "    transforms:\n      - name: parse\n        plugin: {}\n        config: {{ separator: \"*\" }}\n",
            run.plugin_lang.word_parse().display()
        );
    }
    scenario
}

/// Waits until each of `processes` has had every one of its `tasks` assigned partitions,
/// and no assignment came for a second since (at most `limit`).
async fn settle(processes: &[Process], tasks: u32, limit: Duration) {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let assigned: Vec<_> = processes.iter().map(Process::assignments).collect();
        let all = assigned
            .iter()
            .all(|(tasks_seen, _)| tasks_seen.len() == tasks as usize);
        let last = assigned.iter().filter_map(|(_, last)| *last).max();
        if all && last.is_some_and(|at| at.elapsed().unwrap_or_default() > Duration::from_secs(1)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("bench: the group did not settle within {limit:?}; timing from here");
}

/// One request to the admin API at `listen` (a loopback address): the answer's text.
fn admin_request(listen: &str, method: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut text = String::new();
    if let Ok(mut stream) = std::net::TcpStream::connect(listen) {
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        // A loopback admin API answers only requests for a loopback host (admin/auth.rs).
        let _ = stream.write_all(
            format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Sluice-Request: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        );
        let _ = stream.read_to_string(&mut text);
    }
    text
}

/// The sums and counts of `sluice_batch_duration_seconds` by stage, from the process's
/// /metrics: where a batch's time goes.
pub(crate) fn stage_times(scenario: &Scenario) -> String {
    let Some(listen) = scenario_admin_listen(scenario) else {
        return String::new();
    };
    let text = admin_request(&listen, "GET", "/metrics");
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

/// The tables a run writes, as SQL names: the scenario's, or with `many_tables` each
/// source table's (`"<base>_words_N"`).
fn tables_of(run: &Run, scenario: &Scenario) -> Vec<String> {
    if !run.many_tables {
        return vec![scenario.table.clone()];
    }
    let base = scenario
        .table
        .trim_matches('"')
        .trim_end_matches("_{source.table}");
    (0..crate::backlog::DEBEZIUM_TABLES)
        .map(|i| format!("\"{base}_words_{i}\""))
        .collect()
}

/// The rows a run wrote to `tables` (a present key's row from before has offset -1, and is
/// not counted) and their distinct uids (each uid is in one table only); then the tables
/// are dropped. A table that cannot be read counts nothing (a run that never made it).
pub(crate) async fn count_and_drop(sink: &Sink, tables: &[String]) -> (u64, u64) {
    let (mut rows, mut distinct) = (0, 0);
    for table in tables {
        if let Ok(counts) = sink
            .query_integers(
                format!("SELECT COUNT(*), COUNT(DISTINCT uid) FROM {table} WHERE src_offset >= 0"),
                2,
            )
            .await
        {
            rows += counts[0].unwrap_or(0) as u64;
            distinct += counts[1].unwrap_or(0) as u64;
        }
        let _ = sink
            .execute_statement(&format!("DROP TABLE IF EXISTS {table}"))
            .await;
    }
    (rows, distinct)
}

/// The admin listener's address in the scenario's YAML.
fn scenario_admin_listen(scenario: &Scenario) -> Option<String> {
    scenario
        .extra_kafka
        .lines()
        .find_map(|l| l.trim().strip_prefix("listen: "))
        .map(str::to_string)
}

/// What `/proc` says of several processes together: CPU and RSS summed (peak RSS too: the
/// most they could have held at once).
fn sum_use(pids: &[u32], ticks: f64) -> ProcessUse {
    let mut sum = ProcessUse::default();
    for &pid in pids {
        let one = process_use(pid, ticks);
        sum.cpu_seconds += one.cpu_seconds;
        sum.transform_cpu_seconds += one.transform_cpu_seconds;
        sum.rss_mb += one.rss_mb;
        sum.peak_rss_mb += one.peak_rss_mb;
    }
    sum
}

/// Drains the backlog with one sluice process (or `run.processes` in one group).
pub(crate) async fn run_sluice(
    options: &Options,
    broker: &Broker,
    run: &Run,
    index: usize,
    topic: &str,
    registry: Option<&str>,
    ticks: f64,
) -> Figure {
    let n = options.records;
    let db = TestDb::new(run.db);
    let scenario = scenario(run, index, topic, registry);
    let dir = tempfile::tempdir().expect("dir");
    let config_path = scenario.write(dir.path(), &broker.bootstrap, &db);
    let config = scenario.config(&broker.bootstrap, &db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    // A run with the keys present needs the table before the process starts.
    prepare_tables(options, &sink, run.keys_present).await;
    if run.keys_present {
        // Every key of the backlog, written before (src_offset -1: not counted below).
        sink.execute_statement(&format!(
            "INSERT INTO {} (uid, word, src_partition, src_offset) SELECT g, 'before', 0, -1 FROM generate_series(0, {}) AS g",
            scenario.table,
            n - 1
        ))
        .await
        .expect("keys present");
    }

    let mut processes = vec![Process::start(&options.sluice, &config_path, &run.env)];
    let mut listens: Vec<String> = scenario_admin_listen(&scenario).into_iter().collect();
    for extra in 1..run.processes {
        // The same connector in one group; each process its own admin port.
        let text = std::fs::read_to_string(&config_path).expect("config");
        let text = match scenario_admin_listen(&scenario) {
            Some(listen) => {
                let own = format!("127.0.0.1:{}", harness::free_port());
                listens.push(own.clone());
                text.replace(&listen, &own)
            }
            None => text,
        };
        let other = dir.path().join(format!("process-{extra}.yaml"));
        std::fs::write(&other, text).expect("config");
        processes.push(Process::start(&options.sluice, &other, &run.env));
    }
    let pids: Vec<u32> = processes.iter().map(|p| p.child.id()).collect();
    let usage_of = |ticks: f64| sum_use(&pids, ticks);
    let started = Instant::now();
    let started_at = std::time::SystemTime::now();
    let mut first: Option<(Instant, u64, ProcessUse)> = None;
    let mut threads_at_first = ThreadTimes::default();
    if run.settle {
        let path = |what: &str| format!("/connectors/{}/{what}", scenario.connector);
        // At once, each process through its own API (the pause reaches the others through
        // the database, later), before the group's first assignment: nothing is fetched
        // before it.
        let deadline = Instant::now() + Duration::from_secs(20);
        for listen in &listens {
            while !admin_request(listen, "PUT", &path("pause")).starts_with("HTTP/1.1 202") {
                if Instant::now() > deadline {
                    panic!("bench: the admin API at {listen} did not take the pause");
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        settle(&processes, run.tasks, Duration::from_secs(60)).await;
        let before = committed(&sink, &scenario.connector, topic).await;
        for listen in &listens {
            admin_request(listen, "PUT", &path("resume"));
        }
        first = Some((Instant::now(), before, usage_of(ticks)));
        threads_at_first = ThreadTimes::read(&pids);
    }
    let mut progress = (Instant::now(), 0u64);
    let mut quarter: Option<(Instant, u64)> = None;
    let mut rss = Vec::new();
    let mut done;
    let mut timeline = Timeline::default();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        done = timeline
            .sample(
                &sink,
                &scenario.connector,
                topic,
                if run.many_topics {
                    1
                } else {
                    options.partitions
                },
                started.elapsed(),
            )
            .await;
        if done > progress.1 {
            progress = (Instant::now(), done);
            while rss.len() < 4 && done >= n * (rss.len() as u64 + 1) / 4 {
                rss.push(usage_of(ticks).rss_mb);
            }
            if quarter.is_none() && done >= n / 4 {
                quarter = Some(progress);
            }
        }
        if done > 0 && first.is_none() {
            first = Some((Instant::now(), done, usage_of(ticks)));
            threads_at_first = ThreadTimes::read(&pids);
        }
        if done >= n || progress.0.elapsed() > Duration::from_secs(30) {
            break;
        }
    }
    let end = progress.0;
    let usage = usage_of(ticks);
    let threads = threads_at_first.split_until(&ThreadTimes::read(&pids));
    let stages = stage_times(&scenario);
    // Settled: every process's consumers hold their partitions for good.
    let settled = processes
        .iter()
        .filter_map(|process| process.assignments().1)
        .max()
        .and_then(|at| at.duration_since(started_at).ok())
        .and_then(|at| timeline.since(at.as_secs_f64()))
        .map(|(rows, seconds)| rows as f64 / seconds.max(1e-9));
    timeline.write(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("../bench/timeline"),
        &run.name,
    );
    for process in &processes {
        process.signal("-TERM");
    }
    for process in processes {
        process.wait(Duration::from_secs(30));
    }
    let (rows, distinct) = count_and_drop(&sink, &tables_of(run, &scenario)).await;
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
        rows_per_s_settled: settled,
        rows_per_s_after_quarter: quarter.map(|(at, from)| {
            done.saturating_sub(from) as f64
                / end.saturating_duration_since(at).as_secs_f64().max(1e-9)
        }),
        rss_mb_at_quarters: rss,
        ratio_to_copy: None,
        ratio_to_drain: None,
        // Over the drain, like the rate: the start (plugin compilation, connections, the
        // group join) is in the note.
        cpu_s_per_million: Some((cpu - at_first.cpu_seconds) / (drained.max(1) as f64) * 1e6),
        transform_cpu_share: Some(
            (usage.transform_cpu_seconds - at_first.transform_cpu_seconds).max(0.0)
                / (cpu - at_first.cpu_seconds).max(1e-9),
        ),
        peak_rss_mb: Some(usage.peak_rss_mb),
        note: format!(
            "first commit {:.2} s after start; {:.2} CPU s in all; {} duplicates; batch stages (s in all, batches): {stages}; partitions committing (since start): {}; threads from the first commit {threads}",
            first_at.saturating_duration_since(started).as_secs_f64(),
            cpu,
            rows.saturating_sub(distinct),
            timeline.summary()
        ),
    }
}

/// Starts a connector on the backlog, stops it with `signal` once a tenth has committed,
/// starts it again and times the new process from its start to its first commit.
pub(crate) async fn restart_to_first_commit(
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
        plugin_lang: PluginLang::Rust,
        avro: false,
        debezium: false,
        many_tables: false,
        many_topics: false,
        tasks: 1,
        keys_present: false,
        processes: 1,
        env: Vec::new(),
        kafka: if static_membership {
            format!("    group.instance.id: {}\n", harness::unique("bench"))
        } else {
            String::new()
        },
        sink: String::new(),
        max_records: 5000,
        settle: false,
    };
    let db = TestDb::new(Backend::Postgres);
    let scenario = scenario(&run, index, topic, None);
    let dir = tempfile::tempdir().expect("dir");
    let config_path = scenario.write(dir.path(), &broker.bootstrap, &db);
    let config = scenario.config(&broker.bootstrap, &db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    prepare_tables(options, &sink, false).await;
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
        ratio_to_drain: None,
        cpu_s_per_million: None,
        transform_cpu_share: None,
        peak_rss_mb: None,
        rows_per_s_after_quarter: None,
        rows_per_s_settled: None,
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
