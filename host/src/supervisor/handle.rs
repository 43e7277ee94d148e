//! The process's end of a connector: the commands it takes, the view of its state its
//! runner publishes, and the handle that sends the one and reads the other.

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, watch};

use super::connector::{Context, Runner};
use super::history::History;
use crate::config::ConnectorConfig;
use crate::metrics::ConnectorMetrics;
use crate::sink::Sink;
use crate::sink::control::{Target, TaskRow};
use crate::task::TaskState;

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
    /// The coverage watcher's safeguard: restart one task of this process so that it
    /// leaves and rejoins the group, if it still runs (a task that failed since stays
    /// failed).
    Rejoin(usize),
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
    /// The last error this process saw on the connector or one of its tasks, kept after
    /// it cleared (the status page shows it with its time).
    pub last_error: Option<LastError>,
}

/// An error of the connector or of a task, and when it first appeared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastError {
    pub message: String,
    /// Milliseconds since the epoch (this process's clock).
    pub at_ms: i64,
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
            last_error: None,
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
    /// Its throughput over the last minutes (the status page's chart).
    pub history: Arc<History>,
    /// The partitions of its topics that no task reads.
    pub coverage: Arc<super::coverage::Coverage>,
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
        let history = Arc::new(History::new());
        let coverage = Arc::new(super::coverage::Coverage::default());
        let runner = Runner {
            coverage: coverage.clone(),
            context,
            config: config.clone(),
            metrics: metrics.clone(),
            history: history.clone(),
            commands: receiver,
            own_commands: commands.downgrade(),
            view: view_tx,
            target: Target::Running,
            pending_target: None,
            pending_restart: None,
            restart_seen: None,
            sink: None,
            policy: None,
            cleaners: Vec::new(),
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
            history,
            coverage,
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

/// A task state in Kafka Connect's names.
pub fn kc_task_state(state: TaskState) -> &'static str {
    match state {
        TaskState::Subscribing | TaskState::Consuming | TaskState::Resuming => "RUNNING",
        TaskState::Pausing | TaskState::Paused => "PAUSED",
        TaskState::Failed => "FAILED",
        TaskState::Closing | TaskState::Closed | TaskState::Terminated => "UNASSIGNED",
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
