//! The transform stage of sluice: sandboxed WebAssembly plugins between Kafka and the sink.
//!
//! A plugin is a WebAssembly **component** (built for `wasm32-wasip2`) implementing the
//! `sluice:transform@0.1.0` world of `plugins/wit/transform.wit`. This crate hosts them
//! with wasmtime:
//!
//! * one process-wide [`TransformEngine`] (a shared wasmtime `Engine` with epoch
//!   interruption driven by a background ticker thread, and an on-disk cache of compiled
//!   components keyed by content hash and engine settings, so a restart does not
//!   recompile);
//! * one [`TransformChain`] per task: the connector's plugins in order, each with its own
//!   `Store` (its own memory cap), instantiated from a shared pre-linked `InstancePre`;
//! * limits per plugin ([`Limits`]): memory (`ResourceLimiter`), a CPU deadline per call
//!   (epoch interruption) and a cap on output records and bytes per batch;
//! * WASI with nothing granted: no preopened directories, no environment, no network,
//!   no inherited stdio (clocks and randomness only).
//!
//! A trap, deadline, memory exhaustion or malformed answer fails the whole batch with a
//! [`TransformError`] naming the plugin and the cause; that plugin's `Store` is dropped
//! and a fresh instance (with `init` run again) serves the next batch. Per-record errors
//! that a plugin *returns* are not batch failures: they come back as
//! [`Outcome::Failed`] aligned with their input record.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use sluice_transform::*;
//!
//! # fn main() -> Result<(), TransformError> {
//! let engine = TransformEngine::new(EngineOptions::default())?;
//! let spec = PluginSpec {
//!     name: "parse".into(),
//!     path: example_plugin_path("word_parse"),
//!     config: BTreeMap::from([("separator".into(), "*".into())]),
//!     limits: Limits::default(),
//! };
//! let mut chain = TransformChain::new(&engine, "words", &[spec])?;
//! let input = Record::from_value("words", 0, 42, "#42*hello@1700000000123");
//! for outcome in chain.process(vec![input])? {
//!     match outcome {
//!         Outcome::Records(records) => println!("{} output record(s)", records.len()),
//!         Outcome::Failed { plugin, message } => eprintln!("{plugin}: {message}"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```

mod cache;
mod chain;
mod engine;
mod host;
mod js;
mod python;
#[allow(dead_code)]
mod stage;
mod toolchain;
mod tools;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use chain::{CallObserver, Isolation, PluginStats, TransformChain, check_plugin};
pub use engine::{EngineOptions, TransformEngine, default_cache_dir};
pub use js::{COMPONENTIZE_JS_VERSION, example_js_plugin};
pub use python::{COMPONENTIZE_PY_VERSION, example_python_plugin};
pub use tools::{
    PluginLanguage, PluginTestCase, build_plugin, record_to_json, scaffold_plugin, test_plugin,
};

/// The WIT package version this host implements.
pub const WIT_PACKAGE: &str = "sluice:transform@0.1.0";

/// Where `transform/build.rs` put the plugins of this repository's `plugins/` workspace
/// (`word_parse`, `mask`, `filter`, `account_parse`, `hostile`, ...).
pub const PLUGIN_DIR: &str = env!("SLUICE_PLUGIN_DIR");

/// The built `.wasm` of one of this repository's plugins, e.g. `word_parse`.
pub fn example_plugin_path(name: &str) -> PathBuf {
    Path::new(PLUGIN_DIR).join(format!("{}.wasm", name.replace('-', "_")))
}

/// The guest SDK crate's directory in this repository (used by [`scaffold_plugin`]).
pub fn sdk_path() -> PathBuf {
    Path::new(env!("SLUICE_PLUGINS_SRC")).join("sdk")
}

/// One plugin of a connector's transform chain (`transforms:` in `connectors.yaml`).
/// Its `Debug` shows the config's keys, not their values (they may hold secrets).
#[derive(Clone, PartialEq, Eq)]
pub struct PluginSpec {
    /// The transform's name in the connector (`name:`); errors and logs carry it.
    pub name: String,
    /// The component file (`plugin:`).
    pub path: PathBuf,
    /// Passed to the plugin's `init` (`config:`).
    pub config: BTreeMap<String, String>,
    /// Sandbox limits (`limits:`).
    pub limits: Limits,
}

