//! The endpoints under `/connectors`, in Kafka Connect's paths, JSON and status codes.
//! Where sluice knows more than Kafka Connect says (lag, rows per second, counters, the
//! last error, its plugins' calls: [`super::figures`]), it adds fields; Kafka Connect's
//! clients ignore them.
//!
//! Control acts on the connector in every process: pause, resume, stop and restart are
//! written to the connector's sink database, which every process reads every few
//! seconds; status lists the tasks of every process from their heartbeats there.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AdminState, ApiError, error, find_connector};
use crate::config::Guarantee;
use crate::sink::control::Target;
use crate::sink::control::TaskRow;
use crate::supervisor::{Command, ConnectorHandle, ConnectorState};

pub(super) fn routes() -> Router<AdminState> {
    Router::new()
        .route("/connectors", get(list))
        .route("/connectors/{name}", get(info))
        .route("/connectors/{name}/config", get(config))
        .route("/connectors/{name}/status", get(status))
        .route("/connectors/{name}/history", get(super::figures::history))
        .route("/connectors/{name}/tasks", get(tasks))
        .route("/connectors/{name}/tasks/{task}/status", get(task_status))
        .route("/connectors/{name}/pause", put(pause))
        .route("/connectors/{name}/resume", put(resume))
        .route("/connectors/{name}/stop", put(stop))
        .route("/connectors/{name}/restart", post(restart))
        .route(
            "/connectors/{name}/tasks/{task}/restart",
            post(restart_task),
        )
        .route(
            "/connectors/{name}/offsets",
            get(offsets).patch(alter_offsets).delete(reset_offsets),
        )
}

/// The query's `key=value` pairs, repeated keys kept (`?expand=status&expand=info`).
fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (key.to_string(), value.to_string())
        })
        .collect()
}

fn flag(pairs: &[(String, String)], key: &str) -> bool {
    pairs
        .iter()
        .any(|(k, v)| k == key && (v.is_empty() || v.eq_ignore_ascii_case("true")))
}

/// `GET /connectors` (`?expand=status`, `?expand=info`).
async fn list(State(state): State<AdminState>, RawQuery(query): RawQuery) -> Response {
    let pairs = query_pairs(query.as_deref());
    let expand: Vec<&str> = pairs
        .iter()
        .filter(|(k, _)| k == "expand")
        .map(|(_, v)| v.as_str())
        .collect();
    let connectors = state.supervisor.connectors();
    if expand.is_empty() {
        let names: Vec<&str> = connectors.iter().map(|c| c.name.as_str()).collect();
        return Json(names).into_response();
    }
    let plugins = super::figures::plugin_calls(&state);
    let mut out = serde_json::Map::new();
    for connector in &connectors {
        let mut entry = serde_json::Map::new();
        if expand.contains(&"status") {
            entry.insert("status".into(), status_with(&state, connector, &plugins));
        }
        if expand.contains(&"info") {
            entry.insert("info".into(), info_body(&state, connector));
        }
        out.insert(connector.name.clone(), Value::Object(entry));
    }
    Json(Value::Object(out)).into_response()
}

fn info_body(state: &AdminState, connector: &ConnectorHandle) -> Value {
    let config = state
        .supervisor
        .config()
        .redacted_section(&connector.name)
        .unwrap_or(Value::Null);
    let tasks: Vec<Value> = (0..connector.config.tasks)
        .map(|task| json!({"connector": connector.name, "task": task}))
        .collect();
    json!({"name": connector.name, "config": config, "tasks": tasks, "type": "sink"})
}

