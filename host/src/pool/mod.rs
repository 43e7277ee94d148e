//! The seek-consumer pool (field article 003): a bounded set of assign-mode consumers of
//! one Kafka cluster, lent to one reader at a time for one read at a given partition and
//! position, then returned. Creating a consumer per read costs a connection and a metadata
//! round trip; a consumer group is the wrong tool for random reads. `sluice inspect`,
//! `sluice dry-run` and the admin API's record reads borrow from it.
//!
//! - **Never in a group, never committing**: consumers only `assign`; auto-commit and
//!   offset store are off. librdkafka wants a `group.id` for `assign` (`sluice-pool`, never
//!   joined; a cluster with group ACLs must let the principal describe it).
//! - **Bounded**: at most `pool.size` consumers exist; a borrower waits up to
//!   `pool.borrow_timeout` for one ([`PoolError::Busy`] after that).
//! - **Validated on borrow**: every read starts with a metadata request; a consumer that
//!   cannot answer it is closed and replaced by a new one, once.
//! - **Evicted when idle**: a consumer unused for `pool.idle` is closed the next time the
//!   pool is used (lent or given back).
//! - **Closed on shutdown**: [`ConsumerPool::close`] closes the idle consumers; borrowed
//!   ones close when they come back.

mod read;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use tokio::sync::Semaphore;

use crate::config::{KafkaConfig, PoolConfig};
use crate::metrics::{Metrics, PoolMetrics};
use prometheus_client::metrics::gauge::Gauge;
pub use read::{ReadError, Start};

/// Why a consumer could not be borrowed.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// Every consumer stayed borrowed for the whole `pool.borrow_timeout`.
    #[error(
        "all {size} consumers of the pool are busy (waited {waited:?}); try again, or raise pool.size"
    )]
    Busy { size: usize, waited: Duration },
    /// The pool was closed (the process is stopping).
    #[error("the consumer pool is closed: sluice is stopping")]
    Closed,
    /// A consumer could not be created (a bad `kafka.properties` entry, say).
    #[error("cannot create a consumer for {cluster}: {source}")]
    Create { cluster: String, source: KafkaError },
}

/// A pool of seek consumers for one cluster.
pub struct ConsumerPool {
    /// The cluster, as metrics and errors name it (its bootstrap servers).
    cluster: String,
    client: ClientConfig,
    settings: PoolConfig,
    idle: Mutex<Vec<Idle>>,
    permits: Arc<Semaphore>,
    metrics: PoolMetrics,
}

impl std::fmt::Debug for ConsumerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerPool")
            .field("cluster", &self.cluster)
            .field("size", &self.settings.size)
            .finish()
    }
}

struct Idle {
    consumer: BaseConsumer,
    since: Instant,
}

