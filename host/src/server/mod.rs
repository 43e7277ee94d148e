//! The `sluice run` process: its lifecycle apart from the command line, as a service keeps
//! its server apart from its binary. [`run`] loads the file, starts the embedded cluster
//! when asked, the supervisor and the admin listener, then serves until SIGINT / SIGTERM
//! (a bounded stop, [`stop`]), re-reading the file on SIGHUP or `POST /reload`
//! ([`reload`]).

pub mod referenced_files;
mod reload;
pub mod signals;
mod stop;

use std::io::Write;
use std::path::Path;

use crate::admin::metrics_listener::{MetricsListenError, MetricsServer};
use crate::admin::{AdminServer, ReloadRequest};
use crate::config::{Config, ConfigError};
use crate::kafka::embedded::EmbeddedKafka;
use crate::supervisor::Supervisor;
pub use referenced_files::load_checked;
use signals::{hangup_signal, shutdown_signal};
use stop::{Stopped, bounded_stop};

/// Exit code: invalid configuration or usage.
pub const EXIT_INVALID: u8 = 2;
/// Exit code: runtime failure.
pub const EXIT_FAILURE: u8 = 1;

/// Longest a stop (SIGINT / SIGTERM) may take before `sluice run` exits without the tasks
/// still closing. With the runtime's own 5 s to wind down, the process is gone within
/// 25 s: under the 30 s a container platform usually grants before SIGKILL.
const SHUTDOWN_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Loads a file as `run` does (its text checked, then the files it names read:
/// [`load_checked`]), printing its problems one per line on stderr.
pub fn load(path: &Path) -> Result<Config, u8> {
    load_checked(path).map_err(|error| {
        print_config_error(path, &error);
        EXIT_INVALID
    })
}

pub fn print_config_error(path: &Path, error: &ConfigError) {
    write_config_error(&mut std::io::stderr(), path, error);
}

pub fn write_config_error(err: &mut dyn Write, path: &Path, error: &ConfigError) {
    for line in error.lines(&path.display().to_string()) {
        let _ = writeln!(err, "{line}");
    }
}

/// Starts the embedded cluster when the file asks for it; returns the bootstrap servers.
pub fn resolve_brokers(
    config: &Config,
    topic_partitions: i32,
) -> Result<(String, Option<EmbeddedKafka>), u8> {
    if !config.kafka.is_embedded() {
        return Ok((config.kafka.brokers.clone(), None));
    }
    let cluster = EmbeddedKafka::start(1).map_err(|e| {
        eprintln!("cannot start the embedded Kafka: {e}");
        EXIT_FAILURE
    })?;
    for topic in config.connectors.iter().flat_map(|c| &c.topics) {
        if let Err(e) = cluster.create_topic(topic, topic_partitions) {
            eprintln!("cannot create topic {topic} in the embedded Kafka: {e}");
            return Err(EXIT_FAILURE);
        }
    }
    tracing::info!(brokers = %cluster.bootstrap_servers(), "embedded Kafka started (in-process mock cluster; it forgets everything on exit)");
    Ok((cluster.bootstrap_servers(), Some(cluster)))
}

/// `sluice run`: serves every connector of the file at `path` until a stop signal, or until
/// every connector has failed for good. Returns the exit code.
pub async fn run(path: &Path) -> u8 {
    let config = match load(path) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let (brokers, _embedded) = match resolve_brokers(&config, 4) {
        Ok(resolved) => resolved,
        Err(code) => return code,
    };
    let metrics = std::sync::Arc::new(crate::metrics::Metrics::new());
    let worker = crate::supervisor::worker_id(&config);
    let supervisor = match Supervisor::start_with(&config, &brokers, metrics, worker).await {
        Ok(supervisor) => std::sync::Arc::new(supervisor),
        Err(error) => {
            eprintln!("{error}");
            return EXIT_FAILURE;
        }
    };
    let (reload_tx, mut reload_rx) = tokio::sync::mpsc::channel::<ReloadRequest>(4);
    let mut admin = match start_admin(&config, &supervisor, &reload_tx).await {
        Ok(admin) => admin,
        Err(error) => {
            eprintln!("{error}");
            let _ = supervisor.shutdown().await;
            return EXIT_FAILURE;
        }
    };
    let mut metrics_listener = match start_metrics_listener(&config, &supervisor).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("{error}");
            if let Some(admin) = admin {
                admin.stop().await;
            }
            let _ = supervisor.shutdown().await;
            return EXIT_FAILURE;
        }
    };
    let mut hangups = hangup_signal();
    let stop = shutdown_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            () = supervisor.all_failed() => {
                tracing::error!("every connector failed permanently; exiting");
                break;
            }
            Some(()) = hangups.recv() => {
                tracing::info!("SIGHUP: reloading the configuration");
                // A stop signal cuts a reload short: the stop below is bounded, a reload
                // (old connectors finishing their batches) is not.
                tokio::select! {
                    // Its outcome is logged either way.
                    _ = reload::reload(path, &brokers, &supervisor, &mut admin, &mut metrics_listener, &reload_tx) => {}
                    () = &mut stop => {
                        tracing::warn!("stop signal during a reload: the reload is abandoned");
                        break;
                    }
                }
            }
            Some(request) = reload_rx.recv() => {
                tokio::select! {
                    result = reload::reload(path, &brokers, &supervisor, &mut admin, &mut metrics_listener, &reload_tx) => {
                        let _ = request.reply.send(result);
                    }
                    () = &mut stop => {
                        tracing::warn!("stop signal during a reload: the reload is abandoned");
                        let _ = request.reply.send(Err(vec![
                            "the process is stopping: the reload was abandoned".into(),
                        ]));
                        break;
                    }
                }
            }
        }
    }
    tracing::info!("stopping: finishing the batches in flight and leaving the group");
    // A stop that hangs (a broker or database that never answers a close) must not keep
    // the process: past the limit, or at a second signal, exit without the rest. Nothing is
    // lost: with exactly-once the batches not committed are read again from the stored
    // offsets; with at-least-once they are delivered again.
    let stopped = bounded_stop(supervisor.shutdown(), shutdown_signal(), SHUTDOWN_LIMIT).await;
    if let Some(admin) = admin {
        admin.stop().await;
    }
    if let Some(listener) = metrics_listener {
        listener.stop().await;
    }
    let failures = match stopped {
        Stopped::Finished(failures) => failures,
        Stopped::SecondSignal => {
            tracing::error!("second signal: exiting without finishing the stop");
            return EXIT_FAILURE;
        }
        Stopped::OutOfTime => {
            tracing::error!(limit = ?SHUTDOWN_LIMIT, "the stop did not finish in time: exiting without the tasks still closing; their uncommitted batches are read again");
            return EXIT_FAILURE;
        }
    };
    for failure in &failures {
        eprintln!("{failure}");
    }
    if failures.is_empty() { 0 } else { EXIT_FAILURE }
}

/// Starts the admin server when the file asks for one.
async fn start_admin(
    config: &Config,
    supervisor: &std::sync::Arc<Supervisor>,
    reload: &tokio::sync::mpsc::Sender<ReloadRequest>,
) -> Result<Option<AdminServer>, crate::admin::AdminError> {
    match &config.admin {
        Some(admin) => AdminServer::start(admin, supervisor.clone(), Some(reload.clone()))
            .await
            .map(Some),
        None => Ok(None),
    }
}

/// Starts the metrics listener when the file has `admin.metrics_listen`.
async fn start_metrics_listener(
    config: &Config,
    supervisor: &std::sync::Arc<Supervisor>,
) -> Result<Option<MetricsServer>, MetricsListenError> {
    match config
        .admin
        .as_ref()
        .and_then(|a| a.metrics_listen.as_deref())
    {
        Some(listen) => MetricsServer::start(listen, supervisor.clone())
            .await
            .map(Some),
        None => Ok(None),
    }
}
