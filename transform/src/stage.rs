//! One plugin of a connector task's chain: its instance in a `Store` of its own, made
//! again after a failed call, each call run under the plugin's limits (time, memory, fuel
//! for the host calls, output bounds), and its counters. [`crate::chain`] runs the stages
//! in order and isolates failing records.

use std::sync::{Arc, Mutex};

use wasmtime::{Store, Trap};

use crate::engine::{EPOCH_TICK, Loaded, TransformEngine};
use crate::host::{HostState, LogWindow, bindings, sanitize};
use crate::{
    HEADER_OVERHEAD_BYTES, Limits, MAX_ERROR_MESSAGE_BYTES, MAX_HEADERS_PER_RECORD,
    RECORD_OVERHEAD_BYTES, TransformError,
};

pub(crate) type WitRecord = bindings::sluice::transform::types::Record;
pub(crate) type WitOutcome = bindings::sluice::transform::types::Outcome;

/// Told of every `process` call of a plugin: its name, the call's wall time, and when the
/// call failed, the failure's kind ([`TransformError::kind`]). For metrics.
pub type CallObserver = Arc<dyn Fn(&str, std::time::Duration, Option<&'static str>) + Send + Sync>;

/// One plugin of the chain.
pub(crate) struct Stage {
    pub(crate) name: Arc<str>,
    pub(crate) connector: Arc<str>,
    pub(crate) config: Vec<(String, String)>,
    pub(crate) limits: Limits,
    pub(crate) loaded: Arc<Loaded>,
    pub(crate) engine: TransformEngine,
    /// `None` after a failed call: the next call re-instantiates.
    pub(crate) live: Option<Live>,
    pub(crate) stats: PluginStats,
    /// The plugin's log rate limit, kept across its instances.
    pub(crate) log_window: Arc<Mutex<LogWindow>>,
    /// Told of every `process` call.
    pub(crate) observer: Option<CallObserver>,
}

/// Counters of one plugin of a chain, since the chain was created (for metrics).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginStats {
    /// The plugin's name.
    pub plugin: String,
    /// Successful `process` calls.
    pub calls: u64,
    /// Records given to successful calls.
    pub records_in: u64,
    /// Records produced by successful calls.
    pub records_out: u64,
    /// Per-record errors returned by the plugin.
    pub record_errors: u64,
    /// Failed calls (trap, timeout, memory, malformed or oversized output).
    pub batch_failures: u64,
    /// Instances created (1 + re-instantiations after failures).
    pub instantiations: u64,
    /// Wall time spent in successful and failed `process` calls.
    pub busy: std::time::Duration,
}

pub(crate) struct Live {
    store: Store<HostState>,
    instance: bindings::Transform,
}

impl Stage {
    fn deadline_ticks(&self) -> u64 {
        let ticks = self.limits.timeout.as_nanos() / EPOCH_TICK.as_nanos();
        // +1: the current tick may be about to end.
        u64::try_from(ticks)
            .unwrap_or(u64::MAX / 2)
            .saturating_add(1)
    }

    /// A fresh `Store` and instance, with `init` run under the limits.
    pub(crate) fn instantiate(&mut self) -> Result<(), TransformError> {
        self.live = None;
        self.stats.instantiations += 1;
        let state = HostState::new(
            self.connector.clone(),
            self.name.clone(),
            self.limits.memory_bytes,
            self.log_window.clone(),
        );
        let mut store = Store::new(&self.engine.inner.engine, state);
        store.limiter(|s| &mut s.limiter);
        // What the host copies out of the guest in one call (a log line, `init`'s answer)
        // is at most about the guest's own memory.
        store.set_hostcall_fuel(usize::try_from(self.limits.memory_bytes).unwrap_or(usize::MAX));
        store.epoch_deadline_trap();
        store.set_epoch_deadline(self.deadline_ticks());
        store.data_mut().begin_call();
        let instance = match self.loaded.pre.instantiate(&mut store) {
            Ok(i) => i,
            Err(e) => return Err(self.classify(e, &store, "instantiate")),
        };
        store.set_epoch_deadline(self.deadline_ticks());
        let result = instance.call_init(&mut store, &self.config);
        store.data_mut().end_call();
        match result {
            Ok(Ok(())) => {
                self.live = Some(Live { store, instance });
                Ok(())
            }
            Ok(Err(message)) => Err(TransformError::Init {
                plugin: self.name.to_string(),
                message: sanitize(&message, MAX_ERROR_MESSAGE_BYTES),
            }),
            Err(e) => Err(self.classify(e, &store, "init")),
        }
    }

