//! What PostgreSQL's catalog says of a table: its columns with their types and key
//! positions ([`columns_query`]), and what decides how rows go into it: whether it
//! takes `COPY` as it takes an `INSERT`, and whether the key is the arbiter that
//! `ON CONFLICT` names (so that an optimistic `COPY` of upserts can only end in a unique
//! violation). A catalog that cannot be read means the plain way, never a failure.

use sqlx::PgPool;

use super::copy::CopyIn;
use super::write::{copy_enabled, upsert_copy_enabled};
use crate::config::ElementType;
use crate::config::{ColumnType, WriteMode};
use crate::sink::db::dialect::{Dialect, TableSpec};
use crate::sink::db::table::{CatalogColumn, Change, decimal_of};
use crate::sink::db::{EVOLVE_STATEMENT_BOUND, EvolveLock};

/// How `table` takes rows through `COPY`: only a table that takes it as it takes an
/// `INSERT` ([`takes_copy`]); inserts always; upserts (tried first, `copy.rs`) when the
/// key's columns are exactly those of one of the table's unique indexes that is checked
/// at once (not deferred), has no predicate and no expression: the arbiter that
/// `ON CONFLICT` names, so that a key already present can only end the `COPY` with a
/// unique violation.
pub(in crate::sink) async fn copy_choice(
    pool: &PgPool,
    mode: WriteMode,
    table: &TableSpec,
    connector: &str,
) -> CopyIn {
    match mode {
        WriteMode::Insert => CopyIn::new(takes_copy(pool, table, connector).await, false),
        WriteMode::Upsert if upsert_copy_enabled() => {
            let takes = takes_copy(pool, table, connector).await
                && key_is_arbiter(pool, table, connector).await;
            CopyIn::new(false, takes)
        }
        _ => CopyIn::none(),
    }
}

/// Whether the key's columns are exactly those of a unique, immediate, plain index of
/// `table` (see [`copy_choice`]).
async fn key_is_arbiter(pool: &PgPool, table: &TableSpec, connector: &str) -> bool {
    let key: Vec<String> = table
        .key
        .iter()
        .map(|&i| table.columns[i].0.clone())
        .collect();
    if key.is_empty() {
        return false;
    }
    let found: Result<bool, sqlx::Error> = sqlx::query_scalar(
        // The index's own key columns (indnkeyatts: not its INCLUDE columns), usable
        // (valid, ready, live: not one CREATE INDEX CONCURRENTLY is still building),
        // and no deferrable unique index on the same columns (ON CONFLICT would take
        // it as an arbiter too, and refuse).
        "WITH k AS (SELECT array_agg(x ORDER BY x) AS cols FROM unnest($2::text[]) AS x), \
         idx AS (SELECT i.indimmediate, i.indisvalid AND i.indisready AND i.indislive AS usable, \
             (SELECT array_agg(a.attname::text ORDER BY a.attname::text) FROM pg_attribute a \
              WHERE a.attrelid = i.indrelid \
                AND a.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts - 1])) AS cols \
           FROM pg_index i \
           WHERE i.indrelid = to_regclass($1) AND i.indisunique \
             AND i.indpred IS NULL AND i.indexprs IS NULL) \
         SELECT EXISTS (SELECT 1 FROM idx, k WHERE idx.cols = k.cols AND idx.indimmediate AND idx.usable) \
            AND NOT EXISTS (SELECT 1 FROM idx, k WHERE idx.cols = k.cols AND NOT idx.indimmediate)",
    )
    .bind(table.quoted(Dialect::Postgres))
    .bind(&key)
    .fetch_one(pool)
    .await;
    match found {
        Ok(true) => true,
        Ok(false) => {
            tracing::info!(connector, table = %table.name, key = ?key,
                "upserts go through INSERT … ON CONFLICT, not COPY: the key is not the columns of one of the table's unique indexes checked at once");
            false
        }
        Err(error) => {
            tracing::info!(connector, table = %table.name, %error,
                "upserts go through INSERT … ON CONFLICT, not COPY: the catalog cannot be read");
            false
        }
    }
}

