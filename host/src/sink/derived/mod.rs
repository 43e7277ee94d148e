//! Tables whose columns come from the records' schemas (`sink.columns` left out).
//!
//! A table is read from the database's catalog when a batch first names it (created from
//! the first schema under `create_table`). Each schema a batch carries ([`DerivedShape`])
//! is then fitted to the table:
//!
//! - a field whose column exists is written to it, when the types agree: the same type, or
//!   a wider one (`int` into `bigint` or `numeric`, `bigint` into `numeric`); a column of a
//!   type sluice never creates takes the value as the database converts it;
//! - a column the schema lacks (a field that disappeared) is written NULL, when its type is
//!   one sluice creates; a column of another type is left alone;
//! - a field the table lacks is added as a nullable column under `evolve: add_columns`
//!   when the field is optional or has a default, before the batch's transaction, under a
//!   lock, after looking again (another process may have added it); otherwise, as a type
//!   change or another key, the schema's records fail alone (class `schema_incompatible`).
//!
//! A table's key is its primary key, read from the catalog: a schema of another key does
//! not fit.
//!
//! - [`layout`]: a table as its catalog lists it, and the fit of a schema to it;
//! - here: reading the catalog, creating a table, adding columns under a lock.

use std::sync::Arc;

use sqlx::{Executor, IntoArguments};

use super::backend::Backend;
use super::db::{self, EvolveLock};
use super::dialect::TableSpec;
use super::{Checkout, Sink, SinkError, each_pool, error};
use crate::config::{ColumnType, Evolve};
use crate::map::DerivedShape;

mod layout;

use layout::same_name;
pub use layout::{CatalogColumn, Layout, Misfit};

async fn read_catalog<DB>(
    conn: &mut DB::Connection,
    sql: String,
) -> Result<Vec<CatalogColumn>, sqlx::Error>
where
    DB: Backend,
    DB::Arguments: IntoArguments<DB>,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    let rows = sqlx::query::<DB>(sqlx::AssertSqlSafe(sql))
        .fetch_all(&mut *conn)
        .await?;
    rows.iter()
        .map(|row| {
            Ok(CatalogColumn {
                name: DB::text_at(row, 0)?.unwrap_or_default(),
                sql_type: DB::text_at(row, 1)?.unwrap_or_default(),
                key_position: DB::text_at(row, 2)?
                    .and_then(|p| p.trim().parse().ok())
                    .unwrap_or(0),
            })
        })
        .collect()
}

impl Sink {
    /// `columns` without `spec`'s version column, which sluice writes itself.
    fn without_version(
        &self,
        spec: &TableSpec,
        mut columns: Vec<CatalogColumn>,
    ) -> Vec<CatalogColumn> {
        if let Some(version) = spec.version {
            let name = &spec.columns[version].0;
            columns.retain(|c| !same_name(self.dialect, &c.name, name));
        }
        columns
    }

    /// The columns of `spec`'s table, without the version column; empty when it does
    /// not exist.
    pub(super) async fn catalog(&self, spec: &TableSpec) -> Result<Vec<CatalogColumn>, SinkError> {
        let sql = (db::of(self.dialect).columns_query)(spec);
        let read = each_pool!(self, pool, DB => {
            let mut conn = pool.acquire().await.map_err(|source| SinkError::Database {
                action: "read the columns of",
                table: spec.name.clone(),
                source,
            })?;
            read_catalog::<DB>(&mut conn, sql).await
        });
        let columns = read.map_err(|source| SinkError::Database {
            action: "read the columns of",
            table: spec.name.clone(),
            source,
        })?;
        Ok(self.without_version(spec, columns))
    }

