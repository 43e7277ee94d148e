//! Scripted change streams: each change of the script is checked against the row it leaves.

use serde_json::{Value, json};

use crate::formats::{FormatRun, hex, read_rows, row};
use crate::harness::Backend;

/// A Kafka Connect JSON key `{"id": N}` with its schema, as Debezium writes it.
fn key(topic: &str, id: i64) -> Value {
    json!({
        "schema": {"type": "struct", "name": format!("{topic}.Key"), "optional": false,
                   "fields": [{"type": "int64", "optional": false, "field": "id"}]},
        "payload": {"id": id}
    })
}

fn row_schema(topic: &str, field: &str) -> Value {
    json!({
        "type": "struct", "optional": true, "name": format!("{topic}.Value"), "field": field,
        "fields": [
            {"type": "int64", "optional": false, "field": "id"},
            {"type": "string", "optional": true, "field": "name"},
            {"type": "int64", "optional": true, "name": "io.debezium.time.MicroTimestamp", "version": 1, "field": "updated_at"}
        ]
    })
}

/// A change event of Debezium's PostgreSQL connector in Kafka Connect's JSON envelope.
fn event(topic: &str, op: &str, lsn: i64, before: Value, after: Value) -> Value {
    json!({
        "schema": {
            "type": "struct", "optional": false, "name": format!("{topic}.Envelope"),
            "fields": [
                row_schema(topic, "before"),
                row_schema(topic, "after"),
                {"type": "struct", "optional": false, "name": "io.debezium.connector.postgresql.Source", "field": "source",
                 "fields": [
                    {"type": "string", "optional": false, "field": "version"},
                    {"type": "string", "optional": false, "field": "connector"},
                    {"type": "string", "optional": false, "field": "name"},
                    {"type": "int64", "optional": false, "field": "ts_ms"},
                    {"type": "string", "optional": true, "field": "snapshot"},
                    {"type": "string", "optional": false, "field": "db"},
                    {"type": "string", "optional": true, "field": "sequence"},
                    {"type": "string", "optional": false, "field": "schema"},
                    {"type": "string", "optional": false, "field": "table"},
                    {"type": "int64", "optional": true, "field": "txId"},
                    {"type": "int64", "optional": true, "field": "lsn"},
                    {"type": "int64", "optional": true, "field": "xmin"}
                 ]},
                {"type": "string", "optional": false, "field": "op"},
                {"type": "int64", "optional": true, "field": "ts_ms"}
            ]
        },
        "payload": {
            "before": before, "after": after, "op": op, "ts_ms": 1_700_000_000_000i64 + lsn,
            "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "shop",
                       "ts_ms": 1_700_000_000_000i64 + lsn, "snapshot": "false", "db": "shop",
                       "sequence": format!("[null,\"{lsn}\"]"), "schema": "public",
                       "table": "customers", "txId": 500 + lsn, "lsn": lsn, "xmin": null}
        }
    })
}

fn customer(id: i64, name: &str, micros: i64) -> Value {
    json!({"id": id, "name": name, "updated_at": micros})
}

/// One record of `produce.py`'s raw serializer: a key and a value (None: a tombstone).
fn record(key: &Value, value: Option<&Value>) -> Value {
    match value {
        Some(value) => json!({"raw_key_hex": hex(key), "raw_value_hex": hex(value)}),
        None => json!({"raw_key_hex": hex(key), "tombstone": true}),
    }
}

pub(super) const COLUMNS: &str = "        id: { from: /id, type: bigint }
        name: { from: /name, type: text }
        updated_at: { from: /updated_at, type: timestamp }";

