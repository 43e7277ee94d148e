//! The metrics listener (`admin.metrics_listen`): `GET /metrics`, `/healthz` and `/readyz`
//! on an address of their own, without the token, for Prometheus and a platform's probes.
//! Nothing it serves is secret or changes state; every other path is 404, so the token's
//! endpoints are never reachable through it. The handlers are the admin API's own.
//!
//! A reload that changes the address [`prepare`]s the move before the new configuration
//! applies: the new address is bound first, so that an address that cannot be bound
//! refuses the reload and the old listener serves on.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::AdminState;
use crate::supervisor::Supervisor;

/// Why the metrics listener could not start or move.
#[derive(Debug, thiserror::Error)]
pub enum MetricsListenError {
    #[error("admin.metrics_listen {listen}: {source}")]
    Bind {
        listen: String,
        source: std::io::Error,
    },
}

/// An address bound and not yet served.
pub struct MetricsBinding {
    listener: TcpListener,
    listen: String,
}

/// A running metrics listener: its address, and what stops it.
pub struct MetricsServer {
    pub addr: SocketAddr,
    /// The `admin.metrics_listen` it was started with.
    pub listen: String,
    stop: Option<oneshot::Sender<()>>,
    join: tokio::task::JoinHandle<()>,
}

/// Binds `listen`.
pub async fn bind(listen: &str) -> Result<MetricsBinding, MetricsListenError> {
    let bind_error = |source| MetricsListenError::Bind {
        listen: listen.to_string(),
        source,
    };
    let listener = TcpListener::bind(listen).await.map_err(bind_error)?;
    Ok(MetricsBinding {
        listener,
        listen: listen.to_string(),
    })
}

impl MetricsBinding {
    /// Serves the metrics, health and readiness of `supervisor` until
    /// [`MetricsServer::stop`].
    pub fn serve(self, supervisor: Arc<Supervisor>) -> Result<MetricsServer, MetricsListenError> {
        let addr = self
            .listener
            .local_addr()
            .map_err(|source| MetricsListenError::Bind {
                listen: self.listen.clone(),
                source,
            })?;
        let app = router(supervisor);
        let (stop, stopped) = oneshot::channel::<()>();
        let listener = self.listener;
        // The admin API's serving: header and idle timeouts, at most 256 connections.
        let join = tokio::spawn(super::serve::serve(listener, app, None, stopped));
        tracing::info!(%addr, "metrics, /healthz and /readyz listening (no token)");
        Ok(MetricsServer {
            addr,
            listen: self.listen,
            stop: Some(stop),
            join,
        })
    }
}

impl MetricsServer {
    /// Binds `listen` and serves.
    pub async fn start(
        listen: &str,
        supervisor: Arc<Supervisor>,
    ) -> Result<Self, MetricsListenError> {
        bind(listen).await?.serve(supervisor)
    }

    /// Stops accepting and finishes the scrapes in progress; the address is free after.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let finished = tokio::time::timeout(std::time::Duration::from_secs(5), &mut self.join);
        if finished.await.is_err() {
            // A scrape that hangs: the task ends (and frees the address) once aborted.
            self.join.abort();
            let _ = (&mut self.join).await;
        }
    }
}

/// The three routes; every other path is the admin API's 404.
fn router(supervisor: Arc<Supervisor>) -> Router {
    // No tokens, no reload, no dry runs or verifies: nothing here is behind the admin API's checks.
    let state = AdminState {
        supervisor,
        tokens: Arc::new(std::sync::RwLock::new(super::auth::Tokens::default())),
        reload: None,
        loopback: false,
        dry_runs: Arc::new(tokio::sync::Semaphore::new(0)),
        verifies: Arc::new(tokio::sync::Semaphore::new(0)),
        relisten: Arc::new(std::sync::Mutex::new(None)),
    };
    Router::new()
        .route("/metrics", get(super::metrics))
        .route("/healthz", get(super::healthz))
        .route("/readyz", get(super::readyz))
        .fallback(super::not_found)
        .with_state(state)
}

