//! PostgreSQL's words: `"` quoting, numbered placeholders, its type names and clock. Its
//! multi-row statements are the ones it shares with SQLite (`db/portable.rs`); its fast
//! writes are `COPY` and `UNNEST` (`copy.rs`, `write.rs`).

use std::borrow::Cow;

use crate::config::ColumnType;
use crate::sink::db::{Words, portable};

/// PostgreSQL's words.
pub(in crate::sink) static WORDS: Words = Words {
    quote_one: portable::quote_one,
    param: |n| format!("${n}"),
    type_name,
    begin: "BEGIN",
    now_ms: "(extract(epoch from clock_timestamp()) * 1000)::bigint",
    now: "now()",
    headers_as_text: "record_headers::text",
    rows: &portable::ROWS,
};

/// The SQL type of a column.
fn type_name(column_type: ColumnType, _in_key: bool) -> Cow<'static, str> {
    use ColumnType::*;
    Cow::Borrowed(match column_type {
        Smallint => "SMALLINT",
        Bigint => "BIGINT",
        Int => "INTEGER",
        Double => "DOUBLE PRECISION",
        Numeric => "NUMERIC",
        Decimal { precision, scale } => {
            return Cow::Owned(format!("NUMERIC({precision},{scale})"));
        }
        Text => "TEXT",
        Bool => "BOOLEAN",
        Timestamp => "TIMESTAMP",
        Timestamptz => "TIMESTAMPTZ",
        Date => "DATE",
        Time => "TIME",
        Json => "JSONB",
        Bytes => "BYTEA",
        Uuid => "UUID",
        Array(element) => {
            return Cow::Owned(format!("{}[]", type_name(element.scalar(), false)));
        }
    })
}
