//! Which partitions of a connector no task reads, and what waits in them.
//!
//! A task knows the lag of the partitions it holds (`task::actor`); a partition that no
//! task holds has nobody to say it waits: the only task failed for good, the group gave a
//! new member an empty assignment, every process of the connector is gone. So each
//! connector's runner starts a *coverage watcher* beside its tasks: every
//! [`COVERAGE_INTERVAL`] it lists every partition of the connector's topics (asked of the
//! broker), takes away those a task of some process holds (this process's tasks' lag
//! gauges, the other processes' heartbeats), and for each one left asks the broker for its
//! log end and the sink for its stored next offset. Those partitions are *unread*: their
//! lag counts in the connector's lag, `sluice_consumer_lag` has a series for each (label
//! `task="none"`), and the status answer lists them with the time since when no task has
//! read them. One left unread longer than a rebalance takes (the consumer's
//! `session.timeout.ms` plus [`REBALANCE_MARGIN`]) makes the connector *degraded*
//! (`sluice_unread_partitions`, the status answer's `health`), unless the operator
//! stopped it.
//!
//! A safeguard for a group that leaves partitions unassigned (a coordinator that kept a
//! dead member, Redpanda Connect #3410): once partitions have stayed unread past the grace
//! while the connector runs, the watcher of one process (the one that exports, below) has
//! its running tasks leave and rejoin the group (each restarted: a new member, a new
//! rebalance), logging why, again after twice as long each time it did not help (at most
//! every [`REJOIN_BACKOFF_MAX`]). A partition created while the connector runs counts as
//! unread only from the tasks' next metadata refresh on, and nothing is counted while a
//! process of an earlier version (whose heartbeats do not say what it holds) runs it.
//!
//! Every process of a connector watches (each answers its own status calls), but only one
//! exports the series: the one whose worker id sorts first among the processes with fresh
//! heartbeats, so that a sum over processes counts each partition once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::context::Context;
use super::messages::{Command, ConnectorState, ConnectorView};
use crate::config::{ConnectorConfig, Guarantee};
use crate::metrics::ConnectorMetrics;
use crate::sink::control::now_ms;
use crate::sink::{ControlStore, Sink};

/// How often the watcher counts the connector's partitions.
pub const COVERAGE_INTERVAL: Duration = Duration::from_secs(5);
/// How long past `session.timeout.ms` a partition may stay unread before the connector is
/// degraded: the group's rebalance after a member left takes about this.
pub const REBALANCE_MARGIN: Duration = Duration::from_secs(15);
/// The longest wait between two rejoins while partitions stay unread.
pub const REJOIN_BACKOFF_MAX: Duration = Duration::from_secs(600);
/// librdkafka's `session.timeout.ms` when the file does not set it.
const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(45);

/// A partition of the connector's topics that no task reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadPartition {
    pub topic: String,
    pub partition: i32,
    /// Records waiting: the log end minus the stored next offset (the whole log when
    /// nothing is stored); `None` when the broker did not say.
    pub lag: Option<i64>,
    /// Since when (ms since the epoch, this process's clock) no task has read it, as far
    /// as this process has watched.
    pub since_ms: i64,
}

/// What the watcher last found, for the status answer.
#[derive(Debug, Clone, Default)]
pub struct CoverageView {
    /// The partitions no task reads, by topic and partition.
    pub unread: Vec<UnreadPartition>,
    /// How long one may stay unread before the connector is degraded.
    pub grace: Duration,
    /// Why the last count failed (the broker or the database did not answer), if it did.
    pub error: Option<String>,
}

impl CoverageView {
    /// The unread partitions that have stayed so past the grace, at `now_ms`.
    pub fn overdue(&self, now_ms: i64) -> impl Iterator<Item = &UnreadPartition> {
        let grace = i64::try_from(self.grace.as_millis()).unwrap_or(i64::MAX);
        self.unread
            .iter()
            .filter(move |p| now_ms.saturating_sub(p.since_ms) >= grace)
    }
}

/// The watcher's findings, shared with the connector's handle.
#[derive(Debug, Default)]
pub struct Coverage {
    view: Mutex<CoverageView>,
    /// The partitions whose `task="none"` lag series this process exports.
    exported: Mutex<BTreeSet<(String, i32)>>,
}

