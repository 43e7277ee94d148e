//! `/connectors/{name}/offsets`, in Kafka Connect 3.6's paths and shapes: where a connector
//! resumes (`GET`: the sink database's offsets under `exactly_once`, the Kafka group's
//! under `at_least_once`), and an operator's reset or alteration of them (`DELETE`,
//! `PATCH`), allowed only while the connector is stopped in every process.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AdminState, ApiError, controlled, error, find_connector};
use crate::config::Guarantee;
use crate::supervisor::{ConnectorHandle, ConnectorState};

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
pub(super) async fn offsets(State(state): State<AdminState>, Path(name): Path<String>) -> Response {
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
pub(super) async fn alter_offsets(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let (_gate, connector) = match controlled(&state, &name) {
        Ok(controlled) => controlled,
        Err(answer) => return *answer,
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
    reset_answer(&state, &connector, sink.control(), &request, "altered").await
}

/// Runs a reset (`crate::reset`) and answers it: Kafka Connect's message, and what was
/// forgotten.
async fn reset_answer(
    state: &AdminState,
    connector: &ConnectorHandle,
    control: crate::sink::ControlStore<'_>,
    request: &crate::reset::ResetRequest,
    done: &str,
) -> Response {
    let brokers = state.supervisor.brokers();
    let report = match crate::reset::reset(
        control,
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
pub(super) async fn reset_offsets(
    State(state): State<AdminState>,
    Path(name): Path<String>,
) -> Response {
    let (_gate, connector) = match controlled(&state, &name) {
        Ok(controlled) => controlled,
        Err(answer) => return *answer,
    };
    let sink = match stopped_everywhere(&state, &connector).await {
        Ok(sink) => sink,
        Err(e) => return e.into_response(),
    };
    reset_answer(
        &state,
        &connector,
        sink.control(),
        &crate::reset::ResetRequest::All,
        "reset",
    )
    .await
}
