//! The dead-letter table (`errors.dlq.table`): dead letters in the sink database, written
//! in the batch's own transaction, so a dead letter is stored exactly once with the batch's
//! offsets. Its primary key is the record's coordinates; `sluice dlq redrive` reads it
//! back ([`Stored`]). The dead-letter *topic* is the Kafka room's
//! ([`crate::kafka::dead_letter_producer`]).

use sqlx::{
    AssertSqlSafe, ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type,
};

use super::{Sink, SinkError, TableSpec, each_pool};
use crate::config::ColumnType;
use crate::failure::DeadLetter;
use crate::map::SqlValue;
use crate::record::{Headers, Record};

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
        naming: Default::default(),
        columns: COLUMNS.iter().map(|(n, t)| (n.to_string(), *t)).collect(),
        key: vec![0, 1, 2, 3],
        version: None,
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
        SqlValue::Text(letter.class.name().to_string()),
        SqlValue::Text(letter.message.clone()),
        SqlValue::Timestamp(chrono::Utc::now().naive_utc()),
    ]
}

/// A dead letter read back from its table.
#[derive(Debug, Clone, PartialEq)]
pub struct Stored {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// The headers column as stored (see [`headers_to_json`]).
    pub headers: String,
}

impl Stored {
    /// The record as it first arrived; `Err` when the stored headers are damaged.
    pub fn record(&self) -> Result<Record, String> {
        Ok(Record {
            topic: self.topic.clone(),
            partition: self.partition,
            offset: self.offset,
            timestamp: None,
            key: self.key.clone(),
            value: self.value.clone(),
            headers: headers_from_json(&self.headers)?,
        })
    }

    /// The record as the pipeline takes it again (a redrive, a dry run): with damaged
    /// stored headers, without them and with that defect, so that it fails alone.
    pub fn incoming(&self) -> crate::record::Incoming {
        match self.record() {
            Ok(record) => crate::record::Incoming::from(record),
            Err(defect) => crate::record::Incoming {
                record: Record {
                    topic: self.topic.clone(),
                    partition: self.partition,
                    offset: self.offset,
                    key: self.key.clone(),
                    value: self.value.clone(),
                    ..Record::default()
                },
                defect: Some(defect),
            },
        }
    }

    /// Where it came from, the dead-letter table's key (with the connector).
    pub fn coordinates(&self) -> (String, i32, i64) {
        (self.topic.clone(), self.partition, self.offset)
    }
}

/// Runs the dialect's `read_dead_letters` statement.
pub async fn read<'p, DB>(
    executor: impl Executor<'p, Database = DB>,
    sql: String,
    connector: &str,
    after: &(String, i32, i64),
) -> Result<Vec<Stored>, sqlx::Error>
where
    DB: Database,
    DB::Arguments: IntoArguments<DB>,
    String: for<'q> Encode<'q, DB> + Type<DB> + for<'r> Decode<'r, DB>,
    i32: for<'q> Encode<'q, DB> + Type<DB> + for<'r> Decode<'r, DB>,
    i64: for<'q> Encode<'q, DB> + Type<DB> + for<'r> Decode<'r, DB>,
    Vec<u8>: Type<DB> + for<'r> Decode<'r, DB>,
    usize: ColumnIndex<DB::Row>,
{
    let rows = sqlx::query::<DB>(AssertSqlSafe(sql))
        .bind(connector.to_string())
        .bind(after.0.clone())
        .bind(after.1)
        .bind(after.2)
        .fetch_all(executor)
        .await?;
    rows.iter()
        .map(|row| {
            Ok(Stored {
                topic: row.try_get(0)?,
                partition: row.try_get(1)?,
                offset: row.try_get(2)?,
                key: row.try_get(3)?,
                value: row.try_get(4)?,
                headers: row.try_get(5)?,
            })
        })
        .collect()
}

impl Sink {
    /// MySQL/MariaDB: a dead-letter table created before sluice compared names exactly
    /// has case-insensitive `connector` and `source_topic` columns (dead letters of
    /// `Orders` and `orders` at one offset would collide): make them exact.
    pub(super) async fn exact_dead_letter_keys(&self) -> Result<(), SinkError> {
        let Some(table) = &self.dead_letter_table else {
            return Ok(());
        };
        let Some(exact) = super::db::of(self.dialect).exact_dead_letter_keys else {
            return Ok(());
        };
        let (schema, name) = match table.name.split_once('.') {
            Some((schema, name)) => (Some(schema), name),
            None => (None, table.name.as_str()),
        };
        let inexact = self.query_integers((exact.count)(schema, name), 1).await?;
        if inexact.first().copied().flatten().unwrap_or(0) == 0 {
            return Ok(());
        }
        tracing::info!(table = %table.name, "dead-letter table: connector and topic names now compare exactly");
        self.execute_statement(&(exact.alter)(&table.quoted(self.dialect)))
            .await
    }

    /// Reads up to `limit` dead letters of this connector after `after` (topic, partition,
    /// offset), in that order.
    pub async fn read_dead_letters(
        &self,
        after: Option<&(String, i32, i64)>,
        limit: usize,
    ) -> Result<Vec<Stored>, SinkError> {
        let Some(table) = &self.dead_letter_table else {
            return Err(SinkError::NoDeadLetterTable {
                connector: self.connector.clone(),
            });
        };
        let sql = self.dialect.read_dead_letters(&table.name, limit);
        let start = after
            .cloned()
            .unwrap_or_else(|| (String::new(), i32::MIN, i64::MIN));
        each_pool!(self, pool, DB => {
            read::<DB>(pool, sql, &self.connector, &start).await
        })
        .map_err(|source| SinkError::Database {
            action: "read dead letters",
            table: table.name.clone(),
            source,
        })
    }

    /// How many dead letters this connector has in its table.
    pub async fn count_dead_letters(&self) -> Result<i64, SinkError> {
        let Some(table) = &self.dead_letter_table else {
            return Ok(0);
        };
        let sql = format!(
            "SELECT CAST(COUNT(*) AS {}) FROM {} WHERE connector = {}",
            super::db::of(self.dialect).bigint_cast,
            table.quoted(self.dialect),
            self.dialect.param(1)
        );
        each_pool!(self, pool, DB => {
            sqlx::query_scalar::<DB, i64>(AssertSqlSafe(sql))
                .bind(self.connector.clone())
                .fetch_one(pool)
                .await
        })
        .map_err(|source| SinkError::Database {
            action: "count dead letters",
            table: table.name.clone(),
            source,
        })
    }
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
}