/// The script of [`debezium_history_replays_to_the_same_rows`] on `topic`: 1 created and
/// updated, 2 deleted (with its tombstone) and created again, 3 created, two late updates
/// the version guard refuses, and two records that fail (not a change event, a truncate).
/// It leaves rows 1, 2 and 3.
pub(super) fn script(topic: &str) -> Vec<Value> {
    let t = topic;
    let at = |s: i64| 1_704_067_200_000_000i64 + s * 1_000_001; // 2024-01-01 plus s
    let k = |id| key(t, id);
    vec![
        record(
            &k(1),
            Some(&event(t, "r", 10, Value::Null, customer(1, "ann", at(0)))),
        ),
        record(
            &k(2),
            Some(&event(t, "c", 20, Value::Null, customer(2, "bob", at(1)))),
        ),
        record(
            &k(1),
            Some(&event(
                t,
                "u",
                30,
                customer(1, "ann", at(0)),
                customer(1, "anna", at(2)),
            )),
        ),
        record(
            &k(2),
            Some(&event(t, "d", 40, customer(2, "bob", at(1)), Value::Null)),
        ),
        record(&k(2), None),
        // Late: older than what the table holds. Neither changes anything: the update
        // of 1 is older than its row, the update of 2 older than 2's delete.
        record(
            &k(1),
            Some(&event(
                t,
                "u",
                25,
                customer(1, "ann", at(0)),
                customer(1, "stale", at(9)),
            )),
        ),
        record(
            &k(2),
            Some(&event(
                t,
                "u",
                35,
                customer(2, "bob", at(1)),
                customer(2, "ghost", at(9)),
            )),
        ),
        record(
            &k(3),
            Some(&event(t, "c", 50, Value::Null, customer(3, "cy", at(3)))),
        ),
        // 2 again, newer than its delete.
        record(
            &k(2),
            Some(&event(
                t,
                "c",
                60,
                Value::Null,
                customer(2, "bob again", at(4)),
            )),
        ),
        // Not change events: dead letters.
        record(
            &k(4),
            Some(
                &json!({"schema": {"type": "struct", "fields": [{"type": "int64", "field": "id"}]}, "payload": {"id": 4}}),
            ),
        ),
        record(&k(4), Some(&event(t, "t", 70, Value::Null, Value::Null))),
    ]
}

/// The script: creates, updates, a delete with its tombstone, changes that arrive after a
/// newer one (each must change nothing), a key created again.
async fn debezium_history_replays_to_the_same_rows(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let t = run.topic.clone();
    let config = run.config(
        "connect_json",
        COLUMNS,
        "[id]",
        "    key_format: connect_json\n    envelope: debezium",
    );
    let records = script(&t);
    let at = |s: i64| 1_704_067_200_000_000i64 + s * 1_000_001; // 2024-01-01 plus s
    let k = |id| key(&t, id);
    run.produce(json!({"serializer": "raw"}), records).await;
    let sluice = run.start(&config);
    run.wait_for(3, 2, 120, &sluice).await;
    let columns = [
        ("id", "bigint"),
        ("name", "text"),
        ("updated_at", "timestamp"),
        ("_sluice_version", "text"),
    ];
    // A streamed PostgreSQL event: phase 1, the last commit (none in `sequence`), the lsn.
    let version = |lsn: i64, offset: i64| format!("{:020}.{:020}.{lsn:020}.{offset:020}", 1, 0);
    let expected = vec![
        row(&[
            Some("1"),
            Some("anna"),
            Some("2024-01-01 00:00:02.000002"),
            Some(&version(30, 2)),
        ]),
        row(&[
            Some("2"),
            Some("bob again"),
            Some("2024-01-01 00:00:04.000004"),
            Some(&version(60, 8)),
        ]),
        row(&[
            Some("3"),
            Some("cy"),
            Some("2024-01-01 00:00:03.000003"),
            Some(&version(50, 7)),
        ]),
    ];
    assert_eq!(run.rows(&columns).await, expected);
    let mut letters = run.letters().await;
    letters.sort();
    let classes: Vec<(i64, &str)> = letters.iter().map(|l| (l.0, l.2.as_str())).collect();
    assert_eq!(
        classes,
        vec![(9, "not_a_change_event"), (10, "truncate")],
        "{letters:?}"
    );

    // A delete that is the newest change of its key in its batch leaves a tombstone, and
    // an older update that arrives later does not bring the row back.
    run.produce(
        json!({"serializer": "raw"}),
        vec![
            record(
                &k(3),
                Some(&event(&t, "d", 80, customer(3, "cy", at(3)), Value::Null)),
            ),
            record(&k(3), None),
        ],
    )
    .await;
    super::wait_for_offset(&run.db, &run.connector, &run.topic, 0, 13, 60).await;
    assert_eq!(tombstones(&run).await, 1);
    run.produce(
        json!({"serializer": "raw"}),
        vec![
            record(
                &k(3),
                Some(&event(
                    &t,
                    "u",
                    75,
                    customer(3, "cy", at(3)),
                    customer(3, "undead", at(9)),
                )),
            ),
            // Older than the row it would update (in an earlier batch): no change.
            record(
                &k(1),
                Some(&event(
                    &t,
                    "u",
                    26,
                    customer(1, "ann", at(0)),
                    customer(1, "stale again", at(9)),
                )),
            ),
            record(
                &k(5),
                Some(&event(&t, "c", 90, Value::Null, customer(5, "eve", at(5)))),
            ),
        ],
    )
    .await;
    super::wait_for_offset(&run.db, &run.connector, &run.topic, 0, 16, 60).await;
    let expected = vec![
        expected[0].clone(),
        expected[1].clone(),
        row(&[
            Some("5"),
            Some("eve"),
            Some("2024-01-01 00:00:05.000005"),
            Some(&version(90, 15)),
        ]),
    ];
    assert_eq!(run.rows(&columns).await, expected);
    sluice.terminate();

    // A replay of the whole topic from offset 0 changes nothing: the row changed by
    // hand since keeps its change, as no record of the replay is newer.
    super::execute(
        &run.db,
        &format!("UPDATE {} SET name = 'by hand' WHERE id = 5", run.table),
    )
    .await;
    super::execute(
        &run.db,
        &format!(
            "DELETE FROM sluice_offsets WHERE connector = '{}'",
            run.connector
        ),
    )
    .await;
    let sluice = run.start(&config);
    super::wait_for_offset(&run.db, &run.connector, &run.topic, 0, 16, 120).await;
    let mut after = expected.clone();
    after[2][1] = Some("by hand".into());
    assert_eq!(run.rows(&columns).await, after);
    assert_eq!(tombstones(&run).await, 1);
    sluice.terminate();

    // Tombstones past sink.version.remember_deletes are removed; younger ones stay.
    let loaded = sluice::config::load_file(&config).expect("valid config");
    let sink = sluice::sink::Sink::connect(&loaded.connectors[0])
        .await
        .expect("connect");
    assert_eq!(sink.maintenance().tombstones().await.expect("count"), 1);
    let week = std::time::Duration::from_secs(7 * 24 * 3600);
    assert_eq!(
        sink.maintenance()
            .clean_tombstones(week)
            .await
            .expect("clean"),
        0
    );
    assert_eq!(
        sink.maintenance()
            .clean_tombstones(std::time::Duration::ZERO)
            .await
            .expect("clean"),
        1
    );
    assert_eq!(tombstones(&run).await, 0);
    sink.close().await;
}

