//! The process's connections to its sink databases: one pool per database URL, shared by
//! every connector that writes there.
//!
//! A pool per connector (`tasks + 1` connections each) ran PostgreSQL out of connections
//! at about 50 connectors in one process (its default `max_connections` is 100), and the
//! connectors that came late never started. Shared, a process holds at most
//! `databases.max_connections` connections to each database, whatever its number of
//! connectors, and opens one only when a write or a control read needs it: a task holds a
//! connection for the length of one batch's transaction, so connectors take turns on the
//! same few connections. A connection unused for `databases.idle` is closed.
//!
//! Writes take at most all but one of the connections ([`SharedPool::writers`]): the one
//! left is for the connectors' control reads and heartbeats, which give up after a few
//! seconds. No work of the sink holds a connection while it waits for a second one from
//! the same pool (a table is made ready before the batch's transaction, not inside it), so tasks
//! that outnumber the connections wait their turn and never deadlock.
//!
//! [`DatabasePools`] hands out [`SharedPool`]s: the registry keeps only weak references, so
//! a pool closes when the last sink that used it is closed or dropped, and a pool that was
//! closed is never handed out again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use sqlx::mysql::MySqlPool;
use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;

use crate::config::{DatabasesConfig, redact_url};
use crate::sink::db;
use crate::sink::{Dialect, SinkError};

/// Runs `$body` with `$pool` bound to the connector's pool and `$db` to its sqlx database
/// type: one generic body serves PostgreSQL, MySQL and SQLite.
macro_rules! each_pool {
    ($self:expr, $pool:ident, $db:ident => $body:expr) => {
        match &$self.pool.pool {
            $crate::sink::db::pools::Pool::Postgres($pool) => {
                type $db = ::sqlx::Postgres;
                $body
            }
            $crate::sink::db::pools::Pool::MySql($pool) => {
                type $db = ::sqlx::MySql;
                $body
            }
            $crate::sink::db::pools::Pool::Sqlite($pool) => {
                type $db = ::sqlx::Sqlite;
                $body
            }
        }
    };
}
pub(crate) use each_pool;

/// A connection pool of one of the three databases.
pub(crate) enum Pool {
    Postgres(PgPool),
    MySql(MySqlPool),
    Sqlite(SqlitePool),
}

impl Pool {
    /// How `table` takes rows through `COPY`: PostgreSQL only
    /// (`db/postgres/catalog.rs`); none elsewhere.
    pub(crate) async fn copy_choice(
        &self,
        mode: crate::config::WriteMode,
        table: &crate::sink::TableSpec,
        connector: &str,
    ) -> db::postgres::copy::CopyIn {
        match self {
            Pool::Postgres(pool) => db::postgres::copy_choice(pool, mode, table, connector).await,
            _ => db::postgres::copy::CopyIn::none(),
        }
    }

    fn is_closed(&self) -> bool {
        match self {
            Pool::Postgres(p) => p.is_closed(),
            Pool::MySql(p) => p.is_closed(),
            Pool::Sqlite(p) => p.is_closed(),
        }
    }

    async fn close(&self) {
        match self {
            Pool::Postgres(p) => p.close().await,
            Pool::MySql(p) => p.close().await,
            Pool::Sqlite(p) => p.close().await,
        }
    }
}

/// One database's pool, shared by the sinks that write there. It closes when the last of
/// them is closed ([`SharedPool::release`]) or dropped.
pub struct SharedPool {
    pub(crate) pool: Pool,
    /// Permits for the batches' transactions (and the refused-row probes): one
    /// connection fewer than the pool holds, so that the control reads, heartbeats and
    /// target changes of every connector always find one (they give up after a few
    /// seconds, where a write waits its turn).
    pub(crate) writers: Arc<tokio::sync::Semaphore>,
}

impl SharedPool {
    /// Called by a sink that is done with the pool (`this` is its own reference): the
    /// last user closes it, waiting for connections still in use; the others leave it to
    /// the sinks still using it.
    pub(crate) async fn release(this: &Arc<Self>) {
        if Arc::strong_count(this) == 1 {
            this.pool.close().await;
        }
    }
}

/// The pools of a process, one per database URL, and the settings they are made with.
pub struct DatabasePools {
    settings: DatabasesConfig,
    /// Each URL's slot: a lock held while its pool is made, so that connectors starting at
    /// once make one pool, not one each.
    slots: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Weak<SharedPool>>>>>,
}

impl DatabasePools {
    pub fn new(settings: &DatabasesConfig) -> Arc<Self> {
        Arc::new(Self {
            settings: settings.clone(),
            slots: Mutex::new(HashMap::new()),
        })
    }