/// Whether `table` takes rows through `COPY` as it takes an `INSERT`: a plain or
/// partitioned table (COPY refuses views, and bypasses rules), without row-level
/// security (COPY FROM refuses it), whose configured columns have exactly sluice's
/// types (COPY parses each value with the column's input function, where `UNNEST`
/// assigned it with a cast: a double into an integer column, a UTC instant into a
/// `timestamp` would land otherwise). Any other table, or a catalog that cannot be
/// read, is written with `UNNEST`, as before `COPY`.
async fn takes_copy(pool: &PgPool, table: &TableSpec, connector: &str) -> bool {
    if !copy_enabled() {
        return false;
    }
    let found: Result<Option<(String, bool, bool, String)>, sqlx::Error> = sqlx::query_as(
        "SELECT c.relkind::text, c.relrowsecurity, \
         EXISTS (SELECT 1 FROM pg_rewrite r WHERE r.ev_class = c.oid AND r.rulename <> '_RETURN'), \
         (SELECT COALESCE(json_agg(json_build_array(a.attname, format_type(a.atttypid, a.atttypmod))), '[]')::text \
          FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) \
         FROM pg_class c WHERE c.oid = to_regclass($1)",
    )
    .bind(table.quoted(Dialect::Postgres))
    .fetch_optional(pool)
    .await;
    let why_not = match found {
        Err(e) => Some(format!("the catalog cannot be read: {e}")),
        Ok(None) => Some("the table is not in the catalog".to_string()),
        Ok(Some((kind, rls, rules, columns))) => {
            let columns: Vec<(String, String)> = serde_json::from_str(&columns).unwrap_or_default();
            let mismatch = table.columns.iter().find(|(name, t)| {
                !columns
                    .iter()
                    .any(|(n, found)| n == name && *found == type_name(*t).as_ref())
            });
            if kind != "r" && kind != "p" {
                Some(format!("it is not a plain table (relkind {kind})"))
            } else if rls {
                Some("it has row-level security".to_string())
            } else if rules {
                Some("it has rules".to_string())
            } else {
                mismatch.map(|(name, t)| {
                    format!(
                        "column {name} is not of type {} (sluice's {})",
                        type_name(*t),
                        t.name()
                    )
                })
            }
        }
    };
    match &why_not {
        None => tracing::debug!(connector, table = %table.name, "inserts go through COPY"),
        Some(why) => tracing::info!(connector, table = %table.name, why = %why,
            "inserts go through INSERT … UNNEST, not COPY"),
    }
    why_not.is_none()
}

/// A column type as PostgreSQL's `format_type` names the type sluice creates for it.
fn type_name(column_type: ColumnType) -> std::borrow::Cow<'static, str> {
    use ColumnType::*;
    std::borrow::Cow::Borrowed(match column_type {
        Smallint => "smallint",
        Bigint => "bigint",
        Int => "integer",
        Double => "double precision",
        Numeric => "numeric",
        Decimal { precision, scale } => {
            return format!("numeric({precision},{scale})").into();
        }
        Text => "text",
        Bool => "boolean",
        Timestamp => "timestamp without time zone",
        Timestamptz => "timestamp with time zone",
        Date => "date",
        Time => "time without time zone",
        Json => "jsonb",
        Bytes => "bytea",
        Uuid => "uuid",
        Array(element) => return format!("{}[]", type_name(element.scalar())).into(),
    })
}

/// The portable types a column of a catalog type takes (`format_type`'s spelling, lower
/// case), when sluice creates it.
pub(in crate::sink) fn portable_types(sql_type: &str) -> Option<Vec<ColumnType>> {
    use ColumnType::*;
    if let Some(element) = sql_type.strip_suffix("[]") {
        let element = match element {
            e if e.starts_with("numeric") => ElementType::Numeric,
            e => ElementType::of(*portable_types(e.trim())?.first()?)?,
        };
        return Some(vec![Array(element)]);
    }
    if let Some(decimal) = decimal_of(sql_type, "numeric") {
        return Some(vec![decimal]);
    }
    Some(vec![match sql_type {
        "smallint" => Smallint,
        "bigint" => Bigint,
        "integer" => Int,
        "double precision" => Double,
        "numeric" => Numeric,
        "text" => Text,
        "boolean" => Bool,
        "timestamp without time zone" => Timestamp,
        "timestamp with time zone" => Timestamptz,
        "date" => Date,
        "time without time zone" => Time,
        "jsonb" => Json,
        "bytea" => Bytes,
        "uuid" => Uuid,
        _ => return None,
    }])
}

