//! The Connect JSON decoder: Kafka Connect's `JsonConverter` with `schemas.enable=true`
//! writes each key or value as `{"schema": S, "payload": P}`, the schema in Connect's own
//! JSON form. The payload is converted by its schema into sluice's decoded forms
//! (docs/formats.md), so a Debezium change event read this way reaches the mapping as the
//! same JSON as one read through Avro.
//!
//! - [`exact`]: JSON parsed with each number's text kept (exact `NUMERIC` decimals);
//! - [`shape`]: a Connect schema as a [`FieldType`](super::shape::FieldType).
//!
//! A Connect schema: `{"type": int8|int16|int32|int64|float|float32|double|float64|
//! boolean|string|bytes|array|map|struct, "optional", "default", "name", "version",
//! "parameters", "fields": [{"field": name, …}] (struct), "items" (array), "keys"/"values"
//! (map)}`. Conversions by logical name (`name`):
//! - `org.apache.kafka.connect.data.Decimal` (bytes, `parameters.scale`): the base64 of the
//!   unscaled big-endian two's complement, or with `decimal.format: NUMERIC` a JSON number
//!   (its text, exactly) → decimal string;
//! - `org.apache.kafka.connect.data.Date` (int32 days) → `YYYY-MM-DD`; `…Time` (int32 ms)
//!   → `HH:MM:SS.ffffff`; `…Timestamp` (int64 ms) → RFC 3339 UTC with millis;
//! - Debezium's `io.debezium.time.Date` (days), `Time` (ms), `MicroTime` (µs), `NanoTime`
//!   (ns); `Timestamp` (ms), `MicroTimestamp` (µs), `NanoTimestamp` (ns) → local
//!   timestamps `YYYY-MM-DD HH:MM:SS.ffffff`; `io.debezium.data.VariableScaleDecimal`
//!   (struct `{scale, value}`) → decimal string; `ZonedTimestamp`, `io.debezium.data.Uuid`
//!   and `io.debezium.data.Json` stay the strings they are;
//! - floats that are not finite stay the strings `"NaN"`, `"Infinity"`, `"-Infinity"`
//!   (Jackson writes them quoted);
//! - bytes → `{"base64": …}` (the payload's text as is); a map with string keys → object,
//!   other keys → the array of `[key, value]` pairs `JsonConverter` writes; a struct → an
//!   object of its fields in the schema's order (payload members the schema lacks are
//!   dropped, as Connect drops them); a missing or null field → its default, or null if
//!   optional, else an error.

mod exact;
mod shape;
#[cfg(test)]
mod tests;

use base64::Engine as _;
use serde_json::{Map, Value};

use super::shape::TimeUnit;
use super::temporal;
use exact::Token;

pub use shape::shape;

/// Largest decimal scale accepted (from a schema's `parameters.scale` or a
/// `VariableScaleDecimal`'s `scale`), so a hostile scale cannot make a huge string.
const MAX_SCALE: u32 = 400;

/// Most levels of schemas within schemas (Connect's schemas nest no deeper than the JSON,
/// which serde_json limits to 128 levels; this keeps recursion bounded when converting a
/// schema's `default` too).
const MAX_DEPTH: usize = 128;

/// Decodes one envelope: the payload converted by its schema, and the schema (the
/// envelope's `schema` object, for the caller to cache by its text).
pub fn decode(value: &[u8]) -> Result<(Value, Value), String> {
    let tagged = exact::parse(value).map_err(|e| format!("connect_json: the value is {e}"))?;
    let envelope = match exact::token(&tagged)? {
        Token::Object(map) => map,
        _ => return Err(not_an_envelope()),
    };
    let (Some(schema), Some(payload)) = (
        exact::get(envelope, "schema"),
        exact::get(envelope, "payload"),
    ) else {
        return Err(not_an_envelope());
    };
    let schema = exact::untag(schema).map_err(|e| format!("connect_json: the schema is {e}"))?;
    if schema.is_null() {
        let payload =
            exact::untag(payload).map_err(|e| format!("connect_json: the payload is {e}"))?;
        return Ok((payload, schema));
    }
    let converted = convert(&schema, payload, "payload", 0)?;
    Ok((converted, schema))
}

