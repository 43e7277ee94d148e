//! An operator's offsets reset (`DELETE`/`PATCH …/offsets`, `sluice offsets reset`): a
//! replay that replays. Each partition moves to a position P where the connector reads it
//! next: the offset given, or for a partition whose offset is forgotten, where a partition
//! without one starts (the log's start, or its end under `auto.offset.reset: latest`).
//! What sluice remembers of the records at or after P goes with it:
//!
//! - the producer ids of `delivery.dedup` first read there (otherwise the replay writes
//!   nothing and counts every record as a duplicate), and ids stored before sluice kept
//!   where they were read (schema version 8), whose place is unknown;
//! - the redrive markers of records there (otherwise a redrive passes them over).
//!
//! Dead letters in the dead-letter table stay: a letter is the only copy of a record the
//! log may no longer hold. The replay removes a letter in the transaction that writes its
//! record's row (`WriteBatch::supersedes`), and a record that fails again keeps one letter.
//!
//! Under `exactly_once` the offsets move in the same transaction that forgets. Under
//! `at_least_once` the ids and markers go first, in the sink database, and the Kafka group's
//! offsets (where such a connector resumes) move after: a failure between the two leaves
//! records that are read again and written at least once, as that guarantee says.
//!
//! A reset only runs while the connector runs nowhere: [`running_anywhere`].

use crate::config::{ConnectorConfig, Guarantee, KafkaConfig};
use crate::sink::{ControlStore, Forgotten, OffsetsChange, ResetPoint, SinkError};

/// What the operator asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResetRequest {
    /// Forget every offset: every partition starts over per `auto.offset.reset`.
    All,
    /// Set (`Some`) or forget (`None`) these partitions' offsets.
    Partitions(Vec<(String, i32, Option<i64>)>),
}

/// Why a reset did not run.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    #[error(
        "connector {connector} still runs ({}): stop it everywhere first (sluice stop {connector}, or PUT /connectors/{connector}/stop)",
        .running.join(", ")
    )]
    Running {
        connector: String,
        running: Vec<String>,
    },
    #[error("cannot check that connector {connector} runs nowhere: {reason}")]
    Unchecked { connector: String, reason: String },
    #[error("cannot read where the partitions of connector {connector} start: {reason}")]
    Positions { connector: String, reason: String },
    #[error(transparent)]
    Sink(#[from] SinkError),
}

/// What a reset did.
#[derive(Debug, Clone)]
pub struct ResetReport {
    /// Where each partition goes (P).
    pub points: Vec<ResetPoint>,
    /// What was forgotten.
    pub forgotten: Forgotten,
    /// The Kafka group's offsets: how many partitions moved, or why they did not. For an
    /// `exactly_once` connector the group's copy is advisory (lag tools read it); for an
    /// `at_least_once` one it is where the connector resumes.
    pub kafka_group: Result<usize, String>,
}

/// What runs the connector anywhere, as the database's heartbeats and the Kafka group
/// show it: a fresh heartbeat of a task that is not unassigned or failed (of any process
/// but `except`, whose own state its caller knows), and the group's members. `brokers`
/// is `None` where the cluster cannot be reached (another process's embedded cluster):
/// then the heartbeats alone tell.
pub async fn running_anywhere(
    control: &ControlStore<'_>,
    kafka: &KafkaConfig,
    brokers: Option<&str>,
    connector: &ConnectorConfig,
    except: Option<&str>,
) -> Result<Vec<String>, ResetError> {
    let unchecked = |reason: String| ResetError::Unchecked {
        connector: connector.name.clone(),
        reason,
    };
    let mut running = live_tasks(
        control
            .read_heartbeats()
            .await
            .map_err(|e| unchecked(e.to_string()))?,
        except,
    );
    if let Some(brokers) = brokers {
        let (kafka, brokers, config) = (kafka.clone(), brokers.to_string(), connector.clone());
        let members =
            crate::kafka::blocking(move || crate::kafka::group::members(&kafka, &brokers, &config))
                .await
                .map_err(|e| {
                    unchecked(format!(
                        "cannot check that the Kafka group {} is empty: {e}",
                        connector.group_id()
                    ))
                })?;
        if members > 0 {
            running.push(format!(
                "the Kafka group {} has {members} member(s)",
                connector.group_id()
            ));
        }
    }
    Ok(running)
}