/// The tombstones of the run's table.
async fn tombstones(run: &FormatRun) -> usize {
    read_rows(
        &run.db,
        "sluice_tombstones",
        &[("table_name", "text"), ("version", "text")],
    )
    .await
    .into_iter()
    .filter(|r| r[0].as_deref() == Some(run.table.as_str()))
    .count()
}
for_each_database!(debezium_history_replays_to_the_same_rows);

/// `on_truncate: truncate` empties the table in the batch's transaction; the rows created
/// after the truncate stay, and a replay of what came before it brings nothing back.
async fn debezium_truncate_deletes_what_came_before(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let t = run.topic.clone();
    let config = run.config(
        "connect_json",
        &format!("{COLUMNS}\n      on_truncate: truncate"),
        "[id]",
        "    key_format: connect_json\n    envelope: debezium",
    );
    let k = |id| key(&t, id);
    let records = vec![
        record(
            &k(1),
            Some(&event(&t, "c", 10, Value::Null, customer(1, "a", 0))),
        ),
        record(
            &k(2),
            Some(&event(&t, "c", 20, Value::Null, customer(2, "b", 0))),
        ),
        record(&k(1), Some(&event(&t, "t", 30, Value::Null, Value::Null))),
        record(
            &k(3),
            Some(&event(&t, "c", 40, Value::Null, customer(3, "c", 0))),
        ),
        // From before the truncate, arriving after it: stays out.
        record(
            &k(2),
            Some(&event(
                &t,
                "u",
                25,
                customer(2, "b", 0),
                customer(2, "late", 0),
            )),
        ),
    ];
    run.produce(json!({"serializer": "raw"}), records).await;
    let sluice = run.start(&config);
    run.wait_for(1, 0, 120, &sluice).await;
    super::wait_for_offset(&run.db, &run.connector, &run.topic, 0, 5, 60).await;
    assert_eq!(
        run.rows(&[("id", "bigint"), ("name", "text")]).await,
        vec![row(&[Some("3"), Some("c")])]
    );
    sluice.terminate();
}
for_each_database!(debezium_truncate_deletes_what_came_before);

