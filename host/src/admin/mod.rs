//! The admin HTTP server, on the process's tokio runtime: Kafka Connect's REST API shapes
//! (so that operators' scripts and UIs carry over), Prometheus metrics, health and
//! readiness, and reload. Started when `connectors.yaml` has `admin: { listen: … }`.
//!
//! - [`connect_api`]: the endpoints under `/connectors`, in Kafka Connect's shapes;
//!   [`figures`]: what sluice adds to their status, and each connector's recent
//!   throughput (`/connectors/{name}/history`), with [`plugin_calls`] read from the metrics.
//! - [`status_page`]: `GET /`, the status page (HTML, script and styles inside the
//!   binary, without the token; its data comes from the API, with it).
//! - [`records`]: records and dry runs through the seek-consumer pool, of the topics
//!   [`topics`] allows.
//! - [`auth`]: tokens, the read token, the `Host` check and the header that keeps web
//!   pages out.
//! - [`serve`]: connections, with their time and number bounded; [`tls`]: HTTPS.
//! - [`client`]: the client `sluice status|pause|resume|restart|stop` use.
//! - [`metrics_listener`]: `/metrics`, `/healthz` and `/readyz` alone, without the token.
//!
//! Errors have Kafka Connect's body, `{"error_code": 404, "message": "…"}`.
//! `docs/operations.md` lists every endpoint.

pub mod auth;
pub mod client;
pub mod connect_api;
mod connect_offsets;
pub mod figures;
pub mod metrics_listener;
pub mod plugin_calls;
pub mod records;
pub mod serve;
pub mod status_page;
pub mod tls;
pub mod topics;
mod verify;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::config::AdminConfig;
use crate::supervisor::{ConnectorHandle, Reloaded, Supervisor};
use auth::Tokens;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("admin.listen {listen}: {source}")]
    Bind {
        listen: String,
        source: std::io::Error,
    },
    #[error(
        "admin.listen {listen} is reachable from other hosts and admin has no token: set admin.token, or listen on 127.0.0.1"
    )]
    Unprotected { listen: String },
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
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
    /// Replaced in place by a reload that changes only the tokens.
    tokens: Arc<std::sync::RwLock<Tokens>>,
    reload: Option<mpsc::Sender<ReloadRequest>>,
    /// The listener is on a loopback address: requests must name a loopback `Host`.
    loopback: bool,
    /// Dry runs that may start now.
    dry_runs: Arc<Semaphore>,
    /// Verifies that may start now.
    verifies: Arc<Semaphore>,
    /// Why the last reload could not move the listener (this one serves on), for that
    /// reload's answer.
    relisten: Arc<std::sync::Mutex<Option<Value>>>,
}

/// A running server: its address, and what stops it.
pub struct AdminServer {
    pub addr: SocketAddr,
    /// The `admin.listen` it was started with.
    pub listen: String,
    /// The section it was started with.
    config: AdminConfig,
    tokens: Arc<std::sync::RwLock<Tokens>>,
    relisten: Arc<std::sync::Mutex<Option<Value>>>,
    stop: Option<oneshot::Sender<()>>,
    join: tokio::task::JoinHandle<()>,
}

fn tokens_of(config: &AdminConfig) -> Tokens {
    Tokens {
        token: config.token.clone(),
        read_token: config.read_token.clone(),
    }
}

/// Binds `listen`. A server on the same port that is stopping (a reload that moves the
/// listener) frees it within moments: `patience` bounds the wait for it.
async fn bind(
    listen: &str,
    patience: std::time::Duration,
) -> Result<tokio::net::TcpListener, AdminError> {
    let started = std::time::Instant::now();
    loop {
        match tokio::net::TcpListener::bind(listen).await {
            Ok(listener) => return Ok(listener),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && started.elapsed() < patience => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(source) => {
                return Err(AdminError::Bind {
                    listen: listen.to_string(),
                    source,
                });
            }
        }
    }
}

impl AdminServer {
    /// Binds `config.listen` and serves the API for `supervisor` until [`stop`](Self::stop).
    pub async fn start(
        config: &AdminConfig,
        supervisor: Arc<Supervisor>,
        reload: Option<mpsc::Sender<ReloadRequest>>,
    ) -> Result<Self, AdminError> {
        let tls = config.tls.as_ref().map(tls::server_config).transpose()?;
        let listener = bind(&config.listen, std::time::Duration::from_secs(3)).await?;
        let relisten = Arc::new(std::sync::Mutex::new(None));
        Self::serve_on(listener, config, tls, supervisor, reload, relisten)
    }

