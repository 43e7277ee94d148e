//! Changing a derived table for its records' schema (`sink.evolve`): which changes a
//! schema needs ([`Sink::fit_shapes`], from the fit in `layout.rs`), whether the connector
//! allows them, and making them once across processes, each recorded in
//! `sluice_schema_changes` ([`Sink::evolve`]).

use std::sync::Arc;

use super::layout::{ASK_AGAIN_AFTER, same_name};
use super::{CatalogColumn, Change, Layout, Misfit, read_catalog};
use crate::config::Evolve;
use crate::map::DerivedShape;
use crate::sink::backend::Backend;
use crate::sink::db::{self, EVOLVE_STATEMENT_BOUND, EvolveLock};
use crate::sink::dialect::TableSpec;
use crate::sink::{Checkout, Sink, SinkError, each_pool, error};

/// Changes with a statement each: to run, or that this database cannot make, with why.
type Planned = Vec<(Change, String)>;

impl Sink {
    /// Makes `changes` to `spec`'s table (`sink.evolve`), once across processes: under a
    /// lock, it reads the table again and makes what is still to be made (a column another
    /// process added, widened or relaxed meanwhile is no error). Each statement is recorded
    /// in `sluice_schema_changes` with `source`, the record that needed it: in the same
    /// transaction where DDL is transactional (PostgreSQL, SQLite), right after it where it
    /// commits by itself (MySQL). Runs outside any batch's transaction, on a connection
    /// that is closed rather than reused when the work is cancelled half-way (a time
    /// bound, a stop). Returns the table's columns after, and the changes this database
    /// cannot make, with why.
    pub(in crate::sink) async fn evolve(
        &self,
        spec: &TableSpec,
        changes: &[Change],
        source: Option<&(String, i32, i64)>,
    ) -> Result<(Vec<CatalogColumn>, Planned), SinkError> {
        let dialect = self.dialect;
        let database = db::of(dialect);
        let table = spec.name.clone();
        let db_error = |action: &'static str| {
            let table = table.clone();
            move |source: sqlx::Error| {
                if error::is_not_permitted(&source) {
                    SinkError::NotPermitted {
                        action,
                        table: table.clone(),
                        source,
                    }
                } else {
                    SinkError::Database {
                        action,
                        table: table.clone(),
                        source,
                    }
                }
            }
        };
        let catalog_sql = (database.columns_query)(spec);
        let record = format!(
            "INSERT INTO sluice_schema_changes (connector, table_name, step, statement, \
             source_topic, source_partition, source_offset, applied_at) VALUES ({})",
            (1..=8)
                .map(|n| dialect.param(n))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let lock = (database.evolve_lock)(spec);
        // Where DDL is transactional, the changes are made in one transaction.
        let transactional = !matches!(lock, EvolveLock::Named { .. });
        let mut made: Vec<&'static str> = Vec::new();
        let (present, cannot) = each_pool!(self, pool, DB => {
            let mut checkout = Checkout::<DB>::take(pool).await.map_err(db_error("evolve"))?;
            let conn = &mut *checkout.conn;
            if transactional {
                sqlx::query::<DB>(sqlx::AssertSqlSafe(dialect.begin().to_string()))
                    .execute(&mut *conn)
                    .await
                    .map_err(db_error("evolve"))?;
            }
            let result: Result<(Vec<CatalogColumn>, Planned), SinkError> = async {
                match &lock {
                    EvolveLock::Transaction => {}
                    EvolveLock::UntilCommit(take) => {
                        for statement in take {
                            sqlx::query::<DB>(sqlx::AssertSqlSafe(statement.clone()))
                                .execute(&mut *conn)
                                .await
                                .map_err(db_error("lock for evolving"))?;
                        }
                    }
                    EvolveLock::Named { take, wait_seconds, .. } => {
                        let row = sqlx::query::<DB>(sqlx::AssertSqlSafe(take.clone()))
                            .fetch_one(&mut *conn)
                            .await
                            .map_err(db_error("lock for evolving"))?;
                        if DB::text_at(&row, 0).ok().flatten().as_deref() != Some("1") {
                            return Err(SinkError::Timeout {
                                action: "lock for evolving",
                                table: table.clone(),
                                after: std::time::Duration::from_secs(*wait_seconds),
                            });
                        }
                    }
                }
                let present = read_catalog::<DB>(&mut *conn, catalog_sql.clone())
                    .await
                    .map_err(db_error("read the columns of"))?;
                let (run, mut cannot) = statements(dialect, spec, &self.without_version(spec, present.clone()), changes);
                if run.is_empty() {
                    // Nothing to make (made meanwhile, or only a read under the lock).
                    return Ok((present, cannot));
                }
                for (change, statement) in run {
                    let step = change.step();
                    let started = std::time::Instant::now();
                    tracing::info!(connector = %self.connector, table = %table, step,
                        statement = %statement, "changing a table for its records' schema (sink.evolve)");
                    // Under a savepoint where DDL is transactional: a failed ALTER
                    // aborts PostgreSQL's transaction, and the catalog is read after it.
                    let savepoint = |verb: &str| sqlx::AssertSqlSafe(format!("{verb} sluice_alter"));
                    if transactional {
                        sqlx::query::<DB>(savepoint("SAVEPOINT"))
                            .execute(&mut *conn)
                            .await
                            .map_err(db_error("alter"))?;
                    }
                    let altered = sqlx::query::<DB>(sqlx::AssertSqlSafe(statement.clone()))
                        .execute(&mut *conn)
                        .await;
                    if transactional {
                        let verb = if altered.is_ok() { "RELEASE SAVEPOINT" } else { "ROLLBACK TO SAVEPOINT" };
                        sqlx::query::<DB>(savepoint(verb))
                            .execute(&mut *conn)
                            .await
                            .map_err(db_error("alter"))?;
                    }
                    match altered {
                        Ok(_) => {}
                        // Added meanwhile (MySQL takes no lock on a table here).
                        Err(e) if error::is_duplicate_column(&e) => continue,
                        // Ran to its bound (a rewrite too large for a batch's time):
                        // the schema's records fail alone, naming it; the rest goes on.
                        Err(e) if started.elapsed() + std::time::Duration::from_secs(1) >= EVOLVE_STATEMENT_BOUND => {
                            cannot.push((change.clone(), format!(
                                "{}: it ran past {} s and was ended ({e}); the table is too large to change within a batch: make the change by hand, and sluice finds it made",
                                change.describe(), EVOLVE_STATEMENT_BOUND.as_secs()
                            )));
                            continue;
                        }
                        Err(e) => {
                            let error = db_error("alter")(e);
                            if error.is_transient() || matches!(error, SinkError::NotPermitted { .. }) {
                                return Err(error);
                            }
                            // The database refuses this change (a view or a foreign key
                            // on the column, say): the schema's records fail alone.
                            cannot.push((change.clone(), format!("{}: the database refused it: {error}", change.describe())));
                            continue;
                        }
                    }
                    let applied_at = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
                    sqlx::query::<DB>(sqlx::AssertSqlSafe(record.clone()))
                        .bind(self.connector.as_str())
                        .bind(table.as_str())
                        .bind(step)
                        .bind(statement.as_str())
                        .bind(source.map(|s| s.0.as_str()))
                        .bind(source.map(|s| s.1))
                        .bind(source.map(|s| s.2))
                        .bind(applied_at)
                        .execute(&mut *conn)
                        .await
                        .map_err(db_error("record a schema change in"))?;
                    made.push(step);
                }
                let present = read_catalog::<DB>(&mut *conn, catalog_sql.clone())
                    .await
                    .map_err(db_error("read the columns of"))?;
                Ok((present, cannot))
            }
            .await;
            let end = match &lock {
                EvolveLock::Named { release, .. } => release.clone(),
                _ if result.is_ok() => "COMMIT".to_string(),
                _ => "ROLLBACK".to_string(),
            };
            let ended = sqlx::query::<DB>(sqlx::AssertSqlSafe(end)).execute(&mut *conn).await;
            if ended.is_ok() {
                checkout.ran_to_completion();
            }
            let present = result?;
            ended.map_err(db_error("evolve"))?;
            present
        });
        if let Some(metrics) = self.schema_metrics() {
            for step in made {
                metrics.schema_changed(step);
            }
        }
        Ok((self.without_version(spec, present), cannot))
    }

