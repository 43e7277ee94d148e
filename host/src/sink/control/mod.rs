//! What the processes of one connector share through its sink database, besides the
//! offsets: the operator's target state and restart requests (`sluice_control`, one row per
//! connector, written by the admin API of whichever process answered), and each process's
//! tasks (`sluice_task_status`, one row per task, rewritten every few seconds as a
//! heartbeat). Every process reads the first and writes the second; the admin API reads
//! both, so that it acts on, and shows, the connector in every process.
//!
//! A heartbeat carries the task's figures too ([`TaskFigures`]: the lag of each partition
//! it holds, its process's rows/s), so that any process's status shows the connector's
//! lag and rate across processes.
//!
//! Heartbeat times are the writing process's clock, in milliseconds since the epoch.

use std::time::{SystemTime, UNIX_EPOCH};

use sqlx::AssertSqlSafe;

use super::{Dialect, SharedPool, Sink, SinkError, TableSpec, db, each_pool};

mod delivery;
mod positions;

pub use delivery::DeliveryRow;
pub use positions::{Forgotten, OffsetsChange, ResetPoint};

/// What the operator asked a connector to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Target {
    #[default]
    Running,
    Paused,
    Stopped,
}

impl Target {
    /// Kafka Connect's name, as stored and shown.
    pub fn name(self) -> &'static str {
        match self {
            Target::Running => "RUNNING",
            Target::Paused => "PAUSED",
            Target::Stopped => "STOPPED",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "RUNNING" => Some(Target::Running),
            "PAUSED" => Some(Target::Paused),
            "STOPPED" => Some(Target::Stopped),
            _ => None,
        }
    }
}

/// A connector's row in `sluice_control`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ControlRow {
    pub target: Target,
    /// Raised by each restart request; a process that sees it rise restarts.
    pub restart_seq: i64,
    /// The last request's `includeTasks`.
    pub restart_tasks: bool,
    /// The last request's `onlyFailed`.
    pub restart_only_failed: bool,
}

/// One task of one process, as its last heartbeat left it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRow {
    pub worker: String,
    pub task: i32,
    /// Kafka Connect's state name.
    pub state: String,
    pub trace: Option<String>,
    /// When it was written, in ms since the epoch (the writer's clock).
    pub updated_at: i64,
    /// What the heartbeat said of the task's figures: `None` from a process of a version
    /// before heartbeats carried them, or from one whose heartbeat is stale.
    pub figures: Option<TaskFigures>,
}

/// A task's figures as its heartbeat carries them to the other processes, stored as JSON
/// in `sluice_task_status.figures`. Fields a later version adds are ignored by this one,
/// and fields it lacks read as their defaults, so processes of two versions read each
/// other's heartbeats during a rolling upgrade.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TaskFigures {
    /// Each partition the task holds, with its lag.
    pub partitions: Vec<PartitionLag>,
    /// The writing process's rows/s for the connector over its last 30 s (every task of a
    /// process carries the same figure: the rate is counted per process).
    pub process_rows_per_second: f64,
}

/// A partition a task holds and how far it is behind.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    /// Records behind the partition's high watermark.
    pub lag: i64,
}

/// What a process writes of one of its tasks every few seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Heartbeat {
    pub task: i32,
    /// Kafka Connect's state name.
    pub state: &'static str,
    pub trace: Option<String>,
    pub figures: TaskFigures,
}

/// A heartbeat older than this is a process that is gone: its tasks run nowhere, and its
/// figures are old. The one rule for every reader (status, handover, offsets reset).
pub const HEARTBEAT_STALE: std::time::Duration = std::time::Duration::from_secs(15);

impl TaskRow {
    /// Older than [`HEARTBEAT_STALE`] at `now` (ms since the epoch).
    pub fn is_stale(&self, now: i64) -> bool {
        now - self.updated_at > i64::try_from(HEARTBEAT_STALE.as_millis()).unwrap_or(i64::MAX)
    }

    /// The row as a reader at `now` shows it: a stale one `UNASSIGNED` and without figures.
    pub fn seen_at(mut self, now: i64) -> TaskRow {
        if self.is_stale(now) {
            self.state = "UNASSIGNED".into();
            self.figures = None;
        }
        self
    }
}

