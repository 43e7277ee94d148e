//! Change events (`envelope: debezium | opencdc`): which change of which row a decoded
//! value carries. The columns are then read from the row, not from the event.
//!
//! Debezium (its envelope, as every Debezium source connector writes it; with
//! `connect_json` the `{"schema","payload"}` wrapper is gone by now, and a wrapper left
//! around a `format: json` value is looked through):
//!
//! | `op` | change |
//! |---|---|
//! | `c` (create), `r` (read: a snapshot), `u` (update) | upsert `after` |
//! | `d` (delete) | delete the row `before` names (or the record key) |
//! | `t` (truncate) | the table, under `sink.on_truncate` |
//!
//! OpenCDC (Conduit's record): `operation` `create`, `snapshot` and `update` upsert
//! `payload.after`; `delete` deletes the row of `payload.before` or `key`.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::config::Envelope;

/// A Debezium event as JSON text, its parts left as text until they are needed
/// ([`super::RowMapper`]'s borrowed reading).
#[derive(Deserialize)]
pub(super) struct RawDebezium<'a> {
    #[serde(borrow, default)]
    pub(super) op: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub(super) before: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) after: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(super) source: Option<&'a RawValue>,
    #[serde(default)]
    pub(super) ts_ms: Option<Value>,
}

/// The fields of a Debezium `source` block that make its position.
#[derive(Deserialize)]
pub(super) struct RawSource {
    #[serde(default)]
    connector: Option<Value>,
    #[serde(default)]
    lsn: Option<Value>,
    #[serde(default)]
    file: Option<Value>,
    #[serde(default)]
    pos: Option<Value>,
    #[serde(default)]
    row: Option<Value>,
    #[serde(default)]
    ts_ms: Option<Value>,
    #[serde(default)]
    snapshot: Option<Value>,
    #[serde(default)]
    sequence: Option<Value>,
}

impl RawSource {
    /// The field `name`, as `Value::get` on the whole block finds it.
    pub(super) fn field(&self, name: &str) -> Option<&Value> {
        match name {
            "connector" => self.connector.as_ref(),
            "lsn" => self.lsn.as_ref(),
            "file" => self.file.as_ref(),
            "pos" => self.pos.as_ref(),
            "row" => self.row.as_ref(),
            "ts_ms" => self.ts_ms.as_ref(),
            "snapshot" => self.snapshot.as_ref(),
            "sequence" => self.sequence.as_ref(),
            _ => None,
        }
    }
}

/// The change a value carries.
#[derive(Debug, PartialEq)]
pub(super) enum Change<'a> {
    /// Insert or update this row.
    Upsert(&'a Value),
    /// Delete a row: its image before the change (often only the key columns), and the
    /// key the event carries itself (OpenCDC's `key`; Debezium's is the record key).
    Delete {
        before: Option<&'a Value>,
        key: Option<&'a Value>,
    },
    /// Empty the table.
    Truncate,
}

/// Reads the change of `event`; `Err` says why it is not a change event of `envelope`.
pub(super) fn read(envelope: Envelope, event: &Value) -> Result<Change<'_>, String> {
    match envelope {
        Envelope::None => Ok(Change::Upsert(event)),
        Envelope::Debezium => debezium(event),
        Envelope::Opencdc => opencdc(event),
    }
}

/// The event itself, or the payload of a Kafka Connect `{"schema","payload"}` wrapper
/// that a `format: json` connector left on (JsonConverter with schemas enabled).
pub(super) fn unwrapped(event: &Value) -> &Value {
    match event {
        Value::Object(map)
            if map.len() == 2 && map.contains_key("schema") && map.contains_key("payload") =>
        {
            &map["payload"]
        }
        other => other,
    }
}

