//! JSON Schema through the registry, as Confluent's `JSONSerializer` writes it; a value in
//! the same frame that breaks its schema is a `decode_failed` dead letter naming the keyword.

use serde_json::json;

use super::{FormatRun, row};
use crate::harness::Backend;

async fn values_checked_against_their_schema(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let config = run.config(
        "json_schema",
        "        id: { from: /id, type: bigint }\n        name: { from: /name, type: text }\n        day: { from: /day, type: date }",
        "[id]",
        "",
    );
    let schema = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Word",
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "name": {"type": "string"},
            "day": {"type": "string", "format": "date"}
        },
        "required": ["id", "name"]
    });
    run.produce(
        json!({"serializer": "json", "schema": schema.to_string()}),
        vec![
            json!({"value": {"id": 1, "name": "one", "day": "2024-01-01"}}),
            json!({"value": {"id": 2, "name": "two"}}),
        ],
    )
    .await;
    // The same schema id (the registry's first, 1), a value without its required `name`.
    let bad = [&[0u8, 0, 0, 0, 1][..], br#"{"id": 3}"#].concat();
    let hex: String = bad.iter().map(|b| format!("{b:02x}")).collect();
    run.produce(
        json!({"serializer": "raw"}),
        vec![json!({"raw_value_hex": hex})],
    )
    .await;
    let sluice = run.start(&config);
    run.wait_for(2, 1, 120, &sluice).await;
    assert_eq!(
        run.rows(&[("id", "bigint"), ("name", "text"), ("day", "date")])
            .await,
        vec![
            row(&[Some("1"), Some("one"), Some("2024-01-01")]),
            row(&[Some("2"), Some("two"), None]),
        ]
    );
    let letters = run.letters().await;
    assert_eq!(letters.len(), 1);
    let (offset, stage, class, message) = &letters[0];
    assert_eq!(
        (*offset, stage.as_str(), class.as_str()),
        (2, "source", "decode_failed")
    );
    assert!(message.contains("required"), "{message}");
    sluice.terminate();
}
for_each_database!(values_checked_against_their_schema: sqlite = Sqlite);
