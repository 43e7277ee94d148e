//! The endpoints under `/connectors`, in Kafka Connect's paths, JSON and status codes.
//! Where sluice knows more than Kafka Connect says (lag, rows per second, counters, the
//! last error, its plugins' calls: [`super::figures`]), it adds fields; Kafka Connect's
//! clients ignore them.
//!
//! Control acts on the connector in every process: pause, resume, stop and restart are
//! written to the connector's sink database, which every process reads every few
//! seconds; status lists the tasks of every process from their heartbeats there.

use std::collections::BTreeMap;

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde_json::{Value, json};

use super::{AdminState, connect_offsets, controlled, error, find_connector};
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
            get(connect_offsets::offsets)
                .patch(connect_offsets::alter_offsets)
                .delete(connect_offsets::reset_offsets),
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

fn control(state: &AdminState, name: &str, target: Target) -> Response {
    match controlled(state, name) {
        Ok((_gate, connector)) => {
            connector.send(Command::Target(target));
            StatusCode::ACCEPTED.into_response()
        }
        Err(answer) => *answer,
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
    let (_gate, connector) = match controlled(&state, &name) {
        Ok(controlled) => controlled,
        Err(answer) => return *answer,
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
    let (_gate, connector) = match controlled(&state, &name) {
        Ok(controlled) => controlled,
        Err(answer) => return *answer,
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
