//! What a connector takes over before its tasks start: what its old name stored
//! (`renamed_from`), and the positions of the other side when its guarantee (or, under
//! `at_least_once`, its group) changed since it last ran. Both run at the runner's
//! connect, at a process's start and at a reload alike, before any record is read.
//!
//! A switch of `delivery.guarantee` seeds the new side from the side that was in use, so
//! that nothing is read twice or skipped:
//!
//! - `at_least_once` → `exactly_once`: the Kafka group's committed offsets (where the
//!   connector stood) replace `sluice_offsets` (what a former exactly-once period left);
//! - `exactly_once` → `at_least_once`: the offsets of `sluice_offsets` are committed to the
//!   Kafka group (its mirror may lag the database's by a batch).
//!
//! Under `at_least_once` a new group (a rename, or `group:` changed between two starts)
//! starts from the old group's committed offsets when it has none of its own.
//!
//! `sluice_delivery` keeps what each connector last ran with. A switch waits until no other
//! process runs the connector, and the seeding is claimed with a conditional update of that
//! row, so that of two processes starting at once only one seeds. A connector with no row
//! (it last ran before schema version 8) that now runs `exactly_once` is taken to come from
//! `at_least_once` when its group's committed offsets are ahead of the stored ones (an
//! exactly-once mirror never is).

use super::connector::Runner;
use crate::config::{ConnectorConfig, Guarantee, defaults};
use crate::sink::{ControlStore, DeliveryRow};

fn guarantee_name(guarantee: Guarantee) -> &'static str {
    match guarantee {
        Guarantee::ExactlyOnce => "exactly_once",
        Guarantee::AtLeastOnce => "at_least_once",
    }
}

impl Runner {
    /// Takes over a renamed connector's positions and seeds a changed guarantee's. `Err`
    /// says what it waits for (tried again with the connection).
    pub(super) async fn hand_over(&self, control: ControlStore<'_>) -> Result<(), String> {
        let config = self.config.clone();
        let text = |e: crate::sink::SinkError| e.to_string();
        let mut previous = control.read_delivery(&config.name).await.map_err(text)?;
        if let Some(old) = &config.renamed_from
            && previous.is_none()
            && !control.has_positions(&config.name).await.map_err(text)?
        {
            let old_row = control.read_delivery(old).await.map_err(text)?;
            let old_group = old_row
                .as_ref()
                .map_or_else(|| defaults::group(old), |r| r.group.clone());
            self.wait_until_stopped(control, old, &[old_group]).await?;
            let moved = control.take_over(old).await.map_err(text)?;
            tracing::info!(from = %old, moved, "renamed_from: took over what the old name stored");
            previous = control.read_delivery(&config.name).await.map_err(text)?;
        }
        let now = DeliveryRow {
            guarantee: guarantee_name(config.delivery.guarantee).to_string(),
            group: config.group_id(),
        };
        if previous.as_ref() == Some(&now) {
            return Ok(());
        }
        let (kafka, brokers) = (self.context.kafka.clone(), self.context.brokers.clone());
        let mut came_from = previous.clone();
        if came_from.is_none() && config.delivery.guarantee == Guarantee::ExactlyOnce {
            // Before schema version 8: infer an at-least-once period from a group ahead of
            // the stored offsets.
            let stored = control.read_all_offsets().await.map_err(text)?;
            let probe = (*config).clone();
            let committed = crate::kafka::blocking(move || {
                crate::kafka::group::committed_offsets(&kafka, &brokers, &probe)
            })
            .await?;
            let ahead = committed.iter().any(|(t, p, n)| {
                stored
                    .iter()
                    .find(|(st, sp, _)| st == t && sp == p)
                    .is_none_or(|(_, _, s)| n > s)
            });
            if ahead && !committed.is_empty() {
                came_from = Some(DeliveryRow {
                    guarantee: "at_least_once".into(),
                    group: config.group_id(),
                });
            }
        }
        match came_from {
            Some(from) if from != now => {
                let mut groups = vec![config.group_id()];
                if from.group != config.group_id() {
                    groups.push(from.group.clone());
                }
                self.wait_until_stopped(control, &config.name, &groups)
                    .await?;
                self.seed(control, &config, previous.as_ref(), &from, &now)
                    .await
            }
            _ => {
                control
                    .claim_delivery(previous.as_ref(), &now, None)
                    .await
                    .map_err(text)?;
                Ok(())
            }
        }
    }

