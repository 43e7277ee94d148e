//! A field's `default` in the decoded form, for the shape: the schema writes defaults in
//! Avro's JSON (bytes as a string of code points 0-255, a date as its day number, a union's
//! default for its first branch), while the shape gives them as a decoded value would be.
//!
//! Only simple defaults are converted (JSON null, booleans, numbers, strings); a record,
//! array or map default, or one that does not fit its type, is given as written.

use serde_json::{Map, Value};

use super::super::temporal;
use super::decode::{base64, duration, uuid_text};
use super::{Node, NodeId};

/// `raw`, the default of a field of type `id`, in the decoded form where it is simple.
pub(super) fn decoded_form(nodes: &[Node], id: NodeId, raw: &Value) -> Value {
    if raw.is_object() || raw.is_array() {
        return raw.clone();
    }
    convert(nodes, id, raw).unwrap_or_else(|| raw.clone())
}

fn convert(nodes: &[Node], id: NodeId, raw: &Value) -> Option<Value> {
    let text = raw.as_str();
    let number = raw.as_i64();
    let converted = match nodes.get(id)? {
        Node::Null => raw.is_null().then_some(Value::Null)?,
        Node::Boolean => raw.is_boolean().then(|| raw.clone())?,
        Node::Int | Node::Short | Node::Long => Value::from(number?),
        Node::Float | Node::Double => match raw {
            Value::Number(_) => raw.clone(),
            Value::String(s) if ["NaN", "Infinity", "-Infinity"].contains(&s.as_str()) => {
                raw.clone()
            }
            _ => return None,
        },
        Node::String | Node::Uuid | Node::ZonedTimestamp | Node::JsonText => {
            Value::String(text?.to_owned())
        }
        Node::Enum { symbols, .. } => {
            let symbol = text?;
            symbols.iter().any(|s| s == symbol).then(|| raw.clone())?
        }
        Node::Bytes => base64(&code_points(text?)?),
        Node::Fixed { size, .. } => {
            let bytes = code_points(text?)?;
            (bytes.len() == *size).then(|| base64(&bytes))?
        }
        Node::Decimal { scale, size, .. } => {
            let bytes = code_points(text?)?;
            if size.is_some_and(|size| size != bytes.len()) {
                return None;
            }
            Value::String(temporal::decimal(&bytes, *scale).ok()?)
        }
        Node::UuidFixed => {
            let bytes: [u8; 16] = code_points(text?)?.try_into().ok()?;
            Value::String(uuid_text(&bytes))
        }
        Node::Duration { .. } => {
            let bytes: [u8; 12] = code_points(text?)?.try_into().ok()?;
            duration(&bytes)
        }
        // A record's default is an object: kept as written (above).
        Node::VariableScaleDecimal => return None,
        Node::Date => Value::String(temporal::date(number?).ok()?),
        Node::Time(unit) => Value::String(temporal::time(number?, *unit).ok()?),
        Node::Timestamp(unit) => Value::String(temporal::timestamp(number?, *unit).ok()?),
        Node::LocalTimestamp(unit) => {
            Value::String(temporal::local_timestamp(number?, *unit).ok()?)
        }
        // A union's default is for its first branch.
        Node::Nullable { null_index, inner } => {
            if raw.is_null() {
                Value::Null
            } else if *null_index == 1 {
                convert(nodes, *inner, raw)?
            } else {
                return None;
            }
        }
        Node::Union(branches) => {
            let first = branches.first()?;
            match nodes.get(first.node)? {
                Node::Null => raw.is_null().then_some(Value::Null)?,
                _ => {
                    let mut wrapped = Map::with_capacity(1);
                    wrapped.insert(first.name.clone(), convert(nodes, first.node, raw)?);
                    Value::Object(wrapped)
                }
            }
        }
        Node::Array { .. } | Node::Map { .. } | Node::Record { .. } => return None,
    };
    Some(converted)
}

/// Avro JSON's bytes: a string whose every character is a code point 0-255, one byte each.
fn code_points(text: &str) -> Option<Vec<u8>> {
    text.chars()
        .map(|c| u8::try_from(u32::from(c)).ok())
        .collect()
}
