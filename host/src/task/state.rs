//! The task state machine. Every transition is in [`TaskState::next`]; anything else is an
//! [`InvalidTransition`], which is an error, not a silent no-op.
//!
//! ```text
//! Subscribing ─subscribed─► Consuming ─pause─► Pausing ─paused─► Paused
//!                               ▲                                   │ resume
//!                               └──────resumed──── Resuming ◄───────┘
//! any live state ─stop─► Closing ─closed─► Closed ─terminate─► Terminated
//! any live state ─fail─► Failed ─terminate─► Terminated
//! Closed | Failed ─restart─► Subscribing
//! ```

use std::fmt;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    Subscribing,
    Consuming,
    Pausing,
    Paused,
    Resuming,
    Closing,
    Closed,
    Failed,
    Terminated,
}

/// What happens to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEvent {
    Subscribed,
    Pause,
    PauseApplied,
    Resume,
    ResumeApplied,
    Stop,
    Closed,
    Fail,
    Restart,
    Terminate,
}

/// A transition the table does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid task transition: {event:?} in state {from}")]
pub struct InvalidTransition {
    pub from: TaskState,
    pub event: TaskEvent,
}

impl TaskState {
    /// The transition table.
    pub fn next(self, event: TaskEvent) -> Result<TaskState, InvalidTransition> {
        use TaskEvent as E;
        use TaskState as S;
        let to = match (self, event) {
            (S::Subscribing, E::Subscribed) => S::Consuming,
            (S::Consuming, E::Pause) => S::Pausing,
            (S::Pausing, E::PauseApplied) => S::Paused,
            (S::Paused, E::Resume) => S::Resuming,
            (S::Resuming, E::ResumeApplied) => S::Consuming,
            (S::Subscribing | S::Consuming | S::Pausing | S::Paused | S::Resuming, E::Stop) => {
                S::Closing
            }
            (S::Closing, E::Closed) => S::Closed,
            (
                S::Subscribing | S::Consuming | S::Pausing | S::Paused | S::Resuming | S::Closing,
                E::Fail,
            ) => S::Failed,
            (S::Closed | S::Failed, E::Restart) => S::Subscribing,
            (S::Closed | S::Failed, E::Terminate) => S::Terminated,
            (from, event) => return Err(InvalidTransition { from, event }),
        };
        Ok(to)
    }

    /// The name the status API shows.
    pub fn name(self) -> &'static str {
        match self {
            TaskState::Subscribing => "SUBSCRIBING",
            TaskState::Consuming => "RUNNING",
            TaskState::Pausing => "PAUSING",
            TaskState::Paused => "PAUSED",
            TaskState::Resuming => "RESUMING",
            TaskState::Closing => "CLOSING",
            TaskState::Closed => "CLOSED",
            TaskState::Failed => "FAILED",
            TaskState::Terminated => "TERMINATED",
        }
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::TaskEvent as E;
    use super::TaskState as S;

    #[test]
    fn happy_path() {
        let mut s = S::Subscribing;
        for e in [
            E::Subscribed,
            E::Pause,
            E::PauseApplied,
            E::Resume,
            E::ResumeApplied,
            E::Stop,
            E::Closed,
            E::Terminate,
        ] {
            s = s.next(e).unwrap();
        }
        assert_eq!(s, S::Terminated);
    }

    #[test]
    fn invalid_transitions_are_errors() {
        assert!(S::Consuming.next(E::Resume).is_err());
        assert!(S::Paused.next(E::Pause).is_err());
        assert!(S::Closed.next(E::Stop).is_err());
        assert!(S::Terminated.next(E::Restart).is_err());
        let err = S::Closing.next(E::Subscribed).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid task transition: Subscribed in state CLOSING"
        );
    }

    #[test]
    fn failure_and_restart() {
        assert_eq!(S::Paused.next(E::Fail), Ok(S::Failed));
        assert_eq!(S::Failed.next(E::Restart), Ok(S::Subscribing));
    }
}