    /// Waits (by failing, to be tried again) while `connector` runs in another process
    /// (fresh heartbeats of any process but this one) or any of `groups` has members.
    async fn wait_until_stopped(
        &self,
        control: ControlStore<'_>,
        connector: &str,
        groups: &[String],
    ) -> Result<(), String> {
        let running = crate::reset::live_tasks(
            control
                .heartbeats_of(connector)
                .await
                .map_err(|e| e.to_string())?,
            Some(&self.context.worker_id),
        );
        if !running.is_empty() {
            return Err(format!(
                "waiting for connector {connector} to stop in every other process before taking over its positions: {}",
                running.join(", ")
            ));
        }
        for group in groups {
            let mut probe = (*self.config).clone();
            probe.group = Some(group.clone());
            let (kafka, brokers) = (self.context.kafka.clone(), self.context.brokers.clone());
            let members = crate::kafka::blocking(move || {
                crate::kafka::group::members(&kafka, &brokers, &probe)
            })
            .await?;
            if members > 0 {
                return Err(format!(
                    "waiting for the Kafka group {group} to empty ({members} member(s)) before taking over connector {connector}'s positions"
                ));
            }
        }
        Ok(())
    }

    /// Seeds the side the connector now resumes from, from the side it ran on (`from`),
    /// claiming the change of `sluice_delivery` from `previous` to `now`.
    async fn seed(
        &self,
        control: ControlStore<'_>,
        config: &ConnectorConfig,
        previous: Option<&DeliveryRow>,
        from: &DeliveryRow,
        now: &DeliveryRow,
    ) -> Result<(), String> {
        let text = |e: crate::sink::SinkError| e.to_string();
        let (kafka, brokers) = (self.context.kafka.clone(), self.context.brokers.clone());
        let mut old = config.clone();
        old.group = Some(from.group.clone());
        let was_exactly_once = from.guarantee == "exactly_once";
        match (was_exactly_once, config.delivery.guarantee) {
            (false, Guarantee::ExactlyOnce) => {
                let committed = crate::kafka::blocking(move || {
                    crate::kafka::group::committed_offsets(&kafka, &brokers, &old)
                })
                .await?;
                if control
                    .claim_delivery(previous, now, Some(&committed))
                    .await
                    .map_err(text)?
                {
                    tracing::info!(partitions = committed.len(), group = %from.group,
                        "guarantee at_least_once -> exactly_once: the stored offsets start from the group's committed offsets");
                }
            }
            // The group is moved first (again by another process starting at once: the
            // same offsets), then the change claimed.
            (true, Guarantee::AtLeastOnce) => {
                let stored = control.read_all_offsets().await.map_err(text)?;
                let count = stored.len();
                let new = config.clone();
                crate::kafka::blocking(move || {
                    crate::kafka::group::commit_group_offsets(&kafka, &brokers, &new, &stored)
                })
                .await?;
                control
                    .claim_delivery(previous, now, None)
                    .await
                    .map_err(text)?;
                tracing::info!(partitions = count, group = %config.group_id(),
                    "guarantee exactly_once -> at_least_once: the group's committed offsets start from the stored offsets");
            }
            (false, Guarantee::AtLeastOnce) if from.group != config.group_id() => {
                let new = config.clone();
                let moved = crate::kafka::blocking(move || {
                    let mine = crate::kafka::group::committed_offsets(&kafka, &brokers, &new)?;
                    if !mine.is_empty() {
                        return Ok(0);
                    }
                    let theirs = crate::kafka::group::committed_offsets(&kafka, &brokers, &old)?;
                    crate::kafka::group::commit_group_offsets(&kafka, &brokers, &new, &theirs)?;
                    Ok(theirs.len())
                })
                .await?;
                control
                    .claim_delivery(previous, now, None)
                    .await
                    .map_err(text)?;
                tracing::info!(partitions = moved, from = %from.group, to = %config.group_id(),
                    "a new Kafka group starts from the old group's committed offsets");
            }
            _ => {
                control
                    .claim_delivery(previous, now, None)
                    .await
                    .map_err(text)?;
            }
        }
        Ok(())
    }
}
