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

/// What became of a table a batch names.
enum Verdict {
    Ready(Arc<ReadyTable>),
    /// No operation goes to it any more.
    Unused,
    /// It cannot be made ready, for a reason waiting will not mend.
    Refused(SinkError),
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

    /// The tables of `routes` (in its order), each made ready once; `None` for a table no
    /// operation goes to any more (its records failed or were skipped since). `create`
    /// says whether a missing table may be created now (`create_table`; a dry run never
    /// creates). The first table that cannot be made ready fails the call: see
    /// [`Sink::tables_refused`] for which operations that leaves without a table.
    pub(super) async fn ready_tables(
        &self,
        routes: &TableRoutes,
        create: bool,
    ) -> Result<Vec<Option<Arc<ReadyTable>>>, SinkError> {
        let mut tables = Vec::with_capacity(routes.tables.len());
        for (index, verdict) in self.verdicts(routes, create, true).await? {
            debug_assert_eq!(index, tables.len());
            match verdict {
                Verdict::Ready(table) => tables.push(Some(table)),
                Verdict::Unused => tables.push(None),
                Verdict::Refused(error) => return Err(error),
            }
        }
        Ok(tables)
    }

    /// The operations of `routes` whose table cannot be made ready for a reason that
    /// waiting will not mend (the database refuses to create it, a table of that name has
    /// other columns, a name it does not take), each with the reason: their records fail
    /// alone (class `table_name`), and the other tables' rows go on. `Err` for a transient
    /// failure.
    pub async fn tables_refused(
        &self,
        routes: &TableRoutes,
    ) -> Result<Vec<(usize, String)>, SinkError> {
        let mut refused: Vec<Option<String>> = vec![None; routes.tables.len()];
        for (index, verdict) in self.verdicts(routes, true, false).await? {
            if let Verdict::Refused(error) = verdict {
                refused[index] = Some(format!(
                    "table {} cannot be written: {error}",
                    routes.tables[index]
                ));
            }
        }
        Ok(routes
            .of
            .iter()
            .enumerate()
            .filter_map(|(op, &table)| {
                let why = refused.get(table as usize)?.as_ref()?;
                Some((op, why.clone()))
            })
            .collect())
    }

    /// Each table of `routes`, made ready if it is not yet; with `first_refusal`, the
    /// verdicts stop at the first table refused.
    async fn verdicts(
        &self,
        routes: &TableRoutes,
        create: bool,
        first_refusal: bool,
    ) -> Result<Vec<(usize, Verdict)>, SinkError> {
        let Some(routing) = &self.routing else {
            return Ok(Vec::new());
        };
        let mut used = vec![false; routes.tables.len()];
        for &table in &routes.of {
            if let Some(used) = used.get_mut(table as usize) {
                *used = true;
            }
        }
        let mut verdicts = Vec::with_capacity(routes.tables.len());
        for (index, name) in routes.tables.iter().enumerate() {
            if !used[index] {
                verdicts.push((index, Verdict::Unused));
                continue;
            }
            let known = routing
                .ready
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(name)
                .cloned();
            let verdict = match known {
                Some(table) => Verdict::Ready(table),
                None => {
                    let spec = self.table.routed(routing.schema.as_deref(), name);
                    match self.make_ready(spec, create).await {
                        Ok(table) => {
                            let table = Arc::new(table);
                            routing
                                .ready
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(name.clone(), table.clone());
                            Verdict::Ready(table)
                        }
                        Err(error) if error.is_transient() => return Err(error),
                        Err(error) => {
                            tracing::warn!(connector = %self.connector, table = %name, %error,
                                "a table the template names cannot be written; its records fail alone");
                            Verdict::Refused(error)
                        }
                    }
                }
            };
            let refused = matches!(verdict, Verdict::Refused(_));
            verdicts.push((index, verdict));
            if refused && first_refusal {
                break;
            }
        }
        Ok(verdicts)
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
        tables: &[Option<Arc<ReadyTable>>],
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
            let Some(Some(table)) = tables.get(table) else {
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