    fn serve_on(
        listener: tokio::net::TcpListener,
        config: &AdminConfig,
        tls: Option<Arc<rustls::ServerConfig>>,
        supervisor: Arc<Supervisor>,
        reload: Option<mpsc::Sender<ReloadRequest>>,
        relisten: Arc<std::sync::Mutex<Option<Value>>>,
    ) -> Result<Self, AdminError> {
        let addr = listener.local_addr().map_err(|source| AdminError::Bind {
            listen: config.listen.clone(),
            source,
        })?;
        let tokens = tokens_of(config);
        // `validate` refuses this too; a server never starts open to the network.
        if !addr.ip().is_loopback() && tokens == Tokens::default() {
            return Err(AdminError::Unprotected {
                listen: config.listen.clone(),
            });
        }
        let tokens = Arc::new(std::sync::RwLock::new(tokens));
        let state = AdminState {
            supervisor,
            tokens: tokens.clone(),
            reload,
            loopback: addr.ip().is_loopback(),
            dry_runs: Arc::new(Semaphore::new(records::MAX_DRY_RUNS)),
            verifies: Arc::new(Semaphore::new(verify::MAX_VERIFIES)),
            relisten: relisten.clone(),
        };
        let app = router(state);
        let (stop, stopped) = oneshot::channel::<()>();
        let https = tls.is_some();
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let join = tokio::spawn(serve::serve(listener, app, acceptor, stopped));
        tracing::info!(%addr, https, "admin API listening");
        Ok(Self {
            addr,
            listen: config.listen.clone(),
            config: config.clone(),
            tokens,
            relisten,
            stop: Some(stop),
            join,
        })
    }

    /// Replaces the tokens (a reload that changed only them).
    fn set_tokens(&self, config: &AdminConfig) {
        if let Ok(mut current) = self.tokens.write() {
            *current = tokens_of(config);
        }
    }

    fn set_relisten(&self, problem: Option<Value>) {
        if let Ok(mut current) = self.relisten.lock() {
            *current = problem;
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
        let _ = tokio::time::timeout(std::time::Duration::from_secs(6), &mut self.join).await;
        self.join.abort();
    }
}

/// Applies a reload's `admin:` section: the running server (`old`) is kept when only its
/// tokens changed, replaced when its address or TLS did, stopped when the section is gone.
/// A new address that cannot be bound (taken, not this host's) leaves the old server
/// serving, and the reload's answer says why.
pub async fn apply(
    old: Option<AdminServer>,
    new: Option<AdminConfig>,
    supervisor: &Arc<Supervisor>,
    reload: &mpsc::Sender<ReloadRequest>,
) -> Option<AdminServer> {
    if let Some(server) = &old {
        server.set_relisten(None);
    }
    let Some(new) = new else {
        if let Some(old) = old {
            tokio::spawn(old.begin_stop());
        }
        return None;
    };
    match old {
        Some(mut server) if server.listen == new.listen && server.config.tls == new.tls => {
            server.set_tokens(&new);
            server.config = new;
            Some(server)
        }
        Some(server) => relisten(server, new, supervisor, reload).await,
        None => match AdminServer::start(&new, supervisor.clone(), Some(reload.clone())).await {
            Ok(server) => Some(server),
            Err(error) => {
                tracing::error!(%error, "the admin API could not start; it is off until the next reload");
                None
            }
        },
    }
}

/// Moves `old` to `new`: the new listener is bound before the old one closes, or (same
/// port) right after; on failure the old one serves on.
async fn relisten(
    old: AdminServer,
    new: AdminConfig,
    supervisor: &Arc<Supervisor>,
    reload: &mpsc::Sender<ReloadRequest>,
) -> Option<AdminServer> {
    let refused = |old: AdminServer, error: AdminError| {
        tracing::error!(%error, listening = %old.listen, "the admin API could not move to its new address; it serves on at the old one, with the new tokens");
        // A rotated or revoked token must not keep working because the address could
        // not move.
        old.set_tokens(&new);
        old.set_relisten(Some(json!({
            "listening": old.listen,
            "refused": new.listen,
            "error": error.to_string(),
        })));
        Some(old)
    };
    // Every server of the process shares it: the one that answers the reload reads it.
    let relisten = old.relisten.clone();
    let tls = match new.tls.as_ref().map(tls::server_config).transpose() {
        Ok(tls) => tls,
        Err(error) => return refused(old, error.into()),
    };
    let start = |listener| {
        AdminServer::serve_on(
            listener,
            &new,
            tls.clone(),
            supervisor.clone(),
            Some(reload.clone()),
            relisten.clone(),
        )
    };
    let same_port = new
        .listen
        .parse::<SocketAddr>()
        .is_ok_and(|a| a.port() == old.addr.port());
    match bind(&new.listen, std::time::Duration::ZERO).await {
        Ok(listener) => match start(listener) {
            Ok(server) => {
                // The old server stops in the background: it may be serving this very
                // reload (POST /reload), whose answer comes after this returns.
                tokio::spawn(old.begin_stop());
                Some(server)
            }
            Err(error) => refused(old, error),
        },
        Err(AdminError::Bind { source, .. })
            if same_port && source.kind() == std::io::ErrorKind::AddrInUse =>
        {
            // The old listener holds the port: it closes first (its requests in progress
            // finish), then the new one binds; if it still cannot, the old one comes back.
            let (old_config, old_addr) = (old.config.clone(), old.addr);
            let old_tls = match old_config.tls.as_ref().map(tls::server_config).transpose() {
                Ok(tls) => tls,
                Err(error) => return refused(old, error.into()),
            };
            tokio::spawn(old.begin_stop());
            match bind(&new.listen, std::time::Duration::from_secs(3))
                .await
                .and_then(start)
            {
                Ok(server) => Some(server),
                Err(error) => {
                    let back = AdminConfig {
                        listen: old_addr.to_string(),
                        ..old_config
                    };
                    let restarted =
                        match bind(&back.listen, std::time::Duration::from_secs(3)).await {
                            Ok(listener) => AdminServer::serve_on(
                                listener,
                                &back,
                                old_tls,
                                supervisor.clone(),
                                Some(reload.clone()),
                                relisten.clone(),
                            ),
                            Err(e) => Err(e),
                        };
                    match restarted {
                        Ok(server) => refused(server, error),
                        Err(again) => {
                            tracing::error!(%error, %again, "the admin API could not move to its new address nor come back to its old one; it is off until the next reload");
                            None
                        }
                    }
                }
            }
        }
        Err(error) => refused(old, error),
    }
}

/// Every route.
pub fn router(state: AdminState) -> Router {
    let guarded = Router::new()
        .route("/metrics", get(metrics))
        .route("/reload", post(reload))
        .merge(connect_api::routes())
        .merge(records::routes())
        .merge(verify::routes())
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authorize,
        ));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(status_page::routes())
        .merge(guarded)
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::check_host,
        ))
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

