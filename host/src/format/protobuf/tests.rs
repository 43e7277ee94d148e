use std::sync::Arc;

use proptest::prelude::*;
use prost_reflect::DynamicMessage;
use prost_reflect::prost::Message as _;
use serde_json::{Value, json};

use super::ProtoSchema;
use crate::format::shape::{FieldType, TimeUnit};
use crate::format::{Reference, RegisteredSchema, SchemaType};

const MONEY: &str = r#"syntax = "proto3";
package common;
message Money { string currency = 1; int64 units = 2; }
"#;

const ORDERS: &str = r#"syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/duration.proto";
import "confluent/meta.proto";
import "confluent/type/decimal.proto";
import "common/money.proto";

message First { string id = 1; }

message Order {
  message Line { string sku = 1; int32 qty = 2; common.Money price = 3; }
  enum Status { UNKNOWN = 0; PAID = 1; SHIPPED = 2; }
  double f_double = 1;
  float f_float = 2;
  int32 f_int32 = 3;
  int64 f_int64 = 4;
  uint32 f_uint32 = 5;
  uint64 f_uint64 = 6;
  sint32 f_sint32 = 7;
  sint64 f_sint64 = 8;
  fixed32 f_fixed32 = 9;
  fixed64 f_fixed64 = 10;
  sfixed32 f_sfixed32 = 11;
  sfixed64 f_sfixed64 = 12;
  bool f_bool = 13;
  string f_string = 14;
  bytes f_bytes = 15;
  repeated Line lines = 16;
  map<string, int64> counts = 17;
  map<int32, string> names = 18;
  oneof payment { string card = 19; string iban = 20; }
  Status status = 21;
  google.protobuf.StringValue note = 22;
  google.protobuf.Int64Value big = 23;
  google.protobuf.Timestamp created_at = 24;
  google.protobuf.Struct attrs = 25;
  confluent.type.Decimal total = 26 [(confluent.field_meta) = {
    params: [{key: "precision", value: "10"}, {key: "scale", value: "2"}]
  }];
  optional string maybe = 27;
  google.protobuf.Duration wait = 28;
  repeated int32 tags = 29;
  confluent.type.Decimal plain = 30;
}
"#;

fn registered(text: &str, references: Vec<(&str, &str)>) -> RegisteredSchema {
    RegisteredSchema {
        schema_type: SchemaType::Protobuf,
        text: text.to_string(),
        references: references
            .into_iter()
            .map(|(name, text)| Reference {
                name: name.to_string(),
                subject: name.to_string(),
                version: 1,
                schema: Arc::new(registered(text, Vec::new())),
            })
            .collect(),
    }
}

fn orders() -> ProtoSchema {
    ProtoSchema::from_registered(&registered(ORDERS, vec![("common/money.proto", MONEY)])).unwrap()
}

/// Encodes a message given in Protobuf's canonical JSON (prost-reflect's parser), so the
/// decoder under test is checked against an independent encoder.
fn encode(schema: &ProtoSchema, indexes: &[i32], canonical: Value) -> Vec<u8> {
    let descriptor = schema.message(indexes).unwrap();
    DynamicMessage::deserialize(descriptor, canonical)
        .unwrap()
        .encode_to_vec()
}

#[test]
fn compiled_schemas_are_shared_across_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<ProtoSchema>();
    shared::<crate::format::json_schema::JsonSchemaSchema>();
}

