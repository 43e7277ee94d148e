//! What the process gives every connector it runs: the `kafka:` section and the brokers it
//! resolved to, the plugin engine, the seek-consumer pool, the database pools and the
//! worker id. The supervisor builds one [`Context`]; each connector's runner
//! (`connector.rs`) starts its tasks with it, and its coverage watcher (`coverage.rs`)
//! asks the cluster with it.

use std::sync::Arc;

use crate::config::KafkaConfig;

/// What the process needs to start a connector's tasks.
#[derive(Clone)]
pub struct Context {
    pub kafka: KafkaConfig,
    /// The resolved bootstrap servers.
    pub brokers: String,
    /// The process's plugin engine, when a connector has transforms.
    pub engine: Option<sluice_transform::TransformEngine>,
    /// The seek-consumer pool (`inspect`, `dry-run`, the admin API's record reads).
    pub pool: Arc<crate::pool::ConsumerPool>,
    /// The process's connections to its sink databases, one pool per URL.
    pub databases: Arc<crate::sink::DatabasePools>,
    /// This process in status and heartbeats (`SLUICE_WORKER_ID`, or host and port).
    pub worker_id: String,
}
