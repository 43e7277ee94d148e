//! What `sluice verify` asks of SQLite (`sink/verify.rs`).

use crate::sink::db::Verifying;
use crate::sink::dialect::{Dialect, TableSpec};

/// The statements that made the table and its unique indexes, table first (SQLite has no
/// `CREATE TABLE … LIKE`): copied with the scratch table's name, they give it the same
/// columns, declared types, defaults, collations, checks, key and unique indexes.
fn copy_source(target: &TableSpec) -> String {
    let (schema, table) = target.schema_and_identifier();
    let master = match schema {
        Some(schema) => format!("{}.sqlite_master", Dialect::Sqlite.quote_one(&schema)),
        None => "sqlite_master".to_string(),
    };
    format!(
        "SELECT sql FROM {master} WHERE tbl_name = {} AND sql IS NOT NULL \
         AND (type = 'table' OR (type = 'index' AND upper(sql) LIKE 'CREATE UNIQUE INDEX%')) \
         ORDER BY type = 'index', name",
        literal(&table)
    )
}

/// `source`'s statements for the scratch table: the table's own `CREATE TABLE` with the
/// scratch table's name in place of its own, and each unique index renamed onto it.
fn copy_table(
    _target: &TableSpec,
    scratch: &TableSpec,
    source: &[String],
) -> Result<Vec<String>, String> {
    let (table, indexes) = source
        .split_first()
        .ok_or("the table's own CREATE TABLE statement is not in sqlite_master")?;
    let (schema, identifier) = scratch.schema_and_identifier();
    let columns = after_name(table, &["CREATE", "TABLE"])
        .ok_or_else(|| format!("cannot read the table's statement: {table}"))?;
    let mut statements = vec![format!(
        "CREATE TABLE {}{columns}",
        scratch.quoted(Dialect::Sqlite)
    )];
    for (n, index) in indexes.iter().enumerate() {
        // `CREATE UNIQUE INDEX name ON table (columns) [WHERE …]`: what follows the
        // table's name is kept.
        let columns = after_name(index, &["CREATE", "UNIQUE", "INDEX"])
            .and_then(|on| after_name(on, &["ON"]))
            .ok_or_else(|| format!("cannot read a unique index's statement: {index}"))?;
        let index_name = Dialect::Sqlite.quote_one(&format!("{identifier}_{n}"));
        let index_name = match &schema {
            Some(schema) => format!("{}.{index_name}", Dialect::Sqlite.quote_one(schema)),
            None => index_name,
        };
        statements.push(format!(
            "CREATE UNIQUE INDEX {index_name} ON {}{columns}",
            Dialect::Sqlite.quote_one(&identifier)
        ));
    }
    Ok(statements)
}

/// What follows `words` (any case; `IF NOT EXISTS` after them is skipped too) and the
/// name after them (`"a b"`, `` `a` ``, `[a]` or a bare word, schema-qualified or not) in
/// `sql`; `None` when `sql` does not read so.
fn after_name<'a>(sql: &'a str, words: &[&str]) -> Option<&'a str> {
    let word = |rest: &'a str, word: &str| -> Option<&'a str> {
        let rest = rest.trim_start();
        let head = rest.get(..word.len())?;
        let tail = &rest[word.len()..];
        (head.eq_ignore_ascii_case(word) && tail.starts_with(char::is_whitespace)).then_some(tail)
    };
    let mut rest = sql;
    for w in words {
        rest = word(rest, w)?;
    }
    if let Some(tail) = word(rest, "IF")
        .and_then(|r| word(r, "NOT"))
        .and_then(|r| word(r, "EXISTS"))
    {
        rest = tail;
    }
    rest = rest.trim_start();
    loop {
        let close = match rest.chars().next()? {
            '"' => Some('"'),
            '`' => Some('`'),
            '[' => Some(']'),
            _ => None,
        };
        rest = match close {
            Some(close) => {
                // A doubled quote inside stands for one.
                let mut at = 1;
                loop {
                    let found = rest[at..].find(close)? + at;
                    if close != ']' && rest[found + 1..].starts_with(close) {
                        at = found + 2;
                    } else {
                        break &rest[found + 1..];
                    }
                }
            }
            None => {
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
                    .unwrap_or(rest.len());
                if end == 0 {
                    return None;
                }
                &rest[end..]
            }
        };
        match rest.strip_prefix('.') {
            Some(next) => rest = next,
            None => return Some(rest),
        }
    }
}

/// A string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

pub(in crate::sink) static VERIFYING: Verifying = Verifying {
    copy_source: Some(copy_source),
    copy_table,
    before_snapshot: None,
    // In WAL mode a read transaction sees the database as of its first read.
    snapshot: "BEGIN",
    compared: |column| column.to_string(),
    as_text: |column| format!("CAST({column} AS TEXT)"),
};

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> TableSpec {
        TableSpec {
            name: name.into(),
            naming: Default::default(),
            columns: Vec::new(),
            key: Vec::new(),
            version: None,
        }
    }

    #[test]
    fn the_copy_is_the_tables_own_statement_and_unique_indexes_renamed() {
        let source = [
            "CREATE TABLE \"Orders (x)\" (rid INTEGER PRIMARY KEY, order_id TEXT NOT NULL COLLATE NOCASE, at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)".to_string(),
            "CREATE UNIQUE INDEX by_order ON \"Orders (x)\" (order_id) WHERE rid > 0".to_string(),
        ];
        let statements =
            copy_table(&spec("Orders (x)"), &spec("sluice_verify_1"), &source).expect("copy");
        assert_eq!(
            statements,
            vec![
                "CREATE TABLE \"sluice_verify_1\" (rid INTEGER PRIMARY KEY, order_id TEXT NOT NULL COLLATE NOCASE, at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)".to_string(),
                "CREATE UNIQUE INDEX \"sluice_verify_1_0\" ON \"sluice_verify_1\" (order_id) WHERE rid > 0".to_string(),
            ]
        );
        assert!(copy_table(&spec("t"), &spec("s"), &[]).is_err());
    }

    #[test]
    fn a_name_is_read_quoted_bracketed_qualified_or_bare() {
        assert_eq!(
            after_name(
                "create table if not exists main.\"a\"\"b\"(x)",
                &["CREATE", "TABLE"]
            ),
            Some("(x)")
        );
        assert_eq!(
            after_name("CREATE TABLE [a b] (x)", &["CREATE", "TABLE"]),
            Some(" (x)")
        );
        assert_eq!(
            after_name("CREATE TABLE `t`(x)", &["CREATE", "TABLE"]),
            Some("(x)")
        );
        assert_eq!(
            after_name("CREATE TABLE t(x)", &["CREATE", "TABLE"]),
            Some("(x)")
        );
        assert_eq!(after_name("CREATE VIEW t AS", &["CREATE", "TABLE"]), None);
        assert_eq!(
            after_name("CREATE TABLE \"open", &["CREATE", "TABLE"]),
            None
        );
    }
}
