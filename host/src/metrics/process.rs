//! `process_cpu_seconds_total` and `process_resident_memory_bytes`, named as every
//! Prometheus client names them, read from `/proc/self/stat` at each scrape. Linux only:
//! elsewhere the two are absent from the exposition.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

/// A registry without prefix that holds the process collector.
pub(super) fn registry() -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ProcessCollector));
    registry
}

/// What `/proc/self/stat` says of the process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Usage {
    /// User and system CPU time.
    pub cpu_seconds: f64,
    /// Resident set size.
    pub resident_bytes: i64,
}

/// Reads `/proc/self/stat` on each scrape.
#[derive(Debug)]
struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(usage) = read() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(usage.cpu_seconds);
        let metric = encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            cpu.metric_type(),
        )?;
        cpu.encode(metric)?;
        let rss = ConstGauge::new(usage.resident_bytes);
        let metric = encoder.encode_descriptor(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            None,
            rss.metric_type(),
        )?;
        rss.encode(metric)
    }
}

/// The process's usage now, when the platform tells.
#[cfg(target_os = "linux")]
pub(super) fn read() -> Option<Usage> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // SAFETY: sysconf reads a constant of the system; it has no preconditions.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    parse(&stat, ticks, page)
}

#[cfg(not(target_os = "linux"))]
pub(super) fn read() -> Option<Usage> {
    None
}

/// Parses `/proc/<pid>/stat` (see proc(5)): `utime` and `stime` (fields 14 and 15) in clock
/// ticks, `rss` (field 24) in pages.
pub(super) fn parse(stat: &str, ticks_per_second: i64, page_bytes: i64) -> Option<Usage> {
    if ticks_per_second <= 0 || page_bytes <= 0 {
        return None;
    }
    // The command name (field 2) is in parentheses and may itself hold spaces and ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (state).
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> Option<i64> { fields.get(n - 3)?.parse().ok() };
    let ticks = field(14)?.checked_add(field(15)?)?;
    Some(Usage {
        cpu_seconds: ticks as f64 / ticks_per_second as f64,
        resident_bytes: field(24)?.saturating_mul(page_bytes),
    })
}
