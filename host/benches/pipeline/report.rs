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

/// The comparison of `of` to `to`, when both ran: the means over the rounds
/// (`--rounds`) of each.
pub(crate) fn compare(
    figures: &[Figure],
    of: &'static str,
    to: &'static str,
    target: f64,
) -> Option<Comparison> {
    let (a, b) = (Mean::of(figures, of)?, Mean::of(figures, to)?);
    Some(Comparison {
        of,
        to,
        ratio: a.rows_per_s / b.rows_per_s.max(1e-9),
        target,
        rows_per_s: (a.rows_per_s, b.rows_per_s),
        cpu_s_per_million: (a.cpu_s_per_million, b.cpu_s_per_million),
    })
}

/// One run's figures over its rounds: the means.
pub(crate) struct Mean {
    pub(crate) rounds: usize,
    pub(crate) rows_per_s: f64,
    pub(crate) ratio_to_copy: Option<f64>,
    pub(crate) cpu_s_per_million: Option<f64>,
}

impl Mean {
    /// The rounds of the run called `name`; `None` when it did not run.
    pub(crate) fn of(figures: &[Figure], name: &str) -> Option<Mean> {
        let runs: Vec<&Figure> = figures.iter().filter(|f| f.name == name).collect();
        if runs.is_empty() {
            return None;
        }
        // A mean only of a figure every round has.
        let mean = |values: Vec<f64>| {
            (values.len() == runs.len()).then(|| values.iter().sum::<f64>() / values.len() as f64)
        };
        Some(Mean {
            rounds: runs.len(),
            rows_per_s: runs.iter().map(|f| f.rows_per_s).sum::<f64>() / runs.len() as f64,
            ratio_to_copy: mean(runs.iter().filter_map(|f| f.ratio_to_copy).collect()),
            cpu_s_per_million: mean(runs.iter().filter_map(|f| f.cpu_s_per_million).collect()),
        })
    }
}

/// One target of issue 47 (docs/performance.md, "Third pass"), as measured in this run:
/// the means over the rounds.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Target {
    pub(crate) what: &'static str,
    /// The figure as measured, and the bound it is held to.
    pub(crate) measured: f64,
    pub(crate) bound: f64,
    /// `true`: at most `bound`; `false`: at least.
    pub(crate) at_most: bool,
    /// What was measured, in words (the runs and their figures).
    pub(crate) from: String,
    pub(crate) met: bool,
}

/// Issue 47's targets that this run's runs measure.
pub(crate) fn third_pass_targets(figures: &[Figure]) -> Vec<Target> {
    let mut targets = Vec::new();
    let mut push = |what, measured: f64, bound, at_most, from: String| {
        let met = if at_most {
            measured <= bound
        } else {
            measured >= bound
        };
        targets.push(Target {
            what,
            measured,
            bound,
            at_most,
            from,
            met,
        });
    };
    let plugin = "postgres insert word_parse 1t";
    if let Some(m) = Mean::of(figures, plugin) {
        if let Some(cpu) = m.cpu_s_per_million {
            let from = format!("{plugin}, {} round(s)", m.rounds);
            push("CPU s/M through word_parse (Rust)", cpu, 1.5, true, from);
        }
        if let Some(ratio) = m.ratio_to_copy {
            let from = format!("{plugin}, {:.0} rows/s", m.rows_per_s);
            push("word_parse (Rust) ×COPY", ratio, 0.6, false, from);
        }
    }
    let json = "postgres insert json 1t";
    if let Some(cpu) = Mean::of(figures, json).and_then(|m| m.cpu_s_per_million) {
        push("CPU s/M of the JSON path", cpu, 1.2, true, json.to_string());
    }
    for (what, of, bound) in [
        (
            "Python plugin × the Rust plugin",
            "postgres insert word_parse in Python 1t",
            0.3,
        ),
        (
            "JavaScript plugin × the Rust plugin",
            "postgres insert word_parse in JavaScript 1t",
            0.25,
        ),
    ] {
        if let Some(c) = compare(figures, of, plugin, bound) {
            let from = format!("{:.0} against {:.0} rows/s", c.rows_per_s.0, c.rows_per_s.1);
            push(what, c.ratio, bound, false, from);
        }
    }
    let one = "postgres upsert debezium 1t";
    let twenty = "postgres upsert debezium 20 tables 1t";
    if let Some(c) = compare(figures, twenty, one, 0.8) {
        let from = format!("{:.0} against {:.0} rows/s", c.rows_per_s.0, c.rows_per_s.1);
        push(
            "20 tables × one table (Debezium)",
            c.ratio,
            0.8,
            false,
            from,
        );
    }
    let two_tasks = figures
        .iter()
        .filter(|f| f.name.ends_with(" 2t"))
        .filter_map(|f| f.peak_rss_mb.map(|mb| (mb, f.name.clone())))
        .reduce(|a, b| if b.0 > a.0 { b } else { a });
    if let Some((mb, name)) = two_tasks {
        push("peak RSS MB with 2 tasks", mb, 256.0, true, name);
    }
    targets
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<40} {:>9.2} {} {:<7} {:<7} ({})",
            self.what,
            self.measured,
            if self.at_most { "≤" } else { "≥" },
            self.bound,
            if self.met { "met" } else { "MISSED" },
            self.from
        )
    }
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