    /// Reads a derived table; under `create_table` (and `create`), one that does not
    /// exist is created from the first of `shapes` that carries a row (a tombstone's key
    /// alone makes no table). `spec` gives its name and version column.
    pub(super) async fn derived_layout(
        &self,
        spec: &TableSpec,
        shapes: &[(usize, &Arc<DerivedShape>)],
        create: bool,
    ) -> Result<Layout, SinkError> {
        let catalog = self.catalog(spec).await?;
        if !catalog.is_empty() {
            return Ok(Layout::of(catalog));
        }
        if !(create && self.create_table) {
            return Err(SinkError::SchemaIncompatible {
                table: spec.name.clone(),
                message: "the table does not exist; set create_table: true or create it".into(),
            });
        }
        let Some((_, first)) = shapes.iter().find(|(_, s)| s.from_row) else {
            return Err(SinkError::SchemaIncompatible {
                table: spec.name.clone(),
                message: "the table does not exist yet, and these records (tombstones) carry no row schema to create it from".into(),
            });
        };
        let mut columns: Vec<(String, ColumnType)> = first
            .columns
            .iter()
            .map(|c| (c.name.clone(), c.column_type))
            .collect();
        let version = spec.version.map(|v| {
            columns.push(spec.columns[v].clone());
            columns.len() - 1
        });
        let created = TableSpec {
            name: spec.name.clone(),
            naming: spec.naming.clone(),
            columns,
            key: first.key.clone(),
            version,
        };
        self.create(&created).await?;
        tracing::info!(connector = %self.connector, table = %spec.name,
            columns = first.columns.len(), "table created from the record's schema");
        Ok(Layout::of(self.catalog(spec).await?))
    }

