//! One folder per database: what sluice does differently on PostgreSQL (`postgres/`),
//! MySQL and MariaDB (`mysql/`) and SQLite (`sqlite/`).
//!
//! Each folder owns its error codes (what a refusal, a missing privilege, a lost
//! connection look like in that database's words: `errors.rs`), the migrations of
//! sluice's own tables (their statements, the lock that serialises processes starting at
//! once: `migrations.rs`) and its pool with the settings of each connection (`pool.rs`).
//! `table.rs` holds a table as its catalog describes it and the changes `sink.evolve` may
//! make, which each folder reads and writes statements for. PostgreSQL's folder also owns
//! its fast write path (`COPY`, and the `UNNEST` statements) and
//! the catalog reads that decide it. Each folder's `words.rs` holds what its SQL spells its
//! own way ([`Words`]: quoting, placeholders, type names, its clock, the multi-row
//! statements of the generic writer); what PostgreSQL and SQLite share word for word is in
//! `portable.rs`. `dialect.rs` and `row_statements.rs` put statements together from those
//! words without naming a database; the pools, and the `each_pool!` dispatch of a body
//! written once, are in `pools.rs`. Outside the folders, no code of the sink names a
//! database: it asks [`of`] (a database's answers) or the dialect.
//!
//! The rest of the sink asks this module, never a folder, what a database error means
//! ([`read_error`], [`write_error`]): the database that raised it answers.

pub mod dialect;
pub(super) mod mysql;
pub(super) mod pools;
mod portable;
pub(super) mod postgres;
mod row_statements;
pub(super) mod sqlite;
pub(super) mod table;

use sqlx::error::DatabaseError;

use crate::config::ColumnType;
use dialect::{Dialect, TableSpec};
use table::{CatalogColumn, Change};

/// How long a task waits for a connection to a database server, or for a new one to be
/// made, before the error is treated as transient.
const ACQUIRE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The pool options every database server takes alike: at most
/// `databases.max_connections`, none kept open for nothing, an idle one closed after
/// `databases.idle` (0: never), [`ACQUIRE_TIMEOUT`].
fn server_pool<DB: sqlx::Database>(
    settings: &crate::config::DatabasesConfig,
) -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .max_connections(settings.max_connections)
        .min_connections(0)
        .idle_timeout(Some(settings.idle.0).filter(|d| !d.is_zero()))
        .acquire_timeout(ACQUIRE_TIMEOUT)
}

/// Makes one connection with `options` and closes it: a wrong address or password, or a
/// server out of connections, is reported at once with the server's own words. (The pool's
/// own first connection would retry a refusal it deems passing, such as "too many
/// clients", until its acquire timeout, and report only that it timed out.)
async fn first_connection<O>(options: O) -> Result<O, sqlx::Error>
where
    O: sqlx::ConnectOptions,
    O::Connection: Sized,
{
    let conn = options.connect().await?;
    let _ = sqlx::Connection::close(conn).await;
    Ok(options)
}

/// What a database error means for the batch that met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Worth waiting for: the connection, the server or a lock will come back (lost
    /// connections, pool timeouts, deadlocks, serialization failures, lock and statement
    /// timeouts, a server shutting down or read-only during a failover, resources
    /// exhausted).
    Transient,
    /// The database refused the rows themselves: a constraint (unique, foreign key, check,
    /// not null), a value it cannot store (too long, out of range, bad encoding), bytes its
    /// protocol cannot carry (a NUL), or a limit a value or a row can pass (an index entry
    /// or a row too large, a name too long, too many columns). Never transient: the same
    /// rows fail again. The refused rows are isolated and handled by the error policy.
    Refused,
    /// Anything else (a missing table, a privilege, a syntax error): retrying cannot help.
    Permanent,
}

/// What a database's own codes say of one of its errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ErrorReading {
    /// What the error means for the batch.
    pub(super) class: ErrorClass,
    /// The database refused sluice a privilege (to create or alter a table).
    pub(super) not_permitted: bool,
    /// The database refused to add a column that is already there.
    pub(super) duplicate_column: bool,
}

