//! Avro through the registry, as Confluent's `AvroSerializer` writes it: every type and
//! logical type into the column types that take it, nested records, arrays and maps,
//! unions by branch, an Avro key; a schema that gains a field mid-stream (a new id); the
//! header variant (the GUID in `__value_schema_id`); bare datums with a schema file.

use serde_json::{Value, json};

use super::{FormatRun, row};
use crate::harness::Backend;

/// Every Avro type and logical type.
fn order_schema() -> Value {
    json!({
        "type": "record", "name": "Order", "namespace": "com.acme",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "flag", "type": "boolean"},
            {"name": "small", "type": "int"},
            {"name": "ratio", "type": "float"},
            {"name": "score", "type": "double"},
            {"name": "name", "type": "string"},
            {"name": "blob", "type": "bytes"},
            {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
            {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
            {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
            {"name": "big", "type": {"type": "fixed", "name": "Big", "size": 16, "logicalType": "decimal", "precision": 38, "scale": 10}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {"name": "at_ms", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "at_us", "type": {"type": "long", "logicalType": "time-micros"}},
            {"name": "ts_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "ts_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "ts_ns", "type": {"type": "long", "logicalType": "timestamp-nanos"}},
            {"name": "local_us", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
            {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "note", "type": ["null", "string"], "default": null},
            {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
                {"name": "city", "type": "string"},
                {"name": "zip", "type": ["null", "int"], "default": null}
            ]}},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "attrs", "type": {"type": "map", "values": "long"}},
            {"name": "payment", "type": ["null",
                {"type": "record", "name": "Card", "fields": [{"name": "last4", "type": "string"}]},
                {"type": "record", "name": "Iban", "fields": [{"name": "iban", "type": "string"}]}
            ], "default": null}
        ]
    })
}

const KEY_SCHEMA: &str = r#"{"type": "record", "name": "OrderKey", "namespace": "com.acme", "fields": [{"name": "id", "type": "long"}]}"#;

/// Columns for every field, with the column types that take each decoded form.
const COLUMNS: &str = "        id: { from: /id, type: bigint }
        flag: { from: /flag, type: bool }
        small: { from: /small, type: int }
        ratio: { from: /ratio, type: double }
        score: { from: /score, type: double }
        name: { from: /name, type: text }
        blob: { from: /blob, type: bytes }
        blob_text: { from: /blob, type: text }
        hash: { from: /hash, type: bytes }
        status: { from: /status, type: text }
        amount: { from: /amount, type: numeric }
        big: { from: /big, type: text }
        day: { from: /day, type: date }
        at_ms: { from: /at_ms, type: time }
        at_us: { from: /at_us, type: time }
        ts_ms: { from: /ts_ms, type: timestamptz }
        ts_us: { from: /ts_us, type: timestamptz }
        ts_ns: { from: /ts_ns, type: timestamptz }
        ts_ns_text: { from: /ts_ns, type: text }
        local_us: { from: /local_us, type: timestamp }
        uid: { from: /uid, type: uuid }
        note: { from: /note, type: text }
        city: { from: /address/city, type: text }
        zip: { from: /address/zip, type: int }
        tags: { from: /tags, type: json }
        attrs: { from: /attrs, type: json }
        card: { from: /payment/com.acme.Card/last4, type: text }
        iban: { from: /payment/com.acme.Iban/iban, type: text }
        record_key: { from: $key, type: json }";

const READ: &[(&str, &str)] = &[
    ("id", "bigint"),
    ("flag", "bool"),
    ("small", "int"),
    ("ratio", "double"),
    ("score", "double"),
    ("name", "text"),
    ("blob", "bytes"),
    ("blob_text", "text"),
    ("hash", "bytes"),
    ("status", "text"),
    ("amount", "numeric"),
    ("big", "text"),
    ("day", "date"),
    ("at_ms", "time"),
    ("at_us", "time"),
    ("ts_ms", "timestamptz"),
    ("ts_us", "timestamptz"),
    ("ts_ns", "timestamptz"),
    ("ts_ns_text", "text"),
    ("local_us", "timestamp"),
    ("uid", "uuid"),
    ("note", "text"),
    ("city", "text"),
    ("zip", "int"),
    ("tags", "json"),
    ("attrs", "json"),
    ("card", "text"),
    ("iban", "text"),
    ("record_key", "json"),
];

