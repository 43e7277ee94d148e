//! The recent past of a connector's throughput, for the status page's chart
//! (`GET /connectors/{name}/history`) without Prometheus: a ring buffer of the connector's
//! counters, one sample every [`INTERVAL`], the last [`WINDOW`] kept. Its memory is
//! bounded by [`CAPACITY`] samples per connector, whatever the process's uptime.
//!
//! The runner offers a sample on each of its checks (every 250 ms); the buffer takes one
//! when [`INTERVAL`] has passed since the last. A runner that was held up (a database it
//! waits for) leaves a longer step: rates are computed over each sample's actual distance
//! from the one before it, never over the nominal interval.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

/// How often a sample is taken.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// How far back the samples reach.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Most samples kept: the window's worth, and the one at its start (a rate needs the
/// sample before it).
pub const CAPACITY: usize = (WINDOW.as_secs() / INTERVAL.as_secs()) as usize + 1;

/// The counters a sample holds, as they were when it was taken (totals since the process
/// started).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Row operations committed to the sink (`sluice_rows_written_total`).
    pub rows_written: u64,
    /// Records whose batch committed (`sluice_records_committed_total`).
    pub records_committed: u64,
    /// Records read from Kafka (`sluice_records_consumed_total`, all tasks).
    pub records_consumed: u64,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    /// The same moment on the wall clock, in ms since the epoch, for the answer.
    at_ms: i64,
    counters: Counters,
}

/// One point of the answer: when, the totals then, and the rates since the point before.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// Milliseconds since the epoch (this process's clock).
    pub at: i64,
    pub rows_written: u64,
    pub records_committed: u64,
    pub records_consumed: u64,
    /// Rows per second since the point before (`None` for the first point).
    pub rows_per_second: Option<f64>,
    /// Records committed per second since the point before.
    pub records_per_second: Option<f64>,
}

/// The answer of `GET /connectors/{name}/history`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryAnswer {
    pub name: String,
    pub interval_seconds: u64,
    pub window_seconds: u64,
    /// Oldest first.
    pub samples: Vec<Point>,
}

/// A bounded ring of samples (the logic; [`History`] shares it between threads).
#[derive(Debug)]
struct Ring {
    interval: Duration,
    window: Duration,
    capacity: usize,
    samples: VecDeque<Sample>,
}

impl Ring {
    fn new(interval: Duration, window: Duration) -> Self {
        let steps = window.as_millis() / interval.as_millis().max(1);
        let capacity = usize::try_from(steps)
            .unwrap_or(usize::MAX)
            .saturating_add(1);
        Self {
            interval,
            window,
            capacity,
            samples: VecDeque::with_capacity(capacity.min(4096)),
        }
    }

    /// Takes the sample when [`INTERVAL`] has passed since the last one; true if it did.
    fn offer(&mut self, at: Instant, at_ms: i64, counters: Counters) -> bool {
        if self
            .samples
            .back()
            .is_some_and(|last| at.saturating_duration_since(last.at) < self.interval)
        {
            return false;
        }
        // The window, measured back from the new sample (the oldest inside it is kept),
        // and room made before the push, so that the buffer never grows past its capacity.
        while self
            .samples
            .front()
            .is_some_and(|first| at.saturating_duration_since(first.at) > self.window)
        {
            self.samples.pop_front();
        }
        while self.samples.len() >= self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(Sample {
            at,
            at_ms,
            counters,
        });
        true
    }

    fn points(&self) -> Vec<Point> {
        let mut points = Vec::with_capacity(self.samples.len());
        let mut previous: Option<&Sample> = None;
        for sample in &self.samples {
            let per_second =
                |pick: fn(&Counters) -> u64| previous.and_then(|before| rate(before, sample, pick));
            points.push(Point {
                at: sample.at_ms,
                rows_written: sample.counters.rows_written,
                records_committed: sample.counters.records_committed,
                records_consumed: sample.counters.records_consumed,
                rows_per_second: per_second(|c| c.rows_written),
                records_per_second: per_second(|c| c.records_committed),
            });
            previous = Some(sample);
        }
        points
    }
}

/// The rate of one counter between two samples, rounded to 0.1; a counter that went back
/// (it cannot, short of a new process) counts as 0.
fn rate(before: &Sample, after: &Sample, pick: fn(&Counters) -> u64) -> Option<f64> {
    let seconds = after.at.saturating_duration_since(before.at).as_secs_f64();
    if seconds <= 0.0 {
        return None;
    }
    let grew = pick(&after.counters).saturating_sub(pick(&before.counters));
    Some((grew as f64 / seconds * 10.0).round() / 10.0)
}

/// One connector's history, shared by its runner (which samples) and the admin API (which
/// reads).
#[derive(Debug)]
pub struct History {
    ring: Mutex<Ring>,
}

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}

impl History {
    /// A history of [`WINDOW`] in samples [`INTERVAL`] apart.
    pub fn new() -> Self {
        Self {
            ring: Mutex::new(Ring::new(INTERVAL, WINDOW)),
        }
    }

    /// Offers the counters as they are now; kept if a sample is due.
    pub fn offer(&self, counters: Counters) {
        if let Ok(mut ring) = self.ring.lock() {
            ring.offer(Instant::now(), crate::sink::control::now_ms(), counters);
        }
    }

