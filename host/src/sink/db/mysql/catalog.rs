//! What MySQL's and MariaDB's catalog (`information_schema`) says of a table, and the lock
//! that serialises the processes adding columns to one.

use crate::config::ColumnType;
use crate::sink::db::dialect::{Dialect, TableSpec};
use crate::sink::db::table::{CatalogColumn, Change, decimal_of};
use crate::sink::db::{EvolveLock, ExactKeys};

/// The portable types a column of a catalog type takes (`DATA_TYPE`, a decimal with its
/// precision and scale), when sluice creates it.
pub(in crate::sink) fn portable_types(sql_type: &str) -> Option<Vec<ColumnType>> {
    use ColumnType::*;
    if let Some(decimal) = decimal_of(sql_type, "decimal") {
        return Some(vec![decimal]);
    }
    Some(match sql_type {
        "smallint" => vec![Smallint],
        "bigint" => vec![Bigint],
        "int" => vec![Int],
        "double" => vec![Double],
        "varchar" | "text" => vec![Text],
        "tinyint" => vec![Bool],
        "datetime" => vec![Timestamp, Timestamptz],
        "date" => vec![Date],
        "time" => vec![Time],
        // MariaDB's JSON is LONGTEXT with a check.
        "json" | "longtext" => vec![Json, Text],
        "varbinary" | "longblob" => vec![Bytes],
        "char" => vec![Uuid, Text],
        _ => return None,
    })
}

/// A dead-letter table made before sluice compared names exactly has case-insensitive
/// `connector` and `source_topic` columns (dead letters of `Orders` and `orders` at one
/// offset would collide): these make them exact.
pub(in crate::sink) static EXACT_DEAD_LETTER_KEYS: ExactKeys = ExactKeys {
    count: |schema, table| {
        format!(
            "SELECT CAST(COUNT(*) AS SIGNED) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = {} \
             AND TABLE_NAME = {} AND COLUMN_NAME IN ('connector', 'source_topic') \
             AND COLLATION_NAME <> 'utf8mb4_bin'",
            schema.map_or("DATABASE()".to_string(), literal),
            literal(table)
        )
    },
    alter: |table| {
        format!(
            "ALTER TABLE {table} MODIFY connector VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
             MODIFY source_topic VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL"
        )
    },
};

/// The statement that lists `spec`'s columns: name, type (lower case; a decimal with its
/// precision and scale), position in the primary key (0 outside it), in the table's
/// order. A table without a schema is looked up in the connection's database.
pub(in crate::sink) fn columns_query(spec: &TableSpec) -> String {
    let (schema, table) = spec.schema_and_identifier();
    format!(
        "SELECT CAST(c.COLUMN_NAME AS CHAR), CAST(CASE WHEN LOWER(c.DATA_TYPE) = 'decimal' \
         THEN CONCAT('decimal(', c.NUMERIC_PRECISION, ',', c.NUMERIC_SCALE, ')') \
         ELSE LOWER(c.DATA_TYPE) END AS CHAR), \
         CAST(COALESCE(k.ORDINAL_POSITION, 0) AS CHAR), \
         IF(c.IS_NULLABLE = 'YES', '1', '0'), \
         IF(c.COLUMN_DEFAULT IS NULL OR c.COLUMN_DEFAULT = 'NULL', '0', '1'), \
         CAST(IF(c.EXTRA = '' AND c.COLUMN_COMMENT = '' \
           AND (c.COLUMN_DEFAULT IS NULL OR c.COLUMN_DEFAULT = 'NULL'), \
           CONCAT(c.COLUMN_TYPE, IF(c.CHARACTER_SET_NAME IS NULL, '', \
             CONCAT(' CHARACTER SET ', c.CHARACTER_SET_NAME, ' COLLATE ', c.COLLATION_NAME))), \
           NULL) AS CHAR) \
         FROM information_schema.COLUMNS c LEFT JOIN information_schema.KEY_COLUMN_USAGE k \
         ON k.TABLE_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME \
         AND k.COLUMN_NAME = c.COLUMN_NAME AND k.CONSTRAINT_NAME = 'PRIMARY' \
         WHERE c.TABLE_SCHEMA = {} AND c.TABLE_NAME = {} ORDER BY c.ORDINAL_POSITION",
        schema.map_or("DATABASE()".to_string(), |s| literal(&s)),
        literal(&table)
    )
}

/// `ALTER TABLE … MODIFY COLUMN`, which restates the whole column: only a column whose
/// definition the catalog gives whole (no default, comment or extra attribute that the
/// restatement would drop) is changed.
pub(in crate::sink) fn alter_column(
    spec: &TableSpec,
    column: &CatalogColumn,
    change: &Change,
) -> Result<String, String> {
    let Some(definition) = &column.definition else {
        return Err(format!(
            "column {} has a default, a comment or an extra attribute that MySQL's MODIFY would drop: change it by hand",
            column.name
        ));
    };
    let table = spec.quoted(Dialect::MySql);
    let name = Dialect::MySql.quote_one(&column.name);
    match change {
        Change::Widen { to, .. } => Ok(format!(
            "ALTER TABLE {table} MODIFY COLUMN {name} {} {}",
            Dialect::MySql.type_name(*to, false),
            if column.nullable { "NULL" } else { "NOT NULL" }
        )),
        Change::Relax { .. } => Ok(format!(
            "ALTER TABLE {table} MODIFY COLUMN {name} {definition} NULL"
        )),
        Change::Add { .. } => Err("a new column is added, not altered".into()),
    }
}

/// A string literal: MySQL takes a backslash as an escape inside one.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// How long a process waits for another one evolving the same table, in seconds.
const LOCK_WAIT_SECONDS: u64 = 60;

/// The named lock that serialises the processes adding columns to `table` (MySQL commits
/// DDL by itself, so no transaction can hold it).
pub(in crate::sink) fn evolve_lock(table: &str) -> EvolveLock {
    let name = lock_name(table).replace('\'', "''");
    EvolveLock::Named {
        take: format!("SELECT CAST(GET_LOCK('{name}', {LOCK_WAIT_SECONDS}) AS CHAR)"),
        wait_seconds: LOCK_WAIT_SECONDS,
        release: format!("DO RELEASE_LOCK('{name}')"),
    }
}

/// Name of the lock that serialises the processes evolving one table.
fn lock_name(table: &str) -> String {
    let mut name = format!("sluice_evolve:{table}");
    // GET_LOCK takes names of up to 64 characters.
    if name.len() > 64 {
        let digest = table.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        name = format!("sluice_evolve:{digest:016x}");
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lock_names_are_digested() {
        assert_eq!(lock_name("orders"), "sluice_evolve:orders");
        assert!(lock_name(&"x".repeat(100)).len() <= 64);
    }
}