#[test]
fn every_scalar_and_collection() {
    let schema = orders();
    let payload = encode(
        &schema,
        &[1],
        json!({
            "f_double": 1.5, "f_float": 0.1, "f_int32": -7,
            "f_int64": "-9007199254740993", "f_uint32": 4294967295u32,
            "f_uint64": "18446744073709551615", "f_sint32": -3, "f_sint64": "-4",
            "f_fixed32": 5, "f_fixed64": "6", "f_sfixed32": -8, "f_sfixed64": "-9",
            "f_bool": true, "f_string": "héllo", "f_bytes": "AAEC",
            "lines": [{"sku": "A", "qty": 2, "price": {"currency": "EUR", "units": "3"}}, {}],
            "counts": {"b": "2", "a": "1"},
            "names": {"10": "ten", "-1": "minus"},
            "iban": "DE00",
            "status": "SHIPPED",
            "tags": [3, 1, 2]
        }),
    );
    let value = schema.decode(&[1], &payload).unwrap();
    assert_eq!(value["f_double"], json!(1.5));
    assert_eq!(value["f_float"], json!(0.1));
    assert_eq!(value["f_int32"], json!(-7));
    // 64-bit integers as numbers, exact (beyond f64's 2^53).
    assert_eq!(value["f_int64"].to_string(), "-9007199254740993");
    assert_eq!(value["f_uint32"], json!(4294967295u32));
    assert_eq!(value["f_uint64"].to_string(), "18446744073709551615");
    assert_eq!(value["f_sint32"], json!(-3));
    assert_eq!(value["f_sint64"], json!(-4));
    assert_eq!(value["f_fixed32"], json!(5));
    assert_eq!(value["f_fixed64"], json!(6));
    assert_eq!(value["f_sfixed32"], json!(-8));
    assert_eq!(value["f_sfixed64"], json!(-9));
    assert_eq!(value["f_bool"], json!(true));
    assert_eq!(value["f_string"], json!("héllo"));
    assert_eq!(value["f_bytes"], json!({"base64": "AAEC"}));
    assert_eq!(
        value["lines"],
        json!([
            {"sku": "A", "qty": 2, "price": {"currency": "EUR", "units": 3}},
            {"sku": "", "qty": 0, "price": null}
        ])
    );
    assert_eq!(value["counts"], json!({"a": 1, "b": 2}));
    assert_eq!(value["names"], json!({"-1": "minus", "10": "ten"}));
    assert_eq!(value["tags"], json!([3, 1, 2]));
    assert_eq!(value["status"], json!("SHIPPED"));
    // Of the oneof, only the member that is set.
    assert_eq!(value["iban"], json!("DE00"));
    assert!(value.get("card").is_none());
    // Unset fields with presence are null.
    for name in [
        "note",
        "big",
        "created_at",
        "attrs",
        "total",
        "maybe",
        "wait",
    ] {
        assert_eq!(value[name], Value::Null, "{name}");
    }
}

#[test]
fn unset_fields_take_their_defaults() {
    let schema = orders();
    let value = schema.decode(&[1], &[]).unwrap();
    assert_eq!(value["f_int64"], json!(0));
    assert_eq!(value["f_string"], json!(""));
    assert_eq!(value["f_bytes"], json!({"base64": ""}));
    assert_eq!(value["status"], json!("UNKNOWN"));
    assert_eq!(value["lines"], json!([]));
    assert_eq!(value["counts"], json!({}));
    assert!(value.get("card").is_none() && value.get("iban").is_none());
    // Field names as the .proto writes them, not json_name (fInt64).
    assert!(value.get("fInt64").is_none());
}

#[test]
fn well_known_and_confluent_types() {
    let schema = orders();
    let payload = encode(
        &schema,
        &[1],
        json!({
            "note": "", "big": "-5",
            "created_at": "2023-11-14T22:13:20.5Z",
            "attrs": {"a": 1, "b": [true, null, "x"], "c": {"d": 2.5}},
            "total": {"value": "BOI=", "precision": 4, "scale": 2},
            "plain": {"value": "+x4=", "scale": 2},
            "maybe": "",
            "wait": "-1.500s"
        }),
    );
    let value = schema.decode(&[1], &payload).unwrap();
    // A wrapper set to its default is still set: the bare value, not null.
    assert_eq!(value["note"], json!(""));
    assert_eq!(value["big"], json!(-5));
    assert_eq!(value["created_at"], json!("2023-11-14T22:13:20.500000000Z"));
    assert_eq!(
        value["attrs"],
        json!({"a": 1.0, "b": [true, null, "x"], "c": {"d": 2.5}})
    );
    assert_eq!(value["total"], json!("12.50"));
    assert_eq!(value["plain"], json!("-12.50"));
    assert_eq!(value["maybe"], json!(""));
    assert_eq!(value["wait"], json!("-1.500s"));
}

#[test]
fn nested_message_by_indexes_and_first_by_default() {
    let schema = orders();
    let payload = encode(&schema, &[1, 0], json!({"sku": "Z", "qty": 9}));
    assert_eq!(
        schema.decode(&[1, 0], &payload).unwrap(),
        json!({"sku": "Z", "qty": 9, "price": null})
    );
    assert_eq!(
        schema.message(&[1, 0]).unwrap().full_name(),
        "shop.Order.Line"
    );
    assert_eq!(schema.message(&[]).unwrap().full_name(), "shop.First");
    assert_eq!(schema.message(&[0]).unwrap().full_name(), "shop.First");
    assert_eq!(schema.message(&[1]).unwrap().full_name(), "shop.Order");
}

