//! Arbitrary bytes at every decoder of `format:` (docs/formats.md): the Confluent frame,
//! Avro, Protobuf, JSON Schema and Connect's envelope, and through the whole arrival stage
//! of a connector. Nothing may panic; every record is decoded, or fails alone with one of
//! the decoding failure classes.
//!
//! `PROPTEST_CASES` sets the cases per property (256 by default); a long run:
//! `PROPTEST_CASES=100000 cargo test -p sluice --release --test e2e fuzz_formats`.

use proptest::prelude::*;
use sluice::config::{self, Config};
use sluice::format::avro::AvroSchema;
use sluice::format::json_schema::JsonSchemaSchema;
use sluice::format::protobuf::ProtoSchema;
use sluice::format::{RegisteredSchema, SchemaType, connect_json, wire};
use sluice::prepare::Preparer;
use sluice::record::{Incoming, Record};

const AVRO: &str = r#"{"type": "record", "name": "R", "namespace": "f", "fields": [
  {"name": "id", "type": "long"},
  {"name": "s", "type": ["null", "string"]},
  {"name": "d", "type": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4}},
  {"name": "t", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
  {"name": "a", "type": {"type": "array", "items": {"type": "map", "values": "double"}}},
  {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
  {"name": "next", "type": ["null", "R"]}
]}"#;

const PROTO: &str = r#"syntax = "proto3";
package f;
import "google/protobuf/timestamp.proto";
import "google/protobuf/struct.proto";
message First { string a = 1; }
message M {
  message Inner { repeated int64 n = 1; M back = 2; }
  int64 id = 1; string s = 2; bytes b = 3; map<string, Inner> m = 4;
  google.protobuf.Timestamp at = 5; google.protobuf.Struct any = 6;
  oneof o { double x = 7; sint32 y = 8; }
  repeated Inner inner = 9;
}"#;

const JSON_SCHEMA: &str = r#"{"type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["id"]}"#;

fn registered(schema_type: SchemaType, text: &str) -> RegisteredSchema {
    RegisteredSchema {
        schema_type,
        text: text.to_string(),
        references: Vec::new(),
    }
}

/// A connector that decodes `format` values (one that needs no registry), with columns of
/// several types reading into them.
fn preparer(format: &str) -> Preparer {
    let text = format!(
        "kafka: {{ brokers: localhost:9092 }}\nconnectors:\n  - name: fuzz\n    topics: [t]\n    format: {format}\n    sink:\n      url: sqlite://fuzz.db\n      table: fuzz\n      columns:\n        id: {{ from: /id, type: bigint }}\n        d: {{ from: /d, type: numeric }}\n        t: {{ from: /t, type: timestamptz }}\n        s: {{ from: /s, type: text }}\n        v: {{ from: $value, type: json }}\n    errors: {{ policy: skip }}\n"
    );
    let config: Config = config::load_str(&text, &|_| None).expect("fuzz config is valid");
    Preparer::for_connector(&config.connectors[0], None, None).expect("preparer")
}

/// An Avro schema file for `format: { avro: { schema: FILE } }`, in a directory that lives
/// as long as the test.
fn avro_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("fuzz.avsc");
    std::fs::write(&path, AVRO).expect("write the schema");
    let format = format!("{{ avro: {{ schema: \"{}\" }} }}", path.display());
    (dir, format)
}

/// Arbitrary JSON.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(serde_json::Value::from),
        "\\PC{0,12}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            proptest::collection::vec(("[a-z]{1,3}", inner), 0..4)
                .prop_map(|fields| serde_json::Value::Object(fields.into_iter().collect())),
        ]
    })
}

