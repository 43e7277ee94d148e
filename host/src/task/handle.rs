//! The supervisor's side of a task: how it is started ([`TaskSpec`]), what it is told
//! ([`Control`]), what it reports back ([`TaskStatus`]), and the [`TaskHandle`] that holds
//! them together. Its counters are the connector's
//! [`ConnectorMetrics`](crate::metrics::ConnectorMetrics).

use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

use tokio::sync::watch;

use super::state::TaskState;
use crate::config::{ConnectorConfig, KafkaConfig};
use crate::deliver::Policy;
use crate::validate::RecordSchema;

/// What the supervisor tells a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Pause,
    Resume,
    Stop,
}

/// What a task reports back on every transition.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskStatus {
    pub state: TaskState,
    pub error: Option<String>,
    /// For `Failed`: whether starting the task again may help (see
    /// [`TaskError::is_transient`](super::TaskError::is_transient)).
    pub transient: bool,
}

/// How a task is started.
#[derive(Clone)]
pub struct TaskSpec {
    pub kafka: KafkaConfig,
    /// The resolved bootstrap servers (the embedded cluster's, when `embedded`).
    pub brokers: String,
    pub connector: Arc<ConnectorConfig>,
    pub task: usize,
    /// The process's plugin engine, when the connector has transforms.
    pub engine: Option<sluice_transform::TransformEngine>,
    /// The connector's compiled JSON Schema (`schema:`).
    pub schema: Option<Arc<RecordSchema>>,
    /// The connector's error policy and dead-letter producer.
    pub policy: Arc<Policy>,
}

/// The supervisor's end of a task.
pub struct TaskHandle {
    pub task: usize,
    pub(super) control: mpsc::Sender<Control>,
    pub status: watch::Receiver<TaskStatus>,
    pub(super) thread: Option<JoinHandle<()>>,
}

impl TaskHandle {
    /// Sends a control message; a task that has ended ignores it.
    pub fn send(&self, control: Control) {
        let _ = self.control.send(control);
    }

    /// Resolves when the task has ended: its thread drops the status sender as its last
    /// act, which closes the channel. Cancel-safe, and cheap to await many of at once.
    pub async fn finished(&self) {
        let mut status = self.status.clone();
        while status.changed().await.is_ok() {}
    }

    /// Whether the task thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits for the task thread to end (blocking: call it where blocking is allowed).
    pub fn join(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
