//! The map stage: a record's value and metadata become column values, typed by the portable
//! column vocabulary. A value that does not fit its column is a [`MapError`] for that record
//! alone.

use chrono::NaiveDateTime;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::config::{ColumnType, Envelope, Format, OnTruncate, SinkConfig};
use crate::record::Record;

mod convert;
mod derive;
mod envelope;
mod missing;
mod route;
mod table_routes;
#[cfg(test)]
mod tests;
mod version;

pub use convert::convert;
use convert::decoded_bytes;
pub use derive::{DerivedColumn, DerivedShape, Deriver, TypeRules, column_type_of};
use envelope::Change;
pub use route::{SourceRead, TableRouter};
pub use table_routes::{SourcePosition, TableRoutes};
use version::VersionSource;
pub use version::encode as encode_version;

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
    /// The source did not send this column's value (Debezium's unavailable-value
    /// placeholder: an unchanged TOASTed column under `REPLICA IDENTITY DEFAULT`). A row
    /// holding one is a patch: its write sets only the columns it carries, and keeps the
    /// stored value of this one (`sink/patch.rs`). Never bound.
    Unavailable,
}

impl SqlValue {
    /// Whether a row leaves out a column the source did not send: it updates the stored
    /// row instead of writing a whole one.
    pub fn is_patch(row: &[SqlValue]) -> bool {
        row.iter().any(|v| matches!(v, SqlValue::Unavailable))
    }
}

/// What a record asks of the table.
#[derive(Debug, Clone, PartialEq)]
pub enum RowOp {
    /// Insert, upsert or update this row (all columns, in column order; with
    /// `sink.version`, the version column last).
    Write(Vec<SqlValue>),
    /// Delete the row with these key values (in key order): a tombstone, or a change
    /// event's delete. With `sink.version`, the version follows the key values.
    Delete(Vec<SqlValue>),
    /// Delete every row of the table (a change event's truncate, `sink.on_truncate:
    /// truncate`); with `sink.version`, only rows older than this version.
    Truncate(Option<SqlValue>),
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
    /// `envelope: debezium | opencdc` on a value that is not such a change event.
    #[error("{0}")]
    NotAChangeEvent(String),
    /// `sink.version` finds no usable version in the record.
    #[error("version: {0}")]
    MissingVersion(String),
    /// A truncate event under `sink.on_truncate: fail`.
    #[error("a truncate event (op t): sink.on_truncate is fail; set it to truncate or skip")]
    Truncate,
    /// A table template makes no table a record can go to.
    #[error("table: {0}")]
    TableName(String),
    /// With derived columns: the record's schema gives no columns the table can take.
    #[error("{0}")]
    SchemaIncompatible(String),
    /// With derived columns: a field's name is no column name the database takes (empty,
    /// too long, a control character, a system column's name), or the schema has more
    /// fields than a table takes columns.
    #[error("{0}")]
    ColumnName(String),
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
    /// The value is text holding a JSON document (a derived column of Debezium's
    /// `io.debezium.data.Json`): a `json` column takes that document as written.
    json_text: bool,
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
    /// The change-event envelope: pointers then read the row, not the value.
    envelope: Envelope,
    /// Where the version is, with `sink.version` (or `envelope: debezium`): written as the
    /// last column of a row, and after the key of a delete.
    version: Option<VersionSource>,
    on_truncate: OnTruncate,
    /// Debezium's placeholder for a value it did not read (`sink.unavailable_value`, under
    /// `envelope: debezium`): a column holding it maps to [`SqlValue::Unavailable`].
    placeholder: Option<Placeholder>,
    /// Why this mapper writes and deletes no row, though it applies a truncate: a change
    /// event whose key `key: record_key` needs is missing (Debezium's truncate event has a
    /// null key). Its creates, updates and deletes fail alone with this reason.
    keyless: Option<String>,
}