/// A Connect schema of Connect's types and logical names, structs, arrays and maps.
fn connect_schema() -> impl Strategy<Value = serde_json::Value> {
    let types = proptest::sample::select(vec![
        "int8", "int16", "int32", "int64", "float", "double", "boolean", "string", "bytes",
    ]);
    let names = proptest::sample::select(vec![
        "",
        "org.apache.kafka.connect.data.Decimal",
        "org.apache.kafka.connect.data.Date",
        "org.apache.kafka.connect.data.Time",
        "org.apache.kafka.connect.data.Timestamp",
        "io.debezium.time.MicroTimestamp",
        "io.debezium.time.NanoTime",
        "io.debezium.data.VariableScaleDecimal",
    ]);
    let leaf = (types, names, any::<bool>(), 0u32..600).prop_map(|(t, name, optional, scale)| {
        let mut schema = serde_json::json!({"type": t, "optional": optional, "parameters": {"scale": scale.to_string()}});
        if !name.is_empty() {
            schema["name"] = serde_json::json!(name);
        }
        schema
    });
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(|fields| {
                let fields: Vec<serde_json::Value> = fields
                    .into_iter()
                    .enumerate()
                    .map(|(i, mut f)| {
                        f["field"] = serde_json::json!(format!("f{i}"));
                        f
                    })
                    .collect();
                serde_json::json!({"type": "struct", "fields": fields, "optional": true})
            }),
            inner
                .clone()
                .prop_map(|items| serde_json::json!({"type": "array", "items": items})),
            (inner.clone(), inner)
                .prop_map(|(k, v)| serde_json::json!({"type": "map", "keys": k, "values": v})),
        ]
    })
}

proptest! {
    #[test]
    fn frames_never_panic(data in proptest::collection::vec(any::<u8>(), 0..64), protobuf: bool) {
        let _ = wire::parse(&data, None, protobuf);
        let _ = wire::parse(b"payload", Some(&data), protobuf);
    }

    #[test]
    fn avro_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let schema = AvroSchema::parse(AVRO, &[]).expect("schema");
        let _ = schema.decode(&data);
    }

    #[test]
    fn protobuf_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256), index in 0..3i32) {
        let schema = ProtoSchema::from_registered(&registered(SchemaType::Protobuf, PROTO)).expect("schema");
        let _ = schema.decode(&[1], &data);
        let _ = schema.decode(&[1, index], &data);
        let _ = schema.decode(&[index], &data);
    }

    #[test]
    fn json_schema_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        let schema = JsonSchemaSchema::from_registered(&registered(SchemaType::Json, JSON_SCHEMA)).expect("schema");
        let _ = schema.decode(&data);
    }

    #[test]
    fn connect_json_never_panics(data in proptest::collection::vec(any::<u8>(), 0..256), text in "\\PC{0,200}") {
        let _ = connect_json::decode(&data);
        let _ = connect_json::decode(text.as_bytes());
    }

    /// Envelopes whose schemas are Connect schemas and whose payloads are any JSON, or a
    /// payload shaped by a schema of its own: decoded or refused, never a panic.
    #[test]
    fn connect_envelopes_never_panic(schema in connect_schema(), payload in json_value()) {
        let envelope = serde_json::json!({"schema": schema, "payload": payload});
        if let Ok((_, schema)) = connect_json::decode(envelope.to_string().as_bytes()) {
            let _ = connect_json::shape(&schema);
        }
        let _ = connect_json::shape(&envelope["schema"]);
    }

    /// Through a connector's arrival stage: each record is a row, or one failure of a
    /// decoding class; never lost, never twice.
    #[test]
    fn arrival_accounts_for_every_record(values in proptest::collection::vec(proptest::option::of(proptest::collection::vec(any::<u8>(), 0..128)), 1..20), avro: bool) {
        let (_dir, file) = avro_file();
        let mut preparer = preparer(if avro { &file } else { "connect_json" });
        let incoming: Vec<Incoming> = values
            .iter()
            .enumerate()
            .map(|(i, value)| Incoming::from(Record {
                topic: "t".into(),
                partition: 0,
                offset: i as i64,
                value: value.clone(),
                ..Record::default()
            }))
            .collect();
        let prepared = preparer.prepare(incoming).expect("prepare");
        let failed: Vec<usize> = prepared.failures.iter().map(|f| f.index).collect();
        for failure in &prepared.failures {
            prop_assert!(
                ["decode_failed", "column_value"].contains(&failure.class.name()),
                "{failure:?}"
            );
        }
        prop_assert_eq!(
            prepared.origins.len() + failed.len() + prepared.skipped as usize,
            values.len()
        );
    }
}
