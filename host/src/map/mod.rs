//! The map stage: a record's value and metadata become column values, typed by the portable
//! column vocabulary. A value that does not fit its column is a [`MapError`] for that record
//! alone.

use base64::Engine as _;
use chrono::{DateTime, NaiveDate, NaiveDateTime};
use serde_json::Value;

use crate::config::{ColumnType, Format, SinkConfig};
use crate::record::Record;

/// A value ready to bind. Each dialect decides how a variant is written for a column type.
#[derive(Debug, Clone, PartialEq)]
pub enum SqlValue {
    Null,
    Int(i64),
    Double(f64),
    Bool(bool),
    /// Text, and the text forms of numeric, date, json and uuid.
    Text(String),
    Bytes(Vec<u8>),
    /// A UTC instant (for `timestamptz`) or a wall-clock time (for `timestamp`).
    Timestamp(NaiveDateTime),
}

/// What a record asks of the table.
#[derive(Debug, Clone, PartialEq)]
pub enum RowOp {
    /// Insert, upsert or update this row (all columns, in column order).
    Write(Vec<SqlValue>),
    /// Delete the row with these key values (in key order): a tombstone.
    Delete(Vec<SqlValue>),
    /// Nothing to write, and why (for example a tombstone on a table without a key).
    Skip(&'static str),
}

/// Why a record does not map.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MapError {
    #[error("value is not valid JSON: {0}")]
    Decode(String),
    #[error("value is not UTF-8 text")]
    NotUtf8,
    #[error("column {column}: {message}")]
    Column { column: String, message: String },
}

/// A JSON pointer (RFC 6901), split into its unescaped tokens once, when the connector is
/// configured: `Value::pointer` splits and unescapes the text again, with an allocation
/// per token, for every column of every record.
#[derive(Debug, Clone, PartialEq)]
struct JsonPointer {
    text: String,
    /// `None` for text that is not a pointer (it finds nothing, as `Value::pointer`).
    tokens: Option<Vec<String>>,
}

impl JsonPointer {
    fn new(text: &str) -> Self {
        let tokens = if text.is_empty() {
            Some(Vec::new())
        } else {
            text.strip_prefix('/').map(|rest| {
                rest.split('/')
                    .map(|t| t.replace("~1", "/").replace("~0", "~"))
                    .collect()
            })
        };
        JsonPointer {
            text: text.to_string(),
            tokens,
        }
    }

    /// What `Value::pointer` finds.
    fn find<'v>(&self, document: &'v Value) -> Option<&'v Value> {
        let mut at = document;
        for token in self.tokens.as_ref()? {
            at = match at {
                Value::Object(map) => map.get(token.as_str())?,
                Value::Array(items) => items.get(array_index(token)?)?,
                _ => return None,
            };
        }
        Some(at)
    }
}

/// An array index as a JSON pointer token spells it: digits, no leading zero or sign.
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// Where a column's value comes from.
#[derive(Debug, Clone, PartialEq)]
enum Source {
    Pointer(JsonPointer),
    Topic,
    Partition,
    Offset,
    Timestamp,
    /// The time the record is mapped, just before its batch's transaction (ms since the
    /// epoch): with `$timestamp`, the latency from produce to insert.
    Now,
    Key,
    Value,
}

impl Source {
    fn parse(from: &str) -> Self {
        match from {
            "$topic" => Source::Topic,
            "$partition" => Source::Partition,
            "$offset" => Source::Offset,
            "$timestamp" => Source::Timestamp,
            "$now" => Source::Now,
            "$key" => Source::Key,
            "$value" => Source::Value,
            pointer => Source::Pointer(JsonPointer::new(pointer)),
        }
    }
}

#[derive(Debug, Clone)]
struct Column {
    name: String,
    source: Source,
    column_type: ColumnType,
}

/// Maps records for one sink. Built once per task from the connector's configuration.
#[derive(Debug, Clone)]
pub struct RowMapper {
    columns: Vec<Column>,
    /// Indices into `columns` of the key, in key order.
    key: Vec<usize>,
    format: Format,
    /// The value was decoded on arrival (a format with a schema): bytes in it are
    /// `{"base64": …}`, which `bytes` and `text` columns take as bytes.
    decoded: bool,
}

