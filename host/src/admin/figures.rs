//! What sluice knows of a connector beyond Kafka Connect's status, added to the status
//! answer (Kafka Connect's clients ignore the extra fields), and the connector's recent
//! throughput, `GET /connectors/{name}/history`. The status page reads both.
//!
//! The lag and the rate are the connector's across processes: this process's as they are
//! now, and each other process's from its last heartbeat (`sink/control/`), if fresh.
//! The counters, the last error, the plugins' calls and the history are this process's
//! (its metrics, the ones `/metrics` exports); the other processes' are in their own
//! answers.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::AdminState;
use super::plugin_calls::{self, AllPluginCalls};
use crate::sink::control::TaskRow;
use crate::supervisor::ConnectorHandle;

/// The plugin calls of every connector, read once for an answer that shows many.
pub(super) fn plugin_calls(state: &AdminState) -> AllPluginCalls {
    plugin_calls::parse(&state.supervisor.metrics().render())
}

/// A partition of the connector, held by a task of some process.
#[derive(Debug, Clone, PartialEq)]
struct HeldPartition {
    worker: String,
    task: i64,
    topic: String,
    partition: i32,
    lag: i64,
}

/// One process's share of the connector: its rows/s and the lag of the partitions it holds.
#[derive(Debug, Clone, PartialEq)]
struct ProcessShare {
    worker: String,
    rows_per_second: f64,
    lag: i64,
}

/// The connector's partitions and processes across processes: `worker`'s (this process)
/// from `own` (task, topic, partition, lag) and `rows_per_second`, the others' from the
/// heartbeats in `others` that carry figures (fresh ones of a version that shares them).
/// A partition that two processes list (a rebalance between two heartbeats) is counted
/// once: as this process holds it, or else as the newest heartbeat says.
fn across_processes(
    worker: &str,
    own: Vec<(usize, String, i32, i64)>,
    rows_per_second: f64,
    others: &[TaskRow],
) -> (Vec<HeldPartition>, Vec<ProcessShare>) {
    let mut partitions: Vec<(i64, HeldPartition)> = own
        .into_iter()
        .map(|(task, topic, partition, lag)| {
            let held = HeldPartition {
                worker: worker.to_string(),
                task: task as i64,
                topic,
                partition,
                lag,
            };
            (i64::MAX, held)
        })
        .collect();
    let mut shares = vec![ProcessShare {
        worker: worker.to_string(),
        rows_per_second,
        lag: 0,
    }];
    for row in others {
        let Some(figures) = &row.figures else {
            continue;
        };
        if !shares.iter().any(|share| share.worker == row.worker) {
            shares.push(ProcessShare {
                worker: row.worker.clone(),
                rows_per_second: figures.process_rows_per_second,
                lag: 0,
            });
        }
        for held in &figures.partitions {
            let entry = HeldPartition {
                worker: row.worker.clone(),
                task: i64::from(row.task),
                topic: held.topic.clone(),
                partition: held.partition,
                lag: held.lag,
            };
            let listed = partitions
                .iter()
                .position(|(_, p)| p.topic == held.topic && p.partition == held.partition);
            match listed {
                Some(at) if partitions[at].0 < row.updated_at => {
                    partitions[at] = (row.updated_at, entry)
                }
                Some(_) => {}
                None => partitions.push((row.updated_at, entry)),
            }
        }
    }
    let mut partitions: Vec<HeldPartition> = partitions.into_iter().map(|(_, p)| p).collect();
    partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    for share in &mut shares {
        share.lag = partitions
            .iter()
            .filter(|p| p.worker == share.worker)
            .map(|p| p.lag)
            .sum();
    }
    (partitions, shares)
}

