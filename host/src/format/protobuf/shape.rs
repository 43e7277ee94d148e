//! A Protobuf message in sluice's vocabulary ([`FieldType`]), matching what [`super::json`]
//! decodes it to.
//!
//! - A message is a `Record` named by its full name, with every field in declaration order.
//! - `optional` is true for a field that can read as `null` or be absent: a proto3
//!   `optional`, a message-typed field (wrappers included), or a member of a `oneof`.
//! - Scalars: `int32`/`sint32`/`sfixed32` are `Int32`; `uint32`/`fixed32` and the signed
//!   64-bit kinds are `Int64`; `uint64`/`fixed64` are `UInt64`.
//! - Well-known types: `Timestamp` is `Timestamp(Nanos)`; wrappers are their wrapped type;
//!   `Struct`, `Value` and `Any` are `Json`, `ListValue` an array of `Json`; `Duration` and
//!   `FieldMask` are `String`; `google.type.Date` is `Date`.
//! - `confluent.type.Decimal` is `Decimal`: its precision and scale from the field's
//!   `(confluent.field_meta).params` (`precision`, `scale`) where given; a value's own scale
//!   is used when decoding, so without a declared scale the shape says 0.
//! - A message that contains itself (directly or not) is `Json` where it recurs.

use prost_reflect::{
    DescriptorPool, FieldDescriptor, Kind, MapKey, MessageDescriptor, Value as ProtoValue,
};
use serde_json::Value;

use crate::format::shape::{Field, FieldType, TimeUnit};

/// The message's shape.
pub fn message(pool: &DescriptorPool, descriptor: &MessageDescriptor) -> FieldType {
    message_in(pool, descriptor, &mut Vec::new())
}

fn message_in(
    pool: &DescriptorPool,
    descriptor: &MessageDescriptor,
    stack: &mut Vec<String>,
) -> FieldType {
    if let Some(known) = well_known(descriptor.full_name()) {
        return known;
    }
    let name = descriptor.full_name().to_string();
    if stack.contains(&name) {
        return FieldType::Json;
    }
    stack.push(name.clone());
    let fields = descriptor
        .fields()
        .map(|f| field(pool, &f, stack))
        .collect();
    stack.pop();
    FieldType::Record { name, fields }
}

fn field(pool: &DescriptorPool, field: &FieldDescriptor, stack: &mut Vec<String>) -> Field {
    let (field_type, default) = if field.is_map() {
        let value_type = match field.kind() {
            Kind::Message(entry) => kind_type(pool, &entry.map_entry_value_field(), None, stack),
            _ => FieldType::Json,
        };
        (
            FieldType::Map(Box::new(value_type)),
            Some(Value::Object(Default::default())),
        )
    } else if field.is_list() {
        (
            FieldType::Array(Box::new(kind_type(pool, field, None, stack))),
            Some(Value::Array(Vec::new())),
        )
    } else {
        let default = if super::json::has_presence(field) || field.containing_oneof().is_some() {
            None
        } else {
            super::json::single(pool, &field.kind(), &field.default_value(), field.name(), 0).ok()
        };
        (kind_type(pool, field, Some(field), stack), default)
    };
    Field {
        name: field.name().to_string(),
        field_type,
        optional: super::json::has_presence(field) || field.containing_oneof().is_some(),
        default,
    }
}

/// The type of one value of `field` (an element, for a repeated field); `options_of` is
/// the field whose options may declare a decimal's precision and scale.
fn kind_type(
    pool: &DescriptorPool,
    field: &FieldDescriptor,
    options_of: Option<&FieldDescriptor>,
    stack: &mut Vec<String>,
) -> FieldType {
    match field.kind() {
        Kind::Double => FieldType::Float64,
        Kind::Float => FieldType::Float32,
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => FieldType::Int32,
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 | Kind::Uint32 | Kind::Fixed32 => {
            FieldType::Int64
        }
        Kind::Uint64 | Kind::Fixed64 => FieldType::UInt64,
        Kind::Bool => FieldType::Boolean,
        Kind::String => FieldType::String,
        Kind::Bytes => FieldType::Bytes,
        Kind::Enum(e) => FieldType::Enum {
            name: e.full_name().to_string(),
            symbols: e.values().map(|v| v.name().to_string()).collect(),
        },
        Kind::Message(m) if m.full_name() == "confluent.type.Decimal" => {
            let params = options_of
                .map(|f| decimal_params(pool, f))
                .unwrap_or_default();
            FieldType::Decimal {
                precision: params.0,
                scale: params.1.unwrap_or(0),
            }
        }
        Kind::Message(m) => message_in(pool, &m, stack),
    }
}

/// `precision` and `scale` from the field's `(confluent.field_meta).params`.
fn decimal_params(pool: &DescriptorPool, field: &FieldDescriptor) -> (Option<u32>, Option<u32>) {
    let Some(extension) = pool.get_extension_by_name("confluent.field_meta") else {
        return (None, None);
    };
    let options = field.options();
    if !options.has_extension(&extension) {
        return (None, None);
    }
    let meta = options.get_extension(&extension);
    let ProtoValue::Message(meta) = meta.as_ref() else {
        return (None, None);
    };
    let params = meta.get_field_by_name("params");
    let Some(ProtoValue::Map(params)) = params.as_deref() else {
        return (None, None);
    };
    let number = |key: &str| {
        params
            .get(&MapKey::String(key.to_string()))
            .and_then(|v| v.as_str())
            .and_then(|v| v.trim().parse::<u32>().ok())
    };
    (number("precision"), number("scale"))
}

/// The shape of a well-known or common type that does not decode as a record.
fn well_known(full_name: &str) -> Option<FieldType> {
    Some(match full_name {
        "google.protobuf.Timestamp" => FieldType::Timestamp(TimeUnit::Nanos),
        "google.protobuf.Duration" | "google.protobuf.FieldMask" => FieldType::String,
        "google.protobuf.DoubleValue" => FieldType::Float64,
        "google.protobuf.FloatValue" => FieldType::Float32,
        "google.protobuf.Int64Value" | "google.protobuf.UInt32Value" => FieldType::Int64,
        "google.protobuf.UInt64Value" => FieldType::UInt64,
        "google.protobuf.Int32Value" => FieldType::Int32,
        "google.protobuf.BoolValue" => FieldType::Boolean,
        "google.protobuf.StringValue" => FieldType::String,
        "google.protobuf.BytesValue" => FieldType::Bytes,
        "google.protobuf.Struct" | "google.protobuf.Value" | "google.protobuf.Any" => {
            FieldType::Json
        }
        "google.protobuf.ListValue" => FieldType::Array(Box::new(FieldType::Json)),
        "google.type.Date" => FieldType::Date,
        "confluent.type.Decimal" => FieldType::Decimal {
            precision: None,
            scale: 0,
        },
        _ => return None,
    })
}