fn order(id: i64, full: bool) -> Value {
    json!({
        "id": id,
        "flag": full,
        "small": if full { -2147483648i64 } else { 7 },
        "ratio": 0.5,
        "score": -2.25,
        "name": if full { "Zoë \"quoted\" \\ tab\t" } else { "" },
        "blob": {"$bytes": "AP8KXA=="},
        "hash": {"$bytes": "3q2+7w=="},
        "status": if full { "PAID" } else { "NEW" },
        "amount": {"$decimal": if full { "-1234567890.05" } else { "0.10" }},
        "big": {"$decimal": "1234567890123456789012345678.1234567890"},
        "day": {"$date": if full { "1969-07-20" } else { "2024-02-29" }},
        "at_ms": {"$time": "12:34:56.789000"},
        "at_us": {"$time": "23:59:59.999999"},
        "ts_ms": {"$datetime": "2024-05-01T12:00:00.123+00:00"},
        "ts_us": {"$datetime": "1960-01-01T00:00:00.000001+00:00"},
        "ts_ns": 1_714_564_800_123_456_789i64,
        "local_us": {"$datetime": "2024-05-01T08:30:00.654321"},
        "uid": {"$uuid": "123e4567-e89b-12d3-a456-426614174000"},
        "note": if full { json!("a note") } else { Value::Null },
        "address": {"city": "Zürich", "zip": if full { json!(8001) } else { Value::Null }},
        "tags": if full { json!(["a", "b"]) } else { json!([]) },
        "attrs": if full { json!({"x": 1, "y": -9007199254740993i64}) } else { json!({}) },
        "payment": if full {
            json!({"$branch": "com.acme.Card", "value": {"last4": "4242"}})
        } else {
            json!({"$branch": "com.acme.Iban", "value": {"iban": "CH93"}})
        },
    })
}

fn expected(id: i64, full: bool) -> Vec<Option<String>> {
    let id_text = id.to_string();
    let key = format!("{{\"id\":{id}}}");
    row(&[
        Some(&id_text),
        Some(if full { "true" } else { "false" }),
        Some(if full { "-2147483648" } else { "7" }),
        Some("0.5"),
        Some("-2.25"),
        Some(if full { "Zoë \"quoted\" \\ tab\t" } else { "" }),
        Some("00ff0a5c"),
        Some("AP8KXA=="),
        Some("deadbeef"),
        Some(if full { "PAID" } else { "NEW" }),
        Some(if full { "-1234567890.05" } else { "0.1" }),
        Some("1234567890123456789012345678.1234567890"),
        Some(if full { "1969-07-20" } else { "2024-02-29" }),
        Some("12:34:56.789"),
        Some("23:59:59.999999"),
        Some("2024-05-01 12:00:00.123"),
        Some("1960-01-01 00:00:00.000001"),
        // Nanoseconds: the column keeps six digits (cut, not rounded); text keeps nine.
        Some("2024-05-01 12:00:00.123456"),
        Some("2024-05-01T12:00:00.123456789Z"),
        Some("2024-05-01 08:30:00.654321"),
        Some("123e4567-e89b-12d3-a456-426614174000"),
        if full { Some("a note") } else { None },
        Some("Zürich"),
        if full { Some("8001") } else { None },
        Some(if full { "[\"a\",\"b\"]" } else { "[]" }),
        Some(if full {
            "{\"x\":1,\"y\":-9007199254740993}"
        } else {
            "{}"
        }),
        if full { Some("4242") } else { None },
        if full { None } else { Some("CH93") },
        Some(&key),
    ])
}

