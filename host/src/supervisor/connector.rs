//! One connector under supervision: a tokio task of its own (the *runner*) that connects
//! the connector's sink, starts its tasks, restarts the ones that fail for a transient
//! reason, applies what the operator asks (pause, resume, stop, restart), and shares the
//! connector's state with the other processes through its sink database.
//!
//! Connectors are isolated from each other: a database that is down delays only its own
//! connector, which waits for it (state `UNASSIGNED` with the reason) while the others run.
//!
//! ```text
//!            connect ok                 task fails (transient)
//! UNASSIGNED ─────────► RUNNING ◄──────────────────────► task RESTARTING (errors.restart)
//!     ▲  │ db down,        │ ▲ pause / resume
//!     │  │ retried         ▼ │
//!     └──┘               PAUSED          stop ──► STOPPED (no tasks) ── resume ──► RUNNING
//! a permanent failure of the sink (a table that does not match, a bad URL): FAILED,
//! until restarted through the admin API
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};

use super::context::Context;
use super::messages::{Command, ConnectorState, ConnectorView};
use crate::config::{ConnectorConfig, DeadLetterDestination};
use crate::deliver::Policy;
use crate::kafka::dead_letter_producer::DeadLetterProducer;
use crate::metrics::ConnectorMetrics;
use crate::sink::Sink;
use crate::sink::control::{Target, TaskRow};
use crate::task::{self, Control, TaskHandle, TaskSpec, TaskState, TaskStatus};
use crate::validate::RecordSchema;

/// How often the runner looks at its tasks.
const CHECK_INTERVAL: Duration = Duration::from_millis(250);
/// How often the runner reads the operator's target from the database and writes its
/// tasks' heartbeats: every process applies a pause or a stop within about this long.
pub const CONTROL_INTERVAL: Duration = Duration::from_secs(2);
/// Longest a sync with the database may hold the runner (commands wait meanwhile).
pub(super) const SYNC_TIMEOUT: Duration = Duration::from_secs(3);
/// A task that ran this long without failing starts its restart backoff over.
const RESTART_RESET: Duration = Duration::from_secs(600);

/// A task slot of this process: the running task, or the failure it left.
pub(super) struct Slot {
    pub(super) id: usize,
    pub(super) handle: Option<TaskHandle>,
    /// The last status seen.
    pub(super) status: Option<TaskStatus>,
    /// Restarts since the task last ran for [`RESTART_RESET`].
    pub(super) restarts: u32,
    /// A transiently failed task starts again at this time.
    pub(super) restart_at: Option<Instant>,
    pub(super) started: Instant,
}

pub(super) struct Runner {
    pub(super) context: Arc<Context>,
    pub(super) config: Arc<ConnectorConfig>,
    pub(super) metrics: Arc<ConnectorMetrics>,
    pub(super) history: Arc<super::history::History>,
    /// The partitions no task reads (its watcher runs while the sink is connected).
    pub(super) coverage: Arc<super::coverage::Coverage>,
    pub(super) commands: mpsc::UnboundedReceiver<Command>,
    /// A sender to `commands` that does not keep the channel open (the coverage watcher
    /// asks for task restarts through it).
    pub(super) own_commands: mpsc::WeakUnboundedSender<Command>,
    pub(super) view: watch::Sender<ConnectorView>,
    /// What the operator asked for (as last read or set).
    pub(super) target: Target,
    /// A target set here that the database has not taken yet.
    pub(super) pending_target: Option<Target>,
    /// A restart asked here that the database has not taken yet.
    pub(super) pending_restart: Option<(bool, bool)>,
    /// The last restart request seen in the database.
    pub(super) restart_seen: Option<i64>,
    pub(super) sink: Option<Arc<Sink>>,
    pub(super) policy: Option<Arc<Policy>>,
    pub(super) schema: Option<Arc<RecordSchema>>,
    /// The background cleanups while the sink is connected: old producer ids (with
    /// `delivery.dedup`), old tombstones (with `sink.version`).
    pub(super) cleaners: Vec<tokio::task::JoinHandle<()>>,
    /// Why the connector failed permanently (before any task could start).
    pub(super) failure: Option<String>,
    pub(super) slots: Vec<Slot>,
    pub(super) last_sync: Option<Instant>,
    pub(super) others: Vec<TaskRow>,
}

/// How an attempt to connect ended.
enum Connect {
    Connected,
    /// Worth waiting for (the database is unreachable): tried again.
    Waiting(String),
    /// Not worth trying again until the operator restarts it.
    Failed(String),
}