fn not_an_envelope() -> String {
    "connect_json expects Kafka Connect's JsonConverter with schemas.enable=true: a JSON object {\"schema\": …, \"payload\": …}; for plain JSON use format json".to_string()
}

/// The payload's value at `path`, converted by `schema`.
fn convert(schema: &Value, payload: &Value, path: &str, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!("{path}: schemas nested deeper than {MAX_DEPTH}"));
    }
    let kind = schema_type(schema, path)?;
    let name = schema
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let token = exact::token(payload)?;
    if matches!(token, Token::Null) {
        return null_or_default(schema, path, depth);
    }
    let wrong = |expected: &str| {
        format!(
            "{path}: expected {expected} for Connect type {kind}, found {}",
            found(payload)
        )
    };
    Ok(match (kind, token) {
        ("int8" | "int16" | "int32" | "int64", Token::Number(text)) => {
            let n: i64 = text.parse().map_err(|_| wrong("an integer"))?;
            let (low, high) = match kind {
                "int8" => (i64::from(i8::MIN), i64::from(i8::MAX)),
                "int16" => (i64::from(i16::MIN), i64::from(i16::MAX)),
                "int32" => (i64::from(i32::MIN), i64::from(i32::MAX)),
                _ => (i64::MIN, i64::MAX),
            };
            if !(low..=high).contains(&n) {
                return Err(format!(
                    "{path}: {n} is out of range for Connect type {kind}"
                ));
            }
            logical_integer(name, n).map_err(|e| format!("{path}: {e}"))?
        }
        ("float" | "float32" | "double" | "float64", Token::Number(text)) => {
            Value::Number(exact::number(text).map_err(|e| format!("{path}: {e}"))?)
        }
        // Jackson (JsonConverter's writer) quotes non-finite numbers; they stay the strings
        // the other decoders give for them.
        ("float" | "float32" | "double" | "float64", Token::String(s))
            if matches!(s, "NaN" | "Infinity" | "-Infinity") =>
        {
            Value::String(s.to_string())
        }
        ("boolean", Token::Bool(b)) => Value::Bool(b),
        ("string", Token::String(s)) => Value::String(s.to_string()),
        ("bytes", Token::String(s)) if name == DECIMAL => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| format!("{path}: a Decimal's payload is not base64: {e}"))?;
            let scale = decimal_scale(schema, path)?;
            Value::String(temporal::decimal(&bytes, scale).map_err(|e| format!("{path}: {e}"))?)
        }
        ("bytes", Token::Number(text)) if name == DECIMAL => {
            let scale = decimal_scale(schema, path)?;
            Value::String(exact::decimal_text(text, scale).map_err(|e| format!("{path}: {e}"))?)
        }
        ("bytes", Token::String(s)) => {
            let mut object = Map::new();
            object.insert("base64".to_string(), Value::String(s.to_string()));
            Value::Object(object)
        }
        ("array", Token::Array(items)) => {
            let item_schema = member(schema, "items", path)?;
            let mut array = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                array.push(convert(
                    item_schema,
                    item,
                    &format!("{path}[{i}]"),
                    depth + 1,
                )?);
            }
            Value::Array(array)
        }
        ("map", token) => map(schema, token, path, depth).map_err(|e| match e {
            MapError::Shape => wrong(if string_keys(schema) {
                "an object"
            } else {
                "an array of [key, value] pairs"
            }),
            MapError::Other(e) => e,
        })?,
        ("struct", Token::Object(members)) if name == VARIABLE_SCALE_DECIMAL => {
            variable_scale_decimal(members).map_err(|e| format!("{path}: {e}"))?
        }
        ("struct", Token::Object(members)) => {
            let Some(Value::Array(fields)) = schema.get("fields") else {
                return Err(format!("{path}: a struct schema without \"fields\""));
            };
            let mut object = Map::new();
            for field in fields {
                let field_name = field
                    .get("field")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{path}: a struct field without a \"field\" name"))?;
                let field_path = format!("{path}.{field_name}");
                let value = match exact::get(members, field_name) {
                    Some(value) => convert(field, value, &field_path, depth + 1)?,
                    None => null_or_default(field, &field_path, depth + 1)?,
                };
                object.insert(field_name.to_string(), value);
            }
            Value::Object(object)
        }
        ("int8" | "int16" | "int32" | "int64", _) => return Err(wrong("an integer")),
        ("float" | "float32" | "double" | "float64", _) => return Err(wrong("a number")),
        ("boolean", _) => return Err(wrong("true or false")),
        ("string", _) => return Err(wrong("a string")),
        ("bytes", _) if name == DECIMAL => return Err(wrong("a base64 string or a number")),
        ("bytes", _) => return Err(wrong("a base64 string")),
        ("array", _) => return Err(wrong("an array")),
        ("struct", _) => return Err(wrong("an object")),
        (other, _) => return Err(format!("{path}: unknown Connect schema type {other:?}")),
    })
}