    /// The settings the pools are made with.
    pub fn settings(&self) -> &DatabasesConfig {
        &self.settings
    }

    /// The pool for `url`: the open one, or a new one with a first connection made (so
    /// that a wrong address or password is reported here, not at the first write).
    pub async fn pool_for(&self, url: &str) -> Result<Arc<SharedPool>, SinkError> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            // Slots of pools that closed go, so that the map never grows past the URLs
            // in use.
            slots.retain(|_, slot| {
                Arc::strong_count(slot) > 1
                    || slot.try_lock().map_or(true, |weak| weak.strong_count() > 0)
            });
            slots.entry(url.to_string()).or_default().clone()
        };
        let mut slot = slot.lock().await;
        if let Some(shared) = slot.upgrade()
            && !shared.pool.is_closed()
        {
            return Ok(shared);
        }
        let pool = open(url, &self.settings).await?;
        let connections = match pool {
            Pool::Sqlite(_) => 1,
            _ => self.settings.max_connections as usize,
        };
        let shared = Arc::new(SharedPool {
            pool,
            writers: Arc::new(tokio::sync::Semaphore::new(
                connections.saturating_sub(1).max(1),
            )),
        });
        *slot = Arc::downgrade(&shared);
        Ok(shared)
    }
}

/// Makes a pool for `url` and its first connection, as the URL's database wants it
/// (`db/<name>/pool.rs`).
async fn open(url: &str, settings: &DatabasesConfig) -> Result<Pool, SinkError> {
    let dialect = Dialect::from_url(url).ok_or_else(|| SinkError::UnsupportedUrl {
        url: redact_url(url),
    })?;
    let connect_error = |source| SinkError::Connect {
        url: redact_url(url),
        source,
    };
    Ok(match dialect {
        Dialect::Postgres => Pool::Postgres(
            db::postgres::pool::open(url, settings)
                .await
                .map_err(connect_error)?,
        ),
        Dialect::MySql => Pool::MySql(
            db::mysql::pool::open(url, settings)
                .await
                .map_err(connect_error)?,
        ),
        Dialect::Sqlite => Pool::Sqlite(db::sqlite::pool::open(url).await.map_err(connect_error)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite_url(dir: &tempfile::TempDir, name: &str) -> String {
        format!("sqlite://{}", dir.path().join(name).display())
    }

    #[tokio::test]
    async fn one_pool_per_url_closed_by_its_last_user() {
        let dir = tempfile::tempdir().expect("dir");
        let pools = DatabasePools::new(&DatabasesConfig::default());
        let a = pools.pool_for(&sqlite_url(&dir, "a.db")).await.expect("a");
        let again = pools
            .pool_for(&sqlite_url(&dir, "a.db"))
            .await
            .expect("a again");
        assert!(Arc::ptr_eq(&a, &again), "one URL, one pool");
        let b = pools.pool_for(&sqlite_url(&dir, "b.db")).await.expect("b");
        assert!(!Arc::ptr_eq(&a, &b), "another URL, another pool");

        // The first of two users leaves the pool open for the other.
        SharedPool::release(&again).await;
        drop(again);
        assert!(!a.pool.is_closed());
        let Pool::Sqlite(raw) = &a.pool else {
            panic!("a SQLite pool")
        };
        let raw = raw.clone();
        SharedPool::release(&a).await;
        assert!(raw.is_closed(), "the last user closes the pool");

        // A closed pool is never handed out again.
        let reopened = pools.pool_for(&sqlite_url(&dir, "a.db")).await.expect("a");
        assert!(!reopened.pool.is_closed());
        drop(b);
        assert_eq!(
            pools.slots.lock().map(|s| s.len()).unwrap_or(0),
            2,
            "slots of closed pools stay until the next lookup"
        );
        let _c = pools.pool_for(&sqlite_url(&dir, "c.db")).await.expect("c");
        let urls: Vec<String> = pools
            .slots
            .lock()
            .map(|s| s.keys().cloned().collect())
            .unwrap_or_default();
        assert!(
            !urls.iter().any(|u| u.ends_with("b.db")),
            "the slot of a pool nobody holds is gone: {urls:?}"
        );
    }

    #[tokio::test]
    async fn a_bad_url_is_an_error_and_leaves_no_pool() {
        let pools = DatabasePools::new(&DatabasesConfig::default());
        let Err(error) = pools.pool_for("redis://127.0.0.1/0").await else {
            panic!("redis:// is no sink database")
        };
        assert!(matches!(error, SinkError::UnsupportedUrl { .. }), "{error}");
    }
}
