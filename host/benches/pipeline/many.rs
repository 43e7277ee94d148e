//! Many connectors in one process: [`CONNECTORS`] connectors, each on its own topic of a
//! hundredth of the backlog, each writing its own table of one PostgreSQL. Measured as a
//! user runs them: the rate at which all of them drain the same number of records as the
//! one-connector run, the process's peak RSS, the connections it holds at PostgreSQL
//! (`pg_stat_activity`, sampled), and the time from its start to the last connector's
//! first commit.

use std::time::{Duration, Instant};

use sluice::sink::Sink;

use crate::Options;
use crate::backlog::produce_backlog;
use crate::harness::{self, Backend, Broker, Scenario, TestDb};
use crate::process::{Process, process_use};
use crate::report::Figure;

/// Connectors in the process.
pub(crate) const CONNECTORS: usize = 100;

/// The run's name in the table.
pub(crate) const NAME: &str = "postgres insert json 100 connectors";

/// What the many-connector run saw beside its figure.
pub(crate) struct ManyConnectors {
    pub(crate) figure: Figure,
    /// Most connections the process held at once.
    pub(crate) peak_connections: i64,
    /// Connectors that committed at least once.
    pub(crate) started: usize,
    /// From the process's start to the last connector's first commit.
    pub(crate) last_first_commit: Option<Duration>,
}

/// Produces the topics, runs one process with every connector, and measures it.
pub(crate) async fn many_connectors(
    options: &Options,
    broker: &Broker,
    ticks: f64,
) -> ManyConnectors {
    let per = (options.records / CONNECTORS as u64).max(1);
    let n = per * CONNECTORS as u64;
    let prefix = format!("m{:06x}", rand::random::<u32>() & 0xff_ffff);
    let producing = Instant::now();
    let mut scenarios = Vec::with_capacity(CONNECTORS);
    for i in 0..CONNECTORS {
        let mut scenario = Scenario::new(1);
        scenario.connector = format!("{prefix}_{i:03}");
        scenario.topic = harness::unique(&format!("bench_many_{i:03}"));
        scenario.group = harness::unique("bench_many");
        scenario.mode = "insert";
        scenario.key = "[uid]";
        scenario.max_records = 5000;
        broker.create_topic(&scenario.topic, 1).await;
        produce_backlog(&broker.bootstrap, &scenario.topic, per, harness::word_event).await;
        scenarios.push(scenario);
    }
    println!(
        "produced {CONNECTORS} topics × {per} records in {:.1} s",
        producing.elapsed().as_secs_f64()
    );
    let db = TestDb::new(Backend::Postgres);
    // The process's connections carry a name of their own, told apart from the bench's.
    let application_name = format!("{prefix}_sluice");
    let named = db.with_application_name(&application_name);
    let pairs: Vec<(&Scenario, &TestDb)> = scenarios.iter().map(|s| (s, &named)).collect();
    let yaml = harness::combined_yaml(&broker.bootstrap, &pairs);
    let dir = tempfile::tempdir().expect("dir");
    let config_path = dir.path().join("many.yaml");
    std::fs::write(&config_path, &yaml).expect("write config");
    let config = scenarios[0].config(&broker.bootstrap, &db);
    let sink = Sink::connect(&config.connectors[0]).await.expect("connect");
    crate::runs::prepare_tables(options, &sink, false).await;

    let process = Process::start(&options.sluice, &config_path, &[]);
    let pid = process.child.id();
    let started = Instant::now();
    let like = format!("connector LIKE '{prefix}\\_%'");
    let mut first: Option<(Instant, u64, f64)> = None;
    let mut progress = (Instant::now(), 0u64);
    let mut last_first_commit = None;
    let mut peak_connections = 0;
    let mut connectors_started;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let values = sink
            .query_integers(
                format!(
                    "SELECT CAST(COALESCE(SUM(next_offset), 0) AS BIGINT), COUNT(DISTINCT connector), \
                     (SELECT count(*) FROM pg_stat_activity WHERE application_name = '{application_name}') \
                     FROM sluice_offsets WHERE {like}"
                ),
                3,
            )
            .await
            .unwrap_or_default();
        let value = |i: usize| values.get(i).copied().flatten().unwrap_or(0);
        let done = value(0) as u64;
        connectors_started = value(1) as usize;
        peak_connections = peak_connections.max(value(2));
        if done > 0 && first.is_none() {
            first = Some((Instant::now(), done, process_use(pid, ticks).cpu_seconds));
        }
        if connectors_started == CONNECTORS && last_first_commit.is_none() {
            last_first_commit = Some(started.elapsed());
        }
        if done > progress.1 {
            progress = (Instant::now(), done);
        }
        if done >= n || progress.0.elapsed() > Duration::from_secs(60) {
            break;
        }
    }
    let end = progress.0;
    let usage = process_use(pid, ticks);
    process.signal("-TERM");
    process.wait(Duration::from_secs(30));
    let tables: Vec<String> = scenarios.iter().map(|s| s.table.clone()).collect();
    let (rows, distinct) = crate::runs::count_and_drop(&sink, &tables).await;
    sink.close().await;
    let (first_at, first_done, cpu_at_first) = first.unwrap_or((end, 0, usage.cpu_seconds));
    let drain = end.saturating_duration_since(first_at);
    let drained = progress.1.saturating_sub(first_done);
    ManyConnectors {
        figure: Figure {
            name: NAME.to_string(),
            kind: "sluice",
            records: n,
            rows,
            holes: n.saturating_sub(distinct),
            seconds: drain.as_secs_f64(),
            rows_per_s: drained as f64 / drain.as_secs_f64().max(1e-9),
            rows_per_s_after_quarter: None,
            rows_per_s_settled: None,
            rss_mb_at_quarters: Vec::new(),
            ratio_to_copy: None,
            ratio_to_drain: None,
            cpu_s_per_million: Some(
                (usage.cpu_seconds - cpu_at_first) / (drained.max(1) as f64) * 1e6,
            ),
            transform_cpu_share: None,
            peak_rss_mb: Some(usage.peak_rss_mb),
            note: format!(
                "{connectors_started} of {CONNECTORS} connectors committed; at most {peak_connections} connections at PostgreSQL; first commit {:.2} s after start; {:.2} CPU s in all",
                first_at.saturating_duration_since(started).as_secs_f64(),
                usage.cpu_seconds
            ),
        },
        peak_connections,
        started: connectors_started,
        last_first_commit,
    }
}

impl std::fmt::Display for ManyConnectors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{NAME}: {} of {CONNECTORS} connectors committed, the last first commit {} after the start; at most {} connections held at PostgreSQL; peak RSS {:.0} MB (target ≤ 512 MB)",
            self.started,
            self.last_first_commit.map_or_else(
                || "never".to_string(),
                |d| format!("{:.1} s", d.as_secs_f64())
            ),
            self.peak_connections,
            self.figure.peak_rss_mb.unwrap_or(0.0)
        )
    }
}