impl ConsumerPool {
    /// A pool for the cluster at `brokers`, with the file's `kafka.properties` (security
    /// settings, say). No consumer is created before the first borrow.
    pub fn new(
        kafka: &KafkaConfig,
        brokers: &str,
        settings: &PoolConfig,
        metrics: &Metrics,
    ) -> Arc<Self> {
        let mut client = ClientConfig::new();
        client
            .set("bootstrap.servers", brokers)
            // librdkafka wants a group id for a consumer; an assign-only consumer that
            // never commits never joins it.
            .set("group.id", "sluice-pool")
            .set("client.id", "sluice-pool")
            .set("isolation.level", crate::config::defaults::ISOLATION_LEVEL)
            // The end of a read: with read_committed, the last stable offset.
            .set("enable.partition.eof", "true")
            // A read asks for a few records now: no deep prefetch, no waiting at the
            // broker for a fuller fetch, no backoff before the next one.
            .set("queued.min.messages", "1000")
            .set("fetch.wait.max.ms", "10")
            .set("fetch.error.backoff.ms", "10");
        for (key, value) in &kafka.properties {
            client.set(key, value);
        }
        client
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "error")
            .set_log_level(RDKafkaLogLevel::Warning);
        let cluster = brokers.to_string();
        Arc::new(Self {
            metrics: metrics.pool(&cluster),
            cluster,
            client,
            settings: settings.clone(),
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(settings.size)),
        })
    }

    /// The cluster this pool reads.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// Borrows a consumer, waiting up to `pool.borrow_timeout` for one.
    pub async fn borrow(self: &Arc<Self>) -> Result<Borrowed, PoolError> {
        let waited = Instant::now();
        // Counted while waiting, also when the borrower gives up (its future dropped).
        struct Waiting<'a>(&'a Gauge);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.dec();
            }
        }
        self.metrics.waiting.inc();
        let waiting = Waiting(&self.metrics.waiting);
        let permit = tokio::time::timeout(
            self.settings.borrow_timeout.0,
            self.permits.clone().acquire_owned(),
        )
        .await;
        drop(waiting);
        let permit = match permit {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(PoolError::Closed),
            Err(_) => {
                return Err(PoolError::Busy {
                    size: self.settings.size,
                    waited: waited.elapsed(),
                });
            }
        };
        let consumer = match self.take_idle() {
            Some(consumer) => consumer,
            None => self.create()?,
        };
        self.metrics.borrowed.inc();
        Ok(Borrowed {
            consumer: Some(consumer),
            pool: self.clone(),
            _permit: permit,
            broken: false,
        })
    }

    /// An idle consumer, after closing those idle too long.
    fn take_idle(&self) -> Option<BaseConsumer> {
        let (taken, stale) = {
            let mut idle = self.lock_idle();
            let stale = self.evict_stale(&mut idle);
            let taken = idle.pop().map(|i| i.consumer);
            if taken.is_some() {
                self.metrics.idle.dec();
            }
            (taken, stale)
        };
        close_off_runtime(stale);
        taken
    }

    /// Takes the consumers idle longer than `pool.idle` out of `idle`, to be closed
    /// outside the lock.
    fn evict_stale(&self, idle: &mut Vec<Idle>) -> Vec<BaseConsumer> {
        let limit = self.settings.idle.0;
        let (stale, fresh): (Vec<Idle>, Vec<Idle>) = std::mem::take(idle)
            .into_iter()
            .partition(|i| i.since.elapsed() >= limit);
        *idle = fresh;
        if !stale.is_empty() {
            self.metrics.idle.dec_by(stale.len() as i64);
            self.metrics.evicted.inc_by(stale.len() as u64);
            tracing::debug!(cluster = %self.cluster, evicted = stale.len(), "idle pool consumers closed");
        }
        stale.into_iter().map(|i| i.consumer).collect()
    }

    fn lock_idle(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        // A panic while the list was held leaves it consistent (pushes and pops only).
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn create(&self) -> Result<BaseConsumer, PoolError> {
        let consumer = self.client.create().map_err(|source| PoolError::Create {
            cluster: self.cluster.clone(),
            source,
        })?;
        self.metrics.created.inc();
        Ok(consumer)
    }

    /// Takes a consumer back (or closes it, when broken or the pool is closed).
    fn give_back(&self, consumer: BaseConsumer, broken: bool) {
        self.metrics.borrowed.dec();
        let mut closing = Vec::new();
        {
            let mut idle = self.lock_idle();
            // Under the lock: `close` empties the list under it, after closing the permits.
            if broken || self.permits.is_closed() {
                self.metrics.evicted.inc();
                closing.push(consumer);
            } else {
                closing = self.evict_stale(&mut idle);
                idle.push(Idle {
                    consumer,
                    since: Instant::now(),
                });
                self.metrics.idle.inc();
            }
        }
        close_off_runtime(closing);
    }

    /// Closes the pool: idle consumers now, borrowed ones when they come back; later
    /// borrows fail with [`PoolError::Closed`].
    pub fn close(&self) {
        self.permits.close();
        let closed = std::mem::take(&mut *self.lock_idle());
        self.metrics.idle.dec_by(closed.len() as i64);
        close_off_runtime(closed.into_iter().map(|i| i.consumer).collect());
    }
}

/// Closes consumers where blocking is allowed: closing one waits for librdkafka to wind
/// it down, which must not hold an async worker.
fn close_off_runtime(consumers: Vec<BaseConsumer>) {
    if consumers.is_empty() {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn_blocking(move || drop(consumers));
        }
        Err(_) => drop(consumers),
    }
}

/// A consumer on loan: returned to its pool when dropped.
pub struct Borrowed {
    consumer: Option<BaseConsumer>,
    pool: Arc<ConsumerPool>,
    _permit: tokio::sync::OwnedSemaphorePermit,
    broken: bool,
}

impl Borrowed {
    /// The consumer.
    fn consumer(&self) -> &BaseConsumer {
        // Only `Drop` takes it out.
        self.consumer
            .as_ref()
            .expect("a borrowed consumer until dropped")
    }

    /// Closes the consumer when it comes back instead of lending it again.
    fn mark_broken(&mut self) {
        self.broken = true;
    }

    /// Replaces a consumer that could not reach the cluster with a new one.
    fn replace(&mut self) -> Result<(), PoolError> {
        // The one that failed is not lent again, whether a new one can be made or not.
        self.broken = true;
        let fresh = self.pool.create()?;
        self.broken = false;
        if self.consumer.replace(fresh).is_some() {
            self.pool.metrics.evicted.inc();
        }
        Ok(())
    }
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        if let Some(consumer) = self.consumer.take() {
            self.pool.give_back(consumer, self.broken);
        }
    }
}
