//! The admin API as the suites drive it: a token-guarded `admin:` section on a free port,
//! requests, the connector's status awaited until a condition holds, metric samples from
//! a scrape.

use std::time::{Duration, Instant};

use hyper::{Method, StatusCode};
use serde_json::{Value, json};
use sluice::admin::client::AdminClient;

pub const TOKEN: &str = "op-token-0123";

/// An `admin:` section on a free port, placed where `Scenario::extra_kafka` goes.
pub fn admin_section(port: u16) -> String {
    format!("admin:\n  listen: \"127.0.0.1:{port}\"\n  token: {TOKEN}")
}

pub fn client(port: u16) -> AdminClient {
    AdminClient::new(&format!("http://127.0.0.1:{port}"), Some(TOKEN.into())).expect("client")
}

/// `GET path`, answered with 200, as JSON.
pub async fn get(port: u16, path: &str) -> Value {
    let answer = client(port).get(path).await.expect("request");
    assert_eq!(answer.status, StatusCode::OK, "{path}: {}", answer.body);
    answer.json()
}

pub async fn send(
    port: u16,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let answer = client(port)
        .request(method, path, body)
        .await
        .expect("request");
    (answer.status, answer.json())
}

/// `PUT /connectors/{name}/{action}` (pause, resume, stop), answered 202.
pub async fn control(port: u16, name: &str, action: &str) {
    let (code, body) = send(
        port,
        Method::PUT,
        &format!("/connectors/{name}/{action}"),
        None,
    )
    .await;
    assert_eq!(code, StatusCode::ACCEPTED, "{action}: {body}");
}

/// Waits (at most `seconds`) until `check` holds for the connector's status.
pub async fn wait_status(
    port: u16,
    name: &str,
    seconds: u64,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let answer = client(port)
            .get(&format!("/connectors/{name}/status"))
            .await;
        match answer {
            Ok(answer) if answer.status == StatusCode::OK => {
                let status = answer.json();
                if check(&status) {
                    return status;
                }
                assert!(Instant::now() < deadline, "status never matched: {status}");
            }
            other => assert!(Instant::now() < deadline, "no status: {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn tasks_in(status: &Value, state: &str) -> usize {
    status["tasks"]
        .as_array()
        .map_or(0, |t| t.iter().filter(|t| t["state"] == state).count())
}

/// The value of the sample `name{labels}` in a scrape.
pub fn sample(scrape: &str, name_and_labels: &str) -> Option<f64> {
    scrape
        .lines()
        .find(|line| {
            line.starts_with(name_and_labels) && line[name_and_labels.len()..].starts_with(' ')
        })
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

pub async fn scrape(port: u16) -> String {
    let answer = client(port).get("/metrics").await.expect("scrape");
    assert_eq!(answer.status, StatusCode::OK);
    answer.body
}

/// `PATCH /connectors/{name}/offsets`: moves `topic`'s `partition` to `offset` (the
/// connector must be stopped), answered 200.
pub async fn move_offset(port: u16, name: &str, topic: &str, partition: i32, offset: i64) {
    let patch = json!({"offsets": [{"partition": {"kafka_topic": topic, "kafka_partition": partition}, "offset": {"kafka_offset": offset}}]});
    let (code, body) = send(
        port,
        Method::PATCH,
        &format!("/connectors/{name}/offsets"),
        Some(patch),
    )
    .await;
    assert_eq!(code, StatusCode::OK, "{body}");
}
