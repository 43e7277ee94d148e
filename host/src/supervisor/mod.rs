//! The supervisor: one per process. It runs each connector under a [`connector`] runner of
//! its own (so one connector's outage or failure leaves the others running), keeps the
//! process's metrics, answers what the admin API asks, and applies a reload: connectors
//! whose settings changed restart, the others run on untouched.

mod changes;
pub mod connector;
mod context;
pub mod coverage;
mod handle;
mod handover;
pub mod history;
mod messages;
mod sync;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};

pub use context::Context;
pub use handle::ConnectorHandle;
pub use messages::{Command, ConnectorState, ConnectorView, LastError, TaskView, kc_task_state};

use crate::config::{Config, ConnectorConfig};
use crate::metrics::Metrics;
use crate::pool::ConsumerPool;
use crate::sink::DatabasePools;

/// Why the supervisor could not start.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("cannot start the plugin engine: {0}")]
    Engine(#[from] sluice_transform::TransformError),
    /// A reload that would rewrite or skip history (see [`changes`]): one line per change.
    #[error("{}", .0.join("; "))]
    Refused(Vec<String>),
}

/// What a reload did, connector by connector.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reloaded {
    /// Connectors that are new.
    pub started: Vec<String>,
    /// Connectors whose settings (or plugin files) changed: restarted.
    pub restarted: Vec<String>,
    /// Connectors no longer in the file: stopped.
    pub stopped: Vec<String>,
    /// Connectors left running as they were.
    pub unchanged: Vec<String>,
}

/// The connectors of this process.
pub struct Supervisor {
    context: RwLock<Arc<Context>>,
    metrics: Arc<Metrics>,
    connectors: RwLock<Vec<Arc<ConnectorHandle>>>,
    /// Connectors a reload has started but not yet put in `connectors`: a stop that cuts
    /// a reload short stops them too.
    starting: std::sync::Mutex<Vec<Arc<ConnectorHandle>>>,
    config: RwLock<Arc<Config>>,
    /// One reload at a time; control calls hold it shared (see [`Supervisor::control_gate`]).
    reloading: tokio::sync::RwLock<()>,
    /// Set once every connector of the first configuration made its first attempt.
    ready: std::sync::atomic::AtomicBool,
}

/// This process's name in status and heartbeats: `SLUICE_WORKER_ID` (the pod name in
/// Kubernetes), else the host name and the admin listener's port, else the host name and
/// the process id. Unique per process: heartbeats are keyed by it.
pub fn worker_id(config: &Config) -> String {
    if let Ok(id) = std::env::var("SLUICE_WORKER_ID")
        && !id.trim().is_empty()
    {
        return id.trim().to_string();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into());
    match config
        .admin
        .as_ref()
        .and_then(|admin| admin.listen.rsplit_once(':'))
    {
        Some((_, port)) if port != "0" => format!("{host}:{port}"),
        _ => format!("{host}:{}", std::process::id()),
    }
}

/// What a reload compares for one connector: its section as the file has it (secrets
/// included, `${VAR}`s resolved), the content of its plugin and schema files, and the
/// `kafka:` section every connector shares.
fn fingerprint(config: &Config, connector: &ConnectorConfig) -> String {
    let mut plugins = DefaultHasher::new();
    let files = connector
        .transforms
        .iter()
        .map(|t| &t.plugin)
        .chain(connector.schema.as_ref());
    for file in files {
        match std::fs::read(file) {
            Ok(bytes) => bytes.hash(&mut plugins),
            Err(error) => error.kind().to_string().hash(&mut plugins),
        }
    }
    format!(
        "{}\u{0}{}\u{0}{:016x}",
        config
            .document
            .0
            .get("kafka")
            .map(|k| k.to_string())
            .unwrap_or_default(),
        config
            .connector_section(&connector.name)
            .map(|s| s.to_string())
            .unwrap_or_default(),
        plugins.finish()
    )
}

impl Supervisor {
    /// Starts every connector, each on its own (a connector whose database is down waits
    /// for it without holding up the others). `brokers` is the resolved bootstrap list (the
    /// embedded cluster's when the file says `embedded`).
    pub async fn start(config: &Config, brokers: &str) -> Result<Self, SupervisorError> {
        Self::start_with(config, brokers, Arc::new(Metrics::new()), worker_id(config)).await
    }

