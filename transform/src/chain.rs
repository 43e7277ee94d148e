//! A connector task's chain of plugin instances.

use std::sync::{Arc, Mutex};

use wasmtime::{Store, Trap};

use crate::engine::{EPOCH_TICK, Loaded, TransformEngine};
use crate::host::{HostState, LogWindow, bindings, sanitize};
use crate::{
    HEADER_OVERHEAD_BYTES, Limits, MAX_ERROR_MESSAGE_BYTES, MAX_HEADERS_PER_RECORD, Outcome,
    PluginSpec, RECORD_OVERHEAD_BYTES, Record, TransformError,
};

type WitRecord = bindings::sluice::transform::types::Record;
type WitOutcome = bindings::sluice::transform::types::Outcome;

/// Told of every `process` call of a plugin: its name, the call's wall time, and when the
/// call failed, the failure's kind ([`TransformError::kind`]). For metrics.
pub type CallObserver = Arc<dyn Fn(&str, std::time::Duration, Option<&'static str>) + Send + Sync>;

/// The plugins of one connector task, in order, each in its own `Store`.
///
/// `process` sends one batch through every plugin (one guest call per plugin) and returns
/// one [`Outcome`] per input record. The chain is `Send`: run it on the task's thread.
pub struct TransformChain {
    stages: Vec<Stage>,
    /// Raised by the owner to end a search for failing records early
    /// ([`set_cancel`](Self::set_cancel)).
    cancel: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl std::fmt::Debug for TransformChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.stages.iter().map(|s| &*s.name))
            .finish()
    }
}

/// One plugin of the chain.
struct Stage {
    name: Arc<str>,
    connector: Arc<str>,
    config: Vec<(String, String)>,
    limits: Limits,
    loaded: Arc<Loaded>,
    engine: TransformEngine,
    /// `None` after a failed call: the next call re-instantiates.
    live: Option<Live>,
    stats: PluginStats,
    /// The plugin's log rate limit, kept across its instances.
    log_window: Arc<Mutex<LogWindow>>,
    /// Told of every `process` call.
    observer: Option<CallObserver>,
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

struct Live {
    store: Store<HostState>,
    instance: bindings::Transform,
}

impl TransformChain {
    /// Loads every plugin (compiling it, or taking it from the caches), instantiates it
    /// and runs its `init` with its config. Fails on the first plugin that cannot start.
    pub fn new(
        engine: &TransformEngine,
        connector: &str,
        specs: &[PluginSpec],
    ) -> Result<Self, TransformError> {
        let connector: Arc<str> = Arc::from(connector);
        let mut stages = Vec::with_capacity(specs.len());
        for spec in specs {
            let loaded = engine.load(&spec.name, &spec.path)?;
            let mut stage = Stage {
                name: Arc::from(spec.name.as_str()),
                connector: connector.clone(),
                config: spec
                    .config
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                limits: spec.limits,
                loaded,
                engine: engine.clone(),
                live: None,
                log_window: Arc::default(),
                observer: None,
                stats: PluginStats {
                    plugin: spec.name.clone(),
                    ..PluginStats::default()
                },
            };
            stage.instantiate()?;
            stages.push(stage);
        }
        Ok(TransformChain {
            stages,
            cancel: None,
        })
    }

    /// A flag that, once raised, ends a search for failing records
    /// ([`process_isolating`](Self::process_isolating)) before its next call: what it
    /// did not reach is [`Outcome::NotIsolated`]. For an owner that is stopping and will
    /// not use the answer.
    pub fn set_cancel(&mut self, cancel: Arc<std::sync::atomic::AtomicBool>) {
        self.cancel = Some(cancel);
    }

    /// Tells `observer` of every `process` call of every plugin of the chain.
    pub fn set_observer(&mut self, observer: CallObserver) {
        for stage in &mut self.stages {
            stage.observer = Some(observer.clone());
        }
    }

    /// The plugin names, in chain order.
    pub fn plugins(&self) -> impl Iterator<Item = &str> {
        self.stages.iter().map(|s| &*s.name)
    }