/// Adds sluice's own figures of `connector` to its status answer `body`; `worker` is this
/// process, `others` the other processes' heartbeats as the answer shows them.
pub(super) fn add(
    body: &mut Map<String, Value>,
    connector: &ConnectorHandle,
    worker: &str,
    others: &[TaskRow],
    plugins: &AllPluginCalls,
) {
    let metrics = &connector.metrics;
    let (partitions, processes) = across_processes(
        worker,
        metrics.lags(),
        (metrics.rows_per_second() * 10.0).round() / 10.0,
        others,
    );
    // The partitions no task reads count in the lag too: a connector that reads nothing
    // does not show lag 0.
    // The watcher counts every few seconds; a partition a task took since is not unread.
    let mut coverage = connector.coverage.view();
    coverage.unread.retain(|u| {
        !partitions
            .iter()
            .any(|p| p.topic == u.topic && p.partition == u.partition)
    });
    let now = crate::sink::control::now_ms();
    let unread_lag: i64 = coverage.unread.iter().filter_map(|p| p.lag).sum();
    let lag: i64 = partitions.iter().map(|p| p.lag).sum::<i64>() + unread_lag;
    let unread: Vec<Value> = coverage
        .unread
        .iter()
        .map(|p| {
            json!({"topic": p.topic, "partition": p.partition, "lag": p.lag,
                "since": p.since_ms, "seconds": (now.saturating_sub(p.since_ms) / 1000).max(0)})
        })
        .collect();
    let view = connector.view();
    let reasons = crate::supervisor::coverage::health(&view, &coverage, now);
    let health = if reasons.is_empty() {
        "HEALTHY"
    } else {
        "DEGRADED"
    };
    let rows_per_second: f64 = processes.iter().map(|p| p.rows_per_second).sum();
    let lags: Vec<Value> = partitions
        .into_iter()
        .map(|p| {
            json!({"task": p.task, "topic": p.topic, "partition": p.partition, "lag": p.lag, "worker_id": p.worker})
        })
        .collect();
    let processes: Vec<Value> = processes
        .into_iter()
        .map(|p| json!({"worker_id": p.worker, "rows_per_second": p.rows_per_second, "lag": p.lag}))
        .collect();
    let chain: Vec<Value> = connector
        .config
        .transforms
        .iter()
        .map(|transform| {
            let calls = plugins
                .get(&(connector.name.clone(), transform.name.clone()))
                .copied()
                .unwrap_or_default();
            let mean = (calls.calls > 0).then_some(calls.seconds / calls.calls as f64);
            json!({
                "name": transform.name,
                "plugin": transform.plugin.file_name().map(|f| f.to_string_lossy()),
                "calls": calls.calls,
                "call_seconds_total": calls.seconds,
                "call_seconds_mean": mean,
                "failures": calls.failures,
            })
        })
        .collect();
    let last_error = view
        .last_error
        .map(|e| json!({"message": e.message, "at": e.at_ms}));
    let figures = json!({
        "health": health,
        "health_reasons": reasons,
        "lag": lag,
        "partitions": lags,
        "unread_partitions": unread,
        "unread_grace_seconds": coverage.grace.as_secs(),
        "coverage_error": coverage.error,
        "rows_per_second": (rows_per_second * 10.0).round() / 10.0,
        "processes": processes,
        "records_consumed": metrics.consumed_total(),
        "records_committed": metrics.committed.get(),
        "rows_written": metrics.rows_written.get(),
        "dead_letters": metrics.dead_letters.get(),
        "records_skipped": metrics.skipped.get() + metrics.failed_skipped.get(),
        "records_filtered": metrics.filtered.get(),
        "duplicates_skipped": metrics.duplicates.get(),
        "offset_gaps": metrics.offset_gaps.get(),
        "offset_resets": metrics.offset_resets.get(),
        "offsets_skipped": metrics.offsets_skipped.get(),
        "last_error": last_error,
        "plugins": chain,
    });
    if let Value::Object(figures) = figures {
        body.extend(figures);
    }
}

