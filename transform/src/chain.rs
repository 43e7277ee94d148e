//! A connector task's chain of plugin instances.

use std::sync::Arc;

use crate::engine::TransformEngine;
pub use crate::stage::{CallObserver, PluginStats};
use crate::stage::{Stage, WitOutcome, WitRecord};
use crate::{Outcome, PluginSpec, Record, TransformError};

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