/// Whether the connection's user may insert into and update `table` (quoted), asked
/// without writing: two integers, 1 for yes.
pub(in crate::sink) fn write_privileges(table: &str) -> String {
    let literal = table.replace('\'', "''");
    format!(
        "SELECT CAST(CAST(has_table_privilege(to_regclass('{literal}'), 'INSERT') AS INT) AS BIGINT), \
         CAST(CAST(has_table_privilege(to_regclass('{literal}'), 'UPDATE') AS INT) AS BIGINT)"
    )
}

/// A bind placeholder cast to its column's type: the bulk writers bind timestamps,
/// numerics, JSON and UUIDs as text. A timestamptz is bound as UTC text without its
/// offset: without one, PostgreSQL would read it in the session's time zone.
pub(in crate::sink) fn typed_param(param: &str, column_type: ColumnType) -> String {
    match column_type {
        ColumnType::Timestamptz => format!("({param}::TEXT || '+00')::TIMESTAMPTZ"),
        column_type => format!(
            "{param}::{}",
            Dialect::Postgres.type_name(column_type, false)
        ),
    }
}

/// The statement that lists `spec`'s columns: name, type as `format_type` spells it
/// (lower case), position in the primary key (0 outside it), in the table's order.
pub(in crate::sink) fn columns_query(spec: &TableSpec) -> String {
    format!(
        "SELECT a.attname::text, lower(format_type(a.atttypid, a.atttypmod)), \
         COALESCE((SELECT k.n FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(num, n) \
         WHERE k.num = a.attnum), 0)::text, \
         CASE WHEN a.attnotnull THEN '0' ELSE '1' END, CASE WHEN a.atthasdef THEN '1' ELSE '0' END, \
         NULL::text \
         FROM pg_attribute a LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary \
         WHERE a.attrelid = to_regclass({}) AND a.attnum > 0 \
         AND NOT a.attisdropped ORDER BY a.attnum",
        literal(&spec.quoted(Dialect::Postgres))
    )
}

/// `ALTER TABLE … ALTER COLUMN`: PostgreSQL keeps the column's default and constraints
/// through a change of type, and checks every stored value against the new one.
pub(in crate::sink) fn alter_column(
    spec: &TableSpec,
    column: &CatalogColumn,
    change: &Change,
) -> Result<String, String> {
    let table = spec.quoted(Dialect::Postgres);
    let name = Dialect::Postgres.quote_one(&column.name);
    match change {
        Change::Widen { to, .. } => Ok(format!(
            "ALTER TABLE {table} ALTER COLUMN {name} TYPE {}",
            Dialect::Postgres.type_name(*to, false)
        )),
        Change::Relax { .. } => Ok(format!(
            "ALTER TABLE {table} ALTER COLUMN {name} DROP NOT NULL"
        )),
        Change::Add { .. } => Err("a new column is added, not altered".into()),
    }
}

/// A string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The lock that serialises the processes changing `spec`'s table: a table lock that lets
/// readers on and keeps other writers and DDL out until the transaction ends. Its
/// statements are bounded: an `ALTER` that waits behind a long reader gives up after
/// [`EVOLVE_LOCK_WAIT`] (and is tried again with backoff) instead of holding every new
/// query of the table behind it, and one that runs past [`EVOLVE_STATEMENT_BOUND`] (the
/// rewrite of a large table for a widened integer) ends on the server, rolled back, before
/// the batch's own time bound closes the connection.
pub(in crate::sink) fn evolve_lock(spec: &TableSpec) -> EvolveLock {
    EvolveLock::UntilCommit(vec![
        format!("SET LOCAL lock_timeout = '{}s'", EVOLVE_LOCK_WAIT.as_secs()),
        format!(
            "SET LOCAL statement_timeout = '{}s'",
            EVOLVE_STATEMENT_BOUND.as_secs()
        ),
        format!(
            "LOCK TABLE {} IN SHARE ROW EXCLUSIVE MODE",
            spec.quoted(Dialect::Postgres)
        ),
    ])
}

/// How long a change of a table waits for its lock.
const EVOLVE_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