    /// [`start`](Self::start) with the process's metrics and worker id.
    pub async fn start_with(
        config: &Config,
        brokers: &str,
        metrics: Arc<Metrics>,
        worker_id: String,
    ) -> Result<Self, SupervisorError> {
        let context = Arc::new(Context {
            kafka: config.kafka.clone(),
            brokers: brokers.to_string(),
            engine: new_engine(config, None)?,
            pool: ConsumerPool::new(&config.kafka, brokers, &config.pool, &metrics),
            databases: DatabasePools::new(&config.databases),
            worker_id,
        });
        let connectors = config
            .connectors
            .iter()
            .map(|connector| {
                ConnectorHandle::start(
                    context.clone(),
                    Arc::new(connector.clone()),
                    metrics.connector(&connector.name),
                    fingerprint(config, connector),
                )
            })
            .collect();
        Ok(Self {
            context: RwLock::new(context),
            metrics,
            connectors: RwLock::new(connectors),
            starting: std::sync::Mutex::new(Vec::new()),
            config: RwLock::new(Arc::new(config.clone())),
            reloading: tokio::sync::RwLock::new(()),
            ready: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The connectors, in the file's order.
    pub fn connectors(&self) -> Vec<Arc<ConnectorHandle>> {
        self.connectors
            .read()
            .map(|c| c.clone())
            .unwrap_or_default()
    }

    /// The connector named `name`.
    pub fn connector(&self, name: &str) -> Option<Arc<ConnectorHandle>> {
        self.connectors().into_iter().find(|c| c.name == name)
    }

    /// The configuration running now.
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .map(|c| c.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }

    /// The process's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The resolved bootstrap servers.
    pub fn brokers(&self) -> String {
        self.context
            .read()
            .map(|c| c.brokers.clone())
            .unwrap_or_default()
    }

    /// The seek-consumer pool.
    pub fn pool(&self) -> Arc<ConsumerPool> {
        self.context
            .read()
            .map(|c| c.pool.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().pool.clone())
    }

    /// The process's plugin engine, when a connector has transforms.
    pub fn engine(&self) -> Option<sluice_transform::TransformEngine> {
        self.context
            .read()
            .map(|c| c.engine.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().engine.clone())
    }

    /// This process in status and heartbeats.
    pub fn worker_id(&self) -> String {
        self.context
            .read()
            .map(|c| c.worker_id.clone())
            .unwrap_or_default()
    }

    /// `Ok` once every connector has made its first attempt to start (running, or waiting
    /// for its database, or failed: one connector's outage does not hold readiness back);
    /// otherwise the connectors still starting. Once ready, always ready (a reload's new
    /// connectors do not take it back).
    pub fn ready(&self) -> Result<(), Vec<String>> {
        use std::sync::atomic::Ordering;
        if self.ready.load(Ordering::Relaxed) {
            return Ok(());
        }
        let starting: Vec<String> = self
            .connectors()
            .iter()
            .filter(|c| !c.view().started)
            .map(|c| format!("connector {} is starting", c.name))
            .collect();
        if starting.is_empty() {
            self.ready.store(true, Ordering::Relaxed);
            Ok(())
        } else {
            Err(starting)
        }
    }

    /// Resolves when every connector has failed permanently (nothing could still run
    /// without an operator); never while one connector could still run.
    pub async fn all_failed(&self) {
        loop {
            let connectors = self.connectors();
            if !connectors.is_empty() && connectors.iter().all(|c| c.view().failed_permanently()) {
                return;
            }
            // Any connector's change may be the last one.
            let changes: Vec<_> = connectors.iter().map(|c| Box::pin(c.changed())).collect();
            if changes.is_empty() {
                std::future::pending::<()>().await;
            }
            tokio::select! {
                _ = futures_util::future::select_all(changes) => {}
                () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
            }
        }
    }

    /// Waits until every connector has failed permanently or `stop` resolves.
    pub async fn wait(&self, stop: impl std::future::Future<Output = ()>) {
        tokio::select! {
            _ = stop => {}
            _ = self.all_failed() => {}
        }
    }

    /// A control call's pass (pause, resume, stop, restart, an offsets change): held while
    /// the call reaches its connector, so that a reload cannot replace the connector under
    /// it. `None` while a reload runs: the caller answers 409 and the operator tries again.
    pub fn control_gate(&self) -> Option<tokio::sync::RwLockReadGuard<'_, ()>> {
        self.reloading.try_read().ok()
    }

    /// Stops every connector's tasks, waits for them, closes the sinks. Returns the
    /// failures of the tasks that were failed (or restarting after a failure), as
    /// `connector X task N: error` lines.
    pub async fn shutdown(&self) -> Vec<String> {
        self.pool().close();
        let mut connectors = self.connectors();
        if let Ok(mut starting) = self.starting.lock() {
            connectors.append(&mut starting);
        }
        let stops = connectors.iter().map(|c| c.shutdown());
        futures_util::future::join_all(stops)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// Applies a new configuration: connectors whose settings changed (their section, the
    /// content of their plugin files, or the `kafka:` section) restart, new ones start,
    /// removed ones stop, the others run on untouched (their tasks, consumers and batches).
    pub async fn reload(&self, config: Config, brokers: &str) -> Result<Reloaded, SupervisorError> {
        let _one = self.reloading.write().await;
        let refused = changes::refused(&self.config(), &config);
        if !refused.is_empty() {
            for problem in &refused {
                tracing::error!(%problem, "the reload is refused; the old configuration runs on");
            }
            return Err(SupervisorError::Refused(refused));
        }
        let old_context = self
            .context
            .read()
            .map(|c| c.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone());
        // The pool follows the cluster and its settings; the old one closes once the new
        // context is in place (reads in progress finish on it).
        // The Schema Registry is no concern of the pool's (each connector holds a copy of
        // it, so a change restarts the connectors that read it, not the pool).
        let cluster = |kafka: &crate::config::KafkaConfig| crate::config::KafkaConfig {
            schema_registry: None,
            ..kafka.clone()
        };
        let keep_pool = cluster(&old_context.kafka) == cluster(&config.kafka)
            && old_context.brokers == brokers
            && self.config().pool == config.pool;
        let pool = if keep_pool {
            old_context.pool.clone()
        } else {
            ConsumerPool::new(&config.kafka, brokers, &config.pool, &self.metrics)
        };
        // The database pools follow their settings: connectors that restart or start take
        // new pools when they changed; the others keep theirs until they stop.
        let databases = if *old_context.databases.settings() == config.databases {
            old_context.databases.clone()
        } else {
            DatabasePools::new(&config.databases)
        };
        let context = Arc::new(Context {
            kafka: config.kafka.clone(),
            brokers: brokers.to_string(),
            engine: new_engine(&config, old_context.engine.clone())?,
            pool,
            databases,
            worker_id: old_context.worker_id.clone(),
        });
        let old = self.connectors();
        let mut report = Reloaded::default();
        let mut next = Vec::new();
        for connector in &config.connectors {
            let print = fingerprint(&config, connector);
            match old.iter().find(|c| c.name == connector.name) {
                Some(running) if running.fingerprint == print => {
                    report.unchanged.push(connector.name.clone());
                    next.push(running.clone());
                }
                found => {
                    if let Some(running) = found {
                        tracing::info!(connector = %running.name, "settings changed: the connector restarts");
                        for failure in running.shutdown().await {
                            tracing::warn!(%failure, "stopped for the reload");
                        }
                        report.restarted.push(connector.name.clone());
                    } else {
                        tracing::info!(connector = %connector.name, "new connector: it starts");
                        report.started.push(connector.name.clone());
                    }
                    let started = ConnectorHandle::start(
                        context.clone(),
                        Arc::new(connector.clone()),
                        self.metrics.connector(&connector.name),
                        print,
                    );
                    if let Ok(mut starting) = self.starting.lock() {
                        starting.push(started.clone());
                    }
                    next.push(started);
                }
            }
        }
        for running in &old {
            if !config.connectors.iter().any(|c| c.name == running.name) {
                tracing::info!(connector = %running.name, "no longer in the file: the connector stops");
                for failure in running.shutdown().await {
                    tracing::warn!(%failure, "stopped for the reload");
                }
                report.stopped.push(running.name.clone());
            }
        }
        if let Ok(mut connectors) = self.connectors.write() {
            *connectors = next;
        }
        if let Ok(mut starting) = self.starting.lock() {
            starting.clear();
        }
        if let Ok(mut current) = self.context.write() {
            *current = context;
        }
        if !keep_pool {
            old_context.pool.close();
        }
        if let Ok(mut current) = self.config.write() {
            *current = Arc::new(config);
        }
        Ok(report)
    }
}

/// The plugin engine, when a connector has transforms: `existing` if there is one.
fn new_engine(
    config: &Config,
    existing: Option<sluice_transform::TransformEngine>,
) -> Result<Option<sluice_transform::TransformEngine>, SupervisorError> {
    if existing.is_some() || config.connectors.iter().all(|c| c.transforms.is_empty()) {
        return Ok(existing);
    }
    // One engine for the process: compiled plugins are shared, and cached on disk.
    Ok(Some(sluice_transform::TransformEngine::new(
        sluice_transform::EngineOptions::default(),
    )?))
}
