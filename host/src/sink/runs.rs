//! A batch's operations as runs: consecutive writes or deletes, each run written by one
//! bulk statement per chunk.

use std::collections::HashSet;

use super::db;
use super::dialect::{Dialect, TableSpec, timestamp_text};
use crate::config::ColumnType;
use crate::map::{RowOp, SqlValue};

/// A stretch of consecutive operations of one kind, written by one bulk statement (per
/// chunk).
#[derive(Debug, PartialEq)]
pub enum Run<'a> {
    /// Whole rows to insert, upsert or update.
    Write(Vec<&'a [SqlValue]>),
    /// Key values of rows to delete (with a version column, each followed by its version).
    Delete(Vec<&'a [SqlValue]>),
    /// Every row of the table, or with a version column every row older than this one.
    Truncate(Option<&'a SqlValue>),
    /// Rows that leave out columns the source did not send ([`SqlValue::Unavailable`],
    /// all in the same places): each updates the stored row's other columns, and fails
    /// alone when no row is stored (`sink/patch.rs`).
    Patch(Vec<&'a [SqlValue]>),
}

/// Whether two patches leave out the same columns.
fn same_gaps(a: &[SqlValue], b: &[SqlValue]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| matches!(x, SqlValue::Unavailable) == matches!(y, SqlValue::Unavailable))
}

/// Adds a patch to the runs: to the last run when that is a patch with the same gaps.
fn push_patch<'a>(runs: &mut Vec<Run<'a>>, row: &'a [SqlValue]) {
    match runs.last_mut() {
        Some(Run::Patch(rows)) if rows.first().is_some_and(|first| same_gaps(first, row)) => {
            rows.push(row)
        }
        _ => runs.push(Run::Patch(vec![row])),
    }
}

/// Splits operations into runs, keeping their order across kinds. With `dedupe` (upsert and
/// update on a table with a key), a run keeps only the last row for each key, and its rows
/// go in key order:
///
/// - Keys are compared in the form the database compares them ([`bound_key`]): a timestamp
///   as the microseconds it is bound with, JSON in PostgreSQL as `jsonb` equality sees it.
///   One statement cannot touch a row twice in PostgreSQL ("cannot affect row a second
///   time"), and the last write is what a sequence of upserts leaves anyway.
/// - Key order is the lock order: two transactions that write overlapping keys take their
///   row locks in the same order, so they queue instead of deadlocking each other.
pub(super) fn runs<'a>(
    ops: impl IntoIterator<Item = &'a RowOp>,
    table: &TableSpec,
    dialect: Dialect,
    dedupe: bool,
) -> Vec<Run<'a>> {
    if let Some(version) = table.version {
        return versioned_runs(ops, table, dialect, version);
    }
    let mut runs: Vec<Run<'a>> = Vec::new();
    for op in ops {
        match (op, runs.last_mut()) {
            // In order with the rest: a whole row before it is in place when it runs.
            (RowOp::Write(row), _) if SqlValue::is_patch(row) => push_patch(&mut runs, row),
            (RowOp::Write(row), Some(Run::Write(rows))) => rows.push(row),
            (RowOp::Write(row), _) => runs.push(Run::Write(vec![row])),
            (RowOp::Delete(k), Some(Run::Delete(keys))) => keys.push(k),
            (RowOp::Delete(k), _) => runs.push(Run::Delete(vec![k])),
            (RowOp::Truncate(version), _) => runs.push(Run::Truncate(version.as_ref())),
            (RowOp::Skip(_), _) => {}
        }
    }
    if dedupe && !table.key.is_empty() {
        let key_types: Vec<ColumnType> = table.key.iter().map(|&i| table.columns[i].1).collect();
        for run in &mut runs {
            match run {
                Run::Write(rows) => last_per_key_in_order(rows, dialect, |row| {
                    table
                        .key
                        .iter()
                        .zip(&key_types)
                        .map(|(&i, &t)| bound_key(dialect, t, &row[i]))
                        .collect()
                }),
                Run::Delete(keys) => last_per_key_in_order(keys, dialect, |k| {
                    k.iter()
                        .zip(&key_types)
                        .map(|(v, &t)| bound_key(dialect, t, v))
                        .collect()
                }),
                Run::Truncate(_) | Run::Patch(_) => {}
            }
        }
    }
    runs
}

