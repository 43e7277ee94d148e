//! Many tables in one connector (a table template): each table a batch names is made
//! ready once per process, before the first transaction that writes it (created under
//! `create_table`, checked for every column, PostgreSQL's `COPY` choice made), then kept.
//! Creating runs outside the batch's transaction: MySQL and MariaDB commit DDL implicitly,
//! which would commit half a batch.
//!
//! A batch's operations are written table by table, tables in name order (two
//! transactions that write the same tables lock them in the same order), each table's
//! operations in record order.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use sqlx::{Executor, IntoArguments};

use super::backend::{self, Backend};
use super::dialect::TableSpec;
use super::runs::runs;
use super::{Sink, SinkError};
use crate::config::WriteMode;
use crate::map::{RowOp, TableRoutes};

/// A table a template made, ready to be written.
#[derive(Debug)]
pub struct ReadyTable {
    pub spec: TableSpec,
    /// PostgreSQL: inserts go through `COPY`.
    pub copy_in: bool,
}

/// The tables of a connector with a table template.
#[derive(Debug, Default)]
pub(super) struct Routing {
    /// `sink.schema`.
    pub(super) schema: Option<String>,
    /// The tables made ready so far, by name.
    pub(super) ready: Mutex<HashMap<Arc<str>, Arc<ReadyTable>>>,
}

/// What a failed write was writing: the table, and the database's error.
pub(super) type TableError = (String, sqlx::Error);

impl Sink {
    /// The names of the tables this sink writes: the connector's table, or with a template
    /// every table made ready so far.
    pub(super) fn written_table_names(&self) -> Vec<String> {
        match &self.routing {
            None => vec![self.table.name.clone()],
            Some(routing) => routing
                .ready
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .map(|t| t.spec.name.clone())
                .collect(),
        }
    }

    /// The tables of `routes` (in its order), each made ready once. `create` says whether
    /// a missing table may be created now (`create_table`; a dry run never creates).
    pub(super) async fn ready_tables(
        &self,
        routes: &TableRoutes,
        create: bool,
    ) -> Result<Vec<Arc<ReadyTable>>, SinkError> {
        let Some(routing) = &self.routing else {
            return Ok(Vec::new());
        };
        let mut tables = Vec::with_capacity(routes.tables.len());
        for name in &routes.tables {
            let known = routing
                .ready
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(name)
                .cloned();
            let table = match known {
                Some(table) => table,
                None => {
                    let spec = self.table.routed(routing.schema.as_deref(), name);
                    let table = Arc::new(self.make_ready(spec, create).await?);
                    routing
                        .ready
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(name.clone(), table.clone());
                    table
                }
            };
            tables.push(table);
        }
        Ok(tables)
    }

    /// Creates (when asked to) and checks one table.
    async fn make_ready(&self, spec: TableSpec, create: bool) -> Result<ReadyTable, SinkError> {
        if create && self.create_table {
            self.create(&spec).await?;
        }
        self.check_columns(&spec).await?;
        let copy_in = self.dialect == super::Dialect::Postgres
            && self.mode == WriteMode::Insert
            && self.takes_copy(&spec).await;
        tracing::info!(connector = %self.connector, table = %spec.name, copy_in, "table ready");
        Ok(ReadyTable { spec, copy_in })
    }

    /// Writes `ops[range]`: to the connector's table, or each to its own (`tables` in
    /// step with `routes.tables`).
    pub(super) async fn write_ops<DB>(
        &self,
        conn: &mut DB::Connection,
        ops: &[RowOp],
        routes: &TableRoutes,
        tables: &[Arc<ReadyTable>],
        range: Range<usize>,
    ) -> Result<(), TableError>
    where
        DB: Backend,
        DB::Connection: 'static,
        DB::Arguments: IntoArguments<DB>,
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    {
        let dedupe = self.mode != WriteMode::Insert;
        if routes.is_empty() {
            let runs = runs(&ops[range], &self.table, self.dialect, dedupe);
            return backend::write_runs::<DB>(
                conn,
                self.dialect,
                &self.table,
                self.mode,
                &runs,
                self.copy_in(),
            )
            .await
            .map_err(|e| (self.table.name.clone(), e));
        }
        for (table, indices) in routes.groups(range) {
            let Some(table) = tables.get(table) else {
                return Err((
                    routes.tables[table].to_string(),
                    sqlx::Error::Protocol(
                        "internal error: a routed table was not made ready".into(),
                    ),
                ));
            };
            let runs = runs(
                indices.iter().map(|&i| &ops[i]),
                &table.spec,
                self.dialect,
                dedupe,
            );
            backend::write_runs::<DB>(
                conn,
                self.dialect,
                &table.spec,
                self.mode,
                &runs,
                table.copy_in,
            )
            .await
            .map_err(|e| (table.spec.name.clone(), e))?;
        }
        Ok(())
    }
}
