//! The mapping of records to rows, and every column type's conversions.

use super::*;
use chrono::DateTime;

#[test]
fn pointers_find_what_value_pointer_finds() {
    let document = json!({
        "a": {"b": [10, {"c~d/e": "x"}], "": 1, "0": "zero"},
        "list": [1, 2, 3],
    });
    for text in [
        "",
        "/a",
        "/a/b",
        "/a/b/0",
        "/a/b/1/c~0d~1e",
        "/a/b/01",
        "/a/b/+1",
        "/a/b/9",
        "/a/",
        "/a/0",
        "/list/2",
        "/list/-",
        "/nope",
        "a",
        "/a/b/0/deeper",
    ] {
        assert_eq!(
            JsonPointer::new(text).find(&document),
            document.pointer(text),
            "{text}"
        );
    }
}
use crate::config::{ColumnConfig, IndexedColumns, WriteMode};
use serde_json::json;

#[test]
fn values_nested_deeper_than_128_levels_fail_to_decode() {
    let nested = |depth: usize| {
        Record::from_value(
            "t",
            0,
            0,
            format!("{}1{}", "[".repeat(depth), "]".repeat(depth)),
        )
    };
    assert!(RowMapper::parse(&nested(100)).is_ok());
    let error = RowMapper::parse(&nested(200)).unwrap_err();
    assert!(
        matches!(error, MapError::Decode(ref m) if m.contains("recursion limit")),
        "{error}"
    );
}

fn sink(columns: &[(&str, &str, ColumnType)], key: &[&str]) -> SinkConfig {
    SinkConfig {
        url: "sqlite://x".into(),
        table: "t".into(),
        mode: WriteMode::Upsert,
        key: key.iter().map(|k| k.to_string()).collect(),
        columns: IndexedColumns(
            columns
                .iter()
                .map(|(n, f, t)| {
                    (
                        n.to_string(),
                        ColumnConfig {
                            from: f.to_string(),
                            column_type: *t,
                        },
                    )
                })
                .collect(),
        ),
        create_table: true,
    }
}

fn record(key: Option<&str>, value: Option<&str>) -> Record {
    Record {
        topic: "words".into(),
        partition: 3,
        offset: 42,
        timestamp: Some(1_700_000_000_123),
        key: key.map(|k| k.as_bytes().to_vec()),
        value: value.map(|v| v.as_bytes().to_vec()),
        headers: vec![],
    }
}