/// The order rows are written in. MySQL and MariaDB may compare text keys more loosely
/// than exactly (a case-insensitive collation, trailing spaces ignored), and keep the last
/// of the rows they take for one key: keys that such a collation could take for one are
/// ordered as one, so that the stable sort leaves them in record order and the newest
/// record still comes last.
pub(super) fn order_key(dialect: Dialect, key: &[Bound]) -> Vec<Bound> {
    if !db::of(dialect).keys_compare_loosely {
        return key.to_vec();
    }
    key.iter()
        .map(|part| match part {
            Bound::Text(text) => Bound::Text(text.trim_end_matches(' ').to_lowercase()),
            other => other.clone(),
        })
        .collect()
}

/// A key value as the database compares it, with a total order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Bound {
    Null,
    Int(i64),
    /// A double's bits, mapped so that integer order is numeric order.
    Double(i64),
    Bool(bool),
    Text(String),
    Bytes(Vec<u8>),
}

/// The form in which `value` reaches a `column_type` column of `dialect`, for comparing
/// keys: what the database will see, not what the record held.
pub(super) fn bound_key(dialect: Dialect, column_type: ColumnType, value: &SqlValue) -> Bound {
    match value {
        // A key is never unavailable (the mapper refuses it); it compares as NULL.
        SqlValue::Null | SqlValue::Unavailable => Bound::Null,
        SqlValue::Int(v) => Bound::Int(*v),
        SqlValue::Double(v) => {
            let bits = v.to_bits() as i64;
            Bound::Double(bits ^ (((bits >> 63) as u64) >> 1) as i64)
        }
        SqlValue::Bool(v) => Bound::Bool(*v),
        // Bound as text with six fractional digits: nanoseconds are cut in every dialect.
        SqlValue::Timestamp(t) => Bound::Text(timestamp_text(t)),
        SqlValue::Text(s)
            if column_type == ColumnType::Json && db::of(dialect).json_compares_as_value =>
        {
            Bound::Text(
                serde_json::from_str::<serde_json::Value>(s)
                    .map(|v| canonical_json(&v))
                    .unwrap_or_else(|_| s.clone()),
            )
        }
        SqlValue::Text(s) => Bound::Text(s.clone()),
        SqlValue::Bytes(b) => Bound::Bytes(b.clone()),
    }
}

/// JSON as `jsonb` equality sees it: object keys sorted, numbers by value.
fn canonical_json(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let inner: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), canonical_json(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(canonical_json).collect();
            format!("[{}]", inner.join(","))
        }
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => (f as i64).to_string(),
            (_, _, Some(f)) => f.to_string(),
            _ => n.to_string(),
        },
        other => other.to_string(),
    }
}

