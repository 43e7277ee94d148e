//! The connector's lag and rate across processes: two `sluice run` processes share one
//! connector of four partitions, and each one's status (the answer the page draws) sums
//! what both hold, from the heartbeats in the sink database.

use std::time::Duration;

use serde_json::Value;

use super::{TOKEN, client, wait_json};
use crate::harness::{self, Backend, Pipeline, Scenario, SluiceProcess, free_port};

/// One task of the connector `like` names (its topic, group and table), with an admin
/// listener on `port`.
fn one_task(port: u16, like: Option<&Scenario>) -> Scenario {
    let mut scenario = match like {
        Some(first) => Scenario {
            connector: first.connector.clone(),
            topic: first.topic.clone(),
            group: first.group.clone(),
            table: first.table.clone(),
            ..Scenario::new(1)
        },
        None => Scenario::new(1),
    };
    scenario.extra_kafka = format!("admin:\n  listen: \"127.0.0.1:{port}\"\n  token: {TOKEN}");
    scenario
}

async fn put(port: u16, path: &str) {
    let answer = client(port, Some(TOKEN))
        .request(hyper::Method::PUT, path, None)
        .await
        .expect("request");
    assert_eq!(
        answer.status,
        hyper::StatusCode::ACCEPTED,
        "{path}: {}",
        answer.body
    );
}

/// The status's partitions as (worker, partition, lag), and its processes' workers.
fn held(status: &Value) -> (Vec<(String, i64, i64)>, Vec<String>) {
    let partitions = status["partitions"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|p| {
                    (
                        p["worker_id"].as_str().unwrap_or("").to_string(),
                        p["partition"].as_i64().unwrap_or(-1),
                        p["lag"].as_i64().unwrap_or(-1),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let processes = status["processes"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|p| p["worker_id"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default();
    (partitions, processes)
}

/// Both processes hold partitions, four in all, each listed once: true when `status`
/// shows that and the lag of all four is `lag`.
fn shows_both(status: &Value, lag: i64) -> bool {
    let (partitions, processes) = held(status);
    let mut numbers: Vec<i64> = partitions.iter().map(|(_, p, _)| *p).collect();
    numbers.sort_unstable();
    let workers: std::collections::BTreeSet<&str> =
        partitions.iter().map(|(w, ..)| w.as_str()).collect();
    numbers == [0, 1, 2, 3]
        && workers.len() == 2
        && processes.len() == 2
        && status["lag"].as_i64() == Some(lag)
        && partitions.iter().map(|(.., l)| l).sum::<i64>() == lag
}

/// Two processes, paused with 1,000 records behind: each one's status shows all four
/// partitions with the process holding each, the lag of all of them, and both processes;
/// resumed, they drain it and both show a lag of 0, and the rate of the drain.
async fn the_status_sums_lag_and_rate_over_processes(db: Backend) {
    let (port_a, port_b) = (free_port(), free_port());
    let run = Pipeline::new(db, one_task(port_a, None), 4).await;
    let name = run.scenario.connector.clone();
    run.produce(0..1000).await;
    let first = run.start();
    harness::assert_exactly(run.wait_for_rows(1000, 120).await, 1000);
    put(port_a, &format!("/connectors/{name}/pause")).await;
    let status = format!("/connectors/{name}/status");
    wait_json(port_a, &status, 30, |s| s["connector"]["state"] == "PAUSED").await;
    run.produce(1000..2000).await;

    let dir = tempfile::tempdir().expect("dir");
    let second_config = one_task(port_b, Some(&run.scenario));
    let second =
        SluiceProcess::start(&second_config.write(dir.path(), &run.broker.bootstrap, &run.db));
    // The group rebalances; the paused partitions' lag is asked of the broker.
    let seen_a = wait_json(port_a, &status, 90, |s| shows_both(s, 1000)).await;
    let seen_b = wait_json(port_b, &status, 30, |s| shows_both(s, 1000)).await;
    let (_, processes) = held(&seen_a);
    assert_eq!(
        processes[0], seen_a["connector"]["worker_id"],
        "this process first: {seen_a}"
    );
    assert!(processes[1].ends_with(&format!(":{port_b}")), "{seen_a}");
    assert_eq!(
        held(&seen_b).1,
        [processes[1].clone(), processes[0].clone()]
    );
    assert_eq!(
        run.stats().await.rows,
        1000,
        "a paused connector wrote rows"
    );

    put(port_a, &format!("/connectors/{name}/resume")).await;
    harness::assert_exactly(run.wait_for_rows(2000, 120).await, 2000);
    for port in [port_a, port_b] {
        let drained = wait_json(port, &status, 30, |s| shows_both(s, 0)).await;
        let rate = drained["rows_per_second"].as_f64().unwrap_or(0.0);
        let shares: f64 = drained["processes"]
            .as_array()
            .map(|all| {
                all.iter()
                    .filter_map(|p| p["rows_per_second"].as_f64())
                    .sum()
            })
            .unwrap_or(0.0);
        // Rounded to 0.1 each, summed and rounded again.
        assert!((rate - shares).abs() < 0.25, "{drained}");
        assert!(
            rate > 0.0,
            "the drain of 1,000 rows shows no rate: {drained}"
        );
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(second.terminate().success());
    assert!(first.terminate().success());
}
crate::for_each_database!(the_status_sums_lag_and_rate_over_processes: postgres = Postgres);
