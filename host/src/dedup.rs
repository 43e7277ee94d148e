//! Producer-duplicate detection (`delivery.dedup`, field article 002, pattern 1).
//!
//! A producer that retries without idempotence, or replays a file, writes the same message
//! twice at different offsets, maybe in different partitions. The offsets' compare-and-set
//! cannot see that: both copies are new records. With `delivery.dedup`, each record's id is
//! read as it arrived (before any transform), and the sink's transaction for a batch:
//!
//! 1. looks the batch's ids up in `sluice_dedup` (the ids of every record written so far),
//! 2. drops the rows of each input whose id is there, or earlier in the same batch,
//! 3. stores the new ids, in the same transaction as the rows and the offsets.
//!
//! So a duplicate is skipped however far apart the copies are: across batches, partitions,
//! restarts, rebalances and processes. Two tasks that store the same id at once conflict on
//! the table's key; the loser's transaction rolls back and is retried, and then finds the
//! id. Ids are kept for at least `window` after they were written, measured on the sink
//! database's clock (a record's own timestamp does not count); a background cleanup
//! removes older ones ([`crate::sink::Sink::clean_dedup`]). Each id keeps where it was
//! first read (topic, partition, offset), so that an offsets reset forgets the ids it
//! rewinds past and a replay writes its records again.

use std::collections::HashSet;

use crate::config::DedupIdSource;
use crate::record::Record;

/// Longest id, in bytes: the key column is `VARCHAR(255)` in MySQL/MariaDB.
pub const MAX_ID_BYTES: usize = 255;

/// One input record's id, as the sink's transaction stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupKey {
    /// The input record's index in its batch.
    pub input: usize,
    /// The producer's id for the message.
    pub id: String,
    /// The record's timestamp in milliseconds (the time it was read when it has none).
    /// Stored beside the id for reading; the window does not count from it.
    pub timestamp: i64,
    /// Where the record was read: its topic, partition and offset.
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

