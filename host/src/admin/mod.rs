//! The admin HTTP server, on the process's tokio runtime: Kafka Connect's REST API shapes
//! (so that operators' scripts and UIs carry over), Prometheus metrics, health and
//! readiness, and reload. Started when `connectors.yaml` has `admin: { listen: … }`.
//!
//! - [`connect_api`]: the endpoints under `/connectors`, in Kafka Connect's shapes.
//! - [`client`]: the client `sluice status|pause|resume|restart|stop` use.
//! - [`metrics_listener`]: `/metrics`, `/healthz` and `/readyz` alone, without the token.
//!
//! With `admin.token`, every endpoint but `/healthz` and `/readyz` asks for
//! `Authorization: Bearer <token>`. Errors have Kafka Connect's body,
//! `{"error_code": 404, "message": "…"}`. `docs/operations.md` lists every endpoint.

pub mod client;
pub mod connect_api;
pub mod metrics_listener;
pub mod records;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use crate::config::Secret;
use crate::supervisor::{Reloaded, Supervisor};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("admin.listen {listen}: {source}")]
    Bind {
        listen: String,
        source: std::io::Error,
    },
}

/// A reload asked through `POST /reload`, answered by whoever owns the configuration
/// file: what changed, or every problem of the new file (the old configuration runs on).
pub struct ReloadRequest {
    pub reply: oneshot::Sender<Result<Reloaded, Vec<String>>>,
}

/// What every handler shares.
#[derive(Clone)]
pub struct AdminState {
    pub supervisor: Arc<Supervisor>,
    /// Replaced in place by a reload that changes only the token.
    token: Arc<std::sync::RwLock<Option<Secret>>>,
    reload: Option<mpsc::Sender<ReloadRequest>>,
}

/// A running server: its address, and what stops it.
pub struct AdminServer {
    pub addr: SocketAddr,
    /// The `admin.listen` it was started with.
    pub listen: String,
    token: Arc<std::sync::RwLock<Option<Secret>>>,
    stop: Option<oneshot::Sender<()>>,
    join: tokio::task::JoinHandle<()>,
}

impl AdminServer {
    /// Binds `listen` and serves the API for `supervisor` until [`stop`](Self::stop).
    pub async fn start(
        listen: &str,
        token: Option<Secret>,
        supervisor: Arc<Supervisor>,
        reload: Option<mpsc::Sender<ReloadRequest>>,
    ) -> Result<Self, AdminError> {
        let bind_error = |source| AdminError::Bind {
            listen: listen.to_string(),
            source,
        };
        // A server on the same port that is stopping (a reload that moves the listener)
        // frees it within moments.
        let mut attempts = 0;
        let listener = loop {
            match tokio::net::TcpListener::bind(listen).await {
                Ok(listener) => break listener,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && attempts < 30 => {
                    attempts += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => return Err(bind_error(e)),
            }
        };
        let addr = listener.local_addr().map_err(bind_error)?;
        if token.is_none() && !addr.ip().is_loopback() {
            tracing::warn!(%addr, "the admin API listens beyond this host without admin.token: anyone who reaches it can stop connectors and change their offsets");
        }
        let token = Arc::new(std::sync::RwLock::new(token));
        let state = AdminState {
            supervisor,
            token: token.clone(),
            reload,
        };
        let app = router(state);
        let (stop, stopped) = oneshot::channel::<()>();
        let join = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(error) = served {
                tracing::error!(%error, "the admin server stopped");
            }
        });
        tracing::info!(%addr, "admin API listening");
        Ok(Self {
            addr,
            listen: listen.to_string(),
            token,
            stop: Some(stop),
            join,
        })
    }

    /// Replaces the token (a reload that changed only `admin.token`).
    pub fn set_token(&self, token: Option<Secret>) {
        if let Ok(mut current) = self.token.write() {
            *current = token;
        }
    }

    /// Stops accepting (the listener's address is free once the server task sees it),
    /// and returns a future that finishes the requests in progress.
    pub fn begin_stop(mut self) -> impl std::future::Future<Output = ()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.stop()
    }

    /// Stops accepting, finishes the requests in progress.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), &mut self.join).await;
        self.join.abort();
    }
}

/// Every route.
pub fn router(state: AdminState) -> Router {
    let guarded = Router::new()
        .route("/metrics", get(metrics))
        .route("/reload", post(reload))
        .merge(connect_api::routes())
        .merge(records::routes())
        .route_layer(middleware::from_fn_with_state(state.clone(), authorize));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(guarded)
        .fallback(not_found)
        .with_state(state)
}

/// An error answer: its status and message, in Kafka Connect's body.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error(self.status, self.message)
    }
}

/// Kafka Connect's error body.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"error_code": status.as_u16(), "message": message.into()})),
    )
        .into_response()
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "no such endpoint")
}

async fn authorize(
    State(state): State<AdminState>,
    headers: HeaderMap,
    request: Request,
    next: Next,
) -> Response {
    let token = state.token.read().ok().and_then(|t| t.clone());
    if let Some(token) = &token {
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|given| constant_time_eq(given.as_bytes(), token.expose().as_bytes()))
        {
            let mut response = error(
                StatusCode::UNAUTHORIZED,
                "this endpoint needs the header Authorization: Bearer <admin.token>",
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            return response;
        }
    }
    next.run(request).await
}

/// Compares without stopping at the first difference (the time taken does not tell how
/// much of a guessed token was right).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i % b.len().max(1)).copied().unwrap_or(0));
    }
    diff == 0
}

/// 200 while the runtime answers.
async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

/// 200 once every connector made its first attempt to start; one connector's outage or
/// failure does not make it 503 (status and metrics show that).
async fn readyz(State(state): State<AdminState>) -> Response {
    match state.supervisor.ready() {
        Ok(()) => Json(json!({"status": "ready"})).into_response(),
        Err(reasons) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "starting", "reasons": reasons})),
        )
            .into_response(),
    }
}

async fn metrics(State(state): State<AdminState>) -> Response {
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        state.supervisor.metrics().render(),
    )
        .into_response()
}

/// Re-reads `connectors.yaml`, as SIGHUP does.
async fn reload(State(state): State<AdminState>) -> Response {
    let Some(reload) = &state.reload else {
        return error(
            StatusCode::NOT_IMPLEMENTED,
            "this process was not started from a configuration file",
        );
    };
    let (reply, answer) = oneshot::channel();
    if reload.send(ReloadRequest { reply }).await.is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the process is stopping");
    }
    match answer.await {
        Ok(Ok(reloaded)) => Json(json!({"reloaded": reloaded})).into_response(),
        Ok(Err(problems)) => (
            StatusCode::BAD_REQUEST,
            Json(json!({
                "error_code": 400,
                "message": "the new configuration is not valid; the old one runs on",
                "problems": problems,
            })),
        )
            .into_response(),
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the process is stopping"),
    }
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn tokens_compare_exactly() {
        assert!(constant_time_eq(b"s3cret", b"s3cret"));
        assert!(!constant_time_eq(b"s3cret", b"s3cre"));
        assert!(!constant_time_eq(b"s3cre", b"s3cret"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(!constant_time_eq(b"x", b""));
        assert!(constant_time_eq(b"", b""));
    }
}