/// What a reload does with the metrics listener once the new configuration applies.
#[must_use = "apply or abandon the move"]
pub enum MetricsMove {
    /// The address is unchanged (or there is none, before and after).
    Keep,
    /// `admin.metrics_listen` is gone: the listener stops.
    Stop,
    /// The new address, bound. `previous` is the old address when the old listener had to
    /// stop first to free the port (the same port on another interface).
    Start {
        binding: MetricsBinding,
        previous: Option<String>,
    },
}

/// Prepares the move to `wanted` from the listener `current` runs: binds the new address.
/// An address that cannot be bound is an error, and `current` serves on as before.
pub async fn prepare(
    current: &mut Option<MetricsServer>,
    wanted: Option<&str>,
    supervisor: &Arc<Supervisor>,
) -> Result<MetricsMove, MetricsListenError> {
    let running = current.as_ref().map(|server| server.listen.as_str());
    let Some(wanted) = wanted else {
        return Ok(match running {
            Some(_) => MetricsMove::Stop,
            None => MetricsMove::Keep,
        });
    };
    if running == Some(wanted) {
        return Ok(MetricsMove::Keep);
    }
    match bind(wanted).await {
        Ok(binding) => Ok(MetricsMove::Start {
            binding,
            previous: None,
        }),
        Err(MetricsListenError::Bind { source, .. })
            if source.kind() == std::io::ErrorKind::AddrInUse
                && current
                    .as_ref()
                    .is_some_and(|old| same_port(old.addr, wanted)) =>
        {
            // The old listener holds the port (127.0.0.1:9090 to 0.0.0.0:9090): free it,
            // and take it back if the new address still cannot be bound.
            let Some(old) = current.take() else {
                return Err(in_use(wanted, source));
            };
            let previous = old.listen.clone();
            old.stop().await;
            match bind(wanted).await {
                Ok(binding) => Ok(MetricsMove::Start {
                    binding,
                    previous: Some(previous),
                }),
                Err(error) => {
                    restore(current, &previous, supervisor).await;
                    Err(error)
                }
            }
        }
        Err(error) => Err(error),
    }
}

impl MetricsMove {
    /// The new configuration applied: the old listener stops, the new one serves.
    pub async fn apply(self, current: &mut Option<MetricsServer>, supervisor: &Arc<Supervisor>) {
        match self {
            MetricsMove::Keep => {}
            MetricsMove::Stop => {
                if let Some(old) = current.take() {
                    old.stop().await;
                }
            }
            MetricsMove::Start { binding, .. } => {
                if let Some(old) = current.take() {
                    old.stop().await;
                }
                match binding.serve(supervisor.clone()) {
                    Ok(server) => *current = Some(server),
                    Err(error) => {
                        tracing::error!(%error, "the metrics listener could not start at its new address; it is off until the next reload");
                    }
                }
            }
        }
    }

    /// The new configuration did not apply: the old listener serves on (started again
    /// where it had to stop to free its port).
    pub async fn abandon(self, current: &mut Option<MetricsServer>, supervisor: &Arc<Supervisor>) {
        if let MetricsMove::Start {
            binding,
            previous: Some(previous),
        } = self
        {
            drop(binding);
            restore(current, &previous, supervisor).await;
        }
    }
}

/// Starts the listener again at the address it had.
async fn restore(current: &mut Option<MetricsServer>, listen: &str, supervisor: &Arc<Supervisor>) {
    match MetricsServer::start(listen, supervisor.clone()).await {
        Ok(server) => *current = Some(server),
        Err(error) => {
            tracing::error!(%error, "the metrics listener could not take its old address back; it is off until the next reload");
        }
    }
}

fn same_port(addr: SocketAddr, wanted: &str) -> bool {
    wanted
        .parse::<SocketAddr>()
        .is_ok_and(|wanted| wanted.port() == addr.port())
}

fn in_use(listen: &str, source: std::io::Error) -> MetricsListenError {
    MetricsListenError::Bind {
        listen: listen.to_string(),
        source,
    }
}
