//! A batch's operations as runs: consecutive writes or deletes, each run written by one
//! bulk statement per chunk.

use std::collections::HashSet;

use crate::map::{RowOp, SqlValue};

/// A stretch of consecutive operations of one kind, written by one bulk statement (per
/// chunk).
#[derive(Debug, PartialEq)]
pub enum Run<'a> {
    /// Whole rows to insert, upsert or update.
    Write(Vec<&'a [SqlValue]>),
    /// Key values of rows to delete.
    Delete(Vec<&'a [SqlValue]>),
}

/// Splits operations into runs, keeping their order across kinds. With `dedupe` (upsert and
/// update), a run keeps only the last row for each key: one statement cannot touch a row
/// twice in PostgreSQL, and the last write is what a sequence of upserts leaves anyway.
pub(super) fn runs<'a>(ops: &'a [RowOp], key: &[usize], dedupe: bool) -> Vec<Run<'a>> {
    let mut runs: Vec<Run<'a>> = Vec::new();
    for op in ops {
        match (op, runs.last_mut()) {
            (RowOp::Write(row), Some(Run::Write(rows))) => rows.push(row),
            (RowOp::Write(row), _) => runs.push(Run::Write(vec![row])),
            (RowOp::Delete(k), Some(Run::Delete(keys))) => keys.push(k),
            (RowOp::Delete(k), _) => runs.push(Run::Delete(vec![k])),
            (RowOp::Skip(_), _) => {}
        }
    }
    if dedupe && !key.is_empty() {
        for run in &mut runs {
            match run {
                Run::Write(rows) => keep_last(rows, |row| key.iter().map(|&i| &row[i]).collect()),
                Run::Delete(keys) => keep_last(keys, |k| k.iter().collect()),
            }
        }
    }
    runs
}

fn keep_last<'a>(
    rows: &mut Vec<&'a [SqlValue]>,
    key_of: impl Fn(&'a [SqlValue]) -> Vec<&'a SqlValue>,
) {
    let mut seen = HashSet::new();
    let mut kept: Vec<&'a [SqlValue]> = rows
        .iter()
        .rev()
        .filter(|row| seen.insert(format!("{:?}", key_of(row))))
        .copied()
        .collect();
    kept.reverse();
    *rows = kept;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(k: i64, v: &str) -> RowOp {
        RowOp::Write(vec![SqlValue::Int(k), SqlValue::Text(v.into())])
    }

    #[test]
    fn runs_keep_order_and_last_write_per_key() {
        let ops = vec![
            w(1, "a"),
            w(2, "b"),
            w(1, "c"),
            RowOp::Delete(vec![SqlValue::Int(2)]),
            RowOp::Skip("x"),
            w(2, "d"),
        ];
        let runs = runs(&ops, &[0], true);
        assert_eq!(runs.len(), 3);
        let Run::Write(first) = &runs[0] else {
            panic!()
        };
        assert_eq!(first.len(), 2);
        assert_eq!(first[0][1], SqlValue::Text("b".into()));
        assert_eq!(first[1][1], SqlValue::Text("c".into()));
        assert!(matches!(&runs[1], Run::Delete(k) if k.len() == 1));
    }

    #[test]
    fn insert_mode_keeps_duplicates() {
        let ops = vec![w(1, "a"), w(1, "b")];
        let Run::Write(rows) = &runs(&ops, &[0], false)[0] else {
            panic!()
        };
        assert_eq!(rows.len(), 2);
    }
}
