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

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};

use crate::config::{ConnectorConfig, DeadLetterDestination, KafkaConfig};
use crate::deliver::Policy;
use crate::kafka::dead_letter_producer::DeadLetterProducer;
use crate::metrics::ConnectorMetrics;
use crate::sink::Sink;
use crate::sink::control::{ControlRow, Target, TaskRow, now_ms};
use crate::task::{self, Control, TaskHandle, TaskSpec, TaskState, TaskStatus};
use crate::validate::RecordSchema;

/// How often the runner looks at its tasks.
const CHECK_INTERVAL: Duration = Duration::from_millis(250);
/// How often the runner reads the operator's target from the database and writes its
/// tasks' heartbeats: every process applies a pause or a stop within about this long.
pub const CONTROL_INTERVAL: Duration = Duration::from_secs(2);
/// A heartbeat older than this is another process that is gone: its tasks show as
/// `UNASSIGNED`.
pub const HEARTBEAT_STALE: Duration = Duration::from_secs(15);
/// Longest a sync with the database may hold the runner (commands wait meanwhile).
const SYNC_TIMEOUT: Duration = Duration::from_secs(3);
/// A task that ran this long without failing starts its restart backoff over.
const RESTART_RESET: Duration = Duration::from_secs(600);

/// What the process needs to start a connector's tasks.
#[derive(Clone)]
pub struct Context {
    pub kafka: KafkaConfig,
    /// The resolved bootstrap servers.
    pub brokers: String,
    /// The process's plugin engine, when a connector has transforms.
    pub engine: Option<sluice_transform::TransformEngine>,
    /// The seek-consumer pool (`inspect`, `dry-run`, the admin API's record reads).
    pub pool: Arc<crate::pool::ConsumerPool>,
    /// This process in status and heartbeats (`SLUICE_WORKER_ID`, or host and port).
    pub worker_id: String,
}

/// What the operator asks a connector to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Pause, resume (`Running`) or stop, here and, through the database, everywhere.
    Target(Target),
    /// Kafka Connect's restart: the connector (a failed sink connection), and with
    /// `include_tasks` its tasks (only the failed ones with `only_failed`).
    Restart {
        include_tasks: bool,
        only_failed: bool,
    },
    /// Restart one task of this process.
    RestartTask(usize),
    /// Stop the connector's tasks and end the runner (shutdown, reload).
    Shutdown,
}

/// A connector's state, in Kafka Connect's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectorState {
    /// Connecting its database (or waiting for it); `trace` says why it waits.
    Unassigned,
    Running,
    Paused,
    Stopped,
    /// Its sink failed permanently; restarted through the admin API.
    Failed,
}

impl ConnectorState {
    pub fn name(self) -> &'static str {
        match self {
            ConnectorState::Unassigned => "UNASSIGNED",
            ConnectorState::Running => "RUNNING",
            ConnectorState::Paused => "PAUSED",
            ConnectorState::Stopped => "STOPPED",
            ConnectorState::Failed => "FAILED",
        }
    }
}

/// One task of this process, as the status API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskView {
    pub id: usize,
    /// Kafka Connect's state name: RUNNING, PAUSED, FAILED, RESTARTING, UNASSIGNED.
    pub state: &'static str,
    /// The error of a failed (or restarting) task.
    pub trace: Option<String>,
    /// A failed task that the runner starts again by itself.
    pub transient: bool,
}

/// A connector as its runner last left it.
#[derive(Clone)]
pub struct ConnectorView {
    pub state: ConnectorState,
    /// Why the connector waits or failed.
    pub trace: Option<String>,
    pub tasks: Vec<TaskView>,
    /// The runner made its first attempt to start (readiness).
    pub started: bool,
    /// The connector's sink, once connected.
    pub sink: Option<Arc<Sink>>,
    /// Heartbeats of the connector's tasks in other processes, as last read.
    pub others: Vec<TaskRow>,
}

impl ConnectorView {
    fn new() -> Self {
        Self {
            state: ConnectorState::Unassigned,
            trace: Some("starting".into()),
            tasks: Vec::new(),
            started: false,
            sink: None,
            others: Vec::new(),
        }
    }

