//! What SQLite's catalog (`pragma_table_info`) says of a table.

use crate::config::ColumnType;
use crate::sink::db::dialect::TableSpec;
use crate::sink::db::table::{CatalogColumn, Change};

/// The portable types a column of a declared type takes (lower case), when sluice
/// creates it.
pub(in crate::sink) fn portable_types(sql_type: &str) -> Option<Vec<ColumnType>> {
    use ColumnType::*;
    Some(match sql_type {
        "integer" => vec![Bigint, Int, Smallint, Bool],
        "real" => vec![Double],
        // Created by an earlier sluice for decimals.
        "numeric" => vec![Numeric],
        "blob" => vec![Bytes],
        // Decimals too (sluice keeps their exact text): `written_as` takes them into
        // text, where an integer, a wider type, does not go.
        "text" => vec![Text, Timestamp, Timestamptz, Date, Time, Json, Uuid],
        _ => return None,
    })
}

/// The statement that lists `spec`'s columns: name, declared type (lower case), position
/// in the primary key (0 outside it), in the table's order.
pub(in crate::sink) fn columns_query(spec: &TableSpec) -> String {
    let (schema, table) = spec.schema_and_identifier();
    format!(
        "SELECT name, lower(type), CAST(pk AS TEXT), CASE WHEN \"notnull\" = 0 THEN '1' ELSE '0' END, \
         CASE WHEN dflt_value IS NULL THEN '0' ELSE '1' END, NULL \
         FROM pragma_table_info({}{}) ORDER BY cid",
        literal(&table),
        schema.map_or(String::new(), |s| format!(", {}", literal(&s)))
    )
}

/// SQLite alters no column in place: a column takes any width of its affinity already, and
/// `NOT NULL` goes only with a rebuild of the table (`validate` refuses `relax` here).
pub(in crate::sink) fn alter_column(
    _spec: &TableSpec,
    _column: &CatalogColumn,
    change: &Change,
) -> Result<String, String> {
    Err(format!(
        "SQLite cannot {} in place: rebuild the table by hand",
        change.describe()
    ))
}

/// A string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}
