//! A record's version (`sink.version`): where it is read, and the text it is kept as.
//!
//! A version is a list of non-negative integers compared left to right: a Debezium
//! PostgreSQL event's `[lsn]`, a MySQL event's `[binlog file number, pos, row]`, an
//! integer or a date/timestamp (microseconds since the epoch) read by a pointer. The
//! record's offset is appended as the last part, so that of two records with one version
//! the later one in the partition wins, and a record replayed meets itself as equal.
//!
//! It is stored as text that sorts as the list does: each part as 20 decimal digits
//! (`u64::MAX` has 20), joined by `.`. Every database compares such text byte by byte in
//! the same order, whatever its collation: digits and `.` only, equal lengths for equal
//! shapes. The text stays readable (`00000000000023456789.00000000000000000042`).

use chrono::{NaiveDate, NaiveDateTime};
use serde_json::Value;

use super::JsonPointer;
use crate::config::Envelope;
use crate::record::Record;

/// Where a record's version is.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum VersionSource {
    /// A Debezium event's source position.
    Position,
    Offset,
    Timestamp,
    /// A pointer into the event (the value under `envelope: none`).
    Pointer(JsonPointer),
}

impl VersionSource {
    pub(super) fn parse(from: &str) -> Self {
        match from {
            "$position" => VersionSource::Position,
            "$offset" => VersionSource::Offset,
            "$timestamp" => VersionSource::Timestamp,
            pointer => VersionSource::Pointer(JsonPointer::new(pointer)),
        }
    }

    /// Where a delete's version is: a pointer into the row after the change (`/after/…`,
    /// OpenCDC's `/payload/after/…`) reads the row before it, which a delete has instead.
    pub(super) fn for_delete(&self) -> Option<VersionSource> {
        let VersionSource::Pointer(pointer) = self else {
            return None;
        };
        ["/after/", "/payload/after/"].iter().find_map(|after| {
            let rest = pointer.text.strip_prefix(after)?;
            let before = after.replace("after", "before");
            Some(VersionSource::Pointer(JsonPointer::new(&format!(
                "{before}{rest}"
            ))))
        })
    }

    /// The version of `record`, whose value (the event) is `event`: `None` for a
    /// tombstone. `Err` says why the record has none.
    pub(super) fn read(
        &self,
        record: &Record,
        event: Option<&Value>,
        envelope: Envelope,
    ) -> Result<String, String> {
        let VersionSource::Pointer(pointer) = self else {
            return with_offset(self, record, || {
                let event = event.ok_or("a tombstone carries no source position")?;
                debezium_position(event, envelope)
            });
        };
        let event = event.ok_or_else(|| {
            format!(
                "a tombstone has no value to read the version {} from: use $offset or $timestamp",
                pointer.text
            )
        })?;
        let found = pointer
            .find(event)
            .filter(|v| !v.is_null())
            .ok_or_else(|| format!("no version at {}", pointer.text))?;
        let part =
            scalar(found).map_err(|why| format!("the version at {}: {why}", pointer.text))?;
        let offset = u64::try_from(record.offset).map_err(|_| "a negative offset".to_string())?;
        Ok(encode(&[part, offset]))
    }
}

/// The parts as stored text.
pub fn encode(parts: &[u64]) -> String {
    let mut text = String::with_capacity(parts.len() * 21);
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            text.push('.');
        }
        // 20 digits, zero-padded, written without the formatter (a version per record).
        let mut digits = [b'0'; 20];
        let mut rest = *part;
        for slot in digits.iter_mut().rev() {
            *slot = b'0' + (rest % 10) as u8;
            rest /= 10;
        }
        text.extend(digits.iter().map(|&d| char::from(d)));
    }
    text
}

