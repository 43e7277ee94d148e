//! Protobuf through the registry, as Confluent's `ProtobufSerializer` writes it: a `.proto`
//! with imports (a file of its own, registered as a reference, and well-known types), the
//! second message of the file and a message nested in it (the message-index paths `[1]`
//! and `[1, 0]`), scalars, enums, maps, repeated fields, oneofs, wrappers, timestamps, and
//! unset fields as their defaults.

use serde_json::json;

use super::{FormatRun, row};
use crate::harness::Backend;

const COLUMNS: &str = "        id: { from: /id, type: bigint }
        customer: { from: /customer, type: text }
        currency: { from: /total/currency, type: text }
        units: { from: /total/units, type: bigint }
        placed_at: { from: /placed_at, type: timestamptz }
        lines: { from: /lines, type: json }
        counts: { from: /counts, type: json }
        status: { from: /status, type: text }
        coupon: { from: /coupon, type: text }
        token: { from: /token, type: bytes }
        email: { from: /email, type: text }
        phone: { from: /phone, type: text }
        big: { from: /big, type: bigint }
        weight: { from: /weight, type: double }
        gift: { from: /gift, type: bool }
        sku: { from: /sku, type: text }
        qty: { from: /qty, type: int }";

const READ: &[(&str, &str)] = &[
    ("id", "bigint"),
    ("customer", "text"),
    ("currency", "text"),
    ("units", "bigint"),
    ("placed_at", "timestamptz"),
    ("lines", "json"),
    ("counts", "json"),
    ("status", "text"),
    ("coupon", "text"),
    ("token", "bytes"),
    ("email", "text"),
    ("phone", "text"),
    ("big", "bigint"),
    ("weight", "double"),
    ("gift", "bool"),
    ("sku", "text"),
    ("qty", "int"),
];

fn spec(message: &str) -> serde_json::Value {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/e2e/formats/proto");
    json!({
        "serializer": "protobuf",
        "proto": {
            "dir": dir,
            "file": "shop/order.proto",
            "files": ["shop/order.proto", "shop/common.proto"],
            "message": message,
        },
    })
}

async fn imports_nested_messages_and_defaults(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let config = run.config("protobuf", COLUMNS, "[id]", "");
    run.produce(
        spec("Order"),
        vec![
            json!({"value": {
                "id": "9007199254740993",
                "customer": "Zoë",
                "total": {"currency": "CHF", "units": "-42"},
                "placed_at": "2024-05-01T12:00:00.123456789Z",
                "lines": [{"sku": "A-1", "qty": 2}],
                "counts": {"a": 1},
                "status": "PAID",
                "coupon": "SPRING",
                "token": "AP8=",
                "email": "z@example.com",
                "big": "18446744073709551",
                "weight": 1.5,
                "gift": true,
            }}),
            // Everything unset but the id: proto3 defaults, no wrapper, no oneof member.
            json!({"value": {"id": "2"}}),
        ],
    )
    .await;
    run.produce(
        spec("Order.Line"),
        vec![json!({"value": {"id": "3", "sku": "B-7", "qty": 5}})],
    )
    .await;
    let sluice = run.start(&config);
    run.wait_for(3, 0, 120, &sluice).await;
    let rows = run.rows(READ).await;
    assert_eq!(
        rows[0],
        row(&[
            Some("2"),
            Some(""),
            None,
            None,
            None,
            Some("[]"),
            Some("{}"),
            Some("NEW"),
            None,
            Some(""),
            None,
            None,
            Some("0"),
            Some("0"),
            Some("false"),
            None,
            None,
        ]),
        "unset fields take their defaults"
    );
    assert_eq!(
        rows[1],
        row(&[
            Some("3"),
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            Some("B-7"),
            Some("5"),
        ]),
        "the nested message Order.Line (indexes [1, 0])"
    );
    assert_eq!(
        rows[2],
        row(&[
            Some("9007199254740993"),
            Some("Zoë"),
            Some("CHF"),
            Some("-42"),
            Some("2024-05-01 12:00:00.123456"),
            Some("[{\"id\":0,\"qty\":2,\"sku\":\"A-1\"}]"),
            Some("{\"a\":1}"),
            Some("PAID"),
            Some("SPRING"),
            Some("00ff"),
            Some("z@example.com"),
            None,
            Some("18446744073709551"),
            Some("1.5"),
            Some("true"),
            None,
            None,
        ])
    );
    sluice.terminate();
}
for_each_database!(imports_nested_messages_and_defaults: mariadb = MariaDb);