impl std::fmt::Debug for PluginSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginSpec")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("config_keys", &self.config.keys().collect::<Vec<_>>())
            .field("limits", &self.limits)
            .finish()
    }
}

/// Per-plugin sandbox limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Maximum linear memory of the instance, in bytes. Default 64 MiB.
    pub memory_bytes: u64,
    /// CPU deadline of one guest call (`init` or one `process` batch). Default 2 s.
    /// Enforced by epoch interruption with a 10 ms tick, so it is accurate to ~10 ms.
    pub timeout: Duration,
    /// Maximum output records of one batch (all outcomes together). Default 1,000,000
    /// (reachable with `max_output_bytes` of at least 1,000,000 × [`RECORD_OVERHEAD_BYTES`]).
    pub max_output_records: usize,
    /// Maximum output bytes of one batch: keys, values, topics, header names and values,
    /// error messages, plus [`RECORD_OVERHEAD_BYTES`] per record and
    /// [`HEADER_OVERHEAD_BYTES`] per header. Default 64 MiB. It is also the budget of
    /// host memory that lifting one batch's answer out of the guest may take.
    pub max_output_bytes: u64,
}

impl Limits {
    /// Default memory cap: 64 MiB.
    pub const DEFAULT_MEMORY_BYTES: u64 = 64 << 20;
    /// Default CPU deadline per call: 2 s.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);
    /// Default output record cap per batch.
    pub const DEFAULT_MAX_OUTPUT_RECORDS: usize = 1_000_000;
    /// Default output byte cap per batch: 64 MiB.
    pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 64 << 20;
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: Self::DEFAULT_MEMORY_BYTES,
            timeout: Self::DEFAULT_TIMEOUT,
            max_output_records: Self::DEFAULT_MAX_OUTPUT_RECORDS,
            max_output_bytes: Self::DEFAULT_MAX_OUTPUT_BYTES,
        }
    }
}

/// A Kafka record as plugins see it (input and output).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// Source topic.
    pub topic: String,
    /// Source partition.
    pub partition: i32,
    /// Source offset.
    pub offset: i64,
    /// Milliseconds since the Unix epoch.
    pub timestamp: Option<i64>,
    /// `None` is a null key.
    pub key: Option<Vec<u8>>,
    /// `None` is a tombstone.
    pub value: Option<Vec<u8>>,
    /// Headers in wire order.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl Record {
    /// A record with this value and no key, timestamp or headers.
    pub fn from_value(topic: &str, partition: i32, offset: i64, value: impl Into<Vec<u8>>) -> Self {
        Record {
            topic: topic.to_owned(),
            partition,
            offset,
            value: Some(value.into()),
            ..Record::default()
        }
    }

    /// Bytes counted against [`Limits::max_output_bytes`]: key, value, header names and
    /// header values.
    pub fn payload_bytes(&self) -> u64 {
        let opt = |v: &Option<Vec<u8>>| v.as_ref().map_or(0, Vec::len) as u64;
        opt(&self.key)
            + opt(&self.value)
            + self
                .headers
                .iter()
                .map(|(n, v)| n.len() as u64 + opt(v))
                .sum::<u64>()
    }
}

/// What became of one input record after the whole chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The chain's output records for this input (empty: filtered out).
    Records(Vec<Record>),
    /// A plugin returned an error for this record; later plugins did not see it.
    Failed {
        /// The failing plugin's name ([`PluginSpec::name`]).
        plugin: String,
        /// The plugin's message.
        message: String,
    },
    /// The record was in a batch that failed in `plugin`, and the search for the records
    /// that make it fail ran out of its budget ([`Isolation`]) before it reached this one:
    /// it was not found to fail, only not told apart from those that do. (Its own variant,
    /// so that no text a plugin returns can pass for it.)
    NotIsolated {
        /// The plugin the batch failed in.
        plugin: String,
        /// Which budget ran out, and the last failure.
        reason: String,
    },
}

