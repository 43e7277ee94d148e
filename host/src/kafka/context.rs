//! The task's consumer context: librdkafka's logs to `tracing`, and rebalances handed to
//! the task ([`RebalanceListener`]) inside `poll`, on the consumer's own thread. An
//! assignment is answered with the stored offsets (assigned *with* them: nothing seeks
//! inside a callback), a revocation first settles the batch in flight; the same code
//! serves the eager and the cooperative-sticky protocols.

use std::sync::Arc;
use std::time::Duration;

use crate::logging::{QUIET_PERIOD, Quiet};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};
use rdkafka::types::RDKafkaRespErr;

use super::commit::commit_offsets;
use crate::record::Partition;

/// What a task does when its partitions move. Called on the consumer's own thread, from
/// inside `poll`.
pub trait RebalanceListener: Send + Sync {
    /// These partitions are going away: finish or abandon work on them. When this returns,
    /// nothing of theirs may be written any more.
    fn on_revoke(&self, partitions: &[Partition]);

    /// These partitions arrive: return where each starts (its stored offset, or an
    /// explicit position such as the log's beginning). An error leaves them unassigned and
    /// fails the task.
    fn on_assign(&self, partitions: &[Partition]) -> Vec<(Partition, Offset)>;

    /// After an assignment: whether the new partitions start paused (an operator's pause,
    /// or backpressure). librdkafka keeps a partition's pause flag across unassign and
    /// assign, so the callback sets it explicitly either way.
    fn paused(&self) -> bool;

    /// The client could not take or give up partitions: the task cannot go on correctly.
    fn failed(&self, error: KafkaError);

    /// At-least-once: offsets whose rows are committed but not yet committed to Kafka.
    /// Taken on a revocation so that they reach the group before the partitions leave.
    fn take_kafka_commits(&self) -> Vec<(Partition, i64)>;

    /// Exactly-once: the broker refused the group commit of these offsets (a rebalance
    /// under way, a coordinator moving): the task sends them again with its next mirror
    /// unless newer ones went meanwhile.
    fn mirror_refused(&self, _refused: &[(Partition, i64)]) {}

    /// Of the topics of an assignment, those whose ids (KIP-516) were never asked for: a
    /// topic that `topics_regex` took after the task started.
    fn topics_without_ids(&self, _topics: &[String]) -> Vec<String> {
        Vec::new()
    }

    /// The ids of `asked` that the cluster reported (a topic it reports none for is not
    /// asked again).
    fn learn_topic_ids(&self, _asked: &[String], _ids: std::collections::HashMap<String, String>) {}
}

/// The consumer's context: librdkafka's logs to `tracing`, rebalances to the listener.
pub struct SourceContext {
    pub connector: String,
    pub task: usize,
    pub(super) listener: Arc<dyn RebalanceListener>,
    pub(super) quiet: Quiet,
    /// Exactly-once: the group's committed offsets only mirror the database's (for lag
    /// tools), so a commit librdkafka could not make (a rebalance under way as the tasks
    /// stop) loses nothing and is logged at debug level, not as a warning.
    pub(super) commits_mirror: bool,
}

impl ClientContext for SourceContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        let (connector, task) = (&self.connector, self.task);
        if self.commits_mirror && message.contains("Offset commit") {
            tracing::debug!(connector, task, facility = fac, "librdkafka: {message}");
            return;
        }
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error
            | RDKafkaLogLevel::Warning => match self.quiet.loud() {
                Some(held_back) if matches!(level, RDKafkaLogLevel::Warning) => {
                    tracing::warn!(
                        connector,
                        task,
                        facility = fac,
                        held_back,
                        "librdkafka: {message}"
                    )
                }
                Some(held_back) => {
                    tracing::error!(
                        connector,
                        task,
                        facility = fac,
                        held_back,
                        "librdkafka: {message}"
                    )
                }
                None => tracing::debug!(connector, task, facility = fac, "librdkafka: {message}"),
            },
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(connector, task, facility = fac, "librdkafka: {message}")
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(connector, task, facility = fac, "librdkafka: {message}")
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        match self.quiet.loud() {
            Some(held_back) => {
                tracing::warn!(connector = %self.connector, task = self.task, %error, held_back,
                "kafka client error: {reason} (repeats are logged at debug level for {QUIET_PERIOD:?})")
            }
            None => {
                tracing::debug!(connector = %self.connector, task = self.task, %error, "kafka client error: {reason}")
            }
        }
    }
}