/// A Debezium event's source position (`source`): PostgreSQL `[lsn]`; MySQL and MariaDB
/// `[file number, pos, row]`; any other connector `[ts_ms]`.
fn debezium_position(event: &Value, envelope: Envelope) -> Result<Vec<u64>, String> {
    if envelope != Envelope::Debezium {
        return Err("$position needs envelope: debezium".into());
    }
    let source = event
        .get("source")
        .filter(|s| s.is_object())
        .ok_or("the change event has no source block to read its position from")?;
    position(&|name| source.get(name), event.get("ts_ms"))
}

/// The position of a `source` block whose fields `field` finds; `event_ts` the event's own
/// `ts_ms`, for connectors whose source has none.
pub(super) fn position<'v>(
    field: &dyn Fn(&str) -> Option<&'v Value>,
    event_ts: Option<&'v Value>,
) -> Result<Vec<u64>, String> {
    let present = |name: &str| field(name).filter(|v| !v.is_null());
    let number = |name: &str| -> Result<u64, String> {
        let value =
            present(name).ok_or_else(|| format!("the change event's source has no {name}"))?;
        scalar(value).map_err(|why| format!("source.{name}: {why}"))
    };
    match field("connector").and_then(Value::as_str) {
        Some("postgresql") => postgres_position(field, &number),
        Some("mysql" | "mariadb") => {
            let file = field("file")
                .and_then(Value::as_str)
                .ok_or("the change event's source has no binlog file")?;
            let sequence = file
                .rsplit('.')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .ok_or_else(|| {
                    format!("source.file {file:?} does not end in a binlog file number")
                })?;
            let row = match present("row") {
                None => 0,
                Some(_) => number("row")?,
            };
            Ok(vec![sequence, number("pos")?, row])
        }
        _ => match present("ts_ms") {
            Some(_) => Ok(vec![number("ts_ms")?]),
            None => {
                let ts = event_ts
                    .filter(|v| !v.is_null())
                    .ok_or("the change event has neither source.ts_ms nor ts_ms")?;
                Ok(vec![scalar(ts).map_err(|why| format!("ts_ms: {why}"))?])
            }
        },
    }
}

/// A PostgreSQL event's position, `[phase, last commit, lsn]`:
///
/// - `lsn` alone is not in commit order at the snapshot's edge: a transaction that changed
///   a row before the snapshot was taken but committed after it is streamed with an `lsn`
///   below the snapshot's. So snapshot records (`source.snapshot` other than `false`:
///   `first`, `true`, `last`, `incremental`, …) come first (phase 0): they never overwrite
///   what streaming wrote, and they fill rows that streaming has not written. An
///   incremental snapshot's records have no `lsn` (0).
/// - Streamed records (phase 1) go by `source.sequence`'s first element, the commit
///   position of the transaction before theirs (transactions stream in commit order), then
///   by `lsn` within the transaction; without `sequence` (older Debezium), by `lsn`.
fn postgres_position<'v>(
    field: &dyn Fn(&str) -> Option<&'v Value>,
    number: &dyn Fn(&str) -> Result<u64, String>,
) -> Result<Vec<u64>, String> {
    let snapshot = match field("snapshot") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(s)) => s != "false",
        Some(_) => true,
    };
    if snapshot {
        let lsn = match field("lsn").filter(|v| !v.is_null()) {
            Some(_) => number("lsn")?,
            None => 0,
        };
        return Ok(vec![0, 0, lsn]);
    }
    let last_commit = match field("sequence").and_then(Value::as_str) {
        None => 0,
        Some(text) => {
            let parts: Vec<Option<String>> = serde_json::from_str(text).map_err(|_| {
                format!("source.sequence {text:?} is not a JSON list of two positions")
            })?;
            match parts.first().cloned().flatten() {
                None => 0,
                Some(commit) => commit.parse::<u64>().map_err(|_| {
                    format!("source.sequence {text:?}: {commit:?} is not a position")
                })?,
            }
        }
    };
    Ok(vec![1, last_commit, number("lsn")?])
}

