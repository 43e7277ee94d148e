//! What a verify found ([`Report`]): the folded ranges, the counts, and the keys that are
//! missing, extra or differing, sorted from the snapshot's two `EXCEPT`s; as JSON and as
//! text for people.

use std::collections::HashSet;

use serde_json::{Value, json};

use crate::sink::verify::{Compared, Snapshot};

/// One partition's part of the log that was folded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Range {
    pub topic: String,
    pub partition: i32,
    /// The first offset read: the log's first, or the stored offset when the log starts
    /// after it.
    pub from: i64,
    /// The stored offset: the first offset not read.
    pub to: i64,
}

/// What a verify found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub connector: String,
    pub table: String,
    /// The key's columns, in the order keys are shown.
    pub key: Vec<String>,
    /// The columns compared.
    pub columns: Vec<String>,
    /// What was folded, per partition.
    pub ranges: Vec<Range>,
    /// Records read and folded.
    pub records: u64,
    /// Records that failed on the connector's path (left out, as its error policy left them
    /// out of the table).
    pub failed: u64,
    /// Rows of the table, and of the fold.
    pub table_rows: i64,
    pub folded_rows: i64,
    /// Keys the fold holds and the table does not.
    pub missing: Vec<Vec<Option<String>>>,
    /// Keys the table holds and the fold does not (only from a whole log).
    pub extra: Vec<Vec<Option<String>>>,
    /// Keys both hold, with different values.
    pub differing: Vec<Vec<Option<String>>>,
}

impl Report {
    /// Every partition was read from offset 0: extra rows are proven too.
    pub fn whole(&self) -> bool {
        self.ranges.iter().all(|r| r.from == 0)
    }

    /// From a whole log, the table and the fold hold a different number of rows although
    /// no key is apart: a row repeated on one side (a table whose key is not unique).
    pub fn counts_differ(&self) -> bool {
        self.whole()
            && self.table_rows != self.folded_rows
            && self.missing.is_empty()
            && self.extra.is_empty()
            && self.differing.is_empty()
    }

    /// No difference found.
    pub fn equal(&self) -> bool {
        self.missing.is_empty()
            && self.extra.is_empty()
            && self.differing.is_empty()
            && !self.counts_differ()
    }

    /// The whole answer, every key listed.
    pub fn to_json(&self) -> Value {
        let keys = |keys: &[Vec<Option<String>>]| -> Vec<Value> {
            keys.iter()
                .map(|key| {
                    Value::Object(
                        self.key
                            .iter()
                            .zip(key)
                            .map(|(name, value)| (name.clone(), json!(value)))
                            .collect(),
                    )
                })
                .collect()
        };
        json!({
            "connector": self.connector,
            "table": self.table,
            "key": self.key,
            "columns": self.columns,
            "equal": self.equal(),
            "whole_log": self.whole(),
            "ranges": self.ranges.iter().map(|r| json!({
                "topic": r.topic, "partition": r.partition, "from": r.from, "to": r.to,
            })).collect::<Vec<_>>(),
            "records": self.records,
            "failed_records": self.failed,
            "table_rows": self.table_rows,
            "folded_rows": self.folded_rows,
            "counts_differ": self.counts_differ(),
            "missing": keys(&self.missing),
            "extra": keys(&self.extra),
            "differing": keys(&self.differing),
        })
    }

    /// The answer for a person: a summary, then the first `shown` keys of each kind.
    pub fn text(&self, shown: usize) -> String {
        let mut out = String::new();
        let key = |key: &Vec<Option<String>>| -> String {
            self.key
                .iter()
                .zip(key)
                .map(|(n, v)| format!("{n}={}", v.as_deref().unwrap_or("NULL")))
                .collect::<Vec<_>>()
                .join(" ")
        };
        out.push_str(&format!(
            "connector {}: table {} ({} rows) against {} record(s) of its log ({} row(s) folded, {} record(s) failed on the way and were left out)\n",
            self.connector, self.table, self.table_rows, self.records, self.folded_rows, self.failed
        ));
        for range in self.ranges.iter().filter(|r| r.from > 0) {
            out.push_str(&format!(
                "  {}/{} read from offset {} (the log no longer holds what came before) to {}\n",
                range.topic, range.partition, range.from, range.to
            ));
        }
        if !self.whole() {
            out.push_str("  the log does not start at 0 everywhere: the keys its records write are checked; rows only the table holds are not\n");
        }
        for (label, keys) in [
            ("missing", &self.missing),
            ("extra", &self.extra),
            ("differing", &self.differing),
        ] {
            if keys.is_empty() {
                continue;
            }
            out.push_str(&format!("{label}: {} row(s)\n", keys.len()));
            for k in keys.iter().take(shown) {
                out.push_str(&format!("  {}\n", key(k)));
            }
            if keys.len() > shown {
                out.push_str(&format!(
                    "  … and {} more (--format json lists all)\n",
                    keys.len() - shown
                ));
            }
        }
        if self.counts_differ() {
            out.push_str(&format!(
                "rows: the table holds {} and the fold {}: a row is repeated on one side (its key is not unique there)\n",
                self.table_rows, self.folded_rows
            ));
        }
        out.push_str(if self.equal() {
            "equal: the table holds what the log says\n"
        } else {
            "DIFFERENT: the table does not hold what the log says\n"
        });
        out
    }
}

