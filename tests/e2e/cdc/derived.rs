//! Columns derived from the records' schemas (`sink.columns` left out): Debezium change
//! events in Connect JSON, whose row schema changes mid-stream, with the key from the
//! record key's schema (`key: record_key`).
//!
//! - `evolve: add_columns`: the table is created from the first schema; an optional field
//!   that appears adds a column (the rows before read NULL); a field that disappears is
//!   NULL from then on; a type change and a new required field are dead letters of class
//!   `schema_incompatible`, and the records after them land.
//! - `evolve: none`: the records whose schema has a field the table lacks are dead letters
//!   of class `schema_incompatible`; the others land.

use serde_json::{Value, json};

use crate::formats::{FormatRun, hex};
use crate::harness::Backend;

/// A row field of a Connect schema: (name, type, optional).
type RowField = (&'static str, &'static str, bool);

const V1: &[RowField] = &[("id", "int64", false), ("name", "string", true)];
/// `email` appears, optional.
const V2: &[RowField] = &[
    ("id", "int64", false),
    ("name", "string", true),
    ("email", "string", true),
];
/// `name` changes its type.
const NAME_AS_NUMBER: &[RowField] = &[("id", "int64", false), ("name", "int64", true)];
/// A new required field without a default.
const REQUIRED_TIER: &[RowField] = &[
    ("id", "int64", false),
    ("name", "string", true),
    ("tier", "int32", false),
];

fn row_schema(fields: &[RowField], field: &str) -> Value {
    json!({
        "type": "struct", "optional": true, "name": "shop.public.customers.Value", "field": field,
        "fields": fields
            .iter()
            .map(|(name, kind, optional)| json!({"type": kind, "optional": optional, "field": name}))
            .collect::<Vec<_>>()
    })
}

/// A change event of Debezium's PostgreSQL connector in Connect's JSON envelope, its row
/// schema `fields`.
fn event(fields: &[RowField], op: &str, lsn: i64, before: Value, after: Value) -> Value {
    json!({
        "schema": {
            "type": "struct", "optional": false, "name": "shop.public.customers.Envelope",
            "fields": [
                row_schema(fields, "before"),
                row_schema(fields, "after"),
                {"type": "struct", "optional": false, "name": "io.debezium.connector.postgresql.Source", "field": "source",
                 "fields": [
                    {"type": "string", "optional": false, "field": "connector"},
                    {"type": "int64", "optional": false, "field": "ts_ms"},
                    {"type": "string", "optional": false, "field": "db"},
                    {"type": "string", "optional": false, "field": "schema"},
                    {"type": "string", "optional": false, "field": "table"},
                    {"type": "int64", "optional": true, "field": "lsn"}
                 ]},
                {"type": "string", "optional": false, "field": "op"},
                {"type": "int64", "optional": true, "field": "ts_ms"}
            ]
        },
        "payload": {
            "before": before, "after": after, "op": op, "ts_ms": 1_700_000_000_000i64 + lsn,
            "source": {"connector": "postgresql", "ts_ms": 1_700_000_000_000i64 + lsn,
                       "db": "shop", "schema": "public", "table": "customers", "lsn": lsn}
        }
    })
}

fn key(id: i64) -> Value {
    json!({
        "schema": {"type": "struct", "name": "shop.public.customers.Key", "optional": false,
                   "fields": [{"type": "int64", "optional": false, "field": "id"}]},
        "payload": {"id": id}
    })
}

/// One record of `produce.py`'s raw serializer (a `None` value: a tombstone).
fn record(id: i64, value: Option<Value>) -> Value {
    match value {
        Some(value) => json!({"raw_key_hex": hex(&key(id)), "raw_value_hex": hex(&value)}),
        None => json!({"raw_key_hex": hex(&key(id)), "tombstone": true}),
    }
}

