//! Operating sluice through its admin API, against the real broker and databases: Kafka
//! Connect's shapes, pause and resume, stop and offsets, metrics that agree with the
//! table, the group's committed offsets, a connector whose database is down beside a
//! healthy one, a pause that survives a restart and holds across processes and
//! rebalances, a reload that touches one connector only, and a failed task brought back by
//! an operator.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::json;
use sluice::admin::client::AdminClient;

use crate::harness::admin::{
    admin_section, control, get, move_offset, sample, scrape, send, tasks_in, wait_status,
};
use crate::harness::{self, Backend, Pipeline, Scenario, SluiceProcess, TestDb, free_port};

/// The sum of the group's committed offsets over `partitions` partitions of `topic`.
fn group_committed(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> i64 {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .expect("consumer");
    let mut list = rdkafka::TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition(topic, p);
    }
    consumer
        .committed_offsets(list, Duration::from_secs(10))
        .map(|c| {
            c.elements()
                .iter()
                .map(|e| e.offset().to_raw().unwrap_or(0).max(0))
                .sum()
        })
        .unwrap_or(-1)
}

const PARTITIONS: i32 = 3;

/// Every endpoint on one connector: shapes, auth, health, pause and resume, offsets refused
/// while running, stop, offsets read and altered (the partition is read again from there),
/// metrics that agree with the table, and the group's committed offsets at the end.
async fn the_admin_api_operates_a_connector(db: Backend) {
    let port = free_port();
    let mut scenario = Scenario::new(2);
    scenario.extra_kafka = admin_section(port);
    let name = scenario.connector.clone();
    let run = Pipeline::new(db, scenario, PARTITIONS).await;
    run.produce(0..2000).await;
    let sluice = run.start();
    harness::assert_exactly(run.wait_for_rows(2000, 120).await, 2000);

    // Health without the token; everything else with it.
    let anonymous = AdminClient::new(&format!("127.0.0.1:{port}"), None).expect("client");
    assert_eq!(
        anonymous.get("/healthz").await.expect("healthz").status,
        StatusCode::OK
    );
    assert_eq!(
        anonymous.get("/readyz").await.expect("readyz").status,
        StatusCode::OK
    );
    let refused = anonymous.get("/connectors").await.expect("connectors");
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{}", refused.body);
    assert_eq!(refused.json()["error_code"], 401);

    assert_eq!(get(port, "/connectors").await, json!([name]));
    let (code, body) = send(port, Method::GET, "/connectors/nope/status", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(body["error_code"], 404);
    assert_eq!(body["message"], "Connector nope not found");

    let info = get(port, &format!("/connectors/{name}")).await;
    assert_eq!(info["type"], "sink");
    assert_eq!(info["config"]["topics"], json!([run.scenario.topic]));
    assert_eq!(info["tasks"].as_array().map(Vec::len), Some(2));
    let status = wait_status(port, &name, 30, |s| tasks_in(s, "RUNNING") == 2).await;
    assert_eq!(status["connector"]["state"], "RUNNING", "{status}");
    assert!(
        status["connector"]["worker_id"]
            .as_str()
            .is_some_and(|w| !w.is_empty())
    );
    let expanded = get(port, "/connectors?expand=status&expand=info").await;
    assert_eq!(expanded[&name]["status"]["name"], json!(name));
    assert_eq!(expanded[&name]["info"]["type"], "sink");

    // Metrics agree with the table; the lag drains to 0; the group sees the end.
    let status = wait_status(port, &name, 30, |s| {
        s["lag"] == 0
            && s["partitions"]
                .as_array()
                .is_some_and(|p| p.len() == PARTITIONS as usize)
    })
    .await;
    let metrics = scrape(port).await;
    let label = format!("{{connector=\"{name}\"}}");
    assert_eq!(
        sample(&metrics, &format!("sluice_rows_written_total{label}")),
        Some(2000.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, &format!("sluice_records_committed_total{label}")),
        Some(2000.0)
    );
    let consumed: f64 = (0..2)
        .filter_map(|t| {
            sample(
                &metrics,
                &format!("sluice_records_consumed_total{{connector=\"{name}\",task=\"{t}\"}}"),
            )
        })
        .sum();
    assert!(consumed >= 2000.0, "{metrics}");
    assert!(metrics.contains(&format!(
        "sluice_batch_duration_seconds_count{{connector=\"{name}\",stage=\"write\"}}"
    )));
    assert!(metrics.contains(&format!(
        "sluice_task_state{{connector=\"{name}\",task=\"0\",state=\"RUNNING\"}} 1"
    )));
    assert_eq!(status["rows_written"], 2000);
    let deadline = Instant::now() + Duration::from_secs(30);
    while group_committed(
        &run.broker.bootstrap,
        &run.scenario.group,
        &run.scenario.topic,
        PARTITIONS,
    ) < 2000
    {
        assert!(
            Instant::now() < deadline,
            "the group's committed offsets never reached the end"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Pause: nothing is written while paused; offsets cannot change while not stopped.
    control(port, &name, "pause").await;
    wait_status(port, &name, 30, |s| {
        s["connector"]["state"] == "PAUSED" && tasks_in(s, "PAUSED") == 2
    })
    .await;
    run.produce(2000..3000).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        run.stats().await.rows,
        2000,
        "a paused connector wrote rows"
    );
    let patch = json!({"offsets": [{"partition": {"kafka_topic": run.scenario.topic, "kafka_partition": 0}, "offset": {"kafka_offset": 0}}]});
    let (code, body) = send(
        port,
        Method::PATCH,
        &format!("/connectors/{name}/offsets"),
        Some(patch.clone()),
    )
    .await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("STOPPED")),
        "{body}"
    );
    control(port, &name, "resume").await;
    harness::assert_exactly(run.wait_for_rows(3000, 120).await, 3000);

    // Stop; the stored offsets are the end of each partition.
    control(port, &name, "stop").await;
    wait_status(port, &name, 30, |s| {
        s["connector"]["state"] == "STOPPED" && s["tasks"].as_array().is_some_and(Vec::is_empty)
    })
    .await;
    let offsets = get(port, &format!("/connectors/{name}/offsets")).await;
    let stored: Vec<(i64, i64)> = offsets["offsets"]
        .as_array()
        .expect("offsets")
        .iter()
        .map(|o| {
            assert_eq!(o["partition"]["kafka_topic"], json!(run.scenario.topic));
            (
                o["partition"]["kafka_partition"].as_i64().unwrap_or(-1),
                o["offset"]["kafka_offset"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(
        stored.iter().map(|(_, n)| n).sum::<i64>(),
        3000,
        "{offsets}"
    );
    let partition0 = stored.iter().find(|(p, _)| *p == 0).map_or(0, |(_, n)| *n);

    // Altered while stopped: partition 0 is read again from 0 once resumed (upserts, so
    // the table keeps 3000 rows, and rows_written counts the second pass).
    let (code, body) = send(
        port,
        Method::PATCH,
        &format!("/connectors/{name}/offsets"),
        Some(patch),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert!(
        body.get("kafka_group").is_none(),
        "the group did not follow: {body}"
    );
    assert_eq!(
        group_committed(
            &run.broker.bootstrap,
            &run.scenario.group,
            &run.scenario.topic,
            PARTITIONS
        ),
        3000 - partition0,
        "the group's committed offsets follow the PATCH"
    );
    let offsets = get(port, &format!("/connectors/{name}/offsets")).await;
    assert!(
        offsets["offsets"]
            .as_array()
            .expect("offsets")
            .iter()
            .any(|o| o["partition"]["kafka_partition"] == 0 && o["offset"]["kafka_offset"] == 0),
        "{offsets}"
    );
    control(port, &name, "resume").await;
    let status = wait_status(port, &name, 120, |s| {
        s["rows_written"]
            .as_i64()
            .is_some_and(|w| w >= 3000 + partition0)
    })
    .await;
    assert_eq!(
        status["rows_written"].as_i64(),
        Some(3000 + partition0),
        "{status}"
    );
    harness::assert_exactly(run.stats().await, 3000);

    let stopped = sluice.terminate();
    assert!(stopped.success(), "{stopped}");
}
for_each_database!(the_admin_api_operates_a_connector: postgres = Postgres, sqlite = Sqlite);

/// A file with the connectors of `scenarios`, each on its database, the first carrying the
/// admin section.
fn write_config(dir: &Path, yaml: &str) -> PathBuf {
    let path = dir.join("connectors.yaml");
    std::fs::write(&path, yaml).expect("write config");
    path
}

/// One connector's database is unreachable: it waits for it (UNASSIGNED, with the
/// reason), the process is ready, and the healthy connector beside it delivers everything.
async fn a_connector_whose_database_is_down_leaves_the_others_running(db: Backend) {
    let broker = harness::Broker::start();
    let port = free_port();
    let healthy_db = TestDb::new(db);
    let healthy = Scenario::new(1);
    // The broken connector comes first: it must not hold up the one after it.
    let mut first = Scenario::new(1);
    first.extra_kafka = admin_section(port);
    let mut down = TestDb::new(Backend::Postgres);
    down.url = format!("postgres://postgres@127.0.0.1:{}/test", free_port());
    broker.create_topic(&first.topic, PARTITIONS).await;
    broker.create_topic(&healthy.topic, PARTITIONS).await;
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        &harness::combined_yaml(
            &broker.bootstrap,
            &[(&first, &down), (&healthy, &healthy_db)],
        ),
    );
    broker.produce(&healthy.topic, 0..5000).await;
    let sluice = SluiceProcess::start(&config);
    let stats = healthy
        .wait_for_rows(
            &broker.bootstrap,
            &healthy_db,
            5000,
            Duration::from_secs(90),
        )
        .await;
    harness::assert_exactly(stats, 5000);
    let status = wait_status(port, &first.connector, 60, |s| {
        s["connector"]["state"] == "UNASSIGNED"
            && s["connector"]["trace"]
                .as_str()
                .is_some_and(|t| t.contains("waiting for the database"))
    })
    .await;
    assert!(
        status["tasks"].as_array().is_some_and(Vec::is_empty),
        "{status}"
    );
    let ready = AdminClient::new(&format!("127.0.0.1:{port}"), None)
        .expect("client")
        .get("/readyz")
        .await
        .expect("readyz");
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.body);
    let metrics = scrape(port).await;
    assert!(
        sample(
            &metrics,
            &format!(
                "sluice_retries_total{{connector=\"{}\",reason=\"connect\"}}",
                first.connector
            )
        )
        .is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
    let stopped = sluice.terminate();
    assert!(
        stopped.success(),
        "waiting for a database is no failure: {stopped}"
    );
}
for_each_database!(a_connector_whose_database_is_down_leaves_the_others_running: sqlite = Sqlite);

/// A pause is stored in the sink database: a restarted process comes back paused, writes
/// nothing, and delivers everything once resumed.
async fn a_pause_survives_a_restart(db: Backend) {
    let port = free_port();
    let mut scenario = Scenario::new(1);
    scenario.extra_kafka = admin_section(port);
    let name = scenario.connector.clone();
    let run = Pipeline::new(db, scenario, PARTITIONS).await;
    run.produce(0..1000).await;
    let sluice = run.start();
    harness::assert_exactly(run.wait_for_rows(1000, 120).await, 1000);
    control(port, &name, "pause").await;
    wait_status(port, &name, 30, |s| {
        s["connector"]["state"] == "PAUSED" && tasks_in(s, "PAUSED") == 1
    })
    .await;
    // Stored within one control interval.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(sluice.terminate().success());

    run.produce(1000..2000).await;
    let sluice = run.start();
    wait_status(port, &name, 60, |s| {
        s["connector"]["state"] == "PAUSED" && tasks_in(s, "PAUSED") == 1
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        run.stats().await.rows,
        1000,
        "a paused connector wrote after its restart"
    );
    control(port, &name, "resume").await;
    harness::assert_exactly(run.wait_for_rows(2000, 120).await, 2000);
    assert!(sluice.terminate().success());
}
for_each_database!(a_pause_survives_a_restart: sqlite = Sqlite, postgres = Postgres);

/// A reload restarts the connector whose settings changed and leaves the other running
/// (its consumer never rejoins its group); a file that does not load keeps the running
/// configuration and says why.
async fn a_reload_touches_only_the_changed_connector(db: Backend) {
    let broker = harness::Broker::start();
    let port = free_port();
    let db = TestDb::new(db);
    let mut a = Scenario::new(1);
    a.extra_kafka = admin_section(port);
    let b = Scenario::new(1);
    broker.create_topic(&a.topic, PARTITIONS).await;
    broker.create_topic(&b.topic, PARTITIONS).await;
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        &harness::combined_yaml(&broker.bootstrap, &[(&a, &db), (&b, &db)]),
    );
    broker.produce(&a.topic, 0..1000).await;
    broker.produce(&b.topic, 0..1000).await;
    let sluice = SluiceProcess::start(&config);
    harness::assert_exactly(
        a.wait_for_rows(&broker.bootstrap, &db, 1000, Duration::from_secs(90))
            .await,
        1000,
    );
    harness::assert_exactly(
        b.wait_for_rows(&broker.bootstrap, &db, 1000, Duration::from_secs(90))
            .await,
        1000,
    );
    let rebalances = |scrape: &str, name: &str| {
        sample(
            scrape,
            &format!("sluice_rebalances_total{{connector=\"{name}\",task=\"0\"}}"),
        )
        .unwrap_or(0.0)
    };
    let before = scrape(port).await;

    // A's batch size changes; B's section does not.
    let changed = Scenario {
        connector: a.connector.clone(),
        topic: a.topic.clone(),
        group: a.group.clone(),
        table: a.table.clone(),
        max_records: 500,
        extra_kafka: admin_section(port),
        ..Scenario::new(1)
    };
    std::fs::write(
        &config,
        harness::combined_yaml(&broker.bootstrap, &[(&changed, &db), (&b, &db)]),
    )
    .expect("write");
    let (code, body) = send(port, Method::POST, "/reload", None).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(
        body["reloaded"]["restarted"],
        json!([a.connector]),
        "{body}"
    );
    assert_eq!(
        body["reloaded"]["unchanged"],
        json!([b.connector]),
        "{body}"
    );
    broker.produce(&a.topic, 1000..2000).await;
    broker.produce(&b.topic, 1000..2000).await;
    harness::assert_exactly(
        a.wait_for_rows(&broker.bootstrap, &db, 2000, Duration::from_secs(90))
            .await,
        2000,
    );
    harness::assert_exactly(
        b.wait_for_rows(&broker.bootstrap, &db, 2000, Duration::from_secs(90))
            .await,
        2000,
    );
    let after = scrape(port).await;
    assert_eq!(
        rebalances(&after, &b.connector),
        rebalances(&before, &b.connector),
        "B's consumer rejoined its group"
    );

    // A file that does not load: 400 with its problems, and both connectors run on.
    std::fs::write(&config, "kafka: {brokers: x}\nconnectors: [{name: 1}]\n").expect("write");
    let (code, body) = send(port, Method::POST, "/reload", None).await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["problems"].as_array().is_some_and(|p| !p.is_empty()),
        "{body}"
    );
    broker.produce(&b.topic, 2000..2500).await;
    harness::assert_exactly(
        b.wait_for_rows(&broker.bootstrap, &db, 2500, Duration::from_secs(90))
            .await,
        2500,
    );
    let status = get(port, &format!("/connectors/{}/status", a.connector)).await;
    assert_eq!(status["connector"]["state"], "RUNNING", "{status}");
    assert!(sluice.terminate().success());
}
for_each_database!(a_reload_touches_only_the_changed_connector: sqlite = Sqlite);

/// A record under `errors.policy: fail` fails its task for good, beside a healthy
/// connector that keeps the process up; a restart of the failed task fails again at the
/// same record; the operator stops the connector, moves its offset past the record, and
/// resumes: everything after it lands.
async fn an_operator_brings_a_failed_task_back(db: Backend) {
    let broker = harness::Broker::start();
    let port = free_port();
    let db = TestDb::new(db);
    let mut failing = Scenario::new(1);
    failing.extra_kafka = admin_section(port);
    failing.extra_connector = "    errors: { policy: fail }".into();
    let healthy = Scenario::new(1);
    broker.create_topic(&failing.topic, 1).await;
    broker.create_topic(&healthy.topic, 1).await;
    let dir = tempfile::tempdir().expect("dir");
    let config = write_config(
        dir.path(),
        &harness::combined_yaml(&broker.bootstrap, &[(&failing, &db), (&healthy, &db)]),
    );
    broker
        .produce_with(&failing.topic, 0..1000, |uid| {
            if uid == 500 {
                "not json".to_string()
            } else {
                harness::word_event(uid)
            }
        })
        .await;
    broker.produce(&healthy.topic, 0..1000).await;
    let sluice = SluiceProcess::start(&config);
    let name = failing.connector.clone();
    let status = wait_status(port, &name, 90, |s| tasks_in(s, "FAILED") == 1).await;
    let trace = status["tasks"][0]["trace"]
        .as_str()
        .unwrap_or("")
        .to_string();
    assert!(
        trace.contains(&format!("{}/0@500", failing.topic)),
        "{status}"
    );
    assert_eq!(status["connector"]["state"], "RUNNING", "{status}");
    harness::assert_exactly(
        healthy
            .wait_for_rows(&broker.bootstrap, &db, 1000, Duration::from_secs(90))
            .await,
        1000,
    );
    assert_eq!(failing.stats(&broker.bootstrap, &db).await.rows, 500);

    // Restarting the failed task meets the same record.
    let (code, body) = send(
        port,
        Method::POST,
        &format!("/connectors/{name}/restart?includeTasks=true&onlyFailed=true"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{body}");
    let metrics_label = format!("sluice_task_restarts_total{{connector=\"{name}\",task=\"0\"}}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while sample(&scrape(port).await, &metrics_label).unwrap_or(0.0) < 1.0 {
        assert!(Instant::now() < deadline, "the task was not restarted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_status(port, &name, 60, |s| tasks_in(s, "FAILED") == 1).await;

    // Stop, skip the record, resume.
    control(port, &name, "stop").await;
    wait_status(port, &name, 30, |s| s["connector"]["state"] == "STOPPED").await;
    move_offset(port, &name, &failing.topic, 0, 501).await;
    control(port, &name, "resume").await;
    let stats = failing
        .wait_for_rows(&broker.bootstrap, &db, 999, Duration::from_secs(90))
        .await;
    assert_eq!(stats.rows, 999, "{stats:?}");
    assert_eq!(stats.duplicates(), 0, "{stats:?}");
    let status = wait_status(port, &name, 30, |s| tasks_in(s, "RUNNING") == 1).await;
    assert_eq!(status["connector"]["state"], "RUNNING");
    assert!(sluice.terminate().success());
}
for_each_database!(an_operator_brings_a_failed_task_back: sqlite = Sqlite, mariadb = MariaDb);

/// `sluice status` prints the connectors of a running process as a table.
async fn sluice_status_prints_a_table(db: Backend) {
    let port = free_port();
    let mut scenario = Scenario::new(1);
    scenario.extra_kafka = admin_section(port);
    let name = scenario.connector.clone();
    let run = Pipeline::new(db, scenario, 1).await;
    run.produce(0..100).await;
    let sluice = run.start();
    harness::assert_exactly(run.wait_for_rows(100, 60).await, 100);
    wait_status(port, &name, 30, |s| tasks_in(s, "RUNNING") == 1).await;
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["status", "--config"])
        .arg(&run.config)
        .output()
        .expect("sluice status");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(text.starts_with("CONNECTOR"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with(&name) && l.contains("RUNNING") && l.contains("1/1 running")),
        "{text}"
    );
    assert!(sluice.terminate().success());
}
for_each_database!(sluice_status_prints_a_table: sqlite = Sqlite);

/// Two processes run one connector. A pause given to the first holds when the second joins
/// (a rebalance: the partitions it takes start paused there, the ones the first keeps stay
/// paused), the first's status lists the second's task from its heartbeat, and a resume
/// given to the first reaches the second.
async fn a_pause_holds_across_processes_and_rebalances(db: Backend) {
    let (port_a, port_b) = (free_port(), free_port());
    let mut scenario = Scenario::new(1);
    scenario.extra_kafka = admin_section(port_a);
    let name = scenario.connector.clone();
    let run = Pipeline::new(db, scenario, 4).await;
    run.produce(0..1000).await;
    let first = run.start();
    harness::assert_exactly(run.wait_for_rows(1000, 120).await, 1000);
    control(port_a, &name, "pause").await;
    wait_status(port_a, &name, 30, |s| tasks_in(s, "PAUSED") == 1).await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    run.produce(1000..2000).await;
    let dir = tempfile::tempdir().expect("dir");
    let mut second_config = Scenario {
        connector: run.scenario.connector.clone(),
        topic: run.scenario.topic.clone(),
        group: run.scenario.group.clone(),
        table: run.scenario.table.clone(),
        ..Scenario::new(1)
    };
    second_config.extra_kafka = admin_section(port_b);
    let second =
        SluiceProcess::start(&second_config.write(dir.path(), &run.broker.bootstrap, &run.db));
    let worker_b = format!(":{port_b}");
    let status = wait_status(port_a, &name, 60, |s| {
        s["tasks"].as_array().is_some_and(|tasks| {
            tasks.iter().any(|t| {
                t["worker_id"]
                    .as_str()
                    .is_some_and(|w| w.ends_with(&worker_b))
                    && t["state"] == "PAUSED"
            })
        })
    })
    .await;
    assert_eq!(tasks_in(&status, "PAUSED"), 2, "{status}");
    // The group has rebalanced (the second holds partitions now); nothing is written.
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(port_b, &format!("/connectors/{name}/status")).await["partitions"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        assert!(
            Instant::now() < deadline,
            "the second process never got partitions"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        run.stats().await.rows,
        1000,
        "a paused connector wrote rows"
    );

    control(port_a, &name, "resume").await;
    harness::assert_exactly(run.wait_for_rows(2000, 120).await, 2000);
    wait_status(port_b, &name, 30, |s| s["connector"]["state"] == "RUNNING").await;
    assert!(second.terminate().success());
    assert!(first.terminate().success());
}
for_each_database!(a_pause_holds_across_processes_and_rebalances: postgres = Postgres);
