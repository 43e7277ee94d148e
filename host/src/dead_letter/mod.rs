//! Dead letters: records that failed for a reason retrying cannot help, kept with their
//! cause under `errors.policy: dlq`.
//!
//! - `errors.dlq.table`: a table in the sink database, written in the batch's own
//!   transaction, so a dead letter is stored exactly once with the batch's offsets. Its
//!   primary key is the record's coordinates; `sluice dlq redrive` reads it back.
//! - `errors.dlq.topic`: a Kafka topic ([`topic::DeadLetterProducer`]); the original key,
//!   value and headers with `sluice.*` context headers, acknowledged by the broker before
//!   the batch's offsets commit.

pub mod redrive;
pub mod topic;

use crate::config::ColumnType;
use crate::failure::{Failure, Stage};
use crate::map::SqlValue;
use crate::record::{Headers, Record};
use crate::sink::TableSpec;

/// Longest error message stored (a database's message can quote a whole row).
const MAX_MESSAGE_CHARS: usize = 4000;

/// A failed record with its cause, ready to store or produce.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// The record as it arrived from Kafka.
    pub record: Record,
    pub stage: Stage,
    pub class: &'static str,
    pub message: String,
}

impl DeadLetter {
    /// The dead letter of `failure`, whose original input is `record`.
    pub fn new(record: Record, failure: &Failure) -> Self {
        // A NUL is refused in PostgreSQL text; messages can quote anything (a plugin's).
        let mut message = failure.message.replace('\0', "\\0");
        if message.chars().count() > MAX_MESSAGE_CHARS {
            message = message.chars().take(MAX_MESSAGE_CHARS).collect::<String>() + "…";
        }
        DeadLetter {
            record,
            stage: failure.stage,
            class: failure.class,
            message,
        }
    }
}

/// The columns of a dead-letter table, in order; the first four are its primary key.
pub const COLUMNS: [(&str, ColumnType); 11] = [
    ("connector", ColumnType::Text),
    ("source_topic", ColumnType::Text),
    ("source_partition", ColumnType::Int),
    ("source_offset", ColumnType::Bigint),
    ("record_key", ColumnType::Bytes),
    ("record_value", ColumnType::Bytes),
    ("record_headers", ColumnType::Json),
    ("stage", ColumnType::Text),
    ("error_class", ColumnType::Text),
    ("error_message", ColumnType::Text),
    ("failed_at", ColumnType::Timestamptz),
];

/// The dead-letter table `name` as the sink writes it.
pub fn table_spec(name: &str) -> TableSpec {
    TableSpec {
        name: name.to_string(),
        columns: COLUMNS.iter().map(|(n, t)| (n.to_string(), *t)).collect(),
        key: vec![0, 1, 2, 3],
    }
}

/// One row of the dead-letter table.
pub fn row(connector: &str, letter: &DeadLetter) -> Vec<SqlValue> {
    let bytes = |b: &Option<Vec<u8>>| b.clone().map_or(SqlValue::Null, SqlValue::Bytes);
    vec![
        SqlValue::Text(connector.to_string()),
        SqlValue::Text(letter.record.topic.clone()),
        SqlValue::Int(i64::from(letter.record.partition)),
        SqlValue::Int(letter.record.offset),
        bytes(&letter.record.key),
        bytes(&letter.record.value),
        SqlValue::Text(headers_to_json(&letter.record.headers)),
        SqlValue::Text(letter.stage.name().to_string()),
        SqlValue::Text(letter.class.to_string()),
        SqlValue::Text(letter.message.clone()),
        SqlValue::Timestamp(chrono::Utc::now().naive_utc()),
    ]
}

/// The primary key of a dead letter: connector, topic, partition, offset.
pub fn key(connector: &str, topic: &str, partition: i32, offset: i64) -> Vec<SqlValue> {
    vec![
        SqlValue::Text(connector.to_string()),
        SqlValue::Text(topic.to_string()),
        SqlValue::Int(i64::from(partition)),
        SqlValue::Int(offset),
    ]
}

/// Headers as JSON: `[["name", "hex of the value" | null], …]`, keeping order, repeats
/// and any bytes.
pub fn headers_to_json(headers: &[(String, Option<Vec<u8>>)]) -> String {
    let items: Vec<serde_json::Value> = headers
        .iter()
        .map(|(name, value)| serde_json::json!([name, value.as_deref().map(hex)]))
        .collect();
    serde_json::Value::Array(items).to_string()
}

/// The inverse of [`headers_to_json`].
pub fn headers_from_json(text: &str) -> Result<Headers, String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("headers are not JSON: {e}"))?;
    let items = value.as_array().ok_or("headers are not a JSON array")?;
    items
        .iter()
        .map(|item| match item.as_array().map(Vec::as_slice) {
            Some([serde_json::Value::String(name), serde_json::Value::Null]) => {
                Ok((name.clone(), None))
            }
            Some(
                [
                    serde_json::Value::String(name),
                    serde_json::Value::String(value),
                ],
            ) => Ok((name.clone(), Some(unhex(value)?))),
            _ => Err(format!("header {item} is not [name, hex or null]")),
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Result<Vec<u8>, String> {
    if !text.len().is_multiple_of(2) {
        return Err(format!("odd-length hex {text:?}"));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| format!("not hex: {text:?}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let headers = vec![
            ("a".to_string(), Some(vec![0, 1, 255])),
            ("a".to_string(), None),
            ("ünïcode".to_string(), Some(b"text".to_vec())),
        ];
        let json = headers_to_json(&headers);
        assert_eq!(headers_from_json(&json).unwrap(), headers);
        assert!(headers_from_json("[[1, 2]]").is_err());
        assert!(headers_from_json("[[\"a\", \"zz\"]]").is_err());
        assert!(headers_from_json("[[\"a\", \"abc\"]]").is_err());
        assert!(headers_from_json("{").is_err());
    }

    #[test]
    fn long_messages_are_cut() {
        let failure = Failure {
            index: 0,
            topic: "t".into(),
            partition: 0,
            offset: 0,
            stage: Stage::Sink,
            class: "database_refused",
            message: "x".repeat(10_000),
        };
        let letter = DeadLetter::new(Record::from_value("t", 0, 0, "v"), &failure);
        assert_eq!(letter.message.chars().count(), MAX_MESSAGE_CHARS + 1);
    }
}
