//! Each partition's committed offset over a run, sampled from `sluice_offsets` as the run's
//! progress is: where a run waits shows as a partition that stops advancing (a rebalance,
//! a task that idles, a write that queues behind another). Written per run to
//! `target/bench/timeline/<run>.tsv` (seconds since the process started, then one column per
//! partition), and summed up in the run's note.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use sluice::sink::Sink;

/// The samples of one run.
#[derive(Debug, Default)]
pub(crate) struct Timeline {
    /// (seconds since the start, each partition's committed next offset).
    samples: Vec<(f64, Vec<u64>)>,
}

impl Timeline {
    /// Takes one sample: each of `partitions` partitions' stored next offset (0 when none
    /// is stored yet), summed over `topic` and the topics named `topic…` (a many-topics
    /// run's, one partition each). Returns their sum, the records committed.
    pub(crate) async fn sample(
        &mut self,
        sink: &Sink,
        connector: &str,
        topic: &str,
        partitions: i32,
        at: Duration,
    ) -> u64 {
        let integer = match sink.dialect() {
            sluice::sink::Dialect::MySql => "SIGNED",
            _ => "BIGINT",
        };
        // Quoted as the sink quotes it: `partition` is a reserved word in MySQL and MariaDB.
        let partition = sink.dialect().quote_one("partition");
        let columns: Vec<String> = (0..partitions)
            .map(|p| {
                format!(
                    "CAST(COALESCE(SUM(CASE WHEN {partition} = {p} THEN next_offset END), 0) AS {integer})"
                )
            })
            .collect();
        let sql = format!(
            "SELECT {} FROM sluice_offsets WHERE connector = '{connector}' AND topic LIKE '{topic}%'",
            columns.join(", ")
        );
        let values: Vec<u64> = match sink.query_integers(sql, partitions as usize).await {
            Ok(values) => values
                .into_iter()
                .map(|v| v.unwrap_or(0).max(0) as u64)
                .collect(),
            // A failed sample is left out; the previous one stands.
            Err(_) => return self.samples.last().map_or(0, |(_, v)| v.iter().sum()),
        };
        let done = values.iter().sum();
        self.samples.push((at.as_secs_f64(), values));
        done
    }

    /// The records committed between the first sample at or after `from` (seconds since the
    /// start) and the last one, and the seconds between them.
    pub(crate) fn since(&self, from: f64) -> Option<(u64, f64)> {
        let (start, before) = self.samples.iter().find(|(at, _)| *at >= from)?;
        let (end, after) = self.samples.last()?;
        let sum = |v: &Vec<u64>| v.iter().sum::<u64>();
        (end > start).then(|| (sum(after).saturating_sub(sum(before)), end - start))
    }

    /// For each partition: when it first advanced, when it last did, and its longest time
    /// without advancing in between (a wait), in seconds since the start.
    pub(crate) fn summary(&self) -> String {
        let partitions = self.samples.first().map_or(0, |(_, v)| v.len());
        let mut text = String::new();
        for p in 0..partitions {
            let mut first = None;
            let mut last: Option<f64> = None;
            let mut longest = 0.0f64;
            let mut previous = 0u64;
            for (at, values) in &self.samples {
                if values[p] > previous {
                    if first.is_none() {
                        first = Some(*at);
                    }
                    if let Some(last) = last {
                        longest = longest.max(at - last);
                    }
                    last = Some(*at);
                    previous = values[p];
                }
            }
            let _ = write!(
                text,
                "{}p{p}: {:.2}–{:.2} s, longest wait {:.2} s",
                if p == 0 { "" } else { "; " },
                first.unwrap_or(0.0),
                last.unwrap_or(0.0),
                longest
            );
        }
        text
    }

    /// Writes the samples to `dir/<name>.tsv`.
    pub(crate) fn write(&self, dir: &Path, name: &str) {
        let mut text = String::from("seconds");
        let partitions = self.samples.first().map_or(0, |(_, v)| v.len());
        for p in 0..partitions {
            let _ = write!(text, "\tp{p}");
        }
        text.push('\n');
        for (at, values) in &self.samples {
            let _ = write!(text, "{at:.3}");
            for v in values {
                let _ = write!(text, "\t{v}");
            }
            text.push('\n');
        }
        let file: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        if std::fs::create_dir_all(dir).is_ok() {
            let _ = std::fs::write(dir.join(format!("{file}.tsv")), text);
        }
    }
}
