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
use crate::config::{ColumnConfig, IndexedColumns, OnTruncate, WriteMode};
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
        table: Some(crate::config::TableTemplate::try_from("t".to_string()).unwrap()),
        table_from: None,
        schema: None,
        mode: WriteMode::Upsert,
        key: crate::config::SinkKey::Columns(key.iter().map(|k| k.to_string()).collect()),
        derive: Default::default(),
        evolve: Default::default(),
        columns: Some(IndexedColumns(
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
        )),
        create_table: true,
        version: None,
        on_truncate: Default::default(),
        unavailable_value: None,
        synchronous_commit: Default::default(),
        transactions: Default::default(),
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
        Envelope::None,
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
        Envelope::None,
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
        Envelope::None,
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
    assert!(
        err.to_string()
            .contains("/uid matched nothing in the record; the nearest field there is /other"),
        "{err}"
    );
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
        Envelope::None,
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
    let keyless = RowMapper::new(
        &sink(&[("w", "/w", ColumnType::Text)], &[]),
        Format::Json,
        Envelope::None,
    );
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

fn cdc_mapper(envelope: Envelope, version: Option<&str>, on_truncate: OnTruncate) -> RowMapper {
    let mut sink = sink(
        &[
            ("id", "/id", ColumnType::Bigint),
            ("name", "/name", ColumnType::Text),
            ("src", "$offset", ColumnType::Bigint),
        ],
        &["id"],
    );
    sink.version = version.map(|from| crate::config::VersionConfig {
        from: from.into(),
        ..Default::default()
    });
    sink.on_truncate = on_truncate;
    RowMapper::new(&sink, Format::Json, envelope)
}

fn v(parts: &[u64]) -> SqlValue {
    SqlValue::Text(encode_version(parts))
}

#[test]
fn debezium_events_map_their_rows_with_the_source_position() {
    let mapper = cdc_mapper(Envelope::Debezium, None, OnTruncate::Fail);
    let event = r#"{"op": "u", "before": {"id": 1, "name": "a"}, "after": {"id": 1, "name": "b"},
                   "source": {"connector": "postgresql", "lsn": 99}}"#;
    assert_eq!(
        mapper.map(&record(None, Some(event))).unwrap(),
        RowOp::Write(vec![
            SqlValue::Int(1),
            SqlValue::Text("b".into()),
            SqlValue::Int(42),
            v(&[1, 0, 99, 42])
        ])
    );
    // A delete's key comes from before; without it, from the record's key (a Connect
    // envelope's payload too).
    let delete = r#"{"op": "d", "before": {"id": 7}, "after": null, "source": {"connector": "postgresql", "lsn": 100}}"#;
    assert_eq!(
        mapper.map(&record(None, Some(delete))).unwrap(),
        RowOp::Delete(vec![SqlValue::Int(7), v(&[1, 0, 100, 42])])
    );
    let bare = r#"{"op": "d", "before": null, "after": null, "source": {"connector": "postgresql", "lsn": 100}}"#;
    let key = r#"{"schema": {"type": "struct"}, "payload": {"id": 8}}"#;
    assert_eq!(
        mapper.map(&record(Some(key), Some(bare))).unwrap(),
        RowOp::Delete(vec![SqlValue::Int(8), v(&[1, 0, 100, 42])])
    );
    assert!(matches!(
        mapper.map(&record(None, Some(bare))),
        Err(MapError::Column { .. })
    ));
    // The tombstone that follows a delete.
    assert!(matches!(
        mapper.map(&record(Some(key), None)).unwrap(),
        RowOp::Skip(_)
    ));
    // A Connect wrapper on a `format: json` value is looked through, for the version too.
    let wrapped = format!(r#"{{"schema": {{}}, "payload": {event}}}"#);
    assert!(matches!(
        mapper.map(&record(None, Some(&wrapped))).unwrap(),
        RowOp::Write(row) if row[3] == v(&[1, 0, 99, 42])
    ));
}