    /// One guest call for the batch, checked against the contract and the output caps.
    /// Any failure drops the instance.
    pub(crate) fn process(
        &mut self,
        batch: &[WitRecord],
    ) -> Result<Vec<WitOutcome>, TransformError> {
        if self.live.is_none() {
            self.instantiate()?;
        }
        // Taken out for the call and put back only if the call succeeds: a failed call
        // drops the Store, whatever state the guest left behind.
        let Some(mut live) = self.live.take() else {
            return Err(TransformError::Malformed {
                plugin: self.name.to_string(),
                reason: "no live instance after instantiation".into(),
            });
        };
        live.store.set_epoch_deadline(self.deadline_ticks());
        live.store.set_hostcall_fuel(self.output_fuel(batch.len()));
        live.store.data_mut().begin_call();
        let started = std::time::Instant::now();
        let result = live.instance.call_process(&mut live.store, batch);
        self.stats.busy += started.elapsed();
        live.store.data_mut().end_call();
        let checked = match result {
            Ok(mut outcomes) => self
                .check_output(batch.len(), &mut outcomes)
                .map(|()| outcomes),
            Err(e) => Err(self.classify(e, &live.store, "process")),
        };
        if let Some(observer) = &self.observer {
            observer(
                &self.name,
                started.elapsed(),
                checked.as_ref().err().map(|e| e.kind()),
            );
        }
        let outcomes = match checked {
            Ok(outcomes) => outcomes,
            Err(e) => {
                self.stats.batch_failures += 1;
                return Err(e);
            }
        };
        self.stats.calls += 1;
        self.stats.records_in += batch.len() as u64;
        for outcome in &outcomes {
            match outcome {
                WitOutcome::Records(rs) => self.stats.records_out += rs.len() as u64,
                WitOutcome::Error(_) => self.stats.record_errors += 1,
            }
        }
        self.live = Some(live);
        Ok(outcomes)
    }

    /// The host-call budget of one `process` call: wasmtime counts, while it lifts the
    /// answer out of the guest, the host memory it allocates (each list element's host
    /// size, each string's and byte list's length) and stops at this budget. It is
    /// `max_output_bytes` (which counts the same things, see [`RECORD_OVERHEAD_BYTES`])
    /// plus the list of one outcome per input, so no answer that passes the caps is
    /// refused, and no answer makes the host allocate much more than the caps, however
    /// many times a guest points at the same bytes.
    fn output_fuel(&self, inputs: usize) -> usize {
        let outcomes = inputs.saturating_mul(std::mem::size_of::<WitOutcome>());
        usize::try_from(self.limits.max_output_bytes)
            .unwrap_or(usize::MAX)
            .saturating_add(outcomes)
            .saturating_add(OUTPUT_FUEL_SLACK)
    }

    /// Checks the answer against the contract and the caps, counting every record and
    /// header at its host overhead; cuts error messages to [`MAX_ERROR_MESSAGE_BYTES`] and
    /// escapes their control characters.
    fn check_output(
        &self,
        inputs: usize,
        outcomes: &mut [WitOutcome],
    ) -> Result<(), TransformError> {
        if outcomes.len() != inputs {
            return Err(TransformError::Malformed {
                plugin: self.name.to_string(),
                reason: format!(
                    "{} outcomes for {inputs} input records (exactly one per record is required)",
                    outcomes.len()
                ),
            });
        }
        let over = |what, limit: u64, got: u64| TransformError::OutputLimit {
            plugin: self.name.to_string(),
            what,
            limit,
            got: Some(got),
        };
        let opt = |v: &Option<Vec<u8>>| v.as_ref().map_or(0, Vec::len) as u64;
        let (mut records, mut bytes) = (0u64, 0u64);
        for outcome in outcomes.iter_mut() {
            match outcome {
                WitOutcome::Records(rs) => {
                    records += rs.len() as u64;
                    for r in rs.iter() {
                        if r.headers.len() > MAX_HEADERS_PER_RECORD {
                            return Err(over(
                                "headers in one record",
                                MAX_HEADERS_PER_RECORD as u64,
                                r.headers.len() as u64,
                            ));
                        }
                        bytes += RECORD_OVERHEAD_BYTES
                            + r.topic.len() as u64
                            + opt(&r.key)
                            + opt(&r.value)
                            + r.headers
                                .iter()
                                .map(|(n, v)| HEADER_OVERHEAD_BYTES + n.len() as u64 + opt(v))
                                .sum::<u64>();
                    }
                }
                WitOutcome::Error(m) => {
                    bytes += m.len() as u64;
                    if m.len() > MAX_ERROR_MESSAGE_BYTES || m.contains(char::is_control) {
                        *m = sanitize(m, MAX_ERROR_MESSAGE_BYTES);
                    }
                }
            }
        }
        let max_records = self.limits.max_output_records as u64;
        if records > max_records {
            return Err(over("records", max_records, records));
        }
        if bytes > self.limits.max_output_bytes {
            return Err(over("bytes", self.limits.max_output_bytes, bytes));
        }
        Ok(())
    }