/// How much of a bad value an error message quotes.
const MAX_TEXT_FOR_ERRORS: usize = 60;

impl RowMapper {
    /// A mapper for `sink`, reading values as `format` reads them once they arrived
    /// (every decoding format hands on JSON: [`Format::mapped`]).
    pub fn new(sink: &SinkConfig, format: Format) -> Self {
        let decoded = format.decodes();
        let format = format.mapped();
        let columns: Vec<Column> = sink
            .columns
            .0
            .iter()
            .map(|(name, c)| Column {
                name: name.clone(),
                source: Source::parse(&c.from),
                column_type: c.column_type,
            })
            .collect();
        let key = sink
            .key
            .iter()
            .filter_map(|k| columns.iter().position(|c| &c.name == k))
            .collect();
        Self {
            columns,
            key,
            format,
            decoded,
        }
    }

    /// Maps one record.
    pub fn map(&self, record: &Record) -> Result<RowOp, MapError> {
        self.map_parsed(record, None)
    }

    /// The JSON document of a record's value (`format: json`); `None` for a tombstone.
    /// serde_json refuses documents nested deeper than 128 levels, so a hostile value
    /// cannot exhaust the stack.
    pub fn parse(record: &Record) -> Result<Option<Value>, MapError> {
        record
            .value
            .as_deref()
            .map(|raw| {
                serde_json::from_slice::<Value>(raw).map_err(|e| MapError::Decode(e.to_string()))
            })
            .transpose()
    }

    /// Maps one record whose value was already parsed (by [`RowMapper::parse`], for the
    /// schema check); with `None` the value is parsed here when the format asks for it.
    pub fn map_parsed(&self, record: &Record, parsed: Option<Value>) -> Result<RowOp, MapError> {
        let Some(raw) = record.value.as_deref() else {
            return self.tombstone(record);
        };
        let document = match (&self.format, parsed) {
            (Format::String, _) => {
                std::str::from_utf8(raw).map_err(|_| MapError::NotUtf8)?;
                None
            }
            (Format::Bytes, _) => None,
            (_, Some(document)) => Some(document),
            (_, None) => Some(
                serde_json::from_slice::<Value>(raw)
                    .map_err(|e| MapError::Decode(e.to_string()))?,
            ),
        };
        let mut row = Vec::with_capacity(self.columns.len());
        for (index, column) in self.columns.iter().enumerate() {
            let value = self.column_value(column, record, document.as_ref(), raw)?;
            if value == SqlValue::Null && self.key.contains(&index) {
                return Err(column_error(column, "is a key column and cannot be null"));
            }
            row.push(value);
        }
        Ok(RowOp::Write(row))
    }

    fn column_value(
        &self,
        column: &Column,
        record: &Record,
        document: Option<&Value>,
        raw: &[u8],
    ) -> Result<SqlValue, MapError> {
        static NULL: Value = Value::Null;
        let json = match &column.source {
            // Converted from where it lies in the document, not from a copy.
            Source::Pointer(pointer) => {
                let found = document.and_then(|d| pointer.find(d)).unwrap_or(&NULL);
                if self.decoded
                    && let Some(bytes) = decoded_bytes(found, column.column_type)
                {
                    return bytes.map_err(|message| column_error(column, &message));
                }
                return convert(found, column.column_type)
                    .map_err(|message| column_error(column, &message));
            }
            Source::Value => return bytes_value(column, raw),
            Source::Key => match &record.key {
                Some(key) => return bytes_value(column, key),
                None => Value::Null,
            },
            Source::Topic => Value::String(record.topic.clone()),
            Source::Partition => Value::from(record.partition),
            Source::Offset => Value::from(record.offset),
            Source::Timestamp => record.timestamp.map_or(Value::Null, Value::from),
            Source::Now => Value::from(chrono::Utc::now().timestamp_millis()),
        };
        convert(&json, column.column_type).map_err(|message| column_error(column, &message))
    }

