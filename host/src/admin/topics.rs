//! The topics the admin API reads for its callers: only those its connectors read, and
//! their dead-letter topics. The cluster may hold others' topics (another Kafka Connect
//! cluster's `connect-configs`, with its passwords): a token for this API is not a key
//! to them.

use axum::http::StatusCode;

use super::ApiError;
use crate::config::{Config, DeadLetterDestination};

/// True when a connector of `config` reads `topic`, or writes its dead letters there.
/// The one place that decides (`topics_regex` matched here too).
pub fn may_read(config: &Config, topic: &str) -> bool {
    config.connectors.iter().any(|connector| {
        connector.reads_topic(topic)
            || matches!(
                &connector.errors.dlq,
                Some(DeadLetterDestination::Topic(dlq)) if dlq == topic
            )
    })
}

/// `Ok` for a topic [`may_read`] allows, else 403; the answer is the same whether the topic
/// exists or not.
pub fn check(config: &Config, topic: &str) -> Result<(), ApiError> {
    if may_read(config, topic) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        format!(
            "topic {topic:?} is not one this process's connectors read: the admin API reads only their topics and dead-letter topics"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::may_read;

    #[test]
    fn connector_and_dead_letter_topics_only() {
        let config = crate::config::load_str(
            r#"
kafka: { brokers: "localhost:9092" }
connectors:
  - name: a
    topics: [orders, refunds]
    errors: { policy: dlq, dlq: { topic: orders-dlq } }
    sink:
      url: sqlite://a.db
      table: t
      columns: { v: { from: /v, type: text } }
  - name: b
    topics: [words]
    errors: { policy: dlq, dlq: { table: dead } }
    sink:
      url: sqlite://b.db
      table: t
      columns: { v: { from: /v, type: text } }
"#,
            &|_| None,
        )
        .expect("config");
        for topic in ["orders", "refunds", "orders-dlq", "words"] {
            assert!(may_read(&config, topic), "{topic}");
        }
        for topic in [
            "connect-configs",
            "dead",
            "Orders",
            "orders ",
            "",
            "__consumer_offsets",
        ] {
            assert!(!may_read(&config, topic), "{topic}");
        }
    }
}