/// The stream both tests read: offsets 0–1 in the first schema, 2–5 with `email`, 6 without
/// it again, 7 a type change, 8 a new required field, 9 with `email`.
pub(super) fn history() -> Vec<Value> {
    vec![
        record(
            1,
            Some(event(
                V1,
                "c",
                10,
                Value::Null,
                json!({"id": 1, "name": "ann"}),
            )),
        ),
        record(
            2,
            Some(event(
                V1,
                "c",
                11,
                Value::Null,
                json!({"id": 2, "name": "bob"}),
            )),
        ),
        record(
            1,
            Some(event(
                V2,
                "u",
                12,
                json!({"id": 1, "name": "ann", "email": null}),
                json!({"id": 1, "name": "anna", "email": "a@x"}),
            )),
        ),
        record(
            3,
            Some(event(
                V2,
                "c",
                13,
                Value::Null,
                json!({"id": 3, "name": "cy", "email": "c@x"}),
            )),
        ),
        record(
            2,
            Some(event(
                V2,
                "d",
                14,
                json!({"id": 2, "name": "bob", "email": null}),
                Value::Null,
            )),
        ),
        record(2, None),
        record(
            3,
            Some(event(
                V1,
                "u",
                15,
                json!({"id": 3, "name": "cy"}),
                json!({"id": 3, "name": "cyrus"}),
            )),
        ),
        record(
            5,
            Some(event(
                NAME_AS_NUMBER,
                "c",
                16,
                Value::Null,
                json!({"id": 5, "name": 55}),
            )),
        ),
        record(
            6,
            Some(event(
                REQUIRED_TIER,
                "c",
                17,
                Value::Null,
                json!({"id": 6, "name": "f", "tier": 1}),
            )),
        ),
        record(
            4,
            Some(event(
                V2,
                "c",
                18,
                Value::Null,
                json!({"id": 4, "name": "dee", "email": "d@x"}),
            )),
        ),
    ]
}

fn rows(pairs: &[(i64, &str, Option<&str>)]) -> Vec<Vec<Option<String>>> {
    pairs
        .iter()
        .map(|(id, name, email)| {
            vec![
                Some(id.to_string()),
                Some(name.to_string()),
                email.map(str::to_string),
            ]
        })
        .collect()
}

async fn evolve_add_columns_follows_the_schema(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let config = run.config_with(
        "connect_json",
        "      evolve: add_columns",
        "record_key",
        "    key_format: connect_json\n    envelope: debezium",
    );
    run.produce(json!({"serializer": "raw"}), history()).await;
    let sluice = run.start(&config);
    run.wait_for(3, 2, 120, &sluice).await;
    assert_eq!(
        run.rows(&[("id", "bigint"), ("name", "text"), ("email", "text")])
            .await,
        rows(&[
            (1, "anna", Some("a@x")),
            // Its last change had no email field: NULL from then on.
            (3, "cyrus", None),
            (4, "dee", Some("d@x")),
        ])
    );
    let letters = run.letters().await;
    let classes: Vec<(i64, &str)> = letters.iter().map(|l| (l.0, l.2.as_str())).collect();
    assert_eq!(
        classes,
        vec![(7, "schema_incompatible"), (8, "schema_incompatible")],
        "{letters:?}"
    );
    assert!(
        letters[0].3.contains("name") && letters[0].3.contains("type change"),
        "{letters:?}"
    );
    assert!(
        letters[1].3.contains("tier") && letters[1].3.contains("required"),
        "{letters:?}"
    );
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
}
for_each_database!(evolve_add_columns_follows_the_schema);

async fn evolve_none_fails_the_records_of_a_new_field(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let config = run.config_with(
        "connect_json",
        "      evolve: none",
        "record_key",
        "    key_format: connect_json\n    envelope: debezium",
    );
    run.produce(json!({"serializer": "raw"}), history()).await;
    let sluice = run.start(&config);
    // Offsets 2, 3, 4 and 9 carry email; 7 and 8 fail as above. The tombstone after the
    // failed delete of 2 is passed over; the update of 3 (offset 6, no email) makes the row
    // its failed create did not.
    run.wait_for(3, 6, 120, &sluice).await;
    let pair = |id: i64, name: &str| vec![Some(id.to_string()), Some(name.to_string())];
    assert_eq!(
        run.rows(&[("id", "bigint"), ("name", "text")]).await,
        vec![pair(1, "ann"), pair(2, "bob"), pair(3, "cyrus")]
    );
    let letters = run.letters().await;
    let found: Vec<(i64, &str)> = letters.iter().map(|l| (l.0, l.2.as_str())).collect();
    assert_eq!(
        found,
        [2, 3, 4, 7, 8, 9]
            .iter()
            .map(|&o| (o, "schema_incompatible"))
            .collect::<Vec<_>>(),
        "{letters:?}"
    );
    assert!(
        letters[0].3.contains("email") && letters[0].3.contains("evolve is none"),
        "{letters:?}"
    );
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
}
for_each_database!(evolve_none_fails_the_records_of_a_new_field);