    /// A tombstone deletes by key. Key columns that point into the value are read from the
    /// record's key instead (decoded as JSON); a scalar key serves a one-column key.
    fn tombstone(&self, record: &Record) -> Result<RowOp, MapError> {
        if self.key.is_empty() {
            return Ok(RowOp::Skip(
                "tombstone on a sink without key: nothing to delete",
            ));
        }
        let decoded_key: Option<Value> = record
            .key
            .as_deref()
            .and_then(|k| serde_json::from_slice(k).ok());
        let mut key_values = Vec::with_capacity(self.key.len());
        for &index in &self.key {
            let column = &self.columns[index];
            let value = match &column.source {
                Source::Pointer(pointer) => {
                    let json = match &decoded_key {
                        Some(key @ (Value::Object(_) | Value::Array(_))) => {
                            pointer.find(key).cloned()
                        }
                        Some(scalar) if self.key.len() == 1 => Some(scalar.clone()),
                        _ => None,
                    }
                    .ok_or_else(|| {
                        column_error(
                            column,
                            &format!("tombstone: cannot find {} in the record key", pointer.text),
                        )
                    })?;
                    convert(&json, column.column_type).map_err(|m| column_error(column, &m))?
                }
                _ => self.column_value(column, record, None, &[])?,
            };
            if value == SqlValue::Null {
                return Err(column_error(column, "tombstone: key column is null"));
            }
            key_values.push(value);
        }
        Ok(RowOp::Delete(key_values))
    }
}

fn column_error(column: &Column, message: &str) -> MapError {
    MapError::Column {
        column: column.name.clone(),
        message: message.to_string(),
    }
}

/// Raw bytes (`$key`, `$value`): kept as bytes for a `bytes` column, read as UTF-8 text
/// and converted for every other type.
fn bytes_value(column: &Column, raw: &[u8]) -> Result<SqlValue, MapError> {
    if column.column_type == ColumnType::Bytes {
        return Ok(SqlValue::Bytes(raw.to_vec()));
    }
    let text = std::str::from_utf8(raw).map_err(|_| column_error(column, "is not UTF-8 text"))?;
    let json = match column.column_type {
        ColumnType::Json => serde_json::from_str(text)
            .map_err(|e| column_error(column, &format!("is not JSON: {e}")))?,
        _ => Value::String(text.to_string()),
    };
    convert(&json, column.column_type).map_err(|m| column_error(column, &m))
}

fn show(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > MAX_TEXT_FOR_ERRORS {
        let mut end = MAX_TEXT_FOR_ERRORS;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}…", &text[..end])
    } else {
        text
    }
}

/// Converts one JSON value to a column type. JSON null is SQL NULL for every type.
pub fn convert(value: &Value, column_type: ColumnType) -> Result<SqlValue, String> {
    if value.is_null() {
        return Ok(SqlValue::Null);
    }
    let mismatch = || format!("{} does not fit type {}", show(value), column_type.name());
    match column_type {
        ColumnType::Bigint | ColumnType::Int => {
            let n = match value {
                Value::Number(n) => n.as_i64().or_else(|| {
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
                        .map(|f| f as i64)
                }),
                Value::String(s) => s.trim().parse::<i64>().ok(),
                _ => None,
            }
            .ok_or_else(mismatch)?;
            if column_type == ColumnType::Int && i32::try_from(n).is_err() {
                return Err(format!("{n} is out of range for type int"));
            }
            Ok(SqlValue::Int(n))
        }
        ColumnType::Double => match value {
            // `+ 0.0` turns -0.0 into 0.0: equal keys must look equal to the batch's dedupe.
            Value::Number(n) => n
                .as_f64()
                .map(|f| SqlValue::Double(f + 0.0))
                .ok_or_else(mismatch),
            Value::String(s) => s
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(|f| SqlValue::Double(f + 0.0))
                .ok_or_else(mismatch),
            _ => Err(mismatch()),
        },
        ColumnType::Numeric => match value {
            Value::Number(n) if is_decimal(&n.to_string()) => {
                Ok(SqlValue::Text(canonical_decimal(&n.to_string())))
            }
            Value::String(s) if is_decimal(s.trim()) => {
                Ok(SqlValue::Text(canonical_decimal(s.trim())))
            }
            _ => Err(mismatch()),
        },
        ColumnType::Text => Ok(SqlValue::Text(match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })),
        ColumnType::Bool => match value {
            Value::Bool(b) => Ok(SqlValue::Bool(*b)),
            Value::String(s) if s == "true" => Ok(SqlValue::Bool(true)),
            Value::String(s) if s == "false" => Ok(SqlValue::Bool(false)),
            Value::Number(n) if n.as_i64() == Some(0) => Ok(SqlValue::Bool(false)),
            Value::Number(n) if n.as_i64() == Some(1) => Ok(SqlValue::Bool(true)),
            _ => Err(mismatch()),
        },
        ColumnType::Timestamp | ColumnType::Timestamptz => parse_timestamp(value)
            .map(SqlValue::Timestamp)
            .ok_or_else(|| {
                format!(
                    "{} is not a timestamp: use milliseconds since the epoch or RFC 3339 text",
                    show(value)
                )
            }),
        ColumnType::Date => match value {
            Value::String(s) if NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok() => {
                Ok(SqlValue::Text(s.clone()))
            }
            _ => Err(format!("{} is not a date: use YYYY-MM-DD", show(value))),
        },
        ColumnType::Time => match value {
            Value::String(s) => parse_time(s).map(SqlValue::Text).ok_or_else(|| {
                format!(
                    "{} is not a time of day: use HH:MM:SS[.ffffff]",
                    show(value)
                )
            }),
            _ => Err(format!(
                "{} is not a time of day: use HH:MM:SS[.ffffff]",
                show(value)
            )),
        },
        ColumnType::Json => Ok(SqlValue::Text(value.to_string())),
        ColumnType::Bytes => match value {
            Value::String(s) => Ok(SqlValue::Bytes(s.as_bytes().to_vec())),
            _ => Err(mismatch()),
        },
        ColumnType::Uuid => match value {
            Value::String(s) if is_uuid(s) => Ok(SqlValue::Text(s.to_ascii_lowercase())),
            _ => Err(format!("{} is not a UUID", show(value))),
        },
    }
}