    /// Adds `missing` columns to `spec`'s table (nullable, no default), once across
    /// processes: under a lock, it looks at the table again and adds what is still
    /// missing (a column another process added meanwhile is no error). Runs outside any
    /// batch's transaction (MySQL commits DDL implicitly), on a connection that is closed
    /// rather than reused when the work is cancelled half-way (a time bound, a stop).
    pub(super) async fn add_columns(
        &self,
        spec: &TableSpec,
        missing: &[(String, ColumnType)],
    ) -> Result<Vec<CatalogColumn>, SinkError> {
        let dialect = self.dialect;
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
        let quoted = spec.quoted(dialect);
        let catalog_sql = (db::of(dialect).columns_query)(spec);
        let same = |a: &str, b: &str| same_name(dialect, a, b);
        let alters = |present: &[CatalogColumn]| -> Vec<String> {
            missing
                .iter()
                .filter(|(name, _)| !present.iter().any(|c| same(&c.name, name)))
                .map(|(name, column_type)| {
                    format!(
                        "ALTER TABLE {quoted} ADD COLUMN {} {}",
                        dialect.quote_one(name),
                        dialect.type_name(*column_type, false)
                    )
                })
                .collect()
        };
        let lock = (db::of(dialect).evolve_lock)(spec);
        // Where DDL is transactional, the columns are added in one transaction.
        let transactional = !matches!(lock, EvolveLock::Named { .. });
        let present = each_pool!(self, pool, DB => {
            let mut checkout = Checkout::<DB>::take(pool).await.map_err(db_error("evolve"))?;
            let conn = &mut *checkout.conn;
            if transactional {
                sqlx::query::<DB>(sqlx::AssertSqlSafe(dialect.begin().to_string()))
                    .execute(&mut *conn)
                    .await
                    .map_err(db_error("evolve"))?;
            }
            let result: Result<Vec<CatalogColumn>, SinkError> = async {
                match &lock {
                    EvolveLock::Transaction => {}
                    EvolveLock::UntilCommit(take) => {
                        sqlx::query::<DB>(sqlx::AssertSqlSafe(take.clone()))
                            .execute(&mut *conn)
                            .await
                            .map_err(db_error("lock for evolving"))?;
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
                for alter in alters(&present) {
                    tracing::info!(connector = %self.connector, table = %table,
                        statement = %alter, "adding a column for a new field (evolve: add_columns)");
                    // Under a savepoint where DDL is transactional: a failed ALTER
                    // aborts PostgreSQL's transaction, and the catalog is read after it.
                    let savepoint = |verb: &str| sqlx::AssertSqlSafe(format!("{verb} sluice_alter"));
                    if transactional {
                        sqlx::query::<DB>(savepoint("SAVEPOINT"))
                            .execute(&mut *conn)
                            .await
                            .map_err(db_error("alter"))?;
                    }
                    let altered = sqlx::query::<DB>(sqlx::AssertSqlSafe(alter))
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
                        Err(e) if error::is_duplicate_column(&e) => {}
                        Err(e) => return Err(db_error("alter")(e)),
                    }
                }
                read_catalog::<DB>(&mut *conn, catalog_sql.clone())
                    .await
                    .map_err(db_error("read the columns of"))
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
        Ok(self.without_version(spec, present))
    }

    /// Fits each of `shapes` to the derived table `table`, adding columns under
    /// `evolve: add_columns`: the table as it stands after, and per shape (an index into
    /// `shapes`) why it cannot be written.
    pub(super) async fn fit_shapes(
        &self,
        spec: &TableSpec,
        mut layout: Layout,
        shapes: &[(usize, &Arc<DerivedShape>)],
        evolve: Evolve,
    ) -> Result<(Layout, Vec<(usize, String)>), SinkError> {
        let mut refused = Vec::new();
        for &(index, shape) in shapes {
            match layout.fit(self.dialect, spec, shape) {
                Ok(_) => {}
                Err(Misfit::Incompatible(why)) => refused.push((index, why)),
                Err(Misfit::Missing(missing)) if evolve == Evolve::AddColumns => {
                    layout = Layout::of(self.add_columns(spec, &missing).await?);
                    if let Err(misfit) = layout.fit(self.dialect, spec, shape) {
                        refused.push((index, match misfit {
                            Misfit::Incompatible(why) => why,
                            Misfit::Missing(still) => format!(
                                "columns {} could not be added",
                                still.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(", ")
                            ),
                        }));
                    }
                }
                Err(Misfit::Missing(missing)) => refused.push((
                    index,
                    format!(
                        "the table has no column for field(s) {} and sink.evolve is none: set evolve: add_columns, or add the column(s)",
                        missing
                            .iter()
                            .map(|(n, t)| format!("{n} ({})", t.name()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
            }
        }
        Ok((layout, refused))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Format, SinkConfig};
    use crate::format::shape::{Field, FieldType};
    use crate::format::{RecordSchemas, WriterSchema};
    use crate::map::{Deriver, RowMapper};
    use crate::map::{RowOp, SqlValue};
    use crate::sink::Dialect;

    /// The shape of a record of `fields` (name, type, optional), keyed by `id`.
    fn shape(fields: &[(&str, FieldType, bool)]) -> Arc<DerivedShape> {
        let sink: SinkConfig =
            serde_yaml_ng::from_str("{url: 'sqlite://x', table: t, mode: upsert, key: [id]}")
                .expect("a sink");
        let envelope = crate::config::Envelope::None;
        let deriver = Deriver::new(
            RowMapper::new(&sink, Format::ConnectJson, envelope),
            sink.derive.clone(),
            sink.key.clone(),
            envelope,
            None,
        )
        // PostgreSQL's types: arrays are arrays.
        .for_database(
            crate::config::ColumnNameRules::for_scheme("postgres"),
            crate::map::TypeRules::for_scheme("postgres"),
        );
        let fields = fields
            .iter()
            .map(|(name, field_type, optional)| Field {
                name: name.to_string(),
                field_type: field_type.clone(),
                optional: *optional,
                default: None,
            })
            .collect();
        let value = WriterSchema {
            reference: None,
            format: "connect_json",
            shape: FieldType::Record {
                name: "Row".into(),
                fields,
            },
            message: None,
        };
        deriver
            .shape(&RecordSchemas {
                key: None,
                value: Some(Arc::new(value)),
            })
            .expect("a shape")
    }

    fn layout(columns: &[(&str, &str)]) -> Layout {
        Layout {
            catalog: columns
                .iter()
                .map(|(name, sql_type)| CatalogColumn {
                    name: name.to_string(),
                    sql_type: sql_type.to_string(),
                    key_position: u32::from(name.eq_ignore_ascii_case("id")),
                })
                .collect(),
            key: vec!["id".into()],
        }
    }

    fn base() -> TableSpec {
        TableSpec {
            name: "t".into(),
            naming: Default::default(),
            columns: Vec::new(),
            key: Vec::new(),
            version: None,
        }
    }

    #[test]
    fn a_schema_fits_the_columns_it_names_and_nulls_the_others() {
        let table = layout(&[
            ("id", "bigint"),
            ("gone", "text"),
            ("name", "text"),
            ("odd", "character varying(9)"),
        ]);
        let s = shape(&[
            ("id", FieldType::Int32, false),
            ("name", FieldType::String, true),
        ]);
        let fitted = table.fit(Dialect::Postgres, &base(), &s).expect("fits");
        assert_eq!(
            fitted.spec.columns,
            vec![
                // An int field widens into the bigint column.
                ("id".to_string(), ColumnType::Bigint),
                ("gone".to_string(), ColumnType::Text),
                ("name".to_string(), ColumnType::Text),
            ]
        );
        assert_eq!(fitted.from_shape, vec![Some(0), None, Some(1)]);
        assert_eq!(fitted.spec.key, vec![0]);
        let projected = fitted.project(&RowOp::Write(vec![
            SqlValue::Int(1),
            SqlValue::Text("a".into()),
        ]));
        assert_eq!(
            projected,
            RowOp::Write(vec![
                SqlValue::Int(1),
                SqlValue::Null,
                SqlValue::Text("a".into())
            ])
        );
    }

    #[test]
    fn new_fields_type_changes_and_key_changes_do_not_fit() {
        let table = layout(&[("id", "bigint"), ("name", "text")]);
        let optional = shape(&[
            ("id", FieldType::Int64, false),
            ("email", FieldType::String, true),
        ]);
        assert_eq!(
            table
                .fit(Dialect::Postgres, &base(), &optional)
                .expect_err("missing"),
            Misfit::Missing(vec![("email".into(), ColumnType::Text)])
        );
        let required = shape(&[
            ("id", FieldType::Int64, false),
            ("email", FieldType::String, false),
        ]);
        assert!(matches!(
            table.fit(Dialect::Postgres, &base(), &required),
            Err(Misfit::Incompatible(why)) if why.contains("new and required")
        ));
        let changed = shape(&[
            ("id", FieldType::Int64, false),
            ("name", FieldType::Int64, true),
        ]);
        assert!(matches!(
            table.fit(Dialect::Postgres, &base(), &changed),
            Err(Misfit::Incompatible(why)) if why.contains("type change") && why.contains("bigint") && why.contains("text")
        ));
        let mut other_key = layout(&[("id", "bigint"), ("name", "text")]);
        other_key.key = vec!["name".into()];
        assert!(matches!(
            other_key.fit(Dialect::Postgres, &base(), &changed),
            Err(Misfit::Incompatible(why)) if why.contains("key change")
        ));
        // The primary key comes from the catalog, in key order.
        let read = Layout::of(vec![
            CatalogColumn {
                name: "b".into(),
                sql_type: "text".into(),
                key_position: 2,
            },
            CatalogColumn {
                name: "a".into(),
                sql_type: "text".into(),
                key_position: 1,
            },
            CatalogColumn {
                name: "c".into(),
                sql_type: "text".into(),
                key_position: 0,
            },
        ]);
        assert_eq!(read.key, vec!["a".to_string(), "b".to_string()]);
        let no_key_column = layout(&[("name", "text")]);
        assert!(matches!(
            no_key_column.fit(Dialect::Postgres, &base(), &changed),
            Err(Misfit::Incompatible(why)) if why.contains("key field id has no column")
        ));
    }

    #[test]
    fn mysql_and_sqlite_names_and_types_compare_as_their_catalogs_spell_them() {
        let s = shape(&[
            ("id", FieldType::Int64, false),
            ("Name", FieldType::String, true),
            ("on", FieldType::Boolean, true),
        ]);
        let mysql = layout(&[("ID", "bigint"), ("name", "text"), ("on", "tinyint")]);
        let fitted = mysql.fit(Dialect::MySql, &base(), &s).expect("fits");
        assert_eq!(fitted.from_shape, vec![Some(0), Some(1), Some(2)]);
        let sqlite = layout(&[("id", "integer"), ("name", "text"), ("on", "integer")]);
        let fitted = sqlite.fit(Dialect::Sqlite, &base(), &s).expect("fits");
        assert_eq!(fitted.spec.columns[2].1, ColumnType::Bool);
        // PostgreSQL quotes every name: case matters.
        let pg = layout(&[("id", "bigint"), ("name", "text"), ("on", "boolean")]);
        assert!(matches!(
            pg.fit(Dialect::Postgres, &base(), &s),
            Err(Misfit::Missing(_))
        ));
    }

    /// A field goes into an existing column only where every value of it is held exactly:
    /// decimals by their digits on each side of the point, integers into decimals with
    /// room for them, text columns only for what an earlier sluice derived as text.
    #[test]
    fn columns_take_only_fields_they_hold_exactly() {
        let fits = |dialect: Dialect, sql_type: &str, field: FieldType| {
            let s = shape(&[("id", FieldType::Int64, false), ("v", field, true)]);
            layout(&[("id", "bigint"), ("v", sql_type)])
                .fit(dialect, &base(), &s)
                .map(|f| f.spec.columns[1].1)
        };
        let decimal = |precision, scale| FieldType::Decimal {
            precision: Some(precision),
            scale,
        };
        let pg = Dialect::Postgres;
        assert_eq!(
            fits(pg, "numeric(12,4)", decimal(10, 2)).ok(),
            Some(ColumnType::Decimal {
                precision: 12,
                scale: 4
            })
        );
        // Two more decimals than the column keeps: it would round them.
        assert!(fits(pg, "numeric(12,2)", decimal(14, 4)).is_err());
        assert!(fits(pg, "numeric(12,2)", FieldType::Int64).is_err());
        assert!(fits(pg, "numeric(20,0)", FieldType::Int64).is_ok());
        assert!(fits(pg, "numeric", decimal(40, 20)).is_ok());
        assert_eq!(
            fits(
                pg,
                "integer[]",
                FieldType::Array(Box::new(FieldType::Int32))
            )
            .ok(),
            Some(ColumnType::Array(crate::config::ElementType::Int))
        );
        assert!(fits(pg, "jsonb", FieldType::Array(Box::new(FieldType::Int32))).is_ok());
        assert!(fits(pg, "smallint", FieldType::Int32).is_err());
        assert!(fits(pg, "integer", FieldType::Int16).is_ok());
        // Text an earlier sluice derived keeps taking a document, not an integer.
        assert!(fits(pg, "text", FieldType::JsonText).is_ok());
        assert!(fits(pg, "text", FieldType::Int64).is_err());
        // MySQL's catalog spells a decimal's precision and scale out.
        assert!(fits(Dialect::MySql, "decimal(38,10)", decimal(12, 2)).is_ok());
        assert!(fits(Dialect::MySql, "decimal(38,10)", decimal(40, 12)).is_err());
        // SQLite keeps decimals as text, and an integer does not go there.
        assert!(fits(Dialect::Sqlite, "text", decimal(20, 12)).is_ok());
        assert!(fits(Dialect::Sqlite, "text", FieldType::Int64).is_err());
    }
}
