//! The dead-letter topic: failed records produced to Kafka with their cause.
//!
//! Each dead letter keeps the original key, value and headers, and gets context headers:
//! `sluice.source.topic`, `sluice.source.partition`, `sluice.source.offset`,
//! `sluice.source.timestamp` (when the record had one),
//! `sluice.connector`, `sluice.stage`, `sluice.error.class`, `sluice.error.message`. The
//! task waits for the broker's acknowledgement of every dead letter of a batch before that
//! batch's offsets commit, so a crash cannot lose one (it can repeat one: a batch whose
//! transaction is lost to a crash or an offset conflict after its dead letters were
//! acknowledged produces them again). A value too large for a Kafka message (over about
//! 900 kB with its key and headers) is left out, and header `sluice.value.omitted` gives
//! its size: the dead letter keeps the record's coordinates for a look at the source.
//! With `errors.dlq.signing_key`, each dead letter also gets `sluice.signature`, an
//! HMAC-SHA256 of its connector, coordinates, key, value and headers
//! ([`super::dead_letter_signature`]), which a redrive checks before it writes the letter.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

/// The headers a dead letter carries besides the record's own ([`super::dead_letter_headers`]),
/// under the name the producer's callers know them by.
pub use super::dead_letter_headers as header;
use super::dead_letter_signature::{Signed, Signer};
use crate::config::{KafkaConfig, SigningKeys};
use crate::failure::DeadLetter;

/// How long librdkafka keeps trying to deliver one dead letter.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// Why dead letters could not be produced.
#[derive(Debug, thiserror::Error)]
#[error("producing dead letters to topic {topic}: {source}")]
pub struct DeadLetterError {
    pub topic: String,
    pub source: KafkaError,
}

impl DeadLetterError {
    /// A broker that is down or slow passes; a message the topic refuses, a topic that
    /// does not exist or that this client may not write, does not.
    pub fn is_transient(&self) -> bool {
        !matches!(
            self.source.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::MessageSizeTooLarge
                    | RDKafkaErrorCode::InvalidMessageSize
                    | RDKafkaErrorCode::MessageBatchTooLarge
                    | RDKafkaErrorCode::PolicyViolation
                    | RDKafkaErrorCode::TopicAuthorizationFailed
                    | RDKafkaErrorCode::ClusterAuthorizationFailed
                    | RDKafkaErrorCode::InvalidTopic
                    | RDKafkaErrorCode::InvalidRecord
                    | RDKafkaErrorCode::UnknownTopic
                    | RDKafkaErrorCode::UnknownTopicOrPartition
                    | RDKafkaErrorCode::Fatal
            )
        )
    }
}

/// A producer for one connector's dead-letter topic.
pub struct DeadLetterProducer {
    producer: FutureProducer,
    topic: String,
    connector: String,
    /// Signs each letter when `errors.dlq.signing_key` is set.
    signer: Option<Signer>,
}

impl DeadLetterProducer {
    /// A producer on the connector's cluster, with its `kafka.properties` (security
    /// settings), waiting for all in-sync replicas.
    pub fn new(
        kafka: &KafkaConfig,
        brokers: &str,
        topic: &str,
        connector: &str,
    ) -> Result<Self, DeadLetterError> {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", brokers);
        for (key, value) in &kafka.properties {
            // Consumer-only settings would only make librdkafka warn.
            if !is_consumer_only(key) {
                config.set(key, value);
            }
        }
        config
            .set("client.id", format!("sluice-{connector}-dlq"))
            .set("acks", "all")
            .set(
                "reconnect.backoff.max.ms",
                crate::config::defaults::RECONNECT_BACKOFF_MAX_MS,
            )
            .set(
                "message.timeout.ms",
                DELIVERY_TIMEOUT.as_millis().to_string(),
            )
            .set_log_level(RDKafkaLogLevel::Warning);
        let producer = config.create().map_err(|source| DeadLetterError {
            topic: topic.to_string(),
            source,
        })?;
        Ok(Self {
            producer,
            topic: topic.to_string(),
            connector: connector.to_string(),
            signer: None,
        })
    }

    /// Signs every dead letter with the first of `keys` (`errors.dlq.signing_key`); no
    /// keys, no signature.
    pub fn with_signing_key(mut self, keys: &SigningKeys) -> Self {
        self.signer = Signer::new(keys);
        self
    }