#[test]
fn map_entries_are_not_counted_as_nested_messages() {
    // As Confluent's Java serdes count them: over declared messages only, so B is [0, 0]
    // even though the descriptor lists the synthesized MEntry before it.
    let text = r#"syntax = "proto3";
message A { map<string, int32> m = 1; message B { string b = 1; } message C {} }
"#;
    let schema = ProtoSchema::from_registered(&registered(text, Vec::new())).unwrap();
    assert_eq!(schema.message(&[0, 0]).unwrap().full_name(), "A.B");
    assert_eq!(schema.message(&[0, 1]).unwrap().full_name(), "A.C");
    assert!(schema.message(&[0, 2]).is_err());
}

#[test]
fn bad_indexes_are_errors() {
    let schema = orders();
    let err = schema.message(&[2]).unwrap_err();
    assert!(
        err.contains("message index 2") && err.contains("has 2"),
        "{err}"
    );
    let err = schema.message(&[1, 1]).unwrap_err();
    assert!(
        err.contains("nested in shop.Order") && err.contains("has 1"),
        "{err}"
    );
    assert!(schema.message(&[-1]).is_err());
    assert!(schema.message(&[0, 0]).is_err());
    assert!(schema.decode(&[5], &[]).is_err());
    assert!(schema.shape(&[5]).is_err());
}

#[test]
fn garbage_payload_is_an_error() {
    let schema = orders();
    // Field 14 (string), length 100, with 2 bytes left.
    let err = schema.decode(&[1], &[0x72, 100, b'a', b'b']).unwrap_err();
    assert!(err.contains("not a valid Protobuf shop.Order"), "{err}");
    // Invalid UTF-8 in a string field.
    assert!(schema.decode(&[1], &[0x72, 1, 0xFF]).is_err());
    // A wire type that does not exist.
    assert!(schema.decode(&[1], &[0x0F]).is_err());
}

#[test]
fn hand_encoded_bytes() {
    let schema = orders();
    // f_int64 = -1 (field 4, varint, ten bytes); f_sint32 = -3 (field 7, zigzag 5);
    // f_bytes = [0xFF] (field 15).
    let mut payload = vec![0x20];
    payload.extend([0xFF; 9]);
    payload.push(0x01);
    payload.extend([0x38, 0x05, 0x7A, 0x01, 0xFF]);
    // status = 99, a number the open enum does not name: kept as the number.
    payload.extend([0xA8, 0x01, 99]);
    let value = schema.decode(&[1], &payload).unwrap();
    assert_eq!(value["status"], json!(99));
    assert_eq!(value["f_int64"], json!(-1));
    assert_eq!(value["f_sint32"], json!(-3));
    assert_eq!(value["f_bytes"], json!({"base64": "/w=="}));
}

#[test]
fn proto2_declared_defaults() {
    let text = r#"syntax = "proto2";
package legacy;
message Old {
  enum E { A = 0; B = 1; }
  optional int32 n = 1 [default = 42];
  optional string s = 2 [default = "hi"];
  required int64 id = 3;
  optional E e = 4 [default = B];
  optional bytes b = 5 [default = "ab"];
  optional double d = 6 [default = inf];
}
"#;
    let schema = ProtoSchema::from_registered(&registered(text, Vec::new())).unwrap();
    let value = schema.decode(&[], &[0x08, 0x07]).unwrap();
    assert_eq!(
        value,
        json!({"n": 7, "s": "hi", "id": 0, "e": "B", "b": {"base64": "YWI="}, "d": "Infinity"})
    );
    let shape = schema.shape(&[]).unwrap();
    assert_eq!(shape.fields()[0].default, Some(json!(42)));
    assert_eq!(shape.fields()[3].default, Some(json!("B")));
}

