//! PostgreSQL's fastest way in: a run of inserts is one `COPY … FROM STDIN`, inside the
//! batch's transaction after the offsets' compare-and-set, so exactly-once is what it was
//! with `UNNEST`.
//!
//! The data travels in COPY's text format, not its binary one: PostgreSQL parses each
//! value with the input function of the column's real type, so a table made by hand with
//! other types than sluice's vocabulary (an `INTEGER` for a `bigint`, a `VARCHAR(40)` for
//! a `text`) takes the rows as it took them through `UNNEST`'s casts, and refuses the same
//! values with the same errors. Binary COPY would need each column's exact type.
//!
//! **Upserts are optimistic.** A batch's upserts are already one row per key, so when none
//! of their keys is in the table yet (a first load, a snapshot, new entities), inserting
//! them is exactly what `INSERT … ON CONFLICT` would do, and `COPY` does it at insert
//! speed. [`upsert_if_all_new`] takes a savepoint and `COPY`s the run straight into the
//! table; a key already there makes the key's unique index refuse it (23505), the run is
//! rolled back to the savepoint and written with `UNNEST … ON CONFLICT` (`write.rs`),
//! which is never put on a record. While runs keep meeting present keys, [`CopyIn`] skips
//! the attempt for longer and longer (up to [`MAX_SKIP`] runs), so a table of present
//! keys pays one wasted `COPY` in that many runs. Only where the key is the table's own
//! unique, immediately checked index (the arbiter `ON CONFLICT` names), so that a present
//! key can only end in 23505 and never in a second row. Versioned upserts take it too: a
//! row whose key is absent is written whatever its version, by either statement.
//!
//! Updates and deletes stay with `UNNEST`. A `COPY` into a session's staging table
//! followed by one `INSERT … SELECT … ON CONFLICT` was measured for upserts and was slower
//! than `UNNEST … ON CONFLICT` (222–228k rows/s against 244–256k, docs/performance.md), so
//! it is not kept.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};

use sqlx::{Executor, PgConnection};

use crate::config::ColumnType;
use crate::map::SqlValue;
use crate::sink::db::dialect::{Dialect, TableSpec, TimestampText};

/// COPY data is sent in pieces of about this size, so a large batch is not held twice.
const SEND_CHUNK: usize = 1 << 20;

/// Fewest rows of an upsert run that tries `COPY`: a shorter one saves less than the
/// savepoint's round trips cost. It also bounds the subtransactions of one batch's
/// transaction (each successful `COPY` is one, and PostgreSQL caches 64 per transaction
/// before other sessions' snapshots slow down): at most 50 with batches of 5,000.
pub(in crate::sink) const MIN_ROWS: usize = 100;

/// Most runs an upsert writes with `ON CONFLICT` before it tries `COPY` again.
pub(in crate::sink) const MAX_SKIP: u32 = 64;

/// The savepoint around an optimistic `COPY`.
const SAVEPOINT: &str = "sluice_optimistic_copy";

/// No `COPY` at all, to lend where a table has no [`CopyIn`] of its own (its counters are
/// never touched: it takes no upserts).
pub(in crate::sink) static NO_COPY: CopyIn = CopyIn::none();

/// How a table takes runs of rows through `COPY`: decided from the catalog when the table
/// is made ready, and, for upserts, what recent runs met.
#[derive(Debug, Default)]
pub struct CopyIn {
    /// Inserts go through `COPY`.
    pub(in crate::sink) inserts: bool,
    /// Upserts try `COPY` first: the key is the table's unique, immediate index.
    pub(in crate::sink) upserts: bool,
    /// Upsert runs still to write with `ON CONFLICT` before `COPY` is tried again.
    skip: AtomicU32,
    /// Optimistic `COPY`s in a row that met a present key.
    conflicts: AtomicU32,
}

impl CopyIn {
    /// No `COPY` at all (MySQL, SQLite, a table that does not take it).
    pub(in crate::sink) const fn none() -> CopyIn {
        CopyIn::new(false, false)
    }

    pub(in crate::sink) const fn new(inserts: bool, upserts: bool) -> Self {
        CopyIn {
            inserts,
            upserts,
            skip: AtomicU32::new(0),
            conflicts: AtomicU32::new(0),
        }
    }

    /// Whether this upsert run tries `COPY` (counts a skipped run down).
    pub(in crate::sink) fn try_upsert(&self) -> bool {
        self.upserts
            && self
                .skip
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_err()
    }

    /// An optimistic `COPY` wrote its run: the next run tries again.
    fn copied(&self) {
        self.conflicts.store(0, Ordering::Relaxed);
    }