/// The runs of a table with a version column: between two truncates, each key's operation
/// with the highest version (the later one on a tie: only a record met twice ties, its
/// offset being part of the version), deletes in one run and writes in another, each in
/// key order. The order of operations on one key no longer matters once each is
/// conditional on the version; what is left is the newest.
fn versioned_runs<'a>(
    ops: impl IntoIterator<Item = &'a RowOp>,
    table: &TableSpec,
    dialect: Dialect,
    version: usize,
) -> Vec<Run<'a>> {
    use std::collections::HashMap;
    let key_types: Vec<ColumnType> = table.key.iter().map(|&i| table.columns[i].1).collect();
    let key_of = |values: &[SqlValue], positions: &mut dyn Iterator<Item = usize>| -> Vec<Bound> {
        positions
            .zip(&key_types)
            .map(|(i, &t)| bound_key(dialect, t, &values[i]))
            .collect::<Vec<Bound>>()
    };
    let mut runs: Vec<Run<'a>> = Vec::new();
    // Per key: (its version, what the operation does, the values).
    type Newest<'a> = HashMap<Vec<Bound>, (&'a SqlValue, Kind, &'a [SqlValue])>;
    let flush = |newest: &mut Newest<'a>, runs: &mut Vec<Run<'a>>| {
        let mut entries: Vec<(Vec<Bound>, Kind, &'a [SqlValue])> = newest
            .drain()
            .map(|(key, (_, kind, values))| (key, kind, values))
            .collect();
        // Lock order: keys as a loose MySQL collation may compare them, then exactly. Keys
        // that such a collation takes for one stay two operations here: each is
        // conditional on the stored version, so whichever runs second changes the row
        // only if it is newer.
        entries.sort_by_cached_key(|e| (order_key(dialect, &e.0), e.0.clone()));
        let of = |kind: Kind| -> Vec<&'a [SqlValue]> {
            entries
                .iter()
                .filter(|e| e.1 == kind)
                .map(|e| e.2)
                .collect()
        };
        let (deletes, writes) = (of(Kind::Delete), of(Kind::Write));
        if !deletes.is_empty() {
            runs.push(Run::Delete(deletes));
        }
        if !writes.is_empty() {
            runs.push(Run::Write(writes));
        }
        // A patch keeps the stored values of the columns it leaves out: it runs after the
        // whole rows, each alone among its key's operations (see below).
        for patch in of(Kind::Patch) {
            push_patch(runs, patch);
        }
    };
    let mut newest: Newest<'a> = HashMap::new();
    for op in ops {
        let (key, at, kind, values) = match op {
            RowOp::Write(row) => (
                key_of(row, &mut table.key.iter().copied()),
                version,
                if SqlValue::is_patch(row) {
                    Kind::Patch
                } else {
                    Kind::Write
                },
                row,
            ),
            RowOp::Delete(values) => (
                key_of(values, &mut (0..table.key.len())),
                table.key.len(),
                Kind::Delete,
                values,
            ),
            RowOp::Truncate(bound) => {
                flush(&mut newest, &mut runs);
                runs.push(Run::Truncate(bound.as_ref()));
                continue;
            }
            RowOp::Skip(_) => continue,
        };
        let Some(stamp) = values.get(at) else {
            continue;
        };
        // A patch after another operation on its key cannot be folded into it (the newest
        // would win whole, and the columns the patch leaves out would lose the earlier
        // row's values): what came before is written first.
        if kind == Kind::Patch && newest.contains_key(&key) {
            flush(&mut newest, &mut runs);
        }
        match newest.get(&key) {
            Some((kept, _, _)) if version_text(kept) > version_text(stamp) => {}
            _ => {
                newest.insert(key, (stamp, kind, values.as_slice()));
            }
        }
    }
    flush(&mut newest, &mut runs);
    runs
}

/// What a versioned operation does to its key's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Delete,
    Write,
    /// A write that leaves out columns ([`Run::Patch`]).
    Patch,
}

/// A version as it compares: its text (NULL first).
fn version_text(value: &SqlValue) -> Option<&str> {
    match value {
        SqlValue::Text(text) => Some(text),
        _ => None,
    }
}

