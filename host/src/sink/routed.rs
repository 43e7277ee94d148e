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

use super::backend::Backend;
use super::db::postgres::copy::CopyIn;
use super::derived::Layout;
use super::dialect::TableSpec;
use super::runs::runs;
use super::write_runs::write_runs;
use super::{Sink, SinkError};
use crate::config::{Evolve, WriteMode};
use crate::failure::FailureClass;
use crate::map::SourcePosition;
use crate::map::{DerivedShape, RowOp, TableRoutes};
use crate::metrics::ConnectorMetrics;

/// A table a template made, ready to be written.
#[derive(Debug)]
pub struct ReadyTable {
    pub spec: TableSpec,
    /// PostgreSQL: how the table takes rows through `COPY`.
    pub copy_in: CopyIn,
    /// With derived columns: the table's columns and key as they stand.
    pub layout: Option<Layout>,
}

/// The tables of a connector with a table template.
#[derive(Debug, Default)]
pub(super) struct Routing {
    /// `sink.schema`.
    pub(super) schema: Option<String>,
    /// With derived columns (`sink.columns` left out): `sink.evolve`.
    pub(super) derived: Option<Evolve>,
    /// With derived columns and one configured table: it is every record's table.
    pub(super) fixed: bool,
    /// The tables made ready so far, by name.
    pub(super) ready: Mutex<HashMap<Arc<str>, Arc<ReadyTable>>>,
    /// Where the changes `sink.evolve` makes are counted (`sluice_schema_changes_total`),
    /// once the connector's runner gives its metrics.
    pub(super) schema_metrics: std::sync::OnceLock<Arc<ConnectorMetrics>>,
}

/// A table's shapes in a batch, each with its index into the routes' shapes.
type ShapesOf<'r> = [(usize, &'r Arc<DerivedShape>)];

/// What became of a table a batch names.
enum Verdict {
    /// Ready; with derived columns, the shapes (indices into the routes' shapes) that it
    /// cannot take, and why.
    Ready(Arc<ReadyTable>, Vec<(usize, String)>),
    /// No operation goes to it any more.
    Unused,
    /// It cannot be made ready, for a reason waiting will not mend.
    Refused(SinkError),
}

/// What a failed write was writing: the table, and the database's error.
pub(super) type TableError = (String, sqlx::Error);