fn row<'a>(event: &'a Value, field: &str, what: &str) -> Result<&'a Value, String> {
    match event.get(field) {
        Some(row @ Value::Object(_)) => Ok(row),
        Some(Value::Null) | None => Err(format!("{what} has no {field} row")),
        Some(other) => Err(format!(
            "{what}'s {field} is not an object but {}",
            kind(other)
        )),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn debezium(event: &Value) -> Result<Change<'_>, String> {
    let event = unwrapped(event);
    if !event.is_object() {
        return Err(format!(
            "a Debezium change event is an object with op, before, after and source; this is {}",
            kind(event)
        ));
    }
    let op = event
        .get("op")
        .and_then(Value::as_str)
        .ok_or("not a Debezium change event: it has no op (is the connector's value converter set, and ExtractNewRecordState off?)")?;
    match op {
        "c" | "r" | "u" => Ok(Change::Upsert(row(
            event,
            "after",
            &format!("an op {op} event"),
        )?)),
        "d" => Ok(Change::Delete {
            before: event.get("before").filter(|b| b.is_object()),
            key: None,
        }),
        "t" => Ok(Change::Truncate),
        "m" => Err("a Debezium message event (op m) carries no row change".into()),
        other => Err(format!(
            "op {other:?} is not a Debezium operation (c, r, u, d, t)"
        )),
    }
}

fn opencdc(event: &Value) -> Result<Change<'_>, String> {
    let operation = event
        .get("operation")
        .and_then(Value::as_str)
        .ok_or("not an OpenCDC record: it has no operation")?;
    let payload = event
        .get("payload")
        .filter(|p| p.is_object())
        .ok_or("not an OpenCDC record: it has no payload")?;
    match operation {
        "create" | "snapshot" | "update" => Ok(Change::Upsert(row(
            payload,
            "after",
            &format!("an OpenCDC {operation} record's payload"),
        )?)),
        "delete" => Ok(Change::Delete {
            before: payload.get("before").filter(|b| b.is_object()),
            key: event.get("key").filter(|k| !k.is_null()),
        }),
        other => Err(format!(
            "operation {other:?} is not an OpenCDC operation (create, snapshot, update, delete)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn debezium_ops() {
        let after = json!({"id": 1});
        let e = json!({"op": "c", "before": null, "after": after, "source": {}});
        assert_eq!(read(Envelope::Debezium, &e), Ok(Change::Upsert(&after)));
        let e = json!({"op": "r", "after": after});
        assert_eq!(read(Envelope::Debezium, &e), Ok(Change::Upsert(&after)));
        let before = json!({"id": 2});
        let e = json!({"op": "d", "before": before, "after": null});
        assert_eq!(
            read(Envelope::Debezium, &e),
            Ok(Change::Delete {
                before: Some(&before),
                key: None
            })
        );
        assert_eq!(
            read(Envelope::Debezium, &json!({"op": "t"})),
            Ok(Change::Truncate)
        );
    }

    #[test]
    fn debezium_through_a_connect_wrapper() {
        let e = json!({"schema": {"type": "struct"}, "payload": {"op": "u", "after": {"id": 3}}});
        assert_eq!(
            read(Envelope::Debezium, &e),
            Ok(Change::Upsert(&json!({"id": 3})))
        );
    }

    #[test]
    fn not_change_events() {
        for e in [
            json!({"id": 1}),
            json!([1]),
            json!("c"),
            json!({"op": "x", "after": {}}),
            json!({"op": "u", "after": null}),
            json!({"op": "c", "after": [1]}),
            json!({"op": "m", "message": {}}),
        ] {
            assert!(read(Envelope::Debezium, &e).is_err(), "{e}");
        }
    }

    #[test]
    fn opencdc_operations() {
        let e = json!({"operation": "snapshot", "payload": {"before": null, "after": {"id": 1}},
                       "key": {"id": 1}, "metadata": {"opencdc.collection": "users"}});
        assert_eq!(
            read(Envelope::Opencdc, &e),
            Ok(Change::Upsert(&json!({"id": 1})))
        );
        let e = json!({"operation": "delete", "payload": {"before": null, "after": null}, "key": {"id": 4}});
        assert_eq!(
            read(Envelope::Opencdc, &e),
            Ok(Change::Delete {
                before: None,
                key: Some(&json!({"id": 4}))
            })
        );
        assert!(read(Envelope::Opencdc, &json!({"operation": "create"})).is_err());
        assert!(
            read(
                Envelope::Opencdc,
                &json!({"operation": "merge", "payload": {}})
            )
            .is_err()
        );
    }
}