/// `GET /connectors/{name}`: the connector's section of `connectors.yaml` (nested, secrets
/// shown as `***`), its tasks, its type.
async fn info(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    match find_connector(&state, &name) {
        Ok(connector) => Json(info_body(&state, &connector)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /connectors/{name}/config`.
async fn config(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    if let Err(e) = find_connector(&state, &name) {
        return e.into_response();
    }
    Json(
        state
            .supervisor
            .config()
            .redacted_section(&name)
            .unwrap_or(Value::Null),
    )
    .into_response()
}

/// `GET /connectors/{name}/tasks`.
async fn tasks(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    let connector = match find_connector(&state, &name) {
        Ok(connector) => connector,
        Err(e) => return e.into_response(),
    };
    let tasks: Vec<Value> = (0..connector.config.tasks)
        .map(|task| json!({"id": {"connector": name, "task": task}, "config": {}}))
        .collect();
    Json(tasks).into_response()
}

/// The status of a connector: this process's tasks as they are now, the other processes'
/// from their last heartbeats (stale ones `UNASSIGNED`), and sluice's own figures.
pub fn status_body(state: &AdminState, connector: &ConnectorHandle) -> Value {
    status_with(state, connector, &super::figures::plugin_calls(state))
}

/// [`status_body`] with the plugins' calls already read (an answer about many connectors
/// reads them once).
fn status_with(
    state: &AdminState,
    connector: &ConnectorHandle,
    plugins: &super::plugin_calls::AllPluginCalls,
) -> Value {
    let view = connector.view();
    let worker = state.supervisor.worker_id();
    let mut connector_state = json!({"state": view.state.name(), "worker_id": worker});
    if let Some(trace) = &view.trace
        && matches!(
            view.state,
            ConnectorState::Failed | ConnectorState::Unassigned
        )
    {
        connector_state["trace"] = json!(trace);
    }
    let mut tasks: Vec<Value> = view
        .tasks
        .iter()
        .map(|task| {
            let mut entry = json!({"id": task.id, "state": task.state, "worker_id": worker});
            if let Some(trace) = &task.trace {
                entry["trace"] = json!(trace);
            }
            entry
        })
        .collect();
    // The rule again at answer time: a process whose heartbeats this one has not been
    // able to read for a while shows as gone, not as it last was.
    let now = crate::sink::control::now_ms();
    let others: Vec<TaskRow> = view
        .others
        .iter()
        .cloned()
        .map(|r| r.seen_at(now))
        .collect();
    for other in &others {
        let mut entry = json!({"id": other.task, "state": other.state, "worker_id": other.worker});
        if let Some(trace) = &other.trace {
            entry["trace"] = json!(trace);
        }
        tasks.push(entry);
    }
    let mut body = json!({
        "name": connector.name,
        "connector": connector_state,
        "tasks": tasks,
        "type": "sink",
    });
    if let Some(body) = body.as_object_mut() {
        super::figures::add(body, connector, &worker, &others, plugins);
    }
    body
}

/// `GET /connectors/{name}/status`.
async fn status(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    match find_connector(&state, &name) {
        Ok(connector) => Json(status_body(&state, &connector)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /connectors/{name}/tasks/{task}/status` (this process's task).
async fn task_status(
    State(state): State<AdminState>,
    Path((name, task)): Path<(String, usize)>,
) -> Response {
    let connector = match find_connector(&state, &name) {
        Ok(connector) => connector,
        Err(e) => return e.into_response(),
    };
    let view = connector.view();
    match view.tasks.iter().find(|t| t.id == task) {
        Some(found) => {
            let mut body = json!({"id": found.id, "state": found.state, "worker_id": state.supervisor.worker_id()});
            if let Some(trace) = &found.trace {
                body["trace"] = json!(trace);
            }
            Json(body).into_response()
        }
        None => error(
            StatusCode::NOT_FOUND,
            format!("Task {task} of connector {name} not found in this process"),
        ),
    }
}

/// The answer to a control call while a reload runs: it is not forgotten later, it is
/// refused now (Kafka Connect answers 409 while it rebalances).
fn reloading() -> Response {
    error(
        StatusCode::CONFLICT,
        "a reload of the configuration is running: try again when it has finished",
    )
}

fn control(state: &AdminState, name: &str, target: Target) -> Response {
    let Some(_gate) = state.supervisor.control_gate() else {
        return reloading();
    };
    match find_connector(state, name) {
        Ok(connector) => {
            connector.send(Command::Target(target));
            StatusCode::ACCEPTED.into_response()
        }
        Err(e) => e.into_response(),
    }
}

/// `PUT /connectors/{name}/pause`: every process pauses the connector's partitions (its
/// consumers stay in the group); survives rebalances and restarts.
async fn pause(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    control(&state, &name, Target::Paused)
}

/// `PUT /connectors/{name}/resume`.
async fn resume(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    control(&state, &name, Target::Running)
}

/// `PUT /connectors/{name}/stop`: every process stops the connector's tasks.
async fn stop(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    control(&state, &name, Target::Stopped)
}

/// `POST /connectors/{name}/restart[?includeTasks=true][&onlyFailed=true]`: 204 for the
/// connector alone, 202 with the status when tasks restart (as Kafka Connect).
async fn restart(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
) -> Response {
    let Some(_gate) = state.supervisor.control_gate() else {
        return reloading();
    };
    let connector = match find_connector(&state, &name) {
        Ok(connector) => connector,
        Err(e) => return e.into_response(),
    };
    let pairs = query_pairs(query.as_deref());
    let include_tasks = flag(&pairs, "includeTasks");
    let only_failed = flag(&pairs, "onlyFailed");
    connector.send(Command::Restart {
        include_tasks,
        only_failed,
    });
    if include_tasks || only_failed {
        (StatusCode::ACCEPTED, Json(status_body(&state, &connector))).into_response()
    } else {
        StatusCode::NO_CONTENT.into_response()
    }
}

/// `POST /connectors/{name}/tasks/{task}/restart` (this process's task).
async fn restart_task(
    State(state): State<AdminState>,
    Path((name, task)): Path<(String, usize)>,
) -> Response {
    let Some(_gate) = state.supervisor.control_gate() else {
        return reloading();
    };
    let connector = match find_connector(&state, &name) {
        Ok(connector) => connector,
        Err(e) => return e.into_response(),
    };
    if task >= connector.config.tasks as usize {
        return error(
            StatusCode::NOT_FOUND,
            format!("Task {task} of connector {name} not found"),
        );
    }
    connector.send(Command::RestartTask(task));
    StatusCode::NO_CONTENT.into_response()
}

fn offsets_body(rows: Vec<(String, i32, i64)>) -> Value {
    let offsets: Vec<Value> = rows
        .into_iter()
        .map(|(topic, partition, next)| {
            json!({
                "partition": {"kafka_topic": topic, "kafka_partition": partition},
                "offset": {"kafka_offset": next},
            })
        })
        .collect();
    json!({"offsets": offsets})
}

fn exactly_once(connector: &ConnectorHandle) -> bool {
    connector.config.delivery.guarantee == Guarantee::ExactlyOnce
}

/// `GET /connectors/{name}/offsets`, in Kafka Connect 3.6's shape: where the connector
/// resumes. `exactly_once`: the offsets stored in the sink database; `at_least_once`: the
/// Kafka group's committed offsets.
async fn offsets(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    let connector = match find_connector(&state, &name) {
        Ok(connector) => connector,
        Err(e) => return e.into_response(),
    };
    if !exactly_once(&connector) {
        let (kafka, brokers, config) = (
            state.supervisor.config().kafka.clone(),
            state.supervisor.brokers(),
            connector.config.clone(),
        );
        return match crate::kafka::blocking(move || {
            crate::kafka::group::committed_offsets(&kafka, &brokers, &config)
        })
        .await
        {
            Ok(rows) => Json(offsets_body(rows)).into_response(),
            Err(e) => error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot read the Kafka group's committed offsets: {e}"),
            ),
        };
    }
    let Some(sink) = connector.view().sink else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("connector {name} is not connected to its database yet"),
        );
    };
    match sink.control().read_all_offsets().await {
        Ok(rows) => Json(offsets_body(rows)).into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// Offsets may change only while the connector is stopped here and in every process: this
/// process's runner, the other processes' heartbeats, and (the ground truth) the Kafka
/// group, which must have no members. Returns the connector's sink, where a reset forgets
/// what it rewinds past (`crate::reset`).
async fn stopped_everywhere(
    state: &AdminState,
    connector: &ConnectorHandle,
) -> Result<Arc<crate::sink::Sink>, ApiError> {
    let view = connector.view();
    let stopped_here = view.state == ConnectorState::Stopped && view.tasks.is_empty();
    let mut busy = Vec::new();
    if stopped_here && let Some(sink) = &view.sink {
        let brokers = state.supervisor.brokers();
        match crate::reset::running_anywhere(
            &sink.control(),
            &state.supervisor.config().kafka,
            Some(&brokers),
            &connector.config,
            Some(&state.supervisor.worker_id()),
        )
        .await
        {
            Ok(running) => busy = running,
            Err(e) => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    e.to_string(),
                ));
            }
        }
    }
    if !stopped_here || !busy.is_empty() {
        let mut message = format!(
            "Connectors must be in the STOPPED state before their offsets can be modified. \
             This can be done for the specified connector by issuing a 'PUT' request to the '/connectors/{}/stop' endpoint",
            connector.name
        );
        if !busy.is_empty() {
            message.push_str(&format!(" (still running: {})", busy.join(", ")));
        }
        return Err(ApiError::new(StatusCode::BAD_REQUEST, message));
    }
    match view.sink {
        Some(sink) => Ok(sink),
        None => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "connector {} is not connected to its database",
                connector.name
            ),
        )),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OffsetsBody {
    offsets: Vec<OffsetEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OffsetEntry {
    partition: PartitionKey,
    /// `null` forgets the partition's stored offset.
    offset: Option<OffsetValue>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PartitionKey {
    kafka_topic: String,
    kafka_partition: i32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OffsetValue {
    kafka_offset: i64,
}

/// `PATCH /connectors/{name}/offsets`: sets (or with `"offset": null` forgets) offsets;
/// only while the connector is stopped everywhere. `exactly_once`: in the sink database,
/// and the Kafka group's copy follows (advisory: lag tools read it); `at_least_once`: the
/// group's committed offsets, which are where it resumes.
async fn alter_offsets(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let Some(_gate) = state.supervisor.control_gate() else {
        return reloading();
    };
    let connector = match find_connector(&state, &name) {
        Ok(connector) => connector,
        Err(e) => return e.into_response(),
    };
    let body: OffsetsBody = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    "the body must be {{\"offsets\": [{{\"partition\": {{\"kafka_topic\": …, \"kafka_partition\": …}}, \"offset\": {{\"kafka_offset\": …}}}}]}}: {e}"
                ),
            );
        }
    };
    if body.offsets.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "the list of offsets to alter is empty",
        );
    }
    let mut problems = Vec::new();
    let mut changes = Vec::new();
    for entry in body.offsets {
        let PartitionKey {
            kafka_topic,
            kafka_partition,
        } = entry.partition;
        if !connector.config.reads_topic(&kafka_topic) {
            problems.push(format!("{kafka_topic} is not a topic of connector {name}"));
        }
        if kafka_partition < 0 {
            problems.push(format!(
                "{kafka_topic}/{kafka_partition}: a partition is not negative"
            ));
        }
        let next = entry.offset.map(|o| o.kafka_offset);
        if next.is_some_and(|n| n < 0) {
            problems.push(format!(
                "{kafka_topic}/{kafka_partition}: an offset is not negative"
            ));
        }
        changes.push((kafka_topic, kafka_partition, next));
    }
    if !exactly_once(&connector) && changes.iter().any(|(_, _, n)| n.is_none()) {
        problems.push(
            "an at_least_once connector resumes from the Kafka group's committed offsets, which cannot be forgotten one partition at a time: give an offset, or DELETE them all".into(),
        );
    }
    if !problems.is_empty() {
        return error(StatusCode::BAD_REQUEST, problems.join("; "));
    }
    let sink = match stopped_everywhere(&state, &connector).await {
        Ok(sink) => sink,
        Err(e) => return e.into_response(),
    };
    let request = crate::reset::ResetRequest::Partitions(changes);
    reset_answer(&state, &connector, &sink, &request, "altered").await
}