impl Coverage {
    /// The last findings.
    pub fn view(&self) -> CoverageView {
        self.view
            .lock()
            .map(|v| v.clone())
            .unwrap_or_else(|e| e.into_inner().clone())
    }

    /// Sets the exported series to `unread` (empty: removes them all).
    fn export(&self, metrics: &ConnectorMetrics, unread: &[UnreadPartition]) {
        let mut exported = self
            .exported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // A partition whose log end the broker did not give has no series (not a lag of 0).
        let keep: BTreeSet<(String, i32)> = unread
            .iter()
            .filter(|p| p.lag.is_some())
            .map(|p| (p.topic.clone(), p.partition))
            .collect();
        for (topic, partition) in exported.difference(&keep) {
            metrics.clear_unread_lag(topic, *partition);
        }
        for p in unread {
            if let Some(lag) = p.lag {
                metrics.set_unread_lag(&p.topic, p.partition, lag);
            }
        }
        *exported = keep;
    }

    /// The watcher stopped (the sink closed, the connector ends): its series go, and
    /// nothing is known of the partitions any more.
    pub(super) fn forget(&self, metrics: &ConnectorMetrics) {
        self.export(metrics, &[]);
        metrics.set_unread_partitions(0);
        self.update(|v| {
            v.unread.clear();
            v.error = None;
        });
    }

    fn update(&self, change: impl FnOnce(&mut CoverageView)) {
        let mut view = self
            .view
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        change(&mut view);
    }
}

/// librdkafka's `topic.metadata.refresh.interval.ms` when the file does not set it.
const DEFAULT_METADATA_REFRESH: Duration = Duration::from_secs(300);

/// How long after the watcher first sees a partition created while it runs (a new topic
/// under `topics_regex`, partitions added to a topic) the tasks may take to notice it:
/// librdkafka's `topic.metadata.refresh.interval.ms` (5 minutes by default).
pub fn metadata_refresh(context: &Context, connector: &ConnectorConfig) -> Duration {
    consumer_duration(
        context,
        connector,
        "topic.metadata.refresh.interval.ms",
        DEFAULT_METADATA_REFRESH,
    )
}

/// How long a partition may stay unread before the connector is degraded: the consumer's
/// `session.timeout.ms` plus [`REBALANCE_MARGIN`].
pub fn grace(context: &Context, connector: &ConnectorConfig) -> Duration {
    consumer_duration(
        context,
        connector,
        "session.timeout.ms",
        DEFAULT_SESSION_TIMEOUT,
    ) + REBALANCE_MARGIN
}

/// A consumer setting in milliseconds as the connector's tasks get it (the file's
/// `kafka.properties` over sluice's defaults), or `default` when neither sets it.
fn consumer_duration(
    context: &Context,
    connector: &ConnectorConfig,
    key: &str,
    default: Duration,
) -> Duration {
    crate::kafka::consumer::consumer_config(&context.kafka, &context.brokers, connector, 0)
        .get(key)
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .map_or(default, Duration::from_millis)
}

/// The partitions of `all` that no task holds, given those `held`; keeps the `since` of
/// those `before` listed, starts the others at `now`.
fn unread_now(
    all: &[(String, i32)],
    held: &BTreeSet<(String, i32)>,
    before: &[UnreadPartition],
    now: i64,
) -> Vec<(String, i32, i64)> {
    let since: std::collections::HashMap<(&str, i32), i64> = before
        .iter()
        .map(|u| ((u.topic.as_str(), u.partition), u.since_ms))
        .collect();
    all.iter()
        .filter(|p| !held.contains(*p))
        .map(|(topic, partition)| {
            let since = since
                .get(&(topic.as_str(), *partition))
                .copied()
                .unwrap_or(now);
            (topic.clone(), *partition, since)
        })
        .collect()
}

/// Whether this process exports the unread partitions' series and may have its tasks
/// rejoin: its worker id sorts first among those with fresh heartbeats.
fn exports(worker: &str, view: &ConnectorView) -> bool {
    view.others
        .iter()
        .filter(|row| row.figures.is_some())
        .all(|row| row.worker.as_str() > worker)
}

