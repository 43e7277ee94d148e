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
//!   when the field is optional or has a default; a column whose field's type grew is
//!   widened under `evolve: widen`; a `NOT NULL` column the schema may leave NULL is made
//!   nullable under `evolve: relax`. Each before the batch's transaction, under a lock,
//!   after looking again (another process may have made it), and recorded in
//!   `sluice_schema_changes`. Otherwise, as a type change or another key, the schema's
//!   records fail alone (class `schema_incompatible`).
//!
//! A table's key is its primary key, read from the catalog: a schema of another key does
//! not fit.
//!
//! - [`layout`]: a table as its catalog lists it, and the fit of a schema to it;
//! - [`evolve`]: the changes `sink.evolve` allows, made under a lock and recorded;
//! - here: reading the catalog, creating a table.

use std::sync::Arc;

use sqlx::{Executor, IntoArguments};

use super::backend::Backend;
use super::db;
use super::dialect::TableSpec;
use super::{Sink, SinkError, each_pool};
use crate::config::ColumnType;
use crate::map::DerivedShape;

mod evolve;
mod layout;

use layout::same_name;
pub use layout::{CatalogColumn, Change, Layout, Misfit};

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
                nullable: DB::text_at(row, 3)?.as_deref() != Some("0"),
                has_default: DB::text_at(row, 4)?.as_deref() == Some("1"),
                definition: DB::text_at(row, 5)?,
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

    /// The columns of `spec`'s table (without the version column), read under its evolve
    /// lock: as a change another process makes under that lock leaves them (see
    /// [`Sink::catalog_reads_race_changes`]).
    pub(super) async fn catalog_under_evolve_lock(
        &self,
        spec: &TableSpec,
    ) -> Result<Vec<CatalogColumn>, SinkError> {
        let (columns, _) = self.evolve(spec, &[], None).await?;
        Ok(columns)
    }

    /// Whether a read of `spec`'s catalog outside its evolve lock can see another
    /// process's change half-made: where DDL commits by itself (MySQL, MariaDB: a named
    /// evolve lock), `information_schema` read in the middle of another process's `ALTER`
    /// has shown a table being rebuilt without its primary key. Elsewhere the catalog is
    /// read in one snapshot.
    pub(super) fn catalog_reads_race_changes(&self, spec: &TableSpec) -> bool {
        matches!(
            (db::of(self.dialect).evolve_lock)(spec),
            db::EvolveLock::Named { .. }
        )
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
}