/// Runs a reset (`crate::reset`) and answers it: Kafka Connect's message, and what was
/// forgotten.
async fn reset_answer(
    state: &AdminState,
    connector: &ConnectorHandle,
    sink: &crate::sink::Sink,
    request: &crate::reset::ResetRequest,
    done: &str,
) -> Response {
    let brokers = state.supervisor.brokers();
    let report = match crate::reset::reset(
        sink,
        &state.supervisor.config().kafka,
        Some(&brokers),
        &connector.config,
        request,
    )
    .await
    {
        Ok(report) => report,
        Err(crate::reset::ResetError::Positions { connector, reason }) => {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "cannot read where the partitions of connector {connector} start: {reason}"
                ),
            );
        }
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let failed = !exactly_once(connector) && report.kafka_group.is_err();
    let mut answer = offsets_answer(
        connector,
        exactly_once(connector),
        report.kafka_group.map(|_| ()),
        done,
    );
    if let Some(object) = answer.as_object_mut() {
        object.insert("forgotten".into(), json!(report.forgotten));
    }
    let status = if failed {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    };
    (status, Json(answer)).into_response()
}

/// The answer to an offsets change: Kafka Connect's message, once the Kafka group has
/// followed. With the offsets in the database (`in_database`), a group that could not
/// follow is a warning and a `kafka_group` field; otherwise the group's offsets are the
/// ones used, and its failure is in the answer's `error` (with the ids and markers already
/// forgotten: the records are read again, at least once).
fn offsets_answer(
    connector: &ConnectorHandle,
    in_database: bool,
    mirrored: Result<(), String>,
    done: &str,
) -> Value {
    let mut answer =
        json!({"message": format!("The offsets for this connector have been {done} successfully")});
    if let Err(e) = mirrored {
        let group = connector.config.group_id();
        if !in_database {
            return json!({
                "error_code": 500,
                "message": format!("the offsets of the Kafka group {group} could not be {done}: {e}"),
            });
        }
        tracing::warn!(connector = %connector.name, error = %e, "offsets {done} in the database; the Kafka group's copy (for lag tools) could not follow");
        answer["kafka_group"] = json!(format!(
            "not updated (the database's offsets are the ones used): {e}"
        ));
    }
    answer
}

/// `DELETE /connectors/{name}/offsets`: forgets every offset (the connector starts over per
/// `auto.offset.reset`) and moves the Kafka group's committed offsets there; only while
/// the connector is stopped everywhere.
async fn reset_offsets(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
    let Some(_gate) = state.supervisor.control_gate() else {
        return reloading();
    };
    let connector = match find_connector(&state, &name) {
        Ok(connector) => connector,
        Err(e) => return e.into_response(),
    };
    let sink = match stopped_everywhere(&state, &connector).await {
        Ok(sink) => sink,
        Err(e) => return e.into_response(),
    };
    reset_answer(
        &state,
        &connector,
        &sink,
        &crate::reset::ResetRequest::All,
        "reset",
    )
    .await
}

/// The query flags of a restart, for tests and the CLI.
pub fn restart_query(include_tasks: bool, only_failed: bool) -> String {
    let mut params = BTreeMap::new();
    if include_tasks {
        params.insert("includeTasks", "true");
    }
    if only_failed {
        params.insert("onlyFailed", "true");
    }
    if params.is_empty() {
        String::new()
    } else {
        let joined: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("?{}", joined.join("&"))
    }
}
