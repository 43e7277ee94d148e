//! SQLite's words: `"` quoting, `?` placeholders, its storage classes, its clock, a
//! transaction that takes the write lock at once. Its multi-row statements are the ones
//! it shares with PostgreSQL (`db/portable.rs`).

use std::borrow::Cow;

use crate::config::ColumnType;
use crate::sink::db::{Words, portable};

/// SQLite's words.
pub(in crate::sink) static WORDS: Words = Words {
    quote_one: portable::quote_one,
    param: |_| "?".to_string(),
    type_name,
    // `IMMEDIATE` takes the write lock at once, so two writers queue on the busy timeout
    // instead of one failing to upgrade a read lock.
    begin: "BEGIN IMMEDIATE",
    now_ms: "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
    now: "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
    headers_as_text: "record_headers",
    rows: &portable::ROWS,
};

/// The SQL type of a column: its storage class.
fn type_name(column_type: ColumnType, _in_key: bool) -> Cow<'static, str> {
    use ColumnType::*;
    Cow::Borrowed(match column_type {
        Smallint | Bigint | Int | Bool => "INTEGER",
        Double => "REAL",
        // NUMERIC affinity would turn `12345678.123456789012` into a double with 15
        // digits: decimals are kept as their exact text.
        Bytes => "BLOB",
        Numeric
        | Decimal { .. }
        | Text
        | Timestamp
        | Timestamptz
        | Date
        | Time
        | Json
        | Uuid
        | Array(_) => "TEXT",
    })
}