/// What a control call acts on: the connector `name`, with the gate that keeps a reload
/// out until the call is done. A reload already running is refused now, not forgotten
/// later (409, as Kafka Connect answers while it rebalances); an unknown name is 404.
fn controlled<'s>(
    state: &'s AdminState,
    name: &str,
) -> Result<(tokio::sync::RwLockReadGuard<'s, ()>, Arc<ConnectorHandle>), Box<Response>> {
    let Some(gate) = state.supervisor.control_gate() else {
        return Err(Box::new(error(
            StatusCode::CONFLICT,
            "a reload of the configuration is running: try again when it has finished",
        )));
    };
    let connector = find_connector(state, name).map_err(|e| Box::new(e.into_response()))?;
    Ok((gate, connector))
}

/// Kafka Connect's error body.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"error_code": status.as_u16(), "message": message.into()})),
    )
        .into_response()
}

/// The connector `name` of this process, or Kafka Connect's 404 naming it: how every
/// endpoint under `/connectors/{name}` finds its connector.
fn find_connector(state: &AdminState, name: &str) -> Result<Arc<ConnectorHandle>, ApiError> {
    state
        .supervisor
        .connector(name)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("Connector {name} not found")))
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "no such endpoint")
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
    let metrics = state.supervisor.metrics();
    metrics.set_ready(state.supervisor.ready().is_ok());
    (
        [(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        metrics.render(),
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
        Ok(Ok(reloaded)) => {
            let mut answer = json!({"reloaded": reloaded});
            // A new `admin.listen` that could not be bound: this server serves on.
            if let Some(problem) = state.relisten.lock().ok().and_then(|p| p.clone()) {
                answer["admin_listener"] = problem;
            }
            Json(answer).into_response()
        }
        Ok(Err(problems)) => (
            StatusCode::BAD_REQUEST,
            Json(json!({
                "error_code": 400,
                "message": "the new configuration is not valid, or a change it makes is refused; the old one runs on",
                "problems": problems,
            })),
        )
            .into_response(),
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the process is stopping"),
    }
}
