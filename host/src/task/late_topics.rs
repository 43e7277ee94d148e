//! Topics that do not exist yet when the task subscribes.
//!
//! librdkafka matches a subscription against the cluster's topics at each full metadata
//! refresh (`topic.metadata.refresh.interval.ms`, 5 minutes by default). A topic created
//! just after the task subscribed (Debezium creates its topics after the sink is up, a
//! producer may create one on first write) would wait for the next refresh: minutes of
//! nothing read, with nothing in the status to say why. While a subscribed topic is
//! missing (or, under `topics_regex`, while nothing matches the pattern), the task asks
//! for the cluster's whole topic list every [`LOOK_INTERVAL`]: librdkafka takes an
//! application's request for *every* topic as a refresh of the subscription (one for some
//! topics would not be), so the group rejoins as soon as the topic is there. Once every
//! topic exists the task stops asking and the configured interval applies again.

use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;

use crate::config::ConnectorConfig;
use crate::kafka::consumer::SourceConsumer;

/// How often the task asks for the cluster's topics while one it subscribed to is missing.
pub const LOOK_INTERVAL: Duration = Duration::from_secs(5);
/// Longest one request for the cluster's topics may hold the task's loop.
const METADATA_TIMEOUT: Duration = Duration::from_secs(2);

/// What the task knows of the topics it subscribed to.
#[derive(Debug)]
pub(super) struct LateTopics {
    /// When to ask next; `None` once every topic exists.
    due: Option<Instant>,
    /// The topics (or the pattern) found missing at the last look.
    missing: Vec<String>,
}

impl LateTopics {
    /// Asks at the first turn of the loop.
    pub(super) fn new() -> Self {
        Self {
            due: Some(Instant::now()),
            missing: Vec::new(),
        }
    }

    /// The consumer reported a subscribed topic unknown: look again now (when every topic
    /// existed before, one was deleted, or librdkafka saw it before the broker had it).
    pub(super) fn look_soon(&mut self) {
        if self.due.is_none() {
            self.due = Some(Instant::now());
        }
    }

    /// Asks the cluster for its topics when due, and logs what changed: a warning naming
    /// the missing topics and when sluice looks again, and a line when they all exist.
    pub(super) fn look(&mut self, consumer: &SourceConsumer, connector: &ConnectorConfig) {
        let Some(due) = self.due else {
            return;
        };
        let now = Instant::now();
        if now < due {
            return;
        }
        self.due = Some(now + LOOK_INTERVAL);
        let metadata = match consumer.fetch_metadata(None, METADATA_TIMEOUT) {
            Ok(metadata) => metadata,
            Err(error) => {
                tracing::debug!(%error, "cannot list the cluster's topics; asking again");
                return;
            }
        };
        // A topic counts once the broker names it without error, with partitions (one
        // still being created answers LEADER_NOT_AVAILABLE, and librdkafka ignores it); a
        // partition without a leader for a while is not a missing topic.
        let ready: Vec<&str> = metadata
            .topics()
            .iter()
            .filter(|t| t.error().is_none() && !t.partitions().is_empty())
            .map(|t| t.name())
            .collect();
        let missing = missing_topics(connector, &ready);
        if missing.is_empty() {
            if !self.missing.is_empty() {
                tracing::info!(topics = ?self.missing,
                    "the topics the task waited for exist now; it reads them (and stops asking for the cluster's topics)");
            }
            self.due = None;
        } else if missing != self.missing {
            tracing::warn!(topics = ?missing, every = ?LOOK_INTERVAL,
                "subscribed topics do not exist yet; sluice asks the cluster again every 5 s and reads them within seconds of their creation");
        }
        self.missing = missing;
    }
}

/// The subscribed topics not among `ready`, or the pattern when no topic matches it.
fn missing_topics(connector: &ConnectorConfig, ready: &[&str]) -> Vec<String> {
    match &connector.topics_regex {
        Some(_) if ready.iter().any(|t| connector.reads_topic(t)) => Vec::new(),
        Some(pattern) => vec![format!("topics matching {}", pattern.as_str())],
        None => connector
            .topics
            .iter()
            .filter(|t| !ready.contains(&t.as_str()))
            .cloned()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connector(topics: &str) -> ConnectorConfig {
        let text = format!(
            "kafka: {{ brokers: localhost:9092 }}\nconnectors:\n  - name: c\n    {topics}\n    sink: {{ url: \"sqlite://x.db\", table: t, columns: {{ v: {{ from: /v, type: text }} }} }}\n"
        );
        let config = crate::config::load_str(&text, &|_| None).expect("valid config");
        config.connectors.into_iter().next().expect("a connector")
    }

    #[test]
    fn listed_topics_missing_are_named() {
        let c = connector("topics: [a, b, B]");
        assert_eq!(missing_topics(&c, &["a", "other"]), ["b", "B"]);
        assert!(missing_topics(&c, &["B", "a", "b"]).is_empty());
    }

    #[test]
    fn a_pattern_waits_for_its_first_match() {
        let c = connector("topics_regex: 'db\\.public\\..*'");
        assert_eq!(
            missing_topics(&c, &["other", "db.publicx"]),
            ["topics matching db\\.public\\..*"]
        );
        assert!(missing_topics(&c, &["other", "db.public.t"]).is_empty());
    }
}
