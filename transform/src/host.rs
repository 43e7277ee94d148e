//! Per-instance host state: the WASI context (nothing granted), the memory limiter and
//! the `log` import.

use std::sync::{Arc, Mutex};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// Host bindings generated from `plugins/wit/transform.wit`.
pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "../plugins/wit",
        world: "transform",
    });
}

use bindings::sluice::transform::host::{Host, Level};

/// A plugin may log at most this many lines per second (per task); the rest are counted,
/// dropped and reported in one warning when the second is over.
pub(crate) const MAX_LOG_LINES_PER_SECOND: u32 = 200;
/// Longer log messages are truncated to this many bytes.
pub(crate) const MAX_LOG_MESSAGE_BYTES: usize = 4096;
/// Every resource a guest holds in the host (WASI streams, pollables) takes a slot of this
/// table; a guest that leaks them (a loop of `get-stdout()`) fails instead of growing host
/// memory. A plugin that behaves holds a handful.
pub(crate) const MAX_HOST_RESOURCES: usize = 1024;

/// Everything a plugin instance's `Store` holds.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) log: GuestLog,
}

impl HostState {
    pub(crate) fn new(
        connector: Arc<str>,
        plugin: Arc<str>,
        memory_bytes: u64,
        window: Arc<Mutex<LogWindow>>,
    ) -> Self {
        // The sandbox: the builder starts with no args, no env, no preopened dirs and
        // null stdio; we additionally shut the socket APIs. Clocks and random stay (the
        // Rust standard library needs them for `HashMap` seeds and `Instant`).
        let mut wasi = WasiCtx::builder();
        wasi.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_HOST_RESOURCES);
        HostState {
            wasi: wasi.build(),
            table,
            limiter: MemoryLimiter {
                limit: usize::try_from(memory_bytes).unwrap_or(usize::MAX),
                memory: 0,
                table_elements: 0,
                hit: false,
            },
            log: GuestLog {
                connector,
                plugin,
                window,
                last_error: None,
            },
        }
    }

    /// Reset the per-call bookkeeping before a guest call.
    pub(crate) fn begin_call(&mut self) {
        self.limiter.hit = false;
        self.log.last_error = None;
    }

    /// Report dropped log lines after a guest call, if their second is over.
    pub(crate) fn end_call(&mut self) {
        self.log.report_dropped(std::time::Instant::now());
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Caps the memory of one plugin instance: all its linear memories together stay under
/// `limits.memory`, all its tables together under [`MAX_TABLE_ELEMENTS`], and the counts of
/// core instances, memories and tables are small. Remembers that the memory cap was hit so
/// that the resulting trap is reported as a memory limit, not a generic trap.
pub(crate) struct MemoryLimiter {
    limit: usize,
    /// Bytes of all linear memories of the instance (they only grow).
    memory: usize,
    /// Elements of all tables of the instance.
    table_elements: usize,
    pub(crate) hit: bool,
}

/// Tables hold function references (8 to 16 host bytes each): a Rust plugin's function
/// table has a few thousand; this many in all tables together is far beyond any real one.
pub(crate) const MAX_TABLE_ELEMENTS: usize = 1 << 17;
/// Core instances of one plugin: a Rust component is a handful (its module, WASI shims).
pub(crate) const MAX_INSTANCES: usize = 32;
/// Linear memories of one plugin (components built by Rust have one).
pub(crate) const MAX_MEMORIES: usize = 4;
/// Tables of one plugin.
pub(crate) const MAX_TABLES: usize = 16;

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = (self.memory - current.min(self.memory)).saturating_add(desired);
        if total > self.limit {
            self.hit = true;
            return Ok(false);
        }
        self.memory = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total =
            (self.table_elements - current.min(self.table_elements)).saturating_add(desired);
        if total > MAX_TABLE_ELEMENTS {
            return Ok(false);
        }
        self.table_elements = total;
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }
}

/// The guest's `log` import: tracing events tagged with connector and plugin.
pub(crate) struct GuestLog {
    connector: Arc<str>,
    plugin: Arc<str>,
    /// The plugin's rate limit; shared by the instances of one plugin in one chain, so a
    /// plugin re-instantiated after every failure is limited all the same.
    window: Arc<Mutex<LogWindow>>,
    /// The last error-level message of the current call (the SDK logs panics there).
    pub(crate) last_error: Option<String>,
}

/// One second of a plugin's log lines: how many were written and how many dropped.
#[derive(Debug)]
pub(crate) struct LogWindow {
    started: std::time::Instant,
    lines: u32,
    dropped: u64,
}

impl Default for LogWindow {
    fn default() -> Self {
        LogWindow {
            started: std::time::Instant::now(),
            lines: 0,
            dropped: 0,
        }
    }
}