#[test]
fn maps_pointers_and_metadata() {
    let mapper = RowMapper::new(
        &sink(
            &[
                ("uid", "/uid", ColumnType::Bigint),
                ("word", "/w/0", ColumnType::Text),
                ("at", "$timestamp", ColumnType::Timestamptz),
                ("off", "$offset", ColumnType::Bigint),
                ("topic", "$topic", ColumnType::Text),
                ("missing", "/nope", ColumnType::Int),
            ],
            &["uid"],
        ),
        Format::Json,
    );
    let op = mapper
        .map(&record(None, Some(r#"{"uid": 7, "w": ["hi"]}"#)))
        .unwrap();
    let RowOp::Write(row) = op else {
        panic!("{op:?}")
    };
    assert_eq!(row[0], SqlValue::Int(7));
    assert_eq!(row[1], SqlValue::Text("hi".into()));
    assert_eq!(
        row[2],
        SqlValue::Timestamp(
            DateTime::from_timestamp_millis(1_700_000_000_123)
                .unwrap()
                .naive_utc()
        )
    );
    assert_eq!(row[3], SqlValue::Int(42));
    assert_eq!(row[4], SqlValue::Text("words".into()));
    assert_eq!(row[5], SqlValue::Null);
}

#[test]
fn now_is_the_time_of_mapping() {
    let mapper = RowMapper::new(
        &sink(
            &[
                ("uid", "/uid", ColumnType::Bigint),
                ("written_at", "$now", ColumnType::Timestamptz),
                ("written_ms", "$now", ColumnType::Bigint),
            ],
            &["uid"],
        ),
        Format::Json,
    );
    let before = chrono::Utc::now().timestamp_millis();
    let op = mapper.map(&record(None, Some(r#"{"uid": 1}"#))).unwrap();
    let after = chrono::Utc::now().timestamp_millis();
    let RowOp::Write(row) = op else {
        panic!("{op:?}")
    };
    let SqlValue::Int(ms) = row[2] else {
        panic!("{row:?}")
    };
    assert!(
        (before..=after).contains(&ms),
        "{before} <= {ms} <= {after}"
    );
    let SqlValue::Timestamp(at) = row[1] else {
        panic!("{row:?}")
    };
    let at = at.and_utc().timestamp_millis();
    assert!(
        (before..=after).contains(&at),
        "{before} <= {at} <= {after}"
    );
}

#[test]
fn bad_values_are_per_record_errors() {
    let mapper = RowMapper::new(
        &sink(&[("uid", "/uid", ColumnType::Int)], &["uid"]),
        Format::Json,
    );
    let err = mapper
        .map(&record(None, Some(r#"{"uid": "x"}"#)))
        .unwrap_err();
    assert_eq!(err.to_string(), "column uid: \"x\" does not fit type int");
    let err = mapper
        .map(&record(None, Some(r#"{"uid": 4000000000}"#)))
        .unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    let err = mapper
        .map(&record(None, Some(r#"{"other": 1}"#)))
        .unwrap_err();
    assert!(err.to_string().contains("cannot be null"), "{err}");
    assert!(matches!(
        mapper.map(&record(None, Some("{nope"))),
        Err(MapError::Decode(_))
    ));
}

#[test]
fn tombstones_delete_by_key() {
    let mapper = RowMapper::new(
        &sink(
            &[
                ("uid", "/uid", ColumnType::Bigint),
                ("w", "/w", ColumnType::Text),
            ],
            &["uid"],
        ),
        Format::Json,
    );
    assert_eq!(
        mapper.map(&record(Some(r#"{"uid": 9}"#), None)).unwrap(),
        RowOp::Delete(vec![SqlValue::Int(9)])
    );
    assert_eq!(
        mapper.map(&record(Some("9"), None)).unwrap(),
        RowOp::Delete(vec![SqlValue::Int(9)])
    );
    assert!(mapper.map(&record(None, None)).is_err());
    let keyless = RowMapper::new(&sink(&[("w", "/w", ColumnType::Text)], &[]), Format::Json);
    assert!(matches!(
        keyless.map(&record(None, None)).unwrap(),
        RowOp::Skip(_)
    ));
}

#[test]
fn conversions() {
    assert_eq!(
        convert(&json!("12.50"), ColumnType::Numeric),
        Ok(SqlValue::Text("12.5".into()))
    );
    assert!(convert(&json!("12,50"), ColumnType::Numeric).is_err());
    for (a, b) in [
        ("1", "1.0"),
        ("+01.50", "1.5"),
        ("-0", "0.000"),
        ("0.10", ".1"),
    ] {
        assert_eq!(
            convert(&json!(a), ColumnType::Numeric),
            convert(&json!(b), ColumnType::Numeric),
            "{a} vs {b}"
        );
    }
    assert_eq!(
        convert(&json!(-0.0), ColumnType::Double),
        Ok(SqlValue::Double(0.0))
    );
    assert_eq!(
        convert(&json!("-12.500"), ColumnType::Numeric),
        Ok(SqlValue::Text("-12.5".into()))
    );
    assert_eq!(
        convert(&json!({"a": 1}), ColumnType::Json),
        Ok(SqlValue::Text("{\"a\":1}".into()))
    );
    assert!(convert(&json!("2024-02-30"), ColumnType::Date).is_err());
    assert!(
        convert(
            &json!("123e4567-e89b-12d3-a456-426614174000"),
            ColumnType::Uuid
        )
        .is_ok()
    );
    assert!(
        convert(
            &json!("2024-01-02T03:04:05.123+02:00"),
            ColumnType::Timestamptz
        )
        .is_ok()
    );
    assert_eq!(
        convert(&json!(1.0), ColumnType::Bigint),
        Ok(SqlValue::Int(1))
    );
}