/// Reads `record`'s id from `source`. `Err` says why there is none, for the record's
/// failure.
pub fn read_id(source: &DedupIdSource, record: &Record) -> Result<String, String> {
    let id = match source {
        DedupIdSource::Header(name) => {
            let value = record
                .headers
                .iter()
                .rev()
                .find(|(n, _)| n == name)
                .ok_or_else(|| format!("no header \"{name}\" for delivery.dedup.id"))?
                .1
                .as_deref()
                .ok_or_else(|| format!("header \"{name}\" (delivery.dedup.id) is null"))?;
            std::str::from_utf8(value)
                .map_err(|_| format!("header \"{name}\" (delivery.dedup.id) is not UTF-8"))?
                .to_string()
        }
        DedupIdSource::Pointer(pointer) => {
            let value = record.value.as_deref().ok_or_else(|| {
                format!("a tombstone has no value to read delivery.dedup.id {pointer} from")
            })?;
            let document: serde_json::Value = serde_json::from_slice(value).map_err(|e| {
                format!("the value is not JSON, so delivery.dedup.id {pointer} cannot be read: {e}")
            })?;
            match document.pointer(pointer) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
                Some(other) => {
                    return Err(format!(
                        "delivery.dedup.id {pointer} is {}, not a string or an integer",
                        json_kind(other)
                    ));
                }
                None => return Err(format!("no {pointer} in the value for delivery.dedup.id")),
            }
        }
    };
    if id.is_empty() {
        return Err(format!("delivery.dedup.id {source} is empty"));
    }
    if id.contains('\0') {
        return Err(format!(
            "delivery.dedup.id {source} contains a NUL character, which databases cannot store in text"
        ));
    }
    if id.len() > MAX_ID_BYTES {
        return Err(format!(
            "delivery.dedup.id {source} is {} bytes long; ids of at most {MAX_ID_BYTES} bytes are kept",
            id.len()
        ));
    }
    Ok(id)
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number that is not a 64-bit integer",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// The keys (positions in `keys`) that are duplicates: their id is in `stored`, or an
/// earlier key of the batch has it. The first copy in batch order is the one written.
pub fn duplicates(keys: &[DedupKey], stored: &HashSet<String>) -> Vec<usize> {
    let mut seen: HashSet<&str> = HashSet::with_capacity(keys.len());
    keys.iter()
        .enumerate()
        .filter(|(_, key)| stored.contains(&key.id) || !seen.insert(key.id.as_str()))
        .map(|(position, _)| position)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(value: &str, headers: &[(&str, Option<&str>)]) -> Record {
        let mut record = Record::from_value("t", 0, 1, value);
        record.headers = headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.map(|v| v.as_bytes().to_vec())))
            .collect();
        record
    }

    #[test]
    fn ids_come_from_a_header_or_the_value() {
        let header = DedupIdSource::Header("msg-id".into());
        let r = record("x", &[("msg-id", Some("a")), ("msg-id", Some("b"))]);
        assert_eq!(
            read_id(&header, &r).as_deref(),
            Ok("b"),
            "the last header wins"
        );
        let pointer = DedupIdSource::Pointer("/tx/id".into());
        let r = record(r#"{"tx": {"id": "T-7"}}"#, &[]);
        assert_eq!(read_id(&pointer, &r).as_deref(), Ok("T-7"));
        let r = record(r#"{"tx": {"id": 1234567890123}}"#, &[]);
        assert_eq!(read_id(&pointer, &r).as_deref(), Ok("1234567890123"));
    }

    #[test]
    fn a_record_without_a_usable_id_says_why() {
        let header = DedupIdSource::Header("msg-id".into());
        for (r, expect) in [
            (record("x", &[]), "no header"),
            (record("x", &[("msg-id", None)]), "is null"),
            (record("x", &[("msg-id", Some(""))]), "is empty"),
        ] {
            let e = read_id(&header, &r).expect_err("no id");
            assert!(e.contains(expect), "{e}");
        }
        let mut bad = record("x", &[]);
        bad.headers = vec![("msg-id".into(), Some(vec![0xff]))];
        assert!(
            read_id(&header, &bad)
                .expect_err("not utf-8")
                .contains("UTF-8")
        );
        let long = "x".repeat(MAX_ID_BYTES + 1);
        let e = read_id(&header, &record("x", &[("msg-id", Some(&long))])).expect_err("long");
        assert!(e.contains("256 bytes"), "{e}");
        let pointer = DedupIdSource::Pointer("/id".into());
        for (value, expect) in [
            ("not json", "not JSON"),
            (r#"{"other": 1}"#, "no /id"),
            (r#"{"id": 1.5}"#, "not a 64-bit integer"),
            (r#"{"id": "a\u0000b"}"#, "NUL"),
            (r#"{"id": null}"#, "null"),
            (r#"{"id": {"a": 1}}"#, "an object"),
        ] {
            let e = read_id(&pointer, &record(value, &[])).expect_err(value);
            assert!(e.contains(expect), "{value}: {e}");
        }
        let mut tombstone = record("", &[]);
        tombstone.value = None;
        assert!(
            read_id(&pointer, &tombstone)
                .expect_err("tombstone")
                .contains("tombstone")
        );
    }

    #[test]
    fn the_first_copy_in_the_batch_is_kept() {
        let key = |input, id: &str| DedupKey {
            input,
            id: id.into(),
            timestamp: 0,
            topic: "t".into(),
            partition: 0,
            offset: input as i64,
        };
        let keys = [
            key(0, "a"),
            key(1, "b"),
            key(2, "a"),
            key(3, "c"),
            key(4, "b"),
        ];
        assert_eq!(duplicates(&keys, &HashSet::new()), vec![2, 4]);
        let stored: HashSet<String> = ["c".to_string()].into();
        assert_eq!(duplicates(&keys, &stored), vec![2, 3, 4]);
        // Ids compare exactly: case and trailing spaces make different ids.
        let keys = [key(0, "A"), key(1, "a"), key(2, "a ")];
        assert!(duplicates(&keys, &HashSet::new()).is_empty());
    }
}