impl Runner {
    pub(super) async fn run(mut self) -> Vec<String> {
        let mut attempts = 0u32;
        loop {
            if self.sink.is_none() && self.failure.is_none() {
                match self.connect().await {
                    Connect::Connected if !self.first_sync().await => {
                        // The operator's target is unknown: starting tasks could undo a
                        // stop or a pause. Try again with the connection.
                        self.close_sink().await;
                        self.publish(
                            ConnectorState::Unassigned,
                            Some(
                                "waiting to read the connector's target state (sluice_control)"
                                    .into(),
                            ),
                        );
                        self.metrics.retried("connect");
                        let wait = self.config.errors.retry.backoff(attempts);
                        attempts = attempts.saturating_add(1);
                        if self.wait_commands(wait).await {
                            return self.finish().await;
                        }
                        continue;
                    }
                    Connect::Connected => {
                        if attempts > 0 {
                            tracing::info!(attempts, "database available; the connector starts");
                        }
                        attempts = 0;
                        self.apply_target().await;
                        tracing::info!(tasks = self.config.tasks, table = %self.config.sink.table_label(),
                            target = self.target.name(), "connector started");
                    }
                    Connect::Waiting(why) => {
                        if attempts == 0 {
                            tracing::warn!(error = %why,
                                "database unavailable; the connector waits for it (the others run)");
                        }
                        self.metrics.retried("connect");
                        let wait = self.config.errors.retry.backoff(attempts);
                        attempts = attempts.saturating_add(1);
                        self.publish(
                            ConnectorState::Unassigned,
                            Some(format!("waiting for the database: {why}")),
                        );
                        if self.wait_commands(wait).await {
                            return self.finish().await;
                        }
                        continue;
                    }
                    Connect::Failed(why) => {
                        tracing::error!(error = %why, "connector failed; restart it through the admin API once fixed");
                        self.failure = Some(why);
                    }
                }
            }
            self.check_tasks();
            self.metrics.rows_per_second();
            self.history.offer(super::history::Counters {
                rows_written: self.metrics.rows_written.get(),
                records_committed: self.metrics.committed.get(),
                records_consumed: self.metrics.consumed_total(),
            });
            if self.sync_due() {
                self.sync().await;
            }
            self.publish_current();
            if self.wait_commands(CHECK_INTERVAL).await {
                return self.finish().await;
            }
        }
    }

