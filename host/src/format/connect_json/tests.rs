use proptest::prelude::*;
use serde_json::{Value, json};

use super::{decode, shape};
use crate::format::shape::{FieldType, TimeUnit};

/// A Debezium MySQL connector's create event for `inventory.customers`, in the form
/// Debezium's MySQL connector documentation shows (JsonConverter, schemas.enable=true).
const DEBEZIUM_CREATE: &str = r#"{
  "schema": {
    "type": "struct",
    "fields": [
      {"type": "struct", "fields": [
        {"type": "int32", "optional": false, "field": "id"},
        {"type": "string", "optional": false, "field": "first_name"},
        {"type": "string", "optional": false, "field": "last_name"},
        {"type": "string", "optional": false, "field": "email"}
      ], "optional": true, "name": "mysql-server-1.inventory.customers.Value", "field": "before"},
      {"type": "struct", "fields": [
        {"type": "int32", "optional": false, "field": "id"},
        {"type": "string", "optional": false, "field": "first_name"},
        {"type": "string", "optional": false, "field": "last_name"},
        {"type": "string", "optional": false, "field": "email"}
      ], "optional": true, "name": "mysql-server-1.inventory.customers.Value", "field": "after"},
      {"type": "struct", "fields": [
        {"type": "string", "optional": false, "field": "version"},
        {"type": "string", "optional": false, "field": "connector"},
        {"type": "string", "optional": false, "field": "name"},
        {"type": "int64", "optional": false, "field": "ts_ms"},
        {"type": "boolean", "optional": true, "default": false, "field": "snapshot"},
        {"type": "string", "optional": false, "field": "db"},
        {"type": "string", "optional": true, "field": "table"},
        {"type": "int64", "optional": false, "field": "server_id"},
        {"type": "string", "optional": true, "field": "gtid"},
        {"type": "string", "optional": false, "field": "file"},
        {"type": "int64", "optional": false, "field": "pos"},
        {"type": "int32", "optional": false, "field": "row"},
        {"type": "int64", "optional": true, "field": "thread"},
        {"type": "string", "optional": true, "field": "query"}
      ], "optional": false, "name": "io.debezium.connector.mysql.Source", "field": "source"},
      {"type": "string", "optional": false, "field": "op"},
      {"type": "int64", "optional": true, "field": "ts_ms"}
    ],
    "optional": false,
    "name": "mysql-server-1.inventory.customers.Envelope"
  },
  "payload": {
    "op": "c",
    "ts_ms": 1465491411815,
    "before": null,
    "after": {
      "id": 1004,
      "first_name": "Anne",
      "last_name": "Kretchmar",
      "email": "annek@noanswer.org"
    },
    "source": {
      "version": "1.9.7.Final",
      "connector": "mysql",
      "name": "mysql-server-1",
      "ts_ms": 0,
      "snapshot": false,
      "db": "inventory",
      "table": "customers",
      "server_id": 0,
      "gtid": null,
      "file": "mysql-bin.000003",
      "pos": 154,
      "row": 0,
      "thread": 7,
      "query": "INSERT INTO customers (first_name, last_name, email) VALUES ('Anne', 'Kretchmar', 'annek@noanswer.org')"
    }
  }
}"#;

fn envelope(schema: Value, payload: &str) -> Vec<u8> {
    format!("{{\"schema\": {schema}, \"payload\": {payload}}}").into_bytes()
}

#[test]
fn debezium_change_event() {
    let (value, schema) = decode(DEBEZIUM_CREATE.as_bytes()).unwrap();
    assert_eq!(
        value,
        json!({
            "before": null,
            "after": {"id": 1004, "first_name": "Anne", "last_name": "Kretchmar",
                      "email": "annek@noanswer.org"},
            "source": {"version": "1.9.7.Final", "connector": "mysql", "name": "mysql-server-1",
                       "ts_ms": 0, "snapshot": false, "db": "inventory", "table": "customers",
                       "server_id": 0, "gtid": null, "file": "mysql-bin.000003", "pos": 154,
                       "row": 0, "thread": 7,
                       "query": "INSERT INTO customers (first_name, last_name, email) VALUES ('Anne', 'Kretchmar', 'annek@noanswer.org')"},
            "op": "c",
            "ts_ms": 1465491411815i64
        })
    );
    // Fields in the schema's order, not the payload's.
    let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["before", "after", "source", "op", "ts_ms"]);
    let FieldType::Record { name, fields } = shape(&schema).unwrap() else {
        panic!("not a record");
    };
    assert_eq!(name, "mysql-server-1.inventory.customers.Envelope");
    assert!(fields[0].optional && !fields[2].optional);
    assert_eq!(
        fields[1].field_type.fields()[0].field_type,
        FieldType::Int32
    );
    assert_eq!(fields[2].field_type.fields()[4].default, Some(json!(false)));
    assert_eq!(fields[4].field_type, FieldType::Int64);
}

