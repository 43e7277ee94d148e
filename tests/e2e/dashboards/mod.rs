//! The Grafana dashboard (`deploy/grafana/sluice.json`) and the alert rules
//! (`deploy/prometheus/alerts.yaml`) kept true to sluice's metrics: every metric name,
//! label matcher (with its value, where it is a literal) and grouping label their queries
//! use must be in a real scrape of `/metrics`. The scrape comes from a run that provokes
//! the series that appear only after an event: an offset gap (under `on_offset_gap: warn`),
//! a dead letter, a retry (the database cut off for a moment) and a restart through the API.
//!
//! [`promql`] reads the queries; its own tests show that a made-up name is reported.

mod promql;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use sluice::admin::client::AdminClient;

use crate::harness::proxy::Proxy;
use crate::harness::{self, Backend, Broker, Pipeline, Scenario, TestDb, free_port, unique};
use promql::{Query, Scrape};

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

const DASHBOARD: &str = "deploy/grafana/sluice.json";
const ALERTS: &str = "deploy/prometheus/alerts.yaml";
const PROMETHEUS_RULE: &str = "deploy/kubernetes/components/prometheus-rule/prometheusrule.yaml";

/// Every query of the dashboard and the rules: (where it is, the expression).
fn shipped_queries() -> Vec<(String, String)> {
    let mut queries = Vec::new();
    let text = std::fs::read_to_string(repo_file(DASHBOARD)).expect("read the dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard parses");
    fn panels(list: &serde_json::Value, out: &mut Vec<(String, String)>) {
        for panel in list.as_array().into_iter().flatten() {
            let title = panel["title"].as_str().unwrap_or("?");
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    let id = target["refId"].as_str().unwrap_or("?");
                    out.push((format!("{DASHBOARD}: panel {title:?} ({id})"), expr.into()));
                }
            }
            panels(&panel["panels"], out);
        }
    }
    panels(&dashboard["panels"], &mut queries);
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if variable["type"] != "query" {
            continue;
        }
        let query = variable["query"]["query"]
            .as_str()
            .or_else(|| variable["query"].as_str())
            .unwrap_or_default();
        let name = variable["name"].as_str().unwrap_or("?");
        queries.push((
            format!("{DASHBOARD}: variable {name}"),
            promql::variable_query(query),
        ));
    }
    let text = std::fs::read_to_string(repo_file(ALERTS)).expect("read the alert rules");
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("the rules parse");
    for group in rules["groups"].as_sequence().into_iter().flatten() {
        for rule in group["rules"].as_sequence().into_iter().flatten() {
            let name = rule["alert"]
                .as_str()
                .or_else(|| rule["record"].as_str())
                .unwrap_or("?");
            let expr = rule["expr"].as_str().unwrap_or_default();
            queries.push((format!("{ALERTS}: {name}"), expr.to_string()));
        }
    }
    queries
}

/// Each shipped query read, or the test fails naming the one that cannot be.
fn parsed_queries() -> Vec<(String, Query)> {
    shipped_queries()
        .into_iter()
        .map(|(source, expr)| {
            let query = promql::parse(&expr).unwrap_or_else(|e| panic!("{source}: {e}"));
            assert!(
                !query.selectors.is_empty(),
                "{source}: no metric read in {expr}"
            );
            (source, query)
        })
        .collect()
}

/// Every name in the shipped queries that `scrape` lacks.
fn missing_from(scrape: &Scrape) -> Vec<String> {
    parsed_queries()
        .iter()
        .flat_map(|(source, query)| promql::missing(source, query, scrape))
        .collect()
}

/// The queries parse, and there are as many as the files have (none lost on the way).
#[test]
fn the_shipped_queries_parse() {
    let queries = parsed_queries();
    assert!(queries.len() >= 30, "{} queries", queries.len());
    let alerts = queries
        .iter()
        .filter(|(s, _)| s.starts_with(ALERTS))
        .count();
    assert_eq!(alerts, 9);
    // A grouping resolves to the selectors it aggregates.
    let (_, lag) = queries
        .iter()
        .find(|(s, _)| s.contains("Lag per partition"))
        .expect("the lag per partition panel");
    assert_eq!(
        lag.groupings[0].labels,
        ["connector", "topic", "partition", "task"]
    );
    assert_eq!(lag.groupings[0].selectors, [0]);
}