/// Every type into the columns that take it, with an Avro key; the schema then gains a
/// field (a second version, a new id) and the records after it land too.
async fn every_type_and_a_new_version(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let config = run.config("avro\n    key_format: avro", COLUMNS, "[id]", "");
    let spec = json!({
        "serializer": "avro",
        "schema": order_schema().to_string(),
        "key_serializer": "avro",
        "key_schema": KEY_SCHEMA,
    });
    run.produce(
        spec.clone(),
        vec![
            json!({"key": {"id": 1}, "value": order(1, true)}),
            json!({"key": {"id": 2}, "value": order(2, false)}),
        ],
    )
    .await;
    let sluice = run.start(&config);
    run.wait_for(2, 0, 120, &sluice).await;
    assert_eq!(
        run.rows(READ).await,
        vec![expected(1, true), expected(2, false)]
    );

    // Version 2: one more field, with a default. Its records carry the new id.
    let mut v2 = order_schema();
    v2["fields"]
        .as_array_mut()
        .expect("fields")
        .push(json!({"name": "channel", "type": "string", "default": "web"}));
    let mut three = order(3, true);
    three["channel"] = json!("app");
    run.produce(
        json!({
            "serializer": "avro",
            "schema": v2.to_string(),
            "key_serializer": "avro",
            "key_schema": KEY_SCHEMA,
        }),
        vec![json!({"key": {"id": 3}, "value": three})],
    )
    .await;
    run.wait_for(3, 0, 60, &sluice).await;
    assert_eq!(run.rows(READ).await[2], expected(3, true));
    // The value's first version is id 1, the key's 2, the value's second 3: sluice
    // fetched the new id when it met it.
    assert!(
        run.registry
            .log()
            .iter()
            .any(|line| line.starts_with("GET /schemas/ids/3")),
        "sluice asked for the new version's id: {:?}",
        run.registry.log()
    );
    sluice.terminate();
}
for_each_database!(every_type_and_a_new_version);

/// The header variant: the serializer puts the schema's GUID in `__value_schema_id` (magic
/// byte 1) and the value is the bare datum.
async fn the_guid_in_a_header(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let config = run.config(
        "avro",
        "        id: { from: /id, type: bigint }\n        name: { from: /name, type: text }",
        "[id]",
        "",
    );
    let schema = r#"{"type": "record", "name": "Word", "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}"#;
    run.produce(
        json!({"serializer": "avro", "schema": schema, "header_mode": true}),
        (0..5)
            .map(|i| json!({"value": {"id": i, "name": format!("w{i}")}}))
            .collect(),
    )
    .await;
    let sluice = run.start(&config);
    run.wait_for(5, 0, 120, &sluice).await;
    let rows = run.rows(&[("id", "bigint"), ("name", "text")]).await;
    assert_eq!(rows[4], row(&[Some("4"), Some("w4")]));
    assert!(
        run.registry
            .log()
            .iter()
            .any(|line| line.contains("/schemas/guids/")),
        "sluice asked for the schema by its GUID: {:?}",
        run.registry.log()
    );
    sluice.terminate();
}
for_each_database!(the_guid_in_a_header: postgres = Postgres);