impl ErrorReading {
    /// An error no database here claims: permanent, and nothing more is known.
    const UNKNOWN: ErrorReading = ErrorReading {
        class: ErrorClass::Permanent,
        not_permitted: false,
        duplicate_column: false,
    };
}

/// Reads a database error with the codes of the database that raised it.
pub(super) fn read_error(error: &dyn DatabaseError) -> ErrorReading {
    ALL.iter()
        .find_map(|database| (database.read_error)(error))
        .unwrap_or(ErrorReading::UNKNOWN)
}

/// Writes a database error as a user reads it: as its database words it for users where
/// sqlx's text is not right (PostgreSQL), else as sqlx writes it.
pub(super) fn write_error(
    error: &dyn DatabaseError,
    f: &mut std::fmt::Formatter<'_>,
) -> std::fmt::Result {
    for database in ALL {
        if let Some(written) = (database.write_error)(error, f) {
            return written;
        }
    }
    write!(f, "error returned from database: {error}")
}

/// How one database migrates sluice's own tables (`sink/maintenance/schema.rs` runs them).
pub(super) struct Migrations {
    /// The statements that take the tables from `version - 1` to `version` (none for a
    /// version that changed nothing on this database).
    pub(super) steps: fn(i64) -> Vec<&'static str>,
    /// Creates `sluice_schema`, the one row that holds the version.
    pub(super) schema_table: &'static str,
    /// What serialises the processes that start at once.
    pub(super) lock: SchemaLock,
    /// Whether an error of a step means that step was done already (a database that
    /// commits DDL statement by statement: a migration stopped midway).
    pub(super) already_done: fn(&dyn DatabaseError) -> bool,
}