/// [`VersionSource::read`] with the event's source position already read (by the mapper's
/// borrowed reading of a JSON event): the record's offset appended.
pub(super) fn with_offset(
    source: &VersionSource,
    record: &Record,
    position: impl FnOnce() -> Result<Vec<u64>, String>,
) -> Result<String, String> {
    let offset = u64::try_from(record.offset).map_err(|_| "a negative offset".to_string())?;
    let mut parts = match source {
        VersionSource::Offset => return Ok(encode(&[offset])),
        VersionSource::Timestamp => {
            let at = record
                .timestamp
                .ok_or("the record has no timestamp ($timestamp)")?;
            vec![non_negative(at, "$timestamp")?]
        }
        VersionSource::Position => position()?,
        VersionSource::Pointer(pointer) => {
            return Err(format!("{} needs the whole event", pointer.text));
        }
    };
    parts.push(offset);
    Ok(encode(&parts))
}

/// A version part: a non-negative integer (a number, or digits in a string), or a date or
/// timestamp (microseconds since the epoch).
fn scalar(value: &Value) -> Result<u64, String> {
    match value {
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Ok(u),
            (None, Some(_)) => Err("is negative".into()),
            _ => Err(format!("{n} is not an integer")),
        },
        Value::String(text) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => text
            .parse::<u64>()
            .map_err(|_| format!("{text} is larger than 2^64")),
        Value::String(text) => {
            let micros = timestamp_micros(text)
                .ok_or_else(|| format!("{text:?} is neither an integer nor a timestamp"))?;
            non_negative(micros, "the timestamp")
        }
        other => Err(format!("{other} is neither an integer nor a timestamp")),
    }
}

fn non_negative(value: i64, what: &str) -> Result<u64, String> {
    u64::try_from(value)
        .map_err(|_| format!("{what} is before 1970: a version must not be negative"))
}

