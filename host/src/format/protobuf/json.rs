//! A decoded Protobuf message as JSON, in sluice's decoded forms (docs/formats.md) rather
//! than Protobuf's canonical JSON mapping, so it matches what the Avro and Connect decoders
//! give for the same data:
//!
//! - field names as the `.proto` writes them (not `json_name`);
//! - every field appears: an unset scalar, enum, repeated or map field with its default
//!   (proto3's zero, or proto2's declared `[default = …]`); an unset field with presence (a
//!   message-typed field, a proto3 `optional`) as `null`; of a `oneof`, only the member that
//!   is set;
//! - 64-bit integers as JSON numbers (not strings); enums by symbol name (an open enum's
//!   number that names no symbol stays a number); `NaN` and infinities as the strings
//!   Protobuf JSON uses; bytes as `{"base64": "…"}`; maps as objects (keys as text);
//! - well-known types as their JSON mapping: `Timestamp` as RFC 3339 UTC with nine digits,
//!   `Duration` as `"1.5s"`, wrappers as the bare value, `Struct`/`Value`/`ListValue` as
//!   the JSON they hold, `FieldMask` as comma-joined paths, `Empty` as `{}`, `Any` as
//!   `{"@type": …, fields…}` when its type is in the schema (an error otherwise);
//! - `confluent.type.Decimal` as an exact decimal string, `google.type.Date` as
//!   `YYYY-MM-DD`.
//!
//! Written by hand rather than through prost-reflect's serde support, whose output would
//! need rewriting in most of these places (bytes, timestamps, decimals, dates, presence).

use base64::Engine as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MapKey, ReflectMessage,
    Value as ProtoValue,
};
use serde_json::{Map, Number, Value};

use crate::format::temporal;

/// Most levels of messages within messages, `Any` payloads included (prost's decoder stops
/// at 100 levels within one payload, but each `Any` is a payload of its own).
const MAX_DEPTH: u32 = 100;

/// Largest `confluent.type.Decimal` scale decoded: the scale comes from the payload, and a
/// scale of 2^31 would otherwise pad a string with two billion zeros.
const MAX_SCALE: u32 = 400;

/// The message as a JSON value.
pub fn message(pool: &DescriptorPool, message: &DynamicMessage) -> Result<Value, String> {
    message_at(pool, message, "", 0)
}

fn message_at(
    pool: &DescriptorPool,
    message: &DynamicMessage,
    path: &str,
    depth: u32,
) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(located(
            path,
            format!("messages nested deeper than {MAX_DEPTH}"),
        ));
    }
    if let Some(value) = well_known(pool, message, path, depth)? {
        return Ok(value);
    }
    let descriptor = message.descriptor();
    let mut object = Map::new();
    for field in descriptor.fields() {
        let field_path = join(path, field.name());
        let set = message.has_field(&field);
        let value = match field.containing_oneof() {
            Some(oneof) if !oneof.is_synthetic() && !set => continue,
            _ if !set && has_presence(&field) => Value::Null,
            _ => field_value(pool, &field, &message.get_field(&field), &field_path, depth)?,
        };
        object.insert(field.name().to_string(), value);
    }
    Ok(Value::Object(object))
}

/// Whether an unset field reads as `null` rather than its default: a singular message, or
/// a proto3 `optional` (its synthetic oneof).
pub(super) fn has_presence(field: &FieldDescriptor) -> bool {
    if field.is_list() || field.is_map() {
        return false;
    }
    matches!(field.kind(), Kind::Message(_))
        || field.containing_oneof().is_some_and(|o| o.is_synthetic())
}

fn field_value(
    pool: &DescriptorPool,
    field: &FieldDescriptor,
    value: &ProtoValue,
    path: &str,
    depth: u32,
) -> Result<Value, String> {
    match value {
        ProtoValue::List(items) => {
            let kind = field.kind();
            let mut array = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                array.push(single(pool, &kind, item, &format!("{path}[{i}]"), depth)?);
            }
            Ok(Value::Array(array))
        }
        ProtoValue::Map(entries) => {
            let Kind::Message(entry) = field.kind() else {
                return Err(format!("field {path}: a map whose entry is not a message"));
            };
            let value_kind = entry.map_entry_value_field().kind();
            let mut keyed: Vec<(String, &ProtoValue)> =
                entries.iter().map(|(k, v)| (map_key(k), v)).collect();
            keyed.sort_by(|a, b| a.0.cmp(&b.0));
            let mut object = Map::new();
            for (key, item) in keyed {
                let item = single(pool, &value_kind, item, &format!("{path}[{key:?}]"), depth)?;
                object.insert(key, item);
            }
            Ok(Value::Object(object))
        }
        other => single(pool, &field.kind(), other, path, depth),
    }
}

