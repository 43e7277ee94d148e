//! The derivation of columns from record schemas (`derive.rs`).

use super::*;
use crate::config::{Format, SinkConfig};
use crate::format::WriterSchema;
use crate::map::{RowOp, SqlValue};
use crate::record::Record;

fn field(name: &str, field_type: FieldType, optional: bool) -> Field {
    Field {
        name: name.into(),
        field_type,
        optional,
        default: None,
    }
}

fn record(fields: Vec<Field>) -> FieldType {
    FieldType::Record {
        name: "Row".into(),
        fields,
    }
}

fn writer(shape: FieldType) -> Option<Arc<WriterSchema>> {
    Some(Arc::new(WriterSchema {
        reference: None,
        format: "connect_json",
        shape,
        message: None,
    }))
}

fn sink(yaml: &str) -> SinkConfig {
    serde_yaml_ng::from_str(yaml).expect("a sink")
}

fn deriver(yaml: &str, envelope: Envelope) -> Deriver {
    let sink = sink(yaml);
    let base = RowMapper::new(&sink, Format::ConnectJson, envelope);
    let version = sink.versioning(envelope).map(|v| v.column);
    Deriver::new(
        base,
        sink.derive.clone(),
        sink.key.clone(),
        envelope,
        version,
    )
}

fn row_schema() -> FieldType {
    record(vec![
        field("id", FieldType::Int64, false),
        field("name", FieldType::String, true),
        field("nothing", FieldType::Null, true),
        field("tags", FieldType::Array(Box::new(FieldType::String)), true),
        field(
            "at",
            FieldType::LocalTimestamp(crate::format::shape::TimeUnit::Micros),
            true,
        ),
    ])
}

fn value_record(value: &str, key: Option<&str>) -> Record {
    Record {
        topic: "t".into(),
        partition: 0,
        offset: 7,
        timestamp: None,
        key: key.map(|k| k.as_bytes().to_vec()),
        value: Some(value.as_bytes().to_vec()),
        headers: Vec::new(),
    }
}

