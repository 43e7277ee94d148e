//! `admin.metrics_listen`: metrics, health and readiness on a listener of their own,
//! without the token (what Prometheus scrapes and a platform's probes call), while the
//! admin listener keeps asking for it; nothing else is reachable there. A reload moves the
//! listener, an address that cannot be bound refuses the reload (the old listener serves
//! on), and at start it is a clear error.

use std::time::Duration;

use hyper::{Method, StatusCode};
use sluice::admin::client::{AdminClient, ClientError};

use crate::harness::admin::sample;
use crate::harness::{self, Backend, Pipeline, Scenario, SluiceProcess, free_port};

/// 32 bytes, as an operator's `openssl rand -hex 16` would be.
const TOKEN: &str = "5f1c0a9e3b7d42e8a6c1f0b9d3e7a254";

fn admin_section(admin: u16, metrics: Option<&str>) -> String {
    let mut section = format!("admin:\n  listen: \"127.0.0.1:{admin}\"\n  token: {TOKEN}");
    if let Some(metrics) = metrics {
        section.push_str(&format!("\n  metrics_listen: \"{metrics}\""));
    }
    section
}

fn loopback(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

fn anonymous(port: u16) -> AdminClient {
    AdminClient::new(&format!("127.0.0.1:{port}"), None).expect("client")
}

fn with_token(port: u16) -> AdminClient {
    AdminClient::new(&format!("127.0.0.1:{port}"), Some(TOKEN.into())).expect("client")
}

/// The answer's status, or the client's error.
async fn status_of(client: &AdminClient, method: Method, path: &str) -> StatusCode {
    let answer = client
        .request(method, path, None)
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    answer.status
}

/// A scrape of `port` without the token, answered 200.
async fn scrape(port: u16) -> String {
    let answer = anonymous(port).get("/metrics").await.expect("scrape");
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    answer.body
}

/// Waits (at most 30 s) until a scrape of `port` shows `rows` rows written by `connector`:
/// the metrics are updated just after the commit the table shows.
async fn wait_for_written(port: u16, connector: &str, rows: f64) -> String {
    let name = format!("sluice_rows_written_total{{connector=\"{connector}\"}}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = scrape(port).await;
        if sample(&metrics, &name) == Some(rows) || std::time::Instant::now() > deadline {
            return metrics;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn refused(answer: Result<sluice::admin::client::Answer, ClientError>) -> bool {
    matches!(answer, Err(ClientError::Connect { .. }))
}

/// Prometheus' scrape without the token gets the connector's metrics on the metrics
/// listener, and the probes their answers; every other endpoint is 404 there (nothing
/// that reads a connector or changes state), and the admin listener still asks for the
/// token, `/metrics` included.
async fn metrics_are_served_without_the_token_on_their_own_listener(db: Backend) {
    let (admin, metrics) = (free_port(), free_port());
    let mut scenario = Scenario::new(2);
    scenario.extra_kafka = admin_section(admin, Some(&loopback(metrics)));
    let name = scenario.connector.clone();
    let run = Pipeline::new(db, scenario, 3).await;
    run.produce(0..1500).await;
    let sluice = run.start();
    harness::assert_exactly(run.wait_for_rows(1500, 120).await, 1500);

    let scraped = wait_for_written(metrics, &name, 1500.0).await;
    assert_eq!(
        sample(
            &scraped,
            &format!("sluice_rows_written_total{{connector=\"{name}\"}}")
        ),
        Some(1500.0),
        "{scraped}"
    );
    assert_eq!(
        sample(
            &scraped,
            &format!("sluice_records_committed_total{{connector=\"{name}\"}}")
        ),
        Some(1500.0),
        "{scraped}"
    );
    let open = anonymous(metrics);
    assert_eq!(
        status_of(&open, Method::GET, "/healthz").await,
        StatusCode::OK
    );
    assert_eq!(
        status_of(&open, Method::GET, "/readyz").await,
        StatusCode::OK
    );
    for (method, path) in [
        (Method::GET, "/connectors".to_string()),
        (Method::GET, format!("/connectors/{name}/status")),
        (Method::GET, format!("/connectors/{name}/offsets")),
        (Method::PUT, format!("/connectors/{name}/pause")),
        (Method::POST, "/reload".to_string()),
        (
            Method::GET,
            format!("/topics/{}/partitions/0/records", run.scenario.topic),
        ),
    ] {
        let answer = open
            .request(method.clone(), &path, None)
            .await
            .expect("request");
        assert_eq!(
            answer.status,
            StatusCode::NOT_FOUND,
            "{method} {path} on the metrics listener: {}",
            answer.body
        );
        assert_eq!(answer.json()["error_code"], 404, "{}", answer.body);
    }
    // The token on the metrics listener opens nothing more.
    assert_eq!(
        status_of(&with_token(metrics), Method::GET, "/connectors").await,
        StatusCode::NOT_FOUND
    );

    // The admin listener: health without the token, everything else with it.
    let outsider = anonymous(admin);
    for path in ["/metrics", "/connectors"] {
        assert_eq!(
            status_of(&outsider, Method::GET, path).await,
            StatusCode::UNAUTHORIZED,
            "{path} on the admin listener without the token"
        );
    }
    assert_eq!(
        status_of(&outsider, Method::GET, "/healthz").await,
        StatusCode::OK
    );
    let scraped = with_token(admin).get("/metrics").await.expect("scrape");
    assert_eq!(scraped.status, StatusCode::OK);
    assert!(scraped.body.contains(&format!("connector=\"{name}\"")));
    // The connector ran undisturbed.
    let status = with_token(admin)
        .get(&format!("/connectors/{name}/status"))
        .await
        .expect("status")
        .json();
    assert_eq!(status["connector"]["state"], "RUNNING", "{status}");
    assert!(sluice.terminate().success());
}
for_each_database!(metrics_are_served_without_the_token_on_their_own_listener: mariadb = MariaDb);

/// A reload moves the metrics listener (the old address stops answering), refuses an
/// address that cannot be bound (the listener serves on where it was), and stops it when
/// `metrics_listen` is gone; at start, an address taken is a clear error and exit 1.
async fn a_reload_moves_the_metrics_listener(db: Backend) {
    let (admin, first, second) = (free_port(), free_port(), free_port());
    let mut scenario = Scenario::new(1);
    scenario.extra_kafka = admin_section(admin, Some(&loopback(first)));
    let name = scenario.connector.clone();
    let run = Pipeline::new(db, scenario, 2).await;
    run.produce(0..500).await;
    let sluice = run.start();
    harness::assert_exactly(run.wait_for_rows(500, 120).await, 500);
    wait_for_written(first, &name, 500.0).await;

    let rewrite = |metrics: Option<&str>| {
        let mut scenario = Scenario {
            connector: run.scenario.connector.clone(),
            topic: run.scenario.topic.clone(),
            group: run.scenario.group.clone(),
            table: run.scenario.table.clone(),
            ..Scenario::new(1)
        };
        scenario.extra_kafka = admin_section(admin, metrics);
        std::fs::write(&run.config, scenario.yaml(&run.broker.bootstrap, &run.db)).expect("write");
    };
    let reload = || async {
        let answer = with_token(admin)
            .request(Method::POST, "/reload", None)
            .await
            .expect("reload");
        (answer.status, answer.json())
    };

    // To a new port: the new one serves, the old one is closed, the connector runs on.
    rewrite(Some(&loopback(second)));
    let (code, body) = reload().await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert_eq!(body["reloaded"]["unchanged"], serde_json::json!([name]));
    assert!(refused(anonymous(first).get("/metrics").await));
    run.produce(500..1000).await;
    harness::assert_exactly(run.wait_for_rows(1000, 60).await, 1000);
    let scraped = wait_for_written(second, &name, 1000.0).await;
    assert_eq!(
        sample(
            &scraped,
            &format!("sluice_rows_written_total{{connector=\"{name}\"}}")
        ),
        Some(1000.0),
        "{scraped}"
    );

    // To a port another process holds: refused, and the listener stays where it was.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken_port = taken.local_addr().expect("addr").port();
    rewrite(Some(&loopback(taken_port)));
    let (code, body) = reload().await;
    assert_eq!(code, StatusCode::BAD_REQUEST, "{body}");
    let problems = body["problems"].to_string();
    assert!(
        problems.contains(&format!("admin.metrics_listen 127.0.0.1:{taken_port}")),
        "{body}"
    );
    scrape(second).await;

    // The same port on every interface: the old listener gives the port up to the new.
    rewrite(Some(&format!("0.0.0.0:{second}")));
    let (code, body) = reload().await;
    assert_eq!(code, StatusCode::OK, "{body}");
    scrape(second).await;

    // Gone from the file: the listener stops; the admin listener is untouched.
    rewrite(None);
    let (code, body) = reload().await;
    assert_eq!(code, StatusCode::OK, "{body}");
    assert!(refused(anonymous(second).get("/metrics").await));
    assert_eq!(
        status_of(&with_token(admin), Method::GET, "/metrics").await,
        StatusCode::OK
    );
    assert!(sluice.terminate().success());

    // At start, on a port taken: exit 1, saying which setting and why.
    rewrite(Some(&loopback(taken_port)));
    let failed = SluiceProcess::start(&run.config);
    let log = failed.log.clone();
    let exit = failed.wait_for_exit(Duration::from_secs(60));
    assert_eq!(exit.code(), Some(1), "{exit:?}");
    let log = std::fs::read_to_string(log).expect("log");
    assert!(
        log.contains(&format!(
            "admin.metrics_listen 127.0.0.1:{taken_port}: Address already in use"
        )),
        "{log}"
    );
    drop(taken);
}
for_each_database!(a_reload_moves_the_metrics_listener: sqlite = Sqlite);