    /// An optimistic `COPY` met a present key: skip the next 2, 4, … up to [`MAX_SKIP`]
    /// runs.
    fn conflicted(&self) {
        let conflicts = self
            .conflicts
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        let skip = 1u32
            .checked_shl(conflicts.min(31))
            .unwrap_or(MAX_SKIP)
            .min(MAX_SKIP);
        self.skip.store(skip, Ordering::Relaxed);
    }
}

/// Upserts `rows` (one per key) with one `COPY` when none of their keys is in the table:
/// true when it did; false, with nothing written, when a key was there (the caller writes
/// them with `ON CONFLICT`). Any other error is the statement's, as from an `INSERT`.
pub async fn upsert_if_all_new(
    conn: &mut PgConnection,
    table: &TableSpec,
    rows: &[&[SqlValue]],
    copy_in: &CopyIn,
) -> Result<bool, sqlx::Error> {
    conn.execute(sqlx::AssertSqlSafe(format!("SAVEPOINT {SAVEPOINT}")))
        .await?;
    match insert(conn, table, rows).await {
        Ok(()) => {
            conn.execute(sqlx::AssertSqlSafe(format!(
                "RELEASE SAVEPOINT {SAVEPOINT}"
            )))
            .await?;
            copy_in.copied();
            Ok(true)
        }
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
            conn.execute(sqlx::AssertSqlSafe(format!(
                "ROLLBACK TO SAVEPOINT {SAVEPOINT}"
            )))
            .await?;
            conn.execute(sqlx::AssertSqlSafe(format!(
                "RELEASE SAVEPOINT {SAVEPOINT}"
            )))
            .await?;
            copy_in.conflicted();
            tracing::debug!(table = %table.name, rows = rows.len(),
                "a key of the run is in the table already: written with ON CONFLICT");
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Inserts `rows` with one `COPY` into the table.
pub async fn insert(
    conn: &mut PgConnection,
    table: &TableSpec,
    rows: &[&[SqlValue]],
) -> Result<(), sqlx::Error> {
    let d = Dialect::Postgres;
    let all: Vec<usize> = (0..table.columns.len()).collect();
    let statement = format!(
        "COPY {} ({}) FROM STDIN",
        table.quoted(d),
        d.column_list(table, &all)
    );
    copy(conn, &statement, table, rows).await
}

/// Runs one `COPY … FROM STDIN` (text format) with `rows`.
async fn copy(
    conn: &mut PgConnection,
    statement: &str,
    table: &TableSpec,
    rows: &[&[SqlValue]],
) -> Result<(), sqlx::Error> {
    // Encoded before COPY starts: a value of the wrong kind (a bug upstream) fails the
    // batch without leaving the connection in the middle of a COPY.
    let mut pieces = Vec::new();
    let mut data = Vec::with_capacity(SEND_CHUNK.min(rows.len() * 64 + 64));
    for row in rows {
        for (n, (value, (_, column_type))) in row.iter().zip(&table.columns).enumerate() {
            if n > 0 {
                data.push(b'\t');
            }
            encode(&mut data, value, *column_type)?;
        }
        data.push(b'\n');
        if data.len() >= SEND_CHUNK {
            pieces.push(std::mem::replace(
                &mut data,
                Vec::with_capacity(SEND_CHUNK + 4096),
            ));
        }
    }
    pieces.push(data);
    let mut copy_in = conn.copy_in_raw(statement).await?;
    for piece in pieces {
        if let Err(e) = copy_in.send(piece).await {
            // The connection is in doubt; the transaction is rolled back by its owner.
            let _ = copy_in.abort("sluice: sending COPY data failed").await;
            return Err(e);
        }
    }
    copy_in.finish().await?;
    Ok(())
}

/// `io::Write`-free formatting into a byte buffer.
struct Out<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Out<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// Appends `value` in COPY's text format for a `column_type` column. The value kinds each
/// column type takes are those `UNNEST`'s arrays take (`write.rs`).
fn encode(out: &mut Vec<u8>, value: &SqlValue, column_type: ColumnType) -> Result<(), sqlx::Error> {
    use ColumnType::*;
    match (value, column_type) {
        (SqlValue::Null, _) => out.extend_from_slice(b"\\N"),
        // An integer field in a wider decimal column too.
        (SqlValue::Int(v), Smallint | Int | Bigint | Numeric | Decimal { .. }) => {
            let _ = write!(Out(out), "{v}");
        }
        // `{:e}` is the shortest text that reads back as the same double.
        (SqlValue::Double(v), Double) => {
            let _ = write!(Out(out), "{v:e}");
        }
        (SqlValue::Int(v), Double) => {
            let _ = write!(Out(out), "{:e}", *v as f64);
        }
        (SqlValue::Bool(v), Bool) => out.push(if *v { b't' } else { b'f' }),
        (SqlValue::Bytes(v), Bytes) => {
            // bytea's hex form, its backslash escaped for COPY.
            out.extend_from_slice(b"\\\\x");
            const HEX: &[u8; 16] = b"0123456789abcdef";
            for b in v {
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 15)]);
            }
        }
        (
            SqlValue::Text(v),
            Numeric | Decimal { .. } | Text | Date | Time | Json | Uuid | Array(_),
        ) => escape(out, v.as_bytes()),
        (SqlValue::Timestamp(t), Timestamp | Timestamptz) => {
            out.extend_from_slice(TimestampText::of(t).as_str().as_bytes());
            // A timestamptz is a UTC instant; without the offset PostgreSQL would read it
            // in the session's time zone.
            if column_type == Timestamptz {
                out.extend_from_slice(b"+00");
            }
        }
        _ => {
            return Err(sqlx::Error::Protocol(format!(
                "value {value:?} does not fit a {} column",
                column_type.name()
            )));
        }
    }
    Ok(())
}