/// Keeps the last row of each key, and puts the rows in key order ([`order_key`]), rows
/// that order alike in record order.
fn last_per_key_in_order<'a>(
    rows: &mut Vec<&'a [SqlValue]>,
    dialect: Dialect,
    key_of: impl Fn(&'a [SqlValue]) -> Vec<Bound>,
) {
    let mut seen = HashSet::new();
    let mut kept: Vec<(Vec<Bound>, &'a [SqlValue])> = Vec::with_capacity(rows.len());
    for row in rows.iter().rev() {
        let key = key_of(row);
        if seen.insert(key.clone()) {
            kept.push((order_key(dialect, &key), row));
        }
    }
    // Back to record order, then a stable sort: ties keep it.
    kept.reverse();
    kept.sort_by(|a, b| a.0.cmp(&b.0));
    *rows = kept.into_iter().map(|(_, row)| row).collect();
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDateTime;

    use super::*;

    fn table(key_type: ColumnType) -> TableSpec {
        TableSpec {
            name: "t".into(),
            naming: Default::default(),
            columns: vec![("k".into(), key_type), ("v".into(), ColumnType::Text)],
            key: vec![0],
            version: None,
        }
    }

    fn w(k: i64, v: &str) -> RowOp {
        RowOp::Write(vec![SqlValue::Int(k), SqlValue::Text(v.into())])
    }

    fn values(run: &Run<'_>) -> Vec<SqlValue> {
        match run {
            Run::Write(rows) | Run::Delete(rows) | Run::Patch(rows) => {
                rows.iter().map(|r| r[r.len() - 1].clone()).collect()
            }
            Run::Truncate(_) => Vec::new(),
        }
    }

    #[test]
    fn runs_keep_the_last_write_per_key_in_key_order() {
        let ops = vec![
            w(1, "a"),
            w(2, "b"),
            w(1, "c"),
            RowOp::Delete(vec![SqlValue::Int(2)]),
            RowOp::Skip("x"),
            w(2, "d"),
        ];
        let runs = runs(&ops, &table(ColumnType::Bigint), Dialect::Postgres, true);
        assert_eq!(runs.len(), 3);
        assert_eq!(
            values(&runs[0]),
            [SqlValue::Text("c".into()), SqlValue::Text("b".into())]
        );
        assert!(matches!(&runs[1], Run::Delete(k) if k.len() == 1));
    }

    #[test]
    fn insert_mode_keeps_duplicates_in_record_order() {
        let ops = vec![w(2, "a"), w(1, "b"), w(2, "c")];
        let runs = runs(&ops, &table(ColumnType::Bigint), Dialect::Postgres, false);
        assert_eq!(values(&runs[0]).len(), 3);
        assert_eq!(values(&runs[0])[1], SqlValue::Text("b".into()));
    }

    #[test]
    fn key_order_is_numeric_for_numbers() {
        let ops: Vec<RowOp> = [10, -3, 2, 1_000_000]
            .iter()
            .map(|k| {
                RowOp::Write(vec![
                    SqlValue::Double(f64::from(*k)),
                    SqlValue::Text(k.to_string()),
                ])
            })
            .collect();
        let runs = runs(&ops, &table(ColumnType::Double), Dialect::MySql, true);
        assert_eq!(
            values(&runs[0]),
            ["-3", "2", "10", "1000000"].map(|v| SqlValue::Text(v.into()))
        );
    }

    #[test]
    fn timestamps_that_differ_below_microseconds_are_one_key() {
        let at = |nanos: &str| {
            SqlValue::Timestamp(
                NaiveDateTime::parse_from_str(
                    &format!("2024-05-01 10:00:00.123456{nanos}"),
                    "%Y-%m-%d %H:%M:%S%.f",
                )
                .expect("timestamp"),
            )
        };
        let ops = vec![
            RowOp::Write(vec![at("001"), SqlValue::Text("first".into())]),
            RowOp::Write(vec![at("999"), SqlValue::Text("second".into())]),
        ];
        for dialect in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
            let runs = runs(&ops, &table(ColumnType::Timestamptz), dialect, true);
            assert_eq!(
                values(&runs[0]),
                [SqlValue::Text("second".into())],
                "{dialect:?}"
            );
        }
    }

    #[test]
    fn mysql_keys_that_a_loose_collation_could_merge_stay_in_record_order() {
        let text = |k: &str, v: &str| {
            RowOp::Write(vec![SqlValue::Text(k.into()), SqlValue::Text(v.into())])
        };
        let ops = vec![text("a", "older"), text("b", "other"), text("A ", "newer")];
        let runs = runs(&ops, &table(ColumnType::Text), Dialect::MySql, true);
        // Both are written (they are two keys exactly), the newer one last: a
        // case-insensitive table keeps it.
        assert_eq!(
            values(&runs[0]),
            ["older", "newer", "other"].map(|v| SqlValue::Text(v.into()))
        );
    }

    #[test]
    fn json_keys_compare_as_jsonb_in_postgres_only() {
        let ops = vec![
            RowOp::Write(vec![
                SqlValue::Text(r#"{"a":1,"b":[1.0,"x"]}"#.into()),
                SqlValue::Text("first".into()),
            ]),
            RowOp::Write(vec![
                SqlValue::Text(r#"{"b":[1,"x"],"a":1}"#.into()),
                SqlValue::Text("second".into()),
            ]),
        ];
        let pg = runs(&ops, &table(ColumnType::Json), Dialect::Postgres, true);
        assert_eq!(values(&pg[0]), [SqlValue::Text("second".into())]);
        let sqlite = runs(&ops, &table(ColumnType::Json), Dialect::Sqlite, true);
        assert_eq!(values(&sqlite[0]).len(), 2);
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// A timestamp within a few microseconds of a fixed instant, with nanoseconds.
        fn timestamp() -> impl Strategy<Value = SqlValue> {
            (0u32..5, 0u32..1000).prop_map(|(micros, nanos)| {
                let base = chrono::DateTime::from_timestamp(1_700_000_000, micros * 1000 + nanos)
                    .expect("instant");
                SqlValue::Timestamp(base.naive_utc())
            })
        }

        /// The same small JSON objects with their keys in either order.
        fn json() -> impl Strategy<Value = SqlValue> {
            (0i64..3, any::<bool>()).prop_map(|(n, swap)| {
                SqlValue::Text(if swap {
                    format!(r#"{{"b":{n}.0,"a":[{n}]}}"#)
                } else {
                    format!(r#"{{"a":[{n}],"b":{n}}}"#)
                })
            })
        }

        fn check(keys: Vec<SqlValue>, key_type: ColumnType) -> Result<(), TestCaseError> {
            let ops: Vec<RowOp> = keys
                .into_iter()
                .enumerate()
                .map(|(i, k)| RowOp::Write(vec![k, SqlValue::Int(i as i64)]))
                .collect();
            let spec = TableSpec {
                name: "t".into(),
                naming: Default::default(),
                columns: vec![("k".into(), key_type), ("i".into(), ColumnType::Bigint)],
                key: vec![0],
                version: None,
            };
            for run in runs(&ops, &spec, Dialect::Postgres, true) {
                let Run::Write(rows) = run else { continue };
                let bound: Vec<Bound> = rows
                    .iter()
                    .map(|r| bound_key(Dialect::Postgres, key_type, &r[0]))
                    .collect();
                // Each key once (PostgreSQL refuses an upsert that touches a row twice)...
                let distinct: HashSet<&Bound> = bound.iter().collect();
                prop_assert_eq!(distinct.len(), rows.len());
                // ...in key order...
                prop_assert!(bound.windows(2).all(|w| w[0] < w[1]));
                // ...and each the last write of its key.
                for row in &rows {
                    let key = bound_key(Dialect::Postgres, key_type, &row[0]);
                    let last = ops.iter().rev().find_map(|op| match op {
                        RowOp::Write(r) if bound_key(Dialect::Postgres, key_type, &r[0]) == key => {
                            Some(r[1].clone())
                        }
                        _ => None,
                    });
                    prop_assert_eq!(Some(row[1].clone()), last);
                }
            }
            Ok(())
        }

        proptest! {
            #[test]
            fn timestamp_keys_are_unique_as_postgres_binds_them(keys in prop::collection::vec(timestamp(), 1..60)) {
                check(keys, ColumnType::Timestamptz)?;
            }

            #[test]
            fn json_keys_are_unique_as_jsonb_compares_them(keys in prop::collection::vec(json(), 1..30)) {
                check(keys, ColumnType::Json)?;
            }
        }
    }
}

#[cfg(test)]
mod versioned_tests {
    use super::*;

    fn table() -> TableSpec {
        TableSpec {
            name: "t".into(),
            naming: Default::default(),
            columns: vec![
                ("k".into(), ColumnType::Text),
                ("v".into(), ColumnType::Text),
                ("_version".into(), ColumnType::Text),
            ],
            key: vec![0],
            version: Some(2),
        }
    }

    fn text(s: &str) -> SqlValue {
        SqlValue::Text(s.into())
    }

    fn write(k: &str, v: &str, version: &str) -> RowOp {
        RowOp::Write(vec![text(k), text(v), text(version)])
    }

    fn delete(k: &str, version: &str) -> RowOp {
        RowOp::Delete(vec![text(k), text(version)])
    }

    fn patch(k: &str, version: &str) -> RowOp {
        RowOp::Write(vec![text(k), SqlValue::Unavailable, text(version)])
    }

    /// Whether any whole-row run holds a row that leaves out a column.
    fn patch_in_a_write(runs: &[Run<'_>]) -> bool {
        runs.iter().any(
            |r| matches!(r, Run::Write(rows) if rows.iter().any(|row| SqlValue::is_patch(row))),
        )
    }

    #[test]
    fn a_patch_runs_after_what_came_before_on_its_key_and_never_in_a_write() {
        // a: a whole row then a patch, which must not fold into one (the patch would win
        // whole and its left-out column lose "whole"); b: a patch alone.
        let ops = vec![write("a", "whole", "1"), patch("a", "2"), patch("b", "3")];
        let versioned = runs(&ops, &table(), Dialect::Postgres, true);
        assert!(!patch_in_a_write(&versioned), "{versioned:?}");
        assert!(
            matches!(&versioned[0], Run::Write(rows) if rows.len() == 1 && rows[0][1] == text("whole"))
        );
        assert!(
            matches!(&versioned[1], Run::Patch(rows) if rows.len() == 2),
            "{versioned:?}"
        );
        // Without a version: in record order, a patch its own run.
        let mut plain = table();
        plain.version = None;
        let ops = vec![
            RowOp::Write(vec![text("a"), text("whole"), text("1")]),
            RowOp::Write(vec![text("a"), SqlValue::Unavailable, text("2")]),
            RowOp::Write(vec![text("b"), text("x"), text("3")]),
        ];
        let ordered = runs(&ops, &plain, Dialect::MySql, true);
        assert!(!patch_in_a_write(&ordered), "{ordered:?}");
        assert_eq!(ordered.len(), 3, "{ordered:?}");
        assert!(matches!(&ordered[1], Run::Patch(_)));
    }

    #[test]
    fn the_newest_operation_per_key_is_kept_whatever_the_order() {
        let ops = vec![
            write("a", "new", "3"),
            write("a", "old", "1"),
            delete("b", "5"),
            write("b", "before the delete", "4"),
            write("c", "x", "1"),
            delete("c", "0"),
            // Another key ("A " and "a" may be one row under a loose MySQL collation, two
            // under sluice's binary one): both are written, each conditional.
            write("A ", "upper", "9"),
        ];
        let runs = runs(&ops, &table(), Dialect::Postgres, true);
        assert_eq!(
            runs,
            vec![
                Run::Delete(vec![&[text("b"), text("5")][..]]),
                Run::Write(vec![
                    &[text("A "), text("upper"), text("9")][..],
                    &[text("a"), text("new"), text("3")][..],
                    &[text("c"), text("x"), text("1")][..],
                ]),
            ]
        );
        let mysql = super::runs(&ops, &table(), Dialect::MySql, true);
        let Run::Write(rows) = &mysql[1] else {
            panic!("{mysql:?}")
        };
        // In the order the collation would lock them: "A " and "a" side by side.
        assert_eq!(rows[0], &[text("A "), text("upper"), text("9")][..]);
        assert_eq!(rows[1], &[text("a"), text("new"), text("3")][..]);
        assert_eq!(rows.len(), 3, "{rows:?}");
    }

    #[test]
    fn a_truncate_separates_what_comes_before_from_after() {
        let ops = vec![
            write("a", "1", "1"),
            RowOp::Truncate(Some(text("2"))),
            write("a", "2", "3"),
        ];
        let runs = runs(&ops, &table(), Dialect::Sqlite, true);
        assert_eq!(runs.len(), 3, "{runs:?}");
        assert_eq!(runs[1], Run::Truncate(Some(&text("2"))));
    }
}