/// The text of `{"base64": "…"}`, the shape of bytes decoded on arrival.
fn base64_of(value: &Value) -> Option<&str> {
    match value {
        Value::Object(map) if map.len() == 1 => map.get("base64")?.as_str(),
        _ => None,
    }
}

/// A value decoded on arrival into a `bytes` or `text` column: bytes (`{"base64": …}`)
/// are their bytes, or their base64 text; `None` for every other value.
fn decoded_bytes(value: &Value, column_type: ColumnType) -> Option<Result<SqlValue, String>> {
    let text = base64_of(value)?;
    match column_type {
        ColumnType::Bytes => Some(
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map(SqlValue::Bytes)
                .map_err(|e| format!("{} is not base64: {e}", show(value))),
        ),
        ColumnType::Text => Some(Ok(SqlValue::Text(text.to_string()))),
        _ => None,
    }
}

/// `HH:MM:SS[.f…]` as `HH:MM:SS.ffffff`: the databases keep microseconds, so further digits
/// are cut (not rounded, as PostgreSQL and MySQL would round differently).
fn parse_time(text: &str) -> Option<String> {
    let time = chrono::NaiveTime::parse_from_str(text.trim(), "%H:%M:%S%.f").ok()?;
    Some(time.format("%H:%M:%S%.6f").to_string())
}

