//! Property tests for what arrives from outside: arbitrary keys, values and headers through
//! the arrival checks, decoding, the JSON Schema and the column mapping, for every format
//! and every column type. Nothing may panic, and every record ends as row operations, a
//! counted skip or one failure with its cause: never lost, never twice.
//!
//! `PROPTEST_CASES` sets the cases per property (256 by default); a long run:
//! `PROPTEST_CASES=100000 cargo test -p sluice --release --test e2e fuzz_decode_map`.

use proptest::prelude::*;
use serde_json::Value;
use sluice::config::{self, Config};
use sluice::map::RowOp;
use sluice::prepare::Preparer;
use sluice::record::{Incoming, Record};
use sluice::sink::dead_letters::{headers_from_json, headers_to_json};
use sluice::validate::RecordSchema;

/// Every column type, in the order the suites that write one column of each use.
pub(crate) const TYPES: [&str; 12] = [
    "bigint",
    "int",
    "double",
    "numeric",
    "text",
    "bool",
    "timestamp",
    "timestamptz",
    "date",
    "json",
    "bytes",
    "uuid",
];

/// A connector with one column of each type read from `/c<type>`, the key read from
/// `/id` (as `key_type`) and one column from each piece of metadata.
fn connector(format: &str, key_type: &str) -> sluice::config::ConnectorConfig {
    let mut columns = format!("        id: {{ from: /id, type: {key_type} }}\n");
    if format == "json" {
        for t in TYPES {
            columns.push_str(&format!("        c_{t}: {{ from: /c{t}, type: {t} }}\n"));
        }
    }
    columns.push_str(
        "        m_topic: { from: $topic, type: text }\n        m_offset: { from: $offset, type: bigint }\n        m_ts: { from: $timestamp, type: timestamptz }\n        m_key: { from: $key, type: bytes }\n        m_value: { from: $value, type: bytes }\n",
    );
    if format != "json" {
        // Without JSON there is no /id to read: the key comes from metadata.
        columns = columns.replace("from: /id", "from: $offset");
    }
    let text = format!(
        "kafka: {{ brokers: localhost:9092 }}\nconnectors:\n  - name: fuzz\n    topics: [t]\n    format: {format}\n    max_record_bytes: 4KiB\n    sink:\n      url: sqlite://fuzz.db\n      table: fuzz\n      mode: upsert\n      key: [id]\n      columns:\n{columns}    errors: {{ policy: skip }}\n"
    );
    let config: Config = config::load_str(&text, &|_| None).expect("fuzz config is valid");
    config.connectors.into_iter().next().expect("connector")
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,40}".prop_map(Value::String),
        // Strings that look like the things columns parse.
        prop_oneof![
            Just("2024-02-30".to_string()),
            Just("2024-01-01T00:00:00Z".to_string()),
            Just("1e400".to_string()),
            Just("-0.0".to_string()),
            Just("00000000-0000-0000-0000-000000000000".to_string()),
            Just("9223372036854775808".to_string()),
            Just("true".to_string()),
            "[0-9a-f-]{0,40}",
            "[0-9.eE+-]{0,30}",
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A value that fits a column of type `t`.
fn fitting(t: &'static str) -> BoxedStrategy<Value> {
    match t {
        "bigint" => any::<i64>().prop_map(Value::from).boxed(),
        "int" => any::<i32>().prop_map(Value::from).boxed(),
        "double" => (-1e300f64..1e300).prop_map(Value::from).boxed(),
        "numeric" => "-?[0-9]{1,20}(\\.[0-9]{1,8})?"
            .prop_map(Value::String)
            .boxed(),
        "bool" => any::<bool>().prop_map(Value::Bool).boxed(),
        "timestamp" | "timestamptz" => (0i64..4_000_000_000_000).prop_map(Value::from).boxed(),
        "date" => (1000u32..9999, 1u32..13, 1u32..29)
            .prop_map(|(y, m, d)| Value::String(format!("{y:04}-{m:02}-{d:02}")))
            .boxed(),
        "uuid" => "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
            .prop_map(Value::String)
            .boxed(),
        "json" => json_value().boxed(),
        _ => ".{0,40}".prop_map(Value::String).boxed(),
    }
}

/// A column's value: mostly one that fits, sometimes anything at all.
fn column_value(t: &'static str) -> BoxedStrategy<Value> {
    prop_oneof![15 => fitting(t), 1 => json_value()].boxed()
}

/// A document with the connector's fields.
fn record_document() -> impl Strategy<Value = Value> {
    (
        column_value("bigint"),
        TYPES.iter().map(|t| column_value(t)).collect::<Vec<_>>(),
    )
        .prop_map(|(id, values)| {
            let mut map = serde_json::Map::new();
            map.insert("id".into(), id);
            for (t, v) in TYPES.iter().zip(values) {
                map.insert(format!("c{t}"), v);
            }
            Value::Object(map)
        })
}

/// Values: well-formed documents, arbitrary bytes, deep nesting, tombstones, oversized.
fn value_bytes() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        4 => record_document().prop_map(|d| Some(d.to_string().into_bytes())),
        2 => prop::collection::vec(any::<u8>(), 0..200).prop_map(Some),
        1 => (0usize..400).prop_map(|depth| Some(format!("{}1{}", "[".repeat(depth), "]".repeat(depth)).into_bytes())),
        1 => (0usize..400).prop_map(|depth| Some(format!("{}{{\"id\":1}}{}", "{\"a\":".repeat(depth), "}".repeat(depth)).into_bytes())),
        1 => Just(None),
        1 => (4000usize..6000).prop_map(|n| Some(vec![b'x'; n])),
    ]
}