    /// Failed for good: the connector, or every task, failed permanently.
    pub fn failed_permanently(&self) -> bool {
        self.state == ConnectorState::Failed
            || (!self.tasks.is_empty()
                && self
                    .tasks
                    .iter()
                    .all(|t| t.state == "FAILED" && !t.transient))
    }
}

/// The rest of the process's end of a connector.
pub struct ConnectorHandle {
    pub name: String,
    pub config: Arc<ConnectorConfig>,
    pub metrics: Arc<ConnectorMetrics>,
    /// What a reload compares: the connector's section, its plugins' contents, the
    /// `kafka:` section.
    pub(super) fingerprint: String,
    commands: mpsc::UnboundedSender<Command>,
    view: watch::Receiver<ConnectorView>,
    runner: Mutex<Option<tokio::task::JoinHandle<Vec<String>>>>,
}

impl ConnectorHandle {
    /// Starts the connector's runner.
    pub(super) fn start(
        context: Arc<Context>,
        config: Arc<ConnectorConfig>,
        metrics: Arc<ConnectorMetrics>,
        fingerprint: String,
    ) -> Arc<Self> {
        let (commands, receiver) = mpsc::unbounded_channel();
        let (view_tx, view) = watch::channel(ConnectorView::new());
        let span = tracing::error_span!("connector", connector = %config.name);
        let runner = Runner {
            context,
            config: config.clone(),
            metrics: metrics.clone(),
            commands: receiver,
            view: view_tx,
            target: Target::Running,
            pending_target: None,
            pending_restart: None,
            restart_seen: None,
            sink: None,
            policy: None,
            dedup_cleaner: None,
            schema: None,
            failure: None,
            slots: Vec::new(),
            last_sync: None,
            others: Vec::new(),
        };
        let join = tokio::spawn(tracing::Instrument::instrument(runner.run(), span));
        Arc::new(Self {
            name: config.name.clone(),
            config,
            metrics,
            fingerprint,
            commands,
            view,
            runner: Mutex::new(Some(join)),
        })
    }

    /// The connector as its runner last left it.
    pub fn view(&self) -> ConnectorView {
        self.view.borrow().clone()
    }

    /// Resolves at the runner's next change of the view.
    pub async fn changed(&self) {
        next_change(&self.view).await;
    }

    /// Sends a command; a runner that has ended ignores it.
    pub fn send(&self, command: Command) {
        let _ = self.commands.send(command);
    }

    /// Stops the connector's tasks and waits for its runner: the failures of its tasks,
    /// as `connector X task N: error` lines.
    pub async fn shutdown(&self) -> Vec<String> {
        self.send(Command::Shutdown);
        let join = self.runner.lock().ok().and_then(|mut r| r.take());
        match join {
            Some(join) => join.await.unwrap_or_else(|error| {
                vec![format!("connector {}: runner ended: {error}", self.name)]
            }),
            None => Vec::new(),
        }
    }
}

/// A task slot of this process: the running task, or the failure it left.
struct Slot {
    id: usize,
    handle: Option<TaskHandle>,
    /// The last status seen.
    status: Option<TaskStatus>,
    /// Restarts since the task last ran for [`RESTART_RESET`].
    restarts: u32,
    /// A transiently failed task starts again at this time.
    restart_at: Option<Instant>,
    started: Instant,
}