impl Sink {
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
                Verdict::Ready(table, refused) => {
                    if let Some((_, why)) = refused.first() {
                        return Err(SinkError::SchemaIncompatible {
                            table: table.spec.name.clone(),
                            message: why.clone(),
                        });
                    }
                    tables.push(Some(table))
                }
                Verdict::Unused => tables.push(None),
                Verdict::Refused(error) => return Err(error),
            }
        }
        Ok(tables)
    }

    /// The operations of `routes` whose table cannot be made ready for a reason that
    /// waiting will not mend (the database refuses to create it, a table of that name has
    /// other columns, a name it does not take), each with the reason: their records fail
    /// alone (class `table_name`), and the other tables' rows go on. With derived columns,
    /// the operations whose schema does not fit their table too (class
    /// `schema_incompatible`). `Err` for a transient failure, and for one that fails the
    /// task: a privilege the database refuses for `CREATE` or `ALTER`, or the connector's
    /// one configured table.
    pub async fn tables_refused(
        &self,
        routes: &TableRoutes,
    ) -> Result<Vec<(usize, FailureClass, String)>, SinkError> {
        let mut refused: Vec<Option<String>> = vec![None; routes.tables.len()];
        let mut shapes_refused: Vec<Vec<(usize, String)>> = vec![Vec::new(); routes.tables.len()];
        for (index, verdict) in self.verdicts(routes, true, false).await? {
            match verdict {
                Verdict::Refused(error) => {
                    refused[index] = Some(format!(
                        "table {} cannot be written: {error}",
                        routes.tables[index]
                    ))
                }
                Verdict::Ready(table, shapes) => {
                    shapes_refused[index] = shapes
                        .into_iter()
                        .map(|(shape, why)| (shape, format!("table {}: {why}", table.spec.name)))
                        .collect()
                }
                Verdict::Unused => {}
            }
        }
        Ok(routes
            .of
            .iter()
            .enumerate()
            .filter_map(|(op, &table)| {
                if let Some(why) = refused.get(table as usize)?.as_ref() {
                    return Some((op, FailureClass::TableName, why.clone()));
                }
                let shape = *routes.shape_of.get(op)? as usize;
                let (_, why) = shapes_refused
                    .get(table as usize)?
                    .iter()
                    .find(|(s, _)| *s == shape)?;
                Some((op, FailureClass::SchemaIncompatible, why.clone()))
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
            let verdict = match (known, routing.derived) {
                (Some(table), None) => Verdict::Ready(table, Vec::new()),
                (known, None) => {
                    debug_assert!(known.is_none());
                    let spec = self.table.routed(routing.schema.as_deref(), name);
                    match self.make_ready(spec, create).await {
                        Ok(table) => {
                            let table = Arc::new(table);
                            routing
                                .ready
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(name.clone(), table.clone());
                            Verdict::Ready(table, Vec::new())
                        }
                        Err(error) => self.refusal(name, error, false)?,
                    }
                }
                (known, Some(evolve)) => {
                    let shapes: Vec<(usize, &Arc<DerivedShape>)> = shapes_of(routes, index);
                    match self
                        .derived_ready(
                            routing,
                            name,
                            known,
                            (&shapes, &routes.shape_sources),
                            create,
                            evolve,
                        )
                        .await
                    {
                        Ok((table, refused)) => Verdict::Ready(table, refused),
                        Err(error) => self.refusal(name, error, routing.fixed)?,
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

    /// Counts the changes `sink.evolve` makes in `metrics` (the connector's runner calls
    /// it once; a sink without derived columns makes none).
    pub fn count_schema_changes(&self, metrics: Arc<ConnectorMetrics>) {
        if let Some(routing) = &self.routing {
            let _ = routing.schema_metrics.set(metrics);
        }
    }

    /// Where the changes `sink.evolve` makes are counted, once set.
    pub(super) fn schema_metrics(&self) -> Option<&Arc<ConnectorMetrics>> {
        self.routing.as_ref()?.schema_metrics.get()
    }

    /// A table that cannot be made ready: its records fail alone, unless waiting may mend
    /// it (`Err`: transient) or it fails the task: a privilege the database refuses, or
    /// the connector's one configured table (`fixed`), as at start with explicit columns.
    fn refusal(&self, name: &str, error: SinkError, fixed: bool) -> Result<Verdict, SinkError> {
        if fixed || error.is_transient() || matches!(error, SinkError::NotPermitted { .. }) {
            return Err(error);
        }
        tracing::warn!(connector = %self.connector, table = %name, %error,
            "a table the records name cannot be written; its records fail alone");
        Ok(Verdict::Refused(error))
    }

    /// A derived table made ready (read, or created from the first shape), each of
    /// `shapes` fitted to it (columns added under `evolve: add_columns`): the table, and
    /// the shapes it cannot take with why.
    async fn derived_ready(
        &self,
        routing: &Routing,
        name: &Arc<str>,
        known: Option<Arc<ReadyTable>>,
        (shapes, sources): (&ShapesOf<'_>, &[SourcePosition]),
        create: bool,
        evolve: Evolve,
    ) -> Result<(Arc<ReadyTable>, Vec<(usize, String)>), SinkError> {
        let spec = match &known {
            Some(table) => table.spec.clone(),
            None if routing.fixed => self.table.clone(),
            None => self.table.routed(routing.schema.as_deref(), name),
        };
        let cached = known.as_ref().and_then(|t| t.layout.clone());
        let from_cache = cached.is_some();
        let layout = match cached {
            Some(layout) => layout,
            None => self.derived_layout(&spec, shapes, create).await?,
        };
        // A change (a column added, widened or relaxed) makes a new table to cache: the
        // write fits each shape to the cached layout.
        let before = layout.clone();
        let (mut layout, mut refused) = self
            .fit_shapes(&spec, layout, shapes, (evolve, create), sources)
            .await?;
        let mut changed = layout != before;
        // A dry run (no `create`) takes no lock.
        let under_lock = create && self.catalog_reads_race_changes(&spec);
        if !refused.is_empty() && (from_cache || under_lock) {
            // The table may have changed since it was read (a column added by hand or by
            // another process), or be changing now: look again before refusing. Where its
            // catalog can be read half-changed, the look waits for the lock another
            // process changes the table under. What the database refused, or cannot
            // make, stays known: not asked twice.
            let mut read = super::derived::Layout::of(if under_lock {
                self.catalog_under_evolve_lock(&spec).await?
            } else {
                self.catalog(&spec).await?
            });
            read.refused = std::mem::take(&mut layout.refused);
            read.unrelaxable = std::mem::take(&mut layout.unrelaxable);
            (layout, refused) = self
                .fit_shapes(&spec, read, shapes, (evolve, create), sources)
                .await?;
            // Cached again only when it changed: a schema refused batch after batch does
            // not make the table ready (and log it) every time.
            changed = layout != before;
        }
        if let Some(table) = known.filter(|_| !changed) {
            return Ok((table, refused));
        }
        let copy_in = match shapes
            .iter()
            .find_map(|(_, s)| layout.fit(self.dialect, &spec, s).ok())
        {
            Some(fitted) => self.copy_choice(&fitted.spec).await,
            None => CopyIn::none(),
        };
        tracing::info!(connector = %self.connector, table = %spec.name,
            columns = layout.catalog.len(), copy_inserts = copy_in.inserts,
            copy_upserts = copy_in.upserts, "table ready (columns from the records' schemas)");
        let table = Arc::new(ReadyTable {
            spec,
            copy_in,
            layout: Some(layout),
        });
        routing
            .ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone(), table.clone());
        Ok((table, refused))
    }

    /// Creates (when asked to) and checks one table.
    async fn make_ready(&self, spec: TableSpec, create: bool) -> Result<ReadyTable, SinkError> {
        if create && self.create_table {
            self.create(&spec).await?;
        }
        self.check_columns(&spec).await?;
        let copy_in = self.copy_choice(&spec).await;
        tracing::info!(connector = %self.connector, table = %spec.name,
            copy_inserts = copy_in.inserts, copy_upserts = copy_in.upserts, "table ready");
        Ok(ReadyTable {
            spec,
            copy_in,
            layout: None,
        })
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
            return write_runs::<DB>(
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
        // In record order under `sink.transactions: source` (foreign keys on the replica
        // need a parent before its children); otherwise table by table, in name order, so
        // that two transactions writing the same tables lock them in the same order.
        let order = if self.source_order {
            routes.stretches(range)
        } else {
            routes.groups(range)
        };
        for (table, indices) in order {
            let Some(Some(table)) = tables.get(table) else {
                return Err((
                    routes.tables[table].to_string(),
                    sqlx::Error::Protocol(
                        "internal error: a routed table was not made ready".into(),
                    ),
                ));
            };
            if let Some(layout) = &table.layout {
                let stretches = by_shape(routes, &indices).map_err(|why| {
                    (
                        table.spec.name.clone(),
                        sqlx::Error::Protocol(format!("internal error: {why}")),
                    )
                })?;
                for (shape, indices) in stretches {
                    let fitted = layout
                        .fit(self.dialect, &table.spec, shape)
                        .map_err(|misfit| {
                            (
                                table.spec.name.clone(),
                                sqlx::Error::Protocol(format!(
                                    "internal error: a shape the table was not fitted to: {misfit:?}"
                                )),
                            )
                        })?;
                    let projected: Vec<RowOp> =
                        indices.iter().map(|&i| fitted.project(&ops[i])).collect();
                    let runs = runs(projected.iter(), &fitted.spec, self.dialect, dedupe);
                    write_runs::<DB>(
                        conn,
                        self.dialect,
                        &fitted.spec,
                        self.mode,
                        &runs,
                        &table.copy_in,
                    )
                    .await
                    .map_err(|e| (table.spec.name.clone(), e))?;
                }
                continue;
            }
            let runs = runs(
                indices.iter().map(|&i| &ops[i]),
                &table.spec,
                self.dialect,
                dedupe,
            );
            write_runs::<DB>(
                conn,
                self.dialect,
                &table.spec,
                self.mode,
                &runs,
                &table.copy_in,
            )
            .await
            .map_err(|e| (table.spec.name.clone(), e))?;
        }
        Ok(())
    }
}

/// The shapes of the operations that go to table `table` of `routes`: each once, with its
/// index into `routes.shapes`, in the order first met.
fn shapes_of(routes: &TableRoutes, table: usize) -> Vec<(usize, &Arc<DerivedShape>)> {
    let mut seen: Vec<usize> = Vec::new();
    for (op, &t) in routes.of.iter().enumerate() {
        if t as usize != table {
            continue;
        }
        if let Some(&shape) = routes.shape_of.get(op)
            && !seen.contains(&(shape as usize))
        {
            seen.push(shape as usize);
        }
    }
    seen.into_iter()
        .filter_map(|s| Some((s, routes.shapes.get(s)?)))
        .collect()
}

/// Operations of one shape, in record order.
type Stretch<'r> = (&'r Arc<DerivedShape>, Vec<usize>);

/// `indices` (operations of one table, in record order) cut where the shape changes: each
/// stretch of one shape, in record order, so that two rows of one key in two shapes are
/// written in the order of their records.
fn by_shape<'r>(routes: &'r TableRoutes, indices: &[usize]) -> Result<Vec<Stretch<'r>>, String> {
    let mut stretches: Vec<(usize, Vec<usize>)> = Vec::new();
    for &op in indices {
        let shape = *routes
            .shape_of
            .get(op)
            .ok_or_else(|| format!("operation {op} has no derived shape"))?
            as usize;
        match stretches.last_mut() {
            Some((s, ops)) if *s == shape => ops.push(op),
            _ => stretches.push((shape, vec![op])),
        }
    }
    stretches
        .into_iter()
        .map(|(s, ops)| {
            let shape = routes
                .shapes
                .get(s)
                .ok_or_else(|| format!("shape {s} is not among the batch's shapes"))?;
            Ok((shape, ops))
        })
        .collect()
}

/// The names of the tables a sink has written: its one table, or with `routing` (a table
/// template or derived columns) each table made ready so far.
pub(super) fn written_table_names(table: &TableSpec, routing: Option<&Routing>) -> Vec<String> {
    match routing {
        None => vec![table.name.clone()],
        Some(routing) => routing
            .ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|t| t.spec.name.clone())
            .collect(),
    }
}