/// Appends text with COPY's escapes: backslash, and the characters that end a field or a
/// row. A NUL stays as it is, and PostgreSQL refuses it as it refuses it in any text.
fn escape(out: &mut Vec<u8>, text: &[u8]) {
    if !text
        .iter()
        .any(|b| matches!(b, b'\\' | b'\t' | b'\n' | b'\r'))
    {
        out.extend_from_slice(text);
        return;
    }
    for &b in text {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            other => out.push(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(value: SqlValue, column_type: ColumnType) -> String {
        let mut out = Vec::new();
        encode(&mut out, &value, column_type).expect("encodes");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn values_take_copy_text_form() {
        assert_eq!(encoded(SqlValue::Null, ColumnType::Text), "\\N");
        assert_eq!(encoded(SqlValue::Int(-42), ColumnType::Bigint), "-42");
        assert_eq!(encoded(SqlValue::Bool(true), ColumnType::Bool), "t");
        assert_eq!(
            encoded(SqlValue::Bytes(vec![0, 0xab, 0x5c]), ColumnType::Bytes),
            "\\\\x00ab5c"
        );
        assert_eq!(
            encoded(SqlValue::Text("a\\b\tc\nd\re\\N".into()), ColumnType::Text),
            "a\\\\b\\tc\\nd\\re\\\\N"
        );
        let t = chrono::DateTime::from_timestamp_micros(1_700_000_000_123_456)
            .expect("ts")
            .naive_utc();
        assert_eq!(
            encoded(SqlValue::Timestamp(t), ColumnType::Timestamptz),
            "2023-11-14 22:13:20.123456+00"
        );
        assert_eq!(
            encoded(SqlValue::Timestamp(t), ColumnType::Timestamp),
            "2023-11-14 22:13:20.123456"
        );
    }

    #[test]
    fn doubles_read_back_exactly() {
        for v in [
            0.1,
            -0.0,
            1e300,
            -2.5e-308,
            f64::MAX,
            f64::MIN_POSITIVE,
            123456.789,
        ] {
            let text = encoded(SqlValue::Double(v), ColumnType::Double);
            assert_eq!(text.parse::<f64>().expect("parses"), v, "{text}");
        }
        assert_eq!(encoded(SqlValue::Int(3), ColumnType::Double), "3e0");
    }

    #[test]
    fn upserts_skip_copy_longer_while_runs_meet_present_keys() {
        let copy = CopyIn::new(false, true);
        assert!(copy.try_upsert(), "the first run tries COPY");
        let mut skipped = Vec::new();
        for _ in 0..8 {
            copy.conflicted();
            let mut n = 0;
            while !copy.try_upsert() {
                n += 1;
            }
            skipped.push(n);
        }
        assert_eq!(skipped, [2, 4, 8, 16, 32, 64, 64, 64]);
        copy.copied();
        copy.conflicted();
        assert!(!copy.try_upsert() && !copy.try_upsert() && copy.try_upsert());
        assert!(!CopyIn::new(true, false).try_upsert(), "no upserts by COPY");
    }

    #[test]
    fn a_value_of_the_wrong_kind_is_an_error() {
        let mut out = Vec::new();
        assert!(encode(&mut out, &SqlValue::Text("x".into()), ColumnType::Bigint).is_err());
        assert!(encode(&mut out, &SqlValue::Double(1.5), ColumnType::Int).is_err());
    }
}
