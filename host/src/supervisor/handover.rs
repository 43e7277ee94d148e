//! What a connector takes over before its tasks start: what its old name stored
//! (`renamed_from`), and the positions of the other side when its guarantee changed since
//! it last ran. Both run at the runner's connect, so at a process's start and at a reload
//! alike, before any record is read.
//!
//! A switch of `delivery.guarantee` seeds the new side from the side that was in use, so
//! that nothing is read twice or skipped:
//!
//! - `at_least_once` → `exactly_once`: the Kafka group's committed offsets (where the
//!   connector stood) are written to `sluice_offsets`, replacing the offsets a former
//!   exactly-once period left there;
//! - `exactly_once` → `at_least_once`: the offsets of `sluice_offsets` are committed to the
//!   Kafka group (its mirror may lag the database's by a batch).
//!
//! Under `at_least_once` a new group (a rename, or `group:` changed between two starts)
//! starts from the old group's committed offsets when it has none of its own.

use std::sync::Arc;

use super::connector::Runner;
use crate::config::{ConnectorConfig, Guarantee, defaults};
use crate::sink::{DeliveryRow, OffsetsChange, Sink};

/// Runs a blocking Kafka call off the runtime's workers.
async fn kafka_call<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, rdkafka::error::KafkaError> + Send + 'static,
) -> Result<T, String> {
    match tokio::task::spawn_blocking(call).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

fn guarantee_name(guarantee: Guarantee) -> &'static str {
    match guarantee {
        Guarantee::ExactlyOnce => "exactly_once",
        Guarantee::AtLeastOnce => "at_least_once",
    }
}

impl Runner {
    /// Takes over a renamed connector's positions and seeds a changed guarantee's. `Err`
    /// says what it waits for (tried again with the connection).
    pub(super) async fn hand_over(&self, sink: &Arc<Sink>) -> Result<(), String> {
        let config = self.config.clone();
        let mut previous = sink
            .read_delivery(&config.name)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(old) = &config.renamed_from
            && !sink
                .has_positions(&config.name)
                .await
                .map_err(|e| e.to_string())?
        {
            let old_row = sink.read_delivery(old).await.map_err(|e| e.to_string())?;
            let old_group = old_row
                .as_ref()
                .map_or_else(|| defaults::group(old), |r| r.group.clone());
            self.wait_until_stopped(sink, old, &old_group).await?;
            let moved = sink.take_over(old).await.map_err(|e| e.to_string())?;
            tracing::info!(from = %old, moved, "renamed_from: took over what the old name stored");
            if old_row.is_some() {
                previous = old_row;
            }
        }
        let now = DeliveryRow {
            guarantee: guarantee_name(config.delivery.guarantee).to_string(),
            group: config.group_id(),
        };
        if let Some(previous) = &previous
            && *previous != now
        {
            self.seed(sink, &config, previous).await?;
        }
        if previous.as_ref() != Some(&now) {
            sink.write_delivery(&now).await.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Waits (by failing, to be tried again) while `old` runs anywhere: its fresh
    /// heartbeats, and members in its group.
    async fn wait_until_stopped(
        &self,
        sink: &Arc<Sink>,
        old: &str,
        old_group: &str,
    ) -> Result<(), String> {
        let now = crate::sink::control::now_ms();
        let fresh = i64::try_from(crate::reset::HEARTBEAT_FRESH.as_millis()).unwrap_or(i64::MAX);
        let running: Vec<String> = sink
            .heartbeats_of(old)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|r| now - r.updated_at <= fresh)
            .filter(|r| r.state != "UNASSIGNED" && r.state != "FAILED")
            .map(|r| format!("task {} on {} is {}", r.task, r.worker, r.state))
            .collect();
        if !running.is_empty() {
            return Err(format!(
                "waiting for connector {old} to stop in every process before taking over its positions (renamed_from): {}",
                running.join(", ")
            ));
        }
        let mut probe = (*self.config).clone();
        probe.group = Some(old_group.to_string());
        let (kafka, brokers) = (self.context.kafka.clone(), self.context.brokers.clone());
        let members =
            kafka_call(move || crate::kafka::group::members(&kafka, &brokers, &probe)).await?;
        if members > 0 {
            return Err(format!(
                "waiting for connector {old}'s Kafka group {old_group} to empty ({members} member(s)) before taking over its positions (renamed_from)"
            ));
        }
        Ok(())
    }

    /// Seeds the side the connector now resumes from, from the side it ran on.
    async fn seed(
        &self,
        sink: &Arc<Sink>,
        config: &ConnectorConfig,
        previous: &DeliveryRow,
    ) -> Result<(), String> {
        let (kafka, brokers) = (self.context.kafka.clone(), self.context.brokers.clone());
        let mut old = config.clone();
        old.group = Some(previous.group.clone());
        let was_exactly_once = previous.guarantee == "exactly_once";
        match (was_exactly_once, config.delivery.guarantee) {
            (false, Guarantee::ExactlyOnce) => {
                let committed = kafka_call({
                    let (kafka, brokers) = (kafka.clone(), brokers.clone());
                    move || crate::kafka::group::committed_offsets(&kafka, &brokers, &old)
                })
                .await?;
                let set: Vec<(String, i32, Option<i64>)> = committed
                    .iter()
                    .map(|(t, p, n)| (t.clone(), *p, Some(*n)))
                    .collect();
                sink.reset(&OffsetsChange::Set(set), &[])
                    .await
                    .map_err(|e| e.to_string())?;
                tracing::info!(partitions = committed.len(), group = %previous.group,
                    "guarantee at_least_once -> exactly_once: the stored offsets start from the group's committed offsets");
            }
            (true, Guarantee::AtLeastOnce) => {
                let stored = sink.read_all_offsets().await.map_err(|e| e.to_string())?;
                let count = stored.len();
                let new = config.clone();
                kafka_call(move || {
                    crate::kafka::group::commit_group_offsets(&kafka, &brokers, &new, &stored)
                })
                .await?;
                tracing::info!(partitions = count, group = %config.group_id(),
                    "guarantee exactly_once -> at_least_once: the group's committed offsets start from the stored offsets");
            }
            (false, Guarantee::AtLeastOnce) if previous.group != config.group_id() => {
                let new = config.clone();
                let moved = kafka_call(move || {
                    let mine = crate::kafka::group::committed_offsets(&kafka, &brokers, &new)?;
                    if !mine.is_empty() {
                        return Ok(0);
                    }
                    let theirs = crate::kafka::group::committed_offsets(&kafka, &brokers, &old)?;
                    crate::kafka::group::commit_group_offsets(&kafka, &brokers, &new, &theirs)?;
                    Ok(theirs.len())
                })
                .await?;
                tracing::info!(partitions = moved, from = %previous.group, to = %config.group_id(),
                    "a new Kafka group starts from the old group's committed offsets");
            }
            _ => {}
        }
        Ok(())
    }
}
