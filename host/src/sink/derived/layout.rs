//! A derived table as its catalog lists it ([`Layout`]), and how one schema's rows fit it
//! ([`Layout::fit`], [`Fitted::project`]).

use crate::config::ColumnType;
use crate::map::{DerivedShape, RowOp, SqlValue};
pub use crate::sink::db::table::{CatalogColumn, Change};

use super::super::Dialect;
use super::super::dialect::TableSpec;
use crate::sink::db;

/// The primary key's columns of a table, in key order.
fn primary_key(catalog: &[CatalogColumn]) -> Vec<String> {
    let mut key: Vec<&CatalogColumn> = catalog.iter().filter(|c| c.key_position > 0).collect();
    key.sort_by_key(|c| c.key_position);
    key.into_iter().map(|c| c.name.clone()).collect()
}

/// How long a change the database refused is not asked again ([`Layout::refused`]).
pub const ASK_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(300);

/// A derived table as it stands: its columns and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Every column but the version column, in table order.
    pub catalog: Vec<CatalogColumn>,
    /// The primary key's columns, in key order.
    pub key: Vec<String>,
    /// `NOT NULL` columns this database could not make nullable (`evolve: relax`): not
    /// asked again while the table stays cached. A NULL into one fails its record alone,
    /// as without `relax`.
    pub unrelaxable: Vec<String>,
    /// Changes the database refused or cannot make (a view on the column, a definition a
    /// restatement would lose, a rewrite past its time bound), each as
    /// [`Change::describe`] gives it, with why and when: not asked again for
    /// [`ASK_AGAIN_AFTER`] while the table stays cached, so that each batch of the schema
    /// does not pay for a refused statement (its records fail with the same reason), and a
    /// cause mended by hand (the view dropped) is found within that time.
    pub refused: Vec<(String, String, std::time::Instant)>,
}

impl Layout {
    /// The table as its catalog lists it.
    pub fn of(catalog: Vec<CatalogColumn>) -> Layout {
        Layout {
            key: primary_key(&catalog),
            catalog,
            unrelaxable: Vec::new(),
            refused: Vec::new(),
        }
    }
}

/// How one schema's rows are written to one table: the statement's columns, and for
/// each the shape's column it takes (`None`: NULL).
#[derive(Debug)]
pub struct Fitted {
    pub spec: TableSpec,
    pub from_shape: Vec<Option<usize>>,
}

/// Why a schema does not fit a table as it stands.
#[derive(Debug, PartialEq)]
pub enum Misfit {
    /// Changes of the table that would make it fit (`sink.evolve` says which are made).
    Needs(Vec<Change>),
    /// A change no evolution takes.
    Incompatible(String),
}

/// Whether two column names are one column: PostgreSQL compares sluice's quoted names
/// exactly, MySQL, MariaDB and SQLite without regard to ASCII case.
pub(super) fn same_name(dialect: Dialect, a: &str, b: &str) -> bool {
    if db::of(dialect).column_names_fold_case {
        a.eq_ignore_ascii_case(b)
    } else {
        a == b
    }
}

/// The portable types a column of catalog type `sql_type` takes, when it is a type sluice
/// creates (`None` for any other type); the first is the one it is made for. Each
/// database's catalog says (`db/<name>/catalog.rs`).
fn portable_types(dialect: Dialect, sql_type: &str) -> Option<Vec<ColumnType>> {
    (db::of(dialect).portable_types)(&sql_type.trim().to_ascii_lowercase())
}

/// Most digits before the point of an integer type's values.
fn integer_digits(column_type: ColumnType) -> Option<u16> {
    match column_type {
        ColumnType::Smallint => Some(5),
        ColumnType::Int => Some(10),
        ColumnType::Bigint => Some(19),
        _ => None,
    }
}

/// The type a value of `field` type is written as into a column that takes `takes`: the
/// field's own, or a wider one that holds every value of it exactly; `None` when the
/// column cannot take it (a value could be rounded, cut or refused).
fn written_as(field: ColumnType, takes: &[ColumnType]) -> Option<ColumnType> {
    use ColumnType::*;
    if takes.contains(&field) {
        return Some(field);
    }
    let wider = |column: ColumnType| match (field, column) {
        (Smallint, Int | Bigint) | (Int, Bigint) => true,
        (Smallint | Int | Bigint | Decimal { .. }, Numeric) => true,
        (
            Smallint | Int | Bigint,
            Decimal {
                precision, scale, ..
            },
        ) => integer_digits(field).is_some_and(|digits| digits <= precision - scale),
        (
            Decimal {
                precision: p,
                scale: s,
            },
            Decimal { precision, scale },
        ) => s <= scale && p - s <= precision - scale,
        // Text written by an earlier sluice (which derived these as text) keeps the text.
        (Json | Uuid | Numeric | Decimal { .. } | Date | Time, Text) => true,
        // Arrays in a JSON column (another database's, or an earlier sluice's).
        (Array(_), Json) => true,
        _ => false,
    };
    takes.iter().copied().find(|&column| wider(column))
}

/// Whether a column made for `column` values can be altered to `field`, the type a
/// schema now gives its field, without losing a value: a wider integer, or a decimal of
/// more digits with the same scale.
fn widens_to(column: ColumnType, field: ColumnType) -> bool {
    use ColumnType::*;
    match (column, field) {
        (Smallint, Int | Bigint) | (Int, Bigint) => true,
        (
            Decimal {
                precision: p,
                scale: s,
            },
            Decimal { precision, scale },
        ) => scale == s && precision > p,
        _ => false,
    }
}