#[test]
fn shape_of_a_message() {
    let schema = orders();
    let FieldType::Record { name, fields } = schema.shape(&[1]).unwrap() else {
        panic!("not a record");
    };
    assert_eq!(name, "shop.Order");
    let field = |n: &str| fields.iter().find(|f| f.name == n).unwrap().clone();
    assert_eq!(field("f_int32").field_type, FieldType::Int32);
    assert_eq!(field("f_uint32").field_type, FieldType::Int64);
    assert_eq!(field("f_sint64").field_type, FieldType::Int64);
    assert_eq!(field("f_fixed64").field_type, FieldType::UInt64);
    assert_eq!(field("f_float").field_type, FieldType::Float32);
    assert_eq!(field("f_bytes").field_type, FieldType::Bytes);
    assert!(!field("f_int32").optional);
    assert_eq!(field("f_int32").default, Some(json!(0)));
    assert_eq!(
        field("status").field_type,
        FieldType::Enum {
            name: "shop.Order.Status".into(),
            symbols: vec!["UNKNOWN".into(), "PAID".into(), "SHIPPED".into()]
        }
    );
    assert_eq!(
        field("counts").field_type,
        FieldType::Map(Box::new(FieldType::Int64))
    );
    assert_eq!(
        field("tags").field_type,
        FieldType::Array(Box::new(FieldType::Int32))
    );
    let FieldType::Array(line) = field("lines").field_type else {
        panic!("lines is not an array");
    };
    let FieldType::Record {
        name,
        fields: line_fields,
    } = *line
    else {
        panic!("a line is not a record");
    };
    assert_eq!(name, "shop.Order.Line");
    assert!(line_fields[2].optional);
    assert_eq!(field("note").field_type, FieldType::String);
    assert!(field("note").optional);
    assert_eq!(field("big").field_type, FieldType::Int64);
    assert_eq!(
        field("created_at").field_type,
        FieldType::Timestamp(TimeUnit::Nanos)
    );
    assert!(field("created_at").optional);
    assert_eq!(field("attrs").field_type, FieldType::Json);
    assert_eq!(
        field("total").field_type,
        FieldType::Decimal {
            precision: Some(10),
            scale: 2
        }
    );
    assert_eq!(
        field("plain").field_type,
        FieldType::Decimal {
            precision: None,
            scale: 0
        }
    );
    assert!(field("maybe").optional);
    assert_eq!(field("maybe").default, None);
    assert!(field("card").optional && field("iban").optional);
    assert_eq!(field("wait").field_type, FieldType::String);
}

#[test]
fn recursive_messages_are_bounded() {
    let text = r#"syntax = "proto3";
message Node { string v = 1; Node next = 2; }
"#;
    let schema = ProtoSchema::from_registered(&registered(text, Vec::new())).unwrap();
    let shape = schema.shape(&[]).unwrap();
    assert_eq!(shape.fields()[1].field_type, FieldType::Json);
    // 200 levels of `next`: prost's recursion limit refuses it, no stack overflow.
    let mut payload: Vec<u8> = Vec::new();
    for _ in 0..200 {
        let mut outer = vec![0x12];
        prost_reflect::prost::encoding::encode_varint(payload.len() as u64, &mut outer);
        outer.extend(payload);
        payload = outer;
    }
    assert!(schema.decode(&[], &payload).is_err());
}

#[test]
fn google_type_date_and_any() {
    let text = r#"syntax = "proto3";
import "google/type/date.proto";
import "google/protobuf/any.proto";
message Event { google.type.Date day = 1; google.protobuf.Any extra = 2; }
message Inner { int64 n = 1; }
"#;
    let schema = ProtoSchema::from_registered(&registered(text, Vec::new())).unwrap();
    let payload = encode(
        &schema,
        &[],
        json!({"day": {"year": 2024, "month": 2, "day": 29},
               "extra": {"@type": "type.googleapis.com/Inner", "n": "5"}}),
    );
    assert_eq!(
        schema.decode(&[], &payload).unwrap(),
        json!({"day": "2024-02-29", "extra": {"@type": "type.googleapis.com/Inner", "n": 5}})
    );
    assert_eq!(
        schema.shape(&[]).unwrap().fields()[0].field_type,
        FieldType::Date
    );
    let bad = encode(
        &schema,
        &[],
        json!({"day": {"year": 2023, "month": 2, "day": 29}}),
    );
    let err = schema.decode(&[], &bad).unwrap_err();
    assert!(
        err.contains("field day") && err.contains("not a full calendar date"),
        "{err}"
    );
}

