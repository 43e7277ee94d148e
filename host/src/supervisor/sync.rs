//! A runner's share of state with the other processes, through its sink database: the
//! operator's target and restart requests, this process's heartbeats and theirs; and the
//! view of the connector that status and the admin API show.

use std::time::Instant;

use super::connector::{CONTROL_INTERVAL, Runner, SYNC_TIMEOUT};
use super::messages::{ConnectorState, ConnectorView, LastError, TaskView, kc_task_state};
use crate::sink::ControlStore;
use crate::sink::control::{ControlRow, Heartbeat, PartitionLag, Target, TaskFigures, now_ms};
use crate::task::TaskState;

impl Runner {
    pub(super) fn sync_due(&self) -> bool {
        self.sink.is_some()
            && self
                .last_sync
                .is_none_or(|t| t.elapsed() >= CONTROL_INTERVAL)
    }

    /// Shares state with the other processes: writes what was set here, reads the target
    /// and restart requests set anywhere, writes this process's heartbeats, reads theirs.
    pub(super) async fn sync(&mut self) {
        self.last_sync = Some(Instant::now());
        let Some(sink) = self.sink.clone() else {
            return;
        };
        let exchanged = tokio::time::timeout(SYNC_TIMEOUT, self.exchange(&sink.control())).await;
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
    pub(super) async fn exchange(
        &mut self,
        control: &ControlStore<'_>,
    ) -> Result<Option<ControlRow>, crate::sink::SinkError> {
        if let Some(target) = self.pending_target {
            control.write_target(target).await?;
            self.pending_target = None;
        }
        if let Some((include_tasks, only_failed)) = self.pending_restart {
            let seq = control.request_restart(include_tasks, only_failed).await?;
            self.restart_seen = Some(seq);
            self.pending_restart = None;
        }
        let row = control.read_control().await?;
        let tasks = self.heartbeats();
        control
            .write_heartbeats(&self.context.worker_id, &tasks)
            .await?;
        let now = now_ms();
        self.others = control
            .read_heartbeats()
            .await?
            .into_iter()
            .filter(|row| row.worker != self.context.worker_id)
            .map(|row| row.seen_at(now))
            .collect();
        Ok(row)
    }

    /// Applies what the database says the operator asked for (outside the sync's time
    /// bound: stopping tasks takes its own time).
    pub(super) async fn apply_control(&mut self, row: ControlRow) {
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

    /// This process's heartbeats: each task's state, and its figures (the lag of the
    /// partitions it holds, the process's rows/s for the connector).
    fn heartbeats(&self) -> Vec<Heartbeat> {
        let lags = self.metrics.lags();
        let rows_per_second = (self.metrics.rows_per_second() * 10.0).round() / 10.0;
        self.task_views()
            .into_iter()
            .map(|view| {
                let mut partitions: Vec<PartitionLag> = lags
                    .iter()
                    .filter(|(task, ..)| *task == view.id)
                    .map(|(_, topic, partition, lag)| PartitionLag {
                        topic: topic.clone(),
                        partition: *partition,
                        lag: *lag,
                    })
                    .collect();
                partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
                Heartbeat {
                    task: view.id as i32,
                    state: view.state,
                    trace: view.trace,
                    figures: TaskFigures {
                        partitions,
                        process_rows_per_second: rows_per_second,
                    },
                }
            })
            .collect()
    }

    pub(super) fn task_views(&self) -> Vec<TaskView> {
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

    pub(super) fn starting_state(&self) -> &'static str {
        if self.target == Target::Paused {
            "PAUSED"
        } else {
            "RUNNING"
        }
    }

    /// Publishes the connector's state as it is now.
    pub(super) fn publish_current(&self) {
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

    pub(super) fn publish(&self, state: ConnectorState, trace: Option<String>) {
        let tasks = self.task_views();
        for task in &tasks {
            self.metrics.set_task_state(task.id, task.state);
        }
        let error = current_error(state, trace.as_deref(), &tasks);
        let last_error = {
            let previous = self.view.borrow();
            match (error, &previous.last_error) {
                // The same error still: it keeps the time it first appeared.
                (Some(message), Some(old)) if old.message == message => Some(old.clone()),
                (Some(message), _) => Some(LastError {
                    message,
                    at_ms: now_ms(),
                }),
                (None, old) => old.clone(),
            }
        };
        let view = ConnectorView {
            state,
            trace,
            tasks,
            started: true,
            sink: self.sink.clone(),
            others: self.others.clone(),
            last_error,
        };
        self.view.send_if_modified(|old| {
            let changed = old.state != view.state
                || old.trace != view.trace
                || old.tasks != view.tasks
                || old.started != view.started
                || old.others != view.others
                || old.last_error != view.last_error
                || old.sink.is_some() != view.sink.is_some();
            *old = view;
            changed
        });
    }
}

/// The error the connector shows now, if any: its own (failed, or waiting for its
/// database), else the first failed or restarting task's. The traces of a connector that
/// is only starting or connecting are no errors.
fn current_error(state: ConnectorState, trace: Option<&str>, tasks: &[TaskView]) -> Option<String> {
    let own = trace.filter(|t| match state {
        ConnectorState::Failed => true,
        ConnectorState::Unassigned => !matches!(*t, "starting" | "connecting"),
        _ => false,
    });
    own.map(str::to_string).or_else(|| {
        tasks.iter().find_map(|t| {
            t.trace
                .as_ref()
                .map(|trace| format!("task {}: {trace}", t.id))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: usize, state: &'static str, trace: Option<&str>) -> TaskView {
        TaskView {
            id,
            state,
            trace: trace.map(String::from),
            transient: false,
        }
    }

    #[test]
    fn the_current_error_is_the_connectors_else_the_first_tasks() {
        let running = [task(0, "RUNNING", None), task(1, "RUNNING", None)];
        assert_eq!(current_error(ConnectorState::Running, None, &running), None);
        for quiet in ["starting", "connecting"] {
            assert_eq!(
                current_error(ConnectorState::Unassigned, Some(quiet), &running),
                None
            );
        }
        assert_eq!(
            current_error(
                ConnectorState::Unassigned,
                Some("waiting for the database: refused"),
                &running
            ),
            Some("waiting for the database: refused".into())
        );
        let failing = [
            task(0, "RUNNING", None),
            task(1, "RESTARTING", Some("deadlock")),
        ];
        assert_eq!(
            current_error(ConnectorState::Running, None, &failing),
            Some("task 1: deadlock".into())
        );
        assert_eq!(
            current_error(ConnectorState::Failed, Some("no such table"), &failing),
            Some("no such table".into())
        );
    }
}
