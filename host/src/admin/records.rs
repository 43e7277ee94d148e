//! Records read through the seek-consumer pool: `GET /topics/{topic}/partitions/{p}/records`
//! (the records, in `sluice inspect`'s JSON shape) and `POST /connectors/{name}/dry-run`
//! (what the connector would write for them, nothing written).
//!
//! Both read only the topics of this process's connectors and their dead-letter topics
//! ([`super::topics`]; anything else is 403). An answer holds at most [`MAX_ANSWER_BYTES`]:
//! a read stops at that many bytes of records as well as at its `limit`, and says where it
//! was cut (`X-Sluice-Truncated: true` and `X-Sluice-Next-Offset` on the records endpoint,
//! `truncated` and `next_offset` in a dry run's body). At most [`MAX_DRY_RUNS`] dry runs
//! run at once (503 beyond): each compiles and runs the connector's plugins.

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AdminState, ApiError};
use crate::pool::{PoolError, ReadError, Start};

/// Most records one request may ask for.
pub const MAX_LIMIT: usize = 1000;
/// Records a request gets when it names no limit.
const DEFAULT_LIMIT: usize = 10;
/// Longest wait for the records a read asks for.
const READ_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// Largest answer of a read: 1,000 records of 1 MB must not reach a pod's memory limit.
pub const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;
/// Most dry runs at once.
pub const MAX_DRY_RUNS: usize = 2;
/// The header that says a records answer was cut at [`MAX_ANSWER_BYTES`].
pub const TRUNCATED_HEADER: &str = "x-sluice-truncated";
/// The header with the offset to read on from after a cut.
pub const NEXT_OFFSET_HEADER: &str = "x-sluice-next-offset";

pub fn routes() -> Router<AdminState> {
    Router::new()
        .route(
            "/topics/{topic}/partitions/{partition}/records",
            get(records),
        )
        .route("/connectors/{name}/dry-run", post(dry_run))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordsQuery {
    /// Where to start; absent: the last `limit` records.
    offset: Option<i64>,
    limit: Option<usize>,
}

fn limit_of(limit: Option<usize>) -> Result<usize, ApiError> {
    match limit.unwrap_or(DEFAULT_LIMIT) {
        0 => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "limit must be at least 1",
        )),
        n if n > MAX_LIMIT => Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("limit {n} is more than {MAX_LIMIT}"),
        )),
        n => Ok(n),
    }
}

fn read_error(error: ReadError) -> ApiError {
    let status = match &error {
        ReadError::UnknownTopic { .. } | ReadError::UnknownPartition { .. } => {
            StatusCode::NOT_FOUND
        }
        ReadError::OutOfRange { .. } => StatusCode::BAD_REQUEST,
        ReadError::Pool(PoolError::Busy { .. } | PoolError::Closed) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        ReadError::TimedOut { .. } => StatusCode::GATEWAY_TIMEOUT,
        ReadError::Pool(PoolError::Create { .. }) => StatusCode::INTERNAL_SERVER_ERROR,
        // The cluster answered with an error.
        ReadError::Kafka { .. } => StatusCode::BAD_GATEWAY,
    };
    ApiError::new(status, error.to_string())
}

/// Items of an answer, in order, while their JSON fits in `budget` bytes: the items taken,
/// and the offset of the first one left out.
fn within<'a, T>(
    items: impl IntoIterator<Item = (i64, &'a T)>,
    budget: usize,
    to_json: impl Fn(&T) -> Value,
) -> (Vec<Value>, Option<i64>)
where
    T: 'a,
{
    let mut out = Vec::new();
    let mut used = 2usize; // `[` and `]`
    for (offset, item) in items {
        let value = to_json(item);
        let size = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len()) + 1;
        if used.saturating_add(size) > budget {
            return (out, Some(offset));
        }
        used += size;
        out.push(value);
    }
    (out, None)
}

/// The offset after the last record read: where a cut read goes on.
fn after(read: &[crate::record::Incoming]) -> Option<i64> {
    read.last().map(|i| i.record.offset + 1)
}

