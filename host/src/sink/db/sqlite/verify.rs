//! What `sluice verify` asks of SQLite (`sink/verify.rs`).

use crate::sink::db::Verifying;
use crate::sink::db::dialect::{Dialect, TableSpec};

/// What the catalog says of the table and its unique indexes, one JSON object a row
/// (SQLite has no `CREATE TABLE … LIKE`): each column (`cid`, `column`, `type`, `notnull`,
/// `default`, `pk`) and each unique index that is not the primary key (`index`, its `sql`
/// when it was made by `CREATE UNIQUE INDEX`, its `columns`).
fn copy_source(target: &TableSpec) -> String {
    let (schema, table) = target.schema_and_identifier();
    let table = literal(&table);
    let (in_schema, master) = match &schema {
        Some(schema) => (
            format!(", {}", literal(schema)),
            format!("{}.sqlite_master", Dialect::Sqlite.quote_one(schema)),
        ),
        None => (String::new(), "sqlite_master".to_string()),
    };
    format!(
        "SELECT json_object('cid', cid, 'column', name, 'type', type, 'notnull', \"notnull\", \
         'default', dflt_value, 'pk', pk) FROM pragma_table_info({table}{in_schema}) \
         UNION ALL \
         SELECT json_object('index', il.name, 'sql', m.sql, 'columns', \
         (SELECT json_group_array(name) FROM (SELECT name FROM pragma_index_info(il.name{in_schema}) ORDER BY seqno))) \
         FROM pragma_index_list({table}{in_schema}) il \
         LEFT JOIN {master} m ON m.type = 'index' AND m.name = il.name \
         WHERE il.\"unique\" = 1 AND il.origin <> 'pk'"
    )
}

/// One column as `copy_source` lists it.
#[derive(serde::Deserialize)]
struct Column {
    cid: i64,
    column: String,
    #[serde(rename = "type")]
    sql_type: Option<String>,
    notnull: i64,
    default: Option<String>,
    pk: i64,
}

/// One unique index as `copy_source` lists it: its columns an array, or the array's text.
#[derive(serde::Deserialize)]
struct Index {
    sql: Option<String>,
    columns: serde_json::Value,
}

/// The scratch table from `source` (`copy_source`'s rows): the table's columns with their
/// declared types, `NOT NULL`s and defaults, its primary key, and its unique indexes (its
/// own `CREATE UNIQUE INDEX`, renamed onto the copy, or, for a `UNIQUE` in the table's
/// definition, one on the same columns). Not its foreign keys (a row of the copy would
/// hold back deletes of the parent table's rows), checks, collations or `STRICT`.
fn copy_table(
    target: &TableSpec,
    scratch: &TableSpec,
    source: &[String],
) -> Result<Vec<String>, String> {
    let quote = |name: &str| Dialect::Sqlite.quote_one(name);
    let mut columns = Vec::new();
    let mut indexes = Vec::new();
    for row in source {
        let value: serde_json::Value =
            serde_json::from_str(row).map_err(|e| format!("the catalog's answer {row}: {e}"))?;
        if value.get("index").is_some() {
            indexes.push(
                serde_json::from_value::<Index>(value)
                    .map_err(|e| format!("the catalog's answer {row}: {e}"))?,
            );
        } else {
            columns.push(
                serde_json::from_value::<Column>(value)
                    .map_err(|e| format!("the catalog's answer {row}: {e}"))?,
            );
        }
    }
    if columns.is_empty() {
        return Err(format!("table {} is not in the catalog", target.name));
    }
    columns.sort_by_key(|c| c.cid);
    let mut parts: Vec<String> = columns
        .iter()
        .map(|c| {
            let mut part = quote(&c.column);
            if let Some(sql_type) = c.sql_type.as_deref().filter(|t| !t.is_empty()) {
                part.push(' ');
                part.push_str(sql_type);
            }
            if c.notnull != 0 {
                part.push_str(" NOT NULL");
            }
            if let Some(default) = &c.default {
                part.push_str(&format!(" DEFAULT ({default})"));
            }
            part
        })
        .collect();
    let mut key: Vec<&Column> = columns.iter().filter(|c| c.pk > 0).collect();
    key.sort_by_key(|c| c.pk);
    if !key.is_empty() {
        let names: Vec<String> = key.iter().map(|c| quote(&c.column)).collect();
        parts.push(format!("PRIMARY KEY ({})", names.join(", ")));
    }
    let mut statements = vec![format!(
        "CREATE TABLE {} ({})",
        scratch.quoted(Dialect::Sqlite),
        parts.join(", ")
    )];
    let (schema, identifier) = scratch.schema_and_identifier();
    for (n, index) in indexes.iter().enumerate() {
        let index_name = quote(&format!("{identifier}_{n}"));
        let index_name = match &schema {
            Some(schema) => format!("{}.{index_name}", quote(schema)),
            None => index_name,
        };
        // What follows the table's name in the index's own statement: its columns or
        // expressions, and a partial index's WHERE.
        let on = match &index.sql {
            Some(sql) => after_name(sql, &["CREATE", "UNIQUE", "INDEX"])
                .and_then(|on| after_name(on, &["ON"]))
                .map(str::to_string)
                .ok_or_else(|| format!("cannot read a unique index's statement: {sql}"))?,
            None => {
                let columns = match &index.columns {
                    serde_json::Value::String(text) => serde_json::from_str(text)
                        .map_err(|e| format!("a unique index's columns {text}: {e}"))?,
                    columns => columns.clone(),
                };
                let names: Vec<String> = serde_json::from_value(columns)
                    .map_err(|e| format!("a unique index's columns: {e}"))?;
                let names: Vec<String> = names.iter().map(|n| quote(n)).collect();
                format!(" ({})", names.join(", "))
            }
        };
        statements.push(format!(
            "CREATE UNIQUE INDEX {index_name} ON {}{on}",
            quote(&identifier)
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
    fn the_copy_has_the_columns_key_defaults_and_unique_indexes_and_no_foreign_key() {
        let source = [
            r#"{"cid":1,"column":"order_id","type":"TEXT","notnull":1,"default":null,"pk":0}"#,
            r#"{"cid":0,"column":"rid","type":"INTEGER","notnull":0,"default":null,"pk":1}"#,
            r#"{"cid":2,"column":"at","type":"TEXT","notnull":1,"default":"CURRENT_TIMESTAMP","pk":0}"#,
            r#"{"cid":3,"column":"parent","type":"","notnull":0,"default":null,"pk":0}"#,
            r#"{"index":"by_order","sql":"CREATE UNIQUE INDEX by_order ON \"Orders (x)\" (order_id) WHERE rid > 0","columns":"[\"order_id\"]"}"#,
            r#"{"index":"sqlite_autoindex_x_1","sql":null,"columns":["at","parent"]}"#,
        ]
        .map(str::to_string);
        let statements =
            copy_table(&spec("Orders (x)"), &spec("sluice_verify_1"), &source).expect("copy");
        assert_eq!(
            statements,
            vec![
                "CREATE TABLE \"sluice_verify_1\" (\"rid\" INTEGER, \"order_id\" TEXT NOT NULL, \"at\" TEXT NOT NULL DEFAULT (CURRENT_TIMESTAMP), \"parent\", PRIMARY KEY (\"rid\"))".to_string(),
                "CREATE UNIQUE INDEX \"sluice_verify_1_0\" ON \"sluice_verify_1\" (order_id) WHERE rid > 0".to_string(),
                "CREATE UNIQUE INDEX \"sluice_verify_1_1\" ON \"sluice_verify_1\" (\"at\", \"parent\")".to_string(),
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
