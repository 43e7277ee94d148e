//! The supervisor: one per process. It connects each connector's sink, prepares its tables,
//! starts its tasks, and stops them all on shutdown.

use std::sync::Arc;

use tokio::runtime::Handle;

use crate::config::{Config, ConnectorConfig, DeadLetterDestination};
use crate::deliver::Policy;
use crate::kafka::dead_letter_producer::{DeadLetterError, DeadLetterProducer};
use crate::retry::Retrying;
use crate::sink::{Sink, SinkError};
use crate::task::{self, Control, Metrics, TaskHandle, TaskSpec, TaskState};
use crate::validate::{RecordSchema, SchemaError};

/// Why the supervisor could not start.
#[derive(Debug, thiserror::Error)]
pub enum SupervisorError {
    #[error("connector {connector}: {source}")]
    Sink {
        connector: String,
        source: SinkError,
    },
    #[error("cannot start the plugin engine: {0}")]
    Engine(#[from] sluice_transform::TransformError),
    #[error("connector {connector}: {source}")]
    Schema {
        connector: String,
        source: SchemaError,
    },
    #[error("connector {connector}: {source}")]
    DeadLetters {
        connector: String,
        source: DeadLetterError,
    },
    #[error("connector {connector}: cannot start task thread: {source}")]
    Spawn {
        connector: String,
        source: std::io::Error,
    },
}

/// A connector and its running tasks.
pub struct RunningConnector {
    pub config: Arc<ConnectorConfig>,
    pub sink: Arc<Sink>,
    pub metrics: Arc<Metrics>,
    pub tasks: Vec<TaskHandle>,
}

/// The connectors of this process.
pub struct Supervisor {
    pub connectors: Vec<RunningConnector>,
}

/// Connects a connector's sink and prepares its tables. A database that is down (or
/// refusing connections) is waited for with the connector's `errors.retry` backoff, so a
/// process started during an outage begins when the database is back; anything else, or
/// an outage beyond `max_elapsed`, is the error.
async fn connect_sink(connector: &ConnectorConfig) -> Result<Sink, SinkError> {
    let started = std::time::Instant::now();
    let mut retrying = None;
    loop {
        let result = match Sink::connect(connector).await {
            Ok(sink) => match sink.prepare().await {
                Ok(()) => Ok(sink),
                Err(e) => {
                    sink.close().await;
                    Err(e)
                }
            },
            Err(e) => Err(e),
        };
        match result {
            Err(e) if e.is_transient() => {
                if retrying.is_none() {
                    tracing::warn!(connector = %connector.name, error = %e,
                        "database unavailable at start; waiting for it (errors.retry)");
                }
                match Retrying::failed(&mut retrying, &connector.errors.retry) {
                    Ok(wait) => tokio::time::sleep(wait).await,
                    Err(_) => return Err(e),
                }
            }
            Ok(sink) if retrying.is_some() => {
                tracing::info!(connector = %connector.name, after = ?started.elapsed(), "database available");
                return Ok(sink);
            }
            other => return other,
        }
    }
}

impl Supervisor {
    /// Connects every sink, creates what is missing, and starts every task. `brokers` is the
    /// resolved bootstrap list (the embedded cluster's when the file says `embedded`).
    pub async fn start(config: &Config, brokers: &str) -> Result<Self, SupervisorError> {
        let mut connectors = Vec::new();
        for connector in &config.connectors {
            let sink_error = |source| SupervisorError::Sink {
                connector: connector.name.clone(),
                source,
            };
            let sink = Arc::new(connect_sink(connector).await.map_err(sink_error)?);
            connectors.push((Arc::new(connector.clone()), sink));
        }
        // One engine for the process: compiled plugins are shared, and cached on disk.
        let engine = if config.connectors.iter().any(|c| !c.transforms.is_empty()) {
            Some(sluice_transform::TransformEngine::new(
                sluice_transform::EngineOptions::default(),
            )?)
        } else {
            None
        };
        let mut running = Vec::new();
        for (connector, sink) in connectors {
            let metrics = Arc::new(Metrics::default());
            let schema = match &connector.schema {
                Some(path) => Some(Arc::new(RecordSchema::load(path).map_err(|source| {
                    SupervisorError::Schema {
                        connector: connector.name.clone(),
                        source,
                    }
                })?)),
                None => None,
            };
            let dlq_topic = match &connector.errors.dlq {
                Some(DeadLetterDestination::Topic(topic)) => Some(
                    DeadLetterProducer::new(&config.kafka, brokers, topic, &connector.name)
                        .map_err(|source| SupervisorError::DeadLetters {
                            connector: connector.name.clone(),
                            source,
                        })?,
                ),
                _ => None,
            };
            let policy = Arc::new(Policy {
                policy: connector.errors.policy,
                dlq_topic,
                dlq_table: matches!(connector.errors.dlq, Some(DeadLetterDestination::Table(_))),
            });
            let mut tasks = Vec::new();
            for task in 0..connector.tasks as usize {
                let spec = TaskSpec {
                    kafka: config.kafka.clone(),
                    brokers: brokers.to_string(),
                    connector: connector.clone(),
                    task,
                    engine: engine.clone(),
                    schema: schema.clone(),
                    policy: policy.clone(),
                };
                let handle = task::spawn(spec, sink.clone(), metrics.clone(), Handle::current())
                    .map_err(|source| SupervisorError::Spawn {
                        connector: connector.name.clone(),
                        source,
                    })?;
                tasks.push(handle);
            }
            tracing::info!(connector = %connector.name, tasks = tasks.len(), table = %connector.sink.table, "connector started");
            running.push(RunningConnector {
                config: connector,
                sink,
                metrics,
                tasks,
            });
        }
        Ok(Self {
            connectors: running,
        })
    }

    /// Tells every task to stop, waits for them, closes the sinks. Returns the errors of
    /// the tasks that failed, as `connector task N: error` lines.
    pub async fn shutdown(mut self) -> Vec<String> {
        for connector in &self.connectors {
            for task in &connector.tasks {
                task.send(Control::Stop);
            }
        }
        let mut failures = Vec::new();
        for connector in &mut self.connectors {
            for mut task in std::mem::take(&mut connector.tasks) {
                let task = tokio::task::spawn_blocking(move || {
                    task.join();
                    task
                })
                .await;
                if let Ok(task) = task {
                    let status = task.status.borrow().clone();
                    if status.state == TaskState::Failed {
                        failures.push(format!(
                            "connector {} task {}: {}",
                            connector.config.name,
                            task.task,
                            status.error.unwrap_or_default()
                        ));
                    }
                }
            }
            connector.sink.close().await;
        }
        failures
    }

    /// Resolves when every task has ended: each one's status channel closes when its
    /// thread ends, so this awaits them instead of polling.
    pub async fn finished(&self) {
        futures_util::future::join_all(
            self.connectors
                .iter()
                .flat_map(|c| &c.tasks)
                .map(TaskHandle::finished),
        )
        .await;
    }

    /// Waits until every task has ended or `stop` resolves.
    pub async fn wait(&self, stop: impl std::future::Future<Output = ()>) {
        tokio::select! {
            _ = stop => {}
            _ = self.finished() => {}
        }
    }
}