/// A metric, a label, a label value and a grouping label that no scrape has are each
/// reported by name; what the scrape has is not.
#[test]
fn a_made_up_name_is_reported() {
    let scrape = Scrape::parse(
        "# TYPE sluice_rows_written counter\n\
         sluice_rows_written_total{connector=\"words\"} 9\n\
         sluice_task_state{connector=\"words\",task=\"0\",state=\"FAILED\"} 0\n\
         sluice_ready 1\n# EOF\n",
    );
    let query = promql::parse(
        "sum by (connector, colour) (rate(sluice_rows_written_total{connector=~\"$connector\", shade=\"x\"}[$__rate_interval])) \
         / on (instance) group_left sluice_made_up_total \
         and sluice_task_state{state=\"MELTED\"} == 1 or up == 0 and on (instance, job) sluice_ready",
    )
    .expect("parses");
    let problems = promql::missing("made-up", &query, &scrape);
    for expected in [
        "made-up: metric sluice_made_up_total is not in the scrape",
        "made-up: label shade of sluice_rows_written_total is not in the scrape",
        "made-up: sluice_task_state{state=\"MELTED\"} is not in the scrape",
        "made-up: label colour of by (sluice_rows_written_total) is not in the scrape",
    ] {
        assert!(
            problems.iter().any(|p| p == expected),
            "{expected} not in {problems:#?}"
        );
    }
    assert_eq!(problems.len(), 4, "{problems:#?}");
    // Unreadable PromQL is an error, not a pass.
    assert!(promql::parse("sum by (connector) (rate(x[5m])").is_err());
    assert!(promql::parse("{__name__=\"x\"}").is_err());
}

/// The PrometheusRule of the kustomize component carries exactly alerts.yaml's groups.
#[test]
fn the_prometheus_rule_carries_the_alert_groups() {
    let read = |path: &str| -> serde_yaml_ng::Value {
        let text = std::fs::read_to_string(repo_file(path)).expect("read");
        serde_yaml_ng::from_str(&text).expect("parse")
    };
    let (alerts, rule) = (read(ALERTS), read(PROMETHEUS_RULE));
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    assert_eq!(rule["spec"]["groups"], alerts["groups"]);
}

/// The value of the sample `name{labels}` in a scrape.
fn sample(scrape: &str, name_and_labels: &str) -> Option<f64> {
    scrape
        .lines()
        .find(|line| {
            line.starts_with(name_and_labels) && line[name_and_labels.len()..].starts_with(' ')
        })
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|v| v.parse().ok())
}

async fn scrape(port: u16) -> String {
    let client = AdminClient::new(&format!("127.0.0.1:{port}"), None).expect("client");
    let answer = client.get("/metrics").await.expect("scrape");
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    answer.body
}