const DECIMAL: &str = "org.apache.kafka.connect.data.Decimal";
const VARIABLE_SCALE_DECIMAL: &str = "io.debezium.data.VariableScaleDecimal";

/// A schema's `type`.
fn schema_type<'a>(schema: &'a Value, path: &str) -> Result<&'a str, String> {
    schema.get("type").and_then(Value::as_str).ok_or_else(|| {
        format!(
            "{path}: the Connect schema has no \"type\" (in {})",
            brief(schema)
        )
    })
}

fn member<'a>(schema: &'a Value, key: &str, path: &str) -> Result<&'a Value, String> {
    schema
        .get(key)
        .filter(|s| s.is_object())
        .ok_or_else(|| format!("{path}: the Connect schema has no {key:?} schema"))
}

/// The value of a null or missing payload: the schema's default (converted), else null
/// if it is optional.
fn null_or_default(schema: &Value, path: &str, depth: usize) -> Result<Value, String> {
    if let Some(default) = schema.get("default").filter(|d| !d.is_null()) {
        return convert_plain(schema, default, path, depth + 1);
    }
    if schema.get("optional").and_then(Value::as_bool) == Some(true) {
        return Ok(Value::Null);
    }
    Err(format!(
        "{path}: is null or missing, and its Connect schema is not optional"
    ))
}

/// Converts a plain value (a schema's `default`) by retagging it.
pub(super) fn convert_plain(
    schema: &Value,
    value: &Value,
    path: &str,
    depth: usize,
) -> Result<Value, String> {
    let text = serde_json::to_vec(value).map_err(|e| format!("{path}: {e}"))?;
    let tagged = exact::parse(&text).map_err(|e| format!("{path}: the default is {e}"))?;
    if exact::token(&tagged).is_ok_and(|t| matches!(t, Token::Null)) {
        return Ok(Value::Null);
    }
    convert(schema, &tagged, path, depth)
}

/// An integer with its logical type applied.
fn logical_integer(name: &str, n: i64) -> Result<Value, String> {
    let text = match name {
        "org.apache.kafka.connect.data.Date" | "io.debezium.time.Date" => temporal::date(n)?,
        "org.apache.kafka.connect.data.Time" | "io.debezium.time.Time" => {
            temporal::time(n, TimeUnit::Millis)?
        }
        "io.debezium.time.MicroTime" => temporal::time(n, TimeUnit::Micros)?,
        "io.debezium.time.NanoTime" => temporal::time(n, TimeUnit::Nanos)?,
        "org.apache.kafka.connect.data.Timestamp" => temporal::timestamp(n, TimeUnit::Millis)?,
        "io.debezium.time.Timestamp" => temporal::local_timestamp(n, TimeUnit::Millis)?,
        "io.debezium.time.MicroTimestamp" => temporal::local_timestamp(n, TimeUnit::Micros)?,
        "io.debezium.time.NanoTimestamp" => temporal::local_timestamp(n, TimeUnit::Nanos)?,
        _ => return Ok(Value::from(n)),
    };
    Ok(Value::String(text))
}