    /// The samples, oldest first, with their rates.
    pub fn answer(&self, name: &str) -> HistoryAnswer {
        let (samples, interval, window) = match self.ring.lock() {
            Ok(ring) => (ring.points(), ring.interval, ring.window),
            Err(_) => (Vec::new(), INTERVAL, WINDOW),
        };
        HistoryAnswer {
            name: name.to_string(),
            interval_seconds: interval.as_secs(),
            window_seconds: window.as_secs(),
            samples,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: u64) -> Counters {
        Counters {
            rows_written: n,
            records_committed: n * 2,
            records_consumed: n * 3,
        }
    }

    /// Offers one sample every `step` for `count` steps from `start`, `per_step` rows
    /// each; returns the time of the last.
    fn feed(ring: &mut Ring, start: Instant, step: Duration, count: u32, per_step: u64) -> Instant {
        let mut at = start;
        for i in 0..count {
            at = start + step * i;
            ring.offer(at, i64::from(i) * 1000, rows(u64::from(i) * per_step));
        }
        at
    }

    #[test]
    fn the_capacity_is_the_window_in_intervals_and_one() {
        assert_eq!(CAPACITY, 181);
        assert_eq!(Ring::new(INTERVAL, WINDOW).capacity, CAPACITY);
    }

    #[test]
    fn samples_closer_than_the_interval_are_not_taken() {
        let mut ring = Ring::new(Duration::from_secs(5), Duration::from_secs(60));
        let start = Instant::now();
        assert!(ring.offer(start, 0, rows(0)));
        // The runner offers every 250 ms: only one in 20 is kept.
        for i in 1..20u32 {
            assert!(!ring.offer(start + Duration::from_millis(250) * i, 0, rows(1)));
        }
        assert!(ring.offer(start + Duration::from_secs(5), 5000, rows(50)));
        assert_eq!(ring.samples.len(), 2);
    }

    #[test]
    fn a_long_run_keeps_at_most_the_capacity_and_only_the_window() {
        let mut ring = Ring::new(INTERVAL, WINDOW);
        let start = Instant::now();
        // Three hours of samples.
        let last = feed(&mut ring, start, INTERVAL, 3 * 720, 10);
        assert_eq!(ring.samples.len(), CAPACITY);
        let first = ring.samples.front().expect("samples").at;
        assert_eq!(
            last - first,
            WINDOW,
            "the oldest kept is the window's start"
        );
        // Memory stays where it was: the deque did not grow past what it needed.
        assert!(
            ring.samples.capacity() < 2 * CAPACITY,
            "{}",
            ring.samples.capacity()
        );
    }

    #[test]
    fn a_gap_longer_than_the_window_leaves_the_newest_sample_and_the_one_before() {
        let mut ring = Ring::new(INTERVAL, WINDOW);
        let start = Instant::now();
        feed(&mut ring, start, INTERVAL, 10, 10);
        // The runner was held up for an hour.
        let later = start + Duration::from_secs(3600);
        ring.offer(later, 3_600_000, rows(500));
        assert_eq!(ring.samples.len(), 1, "samples older than the window go");
        ring.offer(later + INTERVAL, 3_605_000, rows(550));
        let points = ring.points();
        assert_eq!(points.len(), 2);
        assert_eq!(points[0].rows_per_second, None);
        assert_eq!(points[1].rows_per_second, Some(10.0));
    }

    #[test]
    fn rates_are_over_each_samples_real_distance() {
        let mut ring = Ring::new(INTERVAL, WINDOW);
        let start = Instant::now();
        ring.offer(start, 0, rows(0));
        ring.offer(start + Duration::from_secs(5), 5000, rows(500));
        // Held up: 20 s until the next sample, 1000 more rows.
        ring.offer(start + Duration::from_secs(25), 25000, rows(1500));
        // A counter that went back counts as 0, not as a huge number.
        ring.offer(start + Duration::from_secs(30), 30000, rows(10));
        let points = ring.points();
        let rows_per_second: Vec<Option<f64>> = points.iter().map(|p| p.rows_per_second).collect();
        assert_eq!(
            rows_per_second,
            vec![None, Some(100.0), Some(50.0), Some(0.0)]
        );
        assert_eq!(points[1].records_per_second, Some(200.0));
        assert_eq!(points[2].at, 25000);
        assert_eq!(points[2].records_consumed, 4500);
    }

    #[test]
    fn rates_round_to_a_tenth() {
        let mut ring = Ring::new(Duration::from_secs(3), WINDOW);
        let start = Instant::now();
        ring.offer(start, 0, rows(0));
        ring.offer(start + Duration::from_secs(3), 3000, rows(1));
        assert_eq!(ring.points()[1].rows_per_second, Some(0.3));
    }

    #[test]
    fn the_answer_names_its_window() {
        let history = History::new();
        history.offer(rows(1));
        history.offer(rows(2));
        let answer = history.answer("words");
        assert_eq!(answer.name, "words");
        assert_eq!(answer.interval_seconds, 5);
        assert_eq!(answer.window_seconds, 900);
        assert_eq!(answer.samples.len(), 1, "the second offer came too soon");
        assert_eq!(answer.samples[0].rows_written, 1);
    }
}
