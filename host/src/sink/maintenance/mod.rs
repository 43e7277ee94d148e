//! A connector's sink database kept in shape, beside the data plane: sluice's own tables
//! brought to this binary's schema version ([`schema`]), and the cleanups each connector's
//! runner runs every minute (`cleanup.rs`): the tombstones of deleted rows past
//! `sink.version.remember_deletes`, the producer ids past `delivery.dedup.window`.
//!
//! [`Maintenance`] is a view of a [`Sink`], borrowed like the [`ControlStore`](super::ControlStore):
//! a caller that keeps the database in shape takes this, not the sink's write path.

mod cleanup;
pub mod schema;

use super::{Dialect, SharedPool, Sink, SinkError, TableSpec, routed};
use schema::{Migrated, SCHEMA_VERSION};

/// One connector's sink database, as its maintenance sees it: the pool, the database, the
/// connector (its producer ids) and the tables it writes (their tombstones).
#[derive(Clone, Copy)]
pub struct Maintenance<'a> {
    pool: &'a SharedPool,
    dialect: Dialect,
    connector: &'a str,
    /// The connector's table (a template's text, with a template).
    table: &'a TableSpec,
    /// With a table template or derived columns: the tables made ready so far.
    routing: Option<&'a routed::Routing>,
}

impl Sink {
    /// The connector's maintenance, on the sink's pool.
    pub fn maintenance(&self) -> Maintenance<'_> {
        Maintenance {
            pool: &self.pool,
            dialect: self.dialect,
            connector: &self.connector,
            table: &self.table,
            routing: self.routing.as_ref(),
        }
    }
}

impl Maintenance<'_> {
    fn db_error(&self, action: &'static str) -> impl Fn(sqlx::Error) -> SinkError + '_ {
        move |source| SinkError::Database {
            action,
            table: self.table.name.clone(),
            source,
        }
    }

    /// Brings sluice's own tables to [`SCHEMA_VERSION`].
    pub(super) async fn migrate(&self) -> Result<Migrated, SinkError> {
        self.migrate_to(SCHEMA_VERSION).await
    }
}