/// Why a plugin could not be loaded or a batch could not be transformed.
///
/// Batch-level variants ([`TransformError::is_batch_failure`]) mean "this batch failed in
/// this plugin": the chain is ready for the next batch (the plugin was re-instantiated),
/// and the caller may split the batch to isolate the record that causes it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransformError {
    /// The wasmtime engine could not be created.
    #[error("cannot create the WebAssembly engine: {0}")]
    Engine(String),

    /// The plugin file could not be read.
    #[error("plugin `{plugin}`: cannot read {path}: {source}")]
    Read {
        /// Plugin name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },

    /// The file is not a valid component (e.g. a core module, or not WebAssembly).
    #[error(
        "plugin `{plugin}`: {path} is not a valid WebAssembly component ({reason}); build plugins with `cargo build --target wasm32-wasip2` or `sluice plugin build`"
    )]
    Invalid {
        /// Plugin name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// What wasmtime said.
        reason: String,
    },

    /// The component does not implement the `sluice:transform@0.1.0` world, or imports
    /// something the sandbox does not offer.
    #[error(
        "plugin `{plugin}`: {path} does not implement the sluice:transform@0.1.0 world: {reason}"
    )]
    Incompatible {
        /// Plugin name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// The missing/mismatched import or export.
        reason: String,
    },

    /// The plugin's `init` rejected its configuration.
    #[error("plugin `{plugin}` rejected its config: {message}")]
    Init {
        /// Plugin name.
        plugin: String,
        /// The plugin's message.
        message: String,
    },

    /// A guest call ran past its CPU deadline.
    #[error(
        "plugin `{plugin}` exceeded its CPU deadline of {timeout:?} in {call}; raise `limits.timeout` or make the plugin faster"
    )]
    Timeout {
        /// Plugin name.
        plugin: String,
        /// The limit.
        timeout: Duration,
        /// `init` or `process`.
        call: &'static str,
    },

    /// The guest tried to grow its memory past the cap.
    #[error(
        "plugin `{plugin}` exceeded its memory limit of {limit_bytes} bytes in {call}; raise `limits.memory` or send smaller batches"
    )]
    MemoryLimit {
        /// Plugin name.
        plugin: String,
        /// The limit.
        limit_bytes: u64,
        /// `init` or `process`.
        call: &'static str,
    },

    /// The guest trapped (panic, `unreachable`, stack overflow, bad memory access...).
    #[error("plugin `{plugin}` trapped in {call}: {trap}{}", last_log.as_ref().map(|l| format!(" (its last error log: {l})")).unwrap_or_default())]
    Trap {
        /// Plugin name.
        plugin: String,
        /// `init` or `process`.
        call: &'static str,
        /// The trap, e.g. `wasm trap: wasm 'unreachable' instruction executed`.
        trap: String,
        /// The guest's last error-level log line in that call (the SDK logs panics).
        last_log: Option<String>,
    },

    /// The guest answered something that breaks the contract (wrong outcome count).
    #[error("plugin `{plugin}` returned a malformed result: {reason}")]
    Malformed {
        /// Plugin name.
        plugin: String,
        /// What was wrong.
        reason: String,
    },

    /// The guest's output for one batch exceeded a cap. Checked while the output is lifted
    /// out of the guest, before the host allocates more than the caps allow.
    #[error("plugin `{plugin}` produced {} output {what} for one batch, over its limit of {limit}; {}",
        got.map_or_else(|| "more".to_owned(), |g| g.to_string()),
        output_limit_hint(what))]
    OutputLimit {
        /// Plugin name.
        plugin: String,
        /// `records`, `bytes` or `headers in one record`.
        what: &'static str,
        /// The cap.
        limit: u64,
        /// What the plugin produced, when it was counted to the end (lifting stops at the
        /// cap, so an output far over it is only known to be over).
        got: Option<u64>,
    },

    /// An I/O problem of the plugin tooling (scaffold, build, test input).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The I/O error.
        source: std::io::Error,
    },

    /// A plugin build (`sluice plugin build`) failed or cannot run.
    #[error("plugin build failed: {0}")]
    Build(String),

    /// Bad input to the plugin tooling (a name, a JSON-lines test file...).
    #[error("{0}")]
    Usage(String),

    /// The plugin is over a load limit: its file size or the time to compile it.
    #[error("plugin `{plugin}`: cannot load {path}: {reason}")]
    LoadLimit {
        /// Plugin name.
        plugin: String,
        /// The file.
        path: PathBuf,
        /// Which limit, and by how much.
        reason: String,
    },
}