/// A process of an earlier version runs the connector: its heartbeats say its tasks run but
/// not which partitions they hold, so what no task reads cannot be known (during a rolling
/// upgrade).
fn older_process(view: &ConnectorView) -> Option<&str> {
    view.others
        .iter()
        .find(|row| row.figures.is_none() && row.state != "UNASSIGNED")
        .map(|row| row.worker.as_str())
}

/// When the watcher next has this process's tasks rejoin the group.
#[derive(Debug, Default)]
struct Rejoin {
    /// Not before this; `None` until partitions are overdue.
    due: Option<Instant>,
    /// Rejoins since every partition was last read.
    attempts: u32,
}

impl Rejoin {
    /// Partitions are overdue: true when a rejoin is due now (the first at once), and the
    /// next one is set twice as far as the last (from `grace`, at most
    /// [`REJOIN_BACKOFF_MAX`]).
    fn due(&mut self, grace: Duration) -> bool {
        let now = Instant::now();
        if self.due.is_some_and(|due| now < due) {
            return false;
        }
        let wait = grace
            .saturating_mul(2u32.saturating_pow(self.attempts))
            .min(REJOIN_BACKOFF_MAX);
        self.due = Some(now + wait);
        self.attempts = self.attempts.saturating_add(1);
        true
    }

    /// Every partition is read again.
    fn reset(&mut self) {
        *self = Rejoin::default();
    }
}

/// The watcher's loop, until the runner aborts it (its sink closed).
pub(super) async fn watch_coverage(
    context: Arc<Context>,
    config: Arc<ConnectorConfig>,
    sink: Arc<Sink>,
    metrics: Arc<ConnectorMetrics>,
    coverage: Arc<Coverage>,
    view: watch::Receiver<ConnectorView>,
    commands: mpsc::WeakUnboundedSender<Command>,
) {
    let grace = grace(&context, &config);
    let refresh = i64::try_from(metadata_refresh(&context, &config).as_millis()).unwrap_or(0);
    coverage.update(|v| v.grace = grace);
    metrics.set_unread_partitions(0);
    let mut warned = false;
    let mut rejoin = Rejoin::default();
    // The partitions seen at the first count; one that appears later is unread only from
    // the tasks' next metadata refresh on.
    let mut known: Option<BTreeSet<(String, i32)>> = None;
    // The tasks subscribe first: a count before they could hold anything says nothing.
    tokio::time::sleep(COVERAGE_INTERVAL).await;
    loop {
        let now = now_ms();
        let snapshot = view.borrow().clone();
        let snapshot = ConnectorView {
            others: snapshot
                .others
                .iter()
                .cloned()
                .map(|row| row.seen_at(now))
                .collect(),
            ..snapshot
        };
        if let Some(worker) = older_process(&snapshot) {
            coverage.export(&metrics, &[]);
            metrics.set_unread_partitions(0);
            coverage.update(|v| {
                v.unread.clear();
                v.error = Some(format!(
                    "process {worker} runs an earlier version of sluice, whose heartbeats do not say which partitions its tasks hold: not counted until it is upgraded"
                ));
            });
            tokio::time::sleep(COVERAGE_INTERVAL).await;
            continue;
        }
        match count(
            &context,
            &config,
            &sink.control(),
            &metrics,
            &coverage,
            &snapshot,
        )
        .await
        {
            Ok(mut unread) => {
                let seen: BTreeSet<(String, i32)> = unread
                    .iter()
                    .map(|p| (p.topic.clone(), p.partition))
                    .collect();
                match &mut known {
                    None => known = Some(seen),
                    Some(known) => {
                        for p in &mut unread {
                            let key = (p.topic.clone(), p.partition);
                            if !known.contains(&key) && p.since_ms >= now {
                                // New since the watcher started: the tasks' librdkafka
                                // takes it at its next metadata refresh.
                                p.since_ms = now.saturating_add(refresh);
                            }
                        }
                        known.extend(seen);
                    }
                }
                let overdue = unread
                    .iter()
                    .filter(|p| now.saturating_sub(p.since_ms) >= grace.as_millis() as i64)
                    .count();
                let stopped = snapshot.state == ConnectorState::Stopped;
                let export = exports(&context.worker_id, &snapshot);
                coverage.export(&metrics, if export { &unread } else { &[] });
                let degraded = if stopped || !export { 0 } else { overdue };
                metrics.set_unread_partitions(degraded as i64);
                if overdue > 0 && !stopped && !warned {
                    let names: Vec<String> = unread
                        .iter()
                        .take(10)
                        .map(|p| format!("{}-{}", p.topic, p.partition))
                        .collect();
                    tracing::warn!(partitions = ?names, unread = unread.len(), after = ?grace,
                        "no task reads some partitions of the connector (a failed task, or a group that left them unassigned); their records wait");
                    warned = true;
                } else if overdue == 0 && warned {
                    tracing::info!("every partition of the connector is read again");
                    warned = false;
                }
                let running = snapshot.state == ConnectorState::Running;
                // One process rejoins (the one that exports), not all of them at once.
                if overdue > 0 && running && export && rejoin.due(grace) {
                    let tasks: Vec<usize> = snapshot
                        .tasks
                        .iter()
                        .filter(|t| t.state == "RUNNING")
                        .map(|t| t.id)
                        .collect();
                    if let (false, Some(commands)) = (tasks.is_empty(), commands.upgrade()) {
                        tracing::warn!(
                            ?tasks,
                            unread = unread.len(),
                            attempt = rejoin.attempts,
                            "partitions have stayed unread past the grace: this process's tasks leave and rejoin the group"
                        );
                        for task in tasks {
                            let _ = commands.send(Command::Rejoin(task));
                        }
                    }
                } else if overdue == 0 {
                    rejoin.reset();
                }
                coverage.update(|v| {
                    v.unread = unread;
                    v.error = None;
                });
            }
            Err(error) => {
                tracing::debug!(%error, "cannot count the connector's partitions");
                coverage.update(|v| v.error = Some(error));
            }
        }
        tokio::time::sleep(COVERAGE_INTERVAL).await;
    }
}