    /// The topic dead letters go to.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Produces the dead letters and waits for the broker's acknowledgements. Those
    /// acknowledged leave `letters`; on `Err`, what remains is what to send again.
    pub async fn send_all(&self, letters: &mut Vec<DeadLetter>) -> Result<(), DeadLetterError> {
        let error = |source| DeadLetterError {
            topic: self.topic.clone(),
            source,
        };
        let mut pending = Vec::with_capacity(letters.len());
        let mut first_error = None;
        for (index, letter) in letters.iter().enumerate() {
            let headers = self.headers(letter);
            let mut record = FutureRecord::<[u8], [u8]>::to(&self.topic).headers(headers);
            if let Some(key) = letter.record.key.as_deref() {
                record = record.key(key);
            }
            // A value too large for a Kafka message stays out; the headers say so.
            if let Some(value) = letter.record.value.as_deref()
                && fits(letter)
            {
                record = record.payload(value);
            }
            loop {
                match self.producer.send_result(record) {
                    Ok(delivery) => {
                        pending.push((index, delivery));
                        break;
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        record = back;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Err((source, _)) => {
                        first_error.get_or_insert(source);
                        break;
                    }
                }
            }
            if first_error.is_some() {
                break;
            }
        }
        let mut acknowledged = vec![false; letters.len()];
        for (index, delivery) in pending {
            match delivery.await {
                Ok(Ok(_)) => acknowledged[index] = true,
                Ok(Err((source, _))) => {
                    first_error.get_or_insert(source);
                }
                Err(_canceled) => {
                    first_error.get_or_insert(KafkaError::Canceled);
                }
            }
        }
        let mut index = 0;
        letters.retain(|_| {
            index += 1;
            !acknowledged[index - 1]
        });
        match first_error {
            Some(source) => Err(error(source)),
            None => Ok(()),
        }
    }

    fn headers(&self, letter: &DeadLetter) -> OwnedHeaders {
        let record = &letter.record;
        let mut headers = OwnedHeaders::new_with_capacity(record.headers.len() + 8);
        let fits = fits(letter);
        if !fits {
            let size = letter.record.value.as_ref().map_or(0, Vec::len);
            headers = headers.insert(Header {
                key: header::VALUE_OMITTED,
                value: Some(size.to_string().as_bytes()),
            });
        }
        for (name, value) in &record.headers {
            headers = headers.insert(Header {
                key: name.as_str(),
                value: value.as_deref(),
            });
        }
        if let Some(timestamp) = record.timestamp {
            headers = headers.insert(Header {
                key: header::SOURCE_TIMESTAMP,
                value: Some(timestamp.to_string().as_bytes()),
            });
        }
        let context = [
            (header::SOURCE_TOPIC, record.topic.clone()),
            (header::SOURCE_PARTITION, record.partition.to_string()),
            (header::SOURCE_OFFSET, record.offset.to_string()),
            (header::CONNECTOR, self.connector.clone()),
            (header::STAGE, letter.stage.name().to_string()),
            (header::ERROR_CLASS, letter.class.to_string()),
            (header::ERROR_MESSAGE, letter.message.clone()),
        ];
        for (name, value) in &context {
            headers = headers.insert(Header {
                key: name,
                value: Some(value.as_bytes()),
            });
        }
        if let Some(signer) = &self.signer {
            // Over the value as the letter carries it: none when left out for its size.
            let signature = signer.sign(&Signed {
                connector: &self.connector,
                record,
                value: record.value.as_deref().filter(|_| fits),
            });
            headers = headers.insert(Header {
                key: header::SIGNATURE,
                value: Some(signature.as_bytes()),
            });
        }
        headers
    }
}

/// Whether a dead letter's value fits in a Kafka message. librdkafka refuses a message over
/// its `message.max.bytes` (1,000,000 by default) before sending it, and brokers default
/// to about the same; the key, headers and context need room too.
fn fits(letter: &DeadLetter) -> bool {
    crate::validate::record_bytes(&letter.record) + letter.message.len() as u64
        <= MAX_DEAD_LETTER_BYTES
}

/// The largest dead letter produced with its value.
const MAX_DEAD_LETTER_BYTES: u64 = 900_000;

fn is_consumer_only(key: &str) -> bool {
    key.starts_with("session.")
        || key.starts_with("heartbeat.")
        || key.starts_with("group.")
        || key.starts_with("fetch.")
        || key.starts_with("auto.")
        || key.starts_with("enable.auto")
        || key.starts_with("partition.assignment")
        || key.starts_with("max.poll")
        || key.starts_with("queued.")
        || key == "isolation.level"
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::{Failure, FailureClass, Stage};
    use crate::record::Record;

    fn letter(value_bytes: usize) -> DeadLetter {
        let failure = Failure {
            index: 0,
            topic: "t".into(),
            partition: 0,
            offset: 1,
            stage: Stage::Source,
            class: FailureClass::RecordTooLarge,
            message: "too large".into(),
        };
        DeadLetter::new(
            Record::from_value("t", 0, 1, vec![b'x'; value_bytes]),
            &failure,
        )
    }

    #[test]
    fn values_too_large_for_a_kafka_message_are_left_out() {
        assert!(fits(&letter(1000)));
        assert!(fits(&letter(800_000)));
        assert!(!fits(&letter(1_000_000)));
        assert!(!fits(&letter(8 * 1024 * 1024)));
    }

    #[test]
    fn an_omitted_value_is_announced_with_its_size() {
        use rdkafka::message::Headers;
        let kafka = KafkaConfig {
            brokers: "127.0.0.1:9".into(),
            properties: Default::default(),
            schema_registry: None,
        };
        // Creating a producer does not connect.
        let producer = DeadLetterProducer::new(&kafka, "127.0.0.1:9", "dlq", "c").unwrap();
        let named = |letter: &DeadLetter| {
            let headers = producer.headers(letter);
            headers
                .iter()
                .map(|h| {
                    let value = String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned();
                    (h.key.to_string(), value)
                })
                .collect::<Vec<_>>()
        };
        let big = named(&letter(1_000_000));
        assert!(
            big.contains(&("sluice.value.omitted".into(), "1000000".into())),
            "{big:?}"
        );
        assert!(
            big.contains(&("sluice.source.offset".into(), "1".into())),
            "{big:?}"
        );
        let small = named(&letter(10));
        assert!(
            !small.iter().any(|(k, _)| k == "sluice.value.omitted"),
            "{small:?}"
        );
    }

    #[test]
    fn letters_are_signed_only_with_a_key() {
        use rdkafka::message::Headers;
        let kafka = KafkaConfig {
            brokers: "127.0.0.1:9".into(),
            properties: Default::default(),
            schema_registry: None,
        };
        let keys: SigningKeys =
            serde_json::from_value(serde_json::json!("0123456789abcdef")).expect("a key");
        let signature = |producer: &DeadLetterProducer, letter: &DeadLetter| {
            producer
                .headers(letter)
                .iter()
                .find(|h| h.key == header::SIGNATURE)
                .and_then(|h| h.value.map(<[u8]>::to_vec))
        };
        let plain = DeadLetterProducer::new(&kafka, "127.0.0.1:9", "dlq", "c").unwrap();
        assert_eq!(signature(&plain, &letter(10)), None);
        let signing = plain.with_signing_key(&keys);
        let signer = Signer::new(&keys).unwrap();
        let small = letter(10);
        let expected = signer.sign(&Signed {
            connector: "c",
            record: &small.record,
            value: small.record.value.as_deref(),
        });
        assert_eq!(signature(&signing, &small), Some(expected.into_bytes()));
        // A value left out for its size is signed as absent.
        let big = letter(1_000_000);
        let expected = signer.sign(&Signed {
            connector: "c",
            record: &big.record,
            value: None,
        });
        assert_eq!(signature(&signing, &big), Some(expected.into_bytes()));
    }

    #[test]
    fn broker_refusals_are_permanent_and_outages_transient() {
        let error = |code| DeadLetterError {
            topic: "dlq".into(),
            source: KafkaError::MessageProduction(code),
        };
        assert!(!error(RDKafkaErrorCode::MessageSizeTooLarge).is_transient());
        assert!(!error(RDKafkaErrorCode::TopicAuthorizationFailed).is_transient());
        assert!(!error(RDKafkaErrorCode::UnknownTopicOrPartition).is_transient());
        assert!(error(RDKafkaErrorCode::BrokerTransportFailure).is_transient());
        assert!(error(RDKafkaErrorCode::MessageTimedOut).is_transient());
        assert!(error(RDKafkaErrorCode::AllBrokersDown).is_transient());
    }
}