    /// Transforms one batch. The result is aligned 1:1 with `batch`: plugin N's outputs
    /// feed plugin N+1; a record that fails in plugin N (or any of whose outputs fails
    /// later) is [`Outcome::Failed`] and is not passed on. Output records always carry
    /// their input's topic, partition and offset (whatever a plugin wrote there); key,
    /// value, headers and timestamp are the plugin's.
    ///
    /// An `Err` is a batch failure in one plugin (see
    /// [`TransformError::is_batch_failure`]); that plugin is re-instantiated on the next
    /// call, so the chain stays usable.
    pub fn process(&mut self, batch: Vec<Record>) -> Result<Vec<Outcome>, TransformError> {
        let n = batch.len();
        let mut failed: Vec<Option<(Arc<str>, String)>> = vec![None; n];
        // The records flowing between stages, each tagged with its input's index (the
        // tags are non-decreasing).
        let mut origins: Vec<usize> = (0..n).collect();
        // Each input's topic/partition/offset: outputs always carry their input's, so a
        // plugin cannot disturb offset bookkeeping. Topics are interned (a batch has few).
        let mut topics: Vec<String> = Vec::new();
        let mut meta: Vec<(usize, i32, i64)> = Vec::with_capacity(n);
        for r in &batch {
            let t = match topics.iter().rposition(|t| *t == r.topic) {
                Some(t) => t,
                None => {
                    topics.push(r.topic.clone());
                    topics.len() - 1
                }
            };
            meta.push((t, r.partition, r.offset));
        }
        let mut current: Vec<WitRecord> = batch.into_iter().map(WitRecord::from).collect();

        for stage in &mut self.stages {
            if current.is_empty() {
                break;
            }
            let outcomes = stage.process(&current)?;
            let mut next_origins = Vec::with_capacity(current.len());
            let mut next = Vec::with_capacity(current.len());
            for (origin, outcome) in origins.iter().copied().zip(outcomes) {
                match outcome {
                    WitOutcome::Records(records) => {
                        let (t, partition, offset) = meta[origin];
                        next_origins.extend(std::iter::repeat_n(origin, records.len()));
                        next.extend(records.into_iter().map(|mut r| {
                            if r.topic != topics[t] {
                                r.topic.clone_from(&topics[t]);
                            }
                            r.partition = partition;
                            r.offset = offset;
                            r
                        }));
                    }
                    WitOutcome::Error(message) => {
                        if failed[origin].is_none() {
                            failed[origin] = Some((stage.name.clone(), message));
                        }
                    }
                }
            }
            // Drop siblings of failed records: an input fails as a whole.
            if next_origins.iter().any(|&o| failed[o].is_some()) {
                let (o, r): (Vec<_>, Vec<_>) = next_origins
                    .into_iter()
                    .zip(next)
                    .filter(|(o, _)| failed[*o].is_none())
                    .unzip();
                next_origins = o;
                next = r;
            }
            origins = next_origins;
            current = next;
        }

        let mut outputs: Vec<Vec<Record>> = vec![Vec::new(); n];
        for (origin, record) in origins.into_iter().zip(current) {
            outputs[origin].push(record.into());
        }
        Ok(outputs
            .into_iter()
            .zip(failed)
            .map(|(records, failure)| match failure {
                Some((plugin, message)) => Outcome::Failed {
                    plugin: plugin.to_string(),
                    message,
                },
                None => Outcome::Records(records),
            })
            .collect())
    }
}

/// What one batch's search for the records that make a plugin fail may cost
/// ([`TransformChain::process_isolating`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Isolation {
    /// Failed calls allowed (every trap, deadline, memory or output limit counts).
    pub max_failed_calls: usize,
    /// Wall-clock time allowed for the whole search, the first call included.
    pub max_time: std::time::Duration,
}

impl Default for Isolation {
    /// 64 failed calls and 5 minutes: a few spinning records in a batch cost a few
    /// deadlines (2 s each by default), and a plugin that fails on everything is given up
    /// on well before Kafka's 5-minute poll interval would matter.
    fn default() -> Self {
        Isolation {
            max_failed_calls: 64,
            max_time: std::time::Duration::from_secs(300),
        }
    }
}