#[test]
fn nested_any_and_hostile_decimal_scale_are_bounded() {
    let text = r#"syntax = "proto3";
import "google/protobuf/any.proto";
import "confluent/type/decimal.proto";
message Event { google.protobuf.Any extra = 1; confluent.type.Decimal amount = 2; }
"#;
    let schema = ProtoSchema::from_registered(&registered(text, Vec::new())).unwrap();
    // An Any holding an Any holding … 300 levels, each a payload of its own.
    let url = b"type.googleapis.com/google.protobuf.Any";
    let mut any: Vec<u8> = Vec::new();
    for _ in 0..300 {
        let mut outer = vec![0x0A, url.len() as u8];
        outer.extend(url);
        outer.push(0x12);
        prost_reflect::prost::encoding::encode_varint(any.len() as u64, &mut outer);
        outer.extend(any);
        any = outer;
    }
    let mut payload = vec![0x0A];
    prost_reflect::prost::encoding::encode_varint(any.len() as u64, &mut payload);
    payload.extend(any);
    let err = schema.decode(&[], &payload).unwrap_err();
    assert!(err.contains("nested deeper"), "{err}");
    // Decimal { value: [1], scale: i32::MAX }: refused, not padded with zeros.
    let mut decimal = vec![0x0A, 0x01, 0x01, 0x18];
    prost_reflect::prost::encoding::encode_varint(i32::MAX as u64, &mut decimal);
    let mut payload = vec![0x12, decimal.len() as u8];
    payload.extend(decimal);
    let err = schema.decode(&[], &payload).unwrap_err();
    assert!(
        err.contains("field amount") && err.contains("scale"),
        "{err}"
    );
}

#[test]
fn base64_file_descriptors_as_schema_and_reference() {
    use base64::Engine as _;
    let compiled = orders();
    let encoded = |name: &str| {
        let file = compiled.pool.get_file_by_name(name).unwrap();
        base64::engine::general_purpose::STANDARD.encode(file.encode_to_vec())
    };
    let mut renamed = compiled
        .pool
        .get_file_by_name("common/money.proto")
        .unwrap()
        .file_descriptor_proto()
        .clone();
    renamed.name = Some("elsewhere/money.proto".to_string());
    let money = base64::engine::general_purpose::STANDARD.encode(renamed.encode_to_vec());
    // As Confluent's Python serializer registers them: the schema and its reference, each
    // a base64 FileDescriptorProto (the reference's own name inside is not the import path: the import path wins).
    let schema = ProtoSchema::from_registered(&registered(
        &encoded(super::MAIN_FILE),
        vec![("common/money.proto", &money)],
    ))
    .unwrap();
    let payload = encode(
        &schema,
        &[1, 0],
        json!({"sku": "Z", "price": {"units": "7"}}),
    );
    assert_eq!(
        schema.decode(&[1, 0], &payload).unwrap(),
        json!({"sku": "Z", "qty": 0, "price": {"currency": "", "units": 7}})
    );
    assert_eq!(schema.shape(&[1]).unwrap(), compiled.shape(&[1]).unwrap());
}

#[test]
fn schemas_that_do_not_compile() {
    let err = ProtoSchema::from_registered(&registered(
        "syntax = \"proto3\"; message X { strin a = 1; }",
        Vec::new(),
    ))
    .unwrap_err();
    assert!(
        err.contains("does not compile") && err.contains("strin"),
        "{err}"
    );
    let err = ProtoSchema::from_registered(&registered(
        "syntax = \"proto3\"; message X { int32 a = 1",
        Vec::new(),
    ))
    .unwrap_err();
    assert!(err.contains("does not compile"), "{err}");
    // An import the registry did not supply.
    let err = ProtoSchema::from_registered(&registered(
        "syntax = \"proto3\"; import \"other.proto\"; message X { int32 a = 1; }",
        Vec::new(),
    ))
    .unwrap_err();
    assert!(err.contains("other.proto"), "{err}");
    // A reference that does not compile names the import.
    let err = ProtoSchema::from_registered(&registered(
        "syntax = \"proto3\"; import \"common/money.proto\"; message X { common.Money a = 1; }",
        vec![("common/money.proto", "message {")],
    ))
    .unwrap_err();
    assert!(err.contains("common/money.proto"), "{err}");
}

proptest! {
    #[test]
    fn arbitrary_payloads_never_panic(
        payload in proptest::collection::vec(any::<u8>(), 0..512),
        indexes in proptest::collection::vec(-1i32..3, 0..3),
    ) {
        let schema = orders();
        let _ = schema.decode(&indexes, &payload);
        let _ = schema.shape(&indexes);
    }

    #[test]
    fn arbitrary_schema_text_never_panics(text in "\\PC{0,200}") {
        let _ = ProtoSchema::from_registered(&registered(&text, Vec::new()));
        let prefixed = format!("syntax = \"proto3\"; message M {{ {text} }}");
        if let Ok(schema) = ProtoSchema::from_registered(&registered(&prefixed, Vec::new())) {
            let _ = schema.decode(&[], &[0x08, 0x01, 0x12, 0x00]);
            let _ = schema.shape(&[]);
        }
    }
}
