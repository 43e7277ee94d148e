//! What sluice knows of a connector beyond Kafka Connect's status, added to the status
//! answer (Kafka Connect's clients ignore the extra fields), and the connector's recent
//! throughput, `GET /connectors/{name}/history`. The status page reads both.
//!
//! Every figure is this process's: its metrics' counters (the ones `/metrics` exports),
//! its partitions' lag, its plugins' calls. The tasks of other processes are in the
//! status's `tasks` (from their heartbeats); their figures are in their own answers.

use axum::Json;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::AdminState;
use super::plugin_calls::{self, AllPluginCalls};
use crate::supervisor::ConnectorHandle;

/// The plugin calls of every connector, read once for an answer that shows many.
pub(super) fn plugin_calls(state: &AdminState) -> AllPluginCalls {
    plugin_calls::parse(&state.supervisor.metrics().render())
}

/// Adds sluice's own figures of `connector` to its status answer `body`.
pub(super) fn add(
    body: &mut Map<String, Value>,
    connector: &ConnectorHandle,
    plugins: &AllPluginCalls,
) {
    let metrics = &connector.metrics;
    let lags: Vec<Value> = metrics
        .lags()
        .into_iter()
        .map(|(task, topic, partition, lag)| {
            json!({"task": task, "topic": topic, "partition": partition, "lag": lag})
        })
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
    let last_error = connector
        .view()
        .last_error
        .map(|e| json!({"message": e.message, "at": e.at_ms}));
    let figures = json!({
        "lag": metrics.total_lag(),
        "partitions": lags,
        "rows_per_second": (metrics.rows_per_second() * 10.0).round() / 10.0,
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
    match super::connect_api::find(&state, &name) {
        Ok(connector) => Json(connector.history.answer(&connector.name)).into_response(),
        Err(e) => e.into_response(),
    }
}