/// The budget of one search, as it is spent.
struct Search {
    failed_calls_left: usize,
    deadline: std::time::Instant,
    limits: Isolation,
    cancel: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl Search {
    fn exhausted(&self) -> Option<String> {
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        {
            Some("the search was cancelled (the task is stopping)".to_owned())
        } else if self.failed_calls_left == 0 {
            Some(format!(
                "{} failed calls spent isolating the batch's failing records",
                self.limits.max_failed_calls
            ))
        } else if std::time::Instant::now() >= self.deadline {
            Some(format!(
                "{:?} spent isolating the batch's failing records",
                self.limits.max_time
            ))
        } else {
            None
        }
    }
}

impl TransformChain {
    /// Per-plugin counters, in chain order.
    pub fn stats(&self) -> Vec<PluginStats> {
        self.stages.iter().map(|s| s.stats.clone()).collect()
    }

    /// Like [`process`](Self::process), but a batch failure (trap, timeout, memory,
    /// malformed or oversized output) is isolated: the records that cause it become
    /// [`Outcome::Failed`] with the error text, the others are transformed normally.
    ///
    /// A batch that ran out of its CPU deadline is retried record by record, so each
    /// record that spins costs one deadline (halving would pay a deadline at every level);
    /// other failures are cheap and the batch is split in halves. Every failed call counts
    /// against `budget.max_failed_calls` and the whole search against `budget.max_time`;
    /// when either runs out (or the chain's cancel flag is raised), the records not yet
    /// resolved are all [`Outcome::NotIsolated`] (they were not found to fail), so the
    /// pipeline never stalls for long.
    ///
    /// `Err` only for errors that splitting cannot help: a plugin that can no longer be
    /// instantiated, or whose `init` now fails ([`TransformError::is_chain_failure`]).
    pub fn process_isolating(
        &mut self,
        batch: Vec<Record>,
        budget: Isolation,
    ) -> Result<Vec<Outcome>, TransformError> {
        let mut search = Search {
            failed_calls_left: budget.max_failed_calls.max(1),
            deadline: std::time::Instant::now() + budget.max_time,
            limits: budget,
            cancel: self.cancel.clone(),
        };
        self.isolate(batch, &mut search, None)
    }

    fn isolate(
        &mut self,
        batch: Vec<Record>,
        search: &mut Search,
        last: Option<&TransformError>,
    ) -> Result<Vec<Outcome>, TransformError> {
        if let (Some(why), Some(last)) = (search.exhausted(), last) {
            return Ok(not_isolated(&why, last, batch.len()));
        }
        let error = match self.process(batch.clone()) {
            Ok(outcomes) => return Ok(outcomes),
            Err(e) if e.is_batch_failure() => e,
            Err(e) => return Err(e),
        };
        search.failed_calls_left = search.failed_calls_left.saturating_sub(1);
        if batch.len() <= 1 {
            let plugin = error.plugin().unwrap_or_default().to_owned();
            let message = error.to_string();
            return Ok(vec![Outcome::Failed { plugin, message }; batch.len()]);
        }
        if let Some(why) = search.exhausted() {
            return Ok(not_isolated(&why, &error, batch.len()));
        }
        let mut out = Vec::with_capacity(batch.len());
        if matches!(error, TransformError::Timeout { .. }) {
            for record in batch {
                out.extend(self.isolate(vec![record], search, Some(&error))?);
            }
        } else {
            let mut first = batch;
            let second = first.split_off(first.len() / 2);
            out.extend(self.isolate(first, search, Some(&error))?);
            out.extend(self.isolate(second, search, Some(&error))?);
        }
        Ok(out)
    }
}

/// `n` records that the search ran out of budget for.
fn not_isolated(why: &str, last: &TransformError, n: usize) -> Vec<Outcome> {
    let plugin = last.plugin().unwrap_or_default().to_owned();
    let reason = format!("{why}; the last failure: {last}");
    vec![Outcome::NotIsolated { plugin, reason }; n]
}

/// Loads a plugin, checks that it implements the `sluice:transform@0.1.0` world and
/// runs its `init` with its config (for `sluice validate`).
pub fn check_plugin(engine: &TransformEngine, spec: &PluginSpec) -> Result<(), TransformError> {
    TransformChain::new(engine, "validate", std::slice::from_ref(spec)).map(drop)
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
    fn instantiate(&mut self) -> Result<(), TransformError> {
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
    fn process(&mut self, batch: &[WitRecord]) -> Result<Vec<WitOutcome>, TransformError> {
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
