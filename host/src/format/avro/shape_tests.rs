//! The shape of parsed schemas in sluice's vocabulary, and defaults in decoded forms.

use serde_json::{Value, json};

use super::super::shape::{Field, FieldType, TimeUnit};
use super::tests::{ORDER, TREE, schema};

fn field(name: &str, field_type: FieldType, optional: bool, default: Option<Value>) -> Field {
    Field {
        name: name.into(),
        field_type,
        optional,
        default,
    }
}

fn record(name: &str, fields: Vec<Field>) -> FieldType {
    FieldType::Record {
        name: name.into(),
        fields,
    }
}

#[test]
fn the_shape_in_sluice_vocabulary() {
    let address = record(
        "com.acme.Address",
        vec![
            field("street", FieldType::String, false, None),
            field("zip", FieldType::String, true, None),
        ],
    );
    let line = record(
        "com.acme.lines.Line",
        vec![
            field("sku", FieldType::String, false, None),
            field("qty", FieldType::Int32, false, None),
        ],
    );
    let status = FieldType::Enum {
        name: "com.acme.Status".into(),
        symbols: vec!["NEW".into(), "PAID".into(), "SHIPPED".into()],
    };
    let any = FieldType::Union(vec![
        FieldType::Int32,
        address.clone(),
        FieldType::String,
        line.clone(),
    ]);
    assert_eq!(
        schema(ORDER).shape(),
        record(
            "com.acme.Order",
            vec![
                field("id", FieldType::Int64, false, None),
                field("address", address.clone(), false, None),
                field("lines", FieldType::Array(Box::new(line)), false, None),
                field(
                    "tags",
                    FieldType::Map(Box::new(FieldType::Int64)),
                    false,
                    None
                ),
                field("status", status, false, None),
                field("note", FieldType::String, true, None),
                field("billing", address, true, None),
                field("any", any, true, None),
            ]
        )
    );
    // A record met again inside itself: its name, no fields.
    let inner = record("Tree", vec![]);
    assert_eq!(
        schema(TREE).shape(),
        record(
            "Tree",
            vec![
                field("value", FieldType::Int32, false, None),
                field(
                    "children",
                    FieldType::Array(Box::new(inner.clone())),
                    false,
                    None
                ),
                field("next", inner, true, None),
            ]
        )
    );
}

#[test]
fn logical_shapes_and_defaults() {
    let text = r#"{"type": "record", "name": "D", "fields": [
        {"name": "i", "type": "int", "default": 5},
        {"name": "f", "type": "float", "default": "NaN"},
        {"name": "by", "type": "bytes", "default": "\u00ff"},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2},
         "default": "\u0004\u00e2"},
        {"name": "fx", "type": {"type": "fixed", "name": "F2", "size": 2, "logicalType": "decimal",
         "precision": 4}, "default": "\u00ff\u00ff"},
        {"name": "u", "type": {"type": "fixed", "name": "U", "size": 16, "logicalType": "uuid"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}, "default": -1},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}, "default": 0},
        {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}, "default": 0},
        {"name": "lt", "type": {"type": "long", "logicalType": "local-timestamp-nanos"}},
        {"name": "dur", "type": {"type": "fixed", "name": "Dur", "size": 12, "logicalType": "duration"}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A"]}, "default": "A"},
        {"name": "nul", "type": ["null", "string"], "default": null},
        {"name": "later", "type": ["string", "null"], "default": "x"},
        {"name": "multi", "type": ["int", "string"], "default": 1},
        {"name": "list", "type": {"type": "array", "items": "int"}, "default": [1]},
        {"name": "wrong", "type": "int", "default": "abc"}]}"#;
    let shape = schema(text).shape();
    let got: Vec<(&str, &FieldType, Option<&Value>)> = shape
        .fields()
        .iter()
        .map(|f| (f.name.as_str(), &f.field_type, f.default.as_ref()))
        .collect();
    let part = |name: &str| field(name, FieldType::Int64, false, None);
    let expected = [
        ("i", FieldType::Int32, Some(json!(5))),
        ("f", FieldType::Float32, Some(json!("NaN"))),
        ("by", FieldType::Bytes, Some(json!({"base64": "/w=="}))),
        (
            "dec",
            FieldType::Decimal {
                precision: Some(4),
                scale: 2,
            },
            Some(json!("12.50")),
        ),
        (
            "fx",
            FieldType::Decimal {
                precision: Some(4),
                scale: 0,
            },
            Some(json!("-1")),
        ),
        ("u", FieldType::Uuid, None),
        ("day", FieldType::Date, Some(json!("1969-12-31"))),
        (
            "tm",
            FieldType::Time(TimeUnit::Millis),
            Some(json!("00:00:00.000000")),
        ),
        ("tu", FieldType::Time(TimeUnit::Micros), None),
        (
            "ts",
            FieldType::Timestamp(TimeUnit::Micros),
            Some(json!("1970-01-01T00:00:00.000000Z")),
        ),
        ("lt", FieldType::LocalTimestamp(TimeUnit::Nanos), None),
        (
            "dur",
            record("Dur", vec![part("months"), part("days"), part("millis")]),
            None,
        ),
        (
            "e",
            FieldType::Enum {
                name: "E".into(),
                symbols: vec!["A".into()],
            },
            Some(json!("A")),
        ),
        ("nul", FieldType::String, Some(json!(null))),
        ("later", FieldType::String, Some(json!("x"))),
        (
            "multi",
            FieldType::Union(vec![FieldType::Int32, FieldType::String]),
            Some(json!({"int": 1})),
        ),
        (
            "list",
            FieldType::Array(Box::new(FieldType::Int32)),
            Some(json!([1])),
        ),
        ("wrong", FieldType::Int32, Some(json!("abc"))),
    ];
    let expected: Vec<(&str, &FieldType, Option<&Value>)> = expected
        .iter()
        .map(|(n, t, d)| (*n, t, d.as_ref()))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(schema(r#"["null", "long"]"#).shape(), FieldType::Int64);
    assert_eq!(schema(r#"["null"]"#).shape(), FieldType::Null);
}

#[test]
fn the_shape_of_a_huge_schema_is_bounded() {
    // R1 holds R0 twice, R2 holds R1 twice, …: 2^40 records if expanded in full.
    let mut text = r#"{"type": "record", "name": "R0", "fields": []}"#.to_owned();
    for i in 1..=40 {
        text = format!(
            r#"{{"type": "record", "name": "R{i}", "fields": [{{"name": "a", "type": {text}}},
            {{"name": "b", "type": "R{}"}}]}}"#,
            i - 1
        );
    }
    let shape = schema(&text).shape();
    // Expanded until the bound, then `Json` in the place of the rest.
    fn count(shape: &FieldType, json: &mut usize) -> usize {
        if *shape == FieldType::Json {
            *json += 1;
        }
        1 + shape
            .fields()
            .iter()
            .map(|f| count(&f.field_type, json))
            .sum::<usize>()
    }
    let mut json = 0;
    assert!(count(&shape, &mut json) <= 200_000);
    assert!(json > 0);
}