async fn records(
    State(state): State<AdminState>,
    Path((topic, partition)): Path<(String, i32)>,
    Query(query): Query<RecordsQuery>,
) -> Result<Response, ApiError> {
    super::topics::check(&state.supervisor.config(), &topic)?;
    let limit = limit_of(query.limit)?;
    let start = match query.offset {
        Some(offset) => Start::Offset(offset),
        None => Start::FromEnd(limit as i64),
    };
    let pool = state.supervisor.pool();
    let (read, cut) = pool
        .read_bounded(
            &topic,
            partition,
            start,
            limit,
            MAX_ANSWER_BYTES as u64,
            READ_WAIT,
        )
        .await
        .map_err(read_error)?;
    let (out, left_out) = within(
        read.iter().map(|i| (i.record.offset, i)),
        MAX_ANSWER_BYTES,
        |i| sluice_transform::record_to_json(&i.record),
    );
    let next = left_out.or(if cut { after(&read) } else { None });
    let mut response = Json(Value::Array(out)).into_response();
    if let Some(next) = next {
        tracing::debug!(%topic, partition, next, "a records answer was cut at its size bound");
        let headers = response.headers_mut();
        headers.insert(TRUNCATED_HEADER, HeaderValue::from_static("true"));
        headers.insert(NEXT_OFFSET_HEADER, HeaderValue::from(next));
    }
    Ok(response)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DryRunBody {
    topic: Option<String>,
    partition: Option<i32>,
    /// Where to start; absent: the last `limit` records.
    offset: Option<i64>,
    limit: Option<usize>,
}

async fn dry_run(
    State(state): State<AdminState>,
    Path(name): Path<String>,
    body: Option<Json<DryRunBody>>,
) -> Result<Json<Value>, ApiError> {
    let config = state.supervisor.config();
    let Some(connector) = config.connectors.iter().find(|c| c.name == name) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("Connector {name} not found"),
        ));
    };
    let body = body.map(|Json(b)| b).unwrap_or(DryRunBody {
        topic: None,
        partition: None,
        offset: None,
        limit: None,
    });
    let limit = limit_of(body.limit)?;
    let topic = match (&body.topic, &connector.topics_regex) {
        (Some(topic), _) => topic.clone(),
        (None, Some(pattern)) => {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "connector {name} reads the topics matching {}: name one (\"topic\")",
                    pattern.as_str()
                ),
            ));
        }
        (None, None) => connector.topics.first().cloned().unwrap_or_default(),
    };
    super::topics::check(&config, &topic)?;
    let Ok(_running) = state.dry_runs.clone().try_acquire_owned() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_DRY_RUNS} dry runs are running; try again when one has finished"),
        ));
    };
    let start = match body.offset {
        Some(offset) => Start::Offset(offset),
        None => Start::FromEnd(limit as i64),
    };
    let (inputs, cut) = state
        .supervisor
        .pool()
        .read_bounded(
            &topic,
            body.partition.unwrap_or(0),
            start,
            limit,
            MAX_ANSWER_BYTES as u64,
            READ_WAIT,
        )
        .await
        .map_err(read_error)?;
    let read_next = if cut { after(&inputs) } else { None };
    let engine = state.supervisor.engine();
    // The running connector's database pool when it has one: a dry run opens no
    // connections of its own beside it.
    let sink = state
        .supervisor
        .connector(&name)
        .and_then(|c| c.view().sink);
    let answer = crate::deliver::dry_run::dry_run_on(connector, engine.as_ref(), inputs, sink)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    // What is left of the bound once the rest of the body is counted.
    let (records, left_out) = within(
        answer.records.iter().map(|r| (r.offset, r)),
        MAX_ANSWER_BYTES - 64 * 1024,
        |r| r.to_json(),
    );
    let next_offset = left_out.or(read_next);
    Ok(Json(json!({
        "connector": name,
        "records": records,
        "database_asked": answer.database_not_asked.is_none(),
        "database_not_asked": answer.database_not_asked,
        "truncated": next_offset.is_some(),
        "next_offset": next_offset,
    })))
}

#[cfg(test)]
mod tests {
    use super::within;
    use serde_json::json;

    #[test]
    fn an_answer_stops_before_its_budget_and_names_the_first_left_out() {
        let items: Vec<(i64, String)> = (0..5).map(|i| (i, "x".repeat(10))).collect();
        let all = || items.iter().map(|(o, v)| (*o, v));
        // Each item is 12 bytes of JSON and a comma; the brackets take 2.
        let (taken, next) = within(all(), 2 + 3 * 13, |v| json!(v));
        assert_eq!((taken.len(), next), (3, Some(3)));
        let (taken, next) = within(all(), 1 << 20, |v| json!(v));
        assert_eq!((taken.len(), next), (5, None));
        let (taken, next) = within(all(), 5, |v| json!(v));
        assert_eq!((taken.len(), next), (0, Some(0)));
    }
}