    /// Handles commands for up to `wait`; true when told to shut down.
    async fn wait_commands(&mut self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let command = tokio::select! {
                command = self.commands.recv() => command,
                () = tokio::time::sleep_until(deadline) => return false,
            };
            match command {
                None | Some(Command::Shutdown) => return true,
                Some(Command::Target(target)) => {
                    self.pending_target = Some(target);
                    self.set_target(target).await;
                }
                Some(Command::Restart {
                    include_tasks,
                    only_failed,
                }) => {
                    self.pending_restart = Some((include_tasks, only_failed));
                    self.restart(include_tasks, only_failed).await;
                }
                Some(Command::RestartTask(id)) => self.restart_task(id).await,
                Some(Command::Rejoin(id)) => {
                    let running = self.slots.iter().any(|slot| {
                        slot.id == id
                            && slot
                                .handle
                                .as_ref()
                                .is_some_and(|h| h.status.borrow().state != TaskState::Failed)
                    });
                    if running {
                        self.restart_task(id).await;
                    }
                }
            }
            self.publish_current();
            if self.sync_due() || self.pending_target.is_some() || self.pending_restart.is_some() {
                self.sync().await;
            }
        }
    }

    /// Connects the sink, prepares its tables, and what the tasks share.
    async fn connect(&mut self) -> Connect {
        let config = &self.config;
        let sink = match Sink::connect_shared(config, &self.context.databases).await {
            Ok(sink) => sink,
            Err(e) if e.is_transient() => return Connect::Waiting(e.to_string()),
            Err(e) => return Connect::Failed(e.to_string()),
        };
        if let Err(e) = sink.prepare().await {
            sink.close().await;
            return if e.is_transient() {
                Connect::Waiting(e.to_string())
            } else {
                Connect::Failed(e.to_string())
            };
        }
        sink.count_schema_changes(self.metrics.clone());
        let sink = Arc::new(sink);
        if let Err(waiting) = self.hand_over(sink.control()).await {
            sink.close().await;
            return Connect::Waiting(waiting);
        }
        let schema = match &config.schema {
            Some(path) => match RecordSchema::load(path) {
                Ok(schema) => Some(Arc::new(schema)),
                Err(e) => {
                    sink.close().await;
                    return Connect::Failed(e.to_string());
                }
            },
            None => None,
        };
        let dlq_topic = match &config.errors.dlq {
            Some(DeadLetterDestination::Topic(topic)) => match DeadLetterProducer::new(
                &self.context.kafka,
                &self.context.brokers,
                topic,
                &config.name,
            ) {
                Ok(producer) => Some(producer.with_signing_key(&config.errors.dlq_signing_key)),
                Err(e) => {
                    sink.close().await;
                    return Connect::Failed(e.to_string());
                }
            },
            _ => None,
        };
        self.policy = Some(Arc::new(Policy {
            policy: config.errors.policy,
            dlq_topic,
            dlq_table: matches!(config.errors.dlq, Some(DeadLetterDestination::Table(_))),
        }));
        self.schema = schema;
        if let Some(dedup) = &config.delivery.dedup {
            self.cleaners
                .push(tokio::spawn(tracing::Instrument::in_current_span(
                    clean_dedup(sink.clone(), dedup.window.0),
                )));
        }
        if let Some(version) = config.sink.versioning(config.envelope) {
            self.cleaners
                .push(tokio::spawn(tracing::Instrument::in_current_span(
                    clean_tombstones(sink.clone(), version.remember_deletes.0),
                )));
        }
        self.cleaners
            .push(tokio::spawn(tracing::Instrument::in_current_span(
                super::coverage::watch_coverage(
                    self.context.clone(),
                    self.config.clone(),
                    sink.clone(),
                    self.metrics.clone(),
                    self.coverage.clone(),
                    self.view.subscribe(),
                    self.own_commands.clone(),
                ),
            )));
        self.sink = Some(sink);
        Connect::Connected
    }

    /// Reads the operator's target before the tasks start: a pause or a stop survives a
    /// restart of the process. False when it cannot be read (the tasks wait).
    async fn first_sync(&mut self) -> bool {
        let Some(sink) = self.sink.clone() else {
            return false;
        };
        match tokio::time::timeout(SYNC_TIMEOUT, sink.control().read_control()).await {
            Ok(Ok(Some(row))) => {
                if self.pending_target.is_none() {
                    self.target = row.target;
                }
                self.restart_seen = Some(row.restart_seq);
                true
            }
            Ok(Ok(None)) => {
                self.restart_seen = Some(0);
                true
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot read the connector's target state; its tasks wait for it");
                if !error.is_transient() {
                    // Not an outage: sluice's own table cannot be read (permissions?).
                    self.failure =
                        Some(format!("cannot read the connector's target state: {error}"));
                }
                false
            }
            Err(_) => {
                tracing::warn!(after = ?SYNC_TIMEOUT, "no answer reading the connector's target state; its tasks wait for it");
                false
            }
        }
    }

    /// Starts the tasks the target wants and stops the others.
    async fn apply_target(&mut self) {
        if self.sink.is_none() || self.failure.is_some() {
            return;
        }
        match self.target {
            Target::Stopped => {
                for failure in self.stop_tasks().await {
                    tracing::info!(%failure, "stopped a failed task");
                }
            }
            Target::Running | Target::Paused => {
                if self.slots.is_empty() {
                    for id in 0..self.config.tasks as usize {
                        self.slots.push(Slot {
                            id,
                            handle: None,
                            status: None,
                            restarts: 0,
                            restart_at: None,
                            started: Instant::now(),
                        });
                    }
                    for index in 0..self.slots.len() {
                        self.spawn(index);
                    }
                } else {
                    let control = if self.target == Target::Paused {
                        Control::Pause
                    } else {
                        Control::Resume
                    };
                    for slot in &self.slots {
                        if let Some(handle) = &slot.handle {
                            handle.send(control);
                        }
                    }
                }
            }
        }
    }

    /// A new target, set here or read from the database.
    pub(super) async fn set_target(&mut self, target: Target) {
        if target == self.target {
            return;
        }
        tracing::info!(
            from = self.target.name(),
            to = target.name(),
            "connector target state"
        );
        self.target = target;
        self.apply_target().await;
    }

    /// Starts slot `index`'s task.
    fn spawn(&mut self, index: usize) {
        let (Some(sink), Some(policy)) = (self.sink.clone(), self.policy.clone()) else {
            return;
        };
        let slot = &mut self.slots[index];
        let spec = TaskSpec {
            kafka: self.context.kafka.clone(),
            brokers: self.context.brokers.clone(),
            connector: self.config.clone(),
            task: slot.id,
            engine: self.context.engine.clone(),
            schema: self.schema.clone(),
            policy,
        };
        slot.restart_at = None;
        slot.started = Instant::now();
        match task::spawn(spec, sink, self.metrics.clone(), Handle::current()) {
            Ok(handle) => {
                if self.target == Target::Paused {
                    handle.send(Control::Pause);
                }
                slot.status = None;
                slot.handle = Some(handle);
            }
            Err(error) => {
                // A thread that cannot start now may start later.
                tracing::error!(task = slot.id, %error, "cannot start the task's thread; trying again");
                slot.status = Some(TaskStatus {
                    state: TaskState::Failed,
                    error: Some(format!("cannot start the task's thread: {error}")),
                    transient: true,
                });
                slot.restart_at =
                    Some(Instant::now() + self.config.errors.restart.backoff(slot.restarts));
                slot.restarts = slot.restarts.saturating_add(1);
            }
        }
    }

    /// Reaps tasks that ended, schedules the restart of the transient failures, starts
    /// those that are due.
    fn check_tasks(&mut self) {
        for index in 0..self.slots.len() {
            let slot = &mut self.slots[index];
            if let Some(handle) = &slot.handle {
                if !handle.is_finished() {
                    let status = handle.status.borrow().clone();
                    if status.state == TaskState::Consuming
                        && slot.restarts > 0
                        && slot.started.elapsed() > RESTART_RESET
                    {
                        slot.restarts = 0;
                    }
                    slot.status = Some(status);
                    continue;
                }
                let mut handle = slot.handle.take().expect("checked above");
                handle.join();
                let mut status = handle.status.borrow().clone();
                if !matches!(
                    status.state,
                    TaskState::Failed | TaskState::Closed | TaskState::Terminated
                ) {
                    // The thread ended without a word: it panicked (the panic is in the
                    // log). Not a record's fault that is known: restarted with backoff.
                    self.metrics.clear_task_lags(slot.id);
                    status = TaskStatus {
                        state: TaskState::Failed,
                        error: Some(
                            "the task's thread ended unexpectedly (a panic: see the log)".into(),
                        ),
                        transient: true,
                    };
                }
                if status.state == TaskState::Failed && status.transient {
                    let wait = self.config.errors.restart.backoff(slot.restarts);
                    tracing::warn!(
                        task = slot.id,
                        error = status.error.as_deref().unwrap_or(""),
                        ?wait,
                        "task failed for a transient reason; it starts again (errors.restart)"
                    );
                    slot.restart_at = Some(Instant::now() + wait);
                    slot.restarts = slot.restarts.saturating_add(1);
                } else if status.state == TaskState::Failed {
                    tracing::error!(
                        task = slot.id,
                        error = status.error.as_deref().unwrap_or(""),
                        "task failed; it stays FAILED until restarted through the admin API"
                    );
                } else {
                    // Closed without being told to: start it again, with backoff.
                    slot.restart_at =
                        Some(Instant::now() + self.config.errors.restart.backoff(slot.restarts));
                    slot.restarts = slot.restarts.saturating_add(1);
                }
                slot.status = Some(status);
            }
            if slot.restart_at.is_some_and(|at| Instant::now() >= at) {
                tracing::info!(
                    task = slot.id,
                    restarts = slot.restarts,
                    "task starts again"
                );
                self.metrics.restarted(slot.id);
                self.spawn(index);
            }
        }
    }

    /// Kafka Connect's restart. The connector: a failed sink connection is tried again.
    /// With `include_tasks`, its tasks (only the failed ones with `only_failed`).
    pub(super) async fn restart(&mut self, include_tasks: bool, only_failed: bool) {
        if self.failure.take().is_some() {
            tracing::info!("connector restarted");
            self.close_sink().await;
            return;
        }
        if !include_tasks {
            return;
        }
        let ids: Vec<usize> = self
            .slots
            .iter()
            .filter(|s| {
                !only_failed
                    || s.status
                        .as_ref()
                        .is_some_and(|st| st.state == TaskState::Failed)
            })
            .map(|s| s.id)
            .collect();
        for id in ids {
            self.restart_task(id).await;
        }
    }

    /// Stops task `id` if it runs, and starts it again.
    async fn restart_task(&mut self, id: usize) {
        let Some(index) = self.slots.iter().position(|s| s.id == id) else {
            return;
        };
        if let Some(handle) = self.slots[index].handle.take() {
            stop_and_join(vec![handle]).await;
        }
        tracing::info!(task = id, "task restarted");
        self.slots[index].restarts = 0;
        self.metrics.restarted(id);
        self.spawn(index);
    }

    /// Stops every task (`STOPPED`): they finish their batch in flight and leave the group.
    async fn stop_tasks(&mut self) -> Vec<String> {
        let slots = std::mem::take(&mut self.slots);
        let mut failures = Vec::new();
        let mut handles = Vec::new();
        for slot in slots {
            if self.target == Target::Stopped {
                self.metrics.set_task_state(slot.id, "STOPPED");
            } else {
                self.metrics.clear_task_state(slot.id);
            }
            match slot.handle {
                Some(handle) => handles.push(handle),
                None => {
                    if let Some(status) = slot.status.filter(|s| s.state == TaskState::Failed) {
                        failures.push(format!(
                            "connector {} task {}: {}",
                            self.config.name,
                            slot.id,
                            status.error.unwrap_or_default()
                        ));
                    }
                }
            }
        }
        for handle in stop_and_join(handles).await {
            let status = handle.status.borrow().clone();
            if status.state == TaskState::Failed {
                failures.push(format!(
                    "connector {} task {}: {}",
                    self.config.name,
                    handle.task,
                    status.error.unwrap_or_default()
                ));
            }
        }
        failures
    }

    async fn close_sink(&mut self) {
        for cleaner in self.cleaners.drain(..) {
            cleaner.abort();
        }
        self.coverage.forget(&self.metrics);
        if let Some(sink) = self.sink.take() {
            sink.close().await;
        }
        self.policy = None;
    }

    /// Shutdown: the tasks stop, the heartbeats go, the sink closes.
    async fn finish(mut self) -> Vec<String> {
        let mut failures = self.stop_tasks().await;
        for id in 0..self.config.tasks as usize {
            self.metrics.clear_task_state(id);
        }
        if let Some(failure) = &self.failure {
            failures.push(format!("connector {}: {failure}", self.config.name));
        }
        if let Some(sink) = &self.sink {
            let control = sink.control();
            let gone = control.write_heartbeats(&self.context.worker_id, &[]);
            let _ = tokio::time::timeout(Duration::from_secs(2), gone).await;
        }
        self.close_sink().await;
        self.publish(ConnectorState::Unassigned, Some("stopped".into()));
        failures
    }
}