impl RowMapper {
    /// A mapper for `sink`, reading values as `format` reads them once they arrived
    /// (every decoding format hands on JSON: [`Format::mapped`]).
    pub fn new(sink: &SinkConfig, format: Format, envelope: Envelope) -> Self {
        let decoded = format.decodes();
        let format = format.mapped();
        let columns: Vec<Column> = sink
            .columns()
            .iter()
            .map(|(name, c)| Column {
                name: name.clone(),
                source: Source::parse(&c.from),
                column_type: c.column_type,
                json_text: false,
            })
            .collect();
        let key = sink
            .key_columns()
            .iter()
            .filter_map(|k| columns.iter().position(|c| &c.name == k))
            .collect();
        Self {
            columns,
            key,
            format,
            decoded,
            envelope,
            version: sink
                .versioning(envelope)
                .map(|v| VersionSource::parse(&v.from)),
            on_truncate: sink.on_truncate,
            placeholder: (envelope == Envelope::Debezium)
                .then(|| Placeholder::new(sink.unavailable_value())),
            keyless: None,
        }
    }

    /// Whether a column reads the value as it is (`$value`).
    pub fn reads_value(&self) -> bool {
        self.columns.iter().any(|c| c.source == Source::Value)
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
        self.map_parsed_with_source(record, parsed).0
    }