    /// Turns a wasmtime error of a guest call into the error that names the cause.
    fn classify(
        &self,
        error: wasmtime::Error,
        store: &Store<HostState>,
        call: &'static str,
    ) -> TransformError {
        let plugin = self.name.to_string();
        let state = store.data();
        let trap = error.downcast_ref::<Trap>().copied();
        if call == "process" && is_hostcall_fuel_exhausted(&error) {
            // Lifting the answer stopped at the budget set from `max_output_bytes`.
            return TransformError::OutputLimit {
                plugin,
                what: "bytes",
                limit: self.limits.max_output_bytes,
                got: None,
            };
        }
        if trap == Some(Trap::Interrupt) {
            return TransformError::Timeout {
                plugin,
                timeout: self.limits.timeout,
                call,
            };
        }
        if state.limiter.hit {
            return TransformError::MemoryLimit {
                plugin,
                limit_bytes: self.limits.memory_bytes,
                call,
            };
        }
        // One line for operators (and dead-letter rows); the whole chain, with the wasm
        // backtrace, goes to the debug log.
        tracing::debug!(
            connector = %self.connector,
            plugin = %self.name,
            call,
            error = ?error,
            "plugin call failed"
        );
        if let Some(denied) = error.downcast_ref::<crate::engine::Denied>() {
            return TransformError::Trap {
                plugin,
                call,
                trap: denied.to_string(),
                last_log: state.log.last_error.clone(),
            };
        }
        let table_full = |e: &(dyn std::error::Error + 'static)| {
            matches!(
                e.downcast_ref::<wasmtime::component::ResourceTableError>(),
                Some(wasmtime::component::ResourceTableError::Full)
            )
        };
        if error.chain().any(table_full) {
            return TransformError::Trap {
                plugin,
                call,
                trap: format!(
                    "the plugin held more than {} host resources (WASI streams, pollables) at once; drop them when done",
                    crate::host::MAX_HOST_RESOURCES
                ),
                last_log: state.log.last_error.clone(),
            };
        }
        if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
            return TransformError::Trap {
                plugin,
                call,
                trap: format!(
                    "the plugin called exit({}); plugins must return, not exit",
                    exit.0
                ),
                last_log: state.log.last_error.clone(),
            };
        }
        let text = match trap {
            Some(trap) => trap.to_string(),
            None => error
                .chain()
                .map(|c| c.to_string().lines().next().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
                .join(": "),
        };
        if trap.is_none() && call == "process" {
            // Not a trap: the result could not be lifted (e.g. invalid UTF-8, an
            // out-of-bounds list) -- a contract violation by the guest.
            return TransformError::Malformed {
                plugin,
                reason: text,
            };
        }
        TransformError::Trap {
            plugin,
            call,
            trap: text,
            last_log: state.log.last_error.clone(),
        }
    }
}

/// Room in the host-call budget for what lifting counts beyond the output itself.
const OUTPUT_FUEL_SLACK: usize = 64 << 10;

/// wasmtime stopped copying data out of the guest at the store's host-call budget. Its
/// error type is private; the message is what it exposes (a test of the output caps
/// fails if a wasmtime upgrade changes it).
fn is_hostcall_fuel_exhausted(error: &wasmtime::Error) -> bool {
    error.chain().any(|c| {
        c.to_string()
            .contains("fuel allocated for hostcalls has been exhausted")
    })
}