impl ConsumerContext for SourceContext {
    // Runs inside `poll`, on the task thread, for each commit librdkafka finished.
    fn commit_callback(
        &self,
        result: rdkafka::error::KafkaResult<()>,
        offsets: &TopicPartitionList,
    ) {
        let Err(error) = result else { return };
        if !self.commits_mirror {
            return;
        }
        let refused: Vec<(Partition, i64)> = offsets
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(next) => Some(((e.topic().to_string(), e.partition()), next)),
                _ => None,
            })
            .collect();
        tracing::debug!(connector = %self.connector, task = self.task, %error, partitions = refused.len(),
            "the group refused the mirror of committed offsets; it is sent again");
        self.listener.mirror_refused(&refused);
    }

    // Runs inside `poll`, on the task thread: its log lines are in the task's span.
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        let partitions: Vec<Partition> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                tracing::info!(?partitions, cooperative, "partitions assigned");
                // Topics new to the task (a pattern took them): their ids first, so that
                // the assignment compares the stored offsets' topic ids with them.
                let mut topics: Vec<String> = partitions.iter().map(|(t, _)| t.clone()).collect();
                topics.sort_unstable();
                topics.dedup();
                let unknown = self.listener.topics_without_ids(&topics);
                if !unknown.is_empty() {
                    match super::topic_ids::topic_ids(
                        consumer.client(),
                        &unknown,
                        Duration::from_secs(5),
                    ) {
                        Ok(ids) => self.listener.learn_topic_ids(&unknown, ids),
                        Err(why) => tracing::info!(topics = ?unknown, %why,
                            "the new topics' ids are not known: a topic deleted and created again is noticed only when its stored offsets are out of its range"),
                    }
                }
                let starts = self.listener.on_assign(&partitions);
                let mut assignment = TopicPartitionList::new();
                for ((topic, partition), start) in &starts {
                    if let Err(e) = assignment.add_partition_offset(topic, *partition, *start) {
                        tracing::error!(topic, partition, error = %e, "cannot build assignment");
                    }
                }
                let result = if cooperative {
                    consumer.incremental_assign(&assignment)
                } else {
                    consumer.assign(&assignment)
                };
                if let Err(e) = result {
                    tracing::error!(error = %e, "assign failed");
                    self.listener.failed(e);
                }
                let paused = if self.listener.paused() {
                    consumer.pause(&assignment)
                } else {
                    consumer.resume(&assignment)
                };
                if let Err(e) = paused {
                    tracing::error!(error = %e, "cannot set the pause state of new partitions");
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                tracing::info!(
                    ?partitions,
                    cooperative,
                    lost = consumer.assignment_lost(),
                    "partitions revoked"
                );
                self.listener.on_revoke(&partitions);
                let commits = self.listener.take_kafka_commits();
                if !commits.is_empty()
                    && let Err(e) =
                        commit_offsets(consumer, &commits, rdkafka::consumer::CommitMode::Sync)
                {
                    tracing::warn!(error = %e, "committing offsets to Kafka before the revocation failed (under at_least_once those records will be delivered again; under exactly_once only the group's shown progress lags)");
                    // Exactly-once: the partitions kept (a cooperative revocation) show
                    // theirs with the next mirror.
                    if self.commits_mirror {
                        self.listener.mirror_refused(&commits);
                    }
                }
                let result = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = result {
                    tracing::error!(error = %e, "unassign failed");
                    self.listener.failed(e);
                }
            }
            other => {
                tracing::error!(error = ?other, "rebalance error; dropping the assignment");
                self.listener.on_revoke(&partitions);
                let _ = consumer.unassign();
            }
        }
    }
}