/// `GET /connectors/{name}/history`: the connector's counters every few seconds over the
/// last 15 minutes, with the rates between them (`crate::supervisor::history`).
pub(super) async fn history(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    match super::find_connector(&state, &name) {
        Ok(connector) => Json(connector.history.answer(&connector.name)).into_response(),
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::control::{PartitionLag, TaskFigures};

    /// Partitions as (topic, partition, lag), and the process's rows/s.
    type Shared<'a> = Option<(&'a [(&'a str, i32, i64)], f64)>;

    fn heartbeat(worker: &str, task: i32, at: i64, figures: Shared<'_>) -> TaskRow {
        TaskRow {
            worker: worker.into(),
            task,
            state: "RUNNING".into(),
            trace: None,
            updated_at: at,
            figures: figures.map(|(held, rate)| TaskFigures {
                partitions: held
                    .iter()
                    .map(|(topic, partition, lag)| PartitionLag {
                        topic: (*topic).into(),
                        partition: *partition,
                        lag: *lag,
                    })
                    .collect(),
                process_rows_per_second: rate,
            }),
        }
    }

    #[test]
    fn lag_and_rate_add_up_over_processes() {
        let own = vec![(0, "t".to_string(), 0, 5), (0, "t".to_string(), 1, 7)];
        let others = [
            heartbeat("b", 0, 10, Some((&[("t", 2, 100)], 40.0))),
            heartbeat("b", 1, 10, Some((&[("t", 3, 1)], 40.0))),
            heartbeat("c", 0, 10, Some((&[], 2.5))),
        ];
        let (partitions, shares) = across_processes("a", own, 10.0, &others);
        let listed: Vec<(&str, i32, i64)> = partitions
            .iter()
            .map(|p| (p.worker.as_str(), p.partition, p.lag))
            .collect();
        assert_eq!(
            listed,
            [("a", 0, 5), ("a", 1, 7), ("b", 2, 100), ("b", 3, 1)]
        );
        assert_eq!(partitions[3].task, 1);
        let by_process: Vec<(&str, f64, i64)> = shares
            .iter()
            .map(|s| (s.worker.as_str(), s.rows_per_second, s.lag))
            .collect();
        // A process's rate is on each of its tasks' heartbeats: counted once.
        assert_eq!(
            by_process,
            [("a", 10.0, 12), ("b", 40.0, 101), ("c", 2.5, 0)]
        );
    }

    #[test]
    fn a_partition_listed_twice_counts_once() {
        // Between two heartbeats a rebalance moved partition 0 from b to this process and
        // partition 1 from b to c: this process's own view wins, else the newer heartbeat.
        let own = vec![(0, "t".to_string(), 0, 3)];
        let others = [
            heartbeat("b", 0, 10, Some((&[("t", 0, 50), ("t", 1, 60)], 1.0))),
            heartbeat("c", 0, 12, Some((&[("t", 1, 61)], 1.0))),
        ];
        let (partitions, shares) = across_processes("a", own, 0.0, &others);
        let listed: Vec<(&str, i32, i64)> = partitions
            .iter()
            .map(|p| (p.worker.as_str(), p.partition, p.lag))
            .collect();
        assert_eq!(listed, [("a", 0, 3), ("c", 1, 61)]);
        assert_eq!(shares.iter().map(|s| s.lag).sum::<i64>(), 64);
    }

    #[test]
    fn topics_that_differ_only_in_case_are_two_partitions() {
        let own = vec![(0, "Orders".to_string(), 0, 4)];
        let others = [heartbeat("b", 0, 10, Some((&[("orders", 0, 6)], 1.0)))];
        let (partitions, shares) = across_processes("a", own, 0.0, &others);
        let listed: Vec<(&str, &str, i64)> = partitions
            .iter()
            .map(|p| (p.worker.as_str(), p.topic.as_str(), p.lag))
            .collect();
        assert_eq!(listed, [("a", "Orders", 4), ("b", "orders", 6)]);
        assert_eq!(shares.iter().map(|s| s.lag).sum::<i64>(), 10);
    }

    #[test]
    fn heartbeats_without_figures_add_nothing() {
        // A stale heartbeat (its figures dropped when read) or one of an older version.
        let others = [heartbeat("b", 0, 10, None)];
        let (partitions, shares) = across_processes("a", Vec::new(), 4.0, &others);
        assert!(partitions.is_empty());
        assert_eq!(shares.len(), 1);
        assert_eq!(shares[0].rows_per_second, 4.0);
    }
}
