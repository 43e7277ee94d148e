//! Everything that talks to Kafka: the task's consumer ([`consumer`]) with its rebalance
//! handling ([`context`]) and the offsets it commits to its group ([`commit`]), the
//! producer of the dead-letter topic ([`dead_letter_producer`]) with the headers it adds
//! ([`dead_letter_headers`]) and their signature ([`dead_letter_signature`]), the embedded
//! cluster of the first run and the demo ([`embedded`]), and the consumer group's
//! committed offsets as lag tools see them ([`group`]).

pub mod commit;
pub mod consumer;
pub mod context;
pub mod dead_letter_headers;
pub mod dead_letter_producer;
pub mod dead_letter_signature;
pub mod embedded;
pub mod group;
pub mod topic_ids;

/// Runs a blocking Kafka call (librdkafka's metadata, watermarks, group commits) off the
/// runtime's workers; its error, or the blocking task's, as text.
pub async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> Result<T, rdkafka::error::KafkaError> + Send + 'static,
) -> Result<T, String> {
    match tokio::task::spawn_blocking(call).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}