/// Debezium's placeholder for an unchanged TOASTed value never overwrites the stored one:
/// an update carrying it sets only its other columns (also after a whole update of the
/// same key in the same batch), and one for a row that is not stored fails alone.
async fn debezium_placeholders_keep_the_stored_value(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let t = run.topic.clone();
    let config = run.config(
        "connect_json",
        COLUMNS,
        "[id]",
        "    key_format: connect_json\n    envelope: debezium",
    );
    let k = |id| key(&t, id);
    let unread = "__debezium_unavailable_value";
    let change = |id, op: &str, lsn, name: &str, micros| {
        record(
            &k(id),
            Some(&event(&t, op, lsn, Value::Null, customer(id, name, micros))),
        )
    };
    let records = vec![
        change(1, "c", 10, "kept", 0),
        change(1, "u", 20, unread, 5_000_000),
        change(2, "c", 30, "x", 0),
        change(2, "u", 40, "y", 0),
        change(2, "u", 50, unread, 7_000_000),
        // No row 3 is stored: nothing to keep its name from.
        change(3, "u", 60, unread, 0),
    ];
    run.produce(json!({"serializer": "raw"}), records).await;
    let sluice = run.start(&config);
    run.wait_for(2, 1, 120, &sluice).await;
    super::wait_for_offset(&run.db, &run.connector, &run.topic, 0, 6, 60).await;
    assert_eq!(
        run.rows(&[("id", "bigint"), ("name", "text")]).await,
        vec![
            row(&[Some("1"), Some("kept")]),
            row(&[Some("2"), Some("y")])
        ]
    );
    // The patches' other columns were written: both rows were created at 0, and the
    // patches moved them to 5 s and 7 s.
    let stamps = run.rows(&[("id", "bigint"), ("updated_at", "text")]).await;
    assert_ne!(stamps[0][1], stamps[1][1], "{stamps:?}");
    sluice.terminate();
}
for_each_database!(debezium_placeholders_keep_the_stored_value);

/// Conduit's OpenCDC records, versioned by `metadata.opencdc.readAt` (nanoseconds, as
/// text): creates, an update, a delete by `key`, a late update after the delete.
async fn opencdc_records_by_version(kind: Backend) {
    let run = FormatRun::new(kind).await;
    let config = run.config(
        "json",
        "        id: { from: /id, type: bigint }
        name: { from: /name, type: text }
      version: { from: /metadata/opencdc.readAt, column: seen_at }",
        "[id]",
        "    envelope: opencdc",
    );
    let opencdc = |operation: &str, read_at: u64, id: i64, before: Value, after: Value| {
        json!({
            "position": "cG9zaXRpb24=", "operation": operation,
            "metadata": {"opencdc.collection": "users", "opencdc.readAt": read_at.to_string(),
                         "opencdc.version": "v1", "conduit.source.plugin.name": "builtin:postgres"},
            "key": {"id": id},
            "payload": {"before": before, "after": after}
        })
    };
    let k = json!("k");
    let records = vec![
        record(
            &k,
            Some(&opencdc(
                "snapshot",
                1_000,
                1,
                Value::Null,
                json!({"id": 1, "name": "one"}),
            )),
        ),
        record(
            &k,
            Some(&opencdc(
                "create",
                2_000,
                2,
                Value::Null,
                json!({"id": 2, "name": "two"}),
            )),
        ),
        record(
            &k,
            Some(&opencdc(
                "update",
                3_000,
                1,
                json!({"id": 1, "name": "one"}),
                json!({"id": 1, "name": "uno"}),
            )),
        ),
        record(
            &k,
            Some(&opencdc("delete", 4_000, 2, Value::Null, Value::Null)),
        ),
        record(
            &k,
            Some(&opencdc(
                "update",
                3_500,
                2,
                Value::Null,
                json!({"id": 2, "name": "zombie"}),
            )),
        ),
        record(&k, Some(&json!({"operation": "merge", "payload": {}}))),
    ];
    run.produce(json!({"serializer": "raw"}), records).await;
    let sluice = run.start(&config);
    run.wait_for(1, 1, 120, &sluice).await;
    super::wait_for_offset(&run.db, &run.connector, &run.topic, 0, 6, 60).await;
    assert_eq!(
        run.rows(&[("id", "bigint"), ("name", "text"), ("seen_at", "text")])
            .await,
        vec![row(&[
            Some("1"),
            Some("uno"),
            Some(&format!("{:020}.{:020}", 3_000, 2))
        ])]
    );
    let letters = run.letters().await;
    assert_eq!(letters[0].2, "not_a_change_event", "{letters:?}");
    sluice.terminate();
}
for_each_database!(opencdc_records_by_version);
