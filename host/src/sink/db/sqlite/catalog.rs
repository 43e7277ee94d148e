//! What SQLite's catalog (`pragma_table_info`) says of a table.

use crate::sink::dialect::TableSpec;

/// The statement that lists `spec`'s columns: name, declared type (lower case), position
/// in the primary key (0 outside it), in the table's order.
pub(in crate::sink) fn columns_query(spec: &TableSpec) -> String {
    let (schema, table) = spec.schema_and_identifier();
    format!(
        "SELECT name, lower(type), CAST(pk AS TEXT) FROM pragma_table_info({}{}) ORDER BY cid",
        literal(&table),
        schema.map_or(String::new(), |s| format!(", {}", literal(&s)))
    )
}

/// A string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}
