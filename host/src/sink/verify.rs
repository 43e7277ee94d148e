//! The database's side of `sluice verify` (`crate::verify`): the table as it is compared
//! (its written columns and key), an empty scratch copy of it that the log is folded into,
//! and the comparison of the two in one snapshot, together with the stored offsets it
//! holds for.
//!
//! The comparison runs in the database, on both tables alike: `EXCEPT` both ways over the
//! compared columns. A row the table holds and the fold does not is the table's alone; a
//! row the fold holds and the table does not is the fold's alone; a key on both sides
//! differs. Values are never brought out and compared in sluice, so no type's rendering
//! (a decimal's scale, a timestamp's zone, a float's digits) can make two equal rows
//! differ: the scratch table has the table's own column types.

use sqlx::{AssertSqlSafe, Connection};

use super::backend::Backend;
use super::db;
use super::dialect::{Naming, TableSpec};
use super::{Sink, SinkError, each_pool};

/// The prefix of a scratch table's name: a table left behind by an interrupted verify is
/// known by it.
pub const SCRATCH_PREFIX: &str = "sluice_verify_";

/// The table as `sluice verify` compares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compared {
    /// Its name, as configured.
    pub table: String,
    /// The columns compared: those sluice writes (the configured ones and the version
    /// column; with derived columns, every column of the table).
    pub columns: Vec<String>,
    /// Indices into `columns` of the key that rows are matched by.
    pub key: Vec<usize>,
}

impl Compared {
    /// The key's column names.
    pub fn key_names(&self) -> Vec<String> {
        self.key.iter().map(|&k| self.columns[k].clone()).collect()
    }
}

/// The table and the fold compared in one snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The connector's stored offsets in that snapshot: (topic, partition, next offset).
    pub offsets: Vec<(String, i32, i64)>,
    /// The table's rows.
    pub table_rows: i64,
    /// The fold's rows.
    pub folded_rows: i64,
    /// The keys (as text; NULL as `None`) of rows only the table holds as they are.
    pub table_only: Vec<Vec<Option<String>>>,
    /// The keys of rows only the fold holds as they are.
    pub folded_only: Vec<Vec<Option<String>>>,
}

/// What the snapshot's offsets say of the comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Comparison {
    /// The stored offsets are those the fold reached: the comparison holds.
    Done(Snapshot),
    /// The stored offsets moved (the connector is writing): the fold must catch up to
    /// these before the tables can be compared.
    Moved(Vec<(String, i32, i64)>),
}

impl Sink {
    /// The table as `sluice verify` compares it; fails when it has no key or does not
    /// exist.
    pub async fn compared_table(&self) -> Result<Compared, SinkError> {
        let mismatch = |why: &str| SinkError::TableMismatch {
            table: self.table.name.clone(),
            columns: self
                .table
                .columns
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            source: sqlx::Error::Protocol(why.to_string()),
        };
        let derived = self.routing.as_ref().is_some_and(|r| r.derived.is_some());
        if !derived {
            self.check_table().await?;
            return Ok(Compared {
                table: self.table.name.clone(),
                columns: self.table.columns.iter().map(|(n, _)| n.clone()).collect(),
                key: self.table.key.clone(),
            });
        }
        // With derived columns the table's columns are the catalog's, version included.
        let spec = TableSpec {
            version: None,
            ..self.table.clone()
        };
        let catalog = self.catalog(&spec).await?;
        if catalog.is_empty() {
            return Err(mismatch("the table does not exist"));
        }
        let mut key: Vec<(u32, usize)> = catalog
            .iter()
            .enumerate()
            .filter(|(_, c)| c.key_position > 0)
            .map(|(i, c)| (c.key_position, i))
            .collect();
        key.sort_unstable();
        Ok(Compared {
            table: self.table.name.clone(),
            columns: catalog.into_iter().map(|c| c.name).collect(),
            key: key.into_iter().map(|(_, i)| i).collect(),
        })
    }

    /// Creates an empty copy of the sink table, `sluice_verify_<id>` in the table's schema,
    /// with its columns, types, defaults and unique keys; returns the copy's name as a
    /// connector configures it.
    pub async fn create_scratch(&self, id: &str) -> Result<String, SinkError> {
        let (schema, _) = self.table.schema_and_identifier();
        let identifier = format!("{SCRATCH_PREFIX}{id}");
        let name = match schema {
            Some(schema) => format!("{schema}.{identifier}"),
            None => identifier,
        };
        let scratch = self.scratch_spec(&name);
        let verifying = db::of(self.dialect).verifying;
        let failed = |source| SinkError::Database {
            action: "create a scratch copy of",
            table: self.table.name.clone(),
            source,
        };
        let source: Vec<String> = match verifying.copy_source {
            Some(query) => {
                let sql = query(&self.table);
                each_pool!(self, pool, DB => {
                    sqlx::query_scalar::<DB, String>(AssertSqlSafe(sql))
                        .fetch_all(pool)
                        .await
                })
                .map_err(failed)?
            }
            None => Vec::new(),
        };
        let statements = (verifying.copy_table)(&self.table, &scratch, &source)
            .map_err(|why| failed(sqlx::Error::Protocol(why)))?;
        for (n, sql) in statements.iter().enumerate() {
            if let Err(source) = self.execute(sql).await {
                if n > 0 {
                    let _ = self.drop_scratch(&name).await;
                }
                return Err(failed(source));
            }
        }
        Ok(name)
    }

