//! A table's runs written in order, each the way its kind and the database take it: a
//! patch as `UPDATE`s of the columns it carries (`patch.rs`), a truncate as one statement,
//! the rest on PostgreSQL with `COPY` or `UNNEST` (`db/postgres/write.rs`) and on MySQL and SQLite
//! with multi-row `VALUES` ([`write_run`]). With `sink.version`, writes not newer than
//! their key's tombstone are dropped first, and deletes and truncates leave tombstones
//! (`tombstones.rs`). The batch's transaction (`write.rs`) and the tables of a table
//! template (`routed.rs`) write through [`write_runs`].

use sqlx::{AssertSqlSafe, Executor, IntoArguments};

use super::Run;
use super::backend::{Backend, patch_in_bulk, write_run};
use super::db::postgres;
use super::db::postgres::copy::CopyIn;
use super::dialect::{Dialect, TableSpec};
use super::{patch, tombstones};
use crate::config::{ColumnType, WriteMode};
use crate::map::SqlValue;

/// Writes runs in order: PostgreSQL with `COPY` for inserts and upserts where `copy_in`
/// says the table takes it (`Sink::prepare`) and one `UNNEST` statement per run otherwise,
/// MySQL and SQLite with multi-row `VALUES`.
pub async fn write_runs<DB>(
    conn: &mut DB::Connection,
    dialect: Dialect,
    table: &TableSpec,
    mode: WriteMode,
    runs: &[Run<'_>],
    copy_in: &CopyIn,
) -> Result<(), sqlx::Error>
where
    DB: Backend,
    DB::Connection: 'static,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    for run in runs {
        if let Run::Patch(rows) = run {
            // With a version: a patch older than its key's tombstone came after the row
            // was deleted.
            let rows = tombstones::drop_deleted::<DB>(conn, dialect, table, rows.clone()).await?;
            patch::write_patches::<DB>(conn, dialect, table, &rows).await?;
            continue;
        }
        if table.version.is_some() {
            write_versioned::<DB>(conn, dialect, table, mode, run, copy_in).await?;
            continue;
        }
        write_one::<DB>(conn, dialect, table, mode, run, copy_in).await?;
    }
    Ok(())
}

/// One run on PostgreSQL (`db/postgres/write.rs`) or with multi-row `VALUES`.
async fn write_one<DB>(
    conn: &mut DB::Connection,
    dialect: Dialect,
    table: &TableSpec,
    mode: WriteMode,
    run: &Run<'_>,
    copy_in: &CopyIn,
) -> Result<(), sqlx::Error>
where
    DB: Backend,
    DB::Connection: 'static,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    if let Run::Truncate(version) = run {
        let mut query = sqlx::query::<DB>(AssertSqlSafe(dialect.truncate(table)));
        if let Some(version) = version {
            query = DB::bind_value(query, version, ColumnType::Text);
        }
        query.execute(&mut *conn).await?;
        return Ok(());
    }
    let any: &mut dyn std::any::Any = &mut *conn;
    match any.downcast_mut::<sqlx::PgConnection>() {
        Some(pg) => postgres::write::write_run(pg, table, mode, run, copy_in).await,
        None => write_run::<DB>(conn, dialect, table, mode, run).await,
    }
}

/// One run of a table with a version column: writes not newer than their key's tombstone
/// are dropped first; deletes and truncates leave their tombstones
/// (`sink/tombstones.rs`).
async fn write_versioned<DB>(
    conn: &mut DB::Connection,
    dialect: Dialect,
    table: &TableSpec,
    mode: WriteMode,
    run: &Run<'_>,
    copy_in: &CopyIn,
) -> Result<(), sqlx::Error>
where
    DB: Backend,
    DB::Connection: 'static,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    match run {
        Run::Write(rows) => {
            let kept = tombstones::drop_deleted::<DB>(conn, dialect, table, rows.clone()).await?;
            write_one::<DB>(conn, dialect, table, mode, &Run::Write(kept), copy_in).await
        }
        Run::Delete(keys) => {
            write_one::<DB>(conn, dialect, table, mode, run, copy_in).await?;
            let width = table.key.len();
            let deletes: Vec<(Option<&[SqlValue]>, &SqlValue)> = keys
                .iter()
                .filter_map(|k| Some((Some(&k[..width]), k.get(width)?)))
                .collect();
            tombstones::remember::<DB>(conn, dialect, table, &deletes).await
        }
        Run::Patch(_) => Err(patch_in_bulk()),
        Run::Truncate(version) => {
            write_one::<DB>(conn, dialect, table, mode, run, copy_in).await?;
            match version {
                Some(version) => {
                    tombstones::remember::<DB>(conn, dialect, table, &[(None, version)]).await
                }
                None => Ok(()),
            }
        }
    }
}