#[test]
fn fields_become_columns_of_their_types_and_map_in_order() {
    let d = deriver(
        "{url: 'sqlite://x', table: t, mode: upsert, key: [id]}",
        Envelope::None,
    );
    let schemas = RecordSchemas {
        key: None,
        value: writer(row_schema()),
    };
    let shape = d.shape(&schemas).expect("a shape");
    let names: Vec<(&str, ColumnType, bool)> = shape
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.column_type, c.optional))
        .collect();
    assert_eq!(
        names,
        vec![
            ("id", ColumnType::Bigint, false),
            ("name", ColumnType::Text, true),
            ("tags", ColumnType::Json, true),
            ("at", ColumnType::Timestamp, true),
        ]
    );
    assert_eq!(shape.key, vec![0]);
    let op = shape
        .mapper()
        .map(&value_record(
            r#"{"id": 5, "name": "x", "tags": ["a"], "at": "2024-01-02 03:04:05.000006"}"#,
            None,
        ))
        .expect("maps");
    let RowOp::Write(values) = op else {
        panic!("a write: {op:?}")
    };
    assert_eq!(values[0], SqlValue::Int(5));
    assert_eq!(values[1], SqlValue::Text("x".into()));
    assert_eq!(values[2], SqlValue::Text(r#"["a"]"#.into()));
    assert_eq!(values.len(), 4);
    // The same schema finds the same shape.
    assert!(Arc::ptr_eq(&shape, &d.shape(&schemas).expect("again")));
}

#[test]
fn a_debezium_event_derives_its_rows_columns_and_the_key_from_the_key_schema() {
    let d = deriver(
        "{url: 'sqlite://x', table: t, mode: upsert, key: record_key, derive: {rename: {name: full_name}, exclude: [tags], types: {at: timestamptz}}}",
        Envelope::Debezium,
    );
    let envelope = record(vec![
        field("before", row_schema(), true),
        field("after", row_schema(), true),
        field(
            "source",
            record(vec![field("lsn", FieldType::Int64, true)]),
            false,
        ),
        field("op", FieldType::String, false),
    ]);
    let schemas = RecordSchemas {
        key: writer(record(vec![field("id", FieldType::Int64, false)])),
        value: writer(envelope),
    };
    let shape = d.shape(&schemas).expect("a shape");
    let names: Vec<(&str, ColumnType)> = shape
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.column_type))
        .collect();
    assert_eq!(
        names,
        vec![
            ("id", ColumnType::Bigint),
            ("full_name", ColumnType::Text),
            ("at", ColumnType::Timestamptz),
        ]
    );
    assert_eq!(shape.key_names(), vec!["id"]);
    let op = shape
        .mapper()
        .map(&value_record(
            r#"{"op": "u", "before": null, "after": {"id": 9, "name": "n", "at": "2024-01-02T03:04:05Z"}, "source": {"connector": "postgresql", "ts_ms": 1700000000000, "snapshot": "false", "lsn": 12}}"#,
            Some(r#"{"id": 9}"#),
        ))
        .expect("maps");
    let RowOp::Write(values) = op else {
        panic!("a write: {op:?}")
    };
    assert_eq!(values[0], SqlValue::Int(9));
    assert_eq!(values[1], SqlValue::Text("n".into()));
    // The version follows the row's columns.
    assert_eq!(values.len(), 4);
    let delete = shape
        .mapper()
        .map(&value_record(
            r#"{"op": "d", "before": {"id": 9}, "after": null, "source": {"connector": "postgresql", "ts_ms": 1700000000001, "snapshot": "false", "lsn": 13}}"#,
            Some(r#"{"id": 9}"#),
        ))
        .expect("maps");
    assert!(
        matches!(delete, RowOp::Delete(ref k) if k[0] == SqlValue::Int(9)),
        "{delete:?}"
    );
}

#[test]
fn a_truncate_without_a_key_reaches_on_truncate_under_record_key() {
    // Debezium's truncate event (op t) has a null key: no key schema to derive from.
    let d = deriver(
        "{url: 'sqlite://x', table: t, mode: upsert, key: record_key, on_truncate: truncate}",
        Envelope::Debezium,
    );
    let envelope = record(vec![
        field("before", row_schema(), true),
        field("after", row_schema(), true),
        field("op", FieldType::String, false),
    ]);
    let schemas = RecordSchemas {
        key: None,
        value: writer(envelope),
    };
    let shape = d.shape(&schemas).expect("a keyless shape, not a failure");
    assert!(shape.columns.is_empty() && shape.key.is_empty() && !shape.from_row);
    let truncate = shape
        .mapper()
        .map(&value_record(
            r#"{"op": "t", "before": null, "after": null, "source": {"connector": "postgresql", "ts_ms": 1, "snapshot": "false", "lsn": 14}}"#,
            None,
        ))
        .expect("a truncate maps");
    assert!(matches!(truncate, RowOp::Truncate(_)), "{truncate:?}");
    // Any other change of a keyless event fails alone, saying why.
    let update = shape.mapper().map(&value_record(
        r#"{"op": "u", "before": null, "after": {"id": 9}, "source": {"connector": "postgresql", "ts_ms": 1, "snapshot": "false", "lsn": 15}}"#,
        None,
    ));
    assert!(
        matches!(&update, Err(crate::map::MapError::SchemaIncompatible(why)) if why.contains("record_key")),
        "{update:?}"
    );
    // Without an envelope, a missing key schema is still the record's failure.
    let plain = deriver(
        "{url: 'sqlite://x', table: t, mode: upsert, key: record_key}",
        Envelope::None,
    );
    let no_key = RecordSchemas {
        key: None,
        value: writer(row_schema()),
    };
    assert!(plain.shape(&no_key).is_err());
}

#[test]
fn field_names_the_database_cannot_take_fail_as_column_name() {
    let named = |names: &[&str], scheme: &str| {
        let d = deriver("{url: 'sqlite://x', table: t}", Envelope::None).for_database(
            ColumnNameRules::for_scheme(scheme),
            TypeRules::for_scheme(scheme),
        );
        let schemas = RecordSchemas {
            key: None,
            value: writer(record(
                names
                    .iter()
                    .map(|n| field(n, FieldType::String, true))
                    .collect(),
            )),
        };
        d.shape(&schemas)
    };
    // A dot is part of the name.
    let shape = named(&["id", "a.b"], "postgres").expect("a.b is a column name");
    assert_eq!(shape.columns[1].name, "a.b");
    for (names, scheme, says) in [
        (vec!["id", "a\0b"], "postgres", "control character"),
        (vec!["id", ""], "mysql", "empty name"),
        (vec!["id", "ctid"], "postgres", "system column"),
        (vec!["id", "x "], "mariadb", "ends with a space"),
    ] {
        match named(&names, scheme) {
            Err(MapError::ColumnName(why)) => assert!(why.contains(says), "{why}"),
            other => panic!("{names:?} on {scheme}: {other:?}"),
        }
    }
    let long = "n".repeat(64);
    assert!(matches!(
        named(&["id", &long], "postgres"),
        Err(MapError::ColumnName(_))
    ));
    assert!(named(&["id", &long], "mysql").is_ok());
    let many: Vec<String> = (0..1700).map(|i| format!("f{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(matches!(
        named(&many, "postgres"),
        Err(MapError::ColumnName(_))
    ));
    assert!(named(&many, "sqlite").is_ok());
}

#[test]
fn schemas_that_derive_no_columns_say_why() {
    let d = deriver(
        "{url: 'sqlite://x', table: t, mode: upsert, key: [uid]}",
        Envelope::None,
    );
    let schemas = RecordSchemas {
        key: None,
        value: writer(row_schema()),
    };
    let why = d.shape(&schemas).expect_err("no uid field").to_string();
    assert!(why.contains("key column uid is not a field"), "{why}");

    let d = deriver(
        "{url: 'sqlite://x', table: t, mode: upsert, key: record_key}",
        Envelope::None,
    );
    let why = d.shape(&schemas).expect_err("no key schema").to_string();
    assert!(why.contains("record_key"), "{why}");

    let d = deriver("{url: 'sqlite://x', table: t}", Envelope::None);
    let scalar = RecordSchemas {
        key: None,
        value: writer(FieldType::String),
    };
    let why = d.shape(&scalar).expect_err("not a record").to_string();
    assert!(why.contains("record's fields"), "{why}");

    let d = deriver(
        "{url: 'sqlite://x', table: t, derive: {rename: {name: ID}}}",
        Envelope::None,
    );
    let why = d
        .shape(&schemas)
        .expect_err("two fields, one column")
        .to_string();
    assert!(why.contains("both become column"), "{why}");

    let d = deriver("{url: 'sqlite://x', table: t}", Envelope::Debezium);
    let why = d.shape(&schemas).expect_err("no after row").to_string();
    assert!(why.contains("no after or before row"), "{why}");

    let d = deriver(
        "{url: 'sqlite://x', table: t, mode: upsert, key: [id], version: {from: $offset, column: Name}}",
        Envelope::None,
    );
    let why = d
        .shape(&schemas)
        .expect_err("a field named as the version column")
        .to_string();
    assert!(why.contains("sink.version.column"), "{why}");
}

/// A real Debezium 3.6.3 snapshot event of a table with a column of each kind
/// (tests/e2e/cdc/fixtures/real), as Connect's `JsonConverter` wrote it.
const REAL_KINDS: &str =
    include_str!("../../../tests/e2e/cdc/fixtures/real/json/00_snapshot__kinds_read.value.json");
const REAL_KINDS_KEY: &str =
    include_str!("../../../tests/e2e/cdc/fixtures/real/json/00_snapshot__kinds_read.key.json");

/// A row's values, or why it fails.
type Mapped = Result<Vec<SqlValue>, MapError>;

/// The columns a real event derives in a database, and its row's values there.
fn real_kinds(scheme: &str) -> (Vec<(String, ColumnType)>, Mapped) {
    let d = deriver(
        "{url: 'sqlite://x', table: t, mode: upsert, key: record_key}",
        Envelope::Debezium,
    )
    .for_database(
        ColumnNameRules::for_scheme(scheme),
        TypeRules::for_scheme(scheme),
    );
    let (value, schema) =
        crate::format::connect_json::decode(REAL_KINDS.as_bytes()).expect("decodes");
    let (_, key_schema) =
        crate::format::connect_json::decode(REAL_KINDS_KEY.as_bytes()).expect("decodes");
    let schemas = RecordSchemas {
        key: writer(crate::format::connect_json::shape(&key_schema).expect("a key shape")),
        value: writer(crate::format::connect_json::shape(&schema).expect("a shape")),
    };
    let shape = d.shape(&schemas).expect("derives");
    let columns = shape
        .columns
        .iter()
        .map(|c| (c.name.clone(), c.column_type))
        .collect();
    let record = value_record(&value.to_string(), Some(r#"{"id": 1}"#));
    let values = shape.mapper().map(&record).map(|op| match op {
        RowOp::Write(values) => values,
        other => panic!("a write: {other:?}"),
    });
    (columns, values)
}

#[test]
fn a_real_debezium_event_derives_the_types_its_source_had() {
    use ColumnType::*;
    let decimal = |precision, scale| Decimal { precision, scale };
    let (pg, values) = real_kinds("postgres");
    let types = |columns: &[(String, ColumnType)]| {
        columns
            .iter()
            .map(|(name, t)| (name.as_str().to_owned(), *t))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let pg = types(&pg);
    assert_eq!(pg["c_int2"], Smallint);
    assert_eq!(pg["c_int4"], Int);
    assert_eq!(pg["c_int8"], Bigint);
    assert_eq!(pg["c_numeric_12_2"], decimal(12, 2));
    assert_eq!(pg["c_numeric"], Numeric);
    assert_eq!(pg["c_jsonb"], Json);
    assert_eq!(pg["c_uuid"], Uuid);
    assert_eq!(pg["c_timestamptz"], Timestamptz);
    assert_eq!(pg["c_timestamp"], Timestamp);
    assert_eq!(pg["c_enum"], Text);
    assert_eq!(pg["c_int_array"], Array(ElementType::Int));
    assert_eq!(pg["c_text_array"], Array(ElementType::Text));
    let values = values.expect("maps on PostgreSQL");
    let at = |name: &str| {
        let (columns, _) = real_kinds("postgres");
        let i = columns
            .iter()
            .position(|(n, _)| n == name)
            .expect("a column");
        values[i].clone()
    };
    assert_eq!(at("c_int2"), SqlValue::Int(-32768));
    assert_eq!(at("c_numeric_12_2"), SqlValue::Text("1234567890.12".into()));
    // The document as Debezium wrote it, not a JSON string of it.
    assert_eq!(
        at("c_jsonb"),
        SqlValue::Text(r#"{"a": [1, 2.5, null], "b": {"c": "d"}}"#.into())
    );
    assert_eq!(at("c_int_array"), SqlValue::Text("{1,NULL,-3}".into()));
    assert_eq!(
        at("c_text_array"),
        SqlValue::Text(r#"{"x","y z",NULL}"#.into())
    );
    assert!(matches!(at("c_timestamptz"), SqlValue::Timestamp(_)));

    // MariaDB: arrays are JSON, the unconstrained numeric is the widest DECIMAL, and this
    // row's value of it (36 decimals) fails alone rather than being rounded.
    let (my, values) = real_kinds("mariadb");
    let my = types(&my);
    assert_eq!(my["c_int2"], Smallint);
    assert_eq!(my["c_numeric_12_2"], decimal(12, 2));
    assert_eq!(my["c_numeric"], decimal(65, 30));
    assert_eq!(my["c_int_array"], Json);
    assert_eq!(my["c_jsonb"], Json);
    match values {
        Err(MapError::Column { column, message }) => {
            assert_eq!(column, "c_numeric");
            assert!(message.contains("numeric(65,30)"), "{message}");
        }
        other => panic!("c_numeric fails on MariaDB: {other:?}"),
    }
    let (lite, values) = real_kinds("sqlite");
    let lite = types(&lite);
    assert_eq!(lite["c_numeric"], Numeric);
    assert_eq!(lite["c_int_array"], Json);
    assert!(values.is_ok(), "{values:?}");
}

/// The same real event through Confluent's `AvroConverter`: its schema (id 2) and the
/// datum after the 5-byte frame.
const REAL_KINDS_AVSC: &str =
    include_str!("../../../tests/e2e/cdc/fixtures/real/avro/schemas/2.avsc");
const REAL_KINDS_AVRO: &[u8] =
    include_bytes!("../../../tests/e2e/cdc/fixtures/real/avro/00_snapshot__kinds_read.value.bin");

#[test]
fn a_real_debezium_avro_event_derives_the_types_of_its_json_twin() {
    use ColumnType::*;
    let schema = crate::format::avro::AvroSchema::parse(REAL_KINDS_AVSC, &[]).expect("parses");
    let value = schema.decode(&REAL_KINDS_AVRO[5..]).expect("decodes");
    let d = deriver(
        "{url: 'postgres://h/db', table: t, mode: upsert, key: [id]}",
        Envelope::Debezium,
    )
    .for_database(
        ColumnNameRules::for_scheme("postgres"),
        TypeRules::for_scheme("postgres"),
    );
    let schemas = RecordSchemas {
        key: None,
        value: writer(schema.shape()),
    };
    let shape = d.shape(&schemas).expect("derives");
    let types: std::collections::BTreeMap<&str, ColumnType> = shape
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.column_type))
        .collect();
    // What Connect JSON derives (the test above), now from Avro: `connect.type: int16`,
    // and `connect.name` for Uuid, ZonedTimestamp and Json.
    assert_eq!(types["c_int2"], Smallint);
    assert_eq!(
        types["c_numeric_12_2"],
        Decimal {
            precision: 12,
            scale: 2
        }
    );
    assert_eq!(types["c_numeric"], Numeric);
    assert_eq!(types["c_uuid"], Uuid);
    assert_eq!(types["c_timestamptz"], Timestamptz);
    assert_eq!(types["c_jsonb"], Json);
    assert_eq!(types["c_int_array"], Array(ElementType::Int));
    let record = value_record(&value.to_string(), None);
    let RowOp::Write(values) = shape.mapper().map(&record).expect("maps") else {
        panic!("a write")
    };
    let at =
        |name: &str| values[shape.columns.iter().position(|c| c.name == name).unwrap()].clone();
    assert_eq!(
        at("c_jsonb"),
        SqlValue::Text(r#"{"a": [1, 2.5, null], "b": {"c": "d"}}"#.into())
    );
    assert_eq!(at("c_numeric_12_2"), SqlValue::Text("1234567890.12".into()));
}