/// The snapshot's differences sorted into missing, extra and differing keys, with the
/// fold's (records, failed records).
pub(super) fn report(
    connector: &str,
    compared: &Compared,
    ranges: Vec<Range>,
    (records, failed): (u64, u64),
    snapshot: Snapshot,
) -> Report {
    let table_keys: HashSet<&Vec<Option<String>>> = snapshot.table_only.iter().collect();
    let folded_keys: HashSet<&Vec<Option<String>>> = snapshot.folded_only.iter().collect();
    let whole = ranges.iter().all(|r| r.from == 0);
    let differing: Vec<_> = snapshot
        .folded_only
        .iter()
        .filter(|k| table_keys.contains(k))
        .cloned()
        .collect();
    let missing: Vec<_> = snapshot
        .folded_only
        .iter()
        .filter(|k| !table_keys.contains(k))
        .cloned()
        .collect();
    let extra: Vec<_> = if whole {
        snapshot
            .table_only
            .iter()
            .filter(|k| !folded_keys.contains(k))
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    Report {
        connector: connector.to_string(),
        table: compared.table.clone(),
        key: compared.key_names(),
        columns: compared.columns.clone(),
        ranges,
        records,
        failed,
        table_rows: snapshot.table_rows,
        folded_rows: snapshot.folded_rows,
        missing,
        extra,
        differing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> Vec<Option<String>> {
        vec![Some(id.to_string())]
    }

    fn compared() -> Compared {
        Compared {
            table: "orders".into(),
            columns: vec!["id".into(), "name".into()],
            key: vec![0],
        }
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            offsets: vec![("t".into(), 0, 10)],
            table_rows: 3,
            folded_rows: 3,
            // 1 differs, 99 is the table's alone.
            table_only: vec![key("1"), key("99")],
            // 1 differs, 3 is the fold's alone.
            folded_only: vec![key("1"), key("3")],
        }
    }

    fn range(from: i64) -> Range {
        Range {
            topic: "t".into(),
            partition: 0,
            from,
            to: 10,
        }
    }

    #[test]
    fn a_whole_log_sorts_keys_into_missing_extra_and_differing() {
        let report = report("c", &compared(), vec![range(0)], (10, 1), snapshot());
        assert!(report.whole() && !report.equal());
        assert_eq!(report.differing, vec![key("1")]);
        assert_eq!(report.missing, vec![key("3")]);
        assert_eq!(report.extra, vec![key("99")]);
        let json = report.to_json();
        assert_eq!(json["extra"], json!([{"id": "99"}]));
        assert_eq!(json["failed_records"], 1);
        let text = report.text(5);
        assert!(text.contains("extra: 1 row(s)\n  id=99\n"), "{text}");
        assert!(text.ends_with("DIFFERENT: the table does not hold what the log says\n"));
    }

    #[test]
    fn a_log_that_lost_its_start_proves_no_extra_row() {
        let report = report("c", &compared(), vec![range(4)], (6, 0), snapshot());
        assert!(!report.whole());
        assert_eq!(report.differing, vec![key("1")]);
        assert_eq!(report.missing, vec![key("3")]);
        assert!(report.extra.is_empty());
        let text = report.text(5);
        assert!(text.contains("t/0 read from offset 4"), "{text}");
        assert!(text.contains("rows only the table holds are not"), "{text}");
    }

    #[test]
    fn a_row_repeated_on_one_side_of_a_whole_log_is_a_difference() {
        let mut repeated = snapshot();
        repeated.table_only.clear();
        repeated.folded_only.clear();
        repeated.table_rows = 4;
        let whole = report("c", &compared(), vec![range(0)], (10, 0), repeated.clone());
        assert!(whole.counts_differ() && !whole.equal());
        assert!(whole.text(5).contains("the table holds 4 and the fold 3"));
        // From a log that lost its start the counts prove nothing.
        let partial = report("c", &compared(), vec![range(4)], (6, 0), repeated);
        assert!(partial.equal());
    }

    #[test]
    fn the_text_lists_the_first_keys_and_says_how_many_more() {
        let mut snapshot = snapshot();
        snapshot.folded_only = (0..30).map(|i| key(&format!("k{i}"))).collect();
        snapshot.table_only.clear();
        let report = report("c", &compared(), vec![range(0)], (30, 0), snapshot);
        let text = report.text(2);
        assert!(
            text.contains("missing: 30 row(s)\n  id=k0\n  id=k1\n  … and 28 more"),
            "{text}"
        );
        assert_eq!(
            report.to_json()["missing"].as_array().map(Vec::len),
            Some(30)
        );
    }
}