    /// Drops the scratch table `name` and the versions of deleted rows kept for it.
    pub async fn drop_scratch(&self, name: &str) -> Result<(), SinkError> {
        let scratch = self.scratch_spec(name);
        let failed = |source| SinkError::Database {
            action: "drop",
            table: name.to_string(),
            source,
        };
        self.execute(&format!(
            "DROP TABLE IF EXISTS {}",
            scratch.quoted(self.dialect)
        ))
        .await
        .map_err(failed)?;
        let forget = format!(
            "DELETE FROM sluice_tombstones WHERE table_name = {}",
            self.dialect.param(1)
        );
        each_pool!(self, pool, DB => {
            sqlx::query::<DB>(AssertSqlSafe(forget))
                .bind(name.to_string())
                .execute(pool)
                .await
                .map(|_| ())
        })
        .map_err(failed)
    }

    fn scratch_spec(&self, name: &str) -> TableSpec {
        TableSpec {
            name: name.to_string(),
            naming: Naming::Split,
            columns: Vec::new(),
            key: Vec::new(),
            version: None,
        }
    }

    /// Compares the sink table with the scratch table `scratch` in one snapshot, if the
    /// connector's stored offsets in it are `folded` (sorted by topic and partition);
    /// otherwise says where they are now.
    pub async fn compare(
        &self,
        compared: &Compared,
        scratch: &str,
        folded: &[(String, i32, i64)],
    ) -> Result<Comparison, SinkError> {
        let verifying = db::of(self.dialect).verifying;
        let table = self.table.quoted(self.dialect);
        let scratch = self.scratch_spec(scratch).quoted(self.dialect);
        let columns: Vec<String> = compared
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                format!(
                    "{} AS c{i}",
                    (verifying.compared)(&self.dialect.quote_one(c))
                )
            })
            .collect();
        let columns = columns.join(", ");
        let keys: Vec<String> = compared
            .key
            .iter()
            .map(|k| (verifying.as_text)(&format!("c{k}")))
            .collect();
        let order: Vec<String> = (1..=compared.key.len()).map(|n| n.to_string()).collect();
        let only = |from: &str, other: &str| {
            format!(
                "SELECT {} FROM (SELECT {columns} FROM {from} EXCEPT SELECT {columns} FROM {other}) d ORDER BY {}",
                keys.join(", "),
                order.join(", ")
            )
        };
        let table_only = only(&table, &scratch);
        let folded_only = only(&scratch, &table);
        let count_table = format!("SELECT COUNT(*) FROM {table}");
        let count_folded = format!("SELECT COUNT(*) FROM {scratch}");
        let offsets_sql = self.dialect.all_offsets();
        let width = compared.key.len();
        let failed = |source| SinkError::Database {
            action: "compare",
            table: compared.table.clone(),
            source,
        };
        each_pool!(self, pool, DB => {
            let mut conn = pool.acquire().await.map_err(failed)?;
            if let Some(sql) = verifying.before_snapshot {
                sqlx::query::<DB>(AssertSqlSafe(sql.to_string()))
                    .execute(&mut *conn)
                    .await
                    .map_err(failed)?;
            }
            let mut tx = conn.begin_with(verifying.snapshot).await.map_err(failed)?;
            let mut offsets: Vec<(String, i32, i64)> =
                sqlx::query_as::<DB, (String, i32, i64)>(AssertSqlSafe(offsets_sql))
                    .bind(self.connector.clone())
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(failed)?;
            offsets.sort();
            if offsets != folded {
                return Ok(Comparison::Moved(offsets));
            }
            let table_rows = sqlx::query_scalar::<DB, i64>(AssertSqlSafe(count_table))
                .fetch_one(&mut *tx)
                .await
                .map_err(failed)?;
            let folded_rows = sqlx::query_scalar::<DB, i64>(AssertSqlSafe(count_folded))
                .fetch_one(&mut *tx)
                .await
                .map_err(failed)?;
            let mut keys_of = async |sql: String| -> Result<Vec<Vec<Option<String>>>, sqlx::Error> {
                let rows = sqlx::query::<DB>(AssertSqlSafe(sql)).fetch_all(&mut *tx).await?;
                rows.iter()
                    .map(|row| (0..width).map(|i| <DB as Backend>::text_at(row, i)).collect())
                    .collect()
            };
            let table_only = keys_of(table_only).await.map_err(failed)?;
            let folded_only = keys_of(folded_only).await.map_err(failed)?;
            let _ = tx.rollback().await;
            Ok(Comparison::Done(Snapshot {
                offsets,
                table_rows,
                folded_rows,
                table_only,
                folded_only,
            }))
        })
    }
}