/// The lock a migration runs under, in the migration's transaction.
pub(super) enum SchemaLock {
    /// The transaction holds it from its start (SQLite's `BEGIN IMMEDIATE`).
    Transaction,
    /// A statement that takes a lock the transaction's end releases.
    UntilCommit(&'static str),
    /// A named lock held by the connection: `take` answers 1 once it is held (and gives
    /// up after `wait_seconds`), `release` lets it go before the connection goes back to
    /// the pool.
    Named {
        take: &'static str,
        wait_seconds: i64,
        release: &'static str,
    },
}

/// How long one statement changing a table (`sink.evolve`) may run, where the database
/// bounds it (PostgreSQL's `statement_timeout`): under the batch's own time bound (120 s),
/// so that the server ends it, rolled back, before sluice gives the connection up.
pub(super) const EVOLVE_STATEMENT_BOUND: std::time::Duration = std::time::Duration::from_secs(90);

/// The lock that serialises the processes adding columns to one table
/// (`evolve: add_columns`, `sink/derived/`).
pub(super) enum EvolveLock {
    /// The transaction holds it from its start (SQLite's `BEGIN IMMEDIATE`); the columns
    /// are added in the transaction.
    Transaction,
    /// Statements at the transaction's start take it (and set the transaction's bounds),
    /// its end releases it; the changes are made in the transaction.
    UntilCommit(Vec<String>),
    /// A named lock held by the connection, for a database whose DDL commits by itself:
    /// `take` answers `1` once it is held (and gives up after `wait_seconds`), `release`
    /// lets it go.
    Named {
        take: String,
        wait_seconds: u64,
        release: String,
    },
}

/// The statements on sluice's own tables whose words differ between databases
/// (`db/<name>/own_tables.rs`). Parameters are bound in the order each names.
pub(super) struct OwnTables {
    /// `sluice_control`: sets a connector's target state; binds connector, target,
    /// updated_at.
    pub(super) write_target: &'static str,
    /// `sluice_control`: counts a restart request (the target stays); binds connector,
    /// include tasks, only failed, updated_at.
    pub(super) request_restart: &'static str,
    /// `sluice_tombstones`: what follows a multi-row `INSERT` so that a newer version of a
    /// delete replaces the stored one and an older one changes nothing.
    pub(super) keep_newer_tombstone: &'static str,
    /// `sluice_tombstones`: deletes at most `chunk` of a table's tombstones older than a
    /// time; binds table name, time.
    pub(super) clean_tombstones: fn(u64) -> String,
    /// `sluice_dedup`: deletes at most `chunk` of a connector's ids written before `now`
    /// (an expression) minus the window; binds connector, window.
    pub(super) clean_dedup: fn(&str, u64) -> String,
    /// `sluice_dedup`: the id column read as text.
    pub(super) dedup_id_text: &'static str,
}

/// Writes the statements that copy a table (`Verifying::copy_table`): the table, the copy,
/// what `Verifying::copy_source` read.
pub(super) type CopyTable = fn(&TableSpec, &TableSpec, &[String]) -> Result<Vec<String>, String>;

/// The statements `sluice verify` needs (`sink/verify.rs`): a scratch table shaped like
/// the connector's, and reads that all see one moment.
pub(super) struct Verifying {
    /// Where the database keeps what `copy_table` copies (SQLite: the statements that
    /// made the table and its unique indexes); a query whose rows are one text each.
    pub(super) copy_source: Option<fn(&TableSpec) -> String>,
    /// The statements that make an empty table named as the second spec with the columns,
    /// types, defaults and unique indexes of the first (given `copy_source`'s rows), or
    /// why they cannot be written.
    pub(super) copy_table: CopyTable,
    /// A statement on the connection before the snapshot's transaction opens.
    pub(super) before_snapshot: Option<&'static str>,
    /// Opens a transaction whose reads all see the database as of one moment.
    pub(super) snapshot: &'static str,
    /// A column as the comparison of two tables reads it: equal exactly when the values
    /// are.
    pub(super) compared: fn(&str) -> String,
    /// A value as text, to show a key.
    pub(super) as_text: fn(&str) -> String,
}

/// The statements that make an old dead-letter table's names compare exactly
/// ([`Database::exact_dead_letter_keys`]).
pub(super) struct ExactKeys {
    /// Counts the columns still to change; given the table's schema (`None`: the
    /// connection's) and name.
    pub(super) count: fn(Option<&str>, &str) -> String,
    /// Changes them; given the table's quoted name.
    pub(super) alter: fn(&str) -> String,
}

/// The words of SQL a database spells its own way (`db/<name>/words.rs`), which
/// `dialect.rs` and `row_statements.rs` put statements together from.
pub(super) struct Words {
    /// Quotes one identifier as it is, dots and all.
    pub(super) quote_one: fn(&str) -> String,
    /// The `n`th (1-based) bind placeholder.
    pub(super) param: fn(usize) -> String,
    /// The SQL type of a column of a portable type (`true`: a key column).
    pub(super) type_name: fn(ColumnType, bool) -> std::borrow::Cow<'static, str>,
    /// The statement that opens a batch's transaction.
    pub(super) begin: &'static str,
    /// The clock now, in milliseconds since the epoch, as an SQL expression.
    pub(super) now_ms: &'static str,
    /// The clock now as the type of `updated_at` columns.
    pub(super) now: &'static str,
    /// A dead letter's headers (JSON) read as text.
    pub(super) headers_as_text: &'static str,
    /// The multi-row statements of the generic writer (`sink/backend.rs`).
    pub(super) rows: &'static RowStatements,
}

/// The parts of the generic writer's multi-row statements that differ by database; each
/// binds `?` placeholders (`row_statements::value_groups`).
pub(super) struct RowStatements {
    /// What follows a multi-row `INSERT … VALUES` to make it an upsert (with a version
    /// column, only where the stored version is older).
    pub(super) upsert: fn(Dialect, &TableSpec) -> String,
    /// A multi-row update by key of `rows` rows: binds every column of every row.
    pub(super) update_values: fn(Dialect, &TableSpec, usize) -> String,
    /// A multi-row delete of `rows` rows by a key of several columns, or with a version
    /// column: binds the key columns of every row, and its version (a row is deleted only
    /// if its stored version is older). A single key column without a version is
    /// `row_statements.rs`'s, in the same words everywhere.
    pub(super) delete_values: fn(Dialect, &TableSpec, usize) -> String,
}

/// What one database does its own way, as the sink asks it: one per folder
/// (`db/<name>/mod.rs`, `DATABASE`), registered in [`of`] and [`ALL`].
pub(super) struct Database {
    /// The words its SQL spells its own way.
    pub(super) words: &'static Words,
    /// The migrations of sluice's own tables.
    pub(super) migrations: &'static Migrations,
    /// The statements on sluice's own tables whose words differ.
    pub(super) own_tables: &'static OwnTables,
    /// The statement that lists a table's columns from the catalog, in the table's order:
    /// name, type as the catalog spells it (lower case), position in the primary key (0
    /// outside it), `1` when it takes NULL, `1` when it has a default, and its definition
    /// where a change must restate it ([`CatalogColumn`]).
    pub(super) columns_query: fn(&TableSpec) -> String,
    /// The lock for adding columns to a table.
    pub(super) evolve_lock: fn(&TableSpec) -> EvolveLock,
    /// The statement that makes a widening or a relaxation (`sink.evolve`) of one column
    /// of a table, or why this database cannot make it.
    pub(super) alter_column: fn(&TableSpec, &CatalogColumn, &Change) -> Result<String, String>,
    /// What `sluice verify` asks of it.
    pub(super) verifying: &'static Verifying,
    /// The portable types a column of a catalog type (lower case, trimmed) takes, when it
    /// is a type sluice creates here (`None` for any other); the first is the one it is
    /// made for (`derived/layout.rs`).
    pub(super) portable_types: fn(&str) -> Option<Vec<ColumnType>>,
    /// Two column names are one column when they differ only in ASCII case (MySQL,
    /// MariaDB, SQLite); PostgreSQL compares sluice's quoted names exactly.
    pub(super) column_names_fold_case: bool,
    /// Its text keys may compare more loosely than exactly (a case-insensitive collation,
    /// trailing spaces ignored): rows whose keys it could take for one are ordered as one
    /// (`runs::order_key`).
    pub(super) keys_compare_loosely: bool,
    /// A JSON column compares as its value, not its text (PostgreSQL's `jsonb`): keys of
    /// JSON text are bound canonical (`runs::bound_key`).
    pub(super) json_compares_as_value: bool,
    /// A bind placeholder (`param`, the dialect's) for a value of a column of a type, where
    /// the database needs the type said (PostgreSQL casts text binds); `None`: as it is.
    pub(super) typed_param: Option<fn(&str, ColumnType) -> String>,
    /// The type an integer is cast to in a `SELECT` (`CAST(COUNT(*) AS …)`).
    pub(super) bigint_cast: &'static str,
    /// The schema version from which sluice compares names exactly here (MySQL and
    /// MariaDB compared topic names by their collation before version 2); 0: always.
    pub(super) exact_names_since: i64,
    /// The query of whether the connection's user may insert into and update a table (its
    /// quoted name): two integers, 1 for yes (`sluice validate --connect`); `None` where
    /// it cannot be asked without writing.
    pub(super) write_privileges: Option<fn(&str) -> String>,
    /// A dead-letter table made before sluice compared names exactly (MySQL and MariaDB):
    /// the query that counts its columns that still compare loosely, and the statement that
    /// makes them exact, for its (quoted name, schema, table).
    pub(super) exact_dead_letter_keys: Option<&'static ExactKeys>,
    /// What a probe of refused rows runs first in its transaction (PostgreSQL: deferred
    /// constraints checked at once, since the probe never commits).
    pub(super) probe_begins_with: Option<&'static str>,
    /// What the database's codes say of an error; `None` when another database raised it.
    pub(super) read_error: fn(&dyn DatabaseError) -> Option<ErrorReading>,
    /// Writes an error of this database as a user reads it, where sqlx's words do not
    /// suit; `None` to leave it to sqlx (or when another database raised it).
    pub(super) write_error:
        fn(&dyn DatabaseError, &mut std::fmt::Formatter<'_>) -> Option<std::fmt::Result>,
}

/// Every database, in the order an error is offered to them.
static ALL: [&Database; 3] = [&postgres::DATABASE, &mysql::DATABASE, &sqlite::DATABASE];

/// The database a dialect writes to.
pub(super) fn of(dialect: Dialect) -> &'static Database {
    match dialect {
        Dialect::Postgres => &postgres::DATABASE,
        Dialect::MySql => &mysql::DATABASE,
        Dialect::Sqlite => &sqlite::DATABASE,
    }
}