fn parse_timestamp(value: &Value) -> Option<NaiveDateTime> {
    match value {
        Value::Number(n) => DateTime::from_timestamp_millis(n.as_i64()?).map(|t| t.naive_utc()),
        Value::String(s) => DateTime::parse_from_rfc3339(s)
            .map(|t| t.naive_utc())
            .ok()
            .or_else(|| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").ok())
            .or_else(|| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").ok()),
        _ => None,
    }
}

fn is_decimal(s: &str) -> bool {
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    let mut parts = digits.splitn(2, '.');
    let whole = parts.next().unwrap_or("");
    let fraction = parts.next().unwrap_or("");
    (!whole.is_empty() || !fraction.is_empty())
        && whole.chars().all(|c| c.is_ascii_digit())
        && fraction.chars().all(|c| c.is_ascii_digit())
}

/// One spelling per decimal value (`+01.50` and `1.5` are the same key to a database):
/// no sign for zero or `+`, no leading zeros, no trailing fractional zeros.
fn canonical_decimal(s: &str) -> String {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let whole = whole.trim_start_matches('0');
    let fraction = fraction.trim_end_matches('0');
    let whole = if whole.is_empty() { "0" } else { whole };
    let body = if fraction.is_empty() {
        whole.to_string()
    } else {
        format!("{whole}.{fraction}")
    };
    if negative && body != "0" {
        format!("-{body}")
    } else {
        body
    }
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_find_what_value_pointer_finds() {
        let document = json!({
            "a": {"b": [10, {"c~d/e": "x"}], "": 1, "0": "zero"},
            "list": [1, 2, 3],
        });
        for text in [
            "",
            "/a",
            "/a/b",
            "/a/b/0",
            "/a/b/1/c~0d~1e",
            "/a/b/01",
            "/a/b/+1",
            "/a/b/9",
            "/a/",
            "/a/0",
            "/list/2",
            "/list/-",
            "/nope",
            "a",
            "/a/b/0/deeper",
        ] {
            assert_eq!(
                JsonPointer::new(text).find(&document),
                document.pointer(text),
                "{text}"
            );
        }
    }
    use crate::config::{ColumnConfig, IndexedColumns, WriteMode};
    use serde_json::json;

    #[test]
    fn values_nested_deeper_than_128_levels_fail_to_decode() {
        let nested = |depth: usize| {
            Record::from_value(
                "t",
                0,
                0,
                format!("{}1{}", "[".repeat(depth), "]".repeat(depth)),
            )
        };
        assert!(RowMapper::parse(&nested(100)).is_ok());
        let error = RowMapper::parse(&nested(200)).unwrap_err();
        assert!(
            matches!(error, MapError::Decode(ref m) if m.contains("recursion limit")),
            "{error}"
        );
    }

    fn sink(columns: &[(&str, &str, ColumnType)], key: &[&str]) -> SinkConfig {
        SinkConfig {
            url: "sqlite://x".into(),
            table: "t".into(),
            mode: WriteMode::Upsert,
            key: key.iter().map(|k| k.to_string()).collect(),
            columns: IndexedColumns(
                columns
                    .iter()
                    .map(|(n, f, t)| {
                        (
                            n.to_string(),
                            ColumnConfig {
                                from: f.to_string(),
                                column_type: *t,
                            },
                        )
                    })
                    .collect(),
            ),
            create_table: true,
        }
    }

    fn record(key: Option<&str>, value: Option<&str>) -> Record {
        Record {
            topic: "words".into(),
            partition: 3,
            offset: 42,
            timestamp: Some(1_700_000_000_123),
            key: key.map(|k| k.as_bytes().to_vec()),
            value: value.map(|v| v.as_bytes().to_vec()),
            headers: vec![],
        }
    }

    #[test]
    fn maps_pointers_and_metadata() {
        let mapper = RowMapper::new(
            &sink(
                &[
                    ("uid", "/uid", ColumnType::Bigint),
                    ("word", "/w/0", ColumnType::Text),
                    ("at", "$timestamp", ColumnType::Timestamptz),
                    ("off", "$offset", ColumnType::Bigint),
                    ("topic", "$topic", ColumnType::Text),
                    ("missing", "/nope", ColumnType::Int),
                ],
                &["uid"],
            ),
            Format::Json,
        );
        let op = mapper
            .map(&record(None, Some(r#"{"uid": 7, "w": ["hi"]}"#)))
            .unwrap();
        let RowOp::Write(row) = op else {
            panic!("{op:?}")
        };
        assert_eq!(row[0], SqlValue::Int(7));
        assert_eq!(row[1], SqlValue::Text("hi".into()));
        assert_eq!(
            row[2],
            SqlValue::Timestamp(
                DateTime::from_timestamp_millis(1_700_000_000_123)
                    .unwrap()
                    .naive_utc()
            )
        );
        assert_eq!(row[3], SqlValue::Int(42));
        assert_eq!(row[4], SqlValue::Text("words".into()));
        assert_eq!(row[5], SqlValue::Null);
    }

    #[test]
    fn now_is_the_time_of_mapping() {
        let mapper = RowMapper::new(
            &sink(
                &[
                    ("uid", "/uid", ColumnType::Bigint),
                    ("written_at", "$now", ColumnType::Timestamptz),
                    ("written_ms", "$now", ColumnType::Bigint),
                ],
                &["uid"],
            ),
            Format::Json,
        );
        let before = chrono::Utc::now().timestamp_millis();
        let op = mapper.map(&record(None, Some(r#"{"uid": 1}"#))).unwrap();
        let after = chrono::Utc::now().timestamp_millis();
        let RowOp::Write(row) = op else {
            panic!("{op:?}")
        };
        let SqlValue::Int(ms) = row[2] else {
            panic!("{row:?}")
        };
        assert!(
            (before..=after).contains(&ms),
            "{before} <= {ms} <= {after}"
        );
        let SqlValue::Timestamp(at) = row[1] else {
            panic!("{row:?}")
        };
        let at = at.and_utc().timestamp_millis();
        assert!(
            (before..=after).contains(&at),
            "{before} <= {at} <= {after}"
        );
    }

    #[test]
    fn bad_values_are_per_record_errors() {
        let mapper = RowMapper::new(
            &sink(&[("uid", "/uid", ColumnType::Int)], &["uid"]),
            Format::Json,
        );
        let err = mapper
            .map(&record(None, Some(r#"{"uid": "x"}"#)))
            .unwrap_err();
        assert_eq!(err.to_string(), "column uid: \"x\" does not fit type int");
        let err = mapper
            .map(&record(None, Some(r#"{"uid": 4000000000}"#)))
            .unwrap_err();
        assert!(err.to_string().contains("out of range"), "{err}");
        let err = mapper
            .map(&record(None, Some(r#"{"other": 1}"#)))
            .unwrap_err();
        assert!(err.to_string().contains("cannot be null"), "{err}");
        assert!(matches!(
            mapper.map(&record(None, Some("{nope"))),
            Err(MapError::Decode(_))
        ));
    }

    #[test]
    fn tombstones_delete_by_key() {
        let mapper = RowMapper::new(
            &sink(
                &[
                    ("uid", "/uid", ColumnType::Bigint),
                    ("w", "/w", ColumnType::Text),
                ],
                &["uid"],
            ),
            Format::Json,
        );
        assert_eq!(
            mapper.map(&record(Some(r#"{"uid": 9}"#), None)).unwrap(),
            RowOp::Delete(vec![SqlValue::Int(9)])
        );
        assert_eq!(
            mapper.map(&record(Some("9"), None)).unwrap(),
            RowOp::Delete(vec![SqlValue::Int(9)])
        );
        assert!(mapper.map(&record(None, None)).is_err());
        let keyless = RowMapper::new(&sink(&[("w", "/w", ColumnType::Text)], &[]), Format::Json);
        assert!(matches!(
            keyless.map(&record(None, None)).unwrap(),
            RowOp::Skip(_)
        ));
    }

    #[test]
    fn conversions() {
        assert_eq!(
            convert(&json!("12.50"), ColumnType::Numeric),
            Ok(SqlValue::Text("12.5".into()))
        );
        assert!(convert(&json!("12,50"), ColumnType::Numeric).is_err());
        for (a, b) in [
            ("1", "1.0"),
            ("+01.50", "1.5"),
            ("-0", "0.000"),
            ("0.10", ".1"),
        ] {
            assert_eq!(
                convert(&json!(a), ColumnType::Numeric),
                convert(&json!(b), ColumnType::Numeric),
                "{a} vs {b}"
            );
        }
        assert_eq!(
            convert(&json!(-0.0), ColumnType::Double),
            Ok(SqlValue::Double(0.0))
        );
        assert_eq!(
            convert(&json!("-12.500"), ColumnType::Numeric),
            Ok(SqlValue::Text("-12.5".into()))
        );
        assert_eq!(
            convert(&json!({"a": 1}), ColumnType::Json),
            Ok(SqlValue::Text("{\"a\":1}".into()))
        );
        assert!(convert(&json!("2024-02-30"), ColumnType::Date).is_err());
        assert!(
            convert(
                &json!("123e4567-e89b-12d3-a456-426614174000"),
                ColumnType::Uuid
            )
            .is_ok()
        );
        assert!(
            convert(
                &json!("2024-01-02T03:04:05.123+02:00"),
                ColumnType::Timestamptz
            )
            .is_ok()
        );
        assert_eq!(
            convert(&json!(1.0), ColumnType::Bigint),
            Ok(SqlValue::Int(1))
        );
    }
}
