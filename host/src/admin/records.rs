//! Records read through the seek-consumer pool: `GET /topics/{topic}/partitions/{p}/records`
//! (the records, in `sluice inspect`'s JSON shape) and `POST /connectors/{name}/dry-run`
//! (what the connector would write for them, nothing written).

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
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

async fn records(
    State(state): State<AdminState>,
    Path((topic, partition)): Path<(String, i32)>,
    Query(query): Query<RecordsQuery>,
) -> Result<Json<Value>, ApiError> {
    let limit = limit_of(query.limit)?;
    let start = match query.offset {
        Some(offset) => Start::Offset(offset),
        None => Start::FromEnd(limit as i64),
    };
    let pool = state.supervisor.pool();
    let read = pool
        .read(&topic, partition, start, limit, READ_WAIT)
        .await
        .map_err(read_error)?;
    let out: Vec<Value> = read
        .iter()
        .map(|i| sluice_transform::record_to_json(&i.record))
        .collect();
    Ok(Json(Value::Array(out)))
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
    let topic = body
        .topic
        .clone()
        .or_else(|| connector.topics.first().cloned())
        .unwrap_or_default();
    let start = match body.offset {
        Some(offset) => Start::Offset(offset),
        None => Start::FromEnd(limit as i64),
    };
    let inputs = state
        .supervisor
        .pool()
        .read(&topic, body.partition.unwrap_or(0), start, limit, READ_WAIT)
        .await
        .map_err(read_error)?;
    let engine = state.supervisor.engine();
    let answer = crate::deliver::dry_run::dry_run(connector, engine.as_ref(), inputs)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    Ok(Json(json!({
        "connector": name,
        "records": answer.records.iter().map(|r| r.to_json()).collect::<Vec<_>>(),
        "database_asked": answer.database_not_asked.is_none(),
        "database_not_asked": answer.database_not_asked,
    })))
}