#[test]
fn change_events_that_cannot_be_written_fail_with_their_class() {
    let mapper = cdc_mapper(Envelope::Debezium, None, OnTruncate::Fail);
    assert!(matches!(
        mapper.map(&record(None, Some(r#"{"id": 1}"#))),
        Err(MapError::NotAChangeEvent(_))
    ));
    let no_position = r#"{"op": "c", "after": {"id": 1}, "source": {"connector": "postgresql"}}"#;
    assert!(matches!(
        mapper.map(&record(None, Some(no_position))),
        Err(MapError::MissingVersion(m)) if m.contains("lsn")
    ));
    let truncate = r#"{"op": "t", "source": {"connector": "postgresql", "lsn": 5}}"#;
    assert_eq!(
        mapper.map(&record(None, Some(truncate))),
        Err(MapError::Truncate)
    );
    let skip = cdc_mapper(Envelope::Debezium, None, OnTruncate::Skip);
    assert!(matches!(
        skip.map(&record(None, Some(truncate))).unwrap(),
        RowOp::Skip(_)
    ));
    let apply = cdc_mapper(Envelope::Debezium, None, OnTruncate::Truncate);
    assert_eq!(
        apply.map(&record(None, Some(truncate))).unwrap(),
        RowOp::Truncate(Some(v(&[1, 0, 5, 42])))
    );
}

#[test]
fn versions_without_an_envelope() {
    let mapper = cdc_mapper(Envelope::None, Some("$offset"), OnTruncate::Fail);
    assert_eq!(
        mapper
            .map(&record(None, Some(r#"{"id": 3, "name": "x"}"#)))
            .unwrap(),
        RowOp::Write(vec![
            SqlValue::Int(3),
            SqlValue::Text("x".into()),
            SqlValue::Int(42),
            v(&[42])
        ])
    );
    // A tombstone deletes by key, with its offset as the version.
    assert_eq!(
        mapper.map(&record(Some(r#"{"id": 3}"#), None)).unwrap(),
        RowOp::Delete(vec![SqlValue::Int(3), v(&[42])])
    );
    // A pointer version cannot be read from a tombstone.
    let pointer = cdc_mapper(Envelope::None, Some("/seq"), OnTruncate::Fail);
    assert!(matches!(
        pointer.map(&record(Some(r#"{"id": 3}"#), None)),
        Err(MapError::MissingVersion(_))
    ));
}

#[test]
fn opencdc_deletes_by_its_own_key() {
    let mapper = cdc_mapper(
        Envelope::Opencdc,
        Some("/metadata/opencdc.readAt"),
        OnTruncate::Fail,
    );
    let delete = r#"{"operation": "delete", "key": {"id": 5}, "metadata": {"opencdc.readAt": "1700"},
                    "payload": {"before": null, "after": null}}"#;
    assert_eq!(
        mapper.map(&record(None, Some(delete))).unwrap(),
        RowOp::Delete(vec![SqlValue::Int(5), v(&[1700, 42])])
    );
    assert!(matches!(
        mapper.map(&record(None, None)),
        Err(MapError::NotAChangeEvent(_))
    ));
}

/// The borrowed reading of a JSON Debezium event maps every event as reading the whole
/// document does (the whole document is read when the value was parsed before: a schema
/// check, a decoding format).
#[test]
fn borrowed_and_whole_debezium_readings_agree() {
    let events = [
        r#"{"op": "c", "before": null, "after": {"id": 1, "name": "a"}, "source": {"connector": "postgresql", "lsn": 9, "txId": 3}, "transaction": null, "ts_ms": 5}"#,
        r#"{"op": "u", "before": {"id": 1, "name": "a"}, "after": {"id": 1, "name": "b"}, "source": {"connector": "mysql", "file": "mysql-bin.000004", "pos": 77, "row": 2}}"#,
        r#"{"op": "d", "before": {"id": 2}, "after": null, "source": {"connector": "sqlserver", "ts_ms": 1700}}"#,
        r#"{"op": "r", "after": {"id": 3, "name": null}, "source": {"connector": "oracle"}, "ts_ms": 42}"#,
        r#"{"op": "c", "after": {"id": 4}, "source": {"connector": "postgresql"}}"#,
        r#"{"op": "c", "after": {"id": "x"}, "source": {"connector": "postgresql", "lsn": 1}}"#,
        r#"{"op": "c", "after": {"id": 5}, "source": {"connector": "mysql", "file": "binlog", "pos": 1}}"#,
        r#"{"op": "c", "op": "d", "after": {"id": 6}, "source": {"connector": "postgresql", "lsn": 1}}"#,
        r#"{"op": "d", "before": null, "source": {"connector": "postgresql", "lsn": 1}}"#,
        r#"{"op": "t", "source": {"connector": "postgresql", "lsn": 1}}"#,
        r#"{"schema": {}, "payload": {"op": "c", "after": {"id": 7}, "source": {"connector": "postgresql", "lsn": 2}}}"#,
        r#"{"op": "c", "after": [1], "source": {"connector": "postgresql", "lsn": 1}}"#,
        r#"{"after": {"id": 8}}"#,
        r#"[1, 2]"#,
        r#"["c", null, {"id": 10}, {"connector": "postgresql", "lsn": 1}]"#,
        r#" {"op": "c", "after": {"id": 11}, "source": {"connector": "postgresql", "lsn": 1}}"#,
    ];
    for truncate in [OnTruncate::Fail, OnTruncate::Truncate] {
        for version in [None, Some("$offset"), Some("$timestamp")] {
            let mapper = cdc_mapper(Envelope::Debezium, version, truncate);
            for event in events {
                let r = record(Some(r#"{"id": 9}"#), Some(event));
                let whole: Value = serde_json::from_str(event).unwrap();
                assert_eq!(
                    mapper.map(&r),
                    mapper.map_parsed(&r, Some(whole)),
                    "{event} with {version:?}"
                );
            }
        }
    }
}

/// The borrowed reading hands back the event's own `source` block (a table template reads
/// its names there); an event read whole hands back none, and the template reads the value.
#[test]
fn the_borrowed_reading_hands_back_the_source_block() {
    let mapper = cdc_mapper(Envelope::Debezium, Some("$offset"), OnTruncate::Fail);
    let event = r#"{"op": "c", "after": {"id": 1}, "source": {"schema": "public", "table": "t", "lsn": 9}}"#;
    let r = record(Some(r#"{"id": 9}"#), Some(event));
    let (mapped, block) = mapper.map_parsed_with_source(&r, None);
    assert_eq!(mapped, mapper.map(&r));
    let block: Value = serde_json::from_str(block.expect("the source block").get()).unwrap();
    assert_eq!(
        block,
        serde_json::json!({"schema": "public", "table": "t", "lsn": 9})
    );
    let whole: Value = serde_json::from_str(event).unwrap();
    assert!(mapper.map_parsed_with_source(&r, Some(whole)).1.is_none());
    let wrapped = format!(r#"{{"schema": {{}}, "payload": {event}}}"#);
    let r = record(Some(r#"{"id": 9}"#), Some(&wrapped));
    assert!(mapper.map_parsed_with_source(&r, None).1.is_none());
}

#[test]
fn a_version_in_the_row_after_is_read_before_for_a_delete() {
    let mapper = cdc_mapper(Envelope::Debezium, Some("/after/seq"), OnTruncate::Fail);
    let delete = r#"{"op": "d", "before": {"id": 3, "seq": 70}, "after": null}"#;
    assert_eq!(
        mapper.map(&record(None, Some(delete))).unwrap(),
        RowOp::Delete(vec![SqlValue::Int(3), v(&[70, 42])])
    );
    let update = r#"{"op": "u", "before": {"id": 3, "seq": 60}, "after": {"id": 3, "seq": 65}}"#;
    assert!(matches!(
        mapper.map(&record(None, Some(update))).unwrap(),
        RowOp::Write(row) if row[3] == v(&[65, 42])
    ));
    let opencdc = cdc_mapper(
        Envelope::Opencdc,
        Some("/payload/after/seq"),
        OnTruncate::Fail,
    );
    let delete = r#"{"operation": "delete", "key": {"id": 4}, "payload": {"before": {"id": 4, "seq": 9}, "after": null}}"#;
    assert_eq!(
        opencdc.map(&record(None, Some(delete))).unwrap(),
        RowOp::Delete(vec![SqlValue::Int(4), v(&[9, 42])])
    );
}

#[test]
fn debeziums_placeholder_is_left_out_only_where_it_stands_for_a_value() {
    let mapper = cdc_mapper(Envelope::Debezium, None, OnTruncate::Fail);
    let event = |after: &str| {
        format!(
            r#"{{"op": "u", "before": null, "after": {after}, "source": {{"connector": "postgresql", "lsn": 7}}}}"#
        )
    };
    let name = |after: &str| match mapper.map(&record(None, Some(&event(after)))) {
        Ok(RowOp::Write(row)) => row[1].clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        name(r#"{"id": 1, "name": "__debezium_unavailable_value"}"#),
        SqlValue::Unavailable
    );
    assert_eq!(
        name(r#"{"id": 1, "name": ["__debezium_unavailable_value"]}"#),
        SqlValue::Unavailable
    );
    // The base64 of its bytes is a placeholder only in a bytes column.
    assert_eq!(
        name(r#"{"id": 1, "name": "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="}"#),
        SqlValue::Text("X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==".into())
    );
    // In a key column it fails the record.
    let key = mapper.map(&record(
        None,
        Some(&event(
            r#"{"id": "__debezium_unavailable_value", "name": "x"}"#,
        )),
    ));
    assert!(
        matches!(&key, Err(MapError::Column { column, message }) if column == "id" && message.contains("placeholder")),
        "{key:?}"
    );
    // Another placeholder, as Debezium may be told to write it.
    let mut sink = sink(
        &[
            ("id", "/id", ColumnType::Bigint),
            ("name", "/name", ColumnType::Text),
        ],
        &["id"],
    );
    sink.unavailable_value = Some("<toast>".into());
    let custom = RowMapper::new(&sink, Format::Json, Envelope::Debezium);
    let row = custom
        .map(&record(
            None,
            Some(&event(r#"{"id": 1, "name": "<toast>"}"#)),
        ))
        .unwrap();
    assert!(
        matches!(row, RowOp::Write(ref r) if r[1] == SqlValue::Unavailable),
        "{row:?}"
    );
    // Without an envelope, the text is a value.
    let plain = RowMapper::new(&sink, Format::Json, Envelope::None);
    let row = plain
        .map(&record(None, Some(r#"{"id": 1, "name": "<toast>"}"#)))
        .unwrap();
    assert!(
        matches!(row, RowOp::Write(ref r) if r[1] == SqlValue::Text("<toast>".into())),
        "{row:?}"
    );
}
