//! `kafka.brokers: embedded`: librdkafka's in-process mock cluster, for a first run and the
//! demo with nothing installed. It lives as long as the process and forgets everything
//! when the process ends, so only the database remembers progress.

use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

/// A running mock cluster.
pub struct EmbeddedKafka {
    cluster: MockCluster<'static, DefaultProducerContext>,
}

impl EmbeddedKafka {
    /// Starts a mock cluster of `brokers` brokers on loopback.
    pub fn start(brokers: i32) -> Result<Self, rdkafka::error::KafkaError> {
        Ok(Self {
            cluster: MockCluster::new(brokers)?,
        })
    }

    /// `host:port,…` of the mock brokers.
    pub fn bootstrap_servers(&self) -> String {
        self.cluster.bootstrap_servers()
    }

    /// Creates a topic with `partitions` partitions.
    pub fn create_topic(
        &self,
        topic: &str,
        partitions: i32,
    ) -> Result<(), rdkafka::error::KafkaError> {
        self.cluster.create_topic(topic, partitions, 1)
    }
}