    /// [`RowMapper::map_parsed`], and the text of the change event's `source` block when the
    /// event was read as text here (a Debezium event in JSON): a table template that reads
    /// the source names takes them from it, instead of reading the whole value again.
    pub fn map_parsed_with_source<'r>(
        &self,
        record: &'r Record,
        parsed: Option<Value>,
    ) -> (Result<RowOp, MapError>, Option<&'r RawValue>) {
        if parsed.is_none()
            && let Some(raw) = record.value.as_deref()
            && self.format == Format::Json
            && self.envelope == Envelope::Debezium
            && !matches!(self.version, Some(VersionSource::Pointer(_)))
            && self.keyless.is_none()
            && let Some((mapped, source)) = self.map_debezium_borrowed(record, raw)
        {
            return (mapped, source);
        }
        (self.map_whole(record, parsed), None)
    }

    /// [`RowMapper::map_parsed`] past the borrowed reading: the whole document.
    fn map_whole(&self, record: &Record, parsed: Option<Value>) -> Result<RowOp, MapError> {
        let Some(raw) = record.value.as_deref() else {
            return match self.envelope {
                Envelope::None => self.tombstone(record),
                // Debezium follows each delete with a tombstone, for log compaction: the
                // delete event before it did the work.
                Envelope::Debezium => Ok(RowOp::Skip("the tombstone after a Debezium delete")),
                Envelope::Opencdc => Err(MapError::NotAChangeEvent(
                    "a record without a value is not an OpenCDC record".into(),
                )),
            };
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
        if self.envelope != Envelope::None {
            return self.map_change(record, document.as_ref(), raw);
        }
        let mut row = self.row(record, document.as_ref(), raw)?;
        if let Some(version) = &self.version {
            row.push(self.version_value(version, record, document.as_ref())?);
        }
        Ok(RowOp::Write(row))
    }

    /// The columns of a row read from `document`.
    fn row(
        &self,
        record: &Record,
        document: Option<&Value>,
        raw: &[u8],
    ) -> Result<Vec<SqlValue>, MapError> {
        let mut row = Vec::with_capacity(self.columns.len() + 1);
        for (index, column) in self.columns.iter().enumerate() {
            let value = self.column_value(column, record, document, raw)?;
            if self.key.contains(&index) {
                match value {
                    SqlValue::Null => {
                        return Err(missing::null_key(column, document));
                    }
                    SqlValue::Unavailable => {
                        return Err(column_error(
                            column,
                            "is a key column, and the change event carries Debezium's unavailable-value placeholder in it",
                        ));
                    }
                    _ => {}
                }
            }
            row.push(value);
        }
        Ok(row)
    }

    fn version_value(
        &self,
        version: &VersionSource,
        record: &Record,
        event: Option<&Value>,
    ) -> Result<SqlValue, MapError> {
        let event = event.map(envelope::unwrapped);
        version
            .read(record, event, self.envelope)
            .map(SqlValue::Text)
            .map_err(MapError::MissingVersion)
    }

    /// A Debezium event in JSON text, read without building the whole document: only the
    /// row the change writes (`after`, or `before` for a delete) becomes a value, and the
    /// source position is read from its few fields (the rest of `source`, `transaction` and
    /// a `before` beside `after` are passed over). `None` for anything but a plain create,
    /// read, update or delete: the whole document is read then, as before, and fails there
    /// with its reason if it must. Beside the operation, the `source` block's text.
    fn map_debezium_borrowed<'r>(
        &self,
        record: &Record,
        raw: &'r [u8],
    ) -> Option<(Result<RowOp, MapError>, Option<&'r RawValue>)> {
        // Only an object: serde reads a struct from an array too, field by field in order,
        // and an array is no change event (the whole reading says why).
        if raw.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return None;
        }
        let event: envelope::RawDebezium<'r> = serde_json::from_slice(raw).ok()?;
        let row_of = |raw: Option<&RawValue>| -> Option<Value> {
            serde_json::from_str::<Value>(raw?.get())
                .ok()
                .filter(Value::is_object)
        };
        let (write, row) = match event.op.as_deref()? {
            "c" | "r" | "u" => (true, row_of(event.after)?),
            "d" => (false, row_of(event.before)?),
            _ => return None,
        };
        let version = match &self.version {
            Some(version) => {
                let source: envelope::RawSource = match event.source {
                    Some(source) => serde_json::from_str(source.get()).ok()?,
                    None => return None,
                };
                let read = version::with_offset(version, record, || {
                    version::position(&|name| source.field(name), event.ts_ms.as_ref())
                });
                match read {
                    Ok(text) => Some(SqlValue::Text(text)),
                    Err(why) => return Some((Err(MapError::MissingVersion(why)), event.source)),
                }
            }
            None => None,
        };
        let mapped = if write {
            self.row(record, Some(&row), raw).map(|mut values| {
                values.extend(version);
                RowOp::Write(values)
            })
        } else {
            self.delete_key(record, Some(&row), None).map(|mut key| {
                key.extend(version);
                RowOp::Delete(key)
            })
        };
        Some((mapped, event.source))
    }

    /// A change event: its row upserted or deleted, or the table truncated.
    fn map_change(
        &self,
        record: &Record,
        event: Option<&Value>,
        raw: &[u8],
    ) -> Result<RowOp, MapError> {
        let event = event
            .ok_or_else(|| MapError::NotAChangeEvent("a change event is a JSON document".into()))?;
        let change = envelope::read(self.envelope, event).map_err(MapError::NotAChangeEvent)?;
        if let Some(why) = &self.keyless
            && !matches!(change, Change::Truncate)
        {
            return Err(MapError::SchemaIncompatible(why.clone()));
        }
        let on_delete = self.version.as_ref().and_then(VersionSource::for_delete);
        let source = match change {
            Change::Delete { .. } => on_delete.as_ref().or(self.version.as_ref()),
            _ => self.version.as_ref(),
        };
        let version = match source {
            Some(version) => Some(self.version_value(version, record, Some(event))?),
            None => None,
        };
        match change {
            Change::Upsert(after) => {
                let mut row = self.row(record, Some(after), raw)?;
                row.extend(version);
                Ok(RowOp::Write(row))
            }
            Change::Delete { before, key } => {
                let mut key_values = self.delete_key(record, before, key)?;
                key_values.extend(version);
                Ok(RowOp::Delete(key_values))
            }
            Change::Truncate => match self.on_truncate {
                OnTruncate::Fail => Err(MapError::Truncate),
                OnTruncate::Skip => Ok(RowOp::Skip("a truncate event (sink.on_truncate: skip)")),
                OnTruncate::Truncate => Ok(RowOp::Truncate(version)),
            },
        }
    }

    /// The key of a change event's delete: each key column from the row before the change,
    /// else from the event's key (OpenCDC) or the record's key (Debezium).
    fn delete_key(
        &self,
        record: &Record,
        before: Option<&Value>,
        event_key: Option<&Value>,
    ) -> Result<Vec<SqlValue>, MapError> {
        let record_key: Option<Value> = match event_key {
            Some(_) => None,
            None => record
                .key
                .as_deref()
                .and_then(|k| serde_json::from_slice::<Value>(k).ok())
                .map(|k| envelope::unwrapped(&k).clone()),
        };
        let key = event_key.or(record_key.as_ref());
        let mut values = Vec::with_capacity(self.key.len() + 1);
        for &index in &self.key {
            let column = &self.columns[index];
            let value = match &column.source {
                Source::Pointer(pointer) => {
                    let found = before
                        .and_then(|b| pointer.find(b))
                        .filter(|v| !v.is_null())
                        .or_else(|| match key {
                            Some(k @ (Value::Object(_) | Value::Array(_))) => pointer.find(k),
                            Some(scalar) if self.key.len() == 1 => Some(scalar),
                            _ => None,
                        })
                        .ok_or_else(|| {
                            column_error(
                                column,
                                &format!(
                                    "delete: {} is neither in the row before the change nor in the key",
                                    pointer.text
                                ),
                            )
                        })?;
                    if self.decoded
                        && let Some(bytes) = decoded_bytes(found, column.column_type)
                    {
                        bytes.map_err(|message| column_error(column, &message))?
                    } else {
                        convert(found, column.column_type).map_err(|m| column_error(column, &m))?
                    }
                }
                _ => self.column_value(column, record, None, &[])?,
            };
            if value == SqlValue::Null {
                return Err(column_error(column, "delete: key column is null"));
            }
            values.push(value);
        }
        Ok(values)
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
                if let Some(placeholder) = &self.placeholder
                    && placeholder.is(found, column.column_type)
                {
                    return Ok(SqlValue::Unavailable);
                }
                if self.decoded
                    && let Some(bytes) = decoded_bytes(found, column.column_type)
                {
                    return bytes.map_err(|message| column_error(column, &message));
                }
                if column.json_text
                    && column.column_type == ColumnType::Json
                    && let Value::String(text) = found
                {
                    return json_document(text).map_err(|message| column_error(column, &message));
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
        if let Some(version) = &self.version {
            key_values.push(self.version_value(version, record, None)?);
        }
        Ok(RowOp::Delete(key_values))
    }
}