/// The tasks that `heartbeats` show running now (fresh, neither unassigned nor failed), as
/// `task N on WORKER is STATE`, leaving out those of the process `except`.
pub fn live_tasks(
    heartbeats: Vec<crate::sink::control::TaskRow>,
    except: Option<&str>,
) -> Vec<String> {
    let now = crate::sink::control::now_ms();
    heartbeats
        .into_iter()
        .filter(|row| Some(row.worker.as_str()) != except)
        .filter(|row| !row.is_stale(now))
        .filter(|row| row.state != "UNASSIGNED" && row.state != "FAILED")
        .map(|row| format!("task {} on {} is {}", row.task, row.worker, row.state))
        .collect()
}

/// Resets `connector`'s positions as `request` says (see the module's doc). The caller
/// has checked that the connector runs nowhere. `brokers` is `None` where the cluster
/// cannot be reached: every partition's P is then 0 (everything remembered is
/// forgotten), and the group is not moved.
pub async fn reset(
    control: ControlStore<'_>,
    kafka: &KafkaConfig,
    brokers: Option<&str>,
    connector: &ConnectorConfig,
    request: &ResetRequest,
) -> Result<ResetReport, ResetError> {
    let exactly_once = connector.delivery.guarantee == Guarantee::ExactlyOnce;
    let positions_error = |reason: String| ResetError::Positions {
        connector: connector.name.clone(),
        reason,
    };
    // Where partitions without an offset start, from the cluster.
    let starts = |only: Option<Vec<(String, i32)>>| {
        let (kafka, config) = (kafka.clone(), connector.clone());
        let brokers = brokers.map(str::to_string);
        async move {
            match brokers {
                Some(brokers) => crate::kafka::blocking(move || {
                    crate::kafka::group::start_positions(&kafka, &brokers, &config, only.as_deref())
                })
                .await
                .map_err(positions_error),
                None => Ok(only
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(t, p)| (t, p, 0))
                    .collect()),
            }
        }
    };
    let mut points: Vec<ResetPoint> = Vec::new();
    let change = match request {
        ResetRequest::All => {
            for (topic, partition, start) in starts(None).await? {
                points.push(ResetPoint {
                    topic,
                    partition,
                    start,
                });
            }
            OffsetsChange::ForgetAll
        }
        ResetRequest::Partitions(list) => {
            let forgotten: Vec<(String, i32)> = list
                .iter()
                .filter(|(_, _, next)| next.is_none())
                .map(|(t, p, _)| (t.clone(), *p))
                .collect();
            if !forgotten.is_empty() {
                for (topic, partition, start) in starts(Some(forgotten)).await? {
                    points.push(ResetPoint {
                        topic,
                        partition,
                        start,
                    });
                }
            }
            for (topic, partition, next) in list {
                if let Some(next) = next {
                    points.push(ResetPoint {
                        topic: topic.clone(),
                        partition: *partition,
                        start: *next,
                    });
                }
            }
            OffsetsChange::Set(list.clone())
        }
    };
    if *request == ResetRequest::All {
        // Partitions remembered that the cluster no longer lists (a topic deleted, or no
        // longer the connector's): everything of theirs goes.
        for (topic, partition) in control.remembered_partitions().await? {
            if !points
                .iter()
                .any(|p| p.topic == topic && p.partition == partition)
            {
                points.push(ResetPoint {
                    topic,
                    partition,
                    start: 0,
                });
            }
        }
    }
    let change = if exactly_once {
        change
    } else {
        OffsetsChange::None
    };
    let forgotten = control.reset(&change, &points).await?;
    tracing::info!(connector = %connector.name, offsets = forgotten.offsets,
        dedup_ids = forgotten.dedup_ids, redrive_markers = forgotten.redrive_markers,
        dead_letters_to_replay = forgotten.dead_letters_to_replay, "offsets reset");
    let kafka_group = match brokers {
        None => Err("the cluster is embedded in another process".to_string()),
        Some(brokers) => {
            let (kafka, brokers, config) = (kafka.clone(), brokers.to_string(), connector.clone());
            match request {
                ResetRequest::All => {
                    crate::kafka::blocking(move || {
                        crate::kafka::group::reset_group_offsets(&kafka, &brokers, &config)
                    })
                    .await
                }
                ResetRequest::Partitions(list) => {
                    let commits: Vec<(String, i32, i64)> = list
                        .iter()
                        .filter_map(|(t, p, n)| n.map(|n| (t.clone(), *p, n)))
                        .collect();
                    let moved = commits.len();
                    crate::kafka::blocking(move || {
                        crate::kafka::group::commit_group_offsets(
                            &kafka, &brokers, &config, &commits,
                        )
                    })
                    .await
                    .map(|()| moved)
                }
            }
        }
    };
    Ok(ResetReport {
        points,
        forgotten,
        kafka_group,
    })
}
