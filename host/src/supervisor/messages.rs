//! What passes between a connector's runner and the rest of the process: the commands it
//! takes ([`Command`], from the admin API, a reload or the coverage watcher) and the view of
//! its state it publishes ([`ConnectorView`], read by status, readiness and the
//! heartbeats), in Kafka Connect's names.

use std::sync::Arc;

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
    /// A connector whose runner has not made its first attempt yet: unassigned, "starting".
    pub(super) fn new() -> Self {
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

/// A task state in Kafka Connect's names.
pub fn kc_task_state(state: TaskState) -> &'static str {
    match state {
        TaskState::Subscribing | TaskState::Consuming | TaskState::Resuming => "RUNNING",
        TaskState::Pausing | TaskState::Paused => "PAUSED",
        TaskState::Failed => "FAILED",
        TaskState::Closing | TaskState::Closed | TaskState::Terminated => "UNASSIGNED",
    }
}