impl Layout {
    /// Fits `shape` to this table: `base` gives its name and version column.
    pub fn fit(
        &self,
        dialect: Dialect,
        base: &TableSpec,
        shape: &DerivedShape,
    ) -> Result<Fitted, Misfit> {
        let same = |a: &str, b: &str| same_name(dialect, a, b);
        let shape_key = shape.key_names();
        let key_differs = shape_key.len() != self.key.len()
            || shape_key.iter().zip(&self.key).any(|(a, b)| !same(a, b));
        if key_differs && !(shape.columns.is_empty() && shape_key.is_empty()) {
            return Err(Misfit::Incompatible(format!(
                "the schema's key is ({}), the table's primary key is ({}): a key change",
                shape_key.join(", "),
                self.key.join(", ")
            )));
        }
        let mut needs = Vec::new();
        for (index, column) in shape.columns.iter().enumerate() {
            if self.catalog.iter().any(|c| same(&c.name, &column.name)) {
                continue;
            }
            if shape.key.contains(&index) {
                return Err(Misfit::Incompatible(format!(
                    "key field {} has no column in the table",
                    column.field
                )));
            }
            if !column.optional {
                return Err(Misfit::Incompatible(format!(
                    "field {} ({}) is new and required, without a default: the table has no column {} and rows before it would have none",
                    column.field,
                    column.column_type.name(),
                    column.name
                )));
            }
            needs.push(Change::Add {
                column: column.name.clone(),
                to: column.column_type,
            });
        }
        let mut columns = Vec::with_capacity(self.catalog.len() + 1);
        let mut from_shape = Vec::with_capacity(self.catalog.len() + 1);
        for column in &self.catalog {
            let found = shape
                .columns
                .iter()
                .position(|c| same(&c.name, &column.name));
            let takes = portable_types(dialect, &column.sql_type);
            match (found, takes.as_deref()) {
                (Some(at), Some(takes)) => {
                    let field = &shape.columns[at];
                    let Some(written) = written_as(field.column_type, takes) else {
                        if widens_to(takes[0], field.column_type) && !shape.key.contains(&at) {
                            needs.push(Change::Widen {
                                column: column.name.clone(),
                                field: field.field.clone(),
                                from: column.sql_type.clone(),
                                to: field.column_type,
                            });
                            continue;
                        }
                        return Err(Misfit::Incompatible(format!(
                            "field {} is {} in the schema, and column {} is {}: a type change",
                            field.field,
                            field.column_type.name(),
                            column.name,
                            column.sql_type
                        )));
                    };
                    columns.push((column.name.clone(), written));
                    from_shape.push(Some(at));
                }
                // A type sluice does not create: the database converts the value.
                (Some(at), None) => {
                    columns.push((column.name.clone(), shape.columns[at].column_type));
                    from_shape.push(Some(at));
                }
                // A field that disappeared: NULL from now on.
                (None, Some(takes)) => {
                    columns.push((column.name.clone(), takes[0]));
                    from_shape.push(None);
                }
                (None, None) => {}
            }
        }
        if !needs.is_empty() {
            return Err(Misfit::Needs(needs));
        }
        let key = self
            .key
            .iter()
            .filter_map(|k| columns.iter().position(|(name, _)| same(name, k)))
            .collect::<Vec<_>>();
        if key.len() != self.key.len() {
            return Err(Misfit::Incompatible(format!(
                "the table has no column for every key column ({})",
                self.key.join(", ")
            )));
        }
        let version = base.version.map(|v| {
            columns.push(base.columns[v].clone());
            columns.len() - 1
        });
        Ok(Fitted {
            spec: TableSpec {
                name: base.name.clone(),
                naming: base.naming.clone(),
                columns,
                key,
                version,
            },
            from_shape,
        })
    }
}

impl Layout {
    /// The `NOT NULL` columns outside the key that `shape`'s rows may leave NULL: its
    /// field is gone (and sluice writes NULL, or the column has no default) or optional.
    /// `evolve: relax` makes them nullable.
    pub fn relaxable(&self, dialect: Dialect, shape: &DerivedShape) -> Vec<Change> {
        self.catalog
            .iter()
            .filter(|c| c.key_position == 0 && !c.nullable)
            .filter(|c| {
                !self
                    .unrelaxable
                    .iter()
                    .any(|u| same_name(dialect, u, &c.name))
            })
            .filter(|c| {
                match shape
                    .columns
                    .iter()
                    .find(|f| same_name(dialect, &f.name, &c.name))
                {
                    Some(field) => field.optional,
                    None => !c.has_default || portable_types(dialect, &c.sql_type).is_some(),
                }
            })
            .map(|c| Change::Relax {
                column: c.name.clone(),
            })
            .collect()
    }
}

impl Fitted {
    /// `op` (in its shape's columns) in the statement's columns.
    pub fn project(&self, op: &RowOp) -> RowOp {
        match op {
            RowOp::Write(values) => {
                let data = self.from_shape.len();
                let mut row: Vec<SqlValue> = self
                    .from_shape
                    .iter()
                    .map(|from| {
                        from.and_then(|i| values.get(i).cloned())
                            .unwrap_or(SqlValue::Null)
                    })
                    .collect();
                if self.spec.version.is_some() {
                    // The mapper writes the version after the shape's columns.
                    row.push(values.last().cloned().unwrap_or(SqlValue::Null));
                }
                debug_assert!(row.len() == data + usize::from(self.spec.version.is_some()));
                RowOp::Write(row)
            }
            // Key values (and the version) in key order, as the table's.
            other => other.clone(),
        }
    }
}