impl GuestLog {
    fn window(&self) -> std::sync::MutexGuard<'_, LogWindow> {
        // Counters only: a panic elsewhere cannot leave them inconsistent.
        self.window.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True if a line may be written now; counts it, or counts it dropped.
    fn admit(&self, now: std::time::Instant) -> bool {
        self.report_dropped(now);
        let mut window = self.window();
        if window.lines >= MAX_LOG_LINES_PER_SECOND {
            window.dropped += 1;
            return false;
        }
        window.lines += 1;
        true
    }

    /// When the second is over, reports the lines it dropped and opens the next one.
    fn report_dropped(&self, now: std::time::Instant) {
        let dropped = {
            let mut window = self.window();
            if now.duration_since(window.started) < std::time::Duration::from_secs(1) {
                return;
            }
            let dropped = window.dropped;
            *window = LogWindow {
                started: now,
                lines: 0,
                dropped: 0,
            };
            dropped
        };
        if dropped > 0 {
            tracing::warn!(
                target: "sluice::plugin",
                connector = %self.connector,
                plugin = %self.plugin,
                dropped,
                "plugin logged more than {MAX_LOG_LINES_PER_SECOND} lines in a second; the rest were dropped"
            );
        }
    }
}

/// A guest's text as it may enter the host's logs and errors: at most `max` bytes, and
/// control characters (CR, LF, ESC...) escaped, so a plugin cannot forge log lines or
/// terminal output.
pub(crate) fn sanitize(message: &str, max: usize) -> String {
    let mut out = String::with_capacity(message.len().min(max) + 16);
    for c in message.chars() {
        if out.len() >= max {
            out.push_str("… [truncated]");
            break;
        }
        match c {
            '\t' => out.push(c),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

impl Host for HostState {
    fn log(&mut self, level: Level, message: String) {
        let log = &mut self.log;
        if !log.admit(std::time::Instant::now()) {
            return;
        }
        let message = sanitize(&message, MAX_LOG_MESSAGE_BYTES);
        let (c, p) = (&*log.connector, &*log.plugin);
        match level {
            Level::Trace => {
                tracing::trace!(target: "sluice::plugin", connector = c, plugin = p, level = "trace", "{message}")
            }
            Level::Debug => {
                tracing::debug!(target: "sluice::plugin", connector = c, plugin = p, level = "debug", "{message}")
            }
            Level::Info => {
                tracing::info!(target: "sluice::plugin", connector = c, plugin = p, level = "info", "{message}")
            }
            Level::Warn => {
                tracing::warn!(target: "sluice::plugin", connector = c, plugin = p, level = "warn", "{message}")
            }
            Level::Error => {
                tracing::error!(target: "sluice::plugin", connector = c, plugin = p, level = "error", "{message}");
                // Kept for the error of a trap that follows (the SDK logs panics here),
                // on one line: errors are printed one per line.
                let mut short = message;
                short.truncate(short.floor_char_boundary(512));
                log.last_error = Some(short);
            }
        }
    }
}

impl bindings::sluice::transform::types::Host for HostState {}

/// Conversions between the public [`crate::Record`] and the generated binding type.
impl From<crate::Record> for bindings::sluice::transform::types::Record {
    fn from(r: crate::Record) -> Self {
        Self {
            topic: r.topic,
            partition: r.partition,
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key,
            value: r.value,
            headers: r.headers,
        }
    }
}

impl From<bindings::sluice::transform::types::Record> for crate::Record {
    fn from(r: bindings::sluice::transform::types::Record) -> Self {
        Self {
            topic: r.topic,
            partition: r.partition,
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key,
            value: r.value,
            headers: r.headers,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_escapes_control_characters_and_cuts() {
        assert_eq!(
            sanitize("a\nb\rc\u{1b}[31md\te", 100),
            "a\\nb\\rc\\u{1b}[31md\te"
        );
        let long = "é".repeat(3000);
        let cut = sanitize(&long, MAX_LOG_MESSAGE_BYTES);
        assert!(cut.ends_with("… [truncated]"), "{}", &cut[cut.len() - 20..]);
        assert!(cut.len() <= MAX_LOG_MESSAGE_BYTES + "… [truncated]".len() + 2);
    }

    #[test]
    fn memories_and_tables_count_together() {
        let mut limiter = MemoryLimiter {
            limit: 10 << 20,
            memory: 0,
            table_elements: 0,
            hit: false,
        };
        assert!(limiter.memory_growing(0, 6 << 20, None).unwrap());
        // A second memory of 6 MiB: within the cap alone, not together.
        assert!(!limiter.memory_growing(0, 6 << 20, None).unwrap());
        assert!(limiter.hit);
        // The first one growing by 4 MiB still fits.
        assert!(limiter.memory_growing(6 << 20, 10 << 20, None).unwrap());
        assert!(
            limiter
                .table_growing(0, MAX_TABLE_ELEMENTS / 2, None)
                .unwrap()
        );
        assert!(
            !limiter
                .table_growing(0, MAX_TABLE_ELEMENTS / 2 + 1, None)
                .unwrap()
        );
    }
}