/// Now, in milliseconds since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// One connector's control store: its row of `sluice_control`, its processes' heartbeats
/// in `sluice_task_status`, what it last ran with and the claim of a change of it
/// (`sluice_delivery`, [`delivery`]), and its stored positions: read, reset by an operator,
/// taken over from an old name ([`positions`]). The supervisor, the admin API, `reset`,
/// the commands that show offsets and the task reading where it resumes take this, not the
/// whole [`Sink`]: it writes no rows of the connector's tables. A view of its sink,
/// borrowed: it never keeps the sink's pool open past the sink's close.
#[derive(Clone, Copy)]
pub struct ControlStore<'a> {
    pool: &'a SharedPool,
    dialect: Dialect,
    connector: &'a str,
    /// The connector's dead-letter table (`errors.dlq.table`): its letters are keyed by
    /// the connector's name too, so a take-over moves them and a reset counts them.
    dead_letter_table: Option<&'a TableSpec>,
}

impl Sink {
    /// The connector's control store, on the sink's pool.
    pub fn control(&self) -> ControlStore<'_> {
        ControlStore {
            pool: &self.pool,
            dialect: self.dialect,
            connector: &self.connector,
            dead_letter_table: self.dead_letter_table.as_ref(),
        }
    }
}

impl ControlStore<'_> {
    /// The connector whose rows these are.
    pub fn connector(&self) -> &str {
        self.connector
    }

    fn control_error(&self, action: &'static str) -> impl Fn(sqlx::Error) -> SinkError {
        move |source| SinkError::Database {
            action,
            table: "sluice_control".into(),
            source,
        }
    }

    /// The connector's control row, if the operator ever set one.
    pub async fn read_control(&self) -> Result<Option<ControlRow>, SinkError> {
        let sql = format!(
            "SELECT target, restart_seq, restart_tasks, restart_only_failed FROM sluice_control WHERE connector = {}",
            self.dialect.param(1)
        );
        let row: Option<(String, i64, i32, i32)> = each_pool!(self, pool, DB => {
            sqlx::query_as::<DB, (String, i64, i32, i32)>(AssertSqlSafe(sql))
                .bind(self.connector.to_string())
                .fetch_optional(pool)
                .await
        })
        .map_err(self.control_error("read control"))?;
        Ok(
            row.map(|(target, restart_seq, tasks, only_failed)| ControlRow {
                target: Target::parse(&target).unwrap_or_default(),
                restart_seq,
                restart_tasks: tasks != 0,
                restart_only_failed: only_failed != 0,
            }),
        )
    }

    /// Sets the connector's target state (every process applies it within seconds).
    pub async fn write_target(&self, target: Target) -> Result<(), SinkError> {
        let sql = db::of(self.dialect).own_tables.write_target;
        each_pool!(self, pool, DB => {
            sqlx::query::<DB>(AssertSqlSafe(sql))
                .bind(self.connector.to_string())
                .bind(target.name().to_string())
                .bind(now_ms())
                .execute(pool)
                .await
                .map(|_| ())
        })
        .map_err(self.control_error("write target state"))
    }

    /// Asks every process to restart the connector; returns the request's sequence number.
    pub async fn request_restart(
        &self,
        include_tasks: bool,
        only_failed: bool,
    ) -> Result<i64, SinkError> {
        let sql = db::of(self.dialect).own_tables.request_restart;
        each_pool!(self, pool, DB => {
            sqlx::query::<DB>(AssertSqlSafe(sql))
                .bind(self.connector.to_string())
                .bind(i32::from(include_tasks))
                .bind(i32::from(only_failed))
                .bind(now_ms())
                .execute(pool)
                .await
                .map(|_| ())
        })
        .map_err(self.control_error("request restart"))?;
        Ok(self.read_control().await?.map_or(0, |row| row.restart_seq))
    }

    /// Replaces this process's heartbeat rows for the connector with `tasks`, in one
    /// transaction.
    pub async fn write_heartbeats(
        &self,
        worker: &str,
        tasks: &[Heartbeat],
    ) -> Result<(), SinkError> {
        let p = |n| self.dialect.param(n);
        let delete = format!(
            "DELETE FROM sluice_task_status WHERE connector = {} AND worker = {}",
            p(1),
            p(2)
        );
        let insert = format!(
            "INSERT INTO sluice_task_status (connector, worker, task, state, trace, updated_at, figures) \
             VALUES ({}, {}, {}, {}, {}, {}, {})",
            p(1),
            p(2),
            p(3),
            p(4),
            p(5),
            p(6),
            p(7)
        );
        let now = now_ms();
        let error = |source| SinkError::Database {
            action: "write task status",
            table: "sluice_task_status".into(),
            source,
        };
        each_pool!(self, pool, DB => {
            let mut tx = pool.begin_with(self.dialect.begin()).await.map_err(error)?;
            sqlx::query::<DB>(AssertSqlSafe(delete))
                .bind(self.connector.to_string())
                .bind(worker.to_string())
                .execute(&mut *tx)
                .await
                .map_err(error)?;
            for heartbeat in tasks {
                // Serialising plain numbers and strings cannot fail; were it to, the row
                // goes without figures rather than not at all.
                let figures = serde_json::to_string(&heartbeat.figures).ok();
                sqlx::query::<DB>(AssertSqlSafe(insert.clone()))
                    .bind(self.connector.to_string())
                    .bind(worker.to_string())
                    .bind(heartbeat.task)
                    .bind(heartbeat.state.to_string())
                    .bind(heartbeat.trace.clone())
                    .bind(now)
                    .bind(figures)
                    .execute(&mut *tx)
                    .await
                    .map_err(error)?;
            }
            tx.commit().await.map_err(error)
        })
    }

    /// Every process's heartbeat rows for the connector.
    pub async fn read_heartbeats(&self) -> Result<Vec<TaskRow>, SinkError> {
        self.heartbeats_of(self.connector).await
    }

    /// The heartbeats of any connector name (a renamed connector's old one, say).
    pub async fn heartbeats_of(&self, connector: &str) -> Result<Vec<TaskRow>, SinkError> {
        let sql = format!(
            "SELECT worker, task, state, trace, updated_at, figures FROM sluice_task_status WHERE connector = {} ORDER BY worker, task",
            self.dialect.param(1)
        );
        type Row = (String, i32, String, Option<String>, i64, Option<String>);
        let rows: Vec<Row> = each_pool!(self, pool, DB => {
            sqlx::query_as::<DB, Row>(AssertSqlSafe(sql))
                .bind(connector.to_string())
                .fetch_all(pool)
                .await
        })
        .map_err(|source| SinkError::Database {
            action: "read task status",
            table: "sluice_task_status".into(),
            source,
        })?;
        Ok(rows
            .into_iter()
            .map(
                |(worker, task, state, trace, updated_at, figures)| TaskRow {
                    worker,
                    task,
                    state,
                    trace,
                    updated_at,
                    // Figures another process wrote that do not parse are figures it has
                    // not shared: its task still shows, without them.
                    figures: figures.and_then(|text| serde_json::from_str(&text).ok()),
                },
            )
            .collect())
    }

    /// Every stored offset of the connector: (topic, partition, next offset).
    pub async fn read_all_offsets(&self) -> Result<Vec<(String, i32, i64)>, SinkError> {
        let sql = self.dialect.all_offsets();
        each_pool!(self, pool, DB => {
            sqlx::query_as::<DB, (String, i32, i64)>(AssertSqlSafe(sql))
                .bind(self.connector.to_string())
                .fetch_all(pool)
                .await
        })
        .map_err(|source| SinkError::Database {
            action: "read offsets",
            table: "sluice_offsets".into(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(updated_at: i64) -> TaskRow {
        TaskRow {
            worker: "b".into(),
            task: 0,
            state: "RUNNING".into(),
            trace: None,
            updated_at,
            figures: Some(TaskFigures {
                partitions: vec![PartitionLag {
                    topic: "t".into(),
                    partition: 0,
                    lag: 9,
                }],
                process_rows_per_second: 1.0,
            }),
        }
    }

    #[test]
    fn a_stale_heartbeat_shows_unassigned_and_without_figures() {
        let stale = HEARTBEAT_STALE.as_millis() as i64;
        let now = 1_000_000;
        let fresh = row(now - stale).seen_at(now);
        assert_eq!(fresh, row(now - stale), "at the limit it still counts");
        let gone = row(now - stale - 1).seen_at(now);
        assert_eq!(gone.state, "UNASSIGNED");
        assert_eq!(gone.figures, None);
        assert!(row(now - stale - 1).is_stale(now));
    }
}
