//! A Connect schema in sluice's vocabulary, matching what [`super::decode`] converts its
//! payload to.
//!
//! - `int8`/`int16` are `Int16`, `int32` is `Int32`, `int64` is `Int64`; `float`/`float32` are
//!   `Float32`, `double`/`float64` are `Float64`; `boolean`, `string`, `bytes` as named;
//! - `array` is an `Array` of its `items`; a `map` with string keys is a `Map` of its
//!   `values`, one with other keys an `Array` of two-element arrays (`[key, value]`, each
//!   `Json` here);
//! - `struct` is a `Record` named by the schema's `name` (`struct` when it has none), each
//!   field optional as its schema says, with its `default` in the decoded form;
//! - logical types: `Decimal` is `Decimal` (precision from `connect.decimal.precision` when
//!   given), Connect's `Date`/`Time`/`Timestamp` are `Date`/`Time(Millis)`/
//!   `Timestamp(Millis)`; Debezium's `Date` is `Date`, `Time`/`MicroTime`/`NanoTime` are
//!   `Time` in ms/µs/ns, `Timestamp`/`MicroTimestamp`/`NanoTimestamp` are `LocalTimestamp`
//!   in ms/µs/ns, `Uuid` is `Uuid`, `ZonedTimestamp` (ISO 8601 text with its offset) is
//!   `Timestamp(Micros)`, `Json` is `JsonText`; `VariableScaleDecimal` (its scale differs
//!   per value) is `Decimal` without a precision.

use serde_json::Value;

use super::{DECIMAL, MAX_DEPTH, VARIABLE_SCALE_DECIMAL, decimal_scale, schema_type};
use crate::format::shape::{Field, FieldType, TimeUnit};

/// A Connect schema in sluice's vocabulary; a `null` schema (an envelope written without
/// one) is `Json`.
pub fn shape(schema: &Value) -> Result<FieldType, String> {
    if schema.is_null() {
        return Ok(FieldType::Json);
    }
    shape_at(schema, "schema", 0)
}

fn shape_at(schema: &Value, path: &str, depth: usize) -> Result<FieldType, String> {
    if depth > MAX_DEPTH {
        return Err(format!("{path}: schemas nested deeper than {MAX_DEPTH}"));
    }
    let kind = schema_type(schema, path)?;
    let name = schema
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if let Some(logical) = logical(schema, kind, name, path)? {
        return Ok(logical);
    }
    let child = |key: &str| -> Result<FieldType, String> {
        let inner = super::member(schema, key, path)?;
        shape_at(inner, &format!("{path}.{key}"), depth + 1)
    };
    Ok(match kind {
        "int8" | "int16" => FieldType::Int16,
        "int32" => FieldType::Int32,
        "int64" => FieldType::Int64,
        "float" | "float32" => FieldType::Float32,
        "double" | "float64" => FieldType::Float64,
        "boolean" => FieldType::Boolean,
        "string" => FieldType::String,
        "bytes" => FieldType::Bytes,
        "array" => FieldType::Array(Box::new(child("items")?)),
        "map" if super::string_keys(schema) => FieldType::Map(Box::new(child("values")?)),
        "map" => {
            child("keys")?;
            child("values")?;
            FieldType::Array(Box::new(FieldType::Array(Box::new(FieldType::Json))))
        }
        "struct" => {
            let Some(Value::Array(fields)) = schema.get("fields") else {
                return Err(format!("{path}: a struct schema without \"fields\""));
            };
            let mut out = Vec::with_capacity(fields.len());
            for field in fields {
                let field_name = field
                    .get("field")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{path}: a struct field without a \"field\" name"))?;
                let at = format!("{path}.{field_name}");
                let default = field
                    .get("default")
                    .filter(|d| !d.is_null())
                    .and_then(|d| super::convert_plain(field, d, &at, depth + 1).ok());
                out.push(Field {
                    name: field_name.to_string(),
                    field_type: shape_at(field, &at, depth + 1)?,
                    optional: field.get("optional").and_then(Value::as_bool) == Some(true),
                    default,
                });
            }
            FieldType::Record {
                name: if name.is_empty() {
                    "struct".to_string()
                } else {
                    name.to_string()
                },
                fields: out,
            }
        }
        other => return Err(format!("{path}: unknown Connect schema type {other:?}")),
    })
}

fn logical(
    schema: &Value,
    kind: &str,
    name: &str,
    path: &str,
) -> Result<Option<FieldType>, String> {
    Ok(Some(match (name, kind) {
        (DECIMAL, "bytes") => FieldType::Decimal {
            precision: schema
                .get("parameters")
                .and_then(|p| p.get("connect.decimal.precision"))
                .and_then(|p| match p {
                    Value::String(s) => s.trim().parse().ok(),
                    Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
                    _ => None,
                }),
            scale: decimal_scale(schema, path)?,
        },
        ("org.apache.kafka.connect.data.Date" | "io.debezium.time.Date", "int32") => {
            FieldType::Date
        }
        ("org.apache.kafka.connect.data.Time" | "io.debezium.time.Time", "int32") => {
            FieldType::Time(TimeUnit::Millis)
        }
        ("io.debezium.time.MicroTime", "int64") => FieldType::Time(TimeUnit::Micros),
        ("io.debezium.time.NanoTime", "int64") => FieldType::Time(TimeUnit::Nanos),
        ("org.apache.kafka.connect.data.Timestamp", "int64") => {
            FieldType::Timestamp(TimeUnit::Millis)
        }
        ("io.debezium.time.Timestamp", "int64") => FieldType::LocalTimestamp(TimeUnit::Millis),
        ("io.debezium.time.MicroTimestamp", "int64") => FieldType::LocalTimestamp(TimeUnit::Micros),
        ("io.debezium.time.NanoTimestamp", "int64") => FieldType::LocalTimestamp(TimeUnit::Nanos),
        ("io.debezium.data.Uuid", "string") => FieldType::Uuid,
        ("io.debezium.time.ZonedTimestamp", "string") => FieldType::Timestamp(TimeUnit::Micros),
        ("io.debezium.data.Json", "string") => FieldType::JsonText,
        // Decoded as a decimal string of its own scale.
        (VARIABLE_SCALE_DECIMAL, "struct") => FieldType::Decimal {
            precision: None,
            scale: 0,
        },
        _ => return Ok(None),
    }))
}
