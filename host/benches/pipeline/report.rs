//! One line of the table per run, and the table as printed.

use serde::Serialize;

use std::time::Duration;

/// One line of the table.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Figure {
    pub(crate) name: String,
    /// `sluice`, `baseline` or `restart`.
    pub(crate) kind: &'static str,
    pub(crate) records: u64,
    /// Rows in the table at the end (sluice, COPY, per-row insert) or records read (drain).
    pub(crate) rows: u64,
    /// Records that never arrived (see the module's note on the broker).
    pub(crate) holes: u64,
    pub(crate) seconds: f64,
    pub(crate) rows_per_s: f64,
    /// The rate from the commit that passed a quarter of the records to the last one:
    /// without the start and an early rebalance (a second task joining).
    pub(crate) rows_per_s_after_quarter: Option<f64>,
    /// The rate from the group's last assignment (every task holding its partitions) to
    /// the last commit: without the join of a group of several members, which the test
    /// broker answers a member at a time, 3 s apart (docs/performance.md).
    pub(crate) rows_per_s_settled: Option<f64>,
    /// rows_per_s / COPY's (PostgreSQL, same table with its primary key, same run).
    pub(crate) ratio_to_copy: Option<f64>,
    /// rows_per_s / the bare librdkafka drain's records/s (same run): how close sluice
    /// comes to the source's pace.
    pub(crate) ratio_to_drain: Option<f64>,
    /// CPU seconds (user + system) of the sluice process per million rows.
    pub(crate) cpu_s_per_million: Option<f64>,
    /// The share of that CPU spent on the tasks' transform threads.
    pub(crate) transform_cpu_share: Option<f64>,
    pub(crate) peak_rss_mb: Option<f64>,
    /// RSS when a quarter, half, three quarters and all of the records had committed:
    /// flat or growing.
    pub(crate) rss_mb_at_quarters: Vec<f64>,
    pub(crate) note: String,
}

impl Figure {
    pub(crate) fn baseline(
        name: &str,
        records: u64,
        rows: u64,
        elapsed: Duration,
        note: &str,
    ) -> Figure {
        Figure {
            name: name.to_string(),
            kind: "baseline",
            records,
            rows,
            holes: records.saturating_sub(rows),
            seconds: elapsed.as_secs_f64(),
            rows_per_s: rows as f64 / elapsed.as_secs_f64().max(1e-9),
            ratio_to_copy: None,
            ratio_to_drain: None,
            cpu_s_per_million: None,
            transform_cpu_share: None,
            peak_rss_mb: None,
            rows_per_s_after_quarter: None,
            rows_per_s_settled: None,
            rss_mb_at_quarters: Vec::new(),
            note: note.to_string(),
        }
    }
}

pub(crate) fn print_table(figures: &[Figure]) {
    println!(
        "\n{:<70} {:>8} {:>8} {:>8} {:>6} {:>7} {:>8} {:>7} {:>16} {:>6} {:>7}",
        "run",
        "rows/s",
        ">25%",
        "settled",
        "×COPY",
        "×drain",
        "CPU s/M",
        "xform%",
        "RSS MB ¼ ½ ¾ 1",
        "holes",
        "seconds"
    );
    for f in figures {
        let opt = |v: Option<f64>, digits: usize| {
            v.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
        };
        let rate = if f.kind == "restart" {
            "-".to_string()
        } else {
            format!("{:.0}", f.rows_per_s)
        };
        let rss = if f.rss_mb_at_quarters.is_empty() {
            opt(f.peak_rss_mb, 0)
        } else {
            f.rss_mb_at_quarters
                .iter()
                .map(|mb| format!("{mb:.0}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        println!(
            "{:<70} {:>8} {:>8} {:>8} {:>6} {:>7} {:>8} {:>7} {:>16} {:>6} {:>7.2}",
            f.name,
            rate,
            opt(f.rows_per_s_after_quarter, 0),
            opt(f.rows_per_s_settled, 0),
            opt(f.ratio_to_copy, 2),
            opt(f.ratio_to_drain, 2),
            opt(f.cpu_s_per_million, 2),
            opt(f.transform_cpu_share.map(|s| s * 100.0), 1),
            rss,
            f.holes,
            f.seconds
        );
    }
}

/// One run against another of the same records, rows/s and CPU: the Avro run against the
/// JSON run (what decoding Avro on arrival costs; issue 22's target: at least 0.9×), the
/// Debezium run against the plain upsert (what change events and versions cost; issue
/// 23's target for one table: at least 0.8×).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Comparison {
    /// The two runs' names, the first over the second.
    pub(crate) of: &'static str,
    pub(crate) to: &'static str,
    /// The first run's rows/s over the second's.
    pub(crate) ratio: f64,
    pub(crate) target: f64,
    pub(crate) rows_per_s: (f64, f64),
    pub(crate) cpu_s_per_million: (Option<f64>, Option<f64>),
}

/// The comparison of `of` to `to`, when both ran.
pub(crate) fn compare(
    figures: &[Figure],
    of: &'static str,
    to: &'static str,
    target: f64,
) -> Option<Comparison> {
    let find = |name: &str| figures.iter().find(|f| f.name == name);
    let (a, b) = (find(of)?, find(to)?);
    Some(Comparison {
        of,
        to,
        ratio: a.rows_per_s / b.rows_per_s.max(1e-9),
        target,
        rows_per_s: (a.rows_per_s, b.rows_per_s),
        cpu_s_per_million: (a.cpu_s_per_million, b.cpu_s_per_million),
    })
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cpu = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
        write!(
            f,
            "{} / {}: {:.2}× the rows/s ({:.0} against {:.0}; target ≥ {:.2}×), CPU s/M {} against {}",
            self.of,
            self.to,
            self.ratio,
            self.rows_per_s.0,
            self.rows_per_s.1,
            self.target,
            cpu(self.cpu_s_per_million.0),
            cpu(self.cpu_s_per_million.1)
        )
    }
}