struct Runner {
    context: Arc<Context>,
    config: Arc<ConnectorConfig>,
    metrics: Arc<ConnectorMetrics>,
    commands: mpsc::UnboundedReceiver<Command>,
    view: watch::Sender<ConnectorView>,
    /// What the operator asked for (as last read or set).
    target: Target,
    /// A target set here that the database has not taken yet.
    pending_target: Option<Target>,
    /// A restart asked here that the database has not taken yet.
    pending_restart: Option<(bool, bool)>,
    /// The last restart request seen in the database.
    restart_seen: Option<i64>,
    sink: Option<Arc<Sink>>,
    policy: Option<Arc<Policy>>,
    schema: Option<Arc<RecordSchema>>,
    /// With `delivery.dedup`: the background cleanup of old producer ids, while the sink is
    /// connected.
    dedup_cleaner: Option<tokio::task::JoinHandle<()>>,
    /// Why the connector failed permanently (before any task could start).
    failure: Option<String>,
    slots: Vec<Slot>,
    last_sync: Option<Instant>,
    others: Vec<TaskRow>,
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
    async fn run(mut self) -> Vec<String> {
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
                        tracing::info!(tasks = self.config.tasks, table = %self.config.sink.table,
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
        let sink = match Sink::connect(config).await {
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
                Ok(producer) => Some(producer),
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
        let sink = Arc::new(sink);
        if let Some(dedup) = &config.delivery.dedup {
            self.dedup_cleaner = Some(tokio::spawn(tracing::Instrument::in_current_span(
                clean_dedup(sink.clone(), dedup.window.0),
            )));
        }
        self.sink = Some(sink);
        Connect::Connected
    }

    /// Reads the operator's target before the tasks start: a pause or a stop survives a
    /// restart of the process. False when it cannot be read (the tasks wait).
    async fn first_sync(&mut self) -> bool {
        let Some(sink) = self.sink.clone() else {
            return false;
        };
        match tokio::time::timeout(SYNC_TIMEOUT, sink.read_control()).await {
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
    async fn set_target(&mut self, target: Target) {
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
    async fn restart(&mut self, include_tasks: bool, only_failed: bool) {
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
        if let Some(cleaner) = self.dedup_cleaner.take() {
            cleaner.abort();
        }
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
            let gone = sink.write_heartbeats(&self.context.worker_id, &[]);
            let _ = tokio::time::timeout(Duration::from_secs(2), gone).await;
        }
        self.close_sink().await;
        self.publish(ConnectorState::Unassigned, Some("stopped".into()));
        failures
    }

    fn sync_due(&self) -> bool {
        self.sink.is_some()
            && self
                .last_sync
                .is_none_or(|t| t.elapsed() >= CONTROL_INTERVAL)
    }

    /// Shares state with the other processes: writes what was set here, reads the target
    /// and restart requests set anywhere, writes this process's heartbeats, reads theirs.
    async fn sync(&mut self) {
        self.last_sync = Some(Instant::now());
        let Some(sink) = self.sink.clone() else {
            return;
        };
        let exchanged = tokio::time::timeout(SYNC_TIMEOUT, self.exchange(&sink)).await;
        match exchanged {
            Ok(Ok(Some(row))) => self.apply_control(row).await,
            Ok(Ok(None)) => {}
            Ok(Err(error)) => {
                tracing::debug!(%error, "cannot share the connector's state through its database (tried again)")
            }
            Err(_) => {
                tracing::debug!(after = ?SYNC_TIMEOUT, "no answer sharing the connector's state through its database (tried again)")
            }
        }
    }

    /// The body of [`sync`](Self::sync).
    async fn exchange(
        &mut self,
        sink: &Arc<Sink>,
    ) -> Result<Option<ControlRow>, crate::sink::SinkError> {
        if let Some(target) = self.pending_target {
            sink.write_target(target).await?;
            self.pending_target = None;
        }
        if let Some((include_tasks, only_failed)) = self.pending_restart {
            let seq = sink.request_restart(include_tasks, only_failed).await?;
            self.restart_seen = Some(seq);
            self.pending_restart = None;
        }
        let row = sink.read_control().await?;
        let tasks: Vec<(i32, &str, Option<String>)> = self
            .task_views()
            .into_iter()
            .map(|t| (t.id as i32, t.state, t.trace))
            .collect();
        sink.write_heartbeats(&self.context.worker_id, &tasks)
            .await?;
        let now = now_ms();
        self.others = sink
            .read_heartbeats()
            .await?
            .into_iter()
            .filter(|row| row.worker != self.context.worker_id)
            .map(|mut row| {
                if now - row.updated_at > HEARTBEAT_STALE.as_millis() as i64 {
                    row.state = "UNASSIGNED".into();
                }
                row
            })
            .collect();
        Ok(row)
    }

    /// Applies what the database says the operator asked for (outside the sync's time
    /// bound: stopping tasks takes its own time).
    async fn apply_control(&mut self, row: ControlRow) {
        if self.pending_target.is_none() && row.target != self.target {
            self.set_target(row.target).await;
        }
        match self.restart_seen {
            Some(seen) if row.restart_seq > seen => {
                tracing::info!("restart requested through another process");
                self.restart_seen = Some(row.restart_seq);
                self.restart(row.restart_tasks, row.restart_only_failed)
                    .await;
            }
            None => self.restart_seen = Some(row.restart_seq),
            _ => {}
        }
    }

    fn task_views(&self) -> Vec<TaskView> {
        self.slots
            .iter()
            .map(|slot| {
                let status = slot.status.as_ref();
                let (state, trace, transient) = if slot.restart_at.is_some() {
                    ("RESTARTING", status.and_then(|s| s.error.clone()), true)
                } else {
                    match status {
                        None => (self.starting_state(), None, false),
                        // A task starting under a pause pauses before its first poll.
                        Some(s) if s.state == TaskState::Subscribing => {
                            (self.starting_state(), None, false)
                        }
                        Some(s) => (kc_task_state(s.state), s.error.clone(), s.transient),
                    }
                };
                TaskView {
                    id: slot.id,
                    state,
                    trace,
                    transient,
                }
            })
            .collect()
    }

    fn starting_state(&self) -> &'static str {
        if self.target == Target::Paused {
            "PAUSED"
        } else {
            "RUNNING"
        }
    }

    /// Publishes the connector's state as it is now.
    fn publish_current(&self) {
        let (state, trace) = match (&self.failure, &self.sink) {
            (Some(failure), _) => (ConnectorState::Failed, Some(failure.clone())),
            (None, None) => (ConnectorState::Unassigned, Some("connecting".into())),
            (None, Some(_)) => (
                match self.target {
                    Target::Running => ConnectorState::Running,
                    Target::Paused => ConnectorState::Paused,
                    Target::Stopped => ConnectorState::Stopped,
                },
                None,
            ),
        };
        self.publish(state, trace);
    }

    fn publish(&self, state: ConnectorState, trace: Option<String>) {
        let tasks = self.task_views();
        for task in &tasks {
            self.metrics.set_task_state(task.id, task.state);
        }
        let view = ConnectorView {
            state,
            trace,
            tasks,
            started: true,
            sink: self.sink.clone(),
            others: self.others.clone(),
        };
        self.view.send_if_modified(|old| {
            let changed = old.state != view.state
                || old.trace != view.trace
                || old.tasks != view.tasks
                || old.started != view.started
                || old.others != view.others
                || old.sink.is_some() != view.sink.is_some();
            *old = view;
            changed
        });
    }
}

/// A task state in Kafka Connect's names.
pub fn kc_task_state(state: TaskState) -> &'static str {
    match state {
        TaskState::Subscribing | TaskState::Consuming | TaskState::Resuming => "RUNNING",
        TaskState::Pausing | TaskState::Paused => "PAUSED",
        TaskState::Failed => "FAILED",
        TaskState::Closing | TaskState::Closed | TaskState::Terminated => "UNASSIGNED",
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
        match sink.clean_dedup(window).await {
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

/// Resolves at the next change of `view` after this call. A clone of a receiver starts at
/// the version its original has seen, and `view()` never marks one seen: without marking
/// the clone, every call after the first change resolved at once, and
/// `Supervisor::all_failed` spun a whole core for the life of the process.
async fn next_change<T>(view: &watch::Receiver<T>) {
    let mut view = view.clone();
    view.mark_unchanged();
    if view.changed().await.is_err() {
        // The runner ended: its view never changes again (not "changed at once", which
        // would spin the same way).
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod change_tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_change_seen_before_is_not_a_change_again() {
        let (sender, view) = watch::channel(0);
        sender.send_replace(1);
        // The change before the call does not count...
        let early = tokio::time::timeout(Duration::from_millis(50), next_change(&view)).await;
        assert!(early.is_err(), "resolved without a change");
        // ...one after it does.
        let waiting = tokio::spawn({
            let view = view.clone();
            async move { next_change(&view).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        sender.send_replace(2);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("resolved at the change")
            .expect("task");
        // A view whose runner ended does not change any more.
        drop(sender);
        let ended = tokio::time::timeout(Duration::from_millis(50), next_change(&view)).await;
        assert!(ended.is_err(), "resolved for a runner that ended");
    }
}
