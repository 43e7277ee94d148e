//! The headers sluice adds to a dead letter, after the record's own: where the record came
//! from, which connector and stage failed it and why. The dead-letter producer writes them
//! (`dead_letter_producer.rs`), the signature covers the record around them
//! (`dead_letter_signature.rs`), and the topic redrive (`deliver::redrive_topic`) reads
//! them back and drops them, so the record it writes carries its own headers only.

/// The record's topic.
pub const SOURCE_TOPIC: &str = "sluice.source.topic";
/// The record's partition, in decimal.
pub const SOURCE_PARTITION: &str = "sluice.source.partition";
/// The record's offset, in decimal.
pub const SOURCE_OFFSET: &str = "sluice.source.offset";
/// The record's timestamp, ms since the epoch in decimal; absent when it had none.
pub const SOURCE_TIMESTAMP: &str = "sluice.source.timestamp";
/// The connector that failed the record.
pub const CONNECTOR: &str = "sluice.connector";
/// The stage that failed it (`failure::Stage`'s name).
pub const STAGE: &str = "sluice.stage";
/// Its failure class (`failure::FailureClass`'s stored name).
pub const ERROR_CLASS: &str = "sluice.error.class";
/// The failure's message.
pub const ERROR_MESSAGE: &str = "sluice.error.message";
/// The size in bytes of a value left out of the letter for its size.
pub const VALUE_OMITTED: &str = "sluice.value.omitted";
/// With `errors.dlq.signing_key`: the letter's signature, in hex.
pub const SIGNATURE: &str = "sluice.signature";
/// Every one of them: a record's own header of one of these names cannot be told apart
/// from sluice's, and is left out of a signature and of a redriven record.
pub const ALL: [&str; 10] = [
    SOURCE_TOPIC,
    SOURCE_PARTITION,
    SOURCE_OFFSET,
    SOURCE_TIMESTAMP,
    CONNECTOR,
    STAGE,
    ERROR_CLASS,
    ERROR_MESSAGE,
    VALUE_OMITTED,
    SIGNATURE,
];
