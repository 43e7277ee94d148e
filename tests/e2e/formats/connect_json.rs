//! Kafka Connect's `JsonConverter` envelopes (`schemas.enable=true`), as Kafka Connect and
//! Debezium write them: a Debezium change event of the MySQL connector (the shape of the
//! example in Debezium's documentation), Connect's logical types (`Decimal` in BASE64 and
//! NUMERIC form, `Date`, `Time`, `Timestamp`), bytes, a map with integer keys; a value
//! without the envelope is a `decode_failed` dead letter.

use serde_json::{Value, json};

use super::{FormatRun, hex, row};
use crate::harness::Backend;

/// A Debezium change event (op `c`), as Debezium's MySQL connector writes it with
/// `value.converter=org.apache.kafka.connect.json.JsonConverter` and schemas enabled.
fn debezium_create(id: i64, first: &str, email: &str) -> Value {
    let row_schema = |field: &str| {
        json!({
            "type": "struct",
            "fields": [
                {"type": "int32", "optional": false, "field": "id"},
                {"type": "string", "optional": false, "field": "first_name"},
                {"type": "string", "optional": false, "field": "last_name"},
                {"type": "string", "optional": false, "field": "email"},
                {"type": "int32", "optional": true, "name": "io.debezium.time.Date", "version": 1, "field": "birth"},
                {"type": "bytes", "optional": true, "name": "org.apache.kafka.connect.data.Decimal", "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "10"}, "field": "balance"}
            ],
            "optional": true,
            "name": "mysql-server-1.inventory.customers.Value",
            "field": field
        })
    };
    json!({
        "schema": {
            "type": "struct",
            "fields": [
                row_schema("before"),
                row_schema("after"),
                {
                    "type": "struct",
                    "fields": [
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
                    ],
                    "optional": false,
                    "name": "io.debezium.connector.mysql.Source",
                    "field": "source"
                },
                {"type": "string", "optional": false, "field": "op"},
                {"type": "int64", "optional": true, "field": "ts_ms"}
            ],
            "optional": false,
            "name": "mysql-server-1.inventory.customers.Envelope"
        },
        "payload": {
            "op": "c",
            "ts_ms": 1465491411815i64,
            "before": null,
            "after": {
                "id": id,
                "first_name": first,
                "last_name": "Kretchmar",
                "email": email,
                "birth": 10957,
                "balance": "AYag"
            },
            "source": {
                "version": "2.7.0.Final",
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
                "query": null
            }
        }
    })
}

/// Connect's own logical types, a NUMERIC decimal, bytes and a map with integer keys.
fn connect_types() -> Value {
    json!({
        "schema": {
            "type": "struct",
            "name": "com.acme.Reading",
            "optional": false,
            "fields": [
                {"field": "id", "type": "int64", "optional": false},
                {"field": "price", "type": "bytes", "optional": false, "name": "org.apache.kafka.connect.data.Decimal", "version": 1, "parameters": {"scale": "3"}},
                {"field": "exact", "type": "bytes", "optional": false, "name": "org.apache.kafka.connect.data.Decimal", "version": 1, "parameters": {"scale": "2"}},
                {"field": "day", "type": "int32", "optional": false, "name": "org.apache.kafka.connect.data.Date", "version": 1},
                {"field": "at", "type": "int32", "optional": false, "name": "org.apache.kafka.connect.data.Time", "version": 1},
                {"field": "when", "type": "int64", "optional": false, "name": "org.apache.kafka.connect.data.Timestamp", "version": 1},
                {"field": "raw", "type": "bytes", "optional": true},
                {"field": "by_code", "type": "map", "keys": {"type": "int32", "optional": false}, "values": {"type": "string", "optional": false}, "optional": false},
                {"field": "note", "type": "string", "optional": true}
            ]
        },
        "payload": {
            "id": 7,
            "price": "/7w=",
            "exact": 12345678.91,
            "day": 19723,
            "at": 45296789,
            "when": 1714564800123i64,
            "raw": "AP8=",
            "by_code": [[1, "one"], [2, "two"]],
            "note": null
        }
    })
}

async fn debezium_events_and_connect_types(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let config = run.config(
        "connect_json",
        "        src_offset: { from: $offset, type: bigint }
        id: { from: /after/id, type: bigint }
        first_name: { from: /after/first_name, type: text }
        birth: { from: /after/birth, type: date }
        balance: { from: /after/balance, type: numeric }
        op: { from: /op, type: text }
        changed: { from: /ts_ms, type: bigint }
        price: { from: /price, type: numeric }
        exact: { from: /exact, type: numeric }
        day: { from: /day, type: date }
        at: { from: /at, type: time }
        at_when: { from: /when, type: timestamptz }
        raw: { from: /raw, type: bytes }
        by_code: { from: /by_code, type: json }",
        "[src_offset]",
        "",
    );
    run.produce(
        json!({"serializer": "raw"}),
        vec![
            json!({"raw_value_hex": hex(&debezium_create(1004, "Anne", "annek@noanswer.org"))}),
            json!({"raw_value_hex": hex(&connect_types())}),
            // Without the envelope (a converter with schemas.enable=false).
            json!({"raw_value_hex": hex(&json!({"id": 1, "first_name": "x"}))}),
        ],
    )
    .await;
    let sluice = run.start(&config);
    run.wait_for(2, 1, 120, &sluice).await;
    let rows = run
        .rows(&[
            ("src_offset", "bigint"),
            ("id", "bigint"),
            ("first_name", "text"),
            ("birth", "date"),
            ("balance", "numeric"),
            ("op", "text"),
            ("changed", "bigint"),
            ("price", "numeric"),
            ("exact", "numeric"),
            ("day", "date"),
            ("at", "time"),
            ("at_when", "timestamptz"),
            ("raw", "bytes"),
            ("by_code", "json"),
        ])
        .await;
    assert_eq!(
        rows,
        vec![
            row(&[
                Some("0"),
                Some("1004"),
                Some("Anne"),
                Some("2000-01-01"),
                Some("1000"),
                Some("c"),
                Some("1465491411815"),
                None,
                None,
                None,
                None,
                None,
                None,
                None,
            ]),
            row(&[
                Some("1"),
                None,
                None,
                None,
                None,
                None,
                None,
                Some("-0.068"),
                Some("12345678.91"),
                Some("2024-01-01"),
                Some("12:34:56.789"),
                Some("2024-05-01 12:00:00.123"),
                Some("00ff"),
                Some("[[1,\"one\"],[2,\"two\"]]"),
            ]),
        ]
    );
    let letters = run.letters().await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_eq!((letters[0].0, letters[0].2.as_str()), (2, "decode_failed"));
    assert!(letters[0].3.contains("schemas.enable"), "{:?}", letters[0]);
    sluice.terminate();
}
for_each_database!(debezium_events_and_connect_types);