fn record() -> impl Strategy<Value = Record> {
    (
        value_bytes(),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..40)),
        prop::option::of(any::<i64>()),
        prop::collection::vec(
            (
                ".{0,8}",
                prop::option::of(prop::collection::vec(any::<u8>(), 0..16)),
            ),
            0..3,
        ),
        0i64..1_000_000,
    )
        .prop_map(|(value, key, timestamp, headers, offset)| Record {
            topic: "t".into(),
            partition: 0,
            offset,
            timestamp,
            key,
            value,
            headers,
        })
}

/// Every input accounted for exactly once: rows (or deletes), a skip, or one failure.
fn check_accounting(preparer: &mut Preparer, records: Vec<Record>) -> Result<(), TestCaseError> {
    let n = records.len();
    let incoming: Vec<Incoming> = records.into_iter().map(Incoming::from).collect();
    let prepared = preparer.prepare(incoming).expect("no transforms to fail");
    let mut seen = vec![0u32; n];
    for &origin in &prepared.origins {
        seen[origin] += 1;
    }
    for failure in &prepared.failures {
        prop_assert!(!failure.message.is_empty());
        prop_assert_eq!(seen[failure.index], 0, "a failed input also wrote rows");
        seen[failure.index] += 1;
    }
    let without_outcome = seen.iter().filter(|&&s| s == 0).count() as u64;
    prop_assert_eq!(without_outcome, prepared.skipped, "inputs lost: {:?}", seen);
    prop_assert!(
        seen.iter().all(|&s| s <= 1),
        "an input counted twice: {:?}",
        seen
    );
    prop_assert_eq!(prepared.ops.len(), prepared.origins.len());
    for op in &prepared.ops {
        if let RowOp::Write(row) = op {
            prop_assert!(!row.is_empty());
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn json_records_are_mapped_or_fail_alone(
        records in prop::collection::vec(record(), 1..20),
        key_type in prop::sample::select(TYPES.to_vec()),
    ) {
        let connector = connector("json", key_type);
        let mut preparer = Preparer::new(&connector, None, None);
        check_accounting(&mut preparer, records)?;
    }

    #[test]
    fn string_and_bytes_records_are_mapped_or_fail_alone(
        records in prop::collection::vec(record(), 1..20),
        format in prop::sample::select(vec!["string", "bytes"]),
    ) {
        let connector = connector(format, "bigint");
        let mut preparer = Preparer::new(&connector, None, None);
        check_accounting(&mut preparer, records)?;
    }

    #[test]
    fn schema_checks_never_panic(
        records in prop::collection::vec(record(), 1..10),
        schema in json_value(),
    ) {
        // Most arbitrary documents are not schemas; those that are must check any value.
        if let Ok(schema) = RecordSchema::compile(&schema) {
            let connector = connector("json", "bigint");
            let mut preparer = Preparer::new(&connector, None, Some(std::sync::Arc::new(schema)));
            check_accounting(&mut preparer, records)?;
        }
    }

    #[test]
    fn dead_letter_headers_round_trip(
        headers in prop::collection::vec((".{0,12}", prop::option::of(prop::collection::vec(any::<u8>(), 0..32))), 0..6),
    ) {
        let json = headers_to_json(&headers);
        prop_assert_eq!(headers_from_json(&json).expect("round trip"), headers);
    }
}
