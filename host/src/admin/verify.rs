//! `POST /connectors/{name}/verify`: the connector's table checked against its topics
//! (`crate::verify`), the answer as `sluice verify --format json` prints it. It reads the
//! connector's topics through the process's seek-consumer pool and runs its plugins, so at
//! most [`MAX_VERIFIES`] run at once (503 beyond). The answer comes when the fold and the
//! comparison are done: a long log takes as long as it takes to read.

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::Value;

use super::{AdminState, ApiError};

/// Most verifies at once.
pub const MAX_VERIFIES: usize = 1;

pub fn routes() -> Router<AdminState> {
    Router::new().route("/connectors/{name}/verify", post(verify))
}

async fn verify(
    State(state): State<AdminState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let config = state.supervisor.config();
    let Some(connector) = config.connectors.iter().find(|c| c.name == name).cloned() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("Connector {name} not found"),
        ));
    };
    let Ok(running) = state.verifies.clone().try_acquire_owned() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "a verify is running; try again when it has finished",
        ));
    };
    let pool = state.supervisor.pool();
    let engine = state.supervisor.engine();
    // The fold runs the connector's plugins, which are not for the async workers: on a
    // blocking thread of its own, driven to the end there. The permit goes with it: a
    // client that hangs up does not free the place of a verify that still runs.
    let runtime = tokio::runtime::Handle::current();
    let verified = tokio::task::spawn_blocking(move || {
        let _running = running;
        runtime.block_on(crate::verify::verify(
            &connector,
            &pool,
            engine.as_ref(),
            &|_, _| {},
        ))
    })
    .await
    .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    match verified {
        Ok(report) => Ok(Json(report.to_json())),
        Err(e) if e.is_usage() => Err(ApiError::new(StatusCode::BAD_REQUEST, e.to_string())),
        Err(e) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            e.to_string(),
        )),
    }
}