/// Debezium's placeholder for a value it did not read, in each form a value may take:
/// the text itself (text, JSON, enums), its bytes (a `bytes` column: base64 in Connect
/// JSON, `{"base64": …}` once decoded from Avro), and an array holding only it (an array
/// column).
#[derive(Debug, Clone, PartialEq)]
struct Placeholder {
    text: String,
    base64: String,
}

impl Placeholder {
    fn new(text: &str) -> Self {
        use base64::Engine;
        Placeholder {
            text: text.to_string(),
            base64: base64::engine::general_purpose::STANDARD.encode(text.as_bytes()),
        }
    }

    /// Whether `value`, read for a `column_type` column, is the placeholder rather than a
    /// value. Its bytes' base64 form counts only for a `bytes` column: in a text column
    /// that text is a value like any other.
    fn is(&self, value: &Value, column_type: ColumnType) -> bool {
        let text =
            |s: &str| s == self.text || (column_type == ColumnType::Bytes && s == self.base64);
        match value {
            Value::String(s) => text(s),
            Value::Object(map) if map.len() == 1 && column_type == ColumnType::Bytes => {
                matches!(map.get("base64"), Some(Value::String(s)) if *s == self.base64)
            }
            Value::Array(items) if items.len() == 1 => {
                matches!(&items[0], Value::String(s) if s == &self.text)
            }
            _ => false,
        }
    }
}

fn column_error(column: &Column, message: &str) -> MapError {
    MapError::Column {
        column: column.name.clone(),
        message: message.to_string(),
    }
}

/// Text holding a JSON document, as the document: written as it is (PostgreSQL's `jsonb`
/// keeps `1.50` as written, where a round trip through a double would not), once it is
/// known to be JSON.
fn json_document(text: &str) -> Result<SqlValue, String> {
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map_err(|e| format!("is not a JSON document: {e}"))?;
    Ok(SqlValue::Text(text.to_string()))
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