/// Scrapes until `name{labels}` is at least `value` (at most `seconds`); the last scrape.
async fn wait_for_sample(port: u16, name_and_labels: &str, value: f64, seconds: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let text = scrape(port).await;
        if sample(&text, name_and_labels).is_some_and(|v| v >= value) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{name_and_labels} did not reach {value} in {seconds} s:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One process on Tansu and PostgreSQL (through a proxy that the test cuts), a transform,
/// a dead-letter table, and `on_offset_gap: warn`: a gap at the start, a poison record, a
/// database outage, a restart of the tasks; then every name the dashboard and the rules
/// use must be in the scrape.
async fn every_name_the_dashboard_and_the_alerts_use_is_scraped(db: Backend) {
    // Tansu's fault makes the gap (see offset_integrity.rs), so Tansu even when
    // KAFKA_BROKERS points elsewhere.
    let port = free_port();
    let broker = Broker::start_on(port, &format!("127.0.0.1:{port}"));
    let direct = TestDb::new(db);
    let proxy = Proxy::start(&direct.server());
    let through = direct.through(&proxy);
    let admin = free_port();
    let mut scenario = Scenario::new(1);
    scenario.extra_kafka = format!("admin:\n  listen: \"127.0.0.1:{admin}\"");
    scenario.guarantee = "exactly_once, on_offset_gap: warn";
    scenario.transforms = format!(
        "    transforms:\n      - name: mask\n        plugin: {}\n        config: {{ fields: word }}\n",
        sluice_transform::example_plugin_path("mask").display()
    );
    scenario.extra_connector = format!(
        "    errors: {{ policy: dlq, dlq: {{ table: {} }}, retry: {{ initial: 100ms, max: 1s }} }}",
        unique("dead")
    );
    let run = Pipeline::assemble(broker, direct, Some(&through), scenario, 1).await;
    let name = run.scenario.connector.clone();
    let label = format!("connector=\"{name}\"");

    // A gap: offsets 0..1000 in batches of 500, and a stored offset of 100 inside the
    // first; the broker answers the fetch at 100 with the batch at 500.
    harness::stored_offset_inside_a_batch(&run).await;
    let sluice = run.start();
    let stats = run.wait_for_rows(500, 90).await;
    assert_eq!((stats.rows, stats.min), (500, Some(500)), "{stats:?}");
    wait_for_sample(
        admin,
        &format!("sluice_offset_gaps_total{{{label},policy=\"warn\"}}"),
        1.0,
        30,
    )
    .await;

    // A dead letter: a value that is not JSON.
    run.broker
        .produce_with(&run.scenario.topic, 1_000..1_001, |_| "POISON".into())
        .await;
    assert_eq!(run.wait_for_dead_letters(1, 60).await, 1);

    // A retry: the database cut off while records wait, then back.
    proxy.down();
    run.produce(2_000..2_050).await;
    wait_for_sample(
        admin,
        &format!("sluice_retries_total{{{label},reason=\"database\"}}"),
        1.0,
        60,
    )
    .await;
    proxy.up();
    assert_eq!(run.wait_for_rows(550, 90).await.rows, 550);

    // A restart of the tasks through the API, and records after it.
    let client = AdminClient::new(&format!("127.0.0.1:{admin}"), None).expect("client");
    let answer = client
        .request(
            Method::POST,
            &format!("/connectors/{name}/restart?includeTasks=true"),
            None,
        )
        .await
        .expect("restart");
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    wait_for_sample(
        admin,
        &format!("sluice_task_restarts_total{{{label},task=\"0\"}}"),
        1.0,
        60,
    )
    .await;
    run.produce(3_000..3_010).await;
    assert_eq!(run.wait_for_rows(560, 90).await.rows, 560);
    // 500 records after the gap, the poison one, 50 and 10: each committed, each timed.
    wait_for_sample(
        admin,
        &format!("sluice_record_latency_seconds_count{{{label}}}"),
        561.0,
        30,
    )
    .await;
    wait_for_sample(
        admin,
        &format!("sluice_task_state{{{label},task=\"0\",state=\"RUNNING\"}}"),
        1.0,
        60,
    )
    .await;
    // The lag of the partition the restarted task holds (set every 2 s once it has it).
    let text = wait_for_sample(
        admin,
        &format!(
            "sluice_consumer_lag{{{label},task=\"0\",topic=\"{}\",partition=\"0\"}}",
            run.scenario.topic
        ),
        0.0,
        30,
    )
    .await;

    // The events happened, with the figures the views show.
    let dead_letters: f64 = text
        .lines()
        .filter(|l| l.starts_with(&format!("sluice_dead_letters_total{{{label},class=")))
        .filter_map(|l| l.split(' ').nth(1)?.parse::<f64>().ok())
        .sum();
    assert_eq!(dead_letters, 1.0, "{text}");
    for (series, at_least) in [
        (
            format!("sluice_plugin_call_seconds_count{{{label},plugin=\"mask\"}}"),
            1.0,
        ),
        ("sluice_ready".to_string(), 1.0),
        ("process_cpu_seconds_total".to_string(), 0.01),
        ("process_resident_memory_bytes".to_string(), 1e6),
    ] {
        let value = sample(&text, &series);
        assert!(
            value.is_some_and(|v| v >= at_least),
            "{series} is {value:?}, not at least {at_least}:\n{text}"
        );
    }
    let problems = missing_from(&Scrape::parse(&text));
    assert!(
        problems.is_empty(),
        "names the dashboard or the alert rules use that a real scrape lacks:\n{}\n\nthe scrape:\n{text}",
        problems.join("\n")
    );
    assert!(sluice.terminate().success());
}
for_each_database!(every_name_the_dashboard_and_the_alerts_use_is_scraped: postgres = Postgres);