/// Tells tasks to stop and waits for their threads (off the runtime's workers).
async fn stop_and_join(handles: Vec<TaskHandle>) -> Vec<TaskHandle> {
    for handle in &handles {
        handle.send(Control::Stop);
    }
    tokio::task::spawn_blocking(move || {
        let mut handles = handles;
        for handle in &mut handles {
            handle.join();
        }
        handles
    })
    .await
    .unwrap_or_default()
}

/// How often the producer ids past `delivery.dedup.window` are removed.
const DEDUP_CLEAN_INTERVAL: Duration = Duration::from_secs(60);

/// Removes the producer ids past their window, at start and every
/// [`DEDUP_CLEAN_INTERVAL`], until aborted. A failure is logged and tried again later: ids
/// kept longer only cost space.
async fn clean_dedup(sink: Arc<Sink>, window: Duration) {
    loop {
        match sink.maintenance().clean_dedup(window).await {
            Ok(0) => {}
            Ok(removed) => {
                tracing::debug!(removed, "producer ids past delivery.dedup.window removed")
            }
            Err(error) => {
                tracing::warn!(%error, "cannot remove producer ids past delivery.dedup.window (tried again later)")
            }
        }
        tokio::time::sleep(DEDUP_CLEAN_INTERVAL).await;
    }
}

/// Removes the tombstones past `sink.version.remember_deletes`, at start and every
/// [`DEDUP_CLEAN_INTERVAL`], until aborted; a failure is logged and tried again later.
async fn clean_tombstones(sink: Arc<Sink>, window: Duration) {
    loop {
        match sink.maintenance().clean_tombstones(window).await {
            Ok(0) => {}
            Ok(removed) => {
                tracing::debug!(
                    removed,
                    "tombstones past sink.version.remember_deletes removed"
                )
            }
            Err(error) => {
                tracing::warn!(%error, "cannot remove tombstones past sink.version.remember_deletes (tried again later)")
            }
        }
        tokio::time::sleep(DEDUP_CLEAN_INTERVAL).await;
    }
}
