//! MySQL's and MariaDB's words: backtick quoting, `?` placeholders, their type names and
//! clock, and their multi-row statements: `ON DUPLICATE KEY UPDATE` upserts, updates and
//! versioned deletes through a derived table joined by key.

use std::borrow::Cow;

use crate::config::ColumnType;
use crate::sink::db::dialect::{Dialect, TableSpec};
use crate::sink::db::row_statements::value_groups;
use crate::sink::db::{RowStatements, Words};

/// MySQL's and MariaDB's words.
pub(in crate::sink) static WORDS: Words = Words {
    quote_one,
    param: |_| "?".to_string(),
    type_name,
    begin: "BEGIN",
    now_ms: "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
    now: "CURRENT_TIMESTAMP(6)",
    headers_as_text: "CAST(record_headers AS CHAR)",
    rows: &RowStatements {
        upsert,
        update_values,
        delete_values,
    },
};

fn quote_one(identifier: &str) -> String {
    format!("`{}`", identifier.replace('`', "``"))
}

/// The SQL type of a column; key columns need a bounded length to be indexed.
fn type_name(column_type: ColumnType, in_key: bool) -> Cow<'static, str> {
    use ColumnType::*;
    Cow::Borrowed(match column_type {
        Smallint => "SMALLINT",
        Bigint => "BIGINT",
        Int => "INT",
        Double => "DOUBLE",
        // The widest DECIMAL: 65 digits, 30 after the point.
        Numeric => "DECIMAL(65,30)",
        Decimal { precision, scale } => {
            return Cow::Owned(format!("DECIMAL({},{})", precision.min(65), scale.min(30)));
        }
        // Keys compare exactly: "Orders" and "orders" are two keys.
        Text if in_key => "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
        // TEXT holds 64 KiB; PostgreSQL's text, up to 1 GB, needs LONGTEXT.
        Text => "LONGTEXT",
        Bool => "BOOLEAN",
        Timestamp | Timestamptz => "DATETIME(6)",
        Date => "DATE",
        Time => "TIME(6)",
        Json | Array(_) => "JSON",
        Bytes if in_key => "VARBINARY(255)",
        Bytes => "LONGBLOB",
        Uuid => "CHAR(36)",
    })
}

/// What follows a multi-row `INSERT` to make it an upsert.
fn upsert(dialect: Dialect, table: &TableSpec) -> String {
    let values = table.value_columns();
    let set: Vec<String> = if values.is_empty() {
        table
            .key
            .iter()
            .map(|&i| format!("{0} = {0}", dialect.quote_one(&table.columns[i].0)))
            .collect()
    } else if let Some(v) = table.version {
        // Assignments run left to right, each seeing the ones before: the version column
        // comes last, so every test reads the stored one.
        let v = dialect.quote_one(&table.columns[v].0);
        let newer = format!("{v} IS NULL OR {v} < VALUES({v})");
        values
            .iter()
            .map(|&i| {
                format!(
                    "{0} = IF({newer}, VALUES({0}), {0})",
                    dialect.quote_one(&table.columns[i].0)
                )
            })
            .collect()
    } else {
        values
            .iter()
            .map(|&i| format!("{0} = VALUES({0})", dialect.quote_one(&table.columns[i].0)))
            .collect()
    };
    format!(" ON DUPLICATE KEY UPDATE {}", set.join(", "))
}

/// Multi-row update by key: binds every column of every row, in column order.
fn update_values(dialect: Dialect, table: &TableSpec, rows: usize) -> String {
    let t = table.quoted(dialect);
    let values = table.value_columns();
    let first: Vec<String> = table
        .columns
        .iter()
        .map(|(n, _)| format!("? AS {}", dialect.quote_one(n)))
        .collect();
    let rest = vec![
        format!("SELECT {}", vec!["?"; table.columns.len()].join(", "));
        rows.saturating_sub(1)
    ];
    let mut derived = format!("SELECT {}", first.join(", "));
    for select in rest {
        derived.push_str(" UNION ALL ");
        derived.push_str(&select);
    }
    let on: Vec<String> = table
        .key
        .iter()
        .map(|&i| format!("t.{0} = v.{0}", dialect.quote_one(&table.columns[i].0)))
        .collect();
    let set: Vec<String> = values
        .iter()
        .map(|&i| format!("t.{0} = v.{0}", dialect.quote_one(&table.columns[i].0)))
        .collect();
    format!(
        "UPDATE {t} AS t JOIN ({derived}) AS v ON {} SET {}",
        on.join(" AND "),
        set.join(", ")
    )
}

/// Multi-row delete by a key of several columns, or with a version column (a row is
/// deleted only if its stored version is older): binds the key columns of every row, and
/// its version. A single key column without a version is `row_statements.rs`'s.
fn delete_values(dialect: Dialect, table: &TableSpec, rows: usize) -> String {
    let t = table.quoted(dialect);
    let Some(version) = table.version else {
        let key = dialect.column_list(table, &table.key);
        return format!(
            "DELETE FROM {t} WHERE ({key}) IN ({})",
            value_groups(rows, table.key.len())
        );
    };
    let v = dialect.quote_one(&table.columns[version].0);
    let bound = table.delete_columns();
    let first: Vec<String> = bound
        .iter()
        .map(|&i| format!("? AS {}", dialect.quote_one(&table.columns[i].0)))
        .collect();
    let mut derived = format!("SELECT {}", first.join(", "));
    for _ in 1..rows {
        derived.push_str(&format!(
            " UNION ALL SELECT {}",
            vec!["?"; bound.len()].join(", ")
        ));
    }
    let on: Vec<String> = table
        .key
        .iter()
        .map(|&i| format!("t.{0} = d.{0}", dialect.quote_one(&table.columns[i].0)))
        .collect();
    format!(
        "DELETE t FROM {t} AS t JOIN ({derived}) AS d ON {} WHERE t.{v} IS NULL OR t.{v} < d.{v}",
        on.join(" AND ")
    )
}