/// A table the process has read is read again before a record is refused: under
/// `evolve: none` a field the table lacks fails, and once the column is added by hand,
/// the next record with that field lands without a restart.
async fn a_column_added_by_hand_is_seen_before_refusing(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let config = run.config_with(
        "connect_json",
        "      evolve: none",
        "record_key",
        "    key_format: connect_json\n    envelope: debezium",
    );
    let first = vec![
        record(
            1,
            Some(event(
                V1,
                "c",
                10,
                Value::Null,
                json!({"id": 1, "name": "ann"}),
            )),
        ),
        record(
            2,
            Some(event(
                V2,
                "c",
                11,
                Value::Null,
                json!({"id": 2, "name": "bob", "email": "b@x"}),
            )),
        ),
    ];
    run.produce(json!({"serializer": "raw"}), first).await;
    let sluice = run.start(&config);
    run.wait_for(1, 1, 120, &sluice).await;
    super::execute(
        &run.db,
        &format!("ALTER TABLE {} ADD COLUMN email TEXT", run.table),
    )
    .await;
    let second = vec![record(
        3,
        Some(event(
            V2,
            "c",
            12,
            Value::Null,
            json!({"id": 3, "name": "cy", "email": "c@x"}),
        )),
    )];
    run.produce(json!({"serializer": "raw"}), second).await;
    run.wait_for(2, 1, 120, &sluice).await;
    assert_eq!(
        run.rows(&[("id", "bigint"), ("name", "text"), ("email", "text")])
            .await,
        rows(&[(1, "ann", None), (3, "cy", Some("c@x"))])
    );
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
}
for_each_database!(a_column_added_by_hand_is_seen_before_refusing);

/// Field names a producer may write (issue 43): a dot in a name is one column, never a
/// schema and a column; an empty name and one with a control character fail their records
/// alone (class `column_name`), and the records after them land. Each database has its
/// own rules for names (length, trailing spaces), so this runs on each.
async fn field_names_fail_only_their_records(kind: Backend) {
    const DOTTED: &[RowField] = &[
        ("id", "int64", false),
        ("name", "string", true),
        ("a.b", "string", true),
    ];
    const EMPTY: &[RowField] = &[("id", "int64", false), ("", "string", true)];
    const CONTROL: &[RowField] = &[("id", "int64", false), ("bad\u{1}name", "string", true)];
    let run = FormatRun::new(kind).await;
    let config = run.config_with(
        "connect_json",
        "      evolve: add_columns",
        "record_key",
        "    key_format: connect_json\n    envelope: debezium",
    );
    let create = |fields: &'static [RowField], id: i64, lsn: i64, after: Value| {
        record(id, Some(event(fields, "c", lsn, Value::Null, after)))
    };
    run.produce(
        json!({"serializer": "raw"}),
        vec![
            create(V1, 1, 10, json!({"id": 1, "name": "ann"})),
            create(
                DOTTED,
                2,
                11,
                json!({"id": 2, "name": "bob", "a.b": "dotted"}),
            ),
            create(EMPTY, 3, 12, json!({"id": 3, "": "nameless"})),
            create(CONTROL, 4, 13, json!({"id": 4, "bad\u{1}name": "x"})),
            create(
                DOTTED,
                5,
                14,
                json!({"id": 5, "name": "eve", "a.b": "after"}),
            ),
        ],
    )
    .await;
    let sluice = run.start(&config);
    run.wait_for(3, 2, 120, &sluice).await;
    let row = |id: i64, name: &str, dotted: Option<&str>| {
        vec![
            Some(id.to_string()),
            Some(name.to_string()),
            dotted.map(str::to_string),
        ]
    };
    assert_eq!(
        run.rows(&[("id", "bigint"), ("name", "text"), ("a.b", "text")])
            .await,
        vec![
            row(1, "ann", None),
            row(2, "bob", Some("dotted")),
            row(5, "eve", Some("after"))
        ]
    );
    let letters = run.letters().await;
    let classes: Vec<(i64, &str)> = letters.iter().map(|l| (l.0, l.2.as_str())).collect();
    assert_eq!(
        classes,
        vec![(2, "column_name"), (3, "column_name")],
        "{letters:?}"
    );
    assert!(letters[0].3.contains("empty name"), "{letters:?}");
    assert!(letters[1].3.contains("control character"), "{letters:?}");
    let status = sluice.terminate();
    assert!(status.success(), "sluice exited with {status}");
}
for_each_database!(field_names_fail_only_their_records);