fn output_limit_hint(what: &str) -> String {
    match what {
        "records" | "bytes" => format!(
            "raise `limits.max_output_{what}` or send smaller batches (bytes count keys, values, topics, header names and values, error messages, and {RECORD_OVERHEAD_BYTES} bytes per record and {HEADER_OVERHEAD_BYTES} per header for the host's own structures)"
        ),
        _ => format!("a record may carry at most {MAX_HEADERS_PER_RECORD} headers"),
    }
}

/// Host bytes counted for each output record on top of its payload (what the host's own
/// structure of a record takes), against [`Limits::max_output_bytes`].
pub const RECORD_OVERHEAD_BYTES: u64 = std::mem::size_of::<Record>() as u64;
/// Host bytes counted for each output header on top of its name and value.
pub const HEADER_OVERHEAD_BYTES: u64 = std::mem::size_of::<(String, Option<Vec<u8>>)>() as u64;
/// Most headers one output record may carry.
pub const MAX_HEADERS_PER_RECORD: usize = 4096;
/// A plugin's error message for a record (and its `init` error) is cut to this many bytes.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 4096;

impl TransformError {
    /// The plugin this error is about, if any.
    pub fn plugin(&self) -> Option<&str> {
        use TransformError::*;
        match self {
            Read { plugin, .. }
            | Invalid { plugin, .. }
            | Incompatible { plugin, .. }
            | Init { plugin, .. }
            | Timeout { plugin, .. }
            | MemoryLimit { plugin, .. }
            | Trap { plugin, .. }
            | Malformed { plugin, .. }
            | OutputLimit { plugin, .. } => Some(plugin),
            LoadLimit { plugin, .. } => Some(plugin),
            Engine(_) | Io { .. } | Build(_) | Usage(_) => None,
        }
    }

    /// True for errors of one `process` call (trap, deadline, memory, malformed or
    /// oversized output): the chain stays usable, and splitting the batch can isolate the
    /// record responsible. False for load and config errors, and for failures to create a
    /// fresh instance (`instantiate` or `init` trapping or running out of time): those are
    /// not a record's fault ([`is_chain_failure`](Self::is_chain_failure)).
    pub fn is_batch_failure(&self) -> bool {
        match self {
            TransformError::Timeout { call, .. }
            | TransformError::MemoryLimit { call, .. }
            | TransformError::Trap { call, .. } => *call == "process",
            TransformError::Malformed { .. } | TransformError::OutputLimit { .. } => true,
            _ => false,
        }
    }

    /// The kind of a failed call, as `sluice_plugin_failures_total` labels it: `timeout`,
    /// `memory`, `output` (malformed or oversized output) or `trap` (anything else).
    pub fn kind(&self) -> &'static str {
        match self {
            TransformError::Timeout { .. } => "timeout",
            TransformError::MemoryLimit { .. } => "memory",
            TransformError::Malformed { .. } | TransformError::OutputLimit { .. } => "output",
            _ => "trap",
        }
    }

    /// True when the chain could not be brought back after a failed call: a plugin that
    /// loaded before can no longer be instantiated, or its `init` traps, runs out of time
    /// or memory, or now rejects its config. Nothing a record did: the caller retries the
    /// batch later (with backoff) rather than fail or dead-letter its records.
    pub fn is_chain_failure(&self) -> bool {
        match self {
            TransformError::Timeout { call, .. }
            | TransformError::MemoryLimit { call, .. }
            | TransformError::Trap { call, .. } => *call != "process",
            TransformError::Init { .. } => true,
            _ => false,
        }
    }
}

/// The host runs a chain on the task's thread and shares the engine across threads.
const _: () = {
    const fn assert_send<T: Send>() {}
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send::<TransformChain>();
    assert_send_sync::<TransformEngine>();
};