/// One count: every partition, those held, and the log end and stored offset of the rest.
async fn count(
    context: &Arc<Context>,
    config: &Arc<ConnectorConfig>,
    control: &ControlStore<'_>,
    metrics: &ConnectorMetrics,
    coverage: &Coverage,
    view: &ConnectorView,
) -> Result<Vec<UnreadPartition>, String> {
    let all = {
        let (context, config) = (context.clone(), config.clone());
        tokio::task::spawn_blocking(move || {
            crate::kafka::group::all_partitions(&context.kafka, &context.brokers, &config)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("cannot list the topics' partitions: {e}"))?
    };
    // Held by a task of this process: those whose lag is not known yet too.
    let mut held: BTreeSet<(String, i32)> = metrics
        .lags()
        .into_iter()
        .map(|(_, topic, partition, _)| (topic, partition))
        .chain(metrics.held())
        .collect();
    for row in &view.others {
        if let Some(figures) = &row.figures {
            held.extend(
                figures
                    .partitions
                    .iter()
                    .map(|p| (p.topic.clone(), p.partition)),
            );
        }
    }
    let before = coverage.view().unread;
    let unread = unread_now(&all, &held, &before, now_ms());
    if unread.is_empty() {
        return Ok(Vec::new());
    }
    // Where each would start: the stored offsets (the database, or the group's with
    // at_least_once), and the log ends.
    let stored: BTreeMap<(String, i32), i64> = match config.delivery.guarantee {
        Guarantee::ExactlyOnce => control
            .read_all_offsets()
            .await
            .map_err(|e| format!("cannot read the stored offsets: {e}"))?,
        Guarantee::AtLeastOnce => {
            let (context, config) = (context.clone(), config.clone());
            tokio::task::spawn_blocking(move || {
                crate::kafka::group::committed_offsets(&context.kafka, &context.brokers, &config)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot read the group's offsets: {e}"))?
        }
    }
    .into_iter()
    .map(|(topic, partition, next)| ((topic, partition), next))
    .collect();
    let asked: Vec<(String, i32)> = unread.iter().map(|(t, p, _)| (t.clone(), *p)).collect();
    let ranges = {
        let (context, config) = (context.clone(), config.clone());
        tokio::task::spawn_blocking(move || {
            crate::kafka::group::log_ranges(&context.kafka, &context.brokers, &config, &asked)
        })
        .await
        .map_err(|e| e.to_string())?
    };
    Ok(unread
        .into_iter()
        .zip(ranges)
        .map(|((topic, partition, since_ms), range)| {
            let next = stored.get(&(topic.clone(), partition)).copied();
            let lag = range.map(|(low, high)| (high - next.unwrap_or(low).max(low)).max(0));
            UnreadPartition {
                topic,
                partition,
                lag,
                since_ms,
            }
        })
        .collect())
}

/// Whether the connector is degraded, and why: a task failed (here or in another process),
/// or partitions no task has read past the grace. Not while the operator stopped it.
pub fn health(view: &ConnectorView, coverage: &CoverageView, now: i64) -> Vec<String> {
    let mut reasons = Vec::new();
    match view.state {
        ConnectorState::Stopped => return reasons,
        ConnectorState::Failed => reasons.push(format!(
            "the connector FAILED: {}",
            view.trace.as_deref().unwrap_or("see its trace")
        )),
        _ => {}
    }
    for task in &view.tasks {
        if task.state == "FAILED" {
            let first = task
                .trace
                .as_deref()
                .and_then(|t| t.lines().next())
                .unwrap_or("");
            reasons.push(format!("task {} FAILED: {first}", task.id));
        }
    }
    for row in &view.others {
        if row.state == "FAILED" {
            reasons.push(format!("task {} of {} FAILED", row.task, row.worker));
        }
    }
    let overdue: Vec<&UnreadPartition> = coverage.overdue(now).collect();
    if let Some(oldest) = overdue.iter().map(|p| p.since_ms).min() {
        let waiting: i64 = overdue.iter().filter_map(|p| p.lag).sum();
        let seconds = now.saturating_sub(oldest) / 1000;
        reasons.push(format!(
            "{} partition(s) no task reads, for {seconds} s, {waiting} record(s) waiting",
            overdue.len()
        ));
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(topic: &str, partition: i32) -> (String, i32) {
        (topic.to_string(), partition)
    }

    #[test]
    fn unread_are_those_no_task_holds_and_keep_their_since() {
        let all = [p("a", 0), p("a", 1), p("B", 0)];
        let held: BTreeSet<_> = [p("a", 1)].into_iter().collect();
        let before = [UnreadPartition {
            topic: "a".into(),
            partition: 0,
            lag: Some(3),
            since_ms: 100,
        }];
        let unread = unread_now(&all, &held, &before, 500);
        assert_eq!(
            unread,
            [("a".to_string(), 0, 100), ("B".to_string(), 0, 500)]
        );
    }

    #[test]
    fn topics_that_differ_only_in_case_are_two_partitions() {
        let all = [p("orders", 0), p("Orders", 0)];
        let held: BTreeSet<_> = [p("orders", 0)].into_iter().collect();
        assert_eq!(
            unread_now(&all, &held, &[], 7),
            [("Orders".to_string(), 0, 7)]
        );
    }

    #[test]
    fn rejoins_back_off_and_start_over() {
        let grace = Duration::from_secs(20);
        let mut rejoin = Rejoin::default();
        assert!(rejoin.due(grace));
        assert!(!rejoin.due(grace), "not again before the backoff");
        let first = rejoin.due.expect("set");
        rejoin.due = Some(Instant::now());
        assert!(rejoin.due(grace));
        let second = rejoin.due.expect("set");
        assert!(second.duration_since(first) >= Duration::from_secs(19));
        for _ in 0..20 {
            rejoin.due = Some(Instant::now());
            assert!(rejoin.due(grace));
        }
        assert!(rejoin.due.expect("set") <= Instant::now() + REJOIN_BACKOFF_MAX);
        rejoin.reset();
        assert!(rejoin.due(grace));
        assert_eq!(rejoin.attempts, 1);
    }

    #[test]
    fn overdue_after_the_grace_only() {
        let view = CoverageView {
            unread: vec![
                UnreadPartition {
                    topic: "t".into(),
                    partition: 0,
                    lag: Some(5),
                    since_ms: 1_000,
                },
                UnreadPartition {
                    topic: "t".into(),
                    partition: 1,
                    lag: None,
                    since_ms: 50_000,
                },
            ],
            grace: Duration::from_secs(30),
            error: None,
        };
        let overdue: Vec<i32> = view.overdue(40_000).map(|p| p.partition).collect();
        assert_eq!(overdue, [0]);
        assert_eq!(view.overdue(20_000).count(), 0);
    }
}