/// A Decimal schema's `parameters.scale` (Connect writes it as a string).
fn decimal_scale(schema: &Value, path: &str) -> Result<u32, String> {
    let scale = schema.get("parameters").and_then(|p| p.get("scale"));
    let parsed = match scale {
        Some(Value::String(s)) => s.trim().parse::<u32>().ok(),
        Some(Value::Number(n)) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        _ => None,
    };
    parsed
        .filter(|s| *s <= MAX_SCALE)
        .ok_or_else(|| format!("{path}: a Decimal schema needs parameters.scale, a whole number from 0 to {MAX_SCALE} (found {scale:?})"))
}

/// Debezium's `VariableScaleDecimal`: `{"scale": int32, "value": base64 bytes}`.
fn variable_scale_decimal(members: &Map<String, Value>) -> Result<Value, String> {
    let scale = match exact::get(members, "scale").map(exact::token).transpose()? {
        Some(Token::Number(text)) => text.parse::<u32>().ok().filter(|s| *s <= MAX_SCALE),
        _ => None,
    }
    .ok_or_else(|| format!("a VariableScaleDecimal needs a scale from 0 to {MAX_SCALE}"))?;
    let bytes = match exact::get(members, "value").map(exact::token).transpose()? {
        Some(Token::String(text)) => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| format!("a VariableScaleDecimal's value is not base64: {e}"))?,
        _ => return Err("a VariableScaleDecimal needs a base64 value".to_string()),
    };
    Ok(Value::String(temporal::decimal(&bytes, scale)?))
}

enum MapError {
    Shape,
    Other(String),
}

fn string_keys(schema: &Value) -> bool {
    schema
        .get("keys")
        .and_then(|k| k.get("type"))
        .and_then(Value::as_str)
        == Some("string")
}

/// A map: an object when its keys are strings, else `[key, value]` pairs.
fn map(schema: &Value, token: Token<'_>, path: &str, depth: usize) -> Result<Value, MapError> {
    let keys = member(schema, "keys", path).map_err(MapError::Other)?;
    let values = member(schema, "values", path).map_err(MapError::Other)?;
    match token {
        Token::Object(members) if string_keys(schema) => {
            let mut object = Map::new();
            for (key, item) in members {
                let key = key
                    .strip_prefix('s')
                    .ok_or_else(|| MapError::Other(format!("{path}: the payload is not JSON")))?;
                let item = convert(values, item, &format!("{path}[{key:?}]"), depth + 1)
                    .map_err(MapError::Other)?;
                object.insert(key.to_string(), item);
            }
            Ok(Value::Object(object))
        }
        Token::Array(pairs) if !string_keys(schema) => {
            let mut array = Vec::with_capacity(pairs.len());
            for (i, pair) in pairs.iter().enumerate() {
                let at = format!("{path}[{i}]");
                let Ok(Token::Array([key, item])) = exact::token(pair) else {
                    return Err(MapError::Other(format!(
                        "{at}: expected a [key, value] pair, found {}",
                        found(pair)
                    )));
                };
                let key =
                    convert(keys, key, &format!("{at}[0]"), depth + 1).map_err(MapError::Other)?;
                let item = convert(values, item, &format!("{at}[1]"), depth + 1)
                    .map_err(MapError::Other)?;
                array.push(Value::Array(vec![key, item]));
            }
            Ok(Value::Array(array))
        }
        _ => Err(MapError::Shape),
    }
}

/// What a tagged payload value is, for an error.
fn found(value: &Value) -> &'static str {
    match exact::token(value) {
        Ok(Token::Null) => "null",
        Ok(Token::Bool(_)) => "a boolean",
        Ok(Token::Number(_)) => "a number",
        Ok(Token::String(_)) => "a string",
        Ok(Token::Array(_)) => "an array",
        Ok(Token::Object(_)) => "an object",
        Err(_) => "something that is not JSON",
    }
}

/// A schema, shortened for an error.
fn brief(schema: &Value) -> String {
    let text = schema.to_string();
    if text.chars().count() > 80 {
        format!("{}…", text.chars().take(80).collect::<String>())
    } else {
        text
    }
}