/// `format: { avro: { schema: FILE } }`: bare datums (no frame), the schema in a file.
async fn bare_datums_with_a_schema_file(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let schema_path = run.dir.path().join("word.avsc");
    std::fs::write(
        &schema_path,
        r#"{"type": "record", "name": "Word", "fields": [{"name": "id", "type": "long"}, {"name": "day", "type": {"type": "int", "logicalType": "date"}}]}"#,
    )
    .expect("write the schema");
    let config = run.config(
        "{ avro: { schema: word.avsc } }",
        "        id: { from: /id, type: bigint }\n        day: { from: /day, type: date }",
        "[id]",
        "",
    );
    // Bare Avro: zigzag varints. id 3 is 0x06; day 19723 (2024-01-01) zigzags to 39446.
    let datum = |id: u8| {
        let mut bytes = vec![id * 2];
        let mut day: u64 = 19_723 * 2;
        while day >= 0x80 {
            bytes.push((day as u8 & 0x7f) | 0x80);
            day >>= 7;
        }
        bytes.push(day as u8);
        bytes
    };
    let hex = |bytes: Vec<u8>| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    run.produce(
        json!({"serializer": "raw"}),
        vec![
            json!({"raw_value_hex": hex(datum(3))}),
            // Truncated: one dead letter, decode_failed.
            json!({"raw_value_hex": "06"}),
        ],
    )
    .await;
    let sluice = run.start(&config);
    run.wait_for(1, 1, 120, &sluice).await;
    assert_eq!(
        run.rows(&[("id", "bigint"), ("day", "date")]).await,
        vec![row(&[Some("3"), Some("2024-01-01")])]
    );
    let letters = run.letters().await;
    assert_eq!(letters[0].2, "decode_failed", "{letters:?}");
    sluice.terminate();
}
for_each_database!(bare_datums_with_a_schema_file: sqlite = Sqlite);

/// Everything after arrival reads the decoded value: a transform (the `filter` plugin)
/// gets JSON text and drops by a field, the connector's JSON Schema checks the decoded
/// document, and `delivery.dedup` reads the producer id by pointer into it.
async fn transforms_schema_and_dedup_read_the_decoded_value(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let schema_path = run.dir.path().join("word.json");
    std::fs::write(
        &schema_path,
        r#"{"type": "object", "properties": {"word": {"type": "string", "minLength": 2}}, "required": ["word", "msg"]}"#,
    )
    .expect("write the JSON Schema");
    let extra = format!(
        "    schema: {}\n    delivery: {{ dedup: {{ id: /msg }} }}\n    transforms:\n      - name: keep\n        plugin: {}\n        config: {{ field: /lang, op: ne, value: xx }}\n",
        schema_path.display(),
        sluice_transform::example_plugin_path("filter").display()
    );
    let config = run.config(
        "avro",
        "        msg: { from: /msg, type: text }\n        word: { from: /word, type: text }",
        "[]",
        &extra,
    );
    let schema = r#"{"type": "record", "name": "Said", "fields": [{"name": "msg", "type": {"type": "string", "logicalType": "uuid"}}, {"name": "word", "type": "string"}, {"name": "lang", "type": "string"}]}"#;
    let said = |msg: &str, word: &str, lang: &str| json!({"value": {"msg": msg, "word": word, "lang": lang}});
    run.produce(
        json!({"serializer": "avro", "schema": schema}),
        vec![
            said("00000000-0000-4000-8000-000000000001", "hello", "en"),
            // The same message again (a producer's retry): skipped by its decoded id.
            said("00000000-0000-4000-8000-000000000001", "hello", "en"),
            // Dropped by the transform, which read the decoded JSON.
            said("00000000-0000-4000-8000-000000000002", "dropped", "xx"),
            // Refused by the JSON Schema (a one-letter word): a dead letter.
            said("00000000-0000-4000-8000-000000000003", "a", "en"),
            said("00000000-0000-4000-8000-000000000004", "world", "de"),
        ],
    )
    .await;
    let sluice = run.start(&config);
    run.wait_for(2, 1, 120, &sluice).await;
    assert_eq!(
        run.rows(&[("msg", "text"), ("word", "text")]).await,
        vec![
            row(&[Some("00000000-0000-4000-8000-000000000001"), Some("hello")]),
            row(&[Some("00000000-0000-4000-8000-000000000004"), Some("world")]),
        ]
    );
    let letters = run.letters().await;
    assert_eq!(
        (letters[0].0, letters[0].1.as_str(), letters[0].2.as_str()),
        (3, "validate", "schema_invalid"),
        "{letters:?}"
    );
    sluice.terminate();
}
for_each_database!(transforms_schema_and_dedup_read_the_decoded_value: postgres = Postgres, sqlite = Sqlite);