    /// Fits each of `shapes` to the derived table `table`, changing the table as
    /// `evolve` allows: the table as it stands after, and per shape (an index into
    /// `shapes`) why it cannot be written. `sources` gives each shape's first record.
    /// Without `apply` (a dry run) nothing is changed: a shape that needs a change is
    /// refused with the statements a run would execute.
    pub(in crate::sink) async fn fit_shapes(
        &self,
        spec: &TableSpec,
        mut layout: Layout,
        shapes: &[(usize, &Arc<DerivedShape>)],
        (evolve, apply): (Evolve, bool),
        sources: &[(String, i32, i64)],
    ) -> Result<(Layout, Vec<(usize, String)>), SinkError> {
        let mut refused = Vec::new();
        for &(index, shape) in shapes {
            let mut changes = match layout.fit(self.dialect, spec, shape) {
                Ok(_) => Vec::new(),
                Err(Misfit::Incompatible(why)) => {
                    refused.push((index, why));
                    continue;
                }
                Err(Misfit::Needs(changes)) => changes,
            };
            if evolve.relax {
                changes.extend(layout.relaxable(self.dialect, shape));
            }
            if changes.is_empty() {
                continue;
            }
            if let Some(why) = not_allowed(&changes, evolve) {
                refused.push((index, why));
                continue;
            }
            if !apply {
                let (run, cannot) = statements(self.dialect, spec, &layout.catalog, &changes);
                let mut why = format!(
                    "a run would first change the table (sink.evolve; a dry run changes nothing): {}",
                    run.iter()
                        .map(|(_, statement)| statement.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                );
                if !cannot.is_empty() {
                    let cannot: Vec<String> = cannot.into_iter().map(|(_, why)| why).collect();
                    why = format!("{why}; and cannot: {}", cannot.join("; "));
                }
                refused.push((index, why));
                continue;
            }
            // Refused before, while the table stayed cached: refused again, unasked.
            let known: Vec<&str> = changes
                .iter()
                .filter_map(|change| {
                    let change = change.describe();
                    layout
                        .refused
                        .iter()
                        .find(|(refused, _, at)| {
                            *refused == change && at.elapsed() < ASK_AGAIN_AFTER
                        })
                        .map(|(_, why, _)| why.as_str())
                })
                .collect();
            if !known.is_empty() {
                refused.push((index, known.join("; ")));
                continue;
            }
            let (catalog, cannot) = self.evolve(spec, &changes, sources.get(index)).await?;
            let mut unrelaxable = std::mem::take(&mut layout.unrelaxable);
            let mut refused_before = std::mem::take(&mut layout.refused);
            layout = Layout::of(catalog);
            // A column this database cannot make nullable refuses no shape: its records
            // go on, and a NULL into it fails alone, as without `relax`.
            let (relax, required): (Vec<_>, Vec<_>) = cannot
                .into_iter()
                .partition(|(change, _)| matches!(change, Change::Relax { .. }));
            for (change, why) in relax {
                tracing::warn!(connector = %self.connector, table = %spec.name, %why,
                    "sink.evolve: relax cannot make this column nullable; a NULL into it fails its record alone");
                unrelaxable.push(change.column().to_string());
            }
            layout.unrelaxable = unrelaxable;
            let now = std::time::Instant::now();
            refused_before.retain(|(change, _, _)| {
                !required
                    .iter()
                    .any(|(again, _)| again.describe() == *change)
            });
            refused_before.extend(
                required
                    .iter()
                    .map(|(change, why)| (change.describe(), why.clone(), now)),
            );
            layout.refused = refused_before;
            if !required.is_empty() {
                refused.push((
                    index,
                    required
                        .into_iter()
                        .map(|(_, why)| why)
                        .collect::<Vec<_>>()
                        .join("; "),
                ));
                continue;
            }
            if let Err(misfit) = layout.fit(self.dialect, spec, shape) {
                refused.push((
                    index,
                    match misfit {
                        Misfit::Incompatible(why) => why,
                        Misfit::Needs(still) => format!(
                            "the table still needs: {}",
                            still
                                .iter()
                                .map(Change::describe)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    },
                ));
            }
        }
        Ok((layout, refused))
    }
}

/// The statements that make `changes` on `spec`'s table as it stands (`present`), each
/// with its step, leaving out what is made already (a column another process added,
/// widened or relaxed meanwhile); and the changes this database cannot make, with why.
fn statements(
    dialect: crate::sink::Dialect,
    spec: &TableSpec,
    present: &[CatalogColumn],
    changes: &[Change],
) -> (Planned, Planned) {
    let database = db::of(dialect);
    let quoted = spec.quoted(dialect);
    let mut run = Vec::new();
    let mut cannot = Vec::new();
    for change in changes {
        let column = present
            .iter()
            .find(|c| same_name(dialect, &c.name, change.column()));
        let statement = match (change, column) {
            (Change::Add { column, to }, None) => Ok(format!(
                "ALTER TABLE {quoted} ADD COLUMN {} {}",
                dialect.quote_one(column),
                dialect.type_name(*to, false)
            )),
            // Added, widened or relaxed meanwhile; a column gone is left to the fit.
            (Change::Add { .. }, Some(_)) | (_, None) => continue,
            (Change::Widen { from, .. }, Some(c)) if c.sql_type != *from => continue,
            (Change::Relax { .. }, Some(c)) if c.nullable => continue,
            (change, Some(c)) => (database.alter_column)(spec, c, change),
        };
        match statement {
            Ok(statement) => run.push((change.clone(), statement)),
            Err(why) => cannot.push((change.clone(), format!("{}: {why}", change.describe()))),
        }
    }
    (run, cannot)
}

/// Why `changes` cannot be made under `evolve`, naming the step each needs; `None` when
/// every one is allowed.
pub(super) fn not_allowed(changes: &[Change], evolve: Evolve) -> Option<String> {
    let allowed = |change: &Change| match change {
        Change::Add { .. } => evolve.add_columns,
        Change::Widen { .. } => evolve.widen,
        Change::Relax { .. } => evolve.relax,
    };
    let setting = if evolve.is_none() {
        "none".to_string()
    } else {
        format!("[{}]", evolve.names().join(", "))
    };
    let missing: Vec<String> = changes
        .iter()
        .filter(|c| !allowed(c))
        .filter_map(|c| match c {
            Change::Add { column, to } => Some(format!("{column} ({})", to.name())),
            _ => None,
        })
        .collect();
    if !missing.is_empty() {
        return Some(format!(
            "the table has no column for field(s) {} and sink.evolve is {setting}: set evolve: add_columns, or add the column(s)",
            missing.join(", ")
        ));
    }
    let widen: Vec<String> = changes
        .iter()
        .filter(|c| !allowed(c))
        .map(|c| match c {
            Change::Widen {
                column,
                field,
                from,
                to,
            } => format!(
                "field {field} is {} in the schema, and column {column} is {from}",
                to.name()
            ),
            other => other.describe(),
        })
        .collect();
    (!widen.is_empty()).then(|| {
        format!(
            "{}: a type change, and sink.evolve is {setting}: add widen to sink.evolve to alter the column to the wider type, or alter it by hand",
            widen.join("; ")
        )
    })
}