/// A date, a wall-clock timestamp (`YYYY-MM-DD HH:MM:SS[.f]`, `T` too) or an RFC 3339
/// instant, as microseconds since the epoch (UTC).
fn timestamp_micros(text: &str) -> Option<i64> {
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(text) {
        return Some(at.timestamp_micros());
    }
    for pattern in ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"] {
        if let Ok(at) = NaiveDateTime::parse_from_str(text, pattern) {
            return Some(at.and_utc().timestamp_micros());
        }
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|at| at.and_utc().timestamp_micros())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(offset: i64) -> Record {
        Record {
            topic: "t".into(),
            partition: 0,
            offset,
            timestamp: Some(1_700_000_000_000),
            key: None,
            value: Some(b"{}".to_vec()),
            headers: Vec::new(),
        }
    }

    #[test]
    fn text_sorts_as_the_parts_do() {
        let pairs = [
            (vec![1, 5], vec![2, 0]),
            (vec![9, 99], vec![10, 0]),
            (vec![3, u64::MAX], vec![4, 0]),
            (vec![0, 1], vec![0, 2]),
        ];
        for (a, b) in pairs {
            assert!(encode(&a) < encode(&b), "{a:?} < {b:?}");
        }
        assert_eq!(encode(&[42]), "00000000000000000042");
        assert_eq!(encode(&[u64::MAX, 0]), format!("{}.{:020}", u64::MAX, 0));
    }

    #[test]
    fn postgres_lsn_then_offset() {
        let at = |source: Value| {
            VersionSource::Position
                .read(
                    &record(7),
                    Some(&json!({"source": source, "op": "u"})),
                    Envelope::Debezium,
                )
                .unwrap()
        };
        let v = at(json!({"connector": "postgresql", "lsn": 24023128}));
        assert_eq!(v, encode(&[1, 0, 24023128, 7]));
        // Commit order: a transaction committed later, with a lower lsn, is newer.
        let earlier =
            at(json!({"connector": "postgresql", "lsn": 500, "sequence": "[\"100\",\"500\"]"}));
        let later =
            at(json!({"connector": "postgresql", "lsn": 400, "sequence": "[\"600\",\"400\"]"}));
        assert!(earlier < later);
        // Snapshot records come before every streamed one, whatever their lsn.
        let snapshot = at(json!({"connector": "postgresql", "lsn": 900, "snapshot": "last"}));
        let streamed = at(
            json!({"connector": "postgresql", "lsn": 400, "snapshot": "false", "sequence": "[null,\"400\"]"}),
        );
        assert!(snapshot < streamed);
        let incremental = at(json!({"connector": "postgresql", "snapshot": "incremental"}));
        assert_eq!(incremental, encode(&[0, 0, 0, 7]));
        let broken = json!({"source": {"connector": "postgresql", "lsn": 1, "sequence": "nope"}});
        assert!(
            VersionSource::Position
                .read(&record(7), Some(&broken), Envelope::Debezium)
                .is_err()
        );
    }

    #[test]
    fn mysql_file_number_comes_first() {
        let at = |file: &str, pos: u64, row: u64| {
            let event =
                json!({"source": {"connector": "mysql", "file": file, "pos": pos, "row": row}});
            VersionSource::Position
                .read(&record(1), Some(&event), Envelope::Debezium)
                .unwrap()
        };
        // A rotated binlog starts at a low pos again: the file number decides.
        assert!(at("mysql-bin.000003", 99_999, 0) < at("mysql-bin.000004", 154, 0));
        assert!(at("mysql-bin.000003", 154, 0) < at("mysql-bin.000003", 154, 1));
        let bad = json!({"source": {"connector": "mysql", "file": "binlog", "pos": 1}});
        assert!(
            VersionSource::Position
                .read(&record(1), Some(&bad), Envelope::Debezium)
                .is_err()
        );
    }

    #[test]
    fn other_connectors_use_ts_ms() {
        let event = json!({"source": {"connector": "sqlserver", "ts_ms": 1000}, "ts_ms": 2000});
        let v = VersionSource::Position
            .read(&record(3), Some(&event), Envelope::Debezium)
            .unwrap();
        assert!(v.starts_with(&encode(&[1000])));
        let none = json!({"source": {"connector": "oracle"}});
        assert!(
            VersionSource::Position
                .read(&record(3), Some(&none), Envelope::Debezium)
                .is_err()
        );
        assert!(
            VersionSource::Position
                .read(&record(3), None, Envelope::Debezium)
                .is_err()
        );
    }

    #[test]
    fn pointers_take_integers_and_timestamps() {
        let src = VersionSource::parse("/after/updated_at");
        let at = |v: Value| {
            src.read(
                &record(0),
                Some(&json!({"after": {"updated_at": v}})),
                Envelope::Debezium,
            )
        };
        assert!(
            at(json!("2024-01-02 03:04:05.000001")).unwrap()
                > at(json!("2024-01-02 03:04:05")).unwrap()
        );
        assert!(at(json!("2024-01-02T03:04:05Z")).is_ok());
        assert!(at(json!("2024-01-02")).is_ok());
        assert!(at(json!(17)).is_ok());
        assert!(at(json!("17")).is_ok());
        assert!(at(json!(-1)).unwrap_err().contains("negative"));
        assert!(at(json!(1.5)).is_err());
        assert!(at(json!("soon")).is_err());
        assert!(at(json!(null)).unwrap_err().contains("no version"));
        assert!(
            src.read(&record(0), None, Envelope::None)
                .unwrap_err()
                .contains("tombstone")
        );
    }

    #[test]
    fn offset_and_timestamp() {
        assert_eq!(
            VersionSource::Offset
                .read(&record(5), None, Envelope::None)
                .unwrap(),
            encode(&[5])
        );
        let v = VersionSource::Timestamp
            .read(&record(5), None, Envelope::None)
            .unwrap();
        assert_eq!(
            v,
            format!("{}.{}", encode(&[1_700_000_000_000]), encode(&[5]))
        );
    }
}