#[cfg(test)]
mod tests {
    use super::layout::Fitted;
    use super::*;
    use crate::config::Evolve;
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
                    nullable: !name.eq_ignore_ascii_case("id"),
                    has_default: false,
                    definition: None,
                })
                .collect(),
            key: vec!["id".into()],
            unrelaxable: Vec::new(),
            refused: Vec::new(),
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

    /// A field whose integer type grew, or whose decimal has more digits with the same
    /// scale, needs its column widened (`evolve: widen`); a narrower field fits as it is;
    /// a change of kind or of scale, or a key column, is a type change no step takes.
    #[test]
    fn a_grown_type_needs_a_widening_and_nothing_else_does() {
        let fit = |sql_type: &str, field: FieldType| {
            let s = shape(&[("id", FieldType::Int64, false), ("v", field, true)]);
            layout(&[("id", "bigint"), ("v", sql_type)]).fit(Dialect::Postgres, &base(), &s)
        };
        // The widening a fit asks for: the type the column is to take.
        let widened_to = |fitted: Result<Fitted, Misfit>| match fitted {
            Err(Misfit::Needs(changes)) => match &changes[..] {
                [Change::Widen { column, to, .. }] if column == "v" => Some(*to),
                _ => None,
            },
            _ => None,
        };
        assert_eq!(
            widened_to(fit("smallint", FieldType::Int32)),
            Some(ColumnType::Int)
        );
        assert_eq!(
            widened_to(fit("integer", FieldType::Int64)),
            Some(ColumnType::Bigint)
        );
        assert_eq!(
            widened_to(fit(
                "numeric(10,2)",
                FieldType::Decimal {
                    precision: Some(14),
                    scale: 2
                }
            )),
            Some(ColumnType::Decimal {
                precision: 14,
                scale: 2
            })
        );
        assert!(
            fit("bigint", FieldType::Int16).is_ok(),
            "a narrower field fits"
        );
        for (sql_type, field) in [
            ("integer", FieldType::String),
            ("bigint", FieldType::Float64),
            (
                "numeric(10,2)",
                FieldType::Decimal {
                    precision: Some(14),
                    scale: 4,
                },
            ),
        ] {
            assert!(
                matches!(fit(sql_type, field.clone()), Err(Misfit::Incompatible(why)) if why.contains("type change")),
                "{sql_type} <- {field:?}"
            );
        }
        // The key's column is never altered.
        let s = shape(&[("id", FieldType::Int64, false)]);
        assert!(matches!(
            layout(&[("id", "integer")]).fit(Dialect::Postgres, &base(), &s),
            Err(Misfit::Incompatible(_))
        ));
    }

    /// `NOT NULL` columns outside the key that a schema may leave NULL: an optional field,
    /// a field gone (written NULL, or left to a default the column lacks).
    #[test]
    fn columns_a_schema_may_leave_null_are_relaxable() {
        let mut table = layout(&[
            ("id", "bigint"),
            ("required", "text"),
            ("optional", "text"),
            ("gone", "text"),
            ("defaulted", "varchar(4)"),
            ("bare", "varchar(4)"),
            ("nullable", "text"),
        ]);
        for column in &mut table.catalog {
            column.nullable = column.name == "nullable";
            column.has_default = column.name == "defaulted";
        }
        let s = shape(&[
            ("id", FieldType::Int64, false),
            ("required", FieldType::String, false),
            ("optional", FieldType::String, true),
        ]);
        let relaxable: Vec<String> = table
            .relaxable(Dialect::Postgres, &s)
            .iter()
            .map(|c| c.column().to_string())
            .collect();
        assert_eq!(relaxable, ["optional", "gone", "bare"]);
    }

    /// Which changes `sink.evolve` allows, and what a refusal names.
    #[test]
    fn a_change_evolve_does_not_allow_names_the_step_it_needs() {
        let add = Change::Add {
            column: "email".into(),
            to: ColumnType::Text,
        };
        let widen = Change::Widen {
            column: "qty".into(),
            field: "qty".into(),
            from: "smallint".into(),
            to: ColumnType::Int,
        };
        let none = evolve::not_allowed(std::slice::from_ref(&add), Evolve::NONE).expect("refused");
        assert!(
            none.contains("evolve is none") && none.contains("email"),
            "{none}"
        );
        let widen_only = Evolve {
            widen: true,
            ..Evolve::NONE
        };
        assert!(evolve::not_allowed(std::slice::from_ref(&widen), widen_only).is_none());
        let why = evolve::not_allowed(
            &[widen],
            Evolve {
                add_columns: true,
                ..Evolve::NONE
            },
        )
        .expect("refused");
        assert!(
            why.contains("type change")
                && why.contains("add widen")
                && why.contains("[add_columns]"),
            "{why}"
        );
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
            Misfit::Needs(vec![Change::Add {
                column: "email".into(),
                to: ColumnType::Text
            }])
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
                nullable: false,
                has_default: false,
                definition: None,
            },
            CatalogColumn {
                name: "a".into(),
                sql_type: "text".into(),
                key_position: 1,
                nullable: false,
                has_default: false,
                definition: None,
            },
            CatalogColumn {
                name: "c".into(),
                sql_type: "text".into(),
                key_position: 0,
                nullable: false,
                has_default: false,
                definition: None,
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
            Err(Misfit::Needs(_))
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
