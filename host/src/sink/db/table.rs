//! A table as the database's catalog describes it ([`CatalogColumn`]), and the changes of
//! one that `sink.evolve` may make ([`Change`]): what `sink/derived/` fits schemas to, and
//! what each database's folder reads and writes statements for.

use crate::config::ColumnType;

/// `decimal(p,s)` read from a catalog type spelled `name(p,s)` (lower case, trimmed).
pub fn decimal_of(sql_type: &str, name: &str) -> Option<ColumnType> {
    let (p, s) = sql_type
        .strip_prefix(name)?
        .strip_prefix('(')?
        .strip_suffix(')')?
        .split_once(',')?;
    Some(ColumnType::Decimal {
        precision: p.trim().parse().ok()?,
        scale: s.trim().parse().ok()?,
    })
}

/// One column as the database's catalog lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogColumn {
    pub name: String,
    /// The catalog's spelling of its type (PostgreSQL's `format_type`, MySQL's
    /// `DATA_TYPE` with `decimal(p,s)` spelled out, SQLite's declared type), lower case.
    pub sql_type: String,
    /// Its place in the primary key, from 1; 0 when it is not in it.
    pub key_position: u32,
    /// Whether it takes NULL (no `NOT NULL`).
    pub nullable: bool,
    /// Whether it has a default (an `INSERT` that leaves it out does not write NULL).
    pub has_default: bool,
    /// Where a statement that changes the column must restate its whole definition
    /// (MySQL's `MODIFY`): its type with character set and collation, as the catalog
    /// gives them; `None` where the definition holds what a restatement would lose (a
    /// default, a comment, an extra attribute) or the database needs none.
    pub definition: Option<String>,
}

/// One change of a derived table that `sink.evolve` may make.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A nullable column for a field the table lacks (optional, or with a default):
    /// `add_columns`.
    Add { column: String, to: ColumnType },
    /// A column whose field's type grew, altered to the wider type: `widen`.
    Widen {
        column: String,
        /// The schema's field.
        field: String,
        /// The column's type as the catalog spells it.
        from: String,
        to: ColumnType,
    },
    /// A `NOT NULL` column outside the key made nullable: `relax`.
    Relax { column: String },
}

impl Change {
    /// The `sink.evolve` step that makes it.
    pub fn step(&self) -> &'static str {
        match self {
            Change::Add { .. } => "add_columns",
            Change::Widen { .. } => "widen",
            Change::Relax { .. } => "relax",
        }
    }

    /// The column it changes.
    pub fn column(&self) -> &str {
        match self {
            Change::Add { column, .. }
            | Change::Widen { column, .. }
            | Change::Relax { column } => column,
        }
    }

    /// What it does, for a user.
    pub fn describe(&self) -> String {
        match self {
            Change::Add { column, to } => format!("add column {column} ({})", to.name()),
            Change::Widen {
                column,
                field,
                from,
                to,
            } => format!(
                "widen column {column} from {from} to {} (field {field} is {} in the schema)",
                to.name(),
                to.name()
            ),
            Change::Relax { column } => format!("make column {column} nullable"),
        }
    }
}
