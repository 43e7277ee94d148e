//! A record that failed, where and why: what the error policy (`fail`, `skip`, `dlq`)
//! acts on, and what a dead letter carries.

use std::fmt;

/// The stage of the record's path where it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// On arrival: too large, or a header name that is not UTF-8.
    Source,
    /// A transform rejected it, or trapped on it.
    Transform,
    /// The connector's JSON Schema refused the transformed value.
    Validate,
    /// It does not map to the columns: not JSON, too deep, a value that does not fit.
    Map,
    /// The database refused its row: a constraint, a length, a value out of range.
    Sink,
}

impl Stage {
    /// The name used in logs, dead-letter headers and the dead-letter table.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Source => "source",
            Stage::Transform => "transform",
            Stage::Validate => "validate",
            Stage::Map => "map",
            Stage::Sink => "sink",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One failed input record of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// Index of the input record in its batch.
    pub index: usize,
    /// `topic/partition@offset`.
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub stage: Stage,
    /// A short machine-readable class: `record_too_large`, `header_not_utf8`, `transform`
    /// (rejected, or trapped on), `schema_invalid`, `invalid_json`, `not_utf8`,
    /// `column_value`, `database_refused`.
    pub class: &'static str,
    /// What went wrong, for a person.
    pub message: String,
}

impl Failure {
    /// `topic/partition@offset`.
    pub fn coordinates(&self) -> String {
        format!("{}/{}@{}", self.topic, self.partition, self.offset)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "record {} failed at {} ({}): {}",
            self.coordinates(),
            self.stage,
            self.class,
            self.message
        )
    }
}