fn decimal_schema() -> Value {
    json!({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
           "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "optional": false})
}

#[test]
fn decimals_base64_and_numeric() {
    // 1250 = 0x04E2 → "BOI="; -1250 = 0xFB1E → "+x4=".
    let (value, _) = decode(&envelope(decimal_schema(), "\"BOI=\"")).unwrap();
    assert_eq!(value, json!("12.50"));
    let (value, _) = decode(&envelope(decimal_schema(), "\"+x4=\"")).unwrap();
    assert_eq!(value, json!("-12.50"));
    // NUMERIC: the number's text, exactly, even beyond f64's digits.
    let (value, _) = decode(&envelope(decimal_schema(), "12.5")).unwrap();
    assert_eq!(value, json!("12.50"));
    let (value, _) = decode(&envelope(decimal_schema(), "12345678901234567890.12")).unwrap();
    assert_eq!(value, json!("12345678901234567890.12"));
    let err = decode(&envelope(decimal_schema(), "1.234")).unwrap_err();
    assert!(err.contains("more than 2 digits"), "{err}");
    let err = decode(&envelope(decimal_schema(), "\"not base64!\"")).unwrap_err();
    assert!(err.contains("payload") && err.contains("base64"), "{err}");
    assert_eq!(
        shape(&decimal_schema()).unwrap(),
        FieldType::Decimal {
            precision: Some(10),
            scale: 2
        }
    );
    let no_scale = json!({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal"});
    assert!(decode(&envelope(no_scale.clone(), "\"AA==\"")).is_err());
    assert!(shape(&no_scale).is_err());
    let huge = json!({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
                      "parameters": {"scale": "4000000000"}});
    assert!(decode(&envelope(huge, "\"AA==\"")).is_err());
}

#[test]
fn dates_times_and_timestamps() {
    let schema = json!({"type": "struct", "name": "t", "fields": [
        {"field": "d", "type": "int32", "name": "org.apache.kafka.connect.data.Date"},
        {"field": "t", "type": "int32", "name": "org.apache.kafka.connect.data.Time"},
        {"field": "ts", "type": "int64", "name": "org.apache.kafka.connect.data.Timestamp"},
        {"field": "dd", "type": "int32", "name": "io.debezium.time.Date"},
        {"field": "dt", "type": "int32", "name": "io.debezium.time.Time"},
        {"field": "dmt", "type": "int64", "name": "io.debezium.time.MicroTime"},
        {"field": "dnt", "type": "int64", "name": "io.debezium.time.NanoTime"},
        {"field": "dts", "type": "int64", "name": "io.debezium.time.Timestamp"},
        {"field": "dmts", "type": "int64", "name": "io.debezium.time.MicroTimestamp"},
        {"field": "dnts", "type": "int64", "name": "io.debezium.time.NanoTimestamp"},
        {"field": "z", "type": "string", "name": "io.debezium.time.ZonedTimestamp"},
        {"field": "u", "type": "string", "name": "io.debezium.data.Uuid"},
        {"field": "j", "type": "string", "name": "io.debezium.data.Json"},
        {"field": "v", "type": "struct", "name": "io.debezium.data.VariableScaleDecimal",
         "fields": [{"field": "scale", "type": "int32"}, {"field": "value", "type": "bytes"}]}
    ]});
    let payload = r#"{"d": 19723, "t": 45296789, "ts": 1700000000123, "dd": 19723,
        "dt": 45296789, "dmt": 45296789012, "dnt": 45296789012345,
        "dts": 1700000000123, "dmts": 1700000000123456, "dnts": 1700000000123456789,
        "z": "2023-11-14T22:13:20+01:00", "u": "5f3c1c3e-8a52-4b8e-9c7e-1d2f3a4b5c6d",
        "j": "{\"a\": 1}", "v": {"scale": 3, "value": "BOI="}}"#;
    let (value, schema) = decode(&envelope(schema, payload)).unwrap();
    assert_eq!(
        value,
        json!({"d": "2024-01-01", "t": "12:34:56.789000", "ts": "2023-11-14T22:13:20.123Z",
               "dd": "2024-01-01", "dt": "12:34:56.789000", "dmt": "12:34:56.789012",
               "dnt": "12:34:56.789012345", "dts": "2023-11-14 22:13:20.123000",
               "dmts": "2023-11-14 22:13:20.123456", "dnts": "2023-11-14 22:13:20.123456789",
               "z": "2023-11-14T22:13:20+01:00", "u": "5f3c1c3e-8a52-4b8e-9c7e-1d2f3a4b5c6d",
               "j": "{\"a\": 1}", "v": "1.250"})
    );
    let types: Vec<FieldType> = shape(&schema)
        .unwrap()
        .fields()
        .iter()
        .map(|f| f.field_type.clone())
        .collect();
    assert_eq!(
        types,
        vec![
            FieldType::Date,
            FieldType::Time(TimeUnit::Millis),
            FieldType::Timestamp(TimeUnit::Millis),
            FieldType::Date,
            FieldType::Time(TimeUnit::Millis),
            FieldType::Time(TimeUnit::Micros),
            FieldType::Time(TimeUnit::Nanos),
            FieldType::LocalTimestamp(TimeUnit::Millis),
            FieldType::LocalTimestamp(TimeUnit::Micros),
            FieldType::LocalTimestamp(TimeUnit::Nanos),
            // ZonedTimestamp: an instant; Json: a document as text.
            FieldType::Timestamp(TimeUnit::Micros),
            FieldType::Uuid,
            FieldType::JsonText,
            FieldType::Decimal {
                precision: None,
                scale: 0
            },
        ]
    );
    let bad_time = json!({"type": "int32", "name": "org.apache.kafka.connect.data.Time"});
    assert!(decode(&envelope(bad_time, "86400000")).is_err());
}

#[test]
fn maps_arrays_bytes_and_nesting() {
    let schema = json!({"type": "struct", "name": "m", "fields": [
        {"field": "by_int", "type": "map", "keys": {"type": "int32"}, "values": {"type": "string"}},
        {"field": "by_name", "type": "map", "keys": {"type": "string"},
         "values": {"type": "array", "items": {"type": "int64"}}},
        {"field": "raw", "type": "bytes"},
        {"field": "inner", "type": "struct", "name": "Inner", "optional": true, "fields": [
            {"field": "x", "type": "float64"}, {"field": "y", "type": "int16", "default": 7}]},
        {"field": "gone", "type": "string", "optional": true}
    ]});
    let payload = r#"{"by_int": [[1, "one"], [-2, "minus two"]],
        "by_name": {"b": [1, 2], "a": []}, "raw": "AAEC",
        "inner": {"x": 1.5}, "extra": "dropped"}"#;
    let (value, schema) = decode(&envelope(schema, payload)).unwrap();
    assert_eq!(
        value,
        json!({"by_int": [[1, "one"], [-2, "minus two"]], "by_name": {"b": [1, 2], "a": []},
               "raw": {"base64": "AAEC"}, "inner": {"x": 1.5, "y": 7}, "gone": null})
    );
    let fields = shape(&schema).unwrap().fields().to_vec();
    assert_eq!(
        fields[0].field_type,
        FieldType::Array(Box::new(FieldType::Array(Box::new(FieldType::Json))))
    );
    assert_eq!(
        fields[1].field_type,
        FieldType::Map(Box::new(FieldType::Array(Box::new(FieldType::Int64))))
    );
    assert_eq!(fields[2].field_type, FieldType::Bytes);
    assert_eq!(fields[3].field_type.fields()[1].default, Some(json!(7)));
    assert!(fields[3].optional && fields[4].optional);
}

#[test]
fn optional_nulls_and_required_fields() {
    let schema = json!({"type": "struct", "optional": true, "fields": [
        {"field": "a", "type": "int32"}]});
    let (value, _) = decode(&envelope(schema.clone(), "null")).unwrap();
    assert_eq!(value, Value::Null);
    let err = decode(&envelope(schema, "{}")).unwrap_err();
    assert!(
        err.contains("payload.a") && err.contains("not optional"),
        "{err}"
    );
    let schemaless = decode(br#"{"schema": null, "payload": {"x": [1, 2.5]}}"#).unwrap();
    assert_eq!(schemaless, (json!({"x": [1, 2.5]}), Value::Null));
    assert_eq!(shape(&Value::Null).unwrap(), FieldType::Json);
    let (value, _) = decode(&envelope(json!({"type": "double"}), "\"NaN\"")).unwrap();
    assert_eq!(value, json!("NaN"));
    assert!(decode(&envelope(json!({"type": "double"}), "\"1.5\"")).is_err());
}

#[test]
fn wrong_types_name_the_field() {
    let schema = json!({"type": "struct", "fields": [
        {"field": "outer", "type": "struct", "fields": [{"field": "n", "type": "int8"}]},
        {"field": "list", "type": "array", "items": {"type": "boolean"}, "optional": true}]});
    let err = decode(&envelope(schema.clone(), r#"{"outer": {"n": "7"}}"#)).unwrap_err();
    assert!(
        err.contains("payload.outer.n") && err.contains("expected an integer"),
        "{err}"
    );
    let err = decode(&envelope(schema.clone(), r#"{"outer": {"n": 300}}"#)).unwrap_err();
    assert!(err.contains("out of range for Connect type int8"), "{err}");
    let err = decode(&envelope(schema.clone(), r#"{"outer": {"n": 1.5}}"#)).unwrap_err();
    assert!(err.contains("payload.outer.n"), "{err}");
    let err = decode(&envelope(
        schema,
        r#"{"outer": {"n": 1}, "list": [true, 1]}"#,
    ))
    .unwrap_err();
    assert!(
        err.contains("payload.list[1]") && err.contains("true or false"),
        "{err}"
    );
    let err = decode(&envelope(
        json!({"type": "map", "keys": {"type": "int32"},
        "values": {"type": "int32"}}),
        r#"{"1": 2}"#,
    ))
    .unwrap_err();
    assert!(err.contains("[key, value] pairs"), "{err}");
    let err = decode(&envelope(json!({"type": "uint8"}), "1")).unwrap_err();
    assert!(err.contains("unknown Connect schema type"), "{err}");
}

#[test]
fn values_that_are_not_envelopes() {
    for text in [&br#"{"id": 1}"#[..], b"[1]", b"\"x\"", br#"{"schema": {}}"#] {
        let err = decode(text).unwrap_err();
        assert!(err.contains("schemas.enable=true"), "{err}");
    }
    let err = decode(b"{\"schema\": ").unwrap_err();
    assert!(err.contains("not JSON"), "{err}");
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = decode(&bytes);
    }

    #[test]
    fn arbitrary_envelopes_never_panic(
        kind in prop::sample::select(vec!["int8", "int64", "float64", "boolean", "string", "bytes", "array", "map", "struct", "x"]),
        name in prop::sample::select(vec!["", "org.apache.kafka.connect.data.Decimal", "org.apache.kafka.connect.data.Date", "io.debezium.time.NanoTimestamp", "io.debezium.data.VariableScaleDecimal"]),
        payload in prop::sample::select(vec!["null", "0", "-1e400", "1e-400", "12.345", "\"AAAA\"", "\"\"", "[]", "[[1,2]]", "{}", "{\"scale\": 2, \"value\": \"AQ==\"}", "true", "99999999999999999999"]),
        scale in prop::sample::select(vec!["\"0\"", "\"2\"", "\"-1\"", "5", "\"x\""]),
    ) {
        let schema = format!(r#"{{"type": "{kind}", "name": "{name}", "optional": true,
            "parameters": {{"scale": {scale}}}, "items": {{"type": "{kind}"}},
            "keys": {{"type": "int32"}}, "values": {{"type": "{kind}", "name": "{name}"}},
            "fields": [{{"field": "a", "type": "{kind}", "name": "{name}", "parameters": {{"scale": {scale}}}}}]}}"#);
        let text = format!("{{\"schema\": {schema}, \"payload\": {payload}}}");
        if let Ok((_, schema)) = decode(text.as_bytes()) {
            let _ = shape(&schema);
        }
        let _ = shape(&serde_json::from_str(&schema).unwrap());
    }
}
