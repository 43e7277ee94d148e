//! A schema in one vocabulary, whichever format it came from: fields, types, optionality,
//! defaults and logical types. The decoders describe their schemas in these terms, so the
//! stages after arrival (the mapping; columns and tables derived from a schema) never look
//! at Avro, Protobuf, JSON Schema or Connect schemas themselves.

use serde_json::Value;

/// Units of a time of day or an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Millis,
    Micros,
    Nanos,
}

/// The type of a value, as its decoded form has it (docs/formats.md says which JSON form
/// each takes).
#[derive(Debug, Clone, PartialEq)]
pub enum FieldType {
    Null,
    Boolean,
    /// 16-bit signed integer (Connect `int8`/`int16`, an Avro `int` that Confluent's
    /// converter marks `connect.type` `int8`/`int16`).
    Int16,
    /// 32-bit signed integer (Avro `int`, Protobuf `int32`/`sint32`/`sfixed32`, Connect
    /// `int32`).
    Int32,
    /// 64-bit signed integer; unsigned 32-bit Protobuf integers too.
    Int64,
    /// Unsigned 64-bit integer (Protobuf `uint64`/`fixed64`).
    UInt64,
    Float32,
    Float64,
    /// An exact decimal, decoded as a decimal string. `precision` is `None` where the
    /// schema does not say (Connect's `Decimal`).
    Decimal {
        precision: Option<u32>,
        scale: u32,
    },
    String,
    /// Bytes of any length, decoded as `{"base64": …}`.
    Bytes,
    /// Bytes of a fixed length (Avro `fixed`), decoded as `{"base64": …}`.
    Fixed {
        name: String,
        size: usize,
    },
    /// A calendar date, decoded as `YYYY-MM-DD`.
    Date,
    /// A time of day, decoded as `HH:MM:SS.ffffff`.
    Time(TimeUnit),
    /// An instant, decoded as RFC 3339 UTC at full precision.
    Timestamp(TimeUnit),
    /// A wall-clock date and time, decoded as `YYYY-MM-DD HH:MM:SS.ffffff`.
    LocalTimestamp(TimeUnit),
    /// A UUID, decoded as text.
    Uuid,
    /// Text that holds a JSON document (Debezium's `io.debezium.data.Json`), decoded as
    /// that text: a `json` column takes the document as written.
    JsonText,
    /// An enumeration, decoded as its symbol.
    Enum {
        name: String,
        symbols: Vec<String>,
    },
    /// A record, struct or message: named fields, decoded as a JSON object.
    Record {
        name: String,
        fields: Vec<Field>,
    },
    Array(Box<FieldType>),
    /// A map with string keys, decoded as a JSON object.
    Map(Box<FieldType>),
    /// A union of more than one non-null branch, decoded as `{"<full name>": value}`.
    Union(Vec<FieldType>),
    /// Any JSON value (a JSON Schema without a type, Protobuf's `Struct`/`Value`).
    Json,
}

/// One field of a record.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// Its name in the decoded JSON object.
    pub name: String,
    pub field_type: FieldType,
    /// Whether the value may be null (an Avro `[null, T]` union, an optional Connect
    /// field, a Protobuf `optional` or wrapper field, a JSON Schema property that is not
    /// required).
    pub optional: bool,
    /// The schema's default, in the decoded form.
    pub default: Option<Value>,
}

impl FieldType {
    /// The fields of a record type; none for other types.
    pub fn fields(&self) -> &[Field] {
        match self {
            FieldType::Record { fields, .. } => fields,
            _ => &[],
        }
    }
}