fn map_key(key: &MapKey) -> String {
    match key {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

/// One value that is not a list or map.
pub(super) fn single(
    pool: &DescriptorPool,
    kind: &Kind,
    value: &ProtoValue,
    path: &str,
    depth: u32,
) -> Result<Value, String> {
    Ok(match value {
        ProtoValue::Bool(b) => Value::Bool(*b),
        ProtoValue::I32(n) => Value::from(*n),
        ProtoValue::I64(n) => Value::from(*n),
        ProtoValue::U32(n) => Value::from(*n),
        ProtoValue::U64(n) => Value::from(*n),
        // Through its shortest text, so 0.1f32 reads as 0.1, not 0.10000000149011612.
        ProtoValue::F32(f) => float(f.to_string().parse().unwrap_or(f64::from(*f))),
        ProtoValue::F64(f) => float(*f),
        ProtoValue::String(s) => Value::String(s.clone()),
        ProtoValue::Bytes(b) => bytes(b),
        ProtoValue::EnumNumber(n) => match kind {
            Kind::Enum(e) => match e.get_value(*n) {
                Some(symbol) => Value::String(symbol.name().to_string()),
                None => Value::from(*n),
            },
            _ => Value::from(*n),
        },
        ProtoValue::Message(m) => message_at(pool, m, path, depth + 1)?,
        ProtoValue::List(_) | ProtoValue::Map(_) => {
            return Err(format!(
                "field {path}: a list or map where a single value belongs"
            ));
        }
    })
}

fn bytes(b: &[u8]) -> Value {
    let mut object = Map::new();
    object.insert(
        "base64".to_string(),
        Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
    );
    Value::Object(object)
}

fn float(f: f64) -> Value {
    match Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None if f.is_nan() => Value::String("NaN".into()),
        None if f > 0.0 => Value::String("Infinity".into()),
        None => Value::String("-Infinity".into()),
    }
}

/// An error with the field path it happened at (none for the message itself).
fn located(path: &str, error: String) -> String {
    if path.is_empty() {
        error
    } else {
        format!("field {path}: {error}")
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// The JSON form of a well-known or Confluent type, or `None` for any other message.
fn well_known(
    pool: &DescriptorPool,
    message: &DynamicMessage,
    path: &str,
    depth: u32,
) -> Result<Option<Value>, String> {
    let at = |e: String| located(path, e);
    let descriptor = message.descriptor();
    Ok(Some(match descriptor.full_name() {
        "google.protobuf.Timestamp" => {
            let seconds = int(message, 1);
            let nanos = i32::try_from(int(message, 2)).unwrap_or(-1);
            Value::String(temporal::timestamp_parts(seconds, nanos).map_err(at)?)
        }
        "google.protobuf.Duration" => {
            Value::String(duration(int(message, 1), int(message, 2)).map_err(at)?)
        }
        "google.protobuf.DoubleValue"
        | "google.protobuf.FloatValue"
        | "google.protobuf.Int64Value"
        | "google.protobuf.UInt64Value"
        | "google.protobuf.Int32Value"
        | "google.protobuf.UInt32Value"
        | "google.protobuf.BoolValue"
        | "google.protobuf.StringValue"
        | "google.protobuf.BytesValue" => match descriptor.get_field(1) {
            Some(field) => single(pool, &field.kind(), &message.get_field(&field), path, depth)?,
            None => Value::Null,
        },
        "google.protobuf.Struct" => match descriptor.get_field(1) {
            Some(field) => field_value(pool, &field, &message.get_field(&field), path, depth)?,
            None => Value::Object(Map::new()),
        },
        "google.protobuf.ListValue" => match descriptor.get_field(1) {
            Some(field) => field_value(pool, &field, &message.get_field(&field), path, depth)?,
            None => Value::Array(Vec::new()),
        },
        "google.protobuf.Value" => {
            // The member of its `kind` oneof that is set; none set reads as null.
            match message.fields().next() {
                Some((field, value)) if field.number() != 1 => {
                    field_value(pool, &field, value, path, depth)?
                }
                _ => Value::Null,
            }
        }
        "google.protobuf.Empty" => Value::Object(Map::new()),
        "google.protobuf.FieldMask" => match message.get_field_by_number(1).as_deref() {
            Some(ProtoValue::List(paths)) => Value::String(
                paths
                    .iter()
                    .filter_map(|p| p.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            _ => Value::String(String::new()),
        },
        "google.protobuf.Any" => any(pool, message, path, depth)?,
        "confluent.type.Decimal" => {
            let unscaled = match message.get_field_by_number(1).as_deref() {
                Some(ProtoValue::Bytes(b)) => b.to_vec(),
                _ => Vec::new(),
            };
            let scale = int(message, 3);
            let scale = u32::try_from(scale)
                .ok()
                .filter(|s| *s <= MAX_SCALE)
                .ok_or_else(|| {
                    at(format!(
                        "decimal scale {scale} is not within 0..={MAX_SCALE}"
                    ))
                })?;
            Value::String(temporal::decimal(&unscaled, scale).map_err(at)?)
        }
        "google.type.Date" => {
            let (year, month, day) = (int(message, 1), int(message, 2), int(message, 3));
            let valid = u32::try_from(month)
                .ok()
                .zip(u32::try_from(day).ok())
                .and_then(|(m, d)| {
                    chrono::NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, m, d)
                });
            match valid {
                Some(_) if (1..=9999).contains(&year) => {
                    Value::String(format!("{year:04}-{month:02}-{day:02}"))
                }
                _ => {
                    return Err(at(format!(
                        "google.type.Date {year:04}-{month:02}-{day:02} is not a full calendar date"
                    )));
                }
            }
        }
        _ => return Ok(None),
    }))
}

/// An integer field by number, whatever its width (0 when absent or not an integer).
fn int(message: &DynamicMessage, number: u32) -> i64 {
    match message.get_field_by_number(number).as_deref() {
        Some(ProtoValue::I64(n)) => *n,
        Some(ProtoValue::I32(n)) => i64::from(*n),
        Some(ProtoValue::U32(n)) => i64::from(*n),
        Some(ProtoValue::U64(n)) => i64::try_from(*n).unwrap_or(i64::MAX),
        _ => 0,
    }
}

/// A `Duration` as Protobuf JSON writes it: seconds with 0, 3, 6 or 9 fractional digits.
fn duration(seconds: i64, nanos: i64) -> Result<String, String> {
    if nanos.abs() >= 1_000_000_000 || (seconds != 0 && nanos != 0 && (seconds < 0) != (nanos < 0))
    {
        return Err(format!(
            "duration {seconds}s {nanos}ns has out-of-range nanos"
        ));
    }
    let sign = if seconds < 0 || nanos < 0 { "-" } else { "" };
    let (secs, frac) = (seconds.unsigned_abs(), nanos.unsigned_abs());
    Ok(if frac == 0 {
        format!("{sign}{secs}s")
    } else if frac % 1_000_000 == 0 {
        format!("{sign}{secs}.{:03}s", frac / 1_000_000)
    } else if frac % 1_000 == 0 {
        format!("{sign}{secs}.{:06}s", frac / 1_000)
    } else {
        format!("{sign}{secs}.{frac:09}s")
    })
}

/// An `Any` whose type the schema's pool knows, decoded: `{"@type": url, fields…}`, or
/// `{"@type": url, "value": …}` for a type whose JSON form is not an object.
fn any(
    pool: &DescriptorPool,
    message: &DynamicMessage,
    path: &str,
    depth: u32,
) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(located(
            path,
            format!("messages nested deeper than {MAX_DEPTH}"),
        ));
    }
    let url = match message.get_field_by_number(1).as_deref() {
        Some(ProtoValue::String(s)) => s.clone(),
        _ => String::new(),
    };
    let payload = match message.get_field_by_number(2).as_deref() {
        Some(ProtoValue::Bytes(b)) => b.clone(),
        _ => Default::default(),
    };
    let name = url.rsplit('/').next().unwrap_or_default();
    let descriptor = pool.get_message_by_name(name).ok_or_else(|| {
        located(
            path,
            format!(
                "google.protobuf.Any holds {url:?}, a type the schema does not define or import"
            ),
        )
    })?;
    let inner = DynamicMessage::decode(descriptor, payload).map_err(|e| {
        located(
            path,
            format!("google.protobuf.Any holds an invalid {name}: {e}"),
        )
    })?;
    let mut object = Map::new();
    object.insert("@type".to_string(), Value::String(url));
    match well_known(pool, &inner, path, depth + 1)? {
        Some(value) => {
            object.insert("value".to_string(), value);
        }
        None => {
            if let Value::Object(fields) = message_at(pool, &inner, path, depth + 1)? {
                object.extend(fields);
            }
        }
    }
    Ok(Value::Object(object))
}
