//! Per-instance host state: the WASI context (nothing granted), the memory limiter and
//! the `log` import.

use std::sync::Arc;

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

/// A guest may log at most this many lines per call; the rest are counted and dropped.
const MAX_LOG_LINES_PER_CALL: u32 = 500;
/// Longer log messages are truncated to this many bytes.
const MAX_LOG_MESSAGE_BYTES: usize = 4096;

/// Everything a plugin instance's `Store` holds.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) log: GuestLog,
}

impl HostState {
    pub(crate) fn new(connector: Arc<str>, plugin: Arc<str>, memory_bytes: u64) -> Self {
        // The sandbox: the builder starts with no args, no env, no preopened dirs and
        // null stdio; we additionally shut the socket APIs. Clocks and random stay (the
        // Rust standard library needs them for `HashMap` seeds and `Instant`).
        let mut wasi = WasiCtx::builder();
        wasi.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        HostState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                limit: usize::try_from(memory_bytes).unwrap_or(usize::MAX),
                hit: false,
            },
            log: GuestLog {
                connector,
                plugin,
                lines: 0,
                dropped: 0,
                last_error: None,
            },
        }
    }

    /// Reset the per-call bookkeeping before a guest call.
    pub(crate) fn begin_call(&mut self) {
        self.limiter.hit = false;
        self.log.lines = 0;
        self.log.dropped = 0;
        self.log.last_error = None;
    }

    /// Report dropped log lines after a guest call.
    pub(crate) fn end_call(&mut self) {
        if self.log.dropped > 0 {
            tracing::warn!(
                target: "sluice::plugin",
                connector = %self.log.connector,
                plugin = %self.log.plugin,
                dropped = self.log.dropped,
                "plugin logged more than {MAX_LOG_LINES_PER_CALL} lines in one call; the rest were dropped"
            );
        }
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

/// Caps linear memory (and table) growth of one instance; remembers that the cap was hit
/// so that the resulting trap is reported as a memory limit, not a generic trap.
pub(crate) struct MemoryLimiter {
    limit: usize,
    pub(crate) hit: bool,
}

/// Tables hold function references; this many elements is far beyond any real plugin.
const MAX_TABLE_ELEMENTS: usize = 1 << 20;

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.hit = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        // A Rust plugin is a handful of core instances (the module plus WASI adapters).
        100
    }

    fn memories(&self) -> usize {
        10
    }

    fn tables(&self) -> usize {
        100
    }
}

/// The guest's `log` import: tracing events tagged with connector and plugin.
pub(crate) struct GuestLog {
    connector: Arc<str>,
    plugin: Arc<str>,
    lines: u32,
    dropped: u32,
    /// The last error-level message of the current call (the SDK logs panics there).
    pub(crate) last_error: Option<String>,
}

fn truncate(mut message: String) -> String {
    if message.len() > MAX_LOG_MESSAGE_BYTES {
        let mut cut = MAX_LOG_MESSAGE_BYTES;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str("… [truncated]");
    }
    message
}

impl Host for HostState {
    fn log(&mut self, level: Level, message: String) {
        let log = &mut self.log;
        log.lines += 1;
        if log.lines > MAX_LOG_LINES_PER_CALL {
            log.dropped += 1;
            return;
        }
        let message = truncate(message);
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
                let mut short = message.replace(['\n', '\r'], " ");
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
